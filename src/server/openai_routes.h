// The OpenAI-compatible routes of `voltllm serve` over the engine, the tokenizer and harmony:
// POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health, GET /load, POST /tokenize,
// POST /detokenize, GET /version, GET /metrics. /health tells the truth about the engine thread (its
// heartbeat, engine.h) and /load gives balancers the engine's queue and KV usage (docs/operations.md).
// Generation responses, streamed (SSE) or not, are a StreamBody (http_server.h) pumped on the connection's
// strand whenever the engine pushes output (the RequestHandle notify path) and every heartbeat: deltas, a
// heartbeat while idle (an SSE comment, or JSON-leading whitespace) so a vanished client is noticed within ~2
// heartbeats and its request aborted (KV freed). docs/api.md describes the behaviour. Tests:
// tests/unit/server/ openai_routes_test.cc (scripted executor) and tests/api/*.mjs (the official openai
// client).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "engine/engine.h"
#include "server/chat_mapping.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/request.h"
#include "tokenizer/harmony_encoding.h"

namespace volt::server {

struct RoutesConfig {
    std::vector<std::string> served_model_names;    // the first is reported; requests may name any
    std::vector<std::string> served_model_aliases;  // also accepted, never listed (vllm_flags.h)
    bool log_requests = false;                      // --enable-log-requests lines (request_log.h)
    int64_t max_log_len = -1;                       // prompt bytes in those lines; -1: all
    // --max-seqs-per-request: a request of more sequences (prompts x n) gets 400 naming the flag, at once
    // (it could never be admitted, or would hold everyone up). 0: no limit beyond admission.
    int64_t max_seqs_per_request = 0;
    std::string model_root;  // /v1/models "root": the model directory or preset
    // "Current date: ..." of the harmony system message; empty: today's UTC date at each request.
    std::string current_date;
    // Idle time after which a response writes a heartbeat (disconnect detection).
    std::chrono::milliseconds heartbeat{100};
    // --health-step-timeout: /health is 503 when the engine has work pending and its last step ended
    // (or its work arrived) longer ago than this (engine::engine_healthy).
    std::chrono::milliseconds health_step_bound{120000};
};

class OpenAiRoutes {
  public:
    // `server` must outlive this object. Registers every route at once; the API routes (generation,
    // /v1/models, /tokenize, /detokenize) answer 503 model_loading until set_engine().
    OpenAiRoutes(RoutesConfig config, HttpServer& server,
                 std::shared_ptr<const tokenizer::HarmonyEncoding> encoding);

    // The engine is ready: /health turns 200 and generation starts; the vLLM metrics (metrics.h) start
    // with it. Not owned; must outlive this object or be replaced by nullptr first.
    void set_engine(engine::Engine* engine);
    // Null until the first set_engine.
    std::shared_ptr<VllmMetrics> metrics() const { return metrics_; }
    // Copies the engine's totals and gauges into metrics() (each scrape, and the periodic stats line).
    void refresh_metrics();

  private:
    void chat(const HttpRequest& req, HttpResponse& res);
    void completions(const HttpRequest& req, HttpResponse& res);
    void tokenize(const HttpRequest& req, HttpResponse& res);
    void detokenize(const HttpRequest& req, HttpResponse& res);
    // While no engine is set (the model loads): answers 503 model_loading and returns true.
    bool answered_loading(HttpResponse& res);
    void models(HttpResponse& res);
    nlohmann::json model_json(const std::string& name) const;
    // build_conversation + the harmony render of the generation prompt (a forced call's header included).
    std::variant<tokenizer::HarmonyPrompt, ApiError> render_chat(
        const std::vector<ChatMessage>& messages, const std::optional<std::string>& effort,
        const std::vector<tokenizer::ToolDescription>& tools,
        const std::optional<std::string>& forced_function) const;
    void metrics(HttpResponse& res);
    void health(HttpResponse& res);
    void load(HttpResponse& res);

    RoutesConfig config_;
    HttpServer& server_;
    std::shared_ptr<const tokenizer::HarmonyEncoding> encoding_;
    std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;
    std::atomic<engine::Engine*> engine_{nullptr};
    std::shared_ptr<VllmMetrics> metrics_;  // written once, before engine_ first turns non-null
    std::atomic<int64_t> next_group_{0};    // Engine::submit's group: one per HTTP request
};

}  // namespace volt::server
