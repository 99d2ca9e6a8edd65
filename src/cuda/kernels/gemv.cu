// Fast dense GEMV (issue 14; ops::LinearArgs, reference cpu::linear, checked by volt_op_test linear,
// o_proj_residual, final_logits, router, timed by --bench): y[r, o] = x[row r] . W[o] + b[o] for f16, bf16
// or f32 weights [out, in] with in % 8 == 0 (rows of 16-byte multiples). One warp per output unit (8 per
// block); lane l reads the 16-byte chunks c = l, l + 32, ... of W[o] (8 f16/bf16 or 4 f32 values) once
// per tile of kRows rows and multiplies them with x read as float4 (L1-resident, shared by the block's
// warps); the launch's rows run in tiles of kRows, every tile with the same per-row order. Products are
// f32: x rounded to the operand format, weights widened exactly (bf16 by a shift; f16 by bit operations
// to f16 x 2^-112, the factor 2^112 applied once to the sum, exact in f32 down to 2^-37 absolute),
// accumulated chunk by chunk in element order per lane, then a fixed warp butterfly. A row's result
// depends on `in` only: the same alone or in any batch (ops.h).
#include "cuda/cuda_check.h"
#include "cuda/device_util.cuh"

namespace volt::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = 4;           // rows per tile: weights are read once per tile
constexpr int kRowsPerBlock = 64;  // grid.y splits the rows in chunks (tiles never straddle one)

// The operand rounding of x: bf16 as everywhere; f16 as f16's 11-bit significand without its range (what
// an f16 operand pre-scaled by a power of two gives), so an input of 1e6 stays finite (ops.h BUG-22).
__device__ __forceinline__ float round_to_f16_precision(float x) {
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7fffffffu) >= 0x7f800000u) return x;
    u += 0xfffu + ((u >> 13) & 1u);
    return __uint_as_float(u & 0xffffe000u);
}
template <Operand O>
__device__ __forceinline__ float xop(float x) {
    if constexpr (O == Operand::kF16) return round_to_f16_precision(x);
    return operand<O>(x);
}

// Eight 16-bit weights of one chunk as f32 (f16: times 2^-112).
template <WFmt F>
__device__ __forceinline__ void widen8(const uint4& q, float* w) {
    const uint32_t v[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        if constexpr (F == WFmt::kBf16) {
            w[2 * k] = __uint_as_float(v[k] << 16);
            w[2 * k + 1] = __uint_as_float(v[k] & 0xffff0000u);
        } else {
            w[2 * k] = __uint_as_float(((v[k] << 13) & 0x0FFFE000u) | ((v[k] << 16) & 0x80000000u));
            w[2 * k + 1] = __uint_as_float(((v[k] >> 3) & 0x0FFFE000u) | (v[k] & 0x80000000u));
        }
    }
}

// Where output o of row r goes: segment s (o in [begin_s, begin_s + n_s)) of row-major [rows, n_s] y_s
// (a fused q|k|v weight writes q, k and v apart); y_s may be null (not kept). residual (if set):
// residual[r, o] += the output (o_proj + residual in one launch).
struct GemvOut {
    float* y[3] = {nullptr, nullptr, nullptr};
    int64_t n[3] = {0, 0, 0};
    float* residual = nullptr;
};

template <WFmt F, Operand O>
__global__ void __launch_bounds__(kThreads, 2)
    gemv_kernel(const float* __restrict__ x, const int32_t* __restrict__ rows, const void* __restrict__ w,
                DeviceVector bias, GemvOut dst, int64_t num_rows, int64_t out, int64_t in, int* error) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t o = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
    if (o >= out) return;
    constexpr int kPer = F == WFmt::kF32 ? 4 : 8;  // weights per 16-byte chunk
    const int64_t chunks = in / kPer;
    const uint4* wrow =
        reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(w) + o * in * (F == WFmt::kF32 ? 4 : 2));
    const float b = load_vec(bias, o);
    const float post = F == WFmt::kF16 ? 0x1p112f : 1.0f;
    const int64_t r_begin = static_cast<int64_t>(blockIdx.y) * kRowsPerBlock;
    const int64_t r_end = min64(num_rows, r_begin + kRowsPerBlock);
    for (int64_t r0 = r_begin; r0 < r_end; r0 += kRows) {
        const int nr = static_cast<int>(min64(kRows, r_end - r0));
        const float4* xr[kRows];
#pragma unroll
        for (int j = 0; j < kRows; ++j) {
            int64_t src = r0 + (j < nr ? j : nr - 1);
            if (rows != nullptr) {
                src = rows[src];
                if (src < 0) {
                    if (lane == 0) report_error(error, kBadRow);
                    src = 0;
                }
            }
            xr[j] = reinterpret_cast<const float4*>(x + src * in);
        }
        float acc[kRows];
#pragma unroll
        for (int j = 0; j < kRows; ++j) acc[j] = 0.0f;
#pragma unroll 4
        for (int64_t c = lane; c < chunks; c += 32) {
            const uint4 q = __ldg(wrow + c);
            float wv[8];
            if constexpr (F == WFmt::kF32) {
                wv[0] = __uint_as_float(q.x);
                wv[1] = __uint_as_float(q.y);
                wv[2] = __uint_as_float(q.z);
                wv[3] = __uint_as_float(q.w);
            } else {
                widen8<F>(q, wv);
            }
#pragma unroll
            for (int j = 0; j < kRows; ++j) {
                if (j >= nr) break;
#pragma unroll
                for (int h = 0; h < kPer / 4; ++h) {
                    const float4 xv = xr[j][c * (kPer / 4) + h];
                    acc[j] += xop<O>(xv.x) * wv[4 * h];
                    acc[j] += xop<O>(xv.y) * wv[4 * h + 1];
                    acc[j] += xop<O>(xv.z) * wv[4 * h + 2];
                    acc[j] += xop<O>(xv.w) * wv[4 * h + 3];
                }
            }
        }
        int seg = 0;
        int64_t col = o;
        while (seg < 2 && col >= dst.n[seg]) col -= dst.n[seg++];
        float* const ys = dst.y[seg];
        const int64_t ns = dst.n[seg];
#pragma unroll
        for (int j = 0; j < kRows; ++j) {
            if (j >= nr) break;
            const float s = warp_sum(acc[j]) * post + b;
            if (lane == 0) {
                if (ys != nullptr) ys[(r0 + j) * ns + col] = s;
                if (dst.residual != nullptr) dst.residual[(r0 + j) * out + o] += s;
            }
        }
    }
}

template <WFmt F>
void launch_format(const ops::LinearArgs& a, Operand op, int64_t rows, const GemvOut& dst,
                   const Launch& ctx) {
    const auto& w = a.weight;
    const dim3 grid(grid_for(w.out, kWarps), grid_for(rows, kRowsPerBlock));
    const DeviceVector b = device_vector(w.b);
    switch (op) {
        case Operand::kF32:
            gemv_kernel<F, Operand::kF32>
                <<<grid, kThreads, 0, ctx.stream>>>(a.x, a.rows, w.w, b, dst, rows, w.out, w.in, ctx.error);
            break;
        case Operand::kF16:
            gemv_kernel<F, Operand::kF16>
                <<<grid, kThreads, 0, ctx.stream>>>(a.x, a.rows, w.w, b, dst, rows, w.out, w.in, ctx.error);
            break;
        case Operand::kBf16:
            gemv_kernel<F, Operand::kBf16>
                <<<grid, kThreads, 0, ctx.stream>>>(a.x, a.rows, w.w, b, dst, rows, w.out, w.in, ctx.error);
            break;
    }
    VOLT_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool linear_gemv_eligible(const ops::LinearArgs& a) {
    const auto& w = a.weight;
    const bool fmt =
        w.format == ops::Format::kF16 || w.format == ops::Format::kBf16 || w.format == ops::Format::kF32;
    return fmt && w.in > 0 && w.in % 8 == 0 && reinterpret_cast<uintptr_t>(w.w) % 16 == 0 &&
           reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && grid_for(w.out, kWarps) < (1u << 31);
}

namespace {
void launch_gemv_to(const ops::LinearArgs& a, Operand operand, const GemvOut& dst, const Launch& ctx) {
    const int64_t rows = a.rows != nullptr ? a.num_rows : a.num_tokens;
    if (rows <= 0 || a.weight.out <= 0) return;
    VOLT_CHECK(grid_for(rows, kRowsPerBlock) <= 65535u) << rows << " rows in one linear";
    VOLT_CHECK(linear_gemv_eligible(a)) << "linear_gemv: [" << a.weight.out << ", " << a.weight.in << "] "
                                        << ops::format_name(a.weight.format) << " not taken";
    VOLT_CHECK(dst.n[0] + dst.n[1] + dst.n[2] == a.weight.out) << "linear_gemv: output segments";
    switch (a.weight.format) {
        case ops::Format::kBf16:
            return launch_format<WFmt::kBf16>(a, operand, rows, dst, ctx);
        case ops::Format::kF16:
            return launch_format<WFmt::kF16>(a, operand, rows, dst, ctx);
        default:
            return launch_format<WFmt::kF32>(a, operand, rows, dst, ctx);
    }
}
}  // namespace

void launch_linear_gemv(const ops::LinearArgs& a, Operand operand, const Launch& ctx) {
    GemvOut dst;
    dst.y[0] = a.y;
    dst.n[0] = a.weight.out;
    launch_gemv_to(a, operand, dst, ctx);
}

void launch_linear_gemv_residual(const ops::LinearArgs& a, float* residual, Operand operand,
                                 const Launch& ctx) {
    GemvOut dst;
    dst.y[0] = a.y;
    dst.n[0] = a.weight.out;
    dst.residual = residual;
    launch_gemv_to(a, operand, dst, ctx);
}

void launch_linear_gemv_split3(const ops::LinearArgs& a, float* y0, int64_t n0, float* y1, int64_t n1,
                               float* y2, int64_t n2, Operand operand, const Launch& ctx) {
    GemvOut dst;
    dst.y[0] = y0;
    dst.y[1] = y1;
    dst.y[2] = y2;
    dst.n[0] = n0;
    dst.n[1] = n1;
    dst.n[2] = n2;
    launch_gemv_to(a, operand, dst, ctx);
}

}  // namespace volt::cuda
