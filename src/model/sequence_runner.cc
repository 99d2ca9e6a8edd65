#include "model/sequence_runner.h"

#include <array>
#include <numeric>

#include "core/check.h"

namespace volt::model {

namespace {
int64_t blocks_for(int64_t capacity, int64_t block_size) { return (capacity + block_size - 1) / block_size; }
}  // namespace

SequenceRunner::SequenceRunner(Forward& forward, int64_t capacity, int64_t block_size)
    : forward_(forward),
      capacity_(capacity),
      block_size_(block_size),
      cache_(forward.config(), block_size,
             std::array<int64_t, kNumKvGroups>{blocks_for(capacity, block_size),
                                               blocks_for(capacity, block_size)}
                 .data()),
      block_table_(blocks_for(capacity, block_size)) {
    std::iota(block_table_.begin(), block_table_.end(), 0);
}

std::vector<float> SequenceRunner::append(std::span<const int32_t> ids, bool all_rows, int64_t start_pos) {
    const int64_t n = static_cast<int64_t>(ids.size());
    VOLT_CHECK(n > 0 && num_tokens_ + n <= capacity_) << "sequence capacity " << capacity_ << " exceeded";
    std::vector<int32_t> positions(n), rows;
    std::vector<int64_t> slots(n);
    for (int64_t i = 0; i < n; ++i) {
        positions[i] = static_cast<int32_t>(start_pos + num_tokens_ + i);
        slots[i] = num_tokens_ + i;  // identity block table: slot == sequence index
    }
    if (all_rows) {
        rows.resize(n);
        std::iota(rows.begin(), rows.end(), 0);
    } else {
        rows = {static_cast<int32_t>(n - 1)};
    }
    const int32_t qsl[2] = {0, static_cast<int32_t>(n)};
    const int32_t seq_len = static_cast<int32_t>(num_tokens_ + n);
    ForwardBatch b;
    b.num_tokens = n;
    b.num_seqs = 1;
    b.token_ids = ids.data();
    b.positions = positions.data();
    b.query_start_loc = qsl;
    b.seq_lens = &seq_len;
    for (auto& g : b.groups)
        g = {slots.data(), block_table_.data(), static_cast<int64_t>(block_table_.size())};
    b.logits_rows = rows.data();
    b.num_logits_rows = static_cast<int64_t>(rows.size());
    std::vector<float> logits(rows.size() * forward_.config().vocab_size);
    forward_.run(b, cache_, logits.data());
    num_tokens_ += n;
    return logits;
}

}  // namespace volt::model
