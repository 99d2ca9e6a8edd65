// Decode experts on tensor cores (issue 14: "a grouped GEMM on tensor cores" for generated rows; sm_80+,
// dispatch "experts_mma_m16n8k16", reference cpu::experts, checked by volt_op_test experts /
// experts_residual). The generated rows' (token, rank) pairs are grouped by expert (route_lists, tiles of
// at most 8 pairs), and each tile is one GEMM with the weights as the MMA's A operand (16 rows) and the
// tile's pairs as its 8 columns ("swap AB"): an expert's weights are read once for all the pairs that
// chose it, and the E2M1 codes are multiplied on the tensor cores instead of in HFMA2 chains.
//
// Launches: rows_to_operand (x as f16, staged order, a power of two per row: gemm_mma.cu), route_lists,
// gate_up + clamped SwiGLU (act, f16 with the decode path's fixed scale, staged order), down + bias (y
// [pairs, H] f32), experts_combine (out[t] += sum_j w[t, j] y[t k + j] in rank order).
//
// A block: 4 warps on 32 weight rows (two m16 tiles) of one expert and one tile of <= 8 pairs; warp w takes
// the MXFP4 blocks [w nb / 4, (w + 1) nb / 4) of the rows (a split fixed by the shape), lane (g, c) = (lane
// / 4, lane % 4) loads word c (codes 8c..8c+7) of its rows' blocks with 4-byte loads, 4 blocks ahead of the
// arithmetic. The four warps' sums are added in warp order in shared memory.
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
#include "cuda/launch.h"
#include "cuda/mxfp4.cuh"

namespace volt::cuda {
namespace {

using mxfp4::act_scale_exp;
using mxfp4::e2m1_pair;
using mxfp4::e8m0_f32;
using mxfp4::staged_index;
using mxfp4::swiglu;

constexpr int kWarps = 4;  // K slices of a block
constexpr int kMt = 2;     // m16 tiles of a warp
constexpr int kRows = 16 * kMt;
constexpr int kCols = 8;   // pairs of a tile (the MMA's n)
constexpr int kStage = 4;  // MXFP4 blocks a lane loads ahead

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

// grid (tiles, ceil(N / kRows)), kWarps * 32 threads.
template <bool kSwiglu>
__global__ void __launch_bounds__(kWarps * 32) experts_mma_kernel(MmaParams p) {
    __shared__ float red[kWarps - 1][kMt * 4][32];
    const int tile = static_cast<int>(blockIdx.x);
    if (tile >= *p.num_tiles) return;
    const int4 td = p.tiles[tile];
    const int64_t e = td.x, N = p.N;
    const int start = td.y, count = td.z;
    const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kRows;
    const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
    const int g = lane >> 2, c = lane & 3;
    const int nb = static_cast<int>(p.K / 32);
    const int b0 = nb * warp / kWarps, b1 = nb * (warp + 1) / kWarps;

    // Rows of this lane: i = 2 mt + h -> row0 + 16 mt + 8 h + g (a row past N reads row N - 1: never
    // stored); offsets in blocks from the expert's first.
    const uint32_t* wexp = reinterpret_cast<const uint32_t*>(p.blocks + e * N * nb * 16) + c;
    const uint8_t* sexp = p.scales + e * N * nb;
    uint32_t off[2 * kMt];
#pragma unroll
    for (int i = 0; i < 2 * kMt; ++i)
        off[i] = static_cast<uint32_t>(min(row0 + 16 * (i >> 1) + 8 * (i & 1) + g, N - 1) * nb);
    // B column of this lane: pair g of the tile (zeros past the tile's count).
    const bool col_ok = g < count;
    const int32_t bpair = col_ok ? p.list[start + g] : 0;
    const uint4* xp = reinterpret_cast<const uint4*>(p.x + static_cast<int64_t>(bpair / p.a_div) * p.K) + c;

    // A ring of kStage blocks in flight: slot s holds block bb + s; once used, it loads block bb + s +
    // kStage.
    uint32_t wr[kStage][2 * kMt], sr[kStage][2 * kMt];
    auto load = [&](int s, int blk) {
#pragma unroll
        for (int i = 0; i < 2 * kMt; ++i) {
            wr[s][i] = __ldg(wexp + 4 * (off[i] + blk));
            sr[s][i] = __ldg(sexp + off[i] + blk);
        }
    };
    float acc[kMt][4];
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[mt][r] = 0.0f;
#pragma unroll
    for (int s = 0; s < kStage; ++s)
        if (b0 + s < b1) load(s, b0 + s);
    for (int bb = b0; bb < b1; bb += kStage) {
#pragma unroll
        for (int s = 0; s < kStage; ++s) {
            const int blk = bb + s;
            if (blk >= b1) break;
            const uint4 xv = col_ok ? __ldg(xp + 4 * static_cast<int64_t>(blk)) : make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
            for (int mt = 0; mt < kMt; ++mt) {
                const uint32_t lo = wr[s][2 * mt], hi = wr[s][2 * mt + 1];
                float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                mma_f16(d, e2m1_pair<0>(lo), e2m1_pair<0>(hi), e2m1_pair<1>(lo), e2m1_pair<1>(hi), xv.x,
                        xv.y);
                mma_f16(d, e2m1_pair<2>(lo), e2m1_pair<2>(hi), e2m1_pair<3>(lo), e2m1_pair<3>(hi), xv.z,
                        xv.w);
                const float s_lo = e8m0_f32(sr[s][2 * mt]), s_hi = e8m0_f32(sr[s][2 * mt + 1]);
                acc[mt][0] = __fmaf_rn(d[0], s_lo, acc[mt][0]);
                acc[mt][1] = __fmaf_rn(d[1], s_lo, acc[mt][1]);
                acc[mt][2] = __fmaf_rn(d[2], s_hi, acc[mt][2]);
                acc[mt][3] = __fmaf_rn(d[3], s_hi, acc[mt][3]);
            }
            if (blk + kStage < b1) load(s, blk + kStage);
        }
    }

    // The slices in warp order.
    if (warp > 0) {
#pragma unroll
        for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
            for (int r = 0; r < 4; ++r) red[warp - 1][mt * 4 + r][lane] = acc[mt][r];
    }
    __syncthreads();
    if (warp != 0) return;
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
            for (int w = 1; w < kWarps; ++w) acc[mt][r] = __fadd_rn(acc[mt][r], red[w - 1][mt * 4 + r][lane]);

    // acc[mt][r]: row row0 + 16 mt + g (+8 for r >= 2), column 2c (+1 for odd r).
    const float* bias = p.bias != nullptr ? p.bias + e * N : nullptr;
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int64_t row = row0 + 16 * mt + 8 * h + g;
#pragma unroll
            for (int q = 0; q < 2; ++q) {
                const int col = 2 * c + q;
                const float v = acc[mt][2 * h + q];
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
}

int64_t al256(int64_t b) { return (b + 255) / 256 * 256; }
int64_t max_tiles_of(int64_t pairs, int64_t E) { return std::min(pairs, (pairs + kCols - 1) / kCols + E); }

}  // namespace

bool experts_mma_eligible(const ops::ExpertsArgs& a, Operand operand) {
    return gemm_experts_eligible(a, operand);
}

int64_t experts_mma_scratch_bytes(int64_t rows, const ops::ExpertsArgs& a) {
    const int64_t pairs = rows * a.top_k, H = a.down.out, I = a.down.in, E = a.gate_up.num_experts;
    return al256(rows * H * 2) + al256(rows * 4) + al256(pairs * 4) + al256(max_tiles_of(pairs, E) * 16) +
           al256(16) + al256(pairs * I * 2) + al256(pairs * H * 4);
}

void launch_experts_mma(const ops::ExpertsArgs& a, void* scratch, const Launch& ctx) {
    const int64_t rows = a.num_tokens;
    if (rows <= 0) return;
    VOLT_CHECK(experts_mma_eligible(a, ctx.operand)) << "experts_mma: shapes or formats it does not take";
    const int64_t k = a.top_k, pairs = rows * k, H = a.down.out, I = a.down.in, E = a.gate_up.num_experts;
    VOLT_CHECK(pairs < (int64_t{1} << 31));
    auto* base = static_cast<uint8_t*>(scratch);
    auto* a16 = reinterpret_cast<uint16_t*>(base);
    base += al256(rows * H * 2);
    auto* back = reinterpret_cast<float*>(base);
    base += al256(rows * 4);
    auto* list = reinterpret_cast<int32_t*>(base);
    base += al256(pairs * 4);
    const int64_t max_tiles = max_tiles_of(pairs, E);
    auto* tiles = reinterpret_cast<int4*>(base);
    base += al256(max_tiles * 16);
    auto* num_tiles = reinterpret_cast<int32_t*>(base);
    base += al256(16);
    auto* act = reinterpret_cast<uint16_t*>(base);
    base += al256(pairs * I * 2);
    auto* y = reinterpret_cast<float*>(base);

    launch_rows_to_operand(a.x, ops::VectorWeight{}, 0.0f, rows, H, ctx.operand, /*staged=*/true, 14, a16,
                           back, ctx);
    launch_route_lists(a.expert_ids, pairs, E, kCols, list, tiles, num_tiles, ctx);

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
    const auto gy = static_cast<unsigned>((g.N + kRows - 1) / kRows);
    VOLT_CHECK(max_tiles <= 2147483647 && gy <= 65535u);
    experts_mma_kernel<true><<<dim3(static_cast<unsigned>(max_tiles), gy), kWarps * 32, 0, ctx.stream>>>(g);
    VOLT_CUDA_CHECK_LAUNCH();

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
    const auto dy = static_cast<unsigned>((H + kRows - 1) / kRows);
    VOLT_CHECK(dy <= 65535u);
    experts_mma_kernel<false><<<dim3(static_cast<unsigned>(max_tiles), dy), kWarps * 32, 0, ctx.stream>>>(d);
    VOLT_CUDA_CHECK_LAUNCH();

    launch_experts_combine(y, a.expert_ids, a.expert_weights, rows, H, k, E, a.out, ctx);
}

}  // namespace volt::cuda
