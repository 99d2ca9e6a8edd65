// Helpers of the GPU executor tests that drive BackendExecutor::execute with hand-built steps
// (cuda_graph_test.cc, parallel_graph_test.cc): greedy sampling, one sequence's rows appended to a
// StepBatch, the step run, and a bitwise comparison of logprobs. Test code; host only.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "engine/sampling_params.h"
#include "executor/backend_executor.h"

namespace volt::cuda::test {

// Greedy sampling (temperature 0), shared by every sequence of these tests.
inline const engine::SamplingParams& greedy() {
    static const engine::SamplingParams p = [] {
        engine::SamplingParams q;
        q.temperature = 0.0f;
        return q;
    }();
    return p;
}

// An empty step of `info`'s model (query_start_loc starts at 0).
inline engine::StepBatch new_step(const engine::ExecutorInfo& info) {
    engine::StepBatch b;
    b.vocab_size_real = info.vocab_size;
    b.query_start_loc = {0};
    return b;
}

// Appends one sequence to `b`: slot `slot`, `ids` at positions len_before, len_before + 1, ...; its KV in
// the consecutive blocks from `base_block` (blocks of `block_size` tokens) of every group the model has.
// With `map_blocks` the slot's block table gets `num_blocks` entries from base_block in both groups,
// each group's row first cleared when `clear_first` (a slot reused by a new sequence). Sampling: greedy,
// `history` the penalty history (it must outlive the step); one logits row, the sequence's last, with the
// top kMaxLogprobs.
inline void append_sequence(engine::StepBatch* b, const engine::ExecutorInfo& info, int32_t slot,
                            int32_t base_block, int64_t len_before, const std::vector<int32_t>& ids,
                            bool map_blocks, bool clear_first, int32_t num_blocks, int64_t block_size,
                            const std::vector<int32_t>* history) {
    static const std::vector<int32_t> none;
    if (map_blocks)
        for (int g = 0; g < engine::kNumKvGroups; ++g) {
            if (clear_first) b->table_updates.push_back({slot, g, -1, -1});
            for (int32_t k = 0; k < num_blocks; ++k) b->table_updates.push_back({slot, g, k, base_block + k});
        }
    for (size_t j = 0; j < ids.size(); ++j) {
        const int64_t p = len_before + static_cast<int64_t>(j);
        b->token_ids.push_back(ids[j]);
        b->positions.push_back(static_cast<int32_t>(p));
        for (int g = 0; g < engine::kNumKvGroups; ++g)
            if (info.has_group[g]) b->slot_mapping[g].push_back(int64_t{base_block} * block_size + p);
    }
    b->query_start_loc.push_back(static_cast<int32_t>(b->token_ids.size()));
    b->context_lens.push_back(static_cast<int32_t>(len_before + static_cast<int64_t>(ids.size())));
    b->seq_slots.push_back(slot);
    b->request_index.push_back(slot);
    b->sampling.push_back({&greedy(), history, &none, false});
    engine::LogitsRow row;
    row.row = static_cast<int32_t>(b->token_ids.size() - 1);
    row.seq = static_cast<int32_t>(b->num_seqs);
    row.num_logprobs = engine::kMaxLogprobs;
    b->logits_rows.push_back(row);
    ++b->num_seqs;
}

// Runs step `b` (its num_tokens set here) on `ex`; the logprobs of each sequence's row. Aborts on an error.
inline std::vector<engine::TokenLogprob> execute_step(executor::BackendExecutor& ex, engine::StepBatch& b) {
    b.num_tokens = static_cast<int64_t>(b.token_ids.size());
    engine::StepResult res;
    const Status st = ex.execute(b, &res);
    VOLT_CHECK(st.is_ok()) << st.to_string();
    VOLT_CHECK_EQ(res.logprobs.size(), static_cast<size_t>(b.num_seqs));
    return res.logprobs;
}

// Bitwise: the token, its logprob and the top list (ids and logprobs) equal.
inline bool same(const engine::TokenLogprob& a, const engine::TokenLogprob& b) {
    if (a.token != b.token || std::memcmp(&a.logprob, &b.logprob, 4) != 0 || a.top.size() != b.top.size())
        return false;
    for (size_t i = 0; i < a.top.size(); ++i)
        if (a.top[i].first != b.top[i].first || std::memcmp(&a.top[i].second, &b.top[i].second, 4) != 0)
            return false;
    return true;
}

// from, from + 1, ..., from + n - 1.
inline std::vector<int32_t> first_n(int n, int32_t from = 0) {
    std::vector<int32_t> v(n);
    for (int i = 0; i < n; ++i) v[i] = from + i;
    return v;
}

}  // namespace volt::cuda::test
