// RoPE inverse frequencies with YaRN (spec §3.5; transformers' _compute_yarn_parameters): plain
// theta^(-2i/d), blended towards theta^(-2i/d)/factor over the correction range [low, high] (floored /
// ceiled only when `truncate`), and the attention factor 0.1 ln(factor) + 1 that multiplies cos and sin.
// Computed in f32 like the reference. Test: tests/unit/model/rope_test.cc.
#pragma once

#include <vector>

#include "model/config.h"

namespace volt::model {

struct RopeTable {
    std::vector<float> inv_freq;  // [head_dim / 2]
    float mscale = 1.0f;
};

RopeTable make_rope_table(const GptOssConfig& c);

}  // namespace volt::model
