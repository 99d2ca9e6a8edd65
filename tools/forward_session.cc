#include "tools/forward_session.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>

#include "core/logging.h"
#include "cpu/host_experts.h"
#include "cpu/tcp_communicator.h"
#include "executor/engine_flags.h"
#include "model/offload.h"
#include "model/sequence_runner.h"
#include "model/shard.h"

namespace volt::tools {

namespace {
[[noreturn]] void fail(const Status& s) {
    std::fprintf(stderr, "error: %s\n", s.to_string().c_str());
    std::exit(1);
}
}  // namespace

// One rank of a multi-process launch (torchrun's environment variables).
ForwardSession open_process_rank(ForwardSession s, const executor::DeviceOptions& device,
                                 const model::ParallelConfig& p, int world) {
    auto env = [](const char* name) -> std::string {
        const char* v = std::getenv(name);
        if (v == nullptr || *v == 0)
            fail(invalid_argument(
                std::string("WORLD_SIZE is set but ") + name +
                " is not (torchrun's variables: WORLD_SIZE, RANK, MASTER_ADDR, MASTER_PORT)"));
        return v;
    };
    const int rank = std::atoi(env("RANK").c_str());
    const std::string addr = env("MASTER_ADDR");
    const int port = std::atoi(env("MASTER_PORT").c_str());
    if (p.world_size() != world)
        fail(invalid_argument("WORLD_SIZE " + std::to_string(world) + " but --tensor-parallel-size " +
                              std::to_string(p.tensor_parallel_size) + " x --pipeline-parallel-size " +
                              std::to_string(p.pipeline_parallel_size) + " = " +
                              std::to_string(p.world_size())));
    if (rank < 0 || rank >= world)
        fail(invalid_argument("RANK " + std::to_string(rank) + " of WORLD_SIZE " + std::to_string(world)));
    if (p.tensor_parallel_size > 1 && p.pipeline_parallel_size > 1)
        fail(
            unimplemented("tensor and pipeline parallelism together across processes (one process per rank): "
                          "use one of them, or one process with threads"));
    const Status ok = model::check_parallel(s.host->config, p);
    if (!ok.is_ok()) fail(ok);
    const int tp_rank = rank % p.tensor_parallel_size, pp_rank = rank / p.tensor_parallel_size;
    auto shard = model::shard_weights(s.host, p, tp_rank, pp_rank);
    if (!shard.is_ok()) fail(shard.status());
    auto backend = executor::make_backend(device);
    if (!backend.is_ok()) fail(backend.status());
    s.backend = std::move(*backend);
    auto placed = model::place_model(*shard, *s.backend);
    if (!placed.is_ok()) fail(placed.status());
    s.placed = std::move(*placed);
    s.forward = std::make_unique<model::Forward>(s.placed, *s.backend);
    auto comm = cpu::tcp_connect({.rank = rank, .size = world, .host = addr, .port = port});
    if (!comm.is_ok()) fail(comm.status());
    s.process_comm = std::move(*comm);
    if (p.tensor_parallel_size > 1) {
        s.forward->set_comm({s.process_comm.get(), nullptr});
    } else {
        s.forward->set_comm({nullptr, s.process_comm.get()});
    }
    s.process_rank = rank;
    s.world_size = world;
    s.writes_output = rank == (p.pipeline_parallel_size - 1) * p.tensor_parallel_size;
    spdlog::info("parallel: rank {} of {} processes (tp rank {}, pp rank {}), communicator tcp via {}:{}",
                 rank, world, tp_rank, pp_rank, addr, port);
    return s;
}

ops::Format kv_format_or_exit(const std::string& kv_cache_dtype, bool kv_f16,
                              const executor::DeviceOptions& device) {
    if (kv_cache_dtype == "auto") return kv_f16 ? ops::Format::kF16 : ops::Format::kF32;
    if (kv_f16)
        fail(invalid_argument("give --kv-cache-f16 or --kv-cache-dtype " + kv_cache_dtype + ", not both"));
    auto f = executor::kv_cache_format(kv_cache_dtype, device.device);
    if (!f.is_ok()) fail(f.status());
    return *f;
}

ForwardSession open_forward_or_exit(const std::string& model_dir, const executor::DeviceOptions& device,
                                    const model::ParallelConfig& parallel,
                                    const std::string& offload_experts) {
    ForwardSession s;
    auto weights = model::load_model(model_dir);
    if (!weights.is_ok()) fail(weights.status());
    s.host = std::move(*weights);
    auto offload = model::plan_offload(*s.host, {offload_experts});
    if (!offload.is_ok()) fail(offload.status());
    if (offload->any() && (parallel.world_size() > 1 || (std::getenv("WORLD_SIZE") != nullptr &&
                                                         std::atoi(std::getenv("WORLD_SIZE")) > 1)))
        fail(unimplemented("--cpu-offload-experts with tensor or pipeline parallelism: not built yet"));
    if (offload->any()) spdlog::info("offload: {}", offload->describe());
    if (const char* ws = std::getenv("WORLD_SIZE"); ws != nullptr && std::atoi(ws) > 1)
        return open_process_rank(std::move(s), device, parallel, std::atoi(ws));
    if (parallel.world_size() > 1) {
        const Status valid = model::check_parallel(s.host->config, parallel);
        if (!valid.is_ok()) fail(valid);
        auto factories = executor::parallel_factories(device, parallel);
        if (!factories.is_ok()) fail(factories.status());
        auto ranks =
            executor::RankGroup::create(s.host, parallel, factories->make_backend, {}, factories->make_comms);
        if (!ranks.is_ok()) fail(ranks.status());
        s.ranks = std::move(*ranks);
        return s;
    }
    auto backend = executor::make_backend(device);
    if (!backend.is_ok()) fail(backend.status());
    s.backend = std::move(*backend);
    auto placed = model::place_model(s.host, *s.backend, offload->layers);
    if (!placed.is_ok()) fail(placed.status());
    s.placed = std::move(*placed);
    s.forward = std::make_unique<model::Forward>(s.placed, *s.backend);
    if (offload->any()) {
        s.host_experts = std::make_unique<cpu::HostExpertsRunner>();
        s.forward->set_host_experts(s.host_experts.get());
    }
    return s;
}

void ForwardSession::set_trace(const model::TraceFn& fn) {
    if (!ranks) {
        if (process_comm && forward->weights().shard.tp_rank != 0) return;
        forward->set_trace(fn);
        return;
    }
    for (int i = 0; i < ranks->size(); ++i)
        if (ranks->rank(i).tp_rank == 0) ranks->rank(i).forward->set_trace(fn);
}

Status ForwardSession::run_logits(const std::vector<int32_t>& prompt, int64_t start_pos,
                                  ops::Format kv_format, std::vector<float>* logits) {
    const auto n = static_cast<int64_t>(prompt.size());
    if (!ranks) {
        model::SequenceRunner run(*forward, n, 16, kv_format);
        *logits = run.append(prompt, /*all_rows=*/true, start_pos);
        return Status::ok();
    }
    std::vector<std::unique_ptr<model::SequenceRunner>> runners;
    for (int i = 0; i < ranks->size(); ++i)
        runners.push_back(std::make_unique<model::SequenceRunner>(*ranks->rank(i).forward, n, 16, kv_format));
    return ranks->run([&](int i) {
        std::vector<float> l = runners[i]->append(prompt, /*all_rows=*/true, start_pos);
        if (i == ranks->output_rank()) *logits = std::move(l);
        return Status::ok();
    });
}

void add_device_flags(CLI::App* cmd, executor::DeviceOptions* d) {
    cmd->add_option("--device", d->device, "cpu or cuda")
        ->check(CLI::IsMember({"cpu", "cuda"}))
        ->capture_default_str();
    cmd->add_option("--dtype", d->dtype, "auto, half, float or bfloat16 (GPU operands; auto: half on sm_70)")
        ->check(CLI::IsMember({"auto", "half", "float16", "float", "float32", "bfloat16"}))
        ->capture_default_str();
    cmd->add_option("--cuda-kernels", d->cuda_kernels, "auto or sm70 (force the Volta kernels, no cuBLAS)")
        ->check(CLI::IsMember({"auto", "sm70"}))
        ->capture_default_str();
}

}  // namespace volt::tools
