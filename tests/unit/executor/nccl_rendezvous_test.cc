// The NCCL part of a multi-process --device cuda rendezvous (executor/nccl_rendezvous.h) across forked
// processes over real TCP, without a GPU: rank 0's 128-byte ids arrive bit for bit at every rank (a
// seeded fake id maker, and the installed libnccl.so.2's ncclGetUniqueId where it loads), two ranks on
// one GPU are refused on every rank, rank 0's failure reaches every rank, a rank configured differently
// (the engine's group_fingerprint with another --dtype) is still refused by the Hello, and a rank that
// never answers ends in the watchdog's error within the timeout.
#include "executor/nccl_rendezvous.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "comm_test_util.h"
#include "cpu/tcp_communicator.h"
#include "executor/engine_flags.h"

namespace volt::executor {
namespace {

using cuda::NcclUniqueId;
using volt::testing::exit_codes;

// The ids a seeded maker gives, in order: what rank 0 makes and every rank must receive.
std::vector<NcclUniqueId> seeded_ids(int count) {
    std::mt19937 rng(20261207);
    std::vector<NcclUniqueId> ids(static_cast<size_t>(count));
    for (NcclUniqueId& id : ids)
        for (char& c : id.internal) c = static_cast<char>(rng() & 0xff);
    return ids;
}

// Forks n ranks joined over 127.0.0.1 with `config` (per rank) and the watchdog's timeout; each runs
// fn(rank, world) and exits with its result (100: the rendezvous failed, checked by on_refused when given).
std::vector<int> in_processes(int n, double timeout_s, const std::function<std::string(int)>& config,
                              const std::function<int(int, cpu::TcpCommunicator&)>& fn,
                              const std::function<int(int, const Status&)>& on_refused = nullptr) {
    int port = 0;
    auto lfd = cpu::tcp_listen("127.0.0.1", 0, &port);
    EXPECT_TRUE(lfd.is_ok()) << lfd.status().to_string();
    if (!lfd.is_ok()) return {};
    std::vector<pid_t> pids;
    for (int r = 0; r < n; ++r) {
        const pid_t pid = fork();
        if (pid == 0) {
            if (r != 0) close(*lfd);
            cpu::TcpOptions o;
            o.rank = r;
            o.size = n;
            o.port = port;
            o.listen_fd = r == 0 ? *lfd : -1;
            o.config = config(r);
            o.comm.timeout_s = timeout_s;
            auto world = cpu::tcp_connect(o);
            if (!world.is_ok()) {
                std::fprintf(stderr, "rank %d: %s\n", r, world.status().to_string().c_str());
                _exit(on_refused ? on_refused(r, world.status()) : 100);
            }
            _exit(fn(r, **world));
        }
        pids.push_back(pid);
    }
    close(*lfd);
    return exit_codes(pids);
}

std::string same(int) { return "world 4 (tp 2 x pp 2), device cuda"; }

// The ids file rank r wrote (dir/rank<r>.bin).
std::vector<char> read_ids(const std::string& dir, int r) {
    std::ifstream f(dir + "/rank" + std::to_string(r) + ".bin", std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Each rank: its place (host h<r> unless `places` says otherwise), the exchange, and its ids into dir.
int exchange_and_write(int r, cpu::TcpCommunicator& world, int count, const MakeNcclId& make_id,
                       const std::string& dir) {
    const GpuPlace mine{"h" + std::to_string(r), "0000:3B:00.0", 0};  // one GPU per host: distinct
    auto ids = exchange_nccl_ids(world, mine, count, make_id);
    if (!ids.is_ok()) {
        std::fprintf(stderr, "rank %d: %s\n", r, ids.status().to_string().c_str());
        return 1;
    }
    std::ofstream f(dir + "/rank" + std::to_string(r) + ".bin", std::ios::binary);
    f.write(reinterpret_cast<const char*>(ids->data()), static_cast<std::streamsize>(ids->size() * 128));
    return f.good() ? 0 : 2;
}

std::string temp_dir() {
    char tmpl[] = "/tmp/volt-nccl-ids.XXXXXX";
    const char* d = mkdtemp(tmpl);
    EXPECT_NE(d, nullptr);
    return d ? d : "/tmp";
}

TEST(NcclRendezvous, IdsOfEveryGroupOfMoreThanOneRank) {
    model::ParallelConfig p;
    p.tensor_parallel_size = 2;
    p.pipeline_parallel_size = 2;
    EXPECT_EQ(nccl_id_count(p), 4);  // tp groups of stages 0, 1; pp groups of lanes 0, 1
    EXPECT_EQ(std::vector<int>({tp_id_index(p, 0), tp_id_index(p, 1), tp_id_index(p, 2), tp_id_index(p, 3)}),
              std::vector<int>({0, 0, 1, 1}));
    EXPECT_EQ(std::vector<int>({pp_id_index(p, 0), pp_id_index(p, 1), pp_id_index(p, 2), pp_id_index(p, 3)}),
              std::vector<int>({2, 3, 2, 3}));
    p.pipeline_parallel_size = 1;
    p.tensor_parallel_size = 4;
    EXPECT_EQ(nccl_id_count(p), 1);
    EXPECT_EQ(tp_id_index(p, 3), 0);
    EXPECT_EQ(pp_id_index(p, 3), -1);
    p.tensor_parallel_size = 1;
    p.pipeline_parallel_size = 3;
    EXPECT_EQ(nccl_id_count(p), 1);
    EXPECT_EQ(tp_id_index(p, 2), -1);
    EXPECT_EQ(pp_id_index(p, 2), 0);
}

TEST(NcclRendezvous, CheckDistinctGpusNamesTheFirstTwoRanksOnOneGpu) {
    EXPECT_TRUE(
        check_distinct_gpus({{"a", "0000:01:00.0", 0}, {"a", "0000:02:00.0", 1}, {"b", "0000:01:00.0", 0}})
            .is_ok());
    const Status s =
        check_distinct_gpus({{"a", "0000:01:00.0", 0}, {"a", "0000:02:00.0", 1}, {"a", "0000:01:00.0", 2}});
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(
        s.message(),
        "ranks 0 and 2 would both use GPU 0000:01:00.0 (ordinal 0 and 2) of host a: NCCL refuses two ranks "
        "on one GPU (Duplicate GPU detected); run at most one process per GPU of a host, with LOCAL_RANK "
        "(torchrun sets it) or CUDA_VISIBLE_DEVICES per process");
}

TEST(NcclRendezvous, RankZerosIdsArriveBitExactAtEveryRank) {
    const std::string dir = temp_dir();
    const int count = 4;
    const auto codes = in_processes(4, 20.0, same, [&](int r, cpu::TcpCommunicator& world) {
        int made = 0;
        const std::vector<NcclUniqueId> want = seeded_ids(count);
        const MakeNcclId make = [&]() -> Result<NcclUniqueId> { return want[static_cast<size_t>(made++)]; };
        const int code = exchange_and_write(r, world, count, make, dir);
        // Only rank 0 makes ids, exactly one per group.
        if (code == 0 && made != (r == 0 ? count : 0)) return 3;
        return code;
    });
    EXPECT_EQ(codes, (std::vector<int>{0, 0, 0, 0}));
    const std::vector<NcclUniqueId> want = seeded_ids(count);
    const std::vector<char> bytes(reinterpret_cast<const char*>(want.data()),
                                  reinterpret_cast<const char*>(want.data()) + count * 128);
    for (int r = 0; r < 4; ++r) EXPECT_EQ(read_ids(dir, r), bytes) << "rank " << r;
}

// The real thing where libnccl.so.2 is installed (the CUDA 13 toolkit's on the dev VM): ncclGetUniqueId
// needs no GPU; its bytes (an address of rank 0's bootstrap root) reach every rank unchanged.
TEST(NcclRendezvous, TheInstalledNcclsIdsArriveBitExact) {
    auto nccl = cuda::NcclLibrary::open();
    if (!nccl.is_ok()) GTEST_SKIP() << nccl.status().to_string();
    const std::string dir = temp_dir();
    const auto codes = in_processes(3, 20.0, same, [&](int r, cpu::TcpCommunicator& world) {
        auto lib = cuda::NcclLibrary::open();
        if (!lib.is_ok()) return 4;
        return exchange_and_write(
            r, world, 2, [&] { return (*lib)->unique_id(); }, dir);
    });
    EXPECT_EQ(codes, (std::vector<int>{0, 0, 0}));
    const std::vector<char> zero(256, 0), at0 = read_ids(dir, 0);
    EXPECT_EQ(at0.size(), 256u);
    EXPECT_NE(at0, zero);
    EXPECT_NE(std::vector<char>(at0.begin(), at0.begin() + 128),
              std::vector<char>(at0.begin() + 128, at0.end()))
        << "two ids, two bootstrap roots";
    for (int r = 1; r < 3; ++r) EXPECT_EQ(read_ids(dir, r), at0) << "rank " << r;
}

TEST(NcclRendezvous, TwoRanksOnOneGpuAreRefusedOnEveryRank) {
    const auto codes = in_processes(3, 20.0, same, [](int r, cpu::TcpCommunicator& world) {
        // Ranks 0 and 2 on host h's GPU 0000:0A:00.0, rank 1 on its other GPU.
        const GpuPlace mine{"h", r == 1 ? "0000:0B:00.0" : "0000:0A:00.0", r == 1 ? 1 : 0};
        int made = 0;
        auto ids = exchange_nccl_ids(world, mine, 1, [&]() -> Result<NcclUniqueId> {
            ++made;
            return NcclUniqueId{};
        });
        const std::string want = std::string(r == 0 ? "" : "rank 0: ") +
                                 "ranks 0 and 2 would both use GPU 0000:0A:00.0 (ordinal 0 and 0) of host h: "
                                 "NCCL refuses two ranks on "
                                 "one GPU (Duplicate GPU detected)";
        if (ids.is_ok() || made != 0) return 1;
        std::fprintf(stderr, "rank %d: %s\n", r, ids.status().to_string().c_str());
        return ids.status().code() == StatusCode::kInvalidArgument &&
                       ids.status().message().rfind(want, 0) == 0
                   ? 0
                   : 2;
    });
    EXPECT_EQ(codes, (std::vector<int>{0, 0, 0}));
}

TEST(NcclRendezvous, RankZerosFailureReachesEveryRank) {
    const auto codes = in_processes(2, 20.0, same, [](int r, cpu::TcpCommunicator& world) {
        auto ids = exchange_nccl_ids(world, {"h" + std::to_string(r), "0000:01:00.0", 0}, 2,
                                     []() -> Result<NcclUniqueId> {
                                         return failed_precondition("cannot load libnccl.so.2 (absent)");
                                     });
        const std::string want = std::string(r == 0 ? "" : "rank 0: ") + "cannot load libnccl.so.2 (absent)";
        return !ids.is_ok() && ids.status().code() == StatusCode::kFailedPrecondition &&
                       ids.status().message() == want
                   ? 0
                   : 1;
    });
    EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

// The Hello's fingerprint still refuses a process started with another configuration: the engine's
// own text (group_fingerprint) for --device cuda, --dtype half on rank 0 and float on rank 1.
TEST(NcclRendezvous, ARankConfiguredDifferentlyIsStillRefused) {
    model::ModelWeights w;
    ProcessLaunch l;
    l.world_size = 2;
    EngineFlags f;
    f.parallel.tensor_parallel_size = 2;
    f.device.device = "cuda";
    f.device.dtype = "half";
    const std::string half = group_fingerprint(f, w, l);
    f.device.dtype = "float";
    const std::string full = group_fingerprint(f, w, l);
    ASSERT_NE(half, full);
    const auto codes = in_processes(
        2, 10.0, [&](int r) { return r == 0 ? half : full; },
        [](int, cpu::TcpCommunicator&) { return 1; },  // must not get here
        [&](int, const Status& s) {
            return s.code() == StatusCode::kInvalidArgument &&
                           s.message().find("configured differently") != std::string::npos &&
                           s.message().find("{" + half + "}") != std::string::npos &&
                           s.message().find("{" + full + "}") != std::string::npos
                       ? 0
                       : 1;
        });
    EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

// Two ranks, `silent` staying in the group without a word for 4 s: the other rank's exchange must fail
// with kUnavailable naming `expect` before 3 s have passed (the watchdog's 0.5 s timeout, not the silent
// rank's leaving). The exit codes: {0, 0} when it did.
std::vector<int> with_a_silent_rank(int silent, const std::string& expect) {
    using Clock = std::chrono::steady_clock;
    return in_processes(2, 0.5, same, [&](int r, cpu::TcpCommunicator& world) {
        if (r == silent) {
            std::this_thread::sleep_for(std::chrono::seconds(4));
            return 0;
        }
        const auto start = Clock::now();
        auto ids = exchange_nccl_ids(world, {"h" + std::to_string(r), "0000:01:00.0", 0}, 1,
                                     []() -> Result<NcclUniqueId> { return NcclUniqueId{}; });
        const double waited = std::chrono::duration<double>(Clock::now() - start).count();
        std::fprintf(stderr, "rank %d after %.2f s: %s\n", r, waited, ids.status().to_string().c_str());
        return !ids.is_ok() && ids.status().code() == StatusCode::kUnavailable &&
                       ids.status().message().find(expect) != std::string::npos && waited < 3.0
                   ? 0
                   : 1;
    });
}

// Rank 0 never answers: the worker's exchange fails with the watchdog's kUnavailable after the 0.5 s
// timeout, not after rank 0 leaves. And a worker that never sends its place: rank 0 fails the same way,
// naming it.
TEST(NcclRendezvous, ARankThatNeverAnswersEndsInTheWatchdog) {
    EXPECT_EQ(with_a_silent_rank(0, "watchdog"), (std::vector<int>{0, 0}));
    EXPECT_EQ(with_a_silent_rank(1, "rank 1"), (std::vector<int>{0, 0}));
}

}  // namespace
}  // namespace volt::executor
