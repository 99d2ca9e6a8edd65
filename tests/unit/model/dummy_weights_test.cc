// --load-format dummy (model/dummy_weights.h): every tensor of the real shapes is there (the parameter
// count of gpt-oss-20b and -120b from the model card / spec §1.3), the values have the standard deviations
// the header promises (MXFP4 decoded by quant/mxfp4.h, which equals transformers' dequantisation), a forward
// pass over them stays finite with logits of a useful spread, and the same seed gives the same bytes.
#include "model/dummy_weights.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "cpu/cpu_ops.h"
#include "model/make_model.h"
#include "model/placed_model.h"
#include "model/sequence_runner.h"
#include "quant/int_weights.h"
#include "quant/mxfp4.h"

namespace volt::model {
namespace {

int64_t count(const ops::VectorWeight& v) { return v.data ? v.n : 0; }
int64_t count(const ops::DenseWeight& d) { return (d.w ? d.out * d.in : 0) + count(d.b); }
int64_t count(const ops::ExpertWeights& x) { return x.num_experts * x.out * x.in + count(x.bias); }

int64_t parameters(const ModelWeights& w) {
    int64_t n = count(w.embed_tokens) + count(w.norm) + count(w.lm_head);
    for (const LayerWeights& l : w.layers)
        n += count(l.input_layernorm) + count(l.q_proj) + count(l.k_proj) + count(l.v_proj) +
             count(l.o_proj) + count(l.sinks) + count(l.post_attention_layernorm) + count(l.router) +
             count(l.gate_up) + count(l.down);
    return n;
}

TEST(DummyWeights, RealShapesHaveThePublishedParameterCounts) {
    // spec §1.3 (sum of the published checkpoint's tensors, MXFP4 values counted one each).
    auto c20 = preset_config("20b");
    ASSERT_TRUE(c20.is_ok());
    auto w20 = make_dummy_weights(*c20, 0, 0, /*fill_values=*/false);
    ASSERT_TRUE(w20.is_ok()) << w20.status().to_string();
    EXPECT_EQ(parameters(**w20), 20'914'757'184);
    auto c120 = preset_config("120b", {.num_hidden_layers = 1});  // one layer: the host memory stays small
    ASSERT_TRUE(c120.is_ok());
    auto w120 = make_dummy_weights(*c120, 0, 0, /*fill_values=*/false);
    ASSERT_TRUE(w120.is_ok());
    const int64_t per_layer =
        parameters(**w120) - 2 * c120->vocab_size * c120->hidden_size - c120->hidden_size;
    EXPECT_EQ(2 * c120->vocab_size * c120->hidden_size + c120->hidden_size + 36 * per_layer, 116'829'156'672);
}

double stddev(const std::vector<float>& x) {
    double s = 0, s2 = 0;
    for (float v : x) s += v, s2 += double(v) * v;
    const double m = s / x.size();
    return std::sqrt(s2 / x.size() - m * m);
}

// The CPU backend runs `w`: 40 tokens' logits are finite with a spread like a trained model's (stddev in
// (0.3, 10)), whatever the weights' format.
void expect_finite_spread_logits(const std::shared_ptr<const ModelWeights>& w) {
    cpu::CpuBackend backend;
    Forward fwd(*place_model(w, backend), backend);
    std::vector<int32_t> ids(40);
    for (int i = 0; i < 40; ++i) ids[i] = (i * 37) % static_cast<int>(w->config.vocab_size);
    SequenceRunner run(fwd, static_cast<int64_t>(ids.size()));
    const std::vector<float> logits = run.append(ids, /*all_rows=*/true);
    for (float v : logits) ASSERT_TRUE(std::isfinite(v));
    const double s = stddev(logits);
    EXPECT_GT(s, 0.3);
    EXPECT_LT(s, 10.0);
}

TEST(DummyWeights, ValuesHaveTheIntendedSpread) {
    // The 20b layer's sizes with a small vocabulary (the embedding and lm_head are not looked at here).
    auto c = preset_config("20b", {.num_hidden_layers = 1, .vocab_size = 1000});
    ASSERT_TRUE(c.is_ok());
    auto w = make_dummy_weights(*c, 7);
    ASSERT_TRUE(w.is_ok());
    const LayerWeights& l = (*w)->layers[0];
    const double H = c->hidden_size, I = c->intermediate_size;
    std::vector<float> row(c->hidden_size);
    std::vector<float> all;
    for (int64_t r = 0; r < 64; ++r) {  // gate_up rows of expert 0: H values each
        quant::decode_mxfp4_row(l.gate_up.blocks + r * (c->hidden_size / 32) * 16,
                                l.gate_up.scales + r * (c->hidden_size / 32), c->hidden_size, row.data());
        all.insert(all.end(), row.begin(), row.end());
    }
    // One power of two is the scale's resolution: within a factor sqrt(2) of the target.
    EXPECT_NEAR(std::log2(stddev(all) / (2.5 / std::sqrt(H))), 0.0, 0.5);
    all.clear();
    row.resize(c->intermediate_size);
    for (int64_t r = 0; r < 64; ++r) {
        quant::decode_mxfp4_row(l.down.blocks + r * (c->intermediate_size / 32) * 16,
                                l.down.scales + r * (c->intermediate_size / 32), c->intermediate_size,
                                row.data());
        all.insert(all.end(), row.begin(), row.end());
    }
    EXPECT_NEAR(std::log2(stddev(all) / (0.3 / std::sqrt(I))), 0.0, 0.5);
    all.clear();
    const auto* q = static_cast<const uint16_t*>(l.q_proj.w);
    for (int64_t i = 0; i < 100000; ++i) all.push_back(bf16_to_f32(q[i]));
    EXPECT_NEAR(stddev(all), 1.2 / std::sqrt(H), 0.02 * 1.2 / std::sqrt(H));
}

TEST(DummyWeights, ForwardIsFiniteWithSpreadLogitsAndSeedsAreStable) {
    auto c = preset_config("tiny", {.hidden_size = 256, .intermediate_size = 256});
    ASSERT_TRUE(c.is_ok());
    auto a = make_dummy_weights(*c, 3), b = make_dummy_weights(*c, 3), d = make_dummy_weights(*c, 4);
    ASSERT_TRUE(a.is_ok() && b.is_ok() && d.is_ok());
    const int64_t lm = c->vocab_size * c->hidden_size * 2;
    EXPECT_EQ(std::memcmp((*a)->lm_head.w, (*b)->lm_head.w, lm), 0);
    EXPECT_NE(std::memcmp((*a)->lm_head.w, (*d)->lm_head.w, lm), 0);
    expect_finite_spread_logits(*a);
}

// tiny with hidden 256 (4 heads of 64: q width 256, kv width 128), the config made awq (group 64) or int8
// as `voltllm convert` writes it, then written and read back as config.json.
GptOssConfig quantized_tiny(QuantMethod m, int64_t group_size = 64) {
    auto c = preset_config("tiny", {.hidden_size = 256, .intermediate_size = 256, .head_dim = 64});
    EXPECT_TRUE(c.is_ok());
    EXPECT_TRUE(set_dense_quantization(&*c, m, group_size).is_ok());
    auto back = parse_config(make_config_json(*c, ExpertLayout::kMxfp4), "test");
    EXPECT_TRUE(back.is_ok()) << back.status().to_string();
    return *back;
}

// Weight (o, i) of an integer dense weight as docs/quantization.md defines it (quant/int_weights.h).
std::vector<float> dequantized_rows(const ops::DenseWeight& d, int64_t rows) {
    std::vector<float> w(static_cast<size_t>(rows * d.in));
    if (d.format == ops::Format::kInt8) {
        for (int64_t o = 0; o < rows; ++o)
            quant::decode_int8_row(static_cast<const int8_t*>(d.w) + o * d.in, d.scales[o], d.in,
                                   w.data() + o * d.in);
    } else {
        std::vector<float> cols(static_cast<size_t>(8 * d.in));
        for (int64_t c = 0; c * 8 < rows; ++c) {
            quant::decode_awq_columns(static_cast<const int32_t*>(d.w), static_cast<const int32_t*>(d.zeros),
                                      d.scales, d.in, d.out, d.group_size, c, cols.data());
            std::copy(cols.begin(), cols.end(), w.begin() + c * 8 * d.in);
        }
    }
    return w;
}

TEST(DummyWeights, QuantizationConfigRoundTrips) {
    for (QuantMethod m : {QuantMethod::kInt8, QuantMethod::kAwq}) {
        const GptOssConfig c = quantized_tiny(m);
        EXPECT_EQ(c.quant_method, m);
        EXPECT_EQ(c.awq_group_size, m == QuantMethod::kAwq ? 64 : 0);
        EXPECT_EQ(c.modules_to_not_convert, dense_quant_modules_not_converted());
        EXPECT_TRUE(dense_quantized(c, "lm_head"));
        EXPECT_TRUE(dense_quantized(c, "model.layers.3.self_attn.o_proj"));
        EXPECT_FALSE(dense_quantized(c, "model.layers.3.mlp.router"));
        // Written again, the same JSON.
        EXPECT_EQ(make_config_json(c, ExpertLayout::kMxfp4).dump(),
                  make_config_json(quantized_tiny(m), ExpertLayout::kMxfp4).dump());
    }
    // AWQ's group must divide the inputs (hidden 2880 of the real shapes: 64 fits, 128 does not).
    auto c20 = preset_config("20b");
    ASSERT_TRUE(c20.is_ok());
    Status g128 = set_dense_quantization(&*c20, QuantMethod::kAwq, 128);
    EXPECT_NE(g128.message().find("2880"), std::string::npos) << g128.to_string();
    EXPECT_NE(g128.message().find("64 fits"), std::string::npos) << g128.to_string();
    EXPECT_TRUE(set_dense_quantization(&*c20, QuantMethod::kAwq, 64).is_ok());
    EXPECT_FALSE(set_dense_quantization(&*c20, QuantMethod::kAwq, 36).is_ok());  // not a multiple of 8
    EXPECT_FALSE(set_dense_quantization(&*c20, QuantMethod::kMxfp4, 0).is_ok());
}

TEST(DummyWeights, QuantizedConfigsGiveTheirFormatsAndSpread) {
    for (QuantMethod m : {QuantMethod::kInt8, QuantMethod::kAwq}) {
        SCOPED_TRACE(quant_method_name(m));
        const GptOssConfig c = quantized_tiny(m);
        auto w = make_dummy_weights(c, 3);
        ASSERT_TRUE(w.is_ok()) << w.status().to_string();
        const ops::Format f = m == QuantMethod::kInt8 ? ops::Format::kInt8 : ops::Format::kInt4;
        const double H = static_cast<double>(c.hidden_size), Q = static_cast<double>(c.q_dim());
        for (const LayerWeights& l : (*w)->layers) {
            for (const ops::DenseWeight* d : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj}) {
                EXPECT_EQ(d->format, f);
                EXPECT_EQ(d->group_size, m == QuantMethod::kAwq ? 64 : 0);
                EXPECT_NE(d->scales, nullptr);
                EXPECT_EQ(d->zeros != nullptr, m == QuantMethod::kAwq);
                EXPECT_NE(d->b.data, nullptr);
            }
            EXPECT_EQ(l.router.format, ops::Format::kBf16);
            EXPECT_EQ(l.gate_up.format, ops::Format::kMxfp4);
            EXPECT_EQ(l.down.format, ops::Format::kMxfp4);
        }
        EXPECT_EQ((*w)->embed_tokens.format, ops::Format::kBf16);
        const ops::DenseWeight& lm = (*w)->lm_head;
        EXPECT_EQ(lm.format, f);
        EXPECT_EQ(lm.out, c.vocab_size);
        EXPECT_EQ(lm.in, c.hidden_size);
        EXPECT_EQ(lm.b.data, nullptr);
        // Codes in range: INT8 never -128; AWQ zero points 7 or 8 (both occur).
        const ops::DenseWeight& q = (*w)->layers[0].q_proj;
        if (m == QuantMethod::kInt8) {
            const auto* codes = static_cast<const int8_t*>(q.w);
            int lo = 0, hi = 0;
            for (int64_t i = 0; i < q.out * q.in; ++i)
                lo = std::min<int>(lo, codes[i]), hi = std::max<int>(hi, codes[i]);
            EXPECT_EQ(lo, -127);
            EXPECT_EQ(hi, 127);
        } else {
            int count[16] = {};
            const auto* z = static_cast<const uint32_t*>(q.zeros);
            for (int64_t i = 0; i < (q.in / 64) * (q.out / 8); ++i)
                for (int j = 0; j < 8; ++j) ++count[quant::awq_nibble(z[i], j)];
            EXPECT_EQ(count[7] + count[8], (q.in / 64) * q.out);
            EXPECT_GT(count[7], 0);
            EXPECT_GT(count[8], 0);
        }
        // The dequantized weights have the bf16 weights' standard deviations (make-model's table), mean ~0.
        const std::vector<float> wq = dequantized_rows(q, q.out),
                                 wo = dequantized_rows((*w)->layers[0].o_proj, 64),
                                 wl = dequantized_rows(lm, 256);
        for (const auto& [vals, want] :
             {std::pair{&wq, 1.2 / std::sqrt(H)}, std::pair{&wo, 1.0 / std::sqrt(Q)},
              std::pair{&wl, 2.0 / std::sqrt(H)}}) {
            double mean = 0;
            for (float v : *vals) mean += v;
            mean /= static_cast<double>(vals->size());
            EXPECT_NEAR(stddev(*vals), want, 0.03 * want);  // f16 scale rounding and sampling
            EXPECT_LT(std::fabs(mean), 0.05 * want);
        }
        // Deterministic for a seed.
        auto again = make_dummy_weights(c, 3), other = make_dummy_weights(c, 4);
        ASSERT_TRUE(again.is_ok() && other.is_ok());
        const int64_t bytes = m == QuantMethod::kInt8 ? lm.out * lm.in : lm.out * lm.in / 2;
        EXPECT_EQ(std::memcmp(lm.w, (*again)->lm_head.w, bytes), 0);
        EXPECT_NE(std::memcmp(lm.w, (*other)->lm_head.w, bytes), 0);
        if (m == QuantMethod::kAwq) {
            EXPECT_EQ(std::memcmp(lm.zeros, (*again)->lm_head.zeros, lm.out / 8 * (lm.in / 64) * 4), 0);
        }

        // The CPU backend runs them: finite logits with a spread like the bf16 model's.
        expect_finite_spread_logits(*w);
    }
}

TEST(DummyWeights, ModulesNotConvertedStayBf16PerLayer) {
    GptOssConfig c = quantized_tiny(QuantMethod::kInt8);
    c.modules_to_not_convert.push_back("model.layers.1.self_attn");
    c.modules_to_not_convert.push_back("model.layers.2.self_attn.v_proj");
    c.modules_to_not_convert.push_back("lm_head");
    auto w = make_dummy_weights(c, 1);
    ASSERT_TRUE(w.is_ok()) << w.status().to_string();
    const auto& L = (*w)->layers;
    for (size_t i : {size_t{0}, size_t{3}})
        for (const ops::DenseWeight* d : {&L[i].q_proj, &L[i].k_proj, &L[i].v_proj, &L[i].o_proj})
            EXPECT_EQ(d->format, ops::Format::kInt8) << i;
    for (const ops::DenseWeight* d : {&L[1].q_proj, &L[1].k_proj, &L[1].v_proj, &L[1].o_proj})
        EXPECT_EQ(d->format, ops::Format::kBf16);
    EXPECT_EQ(L[2].q_proj.format, ops::Format::kInt8);
    EXPECT_EQ(L[2].v_proj.format, ops::Format::kBf16);
    EXPECT_EQ(L[2].o_proj.format, ops::Format::kInt8);
    EXPECT_EQ((*w)->lm_head.format, ops::Format::kBf16);
    EXPECT_EQ(L[0].q_proj.w, L[3].q_proj.w);  // one set per pattern: layers 0 and 3 share
    // An AWQ group that does not divide an input is refused naming the tensor.
    GptOssConfig bad = quantized_tiny(QuantMethod::kAwq);
    bad.awq_group_size = 96;
    auto r = make_dummy_weights(bad, 0, 0, /*fill_values=*/false);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("q_proj"), std::string::npos) << r.status().to_string();
}

TEST(DummyWeights, RealShapesQuantizedCountTheSameParameters) {
    // 20b, attention + lm_head int8 / awq g64 (unfilled): the same parameter count as bf16.
    for (QuantMethod m : {QuantMethod::kInt8, QuantMethod::kAwq}) {
        auto c = preset_config("20b");
        ASSERT_TRUE(c.is_ok());
        ASSERT_TRUE(set_dense_quantization(&*c, m, 64).is_ok());
        auto w = make_dummy_weights(*c, 0, 0, /*fill_values=*/false);
        ASSERT_TRUE(w.is_ok()) << w.status().to_string();
        EXPECT_EQ(parameters(**w), 20'914'757'184);
        EXPECT_EQ((*w)->lm_head.format, m == QuantMethod::kInt8 ? ops::Format::kInt8 : ops::Format::kInt4);
    }
}

}  // namespace
}  // namespace volt::model
