// The engine's step loop without its thread: plans the KV pool, takes requests, and per step
// (1) frees aborted requests, (2) schedules, (3) builds the StepBatch, (4) executes it, (5) appends
// sampled tokens, applies token-level stops (stop ids, EOS unless ignore_eos, max_tokens,
// max_model_len), forks n > 1 choices, pushes deltas to the handles and frees finished sequences and
// sliding blocks outside the window. Engine (engine.h) runs it on its own thread; tests drive it
// directly and check the block invariants after every step (tests/unit/engine/*_test.cc).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "engine/block_manager.h"
#include "engine/engine.h"
#include "engine/scheduler.h"

namespace volt::engine {

// The KV pool and length limits derived from an EngineConfig and an executor.
struct KvPlan {
    int64_t num_blocks[kNumKvGroups] = {0, 0};
    int64_t max_model_len = 0;
    int64_t pool_max_len = 0;  // longest sequence the pool can hold alone
};

// Budget split: the sliding group gets what max_num_seqs sequences plus one chunk need (at most half of
// kv_cache_memory_bytes), the full group the rest, capped at max_num_seqs x blocks of the longest
// sequence (max_model_len when set, else the model's max_position_embeddings).
// kOutOfRange when config.max_model_len is set and one sequence of that length does not fit (message
// with both numbers); kInvalidArgument for sizes <= 0 or a budget below one block.
Result<KvPlan> plan_kv_cache(const EngineConfig& config, const Executor& executor);

class EngineCore {
  public:
    // Plans the pool, calls executor->init_cache. The executor must outlive the core.
    static Result<std::unique_ptr<EngineCore>> create(EngineConfig config, Executor* executor);

    // Checks a request against the limits; thread-safe (reads only the immutable config).
    Status validate(const std::vector<int32_t>& prompt, const SamplingParams& params) const;
    // Takes a validated request; `seed` is params.seed or one drawn by the caller.
    void add_request(std::shared_ptr<RequestHandle> handle, std::vector<int32_t> prompt,
                     SamplingParams params, uint64_t seed);
    // One step; false when there was nothing to run. Executor errors are returned (the caller aborts).
    Result<bool> step();
    // Aborts every request (kAbort deltas).
    void abort_all();

    bool has_requests() const { return !requests_.empty(); }
    int64_t num_waiting_requests() const;
    EngineStats stats() const;
    Status check_invariants() const;
    const EngineConfig& config() const { return config_; }
    const KvPlan& plan() const { return plan_; }
    const Scheduler& scheduler() const { return scheduler_; }
    const BlockManager& blocks() const { return blocks_; }

  private:
    EngineCore(EngineConfig config, KvPlan plan, Executor* executor, const ExecutorInfo& info);
    void abort_request(Request* r);
    void finish_seq(Sequence* s);  // frees its blocks; forgotten at the end of the step
    void append_token(Sequence* s, int32_t token, TokenLogprob* lp, bool has_lp);
    void build_batch(const std::vector<ScheduledSeq>& sched);

    EngineConfig config_;
    KvPlan plan_;
    Executor* executor_;
    ExecutorInfo info_;
    BlockManager blocks_;
    Scheduler scheduler_;
    std::map<int64_t, std::unique_ptr<Request>> requests_;
    std::map<int64_t, std::unique_ptr<Sequence>> seqs_;
    int64_t next_request_ = 0, next_seq_ = 0;
    std::vector<int64_t> dead_;  // sequences finished this step
    std::vector<BlockTableUpdate> pending_updates_;
    StepBatch batch_;
    StepResult result_;
    EngineStats stats_;
};

}  // namespace volt::engine
