// MXFP4 decode and quantizer against values computed by hand from spec/gpt-oss.md §2.3/§8 and the OCP MX
// v1.0 definitions, round trips of exactly representable blocks, and properties checked by brute force
// over the 16 E2M1 codes (nearest value, scale exponent) on random blocks.
#include "quant/mxfp4.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace volt::quant {
namespace {

// The E2M1 values written out from the definition (spec §2.3): independent of core/dtype.h's table.
constexpr float kE2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

float code_value(uint8_t code) { return (code & 8 ? -1.0f : 1.0f) * kE2m1[code & 7]; }

TEST(Mxfp4, DecodesSpecVectors) {
    uint8_t codes[16] = {0x21, 0xF8};
    float out[32];
    decode_mxfp4_block(codes, 127, out);
    EXPECT_EQ(out[0], 0.5f);  // low nibble 1 -> +0.5, element 0
    EXPECT_EQ(out[1], 1.0f);  // high nibble 2 -> +1.0, element 1
    EXPECT_EQ(out[2], 0.0f);  // low nibble 8 -> -0
    EXPECT_TRUE(std::signbit(out[2]));
    EXPECT_EQ(out[3], -6.0f);  // high nibble F -> -6
    for (int i = 4; i < 32; ++i) EXPECT_EQ(out[i], 0.0f) << i;
    decode_mxfp4_block(codes, 130, out);  // x 2^3
    EXPECT_EQ(out[0], 4.0f);
    EXPECT_EQ(out[1], 8.0f);
    EXPECT_EQ(out[3], -48.0f);
    decode_mxfp4_block(codes, 0, out);  // 2^-127, a subnormal multiplier
    EXPECT_EQ(out[1], std::ldexp(1.0f, -127));
    EXPECT_EQ(out[3], -6.0f * std::ldexp(1.0f, -127));
}

TEST(Mxfp4, DecodesARowBlockByBlock) {
    std::vector<uint8_t> codes(32, 0);
    codes[0] = 0x21;
    codes[16 + 15] = 0x7F;  // block 1: element 30 = low nibble F (-6), element 31 = high nibble 7 (+6)
    const uint8_t scales[2] = {127, 125};
    float out[64];
    decode_mxfp4_row(codes.data(), scales, 64, out);
    EXPECT_EQ(out[0], 0.5f);
    EXPECT_EQ(out[1], 1.0f);
    EXPECT_EQ(out[62], -6.0f * 0.25f);
    EXPECT_EQ(out[63], 6.0f * 0.25f);
    EXPECT_EQ(out[33], 0.0f);
}

TEST(Mxfp4, E2m1RoundsHalfToEvenAndSaturates) {
    // Exact grid points.
    for (uint8_t c = 0; c < 16; ++c) {
        if (c == 8) continue;  // -0 encodes as 8 as well, checked below
        EXPECT_EQ(encode_e2m1(code_value(c)), c) << int(c);
    }
    // Ties go to the code with mantissa bit 0 (the "even" one).
    EXPECT_EQ(encode_e2m1(0.25f), 0);   // 0 vs 0.5
    EXPECT_EQ(encode_e2m1(0.75f), 2);   // 0.5 vs 1.0
    EXPECT_EQ(encode_e2m1(1.25f), 2);   // 1.0 vs 1.5
    EXPECT_EQ(encode_e2m1(1.75f), 4);   // 1.5 vs 2.0
    EXPECT_EQ(encode_e2m1(2.5f), 4);    // 2.0 vs 3.0
    EXPECT_EQ(encode_e2m1(3.5f), 6);    // 3.0 vs 4.0
    EXPECT_EQ(encode_e2m1(5.0f), 6);    // 4.0 vs 6.0
    EXPECT_EQ(encode_e2m1(-5.0f), 14);  // sign kept
    // Just past a tie rounds to the nearer value.
    EXPECT_EQ(encode_e2m1(std::nextafter(0.25f, 1.0f)), 1);
    EXPECT_EQ(encode_e2m1(std::nextafter(1.25f, 2.0f)), 3);
    EXPECT_EQ(encode_e2m1(std::nextafter(5.0f, 6.0f)), 7);
    EXPECT_EQ(encode_e2m1(std::nextafter(3.5f, 0.0f)), 5);
    // Saturation at +-6.
    EXPECT_EQ(encode_e2m1(6.5f), 7);
    EXPECT_EQ(encode_e2m1(1e30f), 7);
    EXPECT_EQ(encode_e2m1(-7.0f), 15);
    EXPECT_EQ(encode_e2m1(std::numeric_limits<float>::infinity()), 7);
    // Signed zero.
    EXPECT_EQ(encode_e2m1(0.0f), 0);
    EXPECT_EQ(encode_e2m1(-0.0f), 8);
    EXPECT_EQ(encode_e2m1(-0.1f), 8);
}

TEST(Mxfp4, OcpScaleByte) {
    EXPECT_EQ(ocp_scale_byte(6.0f), 127);  // floor(log2 6) = 2 -> e = 0
    EXPECT_EQ(ocp_scale_byte(4.0f), 127);
    EXPECT_EQ(ocp_scale_byte(7.99f), 127);
    EXPECT_EQ(ocp_scale_byte(8.0f), 128);
    EXPECT_EQ(ocp_scale_byte(1.0f), 125);   // e = -2
    EXPECT_EQ(ocp_scale_byte(0.01f), 118);  // floor(log2 0.01) = -7 -> e = -9
    EXPECT_EQ(ocp_scale_byte(0.0f), 0);
    // floor(log2(3 * 2^-128)) = -127 -> byte -2, clamped to 0 (amax is an f32 subnormal).
    EXPECT_EQ(ocp_scale_byte(3.0f * std::ldexp(1.0f, -128)), 0);
    EXPECT_EQ(ocp_scale_byte(std::numeric_limits<float>::max()), 252);  // floor(log2) = 127
    EXPECT_EQ(ocp_scale_byte(std::ldexp(1.0f, -123)), 2);               // -123 - 2 + 127
}

// Quantizes a block whose first two elements are a, b and the rest 0.
void quantize_pair(float a, float b, ScaleRule rule, uint8_t* byte0, uint8_t* scale) {
    float x[32] = {a, b};
    uint8_t codes[16];
    quantize_mxfp4_block(x, rule, codes, scale);
    *byte0 = codes[0];
    for (int j = 1; j < 16; ++j) EXPECT_EQ(codes[j], 0) << j;
}

TEST(Mxfp4, QuantizesHandComputedBlocks) {
    uint8_t b0, s;
    // (7, 1): OCP scale 2^0: 7 saturates to 6 (code 7), 1 -> code 2; error 1.
    // With 2^1: 3.5 ties to 4 -> 8 (error 1), 0.5 -> 1 (exact): error 1 too; the tie keeps e_ocp.
    quantize_pair(7.0f, 1.0f, ScaleRule::kOcp, &b0, &s);
    EXPECT_EQ(s, 127);
    EXPECT_EQ(b0, 0x27);
    quantize_pair(7.0f, 1.0f, ScaleRule::kBestOf2, &b0, &s);
    EXPECT_EQ(s, 127);
    EXPECT_EQ(b0, 0x27);
    quantize_pair(7.0f, 1.0f, ScaleRule::kNoSaturate, &b0, &s);  // 7 > 6 -> 2^1
    EXPECT_EQ(s, 128);
    EXPECT_EQ(b0, 0x16);  // 3.5 -> 4 (code 6), 0.5 (code 1)
    // (7.5, 3): 2^0 gives error 1.5^2 = 2.25; 2^1 gives 3.75 -> 4 (8, error 0.25), 1.5 exact: e+1 wins.
    quantize_pair(7.5f, 3.0f, ScaleRule::kOcp, &b0, &s);
    EXPECT_EQ(s, 127);
    EXPECT_EQ(b0, 0x57);  // 6 (code 7), 3 (code 5)
    quantize_pair(7.5f, 3.0f, ScaleRule::kBestOf2, &b0, &s);
    EXPECT_EQ(s, 128);
    EXPECT_EQ(b0, 0x36);  // 4 (code 6), 1.5 (code 3)
    // (6, 0.5): exact at 2^0; at 2^1 0.25 ties to 0 (error 0.25): e_ocp stays.
    quantize_pair(6.0f, 0.5f, ScaleRule::kBestOf2, &b0, &s);
    EXPECT_EQ(s, 127);
    EXPECT_EQ(b0, 0x17);
    quantize_pair(6.0f, 0.5f, ScaleRule::kNoSaturate, &b0, &s);
    EXPECT_EQ(s, 127);
    // (-0.3, 0.01): amax 0.3, floor(log2) = -2 -> e = -4, scale 1/16: -4.8 -> -4 (code 14), 0.16 -> 0.
    quantize_pair(-0.3f, 0.01f, ScaleRule::kOcp, &b0, &s);
    EXPECT_EQ(s, 123);
    EXPECT_EQ(b0, 0x0E);
    // Subnormal range: 3 * 2^-128 = 1.5 * 2^-127 with the clamped scale byte 0 (2^-127) is code 3.
    quantize_pair(3.0f * std::ldexp(1.0f, -128), 0.0f, ScaleRule::kBestOf2, &b0, &s);
    EXPECT_EQ(s, 0);
    EXPECT_EQ(b0, 0x03);
    // All zeros: scale byte 0, zero codes.
    quantize_pair(0.0f, 0.0f, ScaleRule::kBestOf2, &b0, &s);
    EXPECT_EQ(s, 0);
    EXPECT_EQ(b0, 0x00);
}

TEST(Mxfp4, RowRejectsBadInput) {
    std::vector<float> x(64, 1.0f);
    std::vector<uint8_t> codes(32), scales(2);
    EXPECT_TRUE(quantize_mxfp4_row(x.data(), 64, ScaleRule::kOcp, codes.data(), scales.data()).is_ok());
    Status st = quantize_mxfp4_row(x.data(), 48, ScaleRule::kOcp, codes.data(), scales.data());
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    x[37] = std::numeric_limits<float>::quiet_NaN();
    st = quantize_mxfp4_row(x.data(), 64, ScaleRule::kOcp, codes.data(), scales.data());
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("element 37"), std::string::npos) << st.message();
    x[37] = -std::numeric_limits<float>::infinity();
    EXPECT_FALSE(quantize_mxfp4_row(x.data(), 64, ScaleRule::kBestOf2, codes.data(), scales.data()).is_ok());
}

TEST(Mxfp4, ScaleRuleNames) {
    ScaleRule r;
    ASSERT_TRUE(parse_scale_rule("ocp", &r));
    EXPECT_EQ(r, ScaleRule::kOcp);
    ASSERT_TRUE(parse_scale_rule("best-of-2", &r));
    EXPECT_EQ(r, ScaleRule::kBestOf2);
    ASSERT_TRUE(parse_scale_rule("no-saturate", &r));
    EXPECT_EQ(r, ScaleRule::kNoSaturate);
    EXPECT_FALSE(parse_scale_rule("floor", &r));
}

// Blocks decoded from random bytes are exactly representable: every rule must give back the same values
// (the bytes may differ, e.g. a block of small codes gets a smaller scale and larger codes).
TEST(Mxfp4, RoundTripsRepresentableRows) {
    std::mt19937 gen(1234);
    const int64_t n = 32 * 64;
    std::vector<uint8_t> codes(n / 2), scales(n / 32), codes2(n / 2), scales2(n / 32);
    std::vector<float> x(n), y(n);
    for (ScaleRule rule : {ScaleRule::kOcp, ScaleRule::kNoSaturate, ScaleRule::kBestOf2}) {
        for (int trial = 0; trial < 20; ++trial) {
            for (auto& c : codes) c = static_cast<uint8_t>(gen() & 0xFF);
            // 10..240 keeps every rescaled block inside the E8M0 range (no clamping).
            for (auto& s : scales) s = static_cast<uint8_t>(10 + gen() % 231);
            if (trial == 0) std::memset(codes.data(), 0, 16);  // an all-zero block
            decode_mxfp4_row(codes.data(), scales.data(), n, x.data());
            ASSERT_TRUE(quantize_mxfp4_row(x.data(), n, rule, codes2.data(), scales2.data()).is_ok());
            decode_mxfp4_row(codes2.data(), scales2.data(), n, y.data());
            for (int64_t i = 0; i < n; ++i)
                ASSERT_EQ(y[i], x[i]) << scale_rule_name(rule) << " element " << i;
        }
    }
}

// floor(log2(a)) by repeated doubling/halving, independent of frexp.
int slow_floor_log2(double a) {
    int e = 0;
    while (a >= 2.0) a /= 2.0, ++e;
    while (a < 1.0) a *= 2.0, --e;
    return e;
}

// Sum of squared errors of the best encoding of each element for a fixed scale (brute force).
double best_error(const float* x, int scale_byte) {
    const double s = std::ldexp(1.0, scale_byte - 127);
    double err = 0.0;
    for (int i = 0; i < 32; ++i) {
        double best = INFINITY;
        for (uint8_t c = 0; c < 16; ++c) best = std::min(best, std::fabs(code_value(c) * s - x[i]));
        err += best * best;
    }
    return err;
}

// On random heavy-tailed blocks of various magnitudes: the scale byte is the rule's exponent (computed
// here independently) and each element decodes to a nearest representable value of that scale.
TEST(Mxfp4, RandomBlocksAreNearestWithTheRulesExponent) {
    std::mt19937 gen(42);
    std::student_t_distribution<float> t3(3.0f);
    std::uniform_int_distribution<int> mag(-20, 20);
    for (ScaleRule rule : {ScaleRule::kOcp, ScaleRule::kNoSaturate, ScaleRule::kBestOf2}) {
        int chose_e1 = 0;
        for (int trial = 0; trial < 2000; ++trial) {
            float x[32];
            const float m = std::ldexp(1.0f, mag(gen));
            double amax = 0;
            for (float& v : x) {
                v = t3(gen) * m;
                amax = std::max(amax, std::fabs(static_cast<double>(v)));
            }
            uint8_t codes[16], scale;
            quantize_mxfp4_block(x, rule, codes, &scale);
            const int e_ocp = slow_floor_log2(amax) - 2 + 127;
            ASSERT_TRUE(scale == e_ocp || scale == e_ocp + 1) << int(scale) << " vs " << e_ocp;
            chose_e1 += scale == e_ocp + 1;
            if (rule == ScaleRule::kOcp) {
                EXPECT_EQ(scale, e_ocp);
            }
            if (rule == ScaleRule::kNoSaturate) {
                EXPECT_EQ(scale, amax > 6.0 * std::ldexp(1.0, e_ocp - 127) ? e_ocp + 1 : e_ocp);
            }
            const double s = std::ldexp(1.0, scale - 127);
            double err = 0;
            for (int i = 0; i < 32; ++i) {
                const uint8_t c = (codes[i / 2] >> (4 * (i % 2))) & 0xF;
                const double d = std::fabs(code_value(c) * s - x[i]);
                double best = INFINITY;
                for (uint8_t c2 = 0; c2 < 16; ++c2)
                    best = std::min(best, std::fabs(code_value(c2) * s - x[i]));
                ASSERT_EQ(d, best) << "element " << i << " = " << x[i] << ", scale " << int(scale);
                ASSERT_LE(d, amax / 4) << "element " << i;  // the bound of every rule (docs/quantization.md)
                err += d * d;
            }
            if (rule == ScaleRule::kBestOf2) {
                EXPECT_LE(err, best_error(x, e_ocp));
                EXPECT_LE(err, best_error(x, e_ocp + 1));
            }
        }
        // Both exponents occur for these blocks with every rule except OCP.
        if (rule == ScaleRule::kOcp)
            EXPECT_EQ(chose_e1, 0);
        else
            EXPECT_GT(chose_e1, 0);
    }
}

}  // namespace
}  // namespace volt::quant
