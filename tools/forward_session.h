// A checkpoint loaded, placed on the backend the command line names and wrapped in a Forward: what
// `voltllm logits` and `voltllm perplexity` run on. Exits with a message on any error (tools only).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "executor/backend_factory.h"
#include "executor/rank_group.h"
#include "model/forward.h"
#include "model/loader.h"

namespace volt::tools {

// TP = PP = 1: backend, placed and forward are the whole model. Otherwise `ranks` holds the shards (one
// thread per rank, executor/rank_group.h; or, launched as several processes, this process's one rank) and
// backend/placed/forward are unset.
struct ForwardSession {
    std::shared_ptr<const model::ModelWeights> host;
    std::unique_ptr<ops::Backend> backend;
    std::unique_ptr<ops::HostExperts> host_experts;  // --cpu-offload-experts (after backend, before forward)
    std::shared_ptr<const model::PlacedModel> placed;
    std::unique_ptr<model::Forward> forward;
    // Launched as several processes: the TCP world (the rank's CPU communicators are its subgroups; GPU
    // ranks' NCCL communicators poll it for peers that went away). Before `ranks`, which dies first.
    std::shared_ptr<cpu::TcpCommunicator> world;
    std::unique_ptr<executor::RankGroup> ranks;
    // Launched as one rank of several processes (torchrun's environment: WORLD_SIZE, RANK, MASTER_ADDR,
    // MASTER_PORT): `ranks` holds this process's rank, joined to the others over TCP
    // (cpu/tcp_communicator.h); only the output rank (tp 0 of the last stage) has the logits.
    int process_rank = 0, world_size = 1;
    bool writes_output = true;

    // The trace hook on the forward pass, or on tp rank 0 of every pipeline stage (each traces its own
    // layers; the stages run one after another, so calls never overlap).
    void set_trace(const model::TraceFn& fn);
    // Logits [prompt.size(), V] of `prompt` on an empty cache at RoPE positions start_pos.. (the output
    // rank's, when parallel). Errors: a communicator's.
    Status run_logits(const std::vector<int32_t>& prompt, int64_t start_pos, ops::Format kv_format,
                      std::vector<float>* logits);
};

// parallel: --tensor-parallel-size / --pipeline-parallel-size (refused with the reason when the model
// cannot be split so). With WORLD_SIZE > 1 in the environment (torchrun's variables, every process
// started with the same command line) this process is rank RANK of WORLD_SIZE = tp x pp processes, rank 0
// listening on MASTER_ADDR:MASTER_PORT; with --device cuda each process takes one GPU
// (executor::process_gpu) and its collectives run on NCCL (executor::process_gpu_comms). The refusals
// of executor::process_launch and process_gpu end it with the message.
// offload_experts: --cpu-offload-experts (model/offload.h; whole model only, else refused).
ForwardSession open_forward_or_exit(const std::string& model_dir, const executor::DeviceOptions& device,
                                    const model::ParallelConfig& parallel = {},
                                    const std::string& offload_experts = "");

// The KV-cache format of --kv-cache-dtype (auto | int8; executor::kv_cache_format's refusals: fp8
// spellings, int8 off the CPU, unknown values) and --kv-cache-f16 (only with auto): auto is f32, or f16
// with --kv-cache-f16. Exits with the message otherwise.
ops::Format kv_format_or_exit(const std::string& kv_cache_dtype, bool kv_f16,
                              const executor::DeviceOptions& device);

// Adds --device, --dtype and --cuda-kernels to a subcommand.
void add_device_flags(CLI::App* cmd, executor::DeviceOptions* device);

}  // namespace volt::tools
