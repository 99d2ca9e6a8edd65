#include "io/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>

#include "core/logging.h"

namespace volt::io {

std::string format_bytes(double bytes) {
    static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 4) {
        bytes /= 1024.0;
        ++u;
    }
    char buf[32];
    if (u == 0)
        std::snprintf(buf, sizeof(buf), "%.0f B", bytes);
    else
        std::snprintf(buf, sizeof(buf), "%.2f %s", bytes, kUnits[u]);
    return buf;
}

std::string format_duration(double seconds) {
    const int64_t s = static_cast<int64_t>(std::ceil(std::max(0.0, seconds)));
    char buf[32];
    if (s < 60)
        std::snprintf(buf, sizeof(buf), "%llds", static_cast<long long>(s));
    else if (s < 3600)
        std::snprintf(buf, sizeof(buf), "%lldm%02llds", static_cast<long long>(s / 60),
                      static_cast<long long>(s % 60));
    else
        std::snprintf(buf, sizeof(buf), "%lldh%02lldm", static_cast<long long>(s / 3600),
                      static_cast<long long>(s % 3600 / 60));
    return buf;
}

std::string format_progress(const std::string& label, int64_t done, int64_t total, double elapsed_s,
                            int bar_width) {
    const double frac =
        total > 0 ? std::min(1.0, static_cast<double>(done) / static_cast<double>(total)) : 1.0;
    std::string line = label;
    if (bar_width > 0) {
        const int filled = static_cast<int>(frac * bar_width);
        line.append(" [").append(filled, '#').append(bar_width - filled, '-').append("]");
    }
    line.append(" ").append(format_bytes(static_cast<double>(done)));
    line.append(" / ").append(format_bytes(static_cast<double>(total)));
    line.append(" ").append(std::to_string(static_cast<int>(frac * 100.0))).append("%");
    if (done > 0 && elapsed_s > 0) {
        const double rate = static_cast<double>(done) / elapsed_s;
        line.append("  ").append(format_bytes(rate)).append("/s  ETA ");
        line.append(format_duration(static_cast<double>(total - done) / rate));
    } else {
        line += "  --/s  ETA --";
    }
    return line;
}

ProgressMeter::ProgressMeter(std::string label, int64_t total_bytes, ProgressMode mode, double log_interval_s)
    : label_(std::move(label)),
      total_(total_bytes),
      mode_(mode),
      interval_s_(log_interval_s),
      start_(std::chrono::steady_clock::now()) {
    if (mode_ == ProgressMode::kAuto)
        mode_ = ::isatty(STDERR_FILENO) ? ProgressMode::kBar : ProgressMode::kLog;
}

ProgressMeter::~ProgressMeter() { finish(); }

double ProgressMeter::elapsed_s() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void ProgressMeter::add(int64_t bytes) {
    done_ += bytes;
    if (mode_ == ProgressMode::kOff) return;
    const double now = elapsed_s();
    const double interval = mode_ == ProgressMode::kBar ? 0.1 : interval_s_;
    if (now - last_report_s_ < interval) return;  // racy read is fine: report() re-checks under the lock
    report(false);
}

void ProgressMeter::finish() { report(true); }

void ProgressMeter::report(bool final) {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_ || mode_ == ProgressMode::kOff) {
        finished_ = finished_ || final;
        return;
    }
    const double now = elapsed_s();
    const double interval = mode_ == ProgressMode::kBar ? 0.1 : interval_s_;
    if (!final && now - last_report_s_ < interval) return;
    last_report_s_ = now;
    if (mode_ == ProgressMode::kBar) {
        // \33[K clears what a longer previous line left behind.
        std::fprintf(stderr, "\r%s\33[K%s", format_progress(label_, done_.load(), total_, now, 30).c_str(),
                     final ? "\n" : "");
        std::fflush(stderr);
    } else {
        spdlog::info("{}", format_progress(label_, done_.load(), total_, now, 0));
    }
    finished_ = final;
}

}  // namespace volt::io
