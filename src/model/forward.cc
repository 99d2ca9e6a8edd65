#include "model/forward.h"

#include <cmath>

#include "core/check.h"

namespace volt::model {

Forward::Forward(std::shared_ptr<const ModelWeights> weights, ops::Backend& backend)
    : weights_(std::move(weights)), backend_(backend), rope_(make_rope_table(weights_->config)) {}

void Forward::trace(std::string_view name, int64_t layer, const std::vector<float>& v, int64_t rows,
                    int64_t cols) {
    if (trace_) trace_(name, layer, v.data(), rows, cols);
}

void Forward::run(const ForwardBatch& b, KvCache& cache, float* logits) {
    const GptOssConfig& c = weights_->config;
    const int64_t T = b.num_tokens, H = c.hidden_size, nh = c.num_attention_heads,
                  nkv = c.num_key_value_heads, d = c.head_dim, k_top = c.num_experts_per_tok;
    const float eps = static_cast<float>(c.rms_norm_eps);
    x_.resize(T * H);
    h_.resize(T * H);
    q_.resize(T * nh * d);
    k_.resize(T * nkv * d);
    v_.resize(T * nkv * d);
    attn_.resize(T * nh * d);
    o_.resize(T * H);
    expert_ids_.resize(T * k_top);
    expert_w_.resize(T * k_top);

    backend_.embedding({b.token_ids, weights_->embed_tokens, x_.data(), T, H, c.vocab_size});
    trace("embedding", -1, x_, T, H);

    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        const LayerWeights& w = weights_->layers[l];
        const KvGroup g = kv_group_of(c, l);
        const KvGroupInputs& kv = b.groups[g];

        // Attention block: x += o_proj(attention(rope(qkv(norm(x))))).
        backend_.rmsnorm({x_.data(), w.input_layernorm, h_.data(), T, H, eps});
        trace("attn_norm", l, h_, T, H);
        backend_.linear({.x = h_.data(), .weight = w.q_proj, .y = q_.data(), .num_tokens = T});
        backend_.linear({.x = h_.data(), .weight = w.k_proj, .y = k_.data(), .num_tokens = T});
        backend_.linear({.x = h_.data(), .weight = w.v_proj, .y = v_.data(), .num_tokens = T});
        backend_.rope(
            {q_.data(), k_.data(), b.positions, rope_.inv_freq.data(), rope_.mscale, T, nh, nkv, d});
        trace("q", l, q_, T, nh * d);
        trace("k", l, k_, T, nkv * d);
        trace("v", l, v_, T, nkv * d);
        backend_.kv_write({k_.data(), v_.data(), kv.slot_mapping, cache.k(l), cache.v(l), T, nkv, d});
        backend_.attention({.q = q_.data(),
                            .k_cache = cache.k(l),
                            .v_cache = cache.v(l),
                            .seq_lens = b.seq_lens,
                            .query_start_loc = b.query_start_loc,
                            .block_tables = kv.block_tables,
                            .sinks = w.sinks,
                            .out = attn_.data(),
                            .num_seqs = b.num_seqs,
                            .num_tokens = T,
                            .num_heads = nh,
                            .num_kv_heads = nkv,
                            .head_dim = d,
                            .block_size = cache.block_size(),
                            .max_blocks = kv.max_blocks,
                            .window = c.is_sliding(l) ? c.sliding_window : 0,
                            .scale = 1.0f / std::sqrt(static_cast<float>(d))});
        trace("attn", l, attn_, T, nh * d);
        backend_.linear({.x = attn_.data(), .weight = w.o_proj, .y = o_.data(), .num_tokens = T});
        trace("attn_out", l, o_, T, H);
        backend_.add({o_.data(), x_.data(), T * H});
        trace("resid_attn", l, x_, T, H);

        // MoE block: x += sum_k w_k expert_k(norm(x)).
        backend_.rmsnorm({x_.data(), w.post_attention_layernorm, h_.data(), T, H, eps});
        trace("mlp_norm", l, h_, T, H);
        backend_.router({h_.data(), w.router, expert_ids_.data(), expert_w_.data(), T, k_top});
        backend_.experts({.x = h_.data(),
                          .expert_ids = expert_ids_.data(),
                          .expert_weights = expert_w_.data(),
                          .gate_up = w.gate_up,
                          .down = w.down,
                          .out = x_.data(),
                          .num_tokens = T,
                          .top_k = k_top,
                          .swiglu_limit = static_cast<float>(c.swiglu_limit),
                          .swiglu_alpha = static_cast<float>(c.swiglu_alpha)});
        trace("resid_mlp", l, x_, T, H);
    }

    backend_.rmsnorm({x_.data(), weights_->norm, h_.data(), T, H, eps});
    trace("final_norm", -1, h_, T, H);
    backend_.linear({.x = h_.data(),
                     .weight = weights_->lm_head,
                     .y = logits,
                     .num_tokens = T,
                     .rows = b.logits_rows,
                     .num_rows = b.num_logits_rows});
}

}  // namespace volt::model
