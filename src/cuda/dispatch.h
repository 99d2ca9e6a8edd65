// The dispatch table: every op's kernel variants with the compute capability each needs, and the choice
// made once at start-up (logged) from the device, the kernel arch actually running, --cuda-kernels and
// whether cuBLAS loaded and passed its self-test. Every op has an sm_70 variant (the portable kernels of
// src/cuda/kernels/, which use no bf16 arithmetic, cp.async, ldmatrix or FP8); variants for newer GPUs
// live under src/cuda/arch/smXX/ (issue 14) and join the table with their min_cc.
// Volta code on a newer GPU (a compute_70 PTX build on an H200, kernel arch 700) and --cuda-kernels sm70
// both select the sm_70 variants and turn cuBLAS off, so those runs test exactly what a V100 runs.
#pragma once

#include <string>

namespace volt::cuda {

enum class OpKind : int {
    kEmbedding,
    kRmsNorm,
    kLinear,
    kRope,
    kKvWrite,
    kAttention,
    kRouter,
    kExperts,
    kAdd,
    kSample,
    kPromptGemm,  // the matmuls of prompt rows (ops.h prompt_rows)
    kCount,
};
const char* op_name(OpKind op);

struct KernelVariant {
    OpKind op;
    const char* name;   // dtypes in the name (STYLE.md): "linear_warp_f32acc"
    int min_cc;         // 70 = sm_70
    bool needs_cublas;  // only chosen when cuBLAS loaded and passed its self-test
    const char* what;   // one line for the log and docs/cuda.md
    bool fast = false;  // an issue-14 kernel: left out by --cuda-kernels basic (isolates a failure)
};

// All variants, each op's sm_70 variant first.
const KernelVariant* kernel_table(int* count);

struct DispatchInput {
    int cc = 0;               // the device's compute capability (70, 90, ...)
    int kernel_arch = 0;      // __CUDA_ARCH__ of the running code (700, 900, ...)
    bool force_sm70 = false;  // --cuda-kernels sm70
    bool cublas_ready = false;
    bool basic_only = false;  // --cuda-kernels basic / sm70-basic or VOLT_CUDA_KERNELS_BASIC=1
    // Variant names left out (VOLT_CUDA_KERNELS_OFF, comma-separated): an A/B of one kernel against the
    // variant it replaces in the same binary and process layout. Unknown names are ignored.
    std::string off;
};

struct Dispatch {
    const KernelVariant* variant[static_cast<int>(OpKind::kCount)] = {};
    int cc_used = 0;          // the capability variants were chosen for
    bool sm70_only = false;   // forced or Volta code running: sm_70 variants, no cuBLAS
    bool basic_only = false;  // the straightforward variants of issue 13 only
    std::string why;          // "--cuda-kernels sm70", "compute_70 code on a cc 9.0 GPU", "auto"
    std::string off;          // DispatchInput::off
    const KernelVariant* of(OpKind op) const { return variant[static_cast<int>(op)]; }
    bool uses(OpKind op, const char* name) const;
};

// Whether cuBLAS may be used at all for this input (sm70-only runs never use it).
bool cublas_allowed(const DispatchInput& in, std::string* why_not);
Dispatch choose_dispatch(const DispatchInput& in);
// "embedding=embedding_rows_f32 rmsnorm=... (cc 9.0, auto)"
std::string describe(const Dispatch& d);

}  // namespace volt::cuda
