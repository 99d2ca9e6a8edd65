// The ops of the GPT-OSS forward pass and the Backend interface every backend implements (cpu:: in
// src/cpu, cuda:: in src/cuda): memory, weight placement, fine ops (one piece of spec §3 each), coarse
// ops (what a GPU fuses into one launch; defaults built from the fine ops, src/ops/backend.cc), the
// sample op, KV copy-on-write and KV swap to host memory, and what the asynchronous executor enqueues a
// step with (upload_pinned, download_async, token-id moves, events). model/forward.cc calls the coarse ops
// only. Contracts: every pointer in an Args struct lives in the backend's memory; activations between ops are
// f32 ([rows, cols], row-major) so every op's output reaches the f32 residual stream without an fp16
// round trip (a backend may narrow to fp16 in registers as matmul operands); the KV cache is f32, f16 or
// int8 with per-head scales (KvLayer::format; int8 on backends whose supports_kv_format says so). Every
// reduction has an order fixed by the shape and the row's own data: outputs are bitwise independent of the
// batch. Matmul-like ops (linear, router, experts, final_logits and the coarse ops that contain them) take
// any finite f32 input up to 1e6 in magnitude and stay within their tolerance: a backend that narrows
// activations to fp16 operands must scale them (per row or per block, as int8 activation quantization does)
// so nothing overflows (docs/public-bugs.md BUG-22: fp16 GEMM inputs past 65504 became inf on Volta). Head
// dims are even; block sizes are any positive number of tokens. Math sources: spec/gpt-oss.md §3 (named on
// each op). Tests: the op harness tests/kernels/op_test.cc (volt_op_test, against a double-precision
// reference), the whole pass against transformers in tests/golden/. C++17 (the .cu files include it).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "ops/sample.h"
#include "ops/weights.h"

namespace volt::ops {

// ---- fine ops --------------------------------------------------------------------------------------

// out[t, :] = table[ids[t], :] as f32 (spec §3.1). ids < table.out (checked). A vocab-sharded table
// (tensor parallelism) holds ids [id_begin, id_begin + table.out) of a vocabulary of vocab_size: ids must
// be < vocab_size (checked) and rows of ids outside the shard are zero (an all-reduce sums the shards).
struct EmbeddingArgs {
    const int32_t* ids;  // [T]
    DenseWeight table;   // [V or the shard's rows, H], no bias
    float* out;          // [T, H]
    int64_t num_tokens;
    int64_t id_begin = 0;    // the shard's first id
    int64_t vocab_size = 0;  // > 0: the table is a shard of this vocabulary
};

// y[r] = x[row r] / sqrt(mean(x[row r]^2) + eps) * w, f32 (spec §3.3); row r = rows[r] when rows is set,
// else r. x, y [*, H] (may alias when rows is null).
struct RmsNormArgs {
    const float* x;
    VectorWeight w;  // [H]
    float* y;
    int64_t num_rows, hidden;
    float eps;
    const int32_t* rows = nullptr;  // [num_rows] optional row indices into x
};

// y[r, o] = sum_i x[row r, i] W[o, i] + b[o] (f32 accumulate); row r = rows[r] when rows is set.
struct LinearArgs {
    const float* x;  // [T, in]
    DenseWeight weight;
    float* y;  // [T or num_rows, out]
    int64_t num_tokens;
    const int32_t* rows = nullptr;  // optional [num_rows] row indices into x
    int64_t num_rows = 0;
};

// RoPE on q [T, nh, d] and k [T, nkv, d] in place, NeoX half-split pairs (x_i, x_{i+d/2}), angle
// positions[t] * inv_freq[i] in f32, cos and sin multiplied by mscale (YaRN, spec §3.5).
struct RopeArgs {
    float* q;
    float* k;
    const int32_t* positions;  // [T]
    const float* inv_freq;     // [d/2]
    float mscale;
    int64_t num_tokens, num_heads, num_kv_heads, head_dim;
};

// Writes this step's k, v rows into the paged cache of one layer (converted to kv.format). Slots < 0
// are skipped; a slot appears at most once per call.
struct KvWriteArgs {
    const float* k;               // [T, nkv, d]
    const float* v;               // [T, nkv, d]
    const int64_t* slot_mapping;  // [T]
    KvLayer kv;
    int64_t num_tokens, num_kv_heads, head_dim;
};

// Paged attention with sinks and an optional sliding window (spec §3.4). Sequence s has seq_lens[s] keys
// after this step and q_len = query_start_loc[s+1] - query_start_loc[s] new rows; row i is the query at
// sequence index n = seq_lens[s] - q_len + i and attends to key indices [max(0, n - window + 1), n]
// (window <= 0: [0, n]). Key index j lives at slot block_tables[s * max_blocks + j / block_size] *
// block_size + j % block_size; entries -1 are blocks the engine freed (sliding window) and are never read.
// With table_rows, sequence s reads table row table_rows[s] instead of row s (the executor's block tables
// kept in backend memory by seq_slot, model/forward.h DeviceBlockTables): block_tables then has a row per
// seq_slot (and a padding row), max_blocks its width.
// Positions matter only to RoPE (applied before). Query head h reads kv head
// h / (nh / nkv). Scores q.k * scale; the sink z_h joins the softmax denominator only. A backend that
// splits long contexts (split-KV) fixes the split by each sequence's own length, never by the batch.
struct AttentionArgs {
    const float* q;  // [T, nh, d] (after RoPE)
    KvLayer kv;
    const int32_t* seq_lens;         // [S] keys of each sequence after this step
    const int32_t* query_start_loc;  // [S + 1]
    const int32_t* block_tables;     // [S, max_blocks]
    VectorWeight sinks;              // [nh]
    float* out;                      // [T, nh * d]
    int64_t num_seqs, num_tokens, num_heads, num_kv_heads, head_dim, max_blocks;
    int64_t window;  // keys per query including itself; <= 0 for full attention
    float scale;
    int64_t max_seq_len = 0;  // an upper bound of seq_lens (sizes launch grids; never changes a result)
    const int32_t* table_rows = nullptr;  // [S] the block_tables row of sequence s (null: row s)
};

// Router (spec §3.6): logits = Wr x + br, top-k by value (ties: lower index), softmax over the k.
struct RouterArgs {
    const float* x;         // [T, H] (normed)
    DenseWeight router;     // [E, H] + [E]
    int32_t* expert_ids;    // [T, k]
    float* expert_weights;  // [T, k]
    int64_t num_tokens, top_k;
};

// Experts (spec §3.6): out[t] += sum_j w[t, j] * (W2[e] a + b2[e]) with a = clamped SwiGLU of the
// interleaved W1[e] x + b1[e], e = expert_ids[t, j]. Accumulates into `out` (the f32 residual).
struct ExpertsArgs {
    const float* x;               // [T, H] (normed)
    const int32_t* expert_ids;    // [T, k]
    const float* expert_weights;  // [T, k]
    ExpertWeights gate_up;        // out 2I, in H
    ExpertWeights down;           // out H, in I
    float* out;                   // [T, H], accumulated into
    int64_t num_tokens, top_k;
    float swiglu_limit, swiglu_alpha;
    int64_t prompt_rows = 0;  // rows [0, prompt_rows) are prompt tokens (see QkvRopeKvWriteArgs)
};

// y += x elementwise, f32 [n].
struct AddArgs {
    const float* x;
    float* y;
    int64_t n;
};

// ---- coarse ops (one fused launch each on a GPU) -----------------------------------------------------

// The attention block's input: h = rmsnorm(x), q|k|v = W h + b, RoPE on q and k, k and v into the cache.
struct QkvRopeKvWriteArgs {
    const float* x;     // [T, H] residual stream
    VectorWeight norm;  // [H] input_layernorm
    QkvWeights w;
    const int32_t* positions;  // [T] RoPE positions
    const float* inv_freq;     // [d/2]
    float mscale;
    const int64_t* slot_mapping;  // [T] (< 0: not stored)
    KvLayer kv;
    float* h;  // [T, H] scratch: the normed input
    float* q;  // [T, nh*d] out: q after RoPE
    float* k;  // [T, nkv*d] scratch: k after RoPE
    float* v;  // [T, nkv*d] scratch
    int64_t num_tokens, hidden, num_heads, num_kv_heads, head_dim;
    float eps;
    bool keep_intermediates = false;  // h, k, v must hold their values on return (trace)
    // Rows [0, prompt_rows) are prompt tokens, the rest generated tokens (model/forward.h). A backend may
    // compute the two kinds with different kernels (a GPU: tensor-core GEMMs for prompt rows, GEMVs for
    // generated rows) but must choose by kind only: a token's kind never depends on the batch, so its
    // bits do not either. The CPU ignores it.
    int64_t prompt_rows = 0;
};

// x += Wo attn + bo (spec §3.4 step 7 and the residual of §3.2).
struct OProjResidualArgs {
    const float* attn;  // [T, nh*d]
    DenseWeight o;      // [H, nh*d] + [H]
    float* x;           // [T, H] residual, accumulated into
    float* out;         // [T, H] scratch: Wo attn + bo
    int64_t num_tokens;
    bool keep_intermediates = false;  // out must hold its value on return (trace)
    int64_t prompt_rows = 0;          // rows [0, prompt_rows) are prompt tokens (see QkvRopeKvWriteArgs)
};

// The MoE block's input: h = rmsnorm(x), then the router (spec §3.6).
struct MoeRouteArgs {
    const float* x;         // [T, H] residual stream
    VectorWeight norm;      // [H] post_attention_layernorm
    DenseWeight router;     // [E, H] + [E]
    float* h;               // [T, H] out: the normed input (the experts read it)
    int32_t* expert_ids;    // [T, k] out
    float* expert_weights;  // [T, k] out
    int64_t num_tokens, hidden, top_k;
    float eps;
};

// logits[r] = lm_head rmsnorm(x[rows[r]]) (spec §3.7), for the rows that need logits; h receives the
// normed rows (the trace's final_norm) when keep_intermediates, else it is scratch.
struct FinalLogitsArgs {
    const float* x;       // [T, H] residual stream
    VectorWeight norm;    // [H] model.norm
    DenseWeight lm_head;  // [V, H]
    const int32_t* rows;  // [R] rows of x
    int64_t num_rows, hidden;
    float eps;
    float* h;       // [R, H] scratch, or out when keep_intermediates: the normed rows
    float* logits;  // [R, V] out
    bool keep_intermediates = false;
};

// Copy-on-write of KV blocks: for every layer, block dst[i] := block src[i] (K and V). The arrays are
// host memory (copies are rare: the first write into a block shared after an n > 1 fork); every dst is
// distinct and none is also a src.
struct CopyBlocksArgs {
    const KvLayer* layers;  // [num_layers]
    int64_t num_layers;
    const int32_t* src;  // [num_copies]
    const int32_t* dst;
    int64_t num_copies;
    int64_t block_bytes;  // bytes of one block of one pool, its scales included (model/kv_store.h)
    // kInt8: the part of block_bytes that is the block's scales (block_size * nkv * 4), copied from
    // k_scales / v_scales; the rest (block_size * nkv * d) is the codes in k / v. 0 for f32 and f16.
    int64_t scale_block_bytes = 0;
};

// KV swap to host memory (--preemption-mode swap): for every layer l and i < num_blocks, K and V of
// device block device_blocks[i] <-> host block host_blocks[i] of host_pool (memory from alloc_host),
// where host block h is [num_layers, 2 (K then V), block_bytes] bytes contiguous at host_pool + h *
// num_layers * 2 * block_bytes. to_host: device -> host (swap out), else host -> device (swap in). The
// id arrays are host memory. Ordered with the backend's other work (a GPU's stream): a swap-out reads
// what earlier ops wrote, later ops see a swap-in. Every device id is distinct, every host id too.
struct SwapBlocksArgs {
    const KvLayer* layers;  // [num_layers] the layers of one KV group (one rank's shard)
    int64_t num_layers;
    void* host_pool;               // [num_host_blocks, num_layers, 2, block_bytes]
    const int32_t* device_blocks;  // [num_blocks]
    const int32_t* host_blocks;    // [num_blocks]
    int64_t num_blocks;
    int64_t block_bytes;  // bytes of one block of one pool, its scales included (model/kv_store.h)
    bool to_host;
    // kInt8: the last scale_block_bytes of each pool's block_bytes in the host block are its scales
    // (from k_scales / v_scales), the codes come first; 0 for f32 and f16 (see CopyBlocksArgs).
    int64_t scale_block_bytes = 0;
};

// ---- the backend -------------------------------------------------------------------------------------

struct MemoryStats {
    int64_t total_bytes = 0, free_bytes = 0;
};

// What the backend sizes its own scratch for (split-KV partials, expert routing lists).
struct WorkspaceLimits {
    int64_t max_tokens = 0;   // rows of one step (max_num_batched_tokens)
    int64_t max_seqs = 0;     // sequences of one step
    int64_t max_seq_len = 0;  // longest sequence
};

class Backend;

// Token-id moves within backend memory (the asynchronous executor's deferred tokens, executor/
// backend_executor.h): for every i < num_moves, *moves[i].dst = *moves[i].src, or max(*src, 0) when
// negative_to_zero (a draw of ops::kNonFiniteToken, -1, becomes id 0 where an id is read). `moves` and
// every pointer in it are backend memory; no dst is also a src. Ordered with the backend's other work.
struct IdMove {
    const int32_t* src;
    int32_t* dst;
};
struct MoveIdsArgs {
    const IdMove* moves;  // [num_moves]
    int64_t num_moves;
    bool negative_to_zero;
};

// Writes into a table of int32 in backend memory (the executor's block tables kept by seq_slot,
// model/forward.h DeviceBlockTables, changed by each step's updates alone): first, for each of the
// num_fills pairs (start, count) of `pairs`, table[start, start + count) = -1; then for each of the
// num_writes pairs (index, value) after them, table[index] = value. `pairs` and `table` are backend
// memory; no index is written twice. Ordered with the backend's other work.
struct ScatterIdsArgs {
    const int32_t* pairs;  // [num_fills + num_writes, 2]
    int32_t* table;
    int64_t num_fills, num_writes;
};

// A point in the backend's ordered work (a CUDA event on the stream): wait() returns once every op
// enqueued before the last record() has finished, and the host memory that download_async wrote before
// it holds its bytes; a pinned staging buffer given to upload_pinned before it may be written again.
// Backends whose ops are done when they return (the CPU) use the default: both do nothing.
class Event {
  public:
    virtual ~Event() = default;
    virtual void record() {}
    // Raises (VOLT_CHECK) a data error a kernel reported before the record, as download does.
    virtual void wait() {}
};

// A recorded sequence of launches (a CUDA graph), replayed with the arguments it was recorded with:
// the same pointers, sizes and grid shapes; only the bytes those pointers hold change between replays.
class Graph {
  public:
    virtual ~Graph() = default;
    // Enqueues the recorded launches on the backend's stream and returns at once.
    virtual void launch() = 0;
};

// Backend memory owned RAII-style; freed through the backend that made it.
class Buffer {
  public:
    Buffer() = default;
    Buffer(Backend* backend, void* data, int64_t bytes) : backend_(backend), data_(data), bytes_(bytes) {}
    Buffer(Buffer&& o) noexcept { *this = std::move(o); }
    Buffer& operator=(Buffer&& o) noexcept;
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    ~Buffer();
    void* data() const { return data_; }
    int64_t bytes() const { return bytes_; }
    template <typename T>
    T* as() const {
        return static_cast<T*>(data_);
    }

  private:
    Backend* backend_ = nullptr;
    void* data_ = nullptr;
    int64_t bytes_ = 0;
};

// Which tensor a dense weight is (a backend may treat them differently: keep the embedding on the host,
// quantize lm_head, ...).
enum class WeightRole { kEmbedding, kAttention, kRouter, kLmHead };

class Backend {
  public:
    virtual ~Backend() = default;
    virtual const char* name() const = 0;

    // Memory. alloc: contents unspecified; kResourceExhausted naming the size when the device is full.
    virtual Result<Buffer> alloc(int64_t bytes) = 0;
    virtual void release(void* data, int64_t bytes) = 0;                 // what a Buffer calls when it dies
    virtual void upload(void* dst, const void* src, int64_t bytes) = 0;  // host -> backend; waits
    // host -> backend without waiting for the device: the bytes of `src` are taken before this returns
    // (src may be reused at once), the copy is ordered before every later op. Default: upload().
    virtual void upload_async(void* dst, const void* src, int64_t bytes) { upload(dst, src, bytes); }
    virtual void download(void* dst, const void* src, int64_t bytes) = 0;  // backend -> host; waits
    // host -> backend from alloc_host memory, without waiting and without copying `src` first: src must
    // stay unchanged until an Event recorded after this call was waited. Default: upload_async().
    virtual void upload_pinned(void* dst, const void* src, int64_t bytes) { upload_async(dst, src, bytes); }
    // backend -> host into alloc_host memory without waiting: `dst` holds the bytes once an Event
    // recorded after this call was waited. Default: download() (done on return).
    virtual void download_async(void* dst, const void* src, int64_t bytes) { download(dst, src, bytes); }
    // A new event (see Event). Default: one whose record and wait do nothing (ops done on return).
    virtual std::unique_ptr<Event> create_event() { return std::make_unique<Event>(); }
    virtual void copy(void* dst, const void* src, int64_t bytes) = 0;  // within backend memory
    virtual void fill(void* dst, uint8_t byte, int64_t bytes) = 0;
    // Host memory the backend copies to and from at full speed (the KV swap pool): ordinary memory on
    // the CPU, pinned (page-locked) memory on a GPU; zeroed. Default kUnimplemented. Freed by the Buffer.
    virtual Result<Buffer> alloc_host(int64_t bytes);
    // Page-locks `bytes` of existing host memory at `p` (read-only pages too: the checkpoint's mmap), so
    // upload_async copies from it by DMA without the host waiting (CPU expert offload's prompt rows,
    // cpu/host_experts.h). Returns whether it did; false (the default, and on any failure) leaves the
    // memory as it was, and uploads from it still work (staged by the driver, the host waiting).
    // unpin_host(p) undoes a pin_host(p) that returned true; the backend undoes what is left when it dies.
    virtual bool pin_host(const void* /*p*/, int64_t /*bytes*/) { return false; }
    virtual void unpin_host(const void* /*p*/) {}
    // Whether kv_write, attention, copy_blocks and swap_blocks handle a KV cache of format f. Default:
    // kF32 and kF16. model::KvStore::create refuses the others with kUnimplemented.
    virtual bool supports_kv_format(Format f) const { return f == Format::kF32 || f == Format::kF16; }
    // Backend memory is host memory (the CPU): swapping KV to host memory would gain nothing.
    virtual bool memory_is_host() const { return false; }
    // rows x width bytes from src (rows src_pitch bytes apart) to dst (dst_pitch apart), within backend
    // memory (the gather of vocab-sharded logits). Default: one copy() per row.
    virtual void copy_2d(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t width,
                         int64_t rows);
    virtual MemoryStats memory() const = 0;
    // Makes this backend's device the calling thread's current one (a GPU: cudaSetDevice of its ordinal;
    // the CUDA runtime keeps the current device per thread). Called by executor::RankGroup on each rank's
    // thread before it runs that rank's ops. Default: nothing (the CPU).
    virtual void bind_thread() {}
    // Which device of its kind this backend runs on (a GPU's ordinal; 0 on the CPU): ranks with the
    // same ordinal share one device's memory (memory planning, executor/engine_flags.cc).
    virtual int device_ordinal() const { return 0; }
    virtual void synchronize() = 0;
    // Sizes the backend's own scratch; call before the first op (and again when limits grow).
    virtual Status reserve(const WorkspaceLimits& limits) { return Status::ok(); }

    // Graph capture (CUDA graphs): records the launches that `body` issues on the backend's stream
    // instead of running them. body must not allocate, upload, download or synchronize: run the same
    // body once eagerly first, so every scratch buffer it needs has its size. Errors: kUnimplemented where
    // the backend has no graphs (the CPU), kUnavailable when a scratch buffer would have had to grow
    // (run the body eagerly, then capture again), kInternal when the capture failed.
    // Whether capture() works on this backend (the executor runs eagerly where not).
    virtual bool has_graphs() const { return false; }
    virtual Result<std::unique_ptr<Graph>> capture(const std::function<void()>& body) {
        return unimplemented(std::string(name()) + " backend: no graph capture");
    }
    // One graph over several backends (the ranks of a tensor / pipeline parallel group on one device,
    // each with its own stream, ordered among themselves by their communicators' events): records the
    // launches `body` issues on this backend's stream and on every peer's (from any thread: body may hand
    // the work to the ranks' threads) into one graph launched on this backend's stream. The peers' streams
    // fork from this one before body and join it after, so a replay starts after what was enqueued on this
    // backend before launch() and ends before what is enqueued on it after; order the peers' own work
    // around it with wait_for. Errors: capture()'s (kUnavailable when a scratch buffer of any of the
    // backends or of their communicators would have had to grow), kInvalidArgument for a peer this backend
    // cannot capture with (can_capture_with).
    virtual bool can_capture_with(const Backend& /*peer*/) const { return false; }
    virtual Result<std::unique_ptr<Graph>> capture_group(const std::vector<Backend*>& peers,
                                                         const std::function<void()>& body) {
        if (peers.empty()) return capture(body);
        return unimplemented(std::string(name()) + " backend: no graph capture over several backends");
    }
    // Changes whenever backend-owned scratch moves: a graph captured before the change is stale.
    virtual uint64_t scratch_epoch() const { return 0; }
    // Every op enqueued on this backend after the call starts after every op enqueued on `other` before
    // it, without the host waiting (a GPU: an event recorded on other's stream, waited by this one's).
    // Default: nothing (ops done on return, the CPU).
    virtual void wait_for(Backend& /*other*/) {}
    // Fills every backend-owned scratch buffer with `byte` (tests: 0xff, NaN in f32 and f16, shows that
    // no op reads scratch it did not write).
    virtual void fill_scratch(uint8_t /*byte*/) {}

    // Weight placement: the view of a host tensor in backend memory, in the format this backend's
    // kernels read (the CPU returns the host view itself; a GPU uploads, may convert bf16 -> f16 after a
    // range check, fuse q/k/v, repack MXFP4). Allocations go to `owned`. kUnimplemented naming the format
    // when the backend's kernels cannot read it (so callers learn at placement, not inside an op). A
    // backend that fuses q/k/v must also override qkv_rope_kvwrite (the default needs them apart).
    virtual Result<DenseWeight> place_dense(const DenseWeight& host, WeightRole role,
                                            std::vector<Buffer>* owned) = 0;
    virtual Result<QkvWeights> place_qkv(const QkvWeights& host, std::vector<Buffer>* owned) = 0;
    virtual Result<ExpertWeights> place_experts(const ExpertWeights& host, std::vector<Buffer>* owned) = 0;
    virtual Result<VectorWeight> place_vector(const VectorWeight& host, std::vector<Buffer>* owned) = 0;

    // Fine ops.
    virtual void embedding(const EmbeddingArgs& a) = 0;
    virtual void rmsnorm(const RmsNormArgs& a) = 0;
    virtual void linear(const LinearArgs& a) = 0;
    virtual void rope(const RopeArgs& a) = 0;
    virtual void kv_write(const KvWriteArgs& a) = 0;
    virtual void attention(const AttentionArgs& a) = 0;
    virtual void router(const RouterArgs& a) = 0;
    virtual void experts(const ExpertsArgs& a) = 0;
    virtual void add(const AddArgs& a) = 0;

    // Coarse ops; the defaults run the fine ops in spec order (src/ops/backend.cc).
    virtual void qkv_rope_kvwrite(const QkvRopeKvWriteArgs& a);
    virtual void o_proj_residual(const OProjResidualArgs& a);
    virtual void moe_route(const MoeRouteArgs& a);
    virtual void experts_residual(const ExpertsArgs& a) { experts(a); }
    virtual void final_logits(const FinalLogitsArgs& a);

    // The sample op (ops/sample.h), KV copy-on-write and KV swap. swap_blocks' default: one
    // download/upload per block of each pool.
    virtual void sample(const SampleArgs& a) = 0;
    virtual void copy_blocks(const CopyBlocksArgs& a);
    // Token-id moves (MoveIdsArgs). Default: through download and upload, one id at a time (fine where
    // backend memory is host memory; a GPU runs one kernel).
    virtual void move_ids(const MoveIdsArgs& a);
    // Table writes (ScatterIdsArgs). Default: through download and upload (fine where backend memory is
    // host memory; a GPU runs two small kernels).
    virtual void scatter_ids(const ScatterIdsArgs& a);
    virtual void swap_blocks(const SwapBlocksArgs& a);

    // Benchmarks only (volt_op_test --bench): the read bandwidth in GB/s of a streaming 128-bit-load
    // kernel over `bytes` of fresh backend memory, measured now; 0 where the backend has none (the CPU).
    virtual double measure_read_gbps(int64_t /*bytes*/) { return 0.0; }
};

}  // namespace volt::ops
