// The asynchronous CUDA executor (BackendExecutor's asynchronous path, issue 15 item 1), on the GPU (label
// `cuda`, inside cuda_backend_test; skipped where no GPU is found), on the tiny-mxfp4 golden checkpoint:
// the engine with two steps in flight (step N+1 enqueued before step N's ids reach the host, its
// DeferredToken ids and penalty histories moved on the device from the last draw of each seq_slot) gives
// the tokens and logprobs of the synchronous engine (one step in flight, SyncExecutor) bitwise: greedy,
// seeded sampling with top-k / top-p, repetition / frequency / presence penalties, logprobs, n > 1 choices,
// staggered arrivals, stop ids, and a KV pool small enough to preempt by swapping; with CUDA graphs and with
// --enforce-eager. The CPU twin of these checks (the same code path on the CPU backend):
// tests/unit/engine/engine_test.cc PipelinedEngineTest.*_device, swap_test.cc.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/check.h"
#include "cuda/cuda_backend.h"
#include "engine/engine_core.h"
#include "executor/backend_executor.h"
#include "model/loader.h"
#include "source_dir.h"

namespace volt::cuda {
namespace {

using test::source_dir;

std::shared_ptr<const model::ModelWeights> tiny() {
    static std::shared_ptr<const model::ModelWeights> w = [] {
        auto loaded = model::load_model(source_dir() + "/tests/data/golden/tiny-mxfp4",
                                        {.progress = io::ProgressMode::kOff});
        VOLT_CHECK(loaded.is_ok()) << loaded.status().to_string();
        return std::shared_ptr<const model::ModelWeights>(std::move(*loaded));
    }();
    return w;
}

struct Job {
    std::vector<int32_t> prompt;
    engine::SamplingParams params;
    int64_t arrive_step = 0;
};

struct Out {
    std::vector<std::vector<int32_t>> tokens;  // per choice
    std::vector<std::vector<engine::TokenLogprob>> logprobs;
};

struct RunInfo {
    bool async = false;
    int64_t deferred = 0, graph_replays = 0, most_in_flight = 0, swapped = 0;
};

// The jobs through an EngineCore over the CUDA executor with `in_flight` steps in flight; on_host: the
// synchronous executor (SyncExecutor: each step computed in submit, the executor before the asynchronous
// path). full_tables: every block table sent with each step (set_full_table_upload) instead of the tables
// kept on the device by seq_slot. Empty: no GPU.
std::vector<Out> run(const std::vector<Job>& jobs, int in_flight, bool eager, int64_t blocks, RunInfo* info,
                     bool on_host = false, bool full_tables = false) {
    auto backend = CudaBackend::create({.dtype = "half"});
    if (!backend.is_ok()) return {};
    auto ex_or = executor::BackendExecutor::create(tiny(), std::move(*backend), ops::Format::kF16, in_flight);
    VOLT_CHECK(ex_or.is_ok()) << ex_or.status().to_string();
    executor::BackendExecutor& ex = **ex_or;
    ex.set_enforce_eager(eager);
    ex.set_resolve_on_host(on_host);
    ex.set_full_table_upload(full_tables);
    engine::EngineConfig cfg;
    cfg.block_size = 16;
    cfg.max_num_seqs = 16;
    cfg.max_num_batched_tokens = 256;
    cfg.num_kv_blocks_override = blocks;
    cfg.swap_space_bytes = int64_t{64} << 20;
    cfg.preemption_mode = engine::PreemptionMode::kSwap;
    auto core_or = engine::EngineCore::create(cfg, &ex);
    VOLT_CHECK(core_or.is_ok()) << core_or.status().to_string();
    engine::EngineCore& core = **core_or;
    std::vector<std::shared_ptr<engine::RequestHandle>> handles(jobs.size());
    std::vector<Out> outs(jobs.size());
    size_t added = 0;
    for (int64_t step = 0; added < jobs.size() || core.has_requests(); ++step) {
        VOLT_CHECK(step < 100000);
        for (size_t i = 0; i < jobs.size(); ++i) {
            if (jobs[i].arrive_step != step) continue;
            VOLT_CHECK(core.validate(jobs[i].prompt, jobs[i].params).is_ok());
            handles[i] = std::make_shared<engine::RequestHandle>(static_cast<int64_t>(i),
                                                                 static_cast<int32_t>(jobs[i].prompt.size()),
                                                                 jobs[i].params.n, nullptr);
            outs[i].tokens.resize(jobs[i].params.n);
            outs[i].logprobs.resize(jobs[i].params.n);
            core.add_request(handles[i], jobs[i].prompt, jobs[i].params, jobs[i].params.seed.value_or(0));
            ++added;
        }
        const Result<bool> stepped = core.step();
        VOLT_CHECK(stepped.is_ok()) << stepped.status().to_string();
        info->most_in_flight = std::max(info->most_in_flight, core.num_in_flight());
        for (size_t i = 0; i < jobs.size(); ++i) {
            if (!handles[i]) continue;
            engine::RequestOutput o;
            while (handles[i]->next(&o, std::chrono::milliseconds(0))) {
                VOLT_CHECK(o.finish != engine::FinishReason::kError) << o.error;
                auto& t = outs[i].tokens[o.choice];
                t.insert(t.end(), o.tokens.begin(), o.tokens.end());
                auto& l = outs[i].logprobs[o.choice];
                l.insert(l.end(), o.logprobs.begin(), o.logprobs.end());
            }
        }
    }
    info->async = ex.is_async();
    info->deferred = ex.device_deferred_resolved();
    info->graph_replays = ex.graph_replays();
    info->swapped = core.stats().num_swapped_preemptions;
    return outs;
}

void expect_same(const std::vector<Out>& got, const std::vector<Out>& want, const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(got[i].tokens, want[i].tokens) << what << ": request " << i;
        ASSERT_EQ(got[i].logprobs.size(), want[i].logprobs.size()) << what;
        for (size_t c = 0; c < want[i].logprobs.size(); ++c) {
            ASSERT_EQ(got[i].logprobs[c].size(), want[i].logprobs[c].size()) << what << ": request " << i;
            for (size_t k = 0; k < want[i].logprobs[c].size(); ++k) {
                EXPECT_EQ(got[i].logprobs[c][k].token, want[i].logprobs[c][k].token) << what;
                EXPECT_EQ(got[i].logprobs[c][k].logprob, want[i].logprobs[c][k].logprob) << what;  // bitwise
                EXPECT_EQ(got[i].logprobs[c][k].top, want[i].logprobs[c][k].top) << what;
            }
        }
    }
}

// 12 requests: greedy and seeded sampling alternating, penalties on a third of them, logprobs, one with
// n = 3, arrivals staggered so that prefill chunks and decodes share steps.
std::vector<Job> jobs(int64_t vocab) {
    std::vector<Job> js;
    std::mt19937 rng(21);
    for (int i = 0; i < 12; ++i) {
        Job j;
        j.prompt.resize(3 + rng() % 60);
        for (auto& t : j.prompt) t = static_cast<int32_t>(rng() % vocab);
        j.params.max_tokens = 8 + static_cast<int32_t>(rng() % 24);
        j.params.ignore_eos = true;
        j.params.temperature = 0.0f;
        j.params.logprobs = i % 4 == 0 ? 3 : -1;
        if (i % 2 == 1) {
            j.params.temperature = 0.8f;
            j.params.top_p = 0.9f;
            j.params.top_k = 50;
            j.params.seed = 4000 + i;
        }
        if (i % 3 == 0) {
            j.params.repetition_penalty = 1.3f;
            j.params.frequency_penalty = 0.7f;
            j.params.presence_penalty = 0.5f;
        }
        if (i == 5) j.params.n = 3;
        j.arrive_step = i / 2;
        js.push_back(j);
    }
    return js;
}

class AsyncCudaExecutor : public ::testing::TestWithParam<bool> {};  // param: eager

TEST_P(AsyncCudaExecutor, TwoStepsInFlightEqualOneBitwise) {
    const bool eager = GetParam();
    const int64_t vocab = tiny()->config.vocab_size;
    const std::vector<Job> js = jobs(vocab);
    RunInfo sync_info, one_info, async_info;
    const auto sync = run(js, 1, eager, 512, &sync_info, /*on_host=*/true);
    if (sync.empty()) GTEST_SKIP() << "no CUDA device";
    EXPECT_FALSE(sync_info.async);
    // The asynchronous path with one step in flight, then with two.
    const auto one = run(js, 1, eager, 512, &one_info);
    expect_same(one, sync, eager ? "eager, 1 in flight" : "graphs, 1 in flight");
    const auto piped = run(js, 2, eager, 512, &async_info);
    EXPECT_TRUE(async_info.async);
    EXPECT_GE(async_info.most_in_flight, 1) << "the engine never kept a step in flight";
    EXPECT_GT(async_info.deferred, 0) << "no step read a token id drawn on the device";
    if (eager) {
        EXPECT_EQ(async_info.graph_replays, 0);
    } else {
        EXPECT_GT(async_info.graph_replays, 0);
    }
    expect_same(piped, sync, eager ? "eager" : "graphs");
}

// A pool of 24 blocks per group: sequences are swapped out and back in while steps are in flight.
TEST_P(AsyncCudaExecutor, SwapPreemptionWithTwoStepsInFlightEqualsTheRoomyRun) {
    const bool eager = GetParam();
    const std::vector<Job> js = jobs(tiny()->config.vocab_size);
    RunInfo roomy_info, tight_info;
    const auto roomy = run(js, 1, eager, 512, &roomy_info, /*on_host=*/true);
    if (roomy.empty()) GTEST_SKIP() << "no CUDA device";
    const auto tight = run(js, 2, eager, 24, &tight_info);
    EXPECT_GT(tight_info.swapped, 0);
    EXPECT_GT(tight_info.deferred, 0);
    expect_same(tight, roomy, eager ? "eager, swapped" : "graphs, swapped");
}

// Block tables kept on the device by seq_slot and changed by each step's (slot, index, block) writes give
// the full upload's outputs bitwise: two steps in flight, a pool that swaps (slots cleared and refilled,
// sequences finishing and their slots reused by later arrivals).
TEST_P(AsyncCudaExecutor, KeptBlockTablesEqualTheFullUpload) {
    const bool eager = GetParam();
    const std::vector<Job> js = jobs(tiny()->config.vocab_size);
    for (const int64_t blocks : {512, 24}) {
        RunInfo full_info, kept_info;
        const auto full = run(js, 2, eager, blocks, &full_info, false, /*full_tables=*/true);
        if (full.empty()) GTEST_SKIP() << "no CUDA device";
        const auto kept = run(js, 2, eager, blocks, &kept_info);
        if (blocks == 24) {
            EXPECT_GT(kept_info.swapped, 0);
        }
        if (!eager) {
            EXPECT_GT(kept_info.graph_replays, 0);
        }
        expect_same(kept, full,
                    std::string(eager ? "eager" : "graphs") + ", kept tables vs full, " +
                        std::to_string(blocks) + " blocks");
    }
}

// Stop ids: each request stops at the first occurrence of its 4th free-running token, one step late in
// the pipelined engine; the outputs are the synchronous engine's.
TEST_P(AsyncCudaExecutor, StopIdsEqualTheSynchronousRun) {
    const bool eager = GetParam();
    std::vector<Job> js = jobs(tiny()->config.vocab_size);
    RunInfo info;
    const auto free_run = run(js, 1, eager, 512, &info);
    if (free_run.empty()) GTEST_SKIP() << "no CUDA device";
    for (size_t i = 0; i < js.size(); ++i)
        if (js[i].params.n == 1 && free_run[i].tokens[0].size() > 3)
            js[i].params.stop_token_ids = {free_run[i].tokens[0][3]};
    RunInfo a, b;
    const auto sync = run(js, 1, eager, 512, &a, /*on_host=*/true);
    const auto piped = run(js, 2, eager, 512, &b);
    expect_same(piped, sync, "stop ids");
}

INSTANTIATE_TEST_SUITE_P(Graphs, AsyncCudaExecutor, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) {
                             return i.param ? "Eager" : "Graphs";
                         });

}  // namespace
}  // namespace volt::cuda
