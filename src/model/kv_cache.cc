#include "model/kv_cache.h"

#include <algorithm>

#include "core/check.h"

namespace volt::model {

KvCache::KvCache(const GptOssConfig& c, int64_t block_size, const int64_t num_blocks[kNumKvGroups])
    : block_size_(block_size), num_blocks_{num_blocks[0], num_blocks[1]} {
    const int64_t row = c.kv_dim();
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        const int64_t n = num_blocks_[kv_group_of(c, l)] * block_size * row;
        auto alloc = [n] {
            auto* p =
                static_cast<float*>(std::calloc(static_cast<size_t>(std::max<int64_t>(n, 1)), sizeof(float)));
            VOLT_CHECK(p != nullptr) << "cannot allocate a KV pool of " << n * sizeof(float) << " bytes";
            return p;
        };
        k_.emplace_back(alloc());
        v_.emplace_back(alloc());
    }
}

int64_t KvCache::bytes_per_block(const GptOssConfig& c, int64_t block_size, KvGroup g) {
    int64_t layers = 0;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) layers += kv_group_of(c, l) == g ? 1 : 0;
    return layers * 2 * block_size * c.kv_dim() * static_cast<int64_t>(sizeof(float));
}

}  // namespace volt::model
