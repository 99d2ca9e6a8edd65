// The int8 KV-cache format (--kv-cache-dtype int8; docs/quantization.md "KV cache"): every head vector
// v[0, d) of K or V (one token, one KV head) is stored as int8 codes q[0, d) and one f32 scale s,
//   s = max_i |v_i| / 127                        (f32 division)
//   q_i = clamp(round_half_even(v_i / s), -127, 127)   (f32 division, rounded in the default mode)
// and read back as q_i * s (one f32 product). An all-zero vector, or one so small that s underflows to
// 0, stores s = 0 and q = 0. Error: |q_i s - v_i| <= s / 2 in exact arithmetic; with the f32 roundings
// of v_i / s and of q_i * s it is at most s (1/2 + 254 u), u = 2^-24 (derivation in the doc). Inputs are
// finite and below 2^127 in magnitude (activations are at most ~1e6, ops/ops.h; near FLT_MAX, q s may
// round to inf). Header-only and C++17 (the CUDA sources may include it); the CPU backend's
// kv_write and attention use these functions, so they are the format's one definition. Tests:
// tests/unit/cpu/kv_int8_test.cc.
#pragma once

#include <cmath>
#include <cstdint>

namespace volt::ops {

// Quantizes v[0, d) into q[0, d) and *scale (see above).
// A vector holding NaN or inf stores q = 0 and s = NaN, so it reads back as NaN and the engine's
// non-finite check fails the request (an int8 code would otherwise turn NaN into a finite, wrong value).
inline void kv_int8_quantize(const float* v, int64_t d, int8_t* q, float* scale) {
    float amax = 0.0f;
    bool finite = true;
    for (int64_t i = 0; i < d; ++i) {
        finite = finite && std::isfinite(v[i]);
        amax = std::fmax(amax, std::fabs(v[i]));
    }
    const float s = finite ? amax / 127.0f : std::nanf("");
    *scale = s;
    if (!finite || s == 0.0f) {
        for (int64_t i = 0; i < d; ++i) q[i] = 0;
        return;
    }
    for (int64_t i = 0; i < d; ++i) {
        const float r = std::nearbyint(v[i] / s);  // FE_TONEAREST: ties to even
        q[i] = static_cast<int8_t>(std::fmin(127.0f, std::fmax(-127.0f, r)));
    }
}

// out[0, d) = q[0, d) * scale in f32 (each product rounded once).
inline void kv_int8_dequantize(const int8_t* q, float scale, int64_t d, float* out) {
    for (int64_t i = 0; i < d; ++i) out[i] = static_cast<float>(q[i]) * scale;
}

}  // namespace volt::ops
