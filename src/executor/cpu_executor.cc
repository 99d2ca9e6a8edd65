#include "executor/cpu_executor.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "core/check.h"

namespace volt::executor {

using namespace engine;  // the seam's types

CpuExecutor::CpuExecutor(std::shared_ptr<const model::ModelWeights> weights)
    : weights_(std::move(weights)), forward_(weights_, backend_) {}

ExecutorInfo CpuExecutor::info() const {
    const model::GptOssConfig& c = weights_->config;
    ExecutorInfo info;
    info.vocab_size = c.vocab_size;
    info.max_position_embeddings = c.max_position_embeddings;
    for (int64_t id : c.eos_token_ids) info.eos_token_ids.push_back(static_cast<int32_t>(id));
    info.has_group[0] = info.has_group[1] = false;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) info.has_group[model::kv_group_of(c, l)] = true;
    info.sliding_window = info.has_group[1] ? c.sliding_window : 0;
    return info;
}

int64_t CpuExecutor::bytes_per_block(int64_t block_size, int group) const {
    return model::KvCache::bytes_per_block(weights_->config, block_size, static_cast<model::KvGroup>(group));
}

ExecutorMemory CpuExecutor::memory() const {
    const int64_t page = sysconf(_SC_PAGESIZE);
    return {sysconf(_SC_PHYS_PAGES) * page, sysconf(_SC_AVPHYS_PAGES) * page};
}

Status CpuExecutor::init_cache(int64_t block_size, const int64_t num_blocks[kNumKvGroups],
                               int64_t max_num_seqs) {
    cache_ = std::make_unique<model::KvCache>(weights_->config, block_size, num_blocks);
    for (auto& t : tables_) t.assign(max_num_seqs, {});
    set_num_slots(max_num_seqs);
    return Status::ok();
}

Status CpuExecutor::run(const StepBatch& b, StepResult* result) {
    VOLT_CHECK(cache_) << "init_cache before execute";
    const model::GptOssConfig& c = weights_->config;
    const int64_t bs = cache_->block_size(), V = c.vocab_size;

    for (const BlockTableUpdate& u : b.table_updates) {
        auto& t = tables_[u.group][u.slot];
        if (u.index < 0) {
            t.clear();
            continue;
        }
        if (static_cast<int64_t>(t.size()) <= u.index) t.resize(u.index + 1, -1);
        t[u.index] = u.block;
    }
    const int64_t row_floats = bs * c.kv_dim();
    for (const BlockCopy& cp : b.copies) {
        for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
            if (model::kv_group_of(c, l) != cp.group) continue;
            for (float* pool : {cache_->k(l), cache_->v(l)})
                std::memcpy(pool + cp.dst * row_floats, pool + cp.src * row_floats,
                            row_floats * sizeof(float));
        }
    }

    model::ForwardBatch fb;
    fb.num_tokens = b.num_tokens;
    fb.num_seqs = b.num_seqs;
    fb.token_ids = b.token_ids.data();
    fb.positions = b.positions.data();
    fb.query_start_loc = b.query_start_loc.data();
    fb.seq_lens = b.context_lens.data();
    for (int g = 0; g < kNumKvGroups; ++g) {
        int64_t max_blocks = 1;
        for (int64_t s = 0; s < b.num_seqs; ++s)
            max_blocks = std::max<int64_t>(max_blocks, tables_[g][b.seq_slots[s]].size());
        auto& st = step_tables_[g];
        st.assign(b.num_seqs * max_blocks, -1);
        for (int64_t s = 0; s < b.num_seqs; ++s) {
            const auto& t = tables_[g][b.seq_slots[s]];
            std::copy(t.begin(), t.end(), st.begin() + s * max_blocks);
        }
        fb.groups[g] = {b.slot_mapping[g].data(), st.data(), max_blocks};
    }
    const auto R = static_cast<int64_t>(b.logits_rows.size());
    rows_.resize(R);
    for (int64_t r = 0; r < R; ++r) rows_[r] = b.logits_rows[r].row;
    static const int32_t kNoRow = 0;  // a non-null pointer: null would mean every row
    fb.logits_rows = R > 0 ? rows_.data() : &kNoRow;
    fb.num_logits_rows = R;
    logits_.resize(std::max<int64_t>(R, 1) * V);
    forward_.run(fb, *cache_, logits_.data());

    sample_rows_.assign(R, {});
    bias_ids_.resize(R);
    bias_values_.resize(R);
    bool any_lp = false;
    for (int64_t r = 0; r < R; ++r) {
        const LogitsRow& lr = b.logits_rows[r];
        const SeqSampling& ss = b.sampling[lr.seq];
        const SamplingParams& p = *ss.params;
        ops::SampleRow& row = sample_rows_[r];
        row.logits = logits_.data() + r * V;
        row.target = lr.target;
        row.num_logprobs = lr.num_logprobs;
        any_lp = any_lp || lr.num_logprobs >= 0;
        if (lr.target >= 0) continue;
        row.temperature = p.temperature;
        row.top_p = p.top_p;
        row.min_p = p.min_p;
        row.top_k = p.top_k;
        row.presence_penalty = p.presence_penalty;
        row.frequency_penalty = p.frequency_penalty;
        row.repetition_penalty = p.repetition_penalty;
        bias_ids_[r].clear();
        bias_values_[r].clear();
        for (const auto& [id, v] : p.logit_bias) {
            bias_ids_[r].push_back(id);
            bias_values_[r].push_back(v);
        }
        row.bias_ids = bias_ids_[r].data();
        row.bias_values = bias_values_[r].data();
        row.num_bias = static_cast<int64_t>(bias_ids_[r].size());
        row.allowed_ids = p.allowed_token_ids.data();
        row.num_allowed = static_cast<int64_t>(p.allowed_token_ids.size());
        row.prompt_ids = ss.prompt->data();
        row.num_prompt = static_cast<int64_t>(ss.prompt->size());
        row.output_ids = ss.output->data();
        row.num_output = static_cast<int64_t>(ss.output->size());
        row.seed = lr.seed;
        row.counter = static_cast<uint64_t>(lr.output_index);
    }
    tokens_.resize(R);
    logprobs_.resize(R);
    top_ids_.resize(R * kMaxLogprobs);
    top_logprobs_.resize(R * kMaxLogprobs);
    ops::SampleArgs args;
    args.rows = sample_rows_.data();
    args.num_rows = R;
    args.vocab_size = V;
    args.vocab_size_real = b.vocab_size_real > 0 ? b.vocab_size_real : V;
    args.tokens = tokens_.data();
    args.logprobs = logprobs_.data();
    args.top_ids = top_ids_.data();
    args.top_logprobs = top_logprobs_.data();
    args.max_top = kMaxLogprobs;
    cpu::sample(args);

    result->tokens.assign(tokens_.begin(), tokens_.end());
    result->logprobs.clear();
    if (any_lp) {
        result->logprobs.resize(R);
        for (int64_t r = 0; r < R; ++r) {
            const int32_t k = b.logits_rows[r].num_logprobs;
            if (k < 0) continue;
            TokenLogprob& lp = result->logprobs[r];
            lp.token = tokens_[r];
            lp.logprob = logprobs_[r];
            for (int32_t j = 0; j < k; ++j)
                if (top_ids_[r * kMaxLogprobs + j] >= 0)
                    lp.top.emplace_back(top_ids_[r * kMaxLogprobs + j], top_logprobs_[r * kMaxLogprobs + j]);
        }
    }
    return Status::ok();
}

}  // namespace volt::executor
