// The rendezvous of ranks that are threads of one process, shared by the thread communicator
// (cpu/thread_communicator.h) and the CUDA communicators (same-device, NCCL): the ranks of a group meet at
// barriers, compare every collective's tag (ops::CollectiveTag: the order check of docs/parallel.md) and
// pass point-to-point tags through one mailbox per ordered pair of ranks. Every wait has the collective
// watchdog: past CommunicatorOptions::timeout_s the group fails with kUnavailable naming the collective
// and the missing ranks, and stays failed (sticky). Plain C++: tests/unit/cpu/host_rendezvous_test.cc.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "ops/communicator.h"

namespace volt::cpu {

class HostRendezvous {
  public:
    // `what` names the group in log lines: "threads", "same-device, GPU 0", "nccl". size >= 1.
    HostRendezvous(int size, std::string what, ops::CommunicatorOptions options);

    struct Post {
        ops::CollectiveTag tag;
        const void* data = nullptr;  // the rank's buffer, read by the others between meet and finish
    };
    int size() const { return size_; }
    // Barrier 1: publishes rank's post and waits for every rank's; the last arriver compares the tags
    // (a mismatch fails the group: kInternal "collective order differs across ranks: rank 0 issued ...,
    // rank r issued ...") and, when they agree, calls on_all_arrived (under the group's lock, before any
    // rank returns: the thread communicator sizes its scratch there). Returns the group's failure, if any
    // (the watchdog's kUnavailable, the order check's kInternal, or what fail() was given).
    Status meet(int rank, const Post& post, const std::function<void()>& on_all_arrived = {});
    // Rank r's post of the current collective: valid from meet's return to finish's.
    const Post& post(int r) const { return posts_[r]; }
    // Barrier 2: every rank is done with the others' posts.
    Status finish(int rank, const ops::CollectiveTag& tag);
    // Waits until mailbox (src -> dst) is empty (sending) or full (receiving); a receiver then checks
    // that the tag there is `tag` (kInternal naming both when not). The mailbox holds a tag only: a
    // transport keeps its payload beside it (written by the sender between this wait and set_mailbox).
    Status wait_mailbox(int rank, int src, int dst, bool sending, const ops::CollectiveTag& tag);
    // Fills (full = true, with the sender's tag) or empties mailbox (src -> dst).
    void set_mailbox(int src, int dst, bool full, const ops::CollectiveTag& tag);
    // Fails the group (sticky; the first failure wins and is logged once).
    void fail(const Status& why);
    Status failed() const;

  private:
    void fail_locked(const Status& why);
    std::string missing_locked() const;
    Status barrier_locked(std::unique_lock<std::mutex>& lock, int rank, const ops::CollectiveTag& tag,
                          const std::function<void()>& on_complete);
    Status wait_locked(std::unique_lock<std::mutex>& lock, int rank, const ops::CollectiveTag& tag,
                       const std::function<bool()>& ready);

    struct Mailbox {
        bool full = false;
        ops::CollectiveTag tag;
    };
    const int size_;
    const std::string what_;
    const ops::CommunicatorOptions options_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    int arrived_ = 0;
    uint64_t generation_ = 0;
    Status failed_;
    std::vector<Post> posts_;
    std::vector<bool> here_;
    std::vector<Mailbox> mail_;  // [src * size + dst]
};

}  // namespace volt::cpu
