// Tensor views the ops read: weights in [out, in] layout with a format tag, vectors (norm gains, sinks,
// biases) and the paged KV cache of one layer. Pointers live in the backend's memory (host memory for
// the CPU backend: often straight into the memory-mapped checkpoint). Shapes in checkpoint terms (spec
// §2.1): H hidden, I intermediate, E experts, nh/nkv heads, d head_dim, V vocabulary. C++17 (CUDA 11.8's
// nvcc compiles the .cu files that include it); depends on nothing but the standard library.
#pragma once

#include <cstdint>

namespace volt::ops {

// Element formats of weights, activations and the KV cache.
enum class Format : uint8_t {
    kF32,
    kF16,    // IEEE binary16
    kBf16,   // the checkpoints' dense format
    kMxfp4,  // OCP MX FP4 E2M1 codes, blocks of 32 along `in` with one E8M0 scale (spec §2.3)
    kInt8,   // weights: int8, symmetric per output channel, w = q * scales[out] (f16 scales); KV cache:
             // int8 per (slot, kv head) with an f32 scale (KvLayer, ops/kv_int8.h)
    kInt4,   // weight-only 4-bit, group-wise with zero points: w = (q - z) * s (layout: docs/quantization.md)
};

const char* format_name(Format f);

// A vector of `n` elements: norm gains, attention sinks, biases. data == nullptr: absent.
struct VectorWeight {
    Format format = Format::kBf16;  // kBf16, kF16 or kF32
    const void* data = nullptr;     // [n]
    int64_t n = 0;
};

// y = W x + b with W [out, in] (row = output unit).
struct DenseWeight {
    Format format = Format::kBf16;     // kBf16, kF16, kF32; kInt8 / kInt4 (see Format)
    const void* w = nullptr;           // [out, in] elements (kInt4: packed; docs/quantization.md)
    const uint16_t* scales = nullptr;  // kInt8: [out] f16; kInt4: [in / group_size, out] f16
    const void* zeros = nullptr;       // kInt4: packed zero points [in / group_size, out / 8] int32
    int64_t group_size = 0;            // kInt4
    VectorWeight b;                    // [out], or absent (lm_head)
    int64_t out = 0, in = 0;
    // kInt8 / kInt4 placed by the CUDA backend: row-major by output unit (cuda/placement.h
    // repack_int_weight): w = the codes, and for kInt4 zeros = one scale|zero u32 word per (row, group),
    // scales = nullptr. false: the layouts above (host memory, the CPU backend).
    bool cuda_layout = false;
};

// One projection of all experts. Row r of expert e is output unit r; gate_up rows interleave (even row
// 2u = gate of unit u, odd row 2u+1 = up of unit u), spec §2.3.
struct ExpertWeights {
    Format format = Format::kMxfp4;  // kMxfp4, or a dense kBf16 / kF16 [E, out, in]
    const uint8_t* blocks =
        nullptr;  // kMxfp4: [E, out, in/32, 16] u8, two E2M1 codes a byte, low nibble first
    const uint8_t* scales = nullptr;  // kMxfp4: [E, out, in/32] u8 E8M0
    const void* w = nullptr;          // dense: [E, out, in]
    VectorWeight bias;                // [E * out]
    int64_t num_experts = 0, out = 0, in = 0;
};

// q, k and v projections of one layer. A backend may fuse them at upload: then `q` holds the rows of
// all three ([(nh + 2 nkv) d, H], bias likewise) and k.w == v.w == nullptr.
struct QkvWeights {
    DenseWeight q;  // [nh*d, H]
    DenseWeight k;  // [nkv*d, H]
    DenseWeight v;  // [nkv*d, H]
    bool fused() const { return k.w == nullptr; }
};

// KV groups: layers whose blocks are allocated together (engine/block_manager.h). Group 0 holds the
// full-attention layers, group 1 the sliding-window layers (spec §3.4).
inline constexpr int kNumKvGroups = 2;

// The paged KV cache of one layer: K and V pools [num_blocks, block_size, nkv, d]; slot s = block *
// block_size + offset. kInt8 (--kv-cache-dtype int8, docs/quantization.md "KV cache"): the pools hold
// int8 codes q and k_scales / v_scales hold one f32 scale per (slot, kv head), [num_blocks, block_size,
// nkv]; element i of head g of slot s is q[s, g, i] * scales[s, g] (ops/kv_int8.h).
struct KvLayer {
    Format format = Format::kF32;  // kF32, kF16 or kInt8
    void* k = nullptr;
    void* v = nullptr;
    int64_t num_blocks = 0, block_size = 0;
    float* k_scales = nullptr;  // kInt8: [num_blocks, block_size, nkv]; else nullptr
    float* v_scales = nullptr;
};

}  // namespace volt::ops
