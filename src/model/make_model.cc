// Random-weight checkpoint generation: presets, the weight-statistics table, the tensor plan of spec §2.1,
// and a shard-at-a-time writer (safetensors files via io/safetensors_writer.h plus the index JSON).
// Test: tests/unit/quant/make_model_test.cc.
#include "model/make_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"
#include "core/logging.h"
#include "core/thread_pool.h"
#include "io/safetensors_writer.h"

namespace volt::model {

namespace {
constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
}

uint64_t splitmix64(uint64_t x) {
    uint64_t z = x + kGolden;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t tensor_key(uint64_t seed, std::string_view name) {
    uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64
    for (char ch : name) {
        h ^= static_cast<uint8_t>(ch);
        h *= 0x100000001b3ull;
    }
    return splitmix64(splitmix64(seed) ^ h);
}

void fill_normal(uint64_t key, int64_t first, int64_t n, float* out) {
    constexpr double kTwoPi = 6.283185307179586;
    int64_t i = first;
    const int64_t end = first + n;
    while (i < end) {
        const uint64_t k = static_cast<uint64_t>(i / 2);
        // u1 in (0, 1], u2 in [0, 1): 53-bit uniforms.
        const double u1 = static_cast<double>((splitmix64(key + (2 * k) * kGolden) >> 11) + 1) * 0x1p-53;
        const double u2 = static_cast<double>(splitmix64(key + (2 * k + 1) * kGolden) >> 11) * 0x1p-53;
        const double r = std::sqrt(-2.0 * std::log(u1));
        if (i % 2 == 0) {
            out[i - first] = static_cast<float>(r * std::cos(kTwoPi * u2));
            ++i;
        }
        if (i < end) {
            out[i - first] = static_cast<float>(r * std::sin(kTwoPi * u2));
            ++i;
        }
    }
}

// ---- Configs ----------------------------------------------------------------------------------------

namespace {

constexpr int64_t kGptOssVocab = 201088;

void set_layers(GptOssConfig* c, int64_t n) {
    c->num_hidden_layers = n;
    c->layer_types.clear();
    for (int64_t l = 0; l < n; ++l)
        c->layer_types.push_back(l % 2 == 0 ? LayerType::kSlidingAttention : LayerType::kFullAttention);
}

// Whether the vocabulary holds the harmony special tokens (<|return|> = 200002, <|call|> = 200012).
bool has_gpt_oss_specials(int64_t vocab) { return vocab > 200012; }

}  // namespace

Result<GptOssConfig> preset_config(std::string_view preset, const ConfigOverrides& o) {
    GptOssConfig c;  // defaults: rope theta 150000, yarn 32/4096/32/1, swiglu 7, eps 1e-5 (spec §1.1)
    if (preset == "tiny" || preset == "tiny-chat") {
        c.num_local_experts = 4;
        c.num_experts_per_tok = 2;
        c.hidden_size = 64;
        c.intermediate_size = 64;
        c.head_dim = 16;
        c.num_attention_heads = 4;
        c.num_key_value_heads = 2;
        c.vocab_size = preset == "tiny" ? 1000 : kGptOssVocab;
        c.sliding_window = 8;
        set_layers(&c, 4);
    } else if (preset == "20b" || preset == "120b") {
        c.num_local_experts = preset == "20b" ? 32 : 128;
        c.num_experts_per_tok = 4;
        c.hidden_size = 2880;
        c.intermediate_size = 2880;
        c.head_dim = 64;
        c.num_attention_heads = 64;
        c.num_key_value_heads = 8;
        c.vocab_size = kGptOssVocab;
        c.sliding_window = 128;
        set_layers(&c, preset == "20b" ? 24 : 36);
    } else {
        return invalid_argument("unknown preset '" + std::string(preset) + "' (tiny, tiny-chat, 20b, 120b)");
    }
    if (o.num_hidden_layers) set_layers(&c, *o.num_hidden_layers);
    if (o.hidden_size) c.hidden_size = *o.hidden_size;
    if (o.intermediate_size) c.intermediate_size = *o.intermediate_size;
    if (o.num_local_experts) c.num_local_experts = *o.num_local_experts;
    if (o.num_experts_per_tok) c.num_experts_per_tok = *o.num_experts_per_tok;
    if (o.num_attention_heads) c.num_attention_heads = *o.num_attention_heads;
    if (o.num_key_value_heads) c.num_key_value_heads = *o.num_key_value_heads;
    if (o.head_dim) c.head_dim = *o.head_dim;
    if (o.vocab_size) c.vocab_size = *o.vocab_size;
    if (o.sliding_window) c.sliding_window = *o.sliding_window;
    if (has_gpt_oss_specials(c.vocab_size)) {
        c.eos_token_ids = {200002};
        c.pad_token_id = 199999;
    } else {
        c.eos_token_ids = {c.vocab_size - 2};
        c.pad_token_id = c.vocab_size - 1;
    }
    c.mxfp4_quantized = true;
    const std::string src = "preset " + std::string(preset);
    VOLT_RETURN_IF_ERROR(validate_config(c, src));
    if (c.vocab_size < 3) return invalid_argument(src + ": vocab_size must be >= 3 (special ids)");
    if (c.hidden_size % quant::kMxfp4BlockSize != 0 || c.intermediate_size % quant::kMxfp4BlockSize != 0)
        return invalid_argument(src + ": hidden_size (" + std::to_string(c.hidden_size) +
                                ") and intermediate_size (" + std::to_string(c.intermediate_size) +
                                ") must be multiples of 32 (MXFP4 blocks)");
    return c;
}

nlohmann::json make_config_json(const GptOssConfig& config, ExpertLayout layout) {
    GptOssConfig c = config;
    c.mxfp4_quantized = layout == ExpertLayout::kMxfp4;
    nlohmann::json j = config_to_json(c);
    if (layout == ExpertLayout::kBf16) {
        // transformers >= 5 writes rope_parameters (with rope_theta inside) and the dtype.
        nlohmann::json rp = j.contains("rope_scaling") ? j["rope_scaling"] : nlohmann::json::object();
        if (rp.empty()) rp["rope_type"] = "default";
        rp["rope_theta"] = j["rope_theta"];
        j.erase("rope_scaling");
        j.erase("rope_theta");
        j["rope_parameters"] = rp;
        j["dtype"] = "bfloat16";
    }
    return j;
}

nlohmann::json make_generation_config_json(const GptOssConfig& c) {
    const int64_t v = c.vocab_size;
    const bool real = has_gpt_oss_specials(v);
    return nlohmann::json{
        {"bos_token_id", real ? 199998 : v - 3},
        {"do_sample", true},
        {"eos_token_id", real ? nlohmann::json{200002, 199999, 200012} : nlohmann::json{v - 2, v - 1}},
        {"pad_token_id", real ? 199999 : v - 1},
        {"transformers_version", "4.55.0.dev0"},
    };
}

// ---- Weight statistics ------------------------------------------------------------------------------

namespace {

// value = mean + std * exp(row_sigma * z_row) * z, z and z_row standard normals (z_row one per row).
// Chosen so that with RMSNorm'd inputs (entries ~N(0, 1)) q.k logits have std ~1-2, router logits std ~2,
// expert pre-activations std ~2.5-4 (so the 7.0 SwiGLU clamp is hit by ~1% of gate and up units) and
// lm_head logits std ~2. See docs/quantization.md, "Random checkpoints".
struct Init {
    double mean = 0.0, std = 0.0, row_sigma = 0.0;
};

// Shape [rows, cols] of a logical tensor; false when the name is not one of the config.
bool logical_shape(const GptOssConfig& c, const std::string& name, int64_t* rows, int64_t* cols, Init* init) {
    const double h = static_cast<double>(c.hidden_size);
    const double inter = static_cast<double>(c.intermediate_size);
    const double q = static_cast<double>(c.q_dim());
    const int64_t E = c.num_local_experts;
    auto set = [&](int64_t r, int64_t k, Init i) {
        *rows = r;
        *cols = k;
        *init = i;
        return true;
    };
    if (name == "model.embed_tokens.weight") return set(c.vocab_size, c.hidden_size, {0.0, 1.0, 0.0});
    if (name == "lm_head.weight") return set(c.vocab_size, c.hidden_size, {0.0, 2.0 / std::sqrt(h), 0.1});
    if (name == "model.norm.weight") return set(1, c.hidden_size, {1.0, 0.2, 0.0});
    const std::string prefix = "model.layers.";
    if (name.rfind(prefix, 0) != 0) return false;
    size_t dot = name.find('.', prefix.size());
    if (dot == std::string::npos) return false;
    int64_t layer = -1;
    try {
        layer = std::stoll(name.substr(prefix.size(), dot - prefix.size()));
    } catch (...) {
        return false;
    }
    if (layer < 0 || layer >= c.num_hidden_layers ||
        std::to_string(layer) != name.substr(prefix.size(), dot - prefix.size()))
        return false;
    const std::string t = name.substr(dot + 1);
    if (t == "input_layernorm.weight" || t == "post_attention_layernorm.weight")
        return set(1, c.hidden_size, {1.0, 0.2, 0.0});
    if (t == "self_attn.q_proj.weight") return set(c.q_dim(), c.hidden_size, {0.0, 1.2 / std::sqrt(h), 0.2});
    if (t == "self_attn.k_proj.weight") return set(c.kv_dim(), c.hidden_size, {0.0, 1.2 / std::sqrt(h), 0.2});
    if (t == "self_attn.v_proj.weight") return set(c.kv_dim(), c.hidden_size, {0.0, 1.0 / std::sqrt(h), 0.2});
    if (t == "self_attn.o_proj.weight") return set(c.hidden_size, c.q_dim(), {0.0, 1.0 / std::sqrt(q), 0.2});
    if (t == "self_attn.q_proj.bias") return set(1, c.q_dim(), {0.0, 0.1, 0.0});
    if (t == "self_attn.k_proj.bias" || t == "self_attn.v_proj.bias")
        return set(1, c.kv_dim(), {0.0, 0.1, 0.0});
    if (t == "self_attn.o_proj.bias") return set(1, c.hidden_size, {0.0, 0.05, 0.0});
    if (t == "self_attn.sinks") return set(1, c.num_attention_heads, {1.0, 1.5, 0.0});
    if (t == "mlp.router.weight") return set(E, c.hidden_size, {0.0, 2.0 / std::sqrt(h), 0.1});
    if (t == "mlp.router.bias") return set(1, E, {0.0, 0.5, 0.0});
    if (t == "mlp.experts.gate_up_proj")
        return set(E * 2 * c.intermediate_size, c.hidden_size, {0.0, 2.5 / std::sqrt(h), 0.35});
    if (t == "mlp.experts.gate_up_proj_bias") return set(E, 2 * c.intermediate_size, {0.0, 1.0, 0.0});
    if (t == "mlp.experts.down_proj")
        return set(E * c.hidden_size, c.intermediate_size, {0.0, 0.3 / std::sqrt(inter), 0.2});
    if (t == "mlp.experts.down_proj_bias") return set(E, c.hidden_size, {0.0, 0.2, 0.0});
    return false;
}

}  // namespace

Status generate_rows(const GptOssConfig& c, uint64_t seed, const std::string& name, int64_t first_row,
                     int64_t num_rows, float* out) {
    int64_t rows = 0, cols = 0;
    Init init;
    if (!logical_shape(c, name, &rows, &cols, &init))
        return not_found("make-model: no tensor '" + name + "' in this config");
    VOLT_CHECK(first_row >= 0 && first_row + num_rows <= rows)
        << name << " rows " << first_row << "+" << num_rows;
    const uint64_t key = tensor_key(seed, name);
    const uint64_t row_key = splitmix64(key ^ 0x5bd1e995ull);
    for (int64_t r = 0; r < num_rows; ++r) {
        float* dst = out + r * cols;
        fill_normal(key, (first_row + r) * cols, cols, dst);
        double scale = init.std;
        if (init.row_sigma > 0) {
            float zr;
            fill_normal(row_key, first_row + r, 1, &zr);
            scale *= std::exp(init.row_sigma * zr);
        }
        for (int64_t k = 0; k < cols; ++k) dst[k] = static_cast<float>(init.mean + scale * dst[k]);
    }
    return Status::ok();
}

// ---- Sharded writing -------------------------------------------------------------------------------

int64_t OutputUnit::bytes() const {
    int64_t total = 0;
    for (size_t i = 0; i < names.size(); ++i) {
        int64_t n = dtype_size(dtypes[i]);
        for (int64_t d : shapes[i]) n *= d;
        total += n;
    }
    return total;
}

Status write_text_file(const std::string& path, const std::string& text) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    if (!f) return internal_error("cannot create " + path);
    f << text;
    f.close();
    if (!f) return internal_error("cannot write " + path);
    return Status::ok();
}

Status write_sharded_units(const std::string& dir, const std::vector<OutputUnit>& units,
                           int64_t max_shard_bytes) {
    if (max_shard_bytes <= 0) return invalid_argument("max_shard_bytes must be > 0");
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return internal_error("cannot create directory " + dir + ": " + ec.message());
    std::vector<std::vector<const OutputUnit*>> shards;
    int64_t current = 0, total = 0;
    for (const OutputUnit& u : units) {
        const int64_t n = u.bytes();
        if (shards.empty() || (current > 0 && current + n > max_shard_bytes)) {
            shards.emplace_back();
            current = 0;
        }
        shards.back().push_back(&u);
        current += n;
        total += n;
    }
    nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
    const int num_shards = static_cast<int>(shards.size());
    for (int s = 0; s < num_shards; ++s) {
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<std::vector<std::vector<uint8_t>>> storage(shards[s].size());
        std::vector<io::TensorToWrite> tensors;
        int64_t shard_bytes = 0;
        for (size_t k = 0; k < shards[s].size(); ++k) {
            const OutputUnit& u = *shards[s][k];
            for (size_t i = 0; i < u.names.size(); ++i) {
                int64_t n = dtype_size(u.dtypes[i]);
                for (int64_t d : u.shapes[i]) n *= d;
                storage[k].emplace_back(static_cast<size_t>(n));
            }
            VOLT_RETURN_IF_ERROR(u.produce(storage[k]));
            for (size_t i = 0; i < u.names.size(); ++i)
                tensors.push_back({u.names[i], u.dtypes[i], u.shapes[i], storage[k][i].data()});
            shard_bytes += u.bytes();
        }
        const std::string file = io::shard_file_name(s, num_shards);
        VOLT_RETURN_IF_ERROR(io::write_safetensors(dir + "/" + file, tensors, {{"format", "pt"}}));
        for (const auto& t : tensors) weight_map[t.name] = file;
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        spdlog::info("wrote {}/{} ({:.1f} MB, {} tensors, {:.1f} s)", dir, file, shard_bytes / 1e6,
                     tensors.size(), secs);
    }
    nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    return write_text_file(dir + "/model.safetensors.index.json", index.dump(2) + "\n");
}

std::vector<PublishedTensor> published_tensors(const GptOssConfig& c) {
    std::vector<PublishedTensor> t;
    auto add = [&](std::string name, std::vector<int64_t> shape, bool expert = false) {
        t.push_back({std::move(name), std::move(shape), expert});
    };
    const int64_t H = c.hidden_size, I = c.intermediate_size, E = c.num_local_experts;
    add("model.embed_tokens.weight", {c.vocab_size, H});
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        add(p + "input_layernorm.weight", {H});
        add(p + "self_attn.q_proj.weight", {c.q_dim(), H});
        add(p + "self_attn.q_proj.bias", {c.q_dim()});
        add(p + "self_attn.k_proj.weight", {c.kv_dim(), H});
        add(p + "self_attn.k_proj.bias", {c.kv_dim()});
        add(p + "self_attn.v_proj.weight", {c.kv_dim(), H});
        add(p + "self_attn.v_proj.bias", {c.kv_dim()});
        add(p + "self_attn.o_proj.weight", {H, c.q_dim()});
        add(p + "self_attn.o_proj.bias", {H});
        add(p + "self_attn.sinks", {c.num_attention_heads});
        add(p + "post_attention_layernorm.weight", {H});
        add(p + "mlp.router.weight", {E, H});
        add(p + "mlp.router.bias", {E});
        add(p + "mlp.experts.gate_up_proj", {E, 2 * I, H}, true);
        add(p + "mlp.experts.gate_up_proj_bias", {E, 2 * I});
        add(p + "mlp.experts.down_proj", {E, H, I}, true);
        add(p + "mlp.experts.down_proj_bias", {E, H});
    }
    add("model.norm.weight", {H});
    add("lm_head.weight", {c.vocab_size, H});
    return t;
}

// ---- Random checkpoints -----------------------------------------------------------------------------

namespace {

Status copy_file(const std::string& from, const std::string& to) {
    std::error_code ec;
    std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing, ec);
    if (ec) return internal_error("cannot copy " + from + " to " + to + ": " + ec.message());
    return Status::ok();
}

// The published tensor list (spec §2.1) with a generator for each unit.
std::vector<OutputUnit> plan_units(const GptOssConfig& c, const MakeModelOptions& o,
                                   std::shared_ptr<ThreadPool> pool) {
    std::vector<OutputUnit> units;
    // A bf16 tensor: rows of the logical [rows, last dim] shape, generated in batches over the pool.
    auto bf16 = [&](const std::string& name, std::vector<int64_t> shape) {
        OutputUnit u{{name}, {DType::kBF16}, {shape}, nullptr};
        u.produce = [&c, seed = o.seed, pool, name, shape](std::vector<std::vector<uint8_t>>& buf) {
            int64_t rows = 1;
            const int64_t cols = shape.back();
            for (size_t d = 0; d + 1 < shape.size(); ++d) rows *= shape[d];
            auto* dst = reinterpret_cast<uint16_t*>(buf[0].data());
            const int64_t batch = std::max<int64_t>(1, 65536 / cols);  // rows per generate_rows call
            std::mutex mu;
            Status status;
            pool->parallel_for(rows, batch, [&](int64_t b, int64_t e) {
                std::vector<float> tmp(static_cast<size_t>(std::min(batch, e - b) * cols));
                for (int64_t r = b; r < e; r += batch) {
                    const int64_t nr = std::min(batch, e - r);
                    Status st = generate_rows(c, seed, name, r, nr, tmp.data());
                    if (!st.is_ok()) {
                        std::lock_guard<std::mutex> lock(mu);
                        status = st;
                        return;
                    }
                    for (int64_t k = 0; k < nr * cols; ++k) dst[r * cols + k] = f32_to_bf16(tmp[k]);
                }
            });
            return status;
        };
        units.push_back(std::move(u));
    };
    // An expert matrix, logical [E, out, in], generated one expert at a time and rounded to bf16 (so the
    // MXFP4 layout is exactly `convert` of the bf16 layout), then quantized or transposed to [E, in, out].
    auto experts = [&](const std::string& logical, int64_t out, int64_t in) {
        const int64_t E = c.num_local_experts;
        OutputUnit u;
        if (o.layout == ExpertLayout::kMxfp4) {
            u.names = {logical + "_blocks", logical + "_scales"};
            u.shapes = {{E, out, in / 32, 16}, {E, out, in / 32}};
            u.dtypes = {DType::kU8, DType::kU8};
        } else {
            u.names = {logical};
            u.shapes = {{E, in, out}};
            u.dtypes = {DType::kBF16};
        }
        u.produce = [&c, seed = o.seed, rule = o.scale_rule, layout = o.layout, pool, logical, E, out,
                     in](std::vector<std::vector<uint8_t>>& buf) -> Status {
            std::vector<float> w(static_cast<size_t>(out * in));
            for (int64_t ex = 0; ex < E; ++ex) {
                std::mutex mu;
                Status status;
                pool->parallel_for(out, 16, [&](int64_t b, int64_t e) {
                    Status st = generate_rows(c, seed, logical, ex * out + b, e - b, w.data() + b * in);
                    if (!st.is_ok()) {
                        std::lock_guard<std::mutex> lock(mu);
                        status = st;
                        return;
                    }
                    for (int64_t k = b * in; k < e * in; ++k) w[k] = bf16_to_f32(f32_to_bf16(w[k]));
                });
                VOLT_RETURN_IF_ERROR(status);
                if (layout == ExpertLayout::kMxfp4) {
                    const int64_t nb = in / quant::kMxfp4BlockSize;
                    VOLT_RETURN_IF_ERROR(
                        quant::quantize_mxfp4_matrix(w.data(), out, in, rule, *pool,
                                                     buf[0].data() + ex * out * nb * quant::kMxfp4BlockBytes,
                                                     buf[1].data() + ex * out * nb));
                } else {
                    uint16_t* de = reinterpret_cast<uint16_t*>(buf[0].data()) + ex * in * out;
                    pool->parallel_for(in, 16, [&](int64_t b, int64_t e) {
                        for (int64_t k = b; k < e; ++k)
                            for (int64_t r = 0; r < out; ++r) de[k * out + r] = f32_to_bf16(w[r * in + k]);
                    });
                }
            }
            return Status::ok();
        };
        units.push_back(std::move(u));
    };
    for (const PublishedTensor& t : published_tensors(c)) {
        if (t.expert)
            experts(t.name, t.shape[1], t.shape[2]);
        else
            bf16(t.name, t.shape);
    }
    return units;
}

}  // namespace

Status make_model(const GptOssConfig& c, const MakeModelOptions& o, const std::string& out_dir) {
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
        if (!o.tokenizer_dir.empty() && !std::filesystem::exists(o.tokenizer_dir + "/" + f))
            return not_found("make-model: tokenizer file " + o.tokenizer_dir + "/" + f + " not found");
    }
    if (c.quant_method == QuantMethod::kAwq || c.quant_method == QuantMethod::kInt8) {
        const std::string m = quant_method_name(c.quant_method);
        if (!o.config_only)
            return invalid_argument(
                "make-model: --quantization " + m + " writes the config only (--config-only: random " + m +
                " weights come from --load-format dummy); for a checkpoint with " + m +
                " tensors write this one without --quantization and convert it: voltllm convert --model " +
                out_dir + " --output OUT --quantization " + m + (m == "awq" ? " --awq-zero-point" : ""));
        if (o.layout != ExpertLayout::kMxfp4)
            return invalid_argument("make-model: --quantization " + m +
                                    " keeps the experts MXFP4 (AutoAWQ cannot quantize gpt-oss experts); "
                                    "--layout bf16 does not apply");
    }
    if (o.config_only) {
        std::error_code ec;
        std::filesystem::create_directories(out_dir, ec);
        if (ec) return internal_error("make-model: cannot create " + out_dir + ": " + ec.message());
    } else {
        auto pool = std::make_shared<ThreadPool>(o.threads);
        VOLT_RETURN_IF_ERROR(write_sharded_units(out_dir, plan_units(c, o, pool), o.max_shard_bytes));
    }
    VOLT_RETURN_IF_ERROR(
        write_text_file(out_dir + "/config.json", make_config_json(c, o.layout).dump(2) + "\n"));
    VOLT_RETURN_IF_ERROR(
        write_text_file(out_dir + "/generation_config.json", make_generation_config_json(c).dump(2) + "\n"));
    if (!o.tokenizer_dir.empty()) {
        for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
            VOLT_RETURN_IF_ERROR(copy_file(o.tokenizer_dir + "/" + f, out_dir + "/" + f));
    }
    return Status::ok();
}

}  // namespace volt::model
