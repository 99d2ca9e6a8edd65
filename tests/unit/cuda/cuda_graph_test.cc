// CUDA graphs of decode steps (BackendExecutor::set_enforce_eager, issue 15 item 1), on the GPU (label
// `cuda`, inside cuda_backend_test; skipped where no GPU is found), on the tiny-mxfp4 golden checkpoint:
// - a sequence's logprobs (the sampled token's and the top 20: a function of every logit of its row) are
//   bitwise equal eagerly alone, eagerly in a batch of 17, as a graph alone (bucket 1), as a graph in
//   batches of 3 and 17 (padded buckets 4 and 24);
// - a padded graph step writes the KV slots of its own tokens and no other byte of the pools (batches of
//   3, 5 and 17 on buckets 4, 8 and 24 after 20 prompts filled the cache);
// - every workspace and scratch byte filled with 0xff (NaN) before each step changes no output;
// - a seq_slot given to a new sequence (its block table row cleared and refilled on the device by the
//   step's table writes) decoding in a padded bucket writes only its tokens' KV slots (the old sequence's
//   blocks and every other byte unchanged) and its logprobs are bitwise those of the same sequence alone,
//   eagerly, in a fresh executor.
// The expected values are the eager path's, itself checked against transformers (golden tests).
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "cuda/cuda_backend.h"
#include "executor/backend_executor.h"
#include "executor_step_util.h"
#include "model/loader.h"
#include "source_dir.h"

namespace volt::cuda {
namespace {

using test::source_dir;

constexpr int64_t kBlockSize = 16, kBlocksPerSeq = 6, kMaxSeqs = 32;  // 96 tokens a sequence

// Bytes of the KV pools (`before` / `after`: every pool's bytes, `pool` bytes each) that changed outside the
// given token slots (slot_bytes each, the same slots in every pool): (how many, the first one's offset or
// -1).
std::pair<int64_t, int64_t> changed_outside(const std::vector<uint8_t>& before,
                                            const std::vector<uint8_t>& after, int64_t pool,
                                            int64_t slot_bytes, const std::vector<int64_t>& slots) {
    std::vector<bool> written(before.size(), false);
    for (int64_t p = 0; p < static_cast<int64_t>(before.size()) / pool; ++p)
        for (int64_t slot : slots)
            for (int64_t i = 0; i < slot_bytes; ++i) written[p * pool + slot * slot_bytes + i] = true;
    int64_t changed = 0, first = -1;
    for (size_t i = 0; i < before.size(); ++i)
        if (!written[i] && before[i] != after[i]) {
            if (first < 0) first = static_cast<int64_t>(i);
            ++changed;
        }
    return {changed, first};
}

struct Run {
    std::unique_ptr<executor::BackendExecutor> ex;
    engine::ExecutorInfo info;
    std::vector<std::vector<int32_t>> prompts;
    std::vector<int64_t> len;   // tokens of each sequence in the cache
    std::vector<int32_t> base;  // first block of each slot's sequence (its blocks are consecutive)
    std::vector<bool> reused;   // the slot's row is cleared by its next prefill (a new sequence)
};

// An executor on the GPU with room for kMaxSeqs sequences of kBlocksPerSeq blocks each (sequence s owns
// blocks [s * kBlocksPerSeq, (s + 1) * kBlocksPerSeq) of both groups). nullptr: no GPU.
std::unique_ptr<Run> make_run(bool eager, const std::string& dtype = "half") {
    CudaOptions o;
    o.dtype = dtype;
    auto backend = CudaBackend::create(o);
    if (!backend.is_ok()) return nullptr;
    auto weights = model::load_model(source_dir() + "/tests/data/golden/tiny-mxfp4",
                                     {.progress = io::ProgressMode::kOff});
    VOLT_CHECK(weights.is_ok()) << weights.status().to_string();
    auto ex = executor::BackendExecutor::create(*weights, std::move(*backend), ops::Format::kF16);
    VOLT_CHECK(ex.is_ok()) << ex.status().to_string();
    auto run = std::make_unique<Run>();
    run->ex = std::move(*ex);
    run->ex->set_enforce_eager(eager);
    run->info = run->ex->info();
    engine::CacheConfig c;
    c.block_size = kBlockSize;
    c.num_blocks[0] = c.num_blocks[1] = kMaxSeqs * kBlocksPerSeq;
    c.max_num_seqs = kMaxSeqs;
    c.max_num_batched_tokens = 2048;
    c.max_model_len = kBlocksPerSeq * kBlockSize;
    VOLT_CHECK(run->ex->init_cache(c).is_ok());
    std::mt19937 rng(11);
    run->prompts.resize(kMaxSeqs);
    for (auto& p : run->prompts) {
        p.resize(5 + rng() % 40);
        for (auto& id : p) id = static_cast<int32_t>(rng() % run->info.vocab_size);
    }
    run->len.assign(kMaxSeqs, 0);
    run->base.resize(kMaxSeqs);
    for (int32_t s = 0; s < kMaxSeqs; ++s) run->base[s] = s * kBlocksPerSeq;
    run->reused.assign(kMaxSeqs, false);
    return run;
}

// Slot s's sequence ends and a new one takes the slot: the blocks of sequence `blocks_of` (unused), a new
// prompt; the next step prefills it.
void reuse_slot(Run& r, int32_t s, int32_t blocks_of, uint32_t seed) {
    std::mt19937 rng(seed);
    r.prompts[s].resize(5 + rng() % 40);
    for (auto& id : r.prompts[s]) id = static_cast<int32_t>(rng() % r.info.vocab_size);
    r.len[s] = 0;
    r.base[s] = blocks_of * kBlocksPerSeq;
    r.reused[s] = true;
}

// One step: sequences `seqs` (their slots), each with its whole prompt (prefill) or one token
// (decode: token 3 + slot + its length, a fixed id so every run feeds the same tokens). Returns the
// logprobs of each sequence's last row, with the top 20.
std::vector<engine::TokenLogprob> step(Run& r, const std::vector<int32_t>& seqs, bool decode) {
    engine::StepBatch b = test::new_step(r.info);
    for (const int32_t s : seqs) {
        const std::vector<int32_t> ids =
            decode ? std::vector<int32_t>{static_cast<int32_t>((3 + s + r.len[s]) % r.info.vocab_size)}
                   : r.prompts[s];
        test::append_sequence(&b, r.info, s, r.base[s], r.len[s], ids, r.len[s] == 0, r.reused[s],
                              kBlocksPerSeq, kBlockSize, &r.prompts[s]);
        r.reused[s] = false;
        r.len[s] += static_cast<int64_t>(ids.size());
    }
    return test::execute_step(*r.ex, b);
}

using test::first_n;
using test::same;

// Every byte of the K and V pools of every layer.
std::vector<uint8_t> kv_bytes(Run& r) {
    const model::KvStore& kv = r.ex->kv_cache();
    std::vector<uint8_t> out;
    for (const ops::KvLayer& l : kv.layers()) {
        const int64_t n = l.num_blocks * kv.block_bytes();
        const size_t at = out.size();
        out.resize(at + 2 * n);
        r.ex->backend().download(out.data() + at, l.k, n);
        r.ex->backend().download(out.data() + at + n, l.v, n);
    }
    return out;
}

#define VOLT_RUN_OR_SKIP(r) \
    if (!(r)) GTEST_SKIP() << "no CUDA device"

TEST(CudaGraphs, DecodeLogprobsBitwiseEagerAndGraphAloneBatchedPadded) {
    // The target is sequence 0; every setting prefills what it needs eagerly, then decodes 4 steps.
    struct Setting {
        const char* what;
        bool eager;
        int batch;
    };
    const Setting settings[] = {{"eager alone", true, 1},
                                {"eager in 17", true, 17},
                                {"graph alone (bucket 1)", false, 1},
                                {"graph in 3 (bucket 4)", false, 3},
                                {"graph in 17 (bucket 24)", false, 17}};
    std::vector<std::vector<engine::TokenLogprob>> want;
    for (const Setting& s : settings) {
        auto r = make_run(s.eager);
        VOLT_RUN_OR_SKIP(r);
        step(*r, first_n(s.batch), false);
        std::vector<engine::TokenLogprob> got;
        for (int k = 0; k < 4; ++k) got.push_back(step(*r, first_n(s.batch), true)[0]);
        if (s.eager) {
            EXPECT_EQ(r->ex->graph_replays(), 0) << s.what;
        } else {
            EXPECT_EQ(r->ex->graph_replays(), 4) << s.what << ": every decode step replays a graph";
        }
        if (want.empty()) {
            want.push_back(got);
            continue;
        }
        for (int k = 0; k < 4; ++k)
            EXPECT_TRUE(same(got[k], want[0][k]))
                << s.what << ", decode step " << k << ": token " << got[k].token << " logprob "
                << got[k].logprob << " vs eager alone " << want[0][k].token << " " << want[0][k].logprob;
    }
}

TEST(CudaGraphs, PaddedRowsWriteNoOtherKv) {
    auto r = make_run(false);
    VOLT_RUN_OR_SKIP(r);
    step(*r, first_n(20), false);
    for (int n : {3, 5, 17}) {
        const std::vector<uint8_t> before = kv_bytes(*r);
        const std::vector<int64_t> len_before = r->len;
        step(*r, first_n(n), true);
        const std::vector<uint8_t> after = kv_bytes(*r);
        ASSERT_EQ(before.size(), after.size());
        // The slots this step wrote: token position len_before[s] of sequence s < n, in every pool.
        const model::KvStore& kv = r->ex->kv_cache();
        const int64_t slot_bytes = kv.block_bytes() / kBlockSize;
        const int64_t pool = kv.layers()[0].num_blocks * kv.block_bytes();
        std::vector<int64_t> slots;
        for (int s = 0; s < n; ++s) slots.push_back(s * kBlocksPerSeq * kBlockSize + len_before[s]);
        const auto [changed_elsewhere, first] = changed_outside(before, after, pool, slot_bytes, slots);
        EXPECT_EQ(changed_elsewhere, 0) << "batch of " << n << ": bytes outside its tokens' slots changed, "
                                        << "first at byte " << first;
        EXPECT_EQ(r->ex->graph_replays(), n == 3 ? 1 : n == 5 ? 2 : 3);
    }
}

// Slot 2's sequence ends after two decode steps of 6 (bucket 8: 2 padded rows) and a new sequence takes
// slot 2 with other blocks (sequence 30's); it decodes with the others in bucket 8. Each of those steps
// writes only its 6 tokens' KV slots (the old sequence's blocks keep their bytes), and the new sequence's
// logprobs equal its eager run alone in a fresh executor (the same slot and blocks), bitwise.
TEST(CudaGraphs, ReusedSlotInAPaddedBucketWritesNoOtherKv) {
    auto r = make_run(false);
    VOLT_RUN_OR_SKIP(r);
    step(*r, first_n(6), false);
    for (int k = 0; k < 2; ++k) step(*r, first_n(6), true);
    reuse_slot(*r, 2, 30, 99);
    step(*r, {2}, false);  // the new sequence's prefill (its table row cleared and refilled first)
    std::vector<engine::TokenLogprob> got;
    const model::KvStore& kv = r->ex->kv_cache();
    const int64_t slot_bytes = kv.block_bytes() / kBlockSize;
    const int64_t pool = kv.layers()[0].num_blocks * kv.block_bytes();
    for (int k = 0; k < 3; ++k) {
        const std::vector<uint8_t> before = kv_bytes(*r);
        const std::vector<int64_t> len_before = r->len;
        got.push_back(step(*r, first_n(6), true)[2]);
        const std::vector<uint8_t> after = kv_bytes(*r);
        ASSERT_EQ(before.size(), after.size());
        std::vector<int64_t> slots;
        for (int s = 0; s < 6; ++s) slots.push_back(int64_t{r->base[s]} * kBlockSize + len_before[s]);
        const auto [changed_elsewhere, first] = changed_outside(before, after, pool, slot_bytes, slots);
        EXPECT_EQ(changed_elsewhere, 0) << "decode step " << k << " after the slot's reuse: bytes outside "
                                        << "its tokens' slots changed, first at byte " << first;
    }
    EXPECT_EQ(r->ex->graph_replays(), 5);
    // The same sequence alone, eagerly, in slot 2 with sequence 30's blocks.
    auto alone = make_run(true);
    reuse_slot(*alone, 2, 30, 99);
    step(*alone, {2}, false);
    for (int k = 0; k < 3; ++k) {
        const engine::TokenLogprob want = step(*alone, {2}, true)[0];
        EXPECT_TRUE(same(got[k], want))
            << "decode step " << k << ": token " << got[k].token << " logprob " << got[k].logprob
            << " vs alone " << want.token << " " << want.logprob;
    }
}

TEST(CudaGraphs, NanScratchChangesNoOutput) {
    std::vector<engine::TokenLogprob> want, got;
    for (int poison = 0; poison < 2; ++poison) {
        auto r = make_run(false);
        VOLT_RUN_OR_SKIP(r);
        auto& out = poison ? got : want;
        if (poison) r->ex->fill_workspace(0xff);
        for (const auto& lp : step(*r, first_n(5), false)) out.push_back(lp);
        for (int k = 0; k < 3; ++k) {
            if (poison) r->ex->fill_workspace(0xff);
            for (const auto& lp : step(*r, first_n(5), true)) out.push_back(lp);
        }
        EXPECT_EQ(r->ex->graph_replays(), 3);
    }
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
        EXPECT_TRUE(same(got[i], want[i]))
            << "row " << i << ": " << got[i].logprob << " vs " << want[i].logprob;
    for (const auto& lp : got) EXPECT_TRUE(std::isfinite(lp.logprob));
}

}  // namespace
}  // namespace volt::cuda
