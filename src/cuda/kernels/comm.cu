// The rank-order sum of the CUDA communicators (same_device_communicator.cc, nccl_communicator.cc):
// out[i] = ((in[0][i] + in[1][i]) + in[2][i]) + ... with one f32 round-to-nearest add per rank
// (__fadd_rn: never contracted, never reordered), so every rank that runs it on the same inputs gets the
// same bits as the CPU communicators' r0 + r1 + ... (cpu/thread_communicator.cc). No rank waits for
// another inside the kernel: the communicators order the streams with events before launching it.
// Test: tests/unit/cuda/parallel_cuda_test.cc (CudaComm.RankSumMatchesCpuOrder).
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

}  // namespace volt::cuda
