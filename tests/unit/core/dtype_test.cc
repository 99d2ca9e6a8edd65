// Exact conversions of the checkpoint number formats, against values computed by hand from the
// IEEE 754 / bfloat16 / OCP MX definitions.
#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>

namespace volt {

TEST(DType, Bf16WidensExactly) {
    EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
    EXPECT_EQ(bf16_to_f32(0xc000), -2.0f);
    EXPECT_EQ(bf16_to_f32(0x3fc0), 1.5f);
    EXPECT_EQ(bf16_to_f32(0x0001), std::ldexp(1.0f, -133));  // smallest subnormal
}

TEST(DType, Bf16RoundsToNearestEven) {
    // 1 + 2^-8 is exactly half-way between bf16 1.0 (0x3f80) and 1 + 2^-7 (0x3f81): ties to even.
    EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
    // 1 + 3*2^-8 is half-way between 0x3f81 and 0x3f82: ties to even -> 0x3f82.
    EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
    EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3f81);
    EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(DType, F16RoundTrip) {
    EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
    EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
    EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
    EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
    EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // rounds up to infinity
    EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);
    EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
    // 1 + 2^-11 ties between 1.0 and 1 + 2^-10 -> even (1.0).
    EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
    for (uint32_t h = 0; h < 0x7c00; ++h) EXPECT_EQ(f32_to_f16(f16_to_f32(static_cast<uint16_t>(h))), h);
}

TEST(DType, Fp4AndE8m0Tables) {
    // value = (-1)^s * (e == 0 ? 0.5 m : 2^(e-1) (1 + m/2)), spec §2.3.
    for (int code = 0; code < 16; ++code) {
        int s = code >> 3, e = (code >> 1) & 3, m = code & 1;
        float v = e == 0 ? 0.5f * m : std::ldexp(1.0f + m / 2.0f, e - 1);
        EXPECT_EQ(kFp4Values[code], s ? -v : v) << code;
        EXPECT_EQ(std::signbit(kFp4Values[code]), s == 1) << code;
    }
    EXPECT_EQ(e8m0_to_f32(127), 1.0f);
    EXPECT_EQ(e8m0_to_f32(130), 8.0f);
    EXPECT_EQ(e8m0_to_f32(1), std::ldexp(1.0f, -126));
    EXPECT_EQ(e8m0_to_f32(0), std::ldexp(1.0f, -127));
    EXPECT_EQ(e8m0_to_f32(254), std::ldexp(1.0f, 127));
}

TEST(DType, SafetensorsNames) {
    DType t;
    ASSERT_TRUE(parse_dtype("BF16", &t));
    EXPECT_EQ(t, DType::kBF16);
    EXPECT_EQ(dtype_size(t), 2);
    EXPECT_FALSE(parse_dtype("bf16", &t));
    EXPECT_EQ(dtype_name(DType::kU8), "U8");
}

}  // namespace volt
