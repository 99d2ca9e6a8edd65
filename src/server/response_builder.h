// The response builder of the generation routes: one Job per HTTP response (its engine requests, one
// ChoiceState per choice with its OutputProcessor), which turns engine deltas into the OpenAI shapes
// (chat.completion, chat.completion.chunk, text_completion; logprobs in each route's format; usage), and
// JobStream, the StreamBody that the HTTP layer pumps (http_server.h). Used by openai_routes.cc; the
// shapes are tested through the API (tests/api/*.mjs).
#pragma once

#include <spdlog/spdlog.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/openai_routes.h"
#include "server/output_processor.h"
#include "server/request.h"
#include "server/request_log.h"
#include "tokenizer/tokenizer.h"

namespace volt::server {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

inline std::string to_text(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

inline const char* finish_name(engine::FinishReason r) {
    switch (r) {
        case engine::FinishReason::kStop:
            return "stop";
        case engine::FinishReason::kLength:
            return "length";
        case engine::FinishReason::kAbort:
            return "abort";
        case engine::FinishReason::kError:
            return "error";
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
inline int64_t count_chars(const std::string& s) {
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
    // The engine failed the request (FinishReason::kError: non-finite logits): the response ends with an
    // OpenAI error object naming it instead of the choices (streaming: an error event, then [DONE]).
    std::string engine_error;

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
            if (out.finish == engine::FinishReason::kError && engine_error.empty())
                engine_error = out.error.empty() ? "the engine failed the request" : out.error;
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
    JobStream(std::shared_ptr<Job> job, HttpServer::Ticket ticket, std::chrono::milliseconds heartbeat);
    ~JobStream() override;
    void set_wake(std::function<void()> wake) override;
    bool pump(std::string* out, bool aborting) override;
    void cancel() override;

  private:
    std::shared_ptr<Job> job_;
    HttpServer::Ticket ticket_;
    std::chrono::milliseconds heartbeat_;
    Clock::time_point last_write_;
    bool started_ = false, aborted_for_shutdown_ = false;
};

// The request id (the client's X-Request-Id when usable, echoed back), the response id ("chatcmpl-<id>",
// as vLLM), the metrics recorder and the --enable-log-requests line.
void init_job(Job& job, const HttpRequest& req, HttpResponse& res, const char* prefix,
              const GenerationParams& p, const std::shared_ptr<VllmMetrics>& metrics,
              const RoutesConfig& config, Clock::time_point arrival, int64_t prompt_tokens,
              const std::string& prompt_log);
// The response's headers and its JobStream, holding `ticket` until the last byte is written.
void start_response(HttpResponse& res, std::shared_ptr<Job> job, HttpServer::Ticket ticket,
                    std::chrono::milliseconds heartbeat);

}  // namespace volt::server
