#include "engine/scheduler.h"

#include <algorithm>
#include <string>
#include <unordered_map>
#include <utility>

#include "core/check.h"

namespace volt::engine {
namespace {
bool before(const Sequence* a, const Sequence* b) {
    return a->req->index != b->req->index ? a->req->index < b->req->index : a->choice < b->choice;
}
}  // namespace

Scheduler::Scheduler(SchedulerConfig config, BlockManager* blocks)
    : config_(config), blocks_(blocks), free_slots_(config.max_num_seqs) {}

void Scheduler::take_slot(Sequence* s) {
    VOLT_CHECK(s->slot < 0 && free_slots_.num_free() > 0) << "no seq_slot for sequence " << s->id;
    s->slot = free_slots_.take();
}

void Scheduler::release_slot(Sequence* s) {
    if (s->slot < 0) return;
    free_slots_.give(s->slot);
    s->slot = -1;
}

void Scheduler::hold_frees(int64_t step) {
    free_slots_.hold_until(step);
    blocks_->hold_frees(step);
}

void Scheduler::release_frees(int64_t step) {
    free_slots_.release_through(step);
    blocks_->release_frees(step);
}

int64_t Scheduler::ready_tokens(const Sequence* s, int64_t prev_step) const {
    if (s->num_pending == 0) return s->num_tokens() - s->num_computed;
    // A look-ahead decode of the pending token: only one pending token, drawn by the step just before
    // (the executor resolves DeferredToken from that step alone), no forks left to make (they happen at
    // collect) and an outcome not known in advance (the pending token ends the sequence by length: an
    // extra step would be computed only to be discarded).
    if (s->slot < 0 || s->num_pending > 1 || s->pending_step != prev_step || s->pending_forks > 0) return 0;
    if (static_cast<int64_t>(s->output.size()) + 1 >= s->req->params.max_tokens) return 0;
    if (config_.max_model_len > 0 && s->num_tokens_with_pending() >= config_.max_model_len) return 0;
    return s->num_tokens_with_pending() - s->num_computed;
}

void Scheduler::add_waiting(Sequence* s) {
    waiting_.insert(std::upper_bound(waiting_.begin(), waiting_.end(), s, before), s);
}

void Scheduler::add_running(Sequence* s) {
    take_slot(s);
    running_.insert(std::upper_bound(running_.begin(), running_.end(), s, before), s);
}

void Scheduler::preempt(Sequence* s, std::vector<BlockTableUpdate>* up, std::vector<BlockSwap>* swap_out) {
    if (config_.swap && blocks_->can_swap_out(s->blocks)) {
        VOLT_CHECK(swap_out != nullptr) << "swap preemption without a swap-out list";
        const size_t before = swap_out->size();
        blocks_->swap_out(s->slot, &s->blocks, up, swap_out);
        num_blocks_swapped_out_ += static_cast<int64_t>(swap_out->size() - before);
        ++num_swapped_preemptions_;
    } else {  // recompute: from the prompt and the output so far
        blocks_->free(s->slot, &s->blocks, up);
        s->num_computed = 0;
    }
    release_slot(s);
    ++num_preemptions_;
    add_waiting(s);
}

std::vector<ScheduledSeq> Scheduler::schedule(int64_t prev_step, std::vector<BlockTableUpdate>* up,
                                              std::vector<BlockCopy>* copies,
                                              std::vector<BlockSwap>* swap_out,
                                              std::vector<BlockSwap>* swap_in) {
    std::vector<ScheduledSeq> out;
    int64_t budget = config_.max_num_batched_tokens;
    bool preempted = false, stalled = false;
    // Chunked long prefill: capped only while someone else could use the rest of the step.
    const bool others = running_.size() + waiting_.size() > 1;
    const int64_t cap =
        others && config_.long_prefill_token_threshold > 0 ? config_.long_prefill_token_threshold : budget;
    int64_t partial_prefills = 0;
    for (const Sequence* s : running_) {
        if (s->num_computed < s->num_prompt()) ++partial_prefills;
    }
    for (size_t i = 0; i < running_.size() && budget > 0;) {
        Sequence* s = running_[i];
        const int64_t ready = ready_tokens(s, prev_step);
        if (ready == 0) {  // its pending token comes at the next collect
            VOLT_CHECK(s->num_pending > 0) << "running sequence " << s->id << " has nothing to compute";
            ++i;
            continue;
        }
        const int64_t q = std::min(std::min(ready, budget), cap);
        bool self_preempted = false;
        while (!blocks_->can_append(s->blocks, s->num_computed, q)) {
            // Blocks held for steps in flight come back at the next collect: wait for them rather than
            // preempt more (and admit nobody meanwhile, so that s gets them).
            if (blocks_->can_append_after_release(s->blocks, s->num_computed, q)) {
                stalled = true;
                break;
            }
            Sequence* victim = running_.back();
            running_.pop_back();
            preempt(victim, up, swap_out);
            preempted = true;
            if (victim == s) {
                self_preempted = true;
                break;
            }
        }
        if (self_preempted || stalled) break;
        blocks_->append(s->slot, &s->blocks, s->num_computed, q, up, copies);
        out.push_back({s, q});
        budget -= q;
        ++i;
    }
    if (preempted || stalled) return out;
    // A sequence whose choices have not forked yet counts for all of them, and a slot held for a step
    // in flight is not free yet: the forks at collect always find a slot.
    int64_t seats = free_slots_.num_held();
    for (const Sequence* s : running_) seats += 1 + s->pending_forks;
    // Round-robin across client requests: a group's sequences are ranked after the seats it already
    // holds (a running sequence counts for its unforked choices too), and the queue is admitted by rank,
    // in arrival order within a rank (a stable sort of the arrival-ordered queue). A request that holds
    // many slots thus waits behind one that holds none.
    std::vector<Sequence*> order(waiting_.begin(), waiting_.end());
    if (!order.empty()) {
        std::unordered_map<int64_t, int64_t> seen;
        for (const Sequence* s : running_) seen[s->req->group] += 1 + s->pending_forks;
        std::vector<std::pair<int64_t, Sequence*>> keyed;
        keyed.reserve(order.size());
        for (Sequence* s : order) {
            int64_t& rank = seen[s->req->group];
            keyed.emplace_back(rank, s);
            rank += 1 + s->pending_forks;
        }
        // Priority first (lower first: vLLM's meaning), then the round-robin rank, then arrival.
        const bool priorities = std::any_of(order.begin(), order.end(), [&](const Sequence* s) {
            return s->req->params.priority != order.front()->req->params.priority;
        });
        if (seen.size() > 1 || priorities) {
            std::stable_sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) {
                const int32_t pa = a.second->req->params.priority, pb = b.second->req->params.priority;
                return pa != pb ? pa < pb : a.first < b.first;
            });
            for (size_t i = 0; i < keyed.size(); ++i) order[i] = keyed[i].second;
        }
    }
    for (Sequence* s : order) {
        if (budget <= 0) break;
        if (s->num_pending > 0) break;  // preempted with its token in flight: recomputed once it is known
        if (seats + 1 + s->pending_forks > config_.max_num_seqs) break;
        const int64_t remaining = s->num_tokens() - s->num_computed;
        const int64_t q = std::min(std::min(remaining, budget), cap);
        // It would start one more partial prefill: let a sequence that completes its prompt go first.
        if (q < remaining && partial_prefills >= std::max<int64_t>(1, config_.max_num_partial_prefills))
            continue;
        const bool swapped = s->blocks.swapped;
        if (swapped ? !blocks_->can_swap_in(s->blocks, s->num_computed, q)
                    : !blocks_->can_append(s->blocks, s->num_computed, q))
            break;
        waiting_.erase(std::find(waiting_.begin(), waiting_.end(), s));
        add_running(s);
        if (swapped) {
            VOLT_CHECK(swap_in != nullptr)
                << "swapped sequence " << s->id << " resumes without a swap-in list";
            const size_t before = swap_in->size();
            blocks_->swap_in(s->slot, &s->blocks, up, swap_in);
            num_blocks_swapped_in_ += static_cast<int64_t>(swap_in->size() - before);
        }
        blocks_->append(s->slot, &s->blocks, s->num_computed, q, up, copies);
        out.push_back({s, q});
        budget -= q;
        seats += 1 + s->pending_forks;
        if (q < remaining) ++partial_prefills;
    }
    return out;
}

Status Scheduler::check_slots() const {
    const int64_t n = config_.max_num_seqs;
    std::vector<int8_t> seen(n, 0);
    auto mark = [&](int32_t slot, const char* what) -> Status {
        if (slot < 0 || slot >= n || seen[slot]++ != 0)
            return internal_error(std::string(what) + " seq_slot " + std::to_string(slot) +
                                  " is out of range or taken twice");
        return Status::ok();
    };
    for (int32_t slot : free_slots_.free_ids()) VOLT_RETURN_IF_ERROR(mark(slot, "free"));
    for (int32_t slot : free_slots_.held_ids()) VOLT_RETURN_IF_ERROR(mark(slot, "held"));
    for (const Sequence* s : running_) VOLT_RETURN_IF_ERROR(mark(s->slot, "running"));
    for (const Sequence* s : waiting_)
        if (s->slot >= 0)
            return internal_error("waiting sequence " + std::to_string(s->id) + " holds a slot");
    const int64_t total =
        free_slots_.num_free() + free_slots_.num_held() + static_cast<int64_t>(running_.size());
    if (total != n)
        return internal_error("free + held + running seq_slots = " + std::to_string(total) +
                              " != max_num_seqs " + std::to_string(n));
    return Status::ok();
}

void Scheduler::remove(Sequence* s, std::vector<BlockTableUpdate>* up) {
    if (s->slot >= 0 || s->blocks.swapped) blocks_->free(s->slot, &s->blocks, up);
    release_slot(s);
    auto drop = [&](std::deque<Sequence*>& q) {
        auto it = std::find(q.begin(), q.end(), s);
        if (it != q.end()) q.erase(it);
    };
    drop(running_);
    drop(waiting_);
}

}  // namespace volt::engine
