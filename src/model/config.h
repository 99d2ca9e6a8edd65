// GptOssConfig: every field of a GPT-OSS config.json (spec/gpt-oss.md §1.1), validated for consistency.
// Both rope forms are accepted: the published `rope_scaling` + `rope_theta` and the newer transformers
// `rope_parameters` (with `rope_theta` inside). Sizes are taken from the file, never hard-coded.
// Tests: tests/unit/model/config_test.cc.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace volt::model {

enum class LayerType { kSlidingAttention, kFullAttention };

struct RopeScaling {
    std::string rope_type = "yarn";  // "yarn" or "default" (plain RoPE)
    double factor = 32.0;            // s
    double beta_fast = 32.0;
    double beta_slow = 1.0;
    int64_t original_max_position_embeddings = 4096;  // L0
    bool truncate = false;                            // floor/ceil the correction range (false for gpt-oss)
};

struct GptOssConfig {
    int64_t num_hidden_layers = 0;
    int64_t num_local_experts = 0;
    int64_t num_experts_per_tok = 0;
    int64_t hidden_size = 0;
    int64_t intermediate_size = 0;
    int64_t head_dim = 0;
    int64_t num_attention_heads = 0;
    int64_t num_key_value_heads = 0;
    int64_t vocab_size = 0;
    int64_t sliding_window = 0;
    std::vector<LayerType> layer_types;  // [num_hidden_layers]
    double rope_theta = 150000.0;
    RopeScaling rope_scaling;
    int64_t initial_context_length = 4096;
    int64_t max_position_embeddings = 131072;
    double swiglu_limit = 7.0;
    double swiglu_alpha = 1.702;  // hard-coded in HF modeling; newest config calls it swiglu_alpha
    double rms_norm_eps = 1e-5;
    bool attention_bias = true;
    bool tie_word_embeddings = false;
    std::vector<int64_t> eos_token_ids;  // config eos_token_id (int or list)
    int64_t pad_token_id = -1;
    bool mxfp4_quantized = false;  // quantization_config.quant_method == "mxfp4"
    std::vector<std::string> modules_to_not_convert;
    std::string model_type = "gpt_oss";

    int64_t q_dim() const { return num_attention_heads * head_dim; }
    int64_t kv_dim() const { return num_key_value_heads * head_dim; }
    bool is_sliding(int64_t layer) const { return layer_types[layer] == LayerType::kSlidingAttention; }
};

// The KV group of a layer (ops::kNumKvGroups; blocks of a group are allocated together).
enum KvGroup : int { kFullGroup = 0, kSlidingGroup = 1 };
inline KvGroup kv_group_of(const GptOssConfig& c, int64_t layer) {
    return c.is_sliding(layer) ? kSlidingGroup : kFullGroup;
}

// Parses config.json text. Errors (kInvalidArgument) name the field and `source` (a path for messages).
Result<GptOssConfig> parse_config(const nlohmann::json& j, const std::string& source);
Result<GptOssConfig> load_config_file(const std::string& path);

// The published form (rope_scaling + rope_theta), quantization_config when mxfp4_quantized.
nlohmann::json config_to_json(const GptOssConfig& c);

// Checks sizes agree with each other (heads divide, layer_types length, top-k <= experts ...).
Status validate_config(const GptOssConfig& c, const std::string& source);

}  // namespace volt::model
