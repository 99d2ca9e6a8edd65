// The executor seam (DESIGN.md): the engine hands one flattened StepBatch per step to an Executor and
// gets back sampled token ids and only the logprobs asked for. The engine never sees a tensor; the
// executor never sees a request. Implementations: CpuExecutor (executor/cpu_executor.h), ScriptedExecutor
// (executor/scripted_executor.h), CUDA later.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "engine/sampling_params.h"

namespace volt::engine {

inline constexpr int kNumKvGroups = 2;  // 0: full-attention layers, 1: sliding-window layers

// What the engine plans with.
struct ExecutorInfo {
    int64_t vocab_size = 0;               // logits width (padded ids included)
    int64_t sliding_window = 0;           // keys per query of the sliding group (0: no sliding layers)
    int64_t max_position_embeddings = 0;  // the model's context limit
    std::vector<int32_t> eos_token_ids;   // the model's EOS ids (config.json)
    bool has_group[kNumKvGroups] = {true, false};  // whether any layer belongs to the group
};

// Set block `index` of the table of sequence `seq_id` in `group` to `block` (-1: freed). index -1 with
// block -1 drops the sequence's tables of that group entirely (finished, preempted).
struct BlockTableUpdate {
    int64_t seq_id;
    int32_t group;
    int32_t index;
    int32_t block;
};

// Copy-on-write: copy every layer's K and V of block src to block dst in `group`, before this step's
// KV writes.
struct BlockCopy {
    int32_t group;
    int32_t src, dst;
};

// A row of logits the engine needs. Sample rows draw a token with the sequence's params; prompt rows
// (target >= 0) only report the logprob of `target` (the next prompt token). A row index may appear
// several times (n > 1 draws n first tokens from the prompt's last row with seeds seed + choice).
struct LogitsRow {
    int32_t row = 0;            // token row in [0, num_tokens)
    int32_t seq = 0;            // sequence index in this step [0, num_seqs)
    int32_t target = -1;        // >= 0: prompt row
    uint64_t seed = 0;          // sample rows: request seed + choice index
    int64_t output_index = 0;   // sample rows: tokens this choice has produced so far (the RNG counter)
    int32_t num_logprobs = -1;  // -1: none; k >= 0: logprob of the token + top k
};

// Per sequence of the step: sampling params and the token history the penalties read.
struct SeqSampling {
    const SamplingParams* params = nullptr;
    const std::vector<int32_t>* prompt = nullptr;  // prompt tokens (repetition penalty)
    const std::vector<int32_t>* output = nullptr;  // this choice's output tokens (all penalties)
};

struct StepBatch {
    int64_t num_tokens = 0, num_seqs = 0;
    int64_t vocab_size_real = 0;                      // ids >= this are never sampled (padding)
    std::vector<int32_t> token_ids;                   // [T]
    std::vector<int32_t> positions;                   // [T]
    std::vector<int64_t> slot_mapping[kNumKvGroups];  // [T] block * block_size + offset
    std::vector<int32_t> query_start_loc;             // [S + 1]
    std::vector<int32_t> context_lens;                // [S] tokens in the cache after this step
    std::vector<int64_t> seq_ids;                     // [S] stable ids naming the block tables
    std::vector<int64_t> request_index;               // [S] submission ordinal (scripted executor)
    std::vector<BlockTableUpdate> table_updates;      // applied in order before the step
    std::vector<BlockCopy> copies;                    // after table updates, before KV writes
    std::vector<LogitsRow> logits_rows;
    std::vector<SeqSampling> sampling;  // [S]
    void clear();
};

struct StepResult {
    std::vector<int32_t> tokens;         // [logits_rows] sampled id (prompt rows: the target)
    std::vector<TokenLogprob> logprobs;  // [logits_rows] filled where num_logprobs >= 0
};

class Executor {
  public:
    virtual ~Executor() = default;
    virtual ExecutorInfo info() const = 0;
    // Bytes one block of `group` takes on the device (0: free, e.g. scripted).
    virtual int64_t bytes_per_block(int64_t block_size, int group) const = 0;
    // Allocates the KV pools; called once before the first execute.
    virtual Status init_cache(int64_t block_size, const int64_t num_blocks[kNumKvGroups]) = 0;
    virtual Status execute(const StepBatch& batch, StepResult* result) = 0;
};

}  // namespace volt::engine
