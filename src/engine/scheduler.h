// Requests, sequences and the continuous-batching scheduler. Every step the running sequences
// (oldest first) take their next tokens (a decode token or the next prefill chunk) within
// max_num_batched_tokens; when KV blocks run out the newest running sequence is preempted (its blocks
// freed, recomputed later from its prompt + output); if nothing was preempted, waiting sequences join
// within max_num_seqs, lowest SamplingParams::priority first, then round-robin across client requests
// (Request::group: the first waiting sequence of every request in arrival order, then the second of each,
// ...), so that one wide request (many prompts, large n) cannot hold every slot while a later one waits; a
// sequence that would start a partial prefill beyond max_num_partial_prefills is passed over for one that
// completes its prompt in the step. While others run or wait, a sequence computes at most
// long_prefill_token_threshold tokens per step (chunked long prefill). Oldest-first service and newest-first
// preemption mean the oldest sequence always progresses: no deadlock, no starvation, provided one sequence of
// max_model_len fits the pool alone (checked at start).
//
// Look-ahead (an executor with max_in_flight > 1, engine/executor.h): a step's bookkeeping is done when
// it is submitted, so a sequence whose sampling row is in flight has a *pending* token (value unknown
// until collect). It may take its next decode in the very next step (the row's token is deferred: the
// executor reads the draw itself) unless its outcome is known in advance (the pending token is its
// max_tokens-th or reaches max_model_len: no extra step), it still has n > 1 choices to fork, or its
// pending token is older than the previous step; otherwise it sits out until the token is collected.
// Blocks and seq_slots freed while steps are in flight are held (FreeList) until those steps are
// collected: when the blocks a sequence needs are only held, the step stops there and waits for them
// rather than preempting more; held slots count as occupied at admission, so a fork at collect always
// finds a slot; a preempted sequence with a pending token is not re-admitted until the token is known.
// Swap preemption (SchedulerConfig::swap, --preemption-mode swap): the victim's blocks go to the host
// pools (BlockManager::swap_out) and it keeps num_computed; when it is admitted again its blocks come back
// (swap_in) and it continues where it stopped; when the host pools lack room it is recomputed instead. A
// step that preempts admits nobody, so one schedule() makes swap-outs or swap-ins, never both.
// Tests: tests/unit/engine/scheduler_test.cc, tests/unit/engine/swap_test.cc.
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
    int64_t group = 0;  // the client request it belongs to (Engine::submit); waiting seqs round-robin by it
    std::shared_ptr<RequestHandle> handle;
    SamplingParams params;
    uint64_t seed = 0;  // params.seed or a drawn one; choice c draws from stream seed + c
    std::shared_ptr<const std::vector<int32_t>> prompt;
    std::vector<TokenLogprob> prompt_logprobs;  // collected as prompt rows are computed
    int64_t prompt_logprobs_asked = 0;          // prompt rows [0, this) were submitted (never asked twice)
    bool first_delta_sent = false;
    int32_t num_finished = 0;
    std::vector<Sequence*> seqs;  // live sequences
};

struct Sequence {
    int64_t id = 0;
    Request* req = nullptr;
    int32_t choice = 0;
    int32_t pending_forks = 0;    // n - 1 until the prompt is done and the choices fork
    std::vector<int32_t> output;  // tokens collected so far
    int32_t num_pending = 0;      // drawn by steps in flight, not collected yet (they follow output)
    int64_t pending_step = -1;    // the step that draws the last pending token
    int64_t num_computed = 0;     // tokens whose KV is in the cache, or written by a step in flight
    int32_t slot = -1;            // seq_slot in [0, max_num_seqs) while running, else -1
    SeqBlocks blocks;

    int64_t num_prompt() const { return static_cast<int64_t>(req->prompt->size()); }
    int64_t num_tokens() const { return num_prompt() + static_cast<int64_t>(output.size()); }
    int64_t num_tokens_with_pending() const { return num_tokens() + num_pending; }
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
    int64_t max_model_len = 0;  // 0: no limit (the look-ahead stops before it)
    // While other sequences run or wait, one sequence computes at most this many tokens per step (a long
    // prompt's prefill is chunked so that decodes and short prompts keep moving); alone it takes the
    // whole budget. <= 0: no cap.
    int64_t long_prefill_token_threshold = 0;
    // Sequences whose prefill is partly done at once; a waiting sequence that would start another partial
    // prefill is passed over (a shorter one that completes its prompt in this step may go first).
    int64_t max_num_partial_prefills = 1;
    // Preempt by swapping the victim's KV blocks to the host pools (recompute when they lack room).
    bool swap = false;
};

class Scheduler {
  public:
    Scheduler(SchedulerConfig config, BlockManager* blocks);

    void add_waiting(Sequence* s);  // kept in (request index, choice) order
    // A forked child: takes a seq_slot here (call before its blocks are forked to it), already holds
    // its blocks.
    void add_running(Sequence* s);
    // Picks this step's sequences and allocates their blocks; logs table updates and copies.
    // prev_step: the id of the last submitted step while it is in flight, else -1 (only its pending
    // tokens may be deferred into this step). swap_out / swap_in: the block swaps (needed with
    // config.swap); they must reach the executor even when no sequence is scheduled (a preemption can
    // precede a stall).
    std::vector<ScheduledSeq> schedule(int64_t prev_step, std::vector<BlockTableUpdate>* up,
                                       std::vector<BlockCopy>* copies,
                                       std::vector<BlockSwap>* swap_out = nullptr,
                                       std::vector<BlockSwap>* swap_in = nullptr);
    // Finished or aborted: frees its blocks and forgets it.
    void remove(Sequence* s, std::vector<BlockTableUpdate>* up);
    // Tokens s could compute in a step after prev_step (schedule's argument); 0: it waits for a
    // pending token.
    int64_t ready_tokens(const Sequence* s, int64_t prev_step) const;

    // Step `step` was submitted: blocks and slots freed from now on are held until it is collected.
    void hold_frees(int64_t step);
    // Steps up to `step` were collected: what was held for them is free again.
    void release_frees(int64_t step);

    const std::deque<Sequence*>& running() const { return running_; }
    const std::deque<Sequence*>& waiting() const { return waiting_; }
    int64_t num_preemptions() const { return num_preemptions_; }  // swapped + recomputed
    int64_t num_swapped_preemptions() const { return num_swapped_preemptions_; }
    int64_t num_blocks_swapped_out() const { return num_blocks_swapped_out_; }
    int64_t num_blocks_swapped_in() const { return num_blocks_swapped_in_; }
    int64_t num_held_slots() const { return free_slots_.num_held(); }
    // Running sequences hold distinct slots, waiting ones none; free + held + running = max_num_seqs.
    Status check_slots() const;

  private:
    void preempt(Sequence* s, std::vector<BlockTableUpdate>* up, std::vector<BlockSwap>* swap_out);
    void take_slot(Sequence* s);
    void release_slot(Sequence* s);

    SchedulerConfig config_;
    BlockManager* blocks_;
    std::deque<Sequence*> running_, waiting_;
    FreeList free_slots_;
    int64_t num_preemptions_ = 0, num_swapped_preemptions_ = 0;
    int64_t num_blocks_swapped_out_ = 0, num_blocks_swapped_in_ = 0;
};

}  // namespace volt::engine
