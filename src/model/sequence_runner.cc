#include "model/sequence_runner.h"

#include <numeric>

#include "core/check.h"

namespace volt::model {

namespace {
constexpr int64_t kLogitsChunkRows = 64;

int64_t blocks_for(int64_t capacity, int64_t block_size) { return (capacity + block_size - 1) / block_size; }

template <typename T>
T or_die(Result<T> r) {
    VOLT_CHECK(r.is_ok()) << r.status().to_string();
    return std::move(*r);
}
}  // namespace

SequenceRunner::SequenceRunner(Forward& forward, int64_t capacity, int64_t block_size, ops::Format kv_format)
    : forward_(forward), capacity_(capacity), block_size_(block_size) {
    const int64_t blocks[ops::kNumKvGroups] = {blocks_for(capacity, block_size),
                                               blocks_for(capacity, block_size)};
    const ModelWeights& w = forward.weights();
    cache_ = or_die(KvStore::create(forward.backend(), forward.config(), block_size, blocks, kv_format,
                                    w.shard.layer_begin, w.shard.layer_end));
    const int64_t shard_rows = w.shard.tp_size > 1 && w.shard.last_stage() ? w.lm_head.out : 0;
    ws_ = or_die(
        Workspace::create(forward.backend(), forward.config(), capacity, kLogitsChunkRows, shard_rows));
    VOLT_CHECK(forward.backend().reserve({capacity, 1, capacity}).is_ok());
}

std::vector<float> SequenceRunner::append(std::span<const int32_t> ids, bool all_rows, int64_t start_pos,
                                          bool generated) {
    const auto n = static_cast<int64_t>(ids.size());
    VOLT_CHECK(n > 0 && num_tokens_ + n <= capacity_) << "sequence capacity " << capacity_ << " exceeded";
    HostStep& s = step_;
    s.token_ids.assign(ids.begin(), ids.end());
    s.positions.resize(n);
    for (auto& m : s.slot_mapping) m.resize(n);
    for (int64_t i = 0; i < n; ++i) {
        s.positions[i] = static_cast<int32_t>(start_pos + num_tokens_ + i);
        for (auto& m : s.slot_mapping) m[i] = num_tokens_ + i;  // identity block table: slot == index
    }
    s.query_start_loc = {0, static_cast<int32_t>(n)};
    s.num_prompt_rows = generated ? 0 : n;
    s.seq_lens = {static_cast<int32_t>(num_tokens_ + n)};
    const int64_t nb = blocks_for(capacity_, block_size_);
    for (int g = 0; g < ops::kNumKvGroups; ++g) {
        s.block_tables[g].resize(nb);
        std::iota(s.block_tables[g].begin(), s.block_tables[g].end(), 0);
        s.max_blocks[g] = nb;
    }
    if (all_rows) {
        s.logits_rows.resize(n);
        std::iota(s.logits_rows.begin(), s.logits_rows.end(), 0);
    } else {
        s.logits_rows = {static_cast<int32_t>(n - 1)};
    }
    const ForwardBatch b = or_die(upload_.upload(forward_.backend(), s));
    const int64_t V = forward_.config().vocab_size;
    std::vector<float> logits(s.logits_rows.size() * V);
    const Status st =
        forward_.run(b, cache_.layers(), ws_, [&](int64_t first, int64_t count, const float* chunk) {
            forward_.backend().download(logits.data() + first * V, chunk,
                                        count * V * static_cast<int64_t>(sizeof(float)));
        });
    VOLT_CHECK(st.is_ok()) << st.to_string();
    num_tokens_ += n;
    return logits;
}

}  // namespace volt::model
