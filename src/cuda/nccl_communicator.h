// The NCCL communicator (docs/parallel.md "Communicators"): ranks on distinct GPUs of one process, one
// thread and one CudaBackend per rank, NCCL loaded at run time (nccl_library.h) and the communicators of
// a group made at once by ncclCommInitAll. Exactness: ncclAllReduce sums in an order of its choosing
// (ring, tree), so the all-reduce is an ncclAllGather into a scratch [size, count] followed by the
// rank-order sum kernel (kernels/comm.cu) on every rank: bitwise the CPU communicators' r0 + r1 + ...,
// and equal on every rank. Gather and pipeline send / recv are ncclSend / ncclRecv (grouped for the
// gather). Every collective first meets the group's other ranks on the host (HostRendezvous: the order
// check and the watchdog), so ranks never enqueue mismatched NCCL calls; finish_step waits for the
// step's device work with the same timeout (ncclCommAbort and kUnavailable past it). With peer access
// among the GPUs (probed), all-reduces up to kOneShotMaxBytes take the one-shot kernel instead
// (kernels/comm.cu: flags in peer memory, the same rank-order sum), as vLLM's custom all-reduce does.
// join_process makes one rank of a group whose ranks are processes (ncclCommInitRank). Compiled, not yet
// run: this machine has no GPU and the GPU machine has one (docs/parallel.md).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "cuda/nccl_library.h"
#include "ops/communicator.h"

namespace volt::cuda {

class NcclGroupState;

class NcclGroup {
  public:
    // One NCCL rank per entry of `gpus` (distinct ordinals; rank r on gpus[r]). Errors: kInvalidArgument
    // for a repeated GPU (NCCL refuses two ranks on one GPU: --tp-same-device is the mode for that);
    // ncclCommInitAll's, as kInternal naming NCCL's reason.
    // one_shot: also use the one-shot all-reduce over peer memory for messages up to kOneShotMaxBytes,
    // if every GPU pair passes probe_peer_access (peer_access.h; else logged and NCCL alone). The caller
    // passes false for --disable-custom-all-reduce or NCCL_P2P_DISABLE.
    static Result<NcclGroup> create(std::shared_ptr<const NcclLibrary> nccl, const std::vector<int>& gpus,
                                    ops::CommunicatorOptions options = {}, bool one_shot = false);
    // Rank `rank` of a group of `size` ranks that are processes, one GPU each (the engine across
    // processes with --device cuda, docs/parallel.md "GPU ranks in processes"): ncclCommInitRank on `gpu`
    // with rank 0's `id` (executor/nccl_rendezvous.h); it blocks until every rank of the group joined.
    // No host meet across processes: every process runs the step rank 0 sent it, so all ranks issue the
    // same collectives in the same order by construction, and the per-collective order check of the
    // in-process groups is not repeated (it would cost a TCP round trip per collective). The watchdog
    // bounds finish_step and drain: it polls ncclCommGetAsyncError and, every few milliseconds,
    // `peers_alive` (null: not polled; the engine passes the TCP world's check_peers, so a peer process
    // that died fails the wait at once); on a failure or past timeout_s it aborts the NCCL communicator
    // at once (ncclCommAbort), so no kernel keeps the GPU waiting for a peer. No one-shot all-reduce
    // (its peer buffers would need CUDA IPC handles across processes: not built). A group of one rank
    // makes no NCCL communicator. Errors: kInvalidArgument for a rank outside [0, size); CUDA's;
    // ncclCommInitRank's (kInternal naming NCCL's reason).
    static Result<std::unique_ptr<ops::Communicator>> join_process(
        std::shared_ptr<const NcclLibrary> nccl, const NcclUniqueId& id, int size, int rank, int gpu,
        ops::CommunicatorOptions options = {}, std::function<Status()> peers_alive = nullptr);
    static constexpr int64_t kOneShotMaxBytes = int64_t{512} << 10;  // decode: 2880 x 4 bytes x 45 tokens
    // Whether the one-shot path is on (the probe passed).
    bool one_shot() const;
    // Rank r's handle; attach it to a CudaBackend on gpus[r] before its first collective.
    std::unique_ptr<ops::Communicator> communicator(int rank) const;
    int size() const;
    // Fails the group now (sticky).
    void fail(const Status& why) const;

  private:
    std::shared_ptr<NcclGroupState> state_;
};

}  // namespace volt::cuda
