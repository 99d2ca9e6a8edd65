// The engine's command-line flags, shared by `voltllm serve` and `voltllm generate` (vLLM's names):
// --block-size, --max-num-seqs, --max-num-batched-tokens, --max-model-len, --kv-cache-memory-bytes,
// --num-kv-blocks-override (alias --num-gpu-blocks-override), --max-queued-requests, --swap-space (GiB of
// host memory for swapped-out KV blocks, vLLM's default 4), --preemption-mode swap|recompute (default:
// swap on a GPU, recompute on the CPU; engine/engine_core.h plan_kv_cache), --executor cpu|scripted,
// --script, and where the model runs: --device cpu|cuda, --cuda-kernels auto|sm70,
// --embedding-in-host-memory,
// --enforce-eager, --gpu-memory-utilization,
// --load-format auto|safetensors|dummy, --tensor-parallel-size, --pipeline-parallel-size,
// --pipeline-micro-batches, --collective-timeout, and for one rank per process --nnodes, --node-rank,
// --master-addr, --master-port (docs/parallel.md; executor/process_launch.h), --cpu-offload-experts and
// --cpu-offload-gb (CPU expert offload, model/offload.h), --kv-cache-dtype auto|int8 (vLLM's fp8 spellings
// refused). --dtype stays each command's own (serve takes vLLM's spellings). Tests:
// tests/unit/executor/engine_flags_test.cc; on the GPU scripts/gpu/serve.sh.
#pragma once

#include <CLI/CLI.hpp>
#include <atomic>
#include <memory>
#include <string>

#include "core/status.h"
#include "engine/engine.h"
#include "executor/backend_factory.h"
#include "executor/process_launch.h"
#include "model/offload.h"
#include "model/shard.h"
#include "model/weights.h"

namespace volt::executor {

using engine::EngineConfig;
using engine::Executor;
class BackendExecutor;

// Steps in flight of the engine on one GPU (TP = PP = 1: BackendExecutor's asynchronous path) with
// --async-scheduling (the default here); the CPU and tensor / pipeline parallel ranks run one.
inline constexpr int kCudaStepsInFlight = 2;

struct EngineFlags {
    EngineConfig config;
    double swap_space_gib = 4.0;             // --swap-space; also sets config.swap_space_bytes
    std::string executor = "cpu";            // "cpu" (the model on the CPU) or "scripted" (replays --script)
    std::string script;                      // scripted executor's JSON file (executor/scripted_executor.h)
    DeviceOptions device;                    // --device, --cuda-kernels (and the command's --dtype)
    bool enforce_eager = false;              // --enforce-eager: no CUDA graphs (BackendExecutor)
    bool async_scheduling = true;            // --[no-]async-scheduling: steps_in_flight
    double gpu_memory_utilization = 0.92;    // vLLM's meaning: the share of the GPU's total memory this
                                             // instance may use (weights + activations + KV pools)
    bool kv_cache_memory_bytes_set = false;  // --kv-cache-memory-bytes given: it sizes the KV pools
    std::string load_format = "auto";        // auto | safetensors | dummy (model/dummy_weights.h)
    model::ParallelConfig parallel;          // --tensor-parallel-size, --pipeline-parallel-size
    int pipeline_micro_batches = 0;          // --pipeline-micro-batches: per step at PP > 1 (0: PP)
    double collective_timeout_s = 300.0;     // --collective-timeout: the communicators' watchdog
    LaunchFlags launch;                      // --nnodes, --node-rank, --master-addr, --master-port
    std::string quantization;                // --quantization: must match the checkpoint ("": any)
    std::string cpu_offload_experts;      // --cpu-offload-experts: N, all, or a layer list (model/offload.h)
    double cpu_offload_gb = 0.0;          // --cpu-offload-gb: GiB of experts (last layers) on the host
    std::string kv_cache_dtype = "auto";  // --kv-cache-dtype: auto or int8 (kv_cache_format)
};

// The engine's device options: --device and its flags (f.device) plus what the scheduler's limits decide
// for the backend (single_sequence: --max-num-seqs 1).
DeviceOptions engine_device(const EngineFlags& f);

// The KV-cache format --kv-cache-dtype names for --device `device`: auto is the executor's own (f32 on
// the CPU, the reference; f16 on a GPU), int8 the per-head int8 cache (docs/quantization.md "KV cache";
// the CPU and CUDA backends). Errors: kUnimplemented for vLLM's fp8, fp8_e4m3, fp8_e5m2 (not implemented:
// use int8); kInvalidArgument for any other value, listing the accepted ones.
Result<ops::Format> kv_cache_format(const std::string& dtype, const std::string& device);

// --quantization against the checkpoint's config: "" or the checkpoint's own method (awq, int8, mxfp4)
// passes; anything else is kInvalidArgument naming both and the convert command that would make it.
Status check_quantization_flag(const std::string& flag, const model::GptOssConfig& c, const std::string& dir);

void add_engine_flags(CLI::App* app, EngineFlags* flags);

// After parsing: kInvalidArgument when --executor scripted has no --script (or --script comes without
// it), or --swap-space is negative.
Status check_engine_flags(const EngineFlags& flags);

// Steps the engine keeps in flight with these flags (Executor::max_in_flight of make_executor's executor):
// kCudaStepsInFlight for --device cuda at tensor x pipeline parallel size 1 with --async-scheduling, else 1.
int steps_in_flight(const EngineFlags& flags);

// The executor the flags name. Launched as several processes (process_launch): rank 0's process rank
// (make_process_rank; ranks > 0 call run_process_worker instead: kFailedPrecondition here). "cpu" needs
// `weights` (the caller loads them only in that case);
// "scripted" reads flags.script; --device cuda places `weights` on the GPU (BackendExecutor, f16 KV
// cache). With `config` and --device cuda, memory is planned as vLLM does: a profiling run of
// config->max_num_batched_tokens tokens (BackendExecutor::profile) brings activations and scratch to
// their peak, then config->kv_cache_memory_bytes becomes gpu_memory_utilization x total - used (unless
// --kv-cache-memory-bytes was given). Errors: kResourceExhausted naming needed vs available and what to
// try when the weights and activations alone exceed the share; the backend's and placement's errors.
Result<std::unique_ptr<Executor>> make_executor(const EngineFlags& flags,
                                                std::shared_ptr<const model::ModelWeights> weights,
                                                EngineConfig* config = nullptr);

// The launch of several processes the flags and the environment describe (process_launch over
// flags.launch, flags.parallel, flags.device.device): a world size of 1 unless WORLD_SIZE or --nnodes say
// otherwise. Errors: process_launch's.
Result<ProcessLaunch> process_launch(const EngineFlags& flags);

// This process's rank of `launch` (launch.multi()): its shard of `weights` on the CPU backend, joined to
// the other processes over TCP (rank 0 listens on the master address; the watchdog, --collective-timeout,
// bounds the rendezvous too). At rank 0 it is the engine's executor (make_executor returns it); at other
// ranks run_process_worker runs it. Errors: the rendezvous's (kUnavailable naming the missing ranks),
// check_parallel's, placement's, kv_cache_format's; kUnimplemented for --executor scripted and CPU
// expert offload across processes.
Result<std::unique_ptr<BackendExecutor>> make_process_rank(const EngineFlags& flags,
                                                           std::shared_ptr<const model::ModelWeights> weights,
                                                           const ProcessLaunch& launch);

// What every process of a launch must agree on, as one line for the rendezvous's handshake
// (cpu::TcpOptions::config): world size, tp x pp, the model's identity (an FNV-1a 64 hash of its config
// and its final norm's weights: another checkpoint or another config differs), --kv-cache-dtype,
// --device, --dtype, --load-format, --pipeline-micro-batches. A rank whose line differs from rank 0's is
// refused, both lines named.
std::string group_fingerprint(const EngineFlags& flags, const model::ModelWeights& weights,
                              const ProcessLaunch& launch);

// A worker process (launch.rank > 0): make_process_rank, then BackendExecutor::run_worker until rank 0
// ends the group (ok). `stop` (optional) ends the wait between steps (kFailedPrecondition). Errors:
// make_process_rank's and run_worker's (kUnavailable when rank 0 exited or failed, a watchdog, a step's
// error).
Status run_process_worker(const EngineFlags& flags, std::shared_ptr<const model::ModelWeights> weights,
                          const ProcessLaunch& launch, const std::atomic<bool>* stop = nullptr);

// The layers whose experts stay in host memory and run on the CPU (--cpu-offload-experts,
// --cpu-offload-gb; model::plan_offload's errors), for `weights`.
Result<model::OffloadPlan> offload_plan(const EngineFlags& flags, const model::ModelWeights& weights);

// vLLM's sizing of the KV cache on a device (what make_executor does with --device cuda and a config):
// BackendExecutor::profile, then config->kv_cache_memory_bytes = gpu_memory_utilization x total - in use
// - headroom (max(256 MiB, 1% of the allowed share)), unless --kv-cache-memory-bytes was given. In use is
// what the device reports after placement and profiling: expert weights kept in host memory
// (--cpu-offload-*) were never placed, so they are not in it and the KV cache gets their bytes, less the
// staging their prompt rows run from on the GPU (one layer's experts, OffloadPlan::staging_bytes), which
// cpu::HostExpertsRunner::prepare allocated at placement and is therefore in use.
// Errors: the profiling step's; kResourceExhausted naming both numbers when nothing is left.
Status plan_device_memory(const EngineFlags& flags, BackendExecutor& executor, EngineConfig* config);

// The model the flags name: model::load_model_as(dir, flags.load_format).
Result<std::shared_ptr<const model::ModelWeights>> load_weights(const EngineFlags& flags,
                                                                const std::string& dir);

}  // namespace volt::executor
