// Weight-only integer formats of the dense projections (attention q/k/v/o and lm_head), defined in
// docs/quantization.md: INT8 symmetric per output channel (w = q * s[out], f16 s) and AutoAWQ's 4-bit
// "gemm" layout (group-wise with zero points: w = (q - z) * s, qweight/qzeros int32 packed 8 per word
// in AWQ_ORDER, from AutoAWQ awq/modules/linear/gemm.py and awq/utils/packing_utils.py). Decoders,
// quantizers and the packing. Tests: tests/unit/quant/int_weights_test.cc (hand-built AWQ vector);
// kernels: src/cpu/ops.cc (linear), checked by tests/kernels/cases_dense.cc.
#pragma once

#include <cstdint>

#include "core/status.h"

namespace volt::quant {

inline constexpr int kAwqPack = 8;                // 4-bit values per int32 word
inline constexpr int kAwqDefaultGroupSize = 128;  // AutoAWQ's q_group_size default
inline constexpr int kInt8Max = 127;              // symmetric range [-127, 127]

// AutoAWQ's packing order: nibble i (bits 4i .. 4i+3) of a word holds column 8 c + kAwqOrder[i] of
// word column c (AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]); kAwqReverseOrder[j] is the nibble that holds
// column 8 c + j (AWQ_REVERSE_ORDER = [0, 4, 1, 5, 2, 6, 3, 7]).
inline constexpr int kAwqOrder[kAwqPack] = {0, 2, 4, 6, 1, 3, 5, 7};
inline constexpr int kAwqReverseOrder[kAwqPack] = {0, 4, 1, 5, 2, 6, 3, 7};

// The 4-bit value of column j (0..7) of a packed word.
inline uint32_t awq_nibble(uint32_t word, int j) { return (word >> (4 * kAwqReverseOrder[j])) & 0xfu; }

// Packs 8 values (0..15, columns 8c + 0..7 in column order) into one word in AWQ_ORDER.
uint32_t awq_pack(const uint8_t* values);

// One output row o (in elements) of an INT8 matrix [out, in] (row-major int8) dequantized: out[i] =
// q[o, i] * scale (exact in f32: 8-bit times an 11-bit f16 significand).
void decode_int8_row(const int8_t* q_row, uint16_t scale_f16, int64_t in, float* out);

// The 8 output columns of word column c of an AWQ matrix, dequantized into out[j * in + i] (j = 0..7):
// w[i, 8c + j] = (q - z) * s with q from qweight [in, out/8], z from qzeros [in/g, out/8], s from
// scales [in/g, out] f16. (q - z) * s is exact in f32; AutoAWQ's dequantize_gemm rounds it to fp16.
void decode_awq_columns(const int32_t* qweight, const int32_t* qzeros, const uint16_t* scales, int64_t in,
                        int64_t out, int64_t group_size, int64_t c, float* dst);

// INT8 quantizer of one row w[0..n): s = amax / 127 rounded to f16 (0 for an all-zero row), q =
// clamp(round(w / s), -127, 127), round = to nearest, ties to even
// (torch.round). Error: |q s - w| <= s / 2 (s rounded to the nearest f16 may sit
// 2^-11 below amax / 127; the clamp then costs at most 127 * 2^-11 * s more). kInvalidArgument for a
// non-finite element (naming its index).
Status quantize_int8_row(const float* w, int64_t n, int8_t* q, uint16_t* scale_f16);

// AWQ quantizer (zero point, 4 bits) of a matrix given as w [out, in] row-major f32, into AutoAWQ's
// layout: qweight [in, out/8], qzeros [in/g, out/8] int32, scales [in/g, out] f16. Per (group, column):
// lo = min(0, min w), hi = max(0, max w) (AutoAWQ uses min and max without 0; including 0 keeps z in
// [0, 15] so no group clips), s = max(hi - lo, 1e-5) / 15 rounded to f16, z = round(-lo / s) clamped to
// [0, 15], q = clamp(round(w / s) + z, 0, 15) (AutoAWQ's pseudo_quantize_tensor). Error: |(q - z) s - w|
// <= 0.51 s. Requires out % 8 == 0 and in % group_size == 0 (kInvalidArgument otherwise, and for a
// non-finite element).
Status quantize_awq(const float* w, int64_t out, int64_t in, int64_t group_size, int32_t* qweight,
                    int32_t* qzeros, uint16_t* scales);

}  // namespace volt::quant
