// A stand-in "device" for tests that need no GPU: the CPU backend's kernels behind a backend that says
// its memory is not host memory, counts what it allocates (memory() reports a fixed total minus that) and
// every download, upload and add, and copies expert weights into its own allocations at placement, as a
// GPU uploads them. What CPU expert offload's device path (cpu::HostExpertsRunner) and the device memory
// plan (executor::plan_device_memory) are tested against.
#pragma once

#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "cpu/cpu_ops.h"

namespace volt::testing {

class CountingBackend final : public ops::Backend {
  public:
    explicit CountingBackend(int64_t total_bytes = int64_t{64} << 30) : total_(total_bytes) {}
    const char* name() const override { return "counting"; }

    Result<ops::Buffer> alloc(int64_t bytes) override {
        void* q = std::calloc(static_cast<size_t>(bytes > 0 ? bytes : 1), 1);
        allocated_ += bytes;
        return ops::Buffer(this, q, bytes);
    }
    void release(void* data, int64_t bytes) override {
        std::free(data);
        allocated_ -= bytes;
    }
    // Host memory: a Buffer of size 0 to this backend, so release() does not count it as device memory.
    Result<ops::Buffer> alloc_host(int64_t bytes) override {
        return ops::Buffer(this, std::calloc(static_cast<size_t>(bytes > 0 ? bytes : 1), 1), 0);
    }
    void upload(void* dst, const void* src, int64_t bytes) override {
        ++uploads;
        std::memcpy(dst, src, bytes);
    }
    void download(void* dst, const void* src, int64_t bytes) override {
        ++downloads;
        std::memcpy(dst, src, bytes);
    }
    void copy(void* dst, const void* src, int64_t bytes) override { std::memmove(dst, src, bytes); }
    void fill(void* dst, uint8_t byte, int64_t bytes) override { std::memset(dst, byte, bytes); }
    ops::MemoryStats memory() const override { return {total_, total_ - allocated_}; }
    void synchronize() override {}

    Result<ops::DenseWeight> place_dense(const ops::DenseWeight& h, ops::WeightRole r,
                                         std::vector<ops::Buffer>* o) override {
        return cpu_.place_dense(h, r, o);
    }
    Result<ops::QkvWeights> place_qkv(const ops::QkvWeights& h, std::vector<ops::Buffer>* o) override {
        return cpu_.place_qkv(h, o);
    }
    Result<ops::VectorWeight> place_vector(const ops::VectorWeight& h, std::vector<ops::Buffer>* o) override {
        return cpu_.place_vector(h, o);
    }
    // MXFP4 codes, scales and the bias copied into this backend's memory (counted).
    Result<ops::ExpertWeights> place_experts(const ops::ExpertWeights& h,
                                             std::vector<ops::Buffer>* o) override {
        VOLT_CHECK(h.format == ops::Format::kMxfp4 && h.bias.format == ops::Format::kBf16);
        ops::ExpertWeights d = h;
        const int64_t elems = h.num_experts * h.out * h.in;
        auto put = [&](const void* src, int64_t bytes) -> Result<const void*> {
            VOLT_ASSIGN_OR_RETURN(ops::Buffer b, alloc(bytes));
            std::memcpy(b.data(), src, bytes);
            const void* p = b.data();
            o->push_back(std::move(b));
            return p;
        };
        VOLT_ASSIGN_OR_RETURN(const void* blocks, put(h.blocks, elems / 2));
        VOLT_ASSIGN_OR_RETURN(const void* scales, put(h.scales, elems / 32));
        VOLT_ASSIGN_OR_RETURN(d.bias.data, put(h.bias.data, h.bias.n * 2));
        d.blocks = static_cast<const uint8_t*>(blocks);
        d.scales = static_cast<const uint8_t*>(scales);
        return d;
    }

    void embedding(const ops::EmbeddingArgs& a) override { cpu::embedding(a); }
    void rmsnorm(const ops::RmsNormArgs& a) override { cpu::rmsnorm(a); }
    void linear(const ops::LinearArgs& a) override { cpu::linear(a); }
    void rope(const ops::RopeArgs& a) override { cpu::rope(a); }
    void kv_write(const ops::KvWriteArgs& a) override { cpu::kv_write(a); }
    void attention(const ops::AttentionArgs& a) override { cpu::attention(a); }
    void router(const ops::RouterArgs& a) override { cpu::router(a); }
    void experts(const ops::ExpertsArgs& a) override { cpu::experts(a); }
    void add(const ops::AddArgs& a) override {
        ++adds;
        cpu::add(a);
    }
    void sample(const ops::SampleArgs& a) override { cpu::sample(a); }

    int64_t allocated() const { return allocated_; }
    int64_t uploads = 0, downloads = 0, adds = 0;

  private:
    cpu::CpuBackend cpu_;
    int64_t total_, allocated_ = 0;
};

}  // namespace volt::testing
