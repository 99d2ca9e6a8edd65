// Where this process stands in a launch of several processes (docs/parallel.md "Several processes"):
// torchrun's environment (WORLD_SIZE, RANK, MASTER_ADDR, MASTER_PORT, NODE_RANK) or vLLM's flags
// (--nnodes, --node-rank, --master-addr, --master-port). One tensor / pipeline parallel rank per process:
// rank r of WORLD_SIZE = tp x pp processes; rank 0 listens on MASTER_ADDR:MASTER_PORT, runs the engine
// (and `serve`'s API server) and drives the others. With --nnodes N each node runs one process, so N is
// the world size and the node's rank (--node-rank, else NODE_RANK) is its rank.
// Tests: tests/unit/executor/engine_flags_test.cc (ProcessLaunch.*).
#pragma once

#include <functional>
#include <string>

#include "core/status.h"
#include "model/shard.h"

namespace volt::executor {

// The command line's part (0 / -1 / "": not given).
struct LaunchFlags {
    int nnodes = 0;           // --nnodes: processes, one per node (one rank each)
    int node_rank = -1;       // --node-rank (else NODE_RANK)
    std::string master_addr;  // --master-addr (else MASTER_ADDR)
    int master_port = -1;     // --master-port (else MASTER_PORT)
};

struct ProcessLaunch {
    int rank = 0, world_size = 1;
    std::string master_addr;  // rank 0's address (rank 0 listens on it)
    int master_port = 0;
    std::string source;  // "torchrun environment" or "--nnodes": for messages
    bool multi() const { return world_size > 1; }
};

// Reads an environment variable (null: unset); std::getenv by default, a map in tests.
using EnvFn = std::function<const char*(const char*)>;

// The launch the flags and the environment describe: a single process (world size 1) when neither
// --nnodes > 1 nor WORLD_SIZE > 1 is given. The flags win over the environment. Errors
// (kInvalidArgument naming the variable or flag): a missing RANK / NODE_RANK / master address or port,
// a rank outside [0, world), WORLD_SIZE and --nnodes disagreeing, a world size other than
// tensor-parallel-size x pipeline-parallel-size, a device other than cpu or cuda. --device cuda across
// processes is accepted here: each process then takes one GPU (process_gpu) and its collectives run on
// NCCL, the unique ids sent over the TCP rendezvous (executor/nccl_rendezvous.h).
Result<ProcessLaunch> process_launch(const LaunchFlags& flags, const model::ParallelConfig& parallel,
                                     const std::string& device, const EnvFn& env = nullptr);

// The GPU a process of a multi-process --device cuda launch takes, and how it was chosen (for the log).
struct ProcessGpu {
    int gpu = 0;      // CUDA ordinal among the GPUs this process sees (CUDA_VISIBLE_DEVICES applied)
    std::string how;  // "LOCAL_RANK 1", "rank 3 mod 4 visible GPUs", "the one GPU CUDA_VISIBLE_DEVICES names"
};

// The GPU of rank launch.rank among `visible` GPUs (what this process sees): LOCAL_RANK when set
// (torchrun sets it: the process's index on its host), else the rank modulo `visible` (one process per
// node with --nnodes: rank % visible is a GPU of its own as long as a host runs at most `visible`
// processes; two processes of one host on one GPU are then caught after the rendezvous, by
// check_distinct_gpus). A process whose CUDA_VISIBLE_DEVICES names exactly one GPU takes GPU 0 (the
// launcher gave it its own). Errors: kFailedPrecondition when no GPU is visible; kInvalidArgument for a
// LOCAL_RANK or LOCAL_WORLD_SIZE that is not a number, and when two processes of this host would take
// the same GPU (LOCAL_RANK >= visible, or LOCAL_WORLD_SIZE > visible), which NCCL refuses ("Duplicate GPU
// detected"); the message names the counts and what to change.
Result<ProcessGpu> process_gpu(const ProcessLaunch& launch, int visible, const EnvFn& env = nullptr);

}  // namespace volt::executor
