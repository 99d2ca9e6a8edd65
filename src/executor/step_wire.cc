#include "executor/step_wire.h"

#include <cstring>
#include <type_traits>

#include "core/check.h"

namespace volt::executor {

using namespace engine;  // the seam's types

namespace {

class Writer {
  public:
    explicit Writer(std::vector<uint8_t>* out) : out_(out) {}
    // Only types whose bytes are all value (no padding: a struct with holes would send whatever the
    // holes hold; LogitsRow goes field by field) or floats.
    template <typename T>
    void pod(const T& v) {
        static_assert(std::has_unique_object_representations_v<T> || std::is_floating_point_v<T>);
        const auto* p = reinterpret_cast<const uint8_t*>(&v);
        out_->insert(out_->end(), p, p + sizeof(T));
    }
    template <typename T>
    void vec(const std::vector<T>& v) {
        static_assert(std::has_unique_object_representations_v<T> || std::is_floating_point_v<T>);
        pod<int64_t>(static_cast<int64_t>(v.size()));
        const auto* p = reinterpret_cast<const uint8_t*>(v.data());
        out_->insert(out_->end(), p, p + v.size() * sizeof(T));
    }

  private:
    std::vector<uint8_t>* out_;
};

class Reader {
  public:
    Reader(const uint8_t* data, int64_t bytes) : p_(data), left_(bytes) {}
    template <typename T>
    bool pod(T* v) {
        if (left_ < static_cast<int64_t>(sizeof(T))) return false;
        std::memcpy(v, p_, sizeof(T));
        p_ += sizeof(T);
        left_ -= static_cast<int64_t>(sizeof(T));
        return true;
    }
    template <typename T>
    bool vec(std::vector<T>* v) {
        int64_t n = 0;
        if (!pod(&n) || n < 0 || n > left_ / static_cast<int64_t>(sizeof(T))) return false;
        v->resize(static_cast<size_t>(n));
        std::memcpy(v->data(), p_, static_cast<size_t>(n) * sizeof(T));
        p_ += n * static_cast<int64_t>(sizeof(T));
        left_ -= n * static_cast<int64_t>(sizeof(T));
        return true;
    }
    int64_t left() const { return left_; }

  private:
    const uint8_t* p_;
    int64_t left_;
};

bool reads_history(const SamplingParams& p) {
    return p.presence_penalty != 0 || p.frequency_penalty != 0 || p.repetition_penalty != 1.0f;
}

}  // namespace

void encode_step(const StepBatch& b, std::vector<uint8_t>* out, bool sampling) {
    VOLT_CHECK(b.deferred.empty()) << "encode_step needs the deferred tokens resolved";
    Writer w(out);
    w.pod(b.num_tokens);
    w.pod(b.num_seqs);
    w.pod(b.vocab_size_real);
    w.vec(b.token_ids);
    w.vec(b.positions);
    for (int g = 0; g < kNumKvGroups; ++g) w.vec(b.slot_mapping[g]);
    w.vec(b.query_start_loc);
    w.vec(b.context_lens);
    w.vec(b.seq_slots);
    w.vec(b.request_index);
    w.vec(b.swap_out);
    w.vec(b.swap_in);
    w.vec(b.table_updates);
    w.vec(b.copies);
    w.pod(static_cast<int64_t>(b.logits_rows.size()));
    for (const LogitsRow& r : b.logits_rows) {  // field by field: LogitsRow has padding
        w.pod(r.row);
        w.pod(r.seq);
        w.pod(r.target);
        w.pod(r.seed);
        w.pod(r.output_index);
        w.pod(r.num_logprobs);
        w.pod(static_cast<uint8_t>(r.feeds_slot));
    }
    std::vector<int32_t> prompt_lens(static_cast<size_t>(b.num_seqs), 0);
    for (size_t i = 0; i < b.sampling.size() && i < prompt_lens.size(); ++i)
        if (b.sampling[i].prompt != nullptr)
            prompt_lens[i] = static_cast<int32_t>(b.sampling[i].prompt->size());
    w.vec(prompt_lens);
    w.pod(static_cast<int64_t>(sampling ? b.sampling.size() : 0));
    if (!sampling) return;
    std::vector<int32_t> bias_ids;
    std::vector<float> bias_values;
    for (const SeqSampling& ss : b.sampling) {
        VOLT_CHECK(!ss.output_deferred) << "encode_step needs the deferred tokens resolved";
        const bool has = ss.params != nullptr;
        w.pod<uint8_t>(has);
        if (!has) continue;
        const SamplingParams& p = *ss.params;
        for (const float f : {p.temperature, p.top_p, p.min_p}) w.pod(f);
        w.pod(p.top_k);
        for (const float f : {p.presence_penalty, p.frequency_penalty, p.repetition_penalty}) w.pod(f);
        bias_ids.clear();
        bias_values.clear();
        for (const auto& [id, v] : p.logit_bias) {
            bias_ids.push_back(id);
            bias_values.push_back(v);
        }
        w.vec(bias_ids);
        w.vec(bias_values);
        w.vec(p.allowed_token_ids);
        static const std::vector<int32_t> kNone;
        const bool history = reads_history(p);
        w.vec(history && ss.prompt ? *ss.prompt : kNone);
        w.vec(history && ss.output ? *ss.output : kNone);
    }
}

namespace {
constexpr int64_t kLogitsRowBytes = 4 + 4 + 4 + 8 + 8 + 4 + 1;
constexpr int64_t kSamplingBytes = 1 + 7 * 4;

int64_t blocks_per_seq(const CacheConfig& c) { return (c.max_model_len + c.block_size - 1) / c.block_size; }

// The first field of `b` out of range of `l`, or empty.
std::string out_of_range(const StepBatch& b, const std::vector<SamplingParams>& params,
                         const std::vector<bool>& has, const WireStep& w, const StepLimits& l) {
    const CacheConfig& c = l.cache;
    const int64_t T = b.num_tokens, S = b.num_seqs, V = l.vocab_size;
    auto in = [](int64_t v, int64_t lo, int64_t hi) { return v >= lo && v < hi; };
    auto ids_ok = [&](const std::vector<int32_t>& ids) {
        for (int32_t id : ids)
            if (!in(id, 0, V)) return false;
        return true;
    };
    if (!in(T, 0, c.max_num_batched_tokens + 1)) return "num_tokens " + std::to_string(T);
    if (!in(S, 0, c.max_num_seqs + 1)) return "num_seqs " + std::to_string(S);
    if (!in(b.vocab_size_real, 0, V + 1)) return "vocab_size_real " + std::to_string(b.vocab_size_real);
    if (static_cast<int64_t>(b.token_ids.size()) != T || !ids_ok(b.token_ids)) return "token_ids";
    if (static_cast<int64_t>(b.positions.size()) != T) return "positions";
    for (int32_t p : b.positions)
        if (!in(p, 0, c.max_model_len)) return "position " + std::to_string(p);
    for (int g = 0; g < kNumKvGroups; ++g) {
        const auto& sm = b.slot_mapping[g];
        if (!sm.empty() && static_cast<int64_t>(sm.size()) != T) return "slot_mapping";
        for (int64_t slot : sm)
            if (!in(slot, -1, c.num_blocks[g] * c.block_size)) return "slot mapping " + std::to_string(slot);
    }
    if (static_cast<int64_t>(b.query_start_loc.size()) != S + 1 || b.query_start_loc[0] != 0 ||
        b.query_start_loc[S] != T)
        return "query_start_loc";
    if (static_cast<int64_t>(b.context_lens.size()) != S || static_cast<int64_t>(b.seq_slots.size()) != S)
        return "context_lens or seq_slots";
    if (!b.request_index.empty() && static_cast<int64_t>(b.request_index.size()) != S) return "request_index";
    for (int64_t i = 0; i < S; ++i) {
        const int64_t q = b.query_start_loc[i + 1] - b.query_start_loc[i];
        if (q < 0 || !in(b.context_lens[i], q, c.max_model_len + 1))
            return "query or context length of sequence " + std::to_string(i);
        if (!in(b.seq_slots[i], 0, c.max_num_seqs)) return "seq slot " + std::to_string(b.seq_slots[i]);
    }
    for (const auto* swaps : {&b.swap_out, &b.swap_in})
        for (const BlockSwap& sw : *swaps)
            if (!in(sw.group, 0, kNumKvGroups) || !in(sw.device, 0, c.num_blocks[sw.group]) ||
                !in(sw.host, 0, c.num_host_blocks[sw.group]))
                return "block swap (group " + std::to_string(sw.group) + ", device " +
                       std::to_string(sw.device) + ", host " + std::to_string(sw.host) + ")";
    for (const BlockTableUpdate& u : b.table_updates) {
        const bool drop = u.index == -1 && u.block == -1;
        if (!in(u.slot, 0, c.max_num_seqs) || !in(u.group, 0, kNumKvGroups) ||
            (!drop && (!in(u.index, 0, blocks_per_seq(c)) || !in(u.block, -1, c.num_blocks[u.group]))))
            return "block-table update (slot " + std::to_string(u.slot) + ", group " +
                   std::to_string(u.group) + ", index " + std::to_string(u.index) + ", block " +
                   std::to_string(u.block) + ")";
    }
    for (const BlockCopy& cp : b.copies)
        if (!in(cp.group, 0, kNumKvGroups) || !in(cp.src, 0, c.num_blocks[cp.group]) ||
            !in(cp.dst, 0, c.num_blocks[cp.group]))
            return "block copy (group " + std::to_string(cp.group) + ", " + std::to_string(cp.src) + " -> " +
                   std::to_string(cp.dst) + ")";
    if (static_cast<int64_t>(b.logits_rows.size()) > T + S) return "logits rows";
    for (const LogitsRow& r : b.logits_rows) {
        if (!in(r.row, 0, T) || !in(r.seq, 0, S) || !in(r.target, -1, V) ||
            !in(r.num_logprobs, -1, kMaxLogprobs + 1))
            return "logits row (row " + std::to_string(r.row) + ", seq " + std::to_string(r.seq) + ")";
        if (l.samples && r.target < 0 && (r.seq >= static_cast<int64_t>(has.size()) || !has[r.seq]))
            return "a sample row of sequence " + std::to_string(r.seq) + ", which has no sampling parameters";
    }
    if (static_cast<int64_t>(w.prompt_lens.size()) != S) return "prompt lengths";
    for (int32_t n : w.prompt_lens)
        if (!in(n, 0, c.max_model_len + 1)) return "prompt length " + std::to_string(n);
    for (size_t s = 0; s < params.size(); ++s) {
        const SamplingParams& p = params[s];
        if (static_cast<int64_t>(p.logit_bias.size()) > V ||
            static_cast<int64_t>(p.allowed_token_ids.size()) > V ||
            static_cast<int64_t>(w.prompts[s].size()) > c.max_model_len ||
            static_cast<int64_t>(w.outputs[s].size()) > c.max_model_len)
            return "the sampling lists of sequence " + std::to_string(s);
        for (const auto& [id, v] : p.logit_bias)
            if (!in(id, 0, V)) return "logit_bias id " + std::to_string(id);
        if (!ids_ok(p.allowed_token_ids) || !ids_ok(w.prompts[s]) || !ids_ok(w.outputs[s]))
            return "a token id in the sampling lists of sequence " + std::to_string(s);
    }
    return "";
}
}  // namespace

int64_t max_step_bytes(const StepLimits& l) {
    const CacheConfig& c = l.cache;
    const int64_t T = c.max_num_batched_tokens, S = c.max_num_seqs, V = l.vocab_size;
    int64_t blocks = 0;
    for (int g = 0; g < kNumKvGroups; ++g) blocks += c.num_blocks[g] + c.num_host_blocks[g];
    const int64_t vectors = 15 * 8;  // the counts of the vectors above, generously
    const int64_t per_token = 4 + 4 + kNumKvGroups * 8;
    const int64_t per_seq =
        4 + 4 + 4 + 8 + 4 + kSamplingBytes + 5 * 8 + V * (4 + 4) + V * 4 + 2 * c.max_model_len * 4;
    const int64_t updates = (S * (blocks_per_seq(c) + 1) * kNumKvGroups + S) * 16;  // each table rewritten
    return 3 * 8 + vectors + T * per_token + 4 + S * per_seq + 2 * blocks * 12 + updates +
           S * kNumKvGroups * 12 + (T + S) * kLogitsRowBytes;
}

Status check_cache_config(const CacheConfig& c) {
    constexpr int64_t kBig = int64_t{1} << 31;
    bool ok = c.block_size >= 1 && c.block_size <= (1 << 20) && c.max_num_seqs >= 1 &&
              c.max_num_seqs <= (1 << 20) && c.max_num_batched_tokens >= 1 &&
              c.max_num_batched_tokens <= (1 << 24) && c.max_model_len >= 1 && c.max_model_len <= (1 << 24);
    for (int g = 0; g < kNumKvGroups; ++g)
        ok = ok && c.num_blocks[g] >= 0 && c.num_blocks[g] < kBig && c.num_host_blocks[g] >= 0 &&
             c.num_host_blocks[g] < kBig;
    if (ok) return Status::ok();
    return invalid_argument(
        "init_cache from rank 0 out of range (block size " + std::to_string(c.block_size) + ", blocks " +
        std::to_string(c.num_blocks[0]) + " + " + std::to_string(c.num_blocks[1]) + ", seqs " +
        std::to_string(c.max_num_seqs) + ", step rows " + std::to_string(c.max_num_batched_tokens) +
        ", max-model-len " + std::to_string(c.max_model_len) + ")");
}

Status decode_step(const uint8_t* data, int64_t bytes, const StepLimits& limits, WireStep* out) {
    const Status bad =
        internal_error("a step from rank 0 is malformed (" + std::to_string(bytes) + " bytes)");
    Reader r(data, bytes);
    StepBatch& b = out->batch;
    b.clear();
    bool ok = r.pod(&b.num_tokens) && r.pod(&b.num_seqs) && r.pod(&b.vocab_size_real) &&
              r.vec(&b.token_ids) && r.vec(&b.positions);
    for (int g = 0; g < kNumKvGroups && ok; ++g) ok = r.vec(&b.slot_mapping[g]);
    ok = ok && r.vec(&b.query_start_loc) && r.vec(&b.context_lens) && r.vec(&b.seq_slots) &&
         r.vec(&b.request_index) && r.vec(&b.swap_out) && r.vec(&b.swap_in) && r.vec(&b.table_updates) &&
         r.vec(&b.copies);
    int64_t R = 0;
    ok = ok && r.pod(&R) && R >= 0 && R <= r.left() / kLogitsRowBytes;
    if (!ok) return bad;
    b.logits_rows.resize(static_cast<size_t>(R));
    for (LogitsRow& row : b.logits_rows) {
        uint8_t feeds = 0;
        if (!r.pod(&row.row) || !r.pod(&row.seq) || !r.pod(&row.target) || !r.pod(&row.seed) ||
            !r.pod(&row.output_index) || !r.pod(&row.num_logprobs) || !r.pod(&feeds) || feeds > 1)
            return bad;
        row.feeds_slot = feeds != 0;
    }
    int64_t S = 0;
    if (!r.vec(&out->prompt_lens) || !r.pod(&S) || S < 0 || S > r.left()) return bad;
    out->params.assign(S, SamplingParams());
    out->prompts.assign(S, {});
    out->outputs.assign(S, {});
    b.sampling.assign(S, SeqSampling());
    std::vector<bool> has_params(S, false);
    std::vector<int32_t> bias_ids;
    std::vector<float> bias_values;
    for (int64_t s = 0; s < S; ++s) {
        uint8_t has = 0;
        if (!r.pod(&has) || has > 1) return bad;
        if (!has) continue;
        SamplingParams& p = out->params[s];
        if (!r.pod(&p.temperature) || !r.pod(&p.top_p) || !r.pod(&p.min_p) || !r.pod(&p.top_k) ||
            !r.pod(&p.presence_penalty) || !r.pod(&p.frequency_penalty) || !r.pod(&p.repetition_penalty) ||
            !r.vec(&bias_ids) || !r.vec(&bias_values) || bias_ids.size() != bias_values.size() ||
            !r.vec(&p.allowed_token_ids) || !r.vec(&out->prompts[s]) || !r.vec(&out->outputs[s]))
            return bad;
        p.logit_bias.clear();
        for (size_t j = 0; j < bias_ids.size(); ++j) p.logit_bias.emplace_back(bias_ids[j], bias_values[j]);
        b.sampling[s] = {&p, &out->prompts[s], &out->outputs[s], false};
        has_params[s] = true;
    }
    if (r.left() != 0) return bad;
    if (S > b.num_seqs)
        return invalid_argument("a step from rank 0 has sampling for " + std::to_string(S) +
                                " sequences of " + std::to_string(b.num_seqs));
    const std::string field = out_of_range(b, out->params, has_params, *out, limits);
    if (!field.empty())
        return invalid_argument("a step from rank 0 is out of range for this worker (" + field +
                                "): a corrupted or foreign message");
    return Status::ok();
}

Status check_sampled_ids(const int32_t* tokens, int64_t rows, const int32_t* top_ids, int64_t top,
                         int64_t V) {
    for (int64_t i = 0; i < rows; ++i)
        if (tokens[i] < 0 || tokens[i] >= V)
            return invalid_argument("the output rank returned token id " + std::to_string(tokens[i]) +
                                    " for logits row " + std::to_string(i) + ", outside the vocabulary of " +
                                    std::to_string(V));
    for (int64_t i = 0; i < top; ++i)
        if (top_ids[i] < -1 || top_ids[i] >= V)
            return invalid_argument("the output rank returned top-logprob id " + std::to_string(top_ids[i]) +
                                    ", outside the vocabulary of " + std::to_string(V));
    return Status::ok();
}

}  // namespace volt::executor
