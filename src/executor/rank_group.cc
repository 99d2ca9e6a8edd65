#include "executor/rank_group.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "core/check.h"
#include "core/logging.h"
#include "cpu/host_experts.h"
#include "cpu/tcp_communicator.h"
#include "cpu/thread_communicator.h"

namespace volt::executor {

// One thread per rank, started once; run() hands every thread the same job and waits for all.
struct RankGroup::Workers {
    std::mutex mu;
    std::condition_variable start, done;
    const std::function<Status(int)>* job = nullptr;
    uint64_t generation = 0;
    int pending = 0;
    bool stop = false;
    std::vector<Status> results;
    std::vector<std::thread> threads;
};

Result<CommSet> thread_communicators(const model::ParallelConfig& p,
                                     const ops::CommunicatorOptions& options) {
    const int tp = p.tensor_parallel_size, pp = p.pipeline_parallel_size;
    std::vector<cpu::ThreadGroup> tp_groups, pp_groups;
    for (int s = 0; s < pp; ++s) tp_groups.emplace_back(tp, options);
    for (int t = 0; t < tp; ++t) pp_groups.emplace_back(pp, options);
    CommSet set;
    for (int i = 0; i < p.world_size(); ++i) {
        set.tp.push_back(tp_groups[i / tp].communicator(i % tp));
        set.pp.push_back(pp_groups[i % tp].communicator(i / tp));
    }
    set.fail_all = [tp_groups, pp_groups](const Status& why) {
        for (const auto& t : tp_groups) t.fail(why);
        for (const auto& q : pp_groups) q.fail(why);
    };
    return set;
}

namespace {
// Rank i of `p` on `backend`: its shard placed, its Forward wired to its communicators (none at world
// size 1). What RankGroup::create does for every rank and create_process_rank for its one.
Result<std::unique_ptr<Rank>> make_rank(const std::shared_ptr<const model::ModelWeights>& weights,
                                        const model::ParallelConfig& p, int i,
                                        std::unique_ptr<ops::Backend> backend,
                                        std::unique_ptr<ops::Communicator> tp_comm,
                                        std::unique_ptr<ops::Communicator> pp_comm,
                                        const std::vector<bool>& experts_on_host) {
    auto r = std::make_unique<Rank>();
    r->index = i;
    r->tp_rank = i % p.tensor_parallel_size;
    r->pp_rank = i / p.tensor_parallel_size;
    r->backend = std::move(backend);
    r->backend->bind_thread();  // placement below allocates on the rank's device
    if (p.world_size() == 1) {
        r->shard = weights;
    } else {
        VOLT_ASSIGN_OR_RETURN(r->shard, model::shard_weights(weights, p, r->tp_rank, r->pp_rank));
    }
    VOLT_ASSIGN_OR_RETURN(auto placed, model::place_model(r->shard, *r->backend, experts_on_host));
    std::vector<ops::HostExpertLayer> host_layers;
    for (size_t l = 0; l < placed->weights.layers.size(); ++l)
        if (placed->experts_on_host_at(static_cast<int64_t>(l)))
            host_layers.push_back({placed->weights.layers[l].gate_up, placed->weights.layers[l].down});
    r->forward = std::make_unique<model::Forward>(std::move(placed), *r->backend);
    if (!host_layers.empty()) {
        // Its staging (prompt rows on the primary) is allocated now, before memory planning measures.
        r->host_experts = std::make_unique<cpu::HostExpertsRunner>();
        VOLT_RETURN_IF_ERROR(r->host_experts->prepare(*r->backend, host_layers));
        r->forward->set_host_experts(r->host_experts.get());
    }
    if (p.world_size() > 1) {
        r->tp_comm = std::move(tp_comm);
        r->pp_comm = std::move(pp_comm);
        VOLT_RETURN_IF_ERROR(r->tp_comm->attach(*r->backend));
        VOLT_RETURN_IF_ERROR(r->pp_comm->attach(*r->backend));
        r->forward->set_comm({r->tp_comm.get(), r->pp_comm.get()});
    }
    return r;
}
}  // namespace

std::vector<int> tp_group_ranks(const model::ParallelConfig& p, int i) {
    const int tp = p.tensor_parallel_size;
    std::vector<int> ranks;
    for (int t = 0; t < tp; ++t) ranks.push_back(i / tp * tp + t);
    return ranks;
}

std::vector<int> pp_group_ranks(const model::ParallelConfig& p, int i) {
    const int tp = p.tensor_parallel_size;
    std::vector<int> ranks;
    for (int s = 0; s < p.pipeline_parallel_size; ++s) ranks.push_back(s * tp + i % tp);
    return ranks;
}

Result<std::unique_ptr<RankGroup>> RankGroup::create(std::shared_ptr<const model::ModelWeights> weights,
                                                     const model::ParallelConfig& p,
                                                     const BackendFactory& make_backend,
                                                     const ops::CommunicatorOptions& comm_options,
                                                     const CommFactory& make_comms,
                                                     const std::vector<bool>& experts_on_host) {
    VOLT_RETURN_IF_ERROR(model::check_parallel(weights->config, p));
    std::unique_ptr<RankGroup> g(new RankGroup());
    g->parallel_ = p;
    const int tp = p.tensor_parallel_size, pp = p.pipeline_parallel_size;
    CommSet comms;
    if (p.world_size() > 1) {
        VOLT_ASSIGN_OR_RETURN(comms, make_comms(p, comm_options));
        VOLT_CHECK(static_cast<int>(comms.tp.size()) == p.world_size() &&
                   static_cast<int>(comms.pp.size()) == p.world_size())
            << "a communicator per rank";
    }
    for (int i = 0; i < p.world_size(); ++i) {
        VOLT_ASSIGN_OR_RETURN(auto backend, make_backend(i));
        std::unique_ptr<ops::Communicator> tp_comm, pp_comm;
        if (p.world_size() > 1) {
            tp_comm = std::move(comms.tp[i]);
            pp_comm = std::move(comms.pp[i]);
        }
        VOLT_ASSIGN_OR_RETURN(auto r, make_rank(weights, p, i, std::move(backend), std::move(tp_comm),
                                                std::move(pp_comm), experts_on_host));
        g->ranks_.push_back(std::move(r));
    }
    g->fail_all_ = comms.fail_all;
    if (p.world_size() > 1) {
        spdlog::info(
            "parallel: tensor-parallel-size {} x pipeline-parallel-size {} = {} ranks, communicator {}, "
            "one thread per rank",
            tp, pp, p.world_size(), g->ranks_[0]->tp_comm->name());
        auto* w = new Workers();
        g->workers_.reset(w);
        w->results.resize(p.world_size());
        for (int i = 0; i < p.world_size(); ++i) {
            ops::Backend* backend = g->ranks_[i]->backend.get();
            w->threads.emplace_back([w, i, backend] {
                backend->bind_thread();  // a GPU rank's thread issues its work on its own device
                uint64_t seen = 0;
                std::unique_lock<std::mutex> lock(w->mu);
                for (;;) {
                    w->start.wait(lock, [&] { return w->stop || w->generation != seen; });
                    if (w->stop) return;
                    seen = w->generation;
                    const auto* job = w->job;
                    lock.unlock();
                    Status s = (*job)(i);
                    lock.lock();
                    w->results[i] = std::move(s);
                    if (--w->pending == 0) w->done.notify_all();
                }
            });
        }
    }
    return g;
}

Result<std::unique_ptr<RankGroup>> RankGroup::create_process_rank(
    std::shared_ptr<const model::ModelWeights> weights, const model::ParallelConfig& p, int rank,
    std::unique_ptr<ops::Backend> backend, cpu::TcpCommunicator& world, ProcessComms comms) {
    VOLT_RETURN_IF_ERROR(model::check_parallel(weights->config, p));
    VOLT_CHECK(p.world_size() > 1 && rank >= 0 && rank < p.world_size() && world.size() == p.world_size() &&
               world.rank() == rank)
        << "process rank " << rank << " of " << p.world_size();
    std::unique_ptr<RankGroup> g(new RankGroup());
    g->parallel_ = p;
    g->first_ = rank;
    // The same groups as thread_communicators' (tp: this rank's stage, pp: its tp lane) over the world's
    // connections, unless the caller brought its own.
    if (!comms.tp) comms.tp = world.subgroup(tp_group_ranks(p, rank));
    if (!comms.pp) comms.pp = world.subgroup(pp_group_ranks(p, rank));
    VOLT_ASSIGN_OR_RETURN(auto r, make_rank(weights, p, rank, std::move(backend), std::move(comms.tp),
                                            std::move(comms.pp), {}));
    spdlog::info("parallel: rank {} of {} processes (tp rank {}, pp rank {}), communicator {}", rank,
                 p.world_size(), r->tp_rank, r->pp_rank, r->tp_comm->name());
    g->ranks_.push_back(std::move(r));
    return g;
}

RankGroup::~RankGroup() {
    if (!workers_) return;
    {
        std::lock_guard<std::mutex> lock(workers_->mu);
        workers_->stop = true;
    }
    workers_->start.notify_all();
    for (auto& t : workers_->threads) t.join();
}

Status RankGroup::run(const std::function<Status(int)>& fn) {
    if (!workers_) return fn(0);
    Workers& w = *workers_;
    // A rank that fails outside a collective fails the groups, so no peer waits for it in vain.
    const std::function<Status(int)> job = [&](int i) {
        Status s = fn(i);
        if (!s.is_ok()) fail_all_(s);
        return s;
    };
    std::unique_lock<std::mutex> lock(w.mu);
    w.job = &job;
    w.pending = size();
    ++w.generation;
    w.start.notify_all();
    w.done.wait(lock, [&] { return w.pending == 0; });
    w.job = nullptr;
    for (const Status& s : w.results)
        if (!s.is_ok()) return s;
    return Status::ok();
}

}  // namespace volt::executor
