// Properties of the forward pass that need no outside reference: results do not depend on how a prompt
// is chunked, on what else is in the batch, or on where its KV blocks live. (Values against
// transformers: tests/golden/parity_test.cc.)
#include "model/forward.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "cpu/cpu_ops.h"
#include "model/random_model.h"

namespace volt::model {
namespace {

constexpr int64_t kBlock = 4;

// Runs sequences through `fwd` in steps; step i feeds chunk sizes[i][s] tokens of sequence s (0: none).
// Blocks of sequence s are (block_offset[s] + j) * stride + s, so different placements can be compared.
std::vector<std::vector<float>> run_chunked(Forward& fwd, const std::vector<std::vector<int32_t>>& prompts,
                                            const std::vector<std::vector<int64_t>>& steps, int64_t stride,
                                            std::vector<int64_t> block_offset) {
    const auto& c = fwd.config();
    const int64_t S = static_cast<int64_t>(prompts.size());
    int64_t max_len = 0;
    for (const auto& p : prompts) max_len = std::max<int64_t>(max_len, static_cast<int64_t>(p.size()));
    const int64_t max_blocks = (max_len + kBlock - 1) / kBlock;
    const int64_t nblocks = (max_blocks + 8) * stride;
    const int64_t counts[2] = {nblocks, nblocks};
    KvCache cache(c, kBlock, counts);
    std::vector<int32_t> tables(S * max_blocks);
    for (int64_t s = 0; s < S; ++s)
        for (int64_t j = 0; j < max_blocks; ++j)
            tables[s * max_blocks + j] = static_cast<int32_t>((block_offset[s] + j) * stride + s);
    std::vector<std::vector<float>> logits(S);
    std::vector<int64_t> done(S, 0);
    for (const auto& step : steps) {
        std::vector<int32_t> ids, pos, qsl{0}, rows, lens;
        std::vector<int64_t> slots;
        std::vector<int64_t> seqs;
        std::vector<int32_t> step_tables;
        for (int64_t s = 0; s < S; ++s) {
            if (step[s] == 0) continue;
            for (int64_t i = 0; i < step[s]; ++i) {
                const int64_t p = done[s] + i;
                ids.push_back(prompts[s][p]);
                pos.push_back(static_cast<int32_t>(p));
                slots.push_back(tables[s * max_blocks + p / kBlock] * kBlock + p % kBlock);
                rows.push_back(static_cast<int32_t>(ids.size() - 1));
            }
            qsl.push_back(static_cast<int32_t>(ids.size()));
            lens.push_back(static_cast<int32_t>(done[s] + step[s]));
            seqs.push_back(s);
            step_tables.insert(step_tables.end(), tables.begin() + s * max_blocks,
                               tables.begin() + (s + 1) * max_blocks);
        }
        ForwardBatch b;
        b.num_tokens = static_cast<int64_t>(ids.size());
        b.num_seqs = static_cast<int64_t>(seqs.size());
        b.token_ids = ids.data();
        b.positions = pos.data();
        b.query_start_loc = qsl.data();
        b.seq_lens = lens.data();
        for (auto& g : b.groups) g = {slots.data(), step_tables.data(), max_blocks};
        b.logits_rows = rows.data();
        b.num_logits_rows = static_cast<int64_t>(rows.size());
        std::vector<float> out(rows.size() * c.vocab_size);
        fwd.run(b, cache, out.data());
        int64_t r = 0;
        for (size_t i = 0; i < seqs.size(); ++i) {
            const int64_t s = seqs[i];
            for (int64_t k = 0; k < step[s]; ++k, ++r)
                logits[s].insert(logits[s].end(), out.begin() + r * c.vocab_size,
                                 out.begin() + (r + 1) * c.vocab_size);
            done[s] += step[s];
        }
    }
    return logits;
}

std::vector<int32_t> random_prompt(int64_t n, int64_t vocab, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> p(n);
    for (auto& t : p) t = static_cast<int32_t>(rng() % vocab);
    return p;
}

class ForwardTest : public ::testing::Test {
  protected:
    ForwardTest() : weights_(testing::random_model(testing::small_config(2), 7)), fwd_(weights_, backend_) {}
    std::shared_ptr<ModelWeights> weights_;
    cpu::CpuBackend backend_;
    Forward fwd_;
};

TEST_F(ForwardTest, ChunkingDoesNotChangeLogits) {
    auto p = random_prompt(23, weights_->config.vocab_size, 1);
    auto whole = run_chunked(fwd_, {p}, {{23}}, 1, {0});
    for (int64_t chunk : {1, 3, 4, 5, 8, 22}) {
        std::vector<std::vector<int64_t>> steps;
        for (int64_t done = 0; done < 23; done += chunk)
            steps.push_back({std::min<int64_t>(chunk, 23 - done)});
        auto chunked = run_chunked(fwd_, {p}, steps, 1, {0});
        EXPECT_EQ(chunked[0], whole[0]) << "chunk " << chunk;  // bitwise
    }
    for (float v : whole[0]) ASSERT_TRUE(std::isfinite(v));
}

TEST_F(ForwardTest, BatchingAndBlockPlacementDoNotChangeLogits) {
    const int64_t V = weights_->config.vocab_size;
    std::vector<std::vector<int32_t>> prompts = {random_prompt(17, V, 2), random_prompt(9, V, 3),
                                                 random_prompt(30, V, 4)};
    std::vector<std::vector<float>> alone;
    for (const auto& p : prompts)
        alone.push_back(run_chunked(fwd_, {p}, {{static_cast<int64_t>(p.size())}}, 1, {0})[0]);
    // All three in one batch, interleaved blocks, with a ragged schedule (prefill chunks + decodes).
    auto together = run_chunked(fwd_, prompts, {{5, 9, 7}, {12, 0, 11}, {0, 0, 1}, {0, 0, 11}}, 3, {2, 0, 5});
    for (size_t s = 0; s < prompts.size(); ++s) EXPECT_EQ(together[s], alone[s]) << "sequence " << s;
}

TEST_F(ForwardTest, SlidingLayerNeverReadsBeforeTheWindow) {
    // Free (poison with -1) the sliding group's blocks wholly before position - window + 1: a chunked run
    // must still succeed (VOLT_CHECK fires on any read of a freed block) and match the full run.
    const auto& c = weights_->config;
    auto p = random_prompt(26, c.vocab_size, 5);
    auto whole = run_chunked(fwd_, {p}, {{26}}, 1, {0});
    const int64_t max_blocks = (26 + kBlock - 1) / kBlock;
    const int64_t counts[2] = {max_blocks, max_blocks};
    KvCache cache(c, kBlock, counts);
    std::vector<int32_t> full(max_blocks), sliding(max_blocks);
    std::iota(full.begin(), full.end(), 0);
    std::iota(sliding.begin(), sliding.end(), 0);
    std::vector<float> last;
    for (int32_t t = 0; t < 26; ++t) {
        int64_t slot = t;  // identity placement
        int32_t qsl[2] = {0, 1}, row = 0, len = t + 1;
        ForwardBatch b;
        b.num_tokens = 1;
        b.num_seqs = 1;
        b.token_ids = &p[t];
        b.positions = &t;
        b.query_start_loc = qsl;
        b.seq_lens = &len;
        b.groups[kFullGroup] = {&slot, full.data(), max_blocks};
        b.groups[kSlidingGroup] = {&slot, sliding.data(), max_blocks};
        b.logits_rows = &row;
        b.num_logits_rows = 1;
        last.assign(c.vocab_size, 0.0f);
        fwd_.run(b, cache, last.data());
        // After the step, blocks wholly before (t + 1) - window + 1 are never read again.
        const int64_t first_needed = std::max<int64_t>(0, t + 1 - c.sliding_window + 1);
        for (int64_t j = 0; j < first_needed / kBlock; ++j) sliding[j] = -1;
        EXPECT_EQ(std::vector<float>(whole[0].begin() + t * c.vocab_size,
                                     whole[0].begin() + (t + 1) * c.vocab_size),
                  last)
            << "position " << t;
    }
}

}  // namespace
}  // namespace volt::model
