// The host side of the CUDA communicators, without a GPU (cuda/host_rendezvous.h, cuda/nccl_library.h):
// the rendezvous meets many rounds in order on threads, its watchdog fails a rank whose peer never comes
// (kUnavailable naming the collective and the missing rank; sticky), a tag mismatch fails every rank
// naming both tags, a point-to-point tag mismatch is caught by the receiver; NCCL is loaded by soname at
// run time and its absence is a clear error naming the soname and what to do.
#include <gtest/gtest.h>

#include <thread>

#include "cuda/host_rendezvous.h"
#include "cuda/nccl_library.h"

namespace volt::cuda {
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

TEST(NcclLibrary, AbsentSonameIsAClearError) {
    auto n = NcclLibrary::open("libvolt-absent-nccl.so.2");
    ASSERT_FALSE(n.is_ok());
    EXPECT_EQ(n.status().code(), StatusCode::kFailedPrecondition);
    const std::string& m = n.status().message();
    EXPECT_EQ(m.rfind("cannot load libvolt-absent-nccl.so.2 (", 0), 0u) << m;
    EXPECT_NE(
        m.find("tensor / pipeline parallelism across GPUs needs NCCL 2 (libnccl.so.2): install libnccl2, "
               "add its directory to LD_LIBRARY_PATH, or use --tp-same-device"),
        std::string::npos)
        << m;
}

TEST(NcclLibrary, ALibraryWithoutNcclsSymbolsIsRefusedNamingOne) {
    auto n = NcclLibrary::open("libm.so.6");
    ASSERT_FALSE(n.is_ok());
    EXPECT_EQ(n.status().message(),
              "libm.so.6 has no ncclGetVersion: NCCL 2.7 or later is needed (send / recv)");
}

// Where libnccl.so.2 is installed (the CUDA 13 toolkit's here), it loads without a GPU and reports its
// version; elsewhere the test says why it skips.
TEST(NcclLibrary, LoadsTheInstalledNccl) {
    auto n = NcclLibrary::open();
    if (!n.is_ok()) GTEST_SKIP() << n.status().to_string();
    EXPECT_GE((*n)->version, 2700);
    EXPECT_TRUE((*n)->check(kNcclSuccess, "x").is_ok());
    const Status bad = (*n)->check(kNcclInvalidArgument, "ncclAllGather");
    EXPECT_EQ(bad.code(), StatusCode::kInternal);
    EXPECT_EQ(bad.message().rfind("ncclAllGather: ", 0), 0u) << bad.message();
}

}  // namespace
}  // namespace volt::cuda
