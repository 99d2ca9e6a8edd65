#include "cuda/placement.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>

#include "core/check.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "quant/int_weights.h"
#include "quant/mxfp4.h"

namespace volt::cuda {

std::string F16RangeReport::to_string() const {
    return std::to_string(n) + " values, max |x| " + std::to_string(max_abs) + ", " +
           std::to_string(overflow) + " overflow, " + std::to_string(subnormal) + " subnormal (" +
           std::to_string(inexact) + " inexact, " + std::to_string(flushed) + " flushed to 0)";
}

F16RangeReport check_bf16_to_f16(const uint16_t* bf16, int64_t n) {
    F16RangeReport total;
    total.n = n;
    std::mutex mu;
    cpu_thread_pool().parallel_for(n, 1 << 16, [&](int64_t b, int64_t e) {
        F16RangeReport r;
        for (int64_t i = b; i < e; ++i) {
            const float x = bf16_to_f32(bf16[i]);
            if (!std::isfinite(x)) continue;
            const float a = std::fabs(x);
            r.max_abs = std::max(r.max_abs, a);
            if (x == 0.0f) continue;
            if (a > 65504.0f) {
                ++r.overflow;
                continue;
            }
            if (a < 6.103515625e-05f) ++r.subnormal;  // 2^-14
            const float back = f16_to_f32(f32_to_f16(x));
            if (back == 0.0f)
                ++r.flushed;
            else if (back != x)
                ++r.inexact;
        }
        std::lock_guard<std::mutex> lock(mu);
        total.overflow += r.overflow;
        total.subnormal += r.subnormal;
        total.inexact += r.inexact;
        total.flushed += r.flushed;
        total.max_abs = std::max(total.max_abs, r.max_abs);
    });
    return total;
}

void convert_bf16_to_f16(const uint16_t* bf16, int64_t n, uint16_t* dst) {
    cpu_thread_pool().parallel_for(n, 1 << 16, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) dst[i] = f32_to_f16(bf16_to_f32(bf16[i]));
    });
}

std::vector<float> widen_vector(const ops::VectorWeight& v) {
    std::vector<float> out(v.n);
    for (int64_t i = 0; i < v.n; ++i) {
        switch (v.format) {
            case ops::Format::kF32:
                out[i] = static_cast<const float*>(v.data)[i];
                break;
            case ops::Format::kF16:
                out[i] = f16_to_f32(static_cast<const uint16_t*>(v.data)[i]);
                break;
            case ops::Format::kBf16:
                out[i] = bf16_to_f32(static_cast<const uint16_t*>(v.data)[i]);
                break;
            default:
                VOLT_CHECK(false) << "vector weights are bf16, f16 or f32, not "
                                  << ops::format_name(v.format);
        }
    }
    return out;
}

Status quantize_experts_mxfp4(const ops::ExpertWeights& d, std::vector<uint8_t>* blocks,
                              std::vector<uint8_t>* scales) {
    if (d.format != ops::Format::kBf16 && d.format != ops::Format::kF16)
        return invalid_argument(std::string("quantize experts: dense bf16 or f16 expected, got ") +
                                ops::format_name(d.format));
    if (d.in % quant::kMxfp4BlockSize != 0)
        return invalid_argument("quantize experts: rows of " + std::to_string(d.in) +
                                " values are not whole MXFP4 blocks of 32");
    const int64_t rows = d.out, cols = d.in, nb = cols / quant::kMxfp4BlockSize;
    blocks->resize(d.num_experts * rows * nb * quant::kMxfp4BlockBytes);
    scales->resize(d.num_experts * rows * nb);
    std::vector<float> widened(rows * cols);
    const auto* src = static_cast<const uint16_t*>(d.w);
    for (int64_t e = 0; e < d.num_experts; ++e) {
        const uint16_t* m = src + e * rows * cols;
        cpu_thread_pool().parallel_for(rows * cols, 1 << 16, [&](int64_t b, int64_t end) {
            for (int64_t i = b; i < end; ++i)
                widened[i] = d.format == ops::Format::kBf16 ? bf16_to_f32(m[i]) : f16_to_f32(m[i]);
        });
        VOLT_RETURN_IF_ERROR(quant::quantize_mxfp4_matrix(
            widened.data(), rows, cols, quant::kDefaultScaleRule, cpu_thread_pool(),
            blocks->data() + e * rows * nb * quant::kMxfp4BlockBytes, scales->data() + e * rows * nb));
    }
    return Status::ok();
}

Status repack_int_weight(const ops::DenseWeight& d, IntWeightsHost* out) {
    const std::string shape = "[" + std::to_string(d.out) + ", " + std::to_string(d.in) + "]";
    if (d.format != ops::Format::kInt8 && d.format != ops::Format::kInt4)
        return invalid_argument(std::string("repack integer weights: got ") + ops::format_name(d.format));
    if (d.w == nullptr || d.scales == nullptr || d.out <= 0 || d.in <= 0)
        return invalid_argument(std::string(ops::format_name(d.format)) + " weights " + shape +
                                " without codes or scales");
    if (d.format == ops::Format::kInt8) {
        const auto* q = static_cast<const uint8_t*>(d.w);
        const auto* s = reinterpret_cast<const uint8_t*>(d.scales);
        out->codes.assign(q, q + d.out * d.in);
        out->meta.assign(s, s + d.out * 2);
        return Status::ok();
    }
    const int64_t g = d.group_size;
    if (d.zeros == nullptr || d.out % quant::kAwqPack != 0 || g <= 0 || d.in % g != 0 || g % 8 != 0)
        return invalid_argument("int4 weights " + shape + " with group size " + std::to_string(g) +
                                ": the CUDA backend needs zero points, out % 8 == 0, in % group_size == 0 "
                                "and group_size % 8 == 0");
    const int64_t words = d.out / quant::kAwqPack, groups = d.in / g, row_words = d.in / 8;
    const auto* qw = static_cast<const uint32_t*>(d.w);
    const auto* qz = static_cast<const uint32_t*>(d.zeros);
    out->codes.assign(d.out * row_words * 4, 0);
    out->meta.assign(d.out * groups * 4, 0);
    auto* codes = reinterpret_cast<uint32_t*>(out->codes.data());
    auto* meta = reinterpret_cast<uint32_t*>(out->meta.data());
    cpu_thread_pool().parallel_for(words, 1, [&](int64_t cb, int64_t ce) {
        for (int64_t c = cb; c < ce; ++c) {
            for (int64_t gi = 0; gi < groups; ++gi) {
                const uint32_t zw = qz[gi * words + c];
                for (int j = 0; j < quant::kAwqPack; ++j) {
                    const int64_t o = c * quant::kAwqPack + j;
                    meta[o * groups + gi] = uint32_t(d.scales[gi * d.out + o]) | quant::awq_nibble(zw, j)
                                                                                     << 16;
                }
            }
            for (int64_t i = 0; i < d.in; ++i) {
                const uint32_t w = qw[i * words + c];
                const int n = static_cast<int>(i % 8);  // input i % 8 of its word: nibble 2n or 2(n-4)+1
                const int shift = n < 4 ? 8 * n : 8 * (n - 4) + 4;
                for (int j = 0; j < quant::kAwqPack; ++j) {
                    const int64_t o = c * quant::kAwqPack + j;
                    codes[o * row_words + i / 8] |= quant::awq_nibble(w, j) << shift;
                }
            }
        }
    });
    return Status::ok();
}

}  // namespace volt::cuda
