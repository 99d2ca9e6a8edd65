// Paged KV blocks of the two KV groups (DESIGN.md "KV cache"): per group a pool of ref-counted block
// ids and, per sequence, a block table (logical block j holds positions [j * block_size, (j+1) *
// block_size)). Sliding-window tables free the blocks lying wholly before (computed - window + 1) after
// every step (entries become -1). Blocks shared after a fork (n > 1) are copied on write. Every table
// change is logged as a BlockTableUpdate for the executor, naming the sequence's seq_slot. With an
// asynchronous executor (engine/executor.h) a block freed while steps are in flight may still be read by
// them: it is held back (FreeList's fence) and returns to the free list only when the last step submitted
// before the free has been collected. KV swap (--preemption-mode swap): per group a host pool of block ids
// too; swap_out moves every live block of a preempted sequence to host blocks (its tables then name host
// ids) and swap_in brings them back into fresh device blocks, logged as BlockSwaps for the executor. A
// block shared after a fork is copied out like the others (the sibling keeps the device block), so the
// sequence comes back with private copies. Tests: tests/unit/engine/block_manager_test.cc.
#pragma once

#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "core/status.h"
#include "engine/executor.h"

namespace volt::engine {

// Ids [0, n) on a LIFO free list (a fresh list hands out 0, 1, 2, ...: deterministic), with a fence for
// asynchronous executors: after hold_until(step), an id given back is held until release_through(s) with
// s >= step, because the steps submitted so far may still read what it names. Used for KV blocks and
// seq_slots.
class FreeList {
  public:
    explicit FreeList(int64_t n);
    int64_t num_free() const { return static_cast<int64_t>(free_.size()); }  // can be taken now
    int64_t num_held() const { return static_cast<int64_t>(held_.size()); }  // given back, not yet free
    int32_t take();                                                          // precondition: num_free() > 0
    void give(int32_t id);  // free at once, or held under the fence in force
    // Step `step` was submitted: ids given back from now on wait for it (fences only grow).
    void hold_until(int64_t step);
    // Every step up to `step` was collected: ids held for them are free again (most recently given back
    // on top). When `step` is the fence, nothing is in flight and later gives are free at once.
    void release_through(int64_t step);
    const std::vector<int32_t>& free_ids() const { return free_; }
    std::vector<int32_t> held_ids() const;

  private:
    std::vector<int32_t> free_;
    std::deque<std::pair<int64_t, int32_t>> held_;  // (fence, id), fences non-decreasing
    int64_t fence_ = -1;                            // -1: no step in flight
};

// One group's pool: ids [0, num_blocks) on a FreeList, a ref count per id.
class BlockPool {
  public:
    explicit BlockPool(int64_t num_blocks);
    int64_t num_total() const { return static_cast<int64_t>(ref_.size()); }
    int64_t num_free() const { return list_.num_free(); }
    int64_t num_held() const { return list_.num_held(); }  // ref count 0, still read by a step in flight
    int32_t allocate();                                    // precondition: num_free() > 0
    void incref(int32_t b);
    void decref(int32_t b);  // given back to the free list at 0 (held while steps are in flight)
    int32_t refcount(int32_t b) const { return ref_[b]; }
    FreeList& list() { return list_; }
    const FreeList& list() const { return list_; }

  private:
    std::vector<int32_t> ref_;
    FreeList list_;
};

// The block tables of one sequence.
struct SeqBlocks {
    std::vector<int32_t> table[kNumKvGroups];
    int64_t sliding_freed = 0;  // sliding-group entries [0, sliding_freed) are -1 (freed)
    bool swapped = false;       // swapped out: the entries name host blocks (BlockManager::host_pool)
};

class BlockManager {
  public:
    // window: keys per query of the sliding group (used only when has_group[1]). num_host_blocks: the
    // host swap pool of each group (null: none).
    BlockManager(int64_t block_size, const int64_t num_blocks[kNumKvGroups], int64_t window,
                 const bool has_group[kNumKvGroups], const int64_t* num_host_blocks = nullptr);

    int64_t block_size() const { return block_size_; }
    bool has_group(int g) const { return has_group_[g]; }
    const BlockPool& pool(int g) const { return pools_[g]; }
    const BlockPool& host_pool(int g) const { return host_pools_[g]; }

    // New blocks group g needs so that positions [computed, computed + q) can be written (fresh blocks
    // and copy-on-write of shared ones).
    int64_t blocks_needed(const SeqBlocks& s, int64_t computed, int64_t q, int g) const;
    bool can_append(const SeqBlocks& s, int64_t computed, int64_t q) const;
    // can_append once the blocks held for steps in flight are free again.
    bool can_append_after_release(const SeqBlocks& s, int64_t computed, int64_t q) const;
    // Allocates for positions [computed, computed + q); precondition can_append.
    void append(int32_t slot, SeqBlocks* s, int64_t computed, int64_t q, std::vector<BlockTableUpdate>* up,
                std::vector<BlockCopy>* copies);
    // After a step: frees sliding blocks wholly before computed - window + 1.
    void free_outside_window(int32_t slot, SeqBlocks* s, int64_t computed, std::vector<BlockTableUpdate>* up);
    // child shares every block of parent (ref counts + 1); logs the child's table.
    void fork(const SeqBlocks& parent, int32_t child_slot, SeqBlocks* child,
              std::vector<BlockTableUpdate>* up);
    // Drops every block of the sequence and its tables (host blocks when swapped: no table update then,
    // the slot's tables were dropped at swap_out).
    void free(int32_t slot, SeqBlocks* s, std::vector<BlockTableUpdate>* up);

    // The host pools have a free block for every live block of s (both groups).
    bool can_swap_out(const SeqBlocks& s) const;
    // Moves every live block of s to a fresh host block (one BlockSwap each into *swaps), drops the device
    // blocks (held while steps in flight may read them) and slot's tables; precondition can_swap_out.
    void swap_out(int32_t slot, SeqBlocks* s, std::vector<BlockTableUpdate>* up,
                  std::vector<BlockSwap>* swaps);
    // A swapped s can come back and then append positions [computed, computed + q).
    bool can_swap_in(const SeqBlocks& s, int64_t computed, int64_t q) const;
    // Brings every host block of s back into a fresh device block (BlockSwaps into *swaps, the table
    // entries logged for slot) and frees the host blocks; precondition can_swap_in.
    void swap_in(int32_t slot, SeqBlocks* s, std::vector<BlockTableUpdate>* up,
                 std::vector<BlockSwap>* swaps);

    // Steps in flight (FreeList::hold_until / release_through on both pools).
    void hold_frees(int64_t step);
    void release_frees(int64_t step);

    // Free + held + used = total per group (no id twice), held and free blocks have ref count 0, and
    // every ref count equals the number of table entries naming the block; the same for the host pools
    // over the swapped sequences' tables, whose host blocks are never shared. kInternal with the first
    // violation.
    Status check(const std::vector<const SeqBlocks*>& all) const;

  private:
    int64_t block_size_;
    int64_t window_;
    bool has_group_[kNumKvGroups];
    std::vector<BlockPool> pools_;
    std::vector<BlockPool> host_pools_;
};

}  // namespace volt::engine
