// Fast decode experts (issue 14; ops::ExpertsArgs, reference cpu::experts, checked by volt_op_test
// experts/experts_residual, timed by its --bench): MXFP4 weights streamed with 128-bit loads in two
// launches, no routing lists, every (token, rank) pair computed on its own so a pair's result never
// depends on the batch:
//   gate_up_swiglu: grid (T, ceil(I / 8)), one warp per SwiGLU unit u for all k pairs of token t: rows
//     2u (gate) and 2u+1 (up) of each expert, x of the token staged once in shared memory; writes the
//     activation a[pair, u] (f16 scaled by a fixed power of two, or f32 under --dtype float).
//   down_residual: grid (T, ceil(H / 8)), one warp per two outputs o, o+1 for all k pairs: the k dot
//     products with a[pair], then out[t, o] += sum_j w[t, j] (dot_j + b2[e_j, o]) in rank order.
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

namespace volt::cuda {
namespace {

constexpr int kGuWarps = 8;
constexpr int kDnWarps = 4;
constexpr int kDnOuts = 2;   // outputs per warp in down_residual
constexpr int kMaxTopK = 4;  // gpt-oss routes to 4; larger k falls back to experts_warp_mxfp4_3pass

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

__device__ __forceinline__ float pow2f(int e) { return __int_as_float((127 + e) << 23); }  // |e| <= 126

// Codes (8q+p, 8q+p+4) of word w as an f16x2 whose values are the E2M1 values times 2^-14.
template <int P>
__device__ __forceinline__ uint32_t e2m1_pair(uint32_t w) {
    if constexpr (P == 0) return ((w << 9) & 0x0E000E00u) | ((w << 12) & 0x80008000u);
    if constexpr (P == 1) return ((w << 5) & 0x0E000E00u) | ((w << 8) & 0x80008000u);
    if constexpr (P == 2) return ((w << 1) & 0x0E000E00u) | ((w << 4) & 0x80008000u);
    return ((w >> 3) & 0x0E000E00u) | (w & 0x80008000u);
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

__device__ __forceinline__ float e8m0_f32(uint32_t e) {
    return e == 0u ? __uint_as_float(0x00400000u) : __uint_as_float(e << 23);
}

__device__ __forceinline__ uint4 ldg16(const uint8_t* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

// u16 index of element i in the staged half2 layout.
__device__ __forceinline__ int64_t staged_index(int64_t i) {
    const int64_t p = i & 7;
    return (i & ~int64_t{7}) + (p < 4 ? 2 * p : 2 * (p - 4) + 1);
}

__device__ __forceinline__ float swiglu(float gate, float up, float limit, float alpha) {
    const float g = fminf(gate, limit);
    const float u = fminf(fmaxf(up, -limit), limit);
    return g / (1.0f + expf(-alpha * g)) * (u + 1.0f);
}

template <Operand O, int K>
__global__ void __launch_bounds__(kGuWarps * 32)
    gate_up_swiglu_kernel(const float* __restrict__ x, const int32_t* __restrict__ ids, Mx w, int top_k,
                          float limit, float alpha, float act_scale, uint16_t* __restrict__ act_h,
                          float* __restrict__ act_f, int* error) {
    extern __shared__ uint4 staged[];  // f16: [in/8] uint4 (half2 pairs); f32: [in/4] uint4 (floats)
    __shared__ float red[32];
    constexpr int kThreads = kGuWarps * 32;
    const int64_t t = blockIdx.x, in = w.in, nb = in / 32, I = w.out / 2;
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
        for (int64_t q = threadIdx.x; q < in / 8; q += kThreads) {
#pragma unroll
            for (int p = 0; p < 4; ++p) {
                const __half lo = __float2half_rn(pre_round<O>(xr[8 * q + p]) * up);
                const __half hi = __float2half_rn(pre_round<O>(xr[8 * q + p + 4]) * up);
                xs[4 * q + p] = u32_of(__halves2half2(lo, hi));
            }
        }
    }
    __syncthreads();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t u = static_cast<int64_t>(blockIdx.y) * kGuWarps + warp;
    if (u >= I) return;
    const int64_t row_bytes = nb * 16;
    int64_t row[K];  // the gate row of pair j (the up row follows it)
    bool ok[K];
#pragma unroll
    for (int j = 0; j < K; ++j) {
        ok[j] = false;
        row[j] = 0;
        if (j < top_k) {
            const int32_t e = ids[t * top_k + j];
            ok[j] = e >= 0 && e < w.num_experts;
            if (!ok[j] && lane == 0) report_error(error, kBadExpertId);
            row[j] = ok[j] ? static_cast<int64_t>(e) * w.out + 2 * u : 0;
        }
    }
    float ga[K], ua[K];
#pragma unroll
    for (int j = 0; j < K; ++j) ga[j] = ua[j] = 0.0f;
    for (int64_t g = lane; g < nb; g += 32) {
        if constexpr (O == Operand::kF32) {
            const float* xb = reinterpret_cast<const float*>(staged) + 32 * g;
#pragma unroll
            for (int j = 0; j < K; ++j) {
                if (j >= top_k || !ok[j]) continue;
                const uint8_t* b0 = w.blocks + row[j] * row_bytes + 16 * g;
                const uint4 qa = ldg16(b0), qb = ldg16(b0 + row_bytes);
                const float sa = e8m0_f32(__ldg(w.scales + row[j] * nb + g));
                const float sb = e8m0_f32(__ldg(w.scales + (row[j] + 1) * nb + g));
                ga[j] += block_dot_f(qa, xb) * sa;
                ua[j] += block_dot_f(qb, xb) * sb;
            }
        } else {
            const uint4* xb = staged + 4 * g;
            const uint4 x4[4] = {xb[0], xb[1], xb[2], xb[3]};
#pragma unroll
            for (int j = 0; j < K; ++j) {
                if (j >= top_k || !ok[j]) continue;
                const uint8_t* b0 = w.blocks + row[j] * row_bytes + 16 * g;
                const uint4 qa = ldg16(b0), qb = ldg16(b0 + row_bytes);
                const float sa = e8m0_f32(__ldg(w.scales + row[j] * nb + g));
                const float sb = e8m0_f32(__ldg(w.scales + (row[j] + 1) * nb + g));
                ga[j] += block_dot_h(qa, x4) * 0x1p112f * sa;
                ua[j] += block_dot_h(qb, x4) * 0x1p112f * sb;
            }
        }
    }
#pragma unroll
    for (int j = 0; j < K; ++j) {
        if (j >= top_k) break;
        const float gs = warp_sum(ga[j]) * back, us = warp_sum(ua[j]) * back;
        if (lane != 0) continue;
        const int64_t pair = t * top_k + j;
        float a = 0.0f;
        if (ok[j]) {
            const float bg = w.bias != nullptr ? w.bias[row[j]] : 0.0f;
            const float bu = w.bias != nullptr ? w.bias[row[j] + 1] : 0.0f;
            a = swiglu(gs + bg, us + bu, limit, alpha);
        }
        if constexpr (O == Operand::kF32) {
            act_f[pair * I + u] = a;
        } else {
            act_h[pair * I + staged_index(u)] =
                __half_as_ushort(__float2half_rn(pre_round<O>(a) * act_scale));
        }
    }
}

template <Operand O, int K>
__global__ void __launch_bounds__(kDnWarps * 32)
    down_residual_kernel(const uint16_t* __restrict__ act_h, const float* __restrict__ act_f,
                         const int32_t* __restrict__ ids, const float* __restrict__ weights, Mx w, int top_k,
                         float act_back, float* __restrict__ out) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t t = blockIdx.x, H = w.out, I = w.in, nb = I / 32;
    const int64_t o0 = (static_cast<int64_t>(blockIdx.y) * kDnWarps + warp) * kDnOuts;
    if (o0 >= H) return;
    const bool has1 = o0 + 1 < H;
    const int64_t row_bytes = nb * 16;
    int64_t row[K];
    bool ok[K];
#pragma unroll
    for (int j = 0; j < K; ++j) {
        ok[j] = false;
        row[j] = 0;
        if (j < top_k) {
            const int32_t e = ids[t * top_k + j];  // a bad id was reported by gate_up_swiglu
            ok[j] = e >= 0 && e < w.num_experts;
            row[j] = ok[j] ? static_cast<int64_t>(e) * H + o0 : 0;
        }
    }
    float acc0[K], acc1[K];
#pragma unroll
    for (int j = 0; j < K; ++j) acc0[j] = acc1[j] = 0.0f;
    for (int64_t g = lane; g < nb; g += 32) {
#pragma unroll
        for (int j = 0; j < K; ++j) {
            if (j >= top_k || !ok[j]) continue;
            const int64_t pair = t * top_k + j;
            const uint8_t* b0 = w.blocks + row[j] * row_bytes + 16 * g;
            const uint4 q0 = ldg16(b0);
            const uint4 q1 = has1 ? ldg16(b0 + row_bytes) : make_uint4(0, 0, 0, 0);
            const float s0 = e8m0_f32(__ldg(w.scales + row[j] * nb + g));
            const float s1 = has1 ? e8m0_f32(__ldg(w.scales + (row[j] + 1) * nb + g)) : 0.0f;
            if constexpr (O == Operand::kF32) {
                const float* ab = act_f + pair * I + 32 * g;
                acc0[j] += block_dot_f(q0, ab) * s0;
                acc1[j] += block_dot_f(q1, ab) * s1;
            } else {
                const uint4* ab = reinterpret_cast<const uint4*>(act_h + pair * I) + 4 * g;
                const uint4 a4[4] = {ab[0], ab[1], ab[2], ab[3]};
                acc0[j] += block_dot_h(q0, a4) * 0x1p112f * s0;
                acc1[j] += block_dot_h(q1, a4) * 0x1p112f * s1;
            }
        }
    }
    float y0 = 0.0f, y1 = 0.0f;
#pragma unroll
    for (int j = 0; j < K; ++j) {
        if (j >= top_k) break;
        const float d0 = warp_sum(acc0[j]) * act_back, d1 = warp_sum(acc1[j]) * act_back;
        if (!ok[j]) continue;
        const float wt = weights[t * top_k + j];
        y0 += wt * (d0 + (w.bias != nullptr ? w.bias[row[j]] : 0.0f));
        if (has1) y1 += wt * (d1 + (w.bias != nullptr ? w.bias[row[j] + 1] : 0.0f));
    }
    if (lane == 0) {
        out[t * H + o0] += y0;
        if (has1) out[t * H + o0 + 1] += y1;
    }
}

Mx mx_of(const ops::ExpertWeights& e) {
    return {e.blocks, e.scales, static_cast<const float*>(e.bias.data), e.num_experts, e.out, e.in};
}

// The fixed pre-scale of the SwiGLU output as an f16 operand: |a| <= limit (limit + 1) (the clamps), times
// 2^sa below 2^14.
int act_scale_exp(float limit) {
    const double bound = static_cast<double>(limit) * (static_cast<double>(limit) + 1.0) + 1.0;
    int e = 0;
    while (std::ldexp(1.0, e + 1) <= bound) ++e;  // 2^e <= bound < 2^(e+1)
    return 13 - e;
}

template <Operand O, int K>
void launch_k(const ops::ExpertsArgs& a, void* act, const Launch& ctx) {
    const Mx gu = mx_of(a.gate_up), dn = mx_of(a.down);
    const int64_t T = a.num_tokens, I = a.gate_up.out / 2, H = a.down.out;
    const int sa = act_scale_exp(a.swiglu_limit);
    const float act_scale = std::ldexp(1.0f, sa), act_back = std::ldexp(1.0f, 14 - sa);
    const size_t smem = O == Operand::kF32 ? gu.in * 4 : gu.in * 2;
    auto* act_h = static_cast<uint16_t*>(act);
    auto* act_f = static_cast<float*>(act);
    gate_up_swiglu_kernel<O, K>
        <<<dim3(static_cast<unsigned>(T), grid_for(I, kGuWarps)), kGuWarps * 32, smem, ctx.stream>>>(
            a.x, a.expert_ids, gu, static_cast<int>(a.top_k), a.swiglu_limit, a.swiglu_alpha, act_scale,
            act_h, act_f, ctx.error);
    VOLT_CUDA_CHECK_LAUNCH();
    down_residual_kernel<O, K>
        <<<dim3(static_cast<unsigned>(T), grid_for(H, kDnWarps * kDnOuts)), kDnWarps * 32, 0, ctx.stream>>>(
            act_h, act_f, a.expert_ids, a.expert_weights, dn, static_cast<int>(a.top_k),
            O == Operand::kF32 ? 1.0f : act_back, a.out);
    VOLT_CUDA_CHECK_LAUNCH();
}

template <Operand O>
void launch_o(const ops::ExpertsArgs& a, void* act, const Launch& ctx) {
    if (a.top_k <= 1) return launch_k<O, 1>(a, act, ctx);
    if (a.top_k <= 2) return launch_k<O, 2>(a, act, ctx);
    return launch_k<O, 4>(a, act, ctx);
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
               grid_for(a.down.out, kDnWarps * kDnOuts) <= 65535u);
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
