#include "executor/process_launch.h"

#include <cstdlib>

namespace volt::executor {

namespace {
// A whole non-negative number, or -1.
int parse_int(const char* s) {
    if (s == nullptr || *s == 0) return -1;
    char* end = nullptr;
    const long v = std::strtol(s, &end, 10);
    return *end == 0 && v >= 0 && v <= (1 << 30) ? static_cast<int>(v) : -1;
}
}  // namespace

Result<ProcessLaunch> process_launch(const LaunchFlags& flags, const model::ParallelConfig& parallel,
                                     const std::string& device, const EnvFn& env_fn) {
    const EnvFn env = env_fn ? env_fn : [](const char* name) -> const char* { return std::getenv(name); };
    auto set = [&](const char* name) { return env(name) != nullptr && *env(name) != 0; };
    ProcessLaunch l;
    const int env_world = parse_int(env("WORLD_SIZE"));
    if (set("WORLD_SIZE") && env_world < 1)
        return invalid_argument(std::string("WORLD_SIZE '") + env("WORLD_SIZE") +
                                "' is not a positive number");
    if (flags.nnodes > 1) {
        if (env_world > 1 && env_world != flags.nnodes)
            return invalid_argument("--nnodes " + std::to_string(flags.nnodes) + " but WORLD_SIZE " +
                                    std::to_string(env_world) + " (one process per node: they must agree)");
        l.world_size = flags.nnodes;
        l.source = "--nnodes";
        l.rank = flags.node_rank;
        if (l.rank < 0) {
            if (!set("NODE_RANK"))
                return invalid_argument("--nnodes " + std::to_string(flags.nnodes) +
                                        " needs --node-rank (or NODE_RANK)");
            l.rank = parse_int(env("NODE_RANK"));
            if (l.rank < 0)
                return invalid_argument(std::string("NODE_RANK '") + env("NODE_RANK") + "' is not a rank");
        }
    } else if (env_world > 1) {
        l.world_size = env_world;
        l.source = "torchrun environment";
        if (!set("RANK"))
            return invalid_argument(
                "WORLD_SIZE is set but RANK is not (torchrun's variables: WORLD_SIZE, RANK, MASTER_ADDR, "
                "MASTER_PORT)");
        l.rank = parse_int(env("RANK"));
        if (l.rank < 0) return invalid_argument(std::string("RANK '") + env("RANK") + "' is not a rank");
    } else {
        if (flags.node_rank > 0)
            return invalid_argument("--node-rank " + std::to_string(flags.node_rank) +
                                    " without --nnodes > 1");
        return l;
    }
    if (l.rank >= l.world_size)
        return invalid_argument("rank " + std::to_string(l.rank) + " of " + std::to_string(l.world_size) +
                                " processes (" + l.source + ")");
    l.master_addr = !flags.master_addr.empty() ? flags.master_addr
                    : set("MASTER_ADDR")       ? env("MASTER_ADDR")
                                               : "";
    if (l.master_addr.empty())
        return invalid_argument("several processes (" + l.source +
                                ") need rank 0's address: --master-addr or "
                                "MASTER_ADDR");
    l.master_port = flags.master_port >= 0 ? flags.master_port : parse_int(env("MASTER_PORT"));
    if (l.master_port <= 0 || l.master_port > 65535)
        return invalid_argument("several processes (" + l.source +
                                ") need rank 0's port: --master-port or MASTER_PORT (1..65535)");
    if (parallel.world_size() != l.world_size)
        return invalid_argument(
            std::to_string(l.world_size) + " processes (" + l.source +
            ", one rank each) but --tensor-parallel-size " + std::to_string(parallel.tensor_parallel_size) +
            " x --pipeline-parallel-size " + std::to_string(parallel.pipeline_parallel_size) + " = " +
            std::to_string(parallel.world_size()) + " ranks");
    if (device != "cpu" && device != "cuda")
        return invalid_argument("--device " + device + " across processes: expected cpu or cuda");
    return l;
}

Result<ProcessGpu> process_gpu(const ProcessLaunch& l, int visible, const EnvFn& env_fn) {
    const EnvFn env = env_fn ? env_fn : [](const char* name) -> const char* { return std::getenv(name); };
    auto set = [&](const char* name) { return env(name) != nullptr && *env(name) != 0; };
    const std::string cvd = set("CUDA_VISIBLE_DEVICES") ? env("CUDA_VISIBLE_DEVICES") : "";
    const std::string seen = std::to_string(visible) + (visible == 1 ? " GPU" : " GPUs") +
                             (cvd.empty() ? std::string() : " (CUDA_VISIBLE_DEVICES=" + cvd + ")");
    if (visible < 1)
        return failed_precondition("rank " + std::to_string(l.rank) +
                                   " with --device cuda: this process sees no GPU (no driver, no device, or "
                                   "CUDA_VISIBLE_DEVICES hides them)");
    if (visible == 1 && !cvd.empty() && cvd.find(',') == std::string::npos)
        return ProcessGpu{0, "the one GPU CUDA_VISIBLE_DEVICES names"};
    const std::string fix =
        ": two processes of this host would take the same GPU, which NCCL refuses (\"Duplicate GPU "
        "detected\"); run at most " +
        std::to_string(visible) +
        " processes on this host, or give each process its own CUDA_VISIBLE_DEVICES";
    if (set("LOCAL_WORLD_SIZE")) {
        const int local_world = parse_int(env("LOCAL_WORLD_SIZE"));
        if (local_world < 1)
            return invalid_argument(std::string("LOCAL_WORLD_SIZE '") + env("LOCAL_WORLD_SIZE") +
                                    "' is not a positive number");
        if (local_world > visible)
            return invalid_argument("LOCAL_WORLD_SIZE " + std::to_string(local_world) +
                                    " but this process sees " + seen + fix);
    }
    if (set("LOCAL_RANK")) {
        const int local = parse_int(env("LOCAL_RANK"));
        if (local < 0)
            return invalid_argument(std::string("LOCAL_RANK '") + env("LOCAL_RANK") + "' is not a rank");
        if (local >= visible)
            return invalid_argument("LOCAL_RANK " + std::to_string(local) + " but this process sees " + seen +
                                    fix);
        return ProcessGpu{local, "LOCAL_RANK " + std::to_string(local)};
    }
    return ProcessGpu{l.rank % visible, "rank " + std::to_string(l.rank) + " mod " + seen};
}

}  // namespace volt::executor
