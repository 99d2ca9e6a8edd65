// The engine's step as bytes, for the worker ranks of the engine across processes (docs/parallel.md
// "Several processes"): rank 0 runs the scheduler and sends each step to the other processes, which run
// the same BackendExecutor rank code on it. What travels is a resolved StepBatch (every token id known:
// SyncExecutor resolves DeferredToken rows before BackendExecutor::run) with every field a rank reads
// (ids, positions, slot mappings, block tables' updates, KV copies and swaps, logits rows), and per
// sequence the sampling fields the sample op reads; the prompt and output histories travel only when a
// penalty reads them. Little-endian host layout (every rank runs the same binary on the same kind of
// host). Tests: tests/unit/executor/step_wire_test.cc.
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
};

// Appends the bytes of `b` to *out. `b` must be resolved: no DeferredToken, no output_deferred (checked).
void encode_step(const engine::StepBatch& b, std::vector<uint8_t>* out);

// Decodes bytes [data, data + bytes) made by encode_step into *out (its pointers into *out's own vectors).
// Errors: kInternal when the bytes are short, long or a count is out of range (a corrupted stream).
Status decode_step(const uint8_t* data, int64_t bytes, WireStep* out);

}  // namespace volt::executor
