// Progress line formatting with hand-computed rates and ETAs, and the meter's byte counting.
#include "io/progress.h"

#include <gtest/gtest.h>

namespace volt::io {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

TEST(Progress, FormatBytes) {
    EXPECT_EQ(format_bytes(0), "0 B");
    EXPECT_EQ(format_bytes(1023), "1023 B");
    EXPECT_EQ(format_bytes(1536), "1.50 KiB");
    EXPECT_EQ(format_bytes(13761264768.0), "12.82 GiB");  // the 20b payload, spec §2.1: 13.76e9 / 2^30
}

TEST(Progress, FormatDuration) {
    EXPECT_EQ(format_duration(0), "0s");
    EXPECT_EQ(format_duration(5.2), "6s");
    EXPECT_EQ(format_duration(65), "1m05s");
    EXPECT_EQ(format_duration(7380), "2h03m");
}

TEST(Progress, LineWithRateAndEta) {
    // 3 GiB of 12 GiB in 2 s: 1.5 GiB/s, 9 GiB left -> 6 s.
    EXPECT_EQ(format_progress("loading", 3 * kGiB, 12 * kGiB, 2.0, 0),
              "loading 3.00 GiB / 12.00 GiB 25%  1.50 GiB/s  ETA 6s");
    EXPECT_EQ(format_progress("x", kGiB, 4 * kGiB, 1.0, 8),
              "x [##------] 1.00 GiB / 4.00 GiB 25%  1.00 GiB/s  ETA 3s");
    EXPECT_EQ(format_progress("x", 0, 100, 0.0, 0), "x 0 B / 100 B 0%  --/s  ETA --");
}

TEST(Progress, MeterCounts) {
    ProgressMeter m("t", 100, ProgressMode::kLog, 0.0);
    m.add(40);
    m.add(60);
    EXPECT_EQ(m.done(), 100);
    m.finish();
    m.finish();
}

}  // namespace
}  // namespace volt::io
