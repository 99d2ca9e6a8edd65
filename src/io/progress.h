// Progress of a long byte-counted job (loading a checkpoint): a bar redrawn in place on stderr when it
// is a terminal, else an info log line every few seconds; both show done / total, bytes/s and ETA.
// The line itself is a pure function (format_progress) so it is tested without a terminal.
// Test: tests/unit/io/progress_test.cc.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace volt::io {

// Binary units with two decimals: "512 B", "1.50 KiB", "12.81 GiB".
std::string format_bytes(double bytes);
// Whole seconds, rounded up: "0s", "6s", "1m05s", "2h03m".
std::string format_duration(double seconds);
// "label [#####-----] 3.00 GiB / 12.00 GiB 25%  1.50 GiB/s  ETA 6s". bar_width 0 leaves the bar out.
// Rate = done / elapsed_s, ETA = (total - done) / rate; both shown as "--" before any progress.
std::string format_progress(const std::string& label, int64_t done, int64_t total, double elapsed_s,
                            int bar_width);

enum class ProgressMode {
    kAuto,  // kBar when stderr is a terminal, else kLog
    kBar,   // redrawn line on stderr, at most 10 times a second
    kLog,   // spdlog::info every log_interval_s
    kOff,
};

class ProgressMeter {
  public:
    ProgressMeter(std::string label, int64_t total_bytes, ProgressMode mode = ProgressMode::kAuto,
                  double log_interval_s = 5.0);
    ~ProgressMeter();  // calls finish()
    ProgressMeter(const ProgressMeter&) = delete;
    ProgressMeter& operator=(const ProgressMeter&) = delete;

    // Counts `bytes` more as done; may redraw or log. Safe to call from several threads.
    void add(int64_t bytes);
    // Draws the final state (100% when all was added) and ends the bar's line; idempotent.
    void finish();
    int64_t done() const { return done_.load(); }
    double elapsed_s() const;

  private:
    void report(bool final);

    std::string label_;
    int64_t total_;
    ProgressMode mode_;
    double interval_s_;
    std::atomic<int64_t> done_{0};
    std::chrono::steady_clock::time_point start_;
    std::mutex mu_;  // guards the fields below and the output
    double last_report_s_ = 0;
    bool finished_ = false;
};

}  // namespace volt::io
