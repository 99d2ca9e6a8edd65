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

// quantization_config.quant_method (docs/quantization.md). kNone: a bf16-layout checkpoint. kAwq and kInt8
// quantize the attention projections and lm_head only (the modules that modules_to_not_convert does not
// name); the experts stay MXFP4 in every format (AutoAWQ cannot quantize gpt-oss experts).
enum class QuantMethod { kNone, kMxfp4, kAwq, kInt8 };
const char* quant_method_name(QuantMethod m);  // "none", "mxfp4", "awq", "int8"

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
    QuantMethod quant_method = QuantMethod::kNone;
    int64_t awq_group_size = 0;  // kAwq: quantization_config.group_size (input elements per scale)
    std::vector<std::string> modules_to_not_convert;
    std::string model_type = "gpt_oss";

    int64_t q_dim() const { return num_attention_heads * head_dim; }
    int64_t kv_dim() const { return num_key_value_heads * head_dim; }
    bool is_sliding(int64_t layer) const { return layer_types[layer] == LayerType::kSlidingAttention; }
};

// Whether modules_to_not_convert names `module` (a dotted name such as "model.layers.3.self_attn.q_proj"):
// a pattern matches when its dot-separated components equal a run of consecutive components of the
// name, `*` matching any one component ("model.layers.*.self_attn", "lm_head", "mlp.experts"). This
// covers the published globs (HF) and vLLM's plain substrings of whole components.
bool module_not_converted(const GptOssConfig& c, const std::string& module);
// The modules_to_not_convert of an awq / int8 checkpoint as `voltllm convert` writes it (everything but the
// attention projections and lm_head): the embedding, the routers, the (MXFP4) experts.
std::vector<std::string> dense_quant_modules_not_converted();
// Makes `c` an awq (group_size input elements per scale) or int8 config as `voltllm convert` writes it:
// quant_method, awq_group_size, modules_to_not_convert (above). The shapes are checked as the loader
// and the CUDA backend check them: awq needs the group size to divide hidden_size and the q width (o_proj's
// input), a multiple of 8 (a packed word), and the q / kv widths, hidden_size and vocab_size multiples of
// 8. Errors: kInvalidArgument naming the size (and a group size that fits), or for another method.
Status set_dense_quantization(GptOssConfig* c, QuantMethod method, int64_t group_size);
// Whether the dense projection `module` (q/k/v/o_proj of a layer, or "lm_head") is stored in the
// checkpoint's integer format (kAwq / kInt8 and not in modules_to_not_convert).
bool dense_quantized(const GptOssConfig& c, const std::string& module);

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
