#include "core/dtype.h"

#include <cmath>

namespace volt {

namespace {
struct DTypeInfo {
    DType type;
    std::string_view name;
    int size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::kF32, "F32", 4},   {DType::kF16, "F16", 2}, {DType::kBF16, "BF16", 2}, {DType::kU8, "U8", 1},
    {DType::kI8, "I8", 1},     {DType::kI32, "I32", 4}, {DType::kI64, "I64", 8},   {DType::kF64, "F64", 8},
    {DType::kBool, "BOOL", 1}, {DType::kU16, "U16", 2}, {DType::kI16, "I16", 2},   {DType::kU32, "U32", 4},
    {DType::kU64, "U64", 8},
};
}  // namespace

std::string_view dtype_name(DType t) {
    for (const auto& d : kDTypes)
        if (d.type == t) return d.name;
    return "?";
}

int dtype_size(DType t) {
    for (const auto& d : kDTypes)
        if (d.type == t) return d.size;
    return 0;
}

bool parse_dtype(std::string_view s, DType* out) {
    for (const auto& d : kDTypes) {
        if (d.name == s) {
            *out = d.type;
            return true;
        }
    }
    return false;
}

float f16_to_f32(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    const uint32_t man = h & 0x3ffu;
    if (exp == 0) {
        // Zero or subnormal: man * 2^-24, exact in f32.
        float v = std::ldexp(static_cast<float>(man), -24);
        return (sign != 0u) ? -v : v;
    }
    if (exp == 31) return bits_to_f32(sign | 0x7f800000u | (man << 13));
    return bits_to_f32(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t f32_to_f16(float f) {
    const uint32_t u = f32_to_bits(f);
    const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
    const uint32_t absu = u & 0x7fffffffu;
    if (absu > 0x7f800000u) return sign | 0x7e00u;   // NaN
    if (absu >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: inf
    if (absu < 0x38800000u) {
        // Result is subnormal in f16 (|f| < 2^-14): round |f| * 2^24 to an integer, ties to even.
        float v = bits_to_f32(absu) * 16777216.0f;
        return sign | static_cast<uint16_t>(std::nearbyint(v));
    }
    // Normal: rebias the exponent and round the 13 dropped mantissa bits to nearest even.
    uint32_t r = absu - 0x38000000u;
    r += 0xfffu + ((r >> 13) & 1u);
    return sign | static_cast<uint16_t>(r >> 13);
}

}  // namespace volt
