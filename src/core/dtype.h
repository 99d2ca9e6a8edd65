// Scalar number formats of GPT-OSS checkpoints: bf16, IEEE f16, E8M0 block scales and FP4 E2M1 codes.
// Conversions are exact (bf16 -> f32, f16 -> f32, fp4 -> f32) or round-to-nearest-even (f32 -> bf16/f16).
// Source of the FP4/E8M0 tables: OCP Microscaling spec v1.0 and spec/gpt-oss.md §2.3. Tests:
// tests/unit/core/dtype_test.cc.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace volt {

enum class DType { kF32, kF16, kBF16, kU8, kI8, kI32, kI64, kF64, kBool, kU16, kI16, kU32, kU64 };

// safetensors spelling ("F32", "BF16", "U8", ...).
std::string_view dtype_name(DType t);
// Size of one element in bytes.
int dtype_size(DType t);
// Parses a safetensors dtype string; returns false when unknown.
bool parse_dtype(std::string_view s, DType* out);

inline float bits_to_f32(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline uint32_t f32_to_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

// bf16 is the top half of an f32: exact widening.
inline float bf16_to_f32(uint16_t h) { return bits_to_f32(static_cast<uint32_t>(h) << 16); }

// f32 -> bf16, round to nearest even; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
    uint32_t u = f32_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
}

// IEEE binary16 <-> f32 (exact widening; narrowing rounds to nearest even, overflows to inf).
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// FP4 E2M1 code (4 bits: sign, 2 exponent, 1 mantissa) to its value.
inline constexpr float kFp4Values[16] = {+0.0f, +0.5f, +1.0f, +1.5f, +2.0f, +3.0f, +4.0f, +6.0f,
                                         -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// E8M0 scale byte to its multiplier 2^(byte - 127). The checkpoints never hold 255 (NaN in OCP MX);
// like the references we do not special-case it.
inline float e8m0_to_f32(uint8_t e) {
    // 2^(e-127): normal f32 for e >= 1, for e == 0 the subnormal 2^-127.
    if (e == 0) return bits_to_f32(0x00400000u);
    return bits_to_f32(static_cast<uint32_t>(e) << 23);
}

}  // namespace volt
