#include "model/kv_store.h"

#include <algorithm>

#include "core/check.h"

namespace volt::model {

namespace {
int64_t element_bytes(ops::Format f) {
    VOLT_CHECK(f == ops::Format::kF32 || f == ops::Format::kF16) << "KV cache format " << ops::format_name(f);
    return f == ops::Format::kF32 ? 4 : 2;
}
}  // namespace

Result<KvStore> KvStore::create(ops::Backend& backend, const GptOssConfig& c, int64_t block_size,
                                const int64_t num_blocks[ops::kNumKvGroups], ops::Format format,
                                int64_t layer_begin, int64_t layer_end) {
    KvStore s;
    s.block_size_ = block_size;
    s.format_ = format;
    s.block_bytes_ = block_size * c.kv_dim() * element_bytes(format);
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        if (l < layer_begin || (layer_end >= 0 && l >= layer_end)) {
            s.layers_.push_back({format, nullptr, nullptr, 0, block_size});
            continue;
        }
        const int64_t n = num_blocks[kv_group_of(c, l)];
        const int64_t bytes = std::max<int64_t>(n * s.block_bytes_, 1);
        VOLT_ASSIGN_OR_RETURN(ops::Buffer k, backend.alloc(bytes));
        VOLT_ASSIGN_OR_RETURN(ops::Buffer v, backend.alloc(bytes));
        s.layers_.push_back({format, k.data(), v.data(), n, block_size});
        s.buffers_.push_back(std::move(k));
        s.buffers_.push_back(std::move(v));
    }
    return s;
}

int64_t KvStore::bytes_per_block(const GptOssConfig& c, int64_t block_size, int g, ops::Format format) {
    int64_t layers = 0;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) layers += kv_group_of(c, l) == g ? 1 : 0;
    return layers * 2 * block_size * c.kv_dim() * element_bytes(format);
}

}  // namespace volt::model
