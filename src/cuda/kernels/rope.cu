// RoPE with YaRN (spec §3.5), NeoX half-split pairs (x_i, x_{i+d/2}) of every q and k head, in place:
// angle positions[t] * inv_freq[i] in f32, cos and sin (full-precision cosf/sinf, never the fast
// intrinsics: angles reach 1e5 rad) multiplied by mscale, computed once per (token, pair index) into
// shared memory and applied to every head. Grid (token, group of heads): a block rotates
// heads_per_block heads of one token, one (head, pair) a thread when half * heads_per_block <= kThreads
// (one block of 128 threads looping over the 72 heads of gpt-oss took 8.7 us a decode step: its loads and
// stores ran one after another). Every value is computed as before, so the bits do not change with the
// grid. Reference: cpu::rope.
#include <algorithm>

#include "cuda/cuda_check.h"
#include "cuda/device_util.cuh"
#include "cuda/pdl.cuh"

namespace volt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxHalf = 256;  // head_dim <= 512

// cs[0][i], cs[1][i] = cos, sin of position * inv_freq[i], times mscale, for i < half (the block's threads
// in turn; the caller synchronizes before reading).
__device__ __forceinline__ void token_angles(int32_t position, const float* __restrict__ inv_freq,
                                             float mscale, int64_t half, float (*cs)[kMaxHalf]) {
    const float p = static_cast<float>(position);
    for (int64_t i = threadIdx.x; i < half; i += kThreads) {
        const float phi = p * inv_freq[i];
        cs[0][i] = cosf(phi) * mscale;
        cs[1][i] = sinf(phi) * mscale;
    }
}

__global__ void rope_kernel(float* __restrict__ q, float* __restrict__ k,
                            const int32_t* __restrict__ positions, const float* __restrict__ inv_freq,
                            float mscale, int64_t nh, int64_t nkv, int64_t d, int64_t heads_per_block) {
    pdl_wait();  // pdl.cuh: nothing of an earlier kernel is touched before it
    pdl_launch_dependents();
    __shared__ float cs[2][kMaxHalf];  // cos and sin of the token's angles, shared by every head
    const int64_t t = blockIdx.x;
    const int64_t half = d / 2;
    token_angles(positions[t], inv_freq, mscale, half, cs);
    __syncthreads();
    const int64_t h0 = static_cast<int64_t>(blockIdx.y) * heads_per_block;
    const int64_t h1 = h0 + heads_per_block < nh + nkv ? h0 + heads_per_block : nh + nkv;
    for (int64_t idx = h0 * half + threadIdx.x; idx < h1 * half; idx += kThreads) {
        const int64_t head = idx / half, i = idx % half;
        const float c = cs[0][i];
        const float s = cs[1][i];
        float* xh = head < nh ? q + (t * nh + head) * d : k + (t * nkv + (head - nh)) * d;
        const float x1 = xh[i], x2 = xh[i + half];
        xh[i] = x1 * c - x2 * s;
        xh[i + half] = x2 * c + x1 * s;
    }
}

// RoPE + the KV cache write in one launch (qkv_rope_kvwrite, f16 / f32 caches): heads [0, nh) are q, [nh, nh
// + nkv) k, [nh + nkv, nh + 2 nkv) v. q and k are rotated in place exactly as rope_kernel does; the thread
// that rotates a k pair also stores it at the token's slot and v pairs are copied there, converted as
// kv_write_kernel does (f16: round to nearest). Slots < 0 write nothing; slots past the pool report
// kBadSlot and write nothing (kv_write's contract). Same bits as launch_rope then launch_kv_write.
template <bool kF16>
__global__ void rope_kv_write_kernel(float* __restrict__ q, float* __restrict__ k,
                                     const float* __restrict__ v, const int32_t* __restrict__ positions,
                                     const float* __restrict__ inv_freq, float mscale, int64_t nh,
                                     int64_t nkv, int64_t d, int64_t heads_per_block,
                                     const int64_t* __restrict__ slots, void* __restrict__ kc,
                                     void* __restrict__ vc, int64_t num_slots, int* error) {
    pdl_wait();  // pdl.cuh: nothing of an earlier kernel is touched before it
    pdl_launch_dependents();
    __shared__ float cs[2][kMaxHalf];
    const int64_t t = blockIdx.x;
    const int64_t half = d / 2;
    token_angles(positions[t], inv_freq, mscale, half, cs);
    const int64_t slot = slots[t];
    if (slot >= num_slots && threadIdx.x == 0) report_error(error, kBadSlot);
    const bool store = slot >= 0 && slot < num_slots;
    auto put = [&](void* cache, int64_t at, float x) {
        if constexpr (kF16)
            static_cast<uint16_t*>(cache)[at] = __half_as_ushort(__float2half_rn(x));
        else
            static_cast<float*>(cache)[at] = x;
    };
    __syncthreads();
    const int64_t heads = nh + 2 * nkv;
    const int64_t h0 = static_cast<int64_t>(blockIdx.y) * heads_per_block;
    const int64_t h1 = h0 + heads_per_block < heads ? h0 + heads_per_block : heads;
    for (int64_t idx = h0 * half + threadIdx.x; idx < h1 * half; idx += kThreads) {
        const int64_t head = idx / half, i = idx % half;
        if (head >= nh + nkv) {  // v: copied
            const int64_t hv = head - nh - nkv;
            const float* xv = v + (t * nkv + hv) * d;
            if (store) {
                put(vc, (slot * nkv + hv) * d + i, xv[i]);
                put(vc, (slot * nkv + hv) * d + i + half, xv[i + half]);
            }
            continue;
        }
        const float c = cs[0][i];
        const float s = cs[1][i];
        float* xh = head < nh ? q + (t * nh + head) * d : k + (t * nkv + (head - nh)) * d;
        const float x1 = xh[i], x2 = xh[i + half];
        const float y1 = x1 * c - x2 * s, y2 = x2 * c + x1 * s;
        xh[i] = y1;
        xh[i + half] = y2;
        if (head >= nh && store) {
            put(kc, (slot * nkv + (head - nh)) * d + i, y1);
            put(kc, (slot * nkv + (head - nh)) * d + i + half, y2);
        }
    }
}

}  // namespace

void launch_rope(const ops::RopeArgs& a, const Launch& ctx) {
    if (a.num_tokens <= 0) return;
    VOLT_CHECK(a.head_dim > 0 && a.head_dim % 2 == 0 && a.head_dim / 2 <= kMaxHalf)
        << "rope: head_dim " << a.head_dim;
    VOLT_CHECK(a.num_tokens < (int64_t{1} << 31)) << a.num_tokens;
    const int64_t half = a.head_dim / 2;
    const int64_t per_block = half >= kThreads ? 1 : kThreads / half;
    const int64_t groups = std::max<int64_t>(1, (a.num_heads + a.num_kv_heads + per_block - 1) / per_block);
    VOLT_CHECK(groups <= 65535) << "rope: " << a.num_heads + a.num_kv_heads << " heads";
    launch_kernel(rope_kernel, dim3(static_cast<unsigned>(a.num_tokens), static_cast<unsigned>(groups)),
                  kThreads, 0, ctx, a.q, a.k, a.positions, a.inv_freq, a.mscale, a.num_heads, a.num_kv_heads,
                  a.head_dim, per_block);
    VOLT_CUDA_CHECK_LAUNCH();
}

void launch_rope_kv_write(const ops::RopeArgs& a, const ops::KvWriteArgs& w, const Launch& ctx) {
    if (a.num_tokens <= 0) return;
    VOLT_CHECK(w.kv.format == ops::Format::kF16 || w.kv.format == ops::Format::kF32)
        << "rope_kv_write: KV cache format " << ops::format_name(w.kv.format);
    VOLT_CHECK(w.k == a.k && w.num_tokens == a.num_tokens && w.num_kv_heads == a.num_kv_heads &&
               w.head_dim == a.head_dim && w.slot_mapping != nullptr)
        << "rope_kv_write: the rope and kv_write arguments disagree";
    VOLT_CHECK(a.head_dim > 0 && a.head_dim % 2 == 0 && a.head_dim / 2 <= kMaxHalf)
        << "rope: head_dim " << a.head_dim;
    VOLT_CHECK(a.num_tokens < (int64_t{1} << 31)) << a.num_tokens;
    const int64_t half = a.head_dim / 2;
    const int64_t per_block = half >= kThreads ? 1 : kThreads / half;
    const int64_t heads = a.num_heads + 2 * a.num_kv_heads;
    const int64_t groups = std::max<int64_t>(1, (heads + per_block - 1) / per_block);
    VOLT_CHECK(groups <= 65535) << "rope_kv_write: " << heads << " heads";
    const dim3 grid(static_cast<unsigned>(a.num_tokens), static_cast<unsigned>(groups));
    const int64_t slots = w.kv.num_blocks * w.kv.block_size;
    if (w.kv.format == ops::Format::kF16)
        launch_kernel(rope_kv_write_kernel<true>, grid, kThreads, 0, ctx, a.q, a.k, w.v, a.positions,
                      a.inv_freq, a.mscale, a.num_heads, a.num_kv_heads, a.head_dim, per_block,
                      w.slot_mapping, w.kv.k, w.kv.v, slots, ctx.error);
    else
        launch_kernel(rope_kv_write_kernel<false>, grid, kThreads, 0, ctx, a.q, a.k, w.v, a.positions,
                      a.inv_freq, a.mscale, a.num_heads, a.num_kv_heads, a.head_dim, per_block,
                      w.slot_mapping, w.kv.k, w.kv.v, slots, ctx.error);
    VOLT_CUDA_CHECK_LAUNCH();
}

}  // namespace volt::cuda
