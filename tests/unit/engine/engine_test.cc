// The engine on the CPU executor over a random model (tests/unit/model/random_model.h): greedy outputs
// of 32 interleaved requests equal each request run alone; forced preemption changes nothing; seeded
// sampling is the same in any batch; the n choices of one request equal n requests with seeds
// seed + choice; prompt logprobs with chunk sizes 1 ... 2048 over prompts many windows long equal
// log_softmax of the logits of one contiguous-cache forward pass; the threaded Engine API. The
// PipelinedEngineTest runs repeat the important ones with the engine's look-ahead (a delayed executor:
// CpuExecutor with max_in_flight 2 or 3) and assert outputs identical to the synchronous run. The
// heartbeat (/health's source) goes stale while a step hangs with work pending, and not while idle.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <thread>

#include "engine/engine_core.h"
#include "executor/cpu_executor.h"
#include "model/random_model.h"
#include "model/sequence_runner.h"
#include "ops/sample.h"

namespace volt::engine {
namespace {

using executor::CpuExecutor;

using model::testing::random_model;
using model::testing::small_config;

std::shared_ptr<const model::ModelWeights> test_model() {
    static auto w = random_model(small_config(2), 11);  // layer 0 sliding (window 8), layer 1 full
    return w;
}

struct Job {
    std::vector<int32_t> prompt;
    SamplingParams params;
    int64_t arrive_step = 0;
};

struct JobOut {
    std::vector<std::vector<int32_t>> tokens;  // per choice
    std::vector<std::vector<TokenLogprob>> logprobs;
    std::vector<TokenLogprob> prompt_logprobs;
};

// Where run_jobs' CpuExecutor resolves DeferredToken ids: false, its asynchronous path (the ids moved in
// backend memory from the last draw of each seq_slot, as on a GPU); true, SyncExecutor on the host.
bool g_resolve_on_host = false;
// DeferredToken rows the last run_jobs resolved (either way).
int64_t g_deferred_resolved = 0;

// Runs jobs through an EngineCore over CpuExecutor with `in_flight` steps in flight (1: synchronous),
// each added at its arrive_step; checks invariants every step. With in_flight > 1 it also checks that
// the engine did keep several steps in flight.
std::vector<JobOut> run_jobs(const std::vector<Job>& jobs, EngineConfig cfg, EngineStats* stats = nullptr,
                             std::shared_ptr<const model::ModelWeights> weights = test_model(),
                             int in_flight = 1) {
    CpuExecutor ex(std::move(weights));
    ex.set_max_in_flight(in_flight);
    ex.set_resolve_on_host(g_resolve_on_host);
    auto core_or = EngineCore::create(cfg, &ex);
    EXPECT_EQ(ex.is_async(), !g_resolve_on_host);
    EXPECT_TRUE(core_or.is_ok()) << core_or.status().to_string();
    if (!core_or.is_ok()) return {};
    EngineCore& core = **core_or;
    std::vector<std::shared_ptr<RequestHandle>> handles(jobs.size());
    std::vector<JobOut> outs(jobs.size());
    size_t added = 0;
    int64_t most_in_flight = 0;
    for (int64_t step = 0; added < jobs.size() || core.has_requests(); ++step) {
        EXPECT_LT(step, 100000);
        for (size_t i = 0; i < jobs.size(); ++i) {
            if (jobs[i].arrive_step != step) continue;
            const Status valid = core.validate(jobs[i].prompt, jobs[i].params);
            EXPECT_TRUE(valid.is_ok()) << valid.to_string();
            if (!valid.is_ok()) return {};
            handles[i] = std::make_shared<RequestHandle>(static_cast<int64_t>(i),
                                                         static_cast<int32_t>(jobs[i].prompt.size()),
                                                         jobs[i].params.n, nullptr);
            outs[i].tokens.resize(jobs[i].params.n);
            outs[i].logprobs.resize(jobs[i].params.n);
            core.add_request(handles[i], jobs[i].prompt, jobs[i].params, jobs[i].params.seed.value_or(0));
            ++added;
        }
        EXPECT_TRUE(core.step().is_ok());
        most_in_flight = std::max(most_in_flight, core.num_in_flight());
        const Status inv = core.check_invariants();
        EXPECT_TRUE(inv.is_ok()) << inv.to_string();
        if (!inv.is_ok()) return {};
        for (size_t i = 0; i < jobs.size(); ++i) {
            if (!handles[i]) continue;
            RequestOutput o;
            while (handles[i]->next(&o, std::chrono::milliseconds(0))) {
                auto& t = outs[i].tokens[o.choice];
                t.insert(t.end(), o.tokens.begin(), o.tokens.end());
                auto& l = outs[i].logprobs[o.choice];
                l.insert(l.end(), o.logprobs.begin(), o.logprobs.end());
                if (!o.prompt_logprobs.empty()) outs[i].prompt_logprobs = o.prompt_logprobs;
            }
        }
    }
    EXPECT_EQ(core.num_in_flight(), 0);
    // Only the chosen path resolved deferred ids.
    EXPECT_EQ(g_resolve_on_host ? ex.device_deferred_resolved() : ex.num_deferred_resolved(), 0);
    g_deferred_resolved = ex.device_deferred_resolved() + ex.num_deferred_resolved();
    if (in_flight > 1) {
        EXPECT_GT(most_in_flight, 0) << "the engine never left a step in flight";
    } else {
        EXPECT_EQ(most_in_flight, 0);
    }
    if (stats) *stats = core.stats();
    return outs;
}

void expect_same_outputs(const std::vector<JobOut>& got, const std::vector<JobOut>& want, const char* what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(got[i].tokens, want[i].tokens) << what << ": request " << i;
        ASSERT_EQ(got[i].logprobs.size(), want[i].logprobs.size()) << what << ": request " << i;
        for (size_t c = 0; c < want[i].logprobs.size(); ++c) {
            ASSERT_EQ(got[i].logprobs[c].size(), want[i].logprobs[c].size()) << what << ": request " << i;
            for (size_t k = 0; k < want[i].logprobs[c].size(); ++k) {
                EXPECT_EQ(got[i].logprobs[c][k].token, want[i].logprobs[c][k].token);
                EXPECT_EQ(got[i].logprobs[c][k].logprob, want[i].logprobs[c][k].logprob);  // bitwise
                EXPECT_EQ(got[i].logprobs[c][k].top, want[i].logprobs[c][k].top);
            }
        }
        EXPECT_EQ(got[i].prompt_logprobs.size(), want[i].prompt_logprobs.size()) << what << ": request " << i;
    }
}

std::vector<int32_t> random_prompt(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> p(n);
    for (auto& t : p) t = static_cast<int32_t>(rng() % 97);
    return p;
}

EngineConfig small_engine(int64_t blocks) {
    EngineConfig cfg;
    cfg.block_size = 4;
    cfg.max_num_seqs = 16;
    cfg.max_num_batched_tokens = 32;
    cfg.num_kv_blocks_override = blocks;
    return cfg;
}

std::vector<Job> mixed_jobs(bool sampled) {
    std::vector<Job> jobs;
    std::mt19937 rng(5);
    for (int i = 0; i < 32; ++i) {
        Job j;
        j.prompt = random_prompt(1 + rng() % 40, 100 + i);
        j.params.max_tokens = 1 + static_cast<int32_t>(rng() % 12);
        j.params.temperature = 0.0f;
        if (sampled && i % 2 == 1) {
            j.params.temperature = 0.9f;
            j.params.top_p = 0.95f;
            j.params.seed = 1000 + i;
        }
        j.arrive_step = i / 3;
        jobs.push_back(j);
    }
    return jobs;
}

TEST(EngineTest, InterleavedGreedyEqualsEachAlone) {
    const auto jobs = mixed_jobs(false);
    const auto together = run_jobs(jobs, small_engine(512));
    ASSERT_EQ(together.size(), jobs.size());
    for (size_t i = 0; i < jobs.size(); ++i) {
        Job alone = jobs[i];
        alone.arrive_step = 0;
        const auto one = run_jobs({alone}, small_engine(512));
        ASSERT_EQ(one.size(), 1u);
        EXPECT_EQ(together[i].tokens[0], one[0].tokens[0]) << "request " << i;
        EXPECT_EQ(static_cast<int32_t>(one[0].tokens[0].size()), jobs[i].params.max_tokens);
    }
}

TEST(EngineTest, ForcedPreemptionChangesNothing) {
    const auto jobs = mixed_jobs(true);
    EngineStats roomy, tight;
    const auto a = run_jobs(jobs, small_engine(512), &roomy);
    const auto b = run_jobs(jobs, small_engine(20), &tight);  // 80 tokens per group: preempts
    EXPECT_EQ(roomy.num_preemptions, 0);
    EXPECT_GT(tight.num_preemptions, 0);
    ASSERT_EQ(a.size(), jobs.size());
    ASSERT_EQ(b.size(), jobs.size());
    for (size_t i = 0; i < jobs.size(); ++i) EXPECT_EQ(a[i].tokens, b[i].tokens) << "request " << i;
}

TEST(EngineTest, SeededSamplingIsTheSameInAnyBatch) {
    Job j;
    j.prompt = random_prompt(13, 1);
    j.params.temperature = 1.0f;
    j.params.top_k = 40;
    j.params.max_tokens = 12;
    j.params.seed = 77;
    const auto alone = run_jobs({j}, small_engine(256));
    std::vector<Job> crowd = mixed_jobs(true);
    crowd.resize(10);
    Job late = j;
    late.arrive_step = 2;
    crowd.push_back(late);
    const auto batched = run_jobs(crowd, small_engine(256));
    ASSERT_EQ(batched.size(), crowd.size());
    EXPECT_EQ(batched.back().tokens[0], alone[0].tokens[0]);
    Job other = j;
    other.params.seed = 78;
    EXPECT_NE(run_jobs({other}, small_engine(256))[0].tokens[0], alone[0].tokens[0]);  // 97^12 outcomes
}

TEST(EngineTest, ChoicesShareThePromptAndEqualSeparateSeeds) {
    Job j;
    j.prompt = random_prompt(10, 2);  // position 10 writes into a half-full shared block: copy on write
    j.params.temperature = 1.0f;
    j.params.max_tokens = 9;
    j.params.seed = 500;
    j.params.n = 3;
    for (int64_t blocks : {256, 12}) {
        EngineStats st;
        const auto forked = run_jobs({j}, small_engine(blocks), &st);
        ASSERT_EQ(forked.size(), 1u);
        for (int32_t c = 0; c < 3; ++c) {
            Job single = j;
            single.params.n = 1;
            single.params.seed = 500 + c;
            EXPECT_EQ(forked[0].tokens[c], run_jobs({single}, small_engine(256))[0].tokens[0])
                << "choice " << c << " blocks " << blocks;
        }
    }
}

TEST(EngineTest, AllowedIdsLogitBiasAndPaddedVocabularyReachTheSampler) {
    Job j;
    j.prompt = random_prompt(6, 3);
    j.params.max_tokens = 20;
    j.params.seed = 1;
    j.params.allowed_token_ids = {5, 9, 60};
    const auto allowed = run_jobs({j}, small_engine(64));
    ASSERT_EQ(allowed.size(), 1u);
    ASSERT_EQ(allowed[0].tokens[0].size(), 20u);
    for (int32_t t : allowed[0].tokens[0]) EXPECT_TRUE(t == 5 || t == 9 || t == 60) << t;
    Job b = j;
    b.params.allowed_token_ids.clear();
    b.params.logit_bias = {{42, 100.0f}};
    const auto biased = run_jobs({b}, small_engine(64));
    ASSERT_EQ(biased.size(), 1u);
    EXPECT_EQ(biased[0].tokens[0], std::vector<int32_t>(20, 42));
    // Ids >= vocab_size_real are padding: never drawn, even when the bias pushes them.
    Job pad = j;
    pad.prompt = {1, 2, 3, 4};
    pad.params.allowed_token_ids.clear();
    pad.params.max_tokens = 60;
    pad.params.logit_bias = {{49, 3.0f}};
    EngineConfig cfg = small_engine(64);
    cfg.vocab_size_real = 50;
    int64_t seen49 = 0;
    const auto padded = run_jobs({pad}, cfg);
    ASSERT_EQ(padded.size(), 1u);
    ASSERT_EQ(padded[0].tokens[0].size(), 60u);
    for (int32_t t : padded[0].tokens[0]) {
        EXPECT_LT(t, 50);
        seen49 += t == 49 ? 1 : 0;
    }
    EXPECT_GT(seen49, 0);
}

// log_softmax over the vocabulary of one row, in double (the reference for logprobs).
std::vector<double> log_softmax(const float* x, int64_t n) {
    double m = x[0];
    for (int64_t i = 1; i < n; ++i) m = std::max<double>(m, x[i]);
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += std::exp(x[i] - m);
    std::vector<double> out(n);
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] - m - std::log(s);
    return out;
}

void check_prompt_logprobs_any_chunk_size(std::shared_ptr<const model::ModelWeights> w, int in_flight = 1) {
    const auto& c = w->config;
    const int64_t P = 300;
    const auto prompt = random_prompt(P, 9);
    // Reference: the whole prompt in one step over a contiguous cache (identity block table).
    cpu::CpuBackend backend;
    auto placed = model::place_model(w, backend);
    ASSERT_TRUE(placed.is_ok());
    model::Forward fwd(*placed, backend);
    model::SequenceRunner runner(fwd, P);
    const std::vector<float> logits = runner.append(prompt, /*all_rows=*/true);

    // The same op the executor runs, over the contiguous logits: the engine's logprobs must match bitwise.
    std::vector<ops::SampleRow> ref_rows(P - 1);
    for (int64_t i = 0; i + 1 < P; ++i) {
        ref_rows[i].logits = logits.data() + i * c.vocab_size;
        ref_rows[i].target = prompt[i + 1];
        ref_rows[i].num_logprobs = 3;
    }
    std::vector<int32_t> ref_tok(P - 1), ref_top((P - 1) * 3);
    std::vector<float> ref_lp(P - 1), ref_top_lp((P - 1) * 3);
    ops::SampleArgs ra;
    ra.rows = ref_rows.data();
    ra.num_rows = P - 1;
    ra.vocab_size = ra.vocab_size_real = c.vocab_size;
    ra.tokens = ref_tok.data();
    ra.logprobs = ref_lp.data();
    ra.top_ids = ref_top.data();
    ra.top_logprobs = ref_top_lp.data();
    ra.max_top = 3;
    cpu::sample(ra);

    Job j;
    j.prompt = prompt;
    j.params.max_tokens = 1;
    j.params.temperature = 0.0f;
    j.params.prompt_logprobs = 3;
    j.params.logprobs = 0;
    for (int64_t chunk : {1, 16, 17, 128, 129, 2048}) {
        EngineConfig cfg;
        cfg.block_size = 16;
        cfg.max_num_batched_tokens = chunk;
        cfg.num_kv_blocks_override = 160;
        const auto out = run_jobs({j}, cfg, nullptr, w, in_flight);
        ASSERT_EQ(out.size(), 1u);
        const auto& pl = out[0].prompt_logprobs;
        ASSERT_EQ(static_cast<int64_t>(pl.size()), P - 1) << "chunk " << chunk;
        for (int64_t i = 0; i + 1 < P; ++i) {
            const auto ref = log_softmax(logits.data() + i * c.vocab_size, c.vocab_size);
            ASSERT_EQ(pl[i].token, prompt[i + 1]);
            ASSERT_NEAR(pl[i].logprob, ref[prompt[i + 1]], 1e-4) << "chunk " << chunk << " row " << i;
            ASSERT_EQ(pl[i].logprob, ref_lp[i]) << "chunk " << chunk << " row " << i;  // bitwise
            ASSERT_EQ(pl[i].top.size(), 3u);
            std::vector<int32_t> order(c.vocab_size);
            std::iota(order.begin(), order.end(), 0);
            std::stable_sort(order.begin(), order.end(),
                             [&](int32_t x, int32_t y) { return ref[x] > ref[y]; });
            for (int k = 0; k < 3; ++k) {
                EXPECT_EQ(pl[i].top[k].first, order[k]) << "chunk " << chunk << " row " << i;
                EXPECT_NEAR(pl[i].top[k].second, ref[order[k]], 1e-4);
            }
        }
        // The greedy token is the argmax of the last row, and its logprob is reported raw.
        const auto last = log_softmax(logits.data() + (P - 1) * c.vocab_size, c.vocab_size);
        const auto best = std::max_element(last.begin(), last.end()) - last.begin();
        ASSERT_EQ(out[0].tokens[0].size(), 1u);
        EXPECT_EQ(out[0].tokens[0][0], best);
        EXPECT_NEAR(out[0].logprobs[0][0].logprob, last[best], 1e-4);
    }
}

TEST(EngineTest, PromptLogprobsAnyChunkSizeEqualTheContiguousForward) {
    // 300 tokens: 37 windows of 8 (window < block size 16) ...
    check_prompt_logprobs_any_chunk_size(test_model());
    // ... and 7.5 windows of 40 (a window spanning blocks) with two sliding layers around a full one.
    auto c = small_config(3);
    c.sliding_window = 40;
    check_prompt_logprobs_any_chunk_size(random_model(c, 12));
}

// ---- The look-ahead: a delayed executor (max_in_flight 2 or 3) gives the synchronous outputs.

// Parameters: steps in flight, and whether deferred ids are resolved on the host (SyncExecutor) or by
// the asynchronous path in backend memory (what a GPU runs).
class PipelinedEngineTest : public ::testing::TestWithParam<std::tuple<int, bool>> {
  protected:
    void SetUp() override { g_resolve_on_host = std::get<1>(GetParam()); }
    void TearDown() override { g_resolve_on_host = false; }
    static int in_flight() { return std::get<0>(GetParam()); }
};

TEST_P(PipelinedEngineTest, InterleavedGreedyEqualsTheSynchronousRun) {
    const auto jobs = mixed_jobs(false);
    const auto sync = run_jobs(jobs, small_engine(512));
    expect_same_outputs(run_jobs(jobs, small_engine(512), nullptr, test_model(), in_flight()), sync,
                        "greedy");
}

TEST_P(PipelinedEngineTest, ForcedPreemptionChangesNothing) {
    const auto jobs = mixed_jobs(true);
    EngineStats tight;
    const auto sync = run_jobs(jobs, small_engine(512));
    const auto piped = run_jobs(jobs, small_engine(20), &tight, test_model(), in_flight());
    EXPECT_GT(tight.num_preemptions, 0);
    expect_same_outputs(piped, sync, "preempted");
}

TEST_P(PipelinedEngineTest, SeededSamplingAndLogprobsAreTheSameInAnyBatch) {
    Job j;
    j.prompt = random_prompt(13, 1);
    j.params.temperature = 1.0f;
    j.params.top_k = 40;
    j.params.max_tokens = 12;
    j.params.seed = 77;
    j.params.logprobs = 2;
    const auto alone = run_jobs({j}, small_engine(256));
    std::vector<Job> crowd = mixed_jobs(true);
    crowd.resize(10);
    Job late = j;
    late.arrive_step = 2;
    crowd.push_back(late);
    const auto batched = run_jobs(crowd, small_engine(256), nullptr, test_model(), in_flight());
    ASSERT_EQ(batched.size(), crowd.size());
    expect_same_outputs({batched.back()}, alone, "seeded");
}

// Penalties read the token history, which includes the deferred token (SeqSampling::output_deferred).
TEST_P(PipelinedEngineTest, PenaltiesCountTheDeferredToken) {
    std::vector<Job> jobs;
    for (int i = 0; i < 4; ++i) {
        Job j;
        j.prompt = random_prompt(5 + i, 20 + i);
        j.params.max_tokens = 24;
        j.params.temperature = i % 2 == 0 ? 0.0f : 0.8f;
        j.params.seed = 300 + i;
        j.params.frequency_penalty = 1.5f;
        j.params.presence_penalty = 1.0f;
        j.params.repetition_penalty = 1.3f;
        jobs.push_back(j);
    }
    const auto sync = run_jobs(jobs, small_engine(128));
    expect_same_outputs(run_jobs(jobs, small_engine(128), nullptr, test_model(), in_flight()), sync,
                        "penalties");
    EXPECT_GT(g_deferred_resolved, 0) << "no penalty row counted a deferred token";
}

TEST_P(PipelinedEngineTest, ChoicesForkAtCollectAndEqualTheSynchronousRun) {
    Job j;
    j.prompt = random_prompt(10, 2);  // position 10 writes into a half-full shared block: copy on write
    j.params.temperature = 1.0f;
    j.params.max_tokens = 9;
    j.params.seed = 500;
    j.params.n = 3;
    const auto sync = run_jobs({j}, small_engine(256));
    for (int64_t blocks : {256, 12}) {
        std::vector<Job> two = {j, j};  // a second request arrives while the first forks
        two[1].arrive_step = 1;
        two[1].params.seed = 900;
        const auto piped = run_jobs(two, small_engine(blocks), nullptr, test_model(), in_flight());
        ASSERT_EQ(piped.size(), 2u);
        expect_same_outputs({piped[0]}, sync, blocks == 256 ? "n=3, roomy" : "n=3, tight");
    }
}

TEST_P(PipelinedEngineTest, PromptLogprobsAnyChunkSizeEqualTheContiguousForward) {
    check_prompt_logprobs_any_chunk_size(test_model(), in_flight());
    auto c = small_config(3);
    c.sliding_window = 40;
    check_prompt_logprobs_any_chunk_size(random_model(c, 12), in_flight());
}

// The asynchronous path against SyncExecutor itself (the other tests compare each path with its own
// synchronous run): greedy and seeded requests, penalties, logprobs, n = 3, a preempting pool.
TEST(EngineTest, AsynchronousPathEqualsTheSynchronousExecutor) {
    auto jobs = mixed_jobs(true);
    for (size_t i = 0; i < jobs.size(); i += 3) {
        jobs[i].params.frequency_penalty = 0.8f;
        jobs[i].params.repetition_penalty = 1.2f;
        jobs[i].params.logprobs = 2;
    }
    jobs[4].params.n = 3;
    for (int64_t blocks : {512, 24}) {
        g_resolve_on_host = true;
        const auto sync = run_jobs(jobs, small_engine(blocks));
        g_resolve_on_host = false;
        EngineStats stats;
        const auto piped = run_jobs(jobs, small_engine(blocks), &stats, test_model(), 2);
        EXPECT_GT(g_deferred_resolved, 0);
        if (blocks == 24) {
            EXPECT_GT(stats.num_preemptions, 0);
        }
        expect_same_outputs(piped, sync, blocks == 512 ? "async vs sync" : "async vs sync, preempting");
    }
}

// Stop ids end a request one step late in the pipelined engine (the extra row is discarded at collect):
// the outputs are the synchronous run's, with each request stopped at the same token.
TEST_P(PipelinedEngineTest, StopIdsEndRequestsWhereTheSynchronousRunDoes) {
    auto jobs = mixed_jobs(true);
    for (Job& j : jobs) j.params.max_tokens = 12;
    const auto free_run = run_jobs(jobs, small_engine(512));
    int stops = 0;
    for (size_t i = 0; i < jobs.size(); ++i) {
        const auto& t = free_run[i].tokens[0];
        if (t.size() < 4) continue;
        jobs[i].params.stop_token_ids = {t[3]};  // its first occurrence ends the request there
        ++stops;
    }
    ASSERT_GT(stops, 8);
    const auto sync = run_jobs(jobs, small_engine(512));
    const auto piped = run_jobs(jobs, small_engine(512), nullptr, test_model(), in_flight());
    EXPECT_GT(g_deferred_resolved, 0);
    expect_same_outputs(piped, sync, "stop ids");
    for (size_t i = 0; i < jobs.size(); ++i) {
        if (!jobs[i].params.stop_token_ids.empty()) {
            EXPECT_LE(sync[i].tokens[0].size(), 3u) << i;
        }
    }
}

// A request aborted with steps in flight: the others' outputs are the synchronous run's, the aborted one
// ends with kAbort, and every block comes back once the steps in flight are collected.
TEST_P(PipelinedEngineTest, AbortWithStepsInFlightChangesNoOtherRequest) {
    auto jobs = mixed_jobs(true);
    jobs.resize(6);
    for (Job& j : jobs) {
        j.params.max_tokens = 10;
        j.arrive_step = 0;
    }
    const auto sync = run_jobs(jobs, small_engine(256));
    CpuExecutor ex(test_model());
    ex.set_max_in_flight(in_flight());
    ex.set_resolve_on_host(g_resolve_on_host);
    auto core_or = EngineCore::create(small_engine(256), &ex);
    ASSERT_TRUE(core_or.is_ok()) << core_or.status().to_string();
    EngineCore& core = **core_or;
    std::vector<std::shared_ptr<RequestHandle>> handles;
    for (size_t i = 0; i < jobs.size(); ++i) {
        handles.push_back(std::make_shared<RequestHandle>(
            static_cast<int64_t>(i), static_cast<int32_t>(jobs[i].prompt.size()), 1, nullptr));
        core.add_request(handles[i], jobs[i].prompt, jobs[i].params, jobs[i].params.seed.value_or(0));
    }
    constexpr size_t kAborted = 2;
    std::vector<std::vector<int32_t>> got(jobs.size());
    bool aborted = false, saw_abort = false;
    for (int step = 0; core.has_requests(); ++step) {
        ASSERT_LT(step, 1000);
        if (!aborted && got[kAborted].size() >= 3 && core.num_in_flight() > 0) {
            handles[kAborted]->abort();
            aborted = true;
        }
        ASSERT_TRUE(core.step().is_ok());
        ASSERT_TRUE(core.check_invariants().is_ok());
        for (size_t i = 0; i < jobs.size(); ++i) {
            RequestOutput o;
            while (handles[i]->next(&o, std::chrono::milliseconds(0))) {
                got[i].insert(got[i].end(), o.tokens.begin(), o.tokens.end());
                if (i == kAborted && o.finish == FinishReason::kAbort) saw_abort = true;
            }
        }
    }
    while (core.num_in_flight() > 0) ASSERT_TRUE(core.step().is_ok());
    EXPECT_TRUE(aborted);
    EXPECT_TRUE(saw_abort);
    EXPECT_GT(ex.device_deferred_resolved() + ex.num_deferred_resolved(), 0);
    for (size_t i = 0; i < jobs.size(); ++i) {
        if (i == kAborted) {
            EXPECT_LT(got[i].size(), sync[i].tokens[0].size());
            EXPECT_TRUE(std::equal(got[i].begin(), got[i].end(), sync[i].tokens[0].begin()));
        } else {
            EXPECT_EQ(got[i], sync[i].tokens[0]) << "request " << i;
        }
    }
    EXPECT_EQ(core.stats().kv_blocks_used[0] + core.stats().kv_blocks_used[1], 0);
}

INSTANTIATE_TEST_SUITE_P(InFlight, PipelinedEngineTest,
                         ::testing::Combine(::testing::Values(2, 3), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<int, bool>>& i) {
                             return std::to_string(std::get<0>(i.param)) +
                                    (std::get<1>(i.param) ? "_host" : "_device");
                         });

// ---- The threaded Engine.

TEST(EngineTest, ThreadedSubmitStreamAbortAndErrors) {
    auto engine_or = Engine::create(small_engine(64), std::make_unique<CpuExecutor>(test_model()));
    ASSERT_TRUE(engine_or.is_ok()) << engine_or.status().to_string();
    Engine& engine = **engine_or;
    EXPECT_EQ(engine.max_model_len(), 64 * 4);

    // Errors.
    EXPECT_EQ(engine.submit({}, {}).status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(engine.submit({97}, {}).status().code(), StatusCode::kInvalidArgument);
    SamplingParams too_long;
    too_long.max_tokens = 250;
    auto r = engine.submit(random_prompt(10, 3), too_long);
    ASSERT_EQ(r.status().code(), StatusCode::kOutOfRange);
    EXPECT_NE(r.status().message().find("260"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("256"), std::string::npos) << r.status().message();
    SamplingParams bad;
    bad.top_p = 0.0f;
    EXPECT_EQ(engine.submit({1}, bad).status().code(), StatusCode::kInvalidArgument);

    // A greedy request streams the same tokens as the synchronous core.
    Job j;
    j.prompt = random_prompt(7, 4);
    j.params.temperature = 0.0f;
    j.params.max_tokens = 6;
    const auto want = run_jobs({j}, small_engine(64))[0].tokens[0];
    auto h = engine.submit(j.prompt, j.params);
    ASSERT_TRUE(h.is_ok());
    // A long request that we abort.
    SamplingParams longp;
    longp.max_tokens = 200;
    longp.n = 2;
    auto g = engine.submit(random_prompt(5, 6), longp);
    ASSERT_TRUE(g.is_ok());
    std::vector<int32_t> got;
    RequestOutput o;
    FinishReason fin = FinishReason::kNone;
    while ((*h)->next(&o, std::chrono::seconds(10))) {
        got.insert(got.end(), o.tokens.begin(), o.tokens.end());
        fin = o.finish;
    }
    EXPECT_TRUE((*h)->done());
    EXPECT_EQ(got, want);
    EXPECT_EQ(fin, FinishReason::kLength);
    EXPECT_EQ((*h)->num_prompt_tokens(), 7);

    (*g)->abort();
    int aborted = 0;
    while ((*g)->next(&o, std::chrono::seconds(10)))
        if (o.finish == FinishReason::kAbort) ++aborted;
    EXPECT_EQ(aborted, 2);
    EXPECT_TRUE((*g)->done());
    for (int i = 0; i < 100 && engine.stats().kv_blocks_used[0] != 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const EngineStats st = engine.stats();
    EXPECT_EQ(st.kv_blocks_used[0], 0);
    EXPECT_EQ(st.kv_blocks_used[1], 0);
    EXPECT_EQ(st.kv_blocks_total[0], 64);

    engine.shutdown();
    EXPECT_EQ(engine.submit({1}, {}).status().code(), StatusCode::kUnavailable);
}

TEST(EngineTest, ThreadedEngineOverADelayedExecutor) {
    auto ex = std::make_unique<CpuExecutor>(test_model());
    ex->set_max_in_flight(2);
    auto engine_or = Engine::create(small_engine(64), std::move(ex));
    ASSERT_TRUE(engine_or.is_ok()) << engine_or.status().to_string();
    Engine& engine = **engine_or;
    Job j;
    j.prompt = random_prompt(7, 4);
    j.params.temperature = 0.0f;
    j.params.max_tokens = 6;
    const auto want = run_jobs({j}, small_engine(64))[0].tokens[0];
    auto h = engine.submit(j.prompt, j.params);
    ASSERT_TRUE(h.is_ok());
    SamplingParams longp;
    longp.max_tokens = 200;
    longp.n = 2;
    auto g = engine.submit(random_prompt(5, 6), longp);
    ASSERT_TRUE(g.is_ok());
    std::vector<int32_t> got;
    RequestOutput o;
    while ((*h)->next(&o, std::chrono::seconds(10))) got.insert(got.end(), o.tokens.begin(), o.tokens.end());
    EXPECT_EQ(got, want);
    (*g)->abort();  // with a step in flight
    int aborted = 0;
    while ((*g)->next(&o, std::chrono::seconds(10)))
        if (o.finish == FinishReason::kAbort) ++aborted;
    EXPECT_EQ(aborted, 2);
    // The step in flight is collected although no request is left, and its blocks come back.
    for (int i = 0; i < 100 && engine.stats().kv_blocks_used[0] + engine.stats().kv_blocks_used[1] != 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(engine.stats().kv_blocks_used[0], 0);
    EXPECT_EQ(engine.stats().kv_blocks_used[1], 0);
}

TEST(EngineTest, ShutdownAbortsWhatIsRunning) {
    auto engine = Engine::create(small_engine(64), std::make_unique<CpuExecutor>(test_model()));
    ASSERT_TRUE(engine.is_ok());
    SamplingParams p;
    p.max_tokens = 200;
    auto h = (*engine)->submit(random_prompt(5, 8), p);
    ASSERT_TRUE(h.is_ok());
    (*engine)->shutdown();
    RequestOutput o;
    FinishReason last = FinishReason::kNone;
    while ((*h)->next(&o, std::chrono::seconds(10))) last = o.finish;
    EXPECT_EQ(last, FinishReason::kAbort);
}

// An executor whose submit() blocks until the test opens the gate: a hung step.
class GatedExecutor : public Executor {
  public:
    explicit GatedExecutor(std::unique_ptr<Executor> inner) : inner_(std::move(inner)) {}
    ExecutorInfo info() const override { return inner_->info(); }
    int64_t bytes_per_block(int64_t block_size, int group) const override {
        return inner_->bytes_per_block(block_size, group);
    }
    ExecutorMemory memory() const override { return inner_->memory(); }
    Status init_cache(const CacheConfig& config) override { return inner_->init_cache(config); }
    Result<StepHandle> submit(const StepBatch& batch) override {
        {
            std::unique_lock<std::mutex> l(mu_);
            ++entered_;
            cv_.notify_all();
            cv_.wait(l, [&] { return open_; });
        }
        return inner_->submit(batch);
    }
    Status collect(StepHandle handle, StepResult* result) override { return inner_->collect(handle, result); }
    void open() {
        std::lock_guard<std::mutex> l(mu_);
        open_ = true;
        cv_.notify_all();
    }
    void wait_entered() {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return entered_ > 0; });
    }

  private:
    std::unique_ptr<Executor> inner_;
    std::mutex mu_;
    std::condition_variable cv_;
    bool open_ = false;
    int entered_ = 0;
};

TEST(EngineTest, HeartbeatGoesStaleWhileAStepHangsWithWorkPending) {
    auto gated = std::make_unique<GatedExecutor>(std::make_unique<CpuExecutor>(test_model()));
    GatedExecutor* gate = gated.get();
    auto engine = Engine::create(small_engine(64), std::move(gated));
    ASSERT_TRUE(engine.is_ok());
    const auto bound = std::chrono::milliseconds(1000);
    // Idle: healthy however old the last beat is.
    EngineHeartbeat idle = (*engine)->heartbeat();
    EXPECT_EQ(idle.pending_requests, 0);
    EXPECT_TRUE(engine_healthy(idle, idle.last_beat + std::chrono::hours(1), bound));

    SamplingParams p;
    p.max_tokens = 3;
    p.temperature = 0.0f;
    auto h = (*engine)->submit(random_prompt(5, 8), p);
    ASSERT_TRUE(h.is_ok());
    gate->wait_entered();  // the engine thread is now inside a step that does not return
    const EngineHeartbeat hung = (*engine)->heartbeat();
    EXPECT_EQ(hung.pending_requests, 1);
    EXPECT_EQ(hung.steps, 0);
    EXPECT_TRUE(engine_healthy(hung, hung.last_beat + bound, bound));
    EXPECT_FALSE(engine_healthy(hung, hung.last_beat + bound + std::chrono::milliseconds(1), bound));
    // The beat does not move while the step hangs (a later read sees the same one).
    EXPECT_EQ((*engine)->heartbeat().last_beat, hung.last_beat);

    gate->open();
    RequestOutput o;
    FinishReason last = FinishReason::kNone;
    int tokens = 0;
    while ((*h)->next(&o, std::chrono::seconds(10))) {
        tokens += static_cast<int>(o.tokens.size());
        last = o.finish;
    }
    EXPECT_EQ(last, FinishReason::kLength);
    EXPECT_EQ(tokens, 3);
    // The engine thread records the step's beat after it has published the step's outputs: wait for it
    // (bounded) rather than race it.
    EngineHeartbeat after = (*engine)->heartbeat();
    for (int i = 0; i < 1000 && (after.steps < 3 || after.pending_requests != 0); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        after = (*engine)->heartbeat();
    }
    EXPECT_EQ(after.pending_requests, 0);
    EXPECT_GE(after.steps, 3);
    EXPECT_EQ(after.tokens, 5 + 3);  // prompt tokens computed + tokens sampled
    EXPECT_GT(after.last_beat, hung.last_beat);
    (*engine)->shutdown();
    EXPECT_TRUE((*engine)->heartbeat().stopped);
    EXPECT_FALSE(engine_healthy((*engine)->heartbeat(), std::chrono::steady_clock::now(), bound));
}

}  // namespace
}  // namespace volt::engine
