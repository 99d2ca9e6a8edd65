// The arch probe: a kernel that reports __CUDA_ARCH__ of the code the driver actually runs (700 when a
// compute_70 PTX-only build is JIT-compiled on a newer GPU, 900 for sm_90 SASS). The dispatch table
// uses it: Volta code running on a newer GPU means "check the Volta path" (sm70 variants, no cuBLAS).
#include "cuda/cuda_check.h"
#include "cuda/device_util.cuh"

namespace volt::cuda {
namespace {

__global__ void probe_kernel(int* out) {
#ifdef __CUDA_ARCH__
    *out = __CUDA_ARCH__;
#endif
}

}  // namespace

int probe_kernel_arch() {
    int* d = nullptr;
    VOLT_CUDA_CHECK(cudaMalloc(&d, sizeof(int)));
    VOLT_CUDA_CHECK(cudaMemset(d, 0, sizeof(int)));
    probe_kernel<<<1, 1>>>(d);
    const cudaError_t e = cudaGetLastError();
    if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction ||
        e == cudaErrorUnsupportedPtxVersion) {
        VOLT_CUDA_CHECK(cudaFree(d));
        return -static_cast<int>(e);
    }
    VOLT_CUDA_CHECK(e);
    int arch = 0;
    VOLT_CUDA_CHECK(cudaMemcpy(&arch, d, sizeof(int), cudaMemcpyDeviceToHost));
    VOLT_CUDA_CHECK(cudaFree(d));
    return arch;
}

}  // namespace volt::cuda
