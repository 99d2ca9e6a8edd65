// Writes safetensors files (https://github.com/huggingface/safetensors, "Format"): u64 little-endian
// header size N, N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end)}, "__metadata__": {..}}
// padded with spaces to a multiple of 8, then the payloads back to back in the order given. Files are
// written to a temp file in the same directory and renamed, so readers never see half a file.
// Test: tests/unit/io/safetensors_writer_test.cc (raw bytes checked against the format).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace volt::io {

// One tensor to write. `data` holds prod(shape) * dtype_size(dtype) bytes, row-major; it may be null
// only when that is 0. The caller keeps it alive during the call.
struct TensorToWrite {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    const void* data;
};

// One safetensors file at `path`. Payloads follow the header in the order of `tensors`, each starting
// where the previous one ended. `metadata` becomes "__metadata__" (omitted when empty).
// Errors: kInvalidArgument (empty, duplicate or reserved name, negative dimension, null data) naming
// the tensor; kInternal (cannot create/write/rename) naming the path and the OS error.
Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

// Writes `tensors` into `dir` (created if missing) as shards of about max_shard_bytes of payload each
// (a new shard starts when the next tensor would push the current one past the limit; a larger tensor
// gets a shard of its own), in the order given. Names follow the published gpt-oss repos, numbered
// from 0 with the last index after "of": model-00000-of-00002 ... model-00002-of-00002 for 3 shards.
// Each shard carries metadata {"format": "pt"}. Then model.safetensors.index.json:
// {"metadata": {"total_size": <payload bytes>}, "weight_map": {name: shard file name}}.
// Errors: as write_safetensors, plus kInvalidArgument for max_shard_bytes <= 0.
Status write_sharded_safetensors(const std::string& dir, const std::vector<TensorToWrite>& tensors,
                                 int64_t max_shard_bytes);

// The published shard name: shard_file_name(1, 3) == "model-00001-of-00002.safetensors".
std::string shard_file_name(int index, int num_shards);

}  // namespace volt::io
