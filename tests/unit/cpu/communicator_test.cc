// The CPU communicators (cpu/thread_communicator.h): the all-reduce is the rank-order sum, computed here
// independently in the test, bitwise equal on every rank; gather concatenates in rank order; send/recv
// carry bytes; ranks that issue different collectives fail with a message naming both; a rank that never
// arrives trips the watchdog (kUnavailable naming the missing rank) and every later call fails at once.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "cpu/thread_communicator.h"

namespace volt::cpu {
namespace {

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

std::vector<float> random_values(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(-1e3f, 1e3f);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

TEST(ThreadCommunicator, AllReduceIsTheRankOrderSumOnEveryRank) {
    for (int n : {1, 2, 3, 4, 8}) {
        const int64_t count = 1037;  // not a multiple of any rank count: uneven slices
        std::vector<std::vector<float>> in(n), out(n);
        for (int r = 0; r < n; ++r) in[r] = out[r] = random_values(count, 100 + r);
        std::vector<float> want(count);
        for (int64_t i = 0; i < count; ++i) {
            float s = in[0][i];
            for (int r = 1; r < n; ++r) s += in[r][i];
            want[i] = s;
        }
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

}  // namespace
}  // namespace volt::cpu
