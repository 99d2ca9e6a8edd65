#include "executor/backend_executor.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>

#include "core/check.h"
#include "cpu/tcp_communicator.h"
#include "executor/step_wire.h"

namespace volt::executor {

using namespace engine;  // the seam's types

namespace {
constexpr int64_t kLogitsChunkRows = 256;

// Appends n elements at an 8-byte aligned offset of `bytes`; returns the offset.
template <typename T>
int64_t stage(std::vector<uint8_t>& bytes, const T* src, int64_t n) {
    const int64_t off = (static_cast<int64_t>(bytes.size()) + 7) / 8 * 8;
    bytes.resize(off + n * static_cast<int64_t>(sizeof(T)));
    if (n > 0) std::memcpy(bytes.data() + off, src, n * sizeof(T));
    return off;
}
// Room for n elements of T at an 8-byte aligned offset (left zero); returns the offset.
template <typename T>
int64_t room(std::vector<uint8_t>& bytes, int64_t n) {
    const int64_t off = (static_cast<int64_t>(bytes.size()) + 7) / 8 * 8;
    bytes.resize(off + n * static_cast<int64_t>(sizeof(T)));
    return off;
}

// Rank 0 -> workers: a header, then `bytes` of payload (a CacheConfig, a step of step_wire.h, nothing).
enum ControlKind : uint32_t { kInitCache = 1, kStep = 2, kShutdown = 3 };
struct ControlHeader {
    uint32_t kind = 0, pad = 0;
    int64_t bytes = 0;
};
}  // namespace

struct BackendExecutor::Process {
    // The world (every process): rank 0's control messages, the output rank's results, the connections'
    // watch; the rank's tp and pp communicators are subgroups of it (RankGroup::create_process_rank).
    std::unique_ptr<cpu::TcpCommunicator> comm;
    int rank = 0, world = 1, output = 0;
    bool shut = false;                         // rank 0: the workers were told to end
    std::vector<uint8_t> bytes, output_bytes;  // rank 0: a step for the workers, for the output rank
    std::vector<uint8_t> result;
    WireStep step;             // workers: the step being run
    StepLimits limits;         // workers: what steps are checked against (set by init_cache)
    bool cache_ready = false;  // workers: init_cache came
    // The fault tests' stall (VOLT_DEBUG_STALL_RANK; create_process_rank): seconds, and the step (< 0: none).
    double stall_s = 0;
    int64_t stall_step = -1;
    // Rank 0's monitor (set_on_group_lost).
    std::thread monitor;
    std::mutex mu;
    std::condition_variable cv;
    bool stop_monitor = false;
};

BackendExecutor::BackendExecutor(std::shared_ptr<const model::ModelWeights> weights, ops::Format kv_format,
                                 int max_in_flight)
    : SyncExecutor(max_in_flight), weights_(std::move(weights)), kv_format_(kv_format) {}

BackendExecutor::~BackendExecutor() { shutdown_workers(); }

Result<std::unique_ptr<BackendExecutor>> BackendExecutor::create_process_rank(
    std::shared_ptr<const model::ModelWeights> weights, const model::ParallelConfig& parallel, int rank,
    std::unique_ptr<ops::Backend> backend, ops::Format kv_format, std::unique_ptr<cpu::TcpCommunicator> comm,
    ProcessComms comms) {
    std::unique_ptr<BackendExecutor> ex(new BackendExecutor(weights, kv_format, 1));
    auto p = std::make_unique<Process>();
    p->rank = rank;
    p->world = parallel.world_size();
    if (const char* stall = std::getenv("VOLT_DEBUG_STALL_RANK");
        stall != nullptr && std::atoi(stall) == rank) {
        const char* seconds = std::getenv("VOLT_DEBUG_STALL_S");
        const char* step = std::getenv("VOLT_DEBUG_STALL_STEP");
        p->stall_s = seconds != nullptr ? std::atof(seconds) : 3600.0;
        p->stall_step = step != nullptr ? std::atoll(step) : 2;
        spdlog::warn(
            "parallel: VOLT_DEBUG_STALL_RANK={}: this rank will sleep {} s before its share of step {}", rank,
            p->stall_s, p->stall_step);
    }
    VOLT_ASSIGN_OR_RETURN(
        ex->group_, RankGroup::create_process_rank(std::move(weights), parallel, rank, std::move(backend),
                                                   *comm, std::move(comms)));
    p->comm = std::move(comm);
    p->output = ex->group_->output_rank();
    ex->process_ = std::move(p);
    ex->states_.resize(1);
    return ex;
}

void BackendExecutor::set_on_group_lost(std::function<void(const Status&)> on_lost) {
    if (!process_ || process_->rank != 0 || !on_lost) return;
    Process* p = process_.get();
    p->monitor = std::thread([p, on_lost = std::move(on_lost)] {
        std::unique_lock<std::mutex> lock(p->mu);
        while (!p->stop_monitor) {
            p->cv.wait_for(lock, std::chrono::milliseconds(200));
            if (p->stop_monitor) return;
            const Status s = p->comm->check_peers();
            if (!s.is_ok()) {
                lock.unlock();
                on_lost(s);
                return;
            }
        }
    });
}

void BackendExecutor::shutdown_workers() {
    if (!process_ || process_->rank != 0) return;
    {
        std::lock_guard<std::mutex> lock(process_->mu);
        process_->stop_monitor = true;
    }
    process_->cv.notify_all();
    if (process_->monitor.joinable()) process_->monitor.join();
    if (process_->shut || !process_->comm->check_peers().is_ok()) return;
    process_->shut = true;
    const Status s = send_control(kShutdown, {});
    if (!s.is_ok()) spdlog::warn("parallel: telling the worker processes to end failed: {}", s.to_string());
}

Status BackendExecutor::lose(Status why) {
    if (process_) process_->comm->abort(why);
    return why;
}

Status BackendExecutor::send_control(uint32_t kind, const std::vector<uint8_t>& payload,
                                     const std::vector<uint8_t>* output_payload) {
    Process& p = *process_;
    p.comm->begin_step(step_count_);
    for (int r = 1; r < p.world; ++r) {
        const std::vector<uint8_t>& bytes = r == p.output && output_payload ? *output_payload : payload;
        const ControlHeader h{kind, 0, static_cast<int64_t>(bytes.size())};
        VOLT_RETURN_IF_ERROR(p.comm->send(&h, sizeof h, r));
        if (h.bytes > 0) VOLT_RETURN_IF_ERROR(p.comm->send(bytes.data(), h.bytes, r));
    }
    return Status::ok();
}

// The output rank's sampled ids and logprobs of `rows` logits rows, sent to rank 0 when they differ.
Status BackendExecutor::exchange_result(int64_t rows) {
    Process& p = *process_;
    if (p.output == 0 || rows == 0 || (p.rank != 0 && p.rank != p.output)) return Status::ok();
    const int64_t top = rows * kMaxLogprobs;
    std::vector<uint8_t>& buf = p.result;
    buf.resize(static_cast<size_t>(rows * 8 + top * 8));
    uint8_t* at[4] = {buf.data(), buf.data() + rows * 4, buf.data() + rows * 8,
                      buf.data() + rows * 8 + top * 4};
    if (p.rank == p.output) {
        std::memcpy(at[0], tokens_.data(), rows * 4);
        std::memcpy(at[1], logprobs_.data(), rows * 4);
        std::memcpy(at[2], top_ids_.data(), top * 4);
        std::memcpy(at[3], top_logprobs_.data(), top * 4);
        return p.comm->send(buf.data(), static_cast<int64_t>(buf.size()), 0);
    }
    VOLT_RETURN_IF_ERROR(p.comm->recv(buf.data(), static_cast<int64_t>(buf.size()), p.output));
    VOLT_RETURN_IF_ERROR(check_sampled_ids(reinterpret_cast<const int32_t*>(at[0]), rows,
                                           reinterpret_cast<const int32_t*>(at[2]), top,
                                           weights_->config.vocab_size));
    std::memcpy(tokens_.data(), at[0], rows * 4);
    std::memcpy(logprobs_.data(), at[1], rows * 4);
    std::memcpy(top_ids_.data(), at[2], top * 4);
    std::memcpy(top_logprobs_.data(), at[3], top * 4);
    return Status::ok();
}

Status BackendExecutor::run_worker(const std::atomic<bool>* stop) {
    VOLT_CHECK(process_ && process_->rank != 0) << "run_worker on a process rank > 0 only";
    Process& p = *process_;
    for (;;) {
        VOLT_RETURN_IF_ERROR(p.comm->wait_message(0, stop));
        p.comm->begin_step(step_count_);
        ControlHeader h;
        Status s = p.comm->recv(&h, sizeof h, 0);
        // The most any message may hold: a CacheConfig before init_cache, then the largest step it allows.
        const int64_t most =
            std::max<int64_t>(sizeof(CacheConfig), p.cache_ready ? max_step_bytes(p.limits) : 0);
        if (s.is_ok() && (h.bytes < 0 || h.bytes > most))
            s = internal_error("a control message from rank 0 of " + std::to_string(h.bytes) +
                               " bytes (at most " + std::to_string(most) + " now)");
        if (s.is_ok()) {
            p.bytes.resize(static_cast<size_t>(h.bytes));
            if (h.bytes > 0) s = p.comm->recv(p.bytes.data(), h.bytes, 0);
        }
        if (!s.is_ok()) return lose(s);
        if (h.kind == kShutdown) return Status::ok();
        if (h.kind == kInitCache) {
            if (h.bytes != static_cast<int64_t>(sizeof(CacheConfig)))
                return lose(
                    internal_error("init_cache from rank 0 of " + std::to_string(h.bytes) + " bytes"));
            CacheConfig c;
            std::memcpy(&c, p.bytes.data(), sizeof c);
            s = check_cache_config(c);
            if (s.is_ok()) s = init_cache(c);
            if (s.is_ok()) {
                p.limits = {c, weights_->config.vocab_size, p.rank == p.output};
                p.cache_ready = true;
            }
        } else if (h.kind == kStep) {
            s = p.cache_ready ? decode_step(p.bytes.data(), h.bytes, p.limits, &p.step)
                              : internal_error("a step from rank 0 before init_cache");
            StepResult ignored;
            if (s.is_ok()) s = run(p.step.batch, &ignored);
        } else {
            s = internal_error("an unknown control message from rank 0 (kind " + std::to_string(h.kind) +
                               ", " + std::to_string(h.bytes) + " bytes)");
        }
        if (!s.is_ok()) return lose(s);
    }
}

Status BackendExecutor::make_ranks(const model::ParallelConfig& parallel, const BackendFactory& make_backend,
                                   const ops::CommunicatorOptions& comm_options,
                                   const CommFactory& make_comms, const std::vector<bool>& experts_on_host) {
    VOLT_ASSIGN_OR_RETURN(group_, RankGroup::create(weights_, parallel, make_backend, comm_options,
                                                    make_comms, experts_on_host));
    experts_offloaded_ =
        std::find(experts_on_host.begin(), experts_on_host.end(), true) != experts_on_host.end();
    states_.clear();
    states_.resize(group_->size());
    return Status::ok();
}

Result<std::unique_ptr<BackendExecutor>> BackendExecutor::create(
    std::shared_ptr<const model::ModelWeights> weights, std::unique_ptr<ops::Backend> backend,
    ops::Format kv_format, int max_in_flight, const std::vector<bool>& experts_on_host) {
    std::unique_ptr<BackendExecutor> ex(new BackendExecutor(std::move(weights), kv_format, max_in_flight));
    auto held = std::make_shared<std::unique_ptr<ops::Backend>>(std::move(backend));
    VOLT_RETURN_IF_ERROR(ex->make_ranks(
        {}, [held](int) { return Result<std::unique_ptr<ops::Backend>>(std::move(*held)); }, {},
        thread_communicators, experts_on_host));
    return ex;
}

Result<std::unique_ptr<BackendExecutor>> BackendExecutor::create_parallel(
    std::shared_ptr<const model::ModelWeights> weights, const model::ParallelConfig& parallel,
    const BackendFactory& make_backend, ops::Format kv_format, const ops::CommunicatorOptions& comm_options,
    const CommFactory& make_comms) {
    std::unique_ptr<BackendExecutor> ex(new BackendExecutor(std::move(weights), kv_format, 1));
    VOLT_RETURN_IF_ERROR(ex->make_ranks(parallel, make_backend, comm_options, make_comms));
    return ex;
}

ExecutorInfo BackendExecutor::info() const {
    const model::GptOssConfig& c = weights_->config;
    ExecutorInfo info;
    info.vocab_size = c.vocab_size;
    info.max_position_embeddings = c.max_position_embeddings;
    for (int64_t id : c.eos_token_ids) info.eos_token_ids.push_back(static_cast<int32_t>(id));
    info.has_group[0] = info.has_group[1] = false;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) info.has_group[model::kv_group_of(c, l)] = true;
    info.sliding_window = info.has_group[1] ? c.sliding_window : 0;
    info.can_swap = true;
    info.kv_in_host_memory = group_->rank(group_->local_output()).backend->memory_is_host();
    return info;
}

int64_t BackendExecutor::bytes_per_block(int64_t block_size, int group) const {
    return model::KvStore::bytes_per_block(weights_->config, block_size, group, kv_format_);
}

ExecutorMemory BackendExecutor::memory() const {
    if (group_->size() == 1) {
        const ops::MemoryStats m = group_->rank(0).backend->memory();
        return {m.total_bytes, m.free_bytes};
    }
    ExecutorMemory sum{0, 0};
    std::vector<int> seen;
    for (int i = 0; i < group_->size(); ++i) {
        const ops::Backend& be = *group_->rank(i).backend;
        if (std::find(seen.begin(), seen.end(), be.device_ordinal()) != seen.end()) continue;
        seen.push_back(be.device_ordinal());
        const ops::MemoryStats m = be.memory();
        sum.total_bytes += m.total_bytes;
        sum.free_bytes += m.free_bytes;
    }
    return sum;
}

int BackendExecutor::num_devices() const {
    std::vector<int> seen;
    for (int i = 0; i < group_->size(); ++i) {
        const int d = group_->rank(i).backend->device_ordinal();
        if (std::find(seen.begin(), seen.end(), d) == seen.end()) seen.push_back(d);
    }
    return static_cast<int>(seen.size());
}

double BackendExecutor::max_device_kv_share(int64_t block_size) const {
    const model::GptOssConfig& c = weights_->config;
    int64_t full = 0;
    std::map<int, int64_t> per_device;
    for (int g = 0; g < kNumKvGroups; ++g) full += bytes_per_block(block_size, g);
    // One rank of several processes: its own shard's share (rank 0's: stage 0 holds the most layers and
    // every tp rank the same KV heads, so no other process's GPU holds more of a block).
    if (full <= 0 || (group_->size() == 1 && !process_)) return 1.0;
    for (int i = 0; i < group_->size(); ++i) {
        const model::ModelWeights& w = *group_->rank(i).shard;
        const int64_t end = w.shard.layer_end < 0 ? c.num_hidden_layers : w.shard.layer_end;
        int64_t bytes = 0;
        for (int g = 0; g < kNumKvGroups; ++g) {
            // bytes_per_block counts every layer of the group; the rank holds its stage's only.
            int64_t all = 0, mine = 0;
            for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
                if (model::kv_group_of(c, l) != g) continue;
                ++all;
                if (l >= w.shard.layer_begin && l < end) ++mine;
            }
            if (all > 0)
                bytes += model::KvStore::bytes_per_block(w.config, block_size, g, kv_format_) / all * mine;
        }
        per_device[group_->rank(i).backend->device_ordinal()] += bytes;
    }
    int64_t most = 0;
    for (const auto& [device, bytes] : per_device) most = std::max(most, bytes);
    return static_cast<double>(most) / static_cast<double>(full);
}

Status BackendExecutor::init_cache(const CacheConfig& c) {
    if (process_ && process_->rank == 0) {
        std::vector<uint8_t> bytes(sizeof c);
        std::memcpy(bytes.data(), &c, sizeof c);
        if (Status s = send_control(kInitCache, bytes); !s.is_ok()) return lose(s);
    }
    const int64_t rows = std::max<int64_t>(c.max_num_batched_tokens, 1);
    for (int i = 0; i < group_->size(); ++i) {
        Rank& r = group_->rank(i);
        RankState& st = states_[i];
        r.backend->bind_thread();  // this thread serves every rank's device in turn (several GPUs)
        const model::ModelWeights& w = *r.shard;
        st.cache = model::KvStore();  // a profiling run's cache, if any, goes first
        VOLT_ASSIGN_OR_RETURN(
            st.cache, model::KvStore::create(*r.backend, w.config, c.block_size, c.num_blocks, kv_format_,
                                             w.shard.layer_begin, w.shard.layer_end));
        if (st.ws.buffers.empty() || st.ws.max_tokens < rows) {
            st.ws = model::Workspace();
            const int64_t shard_rows = w.shard.tp_size > 1 && w.shard.last_stage() ? w.lm_head.out : 0;
            VOLT_ASSIGN_OR_RETURN(
                st.ws, model::Workspace::create(*r.backend, w.config, rows, kLogitsChunkRows, shard_rows));
        }
        VOLT_RETURN_IF_ERROR(r.backend->reserve({c.max_num_batched_tokens, c.max_num_seqs, c.max_model_len}));
        // Host swap pools: one host block holds every layer of the group on this rank, K then V.
        const int64_t end = w.shard.layer_end < 0 ? w.config.num_hidden_layers : w.shard.layer_end;
        for (int g = 0; g < kNumKvGroups; ++g) {
            st.host_pool[g] = ops::Buffer();
            st.swap_layers[g].clear();
            for (int64_t l = w.shard.layer_begin; l < end; ++l)
                if (model::kv_group_of(w.config, l) == g) st.swap_layers[g].push_back(st.cache.layers()[l]);
            const int64_t n = c.num_host_blocks[g];
            if (n <= 0 || st.swap_layers[g].empty()) continue;
            const auto layers = static_cast<int64_t>(st.swap_layers[g].size());
            VOLT_ASSIGN_OR_RETURN(st.host_pool[g],
                                  r.backend->alloc_host(n * layers * 2 * st.cache.block_bytes()));
        }
    }
    // Block tables kept in backend memory by seq_slot (model::DeviceBlockTables), as wide as the longest
    // sequence needs (wider on demand); each step sends what changed.
    const int64_t table_width =
        full_table_upload_
            ? 0
            : (std::max<int64_t>(c.max_model_len > 0 ? c.max_model_len : 256, 1) + c.block_size - 1) /
                  c.block_size;
    for (int i = 0; i < group_->size(); ++i) {
        if (table_width == 0) {
            states_[i].tables = model::DeviceBlockTables();
            continue;
        }
        group_->rank(i).backend->bind_thread();
        VOLT_RETURN_IF_ERROR(states_[i].tables.init(*group_->rank(i).backend, c.max_num_seqs, table_width));
    }
    builder_.init(c.max_num_seqs, table_width);
    set_num_slots(c.max_num_seqs);
    // The asynchronous path: one staging set and event per step in flight, the last draw per seq_slot.
    VOLT_CHECK(async_next_ == async_collected_) << "init_cache with steps in flight";
    async_ = !resolve_on_host_ && !process_ && group_->size() == 1;
    async_ring_.clear();
    last_draw_ = ops::Buffer();
    fed_.assign(static_cast<size_t>(std::max<int64_t>(c.max_num_seqs, 1)), 0);
    if (async_) {
        ops::Backend& be = backend();
        const int64_t slots = std::max<int64_t>(c.max_num_seqs, 1);
        VOLT_ASSIGN_OR_RETURN(last_draw_, be.alloc(slots * static_cast<int64_t>(sizeof(int32_t))));
        be.fill(last_draw_.data(), 0, slots * static_cast<int64_t>(sizeof(int32_t)));
        async_ring_.resize(static_cast<size_t>(std::max(1, max_in_flight())));
        for (AsyncStep& f : async_ring_) f.done = be.create_event();
    }
    // Decode graphs: capture sizes, and the inputs' buffer at its largest so that it never moves.
    graphs_.clear();
    capture_sizes_.clear();
    max_model_len_ = c.max_model_len;
    block_size_ = c.block_size;
    const int64_t max_rows = std::min<int64_t>({c.max_num_seqs, rows, kLogitsChunkRows});
    for (int64_t n : {1, 2, 4})
        if (n <= max_rows) capture_sizes_.push_back(n);
    for (int64_t n = 8; n <= max_rows; n += 8) capture_sizes_.push_back(n);
    if (!capture_sizes_.empty() && capture_sizes_.back() < max_rows) capture_sizes_.push_back(max_rows);
    if (!capture_sizes_.empty() && c.max_model_len > 0) {
        const int64_t widths = (std::max<int64_t>(c.max_model_len, 256) + c.block_size - 1) / c.block_size;
        const int64_t w[kNumKvGroups] = {widths, widths};
        // The asynchronous path's sample rows travel in front of the inputs (model::StepHead): room for
        // the largest bucket's rows, their outputs and moves, and 64 KiB of id lists (a larger head, e.g.
        // long penalty histories, grows it once and the graphs are captured again).
        const int64_t rows_max = capture_sizes_.back();
        const auto per_row = static_cast<int64_t>(sizeof(ops::SampleRow) + 2 * sizeof(ops::IdMove)) + 8 +
                             8 * kMaxLogprobs + 64;
        // Kept tables: a decode step's pairs are about one a row per group (a new block, a freed one);
        // more (a swap-in's blocks) grows the buffer once and the graphs are captured again.
        const int64_t input_bytes =
            builder_.kept_tables() ? model::StepUpload::decode_bytes_kept_tables(rows_max, 8 * rows_max + 64)
                                   : model::StepUpload::decode_bytes(rows_max, w);
        // Rank 0's upload also serves its eager asynchronous steps (one rank: async_); the others' only
        // graph steps.
        const int uploads = graphs_possible() ? group_->size() : 1;
        for (int i = 0; i < uploads; ++i) {
            ops::Backend& be = *group_->rank(i).backend;
            be.bind_thread();
            VOLT_RETURN_IF_ERROR(states_[i].graph_upload.reserve(
                be, input_bytes, async_ && i == 0 ? rows_max * per_row + 65536 : 0));
        }
    }
    return Status::ok();
}

void BackendExecutor::fill_workspace(uint8_t byte) {
    for (int i = 0; i < group_->size(); ++i) {
        ops::Backend& be = *group_->rank(i).backend;
        be.bind_thread();
        for (const ops::Buffer& buf : states_[i].ws.buffers) be.fill(buf.data(), byte, buf.bytes());
        be.fill_scratch(byte);
    }
}

Status BackendExecutor::profile(const CacheConfig& c) {
    const model::GptOssConfig& mc = weights_->config;
    const int64_t T = std::max<int64_t>(c.max_num_batched_tokens, 1), bs = c.block_size;
    const int64_t blocks = (T + bs - 1) / bs;
    const ExecutorInfo in = info();
    CacheConfig tmp = c;
    tmp.max_num_seqs = std::max<int64_t>(c.max_num_seqs, 1);
    for (int g = 0; g < kNumKvGroups; ++g) tmp.num_blocks[g] = in.has_group[g] ? blocks : 0;
    VOLT_RETURN_IF_ERROR(init_cache(tmp));
    // One prompt of T tokens (id 0 at positions 0..T-1) in seq_slot 0, every block of the temporary
    // cache in its tables, and the last rows sampled greedily (the sample op's scratch at its largest).
    StepBatch b;
    b.num_tokens = T;
    b.num_seqs = 1;
    b.vocab_size_real = mc.vocab_size;
    b.token_ids.assign(T, 0);
    b.positions.resize(T);
    for (int64_t t = 0; t < T; ++t) b.positions[t] = static_cast<int32_t>(t);
    for (int g = 0; g < kNumKvGroups; ++g) {
        if (!in.has_group[g]) continue;
        b.slot_mapping[g].resize(T);
        for (int64_t t = 0; t < T; ++t) b.slot_mapping[g][t] = t;
        for (int64_t i = 0; i < blocks; ++i)
            b.table_updates.push_back({0, g, static_cast<int32_t>(i), static_cast<int32_t>(i)});
    }
    b.query_start_loc = {0, static_cast<int32_t>(T)};
    b.context_lens = {static_cast<int32_t>(T)};
    b.seq_slots = {0};
    b.request_index = {0};
    const SamplingParams greedy;  // defaults; temperature 0 is not needed for sizing
    const std::vector<int32_t> none;
    // The rows are prompt rows (StepBuilder: num_prompt_rows = T), so the prompt kernels' scratch reaches
    // its peak too (a GPU sizes the generated rows' scratch for max_tokens whichever kind runs).
    const std::vector<int32_t> prompt(T, 0);
    b.sampling.push_back({&greedy, &prompt, &none, false});
    for (int64_t r = std::max<int64_t>(0, T - kLogitsChunkRows); r < T; ++r)
        b.logits_rows.push_back({static_cast<int32_t>(r), 0, -1, 0, 0, -1, false});
    StepResult result;
    VOLT_RETURN_IF_ERROR(run(b, &result));
    for (int i = 0; i < group_->size(); ++i) {
        group_->rank(i).backend->bind_thread();
        group_->rank(i).backend->synchronize();
        states_[i].cache = model::KvStore();
    }
    return Status::ok();
}

Status BackendExecutor::sample_chunk(const std::vector<ops::SampleRow>& rows, int64_t first, int64_t V,
                                     int64_t V_real) {
    const auto n = static_cast<int64_t>(rows.size());
    // Layout: outputs first (one download), then the rows, then each row's id lists.
    std::vector<uint8_t>& s = sample_staging_;
    s.clear();
    const int64_t out_tokens = room<int32_t>(s, n);
    const int64_t out_lp = room<float>(s, n);
    const int64_t out_top_ids = room<int32_t>(s, n * kMaxLogprobs);
    const int64_t out_top_lp = room<float>(s, n * kMaxLogprobs);
    const int64_t out_bytes = static_cast<int64_t>(s.size());
    const int64_t rows_off = stage(s, rows.data(), n);
    struct Offsets {
        int64_t bias_ids, bias_values, allowed, prompt, output;
    };
    std::vector<Offsets> offs(n);
    for (int64_t i = 0; i < n; ++i) {
        const ops::SampleRow& r = rows[i];
        offs[i].bias_ids = stage(s, r.bias_ids, r.num_bias);
        offs[i].bias_values = stage(s, r.bias_values, r.num_bias);
        offs[i].allowed = stage(s, r.allowed_ids, r.num_allowed);
        offs[i].prompt = stage(s, r.prompt_ids, r.num_prompt);
        offs[i].output = stage(s, r.output_ids, r.num_output);
    }
    const auto bytes = static_cast<int64_t>(s.size());
    if (sample_device_.bytes() < bytes) {
        VOLT_ASSIGN_OR_RETURN(sample_device_, backend().alloc(std::max<int64_t>(bytes * 5 / 4, 4096)));
    }
    auto* base = static_cast<uint8_t*>(sample_device_.data());
    // Row pointers into the device copy of the lists (the logits pointer already is backend memory).
    auto* staged_rows = reinterpret_cast<ops::SampleRow*>(s.data() + rows_off);
    for (int64_t i = 0; i < n; ++i) {
        ops::SampleRow& r = staged_rows[i];
        r.bias_ids = reinterpret_cast<const int32_t*>(base + offs[i].bias_ids);
        r.bias_values = reinterpret_cast<const float*>(base + offs[i].bias_values);
        r.allowed_ids = reinterpret_cast<const int32_t*>(base + offs[i].allowed);
        r.prompt_ids = reinterpret_cast<const int32_t*>(base + offs[i].prompt);
        r.output_ids = reinterpret_cast<const int32_t*>(base + offs[i].output);
    }
    ops::Backend& be = backend();
    be.upload_async(base, s.data(), bytes);  // ordered before the sample op; s is copied out now
    ops::SampleArgs args;
    args.rows = reinterpret_cast<const ops::SampleRow*>(base + rows_off);
    args.num_rows = n;
    args.vocab_size = V;
    args.vocab_size_real = V_real;
    args.tokens = reinterpret_cast<int32_t*>(base + out_tokens);
    args.logprobs = reinterpret_cast<float*>(base + out_lp);
    args.top_ids = reinterpret_cast<int32_t*>(base + out_top_ids);
    args.top_logprobs = reinterpret_cast<float*>(base + out_top_lp);
    args.max_top = kMaxLogprobs;
    be.sample(args);
    sample_out_.resize(out_bytes);
    be.download(sample_out_.data(), base, out_bytes);
    std::memcpy(tokens_.data() + first, sample_out_.data() + out_tokens, n * sizeof(int32_t));
    std::memcpy(logprobs_.data() + first, sample_out_.data() + out_lp, n * sizeof(float));
    std::memcpy(top_ids_.data() + first * kMaxLogprobs, sample_out_.data() + out_top_ids,
                n * kMaxLogprobs * sizeof(int32_t));
    std::memcpy(top_logprobs_.data() + first * kMaxLogprobs, sample_out_.data() + out_top_lp,
                n * kMaxLogprobs * sizeof(float));
    return Status::ok();
}

uint64_t BackendExecutor::hash_device_block(int i, int g, int32_t block) {
    RankState& st = states_[i];
    const int64_t sb = st.cache.scale_block_bytes(), cb = st.cache.block_bytes() - sb;
    std::vector<uint8_t> bytes(cb + sb);
    uint64_t h = 14695981039346656037ull;  // FNV-1a 64
    for (const ops::KvLayer& l : st.swap_layers[g]) {
        // The codes (or elements) of K and V, then their scales (int8 KV).
        const std::pair<const void*, int64_t> parts[] = {
            {l.k, cb}, {l.v, cb}, {l.k_scales, sb}, {l.v_scales, sb}};
        for (const auto& [pool, n] : parts) {
            if (n == 0) continue;
            group_->rank(i).backend->download(bytes.data(), static_cast<const uint8_t*>(pool) + block * n, n);
            for (int64_t j = 0; j < n; ++j) h = (h ^ bytes[j]) * 1099511628211ull;
        }
    }
    return h;
}

void BackendExecutor::swap_rank(int i, const StepBatch& b) {
    RankState& st = states_[i];
    for (const bool out : {true, false}) {
        const std::vector<BlockSwap>& swaps = out ? b.swap_out : b.swap_in;
        for (int g = 0; g < kNumKvGroups; ++g) {
            if (st.swap_layers[g].empty()) continue;
            st.swap_device.clear();
            st.swap_host.clear();
            for (const BlockSwap& sw : swaps) {
                if (sw.group != g) continue;
                if (out && swap_observer_) swap_observer_(i, sw, true, hash_device_block(i, g, sw.device));
                st.swap_device.push_back(sw.device);
                st.swap_host.push_back(sw.host);
            }
            if (st.swap_device.empty()) continue;
            VOLT_CHECK(st.host_pool[g].data() != nullptr) << "KV group " << g << " swaps without a host pool";
            group_->rank(i).backend->swap_blocks(
                {st.swap_layers[g].data(), static_cast<int64_t>(st.swap_layers[g].size()),
                 st.host_pool[g].data(), st.swap_device.data(), st.swap_host.data(),
                 static_cast<int64_t>(st.swap_device.size()), st.cache.block_bytes(), out,
                 st.cache.scale_block_bytes()});
            if (!out && swap_observer_)
                for (const BlockSwap& sw : swaps)
                    if (sw.group == g) swap_observer_(i, sw, false, hash_device_block(i, g, sw.device));
        }
    }
}

void BackendExecutor::copy_blocks(int i, const StepBatch& b) {
    Rank& r = group_->rank(i);
    RankState& st = states_[i];
    const model::GptOssConfig& c = weights_->config;
    for (int g = 0; g < kNumKvGroups; ++g) {
        st.copy_src.clear();
        st.copy_dst.clear();
        for (const BlockCopy& cp : b.copies) {
            if (cp.group != g) continue;
            st.copy_src.push_back(cp.src);
            st.copy_dst.push_back(cp.dst);
        }
        if (st.copy_src.empty()) continue;
        st.group_layers.clear();
        const auto& shard = r.shard->shard;
        const int64_t end = shard.layer_end < 0 ? c.num_hidden_layers : shard.layer_end;
        for (int64_t l = shard.layer_begin; l < end; ++l)
            if (model::kv_group_of(c, l) == g) st.group_layers.push_back(st.cache.layers()[l]);
        if (st.group_layers.empty()) continue;
        r.backend->copy_blocks({st.group_layers.data(), static_cast<int64_t>(st.group_layers.size()),
                                st.copy_src.data(), st.copy_dst.data(),
                                static_cast<int64_t>(st.copy_src.size()), st.cache.block_bytes(),
                                st.cache.scale_block_bytes()});
    }
}

int64_t BackendExecutor::micro_batches_for(int64_t num_seqs) const {
    const int P = group_->parallel().pipeline_parallel_size;
    if (P <= 1) return 1;
    const int64_t m = micro_batches_ > 0 ? micro_batches_ : P;
    return std::clamp<int64_t>(std::min(m, num_seqs), 1, std::max<int64_t>(num_seqs, 1));
}

Status BackendExecutor::sample_micro(const StepBatch& b, const MicroStep& ms, int64_t first, int64_t count,
                                     const float* logits) {
    const int64_t V = weights_->config.vocab_size, V_real = b.vocab_size_real > 0 ? b.vocab_size_real : V;
    for (int64_t j = first; j < first + count;) {
        // A run of consecutive step rows: sampled together, into the step's rows.
        int64_t n = 1;
        while (j + n < first + count && ms.logits_index[j + n] == ms.logits_index[j] + n) ++n;
        const int64_t row = ms.logits_index[j];
        const std::vector<ops::SampleRow>& rows =
            builder_.sample_rows(b, row, n, logits + (j - first) * V, V);
        VOLT_RETURN_IF_ERROR(sample_chunk(rows, row, V, V_real));
        j += n;
    }
    return Status::ok();
}

namespace {
// Before the output rank downloads what it samples: its collectives so far done, within the watchdog.
Status drain(Rank& r) {
    if (r.tp_comm) VOLT_RETURN_IF_ERROR(r.tp_comm->drain());
    if (r.pp_comm) VOLT_RETURN_IF_ERROR(r.pp_comm->drain());
    return Status::ok();
}
}  // namespace

Status BackendExecutor::run_rank(int i, const StepBatch& b, const model::HostStep& step) {
    Rank& r = group_->rank(i);
    RankState& st = states_[i];
    const model::GptOssConfig& c = weights_->config;
    if (r.tp_comm) r.tp_comm->begin_step(step_count_);
    if (r.pp_comm) r.pp_comm->begin_step(step_count_);
    if (process_ && process_->stall_step == static_cast<int64_t>(step_count_)) {
        spdlog::warn("parallel: VOLT_DEBUG_STALL_RANK: rank {} sleeps {} s in step {}", process_->rank,
                     process_->stall_s, step_count_);
        std::this_thread::sleep_for(std::chrono::duration<double>(process_->stall_s));
    }
    swap_rank(i, b);  // before the copies and KV writes that may reuse the swapped-out blocks
    copy_blocks(i, b);
    if (!micro_.empty()) {
        // Micro-batches in order on every rank: a stage's send is buffered (ops::Communicator), so it
        // goes on to micro-batch m + 1 while the next stage runs m; every rank issues the same collectives
        // in the same order (per micro-batch: the tp all-reduces, one send / recv per stage boundary, the
        // logits gather). Each micro-batch writes the KV of its own sequences only.
        if (st.micro_uploads.size() < micro_.size()) st.micro_uploads.resize(micro_.size());
        // A sampling error (only the output rank samples) is kept, not returned at once: this rank still
        // runs the later micro-batches and finishes the step, so its peers' collectives are all met (as
        // on the whole-step path below); the step then fails with it.
        int64_t bytes = 0;
        Status sampled = Status::ok();
        for (size_t m = 0; m < micro_.size(); ++m) {
            const MicroStep& ms = micro_[m];
            VOLT_ASSIGN_OR_RETURN(
                model::ForwardBatch fb,
                st.micro_uploads[m].upload(*r.backend, ms.step, nullptr, nullptr, &st.tables));
            bytes += st.micro_uploads[m].last_input_bytes();
            VOLT_RETURN_IF_ERROR(r.forward->run(fb, st.cache.layers(), st.ws,
                                                [&](int64_t first, int64_t count, const float* logits) {
                                                    if (sampled.is_ok()) sampled = drain(r);
                                                    if (sampled.is_ok())
                                                        sampled = sample_micro(b, ms, first, count, logits);
                                                }));
        }
        if (i == 0) last_input_bytes_ = bytes;
        if (r.tp_comm) VOLT_RETURN_IF_ERROR(r.tp_comm->finish_step());
        if (r.pp_comm) VOLT_RETURN_IF_ERROR(r.pp_comm->finish_step());
        return sampled;
    }
    VOLT_ASSIGN_OR_RETURN(model::ForwardBatch fb,
                          st.upload.upload(*r.backend, step, nullptr, nullptr, &st.tables));
    if (i == 0) last_input_bytes_ = st.upload.last_input_bytes();
    const int64_t V = c.vocab_size;
    Status sampled = Status::ok();
    VOLT_RETURN_IF_ERROR(
        r.forward->run(fb, st.cache.layers(), st.ws, [&](int64_t first, int64_t count, const float* logits) {
            if (sampled.is_ok()) sampled = drain(r);
            if (!sampled.is_ok()) return;
            const std::vector<ops::SampleRow>& rows = builder_.sample_rows(b, first, count, logits, V);
            sampled = sample_chunk(rows, first, V, b.vocab_size_real > 0 ? b.vocab_size_real : V);
        }));
    if (r.tp_comm) VOLT_RETURN_IF_ERROR(r.tp_comm->finish_step());
    if (r.pp_comm) VOLT_RETURN_IF_ERROR(r.pp_comm->finish_step());
    return sampled;
}

Status BackendExecutor::run(const StepBatch& b, StepResult* result) {
    VOLT_CHECK(!states_[0].cache.layers().empty()) << "init_cache before the first step";
    if (process_ && process_->rank == 0) {
        // Only the output rank samples: the others get the step without its sampling fields.
        Process& p = *process_;
        p.bytes.clear();
        encode_step(b, &p.bytes, false);
        if (p.output != 0) {
            p.output_bytes.clear();
            encode_step(b, &p.output_bytes, true);
        }
        if (Status s = send_control(kStep, p.bytes, p.output != 0 ? &p.output_bytes : nullptr); !s.is_ok())
            return lose(s);
    }
    builder_.apply_table_updates(b);
    // A worker's step carries its sequences' prompt lengths (and no prompts unless it samples).
    const model::HostStep& step =
        builder_.build(b, process_ && process_->rank != 0 ? &process_->step.prompt_lens : nullptr);
    const auto R = static_cast<int64_t>(b.logits_rows.size());
    tokens_.resize(R);
    logprobs_.resize(R);
    top_ids_.resize(R * kMaxLogprobs);
    top_logprobs_.resize(R * kMaxLogprobs);
    // Pipeline micro-batches: cut from the StepBatch alone (its sequences' rows), so every rank and
    // every process cuts the same way.
    const int64_t m = micro_batches_for(b.num_seqs);
    micro_.clear();
    if (m > 1) builder_.micro_steps(split_micro_batches(b.query_start_loc, m), &micro_);
    if (micro_observer_) micro_observer_(b, micro_);
    micro_batches_run_ += std::max<int64_t>(1, static_cast<int64_t>(micro_.size()));
    // Graphs hold decode steps of one micro-batch only: a prompt row (a one-token prompt or chunk) takes
    // the prompt kernels.
    if (step.num_prompt_rows == 0 && graph_eligible(b)) {
        VOLT_RETURN_IF_ERROR(run_graph(b, step));
    } else {
        // Every rank runs the same step (so all issue the same collectives); only the output rank samples.
        Status s = group_->run([&](int i) { return run_rank(i, b, step); });
        if (s.is_ok() && process_) s = exchange_result(R);
        if (!s.is_ok()) return process_ ? lose(s) : s;
    }
    ++step_count_;
    fill_result(b, tokens_, logprobs_, top_ids_, top_logprobs_, kMaxLogprobs, result);
    return Status::ok();
}

}  // namespace volt::executor

namespace volt::executor {

namespace {
bool same_inputs(const model::ForwardBatch& a, const model::ForwardBatch& b) {
    bool same = a.num_tokens == b.num_tokens && a.num_seqs == b.num_seqs && a.token_ids == b.token_ids &&
                a.positions == b.positions && a.query_start_loc == b.query_start_loc &&
                a.seq_lens == b.seq_lens && a.logits_rows == b.logits_rows && a.table_rows == b.table_rows &&
                a.num_logits_rows == b.num_logits_rows && a.max_seq_len == b.max_seq_len;
    for (int g = 0; g < ops::kNumKvGroups; ++g)
        same = same && a.groups[g].slot_mapping == b.groups[g].slot_mapping &&
               a.groups[g].block_tables == b.groups[g].block_tables &&
               a.groups[g].max_blocks == b.groups[g].max_blocks;
    return same;
}

// `s` (a decode step of S sequences) padded to `rows` sequences with block tables `widths` wide (kept
// tables: the padding rows read the tables' padding row, `padding_row`).
void pad_decode_step(const model::HostStep& s, int64_t rows, const int64_t widths[ops::kNumKvGroups],
                     int32_t padding_row, model::HostStep* out) {
    const int64_t S = s.num_seqs();
    out->num_prompt_rows = 0;
    out->token_ids = s.token_ids;
    out->token_ids.resize(rows, 0);
    out->positions = s.positions;
    out->positions.resize(rows, 0);
    out->seq_lens = s.seq_lens;
    out->seq_lens.resize(rows, 0);
    out->query_start_loc.resize(rows + 1);
    out->logits_rows.resize(rows);
    for (int64_t i = 0; i <= rows; ++i) out->query_start_loc[i] = static_cast<int32_t>(i);
    for (int64_t i = 0; i < rows; ++i) out->logits_rows[i] = static_cast<int32_t>(i);
    out->table_rows = s.table_rows;
    if (!s.table_rows.empty()) out->table_rows.resize(rows, padding_row);
    out->table_pairs = s.table_pairs;
    out->num_table_fills = s.num_table_fills;
    out->table_num_rows = s.table_num_rows;
    out->table_width = s.table_width;
    for (int g = 0; g < ops::kNumKvGroups; ++g) {
        out->slot_mapping[g] = s.slot_mapping[g];
        if (!out->slot_mapping[g].empty()) out->slot_mapping[g].resize(rows, -1);
        if (!s.table_rows.empty()) {
            out->max_blocks[g] = s.max_blocks[g];
            out->block_tables[g].clear();
            continue;
        }
        const int64_t w = widths[g], from = s.max_blocks[g];
        out->max_blocks[g] = w;
        out->block_tables[g].assign(rows * w, -1);
        for (int64_t i = 0; i < S; ++i)
            std::copy(s.block_tables[g].begin() + i * from, s.block_tables[g].begin() + (i + 1) * from,
                      out->block_tables[g].begin() + i * w);
    }
}
}  // namespace

bool BackendExecutor::graphs_possible() const {
    if (enforce_eager_ || experts_offloaded_ || process_) return false;
    // Every rank's backend and communicators into one capture (TP x PP > 1: the same-device ones).
    const ops::Backend& first = *group_->rank(0).backend;
    for (int i = 0; i < group_->size(); ++i) {
        const Rank& r = group_->rank(i);
        if (!r.backend->has_graphs() || (i > 0 && !first.can_capture_with(*r.backend))) return false;
        for (const ops::Communicator* comm : {r.tp_comm.get(), r.pp_comm.get()})
            if (comm != nullptr && !comm->capturable()) return false;
    }
    return true;
}

bool BackendExecutor::graph_eligible(const StepBatch& b) const {
    if (graphs_failed_ || capture_sizes_.empty() || !graphs_possible()) return false;
    for (int i = 0; i < group_->size(); ++i)
        if (group_->rank(i).forward->tracing()) return false;
    if (micro_batches_for(b.num_seqs) != 1) return false;  // pipeline micro-batches run eagerly
    if (b.num_tokens != b.num_seqs || b.num_tokens > capture_sizes_.back() || b.num_tokens <= 0) return false;
    if (static_cast<int64_t>(b.logits_rows.size()) != b.num_seqs) return false;
    for (int64_t i = 0; i < b.num_seqs; ++i) {
        const LogitsRow& r = b.logits_rows[i];
        if (r.row != i || r.seq != i || r.target >= 0) return false;
    }
    return true;
}

BackendExecutor::GraphKey BackendExecutor::graph_pad(const StepBatch& b, const model::HostStep& step) {
    const int64_t S = b.num_seqs;
    const int64_t rows = *std::lower_bound(capture_sizes_.begin(), capture_sizes_.end(), S);
    int64_t longest = 0;
    for (int32_t n : b.context_lens) longest = std::max<int64_t>(longest, n);
    int64_t keys = 256;
    while (keys < longest) keys *= 2;
    if (max_model_len_ >= longest && keys > max_model_len_) keys = std::max<int64_t>(max_model_len_, 256);
    int64_t widths[kNumKvGroups];
    for (int g = 0; g < kNumKvGroups; ++g)
        widths[g] = std::max<int64_t>((keys + block_size_ - 1) / block_size_, step.max_blocks[g]);
    // Kept tables: the padding rows read the padding row (all -1; their context is 0: nothing is read).
    const int64_t padding_row = std::max<int64_t>(step.table_num_rows - 1, 0);
    pad_decode_step(step, rows, widths, static_cast<int32_t>(padding_row), &padded_);
    return {rows, keys, 0, 0};
}

Status BackendExecutor::graph_upload_rank(int i, GraphKey* key, ops::Buffer* pinned,
                                          const model::StepHead* head) {
    RankState& st = states_[i];
    VOLT_ASSIGN_OR_RETURN(
        st.graph_fb, st.graph_upload.upload(*group_->rank(i).backend, padded_, pinned, head, &st.tables));
    st.graph_fb.max_seq_len = (*key)[1];  // sizes the split-KV grid; each row's splits follow its own context
    if (i == 0) {
        last_input_bytes_ = st.graph_upload.last_input_bytes();
        // (Kept tables: one width, the tables'; the key changes with it as the address does.)
        (*key)[2] = st.graph_fb.groups[0].max_blocks;
        (*key)[3] = st.graph_fb.groups[1].max_blocks;
    }
    return Status::ok();
}

void BackendExecutor::rank0_waits_for_ranks() {
    ops::Backend& first = *group_->rank(0).backend;
    for (int i = 1; i < group_->size(); ++i) first.wait_for(*group_->rank(i).backend);
}

void BackendExecutor::ranks_wait_for_rank0() {
    ops::Backend& first = *group_->rank(0).backend;
    for (int i = 1; i < group_->size(); ++i) group_->rank(i).backend->wait_for(first);
}

Status BackendExecutor::graph_forward(const GraphKey& key) {
    const int n = group_->size();
    ops::Backend& be = *group_->rank(0).backend;
    be.bind_thread();
    const model::LogitsFn none = [](int64_t, int64_t, const float*) {};
    // Rank i's forward pass on its graph inputs, its collectives numbered as the step's.
    auto forward = [&](int i) -> Status {
        Rank& r = group_->rank(i);
        RankState& st = states_[i];
        if (r.tp_comm) r.tp_comm->begin_step(step_count_);
        if (r.pp_comm) r.pp_comm->begin_step(step_count_);
        VOLT_RETURN_IF_ERROR(r.forward->run(st.graph_fb, st.cache.layers(), st.ws, none));
        if (r.tp_comm) VOLT_RETURN_IF_ERROR(r.tp_comm->finish_step());
        if (r.pp_comm) VOLT_RETURN_IF_ERROR(r.pp_comm->finish_step());
        return Status::ok();
    };
    // Every rank, each on its own thread (TP x PP > 1; else on this one): their collectives meet on the host.
    auto every_rank = [&]() { return group_->run(forward); };
    CapturedStep& cs = graphs_[key];
    bool stale = !cs.graph || static_cast<int>(cs.inputs.size()) != n;
    for (int i = 0; i < n && !stale; ++i)
        stale = cs.epochs[i] != group_->rank(i).backend->scratch_epoch() ||
                !same_inputs(cs.inputs[i], states_[i].graph_fb);
    if (stale) {
        cs = CapturedStep();
        std::vector<ops::Backend*> peers;
        for (int i = 1; i < n; ++i) peers.push_back(group_->rank(i).backend.get());
        Status inner = Status::ok();
        auto captured = be.capture_group(peers, [&] { inner = every_rank(); });
        if (!inner.is_ok()) {
            // A rank failed inside the capture (a collective's watchdog, a failed group): the step's error.
            graphs_.erase(key);
            return inner;
        }
        if (captured.is_ok()) {
            ++graph_captures_;
            cs.graph = std::move(*captured);
            for (int i = 0; i < n; ++i) {
                cs.inputs.push_back(states_[i].graph_fb);
                cs.epochs.push_back(group_->rank(i).backend->scratch_epoch());
            }
        } else {
            // Scratch had to grow (the eager step below grows it; the next step captures) or capture
            // itself failed (then every later step runs eagerly, said once).
            const Status why = captured.status();
            if (why.code() != StatusCode::kUnavailable) {
                spdlog::warn("cuda graphs off, steps run eagerly: {}", why.to_string());
                graphs_failed_ = true;
            }
            graphs_.erase(key);
            // No rank waits on an event recorded inside the capture (ops::Communicator::capturable).
            rank0_waits_for_ranks();
            ranks_wait_for_rank0();
            return every_rank();
        }
    }
    auto it = graphs_.find(key);
    if (it != graphs_.end() && it->second.graph) {
        rank0_waits_for_ranks();
        it->second.graph->launch();
        ranks_wait_for_rank0();
        ++graph_replays_;
    }
    return Status::ok();
}

Status BackendExecutor::run_graph(const StepBatch& b, const model::HostStep& step) {
    GraphKey key = graph_pad(b, step);
    // Each rank's swaps and copies (outside the graph) and its padded inputs into its fixed buffers, on
    // its own stream; rank 0's key widths.
    GraphKey rank0_key = key;
    auto prepare = [&](int i) -> Status {
        swap_rank(i, b);
        copy_blocks(i, b);
        return graph_upload_rank(i, i == 0 ? &rank0_key : &key);
    };
    VOLT_RETURN_IF_ERROR(group_->run(prepare));
    VOLT_RETURN_IF_ERROR(graph_forward(rank0_key));
    // The output rank's logits (tp rank 0 of the last stage; its stream waited for the replay).
    const int out = group_->local_output();
    VOLT_RETURN_IF_ERROR(drain(group_->rank(out)));
    const model::GptOssConfig& c = weights_->config;
    const std::vector<ops::SampleRow>& sample =
        builder_.sample_rows(b, 0, b.num_seqs, states_[out].ws.logits, c.vocab_size);
    return sample_chunk(sample, 0, c.vocab_size, b.vocab_size_real > 0 ? b.vocab_size_real : c.vocab_size);
}

}  // namespace volt::executor

// ---- The asynchronous path (one local rank; see the file comment of backend_executor.h).
namespace volt::executor {

Result<StepHandle> BackendExecutor::submit(const StepBatch& b) {
    if (!async_) return SyncExecutor::submit(b);
    const auto ring = static_cast<int64_t>(async_ring_.size());
    VOLT_CHECK(async_next_ - async_collected_ < ring) << "submit past max_in_flight";
    AsyncStep& f = async_ring_[async_next_ % ring];
    VOLT_RETURN_IF_ERROR(enqueue_step(b, &f));
    f.id = async_next_++;
    return StepHandle{f.id};
}

Status BackendExecutor::collect(StepHandle handle, StepResult* result) {
    if (!async_) return SyncExecutor::collect(handle, result);
    VOLT_CHECK(async_collected_ < async_next_ && handle.id == async_collected_)
        << "collect out of order: " << handle.id;
    AsyncStep& f = async_ring_[handle.id % static_cast<int64_t>(async_ring_.size())];
    VOLT_CHECK_EQ(f.id, handle.id);
    f.done->wait();  // the step's ops, its download into out_pinned, and its staging buffers are done
    ++async_collected_;
    const auto* out = static_cast<const uint8_t*>(f.out_pinned.data());
    if (f.rows.empty()) {  // a step of prompt chunks that draw nothing: nothing was downloaded
        result->tokens.clear();
        result->logprobs.clear();
        return Status::ok();
    }
    fill_result(f.rows, reinterpret_cast<const int32_t*>(out), reinterpret_cast<const float*>(out + f.out_lp),
                reinterpret_cast<const int32_t*>(out + f.out_top_ids),
                reinterpret_cast<const float*>(out + f.out_top_lp), kMaxLogprobs, result);
    return Status::ok();
}

Status BackendExecutor::stage_sampling(const StepBatch& b, AsyncStep* f, StagedSampling* out) {
    ops::Backend& be = backend();
    const int64_t V = weights_->config.vocab_size;
    const auto R = static_cast<int64_t>(b.logits_rows.size());
    // (The logits pointers are fix_sampling's; the workspace's keeps the arithmetic defined.)
    const std::vector<ops::SampleRow>& rows = builder_.sample_rows(b, 0, R, states_[0].ws.logits, V, true);
    const std::vector<uint8_t>& deferred = builder_.deferred_output();
    // Layout: the outputs first (one download), the rows, each row's id lists (an output list with room
    // for the deferred id after it), then the id moves.
    std::vector<uint8_t>& s = sample_staging_;
    s.clear();
    StagedSampling& o = *out;
    o.rows = R;
    o.out_tokens = room<int32_t>(s, R);
    o.out_lp = room<float>(s, R);
    o.out_top_ids = room<int32_t>(s, R * kMaxLogprobs);
    o.out_top_lp = room<float>(s, R * kMaxLogprobs);
    o.out_bytes = static_cast<int64_t>(s.size());
    o.rows_off = stage(s, rows.data(), R);
    offs_.assign(static_cast<size_t>(R * 5), 0);
    int64_t num_pre = static_cast<int64_t>(b.deferred.size()), num_post = 0;
    for (int64_t i = 0; i < R; ++i) {
        const ops::SampleRow& r = rows[i];
        int64_t* off = offs_.data() + i * 5;
        off[0] = stage(s, r.bias_ids, r.num_bias);
        off[1] = stage(s, r.bias_values, r.num_bias);
        off[2] = stage(s, r.allowed_ids, r.num_allowed);
        off[3] = stage(s, r.prompt_ids, r.num_prompt);
        off[4] = room<int32_t>(s, r.num_output + deferred[i]);
        if (r.num_output > 0) std::memcpy(s.data() + off[4], r.output_ids, r.num_output * sizeof(int32_t));
        num_pre += deferred[i];
        num_post += b.logits_rows[i].feeds_slot ? 1 : 0;
    }
    o.pre_moves = room<ops::IdMove>(s, num_pre);
    o.post_moves = room<ops::IdMove>(s, num_post);
    o.num_pre = num_pre;
    o.num_post = num_post;
    if (f->out_pinned.bytes() < o.out_bytes) {
        f->out_pinned = ops::Buffer();
        VOLT_ASSIGN_OR_RETURN(f->out_pinned, be.alloc_host(std::max<int64_t>(o.out_bytes * 5 / 4, 4096)));
    }
    f->out_lp = o.out_lp;
    f->out_top_ids = o.out_top_ids;
    f->out_top_lp = o.out_top_lp;
    return Status::ok();
}

void BackendExecutor::fix_sampling(const StepBatch& b, StagedSampling* o, uint8_t* base, int32_t* tokens_in,
                                   const float* logits) {
    const int64_t V = weights_->config.vocab_size;
    const int64_t chunk = states_[0].ws.logits_chunk_rows;
    const std::vector<uint8_t>& deferred = builder_.deferred_output();
    std::vector<uint8_t>& s = sample_staging_;
    o->base = base;
    auto* last = last_draw_.as<int32_t>();
    // Pointers into the device copy; each row's logits at its place in the workspace's chunk of logits.
    auto* staged = reinterpret_cast<ops::SampleRow*>(s.data() + o->rows_off);
    auto* pre = reinterpret_cast<ops::IdMove*>(s.data() + o->pre_moves);
    auto* post = reinterpret_cast<ops::IdMove*>(s.data() + o->post_moves);
    for (const DeferredToken& d : b.deferred) *pre++ = {last + d.slot, tokens_in + builder_.host_row(d.row)};
    for (int64_t i = 0; i < o->rows; ++i) {
        ops::SampleRow& r = staged[i];
        const int64_t* off = offs_.data() + i * 5;
        const int32_t slot = b.seq_slots[b.logits_rows[i].seq];
        r.logits = logits + (i % chunk) * V;
        r.bias_ids = reinterpret_cast<const int32_t*>(base + off[0]);
        r.bias_values = reinterpret_cast<const float*>(base + off[1]);
        r.allowed_ids = reinterpret_cast<const int32_t*>(base + off[2]);
        r.prompt_ids = reinterpret_cast<const int32_t*>(base + off[3]);
        auto* output = reinterpret_cast<int32_t*>(base + off[4]);
        r.output_ids = output;
        if (deferred[i]) {
            *pre++ = {last + slot, output + r.num_output};  // the penalties count the deferred id
            ++r.num_output;
        }
        if (b.logits_rows[i].feeds_slot)
            *post++ = {reinterpret_cast<const int32_t*>(base + o->out_tokens) + i, last + slot};
    }
}

void BackendExecutor::sample_staged(const StagedSampling& o, int64_t first, int64_t count, int64_t V,
                                    int64_t V_real) {
    VOLT_CHECK(first >= 0 && first + count <= o.rows);
    ops::SampleArgs args;
    args.rows = reinterpret_cast<const ops::SampleRow*>(o.base + o.rows_off) + first;
    args.num_rows = count;
    args.vocab_size = V;
    args.vocab_size_real = V_real;
    args.tokens = reinterpret_cast<int32_t*>(o.base + o.out_tokens) + first;
    args.logprobs = reinterpret_cast<float*>(o.base + o.out_lp) + first;
    args.top_ids = reinterpret_cast<int32_t*>(o.base + o.out_top_ids) + first * kMaxLogprobs;
    args.top_logprobs = reinterpret_cast<float*>(o.base + o.out_top_lp) + first * kMaxLogprobs;
    args.max_top = kMaxLogprobs;
    backend().sample(args);
}

Status BackendExecutor::enqueue_step(const StepBatch& b, AsyncStep* f) {
    VOLT_CHECK(!states_[0].cache.layers().empty()) << "init_cache before the first step";
    for (const DeferredToken& d : b.deferred)
        VOLT_CHECK(d.slot >= 0 && d.slot < static_cast<int32_t>(fed_.size()) && fed_[d.slot])
            << "deferred token of slot " << d.slot << " was never drawn";
    Rank& r = group_->rank(0);
    RankState& st = states_[0];
    ops::Backend& be = *r.backend;
    be.bind_thread();  // the engine's thread enqueues (a GPU other than device 0 must be current)
    const int64_t V = weights_->config.vocab_size;
    const int64_t V_real = b.vocab_size_real > 0 ? b.vocab_size_real : V;
    builder_.apply_table_updates(b);
    const model::HostStep& step = builder_.build(b, /*prompt_lens=*/nullptr, /*deferred_on_device=*/true);
    f->rows = b.logits_rows;
    const bool graph = step.num_prompt_rows == 0 && graph_eligible(b);
    swap_rank(0, b);  // before the copies and KV writes that may reuse the swapped-out blocks
    copy_blocks(0, b);
    // One copy: the sample rows (the head) and the step's inputs, from the step's pinned staging.
    StagedSampling o;
    VOLT_RETURN_IF_ERROR(stage_sampling(b, f, &o));
    const model::StepHead head{&sample_staging_, [&](uint8_t* at, const model::ForwardBatch& in) {
                                   fix_sampling(b, &o, at, const_cast<int32_t*>(in.token_ids), st.ws.logits);
                               }};
    model::ForwardBatch fb;
    GraphKey key{};
    if (graph) {
        key = graph_pad(b, step);
        VOLT_RETURN_IF_ERROR(graph_upload_rank(0, &key, &f->step_pinned, &head));
    } else {
        VOLT_ASSIGN_OR_RETURN(fb, st.upload.upload(be, step, &f->step_pinned, &head, &st.tables));
        last_input_bytes_ = st.upload.last_input_bytes();
    }
    // The ids the previous step drew, where this step reads them (before this step's draws replace them).
    be.move_ids({reinterpret_cast<const ops::IdMove*>(o.base + o.pre_moves), o.num_pre, true});
    device_deferred_ += static_cast<int64_t>(b.deferred.size());
    if (graph) {
        VOLT_RETURN_IF_ERROR(graph_forward(key));
        sample_staged(o, 0, o.rows, V, V_real);
    } else {
        VOLT_RETURN_IF_ERROR(r.forward->run(fb, st.cache.layers(), st.ws,
                                            [&](int64_t first, int64_t count, const float* logits) {
                                                VOLT_CHECK(logits == st.ws.logits);
                                                sample_staged(o, first, count, V, V_real);
                                            }));
    }
    be.move_ids({reinterpret_cast<const ops::IdMove*>(o.base + o.post_moves), o.num_post, false});
    for (const LogitsRow& row : b.logits_rows)
        if (row.feeds_slot) fed_[b.seq_slots[row.seq]] = 1;
    if (o.out_bytes > 0) be.download_async(f->out_pinned.data(), o.base, o.out_bytes);
    f->done->record();
    ++step_count_;
    return Status::ok();
}

}  // namespace volt::executor
