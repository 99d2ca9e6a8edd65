// The double-precision reference of the op harness (volt_op_test): every op of ops/ops.h written again,
// straight from spec/gpt-oss.md §3 (forward pass), §2.3 (MXFP4), §3.5 (YaRN) and the sample contract of
// ops/sample.h, in double, over host memory. Inputs are the exact values a backend receives (f32
// activations, weights in their stored format decoded exactly); outputs are double. It never links
// volt_cpu nor includes src/cpu (tests/kernels/CMakeLists.txt fails configuration otherwise), so a bug
// in the CPU kernels cannot hide in the reference. Self-test against spec §8 / §3.5 vectors: self_test().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops/sample.h"
#include "ops/weights.h"

namespace volt::kernels::ref {

// A deliberate error in the reference (volt_op_test --inject): a correct backend must then fail.
enum class Injection {
    kNone,
    kSink,    // attention: the sink left out of the softmax denominator (spec §3.4 step 6)
    kWindow,  // attention: window one key too wide, [n - window, n] (spec §3.4 step 5)
    kMscale,  // RoPE: YaRN's mscale left off cos and sin (spec §3.5)
    kClamp,   // experts: SwiGLU without the clamps at swiglu_limit (spec §3.6)
    kGqa,     // attention: query head h reads kv head h % nkv instead of h / (nh / nkv) (spec §3.4 step 2)
};
const char* injection_name(Injection inj);
// "sink" | "window" | "mscale" | "clamp" | "gqa" | "none"; false when unknown.
bool parse_injection(const std::string& s, Injection* out);

// ---- exact decoders --------------------------------------------------------------------------------

// FP4 E2M1 code (low 4 bits) from the formula of spec §2.3: (-1)^s * (e == 0 ? 0.5 m : 2^(e-1) (1 + m/2)).
double fp4_value(uint8_t code);
// E8M0 block scale byte: 2^(byte - 127) (spec §2.3, no special case for 255, like the references).
double e8m0_scale(uint8_t byte);
// Element i of a bf16, f16 or f32 array.
double decode(ops::Format f, const void* data, int64_t i);
// Element i of a vector weight (0 when the vector is absent: data == nullptr).
double vector_at(const ops::VectorWeight& v, int64_t i);

// A host weight matrix [rows, cols] (row = output unit): dense bf16/f16/f32, MXFP4 blocks of 32 along
// cols (spec §2.3), INT8 per row or AWQ gemm (docs/quantization.md).
struct Matrix {
    ops::Format format = ops::Format::kBf16;
    const void* data = nullptr;       // dense [rows, cols]; kMxfp4: blocks [rows, cols / 32, 16] u8; kInt8:
                                      // [rows, cols] i8; kInt4: AutoAWQ qweight [cols, rows / 8] i32
    const uint8_t* scales = nullptr;  // kMxfp4: [rows, cols / 32] E8M0
    const uint16_t* f16_scales = nullptr;  // kInt8: [rows] f16; kInt4: [cols / group, rows] f16
    const void* zeros = nullptr;           // kInt4: qzeros [cols / group, rows / 8] i32
    int64_t group_size = 0;                // kInt4
    int64_t rows = 0, cols = 0;
    void row(int64_t r, double* out) const;  // decodes row r into out[0, cols)
};
Matrix matrix_of(const ops::DenseWeight& w);
// Expert e of an expert projection ([out, in]).
Matrix expert_matrix(const ops::ExpertWeights& w, int64_t e);

// ---- the ops --------------------------------------------------------------------------------------

// Spec §3.3: y[r] = x[r] / sqrt(mean_j x[r, j]^2 + eps) * w. x, y [rows, hidden].
std::vector<double> rmsnorm(const std::vector<double>& x, int64_t rows, int64_t hidden,
                            const ops::VectorWeight& w, double eps);
// y[r] = W x[r] + b (spec §3: W [out, in]); x [rows, W.cols] -> y [rows, W.rows]. bias may be absent.
std::vector<double> linear(const std::vector<double>& x, int64_t rows, const Matrix& w,
                           const ops::VectorWeight& bias);

// Spec §3.5 YaRN (NeoX half-split, truncate = false): inv_freq [head_dim / 2] and the attention factor.
struct Yarn {
    std::vector<double> inv_freq;
    double mscale = 1.0;
};
Yarn yarn(int64_t head_dim, double theta, double factor, double original_max_positions, double beta_fast,
          double beta_slow);
// RoPE in place on x [tokens, heads, head_dim]: pairs (x_i, x_{i+d/2}) rotated by phi = p * inv_freq[i],
// cos and sin times mscale. The spec fixes phi in fp32 (phi = f32(f32(p) * inv_freq_f32)); the rest is
// double. kMscale drops mscale.
void rope(std::vector<double>* x, int64_t tokens, int64_t heads, int64_t head_dim, const int32_t* positions,
          const float* inv_freq, double mscale, Injection inj);

// The paged KV cache of one layer in host memory, as the harness filled it.
struct KvHost {
    ops::Format format = ops::Format::kF32;  // kF32 or kF16
    const void* k = nullptr;                 // [num_blocks, block_size, nkv, d]
    const void* v = nullptr;
    int64_t num_blocks = 0, block_size = 0, num_kv_heads = 0, head_dim = 0;
};
// Spec §3.4 with the paging of ops::AttentionArgs: sequence s has seq_lens[s] keys, q_len new rows; row i
// is key index n = seq_lens[s] - q_len + i and attends to [max(0, n - window + 1), n] (window <= 0: [0, n]);
// P = exp(s_j) / (exp(z_h) + sum exp(s_j')), s_j = q . k_j * scale; out [T, nh * d].
struct AttentionInput {
    const std::vector<double>* q = nullptr;  // [T, nh, d]
    KvHost kv;
    const int32_t* seq_lens = nullptr;         // [S]
    const int32_t* query_start_loc = nullptr;  // [S + 1]
    const int32_t* block_tables = nullptr;     // [S, max_blocks]
    ops::VectorWeight sinks;                   // [nh]
    int64_t num_seqs = 0, num_heads = 0, max_blocks = 0, window = 0;
    double scale = 0.0;
};
std::vector<double> attention(const AttentionInput& in, Injection inj);

// Spec §3.6 router: logits = W x + b, top-k by value (ties: lower index), softmax over the k.
struct Routed {
    std::vector<int32_t> ids;     // [T, k]
    std::vector<double> weights;  // [T, k]
    // [T] smallest gap between neighbours of the sorted top k + 1 logits, over the rms of the row's
    // logits: a row whose gap is below a backend's decision epsilon may legitimately pick another order
    // or expert.
    std::vector<double> margin;
};
Routed router(const std::vector<double>& x, int64_t tokens, const Matrix& w, const ops::VectorWeight& bias,
              int64_t top_k);

// Spec §3.6 clamped SwiGLU: min(g, limit) * sigmoid(alpha * min(g, limit)) * (clamp(u, -limit, limit) + 1).
double swiglu(double gate, double up, double limit, double alpha, Injection inj);
// Spec §3.6: sum_j w[t, j] * (W2[e] a + b2[e]), a = SwiGLU of the interleaved W1[e] x + b1[e]
// (even row = gate, odd row = up), e = ids[t, j]. x [T, H] -> branch [T, H] (the op adds it to out), and
// how often the clamps were reached (a case whose inputs never reach them could not catch a lost clamp).
struct ExpertsResult {
    std::vector<double> branch;  // [T, H]
    int64_t gate_clamped = 0, up_clamped = 0, units = 0;
};
ExpertsResult experts(const std::vector<double>& x, int64_t tokens, const int32_t* ids, const float* weights,
                      int64_t top_k, const ops::ExpertWeights& gate_up, const ops::ExpertWeights& down,
                      double limit, double alpha, Injection inj);

// ---- the sample op (ops/sample.h) -------------------------------------------------------------------

// splitmix64 and the counter uniform, from the formulas in ops/sample.h (Steele, Lea, Flood 2014).
uint64_t splitmix64(uint64_t x);
double sample_uniform(uint64_t seed, uint64_t counter);

// Decision margins below which two correct implementations may disagree on the drawn token.
struct TieEpsilon {
    double logit = 0.0;  // greedy argmax: best - second <= logit * max(1, |best|)
    double prob = 0.0;   // min_p and top_k thresholds: relative gap of the probabilities
    double cdf = 0.0;    // top_p mass and the inverse-CDF draw: gap <= cdf * total mass
};
struct SampleResult {
    int32_t token = -1;
    bool near_tie = false;    // token not comparable (a decision within TieEpsilon)
    double lse = 0.0;         // log-sum-exp of the raw logits over [0, vocab_size_real)
    std::vector<double> top;  // the num_logprobs largest raw logprobs, descending
};
// One row with host pointers (logits [vocab_size_real] read, ids < vocab_size_real): vLLM V1 order, raw
// logprobs -> allowed mask, logit bias -> repetition, frequency, presence penalties -> greedy, or
// temperature -> min_p -> top_k (ties with the k-th kept) -> top_p -> inverse CDF in ascending id order.
SampleResult sample_row(const ops::SampleRow& row, int64_t vocab_size_real, const TieEpsilon& eps);

// ---- self-test -------------------------------------------------------------------------------------

// Checks the reference against the vectors of spec §8 and §3.5 (MXFP4 bytes, SwiGLU, sink softmax, YaRN
// inv_freq and mscale) and splitmix64's published first output; returns one line per mismatch.
std::vector<std::string> self_test();

}  // namespace volt::kernels::ref
