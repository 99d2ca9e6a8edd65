// A model placed in a backend's memory: every weight view of ModelWeights moved (or, for the CPU, left)
// where the backend's kernels read it, in the format they read (ops::Backend::place_*), plus the tables
// the forward pass needs uploaded once (the YaRN inverse frequencies). The host weights stay alive as
// long as the placed model (the CPU's views point into them).
#pragma once

#include <memory>
#include <vector>

#include "model/weights.h"
#include "ops/ops.h"

namespace volt::model {

struct PlacedModel {
    ModelWeights weights;             // views in backend memory; weights.config is the model's config
    const float* inv_freq = nullptr;  // [head_dim / 2] in backend memory (spec §3.5)
    float mscale = 1.0f;              // YaRN attention factor on cos and sin
    std::shared_ptr<const ModelWeights> host;
    std::vector<ops::Buffer> buffers;  // backend memory owned by this model
    // [num_hidden_layers] or empty (none): layers whose gate_up / down are the host views themselves (CPU
    // expert offload, model/offload.h); Forward runs their experts op through ops::HostExperts.
    std::vector<bool> experts_on_host;
    bool experts_on_host_at(int64_t l) const {
        return static_cast<size_t>(l) < experts_on_host.size() && experts_on_host[l];
    }
};

// Places every tensor through the backend, except the experts of the layers `experts_on_host` marks
// ([num_hidden_layers] or empty): those stay the host views (the CPU runs them). Errors: the backend's
// (out of memory naming the tensor's size); kUnimplemented for host experts in a format the CPU kernels
// do not read (they read MXFP4 and dense bf16/f16).
Result<std::shared_ptr<const PlacedModel>> place_model(std::shared_ptr<const ModelWeights> host,
                                                       ops::Backend& backend,
                                                       const std::vector<bool>& experts_on_host = {});

}  // namespace volt::model
