#include "cuda/cuda_backend.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/dtype.h"
#include "core/logging.h"
#include "cuda/cuda_check.h"
#include "cuda/placement.h"

namespace volt::cuda {

namespace {

enum ScratchSlot : int {
    kRouterLogits,
    kExpertAct,
    kExpertY,
    kSampleRows,
    kCublasA,
    kCublasC,
    kAttnPartials,
    kGemmA,        // prompt rows as operand bits [rows, K] f16/bf16
    kGemmBack,     // their per-row factors [rows] f32
    kGemmExperts,  // gemm_experts_scratch_bytes
    kExpertsMma,   // experts_mma_scratch_bytes (generated rows)
    kNumScratch
};

// Rows of one cuBLAS call: fixed, so that the algorithm cuBLAS picks (by shape and alignment) and with
// it every row's reduction order are the same whatever the batch (a partial tile is zero-padded).
constexpr int64_t kCublasTileRows = 64;
// Rows of one sample launch (scratch: 8 bytes per id per row).
constexpr int64_t kSampleRowsPerLaunch = 64;

const char* device_error_message(int code) {
    switch (code) {
        case kBadTokenId:
            return "embedding: a token id outside the vocabulary";
        case kFreedBlock:
            return "attention: a key position in a freed block (block table entry < 0)";
        case kBadSlot:
            return "kv_write/attention: a KV slot outside the pool";
        case kBadExpertId:
            return "experts: an expert id outside [0, num_experts)";
        case kBadSampleId:
            return "sample: an id outside [0, vocab_size_real) or more logprobs than max_top";
        case kBadRow:
            return "rmsnorm/linear: a negative row index";
        default:
            return "unknown device error";
    }
}

bool cuda_unloading(cudaError_t e) { return e == cudaErrorCudartUnloading; }

int64_t format_bytes(ops::Format f) { return f == ops::Format::kF32 ? 4 : 2; }

}  // namespace

const char* operand_name(Operand o) {
    switch (o) {
        case Operand::kF32:
            return "float";
        case Operand::kF16:
            return "half";
        case Operand::kBf16:
            return "bfloat16";
    }
    return "?";
}

Result<Operand> resolve_dtype(const std::string& dtype, const DeviceInfo& d, bool volta_kernels) {
    const int eff = volta_kernels ? std::min(d.cc(), 70) : d.cc();
    if (dtype == "float" || dtype == "float32") return Operand::kF32;
    if (dtype == "half" || dtype == "float16") return Operand::kF16;
    if (dtype == "auto") return eff < 80 ? Operand::kF16 : Operand::kBf16;
    if (dtype == "bfloat16") {
        if (eff >= 80) return Operand::kBf16;
        // vLLM's words (vllm/platforms/cuda.py), so that V100 users see what they know.
        std::string m = "Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your " +
                        d.name + " GPU has compute capability " + d.cc_string() + ".";
        if (d.cc() >= 80)
            m = "Bfloat16 is only supported on GPUs with compute capability of at least 8.0. This run uses "
                "the "
                "Volta kernels (--cuda-kernels sm70 or compute_70 code) on your " +
                d.name + " GPU, as on a GPU of compute capability 7.0.";
        return invalid_argument(
            m +
            " You can use float16 instead by explicitly setting the `dtype` flag in CLI, for "
            "example: --dtype=half.");
    }
    return invalid_argument("--dtype " + dtype + ": expected auto, half, float or bfloat16");
}

Result<std::unique_ptr<CudaBackend>> CudaBackend::create(const CudaOptions& o) {
    if (o.cuda_kernels != "auto" && o.cuda_kernels != "sm70" && o.cuda_kernels != "basic" &&
        o.cuda_kernels != "sm70-basic")
        return invalid_argument("--cuda-kernels " + o.cuda_kernels +
                                ": expected auto, sm70, basic or sm70-basic");
    VOLT_ASSIGN_OR_RETURN(DeviceInfo dev, probe_device(o.device));
    DispatchInput in;
    in.cc = dev.cc();
    in.kernel_arch = dev.kernel_arch;
    in.force_sm70 = o.cuda_kernels == "sm70" || o.cuda_kernels == "sm70-basic";
    // The straightforward kernels of issue 13 only (a failing fast kernel isolated on the device):
    // --cuda-kernels basic / sm70-basic, or VOLT_CUDA_KERNELS_BASIC=1 for every backend of the process.
    const char* basic_env = std::getenv("VOLT_CUDA_KERNELS_BASIC");
    in.basic_only = o.cuda_kernels == "basic" || o.cuda_kernels == "sm70-basic" ||
                    (basic_env != nullptr && std::string(basic_env) == "1");
    if (const char* off = std::getenv("VOLT_CUDA_KERNELS_OFF")) in.off = off;
    std::string cublas_why;
    const bool cublas_ok = cublas_allowed(in, &cublas_why);
    VOLT_ASSIGN_OR_RETURN(Operand op, resolve_dtype(o.dtype, dev, !cublas_ok));

    std::unique_ptr<CudaBackend> b(new CudaBackend());
    b->options_ = o;
    b->device_ = dev;
    b->operand_ = op;
    // Dense bf16 experts (a fine-tuned checkpoint in the save_pretrained layout) become MXFP4 where the
    // operands are f16: the layout the V100 path is built for. --dtype float keeps them (the reference).
    b->quantize_dense_experts_ = op == Operand::kF16;
    b->scratch_.resize(kNumScratch);
    VOLT_CUDA_CHECK(cudaStreamCreateWithFlags(&b->stream_, cudaStreamNonBlocking));
    for (cudaEvent_t* e : {&b->order_event_, &b->fork_event_, &b->join_event_})
        VOLT_CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
    VOLT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&b->error_), 16));
    VOLT_CUDA_CHECK(cudaMemset(b->error_, 0, 16));
    if (cublas_ok) {
        std::string why;
        b->cublas_ = Cublas::open(dev.cc(), b->stream_, &why);
        if (!b->cublas_) {
            b->cublas_status_ = "off: " + why;
        } else if (!b->cublas_self_test(&why)) {
            b->cublas_status_ = "off: " + b->cublas_->soname() + " failed the self-test GEMM (" + why + ")";
            b->cublas_.reset();
        } else {
            b->cublas_status_ = "on: " + b->cublas_->soname() + " (version " +
                                std::to_string(b->cublas_->version()) + "), self-test GEMM passed";
        }
    } else {
        b->cublas_status_ = cublas_why;
    }
    in.cublas_ready = b->cublas_ != nullptr;
    b->dispatch_ = choose_dispatch(in);
    // Programmatic dependent launch (pdl.cuh) where the running code waits for it (sm_90+ code: the
    // compute_70 PTX of the volta-ptx build has no griddepcontrol) on a GPU that has it (cc >= 9.0).
    // VOLT_CUDA_PDL=0 turns it off (an A/B in one binary).
    const char* pdl_env = std::getenv("VOLT_CUDA_PDL");
    b->pdl_ =
        dev.cc() >= 90 && dev.kernel_arch >= 900 && !(pdl_env != nullptr && std::string(pdl_env) == "0");
    spdlog::info(
        "cuda: {} (compute capability {}, {} SMs, {:.1f} GiB), driver {}, runtime {}, kernel arch {}",
        dev.name, dev.cc_string(), dev.sm_count, dev.total_bytes / 1073741824.0, dev.driver_version,
        dev.runtime_version, dev.kernel_arch);
    spdlog::info("cuda: dtype {} (operands), kernels: {}", operand_name(op), describe(b->dispatch_));
    if (o.single_sequence && b->dispatch_.uses(OpKind::kExperts, "experts_mma_m16n8k16"))
        spdlog::info(
            "cuda: --max-num-seqs 1: generated expert rows take experts_gemv_mxfp4_f16x2 (one token is "
            "faster there than on the MMA kernel)");
    spdlog::info("cuda: cuBLAS {}", b->cublas_status_);
    if (b->pdl_)
        spdlog::info(
            "cuda: programmatic dependent launch on (sm_90: each kernel starts while the last ends)");
    return b;
}

CudaBackend::~CudaBackend() {
    cublas_.reset();
    for (Scratch& s : scratch_)
        if (s.data != nullptr) release(s.data, s.bytes);
    for (const auto& [p, page] : host_registered_) {
        const cudaError_t e = cudaHostUnregister(page);
        if (e != cudaSuccess) cudaGetLastError();  // the pages may be unmapped by now: nothing to undo
    }
    if (error_ != nullptr) {
        const cudaError_t e = cudaFree(error_);
        VOLT_CHECK(e == cudaSuccess || cuda_unloading(e)) << cudaGetErrorString(e);
    }
    for (cudaEvent_t ev : {order_event_, fork_event_, join_event_}) {
        if (ev == nullptr) continue;
        const cudaError_t e = cudaEventDestroy(ev);
        VOLT_CHECK(e == cudaSuccess || cuda_unloading(e)) << cudaGetErrorString(e);
    }
    if (stream_ != nullptr) {
        const cudaError_t e = cudaStreamDestroy(stream_);
        VOLT_CHECK(e == cudaSuccess || cuda_unloading(e)) << cudaGetErrorString(e);
    }
}

std::string CudaBackend::info_json() const {
    nlohmann::ordered_json j;
    j["device"] = device_.name;
    j["compute_capability"] = device_.cc_string();
    j["kernel_arch"] = device_.kernel_arch;
    j["sm_count"] = device_.sm_count;
    j["memory_total_bytes"] = device_.total_bytes;
    j["memory_free_bytes"] = memory().free_bytes;
    j["driver_version"] = device_.driver_version;
    j["runtime_version"] = device_.runtime_version;
    j["built_for"] = device_.built_for;
    j["dtype"] = operand_name(operand_);
    j["kernels"] = dispatch_.why;
    j["kernels_for_cc"] =
        std::to_string(dispatch_.cc_used / 10) + "." + std::to_string(dispatch_.cc_used % 10);
    nlohmann::ordered_json ops;
    for (int i = 0; i < static_cast<int>(OpKind::kCount); ++i) {
        const KernelVariant* v = dispatch_.variant[i];
        ops[op_name(static_cast<OpKind>(i))] = v ? v->name : "none";
    }
    j["dispatch"] = ops;
    j["cublas"] = cublas_status_;
    return j.dump();
}

void CudaBackend::bind_thread() { VOLT_CUDA_CHECK(cudaSetDevice(device_.ordinal)); }

// ---- memory ----

Result<ops::Buffer> CudaBackend::alloc(int64_t bytes) {
    // cudaMalloc allocates on the calling thread's current device: a rank's allocation may come from
    // the executor's thread (KV cache, workspace), which serves every rank in turn.
    VOLT_CUDA_CHECK(cudaSetDevice(device_.ordinal));
    void* p = nullptr;
    const int64_t n = std::max<int64_t>(bytes, 256);
    const cudaError_t e = cudaMalloc(&p, static_cast<size_t>(n));
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError();  // not sticky
        const ops::MemoryStats m = memory();
        return resource_exhausted("cannot allocate " + std::to_string(bytes) + " bytes of GPU memory (" +
                                  std::to_string(m.free_bytes) + " free of " + std::to_string(m.total_bytes) +
                                  ")");
    }
    VOLT_CUDA_CHECK(e);
    return ops::Buffer(this, p, bytes);
}

Result<ops::Buffer> CudaBackend::alloc_host(int64_t bytes) {
    void* p = nullptr;
    const size_t n = static_cast<size_t>(std::max<int64_t>(bytes, 1));
    const cudaError_t e = cudaHostAlloc(&p, n, cudaHostAllocDefault);
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError();  // not sticky
        return resource_exhausted("cannot allocate " + std::to_string(bytes) +
                                  " bytes of pinned host memory for swapped KV blocks: lower --swap-space");
    }
    VOLT_CUDA_CHECK(e);
    std::memset(p, 0, n);
    host_pinned_.insert(p);
    return ops::Buffer(this, p, bytes);
}

bool CudaBackend::pin_host(const void* p, int64_t bytes) {
    if (p == nullptr || bytes <= 0 || host_registered_.count(p) != 0) return false;
    // Whole pages: cudaHostRegister wants them, and the mmap's pages are what gets locked.
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t lo = reinterpret_cast<uintptr_t>(p) / page * page;
    const uintptr_t hi =
        (reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(bytes) + page - 1) / page * page;
    VOLT_CUDA_CHECK(cudaSetDevice(device_.ordinal));
    int read_only = 0;
    if (cudaDeviceGetAttribute(&read_only, cudaDevAttrHostRegisterReadOnlySupported, device_.ordinal) !=
        cudaSuccess) {
        cudaGetLastError();
        read_only = 0;
    }
    // The checkpoint is mapped PROT_READ: without the read-only flag the driver would ask for write access.
    const unsigned flags = cudaHostRegisterPortable | (read_only != 0 ? cudaHostRegisterReadOnly : 0u);
    void* start = reinterpret_cast<void*>(lo);
    if (cudaHostRegister(start, static_cast<size_t>(hi - lo), flags) != cudaSuccess) {
        cudaGetLastError();  // not sticky: the copies stay pageable
        return false;
    }
    host_registered_[p] = start;
    return true;
}

void CudaBackend::unpin_host(const void* p) {
    auto it = host_registered_.find(p);
    if (it == host_registered_.end()) return;
    cudaError_t e = cudaStreamSynchronize(stream_);  // no copy from the pages may still be in flight
    if (cuda_unloading(e)) return;
    VOLT_CUDA_CHECK(e);
    if (cudaHostUnregister(it->second) != cudaSuccess) cudaGetLastError();
    host_registered_.erase(it);
}

void CudaBackend::swap_blocks(const ops::SwapBlocksArgs& a) {
    auto* host = static_cast<uint8_t*>(a.host_pool);
    const int64_t host_block = a.num_layers * 2 * a.block_bytes;
    const int64_t code_bytes = a.block_bytes - a.scale_block_bytes;
    for (int64_t i = 0; i < a.num_blocks; ++i) {
        for (int64_t l = 0; l < a.num_layers; ++l) {
            for (int kv = 0; kv < 2; ++kv) {
                const ops::KvLayer& layer = a.layers[l];
                uint8_t* h = host + a.host_blocks[i] * host_block + (l * 2 + kv) * a.block_bytes;
                // The codes (or f32 / f16 elements), then the scales (int8: ops.h SwapBlocksArgs).
                const std::pair<void*, int64_t> parts[] = {
                    {kv == 0 ? layer.k : layer.v, code_bytes},
                    {kv == 0 ? layer.k_scales : layer.v_scales, a.scale_block_bytes}};
                for (const auto& [pool, bytes] : parts) {
                    if (bytes == 0) continue;
                    uint8_t* dev = static_cast<uint8_t*>(pool) + a.device_blocks[i] * bytes;
                    const auto n = static_cast<size_t>(bytes);
                    if (a.to_host) {
                        VOLT_CUDA_CHECK(cudaMemcpyAsync(h, dev, n, cudaMemcpyDeviceToHost, stream_));
                    } else {
                        VOLT_CUDA_CHECK(cudaMemcpyAsync(dev, h, n, cudaMemcpyHostToDevice, stream_));
                    }
                    h += bytes;
                }
            }
        }
    }
}

void CudaBackend::release(void* data, int64_t) {
    if (data == nullptr) return;
    cudaError_t e = cudaStreamSynchronize(stream_);
    if (cuda_unloading(e)) return;
    VOLT_CUDA_CHECK(e);
    if (auto it = host_pinned_.find(data); it != host_pinned_.end()) {
        host_pinned_.erase(it);
        e = cudaFreeHost(data);
        if (cuda_unloading(e)) return;
        VOLT_CUDA_CHECK(e);
        return;
    }
    if (auto it = host_mapped_.find(data); it != host_mapped_.end()) {
        e = cudaFreeHost(it->second);
        host_mapped_.erase(it);
        if (cuda_unloading(e)) return;
        VOLT_CUDA_CHECK(e);
        return;
    }
    e = cudaFree(data);
    if (cuda_unloading(e)) return;
    VOLT_CUDA_CHECK(e);
}

void CudaBackend::upload(void* dst, const void* src, int64_t bytes) {
    if (bytes <= 0) return;
    // Waits: the caller may reuse or free `src` (pinned or not) as soon as this returns.
    VOLT_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream_));
    VOLT_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::upload_async(void* dst, const void* src, int64_t bytes) {
    if (bytes <= 0) return;
    VOLT_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream_));
}

void CudaBackend::upload_pinned(void* dst, const void* src, int64_t bytes) {
    if (bytes <= 0) return;
    VOLT_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream_));
}

void CudaBackend::download_async(void* dst, const void* src, int64_t bytes) {
    if (bytes <= 0) return;
    VOLT_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, stream_));
}

namespace {
class CudaEvent final : public ops::Event {
  public:
    CudaEvent(cudaStream_t stream, const int* device_error) : stream_(stream), device_error_(device_error) {
        VOLT_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
        VOLT_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&code_), sizeof(int), cudaHostAllocDefault));
        *code_ = kDeviceOk;
    }
    ~CudaEvent() override {
        // Both wait for the device where they must (the event still pending, the copy into code_).
        if (cudaEventSynchronize(event_) == cudaSuccess) (void)cudaFreeHost(code_);
        (void)cudaEventDestroy(event_);
    }
    void record() override {
        VOLT_CUDA_CHECK(cudaMemcpyAsync(code_, device_error_, sizeof(int), cudaMemcpyDeviceToHost, stream_));
        VOLT_CUDA_CHECK(cudaEventRecord(event_, stream_));
    }
    void wait() override {
        VOLT_CUDA_CHECK(cudaEventSynchronize(event_));
        VOLT_CHECK(*code_ == kDeviceOk) << "cuda: a kernel found bad input: " << device_error_message(*code_);
    }

  private:
    cudaStream_t stream_;
    const int* device_error_;
    cudaEvent_t event_ = nullptr;
    int* code_ = nullptr;  // pinned: the device's error word as of the record
};
}  // namespace

std::unique_ptr<ops::Event> CudaBackend::create_event() {
    VOLT_CUDA_CHECK(cudaSetDevice(device_.ordinal));
    return std::make_unique<CudaEvent>(stream_, error_);
}

void CudaBackend::move_ids(const ops::MoveIdsArgs& a) { launch_move_ids(a, ctx()); }

void CudaBackend::scatter_ids(const ops::ScatterIdsArgs& a) { launch_scatter_ids(a, ctx()); }

void CudaBackend::download(void* dst, const void* src, int64_t bytes) {
    if (bytes > 0)
        VOLT_CUDA_CHECK(
            cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, stream_));
    check_device_errors();  // also waits for the copy
}

void CudaBackend::copy(void* dst, const void* src, int64_t bytes) {
    if (bytes <= 0) return;
    VOLT_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, stream_));
}

void CudaBackend::fill(void* dst, uint8_t byte, int64_t bytes) {
    if (bytes <= 0) return;
    VOLT_CUDA_CHECK(cudaMemsetAsync(dst, byte, static_cast<size_t>(bytes), stream_));
}

ops::MemoryStats CudaBackend::memory() const {
    VOLT_CUDA_CHECK(cudaSetDevice(device_.ordinal));  // cudaMemGetInfo reports the current device
    size_t free_b = 0, total_b = 0;
    VOLT_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    return {static_cast<int64_t>(total_b), static_cast<int64_t>(free_b)};
}

void CudaBackend::synchronize() { check_device_errors(); }

void CudaBackend::check_device_errors() {
    int code = 0;
    VOLT_CUDA_CHECK(cudaMemcpyAsync(&code, error_, sizeof(int), cudaMemcpyDeviceToHost, stream_));
    VOLT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    VOLT_CHECK(code == kDeviceOk) << "cuda: a kernel found bad input: " << device_error_message(code);
}

Status CudaBackend::reserve(const ops::WorkspaceLimits& limits) {
    // Scratch sizes need the model's dimensions, which the limits do not carry: they are remembered
    // and each scratch buffer is sized for max_tokens rows the first time an op needs it.
    limits_.max_tokens = std::max(limits_.max_tokens, limits.max_tokens);
    limits_.max_seqs = std::max(limits_.max_seqs, limits.max_seqs);
    limits_.max_seq_len = std::max(limits_.max_seq_len, limits.max_seq_len);
    return Status::ok();
}

void* CudaBackend::scratch(int slot, int64_t bytes) {
    Scratch& s = scratch_[slot];
    if (s.bytes >= bytes && s.data != nullptr) return s.data;
    if (capturing_) {
        // Growing would synchronize a capturing stream. The launches being recorded never run: the
        // capture is reported failed and the caller runs the step eagerly (which grows the buffer).
        capture_spoiled_ = true;
        return s.data != nullptr ? s.data : error_;
    }
    ++scratch_epoch_;
    if (s.data != nullptr) release(s.data, s.bytes);  // waits for the stream first
    s.data = nullptr;
    s.bytes = 0;
    const int64_t n = std::max<int64_t>(bytes, 256);
    VOLT_CUDA_CHECK(cudaSetDevice(device_.ordinal));
    VOLT_CUDA_CHECK(cudaMalloc(&s.data, static_cast<size_t>(n)));
    s.bytes = n;
    return s.data;
}

void CudaBackend::fill_scratch(uint8_t byte) {
    for (const Scratch& s : scratch_) fill(s.data, byte, s.data != nullptr ? s.bytes : 0);
}

namespace {
class CudaGraph final : public ops::Graph {
  public:
    CudaGraph(cudaGraphExec_t exec, cudaStream_t stream) : exec_(exec), stream_(stream) {}
    ~CudaGraph() override {
        const cudaError_t e = cudaGraphExecDestroy(exec_);
        VOLT_CHECK(e == cudaSuccess || cuda_unloading(e)) << cudaGetErrorString(e);
    }
    void launch() override { VOLT_CUDA_CHECK(cudaGraphLaunch(exec_, stream_)); }

  private:
    cudaGraphExec_t exec_;
    cudaStream_t stream_;
};
}  // namespace

Result<std::unique_ptr<ops::Graph>> CudaBackend::capture(const std::function<void()>& body) {
    return capture_group({}, body);
}

bool CudaBackend::can_capture_with(const ops::Backend& peer) const {
    const auto* c = dynamic_cast<const CudaBackend*>(&peer);
    return c != nullptr && c != this && c->device_.ordinal == device_.ordinal;
}

namespace {
// capture_serial(): one number per capture_group, shared by its backends.
std::atomic<uint64_t> last_capture_serial{0};
}  // namespace

Result<std::unique_ptr<ops::Graph>> CudaBackend::capture_group(const std::vector<ops::Backend*>& peers,
                                                               const std::function<void()>& body) {
    std::vector<CudaBackend*> all{this};
    for (ops::Backend* p : peers) {
        if (p == nullptr || !can_capture_with(*p))
            return invalid_argument(
                std::string("cuda graph capture: a peer backend (") + (p != nullptr ? p->name() : "null") +
                ") that is not another CUDA backend on GPU " + std::to_string(device_.ordinal));
        all.push_back(static_cast<CudaBackend*>(p));
    }
    VOLT_CUDA_CHECK(cudaSetDevice(device_.ordinal));
    // Thread-local alone: the calling thread issues everything. With peers their threads launch into
    // capturing streams and may run unrelated CUDA calls meanwhile (relaxed: none of them is refused).
    VOLT_CUDA_CHECK(cudaStreamBeginCapture(
        stream_, peers.empty() ? cudaStreamCaptureModeThreadLocal : cudaStreamCaptureModeRelaxed));
    // The fork: each peer's stream waits on an event of this capture, which joins it to the capture.
    cudaError_t err = cudaSuccess;
    size_t forked = 0;
    if (!peers.empty()) err = cudaEventRecord(fork_event_, stream_);
    while (err == cudaSuccess && forked + 1 < all.size()) {
        err = cudaStreamWaitEvent(all[forked + 1]->stream_, fork_event_, 0);
        if (err == cudaSuccess) ++forked;
    }
    const uint64_t serial = ++last_capture_serial;
    for (CudaBackend* c : all) {
        c->capturing_ = true;
        c->capture_spoiled_ = false;
        c->capture_serial_ = serial;
    }
    if (err == cudaSuccess) body();
    bool spoiled = false;
    for (CudaBackend* c : all) {
        c->capturing_ = false;
        c->capture_serial_ = 0;
        spoiled = spoiled || c->capture_spoiled_;
    }
    // The join (every forked stream, even after a failure: the capture ends only with all of them back).
    for (size_t k = 1; k <= forked; ++k) {
        cudaError_t e = cudaEventRecord(all[k]->join_event_, all[k]->stream_);
        if (e == cudaSuccess) e = cudaStreamWaitEvent(stream_, all[k]->join_event_, 0);
        if (err == cudaSuccess) err = e;
    }
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
    if (err == cudaSuccess) err = end;
    if (err != cudaSuccess || graph == nullptr || spoiled) {
        cudaGetLastError();  // capture errors are not sticky
        if (graph != nullptr) VOLT_CUDA_CHECK(cudaGraphDestroy(graph));
        if (spoiled)
            return Status(StatusCode::kUnavailable, "cuda graph capture: a scratch buffer had to grow");
        return internal_error(std::string("cuda graph capture failed") +
                              (peers.empty() ? "" : " (" + std::to_string(all.size()) + " streams)") + ": " +
                              cudaGetErrorString(err));
    }
    cudaGraphExec_t exec = nullptr;
    const cudaError_t inst = cudaGraphInstantiateWithFlags(&exec, graph, 0);
    VOLT_CUDA_CHECK(cudaGraphDestroy(graph));
    if (inst != cudaSuccess) {
        cudaGetLastError();
        return internal_error(std::string("cuda graph instantiation failed: ") + cudaGetErrorString(inst));
    }
    return std::unique_ptr<ops::Graph>(new CudaGraph(exec, stream_));
}

void CudaBackend::wait_for(ops::Backend& other) {
    auto* o = dynamic_cast<CudaBackend*>(&other);
    VOLT_CHECK(o != nullptr) << "cuda: wait_for a " << other.name() << " backend";
    if (o == this) return;
    VOLT_CUDA_CHECK(cudaEventRecord(o->order_event_, o->stream_));
    VOLT_CUDA_CHECK(cudaStreamWaitEvent(stream_, o->order_event_, 0));
}

// ---- placement ----

Result<ops::Buffer> CudaBackend::upload_bytes(const void* src, int64_t bytes) {
    VOLT_ASSIGN_OR_RETURN(ops::Buffer b, alloc(bytes));
    upload(b.data(), src, bytes);
    placed_bytes_ += bytes;
    return b;
}

Result<ops::VectorWeight> CudaBackend::place_vector_f32(const ops::VectorWeight& host,
                                                        std::vector<ops::Buffer>* owned) {
    if (host.data == nullptr) return host;
    const std::vector<float> f32 = widen_vector(host);
    VOLT_ASSIGN_OR_RETURN(ops::Buffer b, upload_bytes(f32.data(), host.n * 4));
    ops::VectorWeight v{ops::Format::kF32, b.data(), host.n};
    owned->push_back(std::move(b));
    return v;
}

Result<ops::VectorWeight> CudaBackend::place_vector(const ops::VectorWeight& host,
                                                    std::vector<ops::Buffer>* owned) {
    return place_vector_f32(host, owned);
}

Result<ops::DenseWeight> CudaBackend::place_dense(const ops::DenseWeight& host, ops::WeightRole role,
                                                  std::vector<ops::Buffer>* owned) {
    ops::DenseWeight d = host;
    VOLT_ASSIGN_OR_RETURN(d.b, place_vector_f32(host.b, owned));
    if (host.w == nullptr) return d;
    const int64_t n = host.out * host.in;
    if (role == ops::WeightRole::kEmbedding && options_.embedding_in_host_memory) {
        // Pinned, mapped host memory the embedding kernel reads over the bus: a step reads T rows of H
        // values, so the lookup costs nothing noticeable and the table's GPU memory (1.08 GiB for
        // gpt-oss) goes to the KV cache (llama.cpp keeps its token embeddings on the CPU likewise).
        const int64_t bytes = n * format_bytes(host.format);
        void* h = nullptr;
        VOLT_CUDA_CHECK(cudaHostAlloc(&h, static_cast<size_t>(bytes), cudaHostAllocMapped));
        std::memcpy(h, host.w, static_cast<size_t>(bytes));
        void* dev = nullptr;
        VOLT_CUDA_CHECK(cudaHostGetDevicePointer(&dev, h, 0));
        host_mapped_[dev] = h;
        owned->emplace_back(this, dev, bytes);
        d.w = dev;
        spdlog::info("cuda: the embedding table [{}, {}] stays in pinned host memory ({:.1f} MiB)", host.out,
                     host.in, bytes / 1048576.0);
        return d;
    }
    switch (host.format) {
        case ops::Format::kBf16: {
            // The embedding is a lookup (widened exactly either way): it stays bf16.
            if (operand_ == Operand::kF16 && role != ops::WeightRole::kEmbedding) {
                const F16RangeReport r = check_bf16_to_f16(static_cast<const uint16_t*>(host.w), n);
                if (r.converts()) {
                    std::vector<uint16_t> f16(n);
                    convert_bf16_to_f16(static_cast<const uint16_t*>(host.w), n, f16.data());
                    VOLT_ASSIGN_OR_RETURN(ops::Buffer b, upload_bytes(f16.data(), n * 2));
                    d.w = b.data();
                    d.format = ops::Format::kF16;
                    owned->push_back(std::move(b));
                    ++dense_to_f16_;
                    spdlog::debug("cuda: [{}, {}] bf16 -> f16: {}", host.out, host.in, r.to_string());
                    break;
                }
                ++dense_kept_bf16_;
                spdlog::warn("cuda: a [{}, {}] weight stays bf16 (widened in registers): {}", host.out,
                             host.in, r.to_string());
            }
            VOLT_ASSIGN_OR_RETURN(ops::Buffer b, upload_bytes(host.w, n * 2));
            d.w = b.data();
            owned->push_back(std::move(b));
            break;
        }
        case ops::Format::kF16:
        case ops::Format::kF32: {
            VOLT_ASSIGN_OR_RETURN(ops::Buffer b, upload_bytes(host.w, n * format_bytes(host.format)));
            d.w = b.data();
            owned->push_back(std::move(b));
            break;
        }
        case ops::Format::kInt8:
        case ops::Format::kInt4: {
            // Integer weights (docs/quantization.md) of the attention projections and lm_head, repacked
            // row-major for the GEMV (cuda/placement.h); the embedding and the router stay bf16.
            if (role != ops::WeightRole::kAttention && role != ops::WeightRole::kLmHead)
                return unimplemented(std::string("--device cuda: ") + ops::format_name(host.format) +
                                     " weights for the embedding or the router (only the attention "
                                     "projections and lm_head are quantized)");
            IntWeightsHost r;
            VOLT_RETURN_IF_ERROR(repack_int_weight(host, &r));
            VOLT_ASSIGN_OR_RETURN(ops::Buffer codes,
                                  upload_bytes(r.codes.data(), static_cast<int64_t>(r.codes.size())));
            VOLT_ASSIGN_OR_RETURN(ops::Buffer meta,
                                  upload_bytes(r.meta.data(), static_cast<int64_t>(r.meta.size())));
            d.w = codes.data();
            if (host.format == ops::Format::kInt8) {
                d.scales = meta.as<uint16_t>();
            } else {
                d.zeros = meta.data();
                d.scales = nullptr;
            }
            d.cuda_layout = true;
            owned->push_back(std::move(codes));
            owned->push_back(std::move(meta));
            ++dense_int_;
            break;
        }
        default:
            return unimplemented(std::string("--device cuda: ") + ops::format_name(host.format) +
                                 " dense weights are not supported (bf16, f16, f32, int8, int4)");
    }
    if (role == ops::WeightRole::kLmHead) {
        spdlog::info(
            "cuda: weights placed: {:.1f} MiB; dense bf16 -> f16: {} tensors, kept bf16: {}; int8/int4: {}; "
            "dense experts quantized to MXFP4: {}",
            placed_bytes_ / 1048576.0, dense_to_f16_, dense_kept_bf16_, dense_int_, experts_quantized_);
    }
    return d;
}

Result<ops::QkvWeights> CudaBackend::place_qkv(const ops::QkvWeights& host, std::vector<ops::Buffer>* owned) {
    const ops::DenseWeight &hq = host.q, &hk = host.k, &hv = host.v;
    auto vec_bytes = [](ops::Format f) -> int64_t { return f == ops::Format::kF32 ? 4 : 2; };
    const bool same_bias = (hq.b.data == nullptr && hk.b.data == nullptr && hv.b.data == nullptr) ||
                           (hq.b.data != nullptr && hk.b.data != nullptr && hv.b.data != nullptr &&
                            hq.b.format == hk.b.format && hq.b.format == hv.b.format);
    const bool int8 = hq.format == ops::Format::kInt8 && hq.in % 16 == 0;
    // int4: whole 16-byte chunks per group (the GEMV's rule) and the same groups in all three.
    const bool int4 = hq.format == ops::Format::kInt4 && hq.group_size > 0 && hq.group_size % 32 == 0 &&
                      hq.in % hq.group_size == 0 && hk.group_size == hq.group_size &&
                      hv.group_size == hq.group_size;
    const bool fusable = !host.fused() && hq.format == hk.format && hq.format == hv.format &&
                         hq.in == hk.in && hq.in == hv.in && hq.in % 8 == 0 && same_bias &&
                         (hq.format == ops::Format::kBf16 || hq.format == ops::Format::kF16 ||
                          hq.format == ops::Format::kF32 || int8 || int4);
    if (dispatch_.uses(OpKind::kLinear, "linear_gemv_ld128_f32acc") && fusable) {
        // Fused at load: one [q | k | v] weight read by one GEMV launch (qkv_rope_kvwrite below), in the
        // host layouts: f16/bf16/f32 and int8 rows (and int8's scales) concatenate; AWQ's [in, out / 8]
        // words, [in / g, out / 8] zeros and [in / g, out] scales concatenate along out, row by row.
        // place_dense then places (integer weights: repacks) the fused tensor.
        const int64_t rows = hq.out + hk.out + hv.out, in = hq.in;
        std::vector<uint8_t> w, z, sc, b;
        auto cat_rows = [](std::vector<uint8_t>* dst, int64_t n_rows,
                           std::initializer_list<std::pair<const void*, int64_t>> parts) {
            for (int64_t r = 0; r < n_rows; ++r)
                for (const auto& [p, bytes] : parts) {
                    const auto* src = static_cast<const uint8_t*>(p) + r * bytes;
                    dst->insert(dst->end(), src, src + bytes);
                }
        };
        ops::DenseWeight f = hq;
        f.out = rows;
        if (int8) {
            cat_rows(&w, 1, {{hq.w, hq.out * in}, {hk.w, hk.out * in}, {hv.w, hv.out * in}});
            cat_rows(&sc, 1, {{hq.scales, hq.out * 2}, {hk.scales, hk.out * 2}, {hv.scales, hv.out * 2}});
            f.scales = reinterpret_cast<const uint16_t*>(sc.data());
        } else if (int4) {
            if (hq.zeros == nullptr || hk.zeros == nullptr || hv.zeros == nullptr || hq.out % 8 != 0 ||
                hk.out % 8 != 0 || hv.out % 8 != 0)
                return invalid_argument("int4 q/k/v weights without zero points or with out % 8 != 0");
            const int64_t groups = in / hq.group_size;
            cat_rows(&w, in, {{hq.w, hq.out / 2}, {hk.w, hk.out / 2}, {hv.w, hv.out / 2}});
            cat_rows(&z, groups, {{hq.zeros, hq.out / 2}, {hk.zeros, hk.out / 2}, {hv.zeros, hv.out / 2}});
            cat_rows(&sc, groups,
                     {{hq.scales, hq.out * 2}, {hk.scales, hk.out * 2}, {hv.scales, hv.out * 2}});
            f.zeros = z.data();
            f.scales = reinterpret_cast<const uint16_t*>(sc.data());
        } else {
            const int64_t eb = format_bytes(hq.format);
            cat_rows(&w, 1, {{hq.w, hq.out * in * eb}, {hk.w, hk.out * in * eb}, {hv.w, hv.out * in * eb}});
        }
        f.w = w.data();
        f.b = {};
        if (hq.b.data != nullptr) {
            const int64_t vb = vec_bytes(hq.b.format);
            cat_rows(&b, 1, {{hq.b.data, hq.b.n * vb}, {hk.b.data, hk.b.n * vb}, {hv.b.data, hv.b.n * vb}});
            f.b = {hq.b.format, b.data(), rows};
        }
        ops::QkvWeights q;
        VOLT_ASSIGN_OR_RETURN(q.q, place_dense(f, ops::WeightRole::kAttention, owned));
        q.k = hk;
        q.k.w = nullptr;  // fused(): q holds all three
        q.k.b = {};
        q.v = hv;
        q.v.w = nullptr;
        q.v.b = {};
        return q;
    }
    // Unfused (the basic kernels): the default qkv_rope_kvwrite runs three linears.
    ops::QkvWeights q;
    VOLT_ASSIGN_OR_RETURN(q.q, place_dense(hq, ops::WeightRole::kAttention, owned));
    VOLT_ASSIGN_OR_RETURN(q.k, place_dense(hk, ops::WeightRole::kAttention, owned));
    VOLT_ASSIGN_OR_RETURN(q.v, place_dense(hv, ops::WeightRole::kAttention, owned));
    return q;
}

void CudaBackend::qkv_rope_kvwrite(const ops::QkvRopeKvWriteArgs& a) {
    if (!a.w.fused()) {
        ops::Backend::qkv_rope_kvwrite(a);
        return;
    }
    const int64_t T = a.num_tokens, qd = a.num_heads * a.head_dim, kvd = a.num_kv_heads * a.head_dim;
    const int64_t H = a.hidden;
    VOLT_CHECK(a.w.q.out == qd + 2 * kvd)
        << "fused qkv of " << a.w.q.out << " rows for q " << qd << ", kv " << kvd;
    // Prompt rows [0, P) on tensor cores, generated rows [P, T) by the GEMV (ops.h prompt_rows).
    const int64_t P =
        prompt_gemm(a.w.q) && a.norm.format == ops::Format::kF32 ? std::min(a.prompt_rows, T) : 0;
    if (a.keep_intermediates)  // the trace reads the normed input: rmsnorm apart
        launch_rmsnorm({.x = a.x, .w = a.norm, .y = a.h, .num_rows = T, .hidden = H, .eps = a.eps}, ctx());
    if (P > 0) {
        auto* a16 = static_cast<uint16_t*>(scratch(kGemmA, P * H * 2));
        auto* back = static_cast<float*>(scratch(kGemmBack, P * 4));
        if (a.keep_intermediates)
            launch_rows_to_operand(a.h, {}, 0.0f, P, H, operand_, false, 0, a16, back, ctx());
        else
            launch_rows_to_operand(a.x, a.norm, a.eps, P, H, operand_, false, 0, a16, back, ctx());
        launch_gemm_dense(a16, back, P, a.w.q, {.y0 = a.q, .y1 = a.k, .y2 = a.v, .n0 = qd, .n1 = kvd},
                          operand_, ctx());
    }
    if (P < T) {
        const bool normed = a.keep_intermediates;
        const ops::LinearArgs la{
            .x = (normed ? a.h : a.x) + P * H, .weight = a.w.q, .y = a.q + P * qd, .num_tokens = T - P};
        VOLT_CHECK(linear_gemv_eligible(la)) << "fused qkv: the GEMV does not take this input (alignment)";
        if (normed)
            launch_linear_gemv_split3(la, a.q + P * qd, qd, a.k + P * kvd, kvd, a.v + P * kvd, kvd, operand_,
                                      ctx());
        else  // the norm inside the GEMV's staging (bitwise the same operands)
            launch_linear_gemv_split3_norm(la, a.norm, a.eps, a.q + P * qd, qd, a.k + P * kvd, kvd,
                                           a.v + P * kvd, kvd, operand_, ctx());
    }
    const ops::RopeArgs rope{a.q, a.k,         a.positions,    a.inv_freq, a.mscale,
                             T,   a.num_heads, a.num_kv_heads, a.head_dim};
    const ops::KvWriteArgs kvw{a.k, a.v, a.slot_mapping, a.kv, T, a.num_kv_heads, a.head_dim};
    if (a.slot_mapping != nullptr && (a.kv.format == ops::Format::kF16 || a.kv.format == ops::Format::kF32)) {
        launch_rope_kv_write(rope, kvw, ctx());  // one launch, the same bits
        return;
    }
    launch_rope(rope, ctx());
    launch_kv_write(kvw, ctx());
}

Result<ops::ExpertWeights> CudaBackend::place_experts(const ops::ExpertWeights& host,
                                                      std::vector<ops::Buffer>* owned) {
    ops::ExpertWeights d = host;
    VOLT_ASSIGN_OR_RETURN(d.bias, place_vector_f32(host.bias, owned));
    const int64_t rows = host.num_experts * host.out;
    auto put = [&](const void* src, int64_t bytes) -> Result<const void*> {
        VOLT_ASSIGN_OR_RETURN(ops::Buffer b, upload_bytes(src, bytes));
        const void* p = b.data();
        owned->push_back(std::move(b));
        return p;
    };
    if (host.format == ops::Format::kMxfp4) {
        if (host.in % 32 != 0)
            return invalid_argument("MXFP4 experts with rows of " + std::to_string(host.in));
        VOLT_ASSIGN_OR_RETURN(const void* blocks, put(host.blocks, rows * (host.in / 32) * 16));
        VOLT_ASSIGN_OR_RETURN(const void* scales, put(host.scales, rows * (host.in / 32)));
        d.blocks = static_cast<const uint8_t*>(blocks);
        d.scales = static_cast<const uint8_t*>(scales);
        return d;
    }
    if (host.format != ops::Format::kBf16 && host.format != ops::Format::kF16)
        return unimplemented(std::string("--device cuda: ") + ops::format_name(host.format) + " experts");
    if (quantize_dense_experts_ && host.in % 32 == 0) {
        if (experts_quantized_ == 0)
            spdlog::info(
                "cuda: notice: dense {} experts are quantized to MXFP4 at load (best-of-2 scales, "
                "docs/quantization.md: about 1e-2 nats of KL on the demo model); --dtype float keeps them "
                "dense",
                ops::format_name(host.format));
        std::vector<uint8_t> blocks, scales;
        VOLT_RETURN_IF_ERROR(quantize_experts_mxfp4(host, &blocks, &scales));
        VOLT_ASSIGN_OR_RETURN(const void* b, put(blocks.data(), static_cast<int64_t>(blocks.size())));
        VOLT_ASSIGN_OR_RETURN(const void* s, put(scales.data(), static_cast<int64_t>(scales.size())));
        d.format = ops::Format::kMxfp4;
        d.blocks = static_cast<const uint8_t*>(b);
        d.scales = static_cast<const uint8_t*>(s);
        d.w = nullptr;
        ++experts_quantized_;
        return d;
    }
    VOLT_ASSIGN_OR_RETURN(const void* w, put(host.w, rows * host.in * 2));
    d.w = w;
    return d;
}

// ---- ops ----

void CudaBackend::embedding(const ops::EmbeddingArgs& a) { launch_embedding(a, ctx()); }
void CudaBackend::rmsnorm(const ops::RmsNormArgs& a) { launch_rmsnorm(a, ctx()); }
void CudaBackend::rope(const ops::RopeArgs& a) { launch_rope(a, ctx()); }
void CudaBackend::kv_write(const ops::KvWriteArgs& a) { launch_kv_write(a, ctx()); }
void CudaBackend::attention(const ops::AttentionArgs& a) {
    if (dispatch_.uses(OpKind::kAttention, "attention_splitkv_gqa_f32acc") && attention_split_eligible(a)) {
        launch_attention_split(
            a, static_cast<float*>(scratch(kAttnPartials, attention_split_scratch_bytes(a))), ctx());
        return;
    }
    launch_attention(a, ctx());
}
void CudaBackend::add(const ops::AddArgs& a) { launch_add(a, ctx()); }

void CudaBackend::linear(const ops::LinearArgs& a) {
    if (dispatch_.uses(OpKind::kLinear, "linear_gemv_ld128_f32acc") && linear_gemv_eligible(a)) {
        launch_linear_gemv(a, operand_, ctx());
        return;
    }
    if (cublas_ && dispatch_.uses(OpKind::kLinear, "linear_cublas_f16_tiles64") &&
        a.weight.format == ops::Format::kF16 && operand_ == Operand::kF16) {
        linear_cublas(a);
        return;
    }
    launch_linear(a, operand_, ctx());
}

void CudaBackend::o_proj_residual(const ops::OProjResidualArgs& a) {
    const int64_t T = a.num_tokens, K = a.o.in, H = a.o.out;
    const ops::LinearArgs la{
        .x = a.attn, .weight = a.o, .y = a.keep_intermediates ? a.out : nullptr, .num_tokens = T};
    if (!dispatch_.uses(OpKind::kLinear, "linear_gemv_ld128_f32acc") || !linear_gemv_eligible(la)) {
        ops::Backend::o_proj_residual(a);
        return;
    }
    // Prompt rows [0, P) on tensor cores, generated rows [P, T) by the GEMV (ops.h prompt_rows).
    const int64_t P = prompt_gemm(a.o) ? std::min(a.prompt_rows, T) : 0;
    if (P > 0) {
        auto* a16 = static_cast<uint16_t*>(scratch(kGemmA, P * K * 2));
        auto* back = static_cast<float*>(scratch(kGemmBack, P * 4));
        launch_rows_to_operand(a.attn, {}, 0.0f, P, K, operand_, false, 0, a16, back, ctx());
        launch_gemm_dense(a16, back, P, a.o, {.y0 = a.keep_intermediates ? a.out : nullptr, .residual = a.x},
                          operand_, ctx());
    }
    if (P < T) {
        ops::LinearArgs rest = la;
        rest.x = a.attn + P * K;
        rest.y = la.y != nullptr ? la.y + P * H : nullptr;
        rest.num_tokens = T - P;
        launch_linear_gemv_residual(rest, a.x + P * H, operand_, ctx());  // one launch: x += Wo attn + bo
    }
}

bool CudaBackend::prompt_gemm(const ops::DenseWeight& w) const {
    return dispatch_.uses(OpKind::kPromptGemm, "gemm_mma_m16n8k16_f32acc") &&
           gemm_dense_eligible(w, operand_);
}

void CudaBackend::linear_cublas(const ops::LinearArgs& a) {
    const int64_t rows = a.rows != nullptr ? a.num_rows : a.num_tokens;
    const int64_t in = a.weight.in, out = a.weight.out;
    auto* tile_a = static_cast<uint16_t*>(scratch(kCublasA, kCublasTileRows * in * 2));
    auto* tile_c = static_cast<float*>(scratch(kCublasC, kCublasTileRows * out * 4));
    for (int64_t t0 = 0; t0 < rows; t0 += kCublasTileRows) {
        const int64_t n = std::min(kCublasTileRows, rows - t0);
        const float* x = a.rows != nullptr ? a.x : a.x + t0 * in;
        const int32_t* r = a.rows != nullptr ? a.rows + t0 : nullptr;
        launch_rows_to_f16(x, r, n, kCublasTileRows, in, tile_a, ctx());
        const Status st = cublas_->gemm_f16_f32(tile_a, static_cast<const uint16_t*>(a.weight.w), tile_c,
                                                kCublasTileRows, out, in);
        VOLT_CHECK(st.is_ok()) << st.to_string();
        launch_bias_rows(tile_c, a.weight.b, n, out, a.y + t0 * out, ctx());
    }
}

void CudaBackend::router(const ops::RouterArgs& a) {
    const int64_t T = a.num_tokens, E = a.router.out;
    if (T <= 0) return;
    auto* logits = static_cast<float*>(scratch(kRouterLogits, std::max(T, limits_.max_tokens) * E * 4));
    ops::LinearArgs la{.x = a.x, .weight = a.router, .y = logits, .num_tokens = T};
    if (dispatch_.uses(OpKind::kLinear, "linear_gemv_ld128_f32acc") && linear_gemv_eligible(la)) {
        launch_linear_gemv(la, Operand::kF32, ctx());
    } else {
        launch_linear(la, Operand::kF32, ctx());
    }
    launch_router_topk(logits, T, E, a.top_k, a.expert_ids, a.expert_weights, ctx());
}

void CudaBackend::moe_route(const ops::MoeRouteArgs& a) {
    const int64_t T = a.num_tokens, E = a.router.out;
    const ops::LinearArgs la{.x = a.x, .weight = a.router, .num_tokens = T};
    if (T <= 0 || !dispatch_.uses(OpKind::kLinear, "linear_gemv_ld128_f32acc") || !linear_gemv_eligible(la) ||
        a.norm.format != ops::Format::kF32 || !dispatch_.uses(OpKind::kRouter, "router_warp_topk_f32")) {
        ops::Backend::moe_route(a);
        return;
    }
    // One launch for rmsnorm + router logits (h written by block 0: the experts read it), then top-k.
    auto* logits = static_cast<float*>(scratch(kRouterLogits, std::max(T, limits_.max_tokens) * E * 4));
    ops::LinearArgs lr = la;
    lr.y = logits;
    launch_linear_gemv_norm(lr, a.norm, a.eps, a.h, Operand::kF32, ctx());
    launch_router_topk(logits, T, E, a.top_k, a.expert_ids, a.expert_weights, ctx());
}

void CudaBackend::final_logits(const ops::FinalLogitsArgs& a) {
    const ops::LinearArgs la{.x = a.x,
                             .weight = a.lm_head,
                             .y = a.logits,
                             .num_tokens = a.num_rows,
                             .rows = a.rows,
                             .num_rows = a.num_rows};
    if (a.num_rows <= 0 || !dispatch_.uses(OpKind::kLinear, "linear_gemv_ld128_f32acc") ||
        !linear_gemv_eligible(la) || a.norm.format != ops::Format::kF32) {
        ops::Backend::final_logits(a);
        return;
    }
    launch_linear_gemv_norm(la, a.norm, a.eps, a.keep_intermediates ? a.h : nullptr, operand_, ctx());
}

namespace {
// The rows [P, T) of an experts call (its generated rows).
ops::ExpertsArgs rows_from(const ops::ExpertsArgs& a, int64_t P) {
    const int64_t H = a.down.out, k = a.top_k;
    ops::ExpertsArgs rest = a;
    rest.x = a.x + P * H;
    rest.expert_ids = a.expert_ids + P * k;
    rest.expert_weights = a.expert_weights + P * k;
    rest.out = a.out + P * H;
    rest.num_tokens = a.num_tokens - P;
    rest.prompt_rows = 0;
    return rest;
}
}  // namespace

const char* CudaBackend::experts_kernel(const ops::ExpertsArgs& a) const {
    constexpr const char* kMma = "experts_mma_m16n8k16";
    constexpr const char* kGemv = "experts_gemv_mxfp4_f16x2";
    const bool mma_chosen = dispatch_.uses(OpKind::kExperts, kMma);
    // One token reads its 4 experts either way; the MMA path's extra launches cost more than its fewer
    // instructions gain, so a process that never batches two sequences keeps the GEMV.
    if (mma_chosen && !options_.single_sequence && experts_mma_eligible(a, operand_)) return kMma;
    // The MMA row stands above the GEMV in the dispatch table (min_cc 80 over 70): where it is chosen, the
    // GEMV is usable too.
    if ((mma_chosen || dispatch_.uses(OpKind::kExperts, kGemv)) && experts_gemv_eligible(a)) return kGemv;
    return "experts_warp_mxfp4_3pass";
}

void CudaBackend::experts(const ops::ExpertsArgs& a) {
    const int64_t T = a.num_tokens;
    if (T <= 0) return;
    const int64_t pairs = std::max(T, limits_.max_tokens) * a.top_k;
    const char* kernel = experts_kernel(a);
    const bool prompt_gemm = dispatch_.uses(OpKind::kPromptGemm, "gemm_mma_m16n8k16_f32acc");
    if (std::strcmp(kernel, "experts_mma_m16n8k16") == 0) {
        // Prompt rows [0, P) on the prompt GEMM, generated rows [P, T) on the decode MMA kernel.
        const int64_t P = prompt_gemm ? std::min(a.prompt_rows, T) : 0;
        // Sized for a step's most generated rows (one per sequence) even when every row is a prompt row: a
        // later decode step's graph capture then finds it grown (it must not allocate).
        const int64_t most =
            limits_.max_seqs > 0 ? std::min(limits_.max_seqs, limits_.max_tokens) : limits_.max_tokens;
        void* s = scratch(kExpertsMma, experts_mma_scratch_bytes(std::max(T - P, most), a));
        if (P > 0) launch_gemm_experts(a, P, scratch(kGemmExperts, gemm_experts_scratch_bytes(P, a)), ctx());
        if (P < T) launch_experts_mma(rows_from(a, P), s, ctx());
        return;
    }
    if (std::strcmp(kernel, "experts_gemv_mxfp4_f16x2") == 0) {
        // Prompt rows [0, P) on tensor cores, generated rows [P, T) by the GEMV (ops.h prompt_rows).
        const int64_t P = prompt_gemm && gemm_experts_eligible(a, operand_) ? std::min(a.prompt_rows, T) : 0;
        // Sized for max_tokens rows even when every row is a prompt row: a later decode step's graph
        // capture then finds it grown (it must not allocate).
        void* act = scratch(kExpertAct, experts_gemv_act_bytes(pairs, a.down.in));
        if (P > 0) launch_gemm_experts(a, P, scratch(kGemmExperts, gemm_experts_scratch_bytes(P, a)), ctx());
        if (P < T) launch_experts_gemv(rows_from(a, P), act, ctx());
        return;
    }
    auto* act = static_cast<float*>(scratch(kExpertAct, pairs * a.down.in * 4));
    auto* y = static_cast<float*>(scratch(kExpertY, pairs * a.down.out * 4));
    launch_experts(a, act, y, ctx());
}

double CudaBackend::measure_read_gbps(int64_t bytes) {
    bytes = bytes / 16 * 16;
    if (bytes < 16) return 0.0;
    auto buf = alloc(bytes);
    auto sink = alloc(4096 * 4);
    if (!buf.is_ok() || !sink.is_ok()) return 0.0;
    fill(buf->data(), 0x5A, bytes);
    cudaEvent_t t0, t1;
    VOLT_CUDA_CHECK(cudaEventCreate(&t0));
    VOLT_CUDA_CHECK(cudaEventCreate(&t1));
    for (int i = 0; i < 2; ++i)
        launch_read_bandwidth(buf->data(), bytes, device_.sm_count, sink->as<uint32_t>(), ctx());
    constexpr int kIters = 10;
    VOLT_CUDA_CHECK(cudaEventRecord(t0, stream_));
    for (int i = 0; i < kIters; ++i)
        launch_read_bandwidth(buf->data(), bytes, device_.sm_count, sink->as<uint32_t>(), ctx());
    VOLT_CUDA_CHECK(cudaEventRecord(t1, stream_));
    VOLT_CUDA_CHECK(cudaEventSynchronize(t1));
    float ms = 0.0f;
    VOLT_CUDA_CHECK(cudaEventElapsedTime(&ms, t0, t1));
    VOLT_CUDA_CHECK(cudaEventDestroy(t0));
    VOLT_CUDA_CHECK(cudaEventDestroy(t1));
    check_device_errors();
    return ms > 0.0f ? static_cast<double>(bytes) * kIters / (static_cast<double>(ms) * 1e6) : 0.0;
}

void CudaBackend::sample(const ops::SampleArgs& a) {
    if (a.num_rows <= 0) return;
    const int64_t per_launch = std::min(a.num_rows, kSampleRowsPerLaunch);
    void* s = scratch(kSampleRows, per_launch * sample_scratch_bytes_per_row(a.vocab_size_real));
    launch_sample(a, s, per_launch, ctx());
}

bool CudaBackend::cublas_self_test(std::string* why) {
    // One GEMM of the linear layout with values exact in f16, through cuBLAS and through our kernel.
    constexpr int64_t m = kCublasTileRows, n = 96, k = 320;
    std::vector<float> x(m * k);
    std::vector<uint16_t> w(n * k);
    uint64_t s = 0x9E3779B97F4A7C15ull;
    auto next = [&] {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        return static_cast<float>(static_cast<int64_t>(s >> 40) % 2001 - 1000) /
               512.0f;  // k/512, exact in f16
    };
    for (float& v : x) v = next();
    for (uint16_t& v : w) v = f32_to_f16(next());
    auto dx = alloc(m * k * 4), dw = alloc(n * k * 2), dy = alloc(m * n * 4), da = alloc(m * k * 2),
         dc = alloc(m * n * 4);
    if (!dx.is_ok() || !dw.is_ok() || !dy.is_ok() || !da.is_ok() || !dc.is_ok()) {
        *why = "no memory for the test";
        return false;
    }
    upload(dx->data(), x.data(), m * k * 4);
    upload(dw->data(), w.data(), n * k * 2);
    ops::DenseWeight weight;
    weight.format = ops::Format::kF16;
    weight.w = dw->data();
    weight.out = n;
    weight.in = k;
    launch_linear({.x = dx->as<float>(), .weight = weight, .y = dy->as<float>(), .num_tokens = m},
                  Operand::kF16, ctx());
    launch_rows_to_f16(dx->as<float>(), nullptr, m, m, k, da->as<uint16_t>(), ctx());
    const Status st = cublas_->gemm_f16_f32(da->as<uint16_t>(), dw->as<uint16_t>(), dc->as<float>(), m, n, k);
    if (!st.is_ok()) {
        *why = st.to_string();
        return false;
    }
    std::vector<float> ours(m * n), theirs(m * n);
    download(ours.data(), dy->data(), m * n * 4);
    download(theirs.data(), dc->data(), m * n * 4);
    for (int64_t r = 0; r < m; ++r) {
        for (int64_t o = 0; o < n; ++o) {
            double mag = 0;
            for (int64_t i = 0; i < k; ++i) mag += std::fabs(x[r * k + i] * f16_to_f32(w[o * k + i]));
            const double diff = std::fabs(double(ours[r * n + o]) - double(theirs[r * n + o]));
            if (!(diff <= 1e-3 * mag + 1e-5)) {  // a layout mistake is off by ~mag
                *why = "C[" + std::to_string(r) + ", " + std::to_string(o) +
                       "] = " + std::to_string(theirs[r * n + o]) + ", ours " +
                       std::to_string(ours[r * n + o]);
                return false;
            }
        }
    }
    return true;
}

}  // namespace volt::cuda
