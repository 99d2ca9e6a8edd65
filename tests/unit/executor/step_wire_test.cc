// The engine's step as bytes (executor/step_wire.h), what rank 0 sends the worker processes: a decoded
// step equals the encoded one field by field (every StepBatch vector, the sampling fields, the histories
// when a penalty reads them and not otherwise, the prompt lengths a worker's StepBuilder needs also
// without them), and short, long or corrupted bytes are refused rather than
// read past their end.
#include "executor/step_wire.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <utility>

#include "executor/step_builder.h"

namespace volt::executor {
namespace {

using namespace engine;

struct Sample {
    SamplingParams plain, penalised;
    std::vector<int32_t> prompt{5, 6, 7}, output{8, 9};
    StepBatch batch;
};

void fill(Sample* s) {
    s->penalised.temperature = 0.7f;
    s->penalised.top_p = 0.9f;
    s->penalised.min_p = 0.05f;
    s->penalised.top_k = 40;
    s->penalised.repetition_penalty = 1.1f;
    s->penalised.logit_bias = {{3, -1.5f}, {11, 2.0f}};
    s->penalised.allowed_token_ids = {3, 4, 11};
    StepBatch& b = s->batch;
    b.num_tokens = 4;
    b.num_seqs = 2;
    b.vocab_size_real = 200;
    b.token_ids = {1, 2, 3, 4};
    b.positions = {0, 1, 2, 17};
    b.slot_mapping[0] = {0, 1, 2, 33};
    b.slot_mapping[1] = {4, 5, 6, 7};
    b.query_start_loc = {0, 3, 4};
    b.context_lens = {3, 18};
    b.seq_slots = {0, 5};
    b.request_index = {9, 4};
    b.swap_out = {{0, 3, 1}};
    b.swap_in = {{1, 2, 0}};
    b.table_updates = {{0, 0, 0, 0}, {5, 1, 1, 7}, {2, 0, -1, -1}};
    b.copies = {{0, 2, 9}};
    b.logits_rows = {{1, 0, 2, 0, 0, 3, false}, {2, 0, -1, 42, 0, -1, true}, {3, 1, -1, 43, 17, 2, true}};
    b.sampling = {{&s->plain, &s->prompt, &s->output, false}, {&s->penalised, &s->prompt, &s->output, false}};
}

// A worker's limits that the sample step fits (block size 16, 10 + 8 blocks, 2 host blocks per group,
// 6 seq slots, 8 rows a step, 64 positions, 256 ids).
StepLimits limits() {
    StepLimits l;
    l.cache.block_size = 16;
    l.cache.num_blocks[0] = 10;
    l.cache.num_blocks[1] = 8;
    l.cache.num_host_blocks[0] = l.cache.num_host_blocks[1] = 2;
    l.cache.max_num_seqs = 6;
    l.cache.max_num_batched_tokens = 8;
    l.cache.max_model_len = 64;
    l.vocab_size = 256;
    return l;
}

TEST(StepWire, ADecodedStepEqualsTheEncodedOne) {
    Sample s;
    fill(&s);
    std::vector<uint8_t> bytes;
    encode_step(s.batch, &bytes);
    WireStep w;
    ASSERT_TRUE(decode_step(bytes.data(), static_cast<int64_t>(bytes.size()), limits(), &w).is_ok());
    const StepBatch& a = s.batch;
    const StepBatch& b = w.batch;
    EXPECT_EQ(b.num_tokens, 4);
    EXPECT_EQ(b.num_seqs, 2);
    EXPECT_EQ(b.vocab_size_real, 200);
    EXPECT_EQ(b.token_ids, a.token_ids);
    EXPECT_EQ(b.positions, a.positions);
    EXPECT_EQ(b.slot_mapping[0], a.slot_mapping[0]);
    EXPECT_EQ(b.slot_mapping[1], a.slot_mapping[1]);
    EXPECT_EQ(b.query_start_loc, a.query_start_loc);
    EXPECT_EQ(b.context_lens, a.context_lens);
    EXPECT_EQ(b.seq_slots, a.seq_slots);
    EXPECT_EQ(b.request_index, a.request_index);
    ASSERT_EQ(b.swap_out.size(), 1u);
    EXPECT_EQ(b.swap_out[0].device, 3);
    EXPECT_EQ(b.swap_out[0].host, 1);
    ASSERT_EQ(b.swap_in.size(), 1u);
    EXPECT_EQ(b.swap_in[0].group, 1);
    ASSERT_EQ(b.table_updates.size(), 3u);
    EXPECT_EQ(b.table_updates[1].slot, 5);
    EXPECT_EQ(b.table_updates[1].block, 7);
    EXPECT_EQ(b.table_updates[2].index, -1);
    ASSERT_EQ(b.copies.size(), 1u);
    EXPECT_EQ(b.copies[0].dst, 9);
    ASSERT_EQ(b.logits_rows.size(), 3u);
    EXPECT_EQ(b.logits_rows[0].target, 2);
    EXPECT_EQ(b.logits_rows[0].num_logprobs, 3);
    EXPECT_EQ(b.logits_rows[2].seed, 43u);
    EXPECT_EQ(b.logits_rows[2].output_index, 17);
    EXPECT_TRUE(b.logits_rows[2].feeds_slot);
    ASSERT_EQ(b.sampling.size(), 2u);
    const SamplingParams& p = *b.sampling[1].params;
    EXPECT_EQ(p.temperature, 0.7f);
    EXPECT_EQ(p.top_p, 0.9f);
    EXPECT_EQ(p.min_p, 0.05f);
    EXPECT_EQ(p.top_k, 40);
    EXPECT_EQ(p.repetition_penalty, 1.1f);
    EXPECT_EQ(p.logit_bias, s.penalised.logit_bias);
    EXPECT_EQ(p.allowed_token_ids, s.penalised.allowed_token_ids);
    // The penalised sequence brings its histories; the plain one does not need them.
    EXPECT_EQ(*b.sampling[1].prompt, s.prompt);
    EXPECT_EQ(*b.sampling[1].output, s.output);
    EXPECT_TRUE(b.sampling[0].prompt->empty());
    EXPECT_TRUE(b.sampling[0].output->empty());
    EXPECT_EQ(b.sampling[0].params->temperature, s.plain.temperature);
}

TEST(StepWire, ShortLongAndCorruptedBytesAreRefused) {
    Sample s;
    fill(&s);
    std::vector<uint8_t> bytes;
    encode_step(s.batch, &bytes);
    WireStep w;
    for (int64_t n : {int64_t{0}, int64_t{7}, static_cast<int64_t>(bytes.size()) - 1}) {
        const Status st = decode_step(bytes.data(), n, limits(), &w);
        EXPECT_EQ(st.code(), StatusCode::kInternal) << n;
        EXPECT_EQ(st.message(), "a step from rank 0 is malformed (" + std::to_string(n) + " bytes)");
    }
    std::vector<uint8_t> longer = bytes;
    longer.push_back(0);
    EXPECT_EQ(decode_step(longer.data(), static_cast<int64_t>(longer.size()), limits(), &w).code(),
              StatusCode::kInternal);
    // token_ids' length (after three int64 fields) claims more elements than there are bytes.
    std::vector<uint8_t> huge = bytes;
    const int64_t lots = int64_t{1} << 40;
    std::memcpy(huge.data() + 24, &lots, sizeof lots);
    EXPECT_EQ(decode_step(huge.data(), static_cast<int64_t>(huge.size()), limits(), &w).code(),
              StatusCode::kInternal);
}

TEST(StepWire, EveryIndexOutOfTheWorkersRangeIsRefused) {
    // Each mutation of the sample step names something past the worker's CacheConfig or vocabulary.
    const std::vector<std::pair<const char*, std::function<void(Sample*)>>> bad = {
        {"seq slot", [](Sample* s) { s->batch.seq_slots[1] = 6; }},
        {"slot mapping", [](Sample* s) { s->batch.slot_mapping[0][3] = 10 * 16; }},
        {"slot mapping", [](Sample* s) { s->batch.slot_mapping[1][0] = -2; }},
        {"block-table update", [](Sample* s) { s->batch.table_updates[1].block = 8; }},
        {"block-table update", [](Sample* s) { s->batch.table_updates[0].slot = 6; }},
        {"block-table update", [](Sample* s) { s->batch.table_updates[0].index = 4; }},  // 64 / 16 blocks
        {"block-table update", [](Sample* s) { s->batch.table_updates[0].group = 2; }},
        {"block copy", [](Sample* s) { s->batch.copies[0].dst = 10; }},
        {"block swap", [](Sample* s) { s->batch.swap_out[0].host = 2; }},
        {"block swap", [](Sample* s) { s->batch.swap_in[0].device = -1; }},
        {"token_ids", [](Sample* s) { s->batch.token_ids[0] = 256; }},
        {"position", [](Sample* s) { s->batch.positions[3] = 64; }},
        {"query_start_loc", [](Sample* s) { s->batch.query_start_loc[2] = 5; }},
        {"query or context length", [](Sample* s) { s->batch.context_lens[0] = 2; }},
        {"logits row", [](Sample* s) { s->batch.logits_rows[1].num_logprobs = kMaxLogprobs + 1; }},
        {"logits row", [](Sample* s) { s->batch.logits_rows[0].target = 256; }},
        {"no sampling parameters", [](Sample* s) { s->batch.sampling[0].params = nullptr; }},
        {"logit_bias id",
         [](Sample* s) {
             s->penalised.logit_bias.push_back({256, 1.0f});
         }},
        {"sampling lists", [](Sample* s) { s->prompt.push_back(-1); }},
        {"prompt length", [](Sample* s) { s->prompt.resize(65, 1); }},
        {"num_tokens",
         [](Sample* s) {
             StepBatch& b = s->batch;
             b.num_tokens = 9;
             b.token_ids.resize(9, 1);
             b.positions.resize(9, 1);
             b.slot_mapping[0].resize(9, 1);
             b.slot_mapping[1].resize(9, 1);
             b.query_start_loc[2] = 9;
         }},
    };
    for (const auto& [what, mutate] : bad) {
        Sample s;
        fill(&s);
        mutate(&s);
        std::vector<uint8_t> bytes;
        encode_step(s.batch, &bytes);
        WireStep w;
        const Status st = decode_step(bytes.data(), static_cast<int64_t>(bytes.size()), limits(), &w);
        EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << what;
        EXPECT_NE(st.message().find(what), std::string::npos) << what << ": " << st.message();
    }
    // And the step itself fits, with room no larger than its limits allow.
    Sample s;
    fill(&s);
    std::vector<uint8_t> bytes;
    encode_step(s.batch, &bytes);
    EXPECT_LE(static_cast<int64_t>(bytes.size()), max_step_bytes(limits()));
    EXPECT_LT(max_step_bytes(limits()), int64_t{1} << 24);  // not the 16 GiB a header could claim
}

TEST(StepWire, AWorkerWithoutTheSamplingBuildsRankZerosStep) {
    // Sequence 0 decodes, sequence 1 continues its prompt: rank 0's StepBuilder puts the prompt rows
    // first, so a worker needs every prompt's length, also when the step comes without the sampling
    // fields (every worker but the output rank) and so without the prompts.
    Sample s;
    fill(&s);
    const std::vector<int32_t> long_prompt(10, 1);
    StepBatch& b = s.batch;
    b.token_ids = {4, 1, 2, 3};
    b.positions = {17, 0, 1, 2};
    b.slot_mapping[0] = {33, 0, 1, 2};
    b.slot_mapping[1] = {7, 4, 5, 6};
    b.query_start_loc = {0, 1, 4};
    b.context_lens = {18, 3};
    b.seq_slots = {5, 0};
    b.logits_rows = {{0, 0, -1, 42, 17, 2, true}, {3, 1, -1, 43, 0, -1, true}};
    b.sampling = {{&s.plain, &s.prompt, &s.output, false}, {&s.plain, &long_prompt, &s.output, false}};
    StepBuilder rank0, worker;
    rank0.init(6);
    worker.init(6);
    rank0.apply_table_updates(b);
    const model::HostStep want = rank0.build(b);
    ASSERT_EQ(want.num_prompt_rows, 3);
    ASSERT_EQ(want.token_ids, (std::vector<int32_t>{1, 2, 3, 4}));

    std::vector<uint8_t> lean, full;
    encode_step(b, &lean, false);
    encode_step(b, &full);
    EXPECT_LT(lean.size(), full.size());
    StepLimits l = limits();
    l.samples = false;
    WireStep w;
    ASSERT_TRUE(decode_step(lean.data(), static_cast<int64_t>(lean.size()), l, &w).is_ok());
    EXPECT_TRUE(w.batch.sampling.empty());
    EXPECT_EQ(w.prompt_lens, (std::vector<int32_t>{3, 10}));
    worker.apply_table_updates(w.batch);
    const model::HostStep& got = worker.build(w.batch, &w.prompt_lens);
    EXPECT_EQ(got.num_prompt_rows, want.num_prompt_rows);
    EXPECT_EQ(got.token_ids, want.token_ids);
    EXPECT_EQ(got.positions, want.positions);
    EXPECT_EQ(got.query_start_loc, want.query_start_loc);
    EXPECT_EQ(got.seq_lens, want.seq_lens);
    EXPECT_EQ(got.logits_rows, want.logits_rows);
    for (int g = 0; g < kNumKvGroups; ++g) {
        EXPECT_EQ(got.slot_mapping[g], want.slot_mapping[g]);
        EXPECT_EQ(got.block_tables[g], want.block_tables[g]);
    }
    // The output rank samples: a step without the sampling fields is refused there.
    const Status st = decode_step(lean.data(), static_cast<int64_t>(lean.size()), limits(), &w);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("no sampling parameters"), std::string::npos) << st.message();
}

TEST(StepWire, NoPaddingBytesTravel) {
    // LogitsRow has holes (after target, after feeds_slot): what they hold must not reach the bytes.
    std::vector<uint8_t> bytes[2];
    for (int k = 0; k < 2; ++k) {
        Sample s;
        fill(&s);
        for (LogitsRow& r : s.batch.logits_rows) {
            const LogitsRow keep = r;
            std::memset(static_cast<void*>(&r), k == 0 ? 0x00 : 0xa5, sizeof r);
            r.row = keep.row;
            r.seq = keep.seq;
            r.target = keep.target;
            r.seed = keep.seed;
            r.output_index = keep.output_index;
            r.num_logprobs = keep.num_logprobs;
            r.feeds_slot = keep.feeds_slot;
        }
        encode_step(s.batch, &bytes[k]);
    }
    EXPECT_EQ(bytes[0], bytes[1]);
}

TEST(StepWire, CacheConfigsAndReturnedIdsAreChecked) {
    EXPECT_TRUE(check_cache_config(limits().cache).is_ok());
    engine::CacheConfig c = limits().cache;
    c.block_size = 0;
    EXPECT_EQ(check_cache_config(c).code(), StatusCode::kInvalidArgument);
    c = limits().cache;
    c.num_blocks[1] = -1;
    EXPECT_EQ(check_cache_config(c).code(), StatusCode::kInvalidArgument);
    const int32_t tokens[3] = {0, 255, 7}, top[4] = {3, -1, 255, 0};
    EXPECT_TRUE(check_sampled_ids(tokens, 3, top, 4, 256).is_ok());
    const int32_t bad_token[1] = {256}, bad_top[1] = {-2};
    const Status t = check_sampled_ids(bad_token, 1, top, 0, 256);
    EXPECT_EQ(t.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(t.message().find("token id 256"), std::string::npos) << t.message();
    EXPECT_EQ(check_sampled_ids(tokens, 3, bad_top, 1, 256).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace volt::executor
