// The load generator of `voltllm bench serve`, after vLLM's benchmark_serving: builds prompts (random token
// ids of a given length, or a JSONL dataset), sends them to an OpenAI-compatible server as streaming
// /v1/completions or /v1/chat/completions requests on a Poisson schedule (or all at once) with at most
// `max_concurrency` in flight, times each stream (TTFT, ITL, E2E) and summarises (stats.h); results go to
// JSON in vLLM's --save-result field names. HTTP: the HTTP layer's client (server/http_client.h). Test:
// tests/unit/bench_serve/bench_serve_test.cc (against a fake SSE server in the test).
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_serve/stats.h"
#include "core/status.h"

namespace volt::bench {

struct BenchConfig {
    std::string base_url = "http://127.0.0.1:8000";  // scheme://host:port
    std::string endpoint = "/v1/completions";        // or /v1/chat/completions
    std::string model;                               // empty: the first id of GET /v1/models
    std::string api_key;                             // sent as `Authorization: Bearer KEY` when set
    int64_t num_prompts = 100;
    double request_rate =
        std::numeric_limits<double>::infinity();  // requests/s, Poisson arrivals; inf: all at t=0
    int64_t max_concurrency = 0;                  // requests in flight at most; 0: no limit
    int64_t random_input_len = 1024;              // tokens per random prompt
    int64_t random_output_len = 128;              // max_tokens per request
    int64_t random_vocab_size =
        199998;                // random prompt ids are drawn from [0, this): gpt-oss's non-special ids
    std::string dataset_path;  // JSONL; when set, prompts come from it instead (see load_dataset)
    bool ignore_eos = true;    // so output lengths are exactly max_tokens
    uint64_t seed = 0;
    double timeout_s = 600;  // per request read/write timeout
};

// One request to send. Either `prompt_ids` (completions only: sent as a token-id array, so its length is
// exact) or `prompt_text`.
struct BenchRequest {
    std::vector<int32_t> prompt_ids;
    std::string prompt_text;
    int64_t prompt_len = 0;  // tokens, when known before sending (ids); else filled from usage
    int64_t output_len = 0;  // max_tokens
};

// Random prompts: `num_prompts` requests of `random_input_len` ids uniform in [0, random_vocab_size) from a
// mt19937_64 seeded with `seed` (deterministic), `random_output_len` tokens out. For the chat endpoint, which
// takes text, the ids are written as space-separated words "t<id>" and lengths come from the server's usage.
std::vector<BenchRequest> make_random_requests(const BenchConfig& config);

// JSONL, one object per line: {"prompt": "text", "output_len": 64} ("output_len" optional: else
// random_output_len; "prompt" may also be an array of token ids). The first num_prompts lines are used,
// cycling when the file has fewer. kNotFound / kInvalidArgument naming the file and line.
Result<std::vector<BenchRequest>> load_dataset(const std::string& path, const BenchConfig& config);

// Arrival offsets in seconds from the run's start for `n` requests: all 0 for an infinite rate, else
// cumulative exponential gaps of mean 1/rate from a mt19937_64 seeded with `seed`.
std::vector<double> arrival_times(int64_t n, double request_rate, uint64_t seed);

// The JSON body of one streaming request (stream_options.include_usage so token counts come from the server).
nlohmann::json request_body(const BenchConfig& config, const std::string& model, const BenchRequest& request);

// Feeds one SSE stream's bytes as they arrive; records the time of each chunk with generated text (content,
// text, reasoning_content or reasoning), the usage when present and [DONE].
class SseStreamParser {
  public:
    // `now_s`: the arrival time of these bytes. Returns false on a malformed event (the error says which).
    bool feed(std::string_view bytes, double now_s);
    const std::vector<double>& token_times() const { return token_times_; }
    int64_t usage_prompt_tokens() const { return usage_prompt_; }
    int64_t usage_completion_tokens() const { return usage_completion_; }
    bool done() const { return done_; }
    const std::string& error() const { return error_; }

  private:
    bool handle_event(std::string_view data, double now_s);
    std::string buffer_;
    std::vector<double> token_times_;
    int64_t usage_prompt_ = -1, usage_completion_ = -1;
    bool done_ = false;
    std::string error_;
};

struct BenchRun {
    std::string model;
    BenchSummary summary;
    std::vector<RequestResult> results;  // in request order
};

// Runs the benchmark. kUnavailable when the server cannot be reached for the model list; per-request failures
// are counted in the summary, not returned.
Result<BenchRun> run_benchmark(const BenchConfig& config, const std::vector<BenchRequest>& requests);

// vLLM's --save-result JSON: date, backend, model_id, num_prompts, request_rate, max_concurrency, duration,
// completed, failed, total_input_tokens, total_output_tokens, request_throughput, output_throughput,
// total_token_throughput, {mean,median,std,p90,p99}_{ttft,tpot,itl,e2el}_ms, input_lens, output_lens, ttfts,
// itls, errors.
nlohmann::json result_json(const BenchConfig& config, const BenchRun& run);

// Why requests failed, for the report's stderr: one line per distinct error, "N x ERROR" (by first
// occurrence; an error longer than 300 characters is cut), at most `max_lines` (then "... and K more
// causes"); "" when none failed.
std::string failure_causes(const BenchRun& run, size_t max_lines = 5);

// The human-readable report (vLLM's "Serving Benchmark Result" block).
std::string format_report(const BenchConfig& config, const BenchRun& run);

}  // namespace volt::bench
