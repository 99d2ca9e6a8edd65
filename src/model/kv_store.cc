#include "model/kv_store.h"

#include <algorithm>
#include <string>

#include "core/check.h"

namespace volt::model {

namespace {
int64_t element_bytes(ops::Format f) {
    VOLT_CHECK(f == ops::Format::kF32 || f == ops::Format::kF16 || f == ops::Format::kInt8)
        << "KV cache format " << ops::format_name(f);
    return f == ops::Format::kF32 ? 4 : f == ops::Format::kF16 ? 2 : 1;
}
int64_t scale_bytes(const GptOssConfig& c, int64_t block_size, ops::Format f) {
    return f == ops::Format::kInt8 ? block_size * c.num_key_value_heads * int64_t{sizeof(float)} : 0;
}
}  // namespace

int64_t KvStore::pool_block_bytes(const GptOssConfig& c, int64_t block_size, ops::Format format) {
    return block_size * c.kv_dim() * element_bytes(format) + scale_bytes(c, block_size, format);
}

Result<KvStore> KvStore::create(ops::Backend& backend, const GptOssConfig& c, int64_t block_size,
                                const int64_t num_blocks[ops::kNumKvGroups], ops::Format format,
                                int64_t layer_begin, int64_t layer_end) {
    if (!backend.supports_kv_format(format))
        return unimplemented(std::string("the ") + backend.name() + " backend has no " +
                             ops::format_name(format) + " KV cache (--kv-cache-dtype " +
                             ops::format_name(format) + " runs on --device cpu and cuda)");
    KvStore s;
    s.block_size_ = block_size;
    s.format_ = format;
    s.block_bytes_ = pool_block_bytes(c, block_size, format);
    s.scale_block_bytes_ = scale_bytes(c, block_size, format);
    const int64_t code_bytes = s.block_bytes_ - s.scale_block_bytes_;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        if (l < layer_begin || (layer_end >= 0 && l >= layer_end)) {
            s.layers_.push_back({format, nullptr, nullptr, 0, block_size});
            continue;
        }
        const int64_t n = num_blocks[kv_group_of(c, l)];
        const int64_t bytes = std::max<int64_t>(n * code_bytes, 1);
        VOLT_ASSIGN_OR_RETURN(ops::Buffer k, backend.alloc(bytes));
        VOLT_ASSIGN_OR_RETURN(ops::Buffer v, backend.alloc(bytes));
        ops::KvLayer layer{format, k.data(), v.data(), n, block_size};
        s.buffers_.push_back(std::move(k));
        s.buffers_.push_back(std::move(v));
        if (s.scale_block_bytes_ > 0) {
            const int64_t sb = std::max<int64_t>(n * s.scale_block_bytes_, 1);
            VOLT_ASSIGN_OR_RETURN(ops::Buffer ks, backend.alloc(sb));
            VOLT_ASSIGN_OR_RETURN(ops::Buffer vs, backend.alloc(sb));
            layer.k_scales = ks.as<float>();
            layer.v_scales = vs.as<float>();
            s.buffers_.push_back(std::move(ks));
            s.buffers_.push_back(std::move(vs));
        }
        s.layers_.push_back(layer);
    }
    return s;
}

int64_t KvStore::bytes_per_block(const GptOssConfig& c, int64_t block_size, int g, ops::Format format) {
    int64_t layers = 0;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) layers += kv_group_of(c, l) == g ? 1 : 0;
    return layers * 2 * pool_block_bytes(c, block_size, format);
}

}  // namespace volt::model
