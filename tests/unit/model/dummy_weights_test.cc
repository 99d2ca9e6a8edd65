// --load-format dummy (model/dummy_weights.h): every tensor of the real shapes is there (the parameter
// count of gpt-oss-20b and -120b from the model card / spec §1.3), the values have the standard deviations
// the header promises (MXFP4 decoded by quant/mxfp4.h, which equals transformers' dequantisation), a forward
// pass over them stays finite with logits of a useful spread, and the same seed gives the same bytes.
#include "model/dummy_weights.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "cpu/cpu_ops.h"
#include "model/make_model.h"
#include "model/placed_model.h"
#include "model/sequence_runner.h"
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
    cpu::CpuBackend backend;
    Forward fwd(*place_model(*a, backend), backend);
    std::vector<int32_t> ids(40);
    for (int i = 0; i < 40; ++i) ids[i] = (i * 37) % static_cast<int>(c->vocab_size);
    SequenceRunner run(fwd, static_cast<int64_t>(ids.size()));
    const std::vector<float> logits = run.append(ids, /*all_rows=*/true);
    for (float v : logits) ASSERT_TRUE(std::isfinite(v));
    const double s = stddev(logits);
    EXPECT_GT(s, 0.3);
    EXPECT_LT(s, 10.0);
}

}  // namespace
}  // namespace volt::model
