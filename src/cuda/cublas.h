// cuBLAS, optional and never linked: opened at run time by soname, chosen by compute capability
// (cuBLAS 13 has no Volta kernels: a V100 gets libcublas.so.12 or .11), and used only after a self-test
// GEMM agrees with our own kernel (cuda_backend.cc). Only the handful of entry points we call are
// declared here, with the ABI of cuBLAS 11, 12 and 13 (unchanged across them), so no cuBLAS header or
// library is needed at build time.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

namespace volt::cuda {

class Cublas {
  public:
    // The sonames tried for compute capability cc, in order.
    static const char* const* sonames_for(int cc, int* count);
    // Opens the first soname that loads and creates a handle on `stream`; null with *why when none does.
    static std::unique_ptr<Cublas> open(int cc, cudaStream_t stream, std::string* why);
    ~Cublas();
    Cublas(const Cublas&) = delete;
    Cublas& operator=(const Cublas&) = delete;

    const std::string& soname() const { return soname_; }
    int version() const { return version_; }  // cublasGetVersion: 120903 for 12.9.3, ...

    // Row-major C[m, n] f32 = A[m, k] f16 (row-major) * B[n, k]^T f16 (row-major: the linear layout),
    // f32 accumulation (CUBLAS_COMPUTE_32F). Errors: kInternal with cuBLAS's status code.
    Status gemm_f16_f32(const uint16_t* a, const uint16_t* b, float* c, int64_t m, int64_t n, int64_t k);

  private:
    Cublas() = default;
    struct Api;
    std::unique_ptr<Api> api_;
    void* lib_ = nullptr;
    void* handle_ = nullptr;
    std::string soname_;
    int version_ = 0;
};

}  // namespace volt::cuda
