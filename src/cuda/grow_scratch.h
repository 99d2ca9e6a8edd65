// A per-rank f32 device buffer grown on demand (the communicators' sum and gather scratch). Host code.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "cuda/cuda_check.h"

namespace volt::cuda {

// Returns *buf with room for at least `bytes` bytes. Growing first waits for `stream` (queued work may
// still use the old buffer), frees it and allocates 1.5x `bytes` (`min_bytes` at the least): slowly
// growing prompt steps move the buffer (a graph holding it is captured again) a few times rather than at
// every step. *buf / *capacity (bytes) are updated. A CUDA error aborts (VOLT_CUDA_CHECK), as for every
// device allocation of the backend.
inline void* grow_device_buffer(void** buf, int64_t* capacity, int64_t bytes, int64_t min_bytes,
                                cudaStream_t stream) {
    if (*capacity >= bytes) return *buf;
    if (*buf != nullptr) {
        VOLT_CUDA_CHECK(cudaStreamSynchronize(stream));
        VOLT_CUDA_CHECK(cudaFree(*buf));
        *buf = nullptr;
        *capacity = 0;
    }
    const int64_t cap = std::max<int64_t>(bytes + bytes / 2, min_bytes);
    VOLT_CUDA_CHECK(cudaMalloc(buf, static_cast<size_t>(cap)));
    *capacity = cap;
    return *buf;
}

// The same for a buffer of floats (the communicators' sum and gather scratch): room for at least `count`
// floats (64 at the least); *capacity counts floats.
inline float* grow_f32_scratch(float** buf, int64_t* capacity, int64_t count, cudaStream_t stream) {
    if (*capacity >= count) return *buf;
    constexpr int64_t kF = sizeof(float);
    void* p = *buf;
    int64_t bytes = *capacity * kF;
    grow_device_buffer(&p, &bytes, count * kF, 64 * kF, stream);
    *buf = static_cast<float*>(p);
    *capacity = bytes / kF;
    return *buf;
}

}  // namespace volt::cuda
