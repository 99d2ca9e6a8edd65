#include "model/rope.h"

#include <algorithm>
#include <cmath>

namespace volt::model {

RopeTable make_rope_table(const GptOssConfig& c) {
    const int64_t d = c.head_dim, half = d / 2;
    RopeTable t;
    t.inv_freq.resize(half);
    const float base = static_cast<float>(c.rope_theta);
    std::vector<float> pos_freqs(half), plain(half);
    for (int64_t i = 0; i < half; ++i) {
        pos_freqs[i] = std::pow(base, static_cast<float>(2 * i) / static_cast<float>(d));
        plain[i] = 1.0f / pos_freqs[i];
    }
    const auto& y = c.rope_scaling;
    if (y.rope_type != "yarn") {
        t.inv_freq = plain;
        return t;
    }
    const double factor = y.factor;
    // Dimension index whose wavelength makes `rotations` turns over the original context.
    auto correction_dim = [&](double rotations) {
        return (static_cast<double>(d) * std::log(static_cast<double>(y.original_max_position_embeddings) /
                                                  (rotations * 2.0 * M_PI))) /
               (2.0 * std::log(c.rope_theta));
    };
    double low = correction_dim(y.beta_fast), high = correction_dim(y.beta_slow);
    if (y.truncate) {
        low = std::floor(low);
        high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(d - 1));
    if (low == high) high += 0.001;
    for (int64_t i = 0; i < half; ++i) {
        const float ramp = std::clamp(
            (static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low), 0.0f, 1.0f);
        const float extrapolation = 1.0f - ramp;  // weight of the plain frequency
        const float interp = 1.0f / (static_cast<float>(factor) * pos_freqs[i]);
        t.inv_freq[i] = interp * (1.0f - extrapolation) + plain[i] * extrapolation;
    }
    t.mscale = factor <= 1.0 ? 1.0f : static_cast<float>(0.1 * std::log(factor) + 1.0);
    return t;
}

}  // namespace volt::model
