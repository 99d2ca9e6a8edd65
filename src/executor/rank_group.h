// The ranks of a tensor x pipeline parallel model in one process (docs/parallel.md): rank i =
// pp_rank * tp + tp_rank holds its shard (model/shard.h) placed on its own backend, a Forward wired to
// its two communicators (tp: the ranks of its stage; pp: the stages of its tp lane), and a thread of its
// own; run(fn) calls fn(i) on every rank's thread and waits for all. TP = PP = 1 is the whole model on
// the caller's thread (no thread, no communicator). The communicators come from a CommFactory: by default
// the CPU's threads of this process (cpu/thread_communicator.h); a GPU build passes its own.
// Tests: tests/unit/executor/parallel_test.cc.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "model/forward.h"
#include "model/shard.h"
#include "ops/communicator.h"
#include "ops/ops.h"

namespace volt::cpu {
class TcpCommunicator;
}

namespace volt::executor {

struct Rank {
    int index = 0, tp_rank = 0, pp_rank = 0;
    std::unique_ptr<ops::Backend> backend;
    std::shared_ptr<const model::ModelWeights> shard;
    // The CPU expert runner of the layers whose experts stay in host memory (null: none); before
    // `forward`, which points to it, and after `backend`, whose memory its staging is, and `shard`, whose
    // host pages it may have page-locked (it unpins them when it dies).
    std::unique_ptr<ops::HostExperts> host_experts;
    std::unique_ptr<model::Forward> forward;
    std::unique_ptr<ops::Communicator> tp_comm, pp_comm;
};

// A process rank's own communicators (RankGroup::create_process_rank): null members take the TCP
// subgroups of the world.
struct ProcessComms {
    std::unique_ptr<ops::Communicator> tp, pp;
};

using BackendFactory = std::function<Result<std::unique_ptr<ops::Backend>>(int rank)>;

// Every rank's communicators: tp[i] joins rank i to the ranks of its pipeline stage (tp ranks 0..T-1 of
// stage i / T, communicator rank = tp rank), pp[i] to the stages of its tp lane (communicator rank =
// pp rank); fail_all fails every one of them (sticky), so a rank that fails outside a collective stops
// its peers from waiting.
struct CommSet {
    std::vector<std::unique_ptr<ops::Communicator>> tp, pp;  // [world size]
    std::function<void(const Status&)> fail_all;
};
using CommFactory =
    std::function<Result<CommSet>(const model::ParallelConfig&, const ops::CommunicatorOptions&)>;
// The CPU's: one cpu::ThreadGroup per stage and per tp lane (the default of RankGroup::create).
Result<CommSet> thread_communicators(const model::ParallelConfig& p, const ops::CommunicatorOptions& options);

// The world ranks of rank i's groups, ascending (communicator rank = index): its tensor-parallel group
// (the T ranks of its stage, i / T) and its pipeline group (the P stages of its tp lane, i % T).
std::vector<int> tp_group_ranks(const model::ParallelConfig& p, int i);
std::vector<int> pp_group_ranks(const model::ParallelConfig& p, int i);

class RankGroup {
  public:
    // Shards `weights` (check_parallel's refusals), places every shard on make_backend(i); the experts
    // of the layers `experts_on_host` marks ([num_hidden_layers] or empty; model/offload.h) stay in host
    // memory and run on the CPU (cpu::HostExpertsRunner). Errors: the refusal, the backends' and
    // placement's.
    static Result<std::unique_ptr<RankGroup>> create(std::shared_ptr<const model::ModelWeights> weights,
                                                     const model::ParallelConfig& parallel,
                                                     const BackendFactory& make_backend,
                                                     const ops::CommunicatorOptions& comm_options = {},
                                                     const CommFactory& make_comms = thread_communicators,
                                                     const std::vector<bool>& experts_on_host = {});
    // One rank of a group whose ranks are processes (the engine across processes, docs/parallel.md
    // "Several processes"): this process holds rank `rank` of `parallel` alone (shard placed on
    // `backend`), its communicators the subgroups of `world` (every process, communicator rank = world
    // rank) that thread_communicators gives rank `rank`: tp_group_ranks and pp_group_ranks. `world` stays
    // the caller's (the step channel of the engine across processes); the subgroups share its
    // connections and failure. `comms` replaces them where given (GPU ranks: NCCL communicators of the
    // same groups, executor::process_gpu_comms; the world then carries only the steps). run(fn) calls
    // fn(0) on the caller's thread. Errors: check_parallel's refusal, placement's, attach's.
    static Result<std::unique_ptr<RankGroup>> create_process_rank(
        std::shared_ptr<const model::ModelWeights> weights, const model::ParallelConfig& parallel, int rank,
        std::unique_ptr<ops::Backend> backend, cpu::TcpCommunicator& world, ProcessComms comms = {});
    ~RankGroup();

    // Ranks held by this process (the world size, or 1 for a process rank); rank(i) is local rank i, and
    // Rank::index its index in the world.
    int size() const { return static_cast<int>(ranks_.size()); }
    const model::ParallelConfig& parallel() const { return parallel_; }
    Rank& rank(int i) { return *ranks_[i]; }
    // The rank that sees the gathered logits and samples: tp rank 0 of the last pipeline stage.
    int output_rank() const {
        return (parallel_.pipeline_parallel_size - 1) * parallel_.tensor_parallel_size;
    }
    // Whether this process holds the output rank, and its local index (0 when it holds none: the local
    // rank whose backend speaks for the process).
    bool holds_output() const { return output_rank() >= first_ && output_rank() < first_ + size(); }
    int local_output() const { return holds_output() ? output_rank() - first_ : 0; }

    // Calls fn(i) for every rank on its own thread and returns when all have returned: ok, or the first
    // rank's error (a failing rank fails the groups' communicators so its peers stop waiting).
    Status run(const std::function<Status(int)>& fn);
    // Fails every communicator of the group now (sticky): waiting and later collectives return `why`.
    void fail(const Status& why) {
        if (fail_all_) fail_all_(why);
    }

  private:
    struct Workers;
    RankGroup() = default;
    model::ParallelConfig parallel_;
    int first_ = 0;  // world index of local rank 0
    std::vector<std::unique_ptr<Rank>> ranks_;
    std::function<void(const Status&)> fail_all_;
    std::unique_ptr<Workers> workers_;
};

}  // namespace volt::executor
