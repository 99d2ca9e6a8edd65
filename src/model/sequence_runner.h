// One sequence over a contiguous run of KV blocks: the simplest driver of Forward, used by
// `voltllm logits`, the golden tests and as the reference the engine's paged, batched runs are compared
// with. Blocks 0..n-1 of both KV groups hold positions in order; nothing is ever freed. Runs on any
// backend (the Forward's), on a whole model or on one rank's shard (each rank of a parallel model has its
// own runner, all fed the same ids; only the output rank's logits are filled: docs/parallel.md).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/forward.h"
#include "model/kv_store.h"

namespace volt::model {

class SequenceRunner {
  public:
    // capacity: the most tokens this sequence will hold (prompt + generated). kv_format: f32 or f16.
    SequenceRunner(Forward& forward, int64_t capacity, int64_t block_size = 16,
                   ops::Format kv_format = ops::Format::kF32);

    int64_t num_tokens() const { return num_tokens_; }

    // Feeds `ids` at RoPE positions start_pos + num_tokens() ... (start_pos shifts RoPE only; see
    // `voltllm logits --start-pos`). Returns logits f32 [ids.size(), V] when all_rows, else [1, V] of the
    // last row (zeros on a rank that is not the output rank). Checks capacity (a bug to exceed it) and
    // aborts on a communicator failure (tools and tests only). The rows are prompt rows
    // (ForwardBatch::num_prompt_rows) unless `generated`: tokens a decode loop sampled.
    std::vector<float> append(std::span<const int32_t> ids, bool all_rows, int64_t start_pos = 0,
                              bool generated = false);

  private:
    Forward& forward_;
    int64_t capacity_, block_size_, num_tokens_ = 0;
    KvStore cache_;
    Workspace ws_;
    StepUpload upload_;
    HostStep step_;
};

}  // namespace volt::model
