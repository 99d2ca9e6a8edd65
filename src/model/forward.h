// The GPT-OSS forward pass (spec §3), written once over the coarse ops of ops::Backend: embedding, then
// per layer rmsnorm + q/k/v + YaRN RoPE + KV write -> paged attention with sinks (sliding window on the
// layers config.layer_types marks) -> o_proj + residual; rmsnorm + router top-k -> experts (clamped
// SwiGLU) + residual; final rmsnorm + lm_head on the rows that need logits, in chunks. The pass owns no
// memory: the weights come placed (model/placed_model.h), the KV cache as views (model/kv_store.h), the
// activations in a Workspace, the step's inputs in backend memory (StepUpload). Residual stream f32.
// Golden test against transformers: tests/golden/parity_test.cc (with a per-layer trace comparison).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "model/placed_model.h"
#include "ops/communicator.h"
#include "ops/host_experts.h"
#include "ops/ops.h"

namespace volt::model {

// Per KV group: where this step's keys go and where each sequence's keys live (backend memory).
struct KvGroupInputs {
    const int64_t* slot_mapping = nullptr;  // [T] slot of each new token (< 0: not stored)
    const int32_t* block_tables = nullptr;  // [S, max_blocks] block ids (-1: not held)
    int64_t max_blocks = 0;
};

// One step over S sequences and T new tokens, flattened (the executor seam of DESIGN.md); every pointer
// in backend memory.
struct ForwardBatch {
    int64_t num_tokens = 0, num_seqs = 0;
    const int32_t* token_ids = nullptr;        // [T]
    const int32_t* positions = nullptr;        // [T] RoPE positions
    const int32_t* query_start_loc = nullptr;  // [S + 1] token rows of sequence s
    const int32_t* seq_lens = nullptr;         // [S] tokens of sequence s in the cache after this step
    KvGroupInputs groups[ops::kNumKvGroups];
    const int32_t* logits_rows = nullptr;  // [num_logits_rows] rows of [0, T) whose logits are wanted
    int64_t num_logits_rows = 0;
    int64_t max_seq_len = 0;  // max of seq_lens (sizes attention launches)
    // [S] the row of sequence s in the block tables (DeviceBlockTables: its seq_slot; padding rows of a
    // graph bucket the padding row), or null: groups[g].block_tables has a row per sequence.
    const int32_t* table_rows = nullptr;
    // Rows [0, num_prompt_rows) are prompt tokens (position < the prompt's length), the rest generated
    // tokens: the ops may compute the two kinds with different kernels (ops.h QkvRopeKvWriteArgs), so a
    // step lists its prompt rows first (executor/step_builder.cc).
    int64_t num_prompt_rows = 0;
};

// Block tables kept in backend memory between steps, as the executors keep them: per KV group a row per
// seq_slot and a padding row (the last; always -1), `width` entries each (-1: not held), int32
// [kNumKvGroups, rows, width]. A step sends only what changed since the last (HostStep::table_pairs,
// written by StepUpload::upload before the step's ops) and attention reads row table_rows[s]; the tables
// keep their address (a decode graph reads them in place) until a step widens them.
struct DeviceBlockTables {
    ops::Buffer buffer;
    int64_t rows = 0, width = 0;
    // Every entry of num_slots + 1 rows of `width` set to -1 (allocated when the shape changes).
    Status init(ops::Backend& backend, int64_t num_slots, int64_t width);
    int32_t* group(int g) const { return buffer.as<int32_t>() + g * rows * width; }
    int32_t padding_row() const { return static_cast<int32_t>(rows - 1); }
};

// The same step in host memory, as a step builder fills it.
struct HostStep {
    std::vector<int32_t> token_ids, positions, query_start_loc, seq_lens, logits_rows;
    std::vector<int64_t> slot_mapping[ops::kNumKvGroups];
    // Without table_rows: each sequence's whole block table, [S, max_blocks[g]] (the full upload).
    std::vector<int32_t> block_tables[ops::kNumKvGroups];
    int64_t max_blocks[ops::kNumKvGroups] = {1, 1};
    int64_t num_prompt_rows = 0;  // ForwardBatch::num_prompt_rows
    // With table_rows ([S]; the DeviceBlockTables row of each sequence): block_tables stays empty and the
    // step carries the tables' changes since the last step as ops::ScatterIdsArgs pairs over the flat
    // [kNumKvGroups, table_num_rows, table_width] tables: num_table_fills (start, count) fills with -1,
    // then (index, block) writes. A step whose table_width differs from the tables' (they grew) carries
    // every held entry, for tables made anew.
    std::vector<int32_t> table_rows, table_pairs;
    int64_t num_table_fills = 0, table_num_rows = 0, table_width = 0;
    int64_t num_seqs() const { return static_cast<int64_t>(seq_lens.size()); }
    int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
};

// Bytes sent with a step in the same copy (StepUpload::upload), placed right before the step's inputs in
// backend memory: the asynchronous executor's sample rows. `fix` runs before the copy with the head's
// address in backend memory and the step's inputs, to write backend pointers into *bytes (host memory).
struct StepHead {
    std::vector<uint8_t>* bytes = nullptr;
    std::function<void(uint8_t* device, const ForwardBatch& inputs)> fix;
};

// Packs a HostStep into one buffer of backend memory with one upload (grown when a step needs more).
// Layout: [head capacity | the step's inputs]; a StepHead ends where the inputs begin, so head and inputs
// go in one contiguous copy. The inputs keep their address while the head and the step fit (a graph's
// inputs); a larger head or step moves them (a graph captured before then is recaptured).
class StepUpload {
  public:
    // Without waiting for the device (Backend::upload_async): the buffer is reused by the next upload,
    // which is ordered after this step's ops. With `pinned` (a Buffer of Backend::alloc_host, grown here
    // when too small) the bytes are packed into it and sent with Backend::upload_pinned: pinned must then
    // stay untouched until an Event recorded after this call was waited (the asynchronous executor keeps
    // one per step in flight). Errors: out of (device or pinned) memory.
    // With `head`, its bytes go in the same copy, right before the inputs (StepHead).
    // A step with table_rows needs `tables` (made anew when its width is not the step's): the step's
    // table pairs travel at the end of the same copy and are written (Backend::scatter_ids) right after
    // it, before any op of the step.
    Result<ForwardBatch> upload(ops::Backend& backend, const HostStep& step, ops::Buffer* pinned = nullptr,
                                const StepHead* head = nullptr, DeviceBlockTables* tables = nullptr);
    // Grows the device buffer to hold `bytes` of inputs after `head_bytes` of head capacity now (a graph's
    // inputs keep their addresses when every later step and head fit). Never shrinks.
    Status reserve(ops::Backend& backend, int64_t bytes, int64_t head_bytes = 0);
    // Bytes a step of `rows` one-token sequences with block tables `max_blocks` wide takes (alignment
    // included): what reserve() needs for the largest decode graph.
    static int64_t decode_bytes(int64_t rows, const int64_t max_blocks[ops::kNumKvGroups]);
    // The same with DeviceBlockTables: `rows` table rows and `table_pairs` (fill or write) pairs.
    static int64_t decode_bytes_kept_tables(int64_t rows, int64_t table_pairs);
    // Bytes of step inputs (the head excluded) the last upload sent.
    int64_t last_input_bytes() const { return last_bytes_; }

  private:
    ops::Buffer device_;
    int64_t head_cap_ = 0;  // bytes of device_ before the inputs (a multiple of 256)
    int64_t last_bytes_ = 0;
    std::vector<uint8_t> staging_, combined_;
};

// The activations of one step in backend memory, sized for max_tokens rows and logits_chunk_rows rows
// of logits at a time.
struct Workspace {
    // vocab_shard_rows > 0: this rank's lm_head holds that many rows of a vocab-sharded model (tensor
    // parallelism): logits_local and logits_gathered are allocated too.
    static Result<Workspace> create(ops::Backend& backend, const GptOssConfig& c, int64_t max_tokens,
                                    int64_t logits_chunk_rows, int64_t vocab_shard_rows = 0);
    float* x = nullptr;                // [T, H] residual stream
    float* h = nullptr;                // [T, H] normed input of a block
    float* q = nullptr;                // [T, nh*d]
    float* k = nullptr;                // [T, nkv*d]
    float* v = nullptr;                // [T, nkv*d]
    float* attn = nullptr;             // [T, nh*d]
    float* o = nullptr;                // [T, H] o_proj output
    int32_t* expert_ids = nullptr;     // [T, k]
    float* expert_weights = nullptr;   // [T, k]
    float* logits_h = nullptr;         // [chunk, H] normed rows of the final norm
    float* logits = nullptr;           // [chunk, V]
    float* logits_local = nullptr;     // [chunk, V_shard] this rank's rows of lm_head (tensor parallel)
    float* logits_gathered = nullptr;  // [chunk * V] every rank's logits_local in rank order (tp rank 0)
    int64_t max_tokens = 0, logits_chunk_rows = 0;
    std::vector<ops::Buffer> buffers;
};

// Called with every named intermediate when set: name ("attn_norm", "q", ..., "final_norm"), layer (-1
// for none), data f32 [rows, cols] downloaded to host memory.
using TraceFn =
    std::function<void(std::string_view name, int64_t layer, const float* data, int64_t rows, int64_t cols)>;

// Receives the logits of rows [first, first + count) of ForwardBatch::logits_rows: f32 [count, V] in
// backend memory, valid until the callback returns.
using LogitsFn = std::function<void(int64_t first, int64_t count, const float* logits)>;

// The communicators of a sharded model's rank (ModelWeights::shard; docs/parallel.md): `tp` joins the
// ranks of one pipeline stage (two all-reduces per layer, one after the embedding, the logits gather),
// `pp` the stages of one tp rank (the residual stream sent from each stage to the next). Unused (null)
// when the model is whole.
struct ForwardComm {
    ops::Communicator* tp = nullptr;
    ops::Communicator* pp = nullptr;
};

class Forward {
  public:
    Forward(std::shared_ptr<const PlacedModel> model, ops::Backend& backend);

    const GptOssConfig& config() const { return model_->weights.config; }
    const ModelWeights& weights() const { return model_->weights; }
    ops::Backend& backend() const { return backend_; }
    void set_trace(TraceFn fn) { trace_ = std::move(fn); }
    bool tracing() const { return static_cast<bool>(trace_); }

    // A shard's communicators (before the first run).
    void set_comm(ForwardComm comm) { comm_ = comm; }
    // Runs the experts op of the layers the placed model keeps on the host (PlacedModel::experts_on_host;
    // CPU expert offload). Required (checked) when there are such layers; not owned.
    void set_host_experts(ops::HostExperts* host) { host_experts_ = host; }
    const PlacedModel& placed() const { return *model_; }

    // Runs one step; calls on_logits for each chunk of logits rows (a sharded model: only on tp rank 0 of
    // the last pipeline stage, with the gathered logits of the whole vocabulary). Every rank of a sharded
    // model runs the same batch. Preconditions (checked where the backend can): ids < vocab, every key a
    // token attends to is in a held block, sizes within ws. Errors: the communicators' (watchdog,
    // order mismatch, a failed peer); the step is then abandoned.
    Status run(const ForwardBatch& batch, const std::vector<ops::KvLayer>& kv, Workspace& ws,
               const LogitsFn& on_logits);

  private:
    void trace(std::string_view name, int64_t layer, const float* device, int64_t rows, int64_t cols);

    std::shared_ptr<const PlacedModel> model_;
    ops::Backend& backend_;
    TraceFn trace_;
    ForwardComm comm_;
    ops::HostExperts* host_experts_ = nullptr;
    std::vector<float> trace_host_;
};

}  // namespace volt::model
