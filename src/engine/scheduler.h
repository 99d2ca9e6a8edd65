// Requests, sequences and the continuous-batching scheduler. Every step the running sequences
// (oldest first) take their next tokens (a decode token or the next prefill chunk) within
// max_num_batched_tokens; when KV blocks run out the newest running sequence is preempted (its blocks
// freed, recomputed later from its prompt + output); if nothing was preempted, waiting sequences join
// in arrival order (no skipping) within max_num_seqs. Oldest-first service and newest-first preemption
// mean the oldest sequence always progresses: no deadlock, no starvation, provided one sequence of
// max_model_len fits the pool alone (checked at start). Tests: tests/unit/engine/scheduler_test.cc.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "engine/block_manager.h"
#include "engine/engine.h"

namespace volt::engine {

struct Sequence;

// Engine-side state of one submitted request.
struct Request {
    int64_t index = 0;  // submission ordinal
    std::shared_ptr<RequestHandle> handle;
    SamplingParams params;
    uint64_t seed = 0;  // params.seed or a drawn one; choice c draws from stream seed + c
    std::shared_ptr<const std::vector<int32_t>> prompt;
    std::vector<TokenLogprob> prompt_logprobs;  // collected as prompt rows are computed
    bool first_delta_sent = false;
    int32_t num_finished = 0;
    std::vector<Sequence*> seqs;  // live sequences
};

struct Sequence {
    int64_t id = 0;
    Request* req = nullptr;
    int32_t choice = 0;
    int32_t pending_forks = 0;  // n - 1 until the prompt is done and the choices fork
    std::vector<int32_t> output;
    int64_t num_computed = 0;  // tokens whose KV is in the cache
    int32_t slot = -1;         // seq_slot in [0, max_num_seqs) while running, else -1
    SeqBlocks blocks;

    int64_t num_prompt() const { return static_cast<int64_t>(req->prompt->size()); }
    int64_t num_tokens() const { return num_prompt() + static_cast<int64_t>(output.size()); }
    int32_t token_at(int64_t i) const {
        return i < num_prompt() ? (*req->prompt)[i] : output[i - num_prompt()];
    }
};

struct ScheduledSeq {
    Sequence* seq;
    int64_t num_new;  // tokens [num_computed, num_computed + num_new) computed this step
};

struct SchedulerConfig {
    int64_t max_num_seqs = 256;
    int64_t max_num_batched_tokens = 2048;
};

class Scheduler {
  public:
    Scheduler(SchedulerConfig config, BlockManager* blocks);

    void add_waiting(Sequence* s);  // kept in (request index, choice) order
    // A forked child: takes a seq_slot here (call before its blocks are forked to it), already holds
    // its blocks.
    void add_running(Sequence* s);
    // Picks this step's sequences and allocates their blocks; logs table updates and copies.
    std::vector<ScheduledSeq> schedule(std::vector<BlockTableUpdate>* up, std::vector<BlockCopy>* copies);
    // Finished or aborted: frees its blocks and forgets it.
    void remove(Sequence* s, std::vector<BlockTableUpdate>* up);

    const std::deque<Sequence*>& running() const { return running_; }
    const std::deque<Sequence*>& waiting() const { return waiting_; }
    int64_t num_preemptions() const { return num_preemptions_; }

  private:
    void preempt(Sequence* s, std::vector<BlockTableUpdate>* up);
    void take_slot(Sequence* s);
    void release_slot(Sequence* s);

    SchedulerConfig config_;
    BlockManager* blocks_;
    std::deque<Sequence*> running_, waiting_;
    std::vector<int32_t> free_slots_;  // LIFO, lowest slot on top first
    int64_t num_preemptions_ = 0;
};

}  // namespace volt::engine
