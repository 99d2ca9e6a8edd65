// Split-KV paged attention with sinks and the sliding window (issue 14; ops::AttentionArgs, reference
// cpu::attention, checked by volt_op_test attention, timed by --shapes bench). Two launches per slice of
// rows (slices bound the scratch; they never change a row's numbers):
//   split: grid (rows, nkv, max splits), 128 threads: the G = nh/nkv query heads of one KV head over one
//     chunk of kChunk keys of one row (chunk c = keys [first + c kChunk, ...) of the row's own range, so a
//     row's split count is ceil(its keys / kChunk): fixed by its context length, never by the batch). K
//     and V of the chunk are read once for all G heads (GQA). Scores q.k in element order (q rounded to the
//     operand format, K widened exactly, f32), the chunk's max m_c, p = exp(s - m_c), l_c = sum p (lane
//     order, butterfly), acc_c = sum_j p_j (rounded to the operand format) v_j: a thread per (key lane,
//     8 elements) over keys kl, kl + KL, ... in order with 16-byte V loads, then the key lanes by a fixed
//     butterfly and the 4 warps in order; (acc_c, m_c, l_c) to scratch.
//   combine: grid (rows, nh): M = max(sink, m_c), L = exp(sink - M) + sum_c l_c exp(m_c - M),
//     out = sum_c acc_c exp(m_c - M) / L, c in order. The sink joins the denominator only (spec §3.4).
// Keys in a freed block (table entry < 0) report kFreedBlock, slots past the pool kBadSlot; such keys count
// as absent (score -inf). KV cache f32, f16 or int8 (8 codes a 8-byte load, each times the head vector's
// f32 scale by one __fmul_rn: ops/kv_int8.h's dequantization, bit for bit).
#include <algorithm>

#include "cuda/cuda_check.h"
#include "cuda/device_util.cuh"
#include "cuda/pdl.cuh"

namespace volt::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kChunk = 256;
constexpr int kWarpsPerBlock = kThreads / 32;
constexpr int kMaxG = 8;  // query heads per KV head (gpt-oss: 64 / 8)
constexpr int kMaxD = 128;
constexpr int64_t kScratchCap = int64_t{64} << 20;  // bytes of partials per slice

__device__ __forceinline__ float neg_inf() { return -__int_as_float(0x7f800000); }

struct RowRange {
    int64_t s, n, first;
};
__device__ __forceinline__ RowRange row_range(int64_t t, const int32_t* qsl, const int32_t* seq_lens,
                                              int64_t num_seqs, int64_t window) {
    int64_t lo = 0, hi = num_seqs - 1;
    while (lo < hi) {
        const int64_t mid = (lo + hi + 1) / 2;
        if (qsl[mid] <= t)
            lo = mid;
        else
            hi = mid - 1;
    }
    const int64_t q_len = qsl[lo + 1] - qsl[lo];
    const int64_t n = static_cast<int64_t>(seq_lens[lo]) - q_len + (t - qsl[lo]);
    return {lo, n, window > 0 ? max64(0, n - window + 1) : 0};
}

// KV cache element formats as template tags.
enum class Kv : int { kF32 = 0, kF16 = 1, kInt8 = 2 };

// Eight consecutive cache values as f32 (f16: one 16-byte load; f32: two; int8: one 8-byte load, the codes
// times the head's scale s).
template <Kv K>
__device__ __forceinline__ void load8(const void* p, int64_t i, float* v, float s) {
    if constexpr (K == Kv::kInt8) {
        const uint2 q = *reinterpret_cast<const uint2*>(static_cast<const int8_t*>(p) + i);
        const uint32_t fa = q.x ^ 0x80808080u, fb = q.y ^ 0x80808080u;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            v[j] = __fmul_rn(i8_at(fa, j), s);
            v[4 + j] = __fmul_rn(i8_at(fb, j), s);
        }
    } else if constexpr (K == Kv::kF16) {
        const uint4 q = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p) + i);
        const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            v[2 * k] = f16_to_f32(static_cast<uint16_t>(w[k] & 0xffffu));
            v[2 * k + 1] = f16_to_f32(static_cast<uint16_t>(w[k] >> 16));
        }
    } else {
        const float4 a = *reinterpret_cast<const float4*>(static_cast<const float*>(p) + i);
        const float4 b = *reinterpret_cast<const float4*>(static_cast<const float*>(p) + i + 4);
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    }
}

template <Kv K, Operand O, int G>
__global__ void __launch_bounds__(kThreads)
    split_kernel(const float* __restrict__ q, const void* __restrict__ kc, const void* __restrict__ vc,
                 const float* __restrict__ k_scales, const float* __restrict__ v_scales,
                 const int32_t* __restrict__ seq_lens, const int32_t* __restrict__ qsl,
                 const int32_t* __restrict__ tables, const int32_t* __restrict__ table_rows,
                 float* __restrict__ part, int64_t row0, int64_t num_seqs, int64_t nh, int64_t nkv, int64_t d,
                 int64_t max_blocks, int64_t block_size, int64_t num_slots, int64_t window, float scale,
                 int64_t max_splits, int* error) {
    pdl_wait();  // pdl.cuh: nothing of an earlier kernel is touched before it
    pdl_launch_dependents();
    __shared__ float qs[kMaxG * kMaxD];
    // Probabilities [G][kChunk]; after P.V the warps' partial sums [warps][G * d].
    __shared__ float
        ps[kMaxG * kChunk > kWarpsPerBlock * kMaxG * kMaxD ? kMaxG * kChunk : kWarpsPerBlock * kMaxG * kMaxD];
    __shared__ int64_t slots[kChunk];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int64_t t = row0 + blockIdx.x, g = blockIdx.y, c = blockIdx.z;
    const RowRange r = row_range(t, qsl, seq_lens, num_seqs, window);
    const int64_t j0 = r.first + c * kChunk;
    if (j0 > r.n) return;  // the row has fewer splits (uniform over the block)
    const int64_t cnt = min64(kChunk, r.n + 1 - j0);
    const float* qrow = q + (t * nh + g * G) * d;  // the G heads of this KV head are contiguous
    for (int64_t i = tid; i < G * d; i += kThreads) qs[i] = operand<O>(qrow[i]);
    const int32_t* table = tables + (table_rows != nullptr ? table_rows[r.s] : r.s) * max_blocks;
    for (int64_t k = tid; k < kChunk; k += kThreads) {
        int64_t slot = -1;
        if (k < cnt) {
            const int64_t j = j0 + k, bi = j / block_size;
            const int32_t block = bi < max_blocks ? table[bi] : -1;
            if (block < 0) {
                report_error(error, kFreedBlock);
            } else {
                slot = static_cast<int64_t>(block) * block_size + j % block_size;
                if (slot >= num_slots) {
                    report_error(error, kBadSlot);
                    slot = -1;
                }
            }
        }
        slots[k] = slot;
    }
    __syncthreads();
    // Scores: thread per key, all G heads.
    for (int64_t k = tid; k < cnt; k += kThreads) {
        float sc[G];
#pragma unroll
        for (int h = 0; h < G; ++h) sc[h] = 0.0f;
        const int64_t slot = slots[k];
        if (slot >= 0) {
            const int64_t off = (slot * nkv + g) * d;
            const float ks = K == Kv::kInt8 ? k_scales[slot * nkv + g] : 1.0f;
#pragma unroll 4
            for (int64_t i = 0; i < d; i += 8) {
                float kv[8];
                load8<K>(kc, off + i, kv, ks);
#pragma unroll
                for (int h = 0; h < G; ++h) {  // q as two 16-byte shared loads per 8 products
                    const float4 qa = *reinterpret_cast<const float4*>(qs + h * d + i);
                    const float4 qb = *reinterpret_cast<const float4*>(qs + h * d + i + 4);
                    sc[h] += qa.x * kv[0];
                    sc[h] += qa.y * kv[1];
                    sc[h] += qa.z * kv[2];
                    sc[h] += qa.w * kv[3];
                    sc[h] += qb.x * kv[4];
                    sc[h] += qb.y * kv[5];
                    sc[h] += qb.z * kv[6];
                    sc[h] += qb.w * kv[7];
                }
            }
        }
#pragma unroll
        for (int h = 0; h < G; ++h) ps[h * kChunk + k] = slot >= 0 ? sc[h] * scale : neg_inf();
    }
    __syncthreads();
    // Softmax over the chunk, a warp per head.
    float* prow = part + ((blockIdx.x * nh + g * G) * max_splits + c) * (d + 2);
    const int64_t head_stride = max_splits * (d + 2);
    for (int h = warp; h < G; h += kThreads / 32) {
        float m = neg_inf();
        for (int64_t k = lane; k < cnt; k += 32) m = fmaxf(m, ps[h * kChunk + k]);
        m = warp_max(m);
        float l = 0.0f;
        for (int64_t k = lane; k < cnt; k += 32) {
            const float s = ps[h * kChunk + k];
            const float p = s == neg_inf() ? 0.0f : expf(s - m);
            l += p;
            ps[h * kChunk + k] = operand<O>(p);
        }
        l = warp_sum(l);
        if (lane == 0) {
            prow[h * head_stride + d] = m;
            prow[h * head_stride + d + 1] = l;
        }
    }
    __syncthreads();
    // P.V: thread (key lane kl, element group eg of 8 elements): keys kl, kl + KL, ... in order, all G heads;
    // then the key lanes summed by a fixed butterfly inside the warp and the warps in order.
    const int EG = static_cast<int>(d / 8), KL = kThreads / EG;
    const int eg = tid % EG, kl = tid / EG;
    float acc[G][8];
#pragma unroll
    for (int h = 0; h < G; ++h)
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[h][e] = 0.0f;
#pragma unroll 2
    for (int64_t k = kl; k < cnt; k += KL) {
        const int64_t slot = slots[k];  // absent keys: p = 0 and no load (their V may be anything)
        float v[8];
        if (slot >= 0) {
            load8<K>(vc, (slot * nkv + g) * d + 8 * eg, v, K == Kv::kInt8 ? v_scales[slot * nkv + g] : 1.0f);
        } else {
#pragma unroll
            for (int e = 0; e < 8; ++e) v[e] = 0.0f;
        }
#pragma unroll
        for (int h = 0; h < G; ++h) {
            const float p = ps[h * kChunk + k];
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[h][e] += p * v[e];
        }
    }
    for (int off = EG; off < 32; off <<= 1) {
#pragma unroll
        for (int h = 0; h < G; ++h)
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[h][e] += __shfl_xor_sync(kFullMask, acc[h][e], off);
    }
    __syncthreads();  // ps is no longer read: its space holds the warps' sums
    float* red = ps;
    if (lane < EG) {
#pragma unroll
        for (int h = 0; h < G; ++h) {
#pragma unroll
            for (int e = 0; e < 8; ++e) red[warp * G * d + h * d + 8 * eg + e] = acc[h][e];
        }
    }
    __syncthreads();
    for (int64_t o = tid; o < G * d; o += kThreads) {
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarpsPerBlock; ++w) sum += red[w * G * d + o];
        prow[(o / d) * head_stride + o % d] = sum;
    }
}

__global__ void __launch_bounds__(kThreads)
    combine_kernel(const float* __restrict__ part, const int32_t* __restrict__ seq_lens,
                   const int32_t* __restrict__ qsl, DeviceVector sinks, float* __restrict__ out, int64_t row0,
                   int64_t num_seqs, int64_t nh, int64_t d, int64_t window, int64_t max_splits) {
    pdl_wait();  // pdl.cuh: nothing of an earlier kernel is touched before it
    pdl_launch_dependents();
    const int64_t t = row0 + blockIdx.x, h = blockIdx.y;
    const RowRange r = row_range(t, qsl, seq_lens, num_seqs, window);
    // ceil((n - first + 1) / kChunk); a max_seq_len below the truth (a broken contract) must not read past
    // the row's partials.
    const int64_t splits = min64((r.n - r.first + kChunk) / kChunk, max_splits);
    const float* p = part + (blockIdx.x * nh + h) * max_splits * (d + 2);
    const float z = load_vec(sinks, h);
    float M = z;
    for (int64_t c = 0; c < splits; ++c) M = fmaxf(M, p[c * (d + 2) + d]);
    float L = expf(z - M);
    for (int64_t c = 0; c < splits; ++c) {
        const float mc = p[c * (d + 2) + d];
        if (mc != neg_inf()) L += p[c * (d + 2) + d + 1] * expf(mc - M);
    }
    for (int64_t i = threadIdx.x; i < d; i += kThreads) {
        float acc = 0.0f;
        for (int64_t c = 0; c < splits; ++c) {
            const float mc = p[c * (d + 2) + d];
            if (mc != neg_inf()) acc += p[c * (d + 2) + i] * expf(mc - M);
        }
        out[(t * nh + h) * d + i] = acc / L;
    }
}

}  // namespace

bool attention_split_eligible(const ops::AttentionArgs& a) {
    if (a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0) return false;
    const int64_t G = a.num_heads / a.num_kv_heads;
    const int64_t bound =
        a.window > 0 ? std::min<int64_t>(a.window, std::max<int64_t>(a.max_seq_len, 1)) : a.max_seq_len;
    // d / 8 element groups must divide the block (d in 8, 16, 32, 64, 128).
    const bool d_ok =
        a.head_dim == 8 || a.head_dim == 16 || a.head_dim == 32 || a.head_dim == 64 || a.head_dim == 128;
    const bool g_ok = G == 1 || G == 2 || G == 4 || G == 8;  // the split kernel's instantiations
    return a.max_seq_len > 0 && bound > 0 && g_ok && d_ok && (bound + kChunk - 1) / kChunk <= 65535 &&
           (a.kv.format == ops::Format::kF16 || a.kv.format == ops::Format::kF32 ||
            (a.kv.format == ops::Format::kInt8 && a.kv.k_scales != nullptr && a.kv.v_scales != nullptr)) &&
           reinterpret_cast<uintptr_t>(a.kv.k) % 16 == 0 && a.num_kv_heads <= 65535;
}

int64_t attention_split_scratch_bytes(const ops::AttentionArgs& a) {
    const int64_t bound = a.window > 0 ? std::min<int64_t>(a.window, a.max_seq_len) : a.max_seq_len;
    const int64_t splits = (bound + kChunk - 1) / kChunk;
    const int64_t per_row = a.num_heads * splits * (a.head_dim + 2) * 4;
    const int64_t rows = std::max<int64_t>(1, std::min<int64_t>(a.num_tokens, kScratchCap / per_row));
    return rows * per_row;
}

void launch_attention_split(const ops::AttentionArgs& a, float* part, const Launch& ctx) {
    if (a.num_tokens <= 0) return;
    VOLT_CHECK(attention_split_eligible(a) && a.num_seqs > 0) << "attention_split: shapes it does not take";
    const int64_t bound = a.window > 0 ? std::min<int64_t>(a.window, a.max_seq_len) : a.max_seq_len;
    const int64_t splits = (bound + kChunk - 1) / kChunk;
    const int64_t per_row = a.num_heads * splits * (a.head_dim + 2) * 4;
    const int64_t slice = std::max<int64_t>(1, std::min<int64_t>(a.num_tokens, kScratchCap / per_row));
    const int64_t slots = a.kv.num_blocks * a.kv.block_size;
    const DeviceVector sinks = device_vector(a.sinks);
    const Kv kv = a.kv.format == ops::Format::kF16    ? Kv::kF16
                  : a.kv.format == ops::Format::kInt8 ? Kv::kInt8
                                                      : Kv::kF32;
    const int64_t G = a.num_heads / a.num_kv_heads;
    for (int64_t row0 = 0; row0 < a.num_tokens; row0 += slice) {
        const int64_t rows = std::min(slice, a.num_tokens - row0);
        VOLT_CHECK(rows < (int64_t{1} << 31));
        const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(a.num_kv_heads),
                        static_cast<unsigned>(splits));
#define VOLT_SPLIT_G(F16, O, G)                                                                              \
    launch_kernel(split_kernel<F16, O, G>, grid, kThreads, 0, ctx, a.q, a.kv.k, a.kv.v, a.kv.k_scales,       \
                  a.kv.v_scales, a.seq_lens, a.query_start_loc, a.block_tables, a.table_rows, part, row0,    \
                  a.num_seqs, a.num_heads, a.num_kv_heads, a.head_dim, a.max_blocks, a.kv.block_size, slots, \
                  a.window, a.scale, splits, ctx.error)
#define VOLT_SPLIT(F16, O)           \
    switch (G) {                     \
        case 1:                      \
            VOLT_SPLIT_G(F16, O, 1); \
            break;                   \
        case 2:                      \
            VOLT_SPLIT_G(F16, O, 2); \
            break;                   \
        case 4:                      \
            VOLT_SPLIT_G(F16, O, 4); \
            break;                   \
        default:                     \
            VOLT_SPLIT_G(F16, O, 8); \
            break;                   \
    }
        switch (ctx.operand) {
            case Operand::kF32:
                if (kv == Kv::kF16) {
                    VOLT_SPLIT(Kv::kF16, Operand::kF32);
                } else if (kv == Kv::kInt8) {
                    VOLT_SPLIT(Kv::kInt8, Operand::kF32);
                } else {
                    VOLT_SPLIT(Kv::kF32, Operand::kF32);
                }
                break;
            case Operand::kF16:
                if (kv == Kv::kF16) {
                    VOLT_SPLIT(Kv::kF16, Operand::kF16);
                } else if (kv == Kv::kInt8) {
                    VOLT_SPLIT(Kv::kInt8, Operand::kF16);
                } else {
                    VOLT_SPLIT(Kv::kF32, Operand::kF16);
                }
                break;
            case Operand::kBf16:
                if (kv == Kv::kF16) {
                    VOLT_SPLIT(Kv::kF16, Operand::kBf16);
                } else if (kv == Kv::kInt8) {
                    VOLT_SPLIT(Kv::kInt8, Operand::kBf16);
                } else {
                    VOLT_SPLIT(Kv::kF32, Operand::kBf16);
                }
                break;
        }
#undef VOLT_SPLIT
#undef VOLT_SPLIT_G
        VOLT_CUDA_CHECK_LAUNCH();
        launch_kernel(combine_kernel, dim3(static_cast<unsigned>(rows), static_cast<unsigned>(a.num_heads)),
                      kThreads, 0, ctx, part, a.seq_lens, a.query_start_loc, sinks, a.out, row0, a.num_seqs,
                      a.num_heads, a.head_dim, a.window, splits);
        VOLT_CUDA_CHECK_LAUNCH();
    }
}

}  // namespace volt::cuda
