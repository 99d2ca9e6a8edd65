// The NCCL part of a multi-process --device cuda launch's rendezvous (docs/parallel.md "GPU ranks in
// processes"): after cpu::tcp_connect (whose Hello already refused a rank configured differently), every
// worker tells rank 0 where its GPU is (host name, PCI bus id); rank 0 refuses two ranks on one GPU, makes
// one NCCL unique id (ncclGetUniqueId, 128 bytes) per tensor- and pipeline-parallel group of more than one
// rank, and sends its verdict and the ids to every rank over the same TCP connections, as the first
// messages after the Hello. Each rank then joins its groups with ncclCommInitRank. Plain C++ (the ids come
// from a function, NCCL's in the engine): tests/unit/executor/nccl_rendezvous_test.cc forks the ranks.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "cuda/nccl_library.h"
#include "model/shard.h"

namespace volt::cpu {
class TcpCommunicator;
}

namespace volt::executor {

// Where a rank's GPU is. Two ranks with the same host and bus_id would share a GPU.
struct GpuPlace {
    std::string host;    // gethostname(), at most 127 bytes travel
    std::string bus_id;  // cudaDeviceGetPCIBusId: "0000:3B:00.0"; at most 63 bytes travel
    int ordinal = 0;     // the CUDA ordinal in that process (for messages)
};

// Ok when no two places name the same host and bus id; else kInvalidArgument naming the first two ranks
// (indices of `places`), the GPU and what to change ("ranks 0 and 2 would both use GPU 0000:3B:00.0
// (ordinal 0) of host h1: NCCL refuses two ranks on one GPU (Duplicate GPU detected); ...").
Status check_distinct_gpus(const std::vector<GpuPlace>& places);

// The ids of a launch of `p`, in order: one per pipeline stage's tensor-parallel group when T > 1 (stage
// s at index s), then one per tp lane's pipeline group when P > 1 (lane t at index P' + t, P' = P when T >
// 1 else 0). A group of one rank needs no NCCL communicator and has no id.
int nccl_id_count(const model::ParallelConfig& p);
// The index of rank i's tp (pp) group's id in that list, or -1 when the group has one rank.
int tp_id_index(const model::ParallelConfig& p, int i);
int pp_id_index(const model::ParallelConfig& p, int i);

using MakeNcclId = std::function<Result<cuda::NcclUniqueId>()>;

// The exchange, called by every rank of `world` (every process, right after tcp_connect, before any other
// message on it) with its own GPU's place. Rank 0 collects the places (check_distinct_gpus), then calls
// make_id `count` times (only rank 0 calls it) and sends every worker its verdict and the ids. Returns
// `count` ids, on every rank bit for bit rank 0's. Errors, on every rank alike (rank 0 sends its verdict,
// and a worker returns the same code, the message prefixed "rank 0: "): check_distinct_gpus's, make_id's; the
// communicator's: kUnavailable from the watchdog (CommunicatorOptions::timeout_s) when a rank does not
// answer, or when a connection closed; kInternal for a malformed answer.
Result<std::vector<cuda::NcclUniqueId>> exchange_nccl_ids(cpu::TcpCommunicator& world, const GpuPlace& mine,
                                                          int count, const MakeNcclId& make_id);

}  // namespace volt::executor
