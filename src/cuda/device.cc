#include "cuda/device.h"

#include <cuda_runtime_api.h>

#include "cuda/cuda_check.h"
#include "cuda/launch.h"

namespace volt::cuda {

Result<DeviceInfo> probe_device(int ordinal) {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        cudaGetLastError();  // not sticky: clear it
        return failed_precondition(std::string("--device cuda: no usable GPU (") + cudaGetErrorName(e) +
                                   ": " + cudaGetErrorString(e) + ")");
    }
    if (count == 0) return failed_precondition("--device cuda: no GPU found");
    if (ordinal < 0 || ordinal >= count)
        return failed_precondition("--device cuda: GPU " + std::to_string(ordinal) + " of " +
                                   std::to_string(count));
    DeviceInfo d;
    d.ordinal = ordinal;
    VOLT_CUDA_CHECK(cudaSetDevice(ordinal));
    cudaDeviceProp p{};
    VOLT_CUDA_CHECK(cudaGetDeviceProperties(&p, ordinal));
    d.name = p.name;
    d.cc_major = p.major;
    d.cc_minor = p.minor;
    d.sm_count = p.multiProcessorCount;
    VOLT_CUDA_CHECK(cudaDriverGetVersion(&d.driver_version));
    VOLT_CUDA_CHECK(cudaRuntimeGetVersion(&d.runtime_version));
    size_t free_b = 0, total_b = 0;
    VOLT_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    d.free_bytes = static_cast<int64_t>(free_b);
    d.total_bytes = static_cast<int64_t>(total_b);
    d.built_for = VOLT_CUDA_ARCHITECTURES;
    d.kernel_arch = probe_kernel_arch();
    if (d.kernel_arch <= 0) {
        const auto e = static_cast<cudaError_t>(-d.kernel_arch);
        return failed_precondition("--device cuda: this voltllm holds no code the " + d.name +
                                   " (compute capability " + d.cc_string() + ") can run: built for " +
                                   VOLT_CUDA_ARCHITECTURES + " (" + cudaGetErrorName(e) +
                                   "); the volta preset runs on every GPU from sm_70 on");
    }
    return d;
}

int visible_gpu_count() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();  // not sticky
        return 0;
    }
    return count;
}

}  // namespace volt::cuda
