// SyncExecutor: the asynchronous seam (engine/executor.h) for executors that compute a step in one call
// (the CPU, the scripted executor, test fakes). submit() runs the step at once and queues its result;
// collect() hands results back in order. With max_in_flight > 1 the engine sees a pipelined executor
// (the delayed executor of the engine tests), so the engine's look-ahead is tested without a GPU.
// It also resolves DeferredToken rows from the draws it kept per seq_slot, and extends a sequence's
// output history by the deferred token for the penalties, so run() sees an ordinary batch.
#pragma once

#include <deque>
#include <vector>

#include "engine/executor.h"

namespace volt::executor {

class SyncExecutor : public engine::Executor {
  public:
    explicit SyncExecutor(int max_in_flight = 1) : max_in_flight_(max_in_flight) {}

    int max_in_flight() const override { return max_in_flight_; }
    // Makes any one-call executor a delayed one (the engine tests run CpuExecutor and ScriptedExecutor
    // with 2). Call before the engine is created: EngineCore reads max_in_flight() once.
    void set_max_in_flight(int n) { max_in_flight_ = n; }
    // DeferredToken rows resolved so far (tests: the engine really looked ahead).
    int64_t num_deferred_resolved() const { return num_deferred_resolved_; }
    Result<engine::StepHandle> submit(const engine::StepBatch& batch) override;
    Status collect(engine::StepHandle handle, engine::StepResult* result) override;

  protected:
    // Computes one step: every token id is known, SeqSampling::output includes any deferred token.
    virtual Status run(const engine::StepBatch& batch, engine::StepResult* result) = 0;
    // Called by init_cache overrides: the number of seq_slots.
    void set_num_slots(int64_t n) { last_draw_.assign(n, kNeverDrawn); }

  private:
    struct Done {
        int64_t id;
        engine::StepResult result;
    };
    int max_in_flight_;
    int64_t next_id_ = 0;
    int64_t num_deferred_resolved_ = 0;
    std::deque<Done> done_;
    static constexpr int32_t kNeverDrawn = -2;  // (ops::kNonFiniteToken, -1, is a draw: NaN logits)
    std::vector<int32_t> last_draw_;            // [slot] the last feeds_slot draw
    engine::StepBatch resolved_;                // the batch with deferred tokens filled in
    std::vector<std::vector<int32_t>> outputs_;
};

}  // namespace volt::executor
