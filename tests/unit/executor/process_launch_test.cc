// Where a process stands in a launch of several (executor/process_launch.h): torchrun's variables,
// vLLM's --nnodes / --node-rank / --master-addr / --master-port (flags win over the environment), and
// each refusal with its message: a missing rank, address or port, a world size other than TP x PP, TP and
// PP together, an unknown device; the GPU a process of a --device cuda launch takes (process_gpu).
#include "executor/process_launch.h"

#include <gtest/gtest.h>

#include <array>
#include <map>
#include <vector>

namespace volt::executor {
namespace {

EnvFn env_of(std::map<std::string, std::string> vars) {
    auto held = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
    return [held](const char* name) -> const char* {
        auto it = held->find(name);
        return it == held->end() ? nullptr : it->second.c_str();
    };
}

model::ParallelConfig tp(int t, int p = 1) {
    model::ParallelConfig c;
    c.tensor_parallel_size = t;
    c.pipeline_parallel_size = p;
    return c;
}

TEST(ProcessLaunch, NothingSetIsOneProcess) {
    auto l = process_launch({}, tp(2), "cpu", env_of({}));
    ASSERT_TRUE(l.is_ok()) << l.status().to_string();
    EXPECT_FALSE(l->multi());
    EXPECT_EQ(l->rank, 0);
    // WORLD_SIZE=1 (torchrun with one process) is one process too.
    EXPECT_FALSE(process_launch({}, tp(1), "cpu", env_of({{"WORLD_SIZE", "1"}}))->multi());
}

TEST(ProcessLaunch, TorchrunsVariables) {
    auto l = process_launch(
        {}, tp(4), "cpu",
        env_of({{"WORLD_SIZE", "4"}, {"RANK", "3"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}}));
    ASSERT_TRUE(l.is_ok()) << l.status().to_string();
    EXPECT_TRUE(l->multi());
    EXPECT_EQ(l->world_size, 4);
    EXPECT_EQ(l->rank, 3);
    EXPECT_EQ(l->master_addr, "10.0.0.1");
    EXPECT_EQ(l->master_port, 29500);
    EXPECT_EQ(l->source, "torchrun environment");
}

TEST(ProcessLaunch, NnodesFlagsWinOverTheEnvironment) {
    LaunchFlags f;
    f.nnodes = 2;
    f.node_rank = 1;
    f.master_addr = "127.0.0.1";
    f.master_port = 1234;
    auto l = process_launch(f, tp(1, 2), "cpu", env_of({{"MASTER_ADDR", "elsewhere"}, {"MASTER_PORT", "9"}}));
    ASSERT_TRUE(l.is_ok()) << l.status().to_string();
    EXPECT_EQ(l->world_size, 2);
    EXPECT_EQ(l->rank, 1);
    EXPECT_EQ(l->master_addr, "127.0.0.1");
    EXPECT_EQ(l->master_port, 1234);
    // NODE_RANK and the master variables fill what the flags leave out.
    f.node_rank = -1;
    f.master_addr.clear();
    f.master_port = -1;
    l = process_launch(f, tp(2), "cpu",
                       env_of({{"NODE_RANK", "0"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "7"}}));
    ASSERT_TRUE(l.is_ok()) << l.status().to_string();
    EXPECT_EQ(l->rank, 0);
    EXPECT_EQ(l->master_addr, "h");
    EXPECT_EQ(l->master_port, 7);
}

TEST(ProcessLaunch, RefusalsNameWhatIsWrong) {
    const auto msg = [](const Result<ProcessLaunch>& r) { return r.is_ok() ? "ok" : r.status().message(); };
    const auto full = [](std::map<std::string, std::string> extra) {
        std::map<std::string, std::string> v{
            {"WORLD_SIZE", "2"}, {"RANK", "0"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}};
        for (auto& [k, x] : extra) v[k] = x;
        return env_of(v);
    };
    EXPECT_EQ(msg(process_launch({}, tp(2), "cpu", env_of({{"WORLD_SIZE", "2"}}))),
              "WORLD_SIZE is set but RANK is not (torchrun's variables: WORLD_SIZE, RANK, MASTER_ADDR, "
              "MASTER_PORT)");
    EXPECT_EQ(msg(process_launch({}, tp(2), "cpu", full({{"RANK", "2"}}))),
              "rank 2 of 2 processes (torchrun environment)");
    EXPECT_EQ(msg(process_launch({}, tp(2), "cpu", full({{"MASTER_ADDR", ""}}))),
              "several processes (torchrun environment) need rank 0's address: --master-addr or MASTER_ADDR");
    EXPECT_EQ(msg(process_launch({}, tp(2), "cpu", full({{"MASTER_PORT", "x"}}))),
              "several processes (torchrun environment) need rank 0's port: --master-port or MASTER_PORT "
              "(1..65535)");
    EXPECT_EQ(msg(process_launch({}, tp(4), "cpu", full({}))),
              "2 processes (torchrun environment, one rank each) but --tensor-parallel-size 4 x "
              "--pipeline-parallel-size 1 = 4 ranks");
    auto both = process_launch({}, tp(2, 2), "cpu", full({{"WORLD_SIZE", "4"}, {"RANK", "3"}}));
    ASSERT_TRUE(both.is_ok()) << both.status().to_string();  // tp x pp across processes: one rank each
    EXPECT_EQ(both->rank, 3);
    EXPECT_EQ(both->world_size, 4);
    // --device cuda across processes is a launch like any other (one GPU per process: process_gpu).
    auto gpu = process_launch({}, tp(2), "cuda", full({{"RANK", "1"}}));
    ASSERT_TRUE(gpu.is_ok()) << gpu.status().to_string();
    EXPECT_EQ(gpu->rank, 1);
    EXPECT_EQ(msg(process_launch({}, tp(2), "tpu", full({}))),
              "--device tpu across processes: expected cpu or cuda");
    LaunchFlags f;
    f.nnodes = 2;
    EXPECT_EQ(msg(process_launch(f, tp(2), "cpu", env_of({}))),
              "--nnodes 2 needs --node-rank (or NODE_RANK)");
    EXPECT_EQ(msg(process_launch(f, tp(2), "cpu", full({{"WORLD_SIZE", "4"}}))),
              "--nnodes 2 but WORLD_SIZE 4 (one process per node: they must agree)");
    LaunchFlags lone;
    lone.node_rank = 1;
    EXPECT_EQ(msg(process_launch(lone, tp(2), "cpu", env_of({}))), "--node-rank 1 without --nnodes > 1");
}

ProcessLaunch rank_of(int rank, int world) {
    ProcessLaunch l;
    l.rank = rank;
    l.world_size = world;
    return l;
}

TEST(ProcessGpu, LocalRankWhenSetElseTheRankModuloTheVisibleGpus) {
    auto g = process_gpu(rank_of(5, 8), 4, env_of({{"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"}}));
    ASSERT_TRUE(g.is_ok()) << g.status().to_string();
    EXPECT_EQ(g->gpu, 1);  // torchrun's index on its host, not 5 % 4
    EXPECT_EQ(g->how, "LOCAL_RANK 1");
    // --nnodes: one process per node, no LOCAL_RANK: rank modulo the GPUs it sees.
    for (const auto& [rank, visible, want] :
         std::vector<std::array<int, 3>>{{0, 2, 0}, {3, 2, 1}, {5, 4, 1}, {1, 1, 0}}) {
        auto m = process_gpu(rank_of(rank, 8), visible, env_of({}));
        ASSERT_TRUE(m.is_ok()) << m.status().to_string();
        EXPECT_EQ(m->gpu, want) << "rank " << rank << " of " << visible << " GPUs";
    }
    EXPECT_EQ(process_gpu(rank_of(3, 4), 2, env_of({}))->how, "rank 3 mod 2 GPUs");
    // A launcher that gives each process one GPU of its own: GPU 0 whatever LOCAL_RANK says.
    auto own = process_gpu(rank_of(1, 2), 1, env_of({{"LOCAL_RANK", "1"}, {"CUDA_VISIBLE_DEVICES", "3"}}));
    ASSERT_TRUE(own.is_ok()) << own.status().to_string();
    EXPECT_EQ(own->gpu, 0);
    EXPECT_EQ(own->how, "the one GPU CUDA_VISIBLE_DEVICES names");
}

TEST(ProcessGpu, TwoProcessesOfOneHostOnOneGpuAreRefused) {
    const auto msg = [](const Result<ProcessGpu>& r) { return r.is_ok() ? "ok" : r.status().message(); };
    // Rank 2 of a host with 2 GPUs: LOCAL_RANK 2 would share GPU 0 or 1 with a peer.
    auto two = process_gpu(rank_of(2, 4), 2, env_of({{"LOCAL_RANK", "2"}, {"CUDA_VISIBLE_DEVICES", "0,1"}}));
    EXPECT_EQ(two.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(msg(two),
              "LOCAL_RANK 2 but this process sees 2 GPUs (CUDA_VISIBLE_DEVICES=0,1): two processes of this "
              "host would take the same GPU, which NCCL refuses (\"Duplicate GPU detected\"); run at most 2 "
              "processes on this host, or give each process its own CUDA_VISIBLE_DEVICES");
    // Every process of that host is refused, not only the last: LOCAL_WORLD_SIZE says how many there are.
    EXPECT_EQ(msg(process_gpu(rank_of(0, 4), 2, env_of({{"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "4"}}))),
              "LOCAL_WORLD_SIZE 4 but this process sees 2 GPUs: two processes of this host would take the "
              "same GPU, which NCCL refuses (\"Duplicate GPU detected\"); run at most 2 processes on this "
              "host, or give each process its own CUDA_VISIBLE_DEVICES");
    // One GPU seen without a CUDA_VISIBLE_DEVICES of one entry: LOCAL_RANK 1 cannot have a GPU of its own.
    EXPECT_EQ(process_gpu(rank_of(1, 2), 1, env_of({{"LOCAL_RANK", "1"}})).status().code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(msg(process_gpu(rank_of(0, 2), 2, env_of({{"LOCAL_RANK", "x"}}))),
              "LOCAL_RANK 'x' is not a rank");
    EXPECT_EQ(msg(process_gpu(rank_of(0, 2), 2, env_of({{"LOCAL_WORLD_SIZE", "0"}}))),
              "LOCAL_WORLD_SIZE '0' is not a positive number");
    // No GPU at all (no driver, or CUDA_VISIBLE_DEVICES hides them).
    auto none = process_gpu(rank_of(1, 2), 0, env_of({}));
    EXPECT_EQ(none.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_EQ(msg(none),
              "rank 1 with --device cuda: this process sees no GPU (no driver, no device, or "
              "CUDA_VISIBLE_DEVICES hides them)");
}

}  // namespace
}  // namespace volt::executor
