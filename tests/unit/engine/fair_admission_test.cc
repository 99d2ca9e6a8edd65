// Fair admission (issue 19) on EngineCore + the scripted executor, asserting order, never time:
// - chunked long prefill: with max_num_batched_tokens 64, a 2,048-token prompt and a short request that
//   arrives while it prefills, the short request's first token comes before the long prompt's last chunk
//   (before: the long prompt took the whole budget every step and the short one waited for all of it);
// - round-robin across client requests: a request of 8 sequences holding every slot does not keep a later
//   request of 1 sequence waiting behind its remaining ones (before: strict arrival order);
// - the partial-prefill limit: two long prompts never prefill partly at once with the default 1;
// - priority (vLLM's field; the supervisor's probes): a waiting request of lower priority value is
//   admitted before earlier arrivals.
#include <gtest/gtest.h>

#include <map>

#include "engine/engine_core.h"
#include "executor/scripted_executor.h"

namespace volt::engine {
namespace {

struct Arrival {
    int64_t step;
    int64_t prompt_len;
    int64_t group;  // Engine::submit's; -1: its own
    int32_t max_tokens;
    int32_t priority = 0;
};

// Runs the arrivals; returns, per request, the step at which its first token arrived.
std::vector<int64_t> first_token_steps(const std::vector<Arrival>& arrivals, EngineConfig cfg,
                                       int64_t* max_partial = nullptr) {
    executor::ScriptedOptions o;
    o.outputs = {std::vector<int32_t>(64, 7)};
    o.vocab_size = 1000;
    o.end_token = 999;
    o.eos_token_ids = {999};
    executor::ScriptedExecutor ex(o);
    cfg.vocab_size_real = 1000;
    auto core_or = EngineCore::create(cfg, &ex);
    EXPECT_TRUE(core_or.is_ok()) << core_or.status().to_string();
    if (!core_or.is_ok()) return {};
    EngineCore& core = **core_or;
    std::vector<std::shared_ptr<RequestHandle>> handles(arrivals.size());
    std::vector<int64_t> first(arrivals.size(), -1);
    size_t added = 0;
    for (int64_t step = 0; added < arrivals.size() || core.has_requests(); ++step) {
        EXPECT_LT(step, 10000);
        if (step >= 10000) break;
        for (size_t i = 0; i < arrivals.size(); ++i) {
            if (arrivals[i].step != step) continue;
            SamplingParams p;
            p.max_tokens = arrivals[i].max_tokens;
            p.priority = arrivals[i].priority;
            p.temperature = 0.0f;
            std::vector<int32_t> prompt(arrivals[i].prompt_len, 5);
            EXPECT_TRUE(core.validate(prompt, p).is_ok());
            handles[i] = std::make_shared<RequestHandle>(static_cast<int64_t>(i),
                                                         static_cast<int32_t>(prompt.size()), 1, nullptr);
            core.add_request(handles[i], prompt, p, 0, arrivals[i].group);
            ++added;
        }
        EXPECT_TRUE(core.step().is_ok());
        EXPECT_TRUE(core.check_invariants().is_ok());
        for (size_t i = 0; i < arrivals.size(); ++i) {
            if (!handles[i]) continue;
            RequestOutput out;
            while (handles[i]->next(&out, std::chrono::milliseconds(0))) {
                if (!out.tokens.empty() && first[i] < 0) first[i] = step;
            }
        }
        if (max_partial) {
            int64_t partial = 0;
            for (const Sequence* s : core.scheduler().running()) {
                if (s->num_computed > 0 && s->num_computed < s->num_prompt()) ++partial;
            }
            *max_partial = std::max(*max_partial, partial);
        }
    }
    return first;
}

EngineConfig config(int64_t budget) {
    EngineConfig cfg;
    cfg.block_size = 16;
    cfg.max_num_seqs = 4;
    cfg.max_num_batched_tokens = budget;
    cfg.num_kv_blocks_override = 1024;
    cfg.max_model_len = 4096;
    return cfg;
}

TEST(FairAdmission, ShortRequestsFirstTokenComesBeforeTheLongPromptsLastChunk) {
    // The long prompt needs 32 steps of 64 tokens; the short one arrives at step 2.
    const std::vector<Arrival> arrivals = {{0, 2048, -1, 4}, {2, 8, -1, 4}};
    const auto got = first_token_steps(arrivals, config(64));
    ASSERT_EQ(got.size(), 2u);
    ASSERT_GE(got[0], 0);
    ASSERT_GE(got[1], 0);
    EXPECT_LT(got[1], got[0]) << "short first token at step " << got[1]
                              << ", long prompt's last chunk at step " << got[0];
    // The old scheduling, still selectable (--long-prefill-token-threshold -1): the short request waits
    // for the whole prefill.
    EngineConfig uncapped = config(64);
    uncapped.long_prefill_token_threshold = -1;
    const auto old = first_token_steps(arrivals, uncapped);
    ASSERT_EQ(old.size(), 2u);
    EXPECT_GT(old[1], old[0]);
}

TEST(FairAdmission, AWideRequestDoesNotKeepALaterOneWaitingBehindItsSequences) {
    // Request group 0: 8 sequences (a completions request with 8 prompts) on 4 slots, of 20, 21, ...
    // tokens so that slots free one at a time; group 1 arrives at step 1 with one sequence.
    std::vector<Arrival> arrivals;
    for (int i = 0; i < 8; ++i) arrivals.push_back({0, 4, 0, 20 + i});
    arrivals.push_back({1, 4, 1, 20});
    const auto got = first_token_steps(arrivals, config(64));
    ASSERT_EQ(got.size(), 9u);
    for (int i = 4; i < 8; ++i)
        EXPECT_LT(got[8], got[i]) << "the later request waited behind sequence " << i << " of the wide one";
    // Without groups (every sequence its own request: arrival order) it waits behind all of them, as before.
    for (int i = 0; i < 8; ++i) arrivals[i].group = -1;
    arrivals[8].group = -1;
    const auto fifo = first_token_steps(arrivals, config(64));
    ASSERT_EQ(fifo.size(), 9u);
    EXPECT_GT(fifo[8], fifo[7]);
}

TEST(FairAdmission, APriorityRequestIsAdmittedBeforeEarlierArrivals) {
    // 8 single-sequence requests on 4 slots, then at step 1 a probe of priority -1: it gets the first
    // slot that frees, before requests 4..7 that arrived earlier.
    std::vector<Arrival> arrivals;
    for (int i = 0; i < 8; ++i) arrivals.push_back({0, 4, -1, 20 + i});
    arrivals.push_back({1, 4, -1, 1, -1});
    const auto got = first_token_steps(arrivals, config(64));
    ASSERT_EQ(got.size(), 9u);
    for (int i = 4; i < 8; ++i) EXPECT_LT(got[8], got[i]) << "the probe waited behind request " << i;
    // At the default priority it waits for them all (arrival order).
    arrivals[8].priority = 0;
    const auto fifo = first_token_steps(arrivals, config(64));
    ASSERT_EQ(fifo.size(), 9u);
    for (int i = 4; i < 8; ++i) EXPECT_GT(fifo[8], fifo[i]);
}

TEST(FairAdmission, PartialPrefillLimit) {
    const std::vector<Arrival> arrivals = {{0, 1024, -1, 2}, {0, 1024, -1, 2}, {1, 8, -1, 2}};
    int64_t max_partial = 0;
    const auto got = first_token_steps(arrivals, config(64), &max_partial);
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(max_partial, 1);
    EXPECT_LT(got[2], got[0]);
    EngineConfig two = config(64);
    two.max_num_partial_prefills = 2;
    max_partial = 0;
    (void)first_token_steps(arrivals, two, &max_partial);
    EXPECT_EQ(max_partial, 2);
}

}  // namespace
}  // namespace volt::engine
