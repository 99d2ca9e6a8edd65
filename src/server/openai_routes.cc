// Route handlers and the generation loop; see openai_routes.h. Response shapes follow the OpenAI API
// reference (chat.completion, chat.completion.chunk, text_completion) and vLLM's extensions
// (reasoning_content + reasoning, /tokenize, /detokenize, /version).
#include "server/openai_routes.h"

#include <spdlog/spdlog.h>

#include <ctime>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "core/version.h"
#include "server/output_processor.h"
#include "server/request.h"
#include "server/request_log.h"

namespace volt::server {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

std::string to_text(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string today_utc() {
    std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[16];
    std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
    return buf;
}

const char* finish_name(engine::FinishReason r) {
    switch (r) {
        case engine::FinishReason::kStop:
            return "stop";
        case engine::FinishReason::kLength:
            return "length";
        case engine::FinishReason::kAbort:
            return "abort";
        case engine::FinishReason::kNone:
            break;
    }
    return "stop";
}

// One choice of one engine request.
struct ChoiceState {
    int index = 0;  // the choice's index in the response
    std::unique_ptr<OutputProcessor> proc;
    std::string content, reasoning;  // accumulated for non-streaming responses
    std::optional<std::string> finish;
    bool counted_stop_token = false;
    // Non-streaming with logprobs: chat {"content": [...]}, completions {"tokens", "token_logprobs",
    // "top_logprobs", "text_offset"}; built as tokens arrive.
    json logprobs;
    json tool_calls = json::array();  // non-streaming: [{"id", "type", "function": {"name", "arguments"}}]
    int num_tool_calls = 0;
    int64_t text_offset = 0;  // completions: characters of the text so far (text_offset entries)
    int64_t tokens() const { return proc->num_tokens() + (counted_stop_token ? 1 : 0); }
};

// Code points of UTF-8 text (OpenAI's text_offset counts characters).
int64_t count_chars(const std::string& s) {
    int64_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
}

// One engine request (chat: the only one; completions: one per prompt).
struct SubRequest {
    std::shared_ptr<engine::RequestHandle> handle;
    int64_t prompt_tokens = 0;
    std::string echo;                 // completions with echo: the prompt text
    std::vector<int32_t> prompt_ids;  // completions with echo + logprobs: the prompt tokens
    bool prompt_only = false;         // completions echo + max_tokens 0: generated tokens are dropped
    std::vector<ChoiceState> choices;
    bool finished() const {
        for (const ChoiceState& c : choices) {
            if (!c.finish) return false;
        }
        return true;
    }
};

struct Job {
    bool chat = true;
    bool stream = false;
    bool include_usage = false;
    std::string id, model;
    int64_t created = 0;
    int32_t logprobs = -1;  // as GenerationParams::logprobs
    std::shared_ptr<const tokenizer::Tokenizer> tok;
    std::vector<SubRequest> subs;
    // vLLM metrics of this response (TTFT, ITL, phases, finish reason) and its log line.
    std::shared_ptr<VllmMetrics> metrics;
    std::optional<RequestMetricsRecorder> recorder;
    std::string request_id;
    bool log_requests = false;
    int64_t max_tokens = 0;  // as the request gave it (0: none), for the metrics
    int32_t n = 1;
    Clock::time_point arrival;

    void on_output(size_t new_tokens) {
        if (recorder && new_tokens > 0) recorder->on_output(static_cast<int64_t>(new_tokens), Clock::now());
    }
    // Once, when the response ends: the first choice's finish reason stands for the request.
    void record_finish(const std::string& reason) {
        if (!recorder) return;
        int64_t prompt = 0;
        for (const SubRequest& s : subs) prompt += s.prompt_tokens;
        recorder->finish(reason, prompt, max_tokens, n, Clock::now());
        if (log_requests) {
            const double e2e = std::chrono::duration<double>(Clock::now() - arrival).count();
            spdlog::info("{}", format_request_finished(request_id, reason, prompt,
                                                       usage()["completion_tokens"].get<int64_t>(), e2e));
        }
        recorder.reset();
    }

    std::string token_text(int32_t id) const { return tok->decode(std::span<const int32_t>(&id, 1), false); }
    json token_bytes(int32_t id) const {
        json b = json::array();
        for (uint8_t x : tok->token_bytes(id)) b.push_back(x);
        return b;
    }
    // Chat: one {"token", "logprob", "bytes", "top_logprobs"} entry.
    json chat_logprob(const engine::TokenLogprob& lp) const {
        json top = json::array();
        for (const auto& [id, v] : lp.top) {
            top.push_back({{"token", token_text(id)}, {"logprob", v}, {"bytes", token_bytes(id)}});
        }
        return {{"token", token_text(lp.token)},
                {"logprob", lp.logprob},
                {"bytes", token_bytes(lp.token)},
                {"top_logprobs", std::move(top)}};
    }
    // Completions: appends one token to {"tokens", "token_logprobs", "top_logprobs", "text_offset"}; a
    // null `lp` is the first prompt token (nothing predicts it).
    void completion_logprob(json& out, int64_t& offset, int32_t token, const engine::TokenLogprob* lp) const {
        if (out.is_null()) {
            out = {{"tokens", json::array()},
                   {"token_logprobs", json::array()},
                   {"top_logprobs", json::array()},
                   {"text_offset", json::array()}};
        }
        std::string text = token_text(token);
        out["tokens"].push_back(text);
        out["token_logprobs"].push_back(lp ? json(lp->logprob) : json(nullptr));
        json top = nullptr;
        if (lp) {
            top = json::object();
            for (const auto& [id, v] : lp->top) top[token_text(id)] = v;
        }
        out["top_logprobs"].push_back(std::move(top));
        out["text_offset"].push_back(offset);
        offset += count_chars(text);
    }
    // The logprobs of the first `n` tokens of an engine delta, in the response's format.
    json delta_logprobs(ChoiceState& c, const engine::RequestOutput& out, size_t n) const {
        n = std::min(n, out.logprobs.size());
        if (chat) {
            json content = json::array();
            for (size_t i = 0; i < n; ++i) content.push_back(chat_logprob(out.logprobs[i]));
            return {{"content", std::move(content)}};
        }
        json lp;
        for (size_t i = 0; i < n; ++i)
            completion_logprob(lp, c.text_offset, out.logprobs[i].token, &out.logprobs[i]);
        return lp;
    }

    // A response that ends early (client gone before the first byte, write failure) frees its requests.
    ~Job() {
        abort_all();
        record_finish("abort");
    }
    void abort_all() {
        for (SubRequest& s : subs) {
            if (s.handle && !s.handle->done()) s.handle->abort();
        }
    }
    bool finished() const {
        for (const SubRequest& s : subs) {
            if (!s.finished()) return false;
        }
        return true;
    }
    json usage() const {
        int64_t prompt = 0, completion = 0;
        for (const SubRequest& s : subs) {
            prompt += s.prompt_tokens;
            for (const ChoiceState& c : s.choices) completion += c.tokens();
        }
        return {{"prompt_tokens", prompt},
                {"completion_tokens", completion},
                {"total_tokens", prompt + completion}};
    }
    json chunk(json choices) const {
        json j = {{"id", id},
                  {"object", chat ? "chat.completion.chunk" : "text_completion"},
                  {"created", created},
                  {"model", model},
                  {"choices", std::move(choices)}};
        if (include_usage) j["usage"] = nullptr;
        return j;
    }
    static std::string sse(const json& j) { return "data: " + to_text(j) + "\n\n"; }

    // Streaming: the SSE events for one delta (and the finish) of choice `c`.
    std::string stream_delta(const ChoiceState& c, const OutputDelta& d, bool finishing,
                             const json& logprobs = nullptr) const {
        std::string out;
        if (chat) {
            if (!d.empty() || !logprobs.is_null()) {
                json delta = json::object();
                if (!d.reasoning.empty()) {
                    delta["reasoning_content"] = d.reasoning;
                    delta["reasoning"] = d.reasoning;
                }
                if (!d.content.empty()) delta["content"] = d.content;
                if (!d.tool_calls.empty()) {
                    json calls = json::array();
                    for (const ToolCallDelta& t : d.tool_calls) {
                        json call = {{"index", t.index}};
                        if (!t.id.empty()) {
                            call["id"] = t.id;
                            call["type"] = "function";
                            call["function"] = {{"name", t.name}, {"arguments", t.arguments}};
                        } else {
                            call["function"] = {{"arguments", t.arguments}};
                        }
                        calls.push_back(std::move(call));
                    }
                    delta["tool_calls"] = std::move(calls);
                }
                out += sse(chunk(json::array({{{"index", c.index},
                                               {"delta", delta},
                                               {"logprobs", logprobs},
                                               {"finish_reason", nullptr}}})));
            }
            if (finishing) {
                out += sse(chunk(json::array({{{"index", c.index},
                                               {"delta", json::object()},
                                               {"logprobs", nullptr},
                                               {"finish_reason", *c.finish}}})));
            }
        } else if (!d.content.empty() || finishing || !logprobs.is_null()) {
            out +=
                sse(chunk(json::array({{{"index", c.index},
                                        {"text", d.content},
                                        {"logprobs", logprobs},
                                        {"finish_reason", finishing ? json(*c.finish) : json(nullptr)}}})));
        }
        return out;
    }

    // Streaming: the first events (chat: the assistant role; completions with echo: the prompt).
    std::string stream_start() const {
        std::string out;
        for (const SubRequest& s : subs) {
            for (const ChoiceState& c : s.choices) {
                if (chat) {
                    out += sse(chunk(json::array({{{"index", c.index},
                                                   {"delta", {{"role", "assistant"}, {"content", ""}}},
                                                   {"logprobs", nullptr},
                                                   {"finish_reason", nullptr}}})));
                } else if (!s.echo.empty()) {
                    out += sse(chunk(json::array({{{"index", c.index},
                                                   {"text", s.echo},
                                                   {"logprobs", nullptr},
                                                   {"finish_reason", nullptr}}})));
                }
            }
        }
        return out;
    }

    std::string stream_end() const {
        std::string out;
        if (include_usage) {
            json j = chunk(json::array());
            j["usage"] = usage();
            out += sse(j);
        }
        return out + "data: [DONE]\n\n";
    }

    std::string full_response() const {
        json choices = json::array();
        for (const SubRequest& s : subs) {
            for (const ChoiceState& c : s.choices) {
                if (chat) {
                    json reasoning = c.reasoning.empty() ? json(nullptr) : json(c.reasoning);
                    // A reply that calls tools and says nothing has content null (OpenAI), not "".
                    json content =
                        c.content.empty() && !c.tool_calls.empty() ? json(nullptr) : json(c.content);
                    json message = {{"role", "assistant"},
                                    {"content", std::move(content)},
                                    {"reasoning_content", reasoning},
                                    {"reasoning", reasoning},
                                    {"tool_calls", c.tool_calls}};
                    choices.push_back({{"index", c.index},
                                       {"message", std::move(message)},
                                       {"logprobs", c.logprobs},
                                       {"finish_reason", *c.finish}});
                } else {
                    choices.push_back({{"index", c.index},
                                       {"text", s.echo + c.content},
                                       {"logprobs", c.logprobs},
                                       {"finish_reason", *c.finish}});
                }
            }
        }
        json j = {{"id", id},
                  {"object", chat ? "chat.completion" : "text_completion"},
                  {"created", created},
                  {"model", model},
                  {"choices", std::move(choices)},
                  {"usage", usage()}};
        return to_text(j);
    }

    // Applies one engine delta; returns the SSE text to send (streaming) or accumulates (non-streaming).
    std::string apply(SubRequest& sub, const engine::RequestOutput& out) {
        if (out.choice < 0 || out.choice >= static_cast<int32_t>(sub.choices.size())) return {};
        ChoiceState& c = sub.choices[out.choice];
        if (c.finish) return {};  // ended by a stop string; the rest is discarded
        if (!out.prompt_logprobs.empty() && !sub.prompt_ids.empty()) {
            // Completions echo + logprobs: the prompt's entries come first, in every choice of the prompt.
            for (ChoiceState& pc : sub.choices) {
                completion_logprob(pc.logprobs, pc.text_offset, sub.prompt_ids[0], nullptr);
                for (size_t i = 0; i < out.prompt_logprobs.size() && i + 1 < sub.prompt_ids.size(); ++i) {
                    completion_logprob(pc.logprobs, pc.text_offset, sub.prompt_ids[i + 1],
                                       &out.prompt_logprobs[i]);
                }
            }
        }
        if (sub.prompt_only) {
            // The engine ran one step for the prompt's logprobs; its token is not part of the answer.
            c.finish = "length";
            if (sub.finished() && !sub.handle->done()) sub.handle->abort();
            return stream ? stream_delta(c, OutputDelta{}, true) : std::string();
        }
        on_output(out.tokens.size() + (out.stop_token ? 1 : 0));
        const int64_t before = c.proc->num_tokens();
        OutputDelta d = c.proc->push(out.tokens);
        // Only the tokens the processor consumed (not those after a stop string) report logprobs.
        json lp = logprobs >= 0 ? delta_logprobs(c, out, static_cast<size_t>(c.proc->num_tokens() - before))
                                : json();
        if (c.proc->stopped()) {
            c.finish = "stop";
        } else if (out.finish != engine::FinishReason::kNone) {
            OutputDelta f = c.proc->finish(out.finish == engine::FinishReason::kLength);
            d.content += f.content;
            d.reasoning += f.reasoning;
            d.tool_calls.insert(d.tool_calls.end(), f.tool_calls.begin(), f.tool_calls.end());
            c.finish = finish_name(out.finish);
            c.counted_stop_token = out.stop_token.has_value();
            // A turn that ended in a call (<|call|>) asks the client to run it.
            if (*c.finish == "stop" && (c.num_tool_calls > 0 || !d.tool_calls.empty()))
                c.finish = "tool_calls";
        }
        // A stop string can end every choice before the engine does: free the request now.
        if (sub.finished() && !sub.handle->done()) sub.handle->abort();
        for (const ToolCallDelta& t : d.tool_calls) {
            if (!t.id.empty()) ++c.num_tool_calls;
        }
        if (!stream) {
            c.content += d.content;
            c.reasoning += d.reasoning;
            for (const ToolCallDelta& t : d.tool_calls) {
                if (!t.id.empty()) {
                    c.tool_calls.push_back({{"id", t.id},
                                            {"type", "function"},
                                            {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
                } else if (!c.tool_calls.empty()) {
                    c.tool_calls.back()["function"]["arguments"] =
                        c.tool_calls.back()["function"]["arguments"].get<std::string>() + t.arguments;
                }
            }
            if (!lp.is_null()) append_logprobs(c.logprobs, std::move(lp));
            return {};
        }
        return stream_delta(c, d, c.finish.has_value(), lp);
    }

    void append_logprobs(json& into, json more) const {
        if (into.is_null()) {
            into = std::move(more);
        } else if (chat) {
            for (auto& e : more["content"]) into["content"].push_back(std::move(e));
        } else {
            for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
                for (auto& e : more[k]) into[k].push_back(std::move(e));
            }
        }
    }
};

// One generation response as the HTTP layer streams it (http_server.h StreamBody): every pump drains what
// the engine has produced (woken by the RequestHandle's notify path, so no thread waits per stream),
// writes a heartbeat when idle for `heartbeat` (an SSE comment, or whitespace before the JSON body) so
// that a vanished client is noticed by a failed write, and ends with the final events or the whole JSON.
class JobStream : public StreamBody {
  public:
    JobStream(std::shared_ptr<Job> job, HttpServer::Ticket ticket, std::chrono::milliseconds heartbeat)
        : job_(std::move(job)),
          ticket_(std::move(ticket)),
          heartbeat_(heartbeat),
          last_write_(Clock::now()) {}
    ~JobStream() override { set_wake(nullptr); }

    void set_wake(std::function<void()> wake) override {
        for (SubRequest& s : job_->subs) {
            if (s.handle) s.handle->set_notify(wake);
        }
    }
    bool pump(std::string* out, bool aborting) override {
        Job& job = *job_;
        if (!started_) {
            started_ = true;
            if (job.stream) *out += job.stream_start();
        }
        if (aborting && !aborted_for_shutdown_) {
            job.abort_all();
            aborted_for_shutdown_ = true;
        }
        for (SubRequest& sub : job.subs) {
            if (sub.finished()) continue;
            engine::RequestOutput o;
            while (!sub.finished() && sub.handle->next(&o, std::chrono::milliseconds(0)))
                *out += job.apply(sub, o);
            if (!sub.finished() && sub.handle->done()) {
                // The engine ended the request without a finish for some choice (it should not): close them.
                for (ChoiceState& c : sub.choices) {
                    if (c.finish) continue;
                    OutputDelta f = c.proc->finish();
                    c.finish = "abort";
                    if (job.stream) {
                        *out += job.stream_delta(c, f, true);
                    } else {
                        c.content += f.content;
                        c.reasoning += f.reasoning;
                    }
                }
            }
        }
        const Clock::time_point now = Clock::now();
        if (job.finished()) {
            job.record_finish(*job.subs[0].choices[0].finish);
            *out += job.stream ? job.stream_end() : job.full_response();
            return true;
        }
        // SSE comment lines are ignored by clients; whitespace before a JSON body is allowed by JSON. The
        // second write after the peer closed fails, which is how a silent disconnect is seen.
        if (out->empty() && now - last_write_ >= heartbeat_) *out += job.stream ? ": ping\n\n" : " ";
        if (!out->empty()) last_write_ = now;
        return false;
    }
    void cancel() override { job_->abort_all(); }

  private:
    std::shared_ptr<Job> job_;
    HttpServer::Ticket ticket_;
    std::chrono::milliseconds heartbeat_;
    Clock::time_point last_write_;
    bool started_ = false, aborted_for_shutdown_ = false;
};

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

engine::SamplingParams to_engine(const GenerationParams& p, int64_t max_tokens) {
    engine::SamplingParams s;
    s.temperature = p.temperature;
    s.top_p = p.top_p;
    s.min_p = p.min_p;
    s.top_k = p.top_k;
    s.presence_penalty = p.presence_penalty;
    s.frequency_penalty = p.frequency_penalty;
    s.repetition_penalty = p.repetition_penalty;
    s.logit_bias = p.logit_bias;
    s.seed = p.seed;
    s.max_tokens = static_cast<int32_t>(std::min<int64_t>(max_tokens, std::numeric_limits<int32_t>::max()));
    s.stop_token_ids = p.stop_token_ids;
    s.ignore_eos = p.ignore_eos;
    s.n = p.n;
    s.logprobs = p.logprobs;
    return s;
}

}  // namespace

std::variant<tokenizer::HarmonyConversation, ApiError> build_conversation(
    const std::vector<ChatMessage>& messages, const std::optional<std::string>& effort,
    const std::string& current_date, const std::vector<tokenizer::ToolDescription>& tools) {
    tokenizer::HarmonyConversation conv;
    tokenizer::SystemOptions system;
    system.current_date = current_date;
    if (effort) {
        system.reasoning_effort = *effort == "low"    ? tokenizer::ReasoningEffort::kLow
                                  : *effort == "high" ? tokenizer::ReasoningEffort::kHigh
                                                      : tokenizer::ReasoningEffort::kMedium;
    }
    conv.system = system;
    // Every system and developer message, in order, becomes the developer message's instructions
    // (docs/api.md): the harmony system message is ours (identity, date, reasoning effort, channels).
    std::string instructions;
    std::unordered_map<std::string, std::string> call_names;  // tool_call_id -> function name
    for (size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (m.role == "system" || m.role == "developer") {
            if (!instructions.empty()) instructions += "\n\n";
            instructions += m.content;
        } else if (m.role == "user") {
            conv.messages.push_back(tokenizer::HarmonyMessage::user(m.content));
        } else if (m.role == "assistant") {
            std::vector<tokenizer::HarmonyToolCall> calls;
            for (const ChatMessage::ToolCall& c : m.tool_calls) {
                calls.push_back({c.name, c.arguments});
                if (!c.id.empty()) call_names[c.id] = c.name;
            }
            tokenizer::append_assistant_turn(conv.messages, m.reasoning, m.content, calls);
        } else if (m.role == "tool") {
            auto it = call_names.find(m.tool_call_id);
            if (it == call_names.end()) {
                std::string param = "messages[" + std::to_string(i) + "].tool_call_id";
                return bad_field(param, "'" + param + "' ('" + m.tool_call_id +
                                            "') does not name a tool call of an earlier assistant message.");
            }
            conv.messages.push_back(tokenizer::HarmonyMessage::tool_result(it->second, m.content));
        }
    }
    if (!instructions.empty() || !tools.empty()) {
        tokenizer::DeveloperOptions dev;
        if (!instructions.empty()) dev.instructions = instructions;
        dev.function_tools = tools;
        conv.developer = dev;
    }
    return conv;
}

OpenAiRoutes::OpenAiRoutes(RoutesConfig config, HttpServer& server,
                           std::shared_ptr<const tokenizer::HarmonyEncoding> encoding)
    : config_(std::move(config)),
      server_(server),
      encoding_(std::move(encoding)),
      tokenizer_(encoding_->tokenizer_ptr()) {
    server_.get(
        "/health",
        [this](const HttpRequest&, HttpResponse& res) {
            if (engine_.load() == nullptr || server_.draining()) {
                HttpServer::send_json(res, 503,
                                      {{"status", server_.draining() ? "shutting down" : "loading"}});
            } else {
                HttpServer::send_json(res, 200, {{"status", "ok"}});
            }
        },
        true);
    server_.get("/version", [](const HttpRequest&, HttpResponse& res) {
        HttpServer::send_json(res, 200, {{"version", VOLT_VERSION}});
    });
    server_.get("/v1/models", [this](const HttpRequest&, HttpResponse& res) { models(res); });
    server_.get(R"(/v1/models/(.+))", [this](const HttpRequest& req, HttpResponse& res) {
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

nlohmann::json OpenAiRoutes::model_json(const std::string& name) const {
    json m = {{"id", name},
              {"object", "model"},
              {"created", 0},
              {"owned_by", "voltllm"},
              {"root", config_.model_root}};
    if (engine::Engine* engine = engine_.load()) m["max_model_len"] = engine->max_model_len();
    return m;
}

void OpenAiRoutes::models(HttpResponse& res) {
    json data = json::array();
    for (const std::string& name : config_.served_model_names) data.push_back(model_json(name));
    HttpServer::send_json(res, 200, {{"object", "list"}, {"data", std::move(data)}});
}

std::variant<tokenizer::HarmonyPrompt, ApiError> OpenAiRoutes::render_chat(
    const std::vector<ChatMessage>& messages, const std::optional<std::string>& effort,
    const std::vector<tokenizer::ToolDescription>& tools,
    const std::optional<std::string>& forced_function) const {
    auto conv = build_conversation(messages, effort,
                                   config_.current_date.empty() ? today_utc() : config_.current_date, tools);
    if (auto* e = std::get_if<ApiError>(&conv)) return *e;
    tokenizer::CompletionOptions options;
    options.forced_function = forced_function;
    auto prompt = encoding_->render_for_completion(std::get<tokenizer::HarmonyConversation>(conv), options);
    if (!prompt.is_ok()) return api_error_from_status(prompt.status(), std::string("messages"));
    return std::move(*prompt);
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

// The request id (the client's X-Request-Id when usable, echoed back), the response id ("chatcmpl-<id>",
// as vLLM), the metrics recorder and the --enable-log-requests line.
void init_job(Job& job, const HttpRequest& req, HttpResponse& res, const char* prefix,
              const GenerationParams& p, const std::shared_ptr<VllmMetrics>& metrics,
              const RoutesConfig& config, Clock::time_point arrival, int64_t prompt_tokens,
              const std::string& prompt_log) {
    const std::string header_name(kRequestIdHeader);
    std::optional<std::string> header;
    if (req.has_header(header_name.c_str())) header = req.get_header_value(header_name.c_str());
    job.request_id = choose_request_id(header);
    res.set_header(header_name.c_str(), job.request_id);
    job.id = prefix + job.request_id;
    job.max_tokens = p.max_tokens.value_or(0);
    job.n = p.n;
    job.arrival = arrival;
    job.log_requests = config.log_requests;
    if (metrics) {
        job.metrics = metrics;
        job.recorder.emplace(*metrics, arrival);
    }
    if (config.log_requests) {
        json params = {{"n", p.n},
                       {"temperature", p.temperature},
                       {"top_p", p.top_p},
                       {"top_k", p.top_k},
                       {"max_tokens", p.max_tokens ? json(*p.max_tokens) : json(nullptr)},
                       {"stop", p.stop},
                       {"seed", p.seed ? json(*p.seed) : json(nullptr)}};
        spdlog::info("{}", format_request_received(job.request_id, prompt_log, prompt_tokens, to_text(params),
                                                   config.max_log_len));
    }
}

void start_response(HttpResponse& res, std::shared_ptr<Job> job, HttpServer::Ticket ticket,
                    std::chrono::milliseconds heartbeat) {
    if (job->stream) {
        res.set_header("Cache-Control", "no-cache");
        res.set_header("X-Accel-Buffering", "no");
    }
    res.status = 200;
    res.content_type = job->stream ? "text/event-stream" : "application/json";
    res.stream = std::make_shared<JobStream>(std::move(job), std::move(ticket), heartbeat);
}

}  // namespace

void OpenAiRoutes::chat(const HttpRequest& req, HttpResponse& res) {
    const Clock::time_point arrival = Clock::now();
    engine::Engine* engine = engine_.load();
    if (!engine) return server_.send_error(res, loading_error());
    auto body = parse_json_body(req.body);
    if (auto* e = std::get_if<ApiError>(&body)) return server_.send_error(res, *e);
    auto parsed = parse_chat_request(std::get<RequestJson>(body));
    if (auto* e = std::get_if<ApiError>(&parsed)) return server_.send_error(res, *e);
    ChatRequest& r = std::get<ChatRequest>(parsed);
    if (!known_model(config_, r.model)) return server_.send_error(res, model_not_found(r.model));
    warn_unknown_fields(r.unknown_fields, "/v1/chat/completions");

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

    if (std::optional<ApiError> e = too_wide(config_, r.params.n, 1)) return server_.send_error(res, *e);
    HttpServer::Ticket ticket = server_.try_admit("POST /v1/chat/completions", r.params.n);
    if (!ticket)
        return server_.send_error(res, server_.draining() ? shutting_down_error() : queue_full_error());
    const std::string prompt_log = config_.log_requests ? tokenizer_->decode(ids, false) : std::string();
    auto handle = engine->submit(std::move(ids), sp, next_group_.fetch_add(1));
    if (!handle.is_ok()) return server_.send_error(res, submit_error(handle.status(), "messages"));

    auto job = std::make_shared<Job>();
    job->chat = true;
    job->stream = r.params.stream;
    job->include_usage = r.params.include_usage;
    init_job(*job, req, res, "chatcmpl-", r.params, metrics_, config_, arrival, n_prompt, prompt_log);
    server_.describe(ticket, job->id + " (POST /v1/chat/completions)");
    job->logprobs = r.params.logprobs;
    job->tok = tokenizer_;
    job->model = r.model;
    job->created = static_cast<int64_t>(std::time(nullptr));
    SubRequest sub;
    sub.handle = *handle;
    sub.prompt_tokens = n_prompt;
    std::vector<std::string> functions;
    for (const auto& t : r.tools) functions.push_back(t.name);
    for (int32_t i = 0; i < r.params.n; ++i) {
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
    if (!engine) return server_.send_error(res, loading_error());
    auto body = parse_json_body(req.body);
    if (auto* e = std::get_if<ApiError>(&body)) return server_.send_error(res, *e);
    auto parsed = parse_completion_request(std::get<RequestJson>(body));
    if (auto* e = std::get_if<ApiError>(&parsed)) return server_.send_error(res, *e);
    CompletionRequest& r = std::get<CompletionRequest>(parsed);
    if (!known_model(config_, r.model)) return server_.send_error(res, model_not_found(r.model));
    warn_unknown_fields(r.unknown_fields, "/v1/completions");

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

    const int64_t n_prompts = static_cast<int64_t>(prompts.size());
    if (std::optional<ApiError> e = too_wide(config_, r.params.n, n_prompts))
        return server_.send_error(res, *e);
    HttpServer::Ticket ticket = server_.try_admit("POST /v1/completions", n_prompts * r.params.n);
    const int64_t group = next_group_.fetch_add(1);
    if (!ticket)
        return server_.send_error(res, server_.draining() ? shutting_down_error() : queue_full_error());
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
    job->logprobs = r.params.logprobs;
    job->tok = tokenizer_;
    job->model = r.model;
    job->created = static_cast<int64_t>(std::time(nullptr));
    // max_tokens 0 (echo): one engine step still runs, for the prompt logprobs; its token is dropped.
    engine::SamplingParams sp = to_engine(r.params, std::max<int64_t>(max_tokens, 1));
    // Echo with logprobs scores the prompt too (not while streaming: the echo is sent before any step).
    if (r.echo && r.params.logprobs >= 0 && !r.params.stream) sp.prompt_logprobs = r.params.logprobs;
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
        for (int32_t j = 0; j < r.params.n; ++j) {
            ChoiceState c;
            c.index = static_cast<int>(i) * r.params.n + j;
            c.proc = make_text_processor(tokenizer_, r.params.stop, r.params.skip_special_tokens,
                                         r.params.include_stop_str_in_output);
            sub.choices.push_back(std::move(c));
        }
        job->subs.push_back(std::move(sub));
    }
    start_response(res, std::move(job), std::move(ticket), config_.heartbeat);
}

void OpenAiRoutes::tokenize(const HttpRequest& req, HttpResponse& res) {
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
