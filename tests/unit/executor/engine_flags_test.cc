// Engine flags parse into EngineConfig with vLLM's names; the scripted executor built from a script file
// drives a threaded Engine and replays the file's ids (what `serve --executor scripted` runs).
#include "executor/engine_flags.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "engine/engine_core.h"
#include "executor/backend_executor.h"
#include "model/counting_backend.h"
#include "model/dummy_weights.h"
#include "model/kv_store.h"
#include "model/offload.h"
#include "model/random_model.h"

namespace volt::executor {
namespace {

using namespace engine;  // Engine, SamplingParams, RequestHandle, RequestOutput

Status parse(std::vector<std::string> args, EngineFlags* f) {
    CLI::App app;
    add_engine_flags(&app, f);
    std::vector<const char*> argv{"voltllm"};
    for (const auto& a : args) argv.push_back(a.c_str());
    try {
        app.parse(static_cast<int>(argv.size()), argv.data());
    } catch (const CLI::ParseError& e) {
        return invalid_argument(e.what());
    }
    return check_engine_flags(*f);
}

std::string write_temp(const std::string& name, const std::string& text) {
    const std::string path = std::string(VOLT_BINARY_DIR) + "/" + name;
    std::ofstream(path) << text;
    return path;
}

TEST(EngineFlagsTest, ParsesVllmNames) {
    EngineFlags f;
    ASSERT_TRUE(parse({"--block-size", "32", "--max-num-seqs", "8", "--max-num-batched-tokens", "512",
                       "--max-model-len", "4096", "--kv-cache-memory-bytes", "1000000",
                       "--num-gpu-blocks-override", "77", "--swap-space", "4"},
                      &f)
                    .is_ok());
    EXPECT_EQ(f.config.block_size, 32);
    EXPECT_EQ(f.config.max_num_seqs, 8);
    EXPECT_EQ(f.config.max_num_batched_tokens, 512);
    EXPECT_EQ(f.config.max_model_len, 4096);
    EXPECT_EQ(f.config.kv_cache_memory_bytes, 1000000);
    EXPECT_EQ(f.config.num_kv_blocks_override, 77);
    EXPECT_EQ(f.swap_space_gib, 4.0);
    EngineFlags d;
    ASSERT_TRUE(parse({}, &d).is_ok());
    EXPECT_EQ(d.config.block_size, 16);
    EXPECT_EQ(d.executor, "cpu");
    EngineFlags s;
    EXPECT_FALSE(parse({"--executor", "scripted"}, &s).is_ok());
    EngineFlags t;
    EXPECT_FALSE(parse({"--executor", "tpu"}, &t).is_ok());
}

// --async-scheduling (on by default) gives the engine two steps in flight on one GPU; --no-async-scheduling,
// the CPU and tensor / pipeline parallel ranks keep one.
TEST(EngineFlagsTest, AsyncSchedulingSetsStepsInFlight) {
    EngineFlags d;
    ASSERT_TRUE(parse({}, &d).is_ok());
    EXPECT_TRUE(d.async_scheduling);
    EXPECT_EQ(steps_in_flight(d), 1);  // the CPU
    EngineFlags gpu;
    ASSERT_TRUE(parse({"--device", "cuda"}, &gpu).is_ok());
    EXPECT_EQ(steps_in_flight(gpu), kCudaStepsInFlight);
    EXPECT_EQ(kCudaStepsInFlight, 2);
    EngineFlags on;
    ASSERT_TRUE(parse({"--device", "cuda", "--async-scheduling"}, &on).is_ok());
    EXPECT_EQ(steps_in_flight(on), 2);
    EngineFlags off;
    ASSERT_TRUE(parse({"--device", "cuda", "--no-async-scheduling"}, &off).is_ok());
    EXPECT_FALSE(off.async_scheduling);
    EXPECT_EQ(steps_in_flight(off), 1);
    EngineFlags tp;
    ASSERT_TRUE(parse({"--device", "cuda", "--tensor-parallel-size", "2"}, &tp).is_ok());
    EXPECT_EQ(steps_in_flight(tp), 1);
}

// --swap-space GiB (vLLM's default 4) becomes EngineConfig::swap_space_bytes; --preemption-mode takes
// vLLM's two names. --swap-space 0 with --preemption-mode swap parses, and the KV plan refuses it
// (tests/unit/engine/swap_test.cc).
TEST(EngineFlagsTest, SwapSpaceAndPreemptionMode) {
    EngineFlags d;
    ASSERT_TRUE(parse({}, &d).is_ok());
    EXPECT_EQ(d.swap_space_gib, 4.0);
    EXPECT_EQ(d.config.swap_space_bytes, int64_t{4} << 30);
    EXPECT_EQ(d.config.preemption_mode, PreemptionMode::kAuto);
    EngineFlags f;
    ASSERT_TRUE(parse({"--swap-space", "0.5", "--preemption-mode", "swap"}, &f).is_ok());
    EXPECT_EQ(f.config.swap_space_bytes, int64_t{1} << 29);
    EXPECT_EQ(f.config.preemption_mode, PreemptionMode::kSwap);
    EngineFlags r;
    ASSERT_TRUE(parse({"--swap-space", "0", "--preemption-mode", "recompute"}, &r).is_ok());
    EXPECT_EQ(r.config.swap_space_bytes, 0);
    EXPECT_EQ(r.config.preemption_mode, PreemptionMode::kRecompute);
    EngineFlags z;
    ASSERT_TRUE(parse({"--swap-space", "0", "--preemption-mode", "swap"}, &z).is_ok());
    EXPECT_EQ(z.config.swap_space_bytes, 0);
    EngineFlags bad;
    EXPECT_FALSE(parse({"--preemption-mode", "offload"}, &bad).is_ok());
    EngineFlags neg;
    EXPECT_FALSE(parse({"--swap-space", "-1"}, &neg).is_ok());
}

TEST(EngineFlagsTest, DeviceMemoryAndLoadFormatFlags) {
    EngineFlags d;
    ASSERT_TRUE(parse({}, &d).is_ok());
    EXPECT_EQ(d.device.device, "cpu");
    EXPECT_DOUBLE_EQ(d.gpu_memory_utilization, 0.92);  // vLLM's default
    EXPECT_FALSE(d.kv_cache_memory_bytes_set);
    EXPECT_EQ(d.load_format, "auto");
    EngineFlags f;
    ASSERT_TRUE(parse({"--device", "cuda", "--cuda-kernels", "sm70", "--gpu-memory-utilization", "0.5",
                       "--load-format", "dummy", "--kv-cache-memory-bytes", "123456"},
                      &f)
                    .is_ok());
    EXPECT_EQ(f.device.device, "cuda");
    EXPECT_EQ(f.device.cuda_kernels, "sm70");
    EXPECT_DOUBLE_EQ(f.gpu_memory_utilization, 0.5);
    EXPECT_TRUE(f.kv_cache_memory_bytes_set);
    EXPECT_EQ(f.load_format, "dummy");
    for (std::vector<std::string> bad :
         {std::vector<std::string>{"--gpu-memory-utilization", "1.5"},
          {"--gpu-memory-utilization", "0"},
          {"--device", "tpu"},
          {"--load-format", "pt"},
          {"--executor", "scripted", "--script", "x.json", "--device", "cuda"}}) {
        EngineFlags g;
        EXPECT_FALSE(parse(bad, &g).is_ok()) << bad[0] << " " << bad[1];
    }
}

TEST(EngineFlagsTest, DummyLoadFormatNeedsOnlyTheConfig) {
    const std::string dir = std::string(VOLT_BINARY_DIR) + "/engine_flags_test_dummy";
    std::filesystem::create_directories(dir);
    std::ifstream src(std::string(VOLT_SOURCE_DIR) + "/tests/data/golden/tiny-mxfp4/config.json");
    std::ofstream(dir + "/config.json") << src.rdbuf();  // no tensor file beside it
    EngineFlags f;
    f.load_format = "dummy";
    auto w = load_weights(f, dir);
    ASSERT_TRUE(w.is_ok()) << w.status().to_string();
    EXPECT_EQ((*w)->layers.size(), 4u);
    f.load_format = "auto";
    EXPECT_FALSE(load_weights(f, dir).is_ok());  // the loader wants the tensors
    // --device cuda in a build without CUDA names the presets that have it; with CUDA, a GPU-less
    // machine fails in the backend. Either way no executor is made silently on the CPU.
    EngineFlags g;
    g.device.device = "cuda";
    auto ex = make_executor(g, *w);
    if (!cuda_built()) {
        EXPECT_EQ(ex.status().code(), StatusCode::kUnimplemented);
        EXPECT_NE(ex.status().message().find("cuda13"), std::string::npos) << ex.status().message();
    }
}

TEST(EngineFlagsTest, TheGroupFingerprintNamesWhatRanksMustShare) {
    const std::string dir = std::string(VOLT_BINARY_DIR) + "/engine_flags_test_dummy";
    std::filesystem::create_directories(dir);
    std::ifstream src(std::string(VOLT_SOURCE_DIR) + "/tests/data/golden/tiny-mxfp4/config.json");
    std::ofstream(dir + "/config.json") << src.rdbuf();
    EngineFlags f;
    f.load_format = "dummy";
    f.parallel.pipeline_parallel_size = 2;
    auto w = load_weights(f, dir);
    ASSERT_TRUE(w.is_ok()) << w.status().to_string();
    ProcessLaunch l;
    l.world_size = 2;
    const std::string base = group_fingerprint(f, **w, l);
    EXPECT_EQ(base.rfind("world 2 (tp 1 x pp 2), model ", 0), 0u) << base;
    EXPECT_NE(base.find("kv-cache-dtype auto, device cpu, dtype auto"), std::string::npos) << base;
    EXPECT_LT(base.size(), 256u);                   // fits the handshake (cpu::TcpHello::config)
    EXPECT_EQ(group_fingerprint(f, **w, l), base);  // deterministic
    EngineFlags kv = f;
    kv.kv_cache_dtype = "int8";
    EXPECT_NE(group_fingerprint(kv, **w, l), base);
    EngineFlags tp = f;
    tp.parallel = {2, 1};
    EXPECT_NE(group_fingerprint(tp, **w, l), base);
    // Every process cuts a step into the same micro-batches, or their collectives would not line up.
    EngineFlags mb = f;
    mb.pipeline_micro_batches = 1;
    EXPECT_NE(group_fingerprint(mb, **w, l), base);
    EXPECT_NE(base.find("pipeline-micro-batches 0"), std::string::npos) << base;
    // Another model: the same config with other weights (the final norm), or another config.
    model::GptOssConfig c = (*w)->config;
    auto other = model::make_dummy_weights(c, 7);
    ASSERT_TRUE(other.is_ok());
    EXPECT_NE(group_fingerprint(f, **other, l), base);
    c.rope_theta *= 2;
    auto other_config = model::make_dummy_weights(c, 0);
    ASSERT_TRUE(other_config.is_ok());
    EXPECT_NE(group_fingerprint(f, **other_config, l),
              group_fingerprint(f, **model::make_dummy_weights((*w)->config, 0), l));
}

TEST(EngineFlagsTest, ScriptedExecutorReplaysTheFile) {
    const std::string path =
        write_temp("engine_flags_test_script.json", R"({"outputs": [[5, 6, 7], [9]], "end_token": 3,
            "vocab_size": 50})");
    EngineFlags f;
    ASSERT_TRUE(parse({"--executor", "scripted", "--script", path}, &f).is_ok());
    auto ex = make_executor(f, nullptr);
    ASSERT_TRUE(ex.is_ok()) << ex.status().to_string();
    f.config.eos_token_ids = {3};
    auto engine = Engine::create(f.config, std::move(*ex));
    ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
    SamplingParams p;
    p.max_tokens = 10;
    std::vector<std::vector<int32_t>> want = {{5, 6, 7}, {9}, {5, 6, 7}};
    std::vector<std::shared_ptr<RequestHandle>> hs;
    for (int i = 0; i < 3; ++i) {
        auto h = (*engine)->submit({1, 2, 3}, p);
        ASSERT_TRUE(h.is_ok());
        hs.push_back(*h);
    }
    for (int i = 0; i < 3; ++i) {
        std::vector<int32_t> got;
        RequestOutput o;
        std::optional<int32_t> stop;
        while (hs[i]->next(&o, std::chrono::seconds(5))) {
            got.insert(got.end(), o.tokens.begin(), o.tokens.end());
            if (o.stop_token) stop = o.stop_token;
        }
        EXPECT_EQ(got, want[i]) << "request " << i;
        EXPECT_EQ(stop, 3);
    }
    EXPECT_EQ((*engine)->submit({60}, p).status().code(), StatusCode::kInvalidArgument);  // vocab 50

    for (const char* bad : {"[[1, 2], 3]", "{\"end_token\": 1}", "[[1, -2]]", "not json", "[]"}) {
        EngineFlags g;
        g.executor = "scripted";
        g.script = write_temp("engine_flags_test_bad.json", bad);
        auto e = make_executor(g, nullptr);
        EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument) << bad;
    }
    EngineFlags missing;
    missing.executor = "scripted";
    missing.script = "/nonexistent/script.json";
    EXPECT_EQ(make_executor(missing, nullptr).status().code(), StatusCode::kNotFound);
}

// --cpu-offload-experts / --cpu-offload-gb parse, refuse nonsense at the flags (negative, both at once,
// the scripted executor), reach the executor (the placed model keeps those layers' experts on the host),
// and refuse what the model cannot take (a layer count above its layers).
// --pipeline-micro-batches reaches the executor (0, the default: the stage count); negative is refused.
TEST(EngineFlagsTest, PipelineMicroBatchesReachTheExecutor) {
    auto w = model::testing::random_model(model::testing::small_config(4), 3);
    EngineFlags d;
    ASSERT_TRUE(parse({"--pipeline-parallel-size", "2"}, &d).is_ok());
    EXPECT_EQ(d.pipeline_micro_batches, 0);
    auto ex = make_executor(d, w);
    ASSERT_TRUE(ex.is_ok()) << ex.status().to_string();
    auto* be = dynamic_cast<BackendExecutor*>(ex->get());
    ASSERT_NE(be, nullptr);
    EXPECT_EQ(be->micro_batches_for(7), 2);
    EngineFlags f;
    ASSERT_TRUE(parse({"--pipeline-parallel-size", "2", "--pipeline-micro-batches", "3"}, &f).is_ok());
    EXPECT_EQ(f.pipeline_micro_batches, 3);
    auto three = make_executor(f, w);
    ASSERT_TRUE(three.is_ok()) << three.status().to_string();
    EXPECT_EQ(dynamic_cast<BackendExecutor*>(three->get())->micro_batches_for(7), 3);
    EngineFlags bad;
    EXPECT_FALSE(parse({"--pipeline-micro-batches", "-1"}, &bad).is_ok());
}

TEST(CpuOffload, FlagsReachTheExecutor) {
    EngineFlags f;
    ASSERT_TRUE(parse({"--cpu-offload-experts", "0,2-3"}, &f).is_ok());
    EXPECT_EQ(f.cpu_offload_experts, "0,2-3");
    EngineFlags g;
    ASSERT_TRUE(parse({"--cpu-offload-gb", "1.5"}, &g).is_ok());
    EXPECT_EQ(g.cpu_offload_gb, 1.5);
    EngineFlags bad;
    EXPECT_FALSE(parse({"--cpu-offload-gb", "-2"}, &bad).is_ok());
    EngineFlags both;
    EXPECT_FALSE(parse({"--cpu-offload-gb", "1", "--cpu-offload-experts", "2"}, &both).is_ok());

    auto w = model::testing::random_model(model::testing::small_config(4), 3);
    auto ex = make_executor(f, w);
    ASSERT_TRUE(ex.is_ok()) << ex.status().to_string();
    auto* be = dynamic_cast<BackendExecutor*>(ex->get());
    ASSERT_NE(be, nullptr);
    const model::PlacedModel& placed = be->forward().placed();
    EXPECT_EQ(placed.experts_on_host, (std::vector<bool>{true, false, true, true}));
    EXPECT_EQ(placed.weights.layers[2].gate_up.blocks, w->layers[2].gate_up.blocks);

    EngineFlags too_many;
    ASSERT_TRUE(parse({"--cpu-offload-experts", "5"}, &too_many).is_ok());
    auto refused = make_executor(too_many, w);
    ASSERT_FALSE(refused.is_ok());
    EXPECT_NE(refused.status().message().find("the model has 4 layers"), std::string::npos)
        << refused.status().to_string();
}

// The device memory plan (vLLM's: utilization x total - in use - headroom) on a counting stand-in
// device: offloading the experts of layers 1-3 gives the KV cache exactly their bytes, computed here from
// the shapes (small_config: E 4, H 64, I 64; MXFP4 codes half a byte, a scale per 32, bf16 biases), less
// the device buffers the offload adds: the experts' sum of a step, [max_num_batched_tokens, H] f32,
// which the profiling step brings to its size, and the staging of prompt rows (one layer's experts).
TEST(EngineFlagsTest, KvCacheDtype) {
    EngineFlags d;
    ASSERT_TRUE(parse({}, &d).is_ok());
    EXPECT_EQ(d.kv_cache_dtype, "auto");
    EXPECT_EQ(*kv_cache_format("auto", "cpu"), ops::Format::kF32);
    EXPECT_EQ(*kv_cache_format("auto", "cuda"), ops::Format::kF16);
    EngineFlags f;
    ASSERT_TRUE(parse({"--kv-cache-dtype", "int8"}, &f).is_ok());
    EXPECT_EQ(f.kv_cache_dtype, "int8");
    EXPECT_EQ(*kv_cache_format("int8", "cpu"), ops::Format::kInt8);
    // vLLM's fp8 spellings: refused at parse time, suggesting int8.
    for (const std::string v : {"fp8", "fp8_e4m3", "fp8_e5m2"}) {
        EngineFlags g;
        const Status st = parse({"--kv-cache-dtype", v}, &g);
        EXPECT_EQ(st.code(), StatusCode::kUnimplemented) << v;
        EXPECT_NE(st.message().find("--kv-cache-dtype " + v + " is not implemented"), std::string::npos)
            << st.message();
        EXPECT_NE(st.message().find("int8"), std::string::npos) << st.message();
    }
    EngineFlags bad;
    const Status st = parse({"--kv-cache-dtype", "int4"}, &bad);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("not one of auto, int8"), std::string::npos) << st.message();
    // int8 on --device cuda (issue 21: its kernels exist) passes the flags; a backend without an int8
    // cache refuses at KvStore::create.
    EngineFlags c;
    ASSERT_TRUE(parse({"--kv-cache-dtype", "int8", "--device", "cuda"}, &c).is_ok());
    EXPECT_EQ(*kv_cache_format("int8", "cuda"), ops::Format::kInt8);
}

// --kv-cache-dtype int8 reaches the executor: its blocks are sized with the scales, so the same budget
// holds 2d / (d + 4) times the blocks of f16 (and the default --max-model-len follows the pool).
TEST(EngineFlagsTest, Int8KvPlanHoldsMoreBlocks) {
    auto w = model::testing::random_model(model::testing::small_config(2), 3);
    auto plan = [&](ops::Format f) {
        auto ex =
            BackendExecutor::create(w, std::make_unique<volt::testing::CountingBackend>(int64_t{1} << 30), f);
        EXPECT_TRUE(ex.is_ok()) << ex.status().to_string();
        EngineConfig config;
        config.kv_cache_memory_bytes = int64_t{1} << 20;
        config.max_num_seqs = 1;
        auto p = engine::plan_kv_cache(config, **ex);
        EXPECT_TRUE(p.is_ok()) << p.status().to_string();
        return *p;
    };
    const engine::KvPlan f16 = plan(ops::Format::kF16), i8 = plan(ops::Format::kInt8);
    // Each plan fills the budget with blocks of its own size (scales counted).
    for (const auto& [p, f] : {std::pair{f16, ops::Format::kF16}, std::pair{i8, ops::Format::kInt8}}) {
        const int64_t b0 = model::KvStore::bytes_per_block(w->config, 16, 0, f),
                      b1 = model::KvStore::bytes_per_block(w->config, 16, 1, f);
        const int64_t used = p.num_blocks[0] * b0 + p.num_blocks[1] * b1;
        EXPECT_LE(used, int64_t{1} << 20);
        EXPECT_GT(used, (int64_t{1} << 20) - b0);
    }
    // d = 16 here: int8 blocks are (16 + 4) / 32 of f16's, so the longest sequence grows by more than 1.5x.
    EXPECT_GT(2 * i8.pool_max_len, 3 * f16.pool_max_len);
    // Through the flags: the CPU executor gets the int8 format.
    EngineFlags flags;
    ASSERT_TRUE(parse({"--kv-cache-dtype", "int8"}, &flags).is_ok());
    auto ex = make_executor(flags, w);
    ASSERT_TRUE(ex.is_ok()) << ex.status().to_string();
    EXPECT_EQ((*ex)->bytes_per_block(16, 0),
              model::KvStore::bytes_per_block(w->config, 16, 0, ops::Format::kInt8));
}

TEST(CpuOffload, KvPlanGrowsByTheOffloadedBytes) {
    auto w = model::testing::random_model(model::testing::small_config(4), 3);
    auto budget = [&](const std::string& offload) -> int64_t {
        EngineFlags f;
        EXPECT_TRUE(parse({"--gpu-memory-utilization", "0.5", "--max-num-batched-tokens", "64",
                           "--cpu-offload-experts", offload},
                          &f)
                        .is_ok());
        auto plan = offload_plan(f, *w);
        EXPECT_TRUE(plan.is_ok());
        auto ex =
            BackendExecutor::create(w, std::make_unique<volt::testing::CountingBackend>(int64_t{1} << 30),
                                    ops::Format::kF32, 1, plan->layers);
        EXPECT_TRUE(ex.is_ok()) << ex.status().to_string();
        EngineConfig config = f.config;
        const Status st = plan_device_memory(f, **ex, &config);
        EXPECT_TRUE(st.is_ok()) << st.to_string();
        return config.kv_cache_memory_bytes;
    };
    const int64_t E = 4, H = 64, I = 64;
    const int64_t per_layer =
        E * (2 * I * H / 2 + 2 * I * H / 32 + 2 * I * 2) + E * (H * I / 2 + H * I / 32 + H * 2);
    const int64_t none = budget("0"), three = budget("3");
    EXPECT_GT(none, 0);
    // The staging of one layer's experts for prompt rows (codes, scales, f32 biases; allocated at
    // placement, so in use when the plan measures).
    const int64_t staging =
        E * (2 * I * H / 2 + 2 * I * H / 32 + 2 * I * 4) + E * (H * I / 2 + H * I / 32 + H * 4);
    EXPECT_EQ(three - none, 3 * per_layer - 64 * H * 4 - staging);
}

// --device cuda with TP x PP > 1: a GPU per rank, or every rank on GPU 0 with --tp-same-device.
TEST(ParallelDevices, RankGpusMapsRanksAndRefusesTooFewGpus) {
    EXPECT_EQ(*rank_gpus({2, 2}, 4, false), (std::vector<int>{0, 1, 2, 3}));
    EXPECT_EQ(*rank_gpus({4, 1}, 8, false), (std::vector<int>{0, 1, 2, 3}));
    EXPECT_EQ(*rank_gpus({4, 1}, 1, true), (std::vector<int>{0, 0, 0, 0}));
    EXPECT_EQ(*rank_gpus({2, 3}, 0, true), (std::vector<int>(6, 0)));
    const auto few = rank_gpus({4, 1}, 1, false);
    ASSERT_FALSE(few.is_ok());
    EXPECT_EQ(few.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(
        few.status().message(),
        "--tensor-parallel-size 4 x --pipeline-parallel-size 1 = 4 ranks need 4 GPUs, one per rank, but 1 "
        "are visible (CUDA_VISIBLE_DEVICES); --tp-same-device puts every rank on GPU 0 (for tests: the "
        "ranks share its memory and its time)");
    EXPECT_FALSE(rank_gpus({1, 2}, 1, false).is_ok());
    const auto many = rank_gpus({8, 4}, 1, true);
    ASSERT_FALSE(many.is_ok());
    EXPECT_EQ(
        many.status().message(),
        "--tensor-parallel-size 8 x --pipeline-parallel-size 4 = 32 ranks on one GPU (--tp-same-device): "
        "at most 16 ranks share one GPU");
}

TEST(ParallelDevices, TpSameDeviceFlag) {
    EngineFlags f;
    ASSERT_TRUE(parse({"--device", "cuda", "--tensor-parallel-size", "2", "--tp-same-device"}, &f).is_ok());
    EXPECT_TRUE(f.device.tp_same_device);
    EXPECT_EQ(f.parallel.tensor_parallel_size, 2);
    EngineFlags g;
    const Status cpu = parse({"--tensor-parallel-size", "2", "--tp-same-device"}, &g);
    EXPECT_EQ(cpu.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(
        cpu.message(),
        "--tp-same-device puts the ranks of --device cuda on one GPU; --device cpu runs them on threads "
        "without it");
    EngineFlags h;
    ASSERT_TRUE(parse({"--device", "cuda", "--tensor-parallel-size", "4", "--disable-custom-all-reduce"}, &h)
                    .is_ok());
    EXPECT_TRUE(h.device.disable_custom_all_reduce);
    EXPECT_FALSE(f.device.disable_custom_all_reduce);
    // NCCL_P2P_DISABLE turns the one-shot all-reduce off when set to anything but "" or "0".
    EXPECT_FALSE(p2p_disabled(nullptr));
    EXPECT_FALSE(p2p_disabled(""));
    EXPECT_FALSE(p2p_disabled("0"));
    EXPECT_TRUE(p2p_disabled("1"));
    // The CPU's factories: threads, whatever the GPU count.
    auto threads = parallel_factories(DeviceOptions{}, {2, 2});
    ASSERT_TRUE(threads.is_ok());
    EXPECT_EQ(threads->communicator, "threads");
    EXPECT_TRUE(threads->gpus.empty());
    if (!cuda_built()) {
        DeviceOptions d;
        d.device = "cuda";
        d.tp_same_device = true;
        const auto none = parallel_factories(d, {2, 1});
        EXPECT_EQ(none.status().code(), StatusCode::kUnimplemented);
        EXPECT_NE(none.status().message().find("built without CUDA"), std::string::npos);
    }
}

}  // namespace
}  // namespace volt::executor
