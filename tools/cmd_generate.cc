// `voltllm generate`: runs prompts through the engine (continuous batching on the CPU executor, or with
// --device cuda on the GPU through the BackendExecutor) and
// prints each completion, then the throughput. Prompts: token ids, a text (special tokens recognised, like
// completions), a chat message (rendered with harmony; reasoning and answer printed apart), or a file
// with one text prompt per line (all submitted at once). With no --model: the default model. --logprobs K
// also prints each generated token's logprob and top K (%.9g: every bit of the float). Started as one rank
// of several processes (torchrun's WORLD_SIZE / RANK / MASTER_ADDR / MASTER_PORT, or --nnodes
// --node-rank --master-addr --master-port; docs/parallel.md), rank 0 generates and prints, the other
// ranks serve its steps and print "rank r of n: done".
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>

#include "core/logging.h"
#include "engine/engine.h"
#include "executor/backend_executor.h"
#include "executor/backend_factory.h"
#include "executor/engine_flags.h"
#include "io/model_path.h"
#include "model/loader.h"
#include "tokenizer/harmony_encoding.h"
#include "tokenizer/harmony_parser.h"
#include "tokenizer/tokenizer.h"
#include "tools/commands.h"
#include "tools/default_model.h"
#include "tools/forward_session.h"

namespace volt::tools {

namespace {

struct GenerateArgs {
    std::string model, prompt_ids, prompt, chat, prompts_file, reasoning_effort = "low";
    int32_t max_tokens = 64;
    float temperature = 0.0f, top_p = 1.0f, repetition_penalty = 1.0f;
    int32_t top_k = 0;
    std::string logit_bias;  // "ID:VALUE,ID:VALUE"
    int32_t logprobs = -1;
    std::optional<uint64_t> seed;
    bool ignore_eos = false;
    int32_t repeat = 1;  // runs of the same prompts on one loaded engine (timings of each)
    executor::EngineFlags engine;
};

[[noreturn]] void fail(const std::string& message) {
    std::fprintf(stderr, "error: %s\n", message.c_str());
    std::exit(1);
}

template <typename T>
T or_fail(Result<T> r) {
    if (!r.is_ok()) fail(r.status().to_string());
    return std::move(r).value();
}

std::string today() {
    std::time_t t = std::time(nullptr);
    char buf[16];
    std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&t));
    return buf;
}

void run(const GenerateArgs& a) {
    const int modes = !a.prompt_ids.empty() + !a.prompt.empty() + !a.chat.empty() + !a.prompts_file.empty();
    if (modes > 1) fail("give one of --prompt-ids, --prompt, --chat, --prompts-file");
    Status flags = executor::check_engine_flags(a.engine);
    if (!flags.is_ok()) fail(flags.to_string());
    const executor::ProcessLaunch launch = or_fail(executor::process_launch(a.engine));
    // A directory, or `org/name` looked up offline in the Hugging Face cache (io/model_path.h).
    io::ModelPathOptions mo;
    mo.env = io::model_path_environment();
    const std::string dir =
        a.model.empty() ? or_fail(resolve_default_model()) : or_fail(io::resolve_model_path(a.model, mo));
    std::shared_ptr<const model::ModelWeights> weights = or_fail(executor::load_weights(a.engine, dir));
    if (launch.rank > 0) {  // a worker: rank 0 has the prompts and prints
        const Status worked = executor::run_process_worker(a.engine, weights, launch);
        if (!worked.is_ok()) fail("rank " + std::to_string(launch.rank) + ": " + worked.to_string());
        std::fprintf(stderr, "rank %d of %d: done\n", launch.rank, launch.world_size);
        return;
    }
    std::shared_ptr<const tokenizer::Tokenizer> tok;
    if (std::ifstream(dir + "/tokenizer.json"))
        tok = or_fail(tokenizer::Tokenizer::from_file(dir + "/tokenizer.json"));
    const bool need_tok = !a.prompt.empty() || !a.chat.empty() || !a.prompts_file.empty() || modes == 0;
    if (need_tok && !tok) fail(dir + " has no tokenizer.json: give --prompt-ids");

    // Prompts as ids.
    std::vector<std::vector<int32_t>> prompts;
    std::shared_ptr<const tokenizer::HarmonyEncoding> harmony;
    std::vector<int32_t> stop_ids;
    const std::string chat =
        modes == 0 ? std::string("Tell me a short story about a lighthouse keeper.") : a.chat;
    if (!a.prompt_ids.empty()) {
        prompts.push_back(parse_id_list(a.prompt_ids));
    } else if (!a.prompt.empty()) {
        prompts.push_back(or_fail(tok->encode(a.prompt, tokenizer::SpecialTokens::kRecognise)));
    } else if (!a.prompts_file.empty()) {
        std::ifstream f(a.prompts_file);
        if (!f) fail("cannot open " + a.prompts_file);
        for (std::string line; std::getline(f, line);)
            if (!line.empty())
                prompts.push_back(or_fail(tok->encode(line, tokenizer::SpecialTokens::kRecognise)));
        if (prompts.empty()) fail(a.prompts_file + " holds no prompt");
    } else {
        harmony = or_fail(tokenizer::HarmonyEncoding::create(tok));
        tokenizer::HarmonyConversation conv;
        tokenizer::SystemOptions sys;
        sys.current_date = today();
        sys.reasoning_effort = a.reasoning_effort == "high"     ? tokenizer::ReasoningEffort::kHigh
                               : a.reasoning_effort == "medium" ? tokenizer::ReasoningEffort::kMedium
                                                                : tokenizer::ReasoningEffort::kLow;
        conv.system = sys;
        conv.messages.push_back(tokenizer::HarmonyMessage::user(chat));
        prompts.push_back(or_fail(harmony->render_for_completion(conv)).ids);
        stop_ids = harmony->stop_token_ids();
    }

    engine::EngineConfig config = a.engine.config;
    if (tok) config.vocab_size_real = tok->vocab_size();
    // --device cuda: the BackendExecutor over the CUDA backend (f16 KV cache), memory planned as vLLM's.
    std::unique_ptr<engine::Executor> executor = or_fail(executor::make_executor(a.engine, weights, &config));
    auto eng = or_fail(engine::Engine::create(config, std::move(executor)));
    engine::SamplingParams params;
    params.max_tokens = a.max_tokens;
    params.temperature = a.temperature;
    params.top_p = a.top_p;
    params.top_k = a.top_k;
    params.repetition_penalty = a.repetition_penalty;
    std::stringstream bias(a.logit_bias);
    for (std::string item; std::getline(bias, item, ',');) {
        const size_t colon = item.find(':');
        char* end = nullptr;
        const long id = colon == std::string::npos ? -1 : std::strtol(item.c_str(), &end, 10);
        if (colon == std::string::npos || end != item.c_str() + colon || id < 0 ||
            id >= weights->config.vocab_size)
            fail("--logit-bias: '" + item + "' is not ID:VALUE with an id of the vocabulary");
        params.logit_bias.emplace_back(static_cast<int32_t>(id), std::stof(item.substr(colon + 1)));
    }
    params.seed = a.seed;
    params.ignore_eos = a.ignore_eos;
    params.logprobs = a.logprobs;
    params.stop_token_ids = stop_ids;

    // One run: every prompt submitted at once, the outputs collected; its wall time. --repeat N runs the
    // same prompts N times on the loaded engine (no prefix cache, so each run does the same work) and prints
    // each run's throughput line: one process, one load, N timings (the 120b rows of bench/compare).
    std::vector<std::vector<int32_t>> outputs(prompts.size());
    std::vector<std::vector<engine::TokenLogprob>> logprobs(prompts.size());
    std::vector<engine::FinishReason> finish(prompts.size());
    std::vector<std::string> errors;
    int64_t prompt_tokens = 0;
    for (const auto& p : prompts) prompt_tokens += static_cast<int64_t>(p.size());
    auto run_once = [&](int run) {
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<std::shared_ptr<engine::RequestHandle>> handles;
        for (const auto& p : prompts) handles.push_back(or_fail(eng->submit(p, params)));
        std::vector<std::vector<int32_t>> out(handles.size());
        for (size_t i = 0; i < handles.size(); ++i) {
            engine::RequestOutput d;
            while (!handles[i]->done()) {
                if (!handles[i]->next(&d, std::chrono::milliseconds(100))) continue;
                out[i].insert(out[i].end(), d.tokens.begin(), d.tokens.end());
                if (run == 0) {
                    logprobs[i].insert(logprobs[i].end(), d.logprobs.begin(), d.logprobs.end());
                    if (d.finish != engine::FinishReason::kNone) finish[i] = d.finish;
                }
                if (d.finish == engine::FinishReason::kError && !d.error.empty())
                    errors.push_back(
                        (a.repeat > 1 ? "run " + std::to_string(run + 1) + ", " : std::string()) + "prompt " +
                        std::to_string(i) + ": " + d.error);
            }
        }
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        int64_t generated = 0;
        for (const auto& o : out) generated += static_cast<int64_t>(o.size());
        if (run == 0) {
            outputs = std::move(out);
        } else if (a.temperature == 0.0f && out != outputs) {
            // Greedy runs of the same prompts must give the same ids (batch invariance, no hidden state).
            errors.push_back("run " + std::to_string(run + 1) +
                             " of --repeat gave other token ids than run 1 (greedy)");
        }
        std::fprintf(
            stderr,
            "%s%zu prompts, %lld prompt tokens, %lld generated tokens in %.3f s: %.1f generated tok/s\n",
            a.repeat > 1 ? ("run " + std::to_string(run + 1) + "/" + std::to_string(a.repeat) + ": ").c_str()
                         : "",
            prompts.size(), static_cast<long long>(prompt_tokens), static_cast<long long>(generated), seconds,
            generated / seconds);
    };
    for (int run = 0; run < a.repeat; ++run) run_once(run);
    const engine::EngineStats st = eng->stats();
    eng->shutdown();

    for (size_t i = 0; i < outputs.size(); ++i) {
        const char* reason = finish[i] == engine::FinishReason::kStop    ? "stop"
                             : finish[i] == engine::FinishReason::kError ? "error"
                                                                         : "length";
        if (harmony) {
            auto parsed = tokenizer::parse_completion(harmony, outputs[i]);
            std::cout << "user: " << chat << "\nreasoning: " << parsed.reasoning
                      << "\nanswer: " << parsed.content << "\n[finish: " << reason << "]\n";
        } else if (tok) {
            std::cout << (prompts.size() > 1 ? "[" + std::to_string(i) + "] " : "") << tok->decode(outputs[i])
                      << "\n[finish: " << reason << "]\n";
        } else {
            std::cout << "[";
            for (size_t j = 0; j < outputs[i].size(); ++j) std::cout << (j ? "," : "") << outputs[i][j];
            std::cout << "]\n[finish: " << reason << "]\n";
        }
        for (const engine::TokenLogprob& lp : logprobs[i]) {
            char buf[64];
            std::snprintf(buf, sizeof buf, "%d %.9g", lp.token, lp.logprob);
            std::cout << "[logprob] " << buf << " top";
            for (const auto& [id, v] : lp.top) {
                std::snprintf(buf, sizeof buf, " %d:%.9g", id, v);
                std::cout << buf;
            }
            std::cout << "\n";
        }
    }
    std::fprintf(stderr, "%lld steps, %lld preemptions (%lld swapped: %lld KV blocks out, %lld in)\n",
                 static_cast<long long>(st.num_steps), static_cast<long long>(st.num_preemptions),
                 static_cast<long long>(st.num_swapped_preemptions),
                 static_cast<long long>(st.kv_blocks_swapped_out),
                 static_cast<long long>(st.kv_blocks_swapped_in));
    for (const std::string& e : errors) std::fprintf(stderr, "generate: %s\n", e.c_str());
    if (!errors.empty()) std::exit(1);
}

}  // namespace

void register_generate(CLI::App& app) {
    auto a = std::make_shared<GenerateArgs>();
    auto* cmd = app.add_subcommand(
        "generate", "Generate from prompts on the engine (CPU or --device cuda); prints throughput");
    cmd->add_option("--model", a->model,
                    "checkpoint directory or org/name in the HF cache (default: the embedded default model)");
    cmd->add_option("--prompt-ids", a->prompt_ids, "comma-separated token ids");
    cmd->add_option("--prompt", a->prompt, "a text prompt (special tokens recognised)");
    cmd->add_option("--chat", a->chat, "a user message, rendered with harmony (the default mode)");
    cmd->add_option("--prompts-file", a->prompts_file, "a file of text prompts, one per line, run together");
    cmd->add_option("--reasoning-effort", a->reasoning_effort, "low, medium, high (chat)")
        ->capture_default_str();
    cmd->add_option("--max-tokens", a->max_tokens)->capture_default_str();
    cmd->add_option("--temperature", a->temperature, "0: greedy")->capture_default_str();
    cmd->add_option("--top-p", a->top_p)->capture_default_str();
    cmd->add_option("--top-k", a->top_k, "0: off")->capture_default_str();
    cmd->add_option("--seed", a->seed);
    cmd->add_option("--repetition-penalty", a->repetition_penalty,
                    "vLLM's repetition penalty on prompt and output tokens (1: off)")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    cmd->add_option("--logit-bias", a->logit_bias, "added to the logits of token ids: ID:VALUE,ID:VALUE");
    cmd->add_option("--logprobs", a->logprobs,
                    "also print each generated token's logprob and its top K (0..20; -1: none)")
        ->check(CLI::Range(-1, 20))
        ->capture_default_str();
    cmd->add_flag("--ignore-eos", a->ignore_eos);
    cmd->add_option(
           "--repeat", a->repeat,
           "run the same prompts N times on the loaded engine, a throughput line each (greedy runs must "
           "give the same ids, else exit 1); the outputs and logprobs printed are run 1's")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str();
    executor::add_engine_flags(cmd, &a->engine);
    cmd->add_option("--dtype", a->engine.device.dtype,
                    "auto, half, float or bfloat16 (GPU operands; auto: half on sm_70)")
        ->check(CLI::IsMember({"auto", "half", "float16", "float", "float32", "bfloat16"}))
        ->capture_default_str();
    cmd->callback([a] { run(*a); });
}

}  // namespace volt::tools
