#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

namespace volt::model {

using nlohmann::json;

namespace {

// Reads an integer field; `required` fields must be present.
Status get_int(const json& j, const char* key, bool required, int64_t* out, const std::string& src) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) {
        if (required) return invalid_argument(src + ": config field '" + key + "' is missing");
        return Status::ok();
    }
    if (!it->is_number_integer()) {
        // A whole float (4096.0) is accepted. The range is checked before the cast: casting a double outside
        // int64's range is undefined behaviour (found by tests/fuzz/config_fuzz: 8.9e102).
        const double d = it->is_number_float() ? it->get<double>() : 0.5;
        if (d >= -9.2e18 && d <= 9.2e18 && d == std::trunc(d)) {
            *out = static_cast<int64_t>(d);
            return Status::ok();
        }
        return invalid_argument(src + ": config field '" + key + "' must be an integer, got " + it->dump());
    }
    if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        return invalid_argument(src + ": config field '" + key + "' is out of range, got " + it->dump());
    *out = it->get<int64_t>();
    return Status::ok();
}

Status get_num(const json& j, const char* key, double* out, const std::string& src) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return Status::ok();
    if (!it->is_number())
        return invalid_argument(src + ": config field '" + key + "' must be a number, got " + it->dump());
    *out = it->get<double>();
    return Status::ok();
}

Status get_bool(const json& j, const char* key, bool* out, const std::string& src) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return Status::ok();
    if (!it->is_boolean())
        return invalid_argument(src + ": config field '" + key + "' must be a boolean, got " + it->dump());
    *out = it->get<bool>();
    return Status::ok();
}

Status parse_rope(const json& r, RopeScaling* out, double* theta, const std::string& src) {
    if (!r.is_object()) return invalid_argument(src + ": rope scaling must be an object, got " + r.dump());
    if (auto it = r.find("rope_type"); it != r.end() && it->is_string())
        out->rope_type = it->get<std::string>();
    else if (auto it2 = r.find("type"); it2 != r.end() && it2->is_string())
        out->rope_type = it2->get<std::string>();
    if (out->rope_type != "yarn" && out->rope_type != "default")
        return invalid_argument(src + ": rope_type '" + out->rope_type +
                                "' is not supported (yarn, default)");
    VOLT_RETURN_IF_ERROR(get_num(r, "factor", &out->factor, src));
    VOLT_RETURN_IF_ERROR(get_num(r, "beta_fast", &out->beta_fast, src));
    VOLT_RETURN_IF_ERROR(get_num(r, "beta_slow", &out->beta_slow, src));
    VOLT_RETURN_IF_ERROR(
        get_int(r, "original_max_position_embeddings", false, &out->original_max_position_embeddings, src));
    VOLT_RETURN_IF_ERROR(get_bool(r, "truncate", &out->truncate, src));
    if (theta != nullptr) VOLT_RETURN_IF_ERROR(get_num(r, "rope_theta", theta, src));
    return Status::ok();
}

}  // namespace

namespace {

// One integer field under either of two names (AutoAWQ writes w_bit / q_group_size, transformers and
// vLLM bits / group_size); -1 when absent.
Result<int64_t> quant_int(const json& q, const char* a, const char* b, const std::string& src) {
    for (const char* k : {a, b}) {
        if (auto it = q.find(k); it != q.end() && !it->is_null()) {
            if (!it->is_number_integer()) return invalid_argument(src + "." + k + " must be an integer");
            return it->get<int64_t>();
        }
    }
    return int64_t{-1};
}

// quantization_config (docs/quantization.md "quantization_config"): mxfp4 (experts), awq and int8
// (attention + lm_head, experts MXFP4).
Status parse_quantization_config(const json& q, const std::string& src, GptOssConfig* c) {
    const std::string method = q.value("quant_method", "");
    if (auto m = q.find("modules_to_not_convert"); m != q.end() && m->is_array())
        for (const auto& s : *m)
            if (s.is_string()) c->modules_to_not_convert.push_back(s.get<std::string>());
    if (method == "mxfp4") {
        c->mxfp4_quantized = true;
        c->quant_method = QuantMethod::kMxfp4;
        return Status::ok();
    }
    if (method != "awq" && method != "int8")
        return invalid_argument(src + ".quant_method '" + method + "' is not supported (mxfp4, awq, int8)");
    c->quant_method = method == "awq" ? QuantMethod::kAwq : QuantMethod::kInt8;
    VOLT_ASSIGN_OR_RETURN(int64_t bits, quant_int(q, "bits", "w_bit", src));
    if (c->quant_method == QuantMethod::kAwq) {
        if (bits != 4)
            return invalid_argument(src + ": awq needs bits (w_bit) 4, got " + std::to_string(bits));
        VOLT_ASSIGN_OR_RETURN(c->awq_group_size, quant_int(q, "group_size", "q_group_size", src));
        if (c->awq_group_size <= 0)
            return invalid_argument(src +
                                    ": awq needs a positive group_size (q_group_size); -1 (whole rows) "
                                    "is not supported");
        if (!q.value("zero_point", false))
            return invalid_argument(src +
                                    ": awq without zero_point is not supported (AutoAWQ's gemm layout "
                                    "stores zero points)");
        std::string version = q.value("version", "gemm");
        std::transform(version.begin(), version.end(), version.begin(), ::tolower);
        if (version != "gemm")
            return invalid_argument(src + ": awq version '" + version + "' is not supported (gemm)");
    } else if (bits != -1 && bits != 8) {
        return invalid_argument(src + ": int8 needs bits 8, got " + std::to_string(bits));
    }
    // Only attention and lm_head are quantized; everything else must be listed as not converted.
    if (!module_not_converted(*c, "model.layers.0.mlp.experts"))
        return invalid_argument(
            src + ": " + method +
            " experts are not supported: AutoAWQ cannot quantize gpt-oss experts; "
            "keep them MXFP4 and list model.layers.*.mlp.experts in modules_to_not_convert "
            "(voltllm convert writes such checkpoints)");
    for (const char* m : {"model.layers.0.mlp.router", "model.embed_tokens"})
        if (!module_not_converted(*c, m))
            return invalid_argument(src + ": " + method +
                                    " is supported for the attention projections and "
                                    "lm_head only; modules_to_not_convert must name " +
                                    std::string(m) + " (as a pattern such as model.layers.*.mlp.router)");
    return Status::ok();
}

std::vector<std::string> split_dots(const std::string& s) {
    std::vector<std::string> parts;
    size_t b = 0;
    while (true) {
        const size_t e = s.find('.', b);
        parts.push_back(s.substr(b, e == std::string::npos ? std::string::npos : e - b));
        if (e == std::string::npos) return parts;
        b = e + 1;
    }
}

}  // namespace

const char* quant_method_name(QuantMethod m) {
    switch (m) {
        case QuantMethod::kNone:
            return "none";
        case QuantMethod::kMxfp4:
            return "mxfp4";
        case QuantMethod::kAwq:
            return "awq";
        case QuantMethod::kInt8:
            return "int8";
    }
    return "?";
}

bool module_not_converted(const GptOssConfig& c, const std::string& module) {
    const std::vector<std::string> name = split_dots(module);
    for (const std::string& pattern : c.modules_to_not_convert) {
        const std::vector<std::string> p = split_dots(pattern);
        for (size_t start = 0; start + p.size() <= name.size(); ++start) {
            bool match = true;
            for (size_t k = 0; k < p.size() && match; ++k) match = p[k] == "*" || p[k] == name[start + k];
            if (match) return true;
        }
    }
    return false;
}

std::vector<std::string> dense_quant_modules_not_converted() {
    return {"model.embed_tokens", "model.layers.*.mlp.router", "model.layers.*.mlp.experts"};
}

Status set_dense_quantization(GptOssConfig* c, QuantMethod method, int64_t group_size) {
    if (method != QuantMethod::kAwq && method != QuantMethod::kInt8)
        return invalid_argument(std::string("quantization ") + quant_method_name(method) +
                                ": only awq and int8 quantize the attention projections and lm_head");
    if (method == QuantMethod::kAwq) {
        const int64_t H = c->hidden_size, Q = c->q_dim();
        if (group_size <= 0 || group_size % 8 != 0 || H % group_size != 0 || Q % group_size != 0) {
            std::string fits;
            for (int64_t g : {128, 64, 32})
                if (H % g == 0 && Q % g == 0) {
                    fits = "; " + std::to_string(g) + " fits";
                    break;
                }
            return invalid_argument("the AWQ group size " + std::to_string(group_size) +
                                    " must be a multiple of 8 that divides hidden_size (" +
                                    std::to_string(H) + ") and the q width (" + std::to_string(Q) +
                                    ", o_proj's input)" + fits);
        }
        for (auto [what, n] : {std::pair{"q width", Q}, std::pair{"kv width", c->kv_dim()},
                               std::pair{"hidden_size", H}, std::pair{"vocab_size", c->vocab_size}})
            if (n % 8 != 0)
                return invalid_argument(std::string("AWQ packs 8 output columns per int32; the ") + what +
                                        " " + std::to_string(n) + " is not a multiple of 8");
    }
    c->quant_method = method;
    c->mxfp4_quantized = false;
    c->awq_group_size = method == QuantMethod::kAwq ? group_size : 0;
    c->modules_to_not_convert = dense_quant_modules_not_converted();
    return Status::ok();
}

bool dense_quantized(const GptOssConfig& c, const std::string& module) {
    return (c.quant_method == QuantMethod::kAwq || c.quant_method == QuantMethod::kInt8) &&
           !module_not_converted(c, module);
}

Result<GptOssConfig> parse_config(const json& j, const std::string& src) {
    if (!j.is_object()) return invalid_argument(src + ": config.json must hold a JSON object");
    GptOssConfig c;
    if (auto it = j.find("model_type"); it != j.end() && it->is_string())
        c.model_type = it->get<std::string>();
    if (c.model_type != "gpt_oss")
        return invalid_argument(src + ": model_type '" + c.model_type + "' is not gpt_oss");
    VOLT_RETURN_IF_ERROR(get_int(j, "num_hidden_layers", true, &c.num_hidden_layers, src));
    if (j.contains("num_local_experts"))
        VOLT_RETURN_IF_ERROR(get_int(j, "num_local_experts", true, &c.num_local_experts, src));
    else
        VOLT_RETURN_IF_ERROR(get_int(j, "num_experts", true, &c.num_local_experts, src));
    if (j.contains("num_experts_per_tok"))
        VOLT_RETURN_IF_ERROR(get_int(j, "num_experts_per_tok", true, &c.num_experts_per_tok, src));
    else
        VOLT_RETURN_IF_ERROR(get_int(j, "experts_per_token", true, &c.num_experts_per_tok, src));
    VOLT_RETURN_IF_ERROR(get_int(j, "hidden_size", true, &c.hidden_size, src));
    VOLT_RETURN_IF_ERROR(get_int(j, "intermediate_size", true, &c.intermediate_size, src));
    VOLT_RETURN_IF_ERROR(get_int(j, "num_attention_heads", true, &c.num_attention_heads, src));
    VOLT_RETURN_IF_ERROR(get_int(j, "num_key_value_heads", true, &c.num_key_value_heads, src));
    c.head_dim = c.num_attention_heads > 0 ? c.hidden_size / c.num_attention_heads : 0;
    VOLT_RETURN_IF_ERROR(get_int(j, "head_dim", false, &c.head_dim, src));
    VOLT_RETURN_IF_ERROR(get_int(j, "vocab_size", true, &c.vocab_size, src));
    VOLT_RETURN_IF_ERROR(get_int(j, "sliding_window", false, &c.sliding_window, src));
    VOLT_RETURN_IF_ERROR(get_int(j, "initial_context_length", false, &c.initial_context_length, src));
    VOLT_RETURN_IF_ERROR(get_int(j, "max_position_embeddings", false, &c.max_position_embeddings, src));
    VOLT_RETURN_IF_ERROR(get_num(j, "swiglu_limit", &c.swiglu_limit, src));
    VOLT_RETURN_IF_ERROR(get_num(j, "swiglu_alpha", &c.swiglu_alpha, src));
    VOLT_RETURN_IF_ERROR(get_num(j, "rms_norm_eps", &c.rms_norm_eps, src));
    VOLT_RETURN_IF_ERROR(get_bool(j, "attention_bias", &c.attention_bias, src));
    VOLT_RETURN_IF_ERROR(get_bool(j, "tie_word_embeddings", &c.tie_word_embeddings, src));
    VOLT_RETURN_IF_ERROR(get_int(j, "pad_token_id", false, &c.pad_token_id, src));
    if (auto it = j.find("eos_token_id"); it != j.end() && !it->is_null()) {
        if (it->is_number_integer()) {
            c.eos_token_ids.push_back(it->get<int64_t>());
        } else if (it->is_array()) {
            for (const auto& e : *it) {
                if (!e.is_number_integer())
                    return invalid_argument(src + ": eos_token_id entries must be integers");
                c.eos_token_ids.push_back(e.get<int64_t>());
            }
        } else {
            return invalid_argument(src + ": eos_token_id must be an integer or a list");
        }
    }

    // Rope: published rope_scaling + rope_theta, or transformers >= 5 rope_parameters.
    VOLT_RETURN_IF_ERROR(get_num(j, "rope_theta", &c.rope_theta, src));
    if (auto it = j.find("rope_parameters"); it != j.end() && !it->is_null()) {
        VOLT_RETURN_IF_ERROR(parse_rope(*it, &c.rope_scaling, &c.rope_theta, src));
    } else if (auto it2 = j.find("rope_scaling"); it2 != j.end() && !it2->is_null()) {
        VOLT_RETURN_IF_ERROR(parse_rope(*it2, &c.rope_scaling, nullptr, src));
    } else {
        c.rope_scaling.rope_type = "default";
    }

    if (auto it = j.find("layer_types"); it != j.end() && !it->is_null()) {
        if (!it->is_array()) return invalid_argument(src + ": layer_types must be a list");
        for (const auto& t : *it) {
            std::string s = t.is_string() ? t.get<std::string>() : "";
            if (s == "sliding_attention")
                c.layer_types.push_back(LayerType::kSlidingAttention);
            else if (s == "full_attention")
                c.layer_types.push_back(LayerType::kFullAttention);
            else
                return invalid_argument(src + ": layer_types entry " + t.dump() +
                                        " is not sliding_attention or full_attention");
        }
    } else {
        // transformers' default: even layers slide, odd layers attend fully.
        for (int64_t l = 0; l < c.num_hidden_layers; ++l)
            c.layer_types.push_back(l % 2 == 0 ? LayerType::kSlidingAttention : LayerType::kFullAttention);
    }

    if (auto it = j.find("quantization_config"); it != j.end() && it->is_object()) {
        VOLT_RETURN_IF_ERROR(parse_quantization_config(*it, src + ": quantization_config", &c));
    }
    VOLT_RETURN_IF_ERROR(validate_config(c, src));
    return c;
}

Status validate_config(const GptOssConfig& c, const std::string& src) {
    auto bad = [&](const std::string& m) { return invalid_argument(src + ": inconsistent config: " + m); };
    if (c.num_hidden_layers <= 0) return bad("num_hidden_layers must be > 0");
    if (c.hidden_size <= 0 || c.intermediate_size <= 0)
        return bad("hidden_size and intermediate_size must be > 0");
    if (c.head_dim <= 0 || c.head_dim % 2 != 0) return bad("head_dim must be a positive even number");
    if (c.num_attention_heads <= 0 || c.num_key_value_heads <= 0) return bad("head counts must be > 0");
    if (c.num_attention_heads % c.num_key_value_heads != 0)
        return bad("num_attention_heads (" + std::to_string(c.num_attention_heads) +
                   ") is not a multiple of num_key_value_heads (" + std::to_string(c.num_key_value_heads) +
                   ")");
    if (c.num_local_experts <= 0) return bad("num_local_experts must be > 0");
    if (c.num_experts_per_tok <= 0 || c.num_experts_per_tok > c.num_local_experts)
        return bad("num_experts_per_tok must be in 1..num_local_experts");
    if (c.vocab_size <= 0) return bad("vocab_size must be > 0");
    if (static_cast<int64_t>(c.layer_types.size()) != c.num_hidden_layers)
        return bad("layer_types has " + std::to_string(c.layer_types.size()) + " entries for " +
                   std::to_string(c.num_hidden_layers) + " layers");
    for (auto t : c.layer_types)
        if (t == LayerType::kSlidingAttention && c.sliding_window <= 0)
            return bad("sliding_attention layers need sliding_window > 0");
    if (c.rope_theta <= 1.0) return bad("rope_theta must be > 1");
    if (c.rope_scaling.rope_type == "yarn" &&
        (c.rope_scaling.factor < 1.0 || c.rope_scaling.original_max_position_embeddings <= 0))
        return bad("yarn needs factor >= 1 and original_max_position_embeddings > 0");
    if (c.swiglu_limit <= 0) return bad("swiglu_limit must be > 0");
    if (c.rms_norm_eps <= 0) return bad("rms_norm_eps must be > 0");
    if (c.tie_word_embeddings) return bad("tie_word_embeddings=true is not a GPT-OSS checkpoint");
    return Status::ok();
}

Result<GptOssConfig> load_config_file(const std::string& path) {
    std::ifstream f(path);
    if (!f) return not_found("cannot open " + path);
    std::stringstream ss;
    ss << f.rdbuf();
    json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return invalid_argument(path + ": not valid JSON");
    return parse_config(j, path);
}

json config_to_json(const GptOssConfig& c) {
    json j;
    j["architectures"] = json::array({"GptOssForCausalLM"});
    j["model_type"] = "gpt_oss";
    j["num_hidden_layers"] = c.num_hidden_layers;
    j["num_local_experts"] = c.num_local_experts;
    j["num_experts_per_tok"] = c.num_experts_per_tok;
    j["experts_per_token"] = c.num_experts_per_tok;
    j["hidden_size"] = c.hidden_size;
    j["intermediate_size"] = c.intermediate_size;
    j["head_dim"] = c.head_dim;
    j["num_attention_heads"] = c.num_attention_heads;
    j["num_key_value_heads"] = c.num_key_value_heads;
    j["vocab_size"] = c.vocab_size;
    j["sliding_window"] = c.sliding_window;
    json lt = json::array();
    for (auto t : c.layer_types)
        lt.push_back(t == LayerType::kSlidingAttention ? "sliding_attention" : "full_attention");
    j["layer_types"] = lt;
    j["rope_theta"] = c.rope_theta;
    if (c.rope_scaling.rope_type == "yarn") {
        j["rope_scaling"] = {
            {"rope_type", "yarn"},
            {"factor", c.rope_scaling.factor},
            {"beta_fast", c.rope_scaling.beta_fast},
            {"beta_slow", c.rope_scaling.beta_slow},
            {"original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings},
            {"truncate", c.rope_scaling.truncate}};
    }
    j["initial_context_length"] = c.initial_context_length;
    j["max_position_embeddings"] = c.max_position_embeddings;
    j["swiglu_limit"] = c.swiglu_limit;
    j["rms_norm_eps"] = c.rms_norm_eps;
    j["attention_bias"] = c.attention_bias;
    j["tie_word_embeddings"] = c.tie_word_embeddings;
    j["hidden_act"] = "silu";
    j["attention_dropout"] = 0.0;
    j["initializer_range"] = 0.02;
    j["router_aux_loss_coef"] = 0.9;
    j["output_router_logits"] = false;
    j["use_cache"] = true;
    if (c.eos_token_ids.size() == 1)
        j["eos_token_id"] = c.eos_token_ids[0];
    else if (!c.eos_token_ids.empty())
        j["eos_token_id"] = c.eos_token_ids;
    if (c.pad_token_id >= 0) j["pad_token_id"] = c.pad_token_id;
    if (c.quant_method == QuantMethod::kAwq || c.quant_method == QuantMethod::kInt8) {
        json q = {{"quant_method", quant_method_name(c.quant_method)},
                  {"bits", c.quant_method == QuantMethod::kAwq ? 4 : 8}};
        if (c.quant_method == QuantMethod::kAwq) {
            q["group_size"] = c.awq_group_size;
            q["zero_point"] = true;
            q["version"] = "gemm";
        }
        q["modules_to_not_convert"] = c.modules_to_not_convert;
        j["quantization_config"] = q;
    } else if (c.mxfp4_quantized) {
        j["quantization_config"] = {
            {"quant_method", "mxfp4"},
            {"modules_to_not_convert",
             c.modules_to_not_convert.empty()
                 ? json::array({"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                                "lm_head"})
                 : json(c.modules_to_not_convert)}};
    }
    return j;
}

}  // namespace volt::model
