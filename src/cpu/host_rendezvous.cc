#include "cpu/host_rendezvous.h"

#include <chrono>

#include "core/check.h"
#include "core/logging.h"
#include "cpu/comm_tags.h"

namespace volt::cpu {

using ops::CollectiveTag;

HostRendezvous::HostRendezvous(int size, std::string what, ops::CommunicatorOptions options)
    : size_(size),
      what_(std::move(what)),
      options_(options),
      posts_(size),
      here_(size, false),
      mail_(static_cast<size_t>(size) * size) {
    VOLT_CHECK(size >= 1) << "a group of " << size << " ranks";
}

Status HostRendezvous::meet(int rank, const Post& p, const std::function<void()>& on_all_arrived) {
    std::unique_lock<std::mutex> lock(mu_);
    posts_[rank] = p;
    return barrier_locked(lock, rank, p.tag, [&] {
        for (int r = 1; r < size_; ++r) {
            if (posts_[r].tag != posts_[0].tag) {
                fail_locked(internal_error("collective order differs across ranks: rank 0 issued " +
                                           ops::describe(posts_[0].tag) + ", rank " + std::to_string(r) +
                                           " issued " + ops::describe(posts_[r].tag)));
                return;
            }
        }
        if (on_all_arrived) on_all_arrived();
    });
}

Status HostRendezvous::finish(int rank, const CollectiveTag& tag) {
    std::unique_lock<std::mutex> lock(mu_);
    return barrier_locked(lock, rank, tag, [] {});
}

Status HostRendezvous::wait_mailbox(int rank, int src, int dst, bool sending, const CollectiveTag& tag) {
    std::unique_lock<std::mutex> lock(mu_);
    Mailbox& m = mail_[src * size_ + dst];
    VOLT_RETURN_IF_ERROR(wait_locked(lock, rank, tag, [&] { return m.full != sending; }));
    if (!sending && m.tag != tag) {
        fail_locked(internal_error("collective order differs across ranks: rank " + std::to_string(rank) +
                                   " expected " + ops::describe(tag) + " from rank " + std::to_string(src) +
                                   ", which sent " + ops::describe(m.tag)));
        return failed_;
    }
    return Status::ok();
}

void HostRendezvous::set_mailbox(int src, int dst, bool full, const CollectiveTag& tag) {
    std::lock_guard<std::mutex> lock(mu_);
    Mailbox& m = mail_[src * size_ + dst];
    m.full = full;
    m.tag = tag;
    cv_.notify_all();
}

void HostRendezvous::fail(const Status& why) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_locked(why);
}

Status HostRendezvous::failed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return failed_;
}

void HostRendezvous::fail_locked(const Status& why) {
    if (!failed_.is_ok()) return;
    failed_ = why;
    spdlog::error("communicator ({}, {} ranks): {}", what_, size_, why.message());
    cv_.notify_all();
}

std::string HostRendezvous::missing_locked() const {
    std::string s;
    for (int r = 0; r < size_; ++r)
        if (!here_[r]) s += (s.empty() ? "" : ", ") + std::to_string(r);
    return s;
}

Status HostRendezvous::barrier_locked(std::unique_lock<std::mutex>& lock, int rank, const CollectiveTag& tag,
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
            fail_locked(Status(StatusCode::kUnavailable, "collective watchdog: rank " + std::to_string(rank) +
                                                             " waited " + seconds_text(options_.timeout_s) +
                                                             " s in " + ops::describe(tag) + " for ranks " +
                                                             missing_locked()));
        }
    }
    return failed_;
}

Status HostRendezvous::wait_locked(std::unique_lock<std::mutex>& lock, int rank, const CollectiveTag& tag,
                                   const std::function<bool()>& ready) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(options_.timeout_s);
    while (failed_.is_ok() && !ready()) {
        if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && failed_.is_ok() && !ready()) {
            fail_locked(Status(StatusCode::kUnavailable, "collective watchdog: rank " + std::to_string(rank) +
                                                             " waited " + seconds_text(options_.timeout_s) +
                                                             " s in " + ops::describe(tag)));
        }
    }
    return failed_;
}

}  // namespace volt::cpu
