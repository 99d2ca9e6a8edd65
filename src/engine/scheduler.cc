#include "engine/scheduler.h"

#include <algorithm>

#include "core/check.h"

namespace volt::engine {
namespace {
bool before(const Sequence* a, const Sequence* b) {
    return a->req->index != b->req->index ? a->req->index < b->req->index : a->choice < b->choice;
}
}  // namespace

Scheduler::Scheduler(SchedulerConfig config, BlockManager* blocks) : config_(config), blocks_(blocks) {}

void Scheduler::add_waiting(Sequence* s) {
    waiting_.insert(std::upper_bound(waiting_.begin(), waiting_.end(), s, before), s);
}

void Scheduler::add_running(Sequence* s) {
    running_.insert(std::upper_bound(running_.begin(), running_.end(), s, before), s);
}

void Scheduler::preempt(Sequence* s, std::vector<BlockTableUpdate>* up) {
    blocks_->free(s->id, &s->blocks, up);
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
        blocks_->append(s->id, &s->blocks, s->num_computed, q, up, copies);
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
        blocks_->append(s->id, &s->blocks, s->num_computed, q, up, copies);
        add_running(s);
        out.push_back({s, q});
        budget -= q;
        seats += 1 + s->pending_forks;
    }
    return out;
}

void Scheduler::remove(Sequence* s, std::vector<BlockTableUpdate>* up) {
    blocks_->free(s->id, &s->blocks, up);
    auto drop = [&](std::deque<Sequence*>& q) {
        auto it = std::find(q.begin(), q.end(), s);
        if (it != q.end()) q.erase(it);
    };
    drop(running_);
    drop(waiting_);
}

}  // namespace volt::engine
