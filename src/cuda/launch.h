// The launchers of the CUDA kernels (src/cuda/kernels/*.cu): what the backend (cuda_backend.cc) calls,
// one function per kernel, each taking the op's Args (ops/ops.h, pointers in device memory) plus a
// Launch context. Every launcher checks its shape preconditions on the host (VOLT_CHECK), launches on
// ctx.stream and checks the launch error. Errors the device finds in the data (a token id outside the
// vocabulary, a key in a freed block) are written to ctx.error (first one wins, kernels go on with a
// defined value) and raised by the backend at its next download or synchronize. C++17: .cu files
// include it. Numerics of each kernel: docs/cuda.md and the top of its .cu file.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/ops.h"

namespace volt::cuda {

// The operand precision of the matmul-like kernels (linear, experts, attention): activations are f32
// between ops; as operands they are rounded to this format in registers (what a tensor-core kernel of
// that format computes), multiplied by weights widened exactly to f32, and accumulated in f32.
// kF32 rounds nothing (the reference mode, --dtype float).
enum class Operand : int { kF32 = 0, kF16 = 1, kBf16 = 2 };
const char* operand_name(Operand o);

// Error codes kernels write to Launch::error (cuda_backend.cc holds the message table).
enum DeviceError : int {
    kDeviceOk = 0,
    kBadTokenId = 1,   // embedding: id outside [0, V)
    kFreedBlock = 2,   // attention: a key position in a block table entry < 0
    kBadSlot = 3,      // kv_write / attention: slot outside the pool
    kBadExpertId = 4,  // experts: expert id outside [0, E)
    kBadSampleId = 5,  // sample: an allowed/bias/penalty/target id outside [0, vocab_size_real)
    kBadRow = 6,       // rmsnorm / linear: a negative row index
    kNumDeviceErrors = 7,
};

struct Launch {
    cudaStream_t stream = nullptr;
    int* error = nullptr;  // [1] device word, 0 while no kernel found bad data
    Operand operand = Operand::kF32;
    int sm_count = 0;  // multiprocessors (persistent grids); 0: unknown
    // Programmatic dependent launch (pdl.cuh): the kernels launched through launch_kernel start while the
    // kernel before them in the stream finishes. Only where the running code is sm_90+ (its kernels wait
    // with griddepcontrol.wait; compute_70 code JIT-compiled for a newer GPU has no such wait).
    bool pdl = false;
};

// ---- fine ops (reference: src/cpu/ops.cc, same contracts) ----
void launch_embedding(const ops::EmbeddingArgs& a, const Launch& ctx);
void launch_rmsnorm(const ops::RmsNormArgs& a, const Launch& ctx);
// y = x W^T + b, one warp per output unit (kernels/linear.cu), x rounded to `operand`.
void launch_linear(const ops::LinearArgs& a, Operand operand, const Launch& ctx);
void launch_rope(const ops::RopeArgs& a, const Launch& ctx);
void launch_kv_write(const ops::KvWriteArgs& a, const Launch& ctx);
// launch_rope then launch_kv_write in one launch (kernels/rope.cu; f16 / f32 caches, w.k == a.k): the
// same bits.
void launch_rope_kv_write(const ops::RopeArgs& a, const ops::KvWriteArgs& w, const Launch& ctx);
void launch_attention(const ops::AttentionArgs& a, const Launch& ctx);
// Top-k + softmax over router logits [T, E] already computed (kernels/router.cu).
void launch_router_topk(const float* logits, int64_t num_tokens, int64_t num_experts, int64_t top_k,
                        int32_t* expert_ids, float* expert_weights, const Launch& ctx);

// Experts in three kernels (kernels/experts.cu): gate_up + clamped SwiGLU into act [T*k, I], down + bias
// into y [T*k, H], then out[t] += sum_j w[t, j] y[t*k + j] in j order. act and y: scratch.
void launch_experts(const ops::ExpertsArgs& a, float* act, float* y, const Launch& ctx);

void launch_add(const ops::AddArgs& a, const Launch& ctx);
// ops::Backend::move_ids: one thread per move (kernels/elementwise.cu).
void launch_move_ids(const ops::MoveIdsArgs& a, const Launch& ctx);
// ops::Backend::scatter_ids: a block per fill, then one thread per write (kernels/elementwise.cu).
void launch_scatter_ids(const ops::ScatterIdsArgs& a, const Launch& ctx);

// ---- the fast decode kernels of issue 14 (docs/cuda.md "Fast kernels") ----
// Dense GEMV with 128-bit weight loads (kernels/gemv.cu): f16/bf16/f32 weights with in % 8 == 0, 16-byte
// aligned W and x. Same contract as launch_linear; callers fall back to it when not eligible.
bool linear_gemv_eligible(const ops::LinearArgs& a);
void launch_linear_gemv(const ops::LinearArgs& a, Operand operand, const Launch& ctx);
// The same, adding every output into residual [rows, out] too (a.y may be null: not kept).
void launch_linear_gemv_residual(const ops::LinearArgs& a, float* residual, Operand operand,
                                 const Launch& ctx);
// The same with the outputs split in three row-major parts: o < n0 to y0 [rows, n0], the next n1 to y1,
// the last n2 to y2 (a fused q|k|v weight writes q, k, v apart); n0 + n1 + n2 == out.
void launch_linear_gemv_split3(const ops::LinearArgs& a, float* y0, int64_t n0, float* y1, int64_t n1,
                               float* y2, int64_t n2, Operand operand, const Launch& ctx);
// RMSNorm fused into the GEMV (the norm of each row x[rows[r]] computed in every block exactly as
// launch_rmsnorm does, so the results are bitwise those of launch_rmsnorm then the GEMV): gain [in]
// (f32 placed vector), eps; normed [rows, in] receives the normed rows (may be null).
void launch_linear_gemv_norm(const ops::LinearArgs& a, const ops::VectorWeight& gain, float eps,
                             float* normed, Operand operand, const Launch& ctx);
void launch_linear_gemv_split3_norm(const ops::LinearArgs& a, const ops::VectorWeight& gain, float eps,
                                    float* y0, int64_t n0, float* y1, int64_t n1, float* y2, int64_t n2,
                                    Operand operand, const Launch& ctx);
// MXFP4 experts in two launches (kernels/experts_gemv.cu): gate_up + clamped SwiGLU into act, then down +
// bias + routing weight accumulated into a.out in rank order. act: experts_gemv_act_bytes of scratch.
bool experts_gemv_eligible(const ops::ExpertsArgs& a);
int64_t experts_gemv_act_bytes(int64_t pairs, int64_t inter);
void launch_experts_gemv(const ops::ExpertsArgs& a, void* act, const Launch& ctx);
// Split-KV attention (kernels/attention_split.cu): the GQA group of a KV head per block, chunks of 256 keys
// of each row's own range, combined in order with the sink. Needs max_seq_len > 0, G <= 8, d in {8, 16, 32,
// 64, 128}; part: attention_split_scratch_bytes of scratch.
bool attention_split_eligible(const ops::AttentionArgs& a);
int64_t attention_split_scratch_bytes(const ops::AttentionArgs& a);
void launch_attention_split(const ops::AttentionArgs& a, float* part, const Launch& ctx);
// Tensor-core GEMMs for prompt rows (kernels/gemm_mma.cu; sm_80+, dispatch "gemm_mma_m16n8k16_f32acc").
// rows_to_operand: out [rows, K] = x rows (rmsnorm'd with gain, an f32 placed vector, when set) as f16
// operand bits scaled per row by a power of two, back[r] = 2^(extra_exp - sx) the factor that undoes it
// (operand kF16), or as bf16 bits unscaled, back[r] = 2^extra_exp (kBf16); staged: the MXFP4 element order.
void launch_rows_to_operand(const float* x, const ops::VectorWeight& gain, float eps, int64_t rows, int64_t K,
                            Operand operand, bool staged, int extra_exp, uint16_t* out, float* back,
                            const Launch& ctx);
// Where a dense GEMM's outputs go: columns [0, n0) to y0 [rows, n0], [n0, n0 + n1) to y1 [rows, n1], the
// rest to y2 [rows, out - n0 - n1]; or, when residual [rows, out] is set, residual += the outputs (y0
// [rows, out] receives them too when set).
struct GemmDenseOut {
    float *y0 = nullptr, *y1 = nullptr, *y2 = nullptr, *residual = nullptr;
    int64_t n0 = 0, n1 = 0;
};
// y = A W^T x back + b for A [rows, in] from rows_to_operand (not staged, extra_exp 0) and a dense weight
// in the operand's format (f16 with kF16, bf16 with kBf16), in % 32 == 0.
bool gemm_dense_eligible(const ops::DenseWeight& w, Operand operand);
void launch_gemm_dense(const uint16_t* a, const float* back, int64_t rows, const ops::DenseWeight& w,
                       const GemmDenseOut& out, Operand operand, const Launch& ctx);
// The experts of rows [0, rows) of a (MXFP4, f16/bf16 operand): routing lists, gate_up + SwiGLU GEMM,
// down GEMM, rank-order combine into a.out. scratch: gemm_experts_scratch_bytes.
bool gemm_experts_eligible(const ops::ExpertsArgs& a, Operand operand);
int64_t gemm_experts_scratch_bytes(int64_t rows, const ops::ExpertsArgs& a);
void launch_gemm_experts(const ops::ExpertsArgs& a, int64_t rows, void* scratch, const Launch& ctx);
// The scratch of the grouped expert paths (launch_gemm_experts, launch_experts_mma), in this order, each
// part 256-byte aligned: a16 [rows, H] f16 operand rows, back [rows] f32, list [pairs] i32, tiles
// [max_tiles] int4, num_tiles [1] (16 bytes), act [pairs, I] f16, y [pairs, H] f32.
struct ExpertScratch {
    uint16_t* a16;
    float* back;
    int32_t* list;
    int4* tiles;
    int32_t* num_tiles;
    uint16_t* act;
    float* y;
};
inline int64_t expert_scratch_bytes(int64_t rows, int64_t pairs, int64_t H, int64_t I, int64_t max_tiles) {
    auto al = [](int64_t b) { return (b + 255) / 256 * 256; };
    return al(rows * H * 2) + al(rows * 4) + al(pairs * 4) + al(max_tiles * 16) + al(16) + al(pairs * I * 2) +
           al(pairs * H * 4);
}
inline ExpertScratch carve_expert_scratch(void* scratch, int64_t rows, int64_t pairs, int64_t H, int64_t I,
                                          int64_t max_tiles) {
    auto al = [](int64_t b) { return (b + 255) / 256 * 256; };
    auto* base = static_cast<uint8_t*>(scratch);
    ExpertScratch s{};
    s.a16 = reinterpret_cast<uint16_t*>(base);
    base += al(rows * H * 2);
    s.back = reinterpret_cast<float*>(base);
    base += al(rows * 4);
    s.list = reinterpret_cast<int32_t*>(base);
    base += al(pairs * 4);
    s.tiles = reinterpret_cast<int4*>(base);
    base += al(max_tiles * 16);
    s.num_tiles = reinterpret_cast<int32_t*>(base);
    base += al(16);
    s.act = reinterpret_cast<uint16_t*>(base);
    base += al(pairs * I * 2);
    s.y = reinterpret_cast<float*>(base);
    return s;
}
// Routing lists (kernels/gemm_mma.cu): the pairs [0, pairs) of ids (expert id per (token, rank)) grouped
// by expert into list [pairs] (counting sort; the order inside an expert's list is whatever the atomics
// give), cut into tiles (expert, start in list, count <= bm, 0) [<= ceil(pairs / bm) + E], *num_tiles
// set. A bad id is reported (kBadExpertId) and its pair left out. One block; num_experts <= 1024.
void launch_route_lists(const int32_t* ids, int64_t pairs, int64_t num_experts, int bm, int32_t* list,
                        int4* tiles, int32_t* num_tiles, const Launch& ctx);
// out[t, o] += sum_j weights[t, j] y[t k + j, o] over ranks j in order (pairs with a bad id left out); y
// [rows k, H] f32.
void launch_experts_combine(const float* y, const int32_t* ids, const float* weights, int64_t rows, int64_t H,
                            int64_t top_k, int64_t num_experts, float* out, const Launch& ctx);
// The experts of generated rows on tensor cores (kernels/experts_mma.cu; sm_80+, dispatch
// "experts_mma_m16n8k16"): rows_to_operand, routing lists in tiles of <= 8 pairs, gate_up + SwiGLU and
// down with the weights as the MMA's A operand, rank-order combine into a.out. Same formats and shapes as
// launch_gemm_experts (experts_mma_eligible); scratch: experts_mma_scratch_bytes(a.num_tokens or more).
bool experts_mma_eligible(const ops::ExpertsArgs& a, Operand operand);
int64_t experts_mma_scratch_bytes(int64_t rows, const ops::ExpertsArgs& a);
void launch_experts_mma(const ops::ExpertsArgs& a, void* scratch, const Launch& ctx);
// The read-bandwidth reference (kernels/bandwidth.cu): one pass of 128-bit loads over buf [bytes].
void launch_read_bandwidth(const void* buf, int64_t bytes, int sm_count, uint32_t* sink, const Launch& ctx);

// ---- helpers of the cuBLAS path and of placement (kernels/elementwise.cu) ----
// dst[r, c] = operand-rounded x[row r, c] as f16 for r < rows, 0 for rows <= r < padded_rows.
void launch_rows_to_f16(const float* x, const int32_t* rows, int64_t num_rows, int64_t padded_rows,
                        int64_t cols, uint16_t* dst, const Launch& ctx);
// y[r, o] = c[r, o] + b[o] for r < num_rows (b may be absent).
void launch_bias_rows(const float* c, const ops::VectorWeight& b, int64_t num_rows, int64_t out, float* y,
                      const Launch& ctx);

// ---- the sample op (kernels/sample.cu; reference src/cpu/sample.cc) ----
// Bytes of scratch per row: the processed logits [V] f32 and a counter per id [V] i32.
int64_t sample_scratch_bytes_per_row(int64_t vocab_size_real);
// Rows [0, num_rows) in launches of at most rows_per_launch rows (scratch holds that many rows).
void launch_sample(const ops::SampleArgs& a, void* scratch, int64_t rows_per_launch, const Launch& ctx);

// ---- the communicators' rank-order sum (kernels/comm.cu) ----
constexpr int kMaxCommRanks = 16;
struct RankPointers {
    const float* p[kMaxCommRanks];  // [n] device pointers, one per rank, each [count] f32
};
// out[i] = in.p[0][i] + in.p[1][i] + ... + in.p[n-1][i], f32 adds in rank order (no contraction):
// bitwise the CPU communicators' sum. 1 <= n <= kMaxCommRanks; out may alias an input (one thread
// reads every rank's element i, then writes out[i]).
void launch_rank_sum_f32(const RankPointers& in, int n, float* out, int64_t count, cudaStream_t stream);
// The same over one buffer holding the ranks' inputs `stride` floats apart: in [n, stride] f32,
// out [count] (count <= stride; out must not overlap in).
void launch_rank_sum_strided_f32(const float* in, int n, int64_t stride, float* out, int64_t count,
                                 cudaStream_t stream);

// The one-shot all-reduce over peer memory (GPUs with peer access enabled among them): in[q] is rank q's
// staging buffer [count] f32 for this call (this rank's own copy already made, stream-ordered before the
// launch), flags[q] rank q's flag words [kMaxCommRanks] u32 (zeroed at creation); epoch counts the calls
// from 1, the same on every rank. out[i] = in[0][i] + ... + in[n-1][i] in rank order (bitwise
// launch_rank_sum_f32's). A peer whose flag does not come within timeout_ns makes the kernel write 1 to
// error [1] i32 and finish with undefined out (the host fails the group). At most max_blocks blocks (all
// co-resident: no more than the SMs).
struct OneShotArgs {
    const float* in[kMaxCommRanks];
    unsigned* flags[kMaxCommRanks];
    int n = 0, rank = 0;
    unsigned epoch = 0;
    float* out = nullptr;
    int64_t count = 0;
    int* error = nullptr;
    uint64_t timeout_ns = 0;
};
void launch_one_shot_all_reduce(const OneShotArgs& a, int max_blocks, cudaStream_t stream);
// The peer-access probe: dst_peer[k] = seed ^ (k * 2654435761) (a write into a peer's memory) and
// local[k] = src_peer[k] (a read from it), k < n.
void launch_peer_probe(const uint32_t* src_peer, uint32_t* dst_peer, uint32_t* local, int64_t n,
                       uint32_t seed, cudaStream_t stream);

// ---- the probe (kernels/probe.cu) ----
// __CUDA_ARCH__ of the code the device actually runs (700 in a compute_70 PTX build, 900 for sm_90 SASS);
// minus the cudaError_t when this binary holds no code the device can run.
int probe_kernel_arch();

}  // namespace volt::cuda
