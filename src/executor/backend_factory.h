// The backend a command line names: `--device cpu|cuda` (vLLM's flag), `--dtype` and the CUDA kernel
// choice. The CPU backend is always built; `cuda` exists in builds configured with VOLT_CUDA (the volta,
// volta-ptx and cuda13 presets) and fails with a clear message elsewhere.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "executor/rank_group.h"
#include "model/shard.h"
#include "ops/ops.h"

namespace volt::executor {

struct DeviceOptions {
    std::string device = "cpu";             // cpu | cuda
    std::string dtype = "auto";             // auto | half | float | bfloat16 (GPU operand dtype)
    std::string cuda_kernels = "auto";      // auto | sm70 (force the Volta variants and no cuBLAS)
    bool embedding_in_host_memory = false;  // cuda: the embedding table in pinned host memory
    bool single_sequence = false;  // cuda: --max-num-seqs 1 (CudaOptions::single_sequence); engine_device()
    int gpu = 0;                   // cuda: the GPU's ordinal (rank i of TP / PP: its own)
    // cuda, TP x PP > 1: every rank on GPU 0 with the same-device communicator (tests; --tp-same-device)
    bool tp_same_device = false;
    // cuda, one GPU per rank: no one-shot all-reduce over peer memory, NCCL alone (vLLM's flag)
    bool disable_custom_all_reduce = false;
};

// kInvalidArgument for an unknown device; kUnimplemented for cuda in a build without it; the CUDA
// backend's own errors (no GPU, bfloat16 on sm_70).
Result<std::unique_ptr<ops::Backend>> make_backend(const DeviceOptions& options);

// Whether this build has the CUDA backend.
bool cuda_built();

// GPUs this process sees (0 in a build without CUDA or on a machine without a GPU).
int visible_gpus();

// The GPU ordinal of each of `world` ranks of --device cuda: rank i on GPU i when `world` <= `visible`,
// every rank on GPU 0 with same_device (--tp-same-device). kInvalidArgument when world > visible without
// same_device (the message names both counts and the flag), or with same_device above 16 ranks (the
// same-device communicator's limit).
Result<std::vector<int>> rank_gpus(const model::ParallelConfig& parallel, int visible, bool same_device);

// Whether NCCL_P2P_DISABLE (the value of the environment variable, or null) turns peer-to-peer off:
// set, non-empty and not "0".
bool p2p_disabled(const char* nccl_p2p_disable);

// What RankGroup::create needs for `parallel` (world size > 1) on `device`: a backend per rank and the
// communicators. cpu: the CPU backend on every rank, thread communicators. cuda: rank_gpus's mapping;
// same-device communicators when every rank is on one GPU (--tp-same-device), else NCCL (loaded at run
// time, docs/parallel.md) with the one-shot all-reduce over peer memory for the tensor-parallel groups
// unless device.disable_custom_all_reduce or the environment's NCCL_P2P_DISABLE (set and not "0") says no.
// Errors: rank_gpus's; kUnimplemented for cuda in a build without it.
struct ParallelFactories {
    BackendFactory make_backend;
    CommFactory make_comms;
    std::vector<int> gpus;     // [world] the GPU of each rank (empty on the CPU)
    std::string communicator;  // "threads", "same-device", "nccl"
};
Result<ParallelFactories> parallel_factories(const DeviceOptions& device,
                                             const model::ParallelConfig& parallel);

// Sets NCCL_NVLS_ENABLE=0 (NVLink SHARP multicast off: the target machines must keep it off,
// docs/parallel.md) unless the environment already has it, and logs which; called before any NCCL
// communicator is made (parallel_factories' NCCL path, process_gpu_comms).
void default_nccl_environment();

// This process's communicators when its rank `rank` of `parallel` (world size > 1, one rank per process)
// runs on GPU `gpu` (process_gpu's choice) and `world` joined every process (cpu::tcp_connect): NCCL
// loaded (default_nccl_environment first), the GPU's place (host name, PCI bus id) sent to rank 0 and
// rank 0's NCCL ids received over `world` (exchange_nccl_ids: one id per group of more than one rank, two
// ranks on one GPU refused on every rank), then its tp group's and its pp group's NCCL communicators
// (NcclGroup::join_process; every rank joins its tp group first, so no group waits on a rank busy joining
// another). A group of one rank gets a communicator of size 1. `world` must outlive the communicators
// (their watchdog polls its check_peers). Errors: kUnimplemented in a build without CUDA; NCCL's load
// error (kFailedPrecondition); exchange_nccl_ids's; ncclCommInitRank's (kInternal).
Result<ProcessComms> process_gpu_comms(const model::ParallelConfig& parallel, int rank, int gpu,
                                       cpu::TcpCommunicator& world, const ops::CommunicatorOptions& options);

}  // namespace volt::executor
