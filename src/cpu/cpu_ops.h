// The CPU reference kernels: plain fp32 arithmetic, every reduction in one fixed order (8 interleaved
// partial sums, then a fixed tree), parallel only over independent outputs, so a result never depends
// on batch size, chunking or thread count. The oracle for every CUDA kernel, checked itself against the
// double-precision reference of the op harness (tests/kernels/op_test.cc). Backend memory is host memory:
// weights stay where the loader put them (often the checkpoint's mmap). Formats: dense weights bf16,
// f16, f32, and for the attention projections and lm_head int8 / int4 (docs/quantization.md); experts
// MXFP4 or dense bf16/f16; KV cache f32, f16 or int8 with per-head f32 scales (ops/kv_int8.h).
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
// Rows in parallel on the CPU thread pool; each row in a fixed order (src/cpu/sample.cc).
void sample(const ops::SampleArgs& a);

// Dot product of f32 x with a bf16 row, in the fixed order described above.
float dot_f32_bf16(const float* x, const uint16_t* w, int64_t n);
// Dot product of f32 x with one MXFP4 row (n/32 blocks of 16 bytes + n/32 E8M0 scales):
// sum over blocks of scale * (sum of the block's 32 products in the fixed order).
float dot_f32_mxfp4(const float* x, const uint8_t* blocks, const uint8_t* scales, int64_t n);

// The clamped SwiGLU of spec §3.6: min(g, limit) * sigmoid(alpha * min(g, limit)) * (clamp(u) + 1).
float swiglu_oai(float gate, float up, float limit, float alpha);

// Element i of a vector weight as f32 (bf16, f16 or f32 storage).
float vector_at(const ops::VectorWeight& v, int64_t i);

class CpuBackend final : public ops::Backend {
  public:
    const char* name() const override { return "cpu"; }

    Result<ops::Buffer> alloc(int64_t bytes) override;
    Result<ops::Buffer> alloc_host(int64_t bytes) override { return alloc(bytes); }  // calloc: zeroed
    bool memory_is_host() const override { return true; }
    bool supports_kv_format(ops::Format f) const override {
        return f == ops::Format::kF32 || f == ops::Format::kF16 || f == ops::Format::kInt8;
    }
    void release(void* data, int64_t bytes) override;
    void upload(void* dst, const void* src, int64_t bytes) override;
    void download(void* dst, const void* src, int64_t bytes) override;
    void copy(void* dst, const void* src, int64_t bytes) override;
    void fill(void* dst, uint8_t byte, int64_t bytes) override;
    ops::MemoryStats memory() const override;
    void synchronize() override {}

    // Host tensors are already in backend memory: placement returns the view unchanged, or
    // kUnimplemented for a format the CPU kernels do not read (dense bf16/f16/f32; experts MXFP4 or
    // dense bf16/f16; vectors bf16/f16/f32).
    Result<ops::DenseWeight> place_dense(const ops::DenseWeight& host, ops::WeightRole,
                                         std::vector<ops::Buffer>*) override;
    Result<ops::QkvWeights> place_qkv(const ops::QkvWeights& host, std::vector<ops::Buffer>*) override;
    Result<ops::ExpertWeights> place_experts(const ops::ExpertWeights& host,
                                             std::vector<ops::Buffer>*) override;
    Result<ops::VectorWeight> place_vector(const ops::VectorWeight& host, std::vector<ops::Buffer>*) override;

    void embedding(const ops::EmbeddingArgs& a) override { cpu::embedding(a); }
    void rmsnorm(const ops::RmsNormArgs& a) override { cpu::rmsnorm(a); }
    void linear(const ops::LinearArgs& a) override { cpu::linear(a); }
    void rope(const ops::RopeArgs& a) override { cpu::rope(a); }
    void kv_write(const ops::KvWriteArgs& a) override { cpu::kv_write(a); }
    void attention(const ops::AttentionArgs& a) override { cpu::attention(a); }
    void router(const ops::RouterArgs& a) override { cpu::router(a); }
    void experts(const ops::ExpertsArgs& a) override { cpu::experts(a); }
    void add(const ops::AddArgs& a) override { cpu::add(a); }
    void sample(const ops::SampleArgs& a) override { cpu::sample(a); }
};

}  // namespace volt::cpu
