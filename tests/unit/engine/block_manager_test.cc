// BlockManager: ref counts, copy-on-write after a fork, sliding-window frees, and free + used = total
// with ref count = table references after every operation of a random workload.
#include "engine/block_manager.h"

#include <gtest/gtest.h>

#include <random>

namespace volt::engine {
namespace {

constexpr int64_t kBs = 4, kWindow = 8;
constexpr bool kBoth[2] = {true, true};

TEST(BlockManagerTest, SlidingGroupHoldsOnlyTheWindow) {
    const int64_t n[2] = {20, 20};
    BlockManager bm(kBs, n, kWindow, kBoth);
    SeqBlocks s;
    std::vector<BlockTableUpdate> up;
    std::vector<BlockCopy> cp;
    for (int64_t c = 0; c < 60; ++c) {
        ASSERT_TRUE(bm.can_append(s, c, 1));
        bm.append(0, &s, c, 1, &up, &cp);
        bm.free_outside_window(0, &s, c + 1, &up);
        const int64_t computed = c + 1;
        // Block j is needed iff it holds a position in [computed - window + 1, computed).
        for (int64_t j = 0; j < static_cast<int64_t>(s.table[1].size()); ++j) {
            const bool needed = (j + 1) * kBs > computed - kWindow + 1 && j * kBs < computed;
            EXPECT_EQ(s.table[1][j] >= 0, needed) << "computed " << computed << " block " << j;
        }
        EXPECT_EQ(static_cast<int64_t>(s.table[0].size()), (computed + kBs - 1) / kBs);
        ASSERT_TRUE(bm.check({&s}).is_ok());
    }
    EXPECT_TRUE(cp.empty());
    EXPECT_EQ(bm.pool(0).num_free(), 20 - 15);
    EXPECT_LE(bm.pool(1).num_total() - bm.pool(1).num_free(), kWindow / kBs + 1);
    bm.free(0, &s, &up);
    EXPECT_EQ(bm.pool(0).num_free(), 20);
    EXPECT_EQ(bm.pool(1).num_free(), 20);
}

TEST(BlockManagerTest, ForkSharesAndCopiesOnWrite) {
    const int64_t n[2] = {10, 10};
    BlockManager bm(kBs, n, kWindow, kBoth);
    SeqBlocks parent, child;
    std::vector<BlockTableUpdate> up;
    std::vector<BlockCopy> cp;
    bm.append(0, &parent, 0, 6, &up, &cp);  // positions 0..5: blocks 0 (full) and 1 (half)
    EXPECT_EQ(bm.pool(0).num_free(), 8);
    bm.fork(parent, 1, &child, &up);
    EXPECT_EQ(bm.pool(0).num_free(), 8);  // shared, nothing new
    EXPECT_EQ(bm.pool(0).refcount(parent.table[0][1]), 2);
    // The child writes position 6 into the shared half block: one new block per group and a copy.
    EXPECT_EQ(bm.blocks_needed(child, 6, 1, 0), 1);
    const int32_t shared = parent.table[0][1];
    bm.append(1, &child, 6, 1, &up, &cp);
    ASSERT_EQ(cp.size(), 2u);
    EXPECT_EQ(cp[0].group, 0);
    EXPECT_EQ(cp[0].src, shared);
    EXPECT_EQ(cp[0].dst, child.table[0][1]);
    EXPECT_NE(child.table[0][1], shared);
    EXPECT_EQ(child.table[0][0], parent.table[0][0]);  // the full block stays shared
    // The parent is now the only holder: it writes in place.
    EXPECT_EQ(bm.blocks_needed(parent, 6, 1, 0), 0);
    cp.clear();
    bm.append(0, &parent, 6, 1, &up, &cp);
    EXPECT_TRUE(cp.empty());
    EXPECT_EQ(parent.table[0][1], shared);
    EXPECT_TRUE(bm.check({&parent, &child}).is_ok());
    bm.free(0, &parent, &up);
    EXPECT_EQ(bm.pool(0).refcount(child.table[0][0]), 1);
    bm.free(1, &child, &up);
    EXPECT_EQ(bm.pool(0).num_free(), 10);
    EXPECT_TRUE(bm.check({}).is_ok());
}

TEST(BlockManagerTest, FreeListHoldsWhatStepsInFlightMayRead) {
    FreeList l(3);
    EXPECT_EQ(l.take(), 0);
    EXPECT_EQ(l.take(), 1);
    l.give(0);  // nothing in flight: free at once
    EXPECT_EQ(l.num_free(), 2);
    l.hold_until(5);  // step 5 submitted
    l.give(1);
    l.hold_until(6);  // step 6 submitted
    EXPECT_EQ(l.take(), 0);
    l.give(0);
    EXPECT_EQ(l.num_free(), 1);
    EXPECT_EQ(l.num_held(), 2);
    EXPECT_EQ(l.held_ids(), (std::vector<int32_t>{1, 0}));
    l.release_through(5);  // step 5 collected: 1 is free again, 0 waits for step 6
    EXPECT_EQ(l.free_ids(), (std::vector<int32_t>{2, 1}));
    EXPECT_EQ(l.held_ids(), (std::vector<int32_t>{0}));
    EXPECT_EQ(l.take(), 1);
    l.release_through(6);  // nothing in flight: later gives are free at once
    EXPECT_EQ(l.num_held(), 0);
    l.give(1);
    EXPECT_EQ(l.free_ids(), (std::vector<int32_t>{2, 0, 1}));
}

TEST(BlockManagerTest, BlocksFreedWithStepsInFlightAreHeldAndCounted) {
    const int64_t n[2] = {4, 4};
    BlockManager bm(kBs, n, kWindow, kBoth);
    SeqBlocks a, b;
    std::vector<BlockTableUpdate> up;
    std::vector<BlockCopy> cp;
    bm.append(0, &a, 0, 8, &up, &cp);  // 2 blocks per group
    bm.hold_frees(0);
    bm.free(0, &a, &up);
    EXPECT_EQ(bm.pool(0).num_free(), 2);
    EXPECT_EQ(bm.pool(0).num_held(), 2);
    ASSERT_TRUE(bm.check({&a}).is_ok());  // free + held + used = total
    EXPECT_FALSE(bm.can_append(b, 0, 12));
    EXPECT_TRUE(bm.can_append_after_release(b, 0, 12));
    bm.release_frees(0);
    EXPECT_TRUE(bm.can_append(b, 0, 12));
    EXPECT_TRUE(bm.check({&a, &b}).is_ok());
}

TEST(BlockManagerTest, RandomWorkloadKeepsInvariants) {
    const int64_t n[2] = {64, 40};
    BlockManager bm(kBs, n, kWindow, kBoth);
    std::mt19937 rng(3);
    struct Live {
        int64_t id;
        int64_t computed;
        SeqBlocks blocks;
    };
    std::vector<Live> live;
    int64_t next_id = 0;
    std::vector<BlockTableUpdate> up;
    std::vector<BlockCopy> cp;
    for (int op = 0; op < 3000; ++op) {
        const int kind = static_cast<int>(rng() % 10);
        if (kind < 5 && !live.empty()) {  // append a chunk
            Live& s = live[rng() % live.size()];
            const int64_t q = 1 + rng() % 9;
            if (bm.can_append(s.blocks, s.computed, q)) {
                bm.append(s.id, &s.blocks, s.computed, q, &up, &cp);
                s.computed += q;
                bm.free_outside_window(s.id, &s.blocks, s.computed, &up);
            }
        } else if (kind < 7 && !live.empty()) {  // fork
            const Live& p = live[rng() % live.size()];
            Live c{next_id++, p.computed, {}};
            bm.fork(p.blocks, c.id, &c.blocks, &up);
            live.push_back(std::move(c));
        } else if (kind < 9 && !live.empty()) {  // finish
            const size_t i = rng() % live.size();
            bm.free(live[i].id, &live[i].blocks, &up);
            live.erase(live.begin() + i);
        } else {
            live.push_back({next_id++, 0, {}});
        }
        std::vector<const SeqBlocks*> all;
        for (const auto& s : live) all.push_back(&s.blocks);
        const Status st = bm.check(all);
        ASSERT_TRUE(st.is_ok()) << "op " << op << ": " << st.to_string();
    }
}

}  // namespace
}  // namespace volt::engine
