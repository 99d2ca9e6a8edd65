// The host side of CUDA placement (src/cuda/placement.h), without a GPU: the bf16 -> f16 range check
// counts what IEEE binary16 does to each value (limits from the IEEE 754 binary16 format: max 65504,
// smallest normal 2^-14, smallest subnormal 2^-24), the conversion is exact where it says so, and dense
// experts quantize to the MXFP4 the CPU decodes, integer weights repack to the CUDA layout (decoded here
// from its definition in placement.h) with the values the CPU decodes (quant/int_weights.h).
#include "cuda/placement.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "quant/int_weights.h"
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

// Element (o, i) of a repacked weight, decoded from placement.h's layout definition.
float repacked_at(const ops::DenseWeight& d, const IntWeightsHost& r, int64_t o, int64_t i) {
    if (d.format == ops::Format::kInt8) {
        uint16_t s;
        std::memcpy(&s, r.meta.data() + 2 * o, 2);
        return static_cast<float>(static_cast<int8_t>(r.codes[o * d.in + i])) * f16_to_f32(s);
    }
    uint32_t w, m;
    std::memcpy(&w, r.codes.data() + 4 * (o * (d.in / 8) + i / 8), 4);
    std::memcpy(&m, r.meta.data() + 4 * (o * (d.in / d.group_size) + i / d.group_size), 4);
    const int j = static_cast<int>(i % 8);
    const uint32_t q = (w >> (j < 4 ? 8 * j : 8 * (j - 4) + 4)) & 0xfu;
    return (static_cast<float>(q) - static_cast<float>((m >> 16) & 0xfu)) * f16_to_f32(m & 0xffffu);
}

TEST(CudaPlacement, IntegerWeightsRepackToTheValuesTheCpuDecodes) {
    std::mt19937_64 rng(11);
    // AWQ: every bit of qweight / qzeros random (every nibble value at every position), 3 groups of 32.
    const int64_t out = 16, in = 96, g = 32;
    std::vector<uint32_t> qw(in * out / 8), qz(in / g * out / 8);
    std::vector<uint16_t> sc(in / g * out);
    for (auto& v : qw) v = static_cast<uint32_t>(rng());
    for (auto& v : qz) v = static_cast<uint32_t>(rng());
    for (auto& v : sc) v = f32_to_f16(std::ldexp(1.0f + (rng() % 1000) / 1000.0f, -7 - int(rng() % 12)));
    ops::DenseWeight a;
    a.format = ops::Format::kInt4;
    a.w = qw.data();
    a.zeros = qz.data();
    a.scales = sc.data();
    a.group_size = g;
    a.out = out;
    a.in = in;
    IntWeightsHost r;
    ASSERT_TRUE(repack_int_weight(a, &r).is_ok());
    ASSERT_EQ(r.codes.size(), static_cast<size_t>(out * in / 2));
    ASSERT_EQ(r.meta.size(), static_cast<size_t>(out * in / g * 4));
    std::vector<float> cols(8 * in);
    for (int64_t c = 0; c < out / 8; ++c) {
        quant::decode_awq_columns(reinterpret_cast<const int32_t*>(qw.data()),
                                  reinterpret_cast<const int32_t*>(qz.data()), sc.data(), in, out, g, c,
                                  cols.data());
        for (int64_t j = 0; j < 8; ++j)
            for (int64_t i = 0; i < in; ++i)
                ASSERT_EQ(repacked_at(a, r, 8 * c + j, i), cols[j * in + i])
                    << "o " << 8 * c + j << " i " << i;
    }
    // The hand-built word of docs/quantization.md: 0x86427531 holds columns 0..7 = 1..8 (AWQ_ORDER), zero
    // points 0, scale 1: row o of every input is o + 1.
    std::vector<uint32_t> hw(8, 0x86427531u), hz(1, 0u);
    std::vector<uint16_t> hs(8, f32_to_f16(1.0f));
    ops::DenseWeight h = a;
    h.w = hw.data();
    h.zeros = hz.data();
    h.scales = hs.data();
    h.out = 8;
    h.in = 8;
    h.group_size = 8;
    ASSERT_TRUE(repack_int_weight(h, &r).is_ok());
    for (int64_t o = 0; o < 8; ++o)
        for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(repacked_at(h, r, o, i), static_cast<float>(o + 1));
    // Row 2 (value 3 everywhere): the word 0x33333333 in any nibble order.
    uint32_t w2;
    std::memcpy(&w2, r.codes.data() + 4 * 2, 4);
    EXPECT_EQ(w2, 0x33333333u);

    // INT8: codes and scales as stored.
    std::vector<int8_t> q8(out * in);
    std::vector<uint16_t> s8(out);
    for (auto& v : q8) v = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
    for (auto& v : s8) v = f32_to_f16(std::ldexp(1.0f + (rng() % 1000) / 1000.0f, -9));
    ops::DenseWeight b;
    b.format = ops::Format::kInt8;
    b.w = q8.data();
    b.scales = s8.data();
    b.out = out;
    b.in = in;
    ASSERT_TRUE(repack_int_weight(b, &r).is_ok());
    std::vector<float> row(in);
    for (int64_t o = 0; o < out; ++o) {
        quant::decode_int8_row(q8.data() + o * in, s8[o], in, row.data());
        for (int64_t i = 0; i < in; ++i) ASSERT_EQ(repacked_at(b, r, o, i), row[i]);
    }

    // Refused with the shape named.
    ops::DenseWeight bad = a;
    bad.group_size = 12;  // not a multiple of 8
    bad.in = 96;
    EXPECT_FALSE(repack_int_weight(bad, &r).is_ok());
    bad = a;
    bad.zeros = nullptr;
    EXPECT_FALSE(repack_int_weight(bad, &r).is_ok());
    bad = a;
    bad.out = 12;
    const Status st = repack_int_weight(bad, &r);
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.to_string().find("[12, 96]"), std::string::npos) << st.to_string();
    bad = b;
    bad.scales = nullptr;
    EXPECT_FALSE(repack_int_weight(bad, &r).is_ok());
}

}  // namespace
}  // namespace volt::cuda
