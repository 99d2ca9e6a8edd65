// INT8 and AWQ (AutoAWQ gemm) formats of docs/quantization.md: a hand-packed AWQ vector (expected values
// worked out by hand below, from AutoAWQ's AWQ_ORDER), the packer against it, the quantizers' error
// bounds, and cpu::linear over both formats on the hand vector.
#include "quant/int_weights.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "cpu/cpu_ops.h"

namespace volt::quant {
namespace {

// The vector, 8 output columns (one word column), 2 inputs, one group of 2:
// input 0's word 0x86427531: nibbles from the low end 1,3,5,7,2,4,6,8; AWQ_ORDER [0,2,4,6,1,3,5,7] puts
// columns 0,2,4,6,1,3,5,7 in nibbles 0..7, so column j holds j + 1.
// input 1's word 0x000F0000: nibble 4 = column 1 holds 15, the others 0.
// zeros 0x88888838: nibble 1 = column 2 has zero 3, the others 8. Scales 0.5, column 3: 2.0.
// w[i, j] = (q - z) s:   column:   0     1     2    3     4     5     6     7
//                        input 0: -3.5  -3     0   -8   -1.5  -1   -0.5   0
//                        input 1: -4     3.5  -1.5 -16  -4    -4   -4    -4
constexpr int32_t kQweight[2] = {static_cast<int32_t>(0x86427531u), 0x000F0000};
constexpr int32_t kQzeros[1] = {static_cast<int32_t>(0x88888838u)};
constexpr float kWant[2][8] = {{-3.5f, -3, 0, -8, -1.5f, -1, -0.5f, 0},
                               {-4, 3.5f, -1.5f, -16, -4, -4, -4, -4}};

std::vector<uint16_t> hand_scales() {
    std::vector<uint16_t> s(8, 0x3800);  // f16 0.5
    s[3] = 0x4000;                       // f16 2.0
    return s;
}

TEST(AwqFormat, HandPackedWordsDecode) {
    const auto scales = hand_scales();
    float got[16];
    decode_awq_columns(kQweight, kQzeros, scales.data(), 2, 8, 2, 0, got);
    for (int j = 0; j < 8; ++j)
        for (int i = 0; i < 2; ++i)
            EXPECT_EQ(got[j * 2 + i], kWant[i][j]) << "column " << j << " input " << i;
}

TEST(AwqFormat, PackerWritesAwqOrder) {
    const uint8_t cols[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    EXPECT_EQ(awq_pack(cols), 0x86427531u);
    const uint8_t one[8] = {0, 15, 0, 0, 0, 0, 0, 0};
    EXPECT_EQ(awq_pack(one), 0x000F0000u);
    for (int j = 0; j < 8; ++j) EXPECT_EQ(awq_nibble(0x86427531u, j), static_cast<uint32_t>(j + 1));
}

TEST(AwqFormat, CpuLinearOnHandVector) {
    // y_j = w[0, j] * 1 + w[1, j] * 2 + bias: -11.5, 4, -3, -40, -9.5, -9, -8.5, -8 (+ 0.25).
    const auto scales = hand_scales();
    ops::DenseWeight w;
    w.format = ops::Format::kInt4;
    w.w = kQweight;
    w.zeros = kQzeros;
    w.scales = scales.data();
    w.group_size = 2;
    w.out = 8;
    w.in = 2;
    std::vector<float> bias(8, 0.25f);
    w.b = {ops::Format::kF32, bias.data(), 8};
    const float x[2] = {1, 2};
    float y[8];
    cpu::linear({.x = x, .weight = w, .y = y, .num_tokens = 1});
    const float want[8] = {-11.5f, 4, -3, -40, -9.5f, -9, -8.5f, -8};
    for (int j = 0; j < 8; ++j) EXPECT_EQ(y[j], want[j] + 0.25f) << "column " << j;
}

TEST(Int8Format, CpuLinearByHand) {
    // Rows (1, -2, 127) * 0.5 and (-127, 0, 3) * 0.25 on x = (2, 1, 1): 0.5 (2 - 2 + 127) = 63.5 and
    // 0.25 (-254 + 0 + 3) = -62.75.
    const int8_t q[6] = {1, -2, 127, -127, 0, 3};
    const uint16_t s[2] = {0x3800, 0x3400};  // f16 0.5, 0.25
    ops::DenseWeight w;
    w.format = ops::Format::kInt8;
    w.w = q;
    w.scales = s;
    w.out = 2;
    w.in = 3;
    const float x[3] = {2, 1, 1};
    float y[2];
    cpu::linear({.x = x, .weight = w, .y = y, .num_tokens = 1});
    EXPECT_EQ(y[0], 63.5f);
    EXPECT_EQ(y[1], -62.75f);
}

TEST(Int8Quantizer, ErrorWithinHalfAScaleStep) {
    std::mt19937 gen(3);
    std::normal_distribution<float> nd(0.0f, 0.05f);
    std::vector<float> w(2880);
    for (auto& v : w) v = nd(gen);
    w[17] = 0.9f;  // an outlier sets the scale
    std::vector<int8_t> q(w.size());
    uint16_t s16;
    ASSERT_TRUE(quantize_int8_row(w.data(), static_cast<int64_t>(w.size()), q.data(), &s16).is_ok());
    const double s = f16_to_f32(s16);
    EXPECT_NEAR(s, 0.9 / 127, 0.9 / 127 * 1e-3);
    EXPECT_EQ(q[17], 127);
    for (size_t i = 0; i < w.size(); ++i) EXPECT_LE(std::abs(q[i] * s - w[i]), 0.5 * s * (1 + 1e-6)) << i;
    w[5] = NAN;
    EXPECT_FALSE(quantize_int8_row(w.data(), static_cast<int64_t>(w.size()), q.data(), &s16).is_ok());
}

TEST(AwqQuantizer, ErrorBoundAndRoundTrip) {
    const int64_t out = 16, in = 256, g = 128;
    std::mt19937 gen(5);
    std::normal_distribution<float> nd(0.0f, 0.1f);
    std::vector<float> w(out * in);
    for (auto& v : w) v = nd(gen) + (&v - w.data()) % 7 * 0.01f;  // skewed groups: nonzero zero points
    for (int64_t i = 0; i < in; ++i) w[3 * in + i] = 0.2f + 0.001f * static_cast<float>(i % g);  // all > 0
    std::vector<int32_t> qweight(in * out / 8), qzeros(in / g * out / 8);
    std::vector<uint16_t> scales(in / g * out);
    ASSERT_TRUE(quantize_awq(w.data(), out, in, g, qweight.data(), qzeros.data(), scales.data()).is_ok());
    std::vector<float> dq(8 * in);
    for (int64_t c = 0; c < out / 8; ++c) {
        decode_awq_columns(qweight.data(), qzeros.data(), scales.data(), in, out, g, c, dq.data());
        for (int j = 0; j < 8; ++j) {
            const int64_t o = c * 8 + j;
            for (int64_t i = 0; i < in; ++i) {
                const double s = f16_to_f32(scales[(i / g) * out + o]);
                EXPECT_LE(std::abs(dq[j * in + i] - w[o * in + i]), 0.51 * s)
                    << "row " << o << " input " << i;
            }
        }
    }
    EXPECT_FALSE(quantize_awq(w.data(), 12, in, g, qweight.data(), qzeros.data(), scales.data()).is_ok());
    EXPECT_FALSE(quantize_awq(w.data(), out, 200, g, qweight.data(), qzeros.data(), scales.data()).is_ok());
}

}  // namespace
}  // namespace volt::quant
