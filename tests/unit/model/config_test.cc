// config.json parsing: both rope forms, both expert-count spellings, and clear errors that name the
// field. The published values are those of spec/gpt-oss.md §1.1 (openai/gpt-oss-20b config.json).
#include "model/config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace volt::model {

using nlohmann::json;

json published_20b() {
    json lt = json::array();
    for (int i = 0; i < 24; ++i) lt.push_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
    return json{
        {"architectures", {"GptOssForCausalLM"}},
        {"model_type", "gpt_oss"},
        {"num_hidden_layers", 24},
        {"num_local_experts", 32},
        {"num_experts_per_tok", 4},
        {"experts_per_token", 4},
        {"hidden_size", 2880},
        {"intermediate_size", 2880},
        {"head_dim", 64},
        {"num_attention_heads", 64},
        {"num_key_value_heads", 8},
        {"vocab_size", 201088},
        {"sliding_window", 128},
        {"layer_types", lt},
        {"rope_theta", 150000},
        {"rope_scaling",
         {{"rope_type", "yarn"},
          {"factor", 32.0},
          {"beta_fast", 32.0},
          {"beta_slow", 1.0},
          {"original_max_position_embeddings", 4096},
          {"truncate", false}}},
        {"initial_context_length", 4096},
        {"max_position_embeddings", 131072},
        {"swiglu_limit", 7.0},
        {"rms_norm_eps", 1e-05},
        {"attention_bias", true},
        {"tie_word_embeddings", false},
        {"hidden_act", "silu"},
        {"eos_token_id", 200002},
        {"pad_token_id", 199999},
        {"quantization_config",
         {{"quant_method", "mxfp4"}, {"modules_to_not_convert", {"model.layers.*.self_attn", "lm_head"}}}}};
}

TEST(Config, ParsesThePublished20b) {
    auto r = parse_config(published_20b(), "config.json");
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    const auto& c = *r;
    EXPECT_EQ(c.num_hidden_layers, 24);
    EXPECT_EQ(c.q_dim(), 4096);
    EXPECT_EQ(c.kv_dim(), 512);
    EXPECT_TRUE(c.is_sliding(0));
    EXPECT_FALSE(c.is_sliding(1));
    EXPECT_EQ(c.rope_scaling.factor, 32.0);
    EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 4096);
    EXPECT_FALSE(c.rope_scaling.truncate);
    EXPECT_TRUE(c.mxfp4_quantized);
    EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{200002});
}

TEST(Config, AcceptsRopeParametersForm) {
    json j = published_20b();
    json rp = j["rope_scaling"];
    rp["rope_theta"] = 150000.0;
    j.erase("rope_scaling");
    j.erase("rope_theta");
    j["rope_parameters"] = rp;
    auto r = parse_config(j, "c");
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(r->rope_theta, 150000.0);
    EXPECT_EQ(r->rope_scaling.beta_fast, 32.0);
}

TEST(Config, AcceptsTheOriginalExpertKeys) {
    json j = published_20b();
    j.erase("num_local_experts");
    j.erase("num_experts_per_tok");
    j["num_experts"] = 128;
    auto r = parse_config(j, "c");
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(r->num_local_experts, 128);
    EXPECT_EQ(r->num_experts_per_tok, 4);
}

TEST(Config, RoundTripsThroughJson) {
    auto a = parse_config(published_20b(), "c");
    ASSERT_TRUE(a.is_ok());
    auto b = parse_config(config_to_json(*a), "c2");
    ASSERT_TRUE(b.is_ok()) << b.status().to_string();
    EXPECT_EQ(config_to_json(*a), config_to_json(*b));
}

TEST(Config, ErrorsNameTheField) {
    json j = published_20b();
    j.erase("hidden_size");
    auto r = parse_config(j, "/m/config.json");
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("hidden_size"), std::string::npos);
    EXPECT_NE(r.status().message().find("/m/config.json"), std::string::npos);

    j = published_20b();
    j["num_key_value_heads"] = 7;
    r = parse_config(j, "c");
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("num_key_value_heads"), std::string::npos);

    j = published_20b();
    j["layer_types"] = json::array({"sliding_attention"});
    EXPECT_FALSE(parse_config(j, "c").is_ok());

    j = published_20b();
    j["num_attention_heads"] = "64";
    EXPECT_FALSE(parse_config(j, "c").is_ok());
}

}  // namespace volt::model
