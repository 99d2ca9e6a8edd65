// Metrics registry, exposition text and vLLM's metric set; see metrics.h. Names, help texts and buckets
// follow vllm/v1/metrics/loggers.py (PrometheusStatLogger); number formatting follows prometheus_client's
// floatToGoString (exposition.py / utils.py).
#include "server/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/check.h"

namespace volt::server {

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
    VOLT_CHECK(std::is_sorted(bounds_.begin(), bounds_.end())) << "histogram bounds must ascend";
}

void Histogram::observe(double v) {
    size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();  // first bound >= v
    std::lock_guard<std::mutex> lock(mu_);
    counts_[i] += 1;
    sum_ += v;
    count_ += 1;
}

Histogram::Snapshot Histogram::snapshot() const {
    std::lock_guard<std::mutex> lock(mu_);
    Snapshot s;
    s.cumulative.resize(counts_.size());
    uint64_t acc = 0;
    for (size_t i = 0; i < counts_.size(); ++i) {
        acc += counts_[i];
        s.cumulative[i] = acc;
    }
    s.sum = sum_;
    s.count = count_;
    return s;
}

void MetricsRegistry::add_family(std::string name, std::string help, MetricType type,
                                 std::vector<std::string> label_names, std::vector<double> buckets) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Family& f : families_) VOLT_CHECK(f.name != name) << "metric " << name << " registered twice";
    families_.push_back(
        Family{std::move(name), std::move(help), type, std::move(label_names), std::move(buckets), {}});
}

MetricsRegistry::Series& MetricsRegistry::series(std::string_view name, MetricType type,
                                                 const LabelValues& labels) {
    std::lock_guard<std::mutex> lock(mu_);
    for (Family& f : families_) {
        if (f.name != name) continue;
        VOLT_CHECK(f.type == type) << "metric " << name << " used with the wrong type";
        VOLT_CHECK_EQ(f.label_names.size(), labels.size()) << "label values of " << name;
        for (Series& s : f.series) {
            if (s.labels == labels) return s;
        }
        Series s;
        s.labels = labels;
        switch (type) {
            case MetricType::kCounter:
                s.counter = std::make_unique<Counter>();
                break;
            case MetricType::kGauge:
                s.gauge = std::make_unique<Gauge>();
                break;
            case MetricType::kHistogram:
                s.histogram = std::make_unique<Histogram>(f.buckets);
                break;
        }
        f.series.push_back(std::move(s));
        return f.series.back();
    }
    VOLT_CHECK(false) << "metric " << name << " was never registered";
    __builtin_unreachable();
}

Counter& MetricsRegistry::counter(std::string_view name, const LabelValues& labels) {
    return *series(name, MetricType::kCounter, labels).counter;
}
Gauge& MetricsRegistry::gauge(std::string_view name, const LabelValues& labels) {
    return *series(name, MetricType::kGauge, labels).gauge;
}
Histogram& MetricsRegistry::histogram(std::string_view name, const LabelValues& labels) {
    return *series(name, MetricType::kHistogram, labels).histogram;
}

std::string format_prometheus_number(double v) {
    if (std::isnan(v)) return "NaN";
    if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
    if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
    // Shortest round-trip digits and the decimal exponent, then Python's repr layout: fixed notation for
    // exponents in [-4, 16), else scientific ("1e-05").
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
    std::string sci(buf, res.ptr);
    size_t e_pos = sci.find('e');
    int exp = std::stoi(sci.substr(e_pos + 1));
    if (exp < -4 || exp >= 16) return sci;
    bool neg = sci[0] == '-';
    std::string digits;
    for (size_t i = neg ? 1 : 0; i < e_pos; ++i) {
        if (sci[i] != '.') digits += sci[i];
    }
    std::string s;
    if (exp >= 0) {
        while (static_cast<int>(digits.size()) < exp + 1) digits += '0';
        std::string frac = digits.substr(exp + 1);
        s = digits.substr(0, exp + 1) + "." + (frac.empty() ? "0" : frac);
    } else {
        s = "0." + std::string(-exp - 1, '0') + digits;
    }
    if (neg) s = "-" + s;
    // Go switches to exponents sooner than Python (floatToGoString): positive values with 7+ integer digits.
    size_t dot = s.find('.');
    if (v > 0 && dot > 6) {
        std::string mantissa = s.substr(0, 1) + "." + s.substr(1, dot - 1);
        while (!mantissa.empty() && (mantissa.back() == '0' || mantissa.back() == '.')) mantissa.pop_back();
        return mantissa + "e+0" + std::to_string(dot - 1);
    }
    return s;
}

namespace {

std::string escape_help(std::string_view s) {
    std::string out;
    for (char c : s) {
        if (c == '\\')
            out += "\\\\";
        else if (c == '\n')
            out += "\\n";
        else
            out += c;
    }
    return out;
}

std::string escape_label_value(std::string_view s) {
    std::string out;
    for (char c : s) {
        if (c == '\\')
            out += "\\\\";
        else if (c == '\n')
            out += "\\n";
        else if (c == '"')
            out += "\\\"";
        else
            out += c;
    }
    return out;
}

// {a="x",b="y"} plus an optional trailing le label; empty string for no labels.
std::string label_text(const std::vector<std::string>& names, const LabelValues& values,
                       const char* le = nullptr, const std::string& le_value = "") {
    if (names.empty() && le == nullptr) return "";
    std::string out = "{";
    for (size_t i = 0; i < names.size(); ++i) {
        if (i) out += ",";
        out += names[i] + "=\"" + escape_label_value(values[i]) + "\"";
    }
    if (le != nullptr) {
        if (!names.empty()) out += ",";
        out += std::string(le) + "=\"" + le_value + "\"";
    }
    return out + "}";
}

}  // namespace

std::string MetricsRegistry::render() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::string out;
    for (const Family& f : families_) {
        const char* type = f.type == MetricType::kCounter ? "counter"
                           : f.type == MetricType::kGauge ? "gauge"
                                                          : "histogram";
        std::string name = f.type == MetricType::kCounter ? f.name + "_total" : f.name;
        out += "# HELP " + name + " " + escape_help(f.help) + "\n";
        out += "# TYPE " + name + " " + type + "\n";
        for (const Series& s : f.series) {
            if (f.type == MetricType::kCounter) {
                out += name + label_text(f.label_names, s.labels) + " " +
                       format_prometheus_number(s.counter->value()) + "\n";
            } else if (f.type == MetricType::kGauge) {
                out += name + label_text(f.label_names, s.labels) + " " +
                       format_prometheus_number(s.gauge->value()) + "\n";
            } else {
                Histogram::Snapshot snap = s.histogram->snapshot();
                for (size_t i = 0; i <= f.buckets.size(); ++i) {
                    std::string le = i < f.buckets.size() ? format_prometheus_number(f.buckets[i]) : "+Inf";
                    out += name + "_bucket" + label_text(f.label_names, s.labels, "le", le) + " " +
                           format_prometheus_number(static_cast<double>(snap.cumulative[i])) + "\n";
                }
                out += name + "_count" + label_text(f.label_names, s.labels) + " " +
                       format_prometheus_number(static_cast<double>(snap.count)) + "\n";
                out += name + "_sum" + label_text(f.label_names, s.labels) + " " +
                       format_prometheus_number(snap.sum) + "\n";
            }
        }
    }
    return out;
}

std::vector<double> buckets_1_2_5(int64_t max_value) {
    std::vector<double> out;
    for (int64_t scale = 1;; scale *= 10) {
        for (int64_t m : {1, 2, 5}) {
            if (m * scale > max_value) return out;
            out.push_back(static_cast<double>(m * scale));
        }
    }
}

namespace {

// vllm/v1/metrics/loggers.py bucket lists.
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                          0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                          20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kTokenIntervalBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                                   0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
const std::vector<double> kRequestLatencyBuckets = {0.3,  0.5,   0.8,   1.0,   1.5,   2.0,    2.5,
                                                    5.0,  10.0,  15.0,  20.0,  30.0,  40.0,   50.0,
                                                    60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
const std::vector<double> kIterationTokenBuckets = {1,   8,    16,   32,   64,   128,  256,
                                                    512, 1024, 2048, 4096, 8192, 16384};
const std::vector<double> kParamsNBuckets = {1, 2, 5, 10, 20};

}  // namespace

VllmMetrics::VllmMetrics(std::string model_name, int64_t max_model_len)
    : labels_{std::move(model_name), "0"} {
    const std::vector<std::string> ln = {"model_name", "engine"};
    MetricsRegistry& r = registry_;
    auto gauge = [&](const char* name, const char* help) {
        r.add_family(name, help, MetricType::kGauge, ln);
        return &r.gauge(name, labels_);
    };
    auto counter = [&](const char* name, const char* help) {
        r.add_family(name, help, MetricType::kCounter, ln);
        return &r.counter(name, labels_);
    };
    auto hist = [&](const char* name, const char* help, const std::vector<double>& buckets) {
        r.add_family(name, help, MetricType::kHistogram, ln, buckets);
        return &r.histogram(name, labels_);
    };
    const std::vector<double> lengths = buckets_1_2_5(max_model_len);

    running_ = gauge("vllm:num_requests_running", "Number of requests in model execution batches.");
    waiting_ = gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.");
    kv_usage_ = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.");
    gpu_cache_usage_old_ = gauge("vllm:gpu_cache_usage_perc",
                                 "GPU KV-cache usage. 1 means 100 percent usage."
                                 "DEPRECATED: Use vllm:kv_cache_usage_perc instead.");
    preemptions_ = counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.");
    prompt_tokens_ = counter("vllm:prompt_tokens", "Number of prefill tokens processed.");
    generation_tokens_ = counter("vllm:generation_tokens", "Number of generation tokens processed.");
    r.add_family("vllm:request_success", "Count of successfully processed requests.", MetricType::kCounter,
                 {"model_name", "engine", "finished_reason"});
    for (std::string_view reason : kFinishReasons) {
        r.counter("vllm:request_success", {labels_[0], labels_[1], std::string(reason)});
    }
    prompt_tokens_hist_ = hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.", lengths);
    generation_tokens_hist_ =
        hist("vllm:request_generation_tokens", "Number of generation tokens processed.", lengths);
    iteration_tokens_ = hist("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
                             kIterationTokenBuckets);
    n_hist_ = hist("vllm:request_params_n", "Histogram of the n request parameter.", kParamsNBuckets);
    max_tokens_hist_ =
        hist("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", lengths);
    ttft_ = hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                 kTtftBuckets);
    itl_ = hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                kTokenIntervalBuckets);
    tpot_old_ = hist("vllm:time_per_output_token_seconds",
                     "Histogram of time per output token in seconds."
                     "DEPRECATED: Use vllm:inter_token_latency_seconds instead.",
                     kTokenIntervalBuckets);
    request_tpot_ = hist("vllm:request_time_per_output_token_seconds",
                         "Histogram of time_per_output_token_seconds per request.", kTokenIntervalBuckets);
    e2e_ = hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                kRequestLatencyBuckets);
    queue_ = hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
                  kRequestLatencyBuckets);
    inference_ = hist("vllm:request_inference_time_seconds",
                      "Histogram of time spent in RUNNING phase for request.", kRequestLatencyBuckets);
    prefill_ = hist("vllm:request_prefill_time_seconds",
                    "Histogram of time spent in PREFILL phase for request.", kRequestLatencyBuckets);
    decode_ = hist("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.",
                   kRequestLatencyBuckets);
}

void VllmMetrics::set_running(int64_t n) { running_->set(static_cast<double>(n)); }
void VllmMetrics::set_waiting(int64_t n) { waiting_->set(static_cast<double>(n)); }
void VllmMetrics::set_kv_cache_usage(double fraction) {
    kv_usage_->set(fraction);
    gpu_cache_usage_old_->set(fraction);
}
void VllmMetrics::add_preemptions(int64_t n) { preemptions_->inc(static_cast<double>(n)); }

void VllmMetrics::count_tokens(int64_t prompt_tokens, int64_t generation_tokens) {
    prompt_tokens_->inc(static_cast<double>(prompt_tokens));
    generation_tokens_->inc(static_cast<double>(generation_tokens));
    iteration_tokens_->observe(static_cast<double>(prompt_tokens + generation_tokens));
}

void VllmMetrics::set_engine_totals(int64_t prompt_tokens, int64_t generation_tokens, int64_t preemptions) {
    prompt_tokens_->advance_to(static_cast<double>(prompt_tokens));
    generation_tokens_->advance_to(static_cast<double>(generation_tokens));
    preemptions_->advance_to(static_cast<double>(preemptions));
}

void VllmMetrics::observe_iteration_tokens(int64_t tokens) {
    iteration_tokens_->observe(static_cast<double>(tokens));
}

void VllmMetrics::observe_ttft(double seconds) { ttft_->observe(seconds); }

void VllmMetrics::observe_itl(double seconds) {
    itl_->observe(seconds);
    tpot_old_->observe(seconds);
}

void VllmMetrics::on_request_finished(const FinishedRequestStats& r) {
    std::string_view reason = "error";
    for (std::string_view known : kFinishReasons) {
        if (known == r.finish_reason) reason = known;
    }
    registry_.counter("vllm:request_success", {labels_[0], labels_[1], std::string(reason)}).inc();
    e2e_->observe(r.e2e_s);
    queue_->observe(r.queue_s);
    prefill_->observe(r.prefill_s);
    inference_->observe(r.prefill_s + r.decode_s);
    decode_->observe(r.decode_s);
    prompt_tokens_hist_->observe(static_cast<double>(r.prompt_tokens));
    generation_tokens_hist_->observe(static_cast<double>(r.generation_tokens));
    n_hist_->observe(static_cast<double>(r.n));
    if (r.max_tokens > 0) max_tokens_hist_->observe(static_cast<double>(r.max_tokens));
    // Mean time per output token after the first (vLLM's mean_time_per_output_token).
    if (r.generation_tokens > 1)
        request_tpot_->observe(r.decode_s / static_cast<double>(r.generation_tokens - 1));
}

VllmMetrics::Totals VllmMetrics::totals() const {
    Totals t;
    t.prompt_tokens = prompt_tokens_->value();
    t.generation_tokens = generation_tokens_->value();
    t.running = static_cast<int64_t>(running_->value());
    t.waiting = static_cast<int64_t>(waiting_->value());
    t.kv_cache_usage = kv_usage_->value();
    return t;
}

void RequestMetricsRecorder::on_output(int64_t new_tokens, Clock::time_point t) {
    if (new_tokens <= 0 || finished_) return;
    if (!first_) {
        first_ = t;
        metrics_.observe_ttft(std::chrono::duration<double>(t - arrival_).count());
    } else {
        metrics_.observe_itl(std::chrono::duration<double>(t - *last_).count());
    }
    last_ = t;
    generated_ += new_tokens;
}

void RequestMetricsRecorder::finish(std::string_view finish_reason, int64_t prompt_tokens, int64_t max_tokens,
                                    int64_t n, Clock::time_point t) {
    if (finished_) return;
    finished_ = true;
    auto secs = [](Clock::duration d) { return std::max(0.0, std::chrono::duration<double>(d).count()); };
    const Clock::time_point start = scheduled_.value_or(arrival_);
    FinishedRequestStats f;
    f.finish_reason = finish_reason;
    f.prompt_tokens = prompt_tokens;
    f.generation_tokens = generated_;
    f.max_tokens = max_tokens;
    f.n = n;
    f.e2e_s = secs(t - arrival_);
    f.queue_s = secs(start - arrival_);
    f.prefill_s = first_ ? secs(*first_ - start) : 0.0;
    f.decode_s = first_ ? secs(*last_ - *first_) : 0.0;
    metrics_.on_request_finished(f);
}

std::string format_stats_line(const VllmMetrics::Totals& prev, const VllmMetrics::Totals& now,
                              double interval_s) {
    double prompt_tps = interval_s > 0 ? (now.prompt_tokens - prev.prompt_tokens) / interval_s : 0.0;
    double gen_tps = interval_s > 0 ? (now.generation_tokens - prev.generation_tokens) / interval_s : 0.0;
    char buf[256];
    std::snprintf(
        buf, sizeof(buf),
        "Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, "
        "Running: %lld reqs, Waiting: %lld reqs, GPU KV cache usage: %.1f%%, Prefix cache hit rate: %.1f%%",
        prompt_tps, gen_tps, static_cast<long long>(now.running), static_cast<long long>(now.waiting),
        now.kv_cache_usage * 100.0, 0.0);
    return buf;
}

}  // namespace volt::server
