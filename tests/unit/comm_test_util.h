// What the communicator tests share (tests/unit/cpu/communicator_test.cc, executor/nccl_rendezvous_test.cc,
// cuda/comm_bench_test.cc): seeded inputs, the rank-order sum every all-reduce is held to bitwise, and the
// exit codes of forked ranks.
#pragma once

#include <sys/types.h>
#include <sys/wait.h>

#include <cstdint>
#include <random>
#include <vector>

namespace volt::testing {

// n floats, uniform in [lo, hi), from std::mt19937(seed): the same values in every process and run.
inline std::vector<float> random_floats(int64_t n, uint32_t seed, float lo, float hi) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = u(rng);
    return v;
}

// The CPU communicators' order, element by element: in[0] + in[1] + ... (left to right).
inline std::vector<float> rank_order_sum(const std::vector<std::vector<float>>& in) {
    std::vector<float> s = in[0];
    for (size_t r = 1; r < in.size(); ++r)
        for (size_t i = 0; i < s.size(); ++i) s[i] += in[r][i];
    return s;
}

// Waits for every pid; their exit codes in order (200: killed by a signal).
inline std::vector<int> exit_codes(const std::vector<pid_t>& pids) {
    std::vector<int> codes;
    for (pid_t pid : pids) {
        int status = 0;
        waitpid(pid, &status, 0);
        codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 200);
    }
    return codes;
}

}  // namespace volt::testing
