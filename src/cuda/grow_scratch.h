// A per-rank f32 device buffer grown on demand (the communicators' sum and gather scratch). Host code.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "cuda/cuda_check.h"

namespace volt::cuda {

// Returns *buf with room for at least `count` floats (grown to 1.5x count, 64 at the least). Growing first
// waits for `stream` (queued work may still read the old buffer), frees it and allocates anew; *buf /
// *capacity (floats) are updated. A CUDA error aborts (VOLT_CUDA_CHECK), as for every device allocation of
// the backend.
inline float* grow_f32_scratch(float** buf, int64_t* capacity, int64_t count, cudaStream_t stream) {
    if (*capacity >= count) return *buf;
    if (*buf != nullptr) {
        VOLT_CUDA_CHECK(cudaStreamSynchronize(stream));
        VOLT_CUDA_CHECK(cudaFree(*buf));
        *buf = nullptr;
        *capacity = 0;
    }
    // 1.5x the request: slowly growing prompt steps move the buffer (a graph holding it is captured
    // again) a few times rather than at every step.
    const int64_t cap = std::max<int64_t>(count + count / 2, 64);
    VOLT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(buf), static_cast<size_t>(cap) * sizeof(float)));
    *capacity = cap;
    return *buf;
}

}  // namespace volt::cuda
