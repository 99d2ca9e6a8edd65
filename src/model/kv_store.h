// The paged KV cache of a model in a backend's memory: for every layer a K and a V pool
// [num_blocks, block_size, nkv, d] of f32 or f16, or of int8 codes with an f32 scale pool [num_blocks,
// block_size, nkv] each (ops::KvLayer, docs/quantization.md "KV cache"). Layers belong to one of two KV
// groups (full attention, sliding window) whose block ids are allocated independently
// (engine/block_manager.h), so each group has its own block count. The forward pass reads it through
// ops::KvLayer views.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"
#include "ops/ops.h"

namespace volt::model {

class KvStore {
  public:
    // num_blocks[g]: blocks of group g (0 when the model has no layer of that group). Errors: the
    // backend's allocation failure; kUnimplemented naming --kv-cache-dtype when the backend's ops do not
    // handle `format` (ops::Backend::supports_kv_format).
    // Only layers [layer_begin, layer_end) get pools (a pipeline stage's; layer_end -1: every layer);
    // the others are empty views.
    static Result<KvStore> create(ops::Backend& backend, const GptOssConfig& c, int64_t block_size,
                                  const int64_t num_blocks[ops::kNumKvGroups], ops::Format format,
                                  int64_t layer_begin = 0, int64_t layer_end = -1);

    int64_t block_size() const { return block_size_; }
    ops::Format format() const { return format_; }
    const std::vector<ops::KvLayer>& layers() const { return layers_; }
    // Bytes of one block of one pool (K or V of one layer), its scales included (kInt8).
    int64_t block_bytes() const { return block_bytes_; }
    // kInt8: the scales' part of block_bytes() (block_size * nkv * 4); 0 for f32 and f16.
    int64_t scale_block_bytes() const { return scale_block_bytes_; }
    // Bytes of one block of one pool: block_size * nkv * d * element size (f32 4, f16 2, int8 1), plus
    // block_size * nkv * 4 for the scales of kInt8. Checks that the format is one of the three.
    static int64_t pool_block_bytes(const GptOssConfig& c, int64_t block_size, ops::Format format);
    // Bytes of one block of group g, summed over the group's layers (K and V): what memory planning and
    // the --max-model-len default divide the KV budget by.
    static int64_t bytes_per_block(const GptOssConfig& c, int64_t block_size, int g, ops::Format format);

  private:
    int64_t block_size_ = 0, block_bytes_ = 0, scale_block_bytes_ = 0;
    ops::Format format_ = ops::Format::kF32;
    std::vector<ops::KvLayer> layers_;
    std::vector<ops::Buffer> buffers_;
};

}  // namespace volt::model
