// Fast decode experts (issue 14; ops::ExpertsArgs, reference cpu::experts, checked by volt_op_test
// experts/experts_residual, timed by its --bench): MXFP4 weights streamed with 128-bit loads in two
// launches, no routing lists, every (token, rank) pair computed on its own so a pair's result never
// depends on the batch:
//   gate_up_swiglu: grid (T, ceil(I / 16), k), one warp per SwiGLU unit u of pair (t, j): rows 2u (gate)
//     and 2u+1 (up) of expert ids[t, j], x of the token staged once per block in shared memory; writes
//     the activation a[pair, u] (f16 scaled by a fixed power of two, or f32 under --dtype float).
//   down_residual: grid (T, ceil(H / 4)), 2 k warps: warp (p, j) the two outputs o, o+1 of pair (t, j);
//     then out[t, o] += sum_j w[t, j] (dot_j + b2[e_j, o]) in rank order through shared memory.
// A lane issues the loads of all its blocks of a row (3 for the gpt-oss shapes) before using any.
// Lanes take the 16-byte MXFP4 blocks g = lane, lane + 32, ... of a row (spec §2.3: 32 E2M1 codes, low
// nibble first, one E8M0 scale). f16/bf16 operands: codes become f16 by bit operations (E2M1 value x
// 2^-14, exact: mag bits at 9..11, sign at 15), activations are pre-scaled by a power of two so nothing
// overflows (ops.h BUG-22) and stored as half2 pairs (x[8q+p], x[8q+p+4]) matching the nibble order of
// word q; each pair of words is one chain of 8 HFMA2 (f16 products, 8-term f16 sums), then the chain
// goes to f32 (exact bit conversion) and the block's f32 sum is multiplied by its scale. f32 operands:
// exact f32 products summed in element order (the reference mode). Then a fixed warp butterfly.
#include <cuda_fp16.h>

#include <cmath>
#include <cstring>

#include "cuda/cuda_check.h"
#include "cuda/device_util.cuh"
#include "cuda/mxfp4.cuh"

namespace volt::cuda {
namespace {

using mxfp4::act_scale_exp;
using mxfp4::e2m1_pair;
using mxfp4::e8m0_f32;
using mxfp4::pow2f;
using mxfp4::staged_index;
using mxfp4::swiglu;

constexpr int kGuWarps = 16;  // SwiGLU units per gate_up block (a warp each)
constexpr int kDnPairs = 2;   // output pairs per down block (k warps each)
constexpr int kMaxTopK = 4;   // gpt-oss routes to 4; larger k falls back to experts_warp_mxfp4_3pass

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

__device__ __forceinline__ uint4 ldg16(const uint8_t* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

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
__device__ __forceinline__ void load_row(const Mx& w, int64_t row, int64_t nb, int64_t g0, RowLoads* r) {
    const uint8_t* blocks = w.blocks + row * nb * 16;
    const uint8_t* scales = w.scales + row * nb;
#pragma unroll
    for (int i = 0; i < kIt; ++i) {
        const int64_t g = g0 + 32 * i;
        if (g < nb) {
            r->q[i] = ldg16(blocks + 16 * g);
            r->s[i] = __ldg(scales + g);
        }
    }
}

// gate_up + SwiGLU: grid (T, ceil(I / kGuWarps), k), one warp per SwiGLU unit u of pair (t, j): rows 2u
// (gate) and 2u + 1 (up) of expert ids[t, j]; x of the token staged once per block in shared memory
// (the rows' first loads are in flight meanwhile).
template <Operand O>
__global__ void __launch_bounds__(kGuWarps * 32, 2)
    gate_up_swiglu_kernel(const float* __restrict__ x, const int32_t* __restrict__ ids, Mx w, int top_k,
                          float limit, float alpha, float act_scale, uint16_t* __restrict__ act_h,
                          float* __restrict__ act_f, int* error) {
    extern __shared__ uint4 staged[];  // f16: [in/8] uint4 (half2 pairs); f32: [in/4] uint4 (floats)
    __shared__ float red[32];
    constexpr int kThreads = kGuWarps * 32;
    const int64_t t = blockIdx.x, j = blockIdx.z, in = w.in, nb = in / 32, I = w.out / 2;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t u = static_cast<int64_t>(blockIdx.y) * kGuWarps + warp;
    const bool active = u < I;
    const int64_t pair = t * top_k + j;
    const int32_t e = ids[pair];
    const bool ok = e >= 0 && e < w.num_experts;  // a bad id computes expert 0, dropped
    if (!ok && lane == 0 && active) report_error(error, kBadExpertId);
    const int64_t row = ok && active ? static_cast<int64_t>(e) * w.out + 2 * u : 0;
    RowLoads rg, ru;
    if (active) {
        load_row(w, row, nb, lane, &rg);
        load_row(w, row + 1, nb, lane, &ru);
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
    if (!active) return;
    float ga = 0.0f, ua = 0.0f;
    for (int64_t g0 = lane; g0 < nb; g0 += 32 * kIt) {
        if (g0 != lane) {
            load_row(w, row, nb, g0, &rg);
            load_row(w, row + 1, nb, g0, &ru);
        }
#pragma unroll
        for (int i = 0; i < kIt; ++i) {
            const int64_t g = g0 + 32 * i;
            if (g >= nb) break;
            if constexpr (O == Operand::kF32) {
                const float* xb = reinterpret_cast<const float*>(staged) + 32 * g;
                ga += block_dot_f(rg.q[i], xb) * e8m0_f32(rg.s[i]);
                ua += block_dot_f(ru.q[i], xb) * e8m0_f32(ru.s[i]);
            } else {
                const uint4* xb = staged + 4 * g;
                const uint4 x4[4] = {xb[0], xb[1], xb[2], xb[3]};
                ga += block_dot_h(rg.q[i], x4) * 0x1p112f * e8m0_f32(rg.s[i]);
                ua += block_dot_h(ru.q[i], x4) * 0x1p112f * e8m0_f32(ru.s[i]);
            }
        }
    }
    const float gs = warp_sum(ga) * back, us = warp_sum(ua) * back;
    if (lane != 0) return;
    float a = 0.0f;
    if (ok) {
        const float bg = w.bias != nullptr ? w.bias[row] : 0.0f;
        const float bu = w.bias != nullptr ? w.bias[row + 1] : 0.0f;
        a = swiglu(gs + bg, us + bu, limit, alpha);
    }
    if constexpr (O == Operand::kF32) {
        act_f[pair * I + u] = a;
    } else {
        act_h[pair * I + staged_index(u)] = __half_as_ushort(__float2half_rn(pre_round<O>(a) * act_scale));
    }
}

// down + bias + routing weight + residual: grid (T, ceil(H / (2 kDnPairs))), k x kDnPairs warps: warp
// (p, j) computes outputs o0 = 2 (blockIdx.y kDnPairs + p) and o0 + 1 of pair (t, j); then one lane adds
// out[t, o] += sum_j w[t, j] (dot_j + b2[e_j, o]) in rank order from shared memory.
template <Operand O>
__global__ void __launch_bounds__(kDnPairs* kMaxTopK * 32, 3)
    down_residual_kernel(const uint16_t* __restrict__ act_h, const float* __restrict__ act_f,
                         const int32_t* __restrict__ ids, const float* __restrict__ weights, Mx w, int top_k,
                         float act_back, float* __restrict__ out) {
    __shared__ float red[kDnPairs][kMaxTopK][2];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int p = warp / top_k, j = warp % top_k;
    const int64_t t = blockIdx.x, H = w.out, I = w.in, nb = I / 32;
    const int64_t o0 = (static_cast<int64_t>(blockIdx.y) * kDnPairs + p) * 2;
    const bool active = o0 < H, has1 = o0 + 1 < H;
    const int64_t pair = t * top_k + j;
    const int32_t e = ids[pair];  // a bad id was reported by gate_up_swiglu
    const bool ok = e >= 0 && e < w.num_experts;
    const int64_t row = ok && active ? static_cast<int64_t>(e) * H + o0 : 0;
    const int64_t row1 = has1 ? row + 1 : row;  // o0 twice when o0 + 1 is past the end (dropped)
    float acc0 = 0.0f, acc1 = 0.0f;
    if (active) {
        RowLoads r0, r1;
        for (int64_t g0 = lane; g0 < nb; g0 += 32 * kIt) {
            load_row(w, row, nb, g0, &r0);
            load_row(w, row1, nb, g0, &r1);
#pragma unroll
            for (int i = 0; i < kIt; ++i) {
                const int64_t g = g0 + 32 * i;
                if (g >= nb) break;
                const float s0 = e8m0_f32(r0.s[i]), s1 = e8m0_f32(r1.s[i]);
                if constexpr (O == Operand::kF32) {
                    const float* ab = act_f + pair * I + 32 * g;
                    acc0 += block_dot_f(r0.q[i], ab) * s0;
                    acc1 += block_dot_f(r1.q[i], ab) * s1;
                } else {
                    const uint4* ab = reinterpret_cast<const uint4*>(act_h + pair * I) + 4 * g;
                    const uint4 a4[4] = {ab[0], ab[1], ab[2], ab[3]};
                    acc0 += block_dot_h(r0.q[i], a4) * 0x1p112f * s0;
                    acc1 += block_dot_h(r1.q[i], a4) * 0x1p112f * s1;
                }
            }
        }
    }
    const float d0 = warp_sum(acc0) * act_back, d1 = warp_sum(acc1) * act_back;
    if (lane == 0) {
        red[p][j][0] = d0;
        red[p][j][1] = d1;
    }
    __syncthreads();
    if (j != 0 || lane != 0 || !active) return;
    float y0 = 0.0f, y1 = 0.0f;
    for (int jj = 0; jj < top_k; ++jj) {
        const int32_t ej = ids[t * top_k + jj];
        if (ej < 0 || ej >= w.num_experts) continue;
        const float wt = weights[t * top_k + jj];
        const int64_t rj = static_cast<int64_t>(ej) * H + o0;
        y0 += wt * (red[p][jj][0] + (w.bias != nullptr ? w.bias[rj] : 0.0f));
        if (has1) y1 += wt * (red[p][jj][1] + (w.bias != nullptr ? w.bias[rj + 1] : 0.0f));
    }
    out[t * H + o0] += y0;
    if (has1) out[t * H + o0 + 1] += y1;
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
    const size_t smem = O == Operand::kF32 ? gu.in * 4 : gu.in * 2;
    auto* act_h = static_cast<uint16_t*>(act);
    auto* act_f = static_cast<float*>(act);
    gate_up_swiglu_kernel<O>
        <<<dim3(static_cast<unsigned>(T), grid_for(I, kGuWarps), static_cast<unsigned>(k)), kGuWarps * 32,
           smem, ctx.stream>>>(a.x, a.expert_ids, gu, k, a.swiglu_limit, a.swiglu_alpha, act_scale, act_h,
                               act_f, ctx.error);
    VOLT_CUDA_CHECK_LAUNCH();
    down_residual_kernel<O>
        <<<dim3(static_cast<unsigned>(T), grid_for(H, 2 * kDnPairs)), kDnPairs * k * 32, 0, ctx.stream>>>(
            act_h, act_f, a.expert_ids, a.expert_weights, dn, k, O == Operand::kF32 ? 1.0f : act_back, a.out);
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
           g.in == d.out && g.num_experts == d.num_experts && g.in * 4 <= 48 * 1024 && aligned16(g.blocks) &&
           aligned16(d.blocks) && bias_ok(g.bias) && bias_ok(d.bias) && std::isfinite(a.swiglu_limit) &&
           a.swiglu_limit >= 0.0f && a.swiglu_limit <= 1000.0f && a.num_tokens < 65536 * 1024;
}

int64_t experts_gemv_act_bytes(int64_t pairs, int64_t inter) { return pairs * inter * 4; }

void launch_experts_gemv(const ops::ExpertsArgs& a, void* act, const Launch& ctx) {
    if (a.num_tokens <= 0) return;
    VOLT_CHECK(experts_gemv_eligible(a)) << "experts_gemv: shapes or formats it does not take";
    VOLT_CHECK(a.num_tokens <= 2147483647 && grid_for(a.gate_up.out / 2, kGuWarps) <= 65535u &&
               grid_for(a.down.out, 2 * kDnPairs) <= 65535u);
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
