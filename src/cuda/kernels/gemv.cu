// Fast dense GEMV (issue 14; ops::LinearArgs, reference cpu::linear, checked by volt_op_test linear,
// o_proj_residual, final_logits, router, timed by --bench): y[r, o] = x[row r] . W[o] + b[o] for f16, bf16
// or f32 weights [out, in] with in % 8 == 0 (rows of 16-byte multiples). kSplit warps per output unit
// (kWarps / kSplit outputs per block), each over one run of the row's 16-byte chunks (8 f16/bf16 or 4 f32
// values): lane l reads chunks begin + l, begin + l + 32, ... once per tile of kRows rows, up to 8
// loads in flight before any is used, and multiplies them with x read as float4 (L1-resident, shared by
// the block's warps); the warps' sums are added in run order. The launch's rows run in tiles of kRows,
// every tile with the same per-row order. Products are
// f32: x rounded to the operand format, weights widened exactly (bf16 by a shift; f16 by bit operations
// to f16 x 2^-112, the factor 2^112 applied once to the sum, exact in f32 down to 2^-37 absolute),
// accumulated chunk by chunk in element order per lane, then a fixed warp butterfly. A row's result
// depends on `in` only: the same alone or in any batch (ops.h).
// Integer weights (issue 21; CUDA layout of cuda/placement.h, docs/cuda.md "Integer weights"): a 16-byte
// chunk holds 16 int8 or 32 int4 codes of one row; one warp per output (the rows are 2-4x shorter in
// bytes). Codes become exact f32 by a byte permute into 2^23's mantissa and one subtraction (int4: of
// 2^23 + z, giving q - z); products are explicit fmaf in element order. int8: the row's sum times its f16
// scale at the end; int4: each chunk's sum (one group: group % 32 == 0) times the group's scale, added
// to the row's sum by fmaf. The same per-row order in every tile width: batch invariant like the rest.
// Every float operation on a row's path is explicitly rounded (__fmaf_rn, __fadd_rn, __fmul_rn, __h*2_rn):
// a plain `a * b + c` is fused or not as the compiler's code around it allows, differently in the one-row
// and the tile kernels (scripts/ptx-contraction.py checks the PTX; scripts/cuda-check.sh runs it).
#include <cuda_fp16.h>

#include <algorithm>
#include <cstring>

#include "cuda/cuda_check.h"
#include "cuda/device_util.cuh"
#include "cuda/pdl.cuh"

namespace volt::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = 4;           // rows per tile: weights are read once per tile
constexpr int64_t kMaxIn = 4096;   // kRows staged rows of x: 64 KiB of shared memory (a V100 allows 96)
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

// Per weight format: weights per 16-byte chunk, warps per output, chunks a lane holds in flight on the
// one-row path (int4 also holds a scale|zero word per chunk).
template <WFmt F>
struct FmtTraits {
    static constexpr bool kInt = F == WFmt::kInt8 || F == WFmt::kInt4;
    static constexpr int kPer = F == WFmt::kF32 ? 4 : F == WFmt::kInt8 ? 16 : F == WFmt::kInt4 ? 32 : 8;
    static constexpr int kSplit = kInt ? 1 : 2;
    static constexpr int kPipe = F == WFmt::kInt4 ? 4 : 8;
};
// Integer weights with f16/bf16 operands take the f16x2 path (int8_chunk_half, int4_chunk_half); f32
// operands (the reference mode) keep exact f32 products (int_chunk).
template <WFmt F, Operand O>
constexpr bool kHalfPath = FmtTraits<F>::kInt&& O != Operand::kF32;
// Bytes of one weight row of `in` elements.
template <WFmt F>
__host__ __device__ __forceinline__ int64_t row_bytes(int64_t in) {
    return in / FmtTraits<F>::kPer * 16;
}

// ---- integer weights with f16/bf16 operands: f16x2 decode and bounded HFMA2 chains (issue 21) ----
// x is staged per row as f16 times 2^sx (stage_row_half: sx from the row's largest |x|, so that |x 2^sx| <=
// 2^kXExp), the codes become exact f16 pairs by bit operations, and each group of 8 pairs is one chain of
// HFMA2 (8 products per half, rounded to f16 at every step) that is widened to f32 (exact) and added to
// the lane's f32 sum in chunk order; the row's sum is multiplied by 2^-sx at the end. No chain spans two
// chunks, so a row's arithmetic is the same for every tile width (batch invariant).
// Magnitudes (no f16 overflow): the largest staged |x 2^sx| is in [2^kXExp, 2^(kXExp + 1)]; int8 |q| <=
// 128, |x 2^sx| <= 2^5: a chain's partial sums stay below 8 * 128 * 32 (1 + 2^-8) < 2^15.01 < 65504; int4
// |q - z| <= 15, |x 2^sx| <= 2^8: below 8 * 15 * 256 (1 + 2^-8) < 2^15.
// Error of a chain (docs/quantization.md "Integer weights on the GPU"): f16 unit roundoff u = 2^-11; at
// most sum_k u |S_k| over its 8 rounded partial sums S_k, <= 8u (1 + 8u) sum |terms| in the worst case.
// A rounding to nearest errs by at most ulp/2 <= u |S|, variance <= u^2 S^2 / 3; with random-sign terms
// E[S_k^2] = k var(term), so a chain of n adds (n + 1) / 2 = 4.5 times the variance of rounding its n x
// values to f16: <= 6.0e-4 rms(y) standard deviation (x's rounding: <= 2.8e-4), 6.6e-4 together.
// Subnormal f16 (|x| < 2^-18 max|x| for int8, 2^-21 for int4): absolute error <= 2^-25 2^-sx each, in all
// at most in 2^-29 max|x| |w|max: far below the rounding of the largest x (2^-12 max|x| |w|).
template <WFmt F>
constexpr int kXExp = F == WFmt::kInt8 ? 4 : 7;  // |x| staged below 2^(kXExp + 1), at least 2^kXExp max

// (a & MASK) | magic in one LOP3 (the compiler otherwise emits two: an AND with the immediate, an OR).
template <uint32_t kMask>
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t magic) {
    uint32_t r;
    asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(r) : "r"(a), "n"(kMask), "r"(magic));
    return r;
}

__device__ __forceinline__ __half2 h2_bits(uint32_t u) {
    __half2 h;
    memcpy(&h, &u, 4);
    return h;
}

// Word v of four int8 codes (inputs 4k .. 4k+3) as two f16 pairs (inputs (4k, 4k+1), (4k+2, 4k+3)), exact:
// v ^ 0x80808080 holds q + 128 per byte; a byte permute against 0x64 makes the f16 1024 + (q + 128)
// (0x64xx: exponent of 1024, the byte as the mantissa's low bits), and subtracting 1152 (0x6480) leaves q.
__device__ __forceinline__ void int8_pairs(uint32_t v, __half2* w) {
    const uint32_t f = v ^ 0x80808080u;
    const __half2 k1152 = h2_bits(0x64806480u);
    w[0] = __hsub2_rn(h2_bits(__byte_perm(f, 0x64u, 0x4140u)), k1152);
    w[1] = __hsub2_rn(h2_bits(__byte_perm(f, 0x64u, 0x4342u)), k1152);
}

// One int8 chunk (16 codes) times NR staged rows (f16 pairs in input order; xh: the chunk's 2 uint4 of row
// 0, rows `stride` uint4 apart): one 8-pair chain per row, widened and added to acc[j] (lo, then hi).
template <int NR>
__device__ __forceinline__ void int8_chunk_half(const uint4& q, const uint4* xh, int64_t stride, float* acc) {
    __half2 w[8];
    int8_pairs(q.x, w);
    int8_pairs(q.y, w + 2);
    int8_pairs(q.z, w + 4);
    int8_pairs(q.w, w + 6);
#pragma unroll
    for (int j = 0; j < NR; ++j) {
        const uint4 xa = xh[j * stride], xb = xh[j * stride + 1];
        const uint32_t xw[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
        __half2 ch = __hmul2_rn(w[0], h2_bits(xw[0]));
#pragma unroll
        for (int i = 1; i < 8; ++i) ch = __hfma2(w[i], h2_bits(xw[i]), ch);
        const float2 f = __half22float2(ch);
        acc[j] = __fadd_rn(__fadd_rn(acc[j], f.x), f.y);
    }
}

// One int4 chunk (32 codes of one group) times NR staged rows. Word k of the chunk (inputs 8k .. 8k+7,
// cuda/placement.h: byte b holds input b low and input 4 + b high) gives 4 f16 pairs, inputs (0, 2),
// (4, 6), (1, 3), (5, 7) of the word, the order stage_row_half uses for int4: (w & 0x000f000f) | 0x64006400
// is 1024 + q per half, minus 1024 + z; (w & 0x00f000f0) | 0x64006400 is 1024 + 16 q, times 1/16 minus
// 64 + z in one HFMA2; the same for w >> 8. All exact (integers below 2^11). Two chains of 8 pairs (words
// 0-1, 2-3), widened, summed in f32 and multiplied by the group's scale into acc[j].
template <int NR>
__device__ __forceinline__ void int4_chunk_half(const uint4& q, uint32_t meta, const uint4* xh,
                                                int64_t stride, float* acc) {
    const uint32_t zl = __byte_perm(meta, 0x64u, 0x4242u);        // (1024 + z) in both halves
    const uint32_t zh = ((zl << 4) & 0x00f000f0u) | 0x64006400u;  // (1024 + 16 z) in both halves
    const __half2 sixteenth = h2_bits(0x2c002c00u);
    const __half2 nz = __hmul2_rn(h2_bits(zh), h2_bits(0xac00ac00u));  // -(64 + z), exact
    const __half2 zlh = h2_bits(zl);
    const float s = f16_to_f32(static_cast<uint16_t>(meta & 0xffffu));
    const uint32_t v[4] = {q.x, q.y, q.z, q.w};
    __half2 ch[2][NR];  // the two chains of each row (words 0-1, 2-3); decoded half by half (registers)
#pragma unroll
    for (int p = 0; p < 2; ++p) {
        __half2 w[8];
#pragma unroll
        for (int k = 0; k < 2; ++k) {
            const uint32_t a = v[2 * p + k], b = a >> 8, magic = 0x64006400u;
            w[4 * k] = __hsub2_rn(h2_bits(and_or<0x000f000fu>(a, magic)), zlh);
            w[4 * k + 1] = __hfma2(h2_bits(and_or<0x00f000f0u>(a, magic)), sixteenth, nz);
            w[4 * k + 2] = __hsub2_rn(h2_bits(and_or<0x000f000fu>(b, magic)), zlh);
            w[4 * k + 3] = __hfma2(h2_bits(and_or<0x00f000f0u>(b, magic)), sixteenth, nz);
        }
#pragma unroll
        for (int j = 0; j < NR; ++j) {
            const uint4 xa = xh[j * stride + 2 * p], xb = xh[j * stride + 2 * p + 1];
            const uint32_t xw[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
            __half2 c = __hmul2_rn(w[0], h2_bits(xw[0]));
#pragma unroll
            for (int i = 1; i < 8; ++i) c = __hfma2(w[i], h2_bits(xw[i]), c);
            ch[p][j] = c;
        }
    }
#pragma unroll
    for (int j = 0; j < NR; ++j) {
        const float2 f0 = __half22float2(ch[0][j]), f1 = __half22float2(ch[1][j]);
        const float part = __fadd_rn(__fadd_rn(f0.x, f0.y), __fadd_rn(f1.x, f1.y));
        acc[j] = fmaf(part, s, acc[j]);
    }
}

// One chunk of integer codes (chunk c of its row: inputs c kPer ..) times NR staged x rows, added to acc
// in element order. meta: kInt4: the chunk's group word (f16 s | z << 16); kInt8: unused (the row's scale
// is applied to the row's sum).
template <WFmt F, int NR, bool H>
__device__ __forceinline__ void int_chunk(const uint4& q, uint32_t meta, const float4* xs, int64_t in4,
                                          int64_t c, float* acc) {
    const uint32_t v[4] = {q.x, q.y, q.z, q.w};
    if constexpr (H) {
        // f16/bf16 operands: x staged as f16 pairs (stage_row_half), rows in4 / 2 uint4 apart.
        const uint4* xh = reinterpret_cast<const uint4*>(xs) + c * (F == WFmt::kInt8 ? 2 : 4);
        if constexpr (F == WFmt::kInt8)
            int8_chunk_half<NR>(q, xh, in4 / 2, acc);
        else
            int4_chunk_half<NR>(q, meta, xh, in4 / 2, acc);
    } else if constexpr (F == WFmt::kInt8) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const uint32_t fl = v[k] ^ 0x80808080u;
            const float w0 = i8_at(fl, 0), w1 = i8_at(fl, 1), w2 = i8_at(fl, 2), w3 = i8_at(fl, 3);
#pragma unroll
            for (int j = 0; j < NR; ++j) {
                const float4 xv = xs[j * in4 + c * 4 + k];
                acc[j] = fmaf(xv.x, w0, acc[j]);
                acc[j] = fmaf(xv.y, w1, acc[j]);
                acc[j] = fmaf(xv.z, w2, acc[j]);
                acc[j] = fmaf(xv.w, w3, acc[j]);
            }
        }
    } else {
        const float zf = 8388608.0f + static_cast<float>((meta >> 16) & 0xfu);
        const float s = f16_to_f32(static_cast<uint16_t>(meta & 0xffffu));
        float part[NR];
#pragma unroll
        for (int j = 0; j < NR; ++j) part[j] = 0.0f;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const uint32_t lo = v[k] & 0x0f0f0f0fu, hi = (v[k] >> 4) & 0x0f0f0f0fu;
            float w[8];
#pragma unroll
            for (int b = 0; b < 4; ++b) {
                w[b] = u4_at(lo, b, zf);
                w[4 + b] = u4_at(hi, b, zf);
            }
#pragma unroll
            for (int j = 0; j < NR; ++j) {
                const float4 xa = xs[j * in4 + c * 8 + 2 * k], xb = xs[j * in4 + c * 8 + 2 * k + 1];
                part[j] = fmaf(xa.x, w[0], part[j]);
                part[j] = fmaf(xa.y, w[1], part[j]);
                part[j] = fmaf(xa.z, w[2], part[j]);
                part[j] = fmaf(xa.w, w[3], part[j]);
                part[j] = fmaf(xb.x, w[4], part[j]);
                part[j] = fmaf(xb.y, w[5], part[j]);
                part[j] = fmaf(xb.z, w[6], part[j]);
                part[j] = fmaf(xb.w, w[7], part[j]);
            }
        }
#pragma unroll
        for (int j = 0; j < NR; ++j) acc[j] = fmaf(part[j], s, acc[j]);
    }
}

// The scale|zero word of chunk c (kInt4; 0 otherwise): mrow [in / group] u32, cpg = group / 32 chunks.
template <WFmt F>
__device__ __forceinline__ uint32_t chunk_meta(const uint32_t* __restrict__ mrow, int64_t c, int cpg) {
    if constexpr (F == WFmt::kInt4)
        return __ldg(mrow + static_cast<uint32_t>(c) / static_cast<uint32_t>(cpg));
    return 0u;
}

// Where output o of row r goes: segment s (o in [begin_s, begin_s + n_s)) of row-major [rows, n_s] y_s
// (a fused q|k|v weight writes q, k and v apart); y_s may be null (not kept). residual (if set):
// residual[r, o] += the output (o_proj + residual in one launch).
struct GemvOut {
    float* y[3] = {nullptr, nullptr, nullptr};
    int64_t n[3] = {0, 0, 0};
    float* residual = nullptr;
};

// RMSNorm fused into the staging of x (the coarse ops qkv_rope_kvwrite, moe_route, final_logits): gain
// null: x is staged as it is. Otherwise each block computes the row's 1/rms exactly as rmsnorm_kernel does
// (thread i of 256 sums x[j]^2 for j = i, i + 256, ... in order, the same block reduction, the same
// expressions), so the staged operands are bitwise those of rmsnorm then GEMV; block 0 of each row slice
// writes the normed f32 row to `normed` (row r of the launch) when it is set.
struct GemvNorm {
    DeviceVector gain;
    float eps = 0.0f;
    float* normed = nullptr;  // [rows, in] or null
};

// 1 / rms of row `xrow` ([in] f32) when nm.gain is set (else 1, unused). Every thread of the block calls
// it (a block reduction inside).
__device__ __forceinline__ float row_inv_rms(const float* __restrict__ xrow, int64_t in, const GemvNorm& nm,
                                             float* smem) {
    if (nm.gain.data == nullptr) return 1.0f;
    static_assert(kThreads == 256, "the reduction order of rmsnorm_kernel (256 threads)");
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < in; i += kThreads) ss += xrow[i] * xrow[i];
    ss = block_sum<kThreads>(ss, smem);
    return 1.0f / sqrtf(ss / static_cast<float>(in) + nm.eps);
}

// Stages row `xrow` ([in] f32) into xs ([in / 4] float4) rounded to the operand format, normed first
// (times inv = row_inv_rms of the row, times the gain) when nm.gain is set.
template <Operand O>
__device__ __forceinline__ void stage_row(const float* __restrict__ xrow, float4* xs, int64_t in,
                                          const GemvNorm& nm, float inv, int64_t r) {
    const float4* xr = reinterpret_cast<const float4*>(xrow);
    const int64_t in4 = in / 4;
    if (nm.gain.data == nullptr) {
        for (int64_t i = threadIdx.x; i < in4; i += kThreads) {
            const float4 v = xr[i];
            xs[i] = make_float4(xop<O>(v.x), xop<O>(v.y), xop<O>(v.z), xop<O>(v.w));
        }
        return;
    }
    float* out = nm.normed != nullptr && blockIdx.x == 0 ? nm.normed + r * in : nullptr;
    for (int64_t i = threadIdx.x; i < in4; i += kThreads) {
        const float4 v = xr[i];
        const float y0 = load_vec(nm.gain, 4 * i) * (v.x * inv),
                    y1 = load_vec(nm.gain, 4 * i + 1) * (v.y * inv),
                    y2 = load_vec(nm.gain, 4 * i + 2) * (v.z * inv),
                    y3 = load_vec(nm.gain, 4 * i + 3) * (v.w * inv);
        if (out != nullptr) reinterpret_cast<float4*>(out)[i] = make_float4(y0, y1, y2, y3);
        xs[i] = make_float4(xop<O>(y0), xop<O>(y1), xop<O>(y2), xop<O>(y3));
    }
}

// Integer weights with f16/bf16 operands: stages row `xrow` ([in] f32, normed as stage_row does when
// nm.gain is set) into xh as f16 values x 2^sx, sx = kXExp - ilogb(max |x|) (clamped to +-126), so the
// largest staged magnitude is in [2^kXExp, 2^(kXExp + 1)]; *back = 2^-sx (NaN when x holds inf or NaN, so
// the row's outputs are NaN). The operand rounding: bf16 before the scaling, f16 at the conversion of the
// scaled value (f16's precision; its range never matters: the scaled values are at most 2^8). int8: input
// order, int4: each 8 inputs as (0, 2), (4, 6), (1, 3), (5, 7) (int4_chunk_half's pairs). Every thread of
// the block calls it (a block reduction inside); xh is read after the caller's __syncthreads.
template <WFmt F, Operand O>
__device__ __forceinline__ void stage_row_half(const float* __restrict__ xrow, uint4* xh, int64_t in,
                                               const GemvNorm& nm, float inv, int64_t r, float* back,
                                               float* smem) {
    const float4* xr = reinterpret_cast<const float4*>(xrow);
    const int64_t in4 = in / 4;
    const bool has_norm = nm.gain.data != nullptr;
    // The operand values x[4 i .. 4 i + 3] before the f16 conversion (the expressions of stage_row).
    auto value = [&](int64_t i) {
        const float4 v = xr[i];
        if (!has_norm) return make_float4(xop<O>(v.x), xop<O>(v.y), xop<O>(v.z), xop<O>(v.w));
        const float y0 = load_vec(nm.gain, 4 * i) * (v.x * inv),
                    y1 = load_vec(nm.gain, 4 * i + 1) * (v.y * inv),
                    y2 = load_vec(nm.gain, 4 * i + 2) * (v.z * inv),
                    y3 = load_vec(nm.gain, 4 * i + 3) * (v.w * inv);
        return make_float4(xop<O>(y0), xop<O>(y1), xop<O>(y2), xop<O>(y3));
    };
    float* out = has_norm && nm.normed != nullptr && blockIdx.x == 0 ? nm.normed + r * in : nullptr;
    float m = 0.0f;
    auto mag = [](float v) { return isfinite(v) ? fabsf(v) : __int_as_float(0x7f800000); };
    for (int64_t i = threadIdx.x; i < in4; i += kThreads) {
        if (out != nullptr) {
            const float4 v = xr[i];
            reinterpret_cast<float4*>(out)[i] = make_float4(
                load_vec(nm.gain, 4 * i) * (v.x * inv), load_vec(nm.gain, 4 * i + 1) * (v.y * inv),
                load_vec(nm.gain, 4 * i + 2) * (v.z * inv), load_vec(nm.gain, 4 * i + 3) * (v.w * inv));
        }
        const float4 y = value(i);
        m = fmaxf(m, fmaxf(fmaxf(mag(y.x), mag(y.y)), fmaxf(mag(y.z), mag(y.w))));
    }
    m = block_max<kThreads>(m, smem);
    const bool finite = isfinite(m);  // (3.4e38f is below FLT_MAX: a finite max above it is finite)
    const int sx = m > 0.0f && finite ? min(126, max(-126, kXExp<F> - ilogbf(m))) : 0;
    const float up = __int_as_float((127 + sx) << 23);
    if (threadIdx.x == 0) *back = finite ? __int_as_float((127 - sx) << 23) : __int_as_float(0x7fc00000);
    auto h = [&](float v) { return static_cast<uint32_t>(__half_as_ushort(__float2half_rn(v * up))); };
    if constexpr (F == WFmt::kInt8) {
        uint2* dst = reinterpret_cast<uint2*>(xh);
        for (int64_t i = threadIdx.x; i < in4; i += kThreads) {
            const float4 y = value(i);
            dst[i] = make_uint2(h(y.x) | h(y.y) << 16, h(y.z) | h(y.w) << 16);
        }
    } else {
        for (int64_t i = threadIdx.x; i < in / 8; i += kThreads) {
            const float4 a = value(2 * i), b = value(2 * i + 1);
            xh[i] = make_uint4(h(a.x) | h(a.z) << 16, h(b.x) | h(b.z) << 16, h(a.y) | h(a.w) << 16,
                               h(b.y) | h(b.w) << 16);
        }
    }
}

// One warp's share of the dot products of one tile of NR rows (x rows xr[0..NR)) with weight row wrow:
// chunks [c_begin, c_end), lane l taking c_begin + l, c_begin + l + 32, ... in that order (the same per-row
// order for every NR and every batch). The loads of up to kBatch chunks a lane holds are issued before
// any is used, so a warp keeps kBatch x 512 bytes in flight (issue 14's profile: one load at a time and
// too few warps left half the bandwidth unused); fewer for wider tiles (registers). The batching never
// changes the order of a row's sums.
template <WFmt F, int NR, bool H>
__device__ __forceinline__ void gemv_tile(const uint4* __restrict__ wrow, const uint32_t* __restrict__ mrow,
                                          int cpg, const float4* xs, int64_t in4, int64_t c_begin,
                                          int64_t c_end, int lane, float* acc) {
    constexpr int kPer = FmtTraits<F>::kPer;  // weights per 16-byte chunk
    // (Integer chunks hold 2-4x the weights and int4 a scale|zero word each: fewer in flight, no spills;
    // sm_70's code of int4 tiles of 3-4 rows with f16/bf16 operands holds one chunk: two spilled there.)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    constexpr bool kOneInt4 = H && F == WFmt::kInt4 && NR > 2;
#else
    constexpr bool kOneInt4 = false;
#endif
    constexpr int kBatch = FmtTraits<F>::kInt ? (NR == 1    ? 4
                                                 : kOneInt4 ? 1
                                                            : 2)
                           : NR == 1          ? 8
                           : NR == 2          ? 4
                                              : 2;
#pragma unroll
    for (int j = 0; j < NR; ++j) acc[j] = 0.0f;
    for (int64_t c0 = c_begin + lane; c0 < c_end; c0 += 32 * kBatch) {
        uint4 q[kBatch];
        uint32_t m[kBatch];
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
            if (c0 + 32 * u < c_end) {
                q[u] = __ldg(wrow + c0 + 32 * u);
                m[u] = chunk_meta<F>(mrow, c0 + 32 * u, cpg);
            }
        }
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
            const int64_t c = c0 + 32 * u;
            if (c >= c_end) break;
            if constexpr (FmtTraits<F>::kInt) {
                int_chunk<F, NR, H>(q[u], m[u], xs, in4, c, acc);
            } else {
                float wv[8];
                if constexpr (F == WFmt::kF32) {
                    wv[0] = __uint_as_float(q[u].x);
                    wv[1] = __uint_as_float(q[u].y);
                    wv[2] = __uint_as_float(q[u].z);
                    wv[3] = __uint_as_float(q[u].w);
                } else {
                    widen8<F>(q[u], wv);
                }
#pragma unroll
                for (int j = 0; j < NR; ++j) {
#pragma unroll
                    for (int h = 0; h < kPer / 4; ++h) {
                        const float4 xv = xs[j * in4 + c * (kPer / 4) + h];
                        acc[j] = __fmaf_rn(xv.x, wv[4 * h], acc[j]);
                        acc[j] = __fmaf_rn(xv.y, wv[4 * h + 1], acc[j]);
                        acc[j] = __fmaf_rn(xv.z, wv[4 * h + 2], acc[j]);
                        acc[j] = __fmaf_rn(xv.w, wv[4 * h + 3], acc[j]);
                    }
                }
            }
        }
    }
}

// One lane's part of a one-row dot product from chunks it has already loaded: q[u] is chunk
// c_begin + lane + 32 u (u < kPipe), m[u] its scale|zero word (int4), in that order (the order of
// gemv_tile<F, 1>).
template <WFmt F, bool H>
__device__ __forceinline__ float gemv_loaded(const uint4* q, const uint32_t* m, const float4* xs,
                                             int64_t c_begin, int64_t c_end, int lane) {
    constexpr int kPer = FmtTraits<F>::kPer;
    float acc = 0.0f;
#pragma unroll
    for (int u = 0; u < FmtTraits<F>::kPipe; ++u) {
        const int64_t c = c_begin + lane + 32 * u;
        if (c >= c_end) break;
        if constexpr (FmtTraits<F>::kInt) {
            int_chunk<F, 1, H>(q[u], m[u], xs, 0, c, &acc);
        } else {
            float wv[8];
            if constexpr (F == WFmt::kF32) {
                wv[0] = __uint_as_float(q[u].x);
                wv[1] = __uint_as_float(q[u].y);
                wv[2] = __uint_as_float(q[u].z);
                wv[3] = __uint_as_float(q[u].w);
            } else {
                widen8<F>(q[u], wv);
            }
#pragma unroll
            for (int h = 0; h < kPer / 4; ++h) {
                const float4 xv = xs[c * (kPer / 4) + h];
                acc = __fmaf_rn(xv.x, wv[4 * h], acc);
                acc = __fmaf_rn(xv.y, wv[4 * h + 1], acc);
                acc = __fmaf_rn(xv.z, wv[4 * h + 2], acc);
                acc = __fmaf_rn(xv.w, wv[4 * h + 3], acc);
            }
        }
    }
    return acc;
}

// Block: kWarps warps = kOuts outputs at a time, kSplit warps per output (warp s of an output takes the
// s-th of kSplit equal runs of chunks); the kSplit warp sums are added in s order (shared memory). The
// blocks are persistent: block b takes output groups b, b + gridDim.x, ... so the tile's x rows, rounded
// to the operand format once, are staged in shared memory once per block and tile (issue 14's profile:
// rounding x again for every weight row made the GEMV ALU-bound at half the bandwidth).
// kTile: rows per tile, 4, or 1 for a launch of one row (fewer registers, more warps resident; the same
// per-row arithmetic).
template <WFmt F>
constexpr int kOutsOf = kWarps / FmtTraits<F>::kSplit;  // outputs a block computes at a time
// Integer weights: the row's scale meta (kInt8: f16 [out]; kInt4: u32 [out, in / group]) and, for kInt4,
// chunks per group (group / 32). Null / 0 for the other formats.
struct GemvIntMeta {
    const void* meta = nullptr;
    int cpg = 0;
};
// The blocks per SM the compiler must fit (__launch_bounds__): f32 operands with 4-row tiles, the
// reference mode, get the registers they need (1, no spills); one-row launches of int4 weights with
// f16/bf16 operands 3 on sm_80+ (<= 80 registers: their rows are 4x shorter in bytes, so more warps keep
// more bytes in flight; sm_70's code needs more registers: 2 there, and int8's 8-chunk ring needs > 80);
// the rest 2. The host sizes the persistent grid from the occupancy this gives (launch_op).
template <WFmt F, Operand O, int kTile>
__host__ __device__ constexpr int min_blocks_per_sm() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    constexpr int k3 = 2;
#else
    constexpr int k3 = 3;
#endif
    return kTile == 4 && O == Operand::kF32 ? 1 : kTile == 1 && F == WFmt::kInt4 && kHalfPath<F, O> ? k3 : 2;
}
// (f32 operands with 4-row tiles, the reference mode, get the registers they need: no spills.)
template <WFmt F, Operand O, int kTile>
__global__ void __launch_bounds__(kThreads, min_blocks_per_sm<F, O, kTile>())
    gemv_kernel(const float* __restrict__ x, const int32_t* __restrict__ rows, const void* __restrict__ w,
                GemvIntMeta im, DeviceVector bias, GemvOut dst, GemvNorm norm, int64_t num_rows, int64_t out,
                int64_t in, int* error) {
    // pdl.cuh: the one-row path below issues its first weight loads before pdl_wait (weights are written by
    // no kernel); everything else waits first.
    pdl_launch_dependents();
    static_assert(kTile == 1 || kTile == kRows, "tiles of 1 or kRows rows");
    constexpr int kSplit = FmtTraits<F>::kSplit, kOuts = kOutsOf<F>, kPipe = FmtTraits<F>::kPipe;
    constexpr bool kH = kHalfPath<F, O>;  // integer weights, f16/bf16 operands: x staged as f16
    extern __shared__ float4 xs[];        // [kTile][in / 4] (kH: [kTile][in / 8] uint4 of f16 pairs)
    __shared__ float red[kWarps][kTile];
    __shared__ float xback[kTile];  // kH: 2^-sx of each staged row (stage_row_half)
    __shared__ float norm_red[32];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int split = warp % kSplit;
    constexpr int kPer = FmtTraits<F>::kPer;  // weights per 16-byte chunk
    const int64_t chunks = in / kPer, run = (chunks + kSplit - 1) / kSplit, in4 = in / 4;
    const int64_t c_begin = min64(chunks, split * run), c_end = min64(chunks, c_begin + run);
    const int64_t groups_per_row = F == WFmt::kInt4 ? chunks / im.cpg : 0;  // int4 scale|zero words
    // The factor of a row's sum: 2^112 for f16 weights (widened times 2^-112), the row's scale for int8.
    auto post_of = [&](int64_t o) {
        if constexpr (F == WFmt::kF16) return 0x1p112f;
        if constexpr (F == WFmt::kInt8) return f16_to_f32(static_cast<const uint16_t*>(im.meta)[o]);
        return 1.0f;
    };
    // Output o of staged row j from the warps' sums red[warp .. warp + kSplit)[j] (shared by the one-row
    // path and every tile width): the sums added in split order, times back (kH: 2^-sx, exact) and one
    // fma with the row factor and the bias. Explicitly rounded (no mul/add left for the compiler to fuse
    // or not: NVVM fuses only inside a basic block and ptxas as its schedule allows, so the same
    // `sum * post + bias` rounded once in the tile kernels and twice in the one-row path; a row alone and
    // in a batch then differed in the last bit. scripts/ptx-contraction.py checks the PTX for such pairs).
    auto finish = [&](const float(*sums)[kTile], int w0, int j, float back, float post, int64_t o) {
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < kSplit; ++k) s = __fadd_rn(s, sums[w0 + k][j]);
        if constexpr (kH) s = __fmul_rn(s, back);
        return __fmaf_rn(s, post, load_vec(bias, o));
    };
    auto meta_row = [&](int64_t o) {
        return F == WFmt::kInt4 ? static_cast<const uint32_t*>(im.meta) + o * groups_per_row : nullptr;
    };
    // Row j of the tile: source row src of x, staged (as f32 operands, or f16 pairs for kH).
    auto stage = [&](int j, int64_t src, float inv, int64_t r) {
        if constexpr (kH)
            stage_row_half<F, O>(x + src * in, reinterpret_cast<uint4*>(xs) + j * (in / 8), in, norm, inv, r,
                                 &xback[j], norm_red);
        else
            stage_row<O>(x + src * in, xs + j * in4, in, norm, inv, r);
    };
    const int64_t r_begin = static_cast<int64_t>(blockIdx.y) * kRowsPerBlock;
    const int64_t r_end = min64(num_rows, r_begin + kRowsPerBlock);
    const int64_t groups = (out + kOuts - 1) / kOuts;
    if constexpr (kTile == 1) {
        // One row and at most kPipe chunks a lane: the block's groups are software-pipelined, the next
        // group's weights in flight while this one is computed (and the first group's while x is staged).
        if (run <= 32 * kPipe) {  // run: every warp's run is at most this (uniform over the block)
            auto load = [&](int64_t grp, uint4* q, uint32_t* m) {
                const int64_t o = grp * kOuts + warp / kSplit;
                if (grp >= groups || o >= out) return;
                const uint4* wrow =
                    reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(w) + o * row_bytes<F>(in));
                const uint32_t* mrow = meta_row(o);
#pragma unroll
                for (int u = 0; u < kPipe; ++u) {
                    const int64_t c = c_begin + lane + 32 * u;
                    if (c < c_end) {
                        q[u] = __ldg(wrow + c);
                        m[u] = chunk_meta<F>(mrow, c, im.cpg);
                    }
                }
            };
            auto source = [&](int64_t r) {
                int64_t src = r;
                if (rows != nullptr) {
                    src = rows[src];
                    if (src < 0) {
                        if (threadIdx.x == 0) report_error(error, kBadRow);
                        src = 0;
                    }
                }
                return src;
            };
            // Without a norm the first group's loads are in flight while x is staged; with one, x is
            // normed and staged first (the loads held across the reduction would need more registers),
            // except in sm_90 code, where they are issued before pdl_wait to overlap the previous kernel's
            // end (pdl.cuh; the registers are checked by scripts/cuda-check.sh's sm_90 build).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
            constexpr bool kLoadBeforeNorm = true;
#else
            constexpr bool kLoadBeforeNorm = false;
#endif
            const bool normed = norm.gain.data != nullptr;
            uint4 next[kPipe];
            uint32_t next_m[kPipe];
            if (!normed || kLoadBeforeNorm) load(blockIdx.x, next, next_m);
            pdl_wait();  // x, rows and the outputs come from or go to other kernels
            for (int64_t r = r_begin; r < r_end; ++r) {  // one row (rows == 1 launches)
                const int64_t src = source(r);
                if (normed) {
                    const float inv = row_inv_rms(x + src * in, in, norm, norm_red);
                    stage(0, src, inv, r);
                    if (r == r_begin && !kLoadBeforeNorm) load(blockIdx.x, next, next_m);
                } else {
                    stage(0, src, 1.0f, r);
                }
                __syncthreads();
                for (int64_t grp = blockIdx.x; grp < groups; grp += gridDim.x) {
                    uint4 q[kPipe];
                    uint32_t m[kPipe];
#pragma unroll
                    for (int u = 0; u < kPipe; ++u) {
                        q[u] = next[u];
                        m[u] = next_m[u];
                    }
                    load(grp + gridDim.x, next, next_m);
                    const int64_t o = grp * kOuts + warp / kSplit;
                    const bool active = o < out;
                    const float part = active ? gemv_loaded<F, kH>(q, m, xs, c_begin, c_end, lane) : 0.0f;
                    const float sum = warp_sum(part);
                    if (lane == 0) red[warp][0] = sum;
                    __syncthreads();
                    if (active && split == 0 && lane == 0) {
                        int seg = 0;
                        int64_t col = o;
                        while (seg < 2 && col >= dst.n[seg]) col -= dst.n[seg++];
                        const float total = finish(red, warp, 0, kH ? xback[0] : 1.0f, post_of(o), o);
                        if (dst.y[seg] != nullptr) dst.y[seg][r * dst.n[seg] + col] = total;
                        if (dst.residual != nullptr)
                            dst.residual[r * out + o] = __fadd_rn(dst.residual[r * out + o], total);
                    }
                    __syncthreads();
                }
            }
            return;
        }
    }
    pdl_wait();
    for (int64_t r0 = r_begin; r0 < r_end; r0 += kTile) {
        const int nr = static_cast<int>(min64(kTile, r_end - r0));
        __syncthreads();  // the previous tile's x is no longer read
        for (int j = 0; j < nr; ++j) {
            int64_t src = r0 + j;
            if (rows != nullptr) {
                src = rows[src];
                if (src < 0) {
                    if (threadIdx.x == 0) report_error(error, kBadRow);
                    src = 0;
                }
            }
            const float inv = row_inv_rms(x + src * in, in, norm, norm_red);
            stage(j, src, inv, r0 + j);
        }
        __syncthreads();
        for (int64_t grp = blockIdx.x; grp < groups; grp += gridDim.x) {
            const int64_t o = grp * kOuts + warp / kSplit;
            const bool active = o < out;
            const uint4* wrow = reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(w) +
                                                               (active ? o : 0) * row_bytes<F>(in));
            const uint32_t* mrow = meta_row(active ? o : 0);
            float acc[kTile];
#pragma unroll
            for (int j = 0; j < kTile; ++j) acc[j] = 0.0f;
            static_assert(kRows == 4, "the tile switch below");
            if constexpr (kTile == 1) {
                if (active) gemv_tile<F, 1, kH>(wrow, mrow, im.cpg, xs, in4, c_begin, c_end, lane, acc);
            } else if (active) {
                switch (nr) {
                    case 4:
                        gemv_tile<F, 4, kH>(wrow, mrow, im.cpg, xs, in4, c_begin, c_end, lane, acc);
                        break;
                    case 3:
                        gemv_tile<F, 3, kH>(wrow, mrow, im.cpg, xs, in4, c_begin, c_end, lane, acc);
                        break;
                    case 2:
                        gemv_tile<F, 2, kH>(wrow, mrow, im.cpg, xs, in4, c_begin, c_end, lane, acc);
                        break;
                    default:
                        gemv_tile<F, 1, kH>(wrow, mrow, im.cpg, xs, in4, c_begin, c_end, lane, acc);
                        break;
                }
            }
#pragma unroll
            for (int j = 0; j < kTile; ++j) {
                const float sum = warp_sum(acc[j]);
                if (lane == 0) red[warp][j] = sum;
            }
            __syncthreads();
            if (active && split == 0 && lane < nr) {
                int seg = 0;
                int64_t col = o;
                while (seg < 2 && col >= dst.n[seg]) col -= dst.n[seg++];
                const int j = lane;
                const float sum = finish(red, warp, j, kH ? xback[j] : 1.0f, post_of(o), o);
                if (dst.y[seg] != nullptr) dst.y[seg][(r0 + j) * dst.n[seg] + col] = sum;
                if (dst.residual != nullptr)
                    dst.residual[(r0 + j) * out + o] = __fadd_rn(dst.residual[(r0 + j) * out + o], sum);
            }
            __syncthreads();  // red is reused by the next group
        }
    }
}

// Dynamic shared memory above the default 48 KiB must be allowed per kernel once.
template <typename K>
void allow_smem(K kernel, size_t bytes) {
    if (bytes > 48 * 1024)
        VOLT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(bytes)));
}

template <WFmt F, Operand OP>
void launch_op(const ops::LinearArgs& a, int64_t rows, const GemvOut& dst, const GemvNorm& nm,
               const Launch& ctx) {
    const auto& w = a.weight;
    const DeviceVector b = device_vector(w.b);
    const int64_t groups = (w.out + kOutsOf<F> - 1) / kOutsOf<F>;
    GemvIntMeta im;
    if constexpr (F == WFmt::kInt8) im.meta = w.scales;
    if constexpr (F == WFmt::kInt4) {
        im.meta = w.zeros;
        im.cpg = static_cast<int>(w.group_size / 32);
    }
    const bool one = rows == 1;  // a one-row launch: the same arithmetic with more warps resident
    // Blocks per SM of the persistent grid: 2, or for one-row int4 launches (f16/bf16 operands) what the
    // device fits of the kernel at kMaxIn, at most 3 (min_blocks_per_sm: 3 on sm_80+, 2 on sm_70). Which
    // block computes an output never changes its arithmetic.
    int per_sm = 2;
    if constexpr (F == WFmt::kInt4 && kHalfPath<F, OP>) {
        static const int resident = [] {
            int n = 0;
            if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                    &n, gemv_kernel<F, OP, 1>, kThreads, static_cast<size_t>(kMaxIn * 2)) != cudaSuccess) {
                (void)cudaGetLastError();
                n = 2;
            }
            return std::max(1, std::min(3, n));
        }();
        if (one) per_sm = resident;
    }
    const int64_t max_blocks = static_cast<int64_t>(std::max(1, ctx.sm_count)) * per_sm;
    // Every block the same number of groups (the last fewer), at most max_blocks blocks.
    const int64_t per_block = (groups + max_blocks - 1) / max_blocks;
    const dim3 grid(static_cast<unsigned>((groups + per_block - 1) / per_block),
                    grid_for(rows, kRowsPerBlock));
    const size_t smem = static_cast<size_t>((one ? 1 : kRows) * w.in * (kHalfPath<F, OP> ? 2 : 4));
    if (one) {
        auto* k = gemv_kernel<F, OP, 1>;
        allow_smem(k, smem);
        launch_kernel(k, grid, kThreads, smem, ctx, a.x, a.rows, w.w, im, b, dst, nm, rows, w.out, w.in,
                      ctx.error);
    } else {
        auto* k = gemv_kernel<F, OP, kRows>;
        allow_smem(k, smem);
        launch_kernel(k, grid, kThreads, smem, ctx, a.x, a.rows, w.w, im, b, dst, nm, rows, w.out, w.in,
                      ctx.error);
    }
    VOLT_CUDA_CHECK_LAUNCH();
}

template <WFmt F>
void launch_format(const ops::LinearArgs& a, Operand op, int64_t rows, const GemvOut& dst, const GemvNorm& nm,
                   const Launch& ctx) {
    switch (op) {
        case Operand::kF32:
            return launch_op<F, Operand::kF32>(a, rows, dst, nm, ctx);
        case Operand::kF16:
            return launch_op<F, Operand::kF16>(a, rows, dst, nm, ctx);
        case Operand::kBf16:
            return launch_op<F, Operand::kBf16>(a, rows, dst, nm, ctx);
    }
}

}  // namespace

bool linear_gemv_eligible(const ops::LinearArgs& a) {
    const auto& w = a.weight;
    // Integer weights in the CUDA layout: whole 16-byte chunks per row (16 int8, 32 int4 codes) and, for
    // int4, whole chunks per group (a chunk's codes share one scale|zero word).
    const bool int8 =
        w.format == ops::Format::kInt8 && w.cuda_layout && w.scales != nullptr && w.in % 16 == 0;
    const bool int4 = w.format == ops::Format::kInt4 && w.cuda_layout && w.zeros != nullptr &&
                      w.group_size > 0 && w.group_size % 32 == 0 && w.in % w.group_size == 0 &&
                      reinterpret_cast<uintptr_t>(w.zeros) % 4 == 0;
    const bool fmt = w.format == ops::Format::kF16 || w.format == ops::Format::kBf16 ||
                     w.format == ops::Format::kF32 || int8 || int4;
    return fmt && w.in > 0 && w.in % 8 == 0 && reinterpret_cast<uintptr_t>(w.w) % 16 == 0 &&
           reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && w.in <= kMaxIn;
}

namespace {
void launch_gemv_to(const ops::LinearArgs& a, Operand operand, const GemvOut& dst, const Launch& ctx,
                    const GemvNorm& nm = {}) {
    const int64_t rows = a.rows != nullptr ? a.num_rows : a.num_tokens;
    if (rows <= 0 || a.weight.out <= 0) return;
    VOLT_CHECK(grid_for(rows, kRowsPerBlock) <= 65535u) << rows << " rows in one linear";
    VOLT_CHECK(linear_gemv_eligible(a)) << "linear_gemv: [" << a.weight.out << ", " << a.weight.in << "] "
                                        << ops::format_name(a.weight.format) << " not taken";
    VOLT_CHECK(dst.n[0] + dst.n[1] + dst.n[2] == a.weight.out) << "linear_gemv: output segments";
    switch (a.weight.format) {
        case ops::Format::kBf16:
            return launch_format<WFmt::kBf16>(a, operand, rows, dst, nm, ctx);
        case ops::Format::kF16:
            return launch_format<WFmt::kF16>(a, operand, rows, dst, nm, ctx);
        case ops::Format::kInt8:
            return launch_format<WFmt::kInt8>(a, operand, rows, dst, nm, ctx);
        case ops::Format::kInt4:
            return launch_format<WFmt::kInt4>(a, operand, rows, dst, nm, ctx);
        default:
            return launch_format<WFmt::kF32>(a, operand, rows, dst, nm, ctx);
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

void launch_linear_gemv_norm(const ops::LinearArgs& a, const ops::VectorWeight& gain, float eps,
                             float* normed, Operand operand, const Launch& ctx) {
    VOLT_CHECK(gain.data != nullptr && gain.n == a.weight.in) << "linear_gemv_norm: gain of " << gain.n;
    GemvOut dst;
    dst.y[0] = a.y;
    dst.n[0] = a.weight.out;
    launch_gemv_to(a, operand, dst, ctx, {device_vector(gain), eps, normed});
}

namespace {
// Three row-major output parts: y0 [rows, n0], y1 [rows, n1], y2 [rows, n2].
GemvOut split3(float* y0, int64_t n0, float* y1, int64_t n1, float* y2, int64_t n2) {
    GemvOut dst;
    dst.y[0] = y0;
    dst.y[1] = y1;
    dst.y[2] = y2;
    dst.n[0] = n0;
    dst.n[1] = n1;
    dst.n[2] = n2;
    return dst;
}
}  // namespace

void launch_linear_gemv_split3_norm(const ops::LinearArgs& a, const ops::VectorWeight& gain, float eps,
                                    float* y0, int64_t n0, float* y1, int64_t n1, float* y2, int64_t n2,
                                    Operand operand, const Launch& ctx) {
    VOLT_CHECK(gain.data != nullptr && gain.n == a.weight.in) << "linear_gemv_norm: gain of " << gain.n;
    launch_gemv_to(a, operand, split3(y0, n0, y1, n1, y2, n2), ctx, {device_vector(gain), eps, nullptr});
}

void launch_linear_gemv_split3(const ops::LinearArgs& a, float* y0, int64_t n0, float* y1, int64_t n1,
                               float* y2, int64_t n2, Operand operand, const Launch& ctx) {
    launch_gemv_to(a, operand, split3(y0, n0, y1, n1, y2, n2), ctx);
}

}  // namespace volt::cuda
