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
    template <typename T>
    void pod(const T& v) {
        static_assert(std::is_trivially_copyable_v<T>);
        const auto* p = reinterpret_cast<const uint8_t*>(&v);
        out_->insert(out_->end(), p, p + sizeof(T));
    }
    template <typename T>
    void vec(const std::vector<T>& v) {
        static_assert(std::is_trivially_copyable_v<T>);
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

// The sampling fields of SamplingParams the sample op reads (StepBuilder::sample_rows).
struct WireSampling {
    float temperature, top_p, min_p;
    int32_t top_k;
    float presence_penalty, frequency_penalty, repetition_penalty;
};

bool reads_history(const SamplingParams& p) {
    return p.presence_penalty != 0 || p.frequency_penalty != 0 || p.repetition_penalty != 1.0f;
}

}  // namespace

void encode_step(const StepBatch& b, std::vector<uint8_t>* out) {
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
    w.vec(b.logits_rows);
    w.pod(static_cast<int64_t>(b.sampling.size()));
    std::vector<int32_t> bias_ids;
    std::vector<float> bias_values;
    for (const SeqSampling& ss : b.sampling) {
        VOLT_CHECK(!ss.output_deferred) << "encode_step needs the deferred tokens resolved";
        const bool has = ss.params != nullptr;
        w.pod<uint8_t>(has);
        if (!has) continue;
        const SamplingParams& p = *ss.params;
        w.pod(WireSampling{p.temperature, p.top_p, p.min_p, p.top_k, p.presence_penalty, p.frequency_penalty,
                           p.repetition_penalty});
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

Status decode_step(const uint8_t* data, int64_t bytes, WireStep* out) {
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
         r.vec(&b.copies) && r.vec(&b.logits_rows);
    int64_t S = 0;
    ok = ok && r.pod(&S) && S >= 0 && S <= r.left();
    if (!ok) return bad;
    out->params.assign(S, SamplingParams());
    out->prompts.assign(S, {});
    out->outputs.assign(S, {});
    b.sampling.assign(S, SeqSampling());
    std::vector<int32_t> bias_ids;
    std::vector<float> bias_values;
    for (int64_t s = 0; s < S; ++s) {
        uint8_t has = 0;
        if (!r.pod(&has)) return bad;
        if (!has) continue;
        WireSampling ws{};
        SamplingParams& p = out->params[s];
        if (!r.pod(&ws) || !r.vec(&bias_ids) || !r.vec(&bias_values) ||
            bias_ids.size() != bias_values.size() || !r.vec(&p.allowed_token_ids) ||
            !r.vec(&out->prompts[s]) || !r.vec(&out->outputs[s]))
            return bad;
        p.logit_bias.clear();
        for (size_t j = 0; j < bias_ids.size(); ++j) p.logit_bias.emplace_back(bias_ids[j], bias_values[j]);
        p.temperature = ws.temperature;
        p.top_p = ws.top_p;
        p.min_p = ws.min_p;
        p.top_k = ws.top_k;
        p.presence_penalty = ws.presence_penalty;
        p.frequency_penalty = ws.frequency_penalty;
        p.repetition_penalty = ws.repetition_penalty;
        b.sampling[s] = {&p, &out->prompts[s], &out->outputs[s], false};
    }
    if (r.left() != 0) return bad;
    for (const LogitsRow& row : b.logits_rows)
        if (row.row < 0 || row.row >= b.num_tokens || row.seq < 0 || row.seq >= S) return bad;
    return Status::ok();
}

}  // namespace volt::executor
