// The per-rank numbering of collectives for the order check (ops::CollectiveTag), shared by the CPU
// communicators: group collectives count per step; point-to-point transfers per (peer, direction).
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <utility>

#include "ops/communicator.h"

namespace volt::cpu {

// "0.2", "300": the watchdog's timeout in its messages.
inline std::string seconds_text(double s) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", s);
    return buf;
}

class TagCounter {
  public:
    void begin_step(uint64_t step) {
        step_ = step;
        seq_ = 0;
        p2p_.clear();
    }
    ops::CollectiveTag next(ops::CollectiveKind kind, int64_t bytes) {
        ++total_;
        return {kind, step_, seq_++, bytes};
    }
    // Both ends name the transfer kSend: the sender's n-th send to a peer matches the peer's n-th recv.
    ops::CollectiveTag next_p2p(bool sending, int peer, int64_t bytes) {
        ++total_;
        return {ops::CollectiveKind::kSend, step_, p2p_[{peer, sending}]++, bytes};
    }
    uint64_t total() const { return total_; }

  private:
    uint64_t step_ = 0, seq_ = 0, total_ = 0;
    std::map<std::pair<int, bool>, uint64_t> p2p_;
};

}  // namespace volt::cpu
