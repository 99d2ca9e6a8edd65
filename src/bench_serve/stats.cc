// Percentiles and the benchmark summary; see stats.h.
#include "bench_serve/stats.h"

#include <algorithm>
#include <cmath>

namespace volt::bench {

double percentile(std::vector<double> values, double q) {
    if (values.empty()) return 0.0;
    std::sort(values.begin(), values.end());
    double rank = q / 100.0 * static_cast<double>(values.size() - 1);
    size_t lo = static_cast<size_t>(std::floor(rank));
    size_t hi = static_cast<size_t>(std::ceil(rank));
    double frac = rank - static_cast<double>(lo);
    return values[lo] + (values[hi] - values[lo]) * frac;
}

double mean(const std::vector<double>& values) {
    if (values.empty()) return 0.0;
    double s = 0;
    for (double v : values) s += v;
    return s / static_cast<double>(values.size());
}

double stddev(const std::vector<double>& values) {
    if (values.empty()) return 0.0;
    double m = mean(values);
    double s = 0;
    for (double v : values) s += (v - m) * (v - m);
    return std::sqrt(s / static_cast<double>(values.size()));
}

LatencyStats latency_stats(const std::vector<double>& seconds) {
    std::vector<double> ms;
    ms.reserve(seconds.size());
    for (double s : seconds) ms.push_back(s * 1000.0);
    LatencyStats l;
    l.mean_ms = mean(ms);
    l.median_ms = percentile(ms, 50);
    l.std_ms = stddev(ms);
    l.p90_ms = percentile(ms, 90);
    l.p99_ms = percentile(ms, 99);
    return l;
}

BenchSummary summarize(const std::vector<RequestResult>& results, double duration_s) {
    BenchSummary s;
    s.duration_s = duration_s;
    std::vector<double> ttfts, tpots, itls, e2els;
    for (const RequestResult& r : results) {
        if (!r.success) {
            s.failed += 1;
            continue;
        }
        s.completed += 1;
        s.total_input_tokens += r.prompt_len;
        s.total_output_tokens += r.output_tokens;
        ttfts.push_back(r.ttft);
        e2els.push_back(r.latency);
        itls.insert(itls.end(), r.itl.begin(), r.itl.end());
        if (r.output_tokens > 1)
            tpots.push_back((r.latency - r.ttft) / static_cast<double>(r.output_tokens - 1));
    }
    if (duration_s > 0) {
        s.request_throughput = static_cast<double>(s.completed) / duration_s;
        s.output_throughput = static_cast<double>(s.total_output_tokens) / duration_s;
        s.total_token_throughput =
            static_cast<double>(s.total_input_tokens + s.total_output_tokens) / duration_s;
    }
    s.ttft = latency_stats(ttfts);
    s.tpot = latency_stats(tpots);
    s.itl = latency_stats(itls);
    s.e2el = latency_stats(e2els);
    return s;
}

}  // namespace volt::bench
