// The seam of CPU expert offload (issue 22, --cpu-offload-experts / --cpu-offload-gb): the experts op of
// a layer whose expert weights stay in host memory runs on the host while every other op runs on the
// primary backend (any ops::Backend: the CPU in tests, a GPU in production). model::Forward calls it in
// place of Backend::experts_residual for those layers (model/placed_model.h says which). The CPU's
// implementation: cpu::HostExpertsRunner (src/cpu/host_experts.h). C++17, standard library only.
#pragma once

#include "core/status.h"
#include "ops/ops.h"

namespace volt::ops {

class HostExperts {
  public:
    virtual ~HostExperts() = default;
    // a: the ExpertsArgs of one layer, with x [T, H], expert_ids [T, k], expert_weights [T, k] and out
    // [T, H] in `primary`'s memory and gate_up / down in host memory. Adds the experts' output into
    // a.out (spec §3.6), ordered with the primary's other work: ops the forward pass issues after this
    // call see it. Errors: kResourceExhausted when staging memory cannot be allocated.
    virtual Status run(Backend& primary, const ExpertsArgs& a) = 0;
};

}  // namespace volt::ops
