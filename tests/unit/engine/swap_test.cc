// KV swap to host memory (--preemption-mode swap) on the CPU executor over a random model: with a KV pool
// so small that a preemption happens every few steps, every request's tokens and logprobs are bitwise those
// of the unpreempted run (greedy, seeded sampling, n > 1 choices, the engine's look-ahead), the preemptions
// were swaps, and every block came back with the bytes it went out with (an FNV-1a hash of each device
// block before its swap-out equals the hash of the device block it was swapped into, per host block). A
// host pool too small falls back to recompute and changes nothing either. The block manager's swap
// bookkeeping (shared blocks, host pool counts) and the plan's mode rules and errors are checked directly.
// The reference is the unpreempted run of the same engine: its outputs do not depend on the batch
// (engine_test.cc pins each request alone to the batched run).
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <tuple>

#include "cpu/cpu_ops.h"
#include "engine/block_manager.h"
#include "engine/engine_core.h"
#include "executor/cpu_executor.h"
#include "executor/scripted_executor.h"
#include "model/forward.h"
#include "model/random_model.h"

namespace volt::engine {
namespace {

using executor::CpuExecutor;

std::shared_ptr<const model::ModelWeights> swap_model() {
    static auto w = model::testing::random_model(model::testing::small_config(2), 11);  // sliding + full
    return w;
}

struct Job {
    std::vector<int32_t> prompt;
    SamplingParams params;
    int64_t arrive_step = 0;
};

struct Out {
    std::vector<std::vector<int32_t>> tokens;  // per choice
    std::vector<std::vector<TokenLogprob>> logprobs;
};

// Swaps seen by the executor: per (rank, group, host block) the hash of the device block that went out
// last; a swap-in must find the same hash.
struct SwapLog {
    std::map<std::tuple<int, int, int32_t>, uint64_t> out;
    int64_t outs = 0, ins = 0, matched = 0, mismatched = 0, unknown = 0;
    std::set<int> ranks;  // ranks that swapped
    std::mutex mu;        // the ranks' threads report concurrently
};

std::unique_ptr<executor::BackendExecutor> make_executor(int in_flight, model::ParallelConfig parallel,
                                                         ops::Format kv_format, bool resolve_on_host,
                                                         bool full_tables = false) {
    std::unique_ptr<executor::BackendExecutor> owned;
    if (parallel.world_size() > 1) {
        auto made = executor::BackendExecutor::create_parallel(
            swap_model(), parallel,
            [](int) { return Result<std::unique_ptr<ops::Backend>>(std::make_unique<cpu::CpuBackend>()); },
            kv_format, {.timeout_s = 60});
        EXPECT_TRUE(made.is_ok()) << made.status().to_string();
        if (!made.is_ok()) return nullptr;
        owned = std::move(*made);
    } else {
        auto cpu = std::make_unique<CpuExecutor>(swap_model(), kv_format);
        cpu->set_max_in_flight(in_flight);
        cpu->set_resolve_on_host(resolve_on_host);
        owned = std::move(cpu);
    }
    owned->set_full_table_upload(full_tables);
    return owned;
}

// What a TeeExecutor saw: steps compared, and per step submitted the input bytes each side sent.
struct TeeLog {
    int64_t steps = 0, mismatched_steps = 0, decode_steps = 0;
    struct StepBytes {
        int64_t seqs, tokens, longest_context, kept, full;
    };
    std::vector<StepBytes> bytes;
};

// Runs every step on two executors, `kept` (block tables kept by seq_slot, the default) and `full` (every
// table sent with each step), and checks step by step that their results (sampled ids, logprobs and top
// lists) are bitwise equal; the engine sees `kept`.
class TeeExecutor : public Executor {
  public:
    TeeExecutor(executor::BackendExecutor* kept, executor::BackendExecutor* full, TeeLog* log)
        : kept_(kept), full_(full), log_(log) {}
    ExecutorInfo info() const override { return kept_->info(); }
    int64_t bytes_per_block(int64_t bs, int g) const override { return kept_->bytes_per_block(bs, g); }
    ExecutorMemory memory() const override { return kept_->memory(); }
    int max_in_flight() const override { return kept_->max_in_flight(); }
    Status init_cache(const CacheConfig& c) override {
        VOLT_RETURN_IF_ERROR(kept_->init_cache(c));
        return full_->init_cache(c);
    }
    Result<StepHandle> submit(const StepBatch& b) override {
        VOLT_ASSIGN_OR_RETURN(StepHandle h, kept_->submit(b));
        VOLT_ASSIGN_OR_RETURN(StepHandle g, full_->submit(b));
        EXPECT_EQ(h.id, g.id);
        int64_t longest = 0;
        for (int32_t n : b.context_lens) longest = std::max<int64_t>(longest, n);
        log_->bytes.push_back(
            {b.num_seqs, b.num_tokens, longest, kept_->last_input_bytes(), full_->last_input_bytes()});
        return h;
    }
    Status collect(StepHandle h, StepResult* result) override {
        VOLT_RETURN_IF_ERROR(kept_->collect(h, result));
        StepResult other;
        VOLT_RETURN_IF_ERROR(full_->collect(h, &other));
        ++log_->steps;
        bool same = result->tokens == other.tokens && result->logprobs.size() == other.logprobs.size();
        for (size_t r = 0; same && r < other.logprobs.size(); ++r) {
            const TokenLogprob &a = result->logprobs[r], &b = other.logprobs[r];
            // Bitwise (memcmp: equal NaNs compare equal).
            same = a.token == b.token && std::memcmp(&a.logprob, &b.logprob, sizeof a.logprob) == 0 &&
                   a.top.size() == b.top.size();
            for (size_t k = 0; same && k < a.top.size(); ++k)
                same = a.top[k].first == b.top[k].first &&
                       std::memcmp(&a.top[k].second, &b.top[k].second, sizeof(float)) == 0;
        }
        EXPECT_TRUE(same) << "step " << h.id << ": kept block tables differ from the full upload";
        if (!same) ++log_->mismatched_steps;
        return Status::ok();
    }

  private:
    executor::BackendExecutor *kept_, *full_;
    TeeLog* log_;
};

// parallel: tensor x pipeline ranks on CPU threads (every rank swaps its own shard). tee: every step also
// runs on an executor with full_table_upload and the two are compared step by step (TeeExecutor).
std::vector<Out> run(const std::vector<Job>& jobs, EngineConfig cfg, EngineStats* stats, SwapLog* log,
                     int in_flight = 1, model::ParallelConfig parallel = {},
                     ops::Format kv_format = ops::Format::kF32, bool resolve_on_host = false,
                     TeeLog* tee = nullptr) {
    std::unique_ptr<executor::BackendExecutor> owned =
        make_executor(in_flight, parallel, kv_format, resolve_on_host);
    if (!owned) return {};
    std::unique_ptr<executor::BackendExecutor> full;
    std::unique_ptr<TeeExecutor> tee_ex;
    if (tee != nullptr) {
        full = make_executor(in_flight, parallel, kv_format, resolve_on_host, /*full_tables=*/true);
        if (!full) return {};
        tee_ex = std::make_unique<TeeExecutor>(owned.get(), full.get(), tee);
    }
    executor::BackendExecutor& ex = *owned;
    if (log) {
        ex.set_swap_observer([log](int rank, const BlockSwap& s, bool out, uint64_t hash) {
            std::lock_guard<std::mutex> lock(log->mu);
            const auto key = std::make_tuple(rank, static_cast<int>(s.group), s.host);
            log->ranks.insert(rank);
            if (out) {
                ++log->outs;
                log->out[key] = hash;
                return;
            }
            ++log->ins;
            auto it = log->out.find(key);
            if (it == log->out.end()) {
                ++log->unknown;
            } else {
                ++(it->second == hash ? log->matched : log->mismatched);
                log->out.erase(it);
            }
        });
    }
    auto core_or = EngineCore::create(cfg, tee_ex ? static_cast<Executor*>(tee_ex.get()) : &ex);
    EXPECT_TRUE(core_or.is_ok()) << core_or.status().to_string();
    if (!core_or.is_ok()) return {};
    EngineCore& core = **core_or;
    std::vector<std::shared_ptr<RequestHandle>> handles(jobs.size());
    std::vector<Out> outs(jobs.size());
    size_t added = 0;
    for (int64_t step = 0; added < jobs.size() || core.has_requests(); ++step) {
        EXPECT_LT(step, 100000);
        if (step >= 100000) return {};
        for (size_t i = 0; i < jobs.size(); ++i) {
            if (jobs[i].arrive_step != step) continue;
            EXPECT_TRUE(core.validate(jobs[i].prompt, jobs[i].params).is_ok());
            handles[i] = std::make_shared<RequestHandle>(static_cast<int64_t>(i),
                                                         static_cast<int32_t>(jobs[i].prompt.size()),
                                                         jobs[i].params.n, nullptr);
            outs[i].tokens.resize(jobs[i].params.n);
            outs[i].logprobs.resize(jobs[i].params.n);
            core.add_request(handles[i], jobs[i].prompt, jobs[i].params, jobs[i].params.seed.value_or(0));
            ++added;
        }
        const Result<bool> stepped = core.step();
        EXPECT_TRUE(stepped.is_ok()) << stepped.status().to_string();
        const Status inv = core.check_invariants();
        EXPECT_TRUE(inv.is_ok()) << inv.to_string();
        if (!stepped.is_ok() || !inv.is_ok()) return {};
        for (size_t i = 0; i < jobs.size(); ++i) {
            if (!handles[i]) continue;
            RequestOutput o;
            while (handles[i]->next(&o, std::chrono::milliseconds(0))) {
                EXPECT_NE(o.finish, FinishReason::kError) << o.error;
                auto& t = outs[i].tokens[o.choice];
                t.insert(t.end(), o.tokens.begin(), o.tokens.end());
                auto& l = outs[i].logprobs[o.choice];
                l.insert(l.end(), o.logprobs.begin(), o.logprobs.end());
            }
        }
    }
    if (stats) *stats = core.stats();
    return outs;
}

void expect_bitwise_equal(const std::vector<Out>& got, const std::vector<Out>& want, const char* what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(got[i].tokens, want[i].tokens) << what << ": request " << i;
        ASSERT_EQ(got[i].logprobs.size(), want[i].logprobs.size()) << what;
        for (size_t c = 0; c < want[i].logprobs.size(); ++c) {
            ASSERT_EQ(got[i].logprobs[c].size(), want[i].logprobs[c].size()) << what << ": request " << i;
            for (size_t k = 0; k < want[i].logprobs[c].size(); ++k) {
                EXPECT_EQ(got[i].logprobs[c][k].token, want[i].logprobs[c][k].token);
                EXPECT_EQ(got[i].logprobs[c][k].logprob, want[i].logprobs[c][k].logprob) << what;  // bitwise
                EXPECT_EQ(got[i].logprobs[c][k].top, want[i].logprobs[c][k].top);
            }
        }
    }
}

std::vector<int32_t> random_prompt(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> p(n);
    for (auto& t : p) t = static_cast<int32_t>(rng() % 97);
    return p;
}

// 24 requests arriving over 4 steps: greedy and seeded sampling (with logprobs), prompts 1..40 tokens,
// 4..15 new tokens (at most 55 in all: 14 blocks of 4 hold one); with n_choices > 1 every fourth request asks
// for that many choices.
std::vector<Job> jobs(int n_choices = 1) {
    std::vector<Job> js;
    std::mt19937 rng(7);
    for (int i = 0; i < 24; ++i) {
        Job j;
        j.prompt = random_prompt(1 + rng() % 40, 300 + i);
        j.params.max_tokens = 4 + static_cast<int32_t>(rng() % 12);
        j.params.temperature = 0.0f;
        j.params.ignore_eos = true;
        if (i % 2 == 1) {
            j.params.temperature = 0.8f;
            j.params.top_p = 0.9f;
            j.params.seed = 2000 + i;
            j.params.logprobs = 2;
        }
        if (n_choices > 1 && i % 4 == 3) j.params.n = n_choices;
        j.arrive_step = i / 6;
        js.push_back(j);
    }
    return js;
}

EngineConfig engine(int64_t blocks, PreemptionMode mode, int64_t swap_bytes = int64_t{1} << 30) {
    EngineConfig cfg;
    cfg.block_size = 4;
    cfg.max_num_seqs = 16;
    cfg.max_num_batched_tokens = 32;
    cfg.num_kv_blocks_override = blocks;
    cfg.preemption_mode = mode;
    cfg.swap_space_bytes = swap_bytes;
    return cfg;
}

// Bytes of one block of both groups on the CPU executor (f32 KV): the host pools get swap_space_bytes
// in proportion to the device pools, so k of these give k host blocks per group (equal device counts).
int64_t block_pair_bytes(int64_t block_size) {
    CpuExecutor ex(swap_model());
    return ex.bytes_per_block(block_size, 0) + ex.bytes_per_block(block_size, 1);
}

// all_back: every swapped-out sequence was swapped in again. Not so with look-ahead, where a sequence
// swapped out while its last token is in flight finishes at collect without coming back.
// ranks_per_group: ranks holding each group's layers (one observation per block per such rank).
void expect_all_swaps_matched(const SwapLog& log, const EngineStats& st, bool all_back = true,
                              int64_t ranks_per_group = 1) {
    EXPECT_GT(log.ins, 0);
    EXPECT_EQ(log.outs, ranks_per_group * st.kv_blocks_swapped_out);
    EXPECT_EQ(log.ins, ranks_per_group * st.kv_blocks_swapped_in);
    EXPECT_EQ(log.matched, log.ins) << "every block swapped in has the bytes it was swapped out with";
    EXPECT_EQ(log.mismatched, 0);
    EXPECT_EQ(log.unknown, 0);
    if (all_back) {
        EXPECT_EQ(st.kv_blocks_swapped_in, st.kv_blocks_swapped_out);
        EXPECT_TRUE(log.out.empty()) << "every swapped-out block came back";
    }
}

TEST(SwapTest, SwapPreemptionEveryFewStepsIsBitwiseTheUnpreemptedRun) {
    const auto js = jobs();
    EngineStats roomy, tight;
    SwapLog log;
    const auto want = run(js, engine(512, PreemptionMode::kSwap), &roomy, nullptr);
    const auto got = run(js, engine(14, PreemptionMode::kSwap), &tight, &log);  // 56 tokens per group
    EXPECT_EQ(roomy.num_preemptions, 0);
    // Preemption every few steps, and every one a swap (the host pool is large).
    EXPECT_GE(tight.num_preemptions * 6, tight.num_steps)
        << tight.num_preemptions << " in " << tight.num_steps;
    EXPECT_EQ(tight.num_swapped_preemptions, tight.num_preemptions);
    // A resumed sequence continues: fewer prompt tokens computed than with recompute.
    EngineStats recomputed;
    const auto rec = run(js, engine(14, PreemptionMode::kRecompute), &recomputed, nullptr);
    EXPECT_EQ(recomputed.num_swapped_preemptions, 0);
    EXPECT_GT(recomputed.num_preemptions, 0);
    EXPECT_LT(tight.prompt_tokens, recomputed.prompt_tokens);
    EXPECT_EQ(roomy.prompt_tokens, tight.prompt_tokens) << "swap recomputes nothing";
    expect_bitwise_equal(got, want, "swap");
    expect_bitwise_equal(rec, want, "recompute");
    expect_all_swaps_matched(log, tight);
    std::printf("swap: %lld preemptions in %lld steps, %lld blocks out and in\n",
                static_cast<long long>(tight.num_preemptions), static_cast<long long>(tight.num_steps),
                static_cast<long long>(tight.kv_blocks_swapped_out));
}

// The int8 KV cache (codes and scales) swaps out and back bitwise: the tight, swapping run and a
// recomputing one produce the roomy run's tokens and logprobs, and every swapped-in block hashes (codes
// and scales) as it went out; on one rank and on 2 x 2 tensor x pipeline ranks.
TEST(SwapTest, Int8KvSwapsCodesAndScalesBitwise) {
    const auto js = jobs();
    const ops::Format i8 = ops::Format::kInt8;
    for (const model::ParallelConfig par : {model::ParallelConfig{}, model::ParallelConfig{2, 2}}) {
        EngineStats roomy, tight, recomputed;
        SwapLog log;
        const auto want = run(js, engine(512, PreemptionMode::kSwap), &roomy, nullptr, 1, par, i8);
        const auto got = run(js, engine(14, PreemptionMode::kSwap), &tight, &log, 1, par, i8);
        const auto rec = run(js, engine(14, PreemptionMode::kRecompute), &recomputed, nullptr, 1, par, i8);
        EXPECT_EQ(roomy.num_preemptions, 0);
        EXPECT_GT(tight.num_swapped_preemptions, 0);
        expect_bitwise_equal(got, want, "int8 swap");
        expect_bitwise_equal(rec, want, "int8 recompute");
        // Each group's layers live on 2 of the 4 ranks (pipeline stages split the layers).
        expect_all_swaps_matched(log, tight, true, par.world_size() > 1 ? 2 : 1);
    }
}

TEST(SwapTest, ChoicesSharingBlocksSwapAndComeBack) {
    const auto js = jobs(3);
    EngineStats roomy, tight;
    SwapLog log;
    const auto want = run(js, engine(512, PreemptionMode::kSwap), &roomy, nullptr);
    const auto got = run(js, engine(20, PreemptionMode::kSwap), &tight, &log);
    EXPECT_EQ(roomy.num_preemptions, 0);
    EXPECT_GT(tight.num_swapped_preemptions, 0);
    expect_bitwise_equal(got, want, "n = 3 with swap");
    expect_all_swaps_matched(log, tight);
}

TEST(SwapTest, LookAheadWithSwapIsBitwiseTheSynchronousRun) {
    const auto js = jobs(2);
    const auto want = run(js, engine(512, PreemptionMode::kSwap), nullptr, nullptr);
    // Deferred ids resolved by BackendExecutor's asynchronous path (in backend memory, as on a GPU) and
    // by SyncExecutor on the host.
    for (const bool on_host : {false, true}) {
        for (int in_flight : {2, 3}) {
            EngineStats tight;
            SwapLog log;
            const auto got = run(js, engine(16, PreemptionMode::kSwap), &tight, &log, in_flight, {},
                                 ops::Format::kF32, on_host);
            EXPECT_GT(tight.num_swapped_preemptions, 0) << in_flight;
            expect_bitwise_equal(got, want, on_host ? "look-ahead with swap, host" : "look-ahead with swap");
            expect_all_swaps_matched(log, tight, /*all_back=*/false);
        }
    }
}

// TP 2 x PP 2: stage 0 holds the sliding layer, stage 1 the full one, each over 2 tensor ranks with one
// KV head each; every rank swaps its own shard. The reference is the same ranks without preemption (TP
// changes the reduction order, so TP = 1 is not bitwise).
TEST(SwapTest, EveryTensorAndPipelineRankSwapsItsShard) {
    const auto js = jobs();
    const model::ParallelConfig p{2, 2};
    EngineStats roomy, tight;
    SwapLog log;
    const auto want = run(js, engine(512, PreemptionMode::kSwap), &roomy, nullptr, 1, p);
    const auto got = run(js, engine(14, PreemptionMode::kSwap), &tight, &log, 1, p);
    EXPECT_EQ(roomy.num_preemptions, 0);
    EXPECT_GT(tight.num_swapped_preemptions, 0);
    expect_bitwise_equal(got, want, "tp 2 x pp 2 with swap");
    expect_all_swaps_matched(log, tight, true, /*ranks_per_group=*/2);
    std::set<int> ranks;
    for (int r = 0; r < 4; ++r) ranks.insert(r);
    EXPECT_EQ(log.ranks, ranks);
}

TEST(SwapTest, AFullHostPoolFallsBackToRecompute) {
    const auto js = jobs();
    const auto want = run(js, engine(512, PreemptionMode::kSwap), nullptr, nullptr);
    EngineStats tight;
    SwapLog log;
    // 3 host blocks per group: a victim holding more is recomputed.
    const auto got = run(js, engine(16, PreemptionMode::kSwap, 3 * block_pair_bytes(4)), &tight, &log);
    EXPECT_GT(tight.num_swapped_preemptions, 0);
    EXPECT_LT(tight.num_swapped_preemptions, tight.num_preemptions) << "some preemptions recomputed";
    expect_bitwise_equal(got, want, "swap + recompute");
    expect_all_swaps_matched(log, tight);
}

TEST(SwapTest, PlanResolvesTheModeAndRefusesSwapWithoutSwapSpace) {
    CpuExecutor cpu(swap_model());
    // Auto on the CPU (KV already in host memory): recompute, no host pool.
    auto automatic = plan_kv_cache(engine(16, PreemptionMode::kAuto), cpu);
    ASSERT_TRUE(automatic.is_ok());
    EXPECT_FALSE(automatic->swap);
    EXPECT_EQ(automatic->num_host_blocks[0] + automatic->num_host_blocks[1], 0);
    // Swap: swap_space_bytes split in proportion to the device pools.
    auto swap = plan_kv_cache(engine(16, PreemptionMode::kSwap, 5 * block_pair_bytes(4)), cpu);
    ASSERT_TRUE(swap.is_ok());
    EXPECT_TRUE(swap->swap);
    EXPECT_EQ(swap->num_host_blocks[0], 5);
    EXPECT_EQ(swap->num_host_blocks[1], 5);
    auto rec = plan_kv_cache(engine(16, PreemptionMode::kRecompute), cpu);
    ASSERT_TRUE(rec.is_ok());
    EXPECT_FALSE(rec->swap);
    // --preemption-mode swap with --swap-space 0: a clear error, not a silent recompute.
    auto zero = plan_kv_cache(engine(16, PreemptionMode::kSwap, 0), cpu);
    ASSERT_FALSE(zero.is_ok());
    EXPECT_NE(zero.status().message().find("--swap-space is 0"), std::string::npos)
        << zero.status().message();
    auto tiny = plan_kv_cache(engine(16, PreemptionMode::kSwap, 1), cpu);
    EXPECT_FALSE(tiny.is_ok());
    EXPECT_FALSE(plan_kv_cache(engine(16, PreemptionMode::kAuto, -1), cpu).is_ok());
    // An executor that cannot swap (scripted).
    executor::ScriptedExecutor scripted({});
    auto s = plan_kv_cache(engine(16, PreemptionMode::kSwap), scripted);
    ASSERT_FALSE(s.is_ok());
    EXPECT_NE(s.status().message().find("cannot swap"), std::string::npos);
    EXPECT_TRUE(plan_kv_cache(engine(16, PreemptionMode::kAuto), scripted).is_ok());
}

// Block tables kept in backend memory by seq_slot and changed incrementally (model::DeviceBlockTables)
// against the full upload of every table with each step, step by step (TeeExecutor: sampled ids,
// logprobs and top-5 lists bitwise): sequences joining over time and finishing (slots reused), n = 3
// choices sharing blocks, swap and recompute preemption every few steps with resumption, the engine's
// look-ahead (asynchronous path, 2 in flight) and the synchronous one, and 2 x 2 tensor x pipeline ranks
// on threads.
TEST(SwapTest, KeptBlockTablesEqualTheFullUploadStepByStep) {
    auto js = jobs(3);
    for (Job& j : js) j.params.logprobs = 5;
    struct Case {
        PreemptionMode mode;
        int in_flight;
        bool on_host;
        model::ParallelConfig par;
    };
    const Case cases[] = {{PreemptionMode::kSwap, 1, false, {}},
                          {PreemptionMode::kRecompute, 1, false, {}},
                          {PreemptionMode::kSwap, 2, false, {}},
                          {PreemptionMode::kRecompute, 2, true, {}},
                          {PreemptionMode::kSwap, 1, false, {2, 2}}};
    for (const Case& c : cases) {
        TeeLog tee;
        EngineStats st;
        const auto got =
            run(js, engine(14, c.mode), &st, nullptr, c.in_flight, c.par, ops::Format::kF32, c.on_host, &tee);
        ASSERT_EQ(got.size(), js.size());
        EXPECT_GT(st.num_preemptions, 0);
        if (c.mode == PreemptionMode::kSwap) {
            EXPECT_GT(st.num_swapped_preemptions, 0);
        }
        EXPECT_GT(tee.steps, 50);
        EXPECT_EQ(tee.mismatched_steps, 0);
    }
}

// The bytes a decode step sends no longer grow with context: one long sequence decoding 200 tokens
// (51 blocks of 4), and 8 such sequences together. With the full upload a step's bytes grow by 4 per
// block per group per sequence; with kept tables they are the fixed inputs plus a (slot, index, block)
// write per new block.
TEST(SwapTest, DecodeStepBytesDoNotGrowWithContext) {
    for (const int seqs : {1, 8}) {
        std::vector<Job> js;
        for (int i = 0; i < seqs; ++i) {
            Job j;
            j.prompt = random_prompt(8, 900 + i);
            j.params.max_tokens = 200;
            j.params.temperature = 0.0f;
            j.params.ignore_eos = true;
            js.push_back(j);
        }
        EngineConfig cfg = engine(2048, PreemptionMode::kRecompute);
        cfg.max_model_len = 256;
        TeeLog tee;
        EngineStats st;
        const auto got = run(js, cfg, &st, nullptr, 1, {}, ops::Format::kF32, false, &tee);
        ASSERT_EQ(got.size(), js.size());
        EXPECT_EQ(tee.mismatched_steps, 0);
        // Decode steps of all `seqs` sequences (one token each).
        const int64_t bound = model::StepUpload::decode_bytes_kept_tables(seqs, 2 * seqs);
        int64_t kept_max = 0, full_first = -1, full_last = 0, kept_first = -1, kept_last = 0, longest = 0;
        int64_t decode = 0;
        for (const TeeLog::StepBytes& b : tee.bytes) {
            if (b.tokens != b.seqs || b.seqs != seqs) continue;
            ++decode;
            EXPECT_LE(b.kept, bound) << "context " << b.longest_context;
            kept_max = std::max(kept_max, b.kept);
            if (full_first < 0) {
                full_first = b.full;
                kept_first = b.kept;
            }
            full_last = b.full;
            kept_last = b.kept;
            longest = b.longest_context;
        }
        EXPECT_GT(decode, 150);
        EXPECT_GT(full_last, full_first + seqs * 2 * 4 * 40) << "the full upload grows with context";
        std::printf(
            "%d sequences, decode step input bytes at context %lld: full upload %lld (first %lld), "
            "kept tables %lld (first %lld, at most %lld)\n",
            seqs, static_cast<long long>(longest), static_cast<long long>(full_last),
            static_cast<long long>(full_first), static_cast<long long>(kept_last),
            static_cast<long long>(kept_first), static_cast<long long>(kept_max));
    }
}

TEST(SwapTest, BlockManagerSwapsSharedBlocksOutAndBackIn) {
    const int64_t n[2] = {10, 10}, host[2] = {4, 4};
    const bool both[2] = {true, true};
    BlockManager bm(4, n, 8, both, host);
    SeqBlocks parent, child;
    std::vector<BlockTableUpdate> up;
    std::vector<BlockCopy> cp;
    bm.append(0, &parent, 0, 6, &up, &cp);  // 2 blocks per group
    bm.fork(parent, 1, &child, &up);        // shared by the child
    const std::vector<int32_t> before = child.table[0];
    ASSERT_TRUE(bm.can_swap_out(child));
    std::vector<BlockSwap> out, in;
    up.clear();
    bm.swap_out(1, &child, &up, &out);
    ASSERT_EQ(out.size(), 4u);  // 2 blocks x 2 groups
    EXPECT_TRUE(child.swapped);
    EXPECT_EQ(out[0].group, 0);
    EXPECT_EQ(out[0].device, before[0]);
    EXPECT_EQ(out[1].device, before[1]);
    EXPECT_EQ(bm.pool(0).refcount(before[0]), 1) << "the parent keeps the shared block";
    EXPECT_EQ(bm.host_pool(0).num_free(), 2);
    EXPECT_EQ(up.size(), 2u);  // the child's slot drops both tables
    EXPECT_EQ(up[0].index, -1);
    ASSERT_TRUE(bm.check({&parent, &child}).is_ok());
    // Only 2 free host blocks per group now: a sequence of 3 blocks cannot swap out.
    SeqBlocks big;
    bm.append(2, &big, 0, 12, &up, &cp);
    EXPECT_FALSE(bm.can_swap_out(big));
    bm.free(2, &big, &up);
    // Back in: fresh private device blocks, host blocks free again; position 6 appends without a copy.
    ASSERT_TRUE(bm.can_swap_in(child, 6, 1));
    up.clear();
    bm.swap_in(3, &child, &up, &in);
    ASSERT_EQ(in.size(), 4u);
    for (size_t i = 0; i < in.size(); ++i) {
        EXPECT_EQ(in[i].host, out[i].host);
        EXPECT_EQ(in[i].group, out[i].group);
    }
    EXPECT_NE(child.table[0][1], parent.table[0][1]);
    EXPECT_EQ(bm.pool(0).refcount(child.table[0][1]), 1);
    EXPECT_EQ(bm.host_pool(0).num_free(), 4);
    EXPECT_EQ(up.size(), 4u);
    EXPECT_EQ(up[0].slot, 3);
    EXPECT_EQ(bm.blocks_needed(child, 6, 1, 0), 0);
    ASSERT_TRUE(bm.check({&parent, &child}).is_ok());
    // A swapped sequence freed (aborted while waiting) gives its host blocks back, no table update.
    out.clear();
    bm.swap_out(3, &child, &up, &out);
    up.clear();
    bm.free(-1, &child, &up);
    EXPECT_TRUE(up.empty());
    EXPECT_EQ(bm.host_pool(0).num_free(), 4);
    EXPECT_EQ(bm.host_pool(1).num_free(), 4);
    ASSERT_TRUE(bm.check({&parent, &child}).is_ok());
}

}  // namespace
}  // namespace volt::engine
