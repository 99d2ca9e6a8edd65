// The CPU reference kernels: plain fp32 arithmetic, every reduction in one fixed order (8 interleaved
// partial sums, then a fixed tree), parallel only over independent outputs, so a result never depends
// on batch size, chunking or thread count. The oracle for every CUDA kernel. Tests:
// tests/unit/cpu/ops_test.cc.
#pragma once

#include "ops/ops.h"

namespace volt::cpu {

void embedding(const ops::EmbeddingArgs& a);
void rmsnorm(const ops::RmsNormArgs& a);
void linear(const ops::LinearArgs& a);
void rope(const ops::RopeArgs& a);
void kv_write(const ops::KvWriteArgs& a);
void attention(const ops::AttentionArgs& a);
void router(const ops::RouterArgs& a);
void experts(const ops::ExpertsArgs& a);
void add(const ops::AddArgs& a);

// Dot product of f32 x with a bf16 row, in the fixed order described above.
float dot_f32_bf16(const float* x, const uint16_t* w, int64_t n);
// Dot product of f32 x with one MXFP4 row (n/32 blocks of 16 bytes + n/32 E8M0 scales):
// sum over blocks of scale * (sum of the block's 32 products in the fixed order).
float dot_f32_mxfp4(const float* x, const uint8_t* blocks, const uint8_t* scales, int64_t n);

// The clamped SwiGLU of spec §3.6: min(g, limit) * sigmoid(alpha * min(g, limit)) * (clamp(u) + 1).
float swiglu_oai(float gate, float up, float limit, float alpha);

class CpuBackend final : public ops::Backend {
  public:
    void embedding(const ops::EmbeddingArgs& a) override { cpu::embedding(a); }
    void rmsnorm(const ops::RmsNormArgs& a) override { cpu::rmsnorm(a); }
    void linear(const ops::LinearArgs& a) override { cpu::linear(a); }
    void rope(const ops::RopeArgs& a) override { cpu::rope(a); }
    void kv_write(const ops::KvWriteArgs& a) override { cpu::kv_write(a); }
    void attention(const ops::AttentionArgs& a) override { cpu::attention(a); }
    void router(const ops::RouterArgs& a) override { cpu::router(a); }
    void experts(const ops::ExpertsArgs& a) override { cpu::experts(a); }
    void add(const ops::AddArgs& a) override { cpu::add(a); }
};

}  // namespace volt::cpu
