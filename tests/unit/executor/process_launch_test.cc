// Where a process stands in a launch of several (executor/process_launch.h): torchrun's variables,
// vLLM's --nnodes / --node-rank / --master-addr / --master-port (flags win over the environment), and
// each refusal with its message: a missing rank, address or port, a world size other than TP x PP, TP and
// PP together, a GPU device.
#include "executor/process_launch.h"

#include <gtest/gtest.h>

#include <map>

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
    auto gpu = process_launch({}, tp(2), "cuda", full({}));
    EXPECT_EQ(gpu.status().code(), StatusCode::kUnimplemented);
    EXPECT_EQ(msg(gpu),
              "--device cuda across processes: the engine across processes runs --device cpu (the TCP "
              "communicator moves host memory); GPU ranks run in one process (docs/parallel.md)");
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

}  // namespace
}  // namespace volt::executor
