// NumPy .npy files (format version 1.0) of little-endian float32 or int32 arrays in C order:
// the exchange format of `voltllm logits` and of the golden data made with transformers.
// Spec: numpy.lib.format. Test: tests/unit/core/npy_test.cc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace volt {

struct NpyArray {
    std::string dtype;  // "<f4" or "<i4"
    std::vector<int64_t> shape;
    std::vector<uint8_t> data;  // raw little-endian payload
    const float* f32() const { return reinterpret_cast<const float*>(data.data()); }
    int64_t numel() const;
};

Status write_npy_f32(const std::string& path, const float* data, const std::vector<int64_t>& shape);
// Reads "<f4" or "<i4" arrays in C order; anything else is kInvalidArgument naming the file.
Result<NpyArray> read_npy(const std::string& path);

}  // namespace volt
