// The all-reduce's latency at decode sizes (issue 17; docs/parallel.md "Running the V100 recipe on one
// GPU"): 2880 f32 (one token's hidden state) x 1, 8 and 32 rows on 2, 4 and 8 ranks of one GPU, for
//   same_device  the same-device communicator (--tp-same-device: host barriers, event waits, the
//                rank-order sum kernel, the copy back), one thread per rank as the engine runs it:
//                "pipelined" = K calls back to back then one synchronize (the cost a decode step pays when
//                the host runs ahead), "sync" = a synchronize after every call (the round trip);
//   one_shot     the one-shot kernel of the NCCL path (kernels/comm.cu: staging copy, flags, rank-order
//                sum) with every "peer" buffer and flag on this one GPU: the kernel's own cost with its
//                flags in this GPU's L2, no link and no host rendezvous (the NCCL communicator adds one
//                host meet per call); one thread per rank issuing K calls back to back on its own stream,
//                at most SMs / ranks blocks per kernel so that every rank's kernel is resident at once.
//                ranks = 1 is the kernel with no peer to wait for.
//   nccl, one_shot_gpus  the NCCL communicator across GPUs 0..n-1 (NCCL alone; the one-shot kernel over
//                peer memory when the peer probe passes): DISABLED_NcclAndOneShotAcrossGpus, skipped on one
//                GPU.
// Each measurement prints one line `ALLREDUCE {json}` (scripts/gpu/tp_recipe.sh collects them) and checks
// the last call's result bitwise against the CPU rank-order sum. A benchmark, not a check: DISABLED_, so
// cuda_backend_test's normal run (scripts/gpu/check.sh) never runs it; run it with
//   cuda_backend_test --gtest_also_run_disabled_tests --gtest_filter='CudaCommBench.*'
// Kernels of several streams of one GPU have no forward-progress guarantee among them (why the
// same-device communicator never spins): the one-shot measurement keeps its grids small, and a flag that
// never comes ends the kernel after 2 s with its error word set, which fails the test instead of hanging.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

#include "comm_test_util.h"
#include "core/check.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_check.h"
#include "cuda/device.h"
#include "cuda/launch.h"
#include "cuda/nccl_communicator.h"
#include "cuda/same_device_communicator.h"

namespace volt::cuda {
namespace {

using volt::testing::random_floats;
using volt::testing::rank_order_sum;

constexpr int64_t kHidden = 2880;

#define VOLT_BENCH_NEED_GPU()                                                                    \
    if (visible_gpu_count() == 0) {                                                              \
        auto probe = probe_device(0);                                                            \
        GTEST_SKIP() << "no CUDA device: " << (probe.is_ok() ? "" : probe.status().to_string()); \
    }

int iters() {
    const char* env = std::getenv("VOLT_ALLREDUCE_ITERS");
    return env != nullptr && std::atoi(env) > 0 ? std::atoi(env) : 400;
}

void report(const char* comm, int ranks, int64_t rows, const char* mode, int n_iters, double seconds,
            const char* note) {
    std::printf(
        "ALLREDUCE {\"comm\": \"%s\", \"ranks\": %d, \"rows\": %lld, \"floats\": %lld, \"bytes\": %lld, "
        "\"mode\": \"%s\", \"iters\": %d, \"us_per_allreduce\": %.2f, \"note\": \"%s\"}\n",
        comm, ranks, static_cast<long long>(rows), static_cast<long long>(rows * kHidden),
        static_cast<long long>(rows * kHidden * 4), mode, n_iters, seconds * 1e6 / n_iters, note);
    std::fflush(stdout);
}

// Runs fn(r) on n threads that start together; returns the wall time from the common start to the last
// thread's end.
double timed_threads(int n, const std::function<void(int)>& fn) {
    std::mutex mu;
    std::condition_variable cv;
    int ready = 0;
    bool go = false;
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
        threads.emplace_back([&, r] {
            {
                std::unique_lock<std::mutex> lock(mu);
                ++ready;
                cv.notify_all();
                cv.wait(lock, [&] { return go; });
            }
            fn(r);
        });
    std::chrono::steady_clock::time_point t0;
    {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return ready == n; });
        go = true;
        t0 = std::chrono::steady_clock::now();
    }
    cv.notify_all();
    for (auto& t : threads) t.join();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Times the all-reduce of `comms` (rank r on backends[r], attached) at 2880 f32 x 1, 8, 32 rows, back to
// back ("pipelined") and with a synchronize after each call ("sync"), one thread per rank, and checks one
// call on fresh inputs bitwise against the rank-order sum.
void measure(const char* comm, std::vector<std::unique_ptr<CudaBackend>>& backends,
             std::vector<std::unique_ptr<ops::Communicator>>& comms, const char* note_pipelined,
             const char* note_sync) {
    const int K = iters(), n = static_cast<int>(comms.size());
    for (int64_t rows : {int64_t{1}, int64_t{8}, int64_t{32}}) {
        const int64_t count = rows * kHidden;
        std::vector<ops::Buffer> bufs(n);
        std::vector<std::vector<float>> in(n);
        for (int r = 0; r < n; ++r) {
            auto b = backends[r]->alloc(count * 4);
            ASSERT_TRUE(b.is_ok());
            bufs[r] = std::move(*b);
            in[r] = random_floats(count, static_cast<uint32_t>(1000 * n + r + rows), -1.0f, 1.0f);
        }
        uint64_t step = 0;
        for (const char* mode : {"pipelined", "sync"}) {
            const bool sync = std::strcmp(mode, "sync") == 0;
            const int calls = sync ? std::max(K / 2, 1) : K;
            // Warm-up (kernels loaded, events made), then the inputs of the timed run.
            std::vector<Status> st(n, Status::ok());
            timed_threads(n, [&](int r) {
                backends[r]->bind_thread();
                comms[r]->begin_step(step);
                for (int i = 0; i < 20 && st[r].is_ok(); ++i)
                    st[r] = comms[r]->all_reduce_sum(bufs[r].as<float>(), count);
                backends[r]->synchronize();
                backends[r]->upload(bufs[r].data(), in[r].data(), count * 4);
            });
            for (const Status& s : st) ASSERT_TRUE(s.is_ok()) << s.to_string();
            ++step;
            // Timed: the first call sums the inputs; the rest re-reduce (values grow by n per call,
            // harmless; checked below on a fresh upload).
            const double secs = timed_threads(n, [&](int r) {
                backends[r]->bind_thread();
                comms[r]->begin_step(step);
                for (int i = 0; i < calls && st[r].is_ok(); ++i) {
                    st[r] = comms[r]->all_reduce_sum(bufs[r].as<float>(), count);
                    if (sync) backends[r]->synchronize();
                }
                backends[r]->synchronize();
            });
            for (const Status& s : st) ASSERT_TRUE(s.is_ok()) << s.to_string();
            ++step;
            report(comm, n, rows, mode, calls, secs, sync ? note_sync : note_pipelined);
        }
        // One checked call on the inputs.
        std::vector<Status> st(n, Status::ok());
        timed_threads(n, [&](int r) {
            backends[r]->bind_thread();
            backends[r]->upload(bufs[r].data(), in[r].data(), count * 4);
            comms[r]->begin_step(step);
            st[r] = comms[r]->all_reduce_sum(bufs[r].as<float>(), count);
            backends[r]->synchronize();
        });
        ++step;
        for (const Status& s : st) ASSERT_TRUE(s.is_ok()) << s.to_string();
        const std::vector<float> want = rank_order_sum(in);
        for (int r = 0; r < n; ++r) {
            std::vector<float> got(count);
            backends[r]->download(got.data(), bufs[r].data(), count * 4);
            ASSERT_EQ(0, std::memcmp(got.data(), want.data(), count * 4)) << n << " ranks, rank " << r;
        }
    }
}

TEST(CudaCommBench, DISABLED_AllReduceLatencyAtDecodeSizes) {
    VOLT_BENCH_NEED_GPU();
    for (int n : {2, 4, 8}) {
        SameDeviceGroup group(n, 0, ops::CommunicatorOptions{60.0, true});
        std::vector<std::unique_ptr<CudaBackend>> backends;
        std::vector<std::unique_ptr<ops::Communicator>> comms;
        for (int r = 0; r < n; ++r) {
            CudaOptions o;
            o.dtype = "float";
            auto b = CudaBackend::create(o);
            ASSERT_TRUE(b.is_ok()) << b.status().to_string();
            backends.push_back(std::move(*b));
            comms.push_back(group.communicator(r));
            ASSERT_TRUE(comms.back()->attach(*backends.back()).is_ok());
        }
        measure("same_device", backends, comms,
                "host barriers + event waits + rank-order sum + copy back, back to back",
                "host barriers + event waits + rank-order sum + copy back, synchronize after each call");
    }
}

// NCCL alone (all-gather + the rank-order sum kernel) and the one-shot all-reduce over peer memory, one GPU
// per rank (GPUs 0..n-1, n = 2, 4, 8 as visible), as the engine's in-process NCCL communicator runs them
// (one host meet per call). Skipped without 2 GPUs or without libnccl.so.2. A one-shot group whose peer
// probe failed runs NCCL alone and says so in its note.
TEST(CudaCommBench, DISABLED_NcclAndOneShotAcrossGpus) {
    VOLT_BENCH_NEED_GPU();
    const int visible = visible_gpu_count();
    if (visible < 2) GTEST_SKIP() << visible << " GPU visible: NCCL across GPUs needs 2";
    auto nccl = NcclLibrary::open();
    if (!nccl.is_ok()) GTEST_SKIP() << nccl.status().to_string();
    for (int n : {2, 4, 8}) {
        if (n > visible) break;
        std::vector<int> gpus;
        for (int g = 0; g < n; ++g) gpus.push_back(g);
        for (bool one_shot : {false, true}) {
            auto group = NcclGroup::create(*nccl, gpus, ops::CommunicatorOptions{60.0, true}, one_shot);
            ASSERT_TRUE(group.is_ok()) << group.status().to_string();
            std::vector<std::unique_ptr<CudaBackend>> backends;
            std::vector<std::unique_ptr<ops::Communicator>> comms;
            for (int r = 0; r < n; ++r) {
                CudaOptions o;
                o.dtype = "float";
                o.device = gpus[r];
                auto b = CudaBackend::create(o);
                ASSERT_TRUE(b.is_ok()) << b.status().to_string();
                backends.push_back(std::move(*b));
                comms.push_back(group->communicator(r));
                ASSERT_TRUE(comms.back()->attach(*backends.back()).is_ok());
            }
            const bool on = group->one_shot();
            measure(on ? "one_shot_gpus" : "nccl", backends, comms,
                    on         ? "one-shot over peer memory (host meet per call), back to back"
                    : one_shot ? "NCCL alone: the peer probe failed (see the log), back to back"
                               : "NCCL all-gather + rank-order sum (host meet per call), back to back",
                    on ? "one-shot over peer memory, synchronize after each call"
                       : "NCCL all-gather + rank-order sum, synchronize after each call");
        }
    }
}

TEST(CudaCommBench, DISABLED_OneShotKernelOnOneGpu) {
    VOLT_BENCH_NEED_GPU();
    auto dev = probe_device(0);
    ASSERT_TRUE(dev.is_ok()) << dev.status().to_string();
    const int K = iters();
    constexpr int64_t kMaxRows = 32, kHalf = kMaxRows * kHidden;  // one staging half, floats
    for (int n : {1, 2, 4, 8}) {
        // Rank q: staging [2, kHalf] f32, flags [kMaxCommRanks] u32 + error i32, data [kHalf] f32, a stream.
        std::vector<float*> staging(n), data(n);
        std::vector<unsigned*> flags(n);
        std::vector<cudaStream_t> streams(n);
        for (int q = 0; q < n; ++q) {
            VOLT_CUDA_CHECK(cudaMalloc(&staging[q], 2 * kHalf * 4));
            VOLT_CUDA_CHECK(cudaMalloc(&data[q], kHalf * 4));
            VOLT_CUDA_CHECK(cudaMalloc(&flags[q], kMaxCommRanks * 4 + 4));
            VOLT_CUDA_CHECK(cudaMemset(flags[q], 0, kMaxCommRanks * 4 + 4));
            VOLT_CUDA_CHECK(cudaStreamCreateWithFlags(&streams[q], cudaStreamNonBlocking));
        }
        const int max_blocks = std::max(1, dev->sm_count / n);
        std::vector<unsigned> epoch(n, 0);
        // One call of rank q on its stream, as NcclCommunicator::all_reduce_sum's one-shot branch.
        auto call = [&](int q, int64_t count) {
            const unsigned e = ++epoch[q];
            const int64_t half = (e & 1u) * kHalf;
            VOLT_CUDA_CHECK(cudaMemcpyAsync(staging[q] + half, data[q], static_cast<size_t>(count) * 4,
                                            cudaMemcpyDeviceToDevice, streams[q]));
            OneShotArgs a;
            for (int p = 0; p < n; ++p) {
                a.in[p] = staging[p] + half;
                a.flags[p] = flags[p];
            }
            a.n = n;
            a.rank = q;
            a.epoch = e;
            a.out = data[q];
            a.count = count;
            a.error = reinterpret_cast<int*>(flags[q] + kMaxCommRanks);
            a.timeout_ns = 2'000'000'000ull;
            launch_one_shot_all_reduce(a, max_blocks, streams[q]);
        };
        for (int64_t rows : {int64_t{1}, int64_t{8}, int64_t{32}}) {
            const int64_t count = rows * kHidden;
            std::vector<std::vector<float>> in(n);
            for (int q = 0; q < n; ++q) {
                in[q] = random_floats(count, static_cast<uint32_t>(77 * n + q + rows), -1.0f, 1.0f);
                VOLT_CUDA_CHECK(cudaSetDevice(0));
                VOLT_CUDA_CHECK(cudaMemcpy(data[q], in[q].data(), count * 4, cudaMemcpyHostToDevice));
            }
            // Checked call first (the inputs), then warm-up and the timed calls.
            timed_threads(n, [&](int q) {
                VOLT_CUDA_CHECK(cudaSetDevice(0));
                call(q, count);
                VOLT_CUDA_CHECK(cudaStreamSynchronize(streams[q]));
            });
            const std::vector<float> want = rank_order_sum(in);
            for (int q = 0; q < n; ++q) {
                std::vector<float> got(count);
                int err = 0;
                VOLT_CUDA_CHECK(cudaMemcpy(got.data(), data[q], count * 4, cudaMemcpyDeviceToHost));
                VOLT_CUDA_CHECK(cudaMemcpy(&err, flags[q] + kMaxCommRanks, 4, cudaMemcpyDeviceToHost));
                ASSERT_EQ(err, 0) << n << " ranks, rank " << q << ": a peer's flag came too late";
                ASSERT_EQ(0, std::memcmp(got.data(), want.data(), count * 4)) << n << " ranks, rank " << q;
            }
            timed_threads(n, [&](int q) {
                VOLT_CUDA_CHECK(cudaSetDevice(0));
                for (int i = 0; i < 20; ++i) call(q, count);
                VOLT_CUDA_CHECK(cudaStreamSynchronize(streams[q]));
            });
            const double secs = timed_threads(n, [&](int q) {
                VOLT_CUDA_CHECK(cudaSetDevice(0));
                for (int i = 0; i < K; ++i) call(q, count);
                VOLT_CUDA_CHECK(cudaStreamSynchronize(streams[q]));
            });
            for (int q = 0; q < n; ++q) {
                int err = 0;
                VOLT_CUDA_CHECK(cudaMemcpy(&err, flags[q] + kMaxCommRanks, 4, cudaMemcpyDeviceToHost));
                ASSERT_EQ(err, 0) << n << " ranks, rank " << q << ": a peer's flag came too late";
            }
            report("one_shot_same_gpu", n, rows, "pipelined", K, secs,
                   n == 1 ? "staging copy + kernel, no peer to wait for"
                          : "staging copy + kernel, flags and staging of every rank on this GPU (no link, no "
                            "host meet)");
        }
        for (int q = 0; q < n; ++q) {
            VOLT_CUDA_CHECK(cudaStreamDestroy(streams[q]));
            VOLT_CUDA_CHECK(cudaFree(staging[q]));
            VOLT_CUDA_CHECK(cudaFree(data[q]));
            VOLT_CUDA_CHECK(cudaFree(flags[q]));
        }
    }
}

}  // namespace
}  // namespace volt::cuda
