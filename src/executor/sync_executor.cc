#include "executor/sync_executor.h"

#include <algorithm>

#include "core/check.h"
#include "ops/sample.h"

namespace volt::executor {

Result<engine::StepHandle> SyncExecutor::submit(const engine::StepBatch& batch) {
    VOLT_CHECK(static_cast<int>(done_.size()) < max_in_flight_) << "submit past max_in_flight";
    const engine::StepBatch* b = &batch;
    const bool needs_copy = !batch.deferred.empty();
    if (needs_copy) {
        resolved_ = batch;
        outputs_.resize(batch.sampling.size());
        for (const engine::DeferredToken& d : batch.deferred) {
            VOLT_CHECK(d.slot >= 0 && d.slot < static_cast<int32_t>(last_draw_.size()) &&
                       last_draw_[d.slot] != kNeverDrawn)
                << "deferred token of slot " << d.slot << " was never drawn";
            // A draw from non-finite logits has no id: the engine fails that request when it collects
            // the previous step and ignores this step's rows of it, so any valid id will do here.
            resolved_.token_ids[d.row] = last_draw_[d.slot] == ops::kNonFiniteToken ? 0 : last_draw_[d.slot];
        }
        num_deferred_resolved_ += static_cast<int64_t>(batch.deferred.size());
        resolved_.deferred.clear();  // every id is known now
        for (size_t s = 0; s < batch.sampling.size(); ++s) {
            if (!batch.sampling[s].output_deferred) continue;
            outputs_[s] = *batch.sampling[s].output;
            outputs_[s].push_back(std::max(last_draw_[batch.seq_slots[s]], 0));
            resolved_.sampling[s].output = &outputs_[s];
            resolved_.sampling[s].output_deferred = false;
        }
        b = &resolved_;
    }
    Done d{next_id_++, {}};
    VOLT_RETURN_IF_ERROR(run(*b, &d.result));
    VOLT_CHECK_EQ(d.result.tokens.size(), b->logits_rows.size());
    for (size_t r = 0; r < b->logits_rows.size(); ++r) {
        const engine::LogitsRow& row = b->logits_rows[r];
        if (row.feeds_slot) last_draw_[b->seq_slots[row.seq]] = d.result.tokens[r];
    }
    done_.push_back(std::move(d));
    return engine::StepHandle{done_.back().id};
}

Status SyncExecutor::collect(engine::StepHandle handle, engine::StepResult* result) {
    VOLT_CHECK(!done_.empty() && done_.front().id == handle.id) << "collect out of order: " << handle.id;
    *result = std::move(done_.front().result);
    done_.pop_front();
    return Status::ok();
}

}  // namespace volt::executor
