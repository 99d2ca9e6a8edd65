#include "core/thread_pool.h"

#include <algorithm>
#include <memory>

namespace volt {

ThreadPool::ThreadPool(int num_threads) {
    if (num_threads <= 0) num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
    }
    start_cv_.notify_all();
    for (auto& t : workers_) t.join();
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    if (n <= 0) return;
    grain = std::max<int64_t>(grain, 1);
    const int64_t max_chunks = (n + grain - 1) / grain;
    const int chunks = static_cast<int>(std::min<int64_t>(max_chunks, num_threads() * 4));
    if (chunks <= 1 || workers_.empty()) {
        fn(0, n);
        return;
    }
    std::lock_guard<std::mutex> caller(caller_mu_);
    auto run_chunk = [&](int c) {
        int64_t b = n * c / chunks, e = n * (c + 1) / chunks;
        if (b < e) fn(b, e);
    };
    {
        std::lock_guard<std::mutex> lock(mu_);
        job_ = &fn;
        job_n_ = n;
        job_chunks_ = chunks;
        next_chunk_ = 0;
        pending_ = chunks;
        ++generation_;
    }
    start_cv_.notify_all();
    for (;;) {
        int c;
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (next_chunk_ >= job_chunks_) break;
            c = next_chunk_++;
        }
        run_chunk(c);
        std::lock_guard<std::mutex> lock(mu_);
        if (--pending_ == 0) done_cv_.notify_all();
    }
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return pending_ == 0; });
    job_ = nullptr;
}

void ThreadPool::worker_loop(int /*index*/) {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
        start_cv_.wait(lock, [&] { return stop_ || (generation_ != seen && next_chunk_ < job_chunks_); });
        if (stop_) return;
        seen = generation_;
        while (job_ != nullptr && next_chunk_ < job_chunks_) {
            int c = next_chunk_++;
            const auto* fn = job_;
            int64_t n = job_n_;
            int chunks = job_chunks_;
            lock.unlock();
            int64_t b = n * c / chunks, e = n * (c + 1) / chunks;
            if (b < e) (*fn)(b, e);
            lock.lock();
            if (--pending_ == 0) done_cv_.notify_all();
        }
    }
}

namespace {
int g_cpu_threads = 0;
}

void set_cpu_threads(int n) { g_cpu_threads = n; }

ThreadPool& cpu_thread_pool() {
    static ThreadPool pool(g_cpu_threads);
    return pool;
}

}  // namespace volt
