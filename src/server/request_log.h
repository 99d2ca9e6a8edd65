// Operational logging of `voltllm serve`: the X-Request-Id policy (honour the client's id, else make one;
// echo it back), the per-request log lines of --enable-log-requests (prompt cut to --max-log-len), and the
// periodic stats line (vLLM's LoggingStatLogger, every 10 s unless --disable-log-stats).
// Test: tests/unit/server/request_log_test.cc.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "server/metrics.h"

namespace volt::server {

// The request id to use: the client's X-Request-Id when it is 1..128 printable ASCII characters without
// spaces, else a fresh random 32-hex-digit id. The server echoes the result in the response's
// X-Request-Id header and uses it in logs; OpenAI `id` fields are "chatcmpl-<id>" / "cmpl-<id>" (vLLM).
std::string choose_request_id(std::optional<std::string_view> header_value);
inline constexpr std::string_view kRequestIdHeader = "X-Request-Id";

// --enable-log-requests lines (vLLM's RequestLogger wording). `max_log_len` < 0: the whole prompt; else
// at most that many bytes of it, cut back to a UTF-8 character boundary. `params`: the sampling parameters
// as the server prints them (JSON). Prompt bytes are escaped so a line stays one line.
std::string format_request_received(std::string_view request_id, std::string_view prompt,
                                    int64_t prompt_tokens, std::string_view params, int64_t max_log_len);
std::string format_request_finished(std::string_view request_id, std::string_view finish_reason,
                                    int64_t prompt_tokens, int64_t generation_tokens, double e2e_s);

// Logs format_stats_line(...) every `interval` on its own thread (info level; debug when the system was
// idle in both this and the previous interval, as vLLM does). `sink` defaults to spdlog::info/debug;
// tests pass their own. `refresh`, when given, runs before each read of the metrics (a server whose engine
// keeps cumulative totals syncs them in there: VllmMetrics::set_engine_totals and the gauges).
// stop() (or the destructor) joins the thread.
class PeriodicStatsLogger {
  public:
    using Sink = std::function<void(bool idle, const std::string& line)>;
    PeriodicStatsLogger(const VllmMetrics& metrics,
                        std::chrono::milliseconds interval = std::chrono::seconds(10), Sink sink = {},
                        std::function<void()> refresh = {});
    ~PeriodicStatsLogger();
    PeriodicStatsLogger(const PeriodicStatsLogger&) = delete;
    PeriodicStatsLogger& operator=(const PeriodicStatsLogger&) = delete;
    void stop();

  private:
    void run();

    const VllmMetrics& metrics_;
    std::chrono::milliseconds interval_;
    Sink sink_;
    std::function<void()> refresh_;
    std::mutex mu_;
    std::condition_variable cv_;
    bool stopping_ = false;
    std::thread thread_;
};

}  // namespace volt::server
