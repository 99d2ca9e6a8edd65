#include "cpu/thread_communicator.h"

#include <cstring>
#include <vector>

#include "core/check.h"
#include "cpu/comm_tags.h"
#include "cpu/host_rendezvous.h"

namespace volt::cpu {

using ops::CollectiveKind;
using ops::CollectiveTag;

// The group's rendezvous (barriers, order check, watchdog: cpu/host_rendezvous.h) plus what the
// threads exchange through it: the all-reduce's scratch and each ordered pair's send buffer.
class ThreadGroupState {
  public:
    ThreadGroupState(int size, ops::CommunicatorOptions o)
        : host_(size, "threads", o), payload_(static_cast<size_t>(size) * size) {}

    int size() const { return host_.size(); }
    void fail(const Status& why) { host_.fail(why); }

    // Barrier 1 (posts compared); an all-reduce's scratch is sized by the last arriver, when no rank
    // still reads the previous collective's.
    Status meet(int rank, const CollectiveTag& tag, const void* in, int64_t scratch_count) {
        return host_.meet(rank, {tag, in}, [this, scratch_count] {
            if (scratch_count > 0) scratch_.resize(static_cast<size_t>(scratch_count));
        });
    }
    // Barrier 2: nobody returns (and reuses its buffer) before every rank is done reading.
    Status done(int rank, const CollectiveTag& tag) { return host_.finish(rank, tag); }
    // Rank r's input of the current collective (valid between meet and done).
    const void* in(int r) const { return host_.post(r).data; }
    float* scratch() { return scratch_.data(); }

    Status send(int rank, int peer, const CollectiveTag& tag, const void* data, int64_t bytes) {
        VOLT_RETURN_IF_ERROR(host_.wait_mailbox(rank, rank, peer, /*sending=*/true, tag));
        // The mailbox is empty: the receiver reads the payload only after set_mailbox (its lock orders it).
        payload_[rank * size() + peer].assign(static_cast<const uint8_t*>(data),
                                              static_cast<const uint8_t*>(data) + bytes);
        host_.set_mailbox(rank, peer, true, tag);
        return Status::ok();
    }
    Status recv(int rank, int peer, const CollectiveTag& expected, void* data, int64_t bytes) {
        VOLT_RETURN_IF_ERROR(host_.wait_mailbox(rank, peer, rank, /*sending=*/false, expected));
        std::memcpy(data, payload_[peer * size() + rank].data(), static_cast<size_t>(bytes));
        host_.set_mailbox(peer, rank, false, expected);
        return Status::ok();
    }

  private:
    HostRendezvous host_;
    std::vector<float> scratch_;
    std::vector<std::vector<uint8_t>> payload_;  // [src * size + dst]
};

namespace {

class ThreadCommunicator : public ops::Communicator {
  public:
    ThreadCommunicator(std::shared_ptr<ThreadGroupState> g, int rank) : g_(std::move(g)), rank_(rank) {}
    const char* name() const override { return "threads"; }
    int rank() const override { return rank_; }
    int size() const override { return g_->size(); }

    Status all_reduce_sum(float* data, int64_t count) override {
        const CollectiveTag tag = tags_.next(CollectiveKind::kAllReduceSum, count * 4);
        if (size() == 1) return Status::ok();
        VOLT_RETURN_IF_ERROR(g_->meet(rank_, tag, data, count));
        // Rank r sums elements [count * r / n, count * (r + 1) / n) over all ranks, in rank order.
        const int n = size();
        const int64_t b = count * rank_ / n, e = count * (rank_ + 1) / n;
        float* scratch = g_->scratch();
        for (int64_t i = b; i < e; ++i) {
            float s = static_cast<const float*>(g_->in(0))[i];
            for (int r = 1; r < n; ++r) s += static_cast<const float*>(g_->in(r))[i];
            scratch[i] = s;
        }
        VOLT_RETURN_IF_ERROR(g_->done(rank_, tag));
        // Every rank's inputs are read; the scratch stays until the next collective's first barrier.
        std::memcpy(data, scratch, static_cast<size_t>(count) * sizeof(float));
        return Status::ok();
    }

    Status gather(const float* in, const int64_t* counts, float* out, int root) override {
        int64_t total = 0;
        for (int r = 0; r < size(); ++r) total += counts[r];
        const CollectiveTag tag = tags_.next(CollectiveKind::kGather, total * 4);
        if (size() == 1) {
            if (counts[0] > 0) std::memmove(out, in, static_cast<size_t>(counts[0]) * sizeof(float));
            return Status::ok();
        }
        VOLT_RETURN_IF_ERROR(g_->meet(rank_, tag, in, 0));
        if (rank_ == root) {
            int64_t off = 0;
            for (int r = 0; r < size(); ++r) {
                if (counts[r] > 0)
                    std::memcpy(out + off, g_->in(r), static_cast<size_t>(counts[r]) * sizeof(float));
                off += counts[r];
            }
        }
        return g_->done(rank_, tag);
    }

    Status send(const void* data, int64_t bytes, int peer) override {
        VOLT_CHECK(peer >= 0 && peer < size() && peer != rank_) << "send to rank " << peer;
        return g_->send(rank_, peer, tags_.next_p2p(true, peer, bytes), data, bytes);
    }
    Status recv(void* data, int64_t bytes, int peer) override {
        VOLT_CHECK(peer >= 0 && peer < size() && peer != rank_) << "recv from rank " << peer;
        return g_->recv(rank_, peer, tags_.next_p2p(false, peer, bytes), data, bytes);
    }
    void begin_step(uint64_t step) override { tags_.begin_step(step); }
    uint64_t num_collectives() const override { return tags_.total(); }

  private:
    std::shared_ptr<ThreadGroupState> g_;
    const int rank_;
    TagCounter tags_;
};

}  // namespace

ThreadGroup::ThreadGroup(int size, ops::CommunicatorOptions options)
    : state_(std::make_shared<ThreadGroupState>(size, options)) {
    VOLT_CHECK(size >= 1) << "a group of " << size << " ranks";
}

std::unique_ptr<ops::Communicator> ThreadGroup::communicator(int rank) const {
    VOLT_CHECK(rank >= 0 && rank < state_->size()) << "rank " << rank << " of " << state_->size();
    return std::make_unique<ThreadCommunicator>(state_, rank);
}

int ThreadGroup::size() const { return state_->size(); }
void ThreadGroup::fail(const Status& why) const { state_->fail(why); }

}  // namespace volt::cpu
