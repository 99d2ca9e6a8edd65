// Which layers keep their experts in host memory (CPU expert offload, issue 22): the plan from
// --cpu-offload-experts (the last N layers, `all`, or a list of layer indices and ranges) or vLLM's
// --cpu-offload-gb (the experts of the last layers until at least G GiB are on the host), and the bytes
// that therefore stay off the primary backend. The layers' expert tensors are then left as host views by
// place_model (the loader's: pages of the memory-mapped checkpoint, never copied) and their experts op
// runs on the CPU (ops/host_experts.h), except for prompt rows on a GPU, which run on the GPU's kernels
// from a staging of one layer's experts (staging_bytes). Tests: tests/unit/model/offload_test.cc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/weights.h"

namespace volt::model {

struct OffloadRequest {
    // "" (none), N (the experts of the last N layers, 0 <= N <= layers), "all", or a comma list of layer
    // indices and inclusive ranges ("0,5,20-23"; one layer alone is the range "7-7", since a bare number
    // is a count).
    std::string experts;
    double gib = 0.0;  // --cpu-offload-gb: > 0 offloads the last layers until this many GiB are on the host
};

struct OffloadPlan {
    std::vector<bool> layers;  // [num_hidden_layers] true: the layer's experts stay in host memory
    int64_t host_bytes = 0;    // bytes of those experts (codes, scales, biases)
    // Bytes of the device staging their prompt rows run from (ops::ExpertStagingLayout, the largest of the
    // offloaded layers; 0 when none is MXFP4): what a GPU holds for them (cpu::HostExpertsRunner::prepare).
    int64_t staging_bytes = 0;
    int64_t count() const;
    bool any() const { return count() > 0; }
    // "experts of 4 of 24 layers in host memory (layers 20-23, 1.18 GiB)", or "no expert offload".
    std::string describe() const;
};

// Bytes of one layer's expert tensors as placed: gate_up and down, MXFP4 codes + scales (or dense
// elements) + biases.
int64_t expert_bytes(const LayerWeights& layer);

// The plan for `w` (its config's layer count; layer sizes from its tensors). Errors (kInvalidArgument,
// naming the flag): both flags at once, a negative count or size, a count above the layer count, an
// index outside [0, layers), a reversed range, a layer named twice, anything unparsable.
// --cpu-offload-gb above the experts' total offloads every layer (describe() says how much that is).
Result<OffloadPlan> plan_offload(const ModelWeights& w, const OffloadRequest& r);

}  // namespace volt::model
