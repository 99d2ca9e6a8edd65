#include "tools/forward_session.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>

#include "core/logging.h"
#include "cpu/host_experts.h"
#include "cpu/tcp_communicator.h"
#include "executor/engine_flags.h"
#include "executor/process_launch.h"
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

// One rank of a multi-process launch (torchrun's environment variables; executor/process_launch.h): the
// rank's shard on its own backend, joined to the other processes over TCP (RankGroup::create_process_rank).
ForwardSession open_process_rank(ForwardSession s, const executor::DeviceOptions& device,
                                 const model::ParallelConfig& p, const executor::ProcessLaunch& launch) {
    executor::DeviceOptions d = device;
    if (d.device == "cuda" && executor::cuda_built()) {
        // One GPU per process (a build without CUDA fails in make_backend below, saying so).
        auto gpu = executor::process_gpu(launch, executor::visible_gpus());
        if (!gpu.is_ok()) fail(gpu.status());
        d.gpu = gpu->gpu;
        spdlog::info("parallel: rank {} of {} processes takes GPU {} ({})", launch.rank, launch.world_size,
                     gpu->gpu, gpu->how);
    }
    auto backend = executor::make_backend(d);
    if (!backend.is_ok()) fail(backend.status());
    cpu::TcpOptions o;
    o.rank = launch.rank;
    o.size = launch.world_size;
    o.host = launch.master_addr;
    o.port = launch.master_port;
    o.config = "logits: world " + std::to_string(launch.world_size) + " (tp " +
               std::to_string(p.tensor_parallel_size) + " x pp " + std::to_string(p.pipeline_parallel_size) +
               "), device " + d.device + ", dtype " + d.dtype;
    if (const char* secret = std::getenv("VOLT_GROUP_SECRET")) o.secret = secret;
    auto comm = cpu::tcp_connect(o);
    if (!comm.is_ok()) fail(comm.status());
    executor::ProcessComms comms;  // GPU ranks: NCCL, its ids over the TCP world
    if (d.device == "cuda") {
        auto made = executor::process_gpu_comms(p, launch.rank, d.gpu, **comm, o.comm);
        if (!made.is_ok()) fail(made.status());
        comms = std::move(*made);
    }
    auto ranks = executor::RankGroup::create_process_rank(s.host, p, launch.rank, std::move(*backend), **comm,
                                                          std::move(comms));
    if (!ranks.is_ok()) fail(ranks.status());
    s.ranks = std::move(*ranks);
    s.world = std::move(*comm);
    s.process_rank = launch.rank;
    s.world_size = launch.world_size;
    s.writes_output = s.ranks->holds_output();
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
    auto launch = executor::process_launch({}, parallel, device.device);
    if (!launch.is_ok()) fail(launch.status());
    if (launch->multi()) {
        const Status valid = model::check_parallel(s.host->config, parallel);
        if (!valid.is_ok()) fail(valid);
        return open_process_rank(std::move(s), device, parallel, *launch);
    }
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
        if (ranks->holds_output() && i == ranks->local_output()) *logits = std::move(l);
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
