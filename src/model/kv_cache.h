// The paged KV cache of the CPU backend: for every layer a K and a V pool of f32
// [num_blocks, block_size, num_kv_heads, head_dim]. Layers belong to one of two groups (full attention,
// sliding window) whose block ids are allocated independently (engine/block_manager), so each group
// has its own block count. Slot s of a pool = block * block_size + offset.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "model/config.h"

namespace volt::model {

enum KvGroup : int { kFullGroup = 0, kSlidingGroup = 1, kNumKvGroups = 2 };

inline KvGroup kv_group_of(const GptOssConfig& c, int64_t layer) {
    return c.is_sliding(layer) ? kSlidingGroup : kFullGroup;
}

class KvCache {
  public:
    // num_blocks[g]: blocks of group g (0 when the model has no layer of that group).
    KvCache(const GptOssConfig& c, int64_t block_size, const int64_t num_blocks[kNumKvGroups]);

    int64_t block_size() const { return block_size_; }
    int64_t num_blocks(KvGroup g) const { return num_blocks_[g]; }
    float* k(int64_t layer) { return k_[layer].get(); }
    float* v(int64_t layer) { return v_[layer].get(); }
    // Bytes of one block of one group, summed over the group's layers (K and V).
    static int64_t bytes_per_block(const GptOssConfig& c, int64_t block_size, KvGroup g);

  private:
    int64_t block_size_;
    int64_t num_blocks_[kNumKvGroups];
    // calloc'd: large pools come from fresh zero pages the kernel maps on first write, so a big KV
    // budget costs no time or resident memory until it is used.
    struct Free {
        void operator()(float* p) const { std::free(p); }
    };
    std::vector<std::unique_ptr<float[], Free>> k_, v_;  // [layer][num_blocks * block_size * nkv * d]
};

}  // namespace volt::model
