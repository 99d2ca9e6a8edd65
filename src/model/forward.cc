#include "model/forward.h"

#include <cmath>
#include <cstring>

#include "core/check.h"
#include "model/shard.h"

namespace volt::model {

namespace {
// Appends `n` elements of `src` to the staging bytes at an 8-byte aligned offset; returns the offset.
template <typename T>
int64_t stage(std::vector<uint8_t>& staging, const T* src, int64_t n) {
    const int64_t off = (static_cast<int64_t>(staging.size()) + 7) / 8 * 8;
    staging.resize(off + n * static_cast<int64_t>(sizeof(T)));
    if (n > 0) std::memcpy(staging.data() + off, src, n * sizeof(T));
    return off;
}
}  // namespace

Status DeviceBlockTables::init(ops::Backend& backend, int64_t num_slots, int64_t w) {
    const int64_t r = std::max<int64_t>(num_slots, 0) + 1;
    w = std::max<int64_t>(w, 1);
    VOLT_CHECK(ops::kNumKvGroups * r * w < (int64_t{1} << 31)) << r << " block table rows of " << w;
    const int64_t bytes = ops::kNumKvGroups * r * w * static_cast<int64_t>(sizeof(int32_t));
    if (r != rows || w != width || buffer.data() == nullptr) {
        buffer = ops::Buffer();
        rows = width = 0;
        VOLT_ASSIGN_OR_RETURN(buffer, backend.alloc(bytes));
        rows = r;
        width = w;
    }
    backend.fill(buffer.data(), 0xff, bytes);  // -1
    return Status::ok();
}

Result<ForwardBatch> StepUpload::upload(ops::Backend& backend, const HostStep& s, ops::Buffer* pinned,
                                        const StepHead* head, DeviceBlockTables* kept) {
    staging_.clear();
    const int64_t T = s.num_tokens(), S = s.num_seqs();
    VOLT_CHECK_EQ(static_cast<int64_t>(s.positions.size()), T);
    VOLT_CHECK_EQ(static_cast<int64_t>(s.query_start_loc.size()), S + 1);
    const int64_t ids = stage(staging_, s.token_ids.data(), T);
    const int64_t pos = stage(staging_, s.positions.data(), T);
    const int64_t qsl = stage(staging_, s.query_start_loc.data(), S + 1);
    const int64_t lens = stage(staging_, s.seq_lens.data(), S);
    const auto R = static_cast<int64_t>(s.logits_rows.size());
    const int64_t rows = stage(staging_, s.logits_rows.data(), R);
    int64_t slots[ops::kNumKvGroups], tables[ops::kNumKvGroups];
    for (int g = 0; g < ops::kNumKvGroups; ++g) {
        VOLT_CHECK(s.slot_mapping[g].empty() || static_cast<int64_t>(s.slot_mapping[g].size()) == T);
        slots[g] = stage(staging_, s.slot_mapping[g].data(), static_cast<int64_t>(s.slot_mapping[g].size()));
        tables[g] = stage(staging_, s.block_tables[g].data(), static_cast<int64_t>(s.block_tables[g].size()));
    }
    // Kept tables: the rows, then the pairs last (their count varies; the inputs before keep their place).
    const bool keep = !s.table_rows.empty();
    int64_t table_rows = 0, pairs = 0;
    const auto num_pairs = static_cast<int64_t>(s.table_pairs.size()) / 2;
    if (keep) {
        VOLT_CHECK(kept != nullptr) << "a step of kept block tables without the tables";
        VOLT_CHECK_EQ(static_cast<int64_t>(s.table_rows.size()), S);
        VOLT_CHECK(s.num_table_fills >= 0 && s.num_table_fills <= num_pairs);
        if (kept->rows != s.table_num_rows || kept->width != s.table_width)
            VOLT_RETURN_IF_ERROR(kept->init(backend, s.table_num_rows - 1, s.table_width));
        table_rows = stage(staging_, s.table_rows.data(), S);
        pairs = stage(staging_, s.table_pairs.data(), 2 * num_pairs);
    }
    const auto bytes = static_cast<int64_t>(staging_.size());
    const int64_t head_bytes = head != nullptr ? (static_cast<int64_t>(head->bytes->size()) + 7) / 8 * 8 : 0;
    const int64_t step_cap = device_.bytes() - head_cap_;
    if (step_cap < bytes || head_cap_ < head_bytes) {
        VOLT_RETURN_IF_ERROR(reserve(backend, step_cap < bytes ? bytes * 5 / 4 : step_cap,
                                     head_cap_ < head_bytes ? head_bytes * 5 / 4 : head_cap_));
    }
    auto* base = static_cast<uint8_t*>(device_.data()) + head_cap_;
    ForwardBatch b;
    b.num_tokens = T;
    b.num_seqs = S;
    b.token_ids = reinterpret_cast<const int32_t*>(base + ids);
    b.positions = reinterpret_cast<const int32_t*>(base + pos);
    b.query_start_loc = reinterpret_cast<const int32_t*>(base + qsl);
    b.seq_lens = reinterpret_cast<const int32_t*>(base + lens);
    b.logits_rows = reinterpret_cast<const int32_t*>(base + rows);
    b.num_logits_rows = R;
    for (int g = 0; g < ops::kNumKvGroups; ++g) {
        b.groups[g].slot_mapping =
            s.slot_mapping[g].empty() ? nullptr : reinterpret_cast<const int64_t*>(base + slots[g]);
        b.groups[g].block_tables =
            s.block_tables[g].empty() ? nullptr : reinterpret_cast<const int32_t*>(base + tables[g]);
        b.groups[g].max_blocks = s.max_blocks[g];
        if (keep) {
            b.groups[g].block_tables = kept->group(g);
            b.groups[g].max_blocks = kept->width;
        }
    }
    if (keep) b.table_rows = reinterpret_cast<const int32_t*>(base + table_rows);
    for (int32_t len : s.seq_lens) b.max_seq_len = std::max<int64_t>(b.max_seq_len, len);
    VOLT_CHECK(s.num_prompt_rows >= 0 && s.num_prompt_rows <= T) << s.num_prompt_rows << " of " << T;
    b.num_prompt_rows = s.num_prompt_rows;
    // One contiguous copy: [head | inputs], the head ending where the inputs begin.
    if (head != nullptr && head->fix) head->fix(base - head_bytes, b);
    const int64_t total = head_bytes + bytes;
    uint8_t* host = nullptr;
    if (pinned != nullptr) {
        if (pinned->bytes() < total) {
            *pinned = ops::Buffer();
            VOLT_ASSIGN_OR_RETURN(*pinned, backend.alloc_host(std::max<int64_t>(total * 5 / 4, 4096)));
        }
        host = static_cast<uint8_t*>(pinned->data());
    } else if (head_bytes > 0) {
        combined_.resize(static_cast<size_t>(total));
        host = combined_.data();
    }
    if (host != nullptr) {
        if (head_bytes > 0) {
            const auto n = static_cast<int64_t>(head->bytes->size());
            std::memcpy(host, head->bytes->data(), static_cast<size_t>(n));
            std::memset(host + n, 0, static_cast<size_t>(head_bytes - n));
        }
        std::memcpy(host + head_bytes, staging_.data(), static_cast<size_t>(bytes));
    }
    if (pinned != nullptr) {
        backend.upload_pinned(base - head_bytes, host, total);
    } else {
        backend.upload_async(base - head_bytes, host != nullptr ? host : staging_.data(), total);
    }
    last_bytes_ = bytes;
    if (keep && num_pairs > 0)
        backend.scatter_ids({reinterpret_cast<const int32_t*>(base + pairs), kept->buffer.as<int32_t>(),
                             s.num_table_fills, num_pairs - s.num_table_fills});
    return b;
}

Status StepUpload::reserve(ops::Backend& backend, int64_t bytes, int64_t head_bytes) {
    const int64_t head = std::max(head_cap_, (head_bytes + 255) / 256 * 256);
    const int64_t step = std::max(device_.bytes() - head_cap_, bytes);
    if (head == head_cap_ && device_.bytes() - head_cap_ >= bytes) return Status::ok();
    device_ = ops::Buffer();
    head_cap_ = 0;
    VOLT_ASSIGN_OR_RETURN(device_, backend.alloc(std::max<int64_t>(head + step, 4096)));
    head_cap_ = head;
    return Status::ok();
}

int64_t StepUpload::decode_bytes(int64_t rows, const int64_t max_blocks[ops::kNumKvGroups]) {
    auto aligned = [](int64_t n) { return (n + 7) / 8 * 8; };
    // ids, positions, query_start_loc, seq_lens, logits rows; per group slots (int64) and tables.
    int64_t bytes = aligned(4 * rows) * 2 + aligned(4 * (rows + 1)) + aligned(4 * rows) * 2;
    for (int g = 0; g < ops::kNumKvGroups; ++g) bytes += 8 * rows + aligned(4 * rows * max_blocks[g]);
    return bytes;
}

int64_t StepUpload::decode_bytes_kept_tables(int64_t rows, int64_t table_pairs) {
    auto aligned = [](int64_t n) { return (n + 7) / 8 * 8; };
    // ids, positions, query_start_loc, seq_lens, logits rows; per group slots (int64); rows, pairs.
    int64_t bytes = aligned(4 * rows) * 2 + aligned(4 * (rows + 1)) + aligned(4 * rows) * 2;
    for (int g = 0; g < ops::kNumKvGroups; ++g) bytes += 8 * rows;
    return bytes + aligned(4 * rows) + 8 * table_pairs;
}

Result<Workspace> Workspace::create(ops::Backend& backend, const GptOssConfig& c, int64_t max_tokens,
                                    int64_t logits_chunk_rows, int64_t vocab_shard_rows) {
    Workspace ws;
    ws.max_tokens = max_tokens;
    ws.logits_chunk_rows = logits_chunk_rows;
    const int64_t T = max_tokens, H = c.hidden_size, k = c.num_experts_per_tok;
    auto take = [&](int64_t elems, int64_t elem_bytes) -> Result<void*> {
        VOLT_ASSIGN_OR_RETURN(ops::Buffer b, backend.alloc(std::max<int64_t>(elems * elem_bytes, 4)));
        void* p = b.data();
        ws.buffers.push_back(std::move(b));
        return p;
    };
    auto f32 = [&](float** dst, int64_t elems) -> Status {
        VOLT_ASSIGN_OR_RETURN(void* p, take(elems, 4));
        *dst = static_cast<float*>(p);
        return Status::ok();
    };
    VOLT_RETURN_IF_ERROR(f32(&ws.x, T * H));
    VOLT_RETURN_IF_ERROR(f32(&ws.h, T * H));
    VOLT_RETURN_IF_ERROR(f32(&ws.q, T * c.q_dim()));
    VOLT_RETURN_IF_ERROR(f32(&ws.k, T * c.kv_dim()));
    VOLT_RETURN_IF_ERROR(f32(&ws.v, T * c.kv_dim()));
    VOLT_RETURN_IF_ERROR(f32(&ws.attn, T * c.q_dim()));
    VOLT_RETURN_IF_ERROR(f32(&ws.o, T * H));
    VOLT_RETURN_IF_ERROR(f32(&ws.expert_weights, T * k));
    VOLT_ASSIGN_OR_RETURN(void* ids, take(T * k, 4));
    ws.expert_ids = static_cast<int32_t*>(ids);
    VOLT_RETURN_IF_ERROR(f32(&ws.logits_h, logits_chunk_rows * H));
    VOLT_RETURN_IF_ERROR(f32(&ws.logits, logits_chunk_rows * c.vocab_size));
    if (vocab_shard_rows > 0) {
        VOLT_RETURN_IF_ERROR(f32(&ws.logits_local, logits_chunk_rows * vocab_shard_rows));
        VOLT_RETURN_IF_ERROR(f32(&ws.logits_gathered, logits_chunk_rows * c.vocab_size));
    }
    return ws;
}

Forward::Forward(std::shared_ptr<const PlacedModel> model, ops::Backend& backend)
    : model_(std::move(model)), backend_(backend) {}

void Forward::trace(std::string_view name, int64_t layer, const float* device, int64_t rows, int64_t cols) {
    if (!trace_ || model_->weights.shard.tp_rank != 0) return;  // tp ranks hold the same x
    trace_host_.resize(rows * cols);
    backend_.download(trace_host_.data(), device, rows * cols * static_cast<int64_t>(sizeof(float)));
    trace_(name, layer, trace_host_.data(), rows, cols);
}

Status Forward::run(const ForwardBatch& b, const std::vector<ops::KvLayer>& kv, Workspace& ws,
                    const LogitsFn& on_logits) {
    const ModelWeights& W = model_->weights;
    const GptOssConfig& c = W.config;
    const ShardInfo& sh = W.shard;
    const int64_t T = b.num_tokens, H = c.hidden_size, nh = c.num_attention_heads,
                  nkv = c.num_key_value_heads, d = c.head_dim, k_top = c.num_experts_per_tok;
    const float eps = static_cast<float>(c.rms_norm_eps);
    const bool keep = static_cast<bool>(trace_);
    const bool tp = sh.tp_size > 1;
    VOLT_CHECK(T <= ws.max_tokens) << T << " tokens in a workspace of " << ws.max_tokens;
    VOLT_CHECK_EQ(static_cast<int64_t>(kv.size()), c.num_hidden_layers);
    VOLT_CHECK(!tp || (comm_.tp != nullptr && comm_.tp->size() == sh.tp_size))
        << "a tp shard without its group";
    VOLT_CHECK(sh.pp_size == 1 || (comm_.pp != nullptr && comm_.pp->size() == sh.pp_size))
        << "a pipeline stage without its group";
    // Tensor parallel: the partial sums of every rank in ws.o, summed in rank order, then added to x
    // (each bias so summed is held by tp rank 0 only: model/shard.h).
    auto reduce_into_x = [&]() -> Status {
        VOLT_RETURN_IF_ERROR(comm_.tp->all_reduce_sum(ws.o, T * H));
        backend_.add({ws.o, ws.x, T * H});
        return Status::ok();
    };

    if (sh.first_stage()) {
        backend_.embedding({.ids = b.token_ids,
                            .table = W.embed_tokens,
                            .out = ws.x,
                            .num_tokens = T,
                            .id_begin = sh.vocab_begin,
                            .vocab_size = tp ? sh.vocab_size : 0});
        // Each id's row is on exactly one rank; the others give zeros, so the sum is exact.
        if (tp) VOLT_RETURN_IF_ERROR(comm_.tp->all_reduce_sum(ws.x, T * H));
        trace("embedding", -1, ws.x, T, H);
    } else {
        VOLT_RETURN_IF_ERROR(
            comm_.pp->recv(ws.x, T * H * static_cast<int64_t>(sizeof(float)), sh.pp_rank - 1));
    }

    const int64_t layer_end = sh.layer_end < 0 ? c.num_hidden_layers : sh.layer_end;
    for (int64_t l = sh.layer_begin; l < layer_end; ++l) {
        const LayerWeights& w = W.layers[l];
        const KvGroupInputs& g = b.groups[kv_group_of(c, l)];

        // Attention block: x += o_proj(attention(rope(qkv(norm(x))))).
        backend_.qkv_rope_kvwrite({.x = ws.x,
                                   .norm = w.input_layernorm,
                                   .w = w.qkv(),
                                   .positions = b.positions,
                                   .inv_freq = model_->inv_freq,
                                   .mscale = model_->mscale,
                                   .slot_mapping = g.slot_mapping,
                                   .kv = kv[l],
                                   .h = ws.h,
                                   .q = ws.q,
                                   .k = ws.k,
                                   .v = ws.v,
                                   .num_tokens = T,
                                   .hidden = H,
                                   .num_heads = nh,
                                   .num_kv_heads = nkv,
                                   .head_dim = d,
                                   .eps = eps,
                                   .keep_intermediates = keep,
                                   .prompt_rows = b.num_prompt_rows});
        trace("attn_norm", l, ws.h, T, H);
        trace("q", l, ws.q, T, nh * d);
        trace("k", l, ws.k, T, nkv * d);
        trace("v", l, ws.v, T, nkv * d);
        backend_.attention({.q = ws.q,
                            .kv = kv[l],
                            .seq_lens = b.seq_lens,
                            .query_start_loc = b.query_start_loc,
                            .block_tables = g.block_tables,
                            .sinks = w.sinks,
                            .out = ws.attn,
                            .num_seqs = b.num_seqs,
                            .num_tokens = T,
                            .num_heads = nh,
                            .num_kv_heads = nkv,
                            .head_dim = d,
                            .max_blocks = g.max_blocks,
                            .window = c.is_sliding(l) ? c.sliding_window : 0,
                            .scale = 1.0f / std::sqrt(static_cast<float>(d)),
                            .max_seq_len = b.max_seq_len,
                            .table_rows = b.table_rows});
        trace("attn", l, ws.attn, T, nh * d);
        if (tp) {
            // All-reduce 1 of the layer: this rank's heads' share of o_proj (+ bo on rank 0 only).
            backend_.linear({.x = ws.attn, .weight = w.o_proj, .y = ws.o, .num_tokens = T});
            VOLT_RETURN_IF_ERROR(reduce_into_x());
        } else {
            backend_.o_proj_residual({ws.attn, w.o_proj, ws.x, ws.o, T, keep, b.num_prompt_rows});
        }
        trace("attn_out", l, ws.o, T, H);
        trace("resid_attn", l, ws.x, T, H);

        // MoE block: x += sum_k w_k expert_k(norm(x)).
        backend_.moe_route({ws.x, w.post_attention_layernorm, w.router, ws.h, ws.expert_ids,
                            ws.expert_weights, T, H, k_top, eps});
        trace("mlp_norm", l, ws.h, T, H);
        ops::ExpertsArgs experts{.x = ws.h,
                                 .expert_ids = ws.expert_ids,
                                 .expert_weights = ws.expert_weights,
                                 .gate_up = w.gate_up,
                                 .down = w.down,
                                 .out = ws.x,
                                 .num_tokens = T,
                                 .top_k = k_top,
                                 .swiglu_limit = static_cast<float>(c.swiglu_limit),
                                 .swiglu_alpha = static_cast<float>(c.swiglu_alpha),
                                 .prompt_rows = b.num_prompt_rows};
        // Experts kept in host memory (CPU expert offload) run on the host; the sum lands in the same place.
        const bool on_host = model_->experts_on_host_at(l);
        VOLT_CHECK(!on_host || host_experts_ != nullptr)
            << "layer " << l << ": host experts without a runner";
        auto run_experts = [&]() -> Status {
            if (on_host) return host_experts_->run(backend_, experts);
            backend_.experts_residual(experts);
            return Status::ok();
        };
        if (tp) {
            // All-reduce 2: this rank's intermediate units' share of the experts (+ b2 on rank 0 only). A
            // rank whose shard has no unit (TP past the block count) contributes zeros.
            backend_.fill(ws.o, 0, T * H * static_cast<int64_t>(sizeof(float)));
            experts.out = ws.o;
            if (w.down.in > 0) VOLT_RETURN_IF_ERROR(run_experts());
            VOLT_RETURN_IF_ERROR(reduce_into_x());
        } else {
            VOLT_RETURN_IF_ERROR(run_experts());
        }
        trace("resid_mlp", l, ws.x, T, H);
    }

    if (!sh.last_stage())
        return comm_.pp->send(ws.x, T * H * static_cast<int64_t>(sizeof(float)), sh.pp_rank + 1);

    // Final norm and lm_head on the rows that need logits, a chunk at a time: prompt logprobs over 2k
    // rows x 201,088 ids never hold more than one chunk of logits. Vocab-sharded: each rank computes its
    // ids' logits, tp rank 0 gathers them (rank order = id order) into [n, V].
    const int64_t V = c.vocab_size, V_local = W.lm_head.out;
    std::vector<int64_t> counts;
    for (int64_t first = 0; first < b.num_logits_rows; first += ws.logits_chunk_rows) {
        const int64_t n = std::min(ws.logits_chunk_rows, b.num_logits_rows - first);
        backend_.final_logits({.x = ws.x,
                               .norm = W.norm,
                               .lm_head = W.lm_head,
                               .rows = b.logits_rows + first,
                               .num_rows = n,
                               .hidden = H,
                               .eps = eps,
                               .h = ws.logits_h,
                               .logits = tp ? ws.logits_local : ws.logits,
                               .keep_intermediates = keep});
        trace("final_norm", -1, ws.logits_h, n, H);
        if (tp) {
            counts.clear();
            for (int r = 0; r < sh.tp_size; ++r) counts.push_back(n * vocab_rows(V, r, sh.tp_size).size());
            VOLT_CHECK_EQ(counts[sh.tp_rank], n * V_local);
            VOLT_RETURN_IF_ERROR(comm_.tp->gather(ws.logits_local, counts.data(), ws.logits_gathered, 0));
            if (sh.tp_rank != 0) continue;
            constexpr int64_t f = sizeof(float);
            int64_t off = 0;
            for (int r = 0; r < sh.tp_size; ++r) {
                const Range ids = vocab_rows(V, r, sh.tp_size);
                if (ids.size() > 0)
                    backend_.copy_2d(ws.logits + ids.begin, V * f, ws.logits_gathered + off, ids.size() * f,
                                     ids.size() * f, n);
                off += n * ids.size();
            }
        }
        on_logits(first, n, ws.logits);
    }
    return Status::ok();
}

}  // namespace volt::model
