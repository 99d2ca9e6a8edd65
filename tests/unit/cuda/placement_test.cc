// The host side of CUDA placement (src/cuda/placement.h), without a GPU: the bf16 -> f16 range check
// counts what IEEE binary16 does to each value (limits from the IEEE 754 binary16 format: max 65504,
// smallest normal 2^-14, smallest subnormal 2^-24), the conversion is exact where it says so, and dense
// experts quantize to the MXFP4 the CPU decodes.
#include "cuda/placement.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "quant/mxfp4.h"

namespace volt::cuda {
namespace {

TEST(CudaPlacement, RangeReportCountsOverflowSubnormalAndFlush) {
    const std::vector<float> values = {
        0.0f,
        1.0f,
        -2.5f,
        65280.0f,  // exact: the largest bf16 value below f16's maximum 65504
        65536.0f,
        -1e6f,                        // overflow (bf16 holds them, f16 does not)
        std::ldexp(1.0f, -15),        // subnormal in f16, still exact (a power of two above 2^-24)
        std::ldexp(1.5f, -20),        // subnormal, exact: 1.5 * 2^-20 = 24 * 2^-24
        std::ldexp(1.0078125f, -18),  // subnormal, needs 2^-25: rounds (inexact)
        std::ldexp(1.0f, -26),        // below half the smallest subnormal: becomes 0
    };
    std::vector<uint16_t> bf16;
    for (float v : values) bf16.push_back(f32_to_bf16(v));
    const F16RangeReport r = check_bf16_to_f16(bf16.data(), static_cast<int64_t>(bf16.size()));
    EXPECT_EQ(r.n, 10);
    EXPECT_EQ(r.overflow, 2);
    EXPECT_EQ(r.subnormal, 4);
    EXPECT_EQ(r.inexact, 1);
    EXPECT_EQ(r.flushed, 1);
    EXPECT_EQ(r.max_abs, bf16_to_f32(f32_to_bf16(1e6f)));
    EXPECT_FALSE(r.converts());  // overflow
}

TEST(CudaPlacement, OrdinaryWeightsConvertExactly) {
    // Weights of a trained layer's scale: N(0, 0.02) in bf16. The tail below 2^-17 loses a bit, far
    // less than 1% of the values; every other value converts exactly.
    std::mt19937 rng(7);
    std::normal_distribution<float> dist(0.0f, 0.02f);
    std::vector<uint16_t> w(1 << 16);
    for (auto& h : w) h = f32_to_bf16(dist(rng));
    const F16RangeReport r = check_bf16_to_f16(w.data(), static_cast<int64_t>(w.size()));
    EXPECT_EQ(r.overflow, 0);
    EXPECT_TRUE(r.converts()) << r.to_string();
    std::vector<uint16_t> f16(w.size());
    convert_bf16_to_f16(w.data(), static_cast<int64_t>(w.size()), f16.data());
    int64_t changed = 0;
    for (size_t i = 0; i < w.size(); ++i) {
        const float a = bf16_to_f32(w[i]), b = f16_to_f32(f16[i]);
        if (a != b) {
            ++changed;
            EXPECT_LT(std::fabs(a), std::ldexp(1.0f, -17)) << i;
            EXPECT_LE(std::fabs(a - b), std::ldexp(1.0f, -25)) << i;
        }
    }
    EXPECT_EQ(changed, r.inexact + r.flushed);
}

TEST(CudaPlacement, TinyTensorStaysBf16) {
    // A tensor whose whole scale sits below f16's normal range would lose most of its bits.
    std::vector<uint16_t> w(1000);
    for (size_t i = 0; i < w.size(); ++i) w[i] = f32_to_bf16(std::ldexp(1.0f + i / 1000.0f, -22));
    EXPECT_FALSE(check_bf16_to_f16(w.data(), static_cast<int64_t>(w.size())).converts());
}

TEST(CudaPlacement, VectorsWidenExactly) {
    const uint16_t b[2] = {f32_to_bf16(1.5f), f32_to_bf16(-3.0f)};
    const std::vector<float> v = widen_vector({ops::Format::kBf16, b, 2});
    EXPECT_EQ(v, (std::vector<float>{1.5f, -3.0f}));
    const uint16_t h[1] = {f32_to_f16(0.25f)};
    EXPECT_EQ(widen_vector({ops::Format::kF16, h, 1}), std::vector<float>{0.25f});
}

TEST(CudaPlacement, DenseExpertsQuantizeToTheMxfp4TheCpuDecodes) {
    // 2 experts x 3 rows x 64 inputs; values on the E2M1 grid times a power of two quantize exactly.
    const int64_t E = 2, out = 3, in = 64;
    std::vector<uint16_t> w(E * out * in);
    const float grid[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    for (size_t i = 0; i < w.size(); ++i) w[i] = f32_to_bf16((i % 3 ? 1 : -1) * grid[i % 8] * 0.125f);
    ops::ExpertWeights d;
    d.format = ops::Format::kBf16;
    d.w = w.data();
    d.num_experts = E;
    d.out = out;
    d.in = in;
    std::vector<uint8_t> blocks, scales;
    ASSERT_TRUE(quantize_experts_mxfp4(d, &blocks, &scales).is_ok());
    ASSERT_EQ(blocks.size(), static_cast<size_t>(E * out * (in / 32) * 16));
    ASSERT_EQ(scales.size(), static_cast<size_t>(E * out * (in / 32)));
    std::vector<float> row(in);
    for (int64_t r = 0; r < E * out; ++r) {
        quant::decode_mxfp4_row(blocks.data() + r * (in / 32) * 16, scales.data() + r * (in / 32), in,
                                row.data());
        for (int64_t i = 0; i < in; ++i) EXPECT_EQ(row[i], bf16_to_f32(w[r * in + i])) << r << " " << i;
    }
    d.in = 48;  // not whole blocks
    d.out = 4;
    EXPECT_FALSE(quantize_experts_mxfp4(d, &blocks, &scales).is_ok());
}

}  // namespace
}  // namespace volt::cuda
