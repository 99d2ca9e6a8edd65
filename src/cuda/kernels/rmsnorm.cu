// RMSNorm (spec §3.3) in f32: y[r] = w * (x[row r] * 1/sqrt(mean(x^2) + eps)), the CPU twin's formula
// (cpu::rmsnorm). One block of 256 threads per row: thread i sums x[j]^2 for j = i, i + 256, ... in
// order, then a fixed block reduction; the order depends on H only. x and y may alias when rows is
// null (each thread rewrites only the elements it read, after the reduction's barrier).
#include "cuda/cuda_check.h"
#include "cuda/device_util.cuh"
#include "cuda/pdl.cuh"

namespace volt::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void rmsnorm_kernel(const float* x, DeviceVector w, float* y, int64_t hidden, float eps,
                               const int32_t* __restrict__ rows, int* error) {
    pdl_wait();  // pdl.cuh: nothing of an earlier kernel is touched before it
    pdl_launch_dependents();
    __shared__ float smem[32];
    const int64_t r = blockIdx.x;
    int64_t src = r;
    if (rows != nullptr) {
        src = rows[r];
        if (src < 0) {
            if (threadIdx.x == 0) report_error(error, kBadRow);
            src = 0;
        }
    }
    const float* xr = x + src * hidden;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < hidden; i += kThreads) ss += xr[i] * xr[i];
    ss = block_sum<kThreads>(ss, smem);
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(hidden) + eps);
    float* yr = y + r * hidden;
    for (int64_t i = threadIdx.x; i < hidden; i += kThreads) yr[i] = load_vec(w, i) * (xr[i] * inv);
}

}  // namespace

void launch_rmsnorm(const ops::RmsNormArgs& a, const Launch& ctx) {
    if (a.num_rows <= 0) return;
    VOLT_CHECK(a.num_rows < (int64_t{1} << 31)) << a.num_rows;
    launch_kernel(rmsnorm_kernel, static_cast<unsigned>(a.num_rows), kThreads, 0, ctx, a.x,
                  device_vector(a.w), a.y, a.hidden, a.eps, a.rows, ctx.error);
    VOLT_CUDA_CHECK_LAUNCH();
}

}  // namespace volt::cuda
