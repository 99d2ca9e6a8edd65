// MXFP4 expert helpers shared by the decode GEMV (kernels/experts_gemv.cu) and the prompt-row GEMM
// (kernels/gemm_mma.cu): E2M1 codes to f16 by bit operations, the E8M0 scale, the staged element order,
// the clamped SwiGLU (spec §3.6) and the fixed power-of-two scale of the f16 activation. C++17, sm_70.
#pragma once

#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

namespace volt::cuda::mxfp4 {

__device__ __forceinline__ float pow2f(int e) { return __int_as_float((127 + e) << 23); }  // |e| <= 126

// Codes (8q+p, 8q+p+4) of word w as an f16x2 whose values are the E2M1 values times 2^-14 (exact: mag bits
// at 9..11, sign at 15).
template <int P>
__device__ __forceinline__ uint32_t e2m1_pair(uint32_t w) {
    if constexpr (P == 0) return ((w << 9) & 0x0E000E00u) | ((w << 12) & 0x80008000u);
    if constexpr (P == 1) return ((w << 5) & 0x0E000E00u) | ((w << 8) & 0x80008000u);
    if constexpr (P == 2) return ((w << 1) & 0x0E000E00u) | ((w << 4) & 0x80008000u);
    return ((w >> 3) & 0x0E000E00u) | (w & 0x80008000u);
}

// E8M0 scale byte -> f32 (2^(e - 127); e = 0 is 2^-127, a subnormal).
__device__ __forceinline__ float e8m0_f32(uint32_t e) {
    return e == 0u ? __uint_as_float(0x00400000u) : __uint_as_float(e << 23);
}

// u16 index of element i in the staged order: pairs (8q+p, 8q+p+4) adjacent, matching e2m1_pair.
__device__ __forceinline__ int64_t staged_index(int64_t i) {
    const int64_t p = i & 7;
    return (i & ~int64_t{7}) + (p < 4 ? 2 * p : 2 * (p - 4) + 1);
}

__device__ __forceinline__ float swiglu(float gate, float up, float limit, float alpha) {
    const float g = fminf(gate, limit);
    const float u = fminf(fmaxf(up, -limit), limit);
    return g / (1.0f + expf(-alpha * g)) * (u + 1.0f);
}

// The exponent sa of the f16 activation's fixed scale 2^sa: |a| <= limit (limit + 1) (the clamps), times
// 2^sa below 2^14.
inline int act_scale_exp(float limit) {
    const double bound = static_cast<double>(limit) * (static_cast<double>(limit) + 1.0) + 1.0;
    int e = 0;
    while (std::ldexp(1.0, e + 1) <= bound) ++e;  // 2^e <= bound < 2^(e+1)
    return 13 - e;
}

}  // namespace volt::cuda::mxfp4
