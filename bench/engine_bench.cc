// End-to-end CPU engine benchmark (not a test): many prompts at once through Engine + CpuExecutor,
// printing prefill and decode tokens/s, steps and preemptions. On a checkpoint (--model DIR) or, with no
// checkpoint, on a random model with gpt-oss's vocabulary (201,088) and small layers, which measures
// the engine, scheduler and sampler overhead around a cheap forward pass.
// usage: volt_engine_bench [--model DIR] [--num-prompts 32] [--prompt-len 128] [--max-tokens 32]
//        [--temperature 1] [--threads N] [engine flags: --max-num-seqs ...]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "core/logging.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "executor/cpu_executor.h"
#include "executor/engine_flags.h"
#include "model/loader.h"
#include "model/random_model.h"

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

volt::model::GptOssConfig random_config() {
    auto c = volt::model::testing::small_config(4);
    c.hidden_size = 256;
    c.intermediate_size = 256;
    c.head_dim = 64;
    c.num_attention_heads = 8;
    c.num_key_value_heads = 2;
    c.num_local_experts = 8;
    c.num_experts_per_tok = 2;
    c.vocab_size = 201088;
    c.sliding_window = 128;
    return c;
}
}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"voltllm CPU engine benchmark"};
    std::string model;
    int64_t num_prompts = 32, prompt_len = 128;
    int32_t max_tokens = 32;
    float temperature = 1.0f;
    int threads = 0;
    volt::executor::EngineFlags flags;
    flags.config.kv_cache_memory_bytes = int64_t{1} << 30;
    app.add_option("--model", model, "checkpoint directory; none: a random model");
    app.add_option("--num-prompts", num_prompts)->capture_default_str();
    app.add_option("--prompt-len", prompt_len)->capture_default_str();
    app.add_option("--max-tokens", max_tokens)->capture_default_str();
    app.add_option("--temperature", temperature)->capture_default_str();
    app.add_option("--threads", threads, "0: all hardware threads");
    volt::executor::add_engine_flags(&app, &flags);
    CLI11_PARSE(app, argc, argv);
    volt::init_logging("warning");
    volt::set_cpu_threads(threads);

    std::shared_ptr<const volt::model::ModelWeights> weights;
    if (model.empty()) {
        weights = volt::model::testing::random_model(random_config(), 1);
    } else {
        auto w = volt::model::load_model(model);
        if (!w.is_ok()) {
            std::fprintf(stderr, "error: %s\n", w.status().to_string().c_str());
            return 1;
        }
        weights = *w;
    }
    const auto& c = weights->config;
    auto engine =
        volt::engine::Engine::create(flags.config, std::make_unique<volt::executor::CpuExecutor>(weights));
    if (!engine.is_ok()) {
        std::fprintf(stderr, "error: %s\n", engine.status().to_string().c_str());
        return 1;
    }
    std::mt19937 rng(7);
    volt::engine::SamplingParams p;
    p.max_tokens = max_tokens;
    p.temperature = temperature;
    p.ignore_eos = true;
    std::vector<std::shared_ptr<volt::engine::RequestHandle>> handles;
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < num_prompts; ++i) {
        std::vector<int32_t> prompt(prompt_len);
        for (auto& t : prompt) t = static_cast<int32_t>(rng() % 200000);
        p.seed = i;
        auto h = (*engine)->submit(prompt, p);
        if (!h.is_ok()) {
            std::fprintf(stderr, "error: %s\n", h.status().to_string().c_str());
            return 1;
        }
        handles.push_back(*h);
    }
    // Poll every handle so each first-token time is seen when it happens.
    std::vector<double> first_token(handles.size(), -1.0);
    int64_t generated = 0;
    for (size_t done = 0; done < handles.size();) {
        bool any = false;
        done = 0;
        for (size_t i = 0; i < handles.size(); ++i) {
            volt::engine::RequestOutput o;
            while (handles[i]->next(&o, std::chrono::milliseconds(0))) {
                any = true;
                if (first_token[i] < 0 && !o.tokens.empty()) first_token[i] = seconds_since(t0);
                generated += static_cast<int64_t>(o.tokens.size());
            }
            done += handles[i]->done() ? 1 : 0;
        }
        if (!any) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const double first_token_s = *std::min_element(first_token.begin(), first_token.end());
    const double all_first_s = *std::max_element(first_token.begin(), first_token.end());
    const double total_s = seconds_since(t0);
    const auto st = (*engine)->stats();
    std::printf(
        "model %s: %lld layers, hidden %lld, vocab %lld; threads %d\n"
        "%lld prompts x %lld tokens, max_tokens %d, temperature %.2f; max_num_seqs %lld, "
        "max_num_batched_tokens %lld\n"
        "total %.2f s: %lld prompt tokens + %lld generated = %.1f tok/s overall, %.1f generated tok/s\n"
        "first token after %.3f s, every request's after %.3f s, then %.2f tok/s (decode phase)\n"
        "%lld steps (%.2f ms/step), %lld preemptions; KV blocks %lld full + %lld sliding\n",
        model.empty() ? "(random)" : model.c_str(), (long long)c.num_hidden_layers, (long long)c.hidden_size,
        (long long)c.vocab_size, volt::cpu_thread_pool().num_threads(), (long long)num_prompts,
        (long long)prompt_len, max_tokens, temperature, (long long)flags.config.max_num_seqs,
        (long long)flags.config.max_num_batched_tokens, total_s, (long long)st.prompt_tokens,
        (long long)generated, (st.prompt_tokens + generated) / total_s, generated / total_s, first_token_s,
        all_first_s, (generated - num_prompts) / std::max(1e-9, total_s - all_first_s),
        (long long)st.num_steps, 1000.0 * total_s / std::max<int64_t>(1, st.num_steps),
        (long long)st.num_preemptions, (long long)st.kv_blocks_total[0], (long long)st.kv_blocks_total[1]);
    std::printf("%lld preemptions swapped: %lld KV blocks out, %lld in\n",
                (long long)st.num_swapped_preemptions, (long long)st.kv_blocks_swapped_out,
                (long long)st.kv_blocks_swapped_in);
    return 0;
}
