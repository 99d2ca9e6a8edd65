// Fast decode experts (issue 14; ops::ExpertsArgs, reference cpu::experts, checked by volt_op_test
// experts/experts_residual, timed by its --bench): MXFP4 weights streamed with 128-bit loads in two
// persistent launches, no routing lists, every (token, rank) pair computed on its own so a pair's result
// never depends on the batch:
//   gate_up_swiglu: grid (G, T), 8 warps a block; x of token t staged once per block in shared memory; a
//     warp computes SwiGLU units (rows 2u (gate) and 2u+1 (up) of expert ids[t, j]) one after another,
//     the next unit's loads in flight during this one's arithmetic; writes the activation a[pair, u] (f16
//     scaled by a fixed power of two, or f32 under --dtype float).
//   down_residual: grid (G, T), 8 warps a block; the k activations of token t staged once per block; a
//     warp computes output pairs (o, o+1): the two rows of each rank's expert in rank order, the next
//     step's loads in flight, then out[t, o] += sum_j w[t, j] (dot_j + b2[e_j, o]) in rank order.
// G (blocks per token) fills the GPU; it decides only which warp computes an item, never its arithmetic.
// A lane issues the loads of all its blocks of a row (3 for the gpt-oss shapes) before using any.
// Lanes take the 16-byte MXFP4 blocks g = lane, lane + 32, ... of a row (spec §2.3: 32 E2M1 codes, low
// nibble first, one E8M0 scale). f16/bf16 operands: codes become f16 by bit operations (E2M1 value x
// 2^-14, exact: mag bits at 9..11, sign at 15), activations are pre-scaled by a power of two so nothing
// overflows (ops.h BUG-22) and stored as half2 pairs (x[8q+p], x[8q+p+4]) matching the nibble order of
// word q; each pair of words is one chain of 8 HFMA2 (f16 products, 8-term f16 sums), then the chain
// goes to f32 (exact bit conversion) and the block's f32 sum is multiplied by its scale. f32 operands:
// exact f32 products summed in element order (the reference mode). Then a fixed warp butterfly.
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cuda/cuda_check.h"
#include "cuda/device_util.cuh"
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

constexpr int kGuWarps = 8;      // warps of a gate_up block
constexpr int kDnWarps = 8;      // warps of a down block
constexpr int kBlocksPerSm = 2;  // both kernels' __launch_bounds__ residency: the persistent grid's size
constexpr int kMaxTopK = 4;      // gpt-oss routes to 4; larger k falls back to experts_warp_mxfp4_3pass

struct Mx {
    const uint8_t* blocks;  // [E, out, in/32, 16]
    const uint8_t* scales;  // [E, out, in/32]
    const float* bias;      // [E, out] f32 or null
    int64_t num_experts, out, in;
};

// The operand rounding before the power-of-two pre-scale: bf16 rounds here (no overflow), f16 rounds at
// the conversion of the scaled value (so 1e6 never becomes inf).
template <Operand O>
__device__ __forceinline__ float pre_round(float x) {
    if constexpr (O == Operand::kBf16) return round_to_bf16(x);
    return x;
}

__device__ __forceinline__ __half2 h2_of(uint32_t u) {
    __half2 h;
    memcpy(&h, &u, 4);
    return h;
}
__device__ __forceinline__ uint32_t u32_of(__half2 h) {
    uint32_t u;
    memcpy(&u, &h, 4);
    return u;
}

// The two halves of an f16x2 as f32, each times 2^-112 (exact for every finite f16, subnormals too).
__device__ __forceinline__ float h2_sum_scaled(__half2 h) {
    const uint32_t v = u32_of(h);
    const float lo = __uint_as_float(((v << 13) & 0x0FFFE000u) | ((v << 16) & 0x80000000u));
    const float hi = __uint_as_float(((v >> 3) & 0x0FFFE000u) | (v & 0x80000000u));
    return lo + hi;
}

__device__ __forceinline__ __half2 word_chain(uint32_t w, const uint4& x, __half2 acc) {
    acc = __hfma2(h2_of(e2m1_pair<0>(w)), h2_of(x.x), acc);
    acc = __hfma2(h2_of(e2m1_pair<1>(w)), h2_of(x.y), acc);
    acc = __hfma2(h2_of(e2m1_pair<2>(w)), h2_of(x.z), acc);
    acc = __hfma2(h2_of(e2m1_pair<3>(w)), h2_of(x.w), acc);
    return acc;
}

// One block of 32 codes against 16 staged half2 (4 uint4): the f32 sum, times 2^-112.
__device__ __forceinline__ float block_dot_h(const uint4& q, const uint4* __restrict__ x) {
    const __half2 zero = __float2half2_rn(0.0f);
    __half2 c0 = word_chain(q.x, x[0], zero);
    c0 = word_chain(q.y, x[1], c0);
    __half2 c1 = word_chain(q.z, x[2], zero);
    c1 = word_chain(q.w, x[3], c1);
    return h2_sum_scaled(c0) + h2_sum_scaled(c1);
}

// E2M1 code -> f32 (as experts.cu) and one block of 32 codes against 32 f32 values in element order.
__device__ __forceinline__ float fp4_f32(uint32_t code) {
    const uint32_t mag = code & 7u;
    const uint32_t bits =
        mag < 2u ? (mag == 0u ? 0u : 0x3F000000u) : (((mag >> 1) + 126u) << 23) | ((mag & 1u) << 22);
    return __uint_as_float(bits | ((code & 8u) << 28));
}
__device__ __forceinline__ float block_dot_f(const uint4& q, const float* __restrict__ x) {
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
#pragma unroll
        for (int i = 0; i < 8; ++i) s += fp4_f32((words[k] >> (4 * i)) & 0xfu) * x[8 * k + i];
    }
    return s;
}

// Each warp computes whole weight rows; lane l takes the 16-byte blocks g = l, l + 32, ... of a row in
// that order. A lane's loads of kIt such blocks of every row it holds (and their scale bytes) are issued
// together before any is used, so a warp keeps rows x kIt x 512 bytes in flight; for the gpt-oss shapes
// (90 blocks a row) that is the whole row (issue 14's profile: loads waiting on each other's arithmetic
// and too few warps left most of the bandwidth unused).
constexpr int kIt = 3;

struct RowLoads {
    uint4 q[kIt];
    uint32_t s[kIt];
};
// A row's 16-byte blocks and scale bytes from this lane's first one (block `lane`): the lane's blocks of
// the chunk at g0 = lane + 32 c kIt are q[32 (c kIt + i)], immediate offsets from one base.
struct RowPtr {
    const uint4* q;
    const uint8_t* s;
};
__device__ __forceinline__ RowPtr row_ptr(const Mx& w, int64_t row, int nb, int lane) {
    const int64_t first = row * nb + lane;
    return {reinterpret_cast<const uint4*>(w.blocks) + first, w.scales + first};
}
// The loads of chunk g0 (= lane + 32 kIt c) of a row: blocks g0 + 32 i that exist.
__device__ __forceinline__ void load_row(RowPtr p, int nb, int g0, int lane, RowLoads* r) {
    const int off = g0 - lane;
#pragma unroll
    for (int i = 0; i < kIt; ++i) {
        if (g0 + 32 * i < nb) {
            r->q[i] = __ldg(p.q + off + 32 * i);
            r->s[i] = __ldg(p.s + off + 32 * i);
        }
    }
}

// The software pipeline's stage: the loads of one gate_up unit (its gate and up rows) or of one down
// step (two output rows of one expert), issued one item ahead of the arithmetic.
struct RowPair {
    RowLoads a, b;
};
__device__ __forceinline__ void load_pair(RowPtr pa, RowPtr pb, int nb, int g0, int lane, RowPair* p) {
    load_row(pa, nb, g0, lane, &p->a);
    load_row(pb, nb, g0, lane, &p->b);
}

// The two dot products of a row pair against the staged vector xs (f16: half2 pairs in staged order; f32:
// floats), the lane's blocks g = lane, lane + 32, ... in that order, as partial sums of this lane (before
// the warp butterfly). The first chunk of kIt blocks per lane comes from `p` (loaded ahead); rows longer
// than 32 kIt blocks load the rest here.
template <Operand O>
__device__ __forceinline__ float2 pair_dot(RowPtr pa, RowPtr pb, int nb, int lane, RowPair& p,
                                           const uint4* __restrict__ xs) {
    float sa = 0.0f, sb = 0.0f;
    for (int g0 = lane; g0 < nb; g0 += 32 * kIt) {
        if (g0 != lane) load_pair(pa, pb, nb, g0, lane, &p);
#pragma unroll
        for (int i = 0; i < kIt; ++i) {
            const int g = g0 + 32 * i;
            if (g >= nb) break;
            if constexpr (O == Operand::kF32) {
                const float* xb = reinterpret_cast<const float*>(xs) + 32 * g;
                sa += block_dot_f(p.a.q[i], xb) * e8m0_f32(p.a.s[i]);
                sb += block_dot_f(p.b.q[i], xb) * e8m0_f32(p.b.s[i]);
            } else {
                const uint4* xb = xs + 4 * g;
                const uint4 x4[4] = {xb[0], xb[1], xb[2], xb[3]};
                sa += block_dot_h(p.a.q[i], x4) * 0x1p112f * e8m0_f32(p.a.s[i]);
                sb += block_dot_h(p.b.q[i], x4) * 0x1p112f * e8m0_f32(p.b.s[i]);
            }
        }
    }
    return make_float2(sa, sb);
}

// gate_up + SwiGLU, persistent: grid (G, T), kGuWarps warps a block; block (b, t) stages x of token t once
// (f16/bf16: pre-scaled by the fixed power of two of its largest magnitude, as half2 pairs in staged
// order; f32: as is), then warp w of the G kGuWarps warps of token t computes the SwiGLU units q = w, w +
// G kGuWarps, ... of the token's k I units (q = j I + u: unit u of rank j; rows 2u and 2u + 1 of expert
// ids[t, j]), the loads of unit q + stride issued before the arithmetic of unit q. Which warp computes a
// unit changes nothing in its result (the lane split and the butterfly are fixed), so G is free.
template <Operand O>
__global__ void __launch_bounds__(kGuWarps * 32, kBlocksPerSm)
    gate_up_swiglu_kernel(const float* __restrict__ x, const int32_t* __restrict__ ids, Mx w, int top_k,
                          float limit, float alpha, float act_scale, uint16_t* __restrict__ act_h,
                          float* __restrict__ act_f, int* error) {
    pdl_wait();  // pdl.cuh: nothing of an earlier kernel is touched before it
    pdl_launch_dependents();
    extern __shared__ uint4 staged[];  // f16: [in/8] uint4 (half2 pairs); f32: [in/4] uint4 (floats)
    __shared__ float red[32];
    constexpr int kThreads = kGuWarps * 32;
    const int64_t t = blockIdx.y, in = w.in, I = w.out / 2;
    const int nb = static_cast<int>(in / 32);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * kGuWarps;
    // Unit (j, u) and the row of its gate (expert 0 for a bad id: computed, dropped, reported).
    int64_t j = 0, u = static_cast<int64_t>(blockIdx.x) * kGuWarps + warp;
    auto advance = [&](int64_t* jj, int64_t* uu) {
        *uu += stride;
        while (*uu >= I) {
            *uu -= I;
            ++*jj;
        }
    };
    auto gate_row = [&](int64_t jj, int64_t uu) -> int64_t {
        const int32_t e = ids[t * top_k + jj];
        return e >= 0 && e < w.num_experts ? static_cast<int64_t>(e) * w.out + 2 * uu : 0;
    };
    while (u >= I && j < top_k) {  // stride < I is not assumed
        u -= I;
        ++j;
    }
    RowPair cur, next;
    if (j < top_k) {
        const int64_t r = gate_row(j, u);
        load_pair(row_ptr(w, r, nb, lane), row_ptr(w, r + 1, nb, lane), nb, lane, lane, &cur);
    }
    const float* xr = x + t * in;
    float back = 1.0f;  // staged value = x * 2^sx; the dot times 2^(14 - sx) is the true one
    if constexpr (O == Operand::kF32) {
        float* xs = reinterpret_cast<float*>(staged);
        for (int64_t i = threadIdx.x; i < in; i += kThreads) xs[i] = xr[i];
    } else {
        float m = 0.0f;
        for (int64_t i = threadIdx.x; i < in; i += kThreads) {
            const float v = pre_round<O>(xr[i]);
            m = fmaxf(m, isfinite(v) ? fabsf(v) : __int_as_float(0x7f800000));
        }
        m = block_max<kThreads>(m, red);
        int sx = 0;
        const bool finite = m <= 3.0e38f;
        if (m > 0.0f && finite) sx = min(100, max(-100, 13 - ilogbf(m)));
        back = finite ? pow2f(14 - sx) : __int_as_float(0x7fc00000);
        const float up = pow2f(sx);
        uint32_t* xs = reinterpret_cast<uint32_t*>(staged);
        for (int64_t qi = threadIdx.x; qi < in / 8; qi += kThreads) {
#pragma unroll
            for (int p = 0; p < 4; ++p) {
                const __half lo = __float2half_rn(pre_round<O>(xr[8 * qi + p]) * up);
                const __half hi = __float2half_rn(pre_round<O>(xr[8 * qi + p + 4]) * up);
                xs[4 * qi + p] = u32_of(__halves2half2(lo, hi));
            }
        }
    }
    __syncthreads();
    while (j < top_k) {
        int64_t jn = j, un = u;
        advance(&jn, &un);
        if (jn < top_k) {
            const int64_t r = gate_row(jn, un);
            load_pair(row_ptr(w, r, nb, lane), row_ptr(w, r + 1, nb, lane), nb, lane, lane, &next);
        }
        const int64_t pair = t * top_k + j;
        const int32_t e = ids[pair];
        const bool ok = e >= 0 && e < w.num_experts;
        if (!ok && lane == 0) report_error(error, kBadExpertId);
        const int64_t row = gate_row(j, u);
        const float2 d =
            pair_dot<O>(row_ptr(w, row, nb, lane), row_ptr(w, row + 1, nb, lane), nb, lane, cur, staged);
        const float gs = warp_sum(d.x) * back, us = warp_sum(d.y) * back;
        if (lane == 0) {
            float a = 0.0f;
            if (ok) {
                const float bg = w.bias != nullptr ? w.bias[row] : 0.0f;
                const float bu = w.bias != nullptr ? w.bias[row + 1] : 0.0f;
                a = swiglu(gs + bg, us + bu, limit, alpha);
            }
            if constexpr (O == Operand::kF32) {
                act_f[pair * I + u] = a;
            } else {
                act_h[pair * I + staged_index(u)] =
                    __half_as_ushort(__float2half_rn(pre_round<O>(a) * act_scale));
            }
        }
        cur = next;
        j = jn;
        u = un;
    }
}

// down + bias + routing weight + residual, persistent: grid (G, T), kDnWarps warps a block; block (b, t)
// stages the k activations of token t once, then warp w of the G kDnWarps warps of token t computes the
// output pairs o0 = 2q, q = w, w + G kDnWarps, ...: for each rank j in order the two rows o0, o0 + 1 of
// expert ids[t, j] against activation j (the loads of the next (q, j) step issued before the arithmetic
// of this one), and lane 0 adds out[t, o] += sum_j w[t, j] (dot_j + b2[e_j, o]) in rank order.
template <Operand O>
__global__ void __launch_bounds__(kDnWarps * 32, kBlocksPerSm)
    down_residual_kernel(const uint16_t* __restrict__ act_h, const float* __restrict__ act_f,
                         const int32_t* __restrict__ ids, const float* __restrict__ weights, Mx w, int top_k,
                         float act_back, float* __restrict__ out) {
    pdl_wait();  // pdl.cuh: nothing of an earlier kernel is touched before it
    pdl_launch_dependents();
    extern __shared__ uint4 sact[];  // token t's k activations: f16 [k I / 8] uint4, f32 [k I / 4] uint4
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t t = blockIdx.y, H = w.out, I = w.in, pairs_out = (H + 1) / 2;
    const int nb = static_cast<int>(I / 32);
    const int64_t stride = static_cast<int64_t>(gridDim.x) * kDnWarps;
    int64_t q = static_cast<int64_t>(blockIdx.x) * kDnWarps + warp;
    int j = 0;
    // Rows of step (q, j): o0 and o0 + 1 of expert ids[t, j] (o0 twice when o0 + 1 is past the end;
    // expert 0 for a bad id, reported by gate_up_swiglu; both dropped).
    auto step_rows = [&](int64_t qq, int jj, int64_t* r1) -> int64_t {
        const int32_t e = ids[t * top_k + jj];
        const int64_t o0 = 2 * qq;
        const int64_t r = e >= 0 && e < w.num_experts ? static_cast<int64_t>(e) * H + o0 : 0;
        *r1 = o0 + 1 < H ? r + 1 : r;
        return r;
    };
    RowPair cur, next;
    if (q < pairs_out) {
        int64_t r1;
        const int64_t r0 = step_rows(q, 0, &r1);
        load_pair(row_ptr(w, r0, nb, lane), row_ptr(w, r1, nb, lane), nb, lane, lane, &cur);
    }
    {
        const int64_t n16 = O == Operand::kF32 ? top_k * I / 4 : top_k * I / 8;
        const uint4* src = O == Operand::kF32 ? reinterpret_cast<const uint4*>(act_f + t * top_k * I)
                                              : reinterpret_cast<const uint4*>(act_h + t * top_k * I);
        for (int64_t i = threadIdx.x; i < n16; i += kDnWarps * 32) sact[i] = src[i];
    }
    __syncthreads();
    float y0 = 0.0f, y1 = 0.0f;
    while (q < pairs_out) {
        int64_t qn = q;
        int jn = j + 1;
        if (jn == top_k) {
            jn = 0;
            qn += stride;
        }
        if (qn < pairs_out) {
            int64_t r1;
            const int64_t r0 = step_rows(qn, jn, &r1);
            load_pair(row_ptr(w, r0, nb, lane), row_ptr(w, r1, nb, lane), nb, lane, lane, &next);
        }
        int64_t r1;
        const int64_t r0 = step_rows(q, j, &r1);
        const uint4* xs = O == Operand::kF32 ? sact + static_cast<int64_t>(j) * I / 4
                                             : sact + static_cast<int64_t>(j) * I / 8;
        const float2 d = pair_dot<O>(row_ptr(w, r0, nb, lane), row_ptr(w, r1, nb, lane), nb, lane, cur, xs);
        const float d0 = warp_sum(d.x) * act_back, d1 = warp_sum(d.y) * act_back;
        const int64_t o0 = 2 * q;
        const bool has1 = o0 + 1 < H;
        const int32_t e = ids[t * top_k + j];
        if (lane == 0 && e >= 0 && e < w.num_experts) {
            const float wt = weights[t * top_k + j];
            y0 += wt * (d0 + (w.bias != nullptr ? w.bias[r0] : 0.0f));
            if (has1) y1 += wt * (d1 + (w.bias != nullptr ? w.bias[r0 + 1] : 0.0f));
        }
        if (j == top_k - 1) {
            if (lane == 0) {
                out[t * H + o0] += y0;
                if (has1) out[t * H + o0 + 1] += y1;
            }
            y0 = 0.0f;
            y1 = 0.0f;
        }
        cur = next;
        q = qn;
        j = jn;
    }
}

Mx mx_of(const ops::ExpertWeights& e) {
    return {e.blocks, e.scales, static_cast<const float*>(e.bias.data), e.num_experts, e.out, e.in};
}

template <Operand O>
void launch_o(const ops::ExpertsArgs& a, void* act, const Launch& ctx) {
    const Mx gu = mx_of(a.gate_up), dn = mx_of(a.down);
    const int64_t T = a.num_tokens, I = a.gate_up.out / 2, H = a.down.out;
    const int k = static_cast<int>(a.top_k);
    const int sa = act_scale_exp(a.swiglu_limit);
    const float act_scale = std::ldexp(1.0f, sa), act_back = std::ldexp(1.0f, 14 - sa);
    const size_t eb = O == Operand::kF32 ? 4 : 2;  // bytes of a staged element
    auto* act_h = static_cast<uint16_t*>(act);
    auto* act_f = static_cast<float*>(act);
    // Persistent grids: at most the kBlocksPerSm blocks per multiprocessor that are resident together,
    // spread over the tokens (rounded down: one block more than fits is a second wave as long as the
    // first), at least one a token, never more than the token's items need. (The split changes no
    // result: see the kernels.)
    const int64_t resident = (ctx.sm_count > 0 ? ctx.sm_count : 80) * kBlocksPerSm;
    const int64_t per_token = std::max<int64_t>(1, resident / T);
    const int64_t g_gu = std::min<int64_t>(per_token, (k * I + kGuWarps - 1) / kGuWarps);
    const int64_t g_dn = std::min<int64_t>(per_token, ((H + 1) / 2 + kDnWarps - 1) / kDnWarps);
    launch_kernel(gate_up_swiglu_kernel<O>, dim3(static_cast<unsigned>(g_gu), static_cast<unsigned>(T)),
                  kGuWarps * 32, gu.in * eb, ctx, a.x, a.expert_ids, gu, k, a.swiglu_limit, a.swiglu_alpha,
                  act_scale, act_h, act_f, ctx.error);
    VOLT_CUDA_CHECK_LAUNCH();
    launch_kernel(down_residual_kernel<O>, dim3(static_cast<unsigned>(g_dn), static_cast<unsigned>(T)),
                  kDnWarps * 32, k * I * eb, ctx, act_h, act_f, a.expert_ids, a.expert_weights, dn, k,
                  O == Operand::kF32 ? 1.0f : act_back, a.out);
    VOLT_CUDA_CHECK_LAUNCH();
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool experts_gemv_eligible(const ops::ExpertsArgs& a) {
    const auto& g = a.gate_up;
    const auto& d = a.down;
    auto bias_ok = [](const ops::VectorWeight& b) {
        return b.data == nullptr || b.format == ops::Format::kF32;
    };
    return g.format == ops::Format::kMxfp4 && d.format == ops::Format::kMxfp4 && a.top_k >= 1 &&
           a.top_k <= kMaxTopK && g.in % 32 == 0 && d.in % 32 == 0 && g.out % 2 == 0 && g.out / 2 == d.in &&
           g.in == d.out && g.num_experts == d.num_experts && g.in * 4 <= 48 * 1024 &&
           a.top_k * d.in * 4 <= 48 * 1024 && aligned16(g.blocks) && aligned16(d.blocks) && bias_ok(g.bias) &&
           bias_ok(d.bias) && std::isfinite(a.swiglu_limit) && a.swiglu_limit >= 0.0f &&
           a.swiglu_limit <= 1000.0f && a.num_tokens <= 65535;
}

int64_t experts_gemv_act_bytes(int64_t pairs, int64_t inter) { return pairs * inter * 4; }

void launch_experts_gemv(const ops::ExpertsArgs& a, void* act, const Launch& ctx) {
    if (a.num_tokens <= 0) return;
    VOLT_CHECK(experts_gemv_eligible(a)) << "experts_gemv: shapes or formats it does not take";
    switch (ctx.operand) {
        case Operand::kF32:
            return launch_o<Operand::kF32>(a, act, ctx);
        case Operand::kF16:
            return launch_o<Operand::kF16>(a, act, ctx);
        case Operand::kBf16:
            return launch_o<Operand::kBf16>(a, act, ctx);
    }
}

}  // namespace volt::cuda
