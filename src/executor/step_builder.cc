#include "executor/step_builder.h"

#include <algorithm>

#include "core/check.h"

namespace volt::executor {

using engine::BlockTableUpdate;
using engine::LogitsRow;
using engine::SamplingParams;
using engine::SeqSampling;
using engine::StepBatch;

void StepBuilder::init(int64_t max_num_seqs) {
    for (auto& t : tables_) t.assign(max_num_seqs, {});
}

void StepBuilder::apply_table_updates(const StepBatch& b) {
    for (const BlockTableUpdate& u : b.table_updates) {
        auto& t = tables_[u.group][u.slot];
        if (u.index < 0) {
            t.clear();
            continue;
        }
        if (static_cast<int64_t>(t.size()) <= u.index) t.resize(u.index + 1, -1);
        t[u.index] = u.block;
    }
}

const model::HostStep& StepBuilder::build(const StepBatch& b) {
    VOLT_CHECK(b.deferred.empty()) << "StepBuilder::build needs resolved token ids";
    model::HostStep& s = step_;
    s.token_ids = b.token_ids;
    s.positions = b.positions;
    s.query_start_loc = b.query_start_loc;
    s.seq_lens = b.context_lens;
    for (int g = 0; g < ops::kNumKvGroups; ++g) {
        s.slot_mapping[g] = b.slot_mapping[g];
        int64_t max_blocks = 1;
        for (int64_t i = 0; i < b.num_seqs; ++i)
            max_blocks = std::max<int64_t>(max_blocks, tables_[g][b.seq_slots[i]].size());
        s.max_blocks[g] = max_blocks;
        auto& st = s.block_tables[g];
        st.assign(b.num_seqs * max_blocks, -1);
        for (int64_t i = 0; i < b.num_seqs; ++i) {
            const auto& t = tables_[g][b.seq_slots[i]];
            std::copy(t.begin(), t.end(), st.begin() + i * max_blocks);
        }
    }
    s.logits_rows.resize(b.logits_rows.size());
    for (size_t r = 0; r < b.logits_rows.size(); ++r) s.logits_rows[r] = b.logits_rows[r].row;
    return s;
}

const std::vector<ops::SampleRow>& StepBuilder::sample_rows(const StepBatch& b, int64_t first, int64_t count,
                                                            const float* logits, int64_t V) {
    rows_.assign(count, {});
    bias_ids_.resize(count);
    bias_values_.resize(count);
    for (int64_t i = 0; i < count; ++i) {
        const LogitsRow& lr = b.logits_rows[first + i];
        ops::SampleRow& row = rows_[i];
        row.logits = logits + i * V;
        row.target = lr.target;
        row.num_logprobs = lr.num_logprobs;
        if (lr.target >= 0) continue;
        const SeqSampling& ss = b.sampling[lr.seq];
        VOLT_CHECK(!ss.output_deferred) << "StepBuilder::sample_rows needs the deferred token resolved";
        const SamplingParams& p = *ss.params;
        row.temperature = p.temperature;
        row.top_p = p.top_p;
        row.min_p = p.min_p;
        row.top_k = p.top_k;
        row.presence_penalty = p.presence_penalty;
        row.frequency_penalty = p.frequency_penalty;
        row.repetition_penalty = p.repetition_penalty;
        bias_ids_[i].clear();
        bias_values_[i].clear();
        for (const auto& [id, v] : p.logit_bias) {
            bias_ids_[i].push_back(id);
            bias_values_[i].push_back(v);
        }
        row.bias_ids = bias_ids_[i].data();
        row.bias_values = bias_values_[i].data();
        row.num_bias = static_cast<int64_t>(bias_ids_[i].size());
        row.allowed_ids = p.allowed_token_ids.data();
        row.num_allowed = static_cast<int64_t>(p.allowed_token_ids.size());
        row.prompt_ids = ss.prompt->data();
        row.num_prompt = static_cast<int64_t>(ss.prompt->size());
        row.output_ids = ss.output->data();
        row.num_output = static_cast<int64_t>(ss.output->size());
        row.seed = lr.seed;
        row.counter = static_cast<uint64_t>(lr.output_index);
    }
    return rows_;
}

void fill_result(const StepBatch& b, const std::vector<int32_t>& tokens, const std::vector<float>& logprobs,
                 const std::vector<int32_t>& top_ids, const std::vector<float>& top_logprobs, int64_t max_top,
                 engine::StepResult* result) {
    const auto R = static_cast<int64_t>(b.logits_rows.size());
    result->tokens.assign(tokens.begin(), tokens.begin() + R);
    result->logprobs.clear();
    bool any_lp = false;
    for (const LogitsRow& r : b.logits_rows) any_lp = any_lp || r.num_logprobs >= 0;
    if (!any_lp) return;
    result->logprobs.resize(R);
    for (int64_t r = 0; r < R; ++r) {
        const int32_t k = b.logits_rows[r].num_logprobs;
        if (k < 0) continue;
        engine::TokenLogprob& lp = result->logprobs[r];
        lp.token = tokens[r];
        lp.logprob = logprobs[r];
        for (int32_t j = 0; j < k; ++j)
            if (top_ids[r * max_top + j] >= 0)
                lp.top.emplace_back(top_ids[r * max_top + j], top_logprobs[r * max_top + j]);
    }
}

}  // namespace volt::executor
