#include "executor/engine_flags.h"

#include "core/logging.h"
#include "executor/cpu_executor.h"
#include "executor/scripted_executor.h"

namespace volt::executor {

void add_engine_flags(CLI::App* app, EngineFlags* f) {
    EngineConfig& c = f->config;
    app->add_option("--block-size", c.block_size, "tokens per KV-cache block")->capture_default_str();
    app->add_option("--max-num-seqs", c.max_num_seqs, "most sequences in one step")->capture_default_str();
    app->add_option("--max-num-batched-tokens", c.max_num_batched_tokens,
                    "most tokens in one step; longer prompts are prefilled in chunks")
        ->capture_default_str();
    app->add_option("--max-model-len", c.max_model_len,
                    "longest prompt + output; 0: min(config, what one sequence can get from the KV pool)")
        ->capture_default_str();
    app->add_option("--kv-cache-memory-bytes", c.kv_cache_memory_bytes,
                    "KV-cache budget in bytes, both KV groups (CPU default 4 GiB)")
        ->capture_default_str();
    app->add_option("--num-kv-blocks-override,--num-gpu-blocks-override", c.num_kv_blocks_override,
                    "> 0: exactly this many KV blocks per KV group (tests)")
        ->capture_default_str();
    app->add_option("--max-queued-requests", c.max_queued_requests, "waiting requests beyond this get 503")
        ->capture_default_str();
    app->add_option("--swap-space", f->swap_space_gib,
                    "GiB of host memory for swapped KV (accepted; unused yet)");
    app->add_option("--executor", f->executor, "cpu or scripted")
        ->check(CLI::IsMember({"cpu", "scripted"}))
        ->capture_default_str();
    app->add_option("--script", f->script, "token ids the scripted executor replays (JSON)");
}

Status check_engine_flags(const EngineFlags& f) {
    if (f.executor == "scripted" && f.script.empty())
        return invalid_argument("--executor scripted needs --script FILE");
    if (f.executor != "scripted" && !f.script.empty())
        return invalid_argument("--script is read only with --executor scripted");
    if (f.swap_space_gib > 0)
        spdlog::warn(
            "--swap-space {} GiB accepted but unused: preempted sequences are recomputed (swapping to "
            "host memory comes later)",
            f.swap_space_gib);
    return Status::ok();
}

Result<std::unique_ptr<Executor>> make_executor(const EngineFlags& f,
                                                std::shared_ptr<const model::ModelWeights> weights) {
    VOLT_RETURN_IF_ERROR(check_engine_flags(f));
    if (f.executor == "scripted") {
        VOLT_ASSIGN_OR_RETURN(auto ex, ScriptedExecutor::from_file(f.script));
        return std::unique_ptr<Executor>(std::move(ex));
    }
    if (!weights) return invalid_argument("--executor cpu needs a model");
    return std::unique_ptr<Executor>(std::make_unique<CpuExecutor>(std::move(weights)));
}

}  // namespace volt::executor
