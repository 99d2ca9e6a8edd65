// CPU forward-pass benchmark (not a test): prefill and decode tokens/s of one sequence on a checkpoint,
// and the weight bytes a decode step reads against this machine's measured memory bandwidth.
// usage: volt_forward_bench --model DIR [--prompt-len 128] [--decode-tokens 16] [--threads N]
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/thread_pool.h"
#include "cpu/cpu_ops.h"
#include "model/loader.h"
#include "model/sequence_runner.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Copy bandwidth of a 512 MiB buffer, bytes read + written per second (best of 3).
double measure_copy_bandwidth() {
    const size_t n = 512u << 20;
    std::vector<char> a(n, 1), b(n, 0);
    double best = 0;
    for (int i = 0; i < 3; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        std::memcpy(b.data(), a.data(), n);
        best = std::max(best, 2.0 * n / seconds_since(t0));
    }
    return best;
}

// Bytes of weights one decode token reads: dense layers, the router, top-k experts, one embedding row,
// the lm_head (spec §5.2 of anchors.md counts the same way).
double decode_bytes(const volt::model::ModelWeights& w) {
    const auto& c = w.config;
    const double H = c.hidden_size, I = c.intermediate_size, k = c.num_experts_per_tok;
    const double attn = 2.0 * (c.q_dim() * H * 2 + c.kv_dim() * H * 2 + c.q_dim() + 2 * c.kv_dim() + H);
    const double router = 2.0 * (c.num_local_experts * H + c.num_local_experts);
    const bool mx = w.layers[0].gate_up.format == volt::ops::Format::kMxfp4;
    const double per_weight = mx ? (0.5 + 1.0 / 32) : 2.0;
    const double experts = k * (per_weight * (2 * I * H + H * I) + 2.0 * (2 * I + H));
    return c.num_hidden_layers * (attn + router + experts + 4 * H) + 2.0 * H + 2.0 * c.vocab_size * H;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"voltllm CPU forward benchmark"};
    std::string model;
    int64_t prompt_len = 128, decode_tokens = 16;
    int threads = 0;
    app.add_option("--model", model)->required();
    app.add_option("--prompt-len", prompt_len)->capture_default_str();
    app.add_option("--decode-tokens", decode_tokens)->capture_default_str();
    app.add_option("--threads", threads, "0: all hardware threads");
    CLI11_PARSE(app, argc, argv);
    volt::set_cpu_threads(threads);
    auto t0 = std::chrono::steady_clock::now();
    auto weights = volt::model::load_model(model);
    if (!weights.is_ok()) {
        std::fprintf(stderr, "error: %s\n", weights.status().to_string().c_str());
        return 1;
    }
    const double load_s = seconds_since(t0);
    const auto& c = (*weights)->config;
    volt::cpu::CpuBackend backend;
    volt::model::Forward fwd(*volt::model::place_model(*weights, backend), backend);
    volt::model::SequenceRunner run(fwd, prompt_len + decode_tokens);
    std::vector<int32_t> prompt(prompt_len);
    for (int64_t i = 0; i < prompt_len; ++i) prompt[i] = static_cast<int32_t>((i * 7919) % c.vocab_size);
    t0 = std::chrono::steady_clock::now();
    auto logits = run.append(prompt, false);
    const double prefill_s = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < decode_tokens; ++i) {
        const int32_t next =
            static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        logits = run.append(std::vector<int32_t>{next}, false);
    }
    const double decode_s = seconds_since(t0);
    const double bw = measure_copy_bandwidth();
    const double bytes = decode_bytes(**weights);
    const double decode_tps = decode_tokens / decode_s;
    std::printf(
        "model %s: %lld layers, hidden %lld, %lld experts top-%lld, vocab %lld; threads %d; load %.2f s\n"
        "prefill %lld tokens: %.1f tok/s\n"
        "decode %lld tokens: %.2f tok/s (%.1f ms/token)\n"
        "decode reads %.1f MB of weights per token -> %.2f GB/s; memcpy bandwidth %.2f GB/s (read+write): "
        "%.1f%% of it\n",
        model.c_str(), (long long)c.num_hidden_layers, (long long)c.hidden_size,
        (long long)c.num_local_experts, (long long)c.num_experts_per_tok, (long long)c.vocab_size,
        volt::cpu_thread_pool().num_threads(), load_s, (long long)prompt_len, prompt_len / prefill_s,
        (long long)decode_tokens, decode_tps, 1000.0 / decode_tps, bytes / 1e6, bytes * decode_tps / 1e9,
        bw / 1e9, 100.0 * bytes * decode_tps / bw);
    return 0;
}
