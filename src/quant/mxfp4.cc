// MXFP4 decode and quantize (spec/gpt-oss.md §2.3, OCP MX v1.0 §5-6). The quantizer divides by the block
// scale with ldexp (exact: a power of two), rounds with explicit E2M1 thresholds and sums the block's
// squared error in double for kBestOf2. Tests: tests/unit/quant/mxfp4_test.cc.
#include "quant/mxfp4.h"

#include <cmath>
#include <cstring>
#include <mutex>
#include <string>

#include "core/check.h"
#include "core/dtype.h"

namespace volt::quant {

const char* scale_rule_name(ScaleRule rule) {
    switch (rule) {
        case ScaleRule::kOcp:
            return "ocp";
        case ScaleRule::kNoSaturate:
            return "no-saturate";
        case ScaleRule::kBestOf2:
            return "best-of-2";
    }
    return "?";
}

bool parse_scale_rule(const char* name, ScaleRule* out) {
    for (ScaleRule r : {ScaleRule::kOcp, ScaleRule::kNoSaturate, ScaleRule::kBestOf2}) {
        if (std::strcmp(name, scale_rule_name(r)) == 0) {
            *out = r;
            return true;
        }
    }
    return false;
}

uint8_t encode_e2m1(float x) {
    const uint8_t sign = std::signbit(x) ? 0x8 : 0x0;
    const float a = std::fabs(x);
    // Count the midpoints between grid neighbours that |x| passes (branch-free). At a tie the code with
    // mantissa bit 0 wins, hence > at ties that go down and >= at ties that go up:
    // 0.25 -> 0, 0.75 -> 1.0, 1.25 -> 1.0, 1.75 -> 2.0, 2.5 -> 2.0, 3.5 -> 4.0, 5.0 -> 4.0; above 5 -> 6.
    const uint8_t m = static_cast<uint8_t>((a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) +
                                           (a > 2.5f) + (a >= 3.5f) + (a > 5.0f));
    return sign | m;
}

void decode_mxfp4_block(const uint8_t* codes, uint8_t scale, float* out) {
    const float s = e8m0_to_f32(scale);
    for (int j = 0; j < kMxfp4BlockBytes; ++j) {
        out[2 * j] = kFp4Values[codes[j] & 0xF] * s;
        out[2 * j + 1] = kFp4Values[codes[j] >> 4] * s;
    }
}

void decode_mxfp4_row(const uint8_t* codes, const uint8_t* scales, int64_t n, float* out) {
    VOLT_CHECK(n % kMxfp4BlockSize == 0) << "MXFP4 row length " << n << " is not a multiple of 32";
    for (int64_t b = 0; b < n / kMxfp4BlockSize; ++b)
        decode_mxfp4_block(codes + b * kMxfp4BlockBytes, scales[b], out + b * kMxfp4BlockSize);
}

namespace {

// floor(log2(a)) for finite a > 0, subnormals included (frexp normalises them).
int floor_log2(float a) {
    int e;
    std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
    return e - 1;
}

int clamp_scale_byte(int byte) { return byte < 0 ? 0 : (byte > 254 ? 254 : byte); }

float block_amax(const float* x) {
    float amax = 0.0f;
    for (int i = 0; i < kMxfp4BlockSize; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    return amax;
}

// Encodes the block with a fixed scale byte; returns the squared error of the decoded block.
double encode_with_scale(const float* x, uint8_t scale, uint8_t* codes) {
    // x / 2^(scale-127) as a product with 2^(127-scale), a normal or subnormal f32 power of two for
    // every byte 0..254: exact, like ldexp, but inlined.
    const float inv = e8m0_to_f32(static_cast<uint8_t>(254 - scale));
    const float s = e8m0_to_f32(scale);
    double err = 0.0;
    for (int j = 0; j < kMxfp4BlockBytes; ++j) {
        const uint8_t lo = encode_e2m1(x[2 * j] * inv);
        const uint8_t hi = encode_e2m1(x[2 * j + 1] * inv);
        codes[j] = static_cast<uint8_t>(lo | (hi << 4));
        const double d0 = static_cast<double>(kFp4Values[lo]) * s - x[2 * j];
        const double d1 = static_cast<double>(kFp4Values[hi]) * s - x[2 * j + 1];
        err += d0 * d0 + d1 * d1;
    }
    return err;
}

}  // namespace

uint8_t ocp_scale_byte(float amax) {
    if (amax == 0.0f) return 0;
    return static_cast<uint8_t>(clamp_scale_byte(floor_log2(amax) - 2 + 127));
}

void quantize_mxfp4_block(const float* x, ScaleRule rule, uint8_t* codes, uint8_t* scale) {
    const float amax = block_amax(x);
    const uint8_t e0 = ocp_scale_byte(amax);
    switch (rule) {
        case ScaleRule::kOcp:
            break;
        case ScaleRule::kNoSaturate:
            // amax / 2^(e0-127) lies in [4, 8) unless e0 was clamped; above 6 it would saturate.
            if (e0 < 254 && std::ldexp(amax, 127 - static_cast<int>(e0)) > 6.0f) {
                *scale = static_cast<uint8_t>(e0 + 1);
                encode_with_scale(x, *scale, codes);
                return;
            }
            break;
        case ScaleRule::kBestOf2:
            if (e0 < 254 && amax > 0.0f) {
                uint8_t alt[kMxfp4BlockBytes];
                const double err0 = encode_with_scale(x, e0, codes);
                const double err1 = encode_with_scale(x, static_cast<uint8_t>(e0 + 1), alt);
                if (err1 < err0) {
                    std::memcpy(codes, alt, kMxfp4BlockBytes);
                    *scale = static_cast<uint8_t>(e0 + 1);
                } else {
                    *scale = e0;
                }
                return;
            }
            break;
    }
    *scale = e0;
    encode_with_scale(x, e0, codes);
}

Status quantize_mxfp4_row(const float* x, int64_t n, ScaleRule rule, uint8_t* codes, uint8_t* scales) {
    if (n % kMxfp4BlockSize != 0)
        return invalid_argument("MXFP4 quantization: row length " + std::to_string(n) +
                                " is not a multiple of 32");
    for (int64_t i = 0; i < n; ++i) {
        if (!std::isfinite(x[i]))
            return invalid_argument("MXFP4 quantization: element " + std::to_string(i) + " is not finite (" +
                                    std::to_string(x[i]) + ")");
    }
    for (int64_t b = 0; b < n / kMxfp4BlockSize; ++b)
        quantize_mxfp4_block(x + b * kMxfp4BlockSize, rule, codes + b * kMxfp4BlockBytes, &scales[b]);
    return Status::ok();
}

Status quantize_mxfp4_matrix(const float* x, int64_t rows, int64_t cols, ScaleRule rule, ThreadPool& pool,
                             uint8_t* codes, uint8_t* scales) {
    if (cols % kMxfp4BlockSize != 0)
        return invalid_argument("MXFP4 quantization: row length " + std::to_string(cols) +
                                " is not a multiple of 32");
    const int64_t nb = cols / kMxfp4BlockSize;
    std::mutex mu;
    Status first;
    int64_t first_row = rows;
    pool.parallel_for(rows, 8, [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
            Status st = quantize_mxfp4_row(x + r * cols, cols, rule, codes + r * nb * kMxfp4BlockBytes,
                                           scales + r * nb);
            if (!st.is_ok()) {
                std::lock_guard<std::mutex> lock(mu);
                if (r < first_row) {
                    first_row = r;
                    first = Status(st.code(), "row " + std::to_string(r) + ": " + st.message());
                }
                return;
            }
        }
    });
    return first;
}

}  // namespace volt::quant
