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
};

// Places every tensor through the backend. Errors: the backend's (out of memory naming the tensor's size).
Result<std::shared_ptr<const PlacedModel>> place_model(std::shared_ptr<const ModelWeights> host,
                                                       ops::Backend& backend);

}  // namespace volt::model
