// The backend a command line names: `--device cpu|cuda` (vLLM's flag), `--dtype` and the CUDA kernel
// choice. The CPU backend is always built; `cuda` exists in builds configured with VOLT_CUDA (the volta,
// volta-ptx and cuda13 presets) and fails with a clear message elsewhere.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "ops/ops.h"

namespace volt::executor {

struct DeviceOptions {
    std::string device = "cpu";             // cpu | cuda
    std::string dtype = "auto";             // auto | half | float | bfloat16 (GPU operand dtype)
    std::string cuda_kernels = "auto";      // auto | sm70 (force the Volta variants and no cuBLAS)
    bool embedding_in_host_memory = false;  // cuda: the embedding table in pinned host memory
};

// kInvalidArgument for an unknown device; kUnimplemented for cuda in a build without it; the CUDA
// backend's own errors (no GPU, bfloat16 on sm_70).
Result<std::unique_ptr<ops::Backend>> make_backend(const DeviceOptions& options);

// Whether this build has the CUDA backend.
bool cuda_built();

}  // namespace volt::executor
