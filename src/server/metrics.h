// Prometheus metrics: a small thread-safe registry (counters, gauges, histograms with labels) rendered in
// the text exposition format 0.0.4, and VllmMetrics, which registers vLLM's metric names, labels
// (model_name, engine) and histogram buckets (vllm/v1/metrics/loggers.py), the renamed old names too.
// docs/metrics.md lists every name. Test: tests/unit/server/metrics_test.cc (exact exposition text).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace volt::server {

// Label values of one series, in the order of the family's label names.
using LabelValues = std::vector<std::string>;

// A monotonically increasing value (requests, tokens). Lock-free.
class Counter {
  public:
    void inc(double v = 1.0) {
        double cur = value_.load(std::memory_order_relaxed);
        while (!value_.compare_exchange_weak(cur, cur + v, std::memory_order_relaxed)) {
        }
    }
    // Raises the value to `total` when that is larger (for totals kept elsewhere); never lowers it.
    void advance_to(double total) {
        double cur = value_.load(std::memory_order_relaxed);
        while (total > cur && !value_.compare_exchange_weak(cur, total, std::memory_order_relaxed)) {
        }
    }
    double value() const { return value_.load(std::memory_order_relaxed); }

  private:
    std::atomic<double> value_{0.0};
};

// A value that goes up and down (running requests, KV usage). Lock-free.
class Gauge {
  public:
    void set(double v) { value_.store(v, std::memory_order_relaxed); }
    double value() const { return value_.load(std::memory_order_relaxed); }

  private:
    std::atomic<double> value_{0.0};
};

// Cumulative buckets with upper bounds `bounds` (ascending, +Inf implied), plus sum and count. An
// observation v lands in every bucket with bound >= v (Prometheus `le`).
class Histogram {
  public:
    explicit Histogram(std::vector<double> bounds);
    void observe(double v);
    struct Snapshot {
        std::vector<uint64_t> cumulative;  // [bounds.size() + 1], the last is +Inf == count
        double sum = 0.0;
        uint64_t count = 0;
    };
    Snapshot snapshot() const;
    const std::vector<double>& bounds() const { return bounds_; }

  private:
    std::vector<double> bounds_;
    mutable std::mutex mu_;
    std::vector<uint64_t> counts_;  // [bounds.size() + 1] per bucket, not cumulative
    double sum_ = 0.0;
    uint64_t count_ = 0;
};

enum class MetricType { kCounter, kGauge, kHistogram };

// The Content-Type of GET /metrics.
inline constexpr std::string_view kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

// A named set of metrics. Families render in registration order, series in creation order. Series are
// created up front (so a dashboard sees zeros before the first request) and their references stay valid
// for the registry's lifetime; recording on them is thread-safe.
class MetricsRegistry {
  public:
    // `name` of a counter excludes `_total` (added when rendering, as prometheus_client does).
    // Registering a name twice is a bug (VOLT_CHECK).
    void add_family(std::string name, std::string help, MetricType type, std::vector<std::string> label_names,
                    std::vector<double> buckets = {});
    // The series of family `name` with these label values, created on first use. A wrong family name,
    // type or label count is a bug (VOLT_CHECK).
    Counter& counter(std::string_view name, const LabelValues& labels);
    Gauge& gauge(std::string_view name, const LabelValues& labels);
    Histogram& histogram(std::string_view name, const LabelValues& labels);

    // The text exposition format 0.0.4 (Content-Type: text/plain; version=0.0.4; charset=utf-8):
    // `# HELP`, `# TYPE`, then samples; histograms as _bucket{...,le="..."} (cumulative, ending +Inf),
    // _sum and _count. Numbers as prometheus_client prints them ("1.0", "0.25", "1e+06", "+Inf").
    std::string render() const;

  private:
    struct Series {
        LabelValues labels;
        std::unique_ptr<Counter> counter;
        std::unique_ptr<Gauge> gauge;
        std::unique_ptr<Histogram> histogram;
    };
    struct Family {
        std::string name, help;
        MetricType type;
        std::vector<std::string> label_names;
        std::vector<double> buckets;
        std::deque<Series> series;
    };
    Series& series(std::string_view name, MetricType type, const LabelValues& labels);

    mutable std::mutex mu_;
    std::deque<Family> families_;
};

// A number as prometheus_client's floatToGoString writes it: Python's repr of the float ("1.0", "0.001",
// "1e-05"), "+Inf"/"-Inf"/"NaN", and Go's exponent form from 1e7 up ("1e+07").
std::string format_prometheus_number(double v);

// vLLM's build_1_2_5_buckets(max): 1, 2, 5, 10, 20, 50 ... up to and including max.
std::vector<double> buckets_1_2_5(int64_t max_value);

// vLLM's finish reasons, the values of the finished_reason label (vllm/v1/engine/__init__.py).
inline constexpr std::string_view kFinishReasons[] = {"stop", "length", "abort", "error", "repetition"};

// One finished request, as the server knows it. Times in seconds; phases as vLLM defines them:
// queue = arrival..scheduled, prefill = scheduled..first token, decode = first..last token,
// inference = prefill + decode, e2e = arrival..finish.
struct FinishedRequestStats {
    std::string_view finish_reason = "stop";  // one of kFinishReasons; others count as "error"
    int64_t prompt_tokens = 0;
    int64_t generation_tokens = 0;
    int64_t max_tokens = 0;  // the request's max_tokens; 0 when it gave none
    int64_t n = 1;
    double e2e_s = 0, queue_s = 0, prefill_s = 0, decode_s = 0;
};

// vLLM's metric set over one MetricsRegistry, every series labelled {model_name, engine="0"}. The old
// names are duplicates fed by the same calls: vllm:gpu_cache_usage_perc (= kv_cache_usage_perc) and
// vllm:time_per_output_token_seconds (= inter_token_latency_seconds: vLLM <= 0.10 recorded per-token
// intervals under that name). All methods are thread-safe.
class VllmMetrics {
  public:
    // `model_name`: the first served model name. `max_model_len` bounds the token-count histograms.
    VllmMetrics(std::string model_name, int64_t max_model_len);

    // Scheduler state, from the engine's stats (each step or each scrape).
    void set_running(int64_t n);
    void set_waiting(int64_t n);
    void set_kv_cache_usage(double fraction);  // 0..1 of KV blocks in use
    void add_preemptions(int64_t n);
    // Tokens processed: call per engine step (or per delivered token). Feeds the *_tokens_total counters,
    // vllm:iteration_tokens_total and the stats line's throughputs.
    void count_tokens(int64_t prompt_tokens, int64_t generation_tokens);
    // The same three counters from an engine that keeps cumulative totals (EngineStats), e.g. at each
    // scrape: counters are raised to the totals, never lowered. Use this or count_tokens, not both.
    void set_engine_totals(int64_t prompt_tokens, int64_t generation_tokens, int64_t preemptions);
    // One engine step's tokens (prompt + generated) into vllm:iteration_tokens_total, for an engine that
    // reports totals (set_engine_totals) and its steps separately (Engine::take_step_tokens).
    void observe_iteration_tokens(int64_t tokens);
    // Per-request timings as they happen.
    void observe_ttft(double seconds);
    void observe_itl(double seconds);  // one gap between two consecutive output tokens of a request
    void on_request_finished(const FinishedRequestStats& r);

    // What the periodic stats line needs.
    struct Totals {
        double prompt_tokens = 0, generation_tokens = 0;
        int64_t running = 0, waiting = 0;
        double kv_cache_usage = 0;
    };
    Totals totals() const;

    const MetricsRegistry& registry() const { return registry_; }
    std::string render() const { return registry_.render(); }

  private:
    MetricsRegistry registry_;
    LabelValues labels_;
    Gauge *running_, *waiting_, *kv_usage_, *gpu_cache_usage_old_;
    Counter *preemptions_, *prompt_tokens_, *generation_tokens_;
    Histogram *iteration_tokens_, *ttft_, *itl_, *tpot_old_, *request_tpot_, *e2e_, *queue_, *inference_,
        *prefill_, *decode_, *prompt_tokens_hist_, *generation_tokens_hist_, *max_tokens_hist_, *n_hist_;
};

// The per-request timing of one generation request, feeding a VllmMetrics: create it when the request
// arrives, call on_output() each time the engine hands over new tokens, on_scheduled() if the engine reports
// when it first scheduled the request, and finish() once. Times are steady-clock instants passed in (so
// tests give exact ones). Not thread-safe: one request is driven by one thread.
class RequestMetricsRecorder {
  public:
    using Clock = std::chrono::steady_clock;
    RequestMetricsRecorder(VllmMetrics& metrics, Clock::time_point arrival)
        : metrics_(metrics), arrival_(arrival) {}

    void on_scheduled(Clock::time_point t) { scheduled_ = t; }
    // `new_tokens` > 0 arrived at `t`: the first output observes TTFT (arrival -> t), later ones one ITL each
    // (the gap since the previous output, as vLLM observes per engine step).
    void on_output(int64_t new_tokens, Clock::time_point t);
    // Observes the finished request once; later calls do nothing. Queue time is 0 unless on_scheduled was
    // called; prefill = (scheduled or arrival) -> first token; decode = first -> last token.
    void finish(std::string_view finish_reason, int64_t prompt_tokens, int64_t max_tokens, int64_t n,
                Clock::time_point t);
    int64_t generation_tokens() const { return generated_; }

  private:
    VllmMetrics& metrics_;
    Clock::time_point arrival_;
    std::optional<Clock::time_point> scheduled_, first_, last_;
    int64_t generated_ = 0;
    bool finished_ = false;
};

// vLLM's periodic stats line (LoggingStatLogger.log): "Avg prompt throughput: 12.5 tokens/s, Avg generation
// throughput: 30.0 tokens/s, Running: 2 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.5%, Prefix cache hit
// rate: 0.0%", throughputs over `interval_s` from two Totals.
std::string format_stats_line(const VllmMetrics::Totals& prev, const VllmMetrics::Totals& now,
                              double interval_s);

}  // namespace volt::server
