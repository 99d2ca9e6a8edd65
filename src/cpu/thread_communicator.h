// The CPU communicator of ranks that are threads of one process (CPU tensor and pipeline parallelism, the
// CI path of docs/parallel.md): ranks meet at the barriers of cpu/host_rendezvous.h (shared with the CUDA
// communicators: the tag check and the watchdog live there), each rank
// sums a slice of the all-reduce over every rank's buffer in rank order (r0 + r1 + ...), so the result
// is bitwise equal on every rank and independent of timing. A collective watchdog fails the group when a
// rank waits past CommunicatorOptions::timeout_s, and every collective's tag is compared across ranks.
// Tests: tests/unit/cpu/communicator_test.cc.
#pragma once

#include <memory>

#include "ops/communicator.h"

namespace volt::cpu {

class ThreadGroupState;

// The shared state of `size` ranks; communicator(r) is rank r's handle (each rank's calls from one
// thread). The group lives as long as any handle.
class ThreadGroup {
  public:
    explicit ThreadGroup(int size, ops::CommunicatorOptions options = {});
    std::unique_ptr<ops::Communicator> communicator(int rank) const;
    int size() const;
    // Fails the group now: waiting and later collectives of every rank return `why` (the executor calls it
    // when a rank fails outside a collective, so its peers stop waiting at once).
    void fail(const Status& why) const;

  private:
    std::shared_ptr<ThreadGroupState> state_;
};

}  // namespace volt::cpu
