#include "model/shard.h"

#include <cstring>
#include <vector>

#include "core/check.h"

namespace volt::model {

Status check_parallel(const GptOssConfig& c, const ParallelConfig& p) {
    const int tp = p.tensor_parallel_size, pp = p.pipeline_parallel_size;
    if (tp < 1) return invalid_argument("--tensor-parallel-size " + std::to_string(tp) + ": must be >= 1");
    if (pp < 1) return invalid_argument("--pipeline-parallel-size " + std::to_string(pp) + ": must be >= 1");
    if (c.num_key_value_heads % tp != 0) {
        std::string divisors;
        for (int64_t d = 1; d <= c.num_key_value_heads; ++d)
            if (c.num_key_value_heads % d == 0)
                divisors += (divisors.empty() ? "" : ", ") + std::to_string(d);
        return invalid_argument("--tensor-parallel-size " + std::to_string(tp) +
                                " does not divide the model's " + std::to_string(c.num_key_value_heads) +
                                " KV heads (num_key_value_heads): each rank holds whole KV heads with their "
                                "query heads; use one of " +
                                divisors);
    }
    if (pp > c.num_hidden_layers)
        return invalid_argument("--pipeline-parallel-size " + std::to_string(pp) +
                                " is more than the model's " + std::to_string(c.num_hidden_layers) +
                                " layers (num_hidden_layers): each stage needs at least one layer");
    return Status::ok();
}

Range stage_layers(int64_t n, int stage, int stages) {
    const int64_t base = n / stages, extra = n % stages;
    const int64_t begin = stage * base + std::min<int64_t>(stage, extra);
    return {begin, begin + base + (stage < extra ? 1 : 0)};
}

namespace {
Range split_ceil(int64_t n, int rank, int parts) {
    const int64_t per = (n + parts - 1) / parts;
    return {std::min(n, rank * per), std::min(n, (rank + 1) * per)};
}
}  // namespace

Range expert_units(int64_t intermediate_size, int rank, int tp) {
    const int64_t blocks = (intermediate_size + 31) / 32;
    const Range b = split_ceil(blocks, rank, tp);
    return {std::min(intermediate_size, b.begin * 32), std::min(intermediate_size, b.end * 32)};
}

Range vocab_rows(int64_t vocab_size, int rank, int tp) { return split_ceil(vocab_size, rank, tp); }

namespace {

struct ShardStorage : WeightStorage {
    std::shared_ptr<const ModelWeights> full;  // the views' memory
    std::vector<std::vector<uint8_t>> owned;   // copied slices
    uint8_t* take(int64_t bytes) {
        owned.emplace_back(static_cast<size_t>(std::max<int64_t>(bytes, 1)));
        return owned.back().data();
    }
};

int64_t element_bytes(ops::Format f) {
    switch (f) {
        case ops::Format::kF32:
            return 4;
        case ops::Format::kF16:
        case ops::Format::kBf16:
            return 2;
        default:
            return 0;
    }
}

bool integer_format(ops::Format f) { return f == ops::Format::kInt8 || f == ops::Format::kInt4; }

Status check_sliceable(const ops::DenseWeight& w, const char* what) {
    if (w.w != nullptr && element_bytes(w.format) == 0 && !integer_format(w.format))
        return unimplemented(std::string("tensor parallelism over ") + what + " in " +
                             ops::format_name(w.format) + " (only f32/f16/bf16 dense weights are sliced)");
    return Status::ok();
}

ops::VectorWeight vector_slice(const ops::VectorWeight& v, Range r) {
    if (v.data == nullptr) return v;
    return {v.format, static_cast<const uint8_t*>(v.data) + r.begin * element_bytes(v.format), r.size()};
}

// Rows [r.begin, r.end) of W [out, in] and of its bias: a view.
ops::DenseWeight row_slice(const ops::DenseWeight& w, Range r) {
    ops::DenseWeight s = w;
    s.w = static_cast<const uint8_t*>(w.w) + r.begin * w.in * element_bytes(w.format);
    s.out = r.size();
    s.b = vector_slice(w.b, r);
    return s;
}

// Columns [c.begin, c.end) of W [out, in]: a copy; the bias kept only when keep_bias.
ops::DenseWeight column_slice(const ops::DenseWeight& w, Range c, bool keep_bias, ShardStorage& st) {
    const int64_t es = element_bytes(w.format);
    uint8_t* dst = st.take(w.out * c.size() * es);
    for (int64_t o = 0; o < w.out; ++o)
        std::memcpy(dst + o * c.size() * es, static_cast<const uint8_t*>(w.w) + (o * w.in + c.begin) * es,
                    static_cast<size_t>(c.size() * es));
    ops::DenseWeight s = w;
    s.w = dst;
    s.in = c.size();
    if (!keep_bias) s.b = {};
    return s;
}

// Copies rows [r.begin, r.end) of every expert of an [E, rows, row_bytes] array.
const uint8_t* expert_rows(const uint8_t* src, int64_t E, int64_t rows, int64_t row_bytes, Range r,
                           ShardStorage& st) {
    uint8_t* dst = st.take(E * r.size() * row_bytes);
    for (int64_t e = 0; e < E; ++e)
        std::memcpy(dst + e * r.size() * row_bytes, src + (e * rows + r.begin) * row_bytes,
                    static_cast<size_t>(r.size() * row_bytes));
    return dst;
}

// Copies bytes [c.begin, c.end) of every row of an [n, row_bytes] array.
const uint8_t* row_bytes_slice(const uint8_t* src, int64_t n, int64_t row_bytes, Range c, ShardStorage& st) {
    uint8_t* dst = st.take(n * c.size());
    for (int64_t i = 0; i < n; ++i)
        std::memcpy(dst + i * c.size(), src + i * row_bytes + c.begin, static_cast<size_t>(c.size()));
    return dst;
}

// gate_up: output rows [2 u.begin, 2 u.end) of every expert (gate and up of units u interleave).
ops::ExpertWeights gate_up_slice(const ops::ExpertWeights& w, Range u, ShardStorage& st) {
    ops::ExpertWeights s = w;
    const Range rows{2 * u.begin, 2 * u.end};
    const int64_t E = w.num_experts;
    if (w.format == ops::Format::kMxfp4) {
        const int64_t nb = w.in / 32;
        s.blocks = expert_rows(w.blocks, E, w.out, nb * 16, rows, st);
        s.scales = expert_rows(w.scales, E, w.out, nb, rows, st);
    } else {
        s.w =
            expert_rows(static_cast<const uint8_t*>(w.w), E, w.out, w.in * element_bytes(w.format), rows, st);
    }
    if (w.bias.data != nullptr) {
        const int64_t es = element_bytes(w.bias.format);
        s.bias.data = expert_rows(static_cast<const uint8_t*>(w.bias.data), E, w.out, es, rows, st);
        s.bias.n = E * rows.size();
    }
    s.out = rows.size();
    return s;
}

// down: input units [u.begin, u.end) of every row (whole MXFP4 blocks); the bias only on tp rank 0.
ops::ExpertWeights down_slice(const ops::ExpertWeights& w, Range u, bool keep_bias, ShardStorage& st) {
    ops::ExpertWeights s = w;
    const int64_t rows = w.num_experts * w.out;
    if (w.format == ops::Format::kMxfp4) {
        VOLT_CHECK(u.begin % 32 == 0 && (u.end % 32 == 0 || u.end == w.in))
            << "units " << u.begin << ".." << u.end;
        const int64_t nb = w.in / 32;
        const Range b{u.begin / 32, (u.end + 31) / 32};
        s.blocks = row_bytes_slice(w.blocks, rows, nb * 16, {b.begin * 16, b.end * 16}, st);
        s.scales = row_bytes_slice(w.scales, rows, nb, b, st);
    } else {
        const int64_t es = element_bytes(w.format);
        s.w = row_bytes_slice(static_cast<const uint8_t*>(w.w), rows, w.in * es, {u.begin * es, u.end * es},
                              st);
    }
    s.in = u.size();
    if (!keep_bias) s.bias = {};
    return s;
}

}  // namespace

namespace {

// Integer weights (docs/quantization.md). Rows (outputs): INT8 a view; AWQ columns of qweight / qzeros
// (whole words: 8 outputs) and of scales, copied. Columns (inputs): INT8 a copy per row, scales kept;
// AWQ rows of qweight and whole groups of qzeros / scales, a view.
Result<ops::DenseWeight> int_row_slice(const ops::DenseWeight& w, Range r, ShardStorage& st,
                                       const char* what) {
    ops::DenseWeight s = w;
    s.out = r.size();
    s.b = vector_slice(w.b, r);
    if (w.format == ops::Format::kInt8) {
        s.w = static_cast<const int8_t*>(w.w) + r.begin * w.in;
        s.scales = w.scales + r.begin;
        return s;
    }
    if (r.begin % 8 != 0 || r.size() % 8 != 0)
        return invalid_argument(std::string("tensor parallelism over AWQ ") + what + ": rank rows [" +
                                std::to_string(r.begin) + ", " + std::to_string(r.end) +
                                ") are not whole int32 words of 8 outputs");
    const int64_t words = w.out / 8, groups = w.in / w.group_size, sw = r.size() / 8;
    auto* qw = reinterpret_cast<int32_t*>(st.take(w.in * sw * 4));
    auto* qz = reinterpret_cast<int32_t*>(st.take(groups * sw * 4));
    auto* sc = reinterpret_cast<uint16_t*>(st.take(groups * r.size() * 2));
    for (int64_t i = 0; i < w.in; ++i)
        std::memcpy(qw + i * sw, static_cast<const int32_t*>(w.w) + i * words + r.begin / 8, sw * 4);
    for (int64_t g = 0; g < groups; ++g) {
        std::memcpy(qz + g * sw, static_cast<const int32_t*>(w.zeros) + g * words + r.begin / 8, sw * 4);
        std::memcpy(sc + g * r.size(), w.scales + g * w.out + r.begin, r.size() * 2);
    }
    s.w = qw;
    s.zeros = qz;
    s.scales = sc;
    return s;
}

Result<ops::DenseWeight> int_column_slice(const ops::DenseWeight& w, Range c, bool keep_bias,
                                          ShardStorage& st, const char* what) {
    ops::DenseWeight s = w;
    s.in = c.size();
    if (!keep_bias) s.b = {};
    if (w.format == ops::Format::kInt8) {
        auto* dst = reinterpret_cast<int8_t*>(st.take(w.out * c.size()));
        for (int64_t o = 0; o < w.out; ++o)
            std::memcpy(dst + o * c.size(), static_cast<const int8_t*>(w.w) + o * w.in + c.begin, c.size());
        s.w = dst;
        return s;
    }
    if (c.begin % w.group_size != 0 || c.size() % w.group_size != 0)
        return invalid_argument(std::string("tensor parallelism over AWQ ") + what + ": rank inputs [" +
                                std::to_string(c.begin) + ", " + std::to_string(c.end) +
                                ") are not whole groups of " + std::to_string(w.group_size) +
                                " (convert with a smaller --awq-group-size)");
    const int64_t words = w.out / 8;
    s.w = static_cast<const int32_t*>(w.w) + c.begin * words;
    s.zeros = static_cast<const int32_t*>(w.zeros) + c.begin / w.group_size * words;
    s.scales = w.scales + c.begin / w.group_size * w.out;
    return s;
}

Result<ops::DenseWeight> dense_rows(const ops::DenseWeight& w, Range r, ShardStorage& st, const char* what) {
    if (integer_format(w.format)) return int_row_slice(w, r, st, what);
    return row_slice(w, r);
}

Result<ops::DenseWeight> dense_columns(const ops::DenseWeight& w, Range c, bool keep_bias, ShardStorage& st,
                                       const char* what) {
    if (integer_format(w.format)) return int_column_slice(w, c, keep_bias, st, what);
    return column_slice(w, c, keep_bias, st);
}

}  // namespace

Result<std::shared_ptr<const ModelWeights>> shard_weights(std::shared_ptr<const ModelWeights> full,
                                                          const ParallelConfig& p, int tp_rank, int pp_rank) {
    const GptOssConfig& c = full->config;
    VOLT_RETURN_IF_ERROR(check_parallel(c, p));
    const int tp = p.tensor_parallel_size, pp = p.pipeline_parallel_size;
    VOLT_CHECK(tp_rank >= 0 && tp_rank < tp && pp_rank >= 0 && pp_rank < pp);
    VOLT_CHECK_EQ(full->shard.tp_size * full->shard.pp_size, 1) << "sharding a shard";
    auto st = std::make_shared<ShardStorage>();
    st->full = full;
    auto m = std::make_shared<ModelWeights>();
    m->config = c;
    m->storage.push_back(st);

    const int64_t d = c.head_dim, nh = c.num_attention_heads / tp, nkv = c.num_key_value_heads / tp;
    const Range heads{tp_rank * nh, (tp_rank + 1) * nh}, kv_heads{tp_rank * nkv, (tp_rank + 1) * nkv};
    const Range q_rows{heads.begin * d, heads.end * d}, kv_rows{kv_heads.begin * d, kv_heads.end * d};
    const Range units = expert_units(c.intermediate_size, tp_rank, tp);
    const Range vocab = vocab_rows(c.vocab_size, tp_rank, tp);
    const Range layers = stage_layers(c.num_hidden_layers, pp_rank, pp);
    m->config.num_attention_heads = nh;
    m->config.num_key_value_heads = nkv;
    m->config.intermediate_size = units.size();
    m->shard = {tp_rank, tp, pp_rank, pp, layers.begin, layers.end, vocab.begin, c.vocab_size};

    if (pp_rank == 0) {
        VOLT_RETURN_IF_ERROR(check_sliceable(full->embed_tokens, "embed_tokens"));
        m->embed_tokens = row_slice(full->embed_tokens, vocab);
    }
    if (pp_rank == pp - 1) {
        VOLT_RETURN_IF_ERROR(check_sliceable(full->lm_head, "lm_head"));
        m->norm = full->norm;
        VOLT_ASSIGN_OR_RETURN(m->lm_head, dense_rows(full->lm_head, vocab, *st, "lm_head"));
    }
    m->layers.resize(full->layers.size());
    for (int64_t l = layers.begin; l < layers.end; ++l) {
        const LayerWeights& f = full->layers[l];
        LayerWeights& s = m->layers[l];
        for (const auto* w : {&f.q_proj, &f.k_proj, &f.v_proj, &f.o_proj})
            VOLT_RETURN_IF_ERROR(check_sliceable(*w, "attention weights"));
        s.input_layernorm = f.input_layernorm;
        s.post_attention_layernorm = f.post_attention_layernorm;
        s.router = f.router;
        if (tp == 1) {
            s = f;
            continue;
        }
        VOLT_ASSIGN_OR_RETURN(s.q_proj, dense_rows(f.q_proj, q_rows, *st, "q_proj"));
        VOLT_ASSIGN_OR_RETURN(s.k_proj, dense_rows(f.k_proj, kv_rows, *st, "k_proj"));
        VOLT_ASSIGN_OR_RETURN(s.v_proj, dense_rows(f.v_proj, kv_rows, *st, "v_proj"));
        s.sinks = vector_slice(f.sinks, heads);
        VOLT_ASSIGN_OR_RETURN(s.o_proj, dense_columns(f.o_proj, q_rows, tp_rank == 0, *st, "o_proj"));
        s.gate_up = gate_up_slice(f.gate_up, units, *st);
        s.down = down_slice(f.down, units, tp_rank == 0, *st);
    }
    return std::shared_ptr<const ModelWeights>(std::move(m));
}

}  // namespace volt::model
