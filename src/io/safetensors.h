// Memory-mapped safetensors reader: one file (SafetensorsFile) or a checkpoint directory
// (SafetensorsCheckpoint: shards named by model.safetensors.index.json, or model.safetensors, or every
// *.safetensors at the top level). Headers are validated in full before any tensor is handed out.
// Format: https://github.com/huggingface/safetensors#format. Writer: safetensors_writer.h.
// Tests: tests/unit/io/safetensors_test.cc.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace volt::io {

// One tensor of a mapped file. `data` points into the mapping (valid while the file lives);
// `nbytes` = prod(shape) * dtype_size(dtype). Alignment is whatever the file gives: 8 + header
// size + data_offsets[0] (files written by the safetensors library and ours keep it 8-aligned).
struct TensorInfo {
    std::string name;
    DType dtype = DType::kU8;
    std::vector<int64_t> shape;
    const uint8_t* data = nullptr;
    int64_t nbytes = 0;
    int64_t file_offset = 0;  // byte offset of the payload from the start of the file

    int64_t numel() const;
    std::string shape_string() const;  // "[2, 3]"
};

// "[2, 3]"; "[]" for a scalar.
std::string shape_to_string(const std::vector<int64_t>& shape);

class SafetensorsFile {
  public:
    // Maps `path` read-only and validates: file at least 8 bytes; header size within the file; header
    // is a JSON object whose entries (other than "__metadata__", a string -> string map) each have a
    // known dtype name, a shape of non-negative integers, and data_offsets [begin, end] with
    // end - begin == prod(shape) * dtype size; payloads cover the data section exactly, starting at 0,
    // contiguous and non-overlapping. Errors name the path and, where one is at fault, the tensor:
    // kNotFound (no such file), kDataLoss (truncated, bad header, bad offsets), kInvalidArgument
    // (unknown dtype), kInternal (open/mmap failed).
    static Result<std::unique_ptr<SafetensorsFile>> open(const std::string& path);
    ~SafetensorsFile();
    SafetensorsFile(const SafetensorsFile&) = delete;
    SafetensorsFile& operator=(const SafetensorsFile&) = delete;

    const std::string& path() const { return path_; }
    int64_t file_size() const { return size_; }
    // Tensors in payload order.
    const std::vector<TensorInfo>& tensors() const { return tensors_; }
    // Null when absent.
    const TensorInfo* find(std::string_view name) const;
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    // Asks the kernel to read [offset, offset + n) ahead (madvise WILLNEED); best effort.
    void prefetch(int64_t offset, int64_t n) const;

  private:
    SafetensorsFile() = default;
    Status parse_header();

    std::string path_;
    const uint8_t* base_ = nullptr;  // the mapping, size_ bytes
    int64_t size_ = 0;
    std::vector<TensorInfo> tensors_;
    std::unordered_map<std::string, size_t> by_name_;
    std::map<std::string, std::string> metadata_;
};

// A model directory's tensors, wherever they are stored.
class SafetensorsCheckpoint {
  public:
    // `path` is a directory or a single .safetensors file. A directory is read as:
    //  1. model.safetensors.index.json present: exactly the shard files its weight_map names (paths
    //     relative to the directory; absolute paths and ".." are refused). A named shard that does not
    //     exist is kNotFound naming the shard and the index; a tensor the index maps to a shard that
    //     does not hold it is kDataLoss.
    //  2. else model.safetensors.
    //  3. else every *.safetensors directly in the directory (sorted by name). Sub-directories such as
    //     original/ and metal/ are never read.
    // A tensor name found in two files is kDataLoss naming both. No file at all: kNotFound.
    static Result<std::unique_ptr<SafetensorsCheckpoint>> open(const std::string& path);

    const std::string& path() const { return path_; }
    const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
    // The tensor, or null; `file` (if given) receives the file that holds it.
    const TensorInfo* find(std::string_view name, const SafetensorsFile** file = nullptr) const;
    // All tensor names, sorted.
    std::vector<std::string> tensor_names() const;
    // Sum of payload bytes over all files.
    int64_t total_bytes() const;

  private:
    Status add_file(std::unique_ptr<SafetensorsFile> file);

    std::string path_;
    std::vector<std::unique_ptr<SafetensorsFile>> files_;
    std::unordered_map<std::string, std::pair<size_t, const TensorInfo*>> by_name_;
};

}  // namespace volt::io
