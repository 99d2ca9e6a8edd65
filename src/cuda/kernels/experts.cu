// Experts (spec §3.6; ops::ExpertsArgs; reference cpu::experts) in three straightforward kernels over
// the T*k (token, rank) pairs, e = expert_ids[pair]:
//   gate_up: act[pair, u] = swiglu(W1[e] row 2u . x + b1, W1[e] row 2u+1 . x + b1)   (interleaved rows)
//   down:    y[pair, o]  = W2[e] row o . act[pair] + b2[e, o]                         (bias per expert)
//   combine: out[t, o] += sum_j w[t, j] * y[t*k + j, o], j in rank order               (the residual)
// One warp per output row. MXFP4 rows (spec §2.3: blocks of 32 along `in`, 16 bytes low nibble first,
// one E8M0 scale): lane l takes blocks l, l + 32, ...; a block's 32 products (E2M1 decoded exactly by
// integer ops, x rounded to the operand format) are summed in element order, then multiplied by the
// block's scale in f32; dense bf16/f16 rows: lane l takes elements l, l + 32, .... Then the warp
// butterfly. Orders depend on the shape only. Clamped SwiGLU: gate <= limit, up in [-limit, limit],
// gate * sigmoid(alpha gate) * (up + 1) in f32.
#include "cuda/cuda_check.h"
#include "cuda/device_util.cuh"
#include "cuda/pdl.cuh"

namespace volt::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;

enum class EFmt : int { kMxfp4 = 0, kBf16 = 1, kF16 = 2 };

struct ExpertView {
    const uint8_t* blocks;  // kMxfp4 [E, out, in/32, 16]
    const uint8_t* scales;  // kMxfp4 [E, out, in/32]
    const void* w;          // dense [E, out, in]
    DeviceVector bias;      // [E * out]
    int64_t num_experts, out, in;
};

// E2M1 code -> f32 bits without a table: 0, 0.5, then 2^(e-1) * (1 + m/2) for e = 1..3.
__device__ __forceinline__ float fp4_value(uint32_t code) {
    const uint32_t mag = code & 7u;
    const uint32_t bits =
        mag < 2u ? (mag == 0u ? 0u : 0x3F000000u) : (((mag >> 1) + 126u) << 23) | ((mag & 1u) << 22);
    return __uint_as_float(bits | ((code & 8u) << 28));
}
// E8M0 byte -> 2^(byte - 127) (byte 0: the f32 subnormal 2^-127), as core/dtype.h e8m0_to_f32.
__device__ __forceinline__ float e8m0_value(uint32_t e) {
    return e == 0u ? __uint_as_float(0x00400000u) : __uint_as_float(e << 23);
}

// The dot product of row `row` (of E*out rows) with x [in]; every lane returns it.
template <EFmt F, Operand O>
__device__ __forceinline__ float row_dot(const ExpertView& w, int64_t row, const float* __restrict__ x,
                                         int lane) {
    float total = 0.0f;
    if constexpr (F == EFmt::kMxfp4) {
        const int64_t nb = w.in / 32;
        const uint8_t* blocks = w.blocks + row * nb * 16;
        const uint8_t* scales = w.scales + row * nb;
        for (int64_t g = lane; g < nb; g += 32) {
            const uint4 packed = *reinterpret_cast<const uint4*>(blocks + g * 16);
            const uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
            const float* xb = x + g * 32;
            float bs = 0.0f;
#pragma unroll
            for (int q = 0; q < 4; ++q) {
#pragma unroll
                for (int b = 0; b < 4; ++b) {
                    const uint32_t byte = (words[q] >> (8 * b)) & 0xffu;
                    const int e = 2 * (4 * q + b);  // byte j holds elements 2j (low) and 2j+1 (high)
                    bs += fp4_value(byte & 0xfu) * operand<O>(xb[e]);
                    bs += fp4_value(byte >> 4) * operand<O>(xb[e + 1]);
                }
            }
            total += bs * e8m0_value(scales[g]);
        }
    } else {
        const int64_t base = row * w.in;
        for (int64_t i = lane; i < w.in; i += 32) {
            const uint16_t h = static_cast<const uint16_t*>(w.w)[base + i];
            const float wv = F == EFmt::kBf16 ? bf16_to_f32(h) : f16_to_f32(h);
            total += operand<O>(x[i]) * wv;
        }
    }
    return warp_sum(total);
}

__device__ __forceinline__ float swiglu_oai(float gate, float up, float limit, float alpha) {
    const float g = fminf(gate, limit);
    const float u = fminf(fmaxf(up, -limit), limit);
    const float glu = g / (1.0f + expf(-alpha * g));
    return glu * (u + 1.0f);
}

// grid (pairs, ceil(I / 8)): act[pair, u].
template <EFmt F, Operand O>
__global__ void __launch_bounds__(kThreads)
    gate_up_kernel(const float* __restrict__ x, const int32_t* __restrict__ ids, ExpertView w, int64_t top_k,
                   float limit, float alpha, float* __restrict__ act, int* error) {
    pdl_wait();  // pdl.cuh: nothing of an earlier kernel is touched before it
    pdl_launch_dependents();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t pair = blockIdx.x;
    const int64_t I = w.out / 2;
    const int64_t u = static_cast<int64_t>(blockIdx.y) * kWarps + warp;
    if (u >= I) return;
    const int32_t e = ids[pair];
    if (e < 0 || e >= w.num_experts) {
        if (lane == 0) {
            report_error(error, kBadExpertId);
            act[pair * I + u] = 0.0f;
        }
        return;
    }
    const float* xr = x + (pair / top_k) * w.in;
    const int64_t gate_row = static_cast<int64_t>(e) * w.out + 2 * u;
    const float gate = row_dot<F, O>(w, gate_row, xr, lane) + load_vec(w.bias, gate_row);
    const float up = row_dot<F, O>(w, gate_row + 1, xr, lane) + load_vec(w.bias, gate_row + 1);
    if (lane == 0) act[pair * I + u] = swiglu_oai(gate, up, limit, alpha);
}

// grid (pairs, ceil(H / 8)): y[pair, o].
template <EFmt F, Operand O>
__global__ void __launch_bounds__(kThreads)
    down_kernel(const float* __restrict__ act, const int32_t* __restrict__ ids, ExpertView w,
                float* __restrict__ y) {
    pdl_wait();  // pdl.cuh: nothing of an earlier kernel is touched before it
    pdl_launch_dependents();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t pair = blockIdx.x;
    const int64_t o = static_cast<int64_t>(blockIdx.y) * kWarps + warp;
    if (o >= w.out) return;
    const int32_t e = ids[pair];
    if (e < 0 || e >= w.num_experts) {  // reported by gate_up_kernel
        if (lane == 0) y[pair * w.out + o] = 0.0f;
        return;
    }
    const int64_t row = static_cast<int64_t>(e) * w.out + o;
    const float v = row_dot<F, O>(w, row, act + pair * w.in, lane) + load_vec(w.bias, row);
    if (lane == 0) y[pair * w.out + o] = v;
}

// grid T: out[t, o] += sum_j weights[t, j] * y[t*k + j, o].
__global__ void combine_kernel(const float* __restrict__ y, const float* __restrict__ weights, int64_t top_k,
                               int64_t hidden, float* __restrict__ out) {
    pdl_wait();  // pdl.cuh: nothing of an earlier kernel is touched before it
    pdl_launch_dependents();
    const int64_t t = blockIdx.x;
    for (int64_t o = threadIdx.x; o < hidden; o += kThreads) {
        float s = 0.0f;
        for (int64_t j = 0; j < top_k; ++j) s += weights[t * top_k + j] * y[(t * top_k + j) * hidden + o];
        out[t * hidden + o] += s;
    }
}

ExpertView view_of(const ops::ExpertWeights& w) {
    return {w.blocks, w.scales, w.w, device_vector(w.bias), w.num_experts, w.out, w.in};
}

EFmt efmt_of(const ops::ExpertWeights& w, const char* which) {
    switch (w.format) {
        case ops::Format::kMxfp4:
            VOLT_CHECK(w.in % 32 == 0) << which << ": MXFP4 rows of " << w.in << " (not whole blocks of 32)";
            VOLT_CHECK(reinterpret_cast<uintptr_t>(w.blocks) % 16 == 0)
                << which << ": blocks not 16-byte aligned";
            return EFmt::kMxfp4;
        case ops::Format::kBf16:
            return EFmt::kBf16;
        case ops::Format::kF16:
            return EFmt::kF16;
        default:
            VOLT_CHECK(false) << "cuda experts: no " << ops::format_name(w.format) << " experts";
    }
    return EFmt::kMxfp4;
}

template <EFmt F, Operand O>
void launch_gate_up(const ops::ExpertsArgs& a, float* act, const Launch& ctx) {
    const int64_t pairs = a.num_tokens * a.top_k;
    const int64_t I = a.gate_up.out / 2;
    launch_kernel(gate_up_kernel<F, O>, dim3(static_cast<unsigned>(pairs), grid_for(I, kWarps)), kThreads, 0,
                  ctx, a.x, a.expert_ids, view_of(a.gate_up), a.top_k, a.swiglu_limit, a.swiglu_alpha, act,
                  ctx.error);
    VOLT_CUDA_CHECK_LAUNCH();
}

template <EFmt F, Operand O>
void launch_down(const ops::ExpertsArgs& a, const float* act, float* y, const Launch& ctx) {
    const int64_t pairs = a.num_tokens * a.top_k;
    launch_kernel(down_kernel<F, O>, dim3(static_cast<unsigned>(pairs), grid_for(a.down.out, kWarps)),
                  kThreads, 0, ctx, act, a.expert_ids, view_of(a.down), y);
    VOLT_CUDA_CHECK_LAUNCH();
}

template <EFmt F>
void gate_up_for(const ops::ExpertsArgs& a, float* act, const Launch& ctx) {
    switch (ctx.operand) {
        case Operand::kF32:
            return launch_gate_up<F, Operand::kF32>(a, act, ctx);
        case Operand::kF16:
            return launch_gate_up<F, Operand::kF16>(a, act, ctx);
        case Operand::kBf16:
            return launch_gate_up<F, Operand::kBf16>(a, act, ctx);
    }
}

template <EFmt F>
void down_for(const ops::ExpertsArgs& a, const float* act, float* y, const Launch& ctx) {
    switch (ctx.operand) {
        case Operand::kF32:
            return launch_down<F, Operand::kF32>(a, act, y, ctx);
        case Operand::kF16:
            return launch_down<F, Operand::kF16>(a, act, y, ctx);
        case Operand::kBf16:
            return launch_down<F, Operand::kBf16>(a, act, y, ctx);
    }
}

}  // namespace

void launch_experts(const ops::ExpertsArgs& a, float* act, float* y, const Launch& ctx) {
    if (a.num_tokens <= 0) return;
    const int64_t pairs = a.num_tokens * a.top_k;
    VOLT_CHECK(a.top_k > 0 && pairs < (int64_t{1} << 31)) << a.num_tokens << " tokens, top-" << a.top_k;
    VOLT_CHECK(a.gate_up.out % 2 == 0 && a.gate_up.out / 2 == a.down.in && a.gate_up.in == a.down.out &&
               a.gate_up.num_experts == a.down.num_experts)
        << "experts: gate_up [" << a.gate_up.out << ", " << a.gate_up.in << "], down [" << a.down.out << ", "
        << a.down.in << "]";
    VOLT_CHECK(grid_for(a.gate_up.out / 2, kWarps) <= 65535u && grid_for(a.down.out, kWarps) <= 65535u);
    switch (efmt_of(a.gate_up, "gate_up")) {
        case EFmt::kMxfp4:
            gate_up_for<EFmt::kMxfp4>(a, act, ctx);
            break;
        case EFmt::kBf16:
            gate_up_for<EFmt::kBf16>(a, act, ctx);
            break;
        case EFmt::kF16:
            gate_up_for<EFmt::kF16>(a, act, ctx);
            break;
    }
    switch (efmt_of(a.down, "down")) {
        case EFmt::kMxfp4:
            down_for<EFmt::kMxfp4>(a, act, y, ctx);
            break;
        case EFmt::kBf16:
            down_for<EFmt::kBf16>(a, act, y, ctx);
            break;
        case EFmt::kF16:
            down_for<EFmt::kF16>(a, act, y, ctx);
            break;
    }
    launch_kernel(combine_kernel, static_cast<unsigned>(a.num_tokens), kThreads, 0, ctx, y, a.expert_weights,
                  a.top_k, a.down.out, a.out);
    VOLT_CUDA_CHECK_LAUNCH();
}

}  // namespace volt::cuda
