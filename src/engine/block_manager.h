// Paged KV blocks of the two KV groups (DESIGN.md "KV cache"): per group a pool of ref-counted block
// ids and, per sequence, a block table (logical block j holds positions [j * block_size, (j+1) *
// block_size)). Sliding-window tables free the blocks lying wholly before (computed - window + 1) after
// every step (entries become -1). Blocks shared after a fork (n > 1) are copied on write. Every table
// change is logged as a BlockTableUpdate for the executor, naming the sequence's seq_slot. Tests:
// tests/unit/engine/block_manager_test.cc.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "engine/executor.h"

namespace volt::engine {

// One group's pool: ids [0, num_blocks), a LIFO free list (deterministic), a ref count per id.
class BlockPool {
  public:
    explicit BlockPool(int64_t num_blocks);
    int64_t num_total() const { return static_cast<int64_t>(ref_.size()); }
    int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
    int32_t allocate();  // precondition: num_free() > 0
    void incref(int32_t b);
    void decref(int32_t b);  // back to the free list at 0
    int32_t refcount(int32_t b) const { return ref_[b]; }

  private:
    std::vector<int32_t> ref_;
    std::vector<int32_t> free_;
};

// The block tables of one sequence.
struct SeqBlocks {
    std::vector<int32_t> table[kNumKvGroups];
    int64_t sliding_freed = 0;  // sliding-group entries [0, sliding_freed) are -1 (freed)
};

class BlockManager {
  public:
    // window: keys per query of the sliding group (used only when has_group[1]).
    BlockManager(int64_t block_size, const int64_t num_blocks[kNumKvGroups], int64_t window,
                 const bool has_group[kNumKvGroups]);

    int64_t block_size() const { return block_size_; }
    bool has_group(int g) const { return has_group_[g]; }
    const BlockPool& pool(int g) const { return pools_[g]; }

    // New blocks group g needs so that positions [computed, computed + q) can be written (fresh blocks
    // and copy-on-write of shared ones).
    int64_t blocks_needed(const SeqBlocks& s, int64_t computed, int64_t q, int g) const;
    bool can_append(const SeqBlocks& s, int64_t computed, int64_t q) const;
    // Allocates for positions [computed, computed + q); precondition can_append.
    void append(int32_t slot, SeqBlocks* s, int64_t computed, int64_t q, std::vector<BlockTableUpdate>* up,
                std::vector<BlockCopy>* copies);
    // After a step: frees sliding blocks wholly before computed - window + 1.
    void free_outside_window(int32_t slot, SeqBlocks* s, int64_t computed, std::vector<BlockTableUpdate>* up);
    // child shares every block of parent (ref counts + 1); logs the child's table.
    void fork(const SeqBlocks& parent, int32_t child_slot, SeqBlocks* child,
              std::vector<BlockTableUpdate>* up);
    // Drops every block of the sequence and its tables.
    void free(int32_t slot, SeqBlocks* s, std::vector<BlockTableUpdate>* up);

    // Free + used = total per group, and every ref count equals the number of table entries naming the
    // block. kInternal with the first violation.
    Status check(const std::vector<const SeqBlocks*>& all) const;

  private:
    int64_t block_size_;
    int64_t window_;
    bool has_group_[kNumKvGroups];
    std::vector<BlockPool> pools_;
};

}  // namespace volt::engine
