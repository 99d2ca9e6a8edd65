// Summary statistics of `voltllm bench serve`: percentiles with numpy's default definition ("linear"
// interpolation between closest ranks), mean and population standard deviation, and the per-run summary of
// TTFT / TPOT / ITL / E2E latency, request and token throughputs (vLLM's benchmark_serving metrics).
// Test: tests/unit/bench_serve/bench_serve_test.cc (hand-computed values).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace volt::bench {

// numpy.percentile(values, q) with method="linear": sort; rank = q/100 * (n - 1); interpolate between
// values[floor(rank)] and values[ceil(rank)]. q in [0, 100]. 0 for an empty list (vLLM: np.percentile(x or
// 0)).
double percentile(std::vector<double> values, double q);
double mean(const std::vector<double>& values);    // 0 when empty
double stddev(const std::vector<double>& values);  // population (numpy's ddof=0); 0 when empty

// What one request measured. Times in seconds.
struct RequestResult {
    bool success = false;
    std::string error;          // why it failed (HTTP status and body, transport error)
    int64_t prompt_len = 0;     // tokens: the server's usage.prompt_tokens, else what was sent
    int64_t output_tokens = 0;  // tokens: the server's usage.completion_tokens, else the chunks with text
    double ttft = 0;            // request sent -> first chunk with text
    double latency = 0;         // request sent -> end of stream
    std::vector<double> itl;    // gaps between consecutive chunks with text
    double start = 0;           // when it was sent, from the run's start
};

// One latency metric over the successful requests, in milliseconds.
struct LatencyStats {
    double mean_ms = 0, median_ms = 0, std_ms = 0, p90_ms = 0, p99_ms = 0;
};
LatencyStats latency_stats(const std::vector<double>& seconds);

struct BenchSummary {
    int64_t completed = 0, failed = 0;
    double duration_s = 0;
    int64_t total_input_tokens = 0, total_output_tokens = 0;
    double request_throughput = 0;      // completed / duration, req/s
    double output_throughput = 0;       // output tokens / duration, tok/s
    double total_token_throughput = 0;  // (input + output tokens) / duration, tok/s
    // TPOT of a request: (latency - ttft) / (output_tokens - 1), only requests with 2+ output tokens.
    LatencyStats ttft, tpot, itl, e2el;
};

// Summarises `results` of a run that lasted `duration_s` (first send to last end).
BenchSummary summarize(const std::vector<RequestResult>& results, double duration_s);

}  // namespace volt::bench
