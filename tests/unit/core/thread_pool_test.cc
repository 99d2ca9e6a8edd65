#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace volt {

TEST(ThreadPool, CoversEveryItemOnce) {
    for (int threads : {1, 2, 5}) {
        ThreadPool pool(threads);
        for (int64_t n : {0, 1, 7, 1000}) {
            std::vector<std::atomic<int>> hits(n);
            pool.parallel_for(n, 3, [&](int64_t b, int64_t e) {
                for (int64_t i = b; i < e; ++i) hits[i]++;
            });
            for (int64_t i = 0; i < n; ++i)
                EXPECT_EQ(hits[i].load(), 1) << "threads " << threads << " i " << i;
        }
    }
}

}  // namespace volt
