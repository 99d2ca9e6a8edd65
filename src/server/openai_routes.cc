// Route handlers; see openai_routes.h. The chat -> harmony mapping is chat_mapping.h, the response shapes
// (OpenAI's chat.completion, chat.completion.chunk, text_completion; vLLM's reasoning_content) and the
// stream are response_builder.h; chat and completions share one prologue (parse, model, admission).
#include "server/openai_routes.h"

#include <spdlog/spdlog.h>

#include <ctime>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "core/version.h"
#include "server/chat_mapping.h"
#include "server/output_processor.h"
#include "server/request.h"
#include "server/request_log.h"
#include "server/response_builder.h"

namespace volt::server {

namespace {

bool known_model(const RoutesConfig& config, const std::string& model) {
    for (const auto* names : {&config.served_model_names, &config.served_model_aliases}) {
        for (const std::string& n : *names) {
            if (n == model) return true;
        }
    }
    return false;
}

ApiError model_not_found(const std::string& model) {
    return ApiError{404, "invalid_request_error", "The model '" + short_text(model) + "' does not exist.",
                    std::string("model"), std::string("model_not_found")};
}

// True when `prompt` + `max_tokens` tokens fit in `limit`. All three are >= 0, so the difference cannot
// overflow where the sum could (max_tokens may be anything up to 2^63 - 1).
bool fits_context(int64_t limit, int64_t prompt, int64_t max_tokens) { return max_tokens <= limit - prompt; }

// The 400 for prompt + max_tokens over the limit, with the numbers as sent. prompt and max_tokens are >= 0:
// their sum, in uint64_t, cannot wrap.
ApiError context_length_error(int64_t max_model_len, int64_t prompt, int64_t max_tokens, const char* what,
                              const char* param) {
    const uint64_t total = static_cast<uint64_t>(prompt) + static_cast<uint64_t>(max_tokens);
    std::string m = "This model's maximum context length is " + std::to_string(max_model_len) +
                    " tokens. However, you requested " + std::to_string(total) + " tokens (" +
                    std::to_string(prompt) + " in the " + what + ", " + std::to_string(max_tokens) +
                    " in the completion). Please reduce the length of the " + what + " or completion.";
    return ApiError{400, "invalid_request_error", std::move(m), std::string(param),
                    std::string("context_length_exceeded")};
}

ApiError loading_error() {
    return ApiError{503, "server_error", "The model is still loading.", std::nullopt,
                    std::string("model_loading")};
}

ApiError shutting_down_error() {
    return ApiError{503, "server_error", "The server is shutting down.", std::nullopt,
                    std::string("shutting_down")};
}

ApiError queue_full_error() {
    return ApiError{503, "server_error",
                    "The server is at capacity (running and queued requests); retry later.", std::nullopt,
                    std::string("queue_full")};
}

// The parsed engine parameters with the route's max_tokens (clamped to int32: the engine's type).
engine::SamplingParams to_engine(const GenerationParams& p, int64_t max_tokens) {
    engine::SamplingParams s = p.sampling;
    s.max_tokens = static_cast<int32_t>(std::min<int64_t>(max_tokens, std::numeric_limits<int32_t>::max()));
    return s;
}

}  // namespace

OpenAiRoutes::OpenAiRoutes(RoutesConfig config, HttpServer& server,
                           std::shared_ptr<const tokenizer::HarmonyEncoding> encoding)
    : config_(std::move(config)),
      server_(server),
      encoding_(std::move(encoding)),
      tokenizer_(encoding_->tokenizer_ptr()) {
    server_.get(
        "/health", [this](const HttpRequest&, HttpResponse& res) { health(res); }, true);
    server_.get(
        "/load", [this](const HttpRequest&, HttpResponse& res) { load(res); }, true);
    server_.get("/version", [](const HttpRequest&, HttpResponse& res) {
        HttpServer::send_json(res, 200, {{"version", VOLT_VERSION}});
    });
    server_.get("/v1/models", [this](const HttpRequest&, HttpResponse& res) { models(res); });
    server_.get(R"(/v1/models/(.+))", [this](const HttpRequest& req, HttpResponse& res) {
        if (answered_loading(res)) return;
        const std::string name = req.matches[1];
        if (!known_model(config_, name)) return server_.send_error(res, model_not_found(name));
        HttpServer::send_json(res, 200, model_json(name));
    });
    server_.get("/metrics", [this](const HttpRequest&, HttpResponse& res) { metrics(res); });
    server_.post("/v1/chat/completions", [this](const HttpRequest& q, HttpResponse& r) { chat(q, r); });
    server_.post("/v1/completions", [this](const HttpRequest& q, HttpResponse& r) { completions(q, r); });
    server_.post("/tokenize", [this](const HttpRequest& q, HttpResponse& r) { tokenize(q, r); });
    server_.post("/detokenize", [this](const HttpRequest& q, HttpResponse& r) { detokenize(q, r); });
}

// 200 only while the engine thread is alive and, with work pending, its last step ended within the
// bound; 503 while loading, draining, or stalled. The body carries the heartbeat, so that a prober can
// tell a slow but progressing engine (tokens still rising) from a stuck one.
void OpenAiRoutes::health(HttpResponse& res) {
    engine::Engine* engine = engine_.load();
    if (engine == nullptr || server_.draining()) {
        HttpServer::send_json(res, 503, {{"status", server_.draining() ? "shutting down" : "loading"}});
        return;
    }
    const engine::EngineHeartbeat hb = engine->heartbeat();
    const auto now = std::chrono::steady_clock::now();
    const bool ok = engine::engine_healthy(hb, now, config_.health_step_bound);
    const double since = std::chrono::duration<double>(now - hb.last_beat).count();
    json body = {{"status", ok ? "ok" : (hb.stopped ? "engine stopped" : "engine stalled")},
                 {"steps", hb.steps},
                 {"tokens", hb.tokens},
                 {"pending_requests", hb.pending_requests},
                 {"seconds_since_progress", since}};
    HttpServer::send_json(res, ok ? 200 : 503, body);
}

// For balancers: what the engine holds now (running and waiting sequences, KV blocks in use) and what
// the HTTP layer admitted; the heartbeat's counters too.
void OpenAiRoutes::load(HttpResponse& res) {
    engine::Engine* engine = engine_.load();
    json body = {{"admitted_sequences", server_.admitted()},
                 {"admitted_requests", server_.admitted_requests()},
                 {"ready", engine != nullptr && !server_.draining()}};
    if (engine) {
        const engine::EngineStats s = engine->stats();
        const engine::EngineHeartbeat hb = engine->heartbeat();
        int64_t used = 0, total = 0;
        for (int g = 0; g < 2; ++g) {
            used += s.kv_blocks_used[g];
            total += s.kv_blocks_total[g];
        }
        body["running"] = s.num_running_seqs;
        body["waiting"] = s.num_waiting_seqs;
        body["kv_cache_usage"] = total > 0 ? static_cast<double>(used) / static_cast<double>(total) : 0.0;
        body["steps"] = hb.steps;
        body["tokens"] = hb.tokens;
        body["pending_requests"] = hb.pending_requests;
    }
    HttpServer::send_json(res, 200, body);
}

nlohmann::json OpenAiRoutes::model_json(const std::string& name) const {
    json m = {{"id", name},
              {"object", "model"},
              {"created", 0},
              {"owned_by", "voltllm"},
              {"root", config_.model_root}};
    if (engine::Engine* engine = engine_.load()) m["max_model_len"] = engine->max_model_len();
    return m;
}

// vLLM listens only once the engine is ready, so its clients take any answer of /v1/models (or of another
// API route) for "ready": until set_engine, those routes answer 503 model_loading, as generation does.
// /health, /load, /metrics and /version still answer (docs/api.md "While the model loads").
bool OpenAiRoutes::answered_loading(HttpResponse& res) {
    if (engine_.load() != nullptr) return false;
    server_.send_error(res, loading_error());
    return true;
}

void OpenAiRoutes::models(HttpResponse& res) {
    if (answered_loading(res)) return;
    json data = json::array();
    for (const std::string& name : config_.served_model_names) data.push_back(model_json(name));
    HttpServer::send_json(res, 200, {{"object", "list"}, {"data", std::move(data)}});
}

std::variant<tokenizer::HarmonyPrompt, ApiError> OpenAiRoutes::render_chat(
    const std::vector<ChatMessage>& messages, const std::optional<std::string>& effort,
    const std::vector<tokenizer::ToolDescription>& tools,
    const std::optional<std::string>& forced_function) const {
    return render_chat_prompt(*encoding_, messages, effort, tools, forced_function, config_.current_date);
}

void OpenAiRoutes::set_engine(engine::Engine* engine) {
    if (engine && !metrics_) {
        metrics_ = std::make_shared<VllmMetrics>(config_.served_model_names.at(0), engine->max_model_len());
    }
    engine_.store(engine);
}

void OpenAiRoutes::refresh_metrics() {
    engine::Engine* engine = engine_.load();
    if (!engine || !metrics_) return;
    engine::EngineStats s = engine->stats();
    metrics_->set_engine_totals(s.prompt_tokens, s.generated_tokens, s.num_preemptions);
    for (int64_t tokens : engine->take_step_tokens()) metrics_->observe_iteration_tokens(tokens);
    metrics_->set_running(s.num_running_seqs);
    metrics_->set_waiting(s.num_waiting_seqs);
    const int64_t total = s.kv_blocks_total[0] + s.kv_blocks_total[1];
    metrics_->set_kv_cache_usage(
        total > 0 ? static_cast<double>(s.kv_blocks_used[0] + s.kv_blocks_used[1]) / total : 0.0);
}

void OpenAiRoutes::metrics(HttpResponse& res) {
    refresh_metrics();
    // vLLM's families (docs/metrics.md), then ours: KV blocks per group and admissions.
    std::string out = metrics_ ? metrics_->render() : std::string();
    auto line = [&](const std::string& name, int64_t v) { out += name + " " + std::to_string(v) + "\n"; };
    line("voltllm_requests_admitted", server_.admitted_requests());
    line("voltllm_sequences_admitted", server_.admitted());
    if (engine::Engine* engine = engine_.load()) {
        engine::EngineStats s = engine->stats();
        line("voltllm_num_requests_running", s.num_running_seqs);
        line("voltllm_num_requests_waiting", s.num_waiting_seqs);
        line("voltllm_kv_blocks_used{group=\"full\"}", s.kv_blocks_used[0]);
        line("voltllm_kv_blocks_used{group=\"sliding\"}", s.kv_blocks_used[1]);
        line("voltllm_kv_blocks_total{group=\"full\"}", s.kv_blocks_total[0]);
        line("voltllm_kv_blocks_total{group=\"sliding\"}", s.kv_blocks_total[1]);
        line("voltllm_prompt_tokens_total", s.prompt_tokens);
        line("voltllm_generation_tokens_total", s.generated_tokens);
        line("voltllm_num_preemptions_total", s.num_preemptions);
        line("voltllm_requests_finished_total", s.requests_finished);
    }
    res.status = 200;
    res.set_content(out, "text/plain; version=0.0.4; charset=utf-8");
}

namespace {

// Unknown request fields are accepted and ignored as in vLLM; each name is logged once per process.
void warn_unknown_fields(const std::vector<std::string>& names, const char* route) {
    static std::mutex mu;
    static std::unordered_set<std::string> seen;
    // Clients choose the names: keep short prefixes, and a bounded number of them.
    constexpr size_t kMaxRemembered = 1024;
    for (const std::string& name : names) {
        std::lock_guard<std::mutex> lock(mu);
        if (seen.size() >= kMaxRemembered) return;
        if (std::string key = short_text(name); seen.insert(key).second) {
            spdlog::warn("{}: ignoring the unknown request field '{}' (logged once per field name)", route,
                         key);
        }
    }
}

// A request of more sequences than --max-seqs-per-request (prompts x n; both are bounded by the parser,
// so the product cannot overflow): 400 naming the limit, instead of a 503 that retrying never cures.
std::optional<ApiError> too_wide(const RoutesConfig& config, int64_t n, int64_t prompts) {
    const int64_t seqs = n * prompts;
    if (config.max_seqs_per_request <= 0 || seqs <= config.max_seqs_per_request) return std::nullopt;
    return ApiError{400, "invalid_request_error",
                    "This request asks for " + std::to_string(seqs) + " sequences (" +
                        std::to_string(prompts) + " prompt(s) x n = " + std::to_string(n) +
                        "); the server allows " + std::to_string(config.max_seqs_per_request) +
                        " per request (--max-seqs-per-request).",
                    std::string(prompts > 1 ? "prompt" : "n"), std::string("too_many_sequences")};
}

// Sends an ApiError from a Status of Engine::submit.
ApiError submit_error(const Status& s, const char* param) {
    if (s.code() == StatusCode::kOutOfRange) {
        return api_error_from_status(s, std::string(param), std::string("context_length_exceeded"));
    }
    if (s.code() == StatusCode::kResourceExhausted) return queue_full_error();
    return api_error_from_status(s);
}

// The prologue shared by chat and completions: the engine is up, the body is JSON within the limits,
// the route's schema holds, the model is one we serve; unknown fields are logged. nullopt: the error was
// answered.
template <typename Parsed, typename Parse>
std::optional<Parsed> generation_prologue(HttpServer& server, const RoutesConfig& config,
                                          const engine::Engine* engine, const HttpRequest& req,
                                          HttpResponse& res, Parse parse, const char* route) {
    auto fail = [&](const ApiError& e) {
        server.send_error(res, e);
        return std::optional<Parsed>();
    };
    if (!engine) return fail(loading_error());
    auto body = parse_json_body(req.body);
    if (auto* e = std::get_if<ApiError>(&body)) return fail(*e);
    auto parsed = parse(std::get<RequestJson>(body));
    if (auto* e = std::get_if<ApiError>(&parsed)) return fail(*e);
    Parsed& r = std::get<Parsed>(parsed);
    if (!known_model(config, r.model)) return fail(model_not_found(r.model));
    warn_unknown_fields(r.unknown_fields, route);
    return std::move(r);
}

// Admission of a request of `prompts` x `n` sequences (the second half of the prologue, once the prompt
// is known to fit): 400 past --max-seqs-per-request, 503 when full or draining. Null: answered.
HttpServer::Ticket admit(HttpServer& server, const RoutesConfig& config, HttpResponse& res, int32_t n,
                         int64_t prompts, const char* what) {
    if (std::optional<ApiError> e = too_wide(config, n, prompts)) {
        server.send_error(res, *e);
        return nullptr;
    }
    HttpServer::Ticket ticket = server.try_admit(what, prompts * n);
    if (!ticket) server.send_error(res, server.draining() ? shutting_down_error() : queue_full_error());
    return ticket;
}

}  // namespace

void OpenAiRoutes::chat(const HttpRequest& req, HttpResponse& res) {
    const Clock::time_point arrival = Clock::now();
    engine::Engine* engine = engine_.load();
    std::optional<ChatRequest> parsed = generation_prologue<ChatRequest>(
        server_, config_, engine, req, res, parse_chat_request, "/v1/chat/completions");
    if (!parsed) return;
    ChatRequest& r = *parsed;

    auto prompt = render_chat(r.messages, r.reasoning_effort, r.tools, r.forced_function);
    if (auto* e = std::get_if<ApiError>(&prompt)) return server_.send_error(res, *e);
    std::vector<int32_t> ids = std::move(std::get<tokenizer::HarmonyPrompt>(prompt).ids);
    const std::vector<int32_t> parser_prefix =
        std::move(std::get<tokenizer::HarmonyPrompt>(prompt).parser_prefix);

    const int64_t limit = engine->max_model_len();
    const int64_t n_prompt = static_cast<int64_t>(ids.size());
    int64_t max_tokens = r.params.max_tokens ? *r.params.max_tokens : limit - n_prompt;
    if (!fits_context(limit, n_prompt, std::max<int64_t>(max_tokens, 1))) {
        return server_.send_error(res, context_length_error(limit, n_prompt, std::max<int64_t>(max_tokens, 1),
                                                            "messages", "messages"));
    }
    engine::SamplingParams sp = to_engine(r.params, max_tokens);
    for (int32_t id : encoding_->stop_token_ids()) sp.stop_token_ids.push_back(id);

    HttpServer::Ticket ticket =
        admit(server_, config_, res, r.params.sampling.n, 1, "POST /v1/chat/completions");
    if (!ticket) return;
    const std::string prompt_log = config_.log_requests ? tokenizer_->decode(ids, false) : std::string();
    auto handle = engine->submit(std::move(ids), sp, next_group_.fetch_add(1));
    if (!handle.is_ok()) return server_.send_error(res, submit_error(handle.status(), "messages"));

    auto job = std::make_shared<Job>();
    job->chat = true;
    job->stream = r.params.stream;
    job->include_usage = r.params.include_usage;
    init_job(*job, req, res, "chatcmpl-", r.params, metrics_, config_, arrival, n_prompt, prompt_log);
    server_.describe(ticket, job->id + " (POST /v1/chat/completions)");
    job->logprobs = r.params.sampling.logprobs;
    job->tok = tokenizer_;
    job->model = r.model;
    job->created = static_cast<int64_t>(std::time(nullptr));
    SubRequest sub;
    sub.handle = *handle;
    sub.prompt_tokens = n_prompt;
    std::vector<std::string> functions;
    for (const auto& t : r.tools) functions.push_back(t.name);
    for (int32_t i = 0; i < r.params.sampling.n; ++i) {
        ChoiceState c;
        c.index = i;
        ChatProcessorOptions po;
        po.stops = r.params.stop;
        po.include_stop = r.params.include_stop_str_in_output;
        po.functions = functions;
        // Clients send the ids back with the results, so they are unique per request and choice.
        po.call_id_prefix = "call_" + job->id.substr(job->id.find('-') + 1) + "_" + std::to_string(i) + "_";
        po.prefix = parser_prefix;
        c.proc = make_chat_processor(encoding_, std::move(po));
        sub.choices.push_back(std::move(c));
    }
    job->subs.push_back(std::move(sub));
    start_response(res, std::move(job), std::move(ticket), config_.heartbeat);
}

void OpenAiRoutes::completions(const HttpRequest& req, HttpResponse& res) {
    const Clock::time_point arrival = Clock::now();
    engine::Engine* engine = engine_.load();
    std::optional<CompletionRequest> parsed = generation_prologue<CompletionRequest>(
        server_, config_, engine, req, res, parse_completion_request, "/v1/completions");
    if (!parsed) return;
    CompletionRequest& r = *parsed;

    const int64_t limit = engine->max_model_len();
    const int64_t max_tokens = r.params.max_tokens.value_or(16);  // the OpenAI default for completions
    std::vector<std::vector<int32_t>> prompts;
    for (const Prompt& p : r.prompts) {
        std::vector<int32_t> ids;
        if (const auto* text = std::get_if<std::string>(&p)) {
            auto enc = tokenizer_->encode(*text, tokenizer::SpecialTokens::kRecognise);
            if (!enc.is_ok())
                return server_.send_error(res, api_error_from_status(enc.status(), std::string("prompt")));
            ids = std::move(*enc);
        } else {
            ids = std::get<std::vector<int32_t>>(p);
            for (int32_t id : ids) {
                if (id >= tokenizer_->vocab_size()) {
                    return server_.send_error(
                        res, bad_field("prompt", "Token id " + std::to_string(id) +
                                                     " in 'prompt' is out of the vocabulary (" +
                                                     std::to_string(tokenizer_->vocab_size()) + " ids)."));
                }
            }
        }
        const int64_t n_prompt = static_cast<int64_t>(ids.size());
        if (!fits_context(limit, n_prompt, max_tokens)) {
            return server_.send_error(res,
                                      context_length_error(limit, n_prompt, max_tokens, "prompt", "prompt"));
        }
        prompts.push_back(std::move(ids));
    }

    HttpServer::Ticket ticket = admit(server_, config_, res, r.params.sampling.n,
                                      static_cast<int64_t>(prompts.size()), "POST /v1/completions");
    if (!ticket) return;
    const int64_t group = next_group_.fetch_add(1);
    int64_t total_prompt = 0;
    std::string prompt_log;
    for (const auto& p : prompts) {
        total_prompt += static_cast<int64_t>(p.size());
        if (config_.log_requests) prompt_log += tokenizer_->decode(p, false);
    }
    auto job = std::make_shared<Job>();
    job->chat = false;
    job->stream = r.params.stream;
    job->include_usage = r.params.include_usage;
    init_job(*job, req, res, "cmpl-", r.params, metrics_, config_, arrival, total_prompt, prompt_log);
    server_.describe(ticket, job->id + " (POST /v1/completions)");
    job->logprobs = r.params.sampling.logprobs;
    job->tok = tokenizer_;
    job->model = r.model;
    job->created = static_cast<int64_t>(std::time(nullptr));
    // max_tokens 0 (echo): one engine step still runs, for the prompt logprobs; its token is dropped.
    engine::SamplingParams sp = to_engine(r.params, std::max<int64_t>(max_tokens, 1));
    // Echo with logprobs scores the prompt too (not while streaming: the echo is sent before any step).
    if (r.echo && r.params.sampling.logprobs >= 0 && !r.params.stream)
        sp.prompt_logprobs = r.params.sampling.logprobs;
    for (size_t i = 0; i < prompts.size(); ++i) {
        SubRequest sub;
        sub.prompt_tokens = static_cast<int64_t>(prompts[i].size());
        if (r.echo) sub.echo = tokenizer_->decode(prompts[i], false);
        if (sp.prompt_logprobs >= 0) sub.prompt_ids = prompts[i];
        sub.prompt_only = r.prompt_only;
        auto handle = engine->submit(std::move(prompts[i]), sp, group);
        // A failure aborts the requests already submitted (the Job's destructor).
        if (!handle.is_ok()) return server_.send_error(res, submit_error(handle.status(), "prompt"));
        sub.handle = *handle;
        for (int32_t j = 0; j < r.params.sampling.n; ++j) {
            ChoiceState c;
            c.index = static_cast<int>(i) * r.params.sampling.n + j;
            c.proc = make_text_processor(tokenizer_, r.params.stop, r.params.skip_special_tokens,
                                         r.params.include_stop_str_in_output);
            sub.choices.push_back(std::move(c));
        }
        job->subs.push_back(std::move(sub));
    }
    start_response(res, std::move(job), std::move(ticket), config_.heartbeat);
}

void OpenAiRoutes::tokenize(const HttpRequest& req, HttpResponse& res) {
    if (answered_loading(res)) return;
    auto body = parse_json_body(req.body);
    if (auto* e = std::get_if<ApiError>(&body)) return server_.send_error(res, *e);
    auto parsed = parse_tokenize_request(std::get<RequestJson>(body));
    if (auto* e = std::get_if<ApiError>(&parsed)) return server_.send_error(res, *e);
    TokenizeRequest& r = std::get<TokenizeRequest>(parsed);
    if (!r.model.empty() && !known_model(config_, r.model))
        return server_.send_error(res, model_not_found(r.model));
    std::vector<int32_t> ids;
    if (r.prompt) {
        auto enc = tokenizer_->encode(*r.prompt, r.add_special_tokens ? tokenizer::SpecialTokens::kRecognise
                                                                      : tokenizer::SpecialTokens::kIgnore);
        if (!enc.is_ok())
            return server_.send_error(res, api_error_from_status(enc.status(), std::string("prompt")));
        ids = std::move(*enc);
    } else {
        auto prompt = render_chat(r.messages, r.reasoning_effort, r.tools, r.forced_function);
        if (auto* e = std::get_if<ApiError>(&prompt)) return server_.send_error(res, *e);
        ids = std::move(std::get<tokenizer::HarmonyPrompt>(prompt).ids);
    }
    json out = {{"count", ids.size()}, {"tokens", ids}};
    if (engine::Engine* engine = engine_.load()) out["max_model_len"] = engine->max_model_len();
    HttpServer::send_json(res, 200, out);
}

void OpenAiRoutes::detokenize(const HttpRequest& req, HttpResponse& res) {
    if (answered_loading(res)) return;
    auto body = parse_json_body(req.body);
    if (auto* e = std::get_if<ApiError>(&body)) return server_.send_error(res, *e);
    auto parsed = parse_detokenize_request(std::get<RequestJson>(body));
    if (auto* e = std::get_if<ApiError>(&parsed)) return server_.send_error(res, *e);
    DetokenizeRequest& r = std::get<DetokenizeRequest>(parsed);
    if (!r.model.empty() && !known_model(config_, r.model))
        return server_.send_error(res, model_not_found(r.model));
    for (int32_t id : r.tokens) {
        if (id >= tokenizer_->vocab_size()) {
            return server_.send_error(
                res, bad_field("tokens", "Token id " + std::to_string(id) + " is out of the vocabulary (" +
                                             std::to_string(tokenizer_->vocab_size()) + " ids)."));
        }
    }
    // Bytes that are not valid UTF-8 on their own (a token ending mid-character) become U+FFFD in JSON.
    HttpServer::send_json(res, 200, {{"prompt", tokenizer_->decode(r.tokens, false)}});
}

}  // namespace volt::server
