// Decode experts on tensor cores (issue 14: "a grouped GEMM on tensor cores" for generated rows; sm_80+,
// dispatch "experts_mma_m16n8k16", reference cpu::experts, checked by volt_op_test experts /
// experts_residual). The generated rows' (token, rank) pairs are grouped by expert (route_lists, tiles of
// at most 8 pairs), and each tile is one GEMM with the weights as the MMA's A operand (16 rows) and the
// tile's pairs as its 8 columns ("swap AB"): an expert's weights are read once for all the pairs that
// chose it, and the E2M1 codes are multiplied on the tensor cores instead of in HFMA2 chains.
//
// Launches: experts_prepare (x as f16, staged order, a power of two per row; the routing lists),
// gate_up + clamped SwiGLU (act, f16 with the decode path's fixed scale, staged order), down + bias (y
// [pairs, H] f32), experts_combine (out[t] += sum_j w[t, j] y[t k + j] in rank order).
//
// Work items: (tile of <= 8 pairs of one expert, 16 weight rows), spread over a persistent grid. A block's
// kWarps warps (gate_up 2, down 4) split the K blocks of the item's rows into fixed slices [w nb / kWarps,
// (w + 1) nb / kWarps); lane (g, c) = (lane / 4, lane % 4) loads word c (codes 8c..8c+7) of rows g and g + 8
// with 4-byte loads and the column's staged x, 4 blocks ahead of the arithmetic. The slices are added in
// warp order in shared memory.
//
// Numerics (docs/cuda.md "Decode experts on tensor cores"): per 32-code block, two m16n8k16 into a zeroed
// f32 accumulator with exact f16 products (E2M1 value x 2^-14 by bit operations; x staged as f16 x
// 2^sx), then acc += that x the block's E8M0 scale (fmaf: the product is exact), blocks in order within
// the warp's slice, slices added in warp order, times the column's factor back. The MMA's k order within a
// block is a fixed permutation of the codes (word c's pairs (8c+p, 8c+p+4), the staged order of x), so a
// pair's result depends on its own data and the shape only: never on the batch, the tile it shares, or
// the grid (tests: cuda_backend_test ExpertsMmaBatchInvariant, BatchInvariantLogits, CudaGraphs.*).
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "cuda/cuda_check.h"
#include "cuda/device_util.cuh"
#include "cuda/expert_rows.cuh"
#include "cuda/launch.h"
#include "cuda/mxfp4.cuh"
#include "cuda/pdl.cuh"

namespace volt::cuda {
namespace {

using mxfp4::act_scale_exp;
using mxfp4::e2m1_pair;
using mxfp4::e8m0_f32;
using mxfp4::staged_index;
using mxfp4::swiglu;

constexpr int kRows = 16;  // weight rows of a work item (one m16 tile)
constexpr int kCols = 8;   // pairs of a tile (the MMA's n)
constexpr int kStage = 4;  // MXFP4 blocks a lane loads ahead
// K slices of an item (a block's warps): gate_up 2, down 4, so that at one token each SM holds ~22 warps
// of its share of items at once (no second wave); fixed by the projection, never by the batch.
constexpr int kGuWarps = 2, kDnWarps = 4;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define VOLT_EXPERTS_MMA 1
#endif

// d += a b, m16n8k16, f16 operands, f32 accumulators.
__device__ __forceinline__ void mma_f16(float* d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                        uint32_t b0, uint32_t b1) {
#ifdef VOLT_EXPERTS_MMA
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
    __trap();
#endif
}

struct MmaParams {
    const uint8_t* blocks;  // [E, N, K/32, 16]
    const uint8_t* scales;  // [E, N, K/32]
    const float* bias;      // [E, N] or null
    int64_t N, K;
    const uint16_t* x;  // B rows: f16 bits, staged order, [*, K]; row of pair q: q / a_div
    const float* back;  // [rows] or null: the factor of a row's results
    float back_const;
    int a_div;
    const int32_t* list;       // pairs grouped by expert
    const int4* tiles;         // (expert, start in list, count <= kCols, 0)
    const int32_t* num_tiles;  // [1]
    uint16_t* act;             // gate_up: [pairs, N / 2] f16 bits, staged order
    float act_scale, limit, alpha;
    bool act_round_bf16;
    float* y;  // down: [pairs, N] f32
};

// Persistent: work item i = (tile i % num_tiles, rows [16 (i / num_tiles), +16)), items i = blockIdx.x,
// + gridDim.x, ...; kWarps warps a block, warp w on the K slice [w nb / kWarps, (w + 1) nb / kWarps).
template <bool kSwiglu, int kWarps>
__global__ void __launch_bounds__(kWarps * 32) experts_mma_kernel(MmaParams p) {
    pdl_wait();  // pdl.cuh: nothing of an earlier kernel is touched before it
    pdl_launch_dependents();
    __shared__ float red[kWarps > 1 ? kWarps - 1 : 1][4][32];
    const int64_t N = p.N;
    const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
    const int g = lane >> 2, c = lane & 3;
    const int nb = static_cast<int>(p.K / 32);
    const int b0 = nb * warp / kWarps, b1 = nb * (warp + 1) / kWarps;
    const int nt = *p.num_tiles;
    const int64_t items = static_cast<int64_t>(nt) * ((N + kRows - 1) / kRows);
    for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
        const int4 td = p.tiles[item % nt];
        const int64_t e = td.x, row0 = item / nt * kRows;
        const int start = td.y, count = td.z;
        // Rows of this lane: row0 + g and row0 + 8 + g (a row past N reads row N - 1: never stored);
        // offsets in blocks from the expert's first.
        const uint32_t* wexp = reinterpret_cast<const uint32_t*>(p.blocks + e * N * nb * 16) + c;
        const uint8_t* sexp = p.scales + e * N * nb;
        const auto off0 = static_cast<uint32_t>(min(row0 + g, N - 1) * nb);
        const auto off1 = static_cast<uint32_t>(min(row0 + 8 + g, N - 1) * nb);
        // B column of this lane: pair g of the tile (zeros past the tile's count).
        const bool col_ok = g < count;
        const int32_t bpair = col_ok ? p.list[start + g] : 0;
        const uint4* xp =
            reinterpret_cast<const uint4*>(p.x + static_cast<int64_t>(bpair / p.a_div) * p.K) + c;

        // A ring of kStage blocks in flight (weights, scales and the column's x): slot s holds block bb + s;
        // once used, it loads block bb + s + kStage.
        uint32_t w0[kStage], w1[kStage], s0[kStage], s1[kStage];
        uint4 xr[kStage];
        auto load = [&](int s, int blk) {
            w0[s] = __ldg(wexp + 4 * (off0 + blk));
            w1[s] = __ldg(wexp + 4 * (off1 + blk));
            s0[s] = __ldg(sexp + off0 + blk);
            s1[s] = __ldg(sexp + off1 + blk);
            xr[s] = col_ok ? __ldg(xp + 4 * static_cast<int64_t>(blk)) : make_uint4(0u, 0u, 0u, 0u);
        };
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int s = 0; s < kStage; ++s)
            if (b0 + s < b1) load(s, b0 + s);
        for (int bb = b0; bb < b1; bb += kStage) {
#pragma unroll
            for (int s = 0; s < kStage; ++s) {
                const int blk = bb + s;
                if (blk >= b1) break;
                const uint32_t lo = w0[s], hi = w1[s];
                const uint4 xv = xr[s];
                float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                mma_f16(d, e2m1_pair<0>(lo), e2m1_pair<0>(hi), e2m1_pair<1>(lo), e2m1_pair<1>(hi), xv.x,
                        xv.y);
                mma_f16(d, e2m1_pair<2>(lo), e2m1_pair<2>(hi), e2m1_pair<3>(lo), e2m1_pair<3>(hi), xv.z,
                        xv.w);
                const float sl = e8m0_f32(s0[s]), sh = e8m0_f32(s1[s]);
                acc[0] = __fmaf_rn(d[0], sl, acc[0]);
                acc[1] = __fmaf_rn(d[1], sl, acc[1]);
                acc[2] = __fmaf_rn(d[2], sh, acc[2]);
                acc[3] = __fmaf_rn(d[3], sh, acc[3]);
                if (blk + kStage < b1) load(s, blk + kStage);
            }
        }

        // The slices in warp order, then warp 0 stores.
        if (kWarps > 1) {
            if (warp > 0)
#pragma unroll
                for (int r = 0; r < 4; ++r) red[warp - 1][r][lane] = acc[r];
            __syncthreads();
            if (warp == 0)
#pragma unroll
                for (int r = 0; r < 4; ++r)
#pragma unroll
                    for (int w = 1; w < kWarps; ++w) acc[r] = __fadd_rn(acc[r], red[w - 1][r][lane]);
        }
        if (warp == 0) {
            // acc[r]: row row0 + g (+8 for r >= 2), column 2c (+1 for odd r).
            const float* bias = p.bias != nullptr ? p.bias + e * N : nullptr;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int64_t row = row0 + 8 * h + g;
#pragma unroll
                for (int q = 0; q < 2; ++q) {
                    const int col = 2 * c + q;
                    const float v = acc[2 * h + q];
                    if constexpr (kSwiglu) {
                        // Gate rows are even, up rows odd: lane (g + 1, c) holds the up row of lane (g, c)'s
                        // gate.
                        const float up_v = __shfl_down_sync(0xffffffffu, v, 4);
                        if ((g & 1) != 0 || col >= count || row + 1 >= N) continue;
                        const int32_t pair = p.list[start + col];
                        const float back = p.back != nullptr ? p.back[pair / p.a_div] : p.back_const;
                        const float gate = v * back + (bias != nullptr ? bias[row] : 0.0f);
                        const float up = up_v * back + (bias != nullptr ? bias[row + 1] : 0.0f);
                        float a = swiglu(gate, up, p.limit, p.alpha);
                        if (p.act_round_bf16) a = round_to_bf16(a);
                        const int64_t I = N / 2;
                        p.act[static_cast<int64_t>(pair) * I + staged_index(row / 2)] =
                            __half_as_ushort(__float2half_rn(a * p.act_scale));
                    } else {
                        if (col >= count || row >= N) continue;
                        const int32_t pair = p.list[start + col];
                        p.y[static_cast<int64_t>(pair) * N + row] =
                            v * p.back_const + (bias != nullptr ? bias[row] : 0.0f);
                    }
                }
            }
        }
        if (kWarps > 1) __syncthreads();  // red is rewritten by the next item
    }
}

// Blocks [0, rows): row r of x as the f16 operand (bf16-rounded first under the bf16 operand), staged
// order, back[r] = 2^(14 - sx) (E2M1 values are decoded times 2^-14); block `rows`: the routing lists.
constexpr int kPrepThreads = 256;
__global__ void __launch_bounds__(kPrepThreads)
    experts_prepare_kernel(const float* __restrict__ x, int64_t rows, int64_t K, bool round_bf16,
                           uint16_t* __restrict__ a16, float* __restrict__ back,
                           const int32_t* __restrict__ ids, int64_t pairs, int num_experts,
                           int32_t* __restrict__ list, int4* __restrict__ tiles,
                           int32_t* __restrict__ num_tiles, int* error) {
    pdl_wait();  // pdl.cuh: nothing of an earlier kernel is touched before it
    pdl_launch_dependents();
    __shared__ float red[32];
    __shared__ int cnt[kMaxRoutedExperts], cur[kMaxRoutedExperts];
    const int64_t r = blockIdx.x;
    if (r == rows) {
        route_lists_block<kPrepThreads>(ids, pairs, num_experts, kCols, list, tiles, num_tiles, error, cnt,
                                        cur);
        return;
    }
    const float* xr = x + r * K;
    auto value = [&](int64_t i) { return round_bf16 ? round_to_bf16(xr[i]) : xr[i]; };
    const float b = stage_f16_row<kPrepThreads>(value, K, true, 14, a16 + r * K, red);
    if (threadIdx.x == 0) back[r] = b;
}

// The persistent grid: at most what is resident at once (the occupancy API, once per kernel), never more
// than the items of max_tiles tiles. The grid decides only which block computes an item.
template <bool kSwiglu, int kWarps>
void launch_persistent(const MmaParams& p, int64_t max_tiles, const Launch& ctx) {
    static const int per_sm = [] {
        int n = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, experts_mma_kernel<kSwiglu, kWarps>,
                                                          kWarps * 32, 0) != cudaSuccess ||
            n < 1)
            n = 1;
        return n;
    }();
    const int64_t items = max_tiles * ((p.N + kRows - 1) / kRows);
    const int64_t resident = static_cast<int64_t>(ctx.sm_count > 0 ? ctx.sm_count : 80) * per_sm;
    const auto grid = static_cast<unsigned>(std::max<int64_t>(1, std::min(items, resident)));
    launch_kernel(experts_mma_kernel<kSwiglu, kWarps>, grid, kWarps * 32, 0, ctx, p);
    VOLT_CUDA_CHECK_LAUNCH();
}
int64_t max_tiles_of(int64_t pairs, int64_t E) { return std::min(pairs, (pairs + kCols - 1) / kCols + E); }

}  // namespace

bool experts_mma_eligible(const ops::ExpertsArgs& a, Operand operand) {
    return gemm_experts_eligible(a, operand);
}

int64_t experts_mma_scratch_bytes(int64_t rows, const ops::ExpertsArgs& a) {
    const int64_t pairs = rows * a.top_k;
    return expert_scratch_bytes(rows, pairs, a.down.out, a.down.in,
                                max_tiles_of(pairs, a.gate_up.num_experts));
}

void launch_experts_mma(const ops::ExpertsArgs& a, void* scratch, const Launch& ctx) {
    const int64_t rows = a.num_tokens;
    if (rows <= 0) return;
    VOLT_CHECK(experts_mma_eligible(a, ctx.operand)) << "experts_mma: shapes or formats it does not take";
    const int64_t k = a.top_k, pairs = rows * k, H = a.down.out, I = a.down.in, E = a.gate_up.num_experts;
    VOLT_CHECK(pairs < (int64_t{1} << 31));
    const int64_t max_tiles = max_tiles_of(pairs, E);
    const ExpertScratch sc = carve_expert_scratch(scratch, rows, pairs, H, I, max_tiles);
    uint16_t *a16 = sc.a16, *act = sc.act;
    float *back = sc.back, *y = sc.y;
    int32_t *list = sc.list, *num_tiles = sc.num_tiles;
    int4* tiles = sc.tiles;

    VOLT_CHECK(E <= kMaxRoutedExperts && rows < 2147483647);
    launch_kernel(experts_prepare_kernel, static_cast<unsigned>(rows + 1), kPrepThreads, 0, ctx, a.x, rows, H,
                  ctx.operand == Operand::kBf16, a16, back, a.expert_ids, pairs, static_cast<int>(E), list,
                  tiles, num_tiles, ctx.error);
    VOLT_CUDA_CHECK_LAUNCH();

    const int sa = act_scale_exp(a.swiglu_limit);
    MmaParams g{};
    g.blocks = a.gate_up.blocks;
    g.scales = a.gate_up.scales;
    g.bias = static_cast<const float*>(a.gate_up.bias.data);
    g.N = a.gate_up.out;
    g.K = H;
    g.x = a16;
    g.back = back;
    g.back_const = 1.0f;
    g.a_div = static_cast<int>(k);
    g.list = list;
    g.tiles = tiles;
    g.num_tiles = num_tiles;
    g.act = act;
    g.act_scale = std::ldexp(1.0f, sa);
    g.limit = a.swiglu_limit;
    g.alpha = a.swiglu_alpha;
    g.act_round_bf16 = ctx.operand == Operand::kBf16;
    launch_persistent<true, kGuWarps>(g, max_tiles, ctx);

    MmaParams d{};
    d.blocks = a.down.blocks;
    d.scales = a.down.scales;
    d.bias = static_cast<const float*>(a.down.bias.data);
    d.N = H;
    d.K = I;
    d.x = act;
    d.back = nullptr;
    d.back_const = std::ldexp(1.0f, 14 - sa);
    d.a_div = 1;
    d.list = list;
    d.tiles = tiles;
    d.num_tiles = num_tiles;
    d.y = y;
    launch_persistent<false, kDnWarps>(d, max_tiles, ctx);

    launch_experts_combine(y, a.expert_ids, a.expert_weights, rows, H, k, E, a.out, ctx);
}

}  // namespace volt::cuda
