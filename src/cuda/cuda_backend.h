// CudaBackend: ops::Backend on one NVIDIA GPU (docs/cuda.md). Memory: cudaMalloc'd buffers, one stream;
// upload, download and synchronize wait for the stream; upload_async, upload_pinned, download_async and
// events (cudaEvent_t on the stream) do not: the asynchronous executor (executor/backend_executor.h)
// enqueues a whole step with them and waits for its event at collect. Placement: dense bf16 weights become
// f16 under
// --dtype half when the range check allows (placement.h), int8 / AWQ int4 weights are repacked row-major
// (placement.h repack_int_weight), vectors become f32, MXFP4 experts stay packed,
// dense bf16 experts are quantized to MXFP4 under --dtype half (with a notice). Ops: the kernels of
// src/cuda/kernels through the dispatch table (dispatch.h), chosen once at creation and logged; the
// coarse ops are the defaults built from the fine ops (src/ops/backend.cc), which suit these kernels.
// Reference for every op: the CPU twin (src/cpu). Checked by the op harness (volt_op_test --backend
// cuda), tests/unit/cuda/ (label cuda) and scripts/gpu/check.sh on the GPU machine.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cuda/cublas.h"
#include "cuda/device.h"
#include "cuda/dispatch.h"
#include "cuda/launch.h"
#include "ops/ops.h"

namespace volt::cuda {

struct CudaOptions {
    std::string dtype = "auto";         // auto | half | float16 | float | float32 | bfloat16
    std::string cuda_kernels = "auto";  // auto | sm70 | basic | sm70-basic (basic: issue 13's kernels only)
    int device = 0;                     // the GPU's ordinal among the visible ones
    bool embedding_in_host_memory = false;  // the embedding table in pinned, mapped host memory
    // No step ever holds two sequences (--max-num-seqs 1): generated expert rows take the GEMV, which is
    // faster for one token than the MMA kernel (experts_kernel). Fixed at creation, so a row's bits never
    // depend on the batch or on the order of reserve() calls.
    bool single_sequence = false;
};

// --dtype to the operand precision on this device (auto: half below compute capability 8.0, as vLLM,
// else bfloat16). Errors: kInvalidArgument for bfloat16 where the kernels that run are Volta's (vLLM's
// message), or an unknown name. volta_kernels: the dispatch runs the sm_70 variants.
Result<Operand> resolve_dtype(const std::string& dtype, const DeviceInfo& device, bool volta_kernels);

class CudaBackend final : public ops::Backend {
  public:
    // Probes the device, chooses the kernels (and cuBLAS: loaded, self-tested), logs the choice once.
    static Result<std::unique_ptr<CudaBackend>> create(const CudaOptions& options);
    ~CudaBackend() override;

    const char* name() const override { return "cuda"; }
    const DeviceInfo& device() const { return device_; }
    const Dispatch& dispatch() const { return dispatch_; }
    Operand operand() const { return operand_; }
    const std::string& cublas_status() const { return cublas_status_; }
    // What `voltllm cuda-info` prints: one JSON object.
    std::string info_json() const;
    // The stream every op of this backend runs on, in order (the CUDA communicators enqueue on it).
    cudaStream_t stream() const { return stream_; }
    void bind_thread() override;
    int device_ordinal() const override { return device_.ordinal; }

    Result<ops::Buffer> alloc(int64_t bytes) override;
    void release(void* data, int64_t bytes) override;
    void upload(void* dst, const void* src, int64_t bytes) override;
    // cudaMemcpyAsync from pageable memory: the runtime copies `src` out before returning and does not
    // wait for the device (CUDA runtime API, "API synchronization behavior").
    void upload_async(void* dst, const void* src, int64_t bytes) override;
    // cudaMemcpyAsync from pinned memory (alloc_host): neither copies src first nor waits.
    void upload_pinned(void* dst, const void* src, int64_t bytes) override;
    void download(void* dst, const void* src, int64_t bytes) override;
    // cudaMemcpyAsync into pinned memory (alloc_host), no wait.
    void download_async(void* dst, const void* src, int64_t bytes) override;
    // A cudaEvent_t (timing off) recorded on the stream, with the device's error word copied into pinned
    // memory before it: wait() synchronizes on the event and raises a data error a kernel reported.
    std::unique_ptr<ops::Event> create_event() override;
    void copy(void* dst, const void* src, int64_t bytes) override;
    void fill(void* dst, uint8_t byte, int64_t bytes) override;
    // Pinned host memory (cudaHostAlloc, zeroed): the KV swap pool.
    Result<ops::Buffer> alloc_host(int64_t bytes) override;
    // cudaHostRegister of the pages holding [p, p + bytes) (read-only where the device supports it).
    bool pin_host(const void* p, int64_t bytes) override;
    void unpin_host(const void* p) override;
    ops::MemoryStats memory() const override;
    void synchronize() override;
    Status reserve(const ops::WorkspaceLimits& limits) override;
    // Stream capture (thread-local mode) into a cudaGraphExec_t. A scratch buffer that would have to
    // grow inside the capture spoils it (kUnavailable; nothing was launched) instead of synchronizing.
    bool has_graphs() const override { return true; }
    Result<std::unique_ptr<ops::Graph>> capture(const std::function<void()>& body) override;
    // Other CudaBackends on the same GPU.
    bool can_capture_with(const ops::Backend& peer) const override;
    // One capture in relaxed mode (the peers' threads launch into capturing streams) begun on this
    // backend's stream: a fork event recorded on it and waited by every peer's stream before body, a join
    // event recorded on every peer's stream and waited by this one after. Inside, an event recorded on one
    // of these streams and waited on another becomes an edge of the graph (the communicators' ordering).
    Result<std::unique_ptr<ops::Graph>> capture_group(const std::vector<ops::Backend*>& peers,
                                                      const std::function<void()>& body) override;
    uint64_t scratch_epoch() const override { return scratch_epoch_; }
    // An event recorded on other's stream (a CudaBackend) and waited by this stream.
    void wait_for(ops::Backend& other) override;
    // For the communicators attached to this backend (same_device_communicator.cc): the capture this
    // backend's stream is in (a number shared by every backend of one capture_group, new for each; 0 when
    // none), a buffer of theirs too small inside it (the capture is then reported kUnavailable, as for
    // the backend's own scratch), and a buffer of theirs that moved (graphs captured before are stale).
    uint64_t capture_serial() const { return capture_serial_; }
    void spoil_capture() { capture_spoiled_ = true; }
    void scratch_moved() { ++scratch_epoch_; }
    void fill_scratch(uint8_t byte) override;

    Result<ops::DenseWeight> place_dense(const ops::DenseWeight& host, ops::WeightRole role,
                                         std::vector<ops::Buffer>* owned) override;
    Result<ops::QkvWeights> place_qkv(const ops::QkvWeights& host, std::vector<ops::Buffer>* owned) override;
    Result<ops::ExpertWeights> place_experts(const ops::ExpertWeights& host,
                                             std::vector<ops::Buffer>* owned) override;
    Result<ops::VectorWeight> place_vector(const ops::VectorWeight& host,
                                           std::vector<ops::Buffer>* owned) override;

    void embedding(const ops::EmbeddingArgs& a) override;
    void rmsnorm(const ops::RmsNormArgs& a) override;
    void linear(const ops::LinearArgs& a) override;
    void rope(const ops::RopeArgs& a) override;
    void kv_write(const ops::KvWriteArgs& a) override;
    void attention(const ops::AttentionArgs& a) override;
    void router(const ops::RouterArgs& a) override;
    void experts(const ops::ExpertsArgs& a) override;
    // The dispatch variant experts() runs the generated rows of `a` on (its prompt rows take the prompt
    // GEMM where that is chosen): "experts_mma_m16n8k16" on sm_80+ unless the process never batches two
    // sequences (CudaOptions::single_sequence, from --max-num-seqs 1) or the operands are f32;
    // then "experts_gemv_mxfp4_f16x2", which the MMA row always has beneath it; the basic
    // "experts_warp_mxfp4_3pass" only for shapes or formats the fast kernels do not take, or when they
    // are left out (--cuda-kernels basic, VOLT_CUDA_KERNELS_OFF). Fixed by the process and the weights,
    // never by the batch.
    const char* experts_kernel(const ops::ExpertsArgs& a) const;
    void add(const ops::AddArgs& a) override;
    void sample(const ops::SampleArgs& a) override;
    // One kernel (kernels/elementwise.cu launch_move_ids).
    void move_ids(const ops::MoveIdsArgs& a) override;
    // Two kernels (kernels/elementwise.cu launch_scatter_ids): the fills, then the writes.
    void scatter_ids(const ops::ScatterIdsArgs& a) override;
    // One cudaMemcpyAsync per block of each pool (and of each int8 scale pool) on the stream, no wait (the
    // pool is pinned; stream order puts a swap-out after the writes before it and a swap-in before the
    // reads after it). copy_blocks is the default (ops/backend.cc: one copy per block of every pool).
    void swap_blocks(const ops::SwapBlocksArgs& a) override;
    // f32, f16 and int8 (per-head f32 scales: kv_write, both attention kernels, copy and swap).
    bool supports_kv_format(ops::Format f) const override {
        return f == ops::Format::kF32 || f == ops::Format::kF16 || f == ops::Format::kInt8;
    }
    // Coarse ops with a fused launch when the fast kernels run (else the fine ops, src/ops/backend.cc).
    void o_proj_residual(const ops::OProjResidualArgs& a) override;
    // Fused q|k|v (placed fused when the fast kernels run): rmsnorm, one GEMV, rope, kv_write.
    void qkv_rope_kvwrite(const ops::QkvRopeKvWriteArgs& a) override;
    // rmsnorm + router GEMV in one launch (h still written for the experts), then top-k.
    void moe_route(const ops::MoeRouteArgs& a) override;
    // rmsnorm of the rows + lm_head GEMV in one launch (h written when keep_intermediates).
    void final_logits(const ops::FinalLogitsArgs& a) override;
    double measure_read_gbps(int64_t bytes) override;

  private:
    CudaBackend() = default;
    Launch ctx() const { return {stream_, error_, operand_, device_.sm_count, pdl_}; }
    // Whether prompt rows of a linear with this weight take the tensor-core GEMM (dispatch and format).
    bool prompt_gemm(const ops::DenseWeight& w) const;
    // Raises (VOLT_CHECK) the first data error a kernel reported; called after every wait.
    void check_device_errors();
    // A scratch buffer of at least `bytes`, grown (after the stream drains) when too small.
    void* scratch(int slot, int64_t bytes);
    Result<ops::Buffer> upload_bytes(const void* src, int64_t bytes);
    Result<ops::VectorWeight> place_vector_f32(const ops::VectorWeight& host,
                                               std::vector<ops::Buffer>* owned);
    void linear_cublas(const ops::LinearArgs& a);
    // One GEMM through cuBLAS and through linear_warp_f32acc; false (with *why) when they disagree.
    bool cublas_self_test(std::string* why);

    CudaOptions options_;
    DeviceInfo device_;
    Dispatch dispatch_;
    Operand operand_ = Operand::kF32;
    bool pdl_ = false;  // Launch::pdl: sm_90+ code on a cc >= 9.0 GPU, unless VOLT_CUDA_PDL=0
    bool quantize_dense_experts_ = false;
    cudaStream_t stream_ = nullptr;
    int* error_ = nullptr;
    std::unique_ptr<Cublas> cublas_;
    std::string cublas_status_;
    ops::WorkspaceLimits limits_;
    struct Scratch {
        void* data = nullptr;
        int64_t bytes = 0;
    };
    std::vector<Scratch> scratch_;
    uint64_t scratch_epoch_ = 0;    // bumped when a scratch buffer moves
    bool capturing_ = false;        // inside capture(): scratch must not grow
    bool capture_spoiled_ = false;  // a scratch buffer was too small during the capture
    uint64_t capture_serial_ = 0;   // capture_serial()
    // wait_for's (recorded on this stream), capture_group's fork (on this one) and join (on a peer's).
    cudaEvent_t order_event_ = nullptr, fork_event_ = nullptr, join_event_ = nullptr;
    // Placement summary, logged when lm_head (the last dense weight of a model) is placed.
    int64_t placed_bytes_ = 0, dense_to_f16_ = 0, dense_kept_bf16_ = 0, dense_int_ = 0,
            experts_quantized_ = 0;
    std::unordered_map<void*, void*> host_mapped_;  // device address -> cudaHostAlloc'd host address
    std::unordered_set<void*> host_pinned_;         // alloc_host's buffers (cudaFreeHost on release)
    std::unordered_map<const void*, void*> host_registered_;  // pin_host's: p -> the registered page
};

}  // namespace volt::cuda
