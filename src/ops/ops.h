// The ops of the GPT-OSS forward pass: one Args struct per op (raw pointers, shapes, constants) and the
// Backend interface every backend implements (cpu:: now, cuda:: later). Pointers live in the backend's
// memory (host for the CPU). The forward pass (model/forward.cc) is written once over this interface.
// Math sources: spec/gpt-oss.md §3 (section named on each op). CPU twins: src/cpu/*.cc; their tests:
// tests/unit/cpu/ops_test.cc; the whole pass against transformers: tests/golden/.
#pragma once

#include <cstdint>

#include "model/weights.h"

namespace volt::ops {

// out[t, :] = table[ids[t], :] as f32 (spec §3.1). table bf16 [V, H]; out f32 [T, H].
struct EmbeddingArgs {
    const int32_t* ids;     // [T]
    const uint16_t* table;  // [V, H] bf16
    float* out;             // [T, H]
    int64_t num_tokens, hidden, vocab;
};

// y = x / sqrt(mean(x^2) + eps) * w, all f32 (spec §3.3). x, y f32 [T, H] (may alias); w bf16 [H].
struct RmsNormArgs {
    const float* x;
    const uint16_t* w;
    float* y;
    int64_t num_tokens, hidden;
    float eps;
};

// y[t, o] = sum_i x[t, i] W[o, i] + b[o] (f32 accumulate, fixed order); W bf16 [out, in].
// Only the rows listed in `rows` (if not null) are computed: y row r = x row rows[r].
struct LinearArgs {
    const float* x;  // [T, in]
    model::DenseWeight weight;
    float* y;  // [T or num_rows, out]
    int64_t num_tokens;
    const int32_t* rows = nullptr;  // optional [num_rows] row indices into x
    int64_t num_rows = 0;
};

// RoPE on q [T, nh, d] and k [T, nkv, d] in place, NeoX half-split pairs (x_i, x_{i+d/2}), angle
// positions[t] * inv_freq[i] in f32, cos and sin multiplied by mscale (YaRN, spec §3.5).
struct RopeArgs {
    float* q;
    float* k;
    const int32_t* positions;  // [T]
    const float* inv_freq;     // [d/2]
    float mscale;
    int64_t num_tokens, num_heads, num_kv_heads, head_dim;
};

// Writes this step's k, v rows into the paged cache: slot s = block * block_size + offset.
// k_cache, v_cache f32 [num_blocks, block_size, nkv, d]. Slots < 0 are skipped.
struct KvWriteArgs {
    const float* k;               // [T, nkv, d]
    const float* v;               // [T, nkv, d]
    const int64_t* slot_mapping;  // [T]
    float* k_cache;
    float* v_cache;
    int64_t num_tokens, num_kv_heads, head_dim;
};

// Paged attention with sinks and an optional sliding window (spec §3.4). Sequence s has seq_lens[s] keys
// after this step and q_len = query_start_loc[s+1] - query_start_loc[s] new rows; row i is the query at
// sequence index n = seq_lens[s] - q_len + i and attends to key indices [max(0, n - window + 1), n]
// (window <= 0: [0, n]). Key index j lives at slot block_tables[s * max_blocks + j / block_size] *
// block_size + j % block_size. Positions matter only to RoPE (applied before). Query head h reads kv head
// h / (nh / nkv). Scores q.k * scale; the sink z_h joins the softmax denominator only.
struct AttentionArgs {
    const float* q;        // [T, nh, d] (after RoPE)
    const float* k_cache;  // [num_blocks, block_size, nkv, d]
    const float* v_cache;
    const int32_t* seq_lens;         // [S] keys of each sequence after this step
    const int32_t* query_start_loc;  // [S + 1]
    const int32_t* block_tables;     // [S, max_blocks]
    const uint16_t* sinks;           // [nh] bf16
    float* out;                      // [T, nh * d]
    int64_t num_seqs, num_tokens, num_heads, num_kv_heads, head_dim, block_size, max_blocks;
    int64_t window;  // keys per query including itself; <= 0 for full attention
    float scale;
};

// Router (spec §3.6): logits = Wr x + br, top-k by value (ties: lower index), softmax over the k.
struct RouterArgs {
    const float* x;             // [T, H] (normed)
    model::DenseWeight router;  // [E, H] + [E]
    int32_t* expert_ids;        // [T, k]
    float* expert_weights;      // [T, k]
    int64_t num_tokens, top_k;
};

// Experts (spec §3.6): out[t] += sum_j w[t, j] * (W2[e] a + b2[e]) with a = clamped SwiGLU of the
// interleaved W1[e] x + b1[e], e = expert_ids[t, j]. Accumulates into `out` (the fp32 residual).
struct ExpertsArgs {
    const float* x;                // [T, H] (normed)
    const int32_t* expert_ids;     // [T, k]
    const float* expert_weights;   // [T, k]
    model::ExpertWeights gate_up;  // out 2I, in H
    model::ExpertWeights down;     // out H, in I
    float* out;                    // [T, H], accumulated into
    int64_t num_tokens, top_k;
    float swiglu_limit, swiglu_alpha;
};

// y += x elementwise, f32 [n].
struct AddArgs {
    const float* x;
    float* y;
    int64_t n;
};

class Backend {
  public:
    virtual ~Backend() = default;
    virtual void embedding(const EmbeddingArgs& a) = 0;
    virtual void rmsnorm(const RmsNormArgs& a) = 0;
    virtual void linear(const LinearArgs& a) = 0;
    virtual void rope(const RopeArgs& a) = 0;
    virtual void kv_write(const KvWriteArgs& a) = 0;
    virtual void attention(const AttentionArgs& a) = 0;
    virtual void router(const RouterArgs& a) = 0;
    virtual void experts(const ExpertsArgs& a) = 0;
    virtual void add(const AddArgs& a) = 0;
};

}  // namespace volt::ops
