// Request ids, request log lines and the periodic stats line; see request_log.h.
#include "server/request_log.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <random>

namespace volt::server {

std::string choose_request_id(std::optional<std::string_view> header_value) {
    if (header_value && !header_value->empty() && header_value->size() <= 128) {
        bool ok = true;
        for (char c : *header_value) ok = ok && c > 0x20 && c < 0x7f;
        if (ok) return std::string(*header_value);
    }
    thread_local std::mt19937_64 rng{std::random_device{}()};
    char buf[33];
    std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(rng()),
                  static_cast<unsigned long long>(rng()));
    return buf;
}

namespace {

// Python-repr-like escaping of a prompt: quotes, backslashes and control bytes escaped, UTF-8 kept.
std::string escape_prompt(std::string_view s) {
    std::string out;
    for (unsigned char c : s) {
        switch (c) {
            case '\\':
                out += "\\\\";
                break;
            case '\'':
                out += "\\'";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\r':
                out += "\\r";
                break;
            case '\t':
                out += "\\t";
                break;
            default:
                if (c < 0x20 || c == 0x7f) {
                    char buf[8];
                    std::snprintf(buf, sizeof(buf), "\\x%02x", c);
                    out += buf;
                } else {
                    out += static_cast<char>(c);
                }
        }
    }
    return out;
}

}  // namespace

std::string format_request_received(std::string_view request_id, std::string_view prompt,
                                    int64_t prompt_tokens, std::string_view params, int64_t max_log_len) {
    std::string_view shown = prompt;
    if (max_log_len >= 0 && static_cast<int64_t>(shown.size()) > max_log_len) {
        size_t cut = static_cast<size_t>(max_log_len);
        // Do not split a UTF-8 sequence: back up over continuation bytes (10xxxxxx).
        while (cut > 0 && (static_cast<unsigned char>(prompt[cut]) & 0xC0) == 0x80) --cut;
        shown = prompt.substr(0, cut);
    }
    return "Received request " + std::string(request_id) + ": prompt: '" + escape_prompt(shown) +
           "', params: " + std::string(params) + ", prompt_tokens: " + std::to_string(prompt_tokens);
}

std::string format_request_finished(std::string_view request_id, std::string_view finish_reason,
                                    int64_t prompt_tokens, int64_t generation_tokens, double e2e_s) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.3f", e2e_s);
    return "Finished request " + std::string(request_id) + ": finish_reason: " + std::string(finish_reason) +
           ", prompt_tokens: " + std::to_string(prompt_tokens) +
           ", generation_tokens: " + std::to_string(generation_tokens) + ", e2e: " + buf + " s";
}

PeriodicStatsLogger::PeriodicStatsLogger(const VllmMetrics& metrics, std::chrono::milliseconds interval,
                                         Sink sink, std::function<void()> refresh)
    : metrics_(metrics), interval_(interval), sink_(std::move(sink)), refresh_(std::move(refresh)) {
    if (!sink_) {
        sink_ = [](bool idle, const std::string& line) {
            if (idle) {
                spdlog::debug("{}", line);
            } else {
                spdlog::info("{}", line);
            }
        };
    }
    thread_ = std::thread([this] { run(); });
}

PeriodicStatsLogger::~PeriodicStatsLogger() { stop(); }

void PeriodicStatsLogger::stop() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

void PeriodicStatsLogger::run() {
    using Clock = std::chrono::steady_clock;
    if (refresh_) refresh_();
    VllmMetrics::Totals prev = metrics_.totals();
    Clock::time_point prev_t = Clock::now();
    bool prev_busy = false;
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, interval_, [this] { return stopping_; })) {
        if (refresh_) refresh_();
        VllmMetrics::Totals now = metrics_.totals();
        Clock::time_point t = Clock::now();
        double dt = std::chrono::duration<double>(t - prev_t).count();
        bool busy =
            now.prompt_tokens != prev.prompt_tokens || now.generation_tokens != prev.generation_tokens;
        sink_(!busy && !prev_busy, format_stats_line(prev, now, dt));
        prev = now;
        prev_t = t;
        prev_busy = busy;
    }
}

}  // namespace volt::server
