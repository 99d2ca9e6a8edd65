#include "executor/backend_factory.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "core/logging.h"
#include "cpu/cpu_ops.h"
#include "cpu/tcp_communicator.h"
#include "executor/nccl_rendezvous.h"
#if defined(VOLT_HAVE_CUDA)
#include <cuda_runtime.h>

#include "cuda/cuda_backend.h"
#include "cuda/nccl_communicator.h"
#include "cuda/same_device_communicator.h"
#endif

namespace volt::executor {

#if defined(VOLT_HAVE_CUDA)
bool cuda_built() { return true; }
int visible_gpus() { return cuda::visible_gpu_count(); }
#else
bool cuda_built() { return false; }
int visible_gpus() { return 0; }
#endif

namespace {
constexpr int kMaxSameDeviceRanks = 16;  // cuda::kMaxCommRanks

std::string ranks_text(const model::ParallelConfig& p) {
    return "--tensor-parallel-size " + std::to_string(p.tensor_parallel_size) +
           " x --pipeline-parallel-size " + std::to_string(p.pipeline_parallel_size) + " = " +
           std::to_string(p.world_size()) + " ranks";
}
}  // namespace

Result<std::unique_ptr<ops::Backend>> make_backend(const DeviceOptions& o) {
    if (o.device == "cpu") return std::unique_ptr<ops::Backend>(std::make_unique<cpu::CpuBackend>());
    if (o.device == "cuda") {
#if defined(VOLT_HAVE_CUDA)
        cuda::CudaOptions co;
        co.dtype = o.dtype;
        co.cuda_kernels = o.cuda_kernels;
        co.embedding_in_host_memory = o.embedding_in_host_memory;
        co.single_sequence = o.single_sequence;
        co.device = o.gpu;
        VOLT_ASSIGN_OR_RETURN(auto backend, cuda::CudaBackend::create(co));
        return std::unique_ptr<ops::Backend>(std::move(backend));
#else
        return unimplemented(
            "--device cuda: this voltllm was built without CUDA (configure with the volta, "
            "volta-ptx or cuda13 preset)");
#endif
    }
    return invalid_argument("--device " + o.device + ": expected cpu or cuda");
}

bool p2p_disabled(const char* v) { return v != nullptr && *v != 0 && std::string(v) != "0"; }

Result<std::vector<int>> rank_gpus(const model::ParallelConfig& p, int visible, bool same_device) {
    const int world = p.world_size();
    if (same_device) {
        if (world > kMaxSameDeviceRanks)
            return invalid_argument(ranks_text(p) + " on one GPU (--tp-same-device): at most " +
                                    std::to_string(kMaxSameDeviceRanks) + " ranks share one GPU");
        return std::vector<int>(world, 0);
    }
    if (world > visible)
        return invalid_argument(
            ranks_text(p) + " need " + std::to_string(world) + " GPUs, one per rank, but " +
            std::to_string(visible) +
            " are visible (CUDA_VISIBLE_DEVICES); --tp-same-device puts every rank on GPU 0 "
            "(for tests: the ranks share its memory and its time)");
    std::vector<int> gpus(world);
    for (int i = 0; i < world; ++i) gpus[i] = i;
    return gpus;
}

Result<ParallelFactories> parallel_factories(const DeviceOptions& device, const model::ParallelConfig& p) {
    ParallelFactories f;
    if (device.device == "cpu") {
        f.make_backend = [device](int) { return make_backend(device); };
        f.make_comms = thread_communicators;
        f.communicator = "threads";
        return f;
    }
    if (device.device != "cuda")
        return invalid_argument("--device " + device.device + ": expected cpu or cuda");
#if defined(VOLT_HAVE_CUDA)
    VOLT_ASSIGN_OR_RETURN(f.gpus, rank_gpus(p, visible_gpus(), device.tp_same_device));
    const std::vector<int> gpus = f.gpus;
    f.make_backend = [device, gpus](int i) {
        DeviceOptions d = device;
        d.gpu = gpus[i];
        return make_backend(d);
    };
    if (device.tp_same_device) {
        f.communicator = "same-device";
        f.make_comms = [](const model::ParallelConfig& q,
                          const ops::CommunicatorOptions& options) -> Result<CommSet> {
            const int tp = q.tensor_parallel_size, pp = q.pipeline_parallel_size;
            std::vector<cuda::SameDeviceGroup> tp_groups, pp_groups;
            for (int s = 0; s < pp; ++s) tp_groups.emplace_back(tp, 0, options);
            for (int t = 0; t < tp; ++t) pp_groups.emplace_back(pp, 0, options);
            CommSet set;
            for (int i = 0; i < q.world_size(); ++i) {
                set.tp.push_back(tp_groups[i / tp].communicator(i % tp));
                set.pp.push_back(pp_groups[i % tp].communicator(i / tp));
            }
            set.fail_all = [tp_groups, pp_groups](const Status& why) {
                for (const auto& g : tp_groups) g.fail(why);
                for (const auto& g : pp_groups) g.fail(why);
            };
            return set;
        };
        return f;
    }
    // One GPU per rank: NCCL, loaded now (the binary needs it only here).
    default_nccl_environment();
    VOLT_ASSIGN_OR_RETURN(std::shared_ptr<const cuda::NcclLibrary> nccl, cuda::NcclLibrary::open());
    spdlog::info("parallel: {} (NCCL version code {}), ranks on GPUs 0..{}", nccl->soname, nccl->version,
                 p.world_size() - 1);
    f.communicator = "nccl";
    bool one_shot = true;
    if (device.disable_custom_all_reduce) {
        spdlog::info("custom all-reduce: off (--disable-custom-all-reduce): NCCL alone");
        one_shot = false;
    } else if (p2p_disabled(std::getenv("NCCL_P2P_DISABLE"))) {
        spdlog::info("custom all-reduce: off (NCCL_P2P_DISABLE={}): NCCL alone",
                     std::getenv("NCCL_P2P_DISABLE"));
        one_shot = false;
    }
    f.make_comms = [nccl, gpus, one_shot](const model::ParallelConfig& q,
                                          const ops::CommunicatorOptions& options) -> Result<CommSet> {
        const int tp = q.tensor_parallel_size, pp = q.pipeline_parallel_size;
        std::vector<cuda::NcclGroup> tp_groups, pp_groups;
        for (int s = 0; s < pp; ++s) {
            std::vector<int> members;
            for (int t = 0; t < tp; ++t) members.push_back(gpus[s * tp + t]);
            VOLT_ASSIGN_OR_RETURN(auto g, cuda::NcclGroup::create(nccl, members, options, one_shot));
            tp_groups.push_back(std::move(g));
        }
        for (int t = 0; t < tp; ++t) {
            std::vector<int> members;
            for (int s = 0; s < pp; ++s) members.push_back(gpus[s * tp + t]);
            VOLT_ASSIGN_OR_RETURN(auto g, cuda::NcclGroup::create(nccl, members, options));
            pp_groups.push_back(std::move(g));
        }
        CommSet set;
        for (int i = 0; i < q.world_size(); ++i) {
            set.tp.push_back(tp_groups[i / tp].communicator(i % tp));
            set.pp.push_back(pp_groups[i % tp].communicator(i / tp));
        }
        set.fail_all = [tp_groups, pp_groups](const Status& why) {
            for (const auto& g : tp_groups) g.fail(why);
            for (const auto& g : pp_groups) g.fail(why);
        };
        return set;
    };
    return f;
#else
    (void)p;
    return unimplemented(
        "--device cuda: this voltllm was built without CUDA (configure with the volta, volta-ptx or cuda13 "
        "preset)");
#endif
}

void default_nccl_environment() {
    const char* set = std::getenv("NCCL_NVLS_ENABLE");
    if (set != nullptr) {
        spdlog::info("parallel: NCCL_NVLS_ENABLE={} (the environment's)", set);
        return;
    }
    setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
    spdlog::info("parallel: NCCL_NVLS_ENABLE=0 (NVLink multicast off; set the variable to override)");
}

Result<ProcessComms> process_gpu_comms(const model::ParallelConfig& p, int rank, int gpu,
                                       cpu::TcpCommunicator& world, const ops::CommunicatorOptions& options) {
#if defined(VOLT_HAVE_CUDA)
    default_nccl_environment();
    VOLT_ASSIGN_OR_RETURN(std::shared_ptr<const cuda::NcclLibrary> nccl, cuda::NcclLibrary::open());
    GpuPlace place;
    char text[256] = {};
    if (gethostname(text, sizeof text - 1) == 0) place.host = text;
    char bus[64] = {};
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, gpu) != cudaSuccess)
        return failed_precondition("rank " + std::to_string(rank) + ": GPU " + std::to_string(gpu) +
                                   " has no PCI bus id (cudaDeviceGetPCIBusId failed)");
    place.bus_id = bus;
    place.ordinal = gpu;
    VOLT_ASSIGN_OR_RETURN(
        std::vector<cuda::NcclUniqueId> ids,
        exchange_nccl_ids(world, place, nccl_id_count(p), [&] { return nccl->unique_id(); }));
    spdlog::info(
        "parallel: rank {} of {} processes on GPU {} ({}, host {}), {} (NCCL version code {}), {} NCCL "
        "id(s) from rank 0 over TCP",
        rank, p.world_size(), gpu, place.bus_id, place.host, nccl->soname, nccl->version, ids.size());
    const std::function<Status()> peers = [&world] { return world.check_peers(); };
    ProcessComms comms;
    const std::vector<int> tp_ranks = tp_group_ranks(p, rank), pp_ranks = pp_group_ranks(p, rank);
    const int tp_id = tp_id_index(p, rank), pp_id = pp_id_index(p, rank);
    const cuda::NcclUniqueId none{};
    // ncclCommInitRank blocks, with no deadline, until every member of the group has joined. A member that
    // failed instead (its process ended, so its TCP connection closed) would hold this rank there forever:
    // 2 x 2, rank 2's tp join fails and rank 0 waits in the pp join with it; or rank 0 dies after sending
    // the ids and its bootstrap roots go with it. A blocking init cannot be cancelled, so while joining this
    // process watches the world and ends itself when a peer is gone (the others then see its connection
    // close in turn, and every process ends, as on any failure of the group).
    std::atomic<bool> joining{true};
    std::thread watch([&world, &joining, rank] {
        while (joining.load()) {
            const Status s = world.check_peers();
            if (!s.is_ok()) {
                spdlog::error("parallel: rank {}: {} while joining the NCCL communicators; exiting", rank,
                              s.message());
                spdlog::default_logger()->flush();
                std::_Exit(1);
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
    });
    struct StopWatch {
        std::atomic<bool>& joining;
        std::thread& watch;
        ~StopWatch() {
            joining.store(false);
            watch.join();
        }
    } stop_watch{joining, watch};
    VOLT_ASSIGN_OR_RETURN(
        comms.tp,
        cuda::NcclGroup::join_process(nccl, tp_id >= 0 ? ids[tp_id] : none, static_cast<int>(tp_ranks.size()),
                                      rank % p.tensor_parallel_size, gpu, options, peers));
    VOLT_ASSIGN_OR_RETURN(
        comms.pp,
        cuda::NcclGroup::join_process(nccl, pp_id >= 0 ? ids[pp_id] : none, static_cast<int>(pp_ranks.size()),
                                      rank / p.tensor_parallel_size, gpu, options, peers));
    spdlog::info(
        "parallel: rank {}: NCCL communicators of its tp group (world ranks {}..{}) and pp group ({} ranks); "
        "custom all-reduce: off across processes (it would need CUDA IPC handles: not built), NCCL alone",
        rank, tp_ranks.front(), tp_ranks.back(), pp_ranks.size());
    return comms;
#else
    (void)p;
    (void)rank;
    (void)gpu;
    (void)world;
    (void)options;
    return unimplemented(
        "--device cuda: this voltllm was built without CUDA (configure with the volta, volta-ptx or cuda13 "
        "preset)");
#endif
}

}  // namespace volt::executor
