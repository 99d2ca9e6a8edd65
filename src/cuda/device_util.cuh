// Device helpers shared by the kernels: exact widening of the weight formats to f32, operand rounding
// (launch.h Operand), fixed-order warp and block reductions, the device error word. Nothing here uses an
// instruction newer than sm_70: bf16 is widened and rounded with integer operations only.
// Determinism: a warp sum is an xor butterfly (every lane ends with the same bits, the order fixed by
// the lane layout); a block sum adds the warps' sums with one more butterfly. Orders depend on the
// block size and the data's length, never on how many rows a launch holds.
#pragma once

#include <cuda_fp16.h>

#include <climits>
#include <cstdint>

#include "cuda/launch.h"
#include "ops/weights.h"

namespace volt::cuda {

inline constexpr unsigned kFullMask = 0xffffffffu;

// ---- formats ----
__device__ __forceinline__ float bf16_to_f32(uint16_t h) { return __uint_as_float(uint32_t(h) << 16); }
__device__ __forceinline__ float f16_to_f32(uint16_t h) { return __half2float(__ushort_as_half(h)); }

// f32 -> bf16 -> f32, round to nearest even (core/dtype.h f32_to_bf16), NaN kept.
__device__ __forceinline__ float round_to_bf16(float x) {
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return x;
    u += 0x7fffu + ((u >> 16) & 1u);
    return __uint_as_float(u & 0xffff0000u);
}
__device__ __forceinline__ float round_to_f16(float x) { return __half2float(__float2half_rn(x)); }

template <Operand O>
__device__ __forceinline__ float operand(float x) {
    if constexpr (O == Operand::kF16) return round_to_f16(x);
    if constexpr (O == Operand::kBf16) return round_to_bf16(x);
    return x;
}

// Weight formats as template tags (the launchers switch on ops::Format once). kInt8 / kInt4: integer
// weights in the CUDA layout (cuda/placement.h repack_int_weight); load_w does not take them (they need
// the row's scale), int_w does.
enum class WFmt : int { kF32 = 0, kF16 = 1, kBf16 = 2, kInt8 = 3, kInt4 = 4 };

// Element (o, i) of an integer weight [out, in] in the CUDA layout, exactly: q * s (kInt8: w int8 [out,
// in], meta f16 [out]) or (q - z) * s (kInt4: w u32 [out, in / 8] with input 8c + j in bits 8j.. (j < 4)
// and 8c + 4 + j in bits 8j + 4.., meta u32 [out, in / group] = f16 s | z << 16). Both products are exact
// in f32 (8-bit or 5-bit integers times an 11-bit significand).
template <WFmt F>
__device__ __forceinline__ float int_w(const void* w, const void* meta, int64_t group, int64_t o, int64_t in,
                                       int64_t i) {
    if constexpr (F == WFmt::kInt8) {
        const float s = f16_to_f32(static_cast<const uint16_t*>(meta)[o]);
        return __fmul_rn(static_cast<float>(static_cast<const int8_t*>(w)[o * in + i]), s);
    } else {
        // 32-bit index arithmetic within a row (in < 2^31): a 64-bit division would call a subroutine.
        const auto ii = static_cast<uint32_t>(i), g = static_cast<uint32_t>(group);
        const uint32_t word = static_cast<const uint32_t*>(w)[o * (in / 8) + (ii >> 3)];
        const int j = static_cast<int>(ii & 7u);
        const uint32_t q = (word >> (j < 4 ? 8 * j : 8 * (j - 4) + 4)) & 0xfu;
        const uint32_t m = static_cast<const uint32_t*>(meta)[o * (in / group) + ii / g];
        const float z = static_cast<float>((m >> 16) & 0xfu);
        return __fmul_rn(static_cast<float>(q) - z, f16_to_f32(static_cast<uint16_t>(m & 0xffffu)));
    }
}

// Byte j of a word of four int8 codes as an exact f32, given flipped = word ^ 0x80808080 (each byte b +
// 128 as unsigned): the float with bits 0x4B0000xx is 2^23 + xx, so subtracting 2^23 + 128 leaves b.
// One PRMT and one FADD instead of a conversion (I2F issues at a quarter of the FMA rate).
__device__ __forceinline__ float i8_at(uint32_t flipped, int j) {
    return __uint_as_float(__byte_perm(flipped, 0x4B000000u, 0x7440u + static_cast<unsigned>(j))) -
           8388736.0f;
}
// Byte j of `nibbles` (each byte one 4-bit code q, 0..15) minus zf = 2^23 + z as an exact f32: q - z.
__device__ __forceinline__ float u4_at(uint32_t nibbles, int j, float zf) {
    return __uint_as_float(__byte_perm(nibbles, 0x4B000000u, 0x7440u + static_cast<unsigned>(j))) - zf;
}

template <WFmt F>
__device__ __forceinline__ float load_w(const void* p, int64_t i) {
    if constexpr (F == WFmt::kF32) return static_cast<const float*>(p)[i];
    if constexpr (F == WFmt::kF16) return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
}

// A vector weight (norm gain, sink, bias) element in its stored format; absent (null) reads 0.
struct DeviceVector {
    const void* data = nullptr;
    int format = 0;  // 0 f32, 1 f16, 2 bf16
};
inline DeviceVector device_vector(const ops::VectorWeight& v) {
    DeviceVector d;
    d.data = v.data;
    d.format = v.format == ops::Format::kF32 ? 0 : v.format == ops::Format::kF16 ? 1 : 2;
    return d;
}
__device__ __forceinline__ float load_vec(const DeviceVector& v, int64_t i) {
    if (v.data == nullptr) return 0.0f;
    if (v.format == 0) return static_cast<const float*>(v.data)[i];
    const uint16_t h = static_cast<const uint16_t*>(v.data)[i];
    return v.format == 1 ? f16_to_f32(h) : bf16_to_f32(h);
}

// ---- reductions ----
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
    return v;
}
__device__ __forceinline__ int warp_sum(int v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
    return v;
}

// Sum over a block of kThreads (a multiple of 32, at most 1024) threads; every thread gets the result.
// `smem` holds 32 T. Contains __syncthreads: every thread of the block must call it.
template <int kThreads, typename T>
__device__ __forceinline__ T block_sum(T v, T* smem) {
    static_assert(kThreads % 32 == 0 && kThreads <= 1024, "block size");
    constexpr int kWarps = kThreads / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // smem may still be read by a previous call
    if (lane == 0) smem[warp] = v;
    __syncthreads();
    T w = lane < kWarps ? smem[lane] : T(0);
    return warp_sum(w);
}

template <int kThreads>
__device__ __forceinline__ float block_max(float v, float* smem) {
    constexpr int kWarps = kThreads / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) smem[warp] = v;
    __syncthreads();
    float w = lane < kWarps ? smem[lane] : -__int_as_float(0x7f800000);
    return warp_max(w);
}

__device__ __forceinline__ int warp_max(int v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(kFullMask, v, o));
    return v;
}
template <int kThreads>
__device__ __forceinline__ int block_max(int v, int* smem) {
    constexpr int kWarps = kThreads / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) smem[warp] = v;
    __syncthreads();
    const int w = lane < kWarps ? smem[lane] : INT_MIN;
    return warp_max(w);
}

// (value, id) with the order "larger value first, ties: lower id first" (the CPU's argmax and top-k).
struct Ranked {
    float value;
    int32_t id;  // -1: none
};
__device__ __forceinline__ bool ranks_before(const Ranked& a, const Ranked& b) {
    if (b.id < 0) return a.id >= 0;
    if (a.id < 0) return false;
    return a.value > b.value || (a.value == b.value && a.id < b.id);
}
__device__ __forceinline__ Ranked warp_best(Ranked r) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        Ranked other;
        other.value = __shfl_xor_sync(kFullMask, r.value, o);
        other.id = __shfl_xor_sync(kFullMask, r.id, o);
        if (ranks_before(other, r)) r = other;
    }
    return r;
}
// Router top-k + softmax of one row by one warp (spec §3.6, reference cpu::router): row [E] f32 logits,
// E <= 32 kPerLane, 1 <= k <= 32. The k largest in order (ties to the lower id: the CPU's stable sort),
// each pass picking the best that ranks after the previous pick; then softmax over the k in f32 with the
// top-1 logit subtracted, summed in rank order (every lane sums the same values in the same order), ids[j]
// and weights[j] written by lane j. The logits are read once into registers (the loop it replaced,
// kept for larger E, read them again every pass and went through global memory for the softmax).
template <int kPerLane>
__device__ __forceinline__ void warp_topk_softmax(const float* row, int64_t E, int64_t k, int32_t* ids,
                                                  float* weights) {
    const int lane = threadIdx.x & 31;
    float v[kPerLane];
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
        const int64_t e = lane + 32 * i;
        v[i] = e < E ? row[e] : 0.0f;
    }
    Ranked prev{0.0f, -1};
    float mine = 0.0f;  // lane j: the logit of pick j
    int32_t mine_id = -1;
    float top = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
        Ranked best{0.0f, -1};
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
            const int64_t e = lane + 32 * i;
            const Ranked c{v[i], static_cast<int32_t>(e)};
            if (e < E && (prev.id < 0 || ranks_before(prev, c)) && ranks_before(c, best)) best = c;
        }
        best = warp_best(best);
        if (j == 0) top = best.value;
        if (lane == j) {
            mine = best.value;
            mine_id = best.id;
        }
        prev = best;
    }
    const float p = expf(mine - top);
    float sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) sum += __shfl_sync(kFullMask, p, static_cast<int>(j));
    if (lane < k) {
        ids[lane] = mine_id;
        weights[lane] = p / sum;
    }
}

// `smem` holds 32 Ranked.
template <int kThreads>
__device__ __forceinline__ Ranked block_best(Ranked r, Ranked* smem) {
    constexpr int kWarps = kThreads / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    r = warp_best(r);
    __syncthreads();
    if (lane == 0) smem[warp] = r;
    __syncthreads();
    Ranked w = lane < kWarps ? smem[lane] : Ranked{0.0f, -1};
    return warp_best(w);
}

__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
__device__ __forceinline__ int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

// ---- errors ----
__device__ __forceinline__ void report_error(int* error, int code) {
    if (error != nullptr) atomicCAS(error, 0, code);
}

// Blocks of a 1-D launch over n items with kThreads threads each (n > 0).
inline unsigned grid_for(int64_t n, int threads) {
    return static_cast<unsigned>((n + threads - 1) / threads);
}

}  // namespace volt::cuda
