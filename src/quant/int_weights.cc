// INT8 and AWQ (AutoAWQ gemm layout) decoding, quantizers and packing; formats: docs/quantization.md.
#include "quant/int_weights.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/dtype.h"

namespace volt::quant {

uint32_t awq_pack(const uint8_t* values) {
    uint32_t word = 0;
    for (int i = 0; i < kAwqPack; ++i) word |= static_cast<uint32_t>(values[kAwqOrder[i]] & 0xf) << (4 * i);
    return word;
}

void decode_int8_row(const int8_t* q_row, uint16_t scale_f16, int64_t in, float* out) {
    const float s = f16_to_f32(scale_f16);
    for (int64_t i = 0; i < in; ++i) out[i] = static_cast<float>(q_row[i]) * s;
}

void decode_awq_columns(const int32_t* qweight, const int32_t* qzeros, const uint16_t* scales, int64_t in,
                        int64_t out, int64_t group_size, int64_t c, float* dst) {
    const int64_t words = out / kAwqPack;
    for (int64_t g = 0; g * group_size < in; ++g) {
        const uint32_t zw = static_cast<uint32_t>(qzeros[g * words + c]);
        float z[kAwqPack], s[kAwqPack];
        for (int j = 0; j < kAwqPack; ++j) {
            z[j] = static_cast<float>(awq_nibble(zw, j));
            s[j] = f16_to_f32(scales[g * out + c * kAwqPack + j]);
        }
        const int64_t end = std::min(in, (g + 1) * group_size);
        for (int64_t i = g * group_size; i < end; ++i) {
            const uint32_t qw = static_cast<uint32_t>(qweight[i * words + c]);
            for (int j = 0; j < kAwqPack; ++j)
                dst[j * in + i] = (static_cast<float>(awq_nibble(qw, j)) - z[j]) * s[j];
        }
    }
}

namespace {
Status check_finite(const float* w, int64_t n, const char* what) {
    for (int64_t i = 0; i < n; ++i)
        if (!std::isfinite(w[i]))
            return invalid_argument(std::string(what) + ": element " + std::to_string(i) +
                                    " is not finite (" + std::to_string(w[i]) + ")");
    return Status::ok();
}
}  // namespace

Status quantize_int8_row(const float* w, int64_t n, int8_t* q, uint16_t* scale_f16) {
    VOLT_RETURN_IF_ERROR(check_finite(w, n, "INT8 quantization"));
    float amax = 0.0f;
    for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(w[i]));
    *scale_f16 = f32_to_f16(amax / kInt8Max);
    const float s = f16_to_f32(*scale_f16);
    for (int64_t i = 0; i < n; ++i) {
        const float v = s > 0.0f ? std::nearbyint(w[i] / s) : 0.0f;
        q[i] =
            static_cast<int8_t>(std::clamp(v, -static_cast<float>(kInt8Max), static_cast<float>(kInt8Max)));
    }
    return Status::ok();
}

Status quantize_awq(const float* w, int64_t out, int64_t in, int64_t group_size, int32_t* qweight,
                    int32_t* qzeros, uint16_t* scales) {
    if (out % kAwqPack != 0)
        return invalid_argument("AWQ quantization: " + std::to_string(out) +
                                " output columns are not a multiple of 8 (AutoAWQ packs 8 per int32)");
    if (group_size <= 0 || in % group_size != 0)
        return invalid_argument("AWQ quantization: the input size " + std::to_string(in) +
                                " is not a multiple of the group size " + std::to_string(group_size));
    VOLT_RETURN_IF_ERROR(check_finite(w, out * in, "AWQ quantization"));
    const int64_t words = out / kAwqPack, groups = in / group_size;
    std::fill(qweight, qweight + in * words, 0);
    std::fill(qzeros, qzeros + groups * words, 0);
    for (int64_t o = 0; o < out; ++o) {
        const int64_t c = o / kAwqPack, j = o % kAwqPack;
        const int nibble = kAwqReverseOrder[j];
        for (int64_t g = 0; g < groups; ++g) {
            const float* row = w + o * in + g * group_size;
            float lo = 0.0f, hi = 0.0f;
            for (int64_t i = 0; i < group_size; ++i) {
                lo = std::min(lo, row[i]);
                hi = std::max(hi, row[i]);
            }
            const uint16_t s16 = f32_to_f16(std::max(hi - lo, 1e-5f) / 15.0f);
            const float s = f16_to_f32(s16);
            const float z = std::clamp(std::nearbyint(-lo / s), 0.0f, 15.0f);
            scales[g * out + o] = s16;
            qzeros[g * words + c] |= static_cast<int32_t>(static_cast<uint32_t>(z) << (4 * nibble));
            for (int64_t i = 0; i < group_size; ++i) {
                const float q = std::clamp(std::nearbyint(row[i] / s) + z, 0.0f, 15.0f);
                const int64_t ii = g * group_size + i;
                qweight[ii * words + c] |= static_cast<int32_t>(static_cast<uint32_t>(q) << (4 * nibble));
            }
        }
    }
    return Status::ok();
}

}  // namespace volt::quant
