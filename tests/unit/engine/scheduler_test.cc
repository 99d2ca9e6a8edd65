// EngineCore + Scheduler + BlockManager over random workloads with a simulated executor that models
// the KV cache as (token, position) per slot: every step it checks the batch limits, that each new row
// writes its own slot, and that every key a query would read (whole prefix for the full group, the
// window for the sliding group) holds that sequence's token at that position -- so a wrong block table,
// copy-on-write or preemption shows up as a wrong key. Outputs are a known function of (request,
// seed + choice, output index); free + used = total is checked after every step. Token-level stop rules
// run on the scripted executor. The look-ahead runs the same workloads with the executor delayed by one
// or two steps (max_in_flight 2, 3) under DeviceChecker, which models a device: a block or seq_slot that
// a step in flight may read must not be handed out again before that step is collected.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <limits>
#include <map>
#include <random>

#include "engine/engine_core.h"
#include "executor/scripted_executor.h"
#include "executor/sync_executor.h"
#include "ops/sample.h"

namespace volt::engine {
namespace {

using executor::ScriptedExecutor;
using executor::ScriptedOptions;

int32_t scripted_token(int64_t request, uint64_t seed, int64_t k) {
    return static_cast<int32_t>((request * 131 + static_cast<int64_t>(seed) * 17 + k * 7) % 900);
}

class SimExecutor final : public executor::SyncExecutor {
  public:
    SimExecutor(int64_t window, int64_t max_tokens, int64_t max_seqs, int in_flight = 1)
        : SyncExecutor(in_flight), window_(window), max_tokens_(max_tokens), max_seqs_(max_seqs) {}
    ExecutorInfo info() const override {
        ExecutorInfo i;
        i.vocab_size = 1000;
        i.sliding_window = window_;
        i.max_position_embeddings = 100000;
        i.eos_token_ids = {999};
        i.has_group[0] = true;
        i.has_group[1] = window_ > 0;
        return i;
    }
    int64_t bytes_per_block(int64_t, int) const override { return 0; }
    ExecutorMemory memory() const override { return {}; }
    Status init_cache(const CacheConfig& c) override {
        set_num_slots(c.max_num_seqs);
        bs_ = c.block_size;
        for (int g = 0; g < kNumKvGroups; ++g) cache_[g].assign(c.num_blocks[g] * bs_, {-1, -1});
        return Status::ok();
    }
    Status run(const StepBatch& b, StepResult* result) override {
        EXPECT_LE(b.num_tokens, max_tokens_);
        EXPECT_LE(b.num_seqs, max_seqs_);
        EXPECT_GT(b.num_tokens, 0);
        tokens_computed += b.num_tokens;
        for (const auto& u : b.table_updates) {
            if (u.index < 0) {
                tables_[u.group].erase(u.slot);
                continue;
            }
            auto& t = tables_[u.group][u.slot];
            if (static_cast<int32_t>(t.size()) <= u.index) t.resize(u.index + 1, -1);
            t[u.index] = u.block;
        }
        for (const auto& c : b.copies)
            for (int64_t o = 0; o < bs_; ++o)
                cache_[c.group][c.dst * bs_ + o] = cache_[c.group][c.src * bs_ + o];
        const int groups = window_ > 0 ? 2 : 1;
        std::map<int64_t, int> written;
        for (int64_t s = 0; s < b.num_seqs; ++s) {
            const auto& ss = b.sampling[s];
            auto token_at = [&](int64_t p) {
                const auto P = static_cast<int64_t>(ss.prompt->size());
                if (p < P) return (*ss.prompt)[p];
                return p - P < static_cast<int64_t>(ss.output->size()) ? (*ss.output)[p - P] : -2;
            };
            const int64_t q = b.query_start_loc[s + 1] - b.query_start_loc[s], ctx = b.context_lens[s];
            for (int64_t i = 0; i < q; ++i) {
                const int64_t row = b.query_start_loc[s] + i, p = ctx - q + i;
                EXPECT_EQ(b.positions[row], p);
                EXPECT_EQ(b.token_ids[row], token_at(p));
                for (int g = 0; g < groups; ++g) {
                    const auto& t = tables_[g][b.seq_slots[s]];
                    EXPECT_LT(p / bs_, static_cast<int64_t>(t.size()));
                    EXPECT_GE(t[p / bs_], 0);
                    const int64_t slot = t[p / bs_] * bs_ + p % bs_;
                    EXPECT_EQ(b.slot_mapping[g][row], slot);
                    EXPECT_EQ(written[slot * 2 + g]++, 0) << "two rows write slot " << slot;
                    cache_[g][slot] = {token_at(p), p};
                }
            }
            for (int g = 0; g < groups; ++g) {
                const auto& t = tables_[g][b.seq_slots[s]];
                const int64_t lo = g == 1 ? std::max<int64_t>(0, ctx - q - window_ + 1) : 0;
                for (int64_t p = lo; p < ctx; ++p) {
                    const int32_t block = t[p / bs_];
                    if (block < 0) {
                        ADD_FAILURE()
                            << "group " << g << " seq " << b.seq_slots[s] << " position " << p << " not held";
                        return internal_error("key not held");
                    }
                    const auto [tok, pos] = cache_[g][block * bs_ + p % bs_];
                    if (pos != p || tok != token_at(p)) {
                        ADD_FAILURE() << "group " << g << " seq " << b.seq_slots[s] << " position " << p
                                      << " reads (token " << tok << ", position " << pos << "), wants token "
                                      << token_at(p);
                        return internal_error("wrong key");
                    }
                }
            }
        }
        result->tokens.clear();
        result->logprobs.assign(b.logits_rows.size(), {});
        for (size_t i = 0; i < b.logits_rows.size(); ++i) {
            const auto& r = b.logits_rows[i];
            const bool poisoned = b.request_index[r.seq] == poison_request && r.target < 0 &&
                                  r.output_index >= poison_from_output;
            result->tokens.push_back(poisoned ? ops::kNonFiniteToken
                                     : r.target >= 0
                                         ? r.target
                                         : scripted_token(b.request_index[r.seq], r.seed, r.output_index));
            result->logprobs[i].token = result->tokens.back();
        }
        ++steps;
        return Status::ok();
    }
    int64_t steps = 0, tokens_computed = 0;
    // Draws of this request's output tokens from poison_from_output on come back as the sample op's
    // answer to NaN logits (ops::kNonFiniteToken).
    int64_t poison_request = -1, poison_from_output = 0;

  private:
    int64_t window_, max_tokens_, max_seqs_, bs_ = 0;
    std::map<int64_t, std::vector<int32_t>> tables_[kNumKvGroups];
    std::vector<std::pair<int32_t, int64_t>> cache_[kNumKvGroups];
};

// Wraps an executor and plays the device: step X reads every block in the tables of its sequences and
// its seq_slots until X is collected. At submit it checks that a block entering a table while no table
// holds it, and a slot that reappears after its table was dropped, were last read by a collected step;
// and that a DeferredToken names a slot whose sequence had a feeds_slot row in the step just before
// (what a device keeps), with token id -1 and output_deferred set for its sequence.
class DeviceChecker final : public Executor {
  public:
    explicit DeviceChecker(Executor* inner) : inner_(inner) {}
    ExecutorInfo info() const override { return inner_->info(); }
    int64_t bytes_per_block(int64_t bs, int g) const override { return inner_->bytes_per_block(bs, g); }
    ExecutorMemory memory() const override { return inner_->memory(); }
    int max_in_flight() const override { return inner_->max_in_flight(); }
    Status init_cache(const CacheConfig& c) override {
        for (int g = 0; g < kNumKvGroups; ++g) {
            refs_[g].assign(c.num_blocks[g], 0);
            block_read_[g].assign(c.num_blocks[g], -1);
            tables_[g].assign(c.max_num_seqs, {});
        }
        slot_read_.assign(c.max_num_seqs, -1);
        slot_dropped_.assign(c.max_num_seqs, false);
        return inner_->init_cache(c);
    }
    Result<StepHandle> submit(const StepBatch& b) override {
        const int64_t id = next_++;
        auto reuse_slot = [&](int32_t slot) {
            if (!slot_dropped_[slot]) return;
            slot_dropped_[slot] = false;
            ++slot_reuses;
            EXPECT_LE(slot_read_[slot], collected_)
                << "step " << id << " reuses seq_slot " << slot << " that step " << slot_read_[slot]
                << " (in flight) reads";
        };
        for (const BlockTableUpdate& u : b.table_updates) {
            auto& t = tables_[u.group][u.slot];
            if (u.index < 0) {
                for (int32_t blk : t)
                    if (blk >= 0) --refs_[u.group][blk];
                t.clear();
                slot_dropped_[u.slot] = true;
                continue;
            }
            reuse_slot(u.slot);
            if (static_cast<int32_t>(t.size()) <= u.index) t.resize(u.index + 1, -1);
            if (t[u.index] >= 0) --refs_[u.group][t[u.index]];
            t[u.index] = u.block;
            if (u.block < 0) continue;
            if (refs_[u.group][u.block]++ == 0) {
                ++block_reuses;
                EXPECT_LE(block_read_[u.group][u.block], collected_)
                    << "step " << id << " hands out group " << u.group << " block " << u.block
                    << " that step " << block_read_[u.group][u.block] << " (in flight) reads";
            }
        }
        std::vector<bool> deferred_seq(b.num_seqs, false);
        for (const DeferredToken& d : b.deferred) {
            EXPECT_EQ(b.token_ids[d.row], -1);
            EXPECT_TRUE(std::find(fed_.begin(), fed_.end(), d.slot) != fed_.end())
                << "step " << id << " defers the token of slot " << d.slot
                << ", which the previous step did not draw";
            const auto s = std::upper_bound(b.query_start_loc.begin(), b.query_start_loc.end(), d.row) -
                           b.query_start_loc.begin() - 1;
            EXPECT_EQ(b.seq_slots[s], d.slot);
            deferred_seq[s] = true;
        }
        for (int64_t s = 0; s < b.num_seqs; ++s) EXPECT_EQ(b.sampling[s].output_deferred, deferred_seq[s]);
        fed_.clear();
        for (const LogitsRow& r : b.logits_rows)
            if (r.feeds_slot) fed_.push_back(b.seq_slots[r.seq]);
        for (int32_t slot : b.seq_slots) {
            reuse_slot(slot);
            slot_read_[slot] = id;
            for (int g = 0; g < kNumKvGroups; ++g)
                for (int32_t blk : tables_[g][slot])
                    if (blk >= 0) block_read_[g][blk] = id;
        }
        VOLT_ASSIGN_OR_RETURN(StepHandle h, inner_->submit(b));
        ids_.push_back(id);
        return h;
    }
    Status collect(StepHandle h, StepResult* result) override {
        collected_ = ids_.front();
        ids_.pop_front();
        return inner_->collect(h, result);
    }
    int64_t block_reuses = 0, slot_reuses = 0;  // checks made

  private:
    Executor* inner_;
    int64_t next_ = 0, collected_ = -1;
    std::deque<int64_t> ids_;
    std::vector<int32_t> refs_[kNumKvGroups];
    std::vector<int64_t> block_read_[kNumKvGroups];  // last step that read the block
    std::vector<std::vector<int32_t>> tables_[kNumKvGroups];
    std::vector<int64_t> slot_read_;
    std::vector<bool> slot_dropped_;
    std::vector<int32_t> fed_;  // slots with a feeds_slot row in the last step
};

struct Choice {
    std::vector<int32_t> tokens;
    FinishReason finish = FinishReason::kNone;
    std::string error;
};

void drain(RequestHandle& h, std::vector<Choice>* choices) {
    RequestOutput out;
    while (h.next(&out, std::chrono::milliseconds(0))) {
        Choice& c = (*choices)[out.choice];
        ASSERT_EQ(c.finish, FinishReason::kNone) << "delta after finish";
        c.tokens.insert(c.tokens.end(), out.tokens.begin(), out.tokens.end());
        c.finish = out.finish;
        c.error = out.error;
    }
}

// Non-finite logits (the sample op's kNonFiniteToken) fail that request alone, with a message naming the
// step, and never become a token; the others produce exactly their tokens, the KV cache is freed, and
// the engine keeps serving (a request submitted afterwards completes). Synchronous and pipelined.
TEST(SchedulerTest, NonFiniteLogitsFailOnlyThatRequest) {
    for (int in_flight : {1, 2}) {
        EngineConfig cfg;
        cfg.block_size = 4;
        cfg.max_num_seqs = 6;
        cfg.max_num_batched_tokens = 16;
        cfg.num_kv_blocks_override = 64;
        SimExecutor sim(0, cfg.max_num_batched_tokens, cfg.max_num_seqs, in_flight);
        sim.poison_request = 2;
        sim.poison_from_output = 3;
        DeviceChecker ex(&sim);
        auto core_or = EngineCore::create(cfg, &ex);
        ASSERT_TRUE(core_or.is_ok()) << core_or.status().to_string();
        EngineCore& core = **core_or;
        std::vector<std::shared_ptr<RequestHandle>> hs;
        std::vector<std::vector<Choice>> choices;
        std::vector<SamplingParams> ps;
        auto add = [&](int32_t n) {
            SamplingParams p;
            p.max_tokens = 8;
            p.n = n;
            p.seed = 10 + hs.size();
            const std::vector<int32_t> prompt(5 + hs.size(), 7);
            hs.push_back(std::make_shared<RequestHandle>(static_cast<int64_t>(hs.size()),
                                                         static_cast<int32_t>(prompt.size()), n, nullptr));
            choices.emplace_back(n);
            ps.push_back(p);
            core.add_request(hs.back(), prompt, p, *p.seed);
        };
        for (int i = 0; i < 5; ++i) add(i == 2 ? 2 : 1);
        for (int step = 0; core.has_requests(); ++step) {
            ASSERT_LT(step, 1000) << "no progress";
            if (step == 3) add(1);  // arrives while request 2 is failing
            auto ran = core.step();
            ASSERT_TRUE(ran.is_ok()) << ran.status().to_string();
            const Status inv = core.check_invariants();
            ASSERT_TRUE(inv.is_ok()) << inv.to_string();
            for (size_t i = 0; i < hs.size(); ++i) drain(*hs[i], &choices[i]);
        }
        for (size_t i = 0; i < hs.size(); ++i) {
            EXPECT_TRUE(hs[i]->done()) << "request " << i;
            for (int32_t c = 0; c < ps[i].n; ++c) {
                const Choice& ch = choices[i][c];
                for (int32_t t : ch.tokens) EXPECT_GE(t, 0) << "a non-finite draw became a token";
                if (i == 2) {
                    EXPECT_EQ(ch.finish, FinishReason::kError) << "choice " << c;
                    EXPECT_NE(ch.error.find("non-finite logits"), std::string::npos) << ch.error;
                    EXPECT_NE(ch.error.find("step"), std::string::npos) << ch.error;
                    EXPECT_LE(ch.tokens.size(), 3u);
                    continue;
                }
                std::vector<int32_t> want;
                for (int64_t k = 0; k < ps[i].max_tokens; ++k)
                    want.push_back(scripted_token(static_cast<int64_t>(i), *ps[i].seed + c, k));
                EXPECT_EQ(ch.tokens, want) << "request " << i << " in_flight " << in_flight;
                EXPECT_EQ(ch.finish, FinishReason::kLength);
            }
        }
        const EngineStats st = core.stats();
        EXPECT_EQ(st.kv_blocks_used[0] + st.kv_blocks_used[1], 0);
        EXPECT_EQ(st.requests_failed, 1);
    }
}

// in_flight: the executor's max_in_flight (1: synchronous). stops: some requests get a stop id that
// their choice 0 draws (a separate random stream: the workload is the same either way).
void random_workload(int64_t window, int64_t pool_blocks, uint32_t seed, bool tight, int in_flight = 1,
                     bool stops = false) {
    EngineConfig cfg;
    cfg.block_size = 4;
    cfg.max_num_seqs = 6;
    cfg.max_num_batched_tokens = 16;
    cfg.num_kv_blocks_override = pool_blocks;
    SimExecutor sim(window, cfg.max_num_batched_tokens, cfg.max_num_seqs, in_flight);
    DeviceChecker ex(&sim);
    auto core_or = EngineCore::create(cfg, &ex);
    ASSERT_TRUE(core_or.is_ok()) << core_or.status().to_string();
    EngineCore& core = **core_or;
    std::mt19937 rng(seed), stop_rng(seed + 1000);
    struct Req {
        std::shared_ptr<RequestHandle> h;
        SamplingParams p;
        std::vector<Choice> choices;
        bool aborted = false;
    };
    std::vector<Req> reqs;
    constexpr int kRequests = 40;
    int64_t step = 0;
    while (static_cast<int>(reqs.size()) < kRequests || core.has_requests()) {
        ASSERT_LT(step++, 20000) << "no progress: deadlock or starvation";
        while (static_cast<int>(reqs.size()) < kRequests && rng() % 3 == 0) {
            Req r;
            const int64_t len = 1 + rng() % 30;
            std::vector<int32_t> prompt(len);
            for (auto& t : prompt) t = static_cast<int32_t>(rng() % 900);
            r.p.max_tokens = 1 + static_cast<int32_t>(rng() % 20);
            r.p.n = 1 + static_cast<int32_t>(rng() % 3);
            r.p.seed = rng() % 1000;
            r.p.prompt_logprobs = rng() % 4 == 0 ? 1 : -1;
            if (stops && stop_rng() % 2 == 0) {
                const int64_t k = stop_rng() % r.p.max_tokens;
                r.p.stop_token_ids = {scripted_token(static_cast<int64_t>(reqs.size()), *r.p.seed, k)};
            }
            ASSERT_TRUE(core.validate(prompt, r.p).is_ok());
            r.h = std::make_shared<RequestHandle>(static_cast<int64_t>(reqs.size()),
                                                  static_cast<int32_t>(len), r.p.n, nullptr);
            r.choices.resize(r.p.n);
            core.add_request(r.h, prompt, r.p, *r.p.seed);
            reqs.push_back(std::move(r));
        }
        if (rng() % 40 == 0 && !reqs.empty()) {
            Req& r = reqs[rng() % reqs.size()];
            if (!r.h->done()) {
                r.h->abort();
                r.aborted = true;
            }
        }
        auto ran = core.step();
        ASSERT_TRUE(ran.is_ok()) << ran.status().to_string();
        const Status inv = core.check_invariants();
        ASSERT_TRUE(inv.is_ok()) << "step " << step << ": " << inv.to_string();
        for (auto& r : reqs) drain(*r.h, &r.choices);
        if (::testing::Test::HasFatalFailure()) return;
    }
    const EngineStats st = core.stats();
    EXPECT_EQ(st.kv_blocks_used[0] + st.kv_blocks_used[1], 0);
    EXPECT_EQ(core.num_in_flight(), 0);
    if (in_flight > 1) {
        EXPECT_GT(sim.num_deferred_resolved(), 0)
            << "the engine never scheduled a step before the previous one's tokens";
        EXPECT_GT(ex.block_reuses, 0);
        EXPECT_GT(ex.slot_reuses, 0);
    }
    if (tight) {
        EXPECT_GT(st.num_preemptions, 0) << "the pool should be tight enough to preempt";
    }
    for (size_t i = 0; i < reqs.size(); ++i) {
        const Req& r = reqs[i];
        EXPECT_TRUE(r.h->done());
        for (int32_t c = 0; c < r.p.n; ++c) {
            const Choice& ch = r.choices[c];
            std::vector<int32_t> want;
            FinishReason want_finish = FinishReason::kLength;
            for (int64_t k = 0; k < r.p.max_tokens; ++k) {
                const int32_t t = scripted_token(i, *r.p.seed + c, k);
                if (!r.p.stop_token_ids.empty() && t == r.p.stop_token_ids[0]) {
                    want_finish = FinishReason::kStop;
                    break;
                }
                want.push_back(t);
            }
            if (ch.finish == FinishReason::kAbort) {
                EXPECT_TRUE(r.aborted);
                want.resize(std::min(want.size(), ch.tokens.size()));
            } else {
                EXPECT_EQ(ch.finish, want_finish) << "request " << i << " choice " << c;
            }
            EXPECT_EQ(ch.tokens, want) << "request " << i << " choice " << c;
        }
    }
}

TEST(SchedulerTest, RandomWorkloadFullAttentionOnly) { random_workload(0, 16, 1, true); }
TEST(SchedulerTest, RandomWorkloadWithSlidingWindow) { random_workload(8, 16, 2, true); }
TEST(SchedulerTest, RandomWorkloadRoomyPool) { random_workload(8, 64, 3, false); }

// The same workloads with stops, synchronous and with the look-ahead (max_in_flight 2 and 3): outputs,
// KV contents, invariants and reuse are checked as above.
class PipelinedSchedulerTest : public ::testing::TestWithParam<int> {};

TEST_P(PipelinedSchedulerTest, RandomWorkloadFullAttentionOnly) {
    random_workload(0, 16, 1, true, GetParam(), true);
}
TEST_P(PipelinedSchedulerTest, RandomWorkloadWithSlidingWindow) {
    random_workload(8, 16, 2, true, GetParam(), true);
}
TEST_P(PipelinedSchedulerTest, RandomWorkloadRoomyPool) {
    random_workload(8, 64, 3, false, GetParam(), true);
}
TEST_P(PipelinedSchedulerTest, RandomWorkloadsOverManySeeds) {
    for (uint32_t seed = 10; seed < 16; ++seed) {
        random_workload(seed % 2 == 0 ? 8 : 0, 14 + seed % 3 * 8, seed, false, GetParam(), seed % 3 != 0);
        if (::testing::Test::HasFailure()) FAIL() << "seed " << seed;
    }
}

INSTANTIATE_TEST_SUITE_P(InFlight, PipelinedSchedulerTest, ::testing::Values(1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& i) { return std::to_string(i.param); });

// One request alone: the look-ahead computes no extra row when the length ends the sequence (the
// pending token is the max_tokens-th), and exactly one (discarded) when a stop id does.
TEST(PipelinedSchedulerTest, LookAheadStopsAtAKnownLengthAndDiscardsOneRowAfterAStop) {
    for (bool stop : {false, true}) {
        int64_t tokens[2] = {0, 0};
        for (int in_flight : {1, 2}) {
            EngineConfig cfg;
            cfg.block_size = 4;
            SimExecutor ex(0, cfg.max_num_batched_tokens, cfg.max_num_seqs, in_flight);
            auto core = EngineCore::create(cfg, &ex);
            ASSERT_TRUE(core.is_ok());
            SamplingParams p;
            p.max_tokens = 6;
            p.seed = 3;
            if (stop) p.stop_token_ids = {scripted_token(0, 3, 4)};  // the 5th draw stops
            const std::vector<int32_t> prompt = {1, 2, 3, 4, 5};
            auto h = std::make_shared<RequestHandle>(0, 5, 1, nullptr);
            (*core)->add_request(h, prompt, p, 3);
            std::vector<Choice> out(1);
            for (int i = 0; i < 50 && (*core)->has_requests(); ++i) {
                ASSERT_TRUE((*core)->step().is_ok());
                ASSERT_TRUE((*core)->check_invariants().is_ok());
                drain(*h, &out);
            }
            ASSERT_TRUE(h->done());
            std::vector<int32_t> want;
            for (int64_t k = 0; k < (stop ? 4 : 6); ++k) want.push_back(scripted_token(0, 3, k));
            EXPECT_EQ(out[0].tokens, want);
            EXPECT_EQ(out[0].finish, stop ? FinishReason::kStop : FinishReason::kLength);
            EXPECT_EQ((*core)->stats().generated_tokens, stop ? 5 : 6);
            // Every decode after the first is a look-ahead one.
            if (in_flight == 2) {
                EXPECT_EQ(ex.num_deferred_resolved(), 5);
            }
            tokens[in_flight - 1] = ex.tokens_computed;
        }
        // Synchronous: the prompt, then one decode per draw but the last.
        EXPECT_EQ(tokens[0], 5 + (stop ? 4 : 5));
        EXPECT_EQ(tokens[1], tokens[0] + (stop ? 1 : 0)) << (stop ? "stop" : "length");
    }
}

// ---- Token-level stop rules on the scripted executor.

struct ScriptedRun {
    std::vector<Choice> choices;
    std::vector<TokenLogprob> prompt_logprobs;
    std::optional<int32_t> stop_token;
    EngineStats stats;
};

ScriptedRun run_scripted(std::vector<std::vector<int32_t>> script, std::vector<int32_t> prompt,
                         SamplingParams p, int in_flight = 1) {
    ScriptedOptions o;
    o.outputs = std::move(script);
    o.end_token = 7;
    o.vocab_size = 100;
    o.eos_token_ids = {7, 8};
    ScriptedExecutor ex(o);
    ex.set_max_in_flight(in_flight);
    EngineConfig cfg;
    cfg.block_size = 4;
    auto core = EngineCore::create(cfg, &ex);
    EXPECT_TRUE(core.is_ok());
    auto h = std::make_shared<RequestHandle>(0, static_cast<int32_t>(prompt.size()), p.n, nullptr);
    EXPECT_TRUE((*core)->validate(prompt, p).is_ok());
    (*core)->add_request(h, prompt, p, 1);
    ScriptedRun run;
    run.choices.resize(p.n);
    for (int i = 0; i < 100 && (*core)->has_requests(); ++i) {
        EXPECT_TRUE((*core)->step().is_ok());
        RequestOutput out;
        while (h->next(&out, std::chrono::milliseconds(0))) {
            auto& c = run.choices[out.choice];
            c.tokens.insert(c.tokens.end(), out.tokens.begin(), out.tokens.end());
            c.finish = out.finish;
            if (out.stop_token) run.stop_token = out.stop_token;
            if (!out.prompt_logprobs.empty()) {
                EXPECT_TRUE(run.prompt_logprobs.empty()) << "prompt logprobs sent twice";
                run.prompt_logprobs = out.prompt_logprobs;
            }
        }
    }
    EXPECT_TRUE(h->done());
    run.stats = (*core)->stats();
    return run;
}

TEST(SchedulerTest, StopTokenIdsEosMaxTokensIgnoreEos) {
    SamplingParams p;
    p.max_tokens = 10;
    p.stop_token_ids = {30};
    ScriptedRun r = run_scripted({{10, 20, 30, 40}}, {1, 2, 3}, p);
    EXPECT_EQ(r.choices[0].tokens, (std::vector<int32_t>{10, 20}));
    EXPECT_EQ(r.choices[0].finish, FinishReason::kStop);
    EXPECT_EQ(r.stop_token, 30);

    p.stop_token_ids.clear();
    r = run_scripted({{10, 8, 40}}, {1}, p);  // 8 is an EOS id
    EXPECT_EQ(r.choices[0].tokens, (std::vector<int32_t>{10}));
    EXPECT_EQ(r.stop_token, 8);

    p.ignore_eos = true;
    p.max_tokens = 3;
    r = run_scripted({{10, 8, 40, 50}}, {1}, p);
    EXPECT_EQ(r.choices[0].tokens, (std::vector<int32_t>{10, 8, 40}));
    EXPECT_EQ(r.choices[0].finish, FinishReason::kLength);
    EXPECT_FALSE(r.stop_token.has_value());

    p.ignore_eos = false;
    p.max_tokens = 2;
    p.n = 3;
    r = run_scripted({{10, 20, 30}}, {1, 2, 3, 4, 5}, p);
    for (const auto& c : r.choices) {
        EXPECT_EQ(c.tokens, (std::vector<int32_t>{10, 20}));
        EXPECT_EQ(c.finish, FinishReason::kLength);
    }
    EXPECT_EQ(r.stats.requests_finished, 1);
    EXPECT_EQ(r.stats.generated_tokens, 6);
}

TEST(SchedulerTest, PromptLogprobsOnceForEveryTokenAfterTheFirst) {
    SamplingParams p;
    p.max_tokens = 2;
    p.prompt_logprobs = 0;
    ScriptedRun r = run_scripted({{10, 20}}, {5, 6, 7, 8, 9, 11}, p);
    ASSERT_EQ(r.prompt_logprobs.size(), 5u);
    for (size_t i = 0; i < 5; ++i)
        EXPECT_EQ(r.prompt_logprobs[i].token, std::vector<int32_t>({6, 7, 8, 9, 11})[i]);
}

// The stop rules with the look-ahead: stops apply one step late, the extra token is discarded, and
// every output, stop id, prompt logprob and count equals the synchronous run's.
TEST(PipelinedSchedulerTest, StopRulesGiveTheSynchronousOutputs) {
    struct Case {
        std::vector<std::vector<int32_t>> script;
        std::vector<int32_t> prompt;
        SamplingParams p;
    };
    std::vector<Case> cases;
    SamplingParams p;
    p.max_tokens = 10;
    p.stop_token_ids = {30};
    cases.push_back({{{10, 20, 30, 40}}, {1, 2, 3}, p});
    p.stop_token_ids.clear();
    cases.push_back({{{10, 8, 40}}, {1}, p});  // EOS
    cases.push_back({{{8}}, {1, 2}, p});       // EOS first
    p.ignore_eos = true;
    p.max_tokens = 3;
    cases.push_back({{{10, 8, 40, 50}}, {1}, p});
    p.ignore_eos = false;
    p.max_tokens = 2;
    p.n = 3;
    cases.push_back({{{10, 20, 30}}, {1, 2, 3, 4, 5}, p});
    p.max_tokens = 5;
    p.prompt_logprobs = 0;
    cases.push_back({{{10, 20, 8}}, {5, 6, 7, 8, 9, 11}, p});
    for (size_t i = 0; i < cases.size(); ++i) {
        const Case& c = cases[i];
        const ScriptedRun want = run_scripted(c.script, c.prompt, c.p);
        const ScriptedRun got = run_scripted(c.script, c.prompt, c.p, 2);
        ASSERT_EQ(got.choices.size(), want.choices.size());
        for (size_t k = 0; k < want.choices.size(); ++k) {
            EXPECT_EQ(got.choices[k].tokens, want.choices[k].tokens) << "case " << i << " choice " << k;
            EXPECT_EQ(got.choices[k].finish, want.choices[k].finish) << "case " << i << " choice " << k;
        }
        EXPECT_EQ(got.stop_token, want.stop_token) << "case " << i;
        ASSERT_EQ(got.prompt_logprobs.size(), want.prompt_logprobs.size()) << "case " << i;
        for (size_t k = 0; k < want.prompt_logprobs.size(); ++k)
            EXPECT_EQ(got.prompt_logprobs[k].token, want.prompt_logprobs[k].token);
        EXPECT_EQ(got.stats.generated_tokens, want.stats.generated_tokens) << "case " << i;
        EXPECT_EQ(got.stats.requests_finished, want.stats.requests_finished) << "case " << i;
        EXPECT_EQ(got.stats.prompt_tokens, want.stats.prompt_tokens) << "case " << i;
    }
}

TEST(SchedulerTest, ValidateComparesPromptPlusMaxTokensWithoutOverflow) {
    ScriptedOptions o;
    o.outputs = {{1}};
    o.vocab_size = 100;
    ScriptedExecutor ex(o);
    EngineConfig cfg;
    cfg.block_size = 4;
    cfg.num_kv_blocks_override = 10;  // max_model_len 40
    auto core = EngineCore::create(cfg, &ex);
    ASSERT_TRUE(core.is_ok());
    const std::vector<int32_t> prompt(30, 1);
    SamplingParams p;
    p.max_tokens = 10;
    EXPECT_TRUE((*core)->validate(prompt, p).is_ok());  // exactly max_model_len
    p.max_tokens = 11;
    EXPECT_EQ((*core)->validate(prompt, p).code(), StatusCode::kOutOfRange);
    p.max_tokens = std::numeric_limits<int32_t>::max();
    const Status st = (*core)->validate(prompt, p);
    EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
    EXPECT_NE(st.message().find("2147483647"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("2147483677"), std::string::npos) << st.message();  // the sum, in 64 bits
    EXPECT_NE(st.message().find("40"), std::string::npos) << st.message();
    EXPECT_EQ((*core)->validate(std::vector<int32_t>(41, 1), SamplingParams{}).code(),
              StatusCode::kOutOfRange);
}

TEST(SchedulerTest, PlanRefusesAMaxModelLenThePoolCannotHold) {
    ScriptedOptions o;
    o.outputs = {{1}};
    ScriptedExecutor ex(o);
    EngineConfig cfg;
    cfg.block_size = 16;
    cfg.num_kv_blocks_override = 10;  // 160 tokens
    cfg.max_model_len = 161;
    auto plan = plan_kv_cache(cfg, ex);
    ASSERT_FALSE(plan.is_ok());
    EXPECT_EQ(plan.status().code(), StatusCode::kOutOfRange);
    EXPECT_NE(plan.status().message().find("161"), std::string::npos);
    EXPECT_NE(plan.status().message().find("160"), std::string::npos);
    cfg.max_model_len = 0;
    plan = plan_kv_cache(cfg, ex);
    ASSERT_TRUE(plan.is_ok());
    EXPECT_EQ(plan->max_model_len, 160);
}

// An executor whose blocks cost bytes, to test the budget split.
class CostlyExecutor final : public Executor {
  public:
    ExecutorInfo info() const override {
        ExecutorInfo i;
        i.vocab_size = 100;
        i.sliding_window = 128;
        i.max_position_embeddings = 131072;
        i.has_group[0] = i.has_group[1] = true;
        return i;
    }
    int64_t bytes_per_block(int64_t block_size, int) const override { return block_size * 1000; }
    ExecutorMemory memory() const override { return memory_; }
    Status init_cache(const CacheConfig&) override { return Status::ok(); }
    Result<StepHandle> submit(const StepBatch&) override { return internal_error("not for running"); }
    Status collect(StepHandle, StepResult*) override { return internal_error("not for running"); }
    ExecutorMemory memory_;  // {}: the executor reports none (no check)
};

TEST(SchedulerTest, PlanRefusesPoolsPastTheExecutorsFreeMemory) {
    CostlyExecutor ex;
    EngineConfig cfg;
    cfg.kv_cache_memory_bytes = 160'000'000;  // 10000 blocks of 16000 bytes
    ex.memory_ = {1'000'000'000, 159'000'000};
    auto plan = plan_kv_cache(cfg, ex);
    ASSERT_FALSE(plan.is_ok());
    EXPECT_EQ(plan.status().code(), StatusCode::kResourceExhausted);
    EXPECT_NE(plan.status().message().find("159000000 free"), std::string::npos) << plan.status().message();
    ex.memory_ = {1'000'000'000, 161'000'000};
    EXPECT_TRUE(plan_kv_cache(cfg, ex).is_ok());
}

TEST(SchedulerTest, PlanSplitsTheBudgetBetweenGroups) {
    CostlyExecutor ex;
    EngineConfig cfg;                         // block 16: 16000 bytes a block; 256 seqs; 2048 batched tokens
    cfg.kv_cache_memory_bytes = 160'000'000;  // 10000 blocks
    auto plan = plan_kv_cache(cfg, ex);
    ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
    // Sliding: 256 x (127 / 16 + 2) + (127 + 2047) / 16 + 2 = 2304 + 137 = 2441 blocks; full: the rest.
    EXPECT_EQ(plan->num_blocks[1], 2441);
    EXPECT_EQ(plan->num_blocks[0], 10000 - 2441);
    EXPECT_EQ(plan->max_model_len, (10000 - 2441) * 16);
    // A short --max-model-len with one sequence needs only 2048 / 16 full blocks.
    cfg.max_model_len = 2048;
    cfg.max_num_seqs = 1;
    plan = plan_kv_cache(cfg, ex);
    ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
    EXPECT_EQ(plan->num_blocks[0], 128);
    EXPECT_EQ(plan->num_blocks[1], 1 * 9 + 137);
    // A budget below the sliding need: at most half of it goes to the sliding group.
    cfg = EngineConfig{};
    cfg.kv_cache_memory_bytes = 48'000'000;  // 3000 blocks: sliding 1500, full 1500
    plan = plan_kv_cache(cfg, ex);
    ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
    EXPECT_EQ(plan->num_blocks[1], 1500);
    EXPECT_EQ(plan->num_blocks[0], 1500);
}

}  // namespace
}  // namespace volt::engine
