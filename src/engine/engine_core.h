// The engine's step loop without its thread: plans the KV pool, takes requests, and per step
// (1) frees aborted requests, (2) schedules, (3) builds the StepBatch, (4) submits it to the executor,
// (5) collects a step's results: appends sampled tokens, applies token-level stops (stop ids, EOS
// unless ignore_eos, max_tokens, max_model_len), forks n > 1 choices, pushes deltas to the handles and
// frees finished sequences. Engine (engine.h) runs it on its own thread; tests drive it directly and
// check the invariants after every step (tests/unit/engine/*_test.cc).
//
// Look-ahead: up to executor->max_in_flight() steps are in flight. step() submits a new step while
// fewer are in flight, and collects the oldest when the pipe is full or nothing new could be scheduled
// (max_in_flight 1: submit then collect, the synchronous engine). A step's bookkeeping happens at
// submit: num_computed advances, sliding blocks outside the window are freed, and each sampling row
// leaves its sequence one pending token, which the next step may already decode (DeferredToken; see
// scheduler.h for when). Stops apply one step late: a sequence ended by the token collected from step
// N is finished then, and the row the look-ahead computed for it in step N + 1 is discarded when N + 1
// is collected (rows of finished or aborted sequences are ignored). Blocks and slots freed while steps
// are in flight are held until those steps are collected (FreeList in block_manager.h).
#pragma once

#include <cstdint>
#include <deque>
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
    int64_t pool_max_len = 0;                        // longest sequence the pool can hold alone
    bool swap = false;                               // preemption swaps to the host pools (else recomputes)
    int64_t num_host_blocks[kNumKvGroups] = {0, 0};  // host swap pool per group (0 unless swap)
};

// Budget split: the sliding group gets what max_num_seqs sequences plus one chunk need (at most half of
// kv_cache_memory_bytes), the full group the rest, capped at max_num_seqs x blocks of the longest
// sequence (max_model_len when set, else the model's max_position_embeddings).
// kOutOfRange when config.max_model_len is set and one sequence of that length does not fit (message
// with both numbers); kInvalidArgument for sizes <= 0 or a budget below one block; kResourceExhausted
// when the pools exceed the executor's free memory (ExecutorMemory; skipped when it reports none).
// Preemption mode (EngineConfig::preemption_mode): kAuto swaps when the executor can, its KV is not in
// host memory and swap_space_bytes > 0; the host pools then get swap_space_bytes in proportion to the
// device pools' bytes (host blocks of group g = swap_space_bytes x device blocks of g / device pool
// bytes). kInvalidArgument for kSwap with swap_space_bytes <= 0 (--swap-space 0), an executor that cannot
// swap, or a swap space below one block of each group; or swap_space_bytes < 0.
Result<KvPlan> plan_kv_cache(const EngineConfig& config, const Executor& executor);

class EngineCore {
  public:
    // Plans the pool, calls executor->init_cache. The executor must outlive the core.
    static Result<std::unique_ptr<EngineCore>> create(EngineConfig config, Executor* executor);

    // Checks a request against the limits; thread-safe (reads only the immutable config).
    Status validate(const std::vector<int32_t>& prompt, const SamplingParams& params) const;
    // Takes a validated request; `seed` is params.seed or one drawn by the caller.
    // `group`: Engine::submit's (-1: its own).
    void add_request(std::shared_ptr<RequestHandle> handle, std::vector<int32_t> prompt,
                     SamplingParams params, uint64_t seed, int64_t group = -1);
    // Submits a step and/or collects one (see the top of this file); false when there was nothing to
    // do. Executor errors are returned (the caller aborts: abort_all).
    Result<bool> step();
    // Ends every request with `reason` (kAbort deltas by default; kError with `error`, the message the
    // client gets), then collects every step in flight (results ignored) so that all blocks and slots
    // are free again.
    void abort_all(FinishReason reason = FinishReason::kAbort, const std::string& error = {});

    // Requests not finished yet, or steps in flight to collect: step() has work.
    bool has_requests() const { return !requests_.empty() || !in_flight_.empty(); }
    int64_t num_in_flight() const { return static_cast<int64_t>(in_flight_.size()); }
    int64_t num_waiting_requests() const;
    EngineStats stats() const;
    Status check_invariants() const;
    const EngineConfig& config() const { return config_; }
    const KvPlan& plan() const { return plan_; }
    const Scheduler& scheduler() const { return scheduler_; }
    const BlockManager& blocks() const { return blocks_; }

  private:
    // A submitted step, until it is collected.
    struct InFlight {
        struct Seq {
            int64_t id;        // Sequence::id (looked up at collect: it may have finished or been aborted)
            int32_t num_rows;  // its logits rows (prompt rows first, then sample rows)
        };
        StepHandle handle;
        int64_t step = 0;  // engine step id (fences of the held blocks and slots)
        std::vector<Seq> seqs;
        std::vector<LogitsRow> rows;  // the batch's logits rows
    };

    EngineCore(EngineConfig config, KvPlan plan, Executor* executor, const ExecutorInfo& info);
    // Ends every choice of r with `reason` (kAbort, or kError with `error`) and frees its sequences.
    void abort_request(Request* r, FinishReason reason = FinishReason::kAbort, const std::string& error = {});
    void finish_seq(Sequence* s);  // frees its blocks; forgotten at the end of the collect
    void append_token(Sequence* s, int32_t token, TokenLogprob* lp, bool has_lp);
    void build_batch(const std::vector<ScheduledSeq>& sched);
    // Schedules, builds and submits a step; false when nothing could be scheduled.
    Result<bool> submit_step();
    // Collects the oldest step in flight and applies its results.
    Status collect_step();

    EngineConfig config_;
    KvPlan plan_;
    Executor* executor_;
    ExecutorInfo info_;
    size_t max_in_flight_;
    BlockManager blocks_;
    Scheduler scheduler_;
    std::map<int64_t, std::unique_ptr<Request>> requests_;
    std::map<int64_t, std::unique_ptr<Sequence>> seqs_;
    int64_t next_request_ = 0, next_seq_ = 0;
    std::vector<int64_t> dead_;  // sequences finished this step
    std::vector<BlockTableUpdate> pending_updates_;
    // Swaps scheduled by a schedule() that found nothing to run (a preemption before a stall): they go
    // out with the next submitted step, before its own.
    std::vector<BlockSwap> pending_swap_out_, pending_swap_in_;
    std::deque<InFlight> in_flight_;  // oldest first
    int64_t next_step_ = 0;
    StepBatch batch_;
    StepResult result_;
    EngineStats stats_;
};

}  // namespace volt::engine
