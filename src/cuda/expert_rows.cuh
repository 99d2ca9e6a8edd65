// Block-wide helpers shared by the prompt-row GEMM (kernels/gemm_mma.cu) and the decode experts on tensor
// cores (kernels/experts_mma.cu): one row of activations as the f16 tensor-core operand, and the routing
// lists that group (token, rank) pairs by expert. C++17, device code.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/device_util.cuh"
#include "cuda/launch.h"
#include "cuda/mxfp4.cuh"

namespace volt::cuda {

constexpr int kMaxRoutedExperts = 1024;  // route_lists_block's shared counters

// o[i] (i < K, staged order when `staged`: mxfp4::staged_index) = f16 bits of value(i) x 2^sx, sx putting
// the largest finite magnitude in [2^13, 2^14) (ops.h BUG-22: 1e6 stays finite); returns the factor back =
// 2^(extra - sx) that undoes it (NaN when a value is inf or NaN). value(i) is read twice. Every thread of
// the kThreads-thread block calls it; red: 32 floats of shared memory.
template <int kThreads, class Value>
__device__ __forceinline__ float stage_f16_row(const Value& value, int64_t K, bool staged, int extra,
                                               uint16_t* __restrict__ o, float* red) {
    float m = 0.0f;
    for (int64_t i = threadIdx.x; i < K; i += kThreads) {
        const float v = value(i);
        m = fmaxf(m, isfinite(v) ? fabsf(v) : __int_as_float(0x7f800000));
    }
    m = block_max<kThreads>(m, red);
    int sx = 0;
    const bool finite = m <= 3.0e38f;
    if (m > 0.0f && finite) sx = min(100, max(-100, 13 - ilogbf(m)));
    const float up = mxfp4::pow2f(sx);
    for (int64_t i = threadIdx.x; i < K; i += kThreads)
        o[staged ? mxfp4::staged_index(i) : i] = __half_as_ushort(__float2half_rn(value(i) * up));
    return finite ? mxfp4::pow2f(extra - sx) : __int_as_float(0x7fc00000);
}

// The pairs [0, pairs) of ids grouped by expert (counting sort; the order inside an expert's list is
// whatever the atomics give, which changes no result: every pair's results depend on that pair's data
// only) into list, cut into tiles (expert, start in list, count <= bm, 0), *num_tiles set. A bad id is
// reported (kBadExpertId) and its pair left out. One whole block of kThreads threads; num_experts <=
// kMaxRoutedExperts; cnt, cur: that many ints of shared memory each.
template <int kThreads>
__device__ __forceinline__ void route_lists_block(const int32_t* __restrict__ ids, int64_t pairs,
                                                  int num_experts, int bm, int32_t* __restrict__ list,
                                                  int4* __restrict__ tiles, int32_t* __restrict__ num_tiles,
                                                  int* error, int* cnt, int* cur) {
    for (int e = threadIdx.x; e < num_experts; e += kThreads) cnt[e] = 0;
    __syncthreads();
    for (int64_t q = threadIdx.x; q < pairs; q += kThreads) {
        const int32_t e = ids[q];
        if (e >= 0 && e < num_experts) {
            atomicAdd(&cnt[e], 1);
        } else {
            report_error(error, kBadExpertId);  // the pair is left out (its result dropped)
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int off = 0, nt = 0;
        for (int e = 0; e < num_experts; ++e) {
            cur[e] = off;
            for (int s = 0; s < cnt[e]; s += bm) tiles[nt++] = make_int4(e, off + s, min(bm, cnt[e] - s), 0);
            off += cnt[e];
        }
        *num_tiles = nt;
    }
    __syncthreads();
    for (int64_t q = threadIdx.x; q < pairs; q += kThreads) {
        const int32_t e = ids[q];
        if (e >= 0 && e < num_experts) list[atomicAdd(&cur[e], 1)] = static_cast<int32_t>(q);
    }
}

}  // namespace volt::cuda
