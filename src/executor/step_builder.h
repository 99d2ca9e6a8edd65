// The step builder every model executor shares: keeps each seq_slot's block tables (from
// StepBatch::table_updates), turns a StepBatch into the forward pass's HostStep (flattened ids,
// positions, slot mappings, block tables; prompt rows first, ForwardBatch::num_prompt_rows) and the
// sample op's rows for a chunk of logits.
// Block tables, two ways (init): kept (table_width > 0, the executors' way) -- the tables live in backend
// memory by seq_slot (model::DeviceBlockTables) and a HostStep carries each sequence's seq_slot
// (table_rows) and only the entries that changed since the last step (table_pairs: a new block, a freed
// one, a slot cleared for its next sequence, a swap-in's blocks), so a decode step's bytes do not grow
// with context; or full (table_width 0) -- every sequence's whole table in each HostStep.
// Executors add only what is theirs: where memory lives, how the step is launched (CpuExecutor: at
// once on the CPU backend; a GPU executor: staged and uploaded).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "engine/executor.h"
#include "model/forward.h"
#include "ops/sample.h"

namespace volt::executor {

// Pipeline micro-batches (docs/parallel.md "Micro-batches"): the StepBatch's sequences [0, S) cut into at
// most `m` contiguous ranges of whole sequences, none empty (min(m, S) ranges; none when S is 0), the cuts
// where the rows (tokens) before them come closest to k / m of the step's (ties: the earlier cut), so a
// prompt chunk and a few decode rows balance by work rather than by count. `query_start_loc` [S + 1].
// Returns [count] (begin, end) sequence ranges in order.
std::vector<std::pair<int64_t, int64_t>> split_micro_batches(const std::vector<int32_t>& query_start_loc,
                                                             int64_t m);

// One micro-batch of a step: its own HostStep (the rows of its sequences only, in the step's HostStep
// order, so its prompt rows still come first; query_start_loc and logits rows rebased), which of the step's
// logits rows it computes, and its StepBatch sequences.
struct MicroStep {
    model::HostStep step;
    std::vector<int32_t> logits_index;   // [its logits rows] index into StepBatch::logits_rows, ascending
    int64_t seq_begin = 0, seq_end = 0;  // StepBatch sequences [seq_begin, seq_end)
};

class StepBuilder {
  public:
    // table_width > 0: kept tables, that many entries a row to start with (a table that needs more widens
    // them: the next HostStep has the new width and every held entry).
    void init(int64_t max_num_seqs, int64_t table_width = 0);
    // Applies the batch's table updates (in order); with kept tables the next build() carries what
    // changed.
    void apply_table_updates(const engine::StepBatch& b);
    bool kept_tables() const { return table_width_ > 0; }
    // The forward pass's inputs for the batch. Token ids must be resolved (no DeferredToken) unless
    // deferred_on_device: then a DeferredToken row keeps token id -1, which the executor overwrites in
    // backend memory at HostStep row host_row(row) before the forward pass. Each sequence's prompt length
    // (its rows below it are prompt rows, put first) comes from prompt_lens ([num_seqs]) when given (a
    // worker's step off the wire, executor/step_wire.h), else from b.sampling's prompts.
    const model::HostStep& build(const engine::StepBatch& b,
                                 const std::vector<int32_t>* prompt_lens = nullptr,
                                 bool deferred_on_device = false);
    // The last build's HostStep cut into the micro-batches `ranges` (split_micro_batches of the same
    // StepBatch) into out[0 .. ranges.size()): every HostStep sequence (both parts of a sequence split
    // into prompt and generated rows) goes to the micro-batch of its StepBatch sequence, every row and
    // logits row to exactly one micro-batch. The first carries the step's block-table changes (written
    // before any op of the step reads a table; the others read the same tables).
    void micro_steps(const std::vector<std::pair<int64_t, int64_t>>& ranges,
                     std::vector<MicroStep>* out) const;
    // The HostStep row of StepBatch token row `row` of the last build (prompt rows go first).
    int32_t host_row(int32_t row) const { return identity_ ? row : new_row_[row]; }
    const std::vector<int32_t>& table(int group, int32_t slot) const { return tables_[group][slot]; }

    // Sample rows for logits rows [first, first + count) of b, reading logits [count, V] at `logits`
    // (backend memory). Pointers into b's vectors: valid while b is. A row lists the prompt ids only
    // under a repetition penalty and its output ids only under some penalty (the sample op reads them
    // then alone), so staging them costs nothing without penalties. A sequence's SeqSampling::
    // output_deferred must be resolved unless deferred_on_device: then its rows' output lists are the
    // host part alone (num_output excludes the deferred id) and deferred_output()[i] is 1, and the
    // executor appends the deferred id in backend memory.
    const std::vector<ops::SampleRow>& sample_rows(const engine::StepBatch& b, int64_t first, int64_t count,
                                                   const float* logits, int64_t vocab_size,
                                                   bool deferred_on_device = false);
    // [count] of the last sample_rows: 1 where the row's output list lacks the deferred id.
    const std::vector<uint8_t>& deferred_output() const { return deferred_output_; }

  private:
    std::vector<std::vector<int32_t>> tables_[ops::kNumKvGroups];  // [slot] block table
    // Kept tables: the width, and the rows the updates since the last build touched, as they were.
    int64_t table_width_ = 0, table_rows_ = 0;
    bool widen_ = false;
    struct Touched {
        int group;
        int32_t slot;
        bool cleared;
        std::vector<int32_t> before;
    };
    std::vector<Touched> touched_;
    std::vector<uint8_t> is_touched_;  // [group * slots + slot]
    std::vector<int32_t> writes_;
    void table_changes(model::HostStep* s);
    model::HostStep step_;
    // Rows [begin, end) of StepBatch sequence `seq` as one sequence of the HostStep, with `keys` keys in
    // the cache after them.
    struct Part {
        int64_t seq, begin, end;
        int32_t keys;
    };
    std::vector<Part> parts_;
    std::vector<int32_t> new_row_;  // StepBatch row -> HostStep row (when reordered)
    bool identity_ = true;          // the last build kept the StepBatch's row order
    std::vector<uint8_t> deferred_output_;
    std::vector<ops::SampleRow> rows_;
    std::vector<std::vector<int32_t>> bias_ids_;
    std::vector<std::vector<float>> bias_values_;
};

// The StepResult of a batch from the sample op's outputs (top lists [rows, max_top]).
void fill_result(const engine::StepBatch& b, const std::vector<int32_t>& tokens,
                 const std::vector<float>& logprobs, const std::vector<int32_t>& top_ids,
                 const std::vector<float>& top_logprobs, int64_t max_top, engine::StepResult* result);
// The same from the batch's logits rows alone, the outputs as arrays ([rows], [rows, max_top]).
void fill_result(const std::vector<engine::LogitsRow>& rows, const int32_t* tokens, const float* logprobs,
                 const int32_t* top_ids, const float* top_logprobs, int64_t max_top,
                 engine::StepResult* result);

}  // namespace volt::executor
