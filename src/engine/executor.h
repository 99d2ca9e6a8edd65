// The executor seam (DESIGN.md): the engine hands one flattened StepBatch per step to an Executor and
// later collects the sampled token ids and only the logprobs asked for. The engine never sees a tensor;
// the executor never sees a request. The seam is asynchronous: submit() starts a step and returns at
// once where the executor can (a GPU), collect() waits for it, and up to max_in_flight() steps may be
// submitted before the oldest is collected, so the engine prepares step N+1 while step N runs. A decode
// row of step N+1 may then name "the token sampled at step N for seq_slot s" (DeferredToken), which the
// executor resolves itself (on the device for a GPU). Implementations: executor/cpu_executor.h,
// executor/scripted_executor.h. Tests: tests/unit/engine/engine_test.cc (a delayed executor gives the
// same outputs as a synchronous one).
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "engine/sampling_params.h"
#include "ops/weights.h"

namespace volt::engine {

using ops::kNumKvGroups;  // 0: full-attention layers, 1: sliding-window layers

// What the engine plans with.
struct ExecutorInfo {
    int64_t vocab_size = 0;               // logits width (padded ids included)
    int64_t sliding_window = 0;           // keys per query of the sliding group (0: no sliding layers)
    int64_t max_position_embeddings = 0;  // the model's context limit
    std::vector<int32_t> eos_token_ids;   // the model's EOS ids (config.json)
    bool has_group[kNumKvGroups] = {true, false};  // whether any layer belongs to the group
    // KV swap to host memory (--preemption-mode swap): the executor applies StepBatch::swap_out /
    // swap_in. kv_in_host_memory: its KV pools already are host memory (the CPU), where swapping copies
    // host to host and gains nothing, so the default preemption mode there is recompute.
    bool can_swap = false;
    bool kv_in_host_memory = false;
};

// Memory of the device the executor runs on (host memory for the CPU), bytes.
struct ExecutorMemory {
    int64_t total_bytes = 0;
    int64_t free_bytes = 0;  // free now (after the weights were loaded)
};

// Set block `index` of the block table of seq_slot `slot` in `group` to `block` (-1: freed). index -1
// with block -1 drops the slot's table of that group entirely (the sequence finished or was preempted;
// a later sequence that takes the slot starts from an empty table).
struct BlockTableUpdate {
    int32_t slot;
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

// Swap of one KV block of `group` between the device pool and the host swap pool (--swap-space): every
// layer's K and V of device block `device` <-> host block `host`. A step applies its swap-outs (device ->
// host) first, then its swap-ins (host -> device), then table updates, copies and KV writes: a device
// block freed by a swap-out may be handed out again in the same step, and a swap-in's device block may be
// one a swap-out of the same step just emptied. Host blocks are never shared.
struct BlockSwap {
    int32_t group;
    int32_t device, host;
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
    bool feeds_slot = false;    // sample rows: the draw is the token a DeferredToken of the next step
                                // names for this sequence's seq_slot (the executor keeps it)
};

// Row `row`'s token id is the one drawn at the previous step by the logits row with feeds_slot of the
// sequence in seq_slot `slot` (token_ids[row] holds -1). Only the immediately preceding step is named.
struct DeferredToken {
    int32_t row;
    int32_t slot;
};

// Per sequence of the step: sampling params and the token history the penalties read. Pointers are
// valid during submit() only: an executor copies what it needs before returning.
struct SeqSampling {
    const SamplingParams* params = nullptr;
    const std::vector<int32_t>* prompt = nullptr;  // prompt tokens (repetition penalty)
    const std::vector<int32_t>* output = nullptr;  // this choice's output tokens known to the engine
    bool output_deferred = false;  // one more output token follows *output: the deferred one of this
                                   // step's DeferredToken for the sequence (penalties count it)
};

struct StepBatch {
    int64_t num_tokens = 0, num_seqs = 0;
    int64_t vocab_size_real = 0;                      // ids >= this are never sampled (padding)
    std::vector<int32_t> token_ids;                   // [T] (-1 where a DeferredToken names the id)
    std::vector<int32_t> positions;                   // [T]
    std::vector<int64_t> slot_mapping[kNumKvGroups];  // [T] block * block_size + offset
    std::vector<int32_t> query_start_loc;             // [S + 1]
    std::vector<int32_t> context_lens;                // [S] tokens in the cache after this step
    std::vector<int32_t> seq_slots;                   // [S] stable slot in [0, max_num_seqs) of each sequence
    std::vector<int64_t> request_index;               // [S] submission ordinal (scripted executor)
    std::vector<DeferredToken> deferred;              // token ids drawn by the previous step
    std::vector<BlockSwap> swap_out;                  // first: device -> host (preempted by swapping)
    std::vector<BlockSwap> swap_in;                   // then: host -> device (resumed sequences)
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

// What the executor sizes its KV pools, per-slot state and step buffers for (init_cache).
struct CacheConfig {
    int64_t block_size = 16;
    int64_t num_blocks[kNumKvGroups] = {0, 0};
    int64_t num_host_blocks[kNumKvGroups] = {0, 0};  // host swap pool per group (0: no swapping)
    int64_t max_num_seqs = 0;                        // seq_slots
    int64_t max_num_batched_tokens = 0;              // rows of one step
    int64_t max_model_len = 0;                       // longest sequence
};

// A submitted step, collected in submission order.
struct StepHandle {
    int64_t id = -1;
};

class Executor {
  public:
    virtual ~Executor() = default;
    virtual ExecutorInfo info() const = 0;
    // Bytes one block of `group` takes on the device (0: free, e.g. scripted); a host swap block takes as
    // many.
    virtual int64_t bytes_per_block(int64_t block_size, int group) const = 0;
    virtual ExecutorMemory memory() const = 0;
    // Allocates the KV pools, the host swap pools (num_host_blocks), the per-slot state (block tables,
    // deferred tokens) and the step buffers; called once before the first submit. Errors: out of device (or
    // pinned host) memory.
    virtual Status init_cache(const CacheConfig& config) = 0;
    // Steps that may be submitted and not yet collected (1: synchronous).
    virtual int max_in_flight() const { return 1; }
    // Starts a step; reads everything it needs from `batch` (and the vectors SeqSampling points to)
    // before returning. Errors are the step's (the engine aborts its requests).
    virtual Result<StepHandle> submit(const StepBatch& batch) = 0;
    // Waits for the oldest submitted step, which must be `handle`, and fills its result.
    virtual Status collect(StepHandle handle, StepResult* result) = 0;

    // submit + collect, for callers that run one step at a time.
    Status execute(const StepBatch& batch, StepResult* result) {
        VOLT_ASSIGN_OR_RETURN(StepHandle h, submit(batch));
        return collect(h, result);
    }
};

}  // namespace volt::engine
