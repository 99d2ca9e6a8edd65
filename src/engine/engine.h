// The engine: requests in, token deltas out, over continuous batching on a paged KV cache. One engine
// thread owns the scheduler, the block manager and the executor; submit() and RequestHandle::abort() go
// through a mutex-protected queue and each request has its own output channel (DESIGN.md "One request's
// path"). Executors: executor/cpu_executor.h (the model on the CPU), executor/scripted_executor.h (fixed ids
// for tests). With an executor that allows several steps in flight (a GPU), the engine schedules step
// N + 1 before step N's tokens are known (engine_core.h): deltas are the same, a stop or an abort takes
// effect one step later inside the engine, and the token the look-ahead computed past it is discarded,
// never streamed. Tests: tests/unit/engine/engine_test.cc.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "core/status.h"
#include "engine/executor.h"
#include "engine/sampling_params.h"

namespace volt::engine {

// kError: the request failed in the engine (RequestOutput::error says why, e.g. non-finite logits);
// the engine goes on serving the others.
enum class FinishReason { kNone, kStop, kLength, kAbort, kError };

// One delta for one choice of a request.
struct RequestOutput {
    int32_t choice = 0;
    std::vector<int32_t> tokens;                // new tokens since the last delta of this choice
    std::vector<TokenLogprob> logprobs;         // parallel to tokens when params.logprobs >= 0
    std::vector<TokenLogprob> prompt_logprobs;  // once, in the first delta of choice 0, when asked:
                                                // entry i is prompt token i + 1 (the first has none)
    FinishReason finish = FinishReason::kNone;  // kLength: max_tokens or max_model_len reached
    std::optional<int32_t> stop_token;          // the stop/EOS id that ended it (not in tokens)
    std::string error;                          // kError: what failed, for the client
};

class EngineShared;

// Thread-safe; owned jointly by the caller and the engine.
class RequestHandle {
  public:
    RequestHandle(int64_t id, int32_t num_prompt_tokens, int32_t n, std::shared_ptr<EngineShared> shared);

    // Waits up to `timeout` for the next delta; false on timeout. After the delta that finishes the last
    // choice has been returned, returns false at once (done() is true).
    bool next(RequestOutput* out, std::chrono::milliseconds timeout);
    // Client gone / stop string: the engine frees the request at the start of its next step and sends a
    // kAbort delta for every unfinished choice.
    void abort();
    bool done() const;
    int64_t id() const { return id_; }
    int32_t num_prompt_tokens() const { return num_prompt_tokens_; }

    // Called (from the engine's thread, outside the handle's lock) after every push: the HTTP layer posts
    // a pump to the connection that streams this request, instead of a thread blocking in next() per
    // stream. Empty: none. Set it before or after outputs arrive (a pump after setting it sees those).
    void set_notify(std::function<void()> notify);

    // Engine side.
    void push(RequestOutput out);
    bool aborted() const;

  private:
    const int64_t id_;
    const int32_t num_prompt_tokens_;
    const int32_t n_;
    std::shared_ptr<EngineShared> shared_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<RequestOutput> queue_;
    std::function<void()> notify_;  // guarded by mu_; called outside it
    int32_t finished_pushed_ = 0, finished_taken_ = 0;
    bool aborted_ = false;
};

// vLLM's --preemption-mode: what happens to a preempted sequence's KV blocks. kAuto: swap where the
// executor can and its KV pools are device memory (a GPU) and swap_space_bytes > 0, else recompute.
enum class PreemptionMode { kAuto, kSwap, kRecompute };

struct EngineConfig {
    int64_t block_size = 16;                // tokens per KV block (--block-size)
    int64_t max_num_seqs = 256;             // sequences in one step (--max-num-seqs)
    int64_t max_num_batched_tokens = 2048;  // tokens in one step; prefill is chunked to fit
    int64_t max_model_len = 0;              // 0: min(config, what one sequence can get from the pool)
    int64_t max_queued_requests = 1024;     // waiting requests beyond this: kResourceExhausted
    int64_t kv_cache_memory_bytes = int64_t{4} << 30;  // KV pool budget, both groups (CPU default 4 GiB)
    int64_t num_kv_blocks_override = 0;  // > 0: each KV group gets exactly this many blocks (tests)
    int32_t vocab_size_real = 0;         // ids >= this are never sampled (0: the executor's vocab size)
    std::vector<int32_t> eos_token_ids;  // stop unless ignore_eos (empty: the executor's)
    // vLLM's --long-prefill-token-threshold: a prompt longer than this is "long" and, while other
    // sequences run or wait, computes at most this many of its tokens per step, so that decodes and short
    // prompts keep moving (alone it takes the whole step). 0: max_num_batched_tokens / 4 (at least 1);
    // < 0: never capped.
    int64_t long_prefill_token_threshold = 0;
    // vLLM's --max-num-partial-prefills: prompts whose prefill may be partly done at once.
    int64_t max_num_partial_prefills = 1;
    // vLLM's --swap-space (GiB per GPU there, bytes here): host memory for swapped-out KV blocks, split
    // between the KV groups in proportion to their device pools. Allocated only when preemption swaps.
    int64_t swap_space_bytes = int64_t{4} << 30;
    PreemptionMode preemption_mode = PreemptionMode::kAuto;  // --preemption-mode
};

struct EngineStats {
    int64_t num_running_seqs = 0, num_waiting_seqs = 0;
    int64_t kv_blocks_used[2] = {0, 0}, kv_blocks_total[2] = {0, 0};  // per KV group (full, sliding)
    int64_t prompt_tokens = 0;                   // tokens computed for prompts (recomputation included)
    int64_t generated_tokens = 0;                // tokens sampled
    int64_t num_steps = 0, num_preemptions = 0;  // preemptions: swapped + recomputed
    int64_t num_swapped_preemptions = 0;         // preemptions whose KV blocks went to host memory
    int64_t kv_blocks_swapped_out = 0, kv_blocks_swapped_in = 0;  // both groups
    int64_t requests_finished = 0;
    int64_t requests_failed = 0;  // ended with FinishReason::kError (non-finite logits)
};

// What the engine thread reports after every step and every wake-up (Engine::heartbeat): the truth
// behind /health and /load (docs/operations.md). Times are steady_clock.
struct EngineHeartbeat {
    int64_t steps = 0;             // steps completed
    int64_t tokens = 0;            // prompt + generated tokens computed so far
    int64_t pending_requests = 0;  // submitted and not finished (incoming, waiting, running)
    // The engine thread's last sign of life: the end of its last step, or the moment new work reached
    // an idle engine (submitted, or taken by the thread). With work pending, now - last_beat is how long the
    // current step has run.
    std::chrono::steady_clock::time_point last_beat{};
    bool stopped = false;  // the engine thread has ended (shutdown)
};

// Healthy: the thread runs and, with work pending, its last beat is at most `step_bound` old (a long
// but finite step, e.g. a big prefill on a slow GPU, must fit in it). Idle is healthy.
bool engine_healthy(const EngineHeartbeat& hb, std::chrono::steady_clock::time_point now,
                    std::chrono::milliseconds step_bound);

class Engine {
  public:
    // Plans the KV pool from config and the executor's bytes per block, starts the engine thread.
    // Errors: kOutOfRange when max_model_len is set and one sequence of that length cannot fit in the
    // pool (message gives both numbers); kInvalidArgument for a bad config.
    static Result<std::unique_ptr<Engine>> create(EngineConfig config, std::unique_ptr<Executor> executor);
    ~Engine();

    // Errors: kOutOfRange (prompt + max_tokens over max_model_len: message with both numbers),
    // kResourceExhausted (waiting queue full), kInvalidArgument (empty prompt, bad params, id >= vocab),
    // kUnavailable (shut down).
    // `group`: the client request this engine request belongs to (a completions request with several
    // prompts submits one engine request per prompt, all in one group); waiting sequences are admitted
    // round-robin across groups, so that one wide request cannot hold every running slot while others
    // wait. -1: a group of its own.
    Result<std::shared_ptr<RequestHandle>> submit(std::vector<int32_t> prompt, SamplingParams params,
                                                  int64_t group = -1);
    void shutdown();  // aborts everything, joins the engine thread; idempotent
    EngineStats stats() const;
    // Thread-safe; cheap (a lock and a copy).
    EngineHeartbeat heartbeat() const;
    // Tokens (prompt + generated) of each step run since the last call, oldest first: what
    // vllm:iteration_tokens_total observes. Holds at most the last 65,536 steps between two calls.
    std::vector<int64_t> take_step_tokens();
    int64_t max_model_len() const;
    const EngineConfig& config() const;

  private:
    class Impl;
    explicit Engine(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace volt::engine
