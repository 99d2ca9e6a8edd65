#include "cuda/dispatch.h"

#include <cstring>

namespace volt::cuda {

namespace {

// The table. Order: each op's most general variant first; choose_dispatch takes the last usable one.
constexpr KernelVariant kTable[] = {
    {OpKind::kEmbedding, "embedding_rows_f32out", 70, false, "one block per token, weights widened exactly"},
    {OpKind::kRmsNorm, "rmsnorm_f32_block256", 70, false, "one block per row, f32 sum of squares"},
    {OpKind::kLinear, "linear_warp_f32acc", 70, false,
     "one warp per output unit, rows in tiles of 8, operands rounded to --dtype, f32 accumulation"},
    {OpKind::kLinear, "linear_cublas_f16_tiles64", 70, true,
     "f16 weights and f16 operands only: cublasGemmEx in fixed tiles of 64 rows (padded), f32 out"},
    {OpKind::kLinear, "linear_gemv_ld128_f32acc", 70, false,
     "GEMV for every batch size: warp per output, 128-bit weight loads once per tile of 4 rows, exact "
     "widening, f32 FMA (also the router's logits)",
     true},
    {OpKind::kRope, "rope_neox_yarn_f32", 70, false, "one block per token, cosf/sinf in f32"},
    {OpKind::kKvWrite, "kv_write_rows", 70, false, "one block per token, f32 or f16 cache"},
    {OpKind::kAttention, "attention_warp_online_sink", 70, false,
     "one warp per (row, head), online softmax seeded with the sink, no split-KV"},
    {OpKind::kAttention, "attention_splitkv_gqa_f32acc", 70, false,
     "block per (row, KV head, chunk of 256 keys of the row's own range): K/V read once for the GQA group, "
     "chunk softmax, then a combine in chunk order with the sink",
     true},
    {OpKind::kRouter, "router_warp_topk_f32", 70, false,
     "logits by linear_warp with f32 operands, warp top-k"},
    {OpKind::kExperts, "experts_warp_mxfp4_3pass", 70, false,
     "gate_up+SwiGLU, down+bias, weighted combine; MXFP4 decoded in registers, E8M0 in f32"},
    {OpKind::kExperts, "experts_gemv_mxfp4_f16x2", 70, false,
     "2 launches: gate_up+SwiGLU (warp per unit, all k pairs), down+bias+weight+residual; 128-bit loads, "
     "E2M1 -> f16 by bit ops, 8-term HFMA2 chains into f32 (f32 products under --dtype float)",
     true},
    {OpKind::kExperts, "experts_mma_m16n8k16", 80, false,
     "generated rows grouped by expert in tiles of <= 8 pairs, weights as the A operand of mma.sync m16n8k16 "
     "(E2M1 -> f16 by bit ops, f32 accumulation per 32-code block, x E8M0), f16/bf16 operands; "
     "--dtype float keeps experts_gemv_mxfp4_f16x2",
     true},
    {OpKind::kAdd, "add_f32", 70, false, "elementwise"},
    {OpKind::kSample, "sample_block1024_f64", 70, false, "one block per row, f64 sums, exact top-k"},
    {OpKind::kPromptGemm, "prompt_rows_as_generated", 70, false,
     "prompt rows take the same kernels as generated rows (the GEMV family)"},
    {OpKind::kPromptGemm, "gemm_mma_m16n8k16_f32acc", 80, false,
     "prompt rows of qkv, o_proj and the experts: mma.sync m16n8k16 (f16, bf16; MXFP4 decoded to f16), "
     "tiles 64 x 128 x 32, f32 accumulation, per-row power-of-two operand scale, experts grouped by routing "
     "lists (docs/cuda.md)",
     true},
};

// Whether `name` is one of the comma-separated names of `list`.
bool named_in(const std::string& list, const char* name) {
    const size_t n = std::strlen(name);
    for (size_t pos = 0; pos <= list.size();) {
        size_t end = list.find(',', pos);
        if (end == std::string::npos) end = list.size();
        if (end - pos == n && list.compare(pos, n, name) == 0) return true;
        pos = end + 1;
    }
    return false;
}

}  // namespace

const char* op_name(OpKind op) {
    static const char* const kNames[] = {"embedding", "rmsnorm",   "linear",     "rope",
                                         "kv_write",  "attention", "router",     "experts",
                                         "add",       "sample",    "prompt_gemm"};
    return kNames[static_cast<int>(op)];
}

const KernelVariant* kernel_table(int* count) {
    *count = static_cast<int>(sizeof(kTable) / sizeof(kTable[0]));
    return kTable;
}

bool Dispatch::uses(OpKind op, const char* name) const {
    const KernelVariant* v = of(op);
    return v != nullptr && std::strcmp(v->name, name) == 0;
}

bool cublas_allowed(const DispatchInput& in, std::string* why_not) {
    if (in.force_sm70) {
        *why_not = "off: --cuda-kernels sm70 (the Volta kernels only)";
        return false;
    }
    // Volta (or Xavier) code on a Turing-or-newer GPU only happens in a compute_70 PTX-only build or
    // when a fat binary's sm_70 code is all it has: that run stands for a V100.
    if (in.kernel_arch > 0 && in.kernel_arch < 750 && in.cc >= 75) {
        *why_not = "off: this build runs compute_" + std::to_string(in.kernel_arch / 10) +
                   " code on a compute capability " + std::to_string(in.cc / 10) + "." +
                   std::to_string(in.cc % 10) + " GPU (testing the Volta path, as on a V100)";
        return false;
    }
    return true;
}

Dispatch choose_dispatch(const DispatchInput& in) {
    Dispatch d;
    std::string ignored;
    d.sm70_only = !cublas_allowed(in, &ignored);
    d.cc_used = d.sm70_only ? 70 : in.cc;
    d.basic_only = in.basic_only;
    d.off = in.off;
    d.why = in.force_sm70 ? "--cuda-kernels sm70"
            : d.sm70_only ? "compute_" + std::to_string(in.kernel_arch / 10) + " code on a cc " +
                                std::to_string(in.cc / 10) + "." + std::to_string(in.cc % 10) + " GPU"
                          : "auto";
    int n = 0;
    const KernelVariant* table = kernel_table(&n);
    for (int i = 0; i < n; ++i) {
        const KernelVariant& v = table[i];
        if (v.min_cc > d.cc_used) continue;
        if (v.needs_cublas && (d.sm70_only || !in.cublas_ready)) continue;
        if (v.fast && in.basic_only) continue;
        if (named_in(in.off, v.name)) continue;
        // mma.sync m16n8k16 and ldmatrix need code compiled for sm_80 or newer (not only a new GPU).
        if (v.min_cc >= 80 && in.kernel_arch > 0 && in.kernel_arch < 800) continue;
        d.variant[static_cast<int>(v.op)] = &v;
    }
    return d;
}

std::string describe(const Dispatch& d) {
    std::string s;
    for (int i = 0; i < static_cast<int>(OpKind::kCount); ++i) {
        const KernelVariant* v = d.variant[i];
        if (i > 0) s += ' ';
        s += op_name(static_cast<OpKind>(i));
        s += '=';
        s += v ? v->name : "none";
    }
    s += " (for cc " + std::to_string(d.cc_used / 10) + "." + std::to_string(d.cc_used % 10) + ", " + d.why +
         (d.off.empty() ? "" : ", off: " + d.off) + (d.basic_only ? ", basic kernels only" : "") + ")";
    return s;
}

}  // namespace volt::cuda
