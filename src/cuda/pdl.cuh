// Programmatic dependent launch (PDL; CUDA programming guide, "Programmatic Dependent Launch and
// Synchronization"; sm_90+, CUDA 11.8+ runtime). A decode step is ~220 small launches in a row, each
// waiting for the last to finish, drain and flush before its first block starts: the GPU idles at every
// seam while the next grid is scheduled and its first loads travel. With PDL a kernel launched through
// launch_kernel (with Launch::pdl) may start once every block of the kernel before it in the stream has
// called pdl_launch_dependents (or exited); it must then call pdl_wait before it reads anything an earlier
// kernel wrote or writes anything an earlier kernel reads. pdl_wait returns once the previous grid has
// completed and its memory is visible; that grid itself waited for the one before it, so every earlier
// kernel is done too. Work that touches only data no kernel of the step writes (the weights) may come
// before pdl_wait: that is where the overlap pays (the dense GEMVs issue their first weight loads there).
// Without the launch attribute (other GPUs, the compute_70 code, VOLT_CUDA_PDL=0) pdl_wait and
// pdl_launch_dependents do nothing and the stream orders the kernels as always: the arithmetic is the same
// either way, so outputs are bitwise the same (scripts/gpu/ab_decode.sh checks it).
//
// Rule for every kernel launched with launch_kernel: pdl_wait() before its first access to activations,
// scratch, KV pools, block tables, routing lists or outputs. Kernels launched with <<<>>> need nothing
// (a plain launch waits for the whole previous grid, PDL or not).
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "cuda/cuda_check.h"
#include "cuda/launch.h"

namespace volt::cuda {

// Waits for the previous grid in the stream (and so for every earlier one): see the file comment.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next grid in the stream start (its blocks then wait in pdl_wait until this grid is complete).
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, ctx.stream>>>(args...), as a programmatic dependent of the previous kernel
// in the stream when ctx.pdl. Checks the launch (VOLT_CUDA_CHECK_LAUNCH). Stream capture keeps the
// attribute as a programmatic edge of the graph.
template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, const Launch& ctx,
                   Args&&... args) {
    if (ctx.pdl) {
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = grid;
        cfg.blockDim = block;
        cfg.dynamicSmemBytes = smem;
        cfg.stream = ctx.stream;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        VOLT_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
    } else {
        kernel<<<grid, block, smem, ctx.stream>>>(std::forward<Args>(args)...);
    }
    VOLT_CUDA_CHECK_LAUNCH();
}

}  // namespace volt::cuda
