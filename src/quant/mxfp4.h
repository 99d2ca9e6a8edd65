// MXFP4 (OCP Microscaling v1.0, spec/gpt-oss.md §2.3) both ways: decoding of gpt-oss expert blocks and an
// exact quantizer. A block is 32 consecutive elements along the input dimension: 16 bytes of E2M1 codes
// (element 2j in the low nibble of byte j, 2j+1 in the high nibble) and one E8M0 scale byte
// (multiplier 2^(byte-127)). Scale rules and their measured error: docs/quantization.md.
// Tests: tests/unit/quant/mxfp4_test.cc; error measurement: bench/mxfp4_error.cc.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "core/thread_pool.h"

namespace volt::quant {

inline constexpr int kMxfp4BlockSize = 32;   // elements per block
inline constexpr int kMxfp4BlockBytes = 16;  // packed E2M1 bytes per block

// How the quantizer picks a block's shared exponent e (scale byte e + 127, clamped to [0, 254]).
enum class ScaleRule {
    // OCP MX v1.0 §6.3: e = floor(log2(amax)) - 2 (2 = emax of E2M1). Maps amax into [4, 8), so block
    // maxima in (6, 8)·2^e saturate to 6·2^e.
    kOcp,
    // The smallest e with amax <= 6·2^e (no saturation): e = ceil(log2(amax / 6)). This is what
    // OpenAI's triton_kernels `downcast_to_mxfp` computes (round the scale amax/6 up to a power of 2).
    kNoSaturate,
    // Quantize with both e_ocp and e_ocp + 1 and keep the one with the lower squared error of the block
    // (ties keep e_ocp). kNoSaturate's exponent is always one of the two, so this is never worse than
    // either. The default: see docs/quantization.md.
    kBestOf2,
};

inline constexpr ScaleRule kDefaultScaleRule = ScaleRule::kBestOf2;

// "ocp", "no-saturate", "best-of-2"; parse returns false for an unknown name.
const char* scale_rule_name(ScaleRule rule);
bool parse_scale_rule(const char* name, ScaleRule* out);

// E2M1 code (0..15) of `x` (already divided by the block scale): round to nearest on the grid
// {0, 0.5, 1, 1.5, 2, 3, 4, 6}, ties to the even code (mantissa bit 0), |x| > 6 saturates to 6. The sign
// bit is kept, so -0.1 gives code 8 (-0). Precondition: x is not NaN.
uint8_t encode_e2m1(float x);

// Decodes one block: 16 code bytes and a scale byte -> 32 floats (exact in f32 for scale bytes >= 1;
// byte 0 gives 2^-127 times the codes, which f32 holds as subnormals, exactly as well).
void decode_mxfp4_block(const uint8_t* codes, uint8_t scale, float* out);

// Decodes a row of n elements (n a multiple of 32): codes [n/32, 16] u8, scales [n/32] u8 -> out [n] f32.
void decode_mxfp4_row(const uint8_t* codes, const uint8_t* scales, int64_t n, float* out);

// The scale byte the OCP rule gives for a block maximum |x| = amax (finite, >= 0):
// clamp(floor(log2(amax)) - 2 + 127, 0, 254); amax == 0 gives 0 (any scale decodes zeros exactly).
uint8_t ocp_scale_byte(float amax);

// Quantizes one block of 32 finite floats into 16 code bytes and a scale byte with `rule`.
// Precondition: every x[i] is finite (quantize_mxfp4_row checks).
void quantize_mxfp4_block(const float* x, ScaleRule rule, uint8_t* codes, uint8_t* scale);

// Quantizes a row of n floats (n a multiple of 32) into codes [n/32, 16] u8 and scales [n/32] u8.
// Errors: kInvalidArgument when n is not a multiple of 32 or an element is NaN/inf (naming its index).
Status quantize_mxfp4_row(const float* x, int64_t n, ScaleRule rule, uint8_t* codes, uint8_t* scales);

// quantize_mxfp4_row over the rows of a row-major [rows, cols] matrix, rows spread over `pool`:
// codes [rows, cols/32, 16] u8, scales [rows, cols/32] u8. Errors: as quantize_mxfp4_row (the first
// failing row, named).
Status quantize_mxfp4_matrix(const float* x, int64_t rows, int64_t cols, ScaleRule rule, ThreadPool& pool,
                             uint8_t* codes, uint8_t* scales);

}  // namespace volt::quant
