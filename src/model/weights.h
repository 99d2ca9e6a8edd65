// The weights of a GPT-OSS model as the kernels read them, with shapes in checkpoint terms
// (H = hidden_size, I = intermediate_size, E = num_local_experts, V = vocab_size, nh/nkv = heads,
// d = head_dim). Pointers are into memory-mapped checkpoint files or into buffers owned by
// ModelWeights::storage (tensors transformed at load). Loader: model/loader.h.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/config.h"

namespace volt::model {

// y = W x + b with W in [out, in] layout (row = output unit), bf16.
struct DenseWeight {
    const uint16_t* w = nullptr;  // [out, in] bf16
    const uint16_t* b = nullptr;  // [out] bf16, or null (lm_head)
    int64_t out = 0, in = 0;
};

enum class ExpertFormat { kMxfp4, kBf16 };

// One projection of all experts. Row r of expert e is output unit r; gate_up rows interleave
// (even row 2u = gate of unit u, odd row 2u+1 = up of unit u), spec §2.3.
struct ExpertWeights {
    ExpertFormat format = ExpertFormat::kMxfp4;
    const uint8_t* blocks =
        nullptr;  // kMxfp4: [E, out, in/32, 16] u8, two E2M1 codes a byte, low nibble first
    const uint8_t* scales = nullptr;  // kMxfp4: [E, out, in/32] u8 E8M0
    const uint16_t* w =
        nullptr;  // kBf16:  [E, out, in] bf16 (transposed at load from save_pretrained's [E, in, out])
    const uint16_t* bias = nullptr;  // [E, out] bf16
    int64_t num_experts = 0, out = 0, in = 0;
};

struct LayerWeights {
    const uint16_t* input_layernorm = nullptr;           // [H] bf16
    DenseWeight q_proj, k_proj, v_proj, o_proj;          // [nh*d, H], [nkv*d, H], [nkv*d, H], [H, nh*d]
    const uint16_t* sinks = nullptr;                     // [nh] bf16
    const uint16_t* post_attention_layernorm = nullptr;  // [H] bf16
    DenseWeight router;                                  // [E, H] + [E]
    ExpertWeights gate_up;                               // out = 2I, in = H
    ExpertWeights down;                                  // out = H, in = I
};

// Keeps the memory behind the pointers alive (mmaps, converted buffers).
struct WeightStorage {
    virtual ~WeightStorage() = default;
};

struct ModelWeights {
    GptOssConfig config;
    const uint16_t* embed_tokens = nullptr;  // [V, H] bf16
    std::vector<LayerWeights> layers;        // [num_hidden_layers]
    const uint16_t* norm = nullptr;          // [H] bf16
    DenseWeight lm_head;                     // [V, H], no bias
    std::vector<std::shared_ptr<WeightStorage>> storage;
};

}  // namespace volt::model
