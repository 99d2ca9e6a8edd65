#include "executor/engine_flags.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "core/check.h"
#include "core/logging.h"
#include "core/thread_pool.h"
#include "cpu/experts_fast.h"
#include "cpu/tcp_communicator.h"
#include "executor/backend_executor.h"
#include "executor/cpu_executor.h"
#include "executor/scripted_executor.h"
#include "io/progress.h"
#include "model/dummy_weights.h"

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
                    "KV-cache budget in bytes, both KV groups (CPU default 4 GiB; GPU: from "
                    "--gpu-memory-utilization)")
        ->capture_default_str()
        ->each([f](const std::string&) { f->kv_cache_memory_bytes_set = true; });
    app->add_option("--num-kv-blocks-override,--num-gpu-blocks-override", c.num_kv_blocks_override,
                    "> 0: exactly this many KV blocks per KV group (tests)")
        ->capture_default_str();
    app->add_option("--max-queued-requests", c.max_queued_requests, "waiting requests beyond this get 503")
        ->capture_default_str();
    app->add_option_function<double>(
           "--swap-space",
           [f](const double& gib) {
               f->swap_space_gib = gib;
               f->config.swap_space_bytes = static_cast<int64_t>(std::llround(gib * 1073741824.0));
           },
           "GiB of host memory (pinned on a GPU) for the KV blocks of preempted sequences; 0: none")
        ->default_str("4");
    app->add_option("--preemption-mode", c.preemption_mode,
                    "swap (KV blocks of a preempted sequence go to --swap-space and come back) or "
                    "recompute; default: swap on a GPU, recompute on the CPU")
        ->transform(CLI::CheckedTransformer(std::map<std::string, engine::PreemptionMode>{
            {"swap", engine::PreemptionMode::kSwap}, {"recompute", engine::PreemptionMode::kRecompute}}))
        ->option_text("swap|recompute");
    app->add_option("--executor", f->executor, "cpu or scripted")
        ->check(CLI::IsMember({"cpu", "scripted"}))
        ->capture_default_str();
    app->add_option("--script", f->script, "token ids the scripted executor replays (JSON)");
    app->add_option("--device", f->device.device, "cpu or cuda")
        ->check(CLI::IsMember({"cpu", "cuda"}))
        ->capture_default_str();
    app->add_option("--cuda-kernels", f->device.cuda_kernels,
                    "auto or sm70 (force the Volta kernels, no cuBLAS)")
        ->check(CLI::IsMember({"auto", "sm70"}))
        ->capture_default_str();
    app->add_flag("--embedding-in-host-memory", f->device.embedding_in_host_memory,
                  "cuda: keep the embedding table in pinned host memory (1.08 GiB of GPU memory for gpt-oss "
                  "goes to the KV cache; a step reads only its tokens' rows over the bus)");
    app->add_flag("--enforce-eager", f->enforce_eager,
                  "cuda: run decode steps eagerly, without CUDA graphs (vLLM's flag)");
    app->add_flag("--async-scheduling,!--no-async-scheduling", f->async_scheduling,
                  "cuda at TP = PP = 1: schedule and stage step N+1 while the GPU runs step N (two steps in "
                  "flight; on by default)");
    app->add_option("--gpu-memory-utilization", f->gpu_memory_utilization,
                    "share of the GPU's total memory for weights, activations and the KV cache (vLLM's)")
        ->check(CLI::Range(0.01, 1.0))
        ->capture_default_str();
    app->add_option("--tensor-parallel-size", f->parallel.tensor_parallel_size,
                    "ranks each layer is split over (attention heads, expert units, vocabulary); must divide "
                    "the KV heads. CPU: one thread per rank (docs/parallel.md)")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    app->add_option("--pipeline-parallel-size", f->parallel.pipeline_parallel_size,
                    "pipeline stages the layers are split over (up to the layer count); CPU: threads")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    app->add_option(
           "--pipeline-micro-batches", f->pipeline_micro_batches,
           "micro-batches each step's sequences are cut into at --pipeline-parallel-size > 1, so the "
           "stages overlap (whole sequences; 0: the stage count; 1: the step whole; docs/parallel.md)")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    app->add_flag(
        "--tp-same-device", f->device.tp_same_device,
        "cuda, TP x PP > 1: every rank on GPU 0 with the same-device communicator (tests: the ranks "
        "share the GPU's memory and time; without it each rank needs a GPU of its own)");
    app->add_flag(
        "--disable-custom-all-reduce", f->device.disable_custom_all_reduce,
        "cuda, one GPU per rank: NCCL alone, no one-shot all-reduce over peer memory (vLLM's flag)");
    app->add_option("--collective-timeout", f->collective_timeout_s,
                    "seconds a rank may wait in one collective before the engine fails (watchdog)")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    app->add_option(
           "--nnodes", f->launch.nnodes,
           "processes of a launch across nodes, one per node and one tensor / pipeline parallel rank "
           "each: must equal TP x PP (vLLM's flag; torchrun's WORLD_SIZE works too; docs/parallel.md)")
        ->check(CLI::PositiveNumber);
    app->add_option("--node-rank", f->launch.node_rank,
                    "this node's process among --nnodes: its rank (0 runs the engine and the API server; "
                    "else NODE_RANK)")
        ->check(CLI::NonNegativeNumber);
    app->add_option("--master-addr", f->launch.master_addr,
                    "several processes: rank 0's address, where it listens (else MASTER_ADDR)");
    app->add_option("--master-port", f->launch.master_port,
                    "several processes: rank 0's port (else MASTER_PORT)")
        ->check(CLI::Range(1, 65535));
    app->add_option("--load-format", f->load_format,
                    "auto, safetensors, or dummy (random weights, any config)")
        ->check(CLI::IsMember({"auto", "safetensors", "dummy"}))
        ->capture_default_str();
    app->add_option("--cpu-offload-experts", f->cpu_offload_experts,
                    "the experts of these layers stay in host memory and run on the CPU: N (the last N "
                    "layers), all, or a list of indices and ranges such as 0,5,20-23");
    app->add_option("--cpu-offload-gb", f->cpu_offload_gb,
                    "GiB of expert weights to keep in host memory and run on the CPU, taken from the last "
                    "layers (vLLM's flag; 0: none)")
        ->capture_default_str();
    app->add_option("--kv-cache-dtype", f->kv_cache_dtype,
                    "auto (f32 on the CPU, f16 on a GPU) or int8 (per-head scales: half the bytes of f16; "
                    "CPU and CUDA; docs/quantization.md); vLLM's fp8 spellings are refused")
        ->capture_default_str();
    app->add_option("--quantization", f->quantization,
                    "awq, int8 or mxfp4: must match the checkpoint's quantization_config (which decides)");
}

Status check_quantization_flag(const std::string& flag, const model::GptOssConfig& c,
                               const std::string& dir) {
    if (flag.empty()) return Status::ok();
    if (flag != "awq" && flag != "int8" && flag != "mxfp4")
        return invalid_argument(
            "--quantization " + flag +
            " is not supported: gpt-oss checkpoints here are mxfp4 (experts), awq or int8 "
            "(attention and lm_head, experts mxfp4); docs/quantization.md");
    const std::string have = model::quant_method_name(c.quant_method);
    if (flag == have) return Status::ok();
    std::string m =
        "--quantization " + flag + " does not match the checkpoint " + dir +
        ": its config.json quantization_config says " +
        (c.quant_method == model::QuantMethod::kNone ? std::string("nothing (bf16 layout)") : have) +
        "; drop --quantization (the checkpoint decides)";
    if (flag != "mxfp4" &&
        (c.quant_method == model::QuantMethod::kNone || c.quant_method == model::QuantMethod::kMxfp4))
        m += " or convert it first: voltllm convert --model " + dir + " --output OUT --quantization " + flag +
             (flag == "awq" ? " --awq-zero-point" : "");
    return invalid_argument(m);
}

Result<ops::Format> kv_cache_format(const std::string& dtype, const std::string& device) {
    if (dtype == "auto") return device == "cpu" ? ops::Format::kF32 : ops::Format::kF16;
    // int8 runs on the CPU and CUDA backends; a backend without it refuses at KvStore::create.
    if (dtype == "int8") return ops::Format::kInt8;
    if (dtype == "fp8" || dtype == "fp8_e4m3" || dtype == "fp8_e5m2")
        return unimplemented(
            "--kv-cache-dtype " + dtype +
            " is not implemented; --kv-cache-dtype int8 halves the KV cache's bytes (per-head "
            "scales, docs/quantization.md)");
    return invalid_argument("--kv-cache-dtype " + dtype +
                            " is not one of auto, int8 (fp8, fp8_e4m3, "
                            "fp8_e5m2: not implemented)");
}

Result<std::shared_ptr<const model::ModelWeights>> load_weights(const EngineFlags& f,
                                                                const std::string& dir) {
    VOLT_ASSIGN_OR_RETURN(auto w, model::load_model_as(dir, f.load_format));
    VOLT_RETURN_IF_ERROR(check_quantization_flag(f.quantization, w->config, dir));
    return std::shared_ptr<const model::ModelWeights>(std::move(w));
}

DeviceOptions engine_device(const EngineFlags& f) {
    DeviceOptions d = f.device;
    d.single_sequence = f.config.max_num_seqs == 1;
    return d;
}

int steps_in_flight(const EngineFlags& f) {
    return f.device.device == "cuda" && f.parallel.world_size() == 1 && f.async_scheduling
               ? kCudaStepsInFlight
               : 1;
}

Status check_engine_flags(const EngineFlags& f) {
    if (f.executor == "scripted" && f.device.device != "cpu")
        return invalid_argument("--executor scripted replays a script; --device " + f.device.device +
                                " runs the model");
    if (f.executor == "scripted" && f.script.empty())
        return invalid_argument("--executor scripted needs --script FILE");
    if (f.executor != "scripted" && !f.script.empty())
        return invalid_argument("--script is read only with --executor scripted");
    if (!(f.cpu_offload_gb >= 0))
        return invalid_argument("--cpu-offload-gb " + std::to_string(f.cpu_offload_gb) + " GiB must be >= 0");
    if (!f.cpu_offload_experts.empty() && f.cpu_offload_gb > 0)
        return invalid_argument("give --cpu-offload-experts or --cpu-offload-gb, not both");
    if ((!f.cpu_offload_experts.empty() || f.cpu_offload_gb > 0) && f.executor == "scripted")
        return invalid_argument("--cpu-offload-experts / --cpu-offload-gb need a model (--executor cpu)");
    if (!(f.swap_space_gib >= 0))
        return invalid_argument("--swap-space " + std::to_string(f.swap_space_gib) + " GiB must be >= 0");
    if (f.executor != "scripted")
        VOLT_RETURN_IF_ERROR(kv_cache_format(f.kv_cache_dtype, f.device.device).status());
    if (f.device.tp_same_device && f.device.device != "cuda")
        return invalid_argument("--tp-same-device puts the ranks of --device cuda on one GPU; --device " +
                                f.device.device + " runs them on threads without it");
    return Status::ok();
}

namespace {
std::string gib(int64_t bytes) { return io::format_bytes(static_cast<double>(bytes)); }

}  // namespace

// vLLM's sizing: the instance may use utilization x total; what the weights, the CUDA context and the
// profiled activations already use comes off it; the rest is the KV cache.
Status plan_device_memory(const EngineFlags& f, BackendExecutor& ex, EngineConfig* config) {
    engine::CacheConfig cc;
    cc.block_size = config->block_size;
    cc.max_num_seqs = config->max_num_seqs;
    cc.max_num_batched_tokens = config->max_num_batched_tokens;
    cc.max_model_len = config->max_model_len;
    const engine::ExecutorMemory before = ex.memory();
    VOLT_RETURN_IF_ERROR(ex.profile(cc));
    const engine::ExecutorMemory m = ex.memory();
    // Several GPUs (one per rank): the numbers are summed over them, and so are the limit and the budget.
    const int devices = ex.num_devices();
    const auto limit = static_cast<int64_t>(f.gpu_memory_utilization * static_cast<double>(m.total_bytes));
    const int64_t used = m.total_bytes - m.free_bytes;
    const int64_t activations = before.free_bytes - m.free_bytes;
    spdlog::info(
        "memory: GPU {} total; --gpu-memory-utilization {} allows {}; in use {} (weights, CUDA context, "
        "other "
        "processes) + {} peak activations of a {}-token step",
        gib(m.total_bytes), f.gpu_memory_utilization, gib(limit), gib(used - activations), gib(activations),
        cc.max_num_batched_tokens);
    if (auto plan = offload_plan(f, ex.host_weights()); plan.is_ok() && plan->any())
        spdlog::info("memory: {} are not on the device (not in use above): the KV cache gets them",
                     plan->describe());
    if (f.kv_cache_memory_bytes_set) return Status::ok();
    // Headroom for what the profiling step cannot bring to its peak: buffers sized by context length
    // (the split-KV partials of long decode rows), the sample op's per-row lists, the allocator's
    // granularity. Seen on the H200: without it the process's peak, read by nvidia-smi, passed
    // utilization x total by 70 MiB (scripts/gpu/serve.sh, part memory_20b).
    const int64_t headroom = std::max<int64_t>(int64_t{256} << 20, limit / devices / 100) * devices;
    // The KV budget is the whole model's (bytes_per_block counts every layer and KV head): ranks sharing a
    // GPU (--tp-same-device) split the GPU's share among them in proportion to their KV heads and layers;
    // with one GPU per rank the GPU holding the largest share of a block decides (each GPU is assumed to
    // have the same free memory as the mean).
    const double share = ex.max_device_kv_share(cc.block_size);
    const auto budget = static_cast<int64_t>(static_cast<double>(limit - used - headroom) / devices / share);
    const int64_t one_block = ex.bytes_per_block(cc.block_size, 0) + ex.bytes_per_block(cc.block_size, 1);
    if (budget < 4 * one_block)
        return resource_exhausted("the model does not fit: weights and activations take " + gib(used) +
                                  " (+ " + gib(headroom) + " headroom)" + " but --gpu-memory-utilization " +
                                  std::to_string(f.gpu_memory_utilization) + " allows " + gib(limit) +
                                  " of " + gib(m.total_bytes) +
                                  ", leaving nothing for the KV cache: raise --gpu-memory-utilization, lower "
                                  "--max-num-batched-tokens, use more GPUs (--tensor-parallel-size) or a "
                                  "smaller model");
    config->kv_cache_memory_bytes = budget;
    spdlog::info("memory: KV cache {} ({} x total - in use - {} headroom)", gib(budget),
                 f.gpu_memory_utilization, gib(headroom));
    return Status::ok();
}

Result<model::OffloadPlan> offload_plan(const EngineFlags& f, const model::ModelWeights& w) {
    return model::plan_offload(w, {f.cpu_offload_experts, f.cpu_offload_gb});
}

Result<ProcessLaunch> process_launch(const EngineFlags& f) {
    return process_launch(f.launch, f.parallel, f.device.device);
}

namespace {
struct Fnv {
    uint64_t h = 14695981039346656037ull;
    void bytes(const void* p, size_t n) {
        for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const uint8_t*>(p)[i]) * 1099511628211ull;
    }
    template <typename T>
    void pod(const T& v) {
        bytes(&v, sizeof v);
    }
};
}  // namespace

std::string group_fingerprint(const EngineFlags& f, const model::ModelWeights& w, const ProcessLaunch& l) {
    const model::GptOssConfig& c = w.config;
    Fnv h;
    for (int64_t v :
         {c.num_hidden_layers, c.num_local_experts, c.num_experts_per_tok, c.hidden_size, c.intermediate_size,
          c.head_dim, c.num_attention_heads, c.num_key_value_heads, c.vocab_size, c.sliding_window,
          c.initial_context_length, c.max_position_embeddings, c.pad_token_id, c.awq_group_size})
        h.pod(v);
    for (double v : {c.rope_theta, c.swiglu_limit, c.swiglu_alpha, c.rms_norm_eps}) h.pod(v);
    for (model::LayerType t : c.layer_types) h.pod(static_cast<int>(t));
    for (int64_t id : c.eos_token_ids) h.pod(id);
    h.pod(static_cast<int>(c.quant_method));
    h.pod(c.mxfp4_quantized);
    h.pod(c.attention_bias);
    h.pod(c.tie_word_embeddings);
    h.bytes(c.model_type.data(), c.model_type.size());
    if (w.norm.data != nullptr)
        h.bytes(w.norm.data, static_cast<size_t>(w.norm.n) * (w.norm.format == ops::Format::kF32 ? 4 : 2));
    char model[17];
    std::snprintf(model, sizeof model, "%016" PRIx64, h.h);
    return "world " + std::to_string(l.world_size) + " (tp " +
           std::to_string(f.parallel.tensor_parallel_size) + " x pp " +
           std::to_string(f.parallel.pipeline_parallel_size) + "), model " + model + " (" +
           std::to_string(c.num_hidden_layers) + " layers, vocab " + std::to_string(c.vocab_size) +
           "), kv-cache-dtype " + f.kv_cache_dtype + ", device " + f.device.device + ", dtype " +
           f.device.dtype + ", load-format " + f.load_format + ", pipeline-micro-batches " +
           std::to_string(f.pipeline_micro_batches);
}

Result<std::unique_ptr<BackendExecutor>> make_process_rank(const EngineFlags& f,
                                                           std::shared_ptr<const model::ModelWeights> weights,
                                                           const ProcessLaunch& launch) {
    VOLT_CHECK(launch.multi()) << "make_process_rank of a single process";
    if (f.executor != "cpu")
        return unimplemented("--executor " + f.executor + " across processes: only the model runs there");
    if (!weights) return invalid_argument("--executor cpu needs a model");
    VOLT_RETURN_IF_ERROR(model::check_parallel(weights->config, f.parallel));
    VOLT_ASSIGN_OR_RETURN(const model::OffloadPlan offload, offload_plan(f, *weights));
    if (offload.any())
        return unimplemented(
            "--cpu-offload-experts / --cpu-offload-gb with --tensor-parallel-size or "
            "--pipeline-parallel-size > 1: not built yet (one rank only)");
    VOLT_ASSIGN_OR_RETURN(const ops::Format kv_format, kv_cache_format(f.kv_cache_dtype, f.device.device));
    DeviceOptions device = engine_device(f);
    if (device.device == "cuda" && cuda_built()) {
        // One GPU per process (a build without CUDA fails in make_backend below, saying so).
        VOLT_ASSIGN_OR_RETURN(const ProcessGpu gpu, process_gpu(launch, visible_gpus()));
        device.gpu = gpu.gpu;
        spdlog::info("parallel: rank {} of {} processes takes GPU {} ({})", launch.rank, launch.world_size,
                     gpu.gpu, gpu.how);
    }
    VOLT_ASSIGN_OR_RETURN(auto backend, make_backend(device));
    spdlog::info("parallel: rank {} of {} processes ({}); {} {}:{}", launch.rank, launch.world_size,
                 launch.source, launch.rank == 0 ? "listening on" : "joining rank 0 at", launch.master_addr,
                 launch.master_port);
    cpu::TcpOptions o;
    o.rank = launch.rank;
    o.size = launch.world_size;
    o.host = launch.master_addr;
    o.port = launch.master_port;
    o.comm.timeout_s = f.collective_timeout_s;
    o.config = group_fingerprint(f, *weights, launch);
    if (const char* secret = std::getenv("VOLT_GROUP_SECRET")) o.secret = secret;
    VOLT_ASSIGN_OR_RETURN(auto comm, cpu::tcp_connect(o));
    ProcessComms comms;  // GPU ranks: NCCL, the ids over the TCP world; CPU ranks: the world's subgroups
    if (device.device == "cuda") {
        VOLT_ASSIGN_OR_RETURN(comms, process_gpu_comms(f.parallel, launch.rank, device.gpu, *comm, o.comm));
    }
    VOLT_ASSIGN_OR_RETURN(auto ex, BackendExecutor::create_process_rank(
                                       std::move(weights), f.parallel, launch.rank, std::move(backend),
                                       kv_format, std::move(comm), std::move(comms)));
    ex->set_pipeline_micro_batches(f.pipeline_micro_batches);
    return ex;
}

Status run_process_worker(const EngineFlags& f, std::shared_ptr<const model::ModelWeights> weights,
                          const ProcessLaunch& launch, const std::atomic<bool>* stop) {
    VOLT_CHECK(launch.rank > 0) << "run_process_worker at rank " << launch.rank;
    VOLT_ASSIGN_OR_RETURN(auto ex, make_process_rank(f, std::move(weights), launch));
    spdlog::info("parallel: rank {} of {}: serving rank 0's steps", launch.rank, launch.world_size);
    return ex->run_worker(stop);
}

Result<std::unique_ptr<Executor>> make_executor(const EngineFlags& f,
                                                std::shared_ptr<const model::ModelWeights> weights,
                                                EngineConfig* config) {
    VOLT_RETURN_IF_ERROR(check_engine_flags(f));
    VOLT_ASSIGN_OR_RETURN(const ProcessLaunch launch, process_launch(f));
    if (launch.multi()) {
        if (launch.rank != 0)
            return Status(StatusCode::kFailedPrecondition,
                          "rank " + std::to_string(launch.rank) +
                              " of several processes runs run_process_worker, not an engine");
        VOLT_ASSIGN_OR_RETURN(auto ex, make_process_rank(f, std::move(weights), launch));
        if (f.device.device == "cuda") {
            spdlog::info(
                "cuda graphs: off for ranks in several processes (decode steps run eagerly; docs/parallel.md "
                "\"CUDA graphs\")");
            // The profiling step runs on every process (rank 0 sends it); the budget is sized from rank
            // 0's GPU, assumed like the others.
            if (config) VOLT_RETURN_IF_ERROR(plan_device_memory(f, *ex, config));
        }
        return std::unique_ptr<Executor>(std::move(ex));
    }
    if (f.executor == "scripted") {
        VOLT_ASSIGN_OR_RETURN(auto ex, ScriptedExecutor::from_file(f.script));
        return std::unique_ptr<Executor>(std::move(ex));
    }
    if (!weights) return invalid_argument("--executor cpu needs a model");
    VOLT_ASSIGN_OR_RETURN(const ops::Format kv_format, kv_cache_format(f.kv_cache_dtype, f.device.device));
    if (kv_format == ops::Format::kInt8)
        spdlog::info("KV cache: int8 with one f32 scale per token and KV head (--kv-cache-dtype int8)");
    VOLT_ASSIGN_OR_RETURN(const model::OffloadPlan offload, offload_plan(f, *weights));
    if (offload.any()) {
        if (f.parallel.world_size() > 1)
            return unimplemented(
                "--cpu-offload-experts / --cpu-offload-gb with --tensor-parallel-size or "
                "--pipeline-parallel-size > 1: not built yet (one rank only)");
        spdlog::info(
            "offload: {}; their experts op runs on the CPU ({}, {} threads, host read bandwidth {:.1f} GB/s "
            "measured now){}",
            offload.describe(), cpu::isa_name(cpu::best_isa()), cpu_thread_pool().num_threads(),
            cpu::measure_host_read_gbps(int64_t{1} << 30, 3),
            f.device.device == "cuda"
                ? fmt::format(
                      "; decode steps run eagerly (no CUDA graphs); prompt rows may run on the GPU from "
                      "a {:.2f} GiB staging of one layer's experts (logged below)",
                      static_cast<double>(offload.staging_bytes) / 1073741824.0)
                : std::string());
    }
    if (f.parallel.world_size() > 1) {
        VOLT_RETURN_IF_ERROR(model::check_parallel(weights->config, f.parallel));
        VOLT_ASSIGN_OR_RETURN(const ParallelFactories pf, parallel_factories(engine_device(f), f.parallel));
        ops::CommunicatorOptions comm;
        comm.timeout_s = f.collective_timeout_s;
        VOLT_ASSIGN_OR_RETURN(auto ex, BackendExecutor::create_parallel(weights, f.parallel, pf.make_backend,
                                                                        kv_format, comm, pf.make_comms));
        ex->set_pipeline_micro_batches(f.pipeline_micro_batches);
        ex->set_enforce_eager(f.enforce_eager);
        if (f.parallel.pipeline_parallel_size > 1)
            spdlog::info(
                "pipeline: up to {} micro-batches a step (whole sequences; --pipeline-micro-batches)",
                f.pipeline_micro_batches > 0 ? f.pipeline_micro_batches : f.parallel.pipeline_parallel_size);
        if (f.device.device == "cuda") {
            // One graph over every rank's stream needs every rank on one GPU with the same-device
            // communicator (BackendExecutor::set_enforce_eager); NCCL's collectives are not captured yet.
            if (f.enforce_eager) {
                spdlog::info("cuda graphs: off (--enforce-eager)");
            } else if (pf.communicator != "same-device") {
                spdlog::info(
                    "cuda graphs: off at tensor x pipeline parallel size > 1 across GPUs ({}; decode steps "
                    "run eagerly; docs/parallel.md \"CUDA graphs\")",
                    pf.communicator);
            } else {
                spdlog::info(
                    "cuda graphs: decode steps of the {} ranks on one GPU as one graph over their streams "
                    "(--tp-same-device){}",
                    f.parallel.world_size(),
                    f.parallel.pipeline_parallel_size > 1
                        ? "; at pipeline parallel size > 1 only steps of one micro-batch (one sequence, or "
                          "--pipeline-micro-batches 1), the others run eagerly"
                        : "");
            }
            if (config) VOLT_RETURN_IF_ERROR(plan_device_memory(f, *ex, config));
        }
        return std::unique_ptr<Executor>(std::move(ex));
    }
    if (f.device.device == "cuda") {
        VOLT_ASSIGN_OR_RETURN(auto backend, make_backend(engine_device(f)));
        // Two steps in flight (--async-scheduling): the engine schedules and stages step N+1 while the GPU
        // runs step N (BackendExecutor's asynchronous path).
        VOLT_ASSIGN_OR_RETURN(auto ex, BackendExecutor::create(weights, std::move(backend), kv_format,
                                                               steps_in_flight(f), offload.layers));
        ex->set_enforce_eager(f.enforce_eager);
        if (config) VOLT_RETURN_IF_ERROR(plan_device_memory(f, *ex, config));
        return std::unique_ptr<Executor>(std::move(ex));
    }
    return std::unique_ptr<Executor>(
        std::make_unique<CpuExecutor>(std::move(weights), kv_format, 1, offload.layers));
}

}  // namespace volt::executor
