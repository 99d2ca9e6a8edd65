// `voltllm perplexity`: per-token perplexity of a checkpoint on windows of token ids (a JSON array of
// arrays; each window is scored from its first token on an empty cache, positions 0..n-1), and with
// --ref-model the KL divergence KL(ref || model) per predicted token, in nats. Runs the CPU reference
// forward pass (model/sequence_runner.h) in fp32, or with --engine the serving path: every window is
// submitted to the engine at once (continuous batching, paged KV, chunked prefill) and scored from the
// prompt logprobs it returns (KL needs whole distributions, so it stays on the forward pass). Used for
// the demo model's held-out figures (tools/demo_model/README.md); checked against transformers'
// numbers in demo_model_test and the demo_perplexity_cli tests.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "executor/backend_executor.h"
#include "executor/engine_flags.h"
#include "model/loader.h"
#include "model/sequence_runner.h"
#include "tools/commands.h"
#include "tools/forward_session.h"

namespace volt::tools {
namespace {

// log-softmax of one row of logits, in double.
void log_softmax(const float* row, int64_t n, std::vector<double>& out) {
    double m = row[0];
    for (int64_t v = 1; v < n; ++v) m = std::max(m, double(row[v]));
    double sum = 0;
    for (int64_t v = 0; v < n; ++v) sum += std::exp(double(row[v]) - m);
    const double lse = m + std::log(sum);
    out.resize(n);
    for (int64_t v = 0; v < n; ++v) out[v] = double(row[v]) - lse;
}

// Negative log-likelihood summed over every window's tokens after the first, from the engine's prompt
// logprobs (vLLM's raw model logprobs), all windows in flight together.
double engine_nll(std::shared_ptr<const model::ModelWeights> weights,
                  const std::vector<std::vector<int32_t>>& windows, const executor::DeviceOptions& device) {
    auto fail = [](const Status& s) {
        std::fprintf(stderr, "error: %s\n", s.to_string().c_str());
        std::exit(1);
    };
    executor::EngineFlags flags;
    Result<std::unique_ptr<engine::Executor>> executor = internal_error("no executor");
    if (device.device == "cuda") {
        auto backend = executor::make_backend(device);
        if (!backend.is_ok()) fail(backend.status());
        auto ex = executor::BackendExecutor::create(weights, std::move(*backend), ops::Format::kF16);
        if (!ex.is_ok()) fail(ex.status());
        executor = std::unique_ptr<engine::Executor>(std::move(*ex));
    } else {
        executor = executor::make_executor(flags, weights);
    }
    if (!executor.is_ok()) fail(executor.status());
    auto eng = engine::Engine::create(flags.config, std::move(executor).value());
    if (!eng.is_ok()) fail(eng.status());
    engine::SamplingParams params;
    params.max_tokens = 1;
    params.temperature = 0.0f;
    params.ignore_eos = true;
    params.prompt_logprobs = 0;
    std::vector<std::shared_ptr<engine::RequestHandle>> handles;
    for (const auto& w : windows) {
        auto h = (*eng)->submit(w, params);
        if (!h.is_ok()) fail(h.status());
        handles.push_back(*h);
    }
    double nll = 0;
    for (size_t i = 0; i < handles.size(); ++i) {
        size_t scored = 0;
        engine::RequestOutput d;
        while (!handles[i]->done()) {
            if (!handles[i]->next(&d, std::chrono::milliseconds(100))) continue;
            for (const auto& lp : d.prompt_logprobs) nll -= lp.logprob;
            scored += d.prompt_logprobs.size();
        }
        if (scored + 1 != windows[i].size()) fail(internal_error("the engine returned no prompt logprobs"));
    }
    (*eng)->shutdown();
    return nll;
}

}  // namespace

void register_perplexity(CLI::App& app) {
    struct Options {
        std::string model, ref_model, chunks, kv_dtype = "auto";
        int64_t max_chunks = 0;
        bool engine = false, kv_f16 = false;
        executor::DeviceOptions device;
    };
    auto opt = std::make_shared<Options>();
    auto* cmd = app.add_subcommand(
        "perplexity", "Per-token perplexity (and KL from a reference model) on windows of token ids");
    cmd->add_option("--model", opt->model, "checkpoint directory")->required();
    cmd->add_option("--ref-model", opt->ref_model,
                    "reference checkpoint for KL(ref || model), same vocabulary");
    cmd->add_option("--chunks", opt->chunks, "JSON file: array of arrays of token ids")->required();
    cmd->add_option("--max-chunks", opt->max_chunks, "score only the first N windows (0: all)")
        ->capture_default_str();
    cmd->add_flag(
        "--engine", opt->engine,
        "score through the engine's prompt logprobs (all windows batched) instead of the forward pass");
    cmd->add_flag("--kv-cache-f16", opt->kv_f16, "forward path: store the KV cache in fp16 (default f32)");
    cmd->add_option("--kv-cache-dtype", opt->kv_dtype,
                    "forward path: auto (f32, or f16 with --kv-cache-f16) or int8 (CPU only); --ref-model "
                    "keeps the auto cache, so KL measures the int8 cache against it")
        ->capture_default_str();
    add_device_flags(cmd, &opt->device);
    cmd->callback([opt] {
        std::ifstream f(opt->chunks);
        const auto j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
        if (!f || j.is_discarded() || !j.is_array()) {
            std::fprintf(stderr, "error: %s is not a JSON array of arrays of ids\n", opt->chunks.c_str());
            std::exit(1);
        }
        const ops::Format kv = kv_format_or_exit(opt->kv_dtype, opt->kv_f16, opt->device);
        if (opt->engine && kv == ops::Format::kInt8) {
            std::fprintf(stderr, "error: --kv-cache-dtype is read by the forward path; drop --engine\n");
            std::exit(1);
        }
        const ops::Format ref_kv = opt->kv_f16 ? ops::Format::kF16 : ops::Format::kF32;
        ForwardSession session = open_forward_or_exit(opt->model, opt->device);
        ForwardSession ref;
        if (!opt->ref_model.empty()) ref = open_forward_or_exit(opt->ref_model, opt->device);
        const auto& weights = session.host;
        const auto& ref_weights = ref.host;
        const int64_t V = weights->config.vocab_size;
        if (ref_weights && ref_weights->config.vocab_size != V) {
            std::fprintf(stderr, "error: --ref-model has %lld ids, --model %lld\n",
                         static_cast<long long>(ref_weights->config.vocab_size), static_cast<long long>(V));
            std::exit(1);
        }
        model::Forward& fwd = *session.forward;
        model::Forward* ref_fwd = ref.forward.get();
        const auto t0 = std::chrono::steady_clock::now();
        double nll = 0, ref_nll = 0, kl = 0;
        int64_t tokens = 0, windows = 0;
        std::vector<double> lp, lq;
        if (opt->engine) {
            if (ref_weights) {
                std::fprintf(
                    stderr,
                    "error: --engine scores perplexity only; KL needs --ref-model without --engine\n");
                std::exit(1);
            }
            std::vector<std::vector<int32_t>> batch;
            for (const auto& chunk : j) {
                if (opt->max_chunks > 0 && static_cast<int64_t>(batch.size()) >= opt->max_chunks) break;
                auto ids = chunk.get<std::vector<int32_t>>();
                if (ids.size() < 2) continue;
                tokens += static_cast<int64_t>(ids.size()) - 1;
                batch.push_back(std::move(ids));
            }
            windows = static_cast<int64_t>(batch.size());
            if (windows > 0) nll = engine_nll(weights, batch, opt->device);
        }
        for (const auto& chunk : j) {
            if (opt->engine) break;
            if (opt->max_chunks > 0 && windows >= opt->max_chunks) break;
            const auto ids = chunk.get<std::vector<int32_t>>();
            if (ids.size() < 2) continue;
            for (int32_t id : ids) {
                if (id < 0 || id >= V) {
                    std::fprintf(stderr, "error: window %lld: id %d outside the vocabulary\n",
                                 static_cast<long long>(windows), id);
                    std::exit(1);
                }
            }
            const int64_t n = static_cast<int64_t>(ids.size());
            model::SequenceRunner run(fwd, n, 16, kv);
            const std::vector<float> logits = run.append(ids, /*all_rows=*/true);
            std::vector<float> ref_logits;
            if (ref_fwd) {
                model::SequenceRunner ref_run(*ref_fwd, n, 16, ref_kv);
                ref_logits = ref_run.append(ids, /*all_rows=*/true);
            }
            for (int64_t t = 0; t + 1 < n; ++t) {
                log_softmax(logits.data() + t * V, V, lq);
                nll -= lq[ids[t + 1]];
                if (ref_fwd) {
                    log_softmax(ref_logits.data() + t * V, V, lp);
                    ref_nll -= lp[ids[t + 1]];
                    for (int64_t v = 0; v < V; ++v) kl += std::exp(lp[v]) * (lp[v] - lq[v]);
                }
            }
            tokens += n - 1;
            ++windows;
            if (windows % 25 == 0) {
                std::fprintf(stderr, "%lld windows, %lld tokens, ppl so far %.4f\n",
                             static_cast<long long>(windows), static_cast<long long>(tokens),
                             std::exp(nll / tokens));
            }
        }
        if (tokens == 0) {
            std::fprintf(stderr, "error: no window with at least 2 ids in %s\n", opt->chunks.c_str());
            std::exit(1);
        }
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        nlohmann::ordered_json out = {{"windows", windows},  {"tokens", tokens},
                                      {"nll", nll / tokens}, {"ppl", std::exp(nll / tokens)},
                                      {"seconds", seconds},  {"path", opt->engine ? "engine" : "forward"}};
        if (ref_fwd) {
            out["ref_ppl"] = std::exp(ref_nll / tokens);
            out["kl_ref_model"] = kl / tokens;
        }
        std::printf("%s\n", out.dump().c_str());
    });
}

}  // namespace volt::tools
