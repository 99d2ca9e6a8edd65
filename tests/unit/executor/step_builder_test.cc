// StepBuilder::build's row order (ForwardBatch::num_prompt_rows): prompt rows first, generated rows after,
// a sequence holding both split into two parts that share its block table, logits rows remapped. The
// expected HostStep is written out by hand from the rule (sequence index < prompt length: prompt row).
#include "executor/step_builder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace volt::executor {
namespace {

using engine::BlockTableUpdate;
using engine::LogitsRow;
using engine::SeqSampling;
using engine::StepBatch;

struct Seq {
    std::vector<int32_t> prompt;
    int32_t context_len;          // keys after the step
    std::vector<int32_t> ids;     // this step's rows
    std::vector<int32_t> blocks;  // block table (group 0 and 1)
};

StepBatch batch_of(const std::vector<Seq>& seqs, std::vector<std::vector<int32_t>>* prompts) {
    StepBatch b;
    b.num_seqs = static_cast<int64_t>(seqs.size());
    b.query_start_loc = {0};
    prompts->clear();
    for (const Seq& s : seqs) prompts->push_back(s.prompt);
    for (size_t i = 0; i < seqs.size(); ++i) {
        const Seq& s = seqs[i];
        const auto q = static_cast<int32_t>(s.ids.size());
        for (int32_t j = 0; j < q; ++j) {
            const int32_t index = s.context_len - q + j;
            b.token_ids.push_back(s.ids[j]);
            b.positions.push_back(index);
            for (auto& m : b.slot_mapping) m.push_back(1000 * static_cast<int64_t>(i) + index);
        }
        b.query_start_loc.push_back(static_cast<int32_t>(b.token_ids.size()));
        b.context_lens.push_back(s.context_len);
        b.seq_slots.push_back(static_cast<int32_t>(i));
        SeqSampling ss;
        ss.prompt = &(*prompts)[i];
        b.sampling.push_back(ss);
        for (int g = 0; g < ops::kNumKvGroups; ++g)
            for (size_t k = 0; k < s.blocks.size(); ++k)
                b.table_updates.push_back({static_cast<int32_t>(i), g, static_cast<int32_t>(k), s.blocks[k]});
        // The last row of every sequence wants logits.
        LogitsRow lr;
        lr.row = static_cast<int32_t>(b.token_ids.size()) - 1;
        lr.seq = static_cast<int32_t>(i);
        b.logits_rows.push_back(lr);
    }
    b.num_tokens = static_cast<int64_t>(b.token_ids.size());
    return b;
}

// Three sequences, one of each kind: 0 decoding (prompt 4, key 6 generated); 1 a prompt chunk (rows 2..4 of
// a 5-token prompt); 2 recomputed after preemption (prompt 3, 2 outputs: rows 0..4, prompt rows 0..2).
StepBatch mixed_split_batch(std::vector<std::vector<int32_t>>* prompts) {
    return batch_of({{{1, 2, 3, 4}, 7, {60}, {7}},
                     {{5, 6, 7, 8, 9}, 5, {7, 8, 9}, {3}},
                     {{10, 11, 12}, 5, {10, 11, 12, 70, 71}, {4, 9}}},
                    prompts);
}

TEST(StepBuilder, PromptRowsFirstMixedSequenceSplit) {
    std::vector<std::vector<int32_t>> prompts;
    // 0: decoding (prompt 4, key 6 generated); 1: a prompt chunk (rows 2..4 of a 5-token prompt);
    // 2: recomputed after preemption (prompt 3, 2 outputs: rows 0..4, prompt rows 0..2).
    const StepBatch b = mixed_split_batch(&prompts);
    StepBuilder sb;
    sb.init(4);
    sb.apply_table_updates(b);
    const model::HostStep& s = sb.build(b);
    EXPECT_EQ(s.num_prompt_rows, 6);
    EXPECT_EQ(s.token_ids, (std::vector<int32_t>{7, 8, 9, 10, 11, 12, 60, 70, 71}));
    EXPECT_EQ(s.positions, (std::vector<int32_t>{2, 3, 4, 0, 1, 2, 6, 3, 4}));
    EXPECT_EQ(s.slot_mapping[0], (std::vector<int64_t>{1002, 1003, 1004, 2000, 2001, 2002, 6, 2003, 2004}));
    EXPECT_EQ(s.slot_mapping[1], s.slot_mapping[0]);
    // Parts: seq 1 (3 rows, 5 keys), seq 2's prompt part (3 rows, 3 keys), seq 0 (1, 7), seq 2's rest (2, 5).
    EXPECT_EQ(s.query_start_loc, (std::vector<int32_t>{0, 3, 6, 7, 9}));
    EXPECT_EQ(s.seq_lens, (std::vector<int32_t>{5, 3, 7, 5}));
    EXPECT_EQ(s.max_blocks[0], 2);
    EXPECT_EQ(s.block_tables[0], (std::vector<int32_t>{3, -1, 4, 9, 7, -1, 4, 9}));
    EXPECT_EQ(s.block_tables[1], s.block_tables[0]);
    // Logits rows in the batch's order, pointing at the rows' new places.
    EXPECT_EQ(s.logits_rows, (std::vector<int32_t>{6, 2, 8}));
}

TEST(StepBuilder, OrderKeptWhenPromptRowsAlreadyLead) {
    std::vector<std::vector<int32_t>> prompts;
    const StepBatch b =
        batch_of({{{1, 2}, 2, {1, 2}, {0}}, {{3}, 3, {40}, {1}}, {{5}, 2, {50}, {2}}}, &prompts);
    StepBuilder sb;
    sb.init(4);
    sb.apply_table_updates(b);
    const model::HostStep& s = sb.build(b);
    EXPECT_EQ(s.num_prompt_rows, 2);
    EXPECT_EQ(s.token_ids, b.token_ids);
    EXPECT_EQ(s.query_start_loc, b.query_start_loc);
    EXPECT_EQ(s.seq_lens, b.context_lens);
    EXPECT_EQ(s.logits_rows, (std::vector<int32_t>{1, 2, 3}));
    // A decode-only step: no prompt rows.
    const StepBatch d = batch_of({{{1, 2}, 3, {9}, {0}}, {{3}, 4, {41}, {1}}}, &prompts);
    EXPECT_EQ(sb.build(d).num_prompt_rows, 0);
}

// Sample rows carry the prompt ids only under a repetition penalty and the output ids only under some
// penalty (what the sample op reads); a deferred output id is flagged for the device only where it is read.
TEST(StepBuilder, SampleRowsListHistoriesOnlyForPenalties) {
    std::vector<std::vector<int32_t>> prompts;
    const std::vector<Seq> seqs = {
        {{1, 2, 3}, 5, {9}, {0}}, {{4, 5}, 4, {8}, {1}}, {{6}, 3, {7}, {2}}, {{3, 3}, 4, {6}, {3}}};
    StepBatch b = batch_of(seqs, &prompts);
    engine::SamplingParams none, rep, freq, pres;
    rep.repetition_penalty = 1.2f;
    freq.frequency_penalty = 0.5f;
    pres.presence_penalty = -0.5f;
    const engine::SamplingParams* params[] = {&none, &rep, &freq, &pres};
    const std::vector<int32_t> output = {11, 12};
    for (size_t i = 0; i < seqs.size(); ++i) {
        b.sampling[i].params = params[i];
        b.sampling[i].output = &output;
        b.sampling[i].output_deferred = true;
    }
    StepBuilder sb;
    sb.init(4);
    const std::vector<float> logits(4 * 16);
    const auto& rows = sb.sample_rows(b, 0, 4, logits.data(), 16, /*deferred_on_device=*/true);
    const int64_t want_prompt[] = {0, 2, 0, 0}, want_output[] = {0, 2, 2, 2};
    const uint8_t want_deferred[] = {0, 1, 1, 1};
    for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(rows[i].num_prompt, want_prompt[i]) << i;
        EXPECT_EQ(rows[i].num_output, want_output[i]) << i;
        EXPECT_EQ(sb.deferred_output()[i], want_deferred[i]) << i;
        if (rows[i].num_output > 0) {
            EXPECT_EQ(rows[i].output_ids, output.data());
        }
    }
    EXPECT_EQ(rows[1].prompt_ids, prompts[1].data());
}

// Kept block tables (init with a width): a host copy of the "device" tables, changed only by each
// HostStep's table pairs (fills, then writes, as ops::Backend::scatter_ids), equals every slot's full table
// (padded with -1) after every step of random updates -- appends, sliding-window frees, copy-on-write
// replacements, clears (a slot's next sequence, a swap-out, a recompute) with and without new blocks in
// the same step, indices past the width (the tables widen: the step carries every held entry) -- and
// each sequence's table_rows entry is its seq_slot.
TEST(StepBuilder, KeptTablesFollowEveryUpdateWithTheChangesAlone) {
    constexpr int kSlots = 6;
    StepBuilder sb;
    sb.init(kSlots, 4);
    std::vector<int32_t> device;  // the tables as scatter_ids leaves them
    int64_t width = 0, rows = 0;
    std::mt19937 rng(3);
    int64_t pairs_total = 0, full_total = 0, widened = 0;
    for (int step = 0; step < 400; ++step) {
        StepBatch b;
        for (int n = static_cast<int>(rng() % 4); n > 0; --n) {
            const auto slot = static_cast<int32_t>(rng() % kSlots);
            const int g = static_cast<int>(rng() % 2);
            const uint32_t what = rng() % 10;
            if (what == 0) {
                b.table_updates.push_back({slot, g, -1, -1});  // cleared
                if (rng() % 2 == 0)
                    b.table_updates.push_back({slot, g, 0, static_cast<int32_t>(rng() % 500)});
            } else if (what == 1) {
                b.table_updates.push_back({slot, g, static_cast<int32_t>(rng() % 8), -1});  // freed
            } else if (what == 2 && step > 300) {
                b.table_updates.push_back({slot, g, static_cast<int32_t>(20 + rng() % 30),
                                           static_cast<int32_t>(rng() % 500)});  // far: widens
            } else {
                const auto j = static_cast<int32_t>(sb.table(g, slot).size());
                b.table_updates.push_back({slot, g, j, static_cast<int32_t>(rng() % 500)});  // appended
            }
        }
        // One sequence per slot, one row each.
        b.num_seqs = kSlots;
        b.num_tokens = kSlots;
        b.query_start_loc = {0};
        for (int32_t slot = 0; slot < kSlots; ++slot) {
            b.token_ids.push_back(1);
            b.positions.push_back(0);
            b.query_start_loc.push_back(slot + 1);
            b.context_lens.push_back(1);
            b.seq_slots.push_back((slot + step) % kSlots);
        }
        sb.apply_table_updates(b);
        const model::HostStep& s = sb.build(b);
        ASSERT_EQ(s.table_num_rows, kSlots + 1);
        ASSERT_EQ(s.table_rows.size(), static_cast<size_t>(kSlots));
        for (int32_t i = 0; i < kSlots; ++i) EXPECT_EQ(s.table_rows[i], (i + step) % kSlots);
        EXPECT_TRUE(s.block_tables[0].empty() && s.block_tables[1].empty());
        if (s.table_width != width || s.table_num_rows != rows) {
            width = s.table_width;
            rows = s.table_num_rows;
            device.assign(static_cast<size_t>(2 * rows * width), -1);
            ++widened;
        }
        const auto n = static_cast<int64_t>(s.table_pairs.size()) / 2;
        pairs_total += n;
        for (int g = 0; g < 2; ++g)
            for (int32_t slot = 0; slot < kSlots; ++slot)
                full_total += static_cast<int64_t>(sb.table(g, slot).size());
        for (int64_t i = 0; i < n; ++i) {
            const int32_t a = s.table_pairs[2 * i], v = s.table_pairs[2 * i + 1];
            if (i < s.num_table_fills) {
                std::fill(device.begin() + a, device.begin() + a + v, -1);
            } else {
                device[a] = v;
            }
        }
        for (int g = 0; g < 2; ++g)
            for (int32_t slot = 0; slot <= kSlots; ++slot)
                for (int64_t j = 0; j < width; ++j) {
                    const auto& t = sb.table(g, std::min(slot, kSlots - 1));
                    const int32_t want = slot < kSlots && j < static_cast<int64_t>(t.size()) ? t[j] : -1;
                    ASSERT_EQ(device[(g * rows + slot) * width + j], want)
                        << "step " << step << " group " << g << " slot " << slot << " entry " << j;
                }
    }
    EXPECT_GE(widened, 2);  // the first step, then past the width
    EXPECT_LT(pairs_total * 4, full_total) << "only the changes travel";
}

// Without a width the tables go in full and no pairs are made.
TEST(StepBuilder, FullTablesCarryNoPairs) {
    std::vector<std::vector<int32_t>> prompts;
    StepBuilder sb;
    sb.init(4);
    const StepBatch b = batch_of({{{1, 2}, 3, {5}, {7}}}, &prompts);
    sb.apply_table_updates(b);
    const model::HostStep& s = sb.build(b);
    EXPECT_TRUE(s.table_rows.empty() && s.table_pairs.empty());
    EXPECT_EQ(s.block_tables[0], (std::vector<int32_t>{7}));
}

// Pipeline micro-batches: contiguous ranges of whole sequences, none empty, cut where the rows come closest
// to an equal share (ties: the earlier cut), never more ranges than sequences.
TEST(MicroBatches, SplitWholeSequencesBalancedByRows) {
    using R = std::vector<std::pair<int64_t, int64_t>>;
    const std::vector<int32_t> decode5 = {0, 1, 2, 3, 4, 5};
    EXPECT_EQ(split_micro_batches(decode5, 1), (R{{0, 5}}));
    EXPECT_EQ(split_micro_batches(decode5, 2), (R{{0, 2}, {2, 5}}));
    EXPECT_EQ(split_micro_batches(decode5, 3), (R{{0, 2}, {2, 3}, {3, 5}}));
    EXPECT_EQ(split_micro_batches(decode5, 8), (R{{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}}));
    // A prompt chunk of 16 rows and four decode rows: the chunk alone, then the decode rows.
    const std::vector<int32_t> mixed = {0, 16, 17, 18, 19, 20};
    EXPECT_EQ(split_micro_batches(mixed, 2), (R{{0, 1}, {1, 5}}));
    // Every range keeps at least one sequence, even where the rows would put two cuts together.
    EXPECT_EQ(split_micro_batches(mixed, 3), (R{{0, 1}, {1, 2}, {2, 5}}));
    EXPECT_EQ(split_micro_batches({0, 7}, 3), (R{{0, 1}}));
    EXPECT_TRUE(split_micro_batches({0}, 2).empty());
}

// A micro-batch's HostStep holds its sequences' rows only, both parts of a sequence split into prompt and
// generated rows together, prompt rows first; its logits rows are the step's, rebased; the first
// micro-batch carries the step's table changes.
TEST(MicroBatches, MicroStepsKeepSequencesWhole) {
    std::vector<std::vector<int32_t>> prompts;
    // As PromptRowsFirstMixedSequenceSplit: seq 0 decoding, seq 1 a prompt chunk, seq 2 recomputed.
    const StepBatch b = mixed_split_batch(&prompts);
    StepBuilder sb;
    sb.init(4);
    sb.apply_table_updates(b);
    sb.build(b);
    std::vector<MicroStep> ms;
    sb.micro_steps({{0, 2}, {2, 3}}, &ms);
    ASSERT_EQ(ms.size(), 2u);
    EXPECT_EQ(ms[0].step.token_ids, (std::vector<int32_t>{7, 8, 9, 60}));
    EXPECT_EQ(ms[0].step.positions, (std::vector<int32_t>{2, 3, 4, 6}));
    EXPECT_EQ(ms[0].step.num_prompt_rows, 3);
    EXPECT_EQ(ms[0].step.query_start_loc, (std::vector<int32_t>{0, 3, 4}));
    EXPECT_EQ(ms[0].step.seq_lens, (std::vector<int32_t>{5, 7}));
    EXPECT_EQ(ms[0].step.block_tables[0], (std::vector<int32_t>{3, -1, 7, -1}));
    EXPECT_EQ(ms[0].logits_index, (std::vector<int32_t>{0, 1}));
    EXPECT_EQ(ms[0].step.logits_rows, (std::vector<int32_t>{3, 2}));
    EXPECT_EQ(ms[1].step.token_ids, (std::vector<int32_t>{10, 11, 12, 70, 71}));
    EXPECT_EQ(ms[1].step.slot_mapping[1], (std::vector<int64_t>{2000, 2001, 2002, 2003, 2004}));
    EXPECT_EQ(ms[1].step.num_prompt_rows, 3);
    EXPECT_EQ(ms[1].step.query_start_loc, (std::vector<int32_t>{0, 3, 5}));
    EXPECT_EQ(ms[1].step.seq_lens, (std::vector<int32_t>{3, 5}));
    EXPECT_EQ(ms[1].step.block_tables[0], (std::vector<int32_t>{4, 9, 4, 9}));
    EXPECT_EQ(ms[1].logits_index, (std::vector<int32_t>{2}));
    EXPECT_EQ(ms[1].step.logits_rows, (std::vector<int32_t>{4}));

    // Kept tables: the changes go with the first micro-batch alone; every one names its rows' slots.
    StepBuilder kept;
    kept.init(4, 8);
    kept.apply_table_updates(b);
    const model::HostStep& whole = kept.build(b);
    ASSERT_FALSE(whole.table_pairs.empty());
    kept.micro_steps({{0, 1}, {1, 3}}, &ms);
    ASSERT_EQ(ms.size(), 2u);
    EXPECT_EQ(ms[0].step.table_pairs, whole.table_pairs);
    EXPECT_EQ(ms[0].step.num_table_fills, whole.num_table_fills);
    EXPECT_TRUE(ms[1].step.table_pairs.empty());
    EXPECT_EQ(ms[1].step.table_width, whole.table_width);
    EXPECT_EQ(ms[0].step.table_rows, (std::vector<int32_t>{0}));
    EXPECT_EQ(ms[1].step.table_rows, (std::vector<int32_t>{1, 2, 2}));
    EXPECT_EQ(ms[0].step.token_ids, (std::vector<int32_t>{60}));
    EXPECT_EQ(ms[0].step.num_prompt_rows, 0);
    EXPECT_EQ(ms[1].step.num_prompt_rows, 6);
}

}  // namespace
}  // namespace volt::executor
