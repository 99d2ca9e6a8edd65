// A random GPT-OSS model held in memory, for tests of the forward pass that need no checkpoint file.
// Sizes are small and consistent; weights are seeded and scaled so the SwiGLU clamp is reached.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "model/weights.h"

namespace volt::model::testing {

struct OwnedBuffers : WeightStorage {
    std::vector<std::vector<uint16_t>> bf16;
    std::vector<std::vector<uint8_t>> u8;
};

inline GptOssConfig small_config(int64_t layers = 2) {
    GptOssConfig c;
    c.num_hidden_layers = layers;
    c.num_local_experts = 4;
    c.num_experts_per_tok = 2;
    c.hidden_size = 64;
    c.intermediate_size = 64;
    c.head_dim = 16;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.vocab_size = 97;
    c.sliding_window = 8;
    for (int64_t l = 0; l < layers; ++l)
        c.layer_types.push_back(l % 2 == 0 ? LayerType::kSlidingAttention : LayerType::kFullAttention);
    return c;
}

// Random weights: dense bf16 N(0, std), experts MXFP4 with random codes and scale bytes around `scale_byte`.
inline std::shared_ptr<ModelWeights> random_model(const GptOssConfig& c, uint64_t seed) {
    auto w = std::make_shared<ModelWeights>();
    auto buf = std::make_shared<OwnedBuffers>();
    w->config = c;
    w->storage.push_back(buf);
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    auto bf16 = [&](int64_t n, float std) {
        auto& v = buf->bf16.emplace_back(n);
        for (auto& x : v) x = f32_to_bf16(normal(rng) * std);
        return v.data();
    };
    auto bytes = [&](int64_t n, int lo, int hi) {
        auto& v = buf->u8.emplace_back(n);
        std::uniform_int_distribution<int> u(lo, hi);
        for (auto& x : v) x = static_cast<uint8_t>(u(rng));
        return v.data();
    };
    auto vec = [&](int64_t n, float std) { return ops::VectorWeight{ops::Format::kBf16, bf16(n, std), n}; };
    auto dense = [&](int64_t out, int64_t in, float std, bool bias) {
        ops::DenseWeight d;
        d.out = out;
        d.in = in;
        d.w = bf16(out * in, std);
        if (bias) d.b = vec(out, 0.1f);
        return d;
    };
    auto experts = [&](int64_t out, int64_t in, int scale_byte) {
        ops::ExpertWeights e;
        e.num_experts = c.num_local_experts;
        e.out = out;
        e.in = in;
        e.blocks = bytes(c.num_local_experts * out * in / 2, 0, 255);
        e.scales = bytes(c.num_local_experts * out * in / 32, scale_byte - 1, scale_byte + 1);
        e.bias = vec(c.num_local_experts * out, 0.5f);
        return e;
    };
    const int64_t H = c.hidden_size;
    w->embed_tokens = dense(c.vocab_size, H, 1.0f, false);
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        LayerWeights L;
        L.input_layernorm = vec(H, 0.2f);
        L.q_proj = dense(c.q_dim(), H, 1.0f / std::sqrt(float(H)), true);
        L.k_proj = dense(c.kv_dim(), H, 1.0f / std::sqrt(float(H)), true);
        L.v_proj = dense(c.kv_dim(), H, 1.0f / std::sqrt(float(H)), true);
        L.o_proj = dense(H, c.q_dim(), 1.0f / std::sqrt(float(c.q_dim())), true);
        L.sinks = vec(c.num_attention_heads, 1.0f);
        L.post_attention_layernorm = vec(H, 0.2f);
        L.router = dense(c.num_local_experts, H, 1.0f, true);
        // Codes up to 6 times 2^(124-127) = 0.75 per weight: gate/up sums reach beyond the clamp of 7.
        L.gate_up = experts(2 * c.intermediate_size, H, 124);
        L.down = experts(H, c.intermediate_size, 121);
        w->layers.push_back(L);
    }
    w->norm = vec(H, 0.2f);
    w->lm_head = dense(c.vocab_size, H, 1.0f / std::sqrt(float(H)), false);
    return w;
}

}  // namespace volt::model::testing
