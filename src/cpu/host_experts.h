// HostExpertsRunner: ops::HostExperts on this host's CPUs with the fast MXFP4 kernel (cpu/experts_fast.h;
// other expert formats take the scalar reference). A primary whose memory is host memory (the CPU
// backend) hands its pointers straight to the kernel. A device primary (a GPU): x, expert_ids and
// expert_weights are downloaded into pinned staging (Backend::alloc_host; pageable memory where the
// backend has none), the kernel writes the experts' sum into zeroed staging, which is uploaded into a
// device buffer and added into the residual with the primary's add op. Synchronous: the downloads wait
// for the device (the router's output), the upload waits until the bytes are on the device; the add is
// queued on the primary's stream. Adding 0 + s on the host and then x + s on the device gives the bits of
// x += s: both paths compute the same numbers. Tests: tests/unit/model/offload_test.cc (CPU primary and a
// counting "device" primary); on a GPU scripts/gpu/offload.sh.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/experts_fast.h"
#include "ops/host_experts.h"

namespace volt::cpu {

class HostExpertsRunner final : public ops::HostExperts {
  public:
    explicit HostExpertsRunner(Isa isa = best_isa()) : isa_(isa) {}
    // Logs the totals (stats()) once, when there were calls: where an offloaded step's time went.
    ~HostExpertsRunner() override;
    Status run(ops::Backend& primary, const ops::ExpertsArgs& a) override;

    // Totals since creation: calls, bytes of expert weights read (experts_fast.h expert_bytes_read), and
    // seconds in the kernel (host compute only) and in the whole call (with the copies).
    struct Stats {
        int64_t calls = 0, bytes = 0;
        double kernel_s = 0.0, total_s = 0.0;
    };
    const Stats& stats() const { return stats_; }
    Isa isa() const { return isa_; }

  private:
    // A host staging buffer of at least `bytes` (pinned through the primary where it can).
    void* staging(int slot, ops::Backend& primary, int64_t bytes);

    Isa isa_;
    Stats stats_;
    struct Host {
        ops::Buffer pinned;
        std::vector<uint8_t> plain;
        int64_t bytes = 0;
        void* data = nullptr;
    };
    Host host_[4];        // x, expert ids, expert weights, the experts' sum
    ops::Buffer device_;  // the experts' sum on the device, [T, H] f32
};

}  // namespace volt::cpu
