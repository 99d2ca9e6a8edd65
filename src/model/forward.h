// The GPT-OSS forward pass (spec §3), written once over the ops::Backend interface: embedding, then per
// layer RMSNorm -> q/k/v (+bias) -> YaRN RoPE -> paged KV write -> attention with sinks (sliding window
// on the layers config.layer_types marks) -> o_proj (+bias) -> residual; RMSNorm -> router top-k ->
// experts (clamped SwiGLU) -> residual; final RMSNorm -> lm_head on the rows that need logits.
// Residual stream f32. Golden test against transformers: tests/golden/parity_test.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "model/kv_cache.h"
#include "model/rope.h"
#include "model/weights.h"
#include "ops/ops.h"

namespace volt::model {

// Per KV group: where this step's keys go and where each sequence's keys live.
struct KvGroupInputs {
    const int64_t* slot_mapping = nullptr;  // [T] slot of each new token (< 0: not stored)
    const int32_t* block_tables = nullptr;  // [S, max_blocks] block ids (-1: not held)
    int64_t max_blocks = 0;
};

// One step over S sequences and T new tokens, flattened (the executor seam of DESIGN.md).
struct ForwardBatch {
    int64_t num_tokens = 0, num_seqs = 0;
    const int32_t* token_ids = nullptr;        // [T]
    const int32_t* positions = nullptr;        // [T] RoPE positions
    const int32_t* query_start_loc = nullptr;  // [S + 1] token rows of sequence s
    const int32_t* seq_lens = nullptr;         // [S] tokens of sequence s in the cache after this step
    KvGroupInputs groups[kNumKvGroups];
    const int32_t* logits_rows = nullptr;  // [num_logits_rows] rows of [0, T) whose logits are wanted
    int64_t num_logits_rows = 0;
};

// Called with every named intermediate when set: name ("attn_norm", "q", ..., "logits"), layer (-1 for
// none), data f32 [rows, cols].
using TraceFn =
    std::function<void(std::string_view name, int64_t layer, const float* data, int64_t rows, int64_t cols)>;

class Forward {
  public:
    Forward(std::shared_ptr<const ModelWeights> weights, ops::Backend& backend);

    const GptOssConfig& config() const { return weights_->config; }
    void set_trace(TraceFn fn) { trace_ = std::move(fn); }

    // Runs one step; writes f32 logits [num_logits_rows, vocab_size] to `logits`.
    // Preconditions (checked): ids < vocab, every key a token attends to is in a held block.
    void run(const ForwardBatch& batch, KvCache& cache, float* logits);

  private:
    void trace(std::string_view name, int64_t layer, const std::vector<float>& v, int64_t rows, int64_t cols);

    std::shared_ptr<const ModelWeights> weights_;
    ops::Backend& backend_;
    RopeTable rope_;
    TraceFn trace_;
    // Scratch, grown to the largest step seen.
    std::vector<float> x_, h_, q_, k_, v_, attn_, o_, expert_w_;
    std::vector<int32_t> expert_ids_;
};

}  // namespace volt::model
