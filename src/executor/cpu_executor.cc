#include "executor/cpu_executor.h"

#include <unistd.h>

#include <algorithm>

#include "core/check.h"

namespace volt::executor {

using namespace engine;  // the seam's types

namespace {
constexpr int64_t kLogitsChunkRows = 256;
}  // namespace

CpuExecutor::CpuExecutor(std::shared_ptr<const model::ModelWeights> weights, ops::Format kv_format,
                         int max_in_flight)
    : SyncExecutor(max_in_flight), weights_(std::move(weights)), kv_format_(kv_format) {
    auto placed = model::place_model(weights_, backend_);
    VOLT_CHECK(placed.is_ok()) << placed.status().to_string();  // the CPU places by reference
    forward_ = std::make_unique<model::Forward>(std::move(*placed), backend_);
}

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
    return model::KvStore::bytes_per_block(weights_->config, block_size, group, kv_format_);
}

ExecutorMemory CpuExecutor::memory() const {
    const ops::MemoryStats m = backend_.memory();
    return {m.total_bytes, m.free_bytes};
}

Status CpuExecutor::init_cache(const CacheConfig& c) {
    VOLT_ASSIGN_OR_RETURN(
        cache_, model::KvStore::create(backend_, weights_->config, c.block_size, c.num_blocks, kv_format_));
    VOLT_ASSIGN_OR_RETURN(
        ws_, model::Workspace::create(backend_, weights_->config,
                                      std::max<int64_t>(c.max_num_batched_tokens, 1), kLogitsChunkRows));
    VOLT_RETURN_IF_ERROR(backend_.reserve({c.max_num_batched_tokens, c.max_num_seqs, c.max_model_len}));
    builder_.init(c.max_num_seqs);
    set_num_slots(c.max_num_seqs);
    return Status::ok();
}

Status CpuExecutor::run(const StepBatch& b, StepResult* result) {
    VOLT_CHECK(!cache_.layers().empty()) << "init_cache before the first step";
    const model::GptOssConfig& c = weights_->config;
    const int64_t V = c.vocab_size;

    builder_.apply_table_updates(b);
    for (int g = 0; g < kNumKvGroups; ++g) {
        copy_src_.clear();
        copy_dst_.clear();
        for (const BlockCopy& cp : b.copies) {
            if (cp.group != g) continue;
            copy_src_.push_back(cp.src);
            copy_dst_.push_back(cp.dst);
        }
        if (copy_src_.empty()) continue;
        group_layers_.clear();
        for (int64_t l = 0; l < c.num_hidden_layers; ++l)
            if (model::kv_group_of(c, l) == g) group_layers_.push_back(cache_.layers()[l]);
        backend_.copy_blocks({group_layers_.data(), static_cast<int64_t>(group_layers_.size()),
                              copy_src_.data(), copy_dst_.data(), static_cast<int64_t>(copy_src_.size()),
                              cache_.block_bytes()});
    }

    VOLT_ASSIGN_OR_RETURN(model::ForwardBatch fb, upload_.upload(backend_, builder_.build(b)));
    const auto R = static_cast<int64_t>(b.logits_rows.size());
    tokens_.resize(R);
    logprobs_.resize(R);
    top_ids_.resize(R * kMaxLogprobs);
    top_logprobs_.resize(R * kMaxLogprobs);
    forward_->run(fb, cache_.layers(), ws_, [&](int64_t first, int64_t count, const float* logits) {
        const std::vector<ops::SampleRow>& rows = builder_.sample_rows(b, first, count, logits, V);
        ops::SampleArgs args;
        args.rows = rows.data();
        args.num_rows = count;
        args.vocab_size = V;
        args.vocab_size_real = b.vocab_size_real > 0 ? b.vocab_size_real : V;
        args.tokens = tokens_.data() + first;
        args.logprobs = logprobs_.data() + first;
        args.top_ids = top_ids_.data() + first * kMaxLogprobs;
        args.top_logprobs = top_logprobs_.data() + first * kMaxLogprobs;
        args.max_top = kMaxLogprobs;
        backend_.sample(args);
    });
    fill_result(b, tokens_, logprobs_, top_ids_, top_logprobs_, kMaxLogprobs, result);
    return Status::ok();
}

}  // namespace volt::executor
