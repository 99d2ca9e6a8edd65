// The engine's command-line flags, shared by `voltllm serve` and `voltllm generate` (vLLM's names):
// --block-size, --max-num-seqs, --max-num-batched-tokens, --max-model-len, --kv-cache-memory-bytes,
// --num-kv-blocks-override (alias --num-gpu-blocks-override), --max-queued-requests, --swap-space
// (accepted, prints a notice: swapping to host memory comes later), --executor cpu|scripted, --script.
// Tests: tests/unit/executor/engine_flags_test.cc.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "core/status.h"
#include "engine/engine.h"
#include "model/weights.h"

namespace volt::executor {

using engine::EngineConfig;
using engine::Executor;

struct EngineFlags {
    EngineConfig config;
    double swap_space_gib = 0.0;   // accepted for vLLM compatibility; unused (recompute preemption only)
    std::string executor = "cpu";  // "cpu" (the model on the CPU) or "scripted" (replays --script)
    std::string script;            // scripted executor's JSON file (executor/scripted_executor.h)
};

void add_engine_flags(CLI::App* app, EngineFlags* flags);

// After parsing: kInvalidArgument when --executor scripted has no --script (or --script comes without
// it); logs the --swap-space notice.
Status check_engine_flags(const EngineFlags& flags);

// The executor the flags name. "cpu" needs `weights` (the caller loads them only in that case);
// "scripted" reads flags.script.
Result<std::unique_ptr<Executor>> make_executor(const EngineFlags& flags,
                                                std::shared_ptr<const model::ModelWeights> weights);

}  // namespace volt::executor
