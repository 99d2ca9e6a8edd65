// Paged attention with sinks and an optional sliding window (spec §3.4; ops::AttentionArgs; reference
// cpu::attention). One warp per (query row t, head h), 4 heads per block. Lane l holds elements
// l, l + 32, ... (< d <= 128) of q and of the output. Keys are visited one at a time in index order
// [max(0, n - window + 1), n]: score = (q . k) * scale (in-lane sum in element order, then the warp
// butterfly), online softmax seeded with the sink, m = z_h and l = exp(z_h - m) = 1, so the sink joins
// the denominator only: out = sum_j exp(s_j - m) v_j / (exp(z_h - m) + sum_j exp(s_j - m)). Everything in
// f32; q and p are rounded to the operand format (what an f16 tensor-core attention multiplies), K and
// V are read in the cache's format (f32, f16, or int8 codes times the head's f32 scale with one
// __fmul_rn each: ops/kv_int8.h's dequantization, bit for bit). No split-KV: the order of a row depends on
// its own sequence only. A block table entry < 0 under a key to read is reported (kFreedBlock).
#include "cuda/cuda_check.h"
#include "cuda/device_util.cuh"
#include "cuda/pdl.cuh"

namespace volt::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kMaxPerLane = 4;  // head_dim <= 128

// KV cache element formats as template tags.
enum class Kv : int { kF32 = 0, kF16 = 1, kInt8 = 2 };

// Element i of a cache pool; int8: times the head vector's scale s (one rounding, ops/kv_int8.h).
template <Kv K>
__device__ __forceinline__ float load_kv(const void* p, int64_t i, float s) {
    if constexpr (K == Kv::kF16) return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    if constexpr (K == Kv::kInt8) return __fmul_rn(static_cast<float>(static_cast<const int8_t*>(p)[i]), s);
    return static_cast<const float*>(p)[i];
}

template <Kv K, Operand O>
__global__ void __launch_bounds__(kWarps * 32)
    attention_kernel(const float* __restrict__ q, const void* __restrict__ kc, const void* __restrict__ vc,
                     const float* __restrict__ k_scales, const float* __restrict__ v_scales,
                     const int32_t* __restrict__ seq_lens, const int32_t* __restrict__ qsl,
                     const int32_t* __restrict__ tables, const int32_t* __restrict__ table_rows,
                     DeviceVector sinks, float* __restrict__ out, int64_t num_seqs, int64_t nh, int64_t nkv,
                     int64_t d, int64_t max_blocks, int64_t block_size, int64_t num_slots, int64_t window,
                     float scale, int* error) {
    pdl_wait();  // pdl.cuh: nothing of an earlier kernel is touched before it
    pdl_launch_dependents();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t t = blockIdx.x;
    const int64_t h = static_cast<int64_t>(blockIdx.y) * kWarps + warp;
    if (h >= nh) return;
    // The sequence of row t: the last s with query_start_loc[s] <= t.
    int64_t lo = 0, hi = num_seqs - 1;
    while (lo < hi) {
        const int64_t mid = (lo + hi + 1) / 2;
        if (qsl[mid] <= t)
            lo = mid;
        else
            hi = mid - 1;
    }
    const int64_t s = lo;
    const int64_t q_len = qsl[s + 1] - qsl[s];
    const int64_t n = static_cast<int64_t>(seq_lens[s]) - q_len + (t - qsl[s]);
    const int64_t first = window > 0 ? max64(0, n - window + 1) : 0;
    const int64_t g = h / (nh / nkv);

    float qv[kMaxPerLane], acc[kMaxPerLane];
    const float* qrow = q + (t * nh + h) * d;
#pragma unroll
    for (int c = 0; c < kMaxPerLane; ++c) {
        const int64_t i = c * 32 + lane;
        qv[c] = i < d ? operand<O>(qrow[i]) : 0.0f;
        acc[c] = 0.0f;
    }
    float m = load_vec(sinks, h);
    float l = 1.0f;  // exp(sink - m) with m = sink
    const int32_t* table = tables + (table_rows != nullptr ? table_rows[s] : s) * max_blocks;
    for (int64_t j = first; j <= n; ++j) {
        const int64_t bi = j / block_size;
        const int32_t block = bi < max_blocks ? table[bi] : -1;
        if (block < 0) {
            if (lane == 0) report_error(error, kFreedBlock);
            break;
        }
        const int64_t slot = static_cast<int64_t>(block) * block_size + j % block_size;
        if (slot >= num_slots) {
            if (lane == 0) report_error(error, kBadSlot);
            break;
        }
        const int64_t off = (slot * nkv + g) * d;
        const float ks = K == Kv::kInt8 ? k_scales[slot * nkv + g] : 1.0f;
        const float vs = K == Kv::kInt8 ? v_scales[slot * nkv + g] : 1.0f;
        float dot = 0.0f;
#pragma unroll
        for (int c = 0; c < kMaxPerLane; ++c) {
            const int64_t i = c * 32 + lane;
            if (i < d) dot += qv[c] * load_kv<K>(kc, off + i, ks);
        }
        const float score = warp_sum(dot) * scale;
        const float m_new = fmaxf(m, score);
        const float corr = expf(m - m_new);
        const float p = expf(score - m_new);
        l = l * corr + p;
        const float pv = operand<O>(p);
#pragma unroll
        for (int c = 0; c < kMaxPerLane; ++c) {
            const int64_t i = c * 32 + lane;
            if (i < d) acc[c] = acc[c] * corr + pv * load_kv<K>(vc, off + i, vs);
        }
        m = m_new;
    }
    float* orow = out + (t * nh + h) * d;
#pragma unroll
    for (int c = 0; c < kMaxPerLane; ++c) {
        const int64_t i = c * 32 + lane;
        if (i < d) orow[i] = acc[c] / l;
    }
}

template <Kv K>
void launch_cache(const ops::AttentionArgs& a, const Launch& ctx) {
    const dim3 grid(static_cast<unsigned>(a.num_tokens), grid_for(a.num_heads, kWarps));
    const int64_t slots = a.kv.num_blocks * a.kv.block_size;
#define VOLT_ATTENTION_LAUNCH(O)                                                                         \
    launch_kernel(attention_kernel<K, O>, grid, kWarps * 32, 0, ctx, a.q, a.kv.k, a.kv.v, a.kv.k_scales, \
                  a.kv.v_scales, a.seq_lens, a.query_start_loc, a.block_tables, a.table_rows,            \
                  device_vector(a.sinks), a.out, a.num_seqs, a.num_heads, a.num_kv_heads, a.head_dim,    \
                  a.max_blocks, a.kv.block_size, slots, a.window, a.scale, ctx.error)
    switch (ctx.operand) {
        case Operand::kF32:
            VOLT_ATTENTION_LAUNCH(Operand::kF32);
            break;
        case Operand::kF16:
            VOLT_ATTENTION_LAUNCH(Operand::kF16);
            break;
        case Operand::kBf16:
            VOLT_ATTENTION_LAUNCH(Operand::kBf16);
            break;
    }
#undef VOLT_ATTENTION_LAUNCH
    VOLT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_attention(const ops::AttentionArgs& a, const Launch& ctx) {
    if (a.num_tokens <= 0) return;
    VOLT_CHECK(a.num_seqs > 0) << "attention over " << a.num_tokens << " rows and no sequence";
    VOLT_CHECK(a.head_dim > 0 && a.head_dim <= 32 * kMaxPerLane)
        << "cuda attention: head_dim " << a.head_dim << " (1..128)";
    VOLT_CHECK(a.num_kv_heads > 0 && a.num_heads % a.num_kv_heads == 0)
        << a.num_heads << " heads over " << a.num_kv_heads << " KV heads";
    VOLT_CHECK(a.kv.block_size > 0 && a.max_blocks > 0) << a.kv.block_size << " " << a.max_blocks;
    VOLT_CHECK(a.num_tokens < (int64_t{1} << 31) && grid_for(a.num_heads, kWarps) <= 65535u);
    VOLT_CHECK(a.kv.format == ops::Format::kF16 || a.kv.format == ops::Format::kF32 ||
               a.kv.format == ops::Format::kInt8)
        << "KV cache format " << ops::format_name(a.kv.format);
    if (a.kv.format == ops::Format::kInt8) {
        VOLT_CHECK(a.kv.k_scales != nullptr && a.kv.v_scales != nullptr) << "int8 KV cache without scales";
        launch_cache<Kv::kInt8>(a, ctx);
    } else if (a.kv.format == ops::Format::kF16) {
        launch_cache<Kv::kF16>(a, ctx);
    } else {
        launch_cache<Kv::kF32>(a, ctx);
    }
}

}  // namespace volt::cuda
