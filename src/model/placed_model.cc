#include "model/placed_model.h"

#include <string>

#include "core/check.h"
#include "model/rope.h"

namespace volt::model {

Result<std::shared_ptr<const PlacedModel>> place_model(std::shared_ptr<const ModelWeights> host,
                                                       ops::Backend& backend,
                                                       const std::vector<bool>& experts_on_host) {
    auto m = std::make_shared<PlacedModel>();
    const ModelWeights& h = *host;
    ModelWeights& w = m->weights;
    w.config = h.config;
    auto* owned = &m->buffers;
    w.shard = h.shard;
    // A pipeline stage places only its own tensors (ModelWeights::shard); absent ones stay empty views.
    if (h.embed_tokens.w != nullptr) {
        VOLT_ASSIGN_OR_RETURN(w.embed_tokens,
                              backend.place_dense(h.embed_tokens, ops::WeightRole::kEmbedding, owned));
    }
    w.layers.resize(h.layers.size());
    const auto layer_end = h.shard.layer_end < 0 ? static_cast<int64_t>(h.layers.size()) : h.shard.layer_end;
    for (auto l = static_cast<size_t>(h.shard.layer_begin); l < static_cast<size_t>(layer_end); ++l) {
        const LayerWeights& hl = h.layers[l];
        LayerWeights& pl = w.layers[l];
        VOLT_ASSIGN_OR_RETURN(pl.input_layernorm, backend.place_vector(hl.input_layernorm, owned));
        VOLT_ASSIGN_OR_RETURN(ops::QkvWeights qkv, backend.place_qkv(hl.qkv(), owned));
        pl.q_proj = qkv.q;
        pl.k_proj = qkv.k;
        pl.v_proj = qkv.v;
        VOLT_ASSIGN_OR_RETURN(pl.o_proj, backend.place_dense(hl.o_proj, ops::WeightRole::kAttention, owned));
        VOLT_ASSIGN_OR_RETURN(pl.sinks, backend.place_vector(hl.sinks, owned));
        VOLT_ASSIGN_OR_RETURN(pl.post_attention_layernorm,
                              backend.place_vector(hl.post_attention_layernorm, owned));
        VOLT_ASSIGN_OR_RETURN(pl.router, backend.place_dense(hl.router, ops::WeightRole::kRouter, owned));
        if (l < experts_on_host.size() && experts_on_host[l]) {
            for (const ops::ExpertWeights* e : {&hl.gate_up, &hl.down})
                if (e->format != ops::Format::kMxfp4 && e->format != ops::Format::kBf16 &&
                    e->format != ops::Format::kF16)
                    return unimplemented(
                        std::string("CPU expert offload reads MXFP4 or bf16/f16 experts, not ") +
                        ops::format_name(e->format));
            pl.gate_up = hl.gate_up;  // host memory: the loader's view (the checkpoint's mmap)
            pl.down = hl.down;
            continue;
        }
        VOLT_ASSIGN_OR_RETURN(pl.gate_up, backend.place_experts(hl.gate_up, owned));
        VOLT_ASSIGN_OR_RETURN(pl.down, backend.place_experts(hl.down, owned));
    }
    if (h.lm_head.w != nullptr) {
        VOLT_ASSIGN_OR_RETURN(w.norm, backend.place_vector(h.norm, owned));
        VOLT_ASSIGN_OR_RETURN(w.lm_head, backend.place_dense(h.lm_head, ops::WeightRole::kLmHead, owned));
    }

    const RopeTable rope = make_rope_table(h.config);
    const auto bytes = static_cast<int64_t>(rope.inv_freq.size() * sizeof(float));
    VOLT_ASSIGN_OR_RETURN(ops::Buffer table, backend.alloc(bytes));
    backend.upload(table.data(), rope.inv_freq.data(), bytes);
    m->inv_freq = table.as<float>();
    m->mscale = rope.mscale;
    m->buffers.push_back(std::move(table));
    if (!experts_on_host.empty()) {
        VOLT_CHECK_EQ(static_cast<int64_t>(experts_on_host.size()), h.config.num_hidden_layers);
        m->experts_on_host = experts_on_host;
    }
    m->host = std::move(host);
    return std::shared_ptr<const PlacedModel>(std::move(m));
}

}  // namespace volt::model
