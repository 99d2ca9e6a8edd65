// A fixed pool of worker threads with a blocking parallel_for. Work items are split into contiguous
// ranges; every item is computed by exactly one thread with the same code, so a result never depends on
// the number of threads (no cross-thread reductions happen here).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace volt {

class ThreadPool {
  public:
    // num_threads <= 0: the number of hardware threads.
    explicit ThreadPool(int num_threads = 0);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

    // Calls fn(begin, end) over disjoint ranges covering [0, n), at least `grain` items per range,
    // and returns when all are done. The calling thread takes part. Not reentrant; callers on several
    // threads (the ranks of a CPU tensor-parallel group share this pool) take turns.
    void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  private:
    void worker_loop(int index);

    std::vector<std::thread> workers_;
    std::mutex caller_mu_;  // one parallel_for at a time
    std::mutex mu_;
    std::condition_variable start_cv_, done_cv_;
    const std::function<void(int64_t, int64_t)>* job_ = nullptr;
    int64_t job_n_ = 0;
    int job_chunks_ = 0;
    int next_chunk_ = 0;
    int pending_ = 0;
    uint64_t generation_ = 0;
    bool stop_ = false;
};

// The process-wide pool used by the CPU kernels; sized on first use from set_cpu_threads (or hardware).
ThreadPool& cpu_thread_pool();
// Must be called before the first cpu_thread_pool() to take effect; <= 0 means all hardware threads.
void set_cpu_threads(int n);

}  // namespace volt
