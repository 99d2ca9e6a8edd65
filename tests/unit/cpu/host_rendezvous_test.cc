// The rendezvous of thread ranks (cpu/host_rendezvous.h; the thread communicator's and the CUDA
// communicators' host side): it meets many rounds in order on threads, its watchdog fails a rank whose
// peer never comes (kUnavailable naming the collective and the missing rank; sticky), a tag mismatch fails
// every rank naming both tags, a point-to-point tag mismatch is caught by the receiver, and the last
// arriver's hook runs once per round before anyone leaves.
#include "cpu/host_rendezvous.h"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <thread>
#include <vector>

namespace volt::cpu {
namespace {

using ops::CollectiveKind;
using ops::CollectiveTag;

std::vector<Status> on_threads(int n, const std::function<Status(int)>& fn) {
    std::vector<Status> out(n);
    std::vector<std::thread> t;
    for (int r = 0; r < n; ++r) t.emplace_back([&, r] { out[r] = fn(r); });
    for (auto& x : t) x.join();
    return out;
}

TEST(HostRendezvous, RanksSeeEachOthersPostsEveryRound) {
    const int n = 4;
    HostRendezvous h(n, "test", {10.0, true});
    std::vector<int> value(n);
    std::vector<int> sums(n, 0);
    const auto st = on_threads(n, [&](int r) {
        for (uint64_t round = 0; round < 200; ++round) {
            value[r] = static_cast<int>(round) * 10 + r;
            const CollectiveTag tag{CollectiveKind::kAllReduceSum, round, 0, 64};
            VOLT_RETURN_IF_ERROR(h.meet(r, {tag, &value[r]}));
            for (int q = 0; q < n; ++q) sums[r] += *static_cast<const int*>(h.post(q).data);
            VOLT_RETURN_IF_ERROR(h.finish(r, tag));
        }
        return Status::ok();
    });
    for (const Status& s : st) ASSERT_TRUE(s.is_ok()) << s.to_string();
    // sum over rounds of (4 * 10 * round + 0 + 1 + 2 + 3)
    const int want = 40 * (199 * 200 / 2) + 6 * 200;
    for (int r = 0; r < n; ++r) EXPECT_EQ(sums[r], want) << "rank " << r;
}

TEST(HostRendezvous, WatchdogFailsTheWaitingRankNamingTheMissingOneAndStaysFailed) {
    HostRendezvous h(3, "test", {0.2, true});
    const CollectiveTag tag{CollectiveKind::kGather, 7, 2, 400};
    const auto st = on_threads(2, [&](int r) { return h.meet(r, {tag, nullptr}); });  // rank 2 never comes
    for (const Status& s : st) {
        EXPECT_EQ(s.code(), StatusCode::kUnavailable);
        EXPECT_EQ(s.message().rfind("collective watchdog: rank ", 0), 0u) << s.message();
        EXPECT_NE(s.message().find("waited 0.2 s in gather #2 of step 7 (400 bytes) for ranks 2"),
                  std::string::npos)
            << s.message();
    }
    EXPECT_EQ(h.meet(2, {tag, nullptr}).message(), st[0].message()) << "sticky";
    EXPECT_EQ(h.failed().message(), st[0].message());
}

TEST(HostRendezvous, DifferentTagsFailEveryRank) {
    HostRendezvous h(2, "test", {10.0, true});
    const auto st = on_threads(2, [&](int r) {
        return h.meet(r, {{CollectiveKind::kAllReduceSum, 1, 3, r == 0 ? 64 : 128}, nullptr});
    });
    for (const Status& s : st)
        EXPECT_EQ(
            s.message(),
            "collective order differs across ranks: rank 0 issued all_reduce_sum #3 of step 1 (64 bytes), "
            "rank 1 issued all_reduce_sum #3 of step 1 (128 bytes)");
}

TEST(HostRendezvous, MailboxChecksTheSendersTagAndFailsExternally) {
    HostRendezvous h(2, "test", {10.0, true});
    const CollectiveTag sent{CollectiveKind::kSend, 4, 0, 1024}, expected{CollectiveKind::kSend, 4, 0, 2048};
    ASSERT_TRUE(h.wait_mailbox(0, 0, 1, true, sent).is_ok());
    h.set_mailbox(0, 1, true, sent);
    const Status s = h.wait_mailbox(1, 0, 1, false, expected);
    EXPECT_EQ(s.code(), StatusCode::kInternal);
    EXPECT_EQ(
        s.message(),
        "collective order differs across ranks: rank 1 expected send #0 of step 4 (2048 bytes) from rank 0, "
        "which sent send #0 of step 4 (1024 bytes)");

    HostRendezvous g(2, "test", {100.0, true});
    std::thread failer(
        [&] { g.fail(Status(StatusCode::kUnavailable, "rank 1 failed outside a collective")); });
    const Status waited = g.meet(0, {{}, nullptr});  // would wait 100 s for rank 1 without the failure
    failer.join();
    EXPECT_EQ(waited.message(), "rank 1 failed outside a collective");
}

TEST(HostRendezvous, TheLastArriversHookRunsOncePerRoundBeforeAnyRankLeaves) {
    const int n = 3;
    HostRendezvous h(n, "test", {10.0, true});
    int hooks = 0;  // written under the group's lock by the hook, read after meet returns
    std::vector<int> seen(n, 0);
    const auto st = on_threads(n, [&](int r) {
        for (uint64_t round = 0; round < 50; ++round) {
            const CollectiveTag tag{CollectiveKind::kAllReduceSum, round, 0, 4};
            VOLT_RETURN_IF_ERROR(h.meet(r, {tag, nullptr}, [&] { ++hooks; }));
            seen[r] += hooks == static_cast<int>(round) + 1;
            VOLT_RETURN_IF_ERROR(h.finish(r, tag));
        }
        return Status::ok();
    });
    for (const Status& s : st) ASSERT_TRUE(s.is_ok()) << s.to_string();
    EXPECT_EQ(hooks, 50);
    for (int r = 0; r < n; ++r) EXPECT_EQ(seen[r], 50) << "rank " << r;
}

}  // namespace
}  // namespace volt::cpu
