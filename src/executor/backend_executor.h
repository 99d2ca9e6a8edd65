// BackendExecutor: the executor seam over model::Forward on any ops::Backend (the CPU, a GPU): the
// shared StepBuilder turns each StepBatch into the forward pass's inputs (one StepUpload), blocks are
// copied on write, the forward pass runs the rows that need logits and the sample op draws from each
// chunk of logits in backend memory; only the sampled ids and the logprobs asked for come back. The
// sample rows and their id lists are staged into backend memory with one upload per chunk (a copy on
// the CPU, where backend memory is host memory), so the CPU runs exactly the GPU's path.
// Asynchronous (one local rank, TP = PP = 1, the default): submit() enqueues the whole step on the
// backend and returns -- the step's inputs and its sample rows packed into a pinned staging buffer of
// that step (one per step in flight) and sent with one Backend::upload_pinned, the KV swaps and
// copies, a Backend::move_ids that writes the step's DeferredToken ids (and the deferred id a penalty row
// counts, SeqSampling::output_deferred) from `last_draw_` (backend memory: the last draw per seq_slot),
// the forward pass (eager or a decode graph), the sample op, a move_ids of the feeds_slot draws into
// last_draw_, one download_async of the sampled ids and logprobs into pinned memory and an Event;
// collect() waits for that event. Nothing in it allocates or waits (but a buffer's rare growth, a
// graph's first capture, CPU expert offload), so the engine prepares step N+1 while the device runs step
// N (max_in_flight 2 on CUDA). On the CPU the same code runs with every op done on return.
// Synchronous (SyncExecutor::run: the step computed in submit, deferred ids resolved on the host from the
// draws it kept): tensor / pipeline parallel ranks, process ranks, and set_resolve_on_host (tests).
// Tensor / pipeline parallel (create_parallel): the model's ranks (executor/rank_group.h) each run the
// same step on their shard and KV cache (their own KV heads, their stage's layers) on their own thread;
// the output rank (tp 0 of the last stage) samples on the gathered logits (docs/parallel.md). At pipeline
// parallel size > 1 a step runs as micro-batches of whole sequences, in order on every rank, so the stages
// overlap within the step (set_pipeline_micro_batches; docs/parallel.md "Micro-batches").
// KV swap (StepBatch::swap_out / swap_in): every rank keeps a host swap pool per KV group for its own
// shard (ops::Backend::alloc_host: pinned on a GPU) and swaps its own blocks, first in each step.
// Process ranks (create_process_rank: the engine across processes, docs/parallel.md "Several
// processes"): each process holds one rank; rank 0's executor is the engine's and sends init_cache and
// every step (executor/step_wire.h) to the other processes over the TCP communicator, whose run_worker
// loops run the same rank code, so the collectives line up; the output rank sends the sampled ids and
// logprobs back to rank 0 when it is not rank 0 (pipeline parallel).
// Tests: tests/unit/engine/engine_test.cc (through CpuExecutor), scripts/gpu/check.sh (--device cuda).
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "executor/rank_group.h"
#include "executor/step_builder.h"
#include "executor/sync_executor.h"
#include "model/forward.h"
#include "model/kv_store.h"
#include "ops/ops.h"

namespace volt::cpu {
class TcpCommunicator;
}

namespace volt::executor {

class BackendExecutor : public SyncExecutor {
  public:
    // Places `weights` on `backend`, except the experts of the layers `experts_on_host` marks
    // ([num_hidden_layers] or empty: CPU expert offload, model/offload.h), which stay in host memory and
    // run on the CPU. kv_format: f32 (the reference) or f16. Errors: placement's (no memory for the
    // weights, a format the backend does not read).
    static Result<std::unique_ptr<BackendExecutor>> create(std::shared_ptr<const model::ModelWeights> weights,
                                                           std::unique_ptr<ops::Backend> backend,
                                                           ops::Format kv_format, int max_in_flight = 1,
                                                           const std::vector<bool>& experts_on_host = {});
    // tp x pp ranks, rank i on make_backend(i). Errors: model::check_parallel's refusal (TP not dividing
    // the KV heads, PP above the layer count), placement's.
    static Result<std::unique_ptr<BackendExecutor>> create_parallel(
        std::shared_ptr<const model::ModelWeights> weights, const model::ParallelConfig& parallel,
        const BackendFactory& make_backend, ops::Format kv_format,
        const ops::CommunicatorOptions& comm_options = {},
        const CommFactory& make_comms = thread_communicators);

    // Rank `rank` of `parallel` (world size > 1) in this process, on `backend`, joined to the other
    // processes by `comm` (cpu::tcp_connect, every process of the world; the rank's tp and pp groups are
    // subgroups of it, RankGroup::create_process_rank, unless `comms` brings the rank's own: NCCL's for
    // GPU ranks, executor::process_gpu_comms). At rank 0 the result is the engine's executor (it drives
    // the others: see the file comment); at any other rank call run_worker. Debug hook for fault tests:
    // VOLT_DEBUG_STALL_RANK=r makes world rank r sleep VOLT_DEBUG_STALL_S seconds (default 3600) before
    // its share of step VOLT_DEBUG_STALL_STEP (default 2), so its peers wait in that step's first
    // collective and their watchdog (--collective-timeout) must fail the group. Errors: check_parallel's
    // refusal, placement's.
    static Result<std::unique_ptr<BackendExecutor>> create_process_rank(
        std::shared_ptr<const model::ModelWeights> weights, const model::ParallelConfig& parallel, int rank,
        std::unique_ptr<ops::Backend> backend, ops::Format kv_format,
        std::unique_ptr<cpu::TcpCommunicator> comm, ProcessComms comms = {});
    // Rank 0 of process ranks: shutdown_workers() first.
    ~BackendExecutor() override;

    // A process rank > 0: takes rank 0's messages (init_cache, each step, shutdown) and runs them as rank
    // 0 does, sending the step's sampled ids back when it is the output rank. Waits for a message with no
    // deadline (polling *stop, when given, every 100 ms); each step itself is bounded by the watchdog.
    // Returns ok when rank 0 shuts the workers down (shutdown_workers). Errors: kUnavailable when rank 0
    // closed its connection (it exited or failed) or a collective's watchdog fired, kFailedPrecondition when
    // *stop became true, a step's error; on any error the connections are shut first, so every other process
    // notices at once instead of waiting for its watchdog.
    Status run_worker(const std::atomic<bool>* stop = nullptr);
    // Rank 0 of process ranks: tells the workers to end (their run_worker returns ok). Idempotent; does
    // nothing for other executors or once the group failed.
    void shutdown_workers();
    // Rank 0 of process ranks: `on_lost` is called once, from a monitor thread that polls every 200 ms,
    // when the group is lost for good: a worker's connection closed (it exited, failed or was killed) or
    // a step failed (a watchdog, a closed connection; the step's error went to the engine first). `voltllm
    // serve` shuts down on it. Call once, before the first step; never called after shutdown_workers.
    void set_on_group_lost(std::function<void(const Status&)> on_lost);

    // The host weights the executor was made from (before placement).
    const model::ModelWeights& host_weights() const { return *weights_; }
    engine::ExecutorInfo info() const override;
    int64_t bytes_per_block(int64_t block_size, int group) const override;
    // The device memory of the ranks' backends, summed over their distinct devices (ops::Backend::
    // device_ordinal: ranks sharing a GPU count it once); at TP = PP = 1 the one backend's.
    engine::ExecutorMemory memory() const override;
    // Distinct devices the ranks run on (1 at TP = PP = 1 and for ranks sharing one GPU).
    int num_devices() const;
    // The largest share of one KV block (bytes_per_block of both groups: the whole model's) that one
    // device holds: the sum over the ranks on that device of their shard's block bytes (their KV heads,
    // their stage's layers), over the whole model's. 1 when every rank shares one device (or at TP = PP
    // = 1); 1 / T for T tensor-parallel ranks on T GPUs. Memory planning divides by it.
    double max_device_kv_share(int64_t block_size) const;
    Status init_cache(const engine::CacheConfig& config) override;

    // The profiling run of memory planning (vLLM's profile_run): one step of max_num_batched_tokens
    // prompt tokens of one sequence through the whole forward pass and the sample op (on a temporary KV
    // cache just large enough, freed after), so that the step workspace and every scratch buffer the
    // backend grows on first use reach their peak size now. memory() then reports what is left for the
    // KV pools. The workspace is kept for init_cache. Errors: out of memory, the step's.
    Status profile(const engine::CacheConfig& config);

    // CUDA graphs for decode steps (vLLM's default; --enforce-eager turns them off; never with CPU expert
    // offload, whose experts op copies to and from the host inside the step). A decode step (one
    // token and one sample row per sequence, no trace) of S sequences runs as the graph of
    // the smallest capture size B >= S: rows S..B-1 are padding (token 0 at position 0, no KV slot,
    // context 0, empty block tables: they write no KV and their attention is the sink's alone, 0), block
    // tables are as wide as the bucket of the longest context (a power of two >= 256 keys, at most
    // max_model_len), and the graph is captured the first time its (B, context bucket, widths) is seen.
    // Every op computes a row from that row alone, so a sequence's logits are bitwise those of the eager
    // step (tests/unit/cuda/cuda_backend_test.cc CudaGraphs.*). Backends without graphs run eagerly.
    // TP x PP > 1 in this process: when every rank's backend can capture with rank 0's
    // (Backend::can_capture_with: CUDA backends on one GPU) and every communicator is capturable (the
    // same-device one), the step is ONE graph over every rank's stream (Backend::capture_group, the ranks'
    // forward passes on their own threads inside it, their collectives its cross-stream edges), replayed on
    // rank 0's stream after every rank's inputs, swaps and copies (rank 0's stream waits for each rank's,
    // Backend::wait_for), every rank's stream then waiting for the replay; the output rank samples after.
    // At pipeline parallel size > 1 only steps that run as one micro-batch (micro_batches_for: one
    // sequence, or set_pipeline_micro_batches(1)) take a graph. Process ranks, and ranks with NCCL, run
    // eagerly (docs/parallel.md "CUDA graphs"). Tests: tests/unit/cuda/parallel_graph_test.cc. Call before
    // init_cache, which reserves the ranks' graph inputs only where graphs are possible (later is harmless:
    // a rank's graph input buffer then grows at its first graph step).
    void set_enforce_eager(bool eager) { enforce_eager_ = eager; }
    // Capture sizes (ascending), set by init_cache: 1, 2, 4, then multiples of 8, up to the smallest of
    // max_num_seqs, max_num_batched_tokens and 256 (one chunk of logits).
    const std::vector<int64_t>& capture_sizes() const { return capture_sizes_; }
    int64_t num_graphs() const { return static_cast<int64_t>(graphs_.size()); }
    int64_t graph_replays() const { return graph_replays_; }
    // Graphs captured so far (a recapture after a buffer moved counts again; a spoiled capture does not).
    int64_t graph_captures() const { return graph_captures_; }
    // Tests: fills the step workspace and the backend's scratch with `byte` (0xff: NaN).
    void fill_workspace(uint8_t byte);
    // Tests: run every step through SyncExecutor (computed in submit, DeferredToken ids resolved on the
    // host) instead of the asynchronous path. Call before init_cache.
    void set_resolve_on_host(bool host) { resolve_on_host_ = host; }
    // Tests: send every sequence's whole block table with each step (the full upload, model::HostStep::
    // block_tables) instead of keeping the tables in backend memory by seq_slot and sending what changed
    // (the default; model::DeviceBlockTables). Call before init_cache.
    void set_full_table_upload(bool full) { full_table_upload_ = full; }
    // Bytes of step inputs (sample rows excluded) the last step sent to rank 0's backend: with kept
    // tables a decode step's do not grow with its sequences' context.
    int64_t last_input_bytes() const { return last_input_bytes_; }
    // Whether steps take the asynchronous path (see the file comment; decided by init_cache).
    bool is_async() const { return async_; }
    // Steps submitted through the asynchronous path, and DeferredToken rows it resolved on the device.
    int64_t async_steps() const { return async_next_; }
    int64_t device_deferred_resolved() const { return device_deferred_; }

    // Pipeline micro-batches (docs/parallel.md "Micro-batches"): at pipeline parallel size P > 1 a step's
    // sequences are cut into min(M, S) micro-batches of whole sequences (split_micro_batches) that every
    // rank runs in order, each stage sending a micro-batch's activations on and starting the next while
    // the stage after it works on the first (GPipe's fill and drain inside one step); the output rank
    // samples each micro-batch's logits rows into the step's rows. M = 0 (the default) is P; 1 runs the
    // step whole (one micro-batch). Ignored at P = 1. Each sequence's logits are bitwise those of M = 1 (the
    // ops compute a row from its own sequence alone). Process ranks: every process must use the same M
    // (make_process_rank puts it in the group's fingerprint). Set it before the first step.
    void set_pipeline_micro_batches(int m) { micro_batches_ = m < 0 ? 0 : m; }
    // The micro-batch count a step of `num_seqs` sequences runs as (1 at P = 1).
    int64_t micro_batches_for(int64_t num_seqs) const;
    // Tests: called in run() on the engine's thread with each step the ranks run and the micro-batches it
    // runs as (empty: the step runs whole).
    using MicroBatchObserver =
        std::function<void(const engine::StepBatch& b, const std::vector<MicroStep>& micro)>;
    void set_micro_batch_observer(MicroBatchObserver o) { micro_observer_ = std::move(o); }
    // Micro-batches run so far (a step run whole counts 1).
    int64_t micro_batches_run() const { return micro_batches_run_; }

    // The asynchronous path where it is on (is_async), else SyncExecutor's. submit: errors are the
    // step's, as run's; collect: the oldest step in submission order, which must be `handle`.
    Result<engine::StepHandle> submit(const engine::StepBatch& batch) override;
    Status collect(engine::StepHandle handle, engine::StepResult* result) override;
    // Tests: the KV cache of rank i.
    const model::KvStore& kv_cache(int i = 0) const { return states_[i].cache; }

    // The output rank's forward pass and backend (the only ones at TP = PP = 1).
    model::Forward& forward() { return *group_->rank(group_->local_output()).forward; }
    ops::Backend& backend() { return *group_->rank(group_->local_output()).backend; }
    RankGroup& ranks() { return *group_; }

    // Tests: called on each rank's thread (concurrently at TP/PP > 1: it must be thread-safe) for every
    // block swap of that rank with an FNV-1a 64 hash of the device block's bytes (every layer of the
    // group on that rank: K then V of each layer in order), read before a swap-out and after a swap-in. Equal
    // hashes out and in (by host block) mean the block came back bitwise. Costs a download per block; null
    // (the default): nothing is read. Set it before the first step.
    using SwapObserver =
        std::function<void(int rank, const engine::BlockSwap& swap, bool out, uint64_t hash)>;
    void set_swap_observer(SwapObserver observer) { swap_observer_ = std::move(observer); }

  protected:
    BackendExecutor(std::shared_ptr<const model::ModelWeights> weights, ops::Format kv_format,
                    int max_in_flight);
    // Shards and places the model over the ranks (RankGroup::create).
    Status make_ranks(const model::ParallelConfig& parallel, const BackendFactory& make_backend,
                      const ops::CommunicatorOptions& comm_options = {},
                      const CommFactory& make_comms = thread_communicators,
                      const std::vector<bool>& experts_on_host = {});
    Status run(const engine::StepBatch& batch, engine::StepResult* result) override;

  private:
    // Packs rows [first, first + count) of the sample op into backend memory, runs it, and copies the
    // outputs into tokens_ / logprobs_ / top_ids_ / top_logprobs_ at row `first`.
    Status sample_chunk(const std::vector<ops::SampleRow>& rows, int64_t first, int64_t vocab_size,
                        int64_t vocab_size_real);

    // What each rank keeps between steps: its KV cache (its heads, its stage's layers), workspace and
    // step upload.
    struct RankState {
        model::KvStore cache;
        ops::Buffer host_pool[engine::kNumKvGroups];  // [host blocks, layers of g, 2, block bytes]
        std::vector<ops::KvLayer> swap_layers[engine::kNumKvGroups];  // this rank's layers of each group
        std::vector<int32_t> swap_device, swap_host;
        model::Workspace ws;
        model::StepUpload upload;
        model::DeviceBlockTables tables;  // by seq_slot, changed by each step's table pairs
        std::vector<int32_t> copy_src, copy_dst;
        std::vector<ops::KvLayer> group_layers;
        std::vector<model::StepUpload> micro_uploads;  // [micro-batch] their own inputs' buffers
        model::StepUpload graph_upload;  // a decode graph's inputs (fixed addresses: reserved in init_cache)
        model::ForwardBatch graph_fb;    // the step's padded inputs there (graph_upload_rank)
    };
    Status run_rank(int i, const engine::StepBatch& b, const model::HostStep& step);
    // The sample op on the logits of a micro-batch's rows [first, first + count) (logits [count, V] in
    // backend memory): each run of consecutive step rows sampled into the step's rows.
    Status sample_micro(const engine::StepBatch& b, const MicroStep& ms, int64_t first, int64_t count,
                        const float* logits);
    // Process ranks: the control messages from rank 0 to the workers, and the failure path (the
    // connections shut, `why` returned).
    struct Process;
    // `payload` to every worker, `output_payload` instead (when given) to the output rank.
    Status send_control(uint32_t kind, const std::vector<uint8_t>& payload,
                        const std::vector<uint8_t>* output_payload = nullptr);
    Status exchange_result(int64_t rows);
    Status lose(Status why);
    // The batch's copy-on-write block copies on rank i.
    void copy_blocks(int i, const engine::StepBatch& b);
    // Whether any step could be a graph replay: not --enforce-eager, no offloaded experts, not a process
    // rank, every rank's backend capturable with rank 0's and every communicator capturable.
    bool graphs_possible() const;
    // The decode step as a graph replay (set_enforce_eager); false when the step is not one.
    bool graph_eligible(const engine::StepBatch& b) const;
    Status run_graph(const engine::StepBatch& b, const model::HostStep& step);
    // The step padded to its bucket (padded_) and the graph's key (its table widths once uploaded); then
    // rank i's padded inputs uploaded into its graph_upload (through `pinned` when given), the key's widths
    // filled from rank 0's; then the captured graph replayed (captured first when new or stale; eagerly
    // when capture fails).
    using GraphKey = std::array<int64_t, 4>;  // (rows, context bucket, widths of the tables)
    GraphKey graph_pad(const engine::StepBatch& b, const model::HostStep& step);
    Status graph_upload_rank(int i, GraphKey* key, ops::Buffer* pinned = nullptr,
                             const model::StepHead* head = nullptr);
    Status graph_forward(const GraphKey& key);
    // Around a replay on rank 0's stream (Backend::wait_for; nothing at TP = PP = 1): rank 0's stream waits
    // for every rank's before it (their inputs, swaps and copies), every rank's for rank 0's after it.
    // Both in a row: every rank's later ops start after every rank's earlier ones.
    void rank0_waits_for_ranks();
    void ranks_wait_for_rank0();

    // The asynchronous path (one local rank).
    struct AsyncStep {
        int64_t id = -1;
        std::vector<engine::LogitsRow> rows;  // the step's logits rows (fill_result)
        ops::Buffer step_pinned;              // staging of its one upload (alloc_host)
        ops::Buffer out_pinned;               // [outputs] the sampled ids and logprobs, downloaded
        std::unique_ptr<ops::Event> done;     // recorded after the download
        int64_t out_lp = 0, out_top_ids = 0, out_top_lp = 0;  // offsets in out_pinned (tokens at 0)
    };
    Status enqueue_step(const engine::StepBatch& b, AsyncStep* f);
    // Packs the sample rows of every logits row of b, their id lists, the outputs and the id moves into
    // sample_staging_ (offsets; sized f's out_pinned), the head of the step's one upload (model::StepHead);
    // fix_sampling then writes the backend addresses in: base, where the head lands; tokens_in, the step's
    // token ids (HostStep rows) there; logits, the workspace's chunk of logits.
    struct StagedSampling {
        uint8_t* base = nullptr;  // the head in backend memory
        int64_t rows = 0, out_bytes = 0, out_tokens = 0, out_lp = 0, out_top_ids = 0, out_top_lp = 0;
        int64_t rows_off = 0, pre_moves = 0, num_pre = 0, post_moves = 0, num_post = 0;
    };
    Status stage_sampling(const engine::StepBatch& b, AsyncStep* f, StagedSampling* out);
    void fix_sampling(const engine::StepBatch& b, StagedSampling* o, uint8_t* base, int32_t* tokens_in,
                      const float* logits);
    // The sample op on staged rows [first, first + count).
    void sample_staged(const StagedSampling& st, int64_t first, int64_t count, int64_t V, int64_t V_real);

    // Rank i's share of the step's swaps (outs, then ins).
    void swap_rank(int i, const engine::StepBatch& b);
    uint64_t hash_device_block(int i, int group, int32_t block);

    std::shared_ptr<const model::ModelWeights> weights_;
    ops::Format kv_format_;
    std::unique_ptr<RankGroup> group_;
    std::unique_ptr<Process> process_;  // process ranks only (after group_: its monitor goes first)
    std::vector<RankState> states_;
    uint64_t step_count_ = 0;
    StepBuilder builder_;
    std::vector<int32_t> tokens_, top_ids_;
    std::vector<float> logprobs_, top_logprobs_;
    ops::Buffer sample_device_;
    std::vector<uint8_t> sample_staging_, sample_out_;

    // Decode graphs (after group_: their buffers and graphs go before the backends do).
    struct CapturedStep {
        std::unique_ptr<ops::Graph> graph;
        std::vector<model::ForwardBatch> inputs;  // [rank] what it was captured with (addresses, sizes)
        std::vector<uint64_t> epochs;             // [rank] the backends' scratch_epoch() then
    };
    bool enforce_eager_ = false;
    bool experts_offloaded_ = false;  // some layer's experts run on the CPU: no graphs
    bool graphs_failed_ = false;      // a capture failed other than by scratch growth: eager from then on
    std::vector<int64_t> capture_sizes_;
    int64_t max_model_len_ = 0, block_size_ = 16;
    std::map<std::array<int64_t, 4>, CapturedStep> graphs_;  // (rows, context bucket, widths of the tables)
    model::HostStep padded_;
    int64_t graph_replays_ = 0;
    int64_t graph_captures_ = 0;
    SwapObserver swap_observer_;
    int micro_batches_ = 0;         // set_pipeline_micro_batches (0: P)
    std::vector<MicroStep> micro_;  // the step's micro-batches (empty: the step runs whole)
    MicroBatchObserver micro_observer_;
    int64_t micro_batches_run_ = 0;

    // The asynchronous path (after group_: buffers and events go before the backends do).
    bool resolve_on_host_ = false;
    bool full_table_upload_ = false;
    int64_t last_input_bytes_ = 0;
    bool async_ = false;
    std::vector<AsyncStep> async_ring_;  // [max_in_flight] step id % size
    int64_t async_next_ = 0, async_collected_ = 0, device_deferred_ = 0;
    ops::Buffer last_draw_;      // [max_num_seqs] int32 backend memory: the last feeds_slot draw
    std::vector<uint8_t> fed_;   // [max_num_seqs] host: a feeds_slot draw of that slot was submitted
    std::vector<int64_t> offs_;  // stage_sampling's per-row list offsets (5 per row)
    std::vector<ops::IdMove> pre_, post_;
};

}  // namespace volt::executor
