// Checks of CUDA runtime calls and kernel launches: every call goes through VOLT_CUDA_CHECK, every
// launch is followed by VOLT_CUDA_CHECK_LAUNCH(). A failure aborts with file:line, the call and the
// runtime's message (VOLT_CHECK: a CUDA error here is a bug or a sticky device fault, which kills the
// process on purpose; the supervisor restarts it). C++17 (included by the .cu files).
#pragma once

#include <cuda_runtime_api.h>

#include "core/check.h"

#define VOLT_CUDA_CHECK(call)                                                                           \
    do {                                                                                                \
        const cudaError_t volt_cuda_err_ = (call);                                                      \
        VOLT_CHECK(volt_cuda_err_ == cudaSuccess) << #call << ": " << cudaGetErrorName(volt_cuda_err_)  \
                                                  << " (" << cudaGetErrorString(volt_cuda_err_) << ")"; \
    } while (0)

// After a <<<...>>> launch: configuration errors (grid too large, too much shared memory) show here;
// faults inside the kernel show at the next synchronizing call.
#define VOLT_CUDA_CHECK_LAUNCH() VOLT_CUDA_CHECK(cudaGetLastError())
