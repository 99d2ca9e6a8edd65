// Elementwise kernels: the residual add (ops::AddArgs; cpu::add), the token-id moves of the
// asynchronous executor (ops::MoveIdsArgs; ops::Backend::move_ids), and the two helpers of the cuBLAS
// linear path (cuda_backend.cc): activations rounded to f16 into a zero-padded tile, and the bias added
// to the f32 GEMM result while copying it out.
#include <algorithm>

#include "cuda/cuda_check.h"
#include "cuda/device_util.cuh"
#include "cuda/pdl.cuh"

namespace volt::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void add_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    pdl_wait();  // pdl.cuh: nothing of an earlier kernel is touched before it
    pdl_launch_dependents();
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * kThreads)
        y[i] += x[i];
}

// grid padded_rows: dst[r] = f16(x[rows ? rows[r] : r]) or zeros.
__global__ void rows_to_f16_kernel(const float* __restrict__ x, const int32_t* __restrict__ rows,
                                   int64_t num_rows, int64_t cols, uint16_t* __restrict__ dst, int* error) {
    pdl_wait();  // pdl.cuh: nothing of an earlier kernel is touched before it
    pdl_launch_dependents();
    const int64_t r = blockIdx.x;
    uint16_t* out = dst + r * cols;
    if (r >= num_rows) {
        for (int64_t c = threadIdx.x; c < cols; c += kThreads) out[c] = 0;
        return;
    }
    int64_t src = rows != nullptr ? rows[r] : r;
    if (src < 0) {
        if (threadIdx.x == 0) report_error(error, kBadRow);
        src = 0;
    }
    const float* in = x + src * cols;
    for (int64_t c = threadIdx.x; c < cols; c += kThreads) out[c] = __half_as_ushort(__float2half_rn(in[c]));
}

__global__ void bias_rows_kernel(const float* __restrict__ c, DeviceVector b, int64_t out,
                                 float* __restrict__ y) {
    pdl_wait();  // pdl.cuh: nothing of an earlier kernel is touched before it
    pdl_launch_dependents();
    const int64_t r = blockIdx.x;
    for (int64_t o = threadIdx.x; o < out; o += kThreads) y[r * out + o] = c[r * out + o] + load_vec(b, o);
}

__global__ void move_ids_kernel(const ops::IdMove* __restrict__ moves, int64_t n, bool negative_to_zero) {
    pdl_wait();  // pdl.cuh: nothing of an earlier kernel is touched before it
    pdl_launch_dependents();
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * kThreads) {
        const ops::IdMove m = moves[i];
        const int32_t id = *m.src;
        *m.dst = negative_to_zero && id < 0 ? 0 : id;
    }
}

// ScatterIdsArgs' fills: block i sets pair i's range to -1.
__global__ void fill_ids_kernel(const int32_t* __restrict__ pairs, int32_t* __restrict__ table) {
    pdl_wait();  // pdl.cuh: nothing of an earlier kernel is touched before it
    pdl_launch_dependents();
    const int64_t start = pairs[2 * static_cast<int64_t>(blockIdx.x)];
    const int32_t count = pairs[2 * static_cast<int64_t>(blockIdx.x) + 1];
    for (int32_t j = threadIdx.x; j < count; j += kThreads) table[start + j] = -1;
}

// ScatterIdsArgs' writes: one thread per (index, value) pair.
__global__ void write_ids_kernel(const int32_t* __restrict__ pairs, int64_t n, int32_t* __restrict__ table) {
    pdl_wait();  // pdl.cuh: nothing of an earlier kernel is touched before it
    pdl_launch_dependents();
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * kThreads)
        table[pairs[2 * i]] = pairs[2 * i + 1];
}

}  // namespace

void launch_scatter_ids(const ops::ScatterIdsArgs& a, const Launch& ctx) {
    if (a.num_fills > 0) {
        VOLT_CHECK(a.num_fills <= 65535) << a.num_fills << " table fills in one step";
        launch_kernel(fill_ids_kernel, static_cast<unsigned>(a.num_fills), kThreads, 0, ctx, a.pairs,
                      a.table);
        VOLT_CUDA_CHECK_LAUNCH();
    }
    if (a.num_writes > 0) {
        const unsigned grid =
            static_cast<unsigned>(std::min<int64_t>(grid_for(a.num_writes, kThreads), 65535));
        launch_kernel(write_ids_kernel, grid, kThreads, 0, ctx, a.pairs + 2 * a.num_fills, a.num_writes,
                      a.table);
        VOLT_CUDA_CHECK_LAUNCH();
    }
}

void launch_move_ids(const ops::MoveIdsArgs& a, const Launch& ctx) {
    if (a.num_moves <= 0) return;
    const unsigned grid = static_cast<unsigned>(std::min<int64_t>(grid_for(a.num_moves, kThreads), 65535));
    launch_kernel(move_ids_kernel, grid, kThreads, 0, ctx, a.moves, a.num_moves, a.negative_to_zero);
    VOLT_CUDA_CHECK_LAUNCH();
}

void launch_add(const ops::AddArgs& a, const Launch& ctx) {
    if (a.n <= 0) return;
    const unsigned grid = static_cast<unsigned>(std::min<int64_t>(grid_for(a.n, kThreads), 65535));
    launch_kernel(add_kernel, grid, kThreads, 0, ctx, a.x, a.y, a.n);
    VOLT_CUDA_CHECK_LAUNCH();
}

void launch_rows_to_f16(const float* x, const int32_t* rows, int64_t num_rows, int64_t padded_rows,
                        int64_t cols, uint16_t* dst, const Launch& ctx) {
    if (padded_rows <= 0) return;
    VOLT_CHECK(padded_rows >= num_rows && padded_rows < (int64_t{1} << 31));
    launch_kernel(rows_to_f16_kernel, static_cast<unsigned>(padded_rows), kThreads, 0, ctx, x, rows, num_rows,
                  cols, dst, ctx.error);
    VOLT_CUDA_CHECK_LAUNCH();
}

void launch_bias_rows(const float* c, const ops::VectorWeight& b, int64_t num_rows, int64_t out, float* y,
                      const Launch& ctx) {
    if (num_rows <= 0) return;
    VOLT_CHECK(num_rows < (int64_t{1} << 31));
    launch_kernel(bias_rows_kernel, static_cast<unsigned>(num_rows), kThreads, 0, ctx, c, device_vector(b),
                  out, y);
    VOLT_CUDA_CHECK_LAUNCH();
}

}  // namespace volt::cuda
