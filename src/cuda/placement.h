// Host-side weight transforms of CUDA placement (no CUDA here: unit-tested without a GPU,
// tests/unit/cuda/placement_test.cc): the bf16 -> f16 range check and conversion, vectors widened to
// f32, dense bf16/f16 experts quantized to MXFP4 (src/quant/mxfp4.h, best-of-2 scales), integer weights
// (INT8, AWQ) in the layout the CUDA kernels read.
// Why a range check: f16 holds |x| <= 65504; below 2^-14 (6.1e-5) it is subnormal and keeps fewer bits,
// below 2^-25 (3e-8) a value becomes 0. A bf16 value converts exactly otherwise (8 significant bits).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "ops/weights.h"

namespace volt::cuda {

struct F16RangeReport {
    int64_t n = 0;
    int64_t overflow = 0;   // finite, |x| > 65504: would become inf
    int64_t subnormal = 0;  // nonzero, |x| < 2^-14: f16 subnormal (fewer bits; exact or not)
    int64_t inexact = 0;    // nonzero, changed by the conversion but not to 0
    int64_t flushed = 0;    // nonzero, becomes 0
    float max_abs = 0.0f;   // over finite values
    // Converted only when nothing overflows and at most 1% of the values lose bits (so the tensor's
    // bulk is in f16's normal range; a lost bit is then below 2^-25 in absolute terms).
    bool converts() const { return overflow == 0 && (inexact + flushed) * 100 <= n; }
    std::string to_string() const;
};

// Checks every element (CPU thread pool).
F16RangeReport check_bf16_to_f16(const uint16_t* bf16, int64_t n);
// dst[i] = f16(bf16[i]) rounded to nearest even (exact where the report says so).
void convert_bf16_to_f16(const uint16_t* bf16, int64_t n, uint16_t* dst);
// The vector as f32 (exact from bf16, f16, f32).
std::vector<float> widen_vector(const ops::VectorWeight& v);

// Dense experts [E, out, in] (bf16 or f16) as MXFP4 blocks [E, out, in/32, 16] and scales [E, out, in/32].
// Errors: kInvalidArgument when `in` is not a multiple of 32 or a value is not finite.
Status quantize_experts_mxfp4(const ops::ExpertWeights& dense, std::vector<uint8_t>* blocks,
                              std::vector<uint8_t>* scales);

// Integer weights (docs/quantization.md) in the CUDA kernels' layout (docs/cuda.md "Integer weights"),
// both row-major by output unit so that a kernel streams one row's bytes and fused q|k|v rows concatenate:
//   kInt8: codes = the int8 q [out, in] as stored; meta = the f16 scales [out] as stored.
//   kInt4: codes = u32 words [out, in / 8]; word c of row o holds inputs 8c .. 8c+7 of row o: input 8c + j
//     (j < 4) in bits 8j .. 8j+3 and input 8c + 4 + j in bits 8j+4 .. 8j+7, so that w & 0x0f0f0f0f holds
//     inputs 0..3 and (w >> 4) & 0x0f0f0f0f inputs 4..7, one per byte; meta = u32 [out, in / group], word
//     (o, g) = the f16 scale bits s[g, o] | zero point z[g, o] << 16 (AutoAWQ's qzeros, AWQ_ORDER decoded).
// Element (o, i) is q * s (kInt8) or (q - z) * s (kInt4): the same values as quant::decode_int8_row /
// decode_awq_columns, bit for bit. Errors (kInvalidArgument, naming the shape): no scales; kInt4 without
// zero points, out % 8 != 0, group_size <= 0, in % group_size != 0 or group_size % 8 != 0; another format.
struct IntWeightsHost {
    std::vector<uint8_t> codes;
    std::vector<uint8_t> meta;
};
Status repack_int_weight(const ops::DenseWeight& host, IntWeightsHost* out);
// The input index held by nibble n (0..7) of a kInt4 CUDA word: n even -> n / 2, n odd -> 4 + n / 2.
inline int cuda_int4_input_of_nibble(int n) { return (n & 1) ? 4 + n / 2 : n / 2; }

}  // namespace volt::cuda
