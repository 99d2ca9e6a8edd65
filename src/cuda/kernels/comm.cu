// The rank-order sum of the CUDA communicators (same_device_communicator.cc, nccl_communicator.cc):
// out[i] = ((in[0][i] + in[1][i]) + in[2][i]) + ... with one f32 round-to-nearest add per rank
// (__fadd_rn: never contracted, never reordered), so every rank that runs it on the same inputs gets the
// same bits as the CPU communicators' r0 + r1 + ... (cpu/thread_communicator.cc). No rank waits for
// another inside the kernel: the communicators order the streams with events before launching it.
// Also the one-shot all-reduce over peer memory of the NCCL communicator (GPUs with peer access: each
// rank's kernel sets its flag in every peer's flag array, waits for every peer's flag, then sums the
// peers' staging buffers in rank order: the same bits as the rank-order sum) and the peer-access probe.
// Tests: tests/unit/cuda/parallel_cuda_test.cc (CudaComm.AllReduceIsTheCpuRankOrderSumOnEveryRank); the
// one-shot kernel and the probe need two GPUs with peer access: not run yet.
#include <algorithm>

#include "cuda/cuda_check.h"
#include "cuda/device_util.cuh"

namespace volt::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void rank_sum_kernel(RankPointers in, int n, float* out, int64_t count) {
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < count;
         i += static_cast<int64_t>(gridDim.x) * kThreads) {
        float s = in.p[0][i];
        // Unrolled with constant indices: the pointers stay in parameter space (a dynamic index would
        // copy the array to local memory).
#pragma unroll
        for (int r = 1; r < kMaxCommRanks; ++r)
            if (r < n) s = __fadd_rn(s, in.p[r][i]);
        out[i] = s;
    }
}

// Rank r's chunk of a strided scratch: out[i] = sum over r of in[r * stride + i] (the NCCL path: an
// all-gather lays the ranks' inputs out one after another).
__global__ void rank_sum_strided_kernel(const float* __restrict__ in, int n, int64_t stride,
                                        float* __restrict__ out, int64_t count) {
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < count;
         i += static_cast<int64_t>(gridDim.x) * kThreads) {
        float s = in[i];
        for (int r = 1; r < n; ++r) s = __fadd_rn(s, in[r * stride + i]);
        out[i] = s;
    }
}

__device__ __forceinline__ uint64_t global_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// One block's thread 0 publishes this rank's flag to every rank, then waits (up to timeout_ns, then
// reports and goes on: the host fails the group) for every rank's flag of this epoch; the whole grid
// then sums the staging buffers in rank order. Every block publishes (the same value), so no block
// depends on another block of its own grid being scheduled.
__global__ void one_shot_kernel(OneShotArgs a) {
    if (threadIdx.x == 0) {
        __threadfence_system();  // the staging copy before this kernel, then the flag
#pragma unroll
        for (int q = 0; q < kMaxCommRanks; ++q)
            if (q < a.n) *reinterpret_cast<volatile unsigned*>(a.flags[q] + a.rank) = a.epoch;
        const uint64_t start = global_ns();
        const volatile unsigned* mine = a.flags[a.rank];
        bool late = false;
        for (int q = 0; q < a.n && !late; ++q) {
            while (static_cast<int>(mine[q] - a.epoch) < 0) {
                if (global_ns() - start > a.timeout_ns) {
                    report_error(a.error, 1);
                    late = true;
                    break;
                }
            }
        }
        __threadfence_system();
    }
    __syncthreads();
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < a.count;
         i += static_cast<int64_t>(gridDim.x) * kThreads) {
        float s = __ldcg(a.in[0] + i);
#pragma unroll
        for (int r = 1; r < kMaxCommRanks; ++r)
            if (r < a.n) s = __fadd_rn(s, __ldcg(a.in[r] + i));
        a.out[i] = s;
    }
}

// The probe: writes a pattern into a peer's buffer and reads another one from it.
__global__ void peer_probe_kernel(const uint32_t* src_peer, uint32_t* dst_peer, uint32_t* local, int64_t n,
                                  uint32_t seed) {
    for (int64_t k = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; k < n;
         k += static_cast<int64_t>(gridDim.x) * kThreads) {
        dst_peer[k] = seed ^ static_cast<uint32_t>(k * 2654435761u);
        local[k] = __ldcg(src_peer + k);
    }
}

unsigned grid(int64_t count) {
    return static_cast<unsigned>(std::min<int64_t>(grid_for(count, kThreads), 4096));
}

}  // namespace

void launch_rank_sum_f32(const RankPointers& in, int n, float* out, int64_t count, cudaStream_t stream) {
    VOLT_CHECK(n >= 1 && n <= kMaxCommRanks) << n << " ranks (at most " << kMaxCommRanks << ")";
    if (count <= 0) return;
    rank_sum_kernel<<<grid(count), kThreads, 0, stream>>>(in, n, out, count);
    VOLT_CUDA_CHECK_LAUNCH();
}

void launch_rank_sum_strided_f32(const float* in, int n, int64_t stride, float* out, int64_t count,
                                 cudaStream_t stream) {
    VOLT_CHECK(n >= 1 && stride >= count) << n << " ranks, stride " << stride << ", count " << count;
    if (count <= 0) return;
    rank_sum_strided_kernel<<<grid(count), kThreads, 0, stream>>>(in, n, stride, out, count);
    VOLT_CUDA_CHECK_LAUNCH();
}

void launch_one_shot_all_reduce(const OneShotArgs& a, int max_blocks, cudaStream_t stream) {
    VOLT_CHECK(a.n >= 1 && a.n <= kMaxCommRanks && a.rank >= 0 && a.rank < a.n) << a.n << " ranks";
    const auto blocks = static_cast<unsigned>(std::max<int64_t>(
        1, std::min<int64_t>(grid_for(std::max<int64_t>(a.count, 1), kThreads), max_blocks)));
    one_shot_kernel<<<blocks, kThreads, 0, stream>>>(a);
    VOLT_CUDA_CHECK_LAUNCH();
}

void launch_peer_probe(const uint32_t* src_peer, uint32_t* dst_peer, uint32_t* local, int64_t n,
                       uint32_t seed, cudaStream_t stream) {
    if (n <= 0) return;
    peer_probe_kernel<<<grid(n), kThreads, 0, stream>>>(src_peer, dst_peer, local, n, seed);
    VOLT_CUDA_CHECK_LAUNCH();
}

}  // namespace volt::cuda
