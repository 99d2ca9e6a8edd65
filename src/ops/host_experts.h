// The seam of CPU expert offload (issue 22, --cpu-offload-experts / --cpu-offload-gb): the experts op of
// a layer whose expert weights stay in host memory runs on the host while every other op runs on the
// primary backend (any ops::Backend: the CPU in tests, a GPU in production). model::Forward calls it in
// place of Backend::experts_residual for those layers (model/placed_model.h says which). The CPU's
// implementation: cpu::HostExpertsRunner (src/cpu/host_experts.h). C++17, standard library only.
//
// Prompt rows (ExpertsArgs::prompt_rows) of such a layer may instead run on the primary's own experts
// kernels: the experts those rows route to are copied from host memory into a staging area in the
// primary's memory laid out as below (ExpertStagingLayout), one layer's experts in size, allocated by
// prepare() before memory planning measures what is in use. The rule is by row kind, never by batch
// size: a prompt row takes the primary's path whatever else is in the step, a generated row the host's.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/status.h"
#include "ops/ops.h"

namespace volt::ops {

// One projection of E experts in the staging: MXFP4 codes and scales byte for byte as the host holds them
// (and as CudaBackend::place_experts places them), the bias widened to f32 (what place_vector_f32 makes).
// Expert e's codes start at blocks_at + e * block_bytes, and so on.
struct StagedProjection {
    int64_t block_bytes = 0, scale_bytes = 0, bias_bytes = 0;  // per expert
    int64_t blocks_at = 0, scales_at = 0, bias_at = 0;         // byte offsets into the staging
};

struct ExpertStagingLayout {
    StagedProjection gate_up, down;
    int64_t bytes = 0;  // the staging's size; 0 when the layer cannot be staged (not MXFP4 with in % 32 == 0)
};

// Offsets aligned to 256 bytes (the kernels' vector loads, cudaMalloc's alignment).
inline int64_t staging_align(int64_t n) { return (n + 255) / 256 * 256; }

inline ExpertStagingLayout expert_staging_layout(const ExpertWeights& gate_up, const ExpertWeights& down) {
    ExpertStagingLayout l;
    for (const ExpertWeights* w : {&gate_up, &down})
        if (w->format != Format::kMxfp4 || w->in % 32 != 0 || w->num_experts <= 0 || w->out <= 0 ||
            w->blocks == nullptr || w->scales == nullptr)
            return l;
    int64_t at = 0;
    auto place = [&](const ExpertWeights& w, StagedProjection* p) {
        p->block_bytes = w.out * (w.in / 32) * 16;
        p->scale_bytes = w.out * (w.in / 32);
        p->bias_bytes = w.bias.data != nullptr ? w.out * 4 : 0;
        p->blocks_at = at;
        at += staging_align(w.num_experts * p->block_bytes);
        p->scales_at = at;
        at += staging_align(w.num_experts * p->scale_bytes);
        p->bias_at = at;
        at += staging_align(w.num_experts * p->bias_bytes);
    };
    place(gate_up, &l.gate_up);
    place(down, &l.down);
    l.bytes = at;
    return l;
}

// One offloaded layer's expert weights (host views), what HostExperts::prepare is told.
struct HostExpertLayer {
    ExpertWeights gate_up, down;
};

class HostExperts {
  public:
    virtual ~HostExperts() = default;
    // Called once, after placement and before the first run (and before memory planning measures the
    // primary's memory in use): the layers run() will be called for. The implementation may allocate its
    // staging in the primary's memory here and page-lock the host weights. Errors: the primary's.
    virtual Status prepare(Backend& /*primary*/, const std::vector<HostExpertLayer>& /*layers*/) {
        return Status::ok();
    }
    // a: the ExpertsArgs of one layer, with x [T, H], expert_ids [T, k], expert_weights [T, k] and out
    // [T, H] in `primary`'s memory and gate_up / down in host memory. Adds the experts' output into
    // a.out (spec §3.6), ordered with the primary's other work: ops the forward pass issues after this
    // call see it. Errors: kResourceExhausted when staging memory cannot be allocated.
    virtual Status run(Backend& primary, const ExpertsArgs& a) = 0;
};

}  // namespace volt::ops
