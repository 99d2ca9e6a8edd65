// Tensor and pipeline parallelism on one GPU through the same-device communicator (docs/parallel.md;
// CTest label `cuda`, skips where no GPU is found): the all-reduce is bitwise the CPU communicators'
// rank-order sum (r0 + r1 + ...) and bitwise equal on every rank; gather and send / recv move the right
// bytes in order; the watchdog fails a rank whose peer never arrives and the order check a mismatch;
// TP = 2, 4 and TP x PP logits of the golden checkpoints equal TP = 1's on the same GPU within the
// reduction-order tolerance of docs/parallel.md (2e-5 of the largest |logit|), PP = 2 bitwise. These run
// the forward pass without the executor, so eagerly; CUDA graphs at TP x PP > 1: parallel_graph_test.cc.
// Data: tests/data/golden (VOLT_SOURCE_DIR overrides the build's path on the GPU machine).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "core/check.h"
#include "cpu/cpu_ops.h"
#include "cuda/cuda_backend.h"
#include "cuda/same_device_communicator.h"
#include "executor/backend_factory.h"
#include "executor/rank_group.h"
#include "model/loader.h"
#include "model/sequence_runner.h"
#include "source_dir.h"

namespace volt::cuda {
namespace {

using test::source_dir;

std::unique_ptr<CudaBackend> gpu(const std::string& dtype = "float") {
    CudaOptions o;
    o.dtype = dtype;
    auto b = CudaBackend::create(o);
    return b.is_ok() ? std::move(*b) : nullptr;
}

#define VOLT_NEED_GPU()                                                                          \
    if (visible_gpu_count() == 0) {                                                              \
        auto probe = probe_device(0);                                                            \
        GTEST_SKIP() << "no CUDA device: " << (probe.is_ok() ? "" : probe.status().to_string()); \
    }

// n ranks, each a backend and a communicator of one same-device group; run(fn) calls fn(r) on n threads.
struct Ranks {
    std::vector<std::unique_ptr<CudaBackend>> backends;
    std::vector<std::unique_ptr<ops::Communicator>> comms;
    std::unique_ptr<SameDeviceGroup> group;
    explicit Ranks(int n, double timeout_s = 60) {
        group = std::make_unique<SameDeviceGroup>(n, 0, ops::CommunicatorOptions{timeout_s, true});
        for (int r = 0; r < n; ++r) {
            backends.push_back(gpu());
            comms.push_back(group->communicator(r));
            VOLT_CHECK(comms.back()->attach(*backends.back()).is_ok());
        }
    }
    std::vector<Status> run(const std::function<Status(int)>& fn) {
        std::vector<Status> out(backends.size());
        std::vector<std::thread> threads;
        for (size_t r = 0; r < backends.size(); ++r)
            threads.emplace_back([&, r] {
                backends[r]->bind_thread();
                out[r] = fn(static_cast<int>(r));
            });
        for (auto& t : threads) t.join();
        return out;
    }
};

ops::Buffer alloc(ops::Backend& b, int64_t bytes) {
    auto buf = b.alloc(bytes);
    VOLT_CHECK(buf.is_ok()) << buf.status().to_string();
    return std::move(*buf);
}

std::vector<float> random_floats(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> v(n);
    // Mixed magnitudes, so that a different order of the adds gives different bits.
    for (auto& x : v) x = u(rng) * std::pow(10.0f, static_cast<float>(rng() % 9) - 4.0f);
    return v;
}

TEST(CudaComm, AllReduceIsTheCpuRankOrderSumOnEveryRank) {
    VOLT_NEED_GPU();
    for (int n : {2, 3, 4}) {
        Ranks ranks(n);
        // Sizes: one element, a partial block, several grid strides; three rounds reuse every buffer.
        for (int64_t count : {int64_t{1}, int64_t{1000}, int64_t{3} << 20}) {
            std::vector<std::vector<float>> in(n), got(n);
            std::vector<ops::Buffer> bufs(n);
            for (int r = 0; r < n; ++r) {
                in[r] = random_floats(count, static_cast<uint32_t>(100 * n + r + count));
                auto b = ranks.backends[r]->alloc(count * 4);
                ASSERT_TRUE(b.is_ok());
                bufs[r] = std::move(*b);
                ranks.backends[r]->upload(bufs[r].data(), in[r].data(), count * 4);
            }
            for (int round = 0; round < 3; ++round) {
                const auto st = ranks.run([&](int r) {
                    ranks.comms[r]->begin_step(round);
                    // A round's input is the previous round's output: any rank writing early shows.
                    return ranks.comms[r]->all_reduce_sum(bufs[r].as<float>(), count);
                });
                for (const Status& s : st) ASSERT_TRUE(s.is_ok()) << s.to_string();
                std::vector<float> want(count);
                for (int64_t i = 0; i < count; ++i) {
                    float s = in[0][i];
                    for (int r = 1; r < n; ++r) s += in[r][i];  // the CPU communicators' order
                    want[i] = s;
                }
                for (int r = 0; r < n; ++r) {
                    got[r].resize(count);
                    ranks.backends[r]->download(got[r].data(), bufs[r].data(), count * 4);
                    ASSERT_EQ(0, std::memcmp(got[r].data(), want.data(), count * 4))
                        << n << " ranks, count " << count << ", round " << round << ", rank " << r;
                    in[r] = got[r];
                }
            }
        }
    }
}

TEST(CudaComm, GatherAndSendRecvMoveTheBytesInOrder) {
    VOLT_NEED_GPU();
    const int n = 3;
    Ranks ranks(n);
    const int64_t counts[n] = {5, 0, 7};
    std::vector<ops::Buffer> in(n), out(n);
    std::vector<std::vector<float>> host(n);
    for (int r = 0; r < n; ++r) {
        host[r] = random_floats(std::max<int64_t>(counts[r], 1), 7 + r);
        in[r] = alloc(*ranks.backends[r], 64);
        out[r] = alloc(*ranks.backends[r], 64);
        ranks.backends[r]->upload(in[r].data(), host[r].data(), counts[r] * 4);
    }
    auto st = ranks.run([&](int r) {
        ranks.comms[r]->begin_step(0);
        VOLT_RETURN_IF_ERROR(ranks.comms[r]->gather(in[r].as<float>(), counts, out[r].as<float>(), 2));
        // A ring: r -> r + 1 twice, each send before the matching receive (a send returns before the
        // peer receives: one message is buffered per ordered pair).
        const int next = (r + 1) % n, prev = (r + n - 1) % n;
        auto* o = static_cast<float*>(out[r].data());
        VOLT_RETURN_IF_ERROR(ranks.comms[r]->send(in[r].data(), 8, next));
        VOLT_RETURN_IF_ERROR(ranks.comms[r]->recv(o + 12, 8, prev));
        VOLT_RETURN_IF_ERROR(ranks.comms[r]->send(static_cast<float*>(in[r].data()) + 2, 8, next));
        return ranks.comms[r]->recv(o + 14, 8, prev);
    });
    for (const Status& s : st) ASSERT_TRUE(s.is_ok()) << s.to_string();
    std::vector<float> g(16);
    ranks.backends[2]->download(g.data(), out[2].data(), 16 * 4);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(g[i], host[0][i]);
    for (int i = 0; i < 7; ++i) EXPECT_EQ(g[5 + i], host[2][i]);
    for (int r = 0; r < n; ++r) {
        std::vector<float> o(16);
        ranks.backends[r]->download(o.data(), out[r].data(), 16 * 4);
        const int prev = (r + n - 1) % n;
        for (int i = 0; i < 4; ++i) {
            if (i >= counts[prev] && counts[prev] < 4) continue;  // rank 1 uploaded nothing
            EXPECT_EQ(o[12 + i], host[prev][i]) << "rank " << r << " element " << i;
        }
    }
}

TEST(CudaComm, WatchdogFailsARankWhosePeerNeverComesAndTheGroupStaysFailed) {
    VOLT_NEED_GPU();
    Ranks ranks(2, /*timeout_s=*/0.3);
    auto buf = ranks.backends[0]->alloc(64);
    ASSERT_TRUE(buf.is_ok());
    ranks.backends[0]->bind_thread();
    ranks.comms[0]->begin_step(3);
    const Status s = ranks.comms[0]->all_reduce_sum(buf->as<float>(), 16);
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.to_string();
    EXPECT_EQ(
        s.message(),
        "collective watchdog: rank 0 waited 0.3 s in all_reduce_sum #0 of step 3 (64 bytes) for ranks 1");
    ranks.comms[1]->begin_step(3);
    EXPECT_EQ(ranks.comms[1]->all_reduce_sum(buf->as<float>(), 16).message(), s.message()) << "sticky";
}

TEST(CudaComm, DifferentCollectivesOnTwoRanksFailBothNamingTheTags) {
    VOLT_NEED_GPU();
    Ranks ranks(2);
    std::vector<ops::Buffer> bufs;
    for (int r = 0; r < 2; ++r) bufs.push_back(alloc(*ranks.backends[r], 256));
    auto st = ranks.run([&](int r) {
        ranks.comms[r]->begin_step(1);
        return ranks.comms[r]->all_reduce_sum(bufs[r].as<float>(), r == 0 ? 16 : 32);
    });
    for (const Status& s : st) {
        EXPECT_EQ(s.code(), StatusCode::kInternal);
        EXPECT_EQ(
            s.message(),
            "collective order differs across ranks: rank 0 issued all_reduce_sum #0 of step 1 (64 bytes), "
            "rank 1 issued all_reduce_sum #0 of step 1 (128 bytes)");
    }
}

// Graph capture of the same-device collectives (docs/parallel.md "CUDA graphs"), with no op of the backend in
// the body, so only the communicator's own buffers can grow: an all-reduce and a send larger than the
// all-reduce scratch and the mailbox inside a capture spoil it (kUnavailable: nothing grows, no host wait);
// the same calls made eagerly grow both and bump the backends' scratch epochs (graphs holding the old
// buffers are stale); the next capture of the same calls succeeds and moves nothing; each replay sums and
// moves the bytes as the eager calls do, bitwise (the rank-order sum, as the CPU communicators).
TEST(CudaComm, CaptureThatMustGrowIsSpoiledThenTheEagerCallGrowsTheBuffers) {
    VOLT_NEED_GPU();
    Ranks ranks(2);
    const int64_t small = 64, big = 4096;
    std::vector<ops::Buffer> bufs, msg;      // per rank: the all-reduce's data, a receive buffer
    std::vector<std::vector<float>> cur(2);  // the host's model of bufs[r]
    for (int r = 0; r < 2; ++r) {
        cur[r] = random_floats(big, static_cast<uint32_t>(700 + r));
        bufs.push_back(alloc(*ranks.backends[r], big * 4));
        msg.push_back(alloc(*ranks.backends[r], big * 4));
        ranks.backends[r]->upload(bufs[r].data(), cur[r].data(), big * 4);
    }
    std::vector<float> want_msg(big, 0.0f);
    ranks.backends[1]->upload(msg[1].data(), want_msg.data(), big * 4);
    uint64_t step = 0;
    // One step: an all-reduce of `count` floats, then rank 0 sends its first `count` floats to rank 1.
    auto calls = [&](int64_t count) {
        const uint64_t s = step++;
        return [&ranks, &bufs, &msg, s, count](int r) -> Status {
            ranks.comms[r]->begin_step(s);
            VOLT_RETURN_IF_ERROR(ranks.comms[r]->all_reduce_sum(bufs[r].as<float>(), count));
            if (r == 0) return ranks.comms[0]->send(bufs[0].data(), count * 4, 1);
            return ranks.comms[1]->recv(msg[1].data(), count * 4, 0);
        };
    };
    auto model = [&](int64_t count) {
        for (int64_t i = 0; i < count; ++i) cur[0][i] = cur[1][i] = cur[0][i] + cur[1][i];
        std::copy(cur[0].begin(), cur[0].begin() + count, want_msg.begin());
    };
    auto sync = [&] {
        for (auto& b : ranks.backends) b->synchronize();
    };
    auto expect_device = [&](const char* when) {
        sync();
        std::vector<float> got(big);
        for (int r = 0; r < 2; ++r) {
            ranks.backends[r]->download(got.data(), bufs[r].data(), big * 4);
            EXPECT_EQ(0, std::memcmp(got.data(), cur[r].data(), big * 4))
                << when << ": rank " << r << "'s sum";
        }
        ranks.backends[1]->download(got.data(), msg[1].data(), big * 4);
        EXPECT_EQ(0, std::memcmp(got.data(), want_msg.data(), big * 4)) << when << ": the message";
    };
    auto eager = [&](int64_t count) {
        for (const Status& st : ranks.run(calls(count))) ASSERT_TRUE(st.is_ok()) << st.to_string();
        model(count);
    };
    auto capture = [&](int64_t count) {
        sync();  // the eager work before it is done (the executor's waits around a capture stand for this)
        std::vector<Status> st;
        auto fn = calls(count);
        auto g = ranks.backends[0]->capture_group({ranks.backends[1].get()}, [&] { st = ranks.run(fn); });
        for (const Status& s : st) EXPECT_TRUE(s.is_ok()) << s.to_string();
        return g;
    };
    auto epochs = [&] {
        return std::vector<uint64_t>{ranks.backends[0]->scratch_epoch(), ranks.backends[1]->scratch_epoch()};
    };

    eager(small);
    expect_device("eager, 64 floats");
    const std::vector<uint64_t> e0 = epochs();
    auto spoiled = capture(big);
    ASSERT_FALSE(spoiled.is_ok()) << "a capture whose buffers must grow was not spoiled";
    EXPECT_EQ(spoiled.status().code(), StatusCode::kUnavailable) << spoiled.status().to_string();
    EXPECT_EQ(epochs(), e0) << "nothing grows inside a capture";
    expect_device("after the spoiled capture (never launched)");

    eager(big);
    expect_device("eager, 4096 floats");
    const std::vector<uint64_t> e1 = epochs();
    EXPECT_GT(e1[0], e0[0]) << "rank 0's all-reduce scratch and mailbox moved";
    EXPECT_GT(e1[1], e0[1]) << "rank 1's all-reduce scratch moved";

    auto graph = capture(big);
    ASSERT_TRUE(graph.is_ok()) << graph.status().to_string();
    EXPECT_EQ(epochs(), e1) << "the buffers fit: the capture moves nothing";
    for (int replay = 0; replay < 2; ++replay) {
        (*graph)->launch();
        model(big);
        expect_device(replay == 0 ? "first replay" : "second replay");
    }
}

// A vocab-sharded embedding (tensor parallelism): rows of the shard's ids, zeros for the other shards' ids;
// bitwise the CPU twin's.
TEST(CudaComm, ShardedEmbeddingZerosOtherShardsIds) {
    VOLT_NEED_GPU();
    auto g = gpu();
    ASSERT_TRUE(g);
    const int64_t V = 10, rows = 4, H = 40, begin = 3;
    const std::vector<float> table = random_floats(rows * H, 3);
    const std::vector<int32_t> ids = {0, 3, 6, 9, 4, 7, 5};
    cpu::CpuBackend cpu_backend;
    std::vector<float> want(ids.size() * H, -1.0f);
    ops::DenseWeight t;
    t.format = ops::Format::kF32;
    t.w = table.data();
    t.out = rows;
    t.in = H;
    ops::EmbeddingArgs a{ids.data(), t, want.data(), static_cast<int64_t>(ids.size()), begin, V};
    cpu_backend.embedding(a);
    auto dt = g->alloc(static_cast<int64_t>(table.size()) * 4);
    auto di = g->alloc(static_cast<int64_t>(ids.size()) * 4);
    auto dout = g->alloc(static_cast<int64_t>(want.size()) * 4);
    ASSERT_TRUE(dt.is_ok() && di.is_ok() && dout.is_ok());
    g->upload(dt->data(), table.data(), static_cast<int64_t>(table.size()) * 4);
    g->upload(di->data(), ids.data(), static_cast<int64_t>(ids.size()) * 4);
    g->fill(dout->data(), 0xff, static_cast<int64_t>(want.size()) * 4);
    a.ids = di->as<int32_t>();
    a.table.w = dt->data();
    a.out = dout->as<float>();
    g->embedding(a);
    std::vector<float> got(want.size());
    g->download(got.data(), dout->data(), static_cast<int64_t>(got.size()) * 4);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4));
    EXPECT_EQ(got[0], 0.0f) << "id 0 is another shard's";
    EXPECT_EQ(got[1 * H], table[0]) << "id 3 is the shard's first row";
}

// ---- the forward pass over same-device ranks ----

constexpr double kReductionOrderTol = 2e-5;  // docs/parallel.md "Reduction-order tolerance"

std::vector<int32_t> random_ids(int n, int vocab, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> ids(n);
    for (auto& id : ids) id = static_cast<int32_t>(rng() % vocab);
    return ids;
}

// Logits of `prompt` (all rows) then of `decode` one step each, on p's ranks, all on GPU 0 (--dtype
// float: f32 operands, the reference mode, so that only the order of the sums differs from TP = 1).
std::vector<float> gpu_logits(const std::shared_ptr<const model::ModelWeights>& w, model::ParallelConfig p,
                              const std::vector<int32_t>& prompt, const std::vector<int32_t>& decode) {
    executor::DeviceOptions d;
    d.device = "cuda";
    d.dtype = "float";
    d.tp_same_device = true;
    executor::BackendFactory make_backend = [d](int) { return executor::make_backend(d); };
    executor::CommFactory make_comms = executor::thread_communicators;
    if (p.world_size() > 1) {
        auto f = executor::parallel_factories(d, p);
        EXPECT_TRUE(f.is_ok()) << f.status().to_string();
        if (!f.is_ok()) return {};
        make_backend = f->make_backend;
        make_comms = f->make_comms;
        EXPECT_EQ(f->communicator, "same-device");
    }
    auto group = executor::RankGroup::create(w, p, make_backend, {.timeout_s = 60}, make_comms);
    EXPECT_TRUE(group.is_ok()) << group.status().to_string();
    if (!group.is_ok()) return {};
    executor::RankGroup& g = **group;
    std::vector<std::unique_ptr<model::SequenceRunner>> runners;
    for (int i = 0; i < g.size(); ++i)
        runners.push_back(std::make_unique<model::SequenceRunner>(
            *g.rank(i).forward, static_cast<int64_t>(prompt.size() + decode.size()), 16, ops::Format::kF32));
    std::vector<float> out;
    const Status st = g.run([&](int i) {
        std::vector<float> all = runners[i]->append(prompt, true);
        for (int32_t id : decode) {
            std::vector<float> l = runners[i]->append(std::vector<int32_t>{id}, false);
            all.insert(all.end(), l.begin(), l.end());
        }
        if (i == g.output_rank()) out = std::move(all);
        return Status::ok();
    });
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    return out;
}

struct Case {
    const char* model;
    int tp, pp;
};

class SameDeviceLogits : public ::testing::TestWithParam<Case> {};

TEST_P(SameDeviceLogits, EqualTp1OnTheSameGpu) {
    VOLT_NEED_GPU();
    const Case c = GetParam();
    auto loaded = model::load_model(source_dir() + "/tests/data/golden/" + c.model,
                                    {.progress = io::ProgressMode::kOff});
    ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
    const std::shared_ptr<const model::ModelWeights> w = std::move(*loaded);
    const auto prompt = random_ids(40, 1000, 7), decode = random_ids(4, 1000, 8);
    const auto want = gpu_logits(w, {1, 1}, prompt, decode);
    const auto got = gpu_logits(w, {c.tp, c.pp}, prompt, decode);
    ASSERT_EQ(want.size(), (prompt.size() + decode.size()) * 1000);
    ASSERT_EQ(got.size(), want.size());
    if (c.tp == 1) {
        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4)) << "pipeline stages change no sum";
        return;
    }
    double err = 0, scale = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        err = std::max(err, std::abs(static_cast<double>(got[i]) - want[i]));
        scale = std::max(scale, std::abs(static_cast<double>(want[i])));
    }
    EXPECT_LT(err / scale, kReductionOrderTol) << c.model << " tp " << c.tp << " pp " << c.pp;
    EXPECT_GT(err, 0.0) << "tp > 1 reorders sums; bitwise equality would mean TP did not run";
}

INSTANTIATE_TEST_SUITE_P(Cases, SameDeviceLogits,
                         ::testing::Values(Case{"tiny-mxfp4", 2, 1}, Case{"tiny-bf16", 2, 1},
                                           Case{"kv8/tiny-kv8", 2, 1}, Case{"kv8/tiny-kv8", 4, 1},
                                           Case{"tiny-mxfp4", 1, 2}, Case{"kv8/tiny-kv8", 2, 2}),
                         [](const auto& info) {
                             std::string m = info.param.model;
                             for (char& ch : m)
                                 if (ch == '-' || ch == '/') ch = '_';
                             return m + "_tp" + std::to_string(info.param.tp) + "_pp" +
                                    std::to_string(info.param.pp);
                         });

}  // namespace
}  // namespace volt::cuda
