#include "executor/step_builder.h"

#include <algorithm>
#include <cstdlib>

#include "core/check.h"

namespace volt::executor {

using engine::BlockTableUpdate;
using engine::LogitsRow;
using engine::SamplingParams;
using engine::SeqSampling;
using engine::StepBatch;

void StepBuilder::init(int64_t max_num_seqs, int64_t table_width) {
    for (auto& t : tables_) t.assign(max_num_seqs, {});
    table_width_ = std::max<int64_t>(table_width, 0);
    table_rows_ = max_num_seqs + 1;  // and the padding row
    widen_ = false;
    touched_.clear();
    is_touched_.assign(static_cast<size_t>(ops::kNumKvGroups * std::max<int64_t>(max_num_seqs, 0)), 0);
}

void StepBuilder::apply_table_updates(const StepBatch& b) {
    const auto slots = static_cast<int64_t>(tables_[0].size());
    for (const BlockTableUpdate& u : b.table_updates) {
        VOLT_CHECK(u.group >= 0 && u.group < ops::kNumKvGroups && u.slot >= 0 && u.slot < slots)
            << "table update of group " << u.group << " slot " << u.slot;
        auto& t = tables_[u.group][u.slot];
        if (table_width_ > 0) {
            uint8_t& mark = is_touched_[u.group * slots + u.slot];
            if (!mark) {
                mark = 1;
                touched_.push_back({u.group, u.slot, false, t});
            }
            if (u.index < 0) {
                // Cleared: the device row is filled with -1 and written anew (a slot's next sequence, a
                // swap-out, a recompute preemption).
                for (Touched& r : touched_)
                    if (r.group == u.group && r.slot == u.slot) r.cleared = true;
            } else if (u.index >= table_width_) {
                widen_ = true;
            }
        }
        if (u.index < 0) {
            t.clear();
            continue;
        }
        if (static_cast<int64_t>(t.size()) <= u.index) t.resize(u.index + 1, -1);
        t[u.index] = u.block;
    }
}

void StepBuilder::table_changes(model::HostStep* s) {
    const auto slots = static_cast<int64_t>(tables_[0].size());
    s->table_pairs.clear();
    s->num_table_fills = 0;
    writes_.clear();
    auto flat = [&](int g, int64_t slot, int64_t j) {
        return static_cast<int32_t>((g * table_rows_ + slot) * table_width_ + j);
    };
    if (widen_) {
        // New tables (all -1): every held entry, in a width with room to spare.
        int64_t need = table_width_;
        for (const auto& group : tables_)
            for (const auto& t : group) need = std::max<int64_t>(need, static_cast<int64_t>(t.size()));
        table_width_ = std::max(need, table_width_ * 2);
        VOLT_CHECK(ops::kNumKvGroups * table_rows_ * table_width_ < (int64_t{1} << 31))
            << "block tables of " << table_width_ << " entries";
        for (int g = 0; g < ops::kNumKvGroups; ++g)
            for (int64_t slot = 0; slot < slots; ++slot) {
                const auto& t = tables_[g][slot];
                for (size_t j = 0; j < t.size(); ++j)
                    if (t[j] >= 0) writes_.insert(writes_.end(), {flat(g, slot, j), t[j]});
            }
    } else {
        for (const Touched& r : touched_) {
            const auto& now = tables_[r.group][r.slot];
            const auto& was = r.before;
            if (r.cleared) {
                if (!was.empty()) {
                    s->table_pairs.insert(s->table_pairs.end(),
                                          {flat(r.group, r.slot, 0), static_cast<int32_t>(was.size())});
                    ++s->num_table_fills;
                }
                for (size_t j = 0; j < now.size(); ++j)
                    if (now[j] >= 0) writes_.insert(writes_.end(), {flat(r.group, r.slot, j), now[j]});
                continue;
            }
            const size_t n = std::max(was.size(), now.size());
            for (size_t j = 0; j < n; ++j) {
                const int32_t a = j < was.size() ? was[j] : -1, b = j < now.size() ? now[j] : -1;
                if (a != b) writes_.insert(writes_.end(), {flat(r.group, r.slot, j), b});
            }
        }
    }
    s->table_pairs.insert(s->table_pairs.end(), writes_.begin(), writes_.end());
    s->table_num_rows = table_rows_;
    s->table_width = table_width_;
    for (const Touched& r : touched_) is_touched_[r.group * slots + r.slot] = 0;
    touched_.clear();
    widen_ = false;
}

const model::HostStep& StepBuilder::build(const StepBatch& b, const std::vector<int32_t>* prompt_lens,
                                          bool deferred_on_device) {
    VOLT_CHECK(deferred_on_device || b.deferred.empty()) << "StepBuilder::build needs resolved token ids";
    model::HostStep& s = step_;
    // Prompt rows (sequence index below the prompt's length) first, generated rows after
    // (ForwardBatch::num_prompt_rows): a sequence with both (recomputed after a preemption) becomes two
    // parts sharing its block table; its keys are all written before attention reads any, so the prompt
    // part's queries see exactly the keys they would have seen in one piece.
    std::vector<Part>& parts = parts_;
    parts.clear();
    int64_t P = 0;
    bool identity = true;
    for (int pass = 0; pass < 2; ++pass) {
        for (int64_t i = 0; i < b.num_seqs; ++i) {
            const int64_t qs = b.query_start_loc[i], qe = b.query_start_loc[i + 1], q_len = qe - qs;
            const int64_t first_index = b.context_lens[i] - q_len;  // sequence index of row qs
            const auto* prompt = static_cast<size_t>(i) < b.sampling.size() ? b.sampling[i].prompt : nullptr;
            const int64_t prompt_len = prompt_lens != nullptr ? (*prompt_lens)[i]
                                       : prompt != nullptr    ? static_cast<int64_t>(prompt->size())
                                                              : 0;
            const int64_t split = qs + std::clamp<int64_t>(prompt_len - first_index, 0, q_len);
            if (pass == 0 && split > qs) {
                parts.push_back({i, qs, split, static_cast<int32_t>(b.context_lens[i] - (qe - split))});
                P += split - qs;
            }
            if (pass == 1 && qe > split) parts.push_back({i, split, qe, b.context_lens[i]});
        }
    }
    int64_t row = 0;
    for (const Part& p : parts) {
        identity = identity && p.begin == row;
        row += p.end - p.begin;
    }
    identity = identity && static_cast<int64_t>(parts.size()) == b.num_seqs;
    s.num_prompt_rows = P;
    identity_ = identity;
    if (identity) {
        s.token_ids = b.token_ids;
        s.positions = b.positions;
        s.query_start_loc = b.query_start_loc;
        s.seq_lens = b.context_lens;
        for (int g = 0; g < ops::kNumKvGroups; ++g) s.slot_mapping[g] = b.slot_mapping[g];
    } else {
        const auto T = static_cast<int64_t>(b.token_ids.size());
        new_row_.assign(T, -1);
        s.token_ids.clear();
        s.positions.clear();
        s.query_start_loc.assign(1, 0);
        s.seq_lens.clear();
        for (int g = 0; g < ops::kNumKvGroups; ++g) s.slot_mapping[g].clear();
        for (const Part& p : parts) {
            for (int64_t r = p.begin; r < p.end; ++r) {
                new_row_[r] = static_cast<int32_t>(s.token_ids.size());
                s.token_ids.push_back(b.token_ids[r]);
                s.positions.push_back(b.positions[r]);
                for (int g = 0; g < ops::kNumKvGroups; ++g)
                    if (!b.slot_mapping[g].empty()) s.slot_mapping[g].push_back(b.slot_mapping[g][r]);
            }
            s.query_start_loc.push_back(static_cast<int32_t>(s.token_ids.size()));
            s.seq_lens.push_back(p.keys);
        }
    }
    const auto S = static_cast<int64_t>(parts.size());
    if (table_width_ > 0) {
        s.table_rows.resize(S);
        for (int64_t i = 0; i < S; ++i) s.table_rows[i] = b.seq_slots[parts[i].seq];
        table_changes(&s);
        for (int g = 0; g < ops::kNumKvGroups; ++g) {
            s.block_tables[g].clear();
            s.max_blocks[g] = table_width_;
        }
    }
    if (table_width_ == 0) {
        s.table_rows.clear();
        s.table_pairs.clear();
        s.num_table_fills = 0;
    }
    for (int g = 0; g < ops::kNumKvGroups && table_width_ == 0; ++g) {
        int64_t max_blocks = 1;
        for (const Part& p : parts)
            max_blocks = std::max<int64_t>(max_blocks, tables_[g][b.seq_slots[p.seq]].size());
        s.max_blocks[g] = max_blocks;
        auto& st = s.block_tables[g];
        st.assign(S * max_blocks, -1);
        for (int64_t i = 0; i < S; ++i) {
            const auto& t = tables_[g][b.seq_slots[parts[i].seq]];
            std::copy(t.begin(), t.end(), st.begin() + i * max_blocks);
        }
    }
    s.logits_rows.resize(b.logits_rows.size());
    for (size_t r = 0; r < b.logits_rows.size(); ++r)
        s.logits_rows[r] = identity ? b.logits_rows[r].row : new_row_[b.logits_rows[r].row];
    return s;
}

std::vector<std::pair<int64_t, int64_t>> split_micro_batches(const std::vector<int32_t>& qsl, int64_t m) {
    const auto S = static_cast<int64_t>(qsl.size()) - 1;
    std::vector<std::pair<int64_t, int64_t>> ranges;
    if (S <= 0) return ranges;
    m = std::clamp<int64_t>(m, 1, S);
    const int64_t T = qsl[S] - qsl[0];
    int64_t begin = 0;
    for (int64_t k = 1; k < m; ++k) {
        // The cut in (begin, S - (m - k)]: at least one sequence before it and one for each range after.
        int64_t best = begin + 1;
        for (int64_t cut = begin + 1; cut <= S - (m - k); ++cut) {
            const int64_t d = std::abs((qsl[cut] - qsl[0]) * m - k * T);
            if (d < std::abs((qsl[best] - qsl[0]) * m - k * T)) best = cut;
        }
        ranges.emplace_back(begin, best);
        begin = best;
    }
    ranges.emplace_back(begin, S);
    return ranges;
}

void StepBuilder::micro_steps(const std::vector<std::pair<int64_t, int64_t>>& ranges,
                              std::vector<MicroStep>* out) const {
    const model::HostStep& s = step_;
    const int64_t S = s.num_seqs(), T = s.num_tokens();
    VOLT_CHECK_EQ(static_cast<int64_t>(parts_.size()), S);
    out->resize(ranges.size());
    std::vector<int32_t> mb_row(static_cast<size_t>(T), -1);  // HostStep row -> row of its micro-batch
    std::vector<int32_t> mb_of(static_cast<size_t>(T), -1);   // HostStep row -> its micro-batch
    int64_t rows_seen = 0;
    for (size_t m = 0; m < ranges.size(); ++m) {
        MicroStep& ms = (*out)[m];
        model::HostStep& h = ms.step;
        ms.seq_begin = ranges[m].first;
        ms.seq_end = ranges[m].second;
        h.token_ids.clear();
        h.positions.clear();
        h.query_start_loc.assign(1, 0);
        h.seq_lens.clear();
        h.logits_rows.clear();
        h.table_rows.clear();
        ms.logits_index.clear();
        h.num_prompt_rows = 0;
        for (int g = 0; g < ops::kNumKvGroups; ++g) {
            h.slot_mapping[g].clear();
            h.block_tables[g].clear();
            h.max_blocks[g] = s.max_blocks[g];
        }
        for (int64_t j = 0; j < S; ++j) {
            if (parts_[j].seq < ms.seq_begin || parts_[j].seq >= ms.seq_end) continue;
            const int32_t qs = s.query_start_loc[j], qe = s.query_start_loc[j + 1];
            // Parts are wholly prompt or wholly generated rows, the prompt parts first (build()).
            if (qs < s.num_prompt_rows) h.num_prompt_rows += qe - qs;
            for (int32_t r = qs; r < qe; ++r) {
                mb_row[r] = static_cast<int32_t>(h.token_ids.size());
                mb_of[r] = static_cast<int32_t>(m);
                h.token_ids.push_back(s.token_ids[r]);
                h.positions.push_back(s.positions[r]);
                for (int g = 0; g < ops::kNumKvGroups; ++g)
                    if (!s.slot_mapping[g].empty()) h.slot_mapping[g].push_back(s.slot_mapping[g][r]);
            }
            rows_seen += qe - qs;
            h.query_start_loc.push_back(static_cast<int32_t>(h.token_ids.size()));
            h.seq_lens.push_back(s.seq_lens[j]);
            if (!s.table_rows.empty()) h.table_rows.push_back(s.table_rows[j]);
            for (int g = 0; g < ops::kNumKvGroups; ++g)
                if (!s.block_tables[g].empty())
                    h.block_tables[g].insert(h.block_tables[g].end(),
                                             s.block_tables[g].begin() + j * s.max_blocks[g],
                                             s.block_tables[g].begin() + (j + 1) * s.max_blocks[g]);
        }
        // The step's table changes travel with the first micro-batch: its upload writes them before any
        // op of the step, and every later micro-batch reads the same tables.
        h.table_pairs = m == 0 ? s.table_pairs : std::vector<int32_t>{};
        h.num_table_fills = m == 0 ? s.num_table_fills : 0;
        h.table_num_rows = s.table_num_rows;
        h.table_width = s.table_width;
    }
    VOLT_CHECK_EQ(rows_seen, T) << "micro-batches must cover every row of the step once";
    for (size_t r = 0; r < s.logits_rows.size(); ++r) {
        const int32_t row = s.logits_rows[r];
        VOLT_CHECK(row >= 0 && row < T && mb_of[row] >= 0) << "logits row " << row << " in no micro-batch";
        MicroStep& ms = (*out)[mb_of[row]];
        ms.step.logits_rows.push_back(mb_row[row]);
        ms.logits_index.push_back(static_cast<int32_t>(r));
    }
}

const std::vector<ops::SampleRow>& StepBuilder::sample_rows(const StepBatch& b, int64_t first, int64_t count,
                                                            const float* logits, int64_t V,
                                                            bool deferred_on_device) {
    rows_.assign(count, {});
    deferred_output_.assign(count, 0);
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
        VOLT_CHECK(deferred_on_device || !ss.output_deferred)
            << "StepBuilder::sample_rows needs the deferred token resolved";
        const SamplingParams& p = *ss.params;
        // The token histories only where a penalty reads them (ops/sample.h): a decode step of long
        // sequences without penalties stages no history at all.
        const bool repetition = p.repetition_penalty != 1.0f;
        const bool any_penalty = repetition || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;
        deferred_output_[i] = ss.output_deferred && any_penalty ? 1 : 0;
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
        row.num_prompt = repetition ? static_cast<int64_t>(ss.prompt->size()) : 0;
        row.output_ids = ss.output->data();
        row.num_output = any_penalty ? static_cast<int64_t>(ss.output->size()) : 0;
        row.seed = lr.seed;
        row.counter = static_cast<uint64_t>(lr.output_index);
    }
    return rows_;
}

void fill_result(const StepBatch& b, const std::vector<int32_t>& tokens, const std::vector<float>& logprobs,
                 const std::vector<int32_t>& top_ids, const std::vector<float>& top_logprobs, int64_t max_top,
                 engine::StepResult* result) {
    VOLT_CHECK(tokens.size() >= b.logits_rows.size());
    fill_result(b.logits_rows, tokens.data(), logprobs.data(), top_ids.data(), top_logprobs.data(), max_top,
                result);
}

void fill_result(const std::vector<LogitsRow>& rows, const int32_t* tokens, const float* logprobs,
                 const int32_t* top_ids, const float* top_logprobs, int64_t max_top,
                 engine::StepResult* result) {
    const auto R = static_cast<int64_t>(rows.size());
    result->tokens.assign(tokens, tokens + R);
    result->logprobs.clear();
    bool any_lp = false;
    for (const LogitsRow& r : rows) any_lp = any_lp || r.num_logprobs >= 0;
    if (!any_lp) return;
    result->logprobs.resize(R);
    for (int64_t r = 0; r < R; ++r) {
        const int32_t k = rows[r].num_logprobs;
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
