// The CPU communicators (cpu/thread_communicator.h): the all-reduce is the rank-order sum, computed here
// independently in the test, bitwise equal on every rank; gather concatenates in rank order; send/recv
// carry bytes; ranks that issue different collectives fail with a message naming both; a rank that never
// arrives trips the watchdog (kUnavailable naming the missing rank) and every later call fails at once.
// The TCP communicator (cpu/tcp_communicator.h) does the same across forked processes on this host, its
// all-reduce bitwise equal to the rank-order sum; a peer that exits fails the collective at once.
#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm_test_util.h"
#include "cpu/tcp_communicator.h"
#include "cpu/thread_communicator.h"

namespace volt::cpu {
namespace {

using volt::testing::exit_codes;
using volt::testing::random_floats;
using volt::testing::rank_order_sum;

// Runs fn(rank, comm) on one thread per rank; returns each rank's status.
std::vector<Status> on_ranks(const ThreadGroup& g, const std::function<Status(int, ops::Communicator&)>& fn) {
    std::vector<Status> out(g.size());
    std::vector<std::thread> threads;
    for (int r = 0; r < g.size(); ++r)
        threads.emplace_back([&, r] {
            auto comm = g.communicator(r);
            comm->begin_step(0);
            out[r] = fn(r, *comm);
        });
    for (auto& t : threads) t.join();
    return out;
}

TEST(ThreadCommunicator, AllReduceIsTheRankOrderSumOnEveryRank) {
    for (int n : {1, 2, 3, 4, 8}) {
        const int64_t count = 1037;  // not a multiple of any rank count: uneven slices
        std::vector<std::vector<float>> in(n), out(n);
        for (int r = 0; r < n; ++r) in[r] = out[r] = random_floats(count, 100 + r, -1e3f, 1e3f);
        const std::vector<float> want = rank_order_sum(in);
        ThreadGroup g(n);
        auto st = on_ranks(g, [&](int r, ops::Communicator& c) {
            VOLT_RETURN_IF_ERROR(c.all_reduce_sum(out[r].data(), count));
            return c.all_reduce_sum(out[r].data(), 0);  // empty messages work too
        });
        for (int r = 0; r < n; ++r) {
            ASSERT_TRUE(st[r].is_ok()) << st[r].to_string();
            EXPECT_EQ(0, std::memcmp(out[r].data(), want.data(), count * sizeof(float)))
                << n << " ranks, rank " << r;
        }
    }
}

TEST(ThreadCommunicator, GatherConcatenatesInRankOrder) {
    const int n = 4;
    const int64_t counts[n] = {3, 0, 2, 1};  // a rank with nothing to send
    std::vector<float> got(6, -1.0f);
    ThreadGroup g(n);
    auto st = on_ranks(g, [&](int r, ops::Communicator& c) {
        std::vector<float> mine(counts[r]);
        for (int64_t i = 0; i < counts[r]; ++i) mine[i] = static_cast<float>(10 * r + i);
        return c.gather(mine.data(), counts, r == 2 ? got.data() : nullptr, 2);
    });
    for (const Status& s : st) ASSERT_TRUE(s.is_ok()) << s.to_string();
    EXPECT_EQ(got, (std::vector<float>{0, 1, 2, 20, 21, 30}));
}

TEST(ThreadCommunicator, SendRecvCarriesBytesAlongAPipeline) {
    const int n = 3;
    std::vector<int32_t> seen(n, 0);
    ThreadGroup g(n);
    auto st = on_ranks(g, [&](int r, ops::Communicator& c) {
        for (int step = 0; step < 5; ++step) {
            int32_t v = 0;
            if (r > 0) VOLT_RETURN_IF_ERROR(c.recv(&v, sizeof v, r - 1));
            v = v * 10 + r + 1;
            if (r < n - 1) VOLT_RETURN_IF_ERROR(c.send(&v, sizeof v, r + 1));
            seen[r] = v;
        }
        return Status::ok();
    });
    for (const Status& s : st) ASSERT_TRUE(s.is_ok()) << s.to_string();
    EXPECT_EQ(seen, (std::vector<int32_t>{1, 12, 123}));
}

TEST(ThreadCommunicator, DifferentCollectivesFailOnEveryRankNamingBoth) {
    ThreadGroup g(2);
    auto st = on_ranks(g, [&](int r, ops::Communicator& c) {
        std::vector<float> v(8, 1.0f);
        return c.all_reduce_sum(v.data(), r == 0 ? 8 : 4);  // rank 1 issues a different size
    });
    for (const Status& s : st) {
        ASSERT_FALSE(s.is_ok());
        EXPECT_NE(s.message().find("collective order differs"), std::string::npos) << s.message();
        EXPECT_NE(s.message().find("32 bytes"), std::string::npos) << s.message();
        EXPECT_NE(s.message().find("16 bytes"), std::string::npos) << s.message();
    }
}

TEST(ThreadCommunicator, WatchdogFailsARankWaitingForAPeerThatNeverComes) {
    ThreadGroup g(3, {.timeout_s = 0.2});
    auto st = on_ranks(g, [&](int r, ops::Communicator& c) {
        std::vector<float> v(4, 1.0f);
        if (r == 2) return Status::ok();  // rank 2 skips the collective
        return c.all_reduce_sum(v.data(), 4);
    });
    for (int r = 0; r < 2; ++r) {
        ASSERT_EQ(st[r].code(), StatusCode::kUnavailable) << st[r].to_string();
        EXPECT_NE(st[r].message().find("collective watchdog"), std::string::npos) << st[r].message();
        EXPECT_NE(st[r].message().find("for ranks 2"), std::string::npos) << st[r].message();
    }
    // The group stays failed: rank 2 arriving late fails at once instead of waiting.
    auto late = g.communicator(2);
    std::vector<float> v(4, 1.0f);
    EXPECT_EQ(late->all_reduce_sum(v.data(), 4).code(), StatusCode::kUnavailable);
}

TEST(ThreadCommunicator, RecvWatchdogAndExplicitFailure) {
    ThreadGroup g(2, {.timeout_s = 0.2});
    auto c1 = g.communicator(1);
    int32_t v = 0;
    EXPECT_EQ(c1->recv(&v, sizeof v, 0).code(), StatusCode::kUnavailable);
    ThreadGroup h(2);
    h.fail(internal_error("rank 0 ran out of memory"));
    auto c0 = h.communicator(0);
    const Status s = c0->all_reduce_sum(nullptr, 0);
    EXPECT_EQ(s.message(), "rank 0 ran out of memory");
}

// ---- processes over TCP ------------------------------------------------------------------------------

// Forks rank r of n: it joins the group at 127.0.0.1:port (rank 0 on listener lfd; the others close their
// copy), runs fn(r, its communicator) and exits with its result (0: as expected; the rendezvous failing:
// 100). Returns the child's pid.
pid_t fork_rank(int r, int n, int port, int lfd, double timeout_s,
                const std::function<int(int, ops::Communicator&)>& fn) {
    const pid_t pid = fork();
    if (pid == 0) {
        if (r != 0) close(lfd);
        auto comm = tcp_connect({.rank = r,
                                 .size = n,
                                 .host = "127.0.0.1",
                                 .port = port,
                                 .listen_fd = r == 0 ? lfd : -1,
                                 .comm = {.timeout_s = timeout_s}});
        if (!comm.is_ok()) {
            std::fprintf(stderr, "rank %d: %s\n", r, comm.status().to_string().c_str());
            _exit(100);
        }
        (*comm)->begin_step(0);
        _exit(fn(r, **comm));
    }
    return pid;
}

// Forks n processes (fork_rank) and returns every exit code.
std::vector<int> in_processes(int n, double timeout_s,
                              const std::function<int(int, ops::Communicator&)>& fn) {
    int port = 0;
    auto lfd = tcp_listen("127.0.0.1", 0, &port);
    EXPECT_TRUE(lfd.is_ok()) << lfd.status().to_string();
    if (!lfd.is_ok()) return {};
    std::vector<pid_t> pids;
    for (int r = 0; r < n; ++r) pids.push_back(fork_rank(r, n, port, *lfd, timeout_s, fn));
    close(*lfd);
    return exit_codes(pids);
}

// A rank's check for the rendezvous tests below: an all-reduce of 1.0 over 3 ranks gives 3.
int all_reduce_of_three(int, ops::Communicator& c) {
    float v = 1.0f;
    return c.all_reduce_sum(&v, 1).is_ok() && v == 3.0f ? 0 : 1;
}

TEST(TcpCommunicator, ProcessesAllReduceGatherAndPipelineLikeThreads) {
    for (int n : {2, 3, 4}) {
        const int64_t count = 1037;
        const auto codes = in_processes(n, 30.0, [&](int r, ops::Communicator& c) {
            // The rank-order sum, from every rank's seeded values (what the thread test checks too).
            std::vector<float> mine = random_floats(count, 100 + r, -1e3f, 1e3f);
            std::vector<std::vector<float>> all(n);
            for (int q = 0; q < n; ++q) all[q] = random_floats(count, 100 + q, -1e3f, 1e3f);
            const std::vector<float> want = rank_order_sum(all);
            if (!c.all_reduce_sum(mine.data(), count).is_ok()) return 1;
            if (std::memcmp(mine.data(), want.data(), count * sizeof(float)) != 0) return 2;
            std::vector<int64_t> counts(n);
            for (int q = 0; q < n; ++q) counts[q] = q % 2 == 0 ? 2 : 0;  // odd ranks send nothing
            std::vector<float> part(counts[r], static_cast<float>(r)), got(2 * ((n + 1) / 2), -1.0f);
            if (!c.gather(part.data(), counts.data(), got.data(), n - 1).is_ok()) return 3;
            if (r == n - 1) {
                for (size_t i = 0; i < got.size(); ++i)
                    if (got[i] != static_cast<float>(2 * (i / 2))) return 4;
            }
            int32_t v = 0;
            if (r > 0 && !c.recv(&v, sizeof v, r - 1).is_ok()) return 5;
            v = v * 10 + r + 1;
            if (r < n - 1 && !c.send(&v, sizeof v, r + 1).is_ok()) return 6;
            if (r == n - 1 && n == 4 && v != 1234) return 7;
            return 0;
        });
        EXPECT_EQ(codes, std::vector<int>(n, 0)) << n << " processes";
    }
}

TEST(TcpCommunicator, SubgroupsShareTheWorldsConnections) {
    // 4 processes as tp 2 x pp 2 (rank = stage * 2 + lane): each joins its stage's tp group and its
    // lane's pp group over the world's connections, and the groups' messages interleave with the world's
    // on them (as the engine's step channel and collectives do).
    const auto codes = in_processes(4, 30.0, [](int r, ops::Communicator& world) {
        auto& w = static_cast<TcpCommunicator&>(world);
        const int stage = r / 2, lane = r % 2;
        auto tp = w.subgroup({stage * 2, stage * 2 + 1});
        auto pp = w.subgroup({lane, 2 + lane});
        tp->begin_step(0);
        pp->begin_step(0);
        if (tp->size() != 2 || tp->rank() != lane || pp->size() != 2 || pp->rank() != stage) return 1;
        float v = static_cast<float>(r + 1);
        if (!tp->all_reduce_sum(&v, 1).is_ok() || v != (stage == 0 ? 3.0f : 7.0f)) return 2;
        int32_t x = 10 * r;  // stage 0 sends down its lane
        if (stage == 0 && !pp->send(&x, sizeof x, 1).is_ok()) return 3;
        if (stage == 1 && (!pp->recv(&x, sizeof x, 0).is_ok() || x != 10 * lane)) return 4;
        if (r == 3 && !w.send(&x, sizeof x, 0).is_ok()) return 5;  // the world between the groups' messages
        if (r == 0 && (!w.recv(&x, sizeof x, 3).is_ok() || x != 10)) return 6;
        const int64_t counts[2] = {1, 1};
        float part = static_cast<float>(r), got[2] = {-1.0f, -1.0f};
        if (!tp->gather(&part, counts, got, 0).is_ok()) return 7;
        if (lane == 0 && (got[0] != static_cast<float>(r) || got[1] != static_cast<float>(r + 1))) return 8;
        float all = 1.0f;
        return w.all_reduce_sum(&all, 1).is_ok() && all == 4.0f ? 0 : 9;
    });
    EXPECT_EQ(codes, std::vector<int>(4, 0));
}

TEST(TcpCommunicator, DifferentCollectivesAndAVanishedPeerFail) {
    // Rank 1 issues a smaller all-reduce: rank 0 names both; rank 1 then finds rank 0 gone (it exited).
    auto codes = in_processes(2, 30.0, [](int r, ops::Communicator& c) {
        std::vector<float> v(8, 1.0f);
        const Status s = c.all_reduce_sum(v.data(), r == 0 ? 8 : 4);
        if (s.is_ok()) return 1;
        if (r == 0)
            return s.message().find("collective order differs") != std::string::npos &&
                           s.message().find("16 bytes") != std::string::npos
                       ? 0
                       : 2;
        return s.code() == StatusCode::kUnavailable ? 0 : 3;
    });
    EXPECT_EQ(codes, (std::vector<int>{0, 0}));
    // A rank that never issues the collective but stays alive trips rank 0's watchdog.
    codes = in_processes(2, 0.3, [](int r, ops::Communicator& c) {
        if (r == 1) {
            std::this_thread::sleep_for(std::chrono::seconds(1));
            return 0;
        }
        std::vector<float> v(8, 1.0f);
        const Status s = c.all_reduce_sum(v.data(), 8);
        return s.code() == StatusCode::kUnavailable &&
                       s.message().find("collective watchdog") != std::string::npos
                   ? 0
                   : 1;
    });
    EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

// ---- the rendezvous: strangers, the listeners' address, sockets on error ---------------------------

int connect_to(int port) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    EXPECT_EQ(connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a), 0);
    return fd;
}

int open_fds() {
    int n = 0;
    DIR* d = opendir("/proc/self/fd");
    while (readdir(d) != nullptr) ++n;
    closedir(d);
    return n;
}

TEST(TcpCommunicator, StrangersAreDroppedAndTheRendezvousGoesOn) {
    int port = 0;
    auto lfd = tcp_listen("127.0.0.1", 0, &port);
    ASSERT_TRUE(lfd.is_ok());
    // Queued before any rank: garbage, the right magic with a rank out of range, and one that says
    // nothing (it is dropped after a few seconds, not at the watchdog). Rank 0 accepts them first.
    const int garbage = connect_to(port);
    const char junk[32] = "GET / HTTP/1.0\r\n\r\n";
    ASSERT_EQ(write(garbage, junk, sizeof junk), static_cast<ssize_t>(sizeof junk));
    const int wrong_rank = connect_to(port);
    const TcpHello hello{kTcpHelloMagic, 7, 3, 0, 0, {}};
    ASSERT_EQ(write(wrong_rank, &hello, sizeof hello), static_cast<ssize_t>(sizeof hello));
    const int silent = connect_to(port);
    std::vector<pid_t> pids;
    for (int r = 0; r < 3; ++r) pids.push_back(fork_rank(r, 3, port, *lfd, 20.0, all_reduce_of_three));
    close(*lfd);
    EXPECT_EQ(exit_codes(pids), (std::vector<int>{0, 0, 0}));
    close(silent);
    close(garbage);
    close(wrong_rank);
}

// The local addresses ("0100007F:1F90") of the listening TCP sockets process `pid` holds.
std::vector<std::string> listening_addresses(pid_t pid) {
    std::vector<std::string> inodes, out;
    const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
    if (DIR* d = opendir(dir.c_str())) {
        while (dirent* e = readdir(d)) {
            char link[128] = {};
            if (readlink((dir + "/" + e->d_name).c_str(), link, sizeof link - 1) > 0 &&
                std::strncmp(link, "socket:[", 8) == 0)
                inodes.emplace_back(link + 8, std::strlen(link + 8) - 1);
        }
        closedir(d);
    }
    std::ifstream tcp("/proc/net/tcp");
    std::string line;
    std::getline(tcp, line);  // the header
    while (std::getline(tcp, line)) {
        std::istringstream in(line);
        std::string f[10];
        for (auto& x : f) in >> x;
        if (f[3] == "0A" && std::find(inodes.begin(), inodes.end(), f[9]) != inodes.end())
            out.push_back(f[1]);
    }
    return out;
}

TEST(TcpCommunicator, AWorkersListenerBindsLoopbackAndDropsStrangers) {
    // Ranks 0 and 1 of 3 first: rank 1 listens for rank 2 on the address it reaches rank 0 from
    // (loopback, as rank 0's), not on every interface. A stranger there is dropped; then rank 2 joins.
    int port = 0;
    auto lfd = tcp_listen("127.0.0.1", 0, &port);
    ASSERT_TRUE(lfd.is_ok());
    std::vector<pid_t> pids;
    auto start = [&](int r) { pids.push_back(fork_rank(r, 3, port, *lfd, 20.0, all_reduce_of_three)); };
    start(0);
    start(1);
    std::vector<std::string> found;
    for (int i = 0; i < 500 && found.empty(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        found = listening_addresses(pids[1]);
    }
    ASSERT_EQ(found.size(), 1u);
    EXPECT_EQ(found[0].substr(0, 8), "0100007F") << found[0];  // 127.0.0.1, not 00000000 (0.0.0.0)
    const int stranger = connect_to(std::stoi(found[0].substr(9), nullptr, 16));
    const char junk[32] = "SSH-2.0-OpenSSH_9.2\r\n";
    ASSERT_EQ(write(stranger, junk, sizeof junk), static_cast<ssize_t>(sizeof junk));
    start(2);
    close(*lfd);
    EXPECT_EQ(exit_codes(pids), (std::vector<int>{0, 0, 0}));
    close(stranger);
}

TEST(TcpCommunicator, AFailedRendezvousClosesItsSockets) {
    // A "rank 0" that accepts and hangs up: rank 1's rendezvous fails; it must leave no socket open.
    int port = 0;
    auto lfd = tcp_listen("127.0.0.1", 0, &port);
    ASSERT_TRUE(lfd.is_ok());
    const int before = open_fds();
    std::thread fake([&] {
        const int fd = accept(*lfd, nullptr, nullptr);
        if (fd >= 0) close(fd);
    });
    auto comm =
        tcp_connect({.rank = 1, .size = 2, .host = "127.0.0.1", .port = port, .comm = {.timeout_s = 5.0}});
    fake.join();
    EXPECT_FALSE(comm.is_ok());
    EXPECT_EQ(open_fds(), before);
    // Rank 0 refusing a rank of another size closes the connections it had taken too.
    int port0 = 0;
    auto lfd0 = tcp_listen("127.0.0.1", 0, &port0);
    ASSERT_TRUE(lfd0.is_ok());
    const int before0 = open_fds();
    std::thread joiner([&] {
        const int fd = connect_to(port0);
        const TcpHello hello{kTcpHelloMagic, 1, 5, 0, 0, {}};  // rank 1 of 5
        EXPECT_EQ(write(fd, &hello, sizeof hello), static_cast<ssize_t>(sizeof hello));
        TcpHello answer{};
        EXPECT_EQ(recv(fd, &answer, sizeof answer, MSG_WAITALL), static_cast<ssize_t>(sizeof answer));
        EXPECT_EQ(answer.size, 2);
        char byte = 0;
        EXPECT_LE(read(fd, &byte, 1), 0);  // rank 0 hung up
        close(fd);
    });
    auto root = tcp_connect({.rank = 0, .size = 2, .listen_fd = *lfd0, .comm = {.timeout_s = 5.0}});
    joiner.join();
    EXPECT_EQ(root.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(open_fds(), before0 - 1);  // the listener went too (tcp_connect owns it)
    close(*lfd);
}

// Two ranks with options `for_rank(r)` (host, port, listener filled in); each exits 0 when check(r, the
// rendezvous's status) holds.
std::vector<int> rendezvous_of_two(const std::function<TcpOptions(int)>& for_rank,
                                   const std::function<bool(int, const Status&)>& check) {
    int port = 0;
    auto lfd = tcp_listen("127.0.0.1", 0, &port);
    EXPECT_TRUE(lfd.is_ok());
    std::vector<pid_t> pids;
    for (int r = 0; r < 2; ++r) {
        const pid_t pid = fork();
        if (pid == 0) {
            if (r != 0) close(*lfd);
            TcpOptions o = for_rank(r);
            o.rank = r;
            o.size = 2;
            o.port = port;
            o.listen_fd = r == 0 ? *lfd : -1;
            auto comm = tcp_connect(o);
            const Status s = comm.is_ok() ? Status::ok() : comm.status();
            if (!s.is_ok()) std::fprintf(stderr, "rank %d: %s\n", r, s.to_string().c_str());
            _exit(check(r, s) ? 0 : 1);
        }
        pids.push_back(pid);
    }
    close(*lfd);
    return exit_codes(pids);
}

TEST(TcpCommunicator, RanksConfiguredDifferentlyAreRefusedNamingBoth) {
    const auto codes = rendezvous_of_two(
        [](int r) {
            TcpOptions o;
            o.comm.timeout_s = 10.0;
            o.config = r == 0 ? "world 2 (tp 1 x pp 2), kv auto" : "world 2 (tp 1 x pp 2), kv int8";
            return o;
        },
        [](int r, const Status& s) {
            // Both sides refuse at once (no watchdog), each naming both configurations.
            return s.code() == StatusCode::kInvalidArgument &&
                   s.message().find("{world 2 (tp 1 x pp 2), kv auto}") != std::string::npos &&
                   s.message().find("{world 2 (tp 1 x pp 2), kv int8}") != std::string::npos &&
                   s.message().find("configured differently") != std::string::npos && r >= 0;
        });
    EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

TEST(TcpCommunicator, ARankWithAnotherSecretIsAStranger) {
    const auto codes = rendezvous_of_two(
        [](int r) {
            TcpOptions o;
            o.comm.timeout_s = 1.0;
            o.secret = r == 0 ? "s3cret" : "other";
            return o;
        },
        [](int r, const Status& s) {
            if (r == 1)  // rank 0 hung up on it
                return s.code() == StatusCode::kUnavailable &&
                       s.message().find("VOLT_GROUP_SECRET") != std::string::npos;
            return s.code() == StatusCode::kUnavailable &&  // rank 0 waited for a rank of its group
                   s.message().find("ranks 1 to connect") != std::string::npos;
        });
    EXPECT_EQ(codes, (std::vector<int>{0, 0}));
    // The same secret on both: a group.
    const auto same = rendezvous_of_two(
        [](int) {
            TcpOptions o;
            o.comm.timeout_s = 10.0;
            o.secret = "s3cret";
            return o;
        },
        [](int, const Status& s) { return s.is_ok(); });
    EXPECT_EQ(same, (std::vector<int>{0, 0}));
}

TEST(TcpCommunicator, GroupSocketsProbeAnIdlePeer) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    set_group_socket_options(fd);
    auto get = [fd](int level, int name) {
        int v = -1;
        socklen_t len = sizeof v;
        getsockopt(fd, level, name, &v, &len);
        return v;
    };
    EXPECT_EQ(get(SOL_SOCKET, SO_KEEPALIVE), 1);
    EXPECT_EQ(get(IPPROTO_TCP, TCP_NODELAY), 1);
    EXPECT_EQ(get(IPPROTO_TCP, TCP_KEEPIDLE), kKeepaliveIdleS);
    EXPECT_EQ(get(IPPROTO_TCP, TCP_KEEPINTVL), kKeepaliveIntervalS);
    EXPECT_EQ(get(IPPROTO_TCP, TCP_KEEPCNT), kKeepaliveCount);
    close(fd);
}

}  // namespace
}  // namespace volt::cpu
