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
// tensor-parallel-size x pipeline-parallel-size; kUnimplemented: --device other than cpu across processes
// (the TCP communicator moves host memory; GPU ranks in processes need NCCL's id exchanged over this
// rendezvous, not built).
Result<ProcessLaunch> process_launch(const LaunchFlags& flags, const model::ParallelConfig& parallel,
                                     const std::string& device, const EnvFn& env = nullptr);

}  // namespace volt::executor
