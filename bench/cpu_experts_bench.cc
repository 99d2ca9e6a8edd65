// The fast CPU MXFP4 experts kernel (src/cpu/experts_fast.h) on gpt-oss's expert shapes: GB/s of expert
// weights streamed (codes + scales + biases of the experts a call routes to, once per call) beside this
// host's read bandwidth measured in the same run (cpu::measure_host_read_gbps), per instruction set and
// batch size. All E experts of one layer are random MXFP4 (E x 13.2 MB: 423 MB for the 20b's 32, far past
// any cache) and successive calls route to other experts, so every call reads from memory. Not run by
// CTest; numbers in docs/performance.md.
//   build/bench/volt_cpu_experts_bench [--experts 32] [--tokens 1,4,16,64] [--iters 20] [--threads N]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "cpu/cpu_ops.h"
#include "cpu/experts_fast.h"

using namespace volt;

namespace {

struct Mx {
    std::vector<uint8_t> blocks, scales;
    std::vector<uint16_t> bias;
    ops::ExpertWeights view;
};

// Random codes (splitmix64), scale bytes near the ones that give gate/up rows of rms ~5 against unit x.
Mx random_mx(uint64_t seed, int64_t E, int64_t out, int64_t in, int scale) {
    Mx m;
    m.blocks.resize(E * out * in / 2);
    m.scales.resize(E * out * in / 32);
    m.bias.resize(E * out);
    uint64_t s = seed;
    auto next = [&] {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    };
    for (size_t i = 0; i + 8 <= m.blocks.size(); i += 8) {
        const uint64_t v = next();
        std::memcpy(m.blocks.data() + i, &v, 8);
    }
    for (auto& b : m.scales) b = static_cast<uint8_t>(scale - 1 + next() % 3);
    for (auto& b : m.bias)
        b = f32_to_bf16(static_cast<float>(static_cast<int64_t>(next() % 2001) - 1000) / 2000.0f);
    m.view = {ops::Format::kMxfp4,
              m.blocks.data(),
              m.scales.data(),
              nullptr,
              {ops::Format::kBf16, m.bias.data(), E * out},
              E,
              out,
              in};
    return m;
}

std::vector<int64_t> parse_list(const std::string& s) {
    std::vector<int64_t> v;
    std::stringstream in(s);
    for (std::string item; std::getline(in, item, ',');) v.push_back(std::stoll(item));
    return v;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app("fast CPU MXFP4 experts kernel: GB/s streamed vs the host's read bandwidth");
    int64_t E = 32, H = 2880, I = 2880, K = 4;
    int iters = 20, threads = 0;
    std::string tokens = "1,4,16,64";
    app.add_option("--experts", E, "experts of the layer (20b: 32, 120b: 128)")->capture_default_str();
    app.add_option("--tokens", tokens, "batch sizes (tokens per call)")->capture_default_str();
    app.add_option("--iters", iters, "timed calls per row (after 2 warm-up calls)")->capture_default_str();
    app.add_option("--threads", threads, "CPU threads (0: all)")->capture_default_str();
    CLI11_PARSE(app, argc, argv);
    set_cpu_threads(threads);

    const double bw = cpu::measure_host_read_gbps(int64_t{1} << 30);
    std::printf("host: %d threads, read bandwidth %.1f GB/s (1 GiB, best of 5); best ISA %s\n",
                cpu_thread_pool().num_threads(), bw, cpu::isa_name(cpu::best_isa()));
    const Mx gu = random_mx(1, E, 2 * I, H, 122), dn = random_mx(2, E, H, I, 118);
    std::printf("experts: E %lld, H %lld, I %lld, k %lld: %.1f MB per expert, %.0f MB per layer\n",
                static_cast<long long>(E), static_cast<long long>(H), static_cast<long long>(I),
                static_cast<long long>(K),
                (gu.blocks.size() + gu.scales.size() + dn.blocks.size() + dn.scales.size()) / 1e6 / E,
                (gu.blocks.size() + gu.scales.size() + dn.blocks.size() + dn.scales.size()) / 1e6);
    std::mt19937_64 rng(3);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::printf("%-7s %6s %10s %12s %10s %8s\n", "isa", "tokens", "ms/call", "MB/call", "GB/s", "of bw");
    for (int64_t T : parse_list(tokens)) {
        std::vector<float> x(T * H), out(T * H, 0.0f), w(T * K, 1.0f / K);
        for (auto& v : x) v = normal(rng);
        // Routing: call c sends token t to experts (c*K*T + t*K + j) mod E: consecutive calls walk all
        // experts.
        std::vector<std::vector<int32_t>> ids(iters + 2, std::vector<int32_t>(T * K));
        for (int c = 0; c < iters + 2; ++c)
            for (int64_t t = 0; t < T; ++t)
                for (int64_t j = 0; j < K; ++j)
                    ids[c][t * K + j] = static_cast<int32_t>((c * K * T + t * K + j) % E);
        for (cpu::Isa isa : {cpu::Isa::kAvx512, cpu::Isa::kAvx2, cpu::Isa::kScalar}) {
            if (!cpu::isa_supported(isa)) continue;
            if (isa == cpu::Isa::kScalar && T > 4) continue;  // the reference: minutes at large batches
            ops::ExpertsArgs a{.x = x.data(),
                               .expert_ids = nullptr,
                               .expert_weights = w.data(),
                               .gate_up = gu.view,
                               .down = dn.view,
                               .out = out.data(),
                               .num_tokens = T,
                               .top_k = K,
                               .swiglu_limit = 7.0f,
                               .swiglu_alpha = 1.702f};
            const int n = isa == cpu::Isa::kScalar ? 3 : iters;
            double seconds = 0.0;
            int64_t bytes = 0;
            for (int c = 0; c < n + 2; ++c) {
                a.expert_ids = ids[c].data();
                const auto t0 = std::chrono::steady_clock::now();
                cpu::experts_fast(a, isa);
                const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                if (c < 2) continue;  // warm-up (scratch allocation, thread wake-up)
                seconds += s;
                bytes += cpu::expert_bytes_read(a);
            }
            const double gbps = bytes / seconds / 1e9;
            std::printf("%-7s %6lld %10.3f %12.1f %10.1f %7.0f%%\n", cpu::isa_name(isa),
                        static_cast<long long>(T), seconds / n * 1e3, bytes / 1e6 / n, gbps,
                        100.0 * gbps / bw);
        }
    }
    return 0;
}
