// Tests of the Prometheus registry and vLLM's metric set (src/server/metrics.h). Expected exposition text is
// written by hand from the text format 0.0.4 spec (HELP/TYPE lines, cumulative _bucket{le} ending +Inf,
// _count, _sum) and prometheus_client's number formatting; bucket lists from vllm/v1/metrics/loggers.py.
#include "server/metrics.h"

#include <gtest/gtest.h>

#include <thread>

#include "server/request_log.h"

namespace volt::server {
namespace {

TEST(Metrics, NumbersFormatLikePrometheusClient) {
    EXPECT_EQ(format_prometheus_number(0), "0.0");
    EXPECT_EQ(format_prometheus_number(1), "1.0");
    EXPECT_EQ(format_prometheus_number(3), "3.0");
    EXPECT_EQ(format_prometheus_number(0.001), "0.001");
    EXPECT_EQ(format_prometheus_number(0.25), "0.25");
    EXPECT_EQ(format_prometheus_number(2560), "2560.0");
    EXPECT_EQ(format_prometheus_number(100000), "100000.0");
    // Go's exponent form once the dot is past position 6 (floatToGoString), with its "e+0" prefix.
    EXPECT_EQ(format_prometheus_number(1000000), "1e+06");
    EXPECT_EQ(format_prometheus_number(10000000), "1e+07");
    EXPECT_EQ(format_prometheus_number(1e10), "1e+010");
    EXPECT_EQ(format_prometheus_number(12345678), "1.2345678e+07");
    EXPECT_EQ(format_prometheus_number(0.0001), "0.0001");
    EXPECT_EQ(format_prometheus_number(0.00001), "1e-05");
    EXPECT_EQ(format_prometheus_number(1.5e16), "1.5e+16");
    EXPECT_EQ(format_prometheus_number(-2.5), "-2.5");
    EXPECT_EQ(format_prometheus_number(1.0 / 0.0), "+Inf");
    EXPECT_EQ(format_prometheus_number(0.1 + 0.2), "0.30000000000000004");
}

TEST(Metrics, ExpositionTextOfASmallRegistry) {
    MetricsRegistry r;
    r.add_family("demo:requests", "Requests seen.", MetricType::kCounter, {"model_name"});
    r.add_family("demo:running", "Running now.\nSecond line \\ backslash.", MetricType::kGauge, {});
    r.add_family("demo:latency_seconds", "Latency.", MetricType::kHistogram, {"model_name", "engine"},
                 {0.1, 1.0, 2.5});
    r.counter("demo:requests", {"m\"1"}).inc();
    r.counter("demo:requests", {"m\"1"}).inc(2);
    r.counter("demo:requests", {"b"});
    r.gauge("demo:running", {}).set(7);
    Histogram& h = r.histogram("demo:latency_seconds", {"m", "0"});
    for (double v : {0.05, 0.1, 0.5, 3.0}) h.observe(v);  // 0.1 lands in le="0.1" (bounds are inclusive)

    const std::string expected =
        "# HELP demo:requests_total Requests seen.\n"
        "# TYPE demo:requests_total counter\n"
        "demo:requests_total{model_name=\"m\\\"1\"} 3.0\n"
        "demo:requests_total{model_name=\"b\"} 0.0\n"
        "# HELP demo:running Running now.\\nSecond line \\\\ backslash.\n"
        "# TYPE demo:running gauge\n"
        "demo:running 7.0\n"
        "# HELP demo:latency_seconds Latency.\n"
        "# TYPE demo:latency_seconds histogram\n"
        "demo:latency_seconds_bucket{model_name=\"m\",engine=\"0\",le=\"0.1\"} 2.0\n"
        "demo:latency_seconds_bucket{model_name=\"m\",engine=\"0\",le=\"1.0\"} 3.0\n"
        "demo:latency_seconds_bucket{model_name=\"m\",engine=\"0\",le=\"2.5\"} 3.0\n"
        "demo:latency_seconds_bucket{model_name=\"m\",engine=\"0\",le=\"+Inf\"} 4.0\n"
        "demo:latency_seconds_count{model_name=\"m\",engine=\"0\"} 4.0\n"
        "demo:latency_seconds_sum{model_name=\"m\",engine=\"0\"} 3.65\n";
    EXPECT_EQ(r.render(), expected);
}

TEST(Metrics, Buckets125) {
    EXPECT_EQ(buckets_1_2_5(100),
              (std::vector<double>{1, 2, 5, 10, 20, 50, 100}));  // vLLM's docstring example
    EXPECT_EQ(buckets_1_2_5(4096), (std::vector<double>{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000}));
}

TEST(Metrics, CountersAreThreadSafe) {
    MetricsRegistry r;
    r.add_family("c", "c", MetricType::kCounter, {});
    r.add_family("h", "h", MetricType::kHistogram, {}, {1.0});
    Counter& c = r.counter("c", {});
    Histogram& h = r.histogram("h", {});
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&] {
            for (int i = 0; i < 10000; ++i) {
                c.inc();
                h.observe(0.5);
            }
        });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(c.value(), 40000.0);
    EXPECT_EQ(h.snapshot().count, 40000u);
    EXPECT_EQ(h.snapshot().sum, 20000.0);
}

// The names dashboards expect (anchors.md), each with model_name and engine labels.
TEST(VllmMetrics, ExportsVllmNamesOldAndNew) {
    VllmMetrics m("gpt-oss-120b", 4096);
    const std::string text = m.render();
    for (const char* line : {
             "# TYPE vllm:num_requests_running gauge",
             "vllm:num_requests_running{model_name=\"gpt-oss-120b\",engine=\"0\"} 0.0",
             "vllm:num_requests_waiting{model_name=\"gpt-oss-120b\",engine=\"0\"} 0.0",
             "vllm:kv_cache_usage_perc{model_name=\"gpt-oss-120b\",engine=\"0\"} 0.0",
             "vllm:gpu_cache_usage_perc{model_name=\"gpt-oss-120b\",engine=\"0\"} 0.0",
             "# TYPE vllm:prompt_tokens_total counter",
             "vllm:prompt_tokens_total{model_name=\"gpt-oss-120b\",engine=\"0\"} 0.0",
             "vllm:generation_tokens_total{model_name=\"gpt-oss-120b\",engine=\"0\"} 0.0",
             "vllm:num_preemptions_total{model_name=\"gpt-oss-120b\",engine=\"0\"} 0.0",
             "vllm:request_success_total{model_name=\"gpt-oss-120b\",engine=\"0\",finished_reason=\"stop\"} "
             "0.0",
             "vllm:request_success_total{model_name=\"gpt-oss-120b\",engine=\"0\",finished_reason=\"length\"}"
             " 0.0",
             "vllm:request_success_total{model_name=\"gpt-oss-120b\",engine=\"0\",finished_reason=\"abort\"} "
             "0.0",
             "# TYPE vllm:time_to_first_token_seconds histogram",
             "vllm:time_to_first_token_seconds_bucket{model_name=\"gpt-oss-120b\",engine=\"0\",le=\"0.001\"} "
             "0.0",
             "vllm:time_to_first_token_seconds_bucket{model_name=\"gpt-oss-120b\",engine=\"0\",le=\"2560.0\"}"
             " 0.0",
             "vllm:inter_token_latency_seconds_bucket{model_name=\"gpt-oss-120b\",engine=\"0\",le=\"80.0\"} "
             "0.0",
             "vllm:time_per_output_token_seconds_bucket{model_name=\"gpt-oss-120b\",engine=\"0\",le=\"0.01\"}"
             " 0.0",
             "vllm:request_time_per_output_token_seconds_count{model_name=\"gpt-oss-120b\",engine=\"0\"} 0.0",
             "vllm:e2e_request_latency_seconds_bucket{model_name=\"gpt-oss-120b\",engine=\"0\",le=\"7680.0\"}"
             " 0.0",
             "vllm:request_prompt_tokens_bucket{model_name=\"gpt-oss-120b\",engine=\"0\",le=\"2000.0\"} 0.0",
             "vllm:iteration_tokens_total_bucket{model_name=\"gpt-oss-120b\",engine=\"0\",le=\"16384.0\"} "
             "0.0",
         }) {
        EXPECT_NE(text.find(std::string(line) + "\n"), std::string::npos) << line;
    }
    // 4096 caps the 1-2-5 buckets at 2000: no le="5000.0".
    EXPECT_EQ(
        text.find(
            "vllm:request_prompt_tokens_bucket{model_name=\"gpt-oss-120b\",engine=\"0\",le=\"5000.0\"}"),
        std::string::npos);
}

TEST(VllmMetrics, RecordsIntoNewAndOldNames) {
    VllmMetrics m("m", 100);
    m.set_running(3);
    m.set_waiting(1);
    m.set_kv_cache_usage(0.25);
    m.count_tokens(10, 0);
    m.count_tokens(0, 4);
    m.observe_ttft(0.03);
    for (double itl : {0.02, 0.02, 0.2}) m.observe_itl(itl);
    FinishedRequestStats f;
    f.finish_reason = "length";
    f.prompt_tokens = 10;
    f.generation_tokens = 4;
    f.max_tokens = 4;
    f.e2e_s = 0.5;
    f.queue_s = 0.01;
    f.prefill_s = 0.02;
    f.decode_s = 0.24;  // 3 gaps after the first token: 0.08 s each
    m.on_request_finished(f);
    f.finish_reason = "mystery";  // counted as error
    m.on_request_finished(f);

    const std::string t = m.render();
    auto has = [&](const std::string& line) { return t.find(line + "\n") != std::string::npos; };
    const std::string l = "{model_name=\"m\",engine=\"0\"";
    EXPECT_TRUE(has("vllm:num_requests_running" + l + "} 3.0"));
    EXPECT_TRUE(has("vllm:num_requests_waiting" + l + "} 1.0"));
    EXPECT_TRUE(has("vllm:kv_cache_usage_perc" + l + "} 0.25"));
    EXPECT_TRUE(has("vllm:gpu_cache_usage_perc" + l + "} 0.25"));
    EXPECT_TRUE(has("vllm:prompt_tokens_total" + l + "} 10.0"));
    EXPECT_TRUE(has("vllm:generation_tokens_total" + l + "} 4.0"));
    EXPECT_TRUE(has("vllm:request_success_total" + l + ",finished_reason=\"length\"} 1.0"));
    EXPECT_TRUE(has("vllm:request_success_total" + l + ",finished_reason=\"error\"} 1.0"));
    EXPECT_TRUE(has("vllm:time_to_first_token_seconds_bucket" + l + ",le=\"0.02\"} 0.0"));
    EXPECT_TRUE(has("vllm:time_to_first_token_seconds_bucket" + l + ",le=\"0.04\"} 1.0"));
    // ITL 0.02, 0.02, 0.2: two at le=0.025, all three at le=0.2; the old name holds the same.
    for (const char* name : {"vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"}) {
        EXPECT_TRUE(has(std::string(name) + "_bucket" + l + ",le=\"0.01\"} 0.0")) << name;
        EXPECT_TRUE(has(std::string(name) + "_bucket" + l + ",le=\"0.025\"} 2.0")) << name;
        EXPECT_TRUE(has(std::string(name) + "_bucket" + l + ",le=\"0.15\"} 2.0")) << name;
        EXPECT_TRUE(has(std::string(name) + "_bucket" + l + ",le=\"0.2\"} 3.0")) << name;
        EXPECT_TRUE(has(std::string(name) + "_count" + l + "} 3.0")) << name;
    }
    // Per-request TPOT 0.24 / 3 = 0.08: first bucket >= 0.08 is 0.1.
    EXPECT_TRUE(has("vllm:request_time_per_output_token_seconds_bucket" + l + ",le=\"0.075\"} 0.0"));
    EXPECT_TRUE(has("vllm:request_time_per_output_token_seconds_bucket" + l + ",le=\"0.1\"} 2.0"));
    EXPECT_TRUE(has("vllm:e2e_request_latency_seconds_bucket" + l + ",le=\"0.5\"} 2.0"));
    EXPECT_TRUE(has("vllm:e2e_request_latency_seconds_sum" + l + "} 1.0"));
    // inference = prefill + decode = 0.26 (le 0.3).
    EXPECT_TRUE(has("vllm:request_inference_time_seconds_bucket" + l + ",le=\"0.3\"} 2.0"));
    EXPECT_TRUE(has("vllm:request_prompt_tokens_bucket" + l + ",le=\"5.0\"} 0.0"));
    EXPECT_TRUE(has("vllm:request_prompt_tokens_bucket" + l + ",le=\"10.0\"} 2.0"));
    EXPECT_TRUE(has("vllm:request_params_max_tokens_bucket" + l + ",le=\"5.0\"} 2.0"));
    // count_tokens(10, 0) and (0, 4): iterations of 10 and 4 tokens.
    EXPECT_TRUE(has("vllm:iteration_tokens_total_bucket" + l + ",le=\"8.0\"} 1.0"));
    EXPECT_TRUE(has("vllm:iteration_tokens_total_bucket" + l + ",le=\"16.0\"} 2.0"));
}

TEST(VllmMetrics, EngineTotalsNeverGoDown) {
    VllmMetrics m("m", 100);
    m.set_engine_totals(100, 40, 1);
    m.set_engine_totals(90, 50, 1);  // a stale read: prompt stays at 100
    const std::string t = m.render();
    const std::string l = "{model_name=\"m\",engine=\"0\"}";
    EXPECT_NE(t.find("vllm:prompt_tokens_total" + l + " 100.0\n"), std::string::npos);
    EXPECT_NE(t.find("vllm:generation_tokens_total" + l + " 50.0\n"), std::string::npos);
    EXPECT_NE(t.find("vllm:num_preemptions_total" + l + " 1.0\n"), std::string::npos);
    EXPECT_EQ(m.totals().generation_tokens, 50.0);
}

TEST(VllmMetrics, RequestRecorderTimesPhases) {
    VllmMetrics m("m", 100);
    using C = RequestMetricsRecorder::Clock;
    const C::time_point t0{};
    auto at = [&](double s) {
        return t0 + std::chrono::duration_cast<C::duration>(std::chrono::duration<double>(s));
    };
    RequestMetricsRecorder r(m, at(0));
    r.on_scheduled(at(0.5));               // queue 0.5 s
    r.on_output(1, at(0.75));              // TTFT 0.75 s; prefill 0.25 s
    r.on_output(2, at(0.8));               // ITL 0.05
    r.on_output(0, at(0.85));              // no tokens: ignored
    r.on_output(1, at(1.0));               // ITL 0.2
    r.finish("stop", 9, 16, 1, at(1.25));  // e2e 1.25, decode 0.25, 4 tokens: TPOT 0.25 / 3
    r.finish("stop", 9, 16, 1, at(9.0));   // ignored
    EXPECT_EQ(r.generation_tokens(), 4);
    const std::string t = m.render();
    auto has = [&](const std::string& line) { return t.find(line + "\n") != std::string::npos; };
    const std::string l = "{model_name=\"m\",engine=\"0\"";
    EXPECT_TRUE(has("vllm:time_to_first_token_seconds_bucket" + l + ",le=\"0.5\"} 0.0"));
    EXPECT_TRUE(has("vllm:time_to_first_token_seconds_bucket" + l + ",le=\"0.75\"} 1.0"));
    EXPECT_TRUE(has("vllm:inter_token_latency_seconds_count" + l + "} 2.0"));
    EXPECT_TRUE(has("vllm:inter_token_latency_seconds_bucket" + l + ",le=\"0.05\"} 1.0"));
    EXPECT_TRUE(has("vllm:inter_token_latency_seconds_bucket" + l + ",le=\"0.15\"} 1.0"));
    EXPECT_TRUE(has("vllm:inter_token_latency_seconds_bucket" + l + ",le=\"0.2\"} 2.0"));
    EXPECT_TRUE(has("vllm:request_queue_time_seconds_sum" + l + "} 0.5"));
    EXPECT_TRUE(has("vllm:request_prefill_time_seconds_sum" + l + "} 0.25"));
    EXPECT_TRUE(has("vllm:request_decode_time_seconds_sum" + l + "} 0.25"));
    EXPECT_TRUE(has("vllm:e2e_request_latency_seconds_sum" + l + "} 1.25"));
    EXPECT_TRUE(has("vllm:e2e_request_latency_seconds_count" + l + "} 1.0"));
    EXPECT_TRUE(has("vllm:request_generation_tokens_sum" + l + "} 4.0"));
    EXPECT_TRUE(has("vllm:request_success_total" + l + ",finished_reason=\"stop\"} 1.0"));
    // 0.25 / 3 = 0.0833: above 0.075, within 0.1.
    EXPECT_TRUE(has("vllm:request_time_per_output_token_seconds_bucket" + l + ",le=\"0.075\"} 0.0"));
    EXPECT_TRUE(has("vllm:request_time_per_output_token_seconds_bucket" + l + ",le=\"0.1\"} 1.0"));
}

TEST(StatsLine, MatchesVllmWording) {
    VllmMetrics::Totals prev, now;
    prev.prompt_tokens = 100;
    prev.generation_tokens = 50;
    now.prompt_tokens = 225;
    now.generation_tokens = 350;
    now.running = 2;
    now.waiting = 1;
    now.kv_cache_usage = 0.015;
    EXPECT_EQ(
        format_stats_line(prev, now, 10.0),
        "Avg prompt throughput: 12.5 tokens/s, Avg generation throughput: 30.0 tokens/s, Running: 2 reqs, "
        "Waiting: 1 reqs, GPU KV cache usage: 1.5%, Prefix cache hit rate: 0.0%");
}

TEST(StatsLine, PeriodicLoggerLogsAndMarksIdle) {
    VllmMetrics m("m", 100);
    std::mutex mu;
    std::vector<std::pair<bool, std::string>> lines;
    {
        PeriodicStatsLogger logger(m, std::chrono::milliseconds(20), [&](bool idle, const std::string& line) {
            std::lock_guard<std::mutex> lock(mu);
            lines.emplace_back(idle, line);
        });
        std::this_thread::sleep_for(std::chrono::milliseconds(70));
    }
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_GE(lines.size(), 1u);
    EXPECT_TRUE(lines[0].first);  // nothing happened: debug level, as vLLM on an idle system
    EXPECT_EQ(lines[0].second.rfind("Avg prompt throughput: 0.0 tokens/s", 0), 0u);
}

TEST(StatsLine, RefreshFeedsTheLine) {
    VllmMetrics m("m", 100);
    std::atomic<int64_t> engine_generated{0};
    std::mutex mu;
    std::vector<std::pair<bool, std::string>> lines;
    {
        PeriodicStatsLogger logger(
            m, std::chrono::milliseconds(20),
            [&](bool idle, const std::string& line) {
                std::lock_guard<std::mutex> lock(mu);
                lines.emplace_back(idle, line);
            },
            [&] {
                m.set_engine_totals(0, engine_generated += 10, 0);
            });  // the engine makes 10 tokens per read
        std::this_thread::sleep_for(std::chrono::milliseconds(70));
    }
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_GE(lines.size(), 1u);
    EXPECT_FALSE(lines[0].first);  // tokens were generated: info level
    EXPECT_EQ(lines[0].second.find("Avg generation throughput: 0.0"), std::string::npos) << lines[0].second;
}

}  // namespace
}  // namespace volt::server
