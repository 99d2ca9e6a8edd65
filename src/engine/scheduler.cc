#include "engine/scheduler.h"

#include <algorithm>

#include "core/check.h"

namespace volt::engine {
namespace {
bool before(const Sequence* a, const Sequence* b) {
    return a->req->index != b->req->index ? a->req->index < b->req->index : a->choice < b->choice;
}
}  // namespace

Scheduler::Scheduler(SchedulerConfig config, BlockManager* blocks) : config_(config), blocks_(blocks) {
    for (int64_t i = config_.max_num_seqs - 1; i >= 0; --i) free_slots_.push_back(static_cast<int32_t>(i));
}

void Scheduler::take_slot(Sequence* s) {
    VOLT_CHECK(s->slot < 0 && !free_slots_.empty()) << "no seq_slot for sequence " << s->id;
    s->slot = free_slots_.back();
    free_slots_.pop_back();
}

void Scheduler::release_slot(Sequence* s) {
    if (s->slot < 0) return;
    free_slots_.push_back(s->slot);
    s->slot = -1;
}

void Scheduler::add_waiting(Sequence* s) {
    waiting_.insert(std::upper_bound(waiting_.begin(), waiting_.end(), s, before), s);
}

void Scheduler::add_running(Sequence* s) {
    take_slot(s);
    running_.insert(std::upper_bound(running_.begin(), running_.end(), s, before), s);
}

void Scheduler::preempt(Sequence* s, std::vector<BlockTableUpdate>* up) {
    blocks_->free(s->slot, &s->blocks, up);
    release_slot(s);
    s->num_computed = 0;
    ++num_preemptions_;
    add_waiting(s);
}

std::vector<ScheduledSeq> Scheduler::schedule(std::vector<BlockTableUpdate>* up,
                                              std::vector<BlockCopy>* copies) {
    std::vector<ScheduledSeq> out;
    int64_t budget = config_.max_num_batched_tokens;
    bool preempted = false;
    for (size_t i = 0; i < running_.size() && budget > 0;) {
        Sequence* s = running_[i];
        const int64_t q = std::min(s->num_tokens() - s->num_computed, budget);
        VOLT_CHECK(q > 0) << "running sequence " << s->id << " has nothing to compute";
        bool self_preempted = false;
        while (!blocks_->can_append(s->blocks, s->num_computed, q)) {
            Sequence* victim = running_.back();
            running_.pop_back();
            preempt(victim, up);
            preempted = true;
            if (victim == s) {
                self_preempted = true;
                break;
            }
        }
        if (self_preempted) break;
        blocks_->append(s->slot, &s->blocks, s->num_computed, q, up, copies);
        out.push_back({s, q});
        budget -= q;
        ++i;
    }
    if (preempted) return out;
    // A sequence whose choices have not forked yet counts for all of them.
    int64_t seats = 0;
    for (const Sequence* s : running_) seats += 1 + s->pending_forks;
    while (!waiting_.empty() && budget > 0) {
        Sequence* s = waiting_.front();
        if (seats + 1 + s->pending_forks > config_.max_num_seqs) break;
        const int64_t q = std::min(s->num_tokens() - s->num_computed, budget);
        if (!blocks_->can_append(s->blocks, s->num_computed, q)) break;
        waiting_.pop_front();
        add_running(s);
        blocks_->append(s->slot, &s->blocks, s->num_computed, q, up, copies);
        out.push_back({s, q});
        budget -= q;
        seats += 1 + s->pending_forks;
    }
    return out;
}

void Scheduler::remove(Sequence* s, std::vector<BlockTableUpdate>* up) {
    if (s->slot >= 0) blocks_->free(s->slot, &s->blocks, up);
    release_slot(s);
    auto drop = [&](std::deque<Sequence*>& q) {
        auto it = std::find(q.begin(), q.end(), s);
        if (it != q.end()) q.erase(it);
    };
    drop(running_);
    drop(waiting_);
}

}  // namespace volt::engine
