// The read-bandwidth reference of the benchmarks (volt_op_test --bench, CudaBackend::measure_read_gbps):
// a grid-stride kernel of 128-bit non-coherent loads over a buffer (> 4x L2, so it measures device
// memory), XOR-folded into one word per block so the loads cannot be dropped. What a weight-streaming
// kernel can at best reach on this GPU in this process.
#include "cuda/cuda_check.h"
#include "cuda/device_util.cuh"

namespace volt::cuda {
namespace {

constexpr int kThreads = 512;

__global__ void __launch_bounds__(kThreads)
    read_kernel(const uint4* __restrict__ p, int64_t n, uint32_t* __restrict__ sink) {
    uint32_t acc = 0;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
    int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        const uint4 a = __ldg(p + i), b = __ldg(p + i + stride), c = __ldg(p + i + 2 * stride),
                    d = __ldg(p + i + 3 * stride);
        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
    }
    for (; i < n; i += stride) {
        const uint4 a = __ldg(p + i);
        acc ^= a.x ^ a.y ^ a.z ^ a.w;
    }
    for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(kFullMask, acc, o);
    if ((threadIdx.x & 31) == 0 && acc == 0x9E3779B9u) sink[blockIdx.x] = acc;  // almost never written
}

}  // namespace

void launch_read_bandwidth(const void* buf, int64_t bytes, int sm_count, uint32_t* sink, const Launch& ctx) {
    VOLT_CHECK(reinterpret_cast<uintptr_t>(buf) % 16 == 0 && bytes >= 16);
    const unsigned blocks = static_cast<unsigned>(std::max(1, sm_count) * 4);
    read_kernel<<<blocks, kThreads, 0, ctx.stream>>>(static_cast<const uint4*>(buf), bytes / 16, sink);
    VOLT_CUDA_CHECK_LAUNCH();
}

}  // namespace volt::cuda
