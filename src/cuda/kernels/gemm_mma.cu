// Tensor-core GEMMs for prompt rows (issue 14 item 2, issue 16's prefill): the rows [0, prompt_rows) of
// qkv_rope_kvwrite, o_proj_residual and experts_residual (ops.h: prompt rows always take this family,
// generated rows always the GEMV family, so a row's bits never depend on the batch). Needs sm_80
// (mma.sync m16n8k16 with f16 or bf16 operands, ldmatrix); on older code the bodies trap and the
// dispatch table never selects them (dispatch.cc "gemm_mma_m16n8k16_f32acc", min_cc 80).
//
// Layout. C[m, n] = sum_k A[m, k] B[n, k]: A the activation rows (operand bits, K contiguous), B the
// weight rows ([out, in], as placed). Blocks of 64 (M) x 128 (N), 4 warps each 32 x 64, K in steps of 32
// through double-buffered shared memory (rows of 40 halfs: ldmatrix without bank conflicts), the next
// step's global loads in registers while the current one computes. Grid: x = M tiles (consecutive blocks
// share one weight tile in L2), y = N tiles.
//
// Numerics (docs/cuda.md "Prompt-row GEMMs"):
//  - A is made by rows_to_operand: the row (rmsnorm'd first where asked) rounded to the operand format.
//    f16: times a per-row power of two 2^sx that puts its largest magnitude in [2^13, 2^14) (ops.h BUG-22:
//    1e6 stays finite), the factor back[m] = 2^-sx (x 2^14 for MXFP4, below) applied to the f32 result.
//    bf16: rounded, no scale (bf16 has f32's range).
//  - Dense B: f16 or bf16 weights as placed, the operand format of A. Products exact, f32 accumulation
//    inside the tensor core, one chain per output over K in order.
//  - MXFP4 B (spec §2.3): each 32-code block decoded to f16 by bit operations (E2M1 value x 2^-14,
//    exact), two m16n8k16 into zeroed f32 accumulators per block, then acc += that x the block's E8M0
//    scale in f32; the 2^14 is folded into back. The codes of word q are decoded as the half2 pairs
//    (8q+p, 8q+p+4) (no byte shuffles); A is stored in the same order within every 8 (staged order).
//  - Integer B (issue 21; the CUDA layout of cuda/placement.h): thread t of a block decodes row n0 + t's 32
//    codes of a K step to exact f16 / bf16 values in natural order (int8: b by a byte permute; int4: q - z,
//    |q - z| <= 15), so the tensor core multiplies exact integers. int8: one chain per output over K, times
//    the row's f16 scale in the epilogue; int4 (group % 32 == 0, a step lies in one group): two m16n8k16
//    into zeroed accumulators per step, then acc += that x the group's scale in f32 (the MXFP4 scheme).
//  - Epilogues: y = acc x back[m] + bias[n], split into q|k|v parts or added into the residual; gate_up:
//    clamped SwiGLU of the adjacent (gate, up) columns, stored as the f16 activation with the decode
//    path's fixed power-of-two scale, in staged order (the down GEMM's A); down: y[pair, o] = acc x
//    2^(14 - sa) + b2[e, o] into f32 scratch, then experts_combine adds sum_j w[t, j] y[t k + j] into the
//    residual in rank order.
//  - Routing (experts): route_lists groups the prompt rows' (token, rank) pairs by expert (counting sort;
//    the order inside an expert's list is whatever the atomics give, which changes nothing: every pair's
//    row of results depends on that pair's data only) and cuts each list into tiles of <= 64 pairs (32 when
//    the experts average under 48 pairs each).
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cuda/cuda_check.h"
#include "cuda/device_util.cuh"
#include "cuda/expert_rows.cuh"
#include "cuda/mxfp4.cuh"
#include "cuda/pdl.cuh"

namespace volt::cuda {
namespace {

using mxfp4::act_scale_exp;
using mxfp4::e2m1_pair;
using mxfp4::e8m0_f32;
using mxfp4::pow2f;
using mxfp4::staged_index;
using mxfp4::swiglu;

constexpr int kBM = 64, kBN = 128, kBK = 32, kThreads = 128;
constexpr int kLds = 40;  // halfs per shared-memory row (32 + 8 padding)
constexpr int kMaxExperts = kMaxRoutedExperts;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define VOLT_GEMM_MMA 1
#endif

enum class BKind : int { kF16 = 0, kBf16 = 1, kMxfp4 = 2, kI8F16 = 3, kI8Bf16 = 4, kI4F16 = 5, kI4Bf16 = 6 };
__host__ __device__ constexpr bool bkind_int8(BKind b) { return b == BKind::kI8F16 || b == BKind::kI8Bf16; }
__host__ __device__ constexpr bool bkind_int4(BKind b) { return b == BKind::kI4F16 || b == BKind::kI4Bf16; }
// Whether the tensor-core operands are bf16 (else f16).
__host__ __device__ constexpr bool bkind_bf16(BKind b) {
    return b == BKind::kBf16 || b == BKind::kI8Bf16 || b == BKind::kI4Bf16;
}
// An exact small integer (|v| <= 127) as f16 or bf16 bits.
template <bool kBf16>
__device__ __forceinline__ uint32_t int_operand_bits(float v) {
    if constexpr (kBf16) return __float_as_uint(v) >> 16;
    return __half_as_ushort(__float2half_rn(v));
}
enum class Epi : int { kDense = 0, kSwiglu = 1, kDown = 2 };

__device__ __forceinline__ void ldmatrix_x4(uint32_t* r, const void* p) {
#ifdef VOLT_GEMM_MMA
    const auto smem_addr = [](const void* q) { return static_cast<uint32_t>(__cvta_generic_to_shared(q)); };
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
#else
    __trap();
#endif
}

// d = a b + c, m16n8k16, f32 accumulators.
template <bool kBf16>
__device__ __forceinline__ void mma16816(float* d, const uint32_t* a, uint32_t b0, uint32_t b1,
                                         const float* c) {
#ifdef VOLT_GEMM_MMA
    if constexpr (kBf16) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%10,%11,%12,%13};\n"
            : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]), "f"(c[2]),
              "f"(c[3]));
    } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%10,%11,%12,%13};\n"
            : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]), "f"(c[2]),
              "f"(c[3]));
    }
#else
    __trap();
#endif
}

struct GemmParams {
    // A rows: row m of the tile is A row a_row(m) (dense: m0 + m; experts: the tile's pairs, through
    // pair_list, divided by a_div: top_k for gate_up (a token's row), 1 for down (the pair's row)).
    const uint16_t* a;  // [rows, K] operand bits
    const float* back;  // [rows] or null: the factor of each A row's results (dense, gate_up)
    float back_const;   // the factor when back is null
    int64_t M, N, K;    // dense: M rows; experts: M unused (tiles)
    // B
    const uint16_t* w;      // dense [N, K]
    const uint8_t* blocks;  // MXFP4 [E, N, K/32, 16]
    const uint8_t* scales;  // MXFP4 [E, N, K/32]
    const float* bias;      // [N] dense, [E, N] experts, or null
    // integer B (CUDA layout): codes int8 [N, K] or u32 [N, K / 8]; int8: f16 scales [N]; int4: scale|zero
    // words [N, K / group], cpg = group / 32 K steps per group
    const uint8_t* codes;
    const uint16_t* row_scale;
    const uint32_t* meta;
    int cpg;
    // experts
    const int32_t* pair_list;  // [pairs] pair ids grouped by expert
    const int4* tiles;         // [num_tiles] (expert, start in pair_list, count, 0)
    const int32_t* num_tiles;  // [1]
    int a_div;
    // dense epilogue: columns [0, n0) to y0 [M, n0], [n0, n0 + n1) to y1 [M, n1], the rest to y2;
    // residual [M, N] (if set) += the value, y0 then optional (keep).
    float *y0, *y1, *y2, *residual;
    int64_t n0, n1;
    // gate_up epilogue
    uint16_t* act;  // [pairs, N / 2] f16 bits, staged order
    float act_scale, limit, alpha;
    bool act_round_bf16;
    // down epilogue
    float* y;  // [pairs, N]
};

// BM: rows of a block tile, 64 (warps 2 x 2 of 32 x 64) or 32 (warps 1 x 4 of 32 x 32, for experts with
// few pairs each). Every output is the same chain of m16n8k16 over K in order whatever BM is, so the
// choice changes no bit of any row.
template <BKind kB, Epi kE, int BM>
__global__ void __launch_bounds__(kThreads) gemm_kernel(GemmParams p) {
    pdl_wait();  // pdl.cuh: nothing of an earlier kernel is touched before it
    pdl_launch_dependents();
    constexpr int WM = BM / 32, WN = 4 / WM, NT = kBN / WN / 8;  // warp grid, n8 tiles per warp
    constexpr int AI = BM * 4 / kThreads;                        // A chunks per thread
    __shared__ __align__(16) uint16_t As[2][BM][kLds];
    __shared__ __align__(16) uint16_t Bs[2][kBN][kLds];
    __shared__ float Sc[2][kBN];
    constexpr bool kMx = kB == BKind::kMxfp4;
    constexpr bool kI8 = bkind_int8(kB), kI4 = bkind_int4(kB);
    constexpr bool kScaled = kMx || kI4;  // a scale per K step and column (Sc)
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp % WM, wn = warp / WM;
    const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kBN, K = p.K, N = p.N;

    // The tile's rows.
    int expert = 0, start = 0, count = 0;
    int64_t m0 = 0;
    if constexpr (kE == Epi::kDense) {
        m0 = static_cast<int64_t>(blockIdx.x) * BM;
        count = static_cast<int>(min64(BM, p.M - m0));
    } else {
        if (static_cast<int>(blockIdx.x) >= *p.num_tiles) return;
        const int4 t = p.tiles[blockIdx.x];
        expert = t.x;
        start = t.y;
        count = t.z;
    }
    auto a_row_of = [&](int r) -> int64_t {  // A row of tile row r (r < count)
        if constexpr (kE == Epi::kDense) return m0 + r;
        return p.pair_list[start + r] / p.a_div;
    };

    // This thread's loads: A chunks c = tid, tid + 128 (row c / 4, 8 halfs at (c % 4) * 8).
    const uint16_t* a_src[AI];
#pragma unroll
    for (int i = 0; i < AI; ++i) {
        const int c = tid + kThreads * i, r = c >> 2;
        a_src[i] = p.a + a_row_of(r < count ? r : 0) * K + (c & 3) * 8;
    }
    // B: dense chunks c = tid + 128 i (i < 4), row c / 4; MXFP4: row tid's 16-byte block.
    const uint16_t* b_src[4];
    const uint8_t *mx_blocks = nullptr, *mx_scales = nullptr;
    const uint8_t* int_row = nullptr;  // integer B: row n0 + tid's codes
    const uint32_t* int_meta = nullptr;
    const int64_t nb = K / 32;
    if constexpr (kI8 || kI4) {
        const int64_t n = min64(n0 + tid, N - 1);
        int_row = p.codes + n * (kI8 ? K : K / 2);
        if constexpr (kI4) int_meta = p.meta + n * (nb / p.cpg);
    } else if constexpr (kMx) {
        const int64_t n = min64(n0 + tid, N - 1);
        const int64_t row = static_cast<int64_t>(expert) * N + n;
        mx_blocks = p.blocks + row * nb * 16;
        mx_scales = p.scales + row * nb;
    } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int c = tid + kThreads * i;
            b_src[i] = p.w + min64(n0 + (c >> 2), N - 1) * K + (c & 3) * 8;
        }
    }

    uint4 ra[AI], rb[4];
    uint32_t rs = 0;
    auto load = [&](int64_t kb) {  // global -> registers, K step kb
#pragma unroll
        for (int i = 0; i < AI; ++i) ra[i] = *reinterpret_cast<const uint4*>(a_src[i] + kb * kBK);
        if constexpr (kI8) {
            rb[0] = __ldg(reinterpret_cast<const uint4*>(int_row + kb * 32));
            rb[1] = __ldg(reinterpret_cast<const uint4*>(int_row + kb * 32 + 16));
        } else if constexpr (kI4) {
            rb[0] = __ldg(reinterpret_cast<const uint4*>(int_row + kb * 16));
            rs = __ldg(int_meta + static_cast<uint32_t>(kb) / static_cast<uint32_t>(p.cpg));
        } else if constexpr (kMx) {
            rb[0] = __ldg(reinterpret_cast<const uint4*>(mx_blocks + kb * 16));
            rs = __ldg(mx_scales + kb);
        } else {
#pragma unroll
            for (int i = 0; i < 4; ++i) rb[i] = __ldg(reinterpret_cast<const uint4*>(b_src[i] + kb * kBK));
        }
    };
    auto store = [&](int buf) {  // registers -> shared memory
#pragma unroll
        for (int i = 0; i < AI; ++i) {
            const int c = tid + kThreads * i;
            *reinterpret_cast<uint4*>(&As[buf][c >> 2][(c & 3) * 8]) = ra[i];
        }
        if constexpr (kI8) {
            // 32 int8 codes -> 32 exact operand values, natural order.
            const uint32_t words[8] = {rb[0].x, rb[0].y, rb[0].z, rb[0].w,
                                       rb[1].x, rb[1].y, rb[1].z, rb[1].w};
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                uint32_t h[4];
#pragma unroll
                for (int k = 0; k < 2; ++k) {
                    const uint32_t fl = words[2 * q + k] ^ 0x80808080u;
                    h[2 * k] = int_operand_bits<bkind_bf16(kB)>(i8_at(fl, 0)) |
                               int_operand_bits<bkind_bf16(kB)>(i8_at(fl, 1)) << 16;
                    h[2 * k + 1] = int_operand_bits<bkind_bf16(kB)>(i8_at(fl, 2)) |
                                   int_operand_bits<bkind_bf16(kB)>(i8_at(fl, 3)) << 16;
                }
                *reinterpret_cast<uint4*>(&Bs[buf][tid][q * 8]) = make_uint4(h[0], h[1], h[2], h[3]);
            }
        } else if constexpr (kI4) {
            // 32 int4 codes (4 words of inputs 8q .. 8q + 7) -> q - z exactly, natural order; the group's
            // scale to Sc.
            const uint32_t words[4] = {rb[0].x, rb[0].y, rb[0].z, rb[0].w};
            const float zf = 8388608.0f + static_cast<float>((rs >> 16) & 0xfu);
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const uint32_t lo = words[q] & 0x0f0f0f0fu, hi = (words[q] >> 4) & 0x0f0f0f0fu;
                uint32_t h[4];
                h[0] = int_operand_bits<bkind_bf16(kB)>(u4_at(lo, 0, zf)) |
                       int_operand_bits<bkind_bf16(kB)>(u4_at(lo, 1, zf)) << 16;
                h[1] = int_operand_bits<bkind_bf16(kB)>(u4_at(lo, 2, zf)) |
                       int_operand_bits<bkind_bf16(kB)>(u4_at(lo, 3, zf)) << 16;
                h[2] = int_operand_bits<bkind_bf16(kB)>(u4_at(hi, 0, zf)) |
                       int_operand_bits<bkind_bf16(kB)>(u4_at(hi, 1, zf)) << 16;
                h[3] = int_operand_bits<bkind_bf16(kB)>(u4_at(hi, 2, zf)) |
                       int_operand_bits<bkind_bf16(kB)>(u4_at(hi, 3, zf)) << 16;
                *reinterpret_cast<uint4*>(&Bs[buf][tid][q * 8]) = make_uint4(h[0], h[1], h[2], h[3]);
            }
            Sc[buf][tid] = f16_to_f32(static_cast<uint16_t>(rs & 0xffffu));
        } else if constexpr (kMx) {
            const uint32_t words[4] = {rb[0].x, rb[0].y, rb[0].z, rb[0].w};
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const uint32_t w = words[q];
                *reinterpret_cast<uint4*>(&Bs[buf][tid][q * 8]) =
                    make_uint4(e2m1_pair<0>(w), e2m1_pair<1>(w), e2m1_pair<2>(w), e2m1_pair<3>(w));
            }
            Sc[buf][tid] = e8m0_f32(rs);
        } else {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int c = tid + kThreads * i;
                *reinterpret_cast<uint4*>(&Bs[buf][c >> 2][(c & 3) * 8]) = rb[i];
            }
        }
    };

    float acc[2][NT][4];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.0f;
    const float zero[4] = {0.0f, 0.0f, 0.0f, 0.0f};

    const int64_t steps = K / kBK;
    load(0);
    store(0);
    __syncthreads();
    for (int64_t kb = 0; kb < steps; ++kb) {
        const int buf = static_cast<int>(kb & 1);
        if (kb + 1 < steps) load(kb + 1);
        uint32_t a[2][2][4];  // [m16 tile][k16 half][regs]
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int ks = 0; ks < 2; ++ks)
                ldmatrix_x4(a[mt][ks], &As[buf][wm * 32 + mt * 16 + (lane & 15)][ks * 16 + (lane >> 4) * 8]);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            uint32_t b[4];  // k 0-7, 8-15, 16-23, 24-31 of column group nt
            ldmatrix_x4(b, &Bs[buf][wn * NT * 8 + nt * 8 + (lane & 7)][(lane >> 3) * 8]);
            if constexpr (kScaled) {
                const int c = wn * NT * 8 + nt * 8 + 2 * (lane & 3);
                const float s0 = Sc[buf][c], s1 = Sc[buf][c + 1];
#pragma unroll
                for (int mt = 0; mt < 2; ++mt) {
                    float t[4];
                    mma16816<bkind_bf16(kB)>(t, a[mt][0], b[0], b[1], zero);
                    mma16816<bkind_bf16(kB)>(t, a[mt][1], b[2], b[3], t);
                    acc[mt][nt][0] = fmaf(t[0], s0, acc[mt][nt][0]);
                    acc[mt][nt][1] = fmaf(t[1], s1, acc[mt][nt][1]);
                    acc[mt][nt][2] = fmaf(t[2], s0, acc[mt][nt][2]);
                    acc[mt][nt][3] = fmaf(t[3], s1, acc[mt][nt][3]);
                }
            } else {
#pragma unroll
                for (int mt = 0; mt < 2; ++mt) {
                    mma16816<bkind_bf16(kB)>(acc[mt][nt], a[mt][0], b[0], b[1], acc[mt][nt]);
                    mma16816<bkind_bf16(kB)>(acc[mt][nt], a[mt][1], b[2], b[3], acc[mt][nt]);
                }
            }
        }
        if (kb + 1 < steps) store(buf ^ 1);
        __syncthreads();
    }

    // Epilogue: acc[mt][nt][r] is tile row wm*32 + mt*16 + lane/4 (+8 for r >= 2), column
    // wn*NT*8 + nt*8 + 2 (lane % 4) (+1 for odd r).
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int r = wm * 32 + mt * 16 + (lane >> 2) + half * 8;
            if (r >= count) continue;
            int64_t arow = 0, pair = 0;
            if constexpr (kE == Epi::kDense) {
                arow = m0 + r;
            } else {
                pair = p.pair_list[start + r];
                arow = pair / p.a_div;
            }
            const float back = p.back != nullptr ? p.back[arow] : p.back_const;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const int64_t c = n0 + wn * NT * 8 + nt * 8 + 2 * (lane & 3);
                if (c >= N) continue;
                float v0 = acc[mt][nt][2 * half] * back, v1 = acc[mt][nt][2 * half + 1] * back;
                if constexpr (kI8) {  // the row's f16 scale (c + 1 < N is checked before v1 is used)
                    v0 *= f16_to_f32(p.row_scale[c]);
                    if (c + 1 < N) v1 *= f16_to_f32(p.row_scale[c + 1]);
                }
                if constexpr (kE == Epi::kDense) {
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int64_t col = c + e;
                        if (col >= N) break;
                        const float v = (e == 0 ? v0 : v1) + (p.bias != nullptr ? p.bias[col] : 0.0f);
                        if (p.residual != nullptr) {
                            p.residual[arow * N + col] += v;
                            if (p.y0 != nullptr) p.y0[arow * N + col] = v;
                        } else if (col < p.n0) {
                            p.y0[arow * p.n0 + col] = v;
                        } else if (col < p.n0 + p.n1) {
                            p.y1[arow * p.n1 + col - p.n0] = v;
                        } else {
                            p.y2[arow * (N - p.n0 - p.n1) + col - p.n0 - p.n1] = v;
                        }
                    }
                } else if constexpr (kE == Epi::kSwiglu) {
                    const float* b = p.bias != nullptr ? p.bias + static_cast<int64_t>(expert) * N : nullptr;
                    const float gate = v0 + (b != nullptr ? b[c] : 0.0f);
                    const float up = v1 + (b != nullptr ? b[c + 1] : 0.0f);
                    float a = swiglu(gate, up, p.limit, p.alpha);
                    if (p.act_round_bf16) a = round_to_bf16(a);
                    const int64_t I = N / 2;
                    p.act[pair * I + staged_index(c / 2)] =
                        __half_as_ushort(__float2half_rn(a * p.act_scale));
                } else {
                    const float* b = p.bias != nullptr ? p.bias + static_cast<int64_t>(expert) * N : nullptr;
                    p.y[pair * N + c] = v0 + (b != nullptr ? b[c] : 0.0f);
                    if (c + 1 < N) p.y[pair * N + c + 1] = v1 + (b != nullptr ? b[c + 1] : 0.0f);
                }
            }
        }
    }
}

// One block per row: the row (times rsqrt(mean(x^2) + eps) * gain when gain is set: rmsnorm.cu's
// formula) rounded to bf16 first when round_bf16 (the bf16 operand), then stored as f16 with the per-row
// power of two (back[r] = 2^(extra - sx)) or, to_bf16, as bf16 unscaled (back[r] = 2^extra). staged:
// elements stored in staged order (MXFP4 B).
constexpr int kRowThreads = 256;
__global__ void rows_to_operand_kernel(const float* __restrict__ x, DeviceVector gain, float eps, int64_t K,
                                       bool round_bf16, bool to_bf16, bool staged, int extra,
                                       uint16_t* __restrict__ out, float* __restrict__ back) {
    pdl_wait();  // pdl.cuh: nothing of an earlier kernel is touched before it
    pdl_launch_dependents();
    __shared__ float red[32];
    const int64_t r = blockIdx.x;
    const float* xr = x + r * K;
    float inv = 1.0f;
    if (gain.data != nullptr) {
        float ss = 0.0f;
        for (int64_t i = threadIdx.x; i < K; i += kRowThreads) ss += xr[i] * xr[i];
        ss = block_sum<kRowThreads>(ss, red);
        inv = 1.0f / sqrtf(ss / static_cast<float>(K) + eps);
    }
    auto value = [&](int64_t i) {
        const float v = gain.data != nullptr ? load_vec(gain, i) * (xr[i] * inv) : xr[i];
        return round_bf16 ? round_to_bf16(v) : v;
    };
    uint16_t* o = out + r * K;
    if (to_bf16) {
        for (int64_t i = threadIdx.x; i < K; i += kRowThreads)
            o[staged ? staged_index(i) : i] = static_cast<uint16_t>(__float_as_uint(value(i)) >> 16);
        if (threadIdx.x == 0 && back != nullptr) back[r] = pow2f(extra);
        return;
    }
    const float b = stage_f16_row<kRowThreads>(value, K, staged, extra, o, red);
    if (threadIdx.x == 0) back[r] = b;
}

// Pairs grouped by expert (one block): expert_rows.cuh route_lists_block.
constexpr int kRouteThreads = 1024;
__global__ void route_lists_kernel(const int32_t* __restrict__ ids, int64_t pairs, int num_experts, int bm,
                                   int32_t* __restrict__ list, int4* __restrict__ tiles,
                                   int32_t* __restrict__ num_tiles, int* error) {
    pdl_wait();  // pdl.cuh: nothing of an earlier kernel is touched before it
    pdl_launch_dependents();
    __shared__ int cnt[kMaxExperts];
    __shared__ int cur[kMaxExperts];
    route_lists_block<kRouteThreads>(ids, pairs, num_experts, bm, list, tiles, num_tiles, error, cnt, cur);
}

// out[t, o] += sum_j w[t, j] y[t k + j, o] in rank order (pairs with a bad id left out).
__global__ void experts_combine_kernel(const float* __restrict__ y, const int32_t* __restrict__ ids,
                                       const float* __restrict__ weights, int64_t H, int top_k,
                                       int num_experts, float* __restrict__ out) {
    pdl_wait();  // pdl.cuh: nothing of an earlier kernel is touched before it
    pdl_launch_dependents();
    const int64_t t = blockIdx.x;
    for (int64_t o = blockIdx.y * static_cast<int64_t>(blockDim.x) + threadIdx.x; o < H;
         o += static_cast<int64_t>(gridDim.y) * blockDim.x) {
        float s = 0.0f;
        for (int j = 0; j < top_k; ++j) {
            const int32_t e = ids[t * top_k + j];
            if (e < 0 || e >= num_experts) continue;
            s += weights[t * top_k + j] * y[(t * top_k + j) * H + o];
        }
        out[t * H + o] += s;
    }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <BKind kB, Epi kE, int BM = kBM>
void launch_gemm(const GemmParams& p, unsigned grid_x, const Launch& ctx) {
    const unsigned grid_y = static_cast<unsigned>((p.N + kBN - 1) / kBN);
    VOLT_CHECK(grid_x > 0 && grid_x <= 2147483647u && grid_y <= 65535u) << grid_x << " x " << grid_y;
    launch_kernel(gemm_kernel<kB, kE, BM>, dim3(grid_x, grid_y), kThreads, 0, ctx, p);
    VOLT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_route_lists(const int32_t* ids, int64_t pairs, int64_t num_experts, int bm, int32_t* list,
                        int4* tiles, int32_t* num_tiles, const Launch& ctx) {
    VOLT_CHECK(num_experts > 0 && num_experts <= kMaxExperts && bm > 0 && pairs < (int64_t{1} << 31));
    launch_kernel(route_lists_kernel, 1, kRouteThreads, 0, ctx, ids, pairs, static_cast<int>(num_experts), bm,
                  list, tiles, num_tiles, ctx.error);
    VOLT_CUDA_CHECK_LAUNCH();
}

void launch_experts_combine(const float* y, const int32_t* ids, const float* weights, int64_t rows, int64_t H,
                            int64_t top_k, int64_t num_experts, float* out, const Launch& ctx) {
    if (rows <= 0) return;
    VOLT_CHECK(rows < (int64_t{1} << 31));
    const auto cy = static_cast<unsigned>(std::min<int64_t>((H + 255) / 256, 65535));
    launch_kernel(experts_combine_kernel, dim3(static_cast<unsigned>(rows), cy), 256, 0, ctx, y, ids, weights,
                  H, static_cast<int>(top_k), static_cast<int>(num_experts), out);
    VOLT_CUDA_CHECK_LAUNCH();
}

bool gemm_dense_eligible(const ops::DenseWeight& w, Operand operand) {
    const bool int_op = operand == Operand::kF16 || operand == Operand::kBf16;
    // Integer weights in the CUDA layout: whole K steps of 32; int4 steps inside one group.
    const bool int8 = w.format == ops::Format::kInt8 && w.cuda_layout && w.scales != nullptr;
    const bool int4 = w.format == ops::Format::kInt4 && w.cuda_layout && w.zeros != nullptr &&
                      w.group_size > 0 && w.group_size % kBK == 0 && w.in % w.group_size == 0;
    const bool fmt = (operand == Operand::kF16 && w.format == ops::Format::kF16) ||
                     (operand == Operand::kBf16 && w.format == ops::Format::kBf16) ||
                     (int_op && (int8 || int4));
    return fmt && w.in % kBK == 0 && w.in > 0 && w.out > 0 && aligned16(w.w) &&
           (w.b.data == nullptr || w.b.format == ops::Format::kF32);
}

void launch_rows_to_operand(const float* x, const ops::VectorWeight& gain, float eps, int64_t rows, int64_t K,
                            Operand operand, bool staged, int extra_exp, uint16_t* out, float* back,
                            const Launch& ctx) {
    if (rows <= 0) return;
    VOLT_CHECK(operand != Operand::kF32 && rows < (int64_t{1} << 31));
    VOLT_CHECK(gain.data == nullptr || gain.format == ops::Format::kF32);
    launch_kernel(rows_to_operand_kernel, static_cast<unsigned>(rows), kRowThreads, 0, ctx, x,
                  device_vector(gain), eps, K, operand == Operand::kBf16, operand == Operand::kBf16, staged,
                  extra_exp, out, back);
    VOLT_CUDA_CHECK_LAUNCH();
}

void launch_gemm_dense(const uint16_t* a, const float* back, int64_t rows, const ops::DenseWeight& w,
                       const GemmDenseOut& out, Operand operand, const Launch& ctx) {
    if (rows <= 0) return;
    VOLT_CHECK(gemm_dense_eligible(w, operand)) << "gemm_dense: a weight it does not take";
    GemmParams p{};
    p.a = a;
    p.back = operand == Operand::kF16 ? back : nullptr;
    p.back_const = 1.0f;
    p.M = rows;
    p.N = w.out;
    p.K = w.in;
    p.w = static_cast<const uint16_t*>(w.w);
    p.codes = static_cast<const uint8_t*>(w.w);
    p.row_scale = w.scales;
    p.meta = static_cast<const uint32_t*>(w.zeros);
    p.cpg = w.format == ops::Format::kInt4 ? static_cast<int>(w.group_size / kBK) : 1;
    p.bias = static_cast<const float*>(w.b.data);
    p.y0 = out.y0;
    p.y1 = out.y1;
    p.y2 = out.y2;
    p.residual = out.residual;
    p.n0 = out.residual != nullptr ? w.out : out.n0;
    p.n1 = out.residual != nullptr ? 0 : out.n1;
    const auto grid_x = static_cast<unsigned>((rows + kBM - 1) / kBM);
    const bool bf16 = operand == Operand::kBf16;
    if (w.format == ops::Format::kInt8) {
        if (bf16)
            launch_gemm<BKind::kI8Bf16, Epi::kDense>(p, grid_x, ctx);
        else
            launch_gemm<BKind::kI8F16, Epi::kDense>(p, grid_x, ctx);
    } else if (w.format == ops::Format::kInt4) {
        if (bf16)
            launch_gemm<BKind::kI4Bf16, Epi::kDense>(p, grid_x, ctx);
        else
            launch_gemm<BKind::kI4F16, Epi::kDense>(p, grid_x, ctx);
    } else if (bf16) {
        launch_gemm<BKind::kBf16, Epi::kDense>(p, grid_x, ctx);
    } else {
        launch_gemm<BKind::kF16, Epi::kDense>(p, grid_x, ctx);
    }
}

bool gemm_experts_eligible(const ops::ExpertsArgs& a, Operand operand) {
    const auto& g = a.gate_up;
    const auto& d = a.down;
    auto bias_ok = [](const ops::VectorWeight& b) {
        return b.data == nullptr || b.format == ops::Format::kF32;
    };
    return operand != Operand::kF32 && g.format == ops::Format::kMxfp4 && d.format == ops::Format::kMxfp4 &&
           a.top_k >= 1 && g.in % kBK == 0 && d.in % kBK == 0 && g.out == 2 * d.in && g.in == d.out &&
           d.in % 8 == 0 && g.num_experts == d.num_experts && g.num_experts <= kMaxExperts &&
           bias_ok(g.bias) && bias_ok(d.bias) && aligned16(g.blocks) && aligned16(d.blocks) &&
           std::isfinite(a.swiglu_limit) && a.swiglu_limit >= 0.0f && a.swiglu_limit <= 1000.0f;
}

int64_t gemm_experts_scratch_bytes(int64_t rows, const ops::ExpertsArgs& a) {
    const int64_t pairs = rows * a.top_k, H = a.down.out, I = a.down.in, E = a.gate_up.num_experts;
    const int64_t tiles = (pairs + 32 - 1) / 32 + E;  // tiles of 32 pairs at most: the larger count
    return expert_scratch_bytes(rows, pairs, H, I, tiles);
}

void launch_gemm_experts(const ops::ExpertsArgs& a, int64_t rows, void* scratch, const Launch& ctx) {
    if (rows <= 0) return;
    VOLT_CHECK(gemm_experts_eligible(a, ctx.operand)) << "gemm_experts: shapes or formats it does not take";
    const int64_t k = a.top_k, pairs = rows * k, H = a.down.out, I = a.down.in, E = a.gate_up.num_experts;
    VOLT_CHECK(pairs < (int64_t{1} << 31));
    // Tiles of 32 pairs when experts average fewer than 48 pairs (most of a 64-row tile would be empty):
    // a choice by the batch that changes no bit (gemm_kernel).
    const int bm = pairs < 48 * E ? 32 : kBM;
    const int64_t max_tiles = (pairs + bm - 1) / bm + E;
    const ExpertScratch sc = carve_expert_scratch(scratch, rows, pairs, H, I, max_tiles);
    uint16_t* a16 = sc.a16;
    float* back = sc.back;
    int32_t* list = sc.list;
    int4* tiles = sc.tiles;
    int32_t* num_tiles = sc.num_tiles;
    uint16_t* act = sc.act;
    float* y = sc.y;

    // A of gate_up: x rows in f16 (bf16-rounded first under --dtype bfloat16), staged, back x 2^14.
    launch_kernel(rows_to_operand_kernel, static_cast<unsigned>(rows), kRowThreads, 0, ctx, a.x,
                  DeviceVector{}, 0.0f, H, ctx.operand == Operand::kBf16, false, true, 14, a16, back);
    VOLT_CUDA_CHECK_LAUNCH();
    launch_route_lists(a.expert_ids, pairs, E, bm, list, tiles, num_tiles, ctx);

    const int sa = act_scale_exp(a.swiglu_limit);
    GemmParams g{};
    g.a = a16;
    g.back = back;
    g.N = a.gate_up.out;
    g.K = H;
    g.blocks = a.gate_up.blocks;
    g.scales = a.gate_up.scales;
    g.bias = static_cast<const float*>(a.gate_up.bias.data);
    g.pair_list = list;
    g.tiles = tiles;
    g.num_tiles = num_tiles;
    g.a_div = static_cast<int>(k);
    g.act = act;
    g.act_scale = std::ldexp(1.0f, sa);
    g.limit = a.swiglu_limit;
    g.alpha = a.swiglu_alpha;
    g.act_round_bf16 = ctx.operand == Operand::kBf16;
    if (bm == 32)
        launch_gemm<BKind::kMxfp4, Epi::kSwiglu, 32>(g, static_cast<unsigned>(max_tiles), ctx);
    else
        launch_gemm<BKind::kMxfp4, Epi::kSwiglu>(g, static_cast<unsigned>(max_tiles), ctx);

    GemmParams d{};
    d.a = act;
    d.back = nullptr;
    d.back_const = std::ldexp(1.0f, 14 - sa);
    d.N = H;
    d.K = I;
    d.blocks = a.down.blocks;
    d.scales = a.down.scales;
    d.bias = static_cast<const float*>(a.down.bias.data);
    d.pair_list = list;
    d.tiles = tiles;
    d.num_tiles = num_tiles;
    d.a_div = 1;
    d.y = y;
    if (bm == 32)
        launch_gemm<BKind::kMxfp4, Epi::kDown, 32>(d, static_cast<unsigned>(max_tiles), ctx);
    else
        launch_gemm<BKind::kMxfp4, Epi::kDown>(d, static_cast<unsigned>(max_tiles), ctx);

    launch_experts_combine(y, a.expert_ids, a.expert_weights, rows, H, k, E, a.out, ctx);
}

}  // namespace volt::cuda
