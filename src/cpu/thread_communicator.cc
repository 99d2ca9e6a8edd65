#include "cpu/thread_communicator.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/logging.h"
#include "cpu/comm_tags.h"

namespace volt::cpu {

using ops::CollectiveKind;
using ops::CollectiveTag;

class ThreadGroupState {
  public:
    ThreadGroupState(int size, ops::CommunicatorOptions o)
        : size_(size), options_(o), posts_(size), here_(size, false), mailboxes_(size * size) {}

    struct Post {
        CollectiveTag tag;
        const void* in = nullptr;
        void* out = nullptr;
        int64_t count = 0;
        const int64_t* counts = nullptr;
        int root = 0;
    };
    struct Mailbox {
        bool full = false;
        CollectiveTag tag;
        std::vector<uint8_t> data;
    };

    int size() const { return size_; }

    void fail(const Status& why) {
        std::lock_guard<std::mutex> lock(mu_);
        fail_locked(why);
    }

    // Publishes rank's post and waits for every rank's (barrier 1); the last arriver checks that all tags
    // are equal and sizes the scratch.
    Status meet(int rank, const Post& post) {
        std::unique_lock<std::mutex> lock(mu_);
        posts_[rank] = post;
        return barrier_locked(lock, rank, post.tag, [&] {
            for (int r = 1; r < size_; ++r) {
                if (posts_[r].tag != posts_[0].tag) {
                    fail_locked(internal_error("collective order differs across ranks: rank 0 issued " +
                                               ops::describe(posts_[0].tag) + ", rank " + std::to_string(r) +
                                               " issued " + ops::describe(posts_[r].tag)));
                    return;
                }
            }
            if (posts_[0].tag.kind == CollectiveKind::kAllReduceSum)
                scratch_.resize(static_cast<size_t>(posts_[0].count));
        });
    }
    // Barrier 2: nobody returns (and reuses its buffer) before every rank is done reading.
    Status done(int rank, const CollectiveTag& tag) {
        std::unique_lock<std::mutex> lock(mu_);
        return barrier_locked(lock, rank, tag, [] {});
    }

    const Post& post(int r) const { return posts_[r]; }
    float* scratch() { return scratch_.data(); }

    Status send(int rank, int peer, const CollectiveTag& tag, const void* data, int64_t bytes) {
        std::unique_lock<std::mutex> lock(mu_);
        Mailbox& m = mailboxes_[rank * size_ + peer];
        VOLT_RETURN_IF_ERROR(wait_locked(lock, rank, tag, [&] { return !m.full; }));
        m.tag = tag;
        m.data.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + bytes);
        m.full = true;
        cv_.notify_all();
        return Status::ok();
    }
    Status recv(int rank, int peer, const CollectiveTag& expected, void* data, int64_t bytes) {
        std::unique_lock<std::mutex> lock(mu_);
        Mailbox& m = mailboxes_[peer * size_ + rank];
        VOLT_RETURN_IF_ERROR(wait_locked(lock, rank, expected, [&] { return m.full; }));
        if (m.tag != expected) {
            fail_locked(internal_error("collective order differs across ranks: rank " + std::to_string(rank) +
                                       " expected " + ops::describe(expected) + " from rank " +
                                       std::to_string(peer) + ", which sent " + ops::describe(m.tag)));
            return failed_;
        }
        std::memcpy(data, m.data.data(), static_cast<size_t>(bytes));
        m.full = false;
        cv_.notify_all();
        return Status::ok();
    }

  private:
    void fail_locked(const Status& why) {
        if (!failed_.is_ok()) return;
        failed_ = why;
        spdlog::error("communicator (threads, {} ranks): {}", size_, why.message());
        cv_.notify_all();
    }

    std::string missing_locked() const {
        std::string s;
        for (int r = 0; r < size_; ++r)
            if (!here_[r]) s += (s.empty() ? "" : ", ") + std::to_string(r);
        return s;
    }

    Status barrier_locked(std::unique_lock<std::mutex>& lock, int rank, const CollectiveTag& tag,
                          const std::function<void()>& on_complete) {
        if (!failed_.is_ok()) return failed_;
        here_[rank] = true;
        if (++arrived_ == size_) {
            on_complete();
            arrived_ = 0;
            here_.assign(size_, false);
            ++generation_;
            cv_.notify_all();
            return failed_;
        }
        const uint64_t gen = generation_;
        const auto deadline =
            std::chrono::steady_clock::now() + std::chrono::duration<double>(options_.timeout_s);
        while (generation_ == gen && failed_.is_ok()) {
            if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && generation_ == gen &&
                failed_.is_ok()) {
                fail_locked(Status(StatusCode::kUnavailable,
                                   "collective watchdog: rank " + std::to_string(rank) + " waited " +
                                       seconds_text(options_.timeout_s) + " s in " + ops::describe(tag) +
                                       " for ranks " + missing_locked()));
            }
        }
        return failed_;
    }

    Status wait_locked(std::unique_lock<std::mutex>& lock, int rank, const CollectiveTag& tag,
                       const std::function<bool()>& ready) {
        const auto deadline =
            std::chrono::steady_clock::now() + std::chrono::duration<double>(options_.timeout_s);
        while (failed_.is_ok() && !ready()) {
            if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && failed_.is_ok() && !ready()) {
                fail_locked(Status(StatusCode::kUnavailable,
                                   "collective watchdog: rank " + std::to_string(rank) + " waited " +
                                       seconds_text(options_.timeout_s) + " s in " + ops::describe(tag)));
            }
        }
        return failed_;
    }

    const int size_;
    const ops::CommunicatorOptions options_;
    std::mutex mu_;
    std::condition_variable cv_;
    int arrived_ = 0;
    uint64_t generation_ = 0;
    Status failed_;
    std::vector<Post> posts_;
    std::vector<bool> here_;
    std::vector<float> scratch_;
    std::vector<Mailbox> mailboxes_;  // [src * size + dst]
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
        VOLT_RETURN_IF_ERROR(g_->meet(rank_, {tag, data, data, count, nullptr, 0}));
        // Rank r sums elements [count * r / n, count * (r + 1) / n) over all ranks, in rank order.
        const int n = size();
        const int64_t b = count * rank_ / n, e = count * (rank_ + 1) / n;
        float* scratch = g_->scratch();
        for (int64_t i = b; i < e; ++i) {
            float s = static_cast<const float*>(g_->post(0).in)[i];
            for (int r = 1; r < n; ++r) s += static_cast<const float*>(g_->post(r).in)[i];
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
        VOLT_RETURN_IF_ERROR(g_->meet(rank_, {tag, in, out, counts[rank_], counts, root}));
        if (rank_ == root) {
            int64_t off = 0;
            for (int r = 0; r < size(); ++r) {
                if (counts[r] > 0)
                    std::memcpy(out + off, g_->post(r).in, static_cast<size_t>(counts[r]) * sizeof(float));
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
