// Linear layer y[r, o] = sum_i x[row r, i] W[o, i] + b[o] (cpu::linear's contract), for any number of
// rows: one warp per output unit o (8 per block), the block's rows in tiles of 8 (grid.y splits the
// rows in chunks of 64). Lane l accumulates i = l, l + 32, ... in order (x rounded to the operand
// format, W widened exactly, f32 FMA), then a fixed warp butterfly: every output's reduction order
// depends on `in` only, so a row's result is the same alone or in any batch (ops.h contract).
// Formats: W bf16, f16 or f32 [out, in], or int8 / int4 in the CUDA layout (cuda/placement.h; each element
// dequantized exactly, device_util.cuh int_w); b any vector format or absent. Straightforward on purpose;
// the fast GEMV/GEMM of issue 14 must keep a batch-independent order per shape.
#include "cuda/cuda_check.h"
#include "cuda/device_util.cuh"
#include "cuda/pdl.cuh"

namespace volt::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kRowTile = 8;
constexpr int kRowsPerBlock = 64;

template <WFmt F, Operand O>
__global__ void __launch_bounds__(kThreads)
    linear_kernel(const float* __restrict__ x, const int32_t* __restrict__ rows, const void* __restrict__ w,
                  const void* __restrict__ wmeta, int64_t group, DeviceVector bias, float* __restrict__ y,
                  int64_t num_rows, int64_t out, int64_t in, int* error) {
    pdl_wait();  // pdl.cuh: nothing of an earlier kernel is touched before it
    pdl_launch_dependents();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t o = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
    if (o >= out) return;
    const int64_t r_begin = static_cast<int64_t>(blockIdx.y) * kRowsPerBlock;
    const int64_t r_end = min64(num_rows, r_begin + kRowsPerBlock);
    const float b = load_vec(bias, o);
    const int64_t wrow = o * in;
    for (int64_t r0 = r_begin; r0 < r_end; r0 += kRowTile) {
        const int nr = static_cast<int>(min64(kRowTile, r_end - r0));
        const float* xr[kRowTile];
#pragma unroll
        for (int j = 0; j < kRowTile; ++j) {
            int64_t src = r0 + (j < nr ? j : nr - 1);
            if (rows != nullptr) {
                src = rows[src];
                if (src < 0) {
                    if (lane == 0) report_error(error, kBadRow);
                    src = 0;
                }
            }
            xr[j] = x + src * in;
        }
        float acc[kRowTile];
#pragma unroll
        for (int j = 0; j < kRowTile; ++j) acc[j] = 0.0f;
        for (int64_t i = lane; i < in; i += 32) {
            float wv;
            if constexpr (F == WFmt::kInt8 || F == WFmt::kInt4)
                wv = int_w<F>(w, wmeta, group, o, in, i);
            else
                wv = load_w<F>(w, wrow + i);
#pragma unroll
            for (int j = 0; j < kRowTile; ++j)
                if (j < nr) acc[j] += operand<O>(xr[j][i]) * wv;
        }
#pragma unroll
        for (int j = 0; j < kRowTile; ++j) {
            if (j >= nr) break;
            const float s = warp_sum(acc[j]);
            if (lane == 0) y[(r0 + j) * out + o] = s + b;
        }
    }
}

template <WFmt F>
void launch_format(const ops::LinearArgs& a, Operand op, int64_t rows, const Launch& ctx) {
    const auto& w = a.weight;
    const dim3 grid(grid_for(w.out, kWarps), grid_for(rows, kRowsPerBlock));
    const DeviceVector b = device_vector(w.b);
    const void* meta = F == WFmt::kInt8 ? static_cast<const void*>(w.scales) : w.zeros;
    switch (op) {
        case Operand::kF32:
            launch_kernel(linear_kernel<F, Operand::kF32>, grid, kThreads, 0, ctx, a.x, a.rows, w.w, meta,
                          w.group_size, b, a.y, rows, w.out, w.in, ctx.error);
            break;
        case Operand::kF16:
            launch_kernel(linear_kernel<F, Operand::kF16>, grid, kThreads, 0, ctx, a.x, a.rows, w.w, meta,
                          w.group_size, b, a.y, rows, w.out, w.in, ctx.error);
            break;
        case Operand::kBf16:
            launch_kernel(linear_kernel<F, Operand::kBf16>, grid, kThreads, 0, ctx, a.x, a.rows, w.w, meta,
                          w.group_size, b, a.y, rows, w.out, w.in, ctx.error);
            break;
    }
    VOLT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_linear(const ops::LinearArgs& a, Operand operand, const Launch& ctx) {
    const int64_t rows = a.rows != nullptr ? a.num_rows : a.num_tokens;
    const auto& w = a.weight;
    if (rows <= 0 || w.out <= 0) return;
    VOLT_CHECK(w.in > 0) << "linear with in = " << w.in;
    VOLT_CHECK(grid_for(rows, kRowsPerBlock) <= 65535u) << rows << " rows in one linear";
    VOLT_CHECK(grid_for(w.out, kWarps) < (1u << 31)) << w.out;
    switch (w.format) {
        case ops::Format::kBf16:
            return launch_format<WFmt::kBf16>(a, operand, rows, ctx);
        case ops::Format::kF16:
            return launch_format<WFmt::kF16>(a, operand, rows, ctx);
        case ops::Format::kF32:
            return launch_format<WFmt::kF32>(a, operand, rows, ctx);
        case ops::Format::kInt8:
            VOLT_CHECK(w.cuda_layout && w.scales != nullptr) << "cuda linear: int8 weights not placed";
            return launch_format<WFmt::kInt8>(a, operand, rows, ctx);
        case ops::Format::kInt4:
            VOLT_CHECK(w.cuda_layout && w.zeros != nullptr && w.group_size > 0 && w.in % w.group_size == 0 &&
                       w.in % 8 == 0)
                << "cuda linear: int4 weights not placed in the CUDA layout";
            return launch_format<WFmt::kInt4>(a, operand, rows, ctx);
        default:
            VOLT_CHECK(false) << "cuda linear: no " << ops::format_name(w.format) << " weights yet";
    }
}

}  // namespace volt::cuda
