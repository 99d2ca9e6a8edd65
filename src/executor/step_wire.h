// The engine's step as bytes, for the worker ranks of the engine across processes (docs/parallel.md
// "Several processes"): rank 0 runs the scheduler and sends each step to the other processes, which run
// the same BackendExecutor rank code on it. What travels is a resolved StepBatch (every token id known:
// SyncExecutor resolves DeferredToken rows before BackendExecutor::run) with every field a rank reads
// (ids, positions, slot mappings, block tables' updates, KV copies and swaps, logits rows, each
// sequence's prompt length: StepBuilder puts prompt rows first), and, for the output rank only (the one
// that samples), per sequence the sampling fields the sample op reads; the prompt and output histories
// travel only when a penalty reads them. Little-endian host layout (every rank runs the same binary on the
// same kind of host). Tests: tests/unit/executor/step_wire_test.cc.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "engine/executor.h"

namespace volt::executor {

// A decoded step: the batch and what its SeqSampling pointers point to (so it moves as one value only
// through the unique owner that decode_step fills; do not copy it).
struct WireStep {
    engine::StepBatch batch;
    std::vector<engine::SamplingParams> params;  // [S]
    std::vector<std::vector<int32_t>> prompts;   // [S] (empty unless a penalty reads them)
    std::vector<std::vector<int32_t>> outputs;   // [S]
    std::vector<int32_t> prompt_lens;            // [num_seqs]: StepBuilder::build's prompt lengths
};

// What a worker checks a step against: its CacheConfig (init_cache) and the model's vocabulary.
struct StepLimits {
    engine::CacheConfig cache;
    int64_t vocab_size = 0;  // logits width (ids in [0, vocab_size))
    bool samples = true;     // the output rank: every sample row's sequence must have sampling parameters
};

// The most bytes a step within `limits` can take (decode_step refuses more): what a worker lets rank 0's
// header announce. Every field at its largest: max_num_batched_tokens rows, max_num_seqs sequences, every
// block of both groups swapped, each sequence's table rewritten, each sequence's bias and allowed lists at
// the vocabulary and its histories at max_model_len.
int64_t max_step_bytes(const StepLimits& limits);

// Whether `c` is a CacheConfig a worker may allocate for (positive sizes within sane bounds); the
// reason otherwise.
Status check_cache_config(const engine::CacheConfig& c);

// Appends the bytes of `b` to *out, with its sampling fields when `sampling` (for the output rank; the
// other ranks run the forward pass only). `b` must be resolved: no DeferredToken, no output_deferred
// (checked).
void encode_step(const engine::StepBatch& b, std::vector<uint8_t>* out, bool sampling = true);

// Decodes bytes [data, data + bytes) made by encode_step into *out (its pointers into *out's own vectors)
// and range-checks every index a rank uses against `limits`: token ids, positions, slot mappings, query
// starts, context lengths, seq slots, block-table updates, copies, swaps, logits rows (with
// limits.samples, a sample row's sequence must have sampling parameters), prompt lengths and every id
// list. Errors: kInternal when the bytes are short,
// long or a count is out of range (a corrupted stream), kInvalidArgument naming the first field out of
// range: the worker fails the group instead of writing out of bounds.
Status decode_step(const uint8_t* data, int64_t bytes, const StepLimits& limits, WireStep* out);

// The output rank's sampled ids as rank 0 receives them (pipeline parallel): every token in
// [0, vocab_size), every top-list id in [-1, vocab_size) (-1: no such entry). Errors: kInvalidArgument
// naming the first id out of range (rank 0 fails the group instead of handing it to the engine).
Status check_sampled_ids(const int32_t* tokens, int64_t rows, const int32_t* top_ids, int64_t top,
                         int64_t vocab_size);

}  // namespace volt::executor
