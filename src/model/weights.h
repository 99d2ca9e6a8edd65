// The weights of a GPT-OSS model as the kernels read them (ops/weights.h views), with shapes in
// checkpoint terms (H = hidden_size, I = intermediate_size, E = num_local_experts, V = vocab_size, nh/nkv =
// heads, d = head_dim). From the loader (model/loader.h) the pointers are into memory-mapped checkpoint
// files or into buffers owned by ModelWeights::storage (tensors transformed at load), host memory; after
// place_model (model/placed_model.h) they are in a backend's memory.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/config.h"
#include "ops/weights.h"

namespace volt::model {

struct LayerWeights {
    ops::VectorWeight input_layernorm;           // [H]
    ops::DenseWeight q_proj, k_proj, v_proj;     // [nh*d, H], [nkv*d, H], [nkv*d, H] (+ biases); a backend
                                                 // may fuse them at placement (ops::QkvWeights)
    ops::DenseWeight o_proj;                     // [H, nh*d] + [H]
    ops::VectorWeight sinks;                     // [nh]
    ops::VectorWeight post_attention_layernorm;  // [H]
    ops::DenseWeight router;                     // [E, H] + [E]
    ops::ExpertWeights gate_up;                  // out = 2I, in = H
    ops::ExpertWeights down;                     // out = H, in = I

    ops::QkvWeights qkv() const { return {q_proj, k_proj, v_proj}; }
};

// Keeps the memory behind the pointers alive (mmaps, converted buffers, backend buffers).
struct WeightStorage {
    virtual ~WeightStorage() = default;
};

// Which part of the model a ModelWeights holds (model/shard.h). The whole model: tp 1, pp 1, every layer.
// A shard's config carries its own head counts and intermediate size (num_attention_heads / tp, ...);
// layers outside [layer_begin, layer_end) are empty views, as are embed_tokens on all but the first
// pipeline stage and norm / lm_head on all but the last.
struct ShardInfo {
    int tp_rank = 0, tp_size = 1, pp_rank = 0, pp_size = 1;
    int64_t layer_begin = 0, layer_end = -1;  // -1: every layer
    int64_t vocab_begin = 0;                  // the id of embed_tokens' and lm_head's first row
    int64_t vocab_size = 0;                   // the whole model's vocabulary (0: config.vocab_size)
    bool first_stage() const { return pp_rank == 0; }
    bool last_stage() const { return pp_rank == pp_size - 1; }
};

struct ModelWeights {
    GptOssConfig config;
    ShardInfo shard;
    ops::DenseWeight embed_tokens;     // [V, H], no bias
    std::vector<LayerWeights> layers;  // [num_hidden_layers]
    ops::VectorWeight norm;            // [H]
    ops::DenseWeight lm_head;          // [V, H], no bias
    std::vector<std::shared_ptr<WeightStorage>> storage;
};

}  // namespace volt::model
