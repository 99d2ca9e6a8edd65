// CPU kernels against values computed by hand from spec/gpt-oss.md §8 ("Unit-test vectors"), which
// derives them from the formulas of §3 independently of our code.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "cpu/cpu_ops.h"
#include "model/rope.h"

namespace volt::cpu {

TEST(CpuOps, SwigluMatchesSpecVectors) {
    EXPECT_NEAR(swiglu_oai(10, 10, 7, 1.702f), 55.99962503, 1e-4);
    EXPECT_NEAR(swiglu_oai(-3, 0.5, 7, 1.702f), -0.02710696, 1e-7);
    EXPECT_NEAR(swiglu_oai(1, -9, 7, 1.702f), -5.07477460, 1e-5);
    EXPECT_EQ(swiglu_oai(0, 3, 7, 1.702f), 0.0f);
}

TEST(CpuOps, Mxfp4DotDecodesNibblesLowFirst) {
    // Spec §8: byte 0x21 with scale 127 -> (+0.5, +1.0); with scale 130 -> (+4, +8); 0xF8 -> (-0, -6).
    std::vector<uint8_t> blocks(16, 0);
    blocks[0] = 0x21;
    blocks[1] = 0xF8;
    std::vector<float> x(32, 0.0f);
    x[0] = 1.0f;  // picks element 0 (low nibble of byte 0)
    uint8_t s127 = 127, s130 = 130;
    EXPECT_EQ(dot_f32_mxfp4(x.data(), blocks.data(), &s127, 32), 0.5f);
    x[0] = 0.0f;
    x[1] = 1.0f;
    EXPECT_EQ(dot_f32_mxfp4(x.data(), blocks.data(), &s127, 32), 1.0f);
    EXPECT_EQ(dot_f32_mxfp4(x.data(), blocks.data(), &s130, 32), 8.0f);
    x[1] = 0.0f;
    x[3] = 1.0f;
    EXPECT_EQ(dot_f32_mxfp4(x.data(), blocks.data(), &s127, 32), -6.0f);
}

TEST(CpuOps, AttentionSinkSoftmax) {
    // Spec §8: scores (1.0, 2.0), sink 0.5 -> weights (0.23122390, 0.62853172). One head, d = 1 so that
    // q.k * scale gives the scores: q = 1, k = (1, 2), scale 1; v = (1, 0) and (0, 1) read the weights.
    // d = 2 to keep head_dim even: k = (1,0),(2,0); v = (1,0),(0,1).
    std::vector<float> q = {1.0f, 0.0f};
    std::vector<float> kc = {1.0f, 0.0f, 2.0f, 0.0f}, vc = {1.0f, 0.0f, 0.0f, 1.0f};
    int32_t seq_len = 2, qsl[2] = {0, 1}, table[1] = {0};
    uint16_t sink = f32_to_bf16(0.5f);
    std::vector<float> out(2, -1.0f);
    auto run = [&](int64_t window) {
        attention({.q = q.data(),
                   .kv = {ops::Format::kF32, kc.data(), vc.data(), 1, 4},
                   .seq_lens = &seq_len,
                   .query_start_loc = qsl,
                   .block_tables = table,
                   .sinks = {ops::Format::kBf16, &sink, 1},
                   .out = out.data(),
                   .num_seqs = 1,
                   .num_tokens = 1,
                   .num_heads = 1,
                   .num_kv_heads = 1,
                   .head_dim = 2,
                   .max_blocks = 1,
                   .window = window,
                   .scale = 1.0f});
    };
    run(0);
    EXPECT_NEAR(out[0], 0.23122390, 1e-6);
    EXPECT_NEAR(out[1], 0.62853172, 1e-6);
    // A sliding window of 1 key leaves only the current token: weights e^2 / (e^0.5 + e^2).
    run(1);
    EXPECT_NEAR(out[0], 0.0, 1e-7);
    EXPECT_NEAR(out[1], std::exp(2.0) / (std::exp(0.5) + std::exp(2.0)), 1e-6);
}

TEST(CpuOps, YarnInverseFrequencies) {
    // Spec §3.5 reference values for theta 150000, d 64, factor 32, L0 4096, beta 32/1, truncate false.
    model::GptOssConfig c;
    c.head_dim = 64;
    c.rope_theta = 150000;
    c.rope_scaling = {"yarn", 32.0, 32.0, 1.0, 4096, false};
    auto t = model::make_rope_table(c);
    ASSERT_EQ(t.inv_freq.size(), 32u);
    EXPECT_NEAR(t.inv_freq[0], 1.0, 1e-7);
    EXPECT_NEAR(t.inv_freq[8] / 5.0813e-2, 1.0, 1e-4);
    EXPECT_NEAR(t.inv_freq[9] / 3.17057e-2, 1.0, 1e-5);
    EXPECT_NEAR(t.inv_freq[12] / 6.79496e-3, 1.0, 1e-5);
    EXPECT_NEAR(t.inv_freq[16] / 4.56484e-4, 1.0, 1e-5);
    EXPECT_NEAR(t.inv_freq[17] / 1.29319e-4, 1.0, 1e-5);
    EXPECT_NEAR(t.inv_freq[18] / 3.83088e-5, 1.0, 1e-5);
    EXPECT_NEAR(t.inv_freq[31] / 3.02351e-7, 1.0, 1e-5);
    EXPECT_NEAR(t.mscale, 1.3465736, 1e-6);
    // truncate = true floors/ceils the range to [8, 18] (the ggml form): i = 12 -> 7.01571e-3.
    c.rope_scaling.truncate = true;
    EXPECT_NEAR(model::make_rope_table(c).inv_freq[12] / 7.01571e-3, 1.0, 1e-5);
}

TEST(CpuOps, RouterSoftmaxOverTopK) {
    // Logits (1, 3, 2, 3) + bias 0 with k = 2: experts 1 and 3 (tie kept in index order), weights 1/2.
    std::vector<uint16_t> w = {f32_to_bf16(1), f32_to_bf16(3), f32_to_bf16(2), f32_to_bf16(3)};
    std::vector<uint16_t> b = {0, 0, 0, f32_to_bf16(-1)};
    float x = 1.0f;
    int32_t ids[2];
    float wt[2];
    ops::DenseWeight r;
    r.w = w.data();
    r.b = {ops::Format::kBf16, b.data(), 4};
    r.out = 4;
    r.in = 1;
    router({&x, r, ids, wt, 1, 2});
    // With bias, logits are (1, 3, 2, 2): top-2 = {1, 2}, weights softmax(3, 2).
    EXPECT_EQ(ids[0], 1);
    EXPECT_EQ(ids[1], 2);
    EXPECT_NEAR(wt[0], 1.0 / (1.0 + std::exp(-1.0)), 1e-6);
    EXPECT_NEAR(wt[1], 1.0 / (1.0 + std::exp(1.0)), 1e-6);
}

TEST(CpuOps, RmsNormMultipliesGainAfterNormalising) {
    std::vector<float> x = {3.0f, 4.0f}, y(2);
    std::vector<uint16_t> w = {f32_to_bf16(2.0f), f32_to_bf16(0.5f)};
    rmsnorm({x.data(), {ops::Format::kBf16, w.data(), 2}, y.data(), 1, 2, 0.0f});
    const float rms = std::sqrt(12.5f);
    EXPECT_NEAR(y[0], 2.0f * 3.0f / rms, 1e-6);
    EXPECT_NEAR(y[1], 0.5f * 4.0f / rms, 1e-6);
}

}  // namespace volt::cpu
