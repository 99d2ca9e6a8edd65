// The GPU the backend runs on, as the runtime reports it, plus the kernel arch the driver actually runs
// for this binary (kernels/probe.cu): the compute capability says what the chip is, the kernel arch
// what code it executes (a compute_70 PTX-only build JIT-compiled on an H200 runs 700 code).
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace volt::cuda {

struct DeviceInfo {
    int ordinal = 0;
    std::string name;  // "Tesla V100-SXM2-32GB", "NVIDIA H200"
    int cc_major = 0, cc_minor = 0;
    int sm_count = 0;
    int64_t total_bytes = 0, free_bytes = 0;
    int driver_version = 0;   // cudaDriverGetVersion: 13000 for CUDA 13.0
    int runtime_version = 0;  // the statically linked runtime: 11080 for 11.8
    int kernel_arch = 0;      // __CUDA_ARCH__ of the running code: 700, 900, ...
    std::string built_for;    // this binary's CMAKE_CUDA_ARCHITECTURES: "70-virtual", "90-real", ...
    int cc() const { return cc_major * 10 + cc_minor; }
    std::string cc_string() const { return std::to_string(cc_major) + "." + std::to_string(cc_minor); }
};

// Selects device `ordinal` and probes it. Errors (expected on machines without a GPU, never a crash):
// kFailedPrecondition naming the runtime's reason (no device, driver too old for this runtime, ...).
Result<DeviceInfo> probe_device(int ordinal = 0);

// GPUs this process can see (cudaGetDeviceCount, after CUDA_VISIBLE_DEVICES); 0 where the runtime finds
// none or cannot start (no driver), never an error.
int visible_gpu_count();

}  // namespace volt::cuda
