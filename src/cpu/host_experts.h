// HostExpertsRunner: ops::HostExperts on this host's CPUs with the fast MXFP4 kernel (cpu/experts_fast.h;
// other expert formats take the scalar reference). A primary whose memory is host memory (the CPU
// backend) hands its pointers straight to the kernel. A device primary (a GPU):
//  - generated rows (rows [prompt_rows, T)): x, expert_ids and expert_weights are downloaded into pinned
//    staging (Backend::alloc_host; pageable memory where the backend has none), the kernel writes the
//    experts' sum into zeroed staging, which is uploaded into a device buffer and added into the residual
//    with the primary's add op. Adding 0 + s on the host and then x + s on the device gives the bits of
//    x += s: both paths compute the same numbers.
//  - prompt rows (rows [0, prompt_rows)) of MXFP4 layers, where prepare() could allocate the staging (one
//    layer's experts in the primary's memory, ops::ExpertStagingLayout): the distinct experts those rows
//    route to are uploaded into it (upload_async from the host weights, page-locked by prepare() through
//    Backend::pin_host where the primary can) and the primary's own experts_residual runs them: the GPU's
//    prompt GEMM, the bits of the same layer not offloaded. The copies and that kernel are queued on the
//    primary's stream after the downloads (which drained it) and run while the CPU computes the generated
//    rows: the stream orders the uploads after every earlier reader of the staging and before the kernel, so
//    no event or second stream is needed. Which path prompt rows take is fixed per process (logged once by
//    prepare()) and never depends on the batch.
// Synchronous: returns after the generated rows' sum is on the device; the add is queued. Tests:
// tests/unit/model/offload_test.cc (CPU primary and a counting "device" primary); on a GPU
// tests/unit/cuda/cuda_backend_test.cc (CudaOffload.*) and scripts/gpu/offload.sh.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cpu/experts_fast.h"
#include "ops/host_experts.h"

namespace volt::cpu {

// The distinct entries of ids[0, n) that are in [0, num_experts), ascending: the experts a step's prompt
// rows route to, the ones their staging needs.
std::vector<int32_t> distinct_experts(const int32_t* ids, int64_t n, int64_t num_experts);

// [begin, end) byte ranges widened to whole pages of `page` bytes, sorted, and merged where they overlap
// or touch: what pin_host is called on (a page can be page-locked only once, and the tensors of a layer
// often share their boundary pages).
std::vector<std::pair<uintptr_t, uintptr_t>> page_ranges(std::vector<std::pair<uintptr_t, uintptr_t>> ranges,
                                                         uintptr_t page);

class HostExpertsRunner final : public ops::HostExperts {
  public:
    explicit HostExpertsRunner(Isa isa = best_isa()) : isa_(isa) {}
    // Logs the totals (stats()) once, when there were calls: where an offloaded step's time went. Unpins
    // what prepare() pinned.
    ~HostExpertsRunner() override;
    Status prepare(ops::Backend& primary, const std::vector<ops::HostExpertLayer>& layers) override;
    Status run(ops::Backend& primary, const ops::ExpertsArgs& a) override;

    // Totals since creation: calls, bytes of expert weights read (experts_fast.h expert_bytes_read), and
    // seconds in the kernel (host compute only) and in the whole call (with the copies); prompt rows run
    // on the primary (their calls, rows, experts and bytes uploaded into the staging).
    struct Stats {
        int64_t calls = 0, bytes = 0;
        double kernel_s = 0.0, total_s = 0.0;
        int64_t staged_calls = 0, staged_rows = 0, staged_experts = 0, staged_bytes = 0;
    };
    const Stats& stats() const { return stats_; }
    Isa isa() const { return isa_; }
    // Bytes of the prompt-row staging in the primary's memory (0: prompt rows run on the host).
    int64_t staging_bytes() const { return stage_.bytes(); }
    // Bytes of host expert weights prepare() page-locked.
    int64_t pinned_bytes() const { return pinned_bytes_; }
    // Why prompt rows run on the host ("" when they run on the primary).
    const std::string& host_prompt_reason() const { return host_prompt_reason_; }

  private:
    // A host staging buffer of at least `bytes` (pinned through the primary where it can).
    void* staging(int slot, ops::Backend& primary, int64_t bytes);
    // Queues the uploads of the experts rows [0, P) route to and the primary's experts op on those rows.
    Status run_prompt_rows(ops::Backend& primary, const ops::ExpertsArgs& a,
                           const ops::ExpertStagingLayout& l, int64_t P, const int32_t* host_ids);

    Isa isa_;
    Stats stats_;
    struct Host {
        ops::Buffer pinned;
        std::vector<uint8_t> plain;
        int64_t bytes = 0;
        void* data = nullptr;
    };
    Host host_[5];        // x, expert ids, expert weights, the experts' sum, biases widened to f32
    ops::Buffer device_;  // the experts' sum on the device, [T, H] f32
    ops::Buffer
        stage_;  // the prompt rows' experts (ops::ExpertStagingLayout), empty: prompt rows on the host
    ops::Backend* pinned_by_ = nullptr;
    std::vector<const void*> pinned_;
    int64_t pinned_bytes_ = 0;
    std::string host_prompt_reason_ = "prepare() was not called";
};

}  // namespace volt::cpu
