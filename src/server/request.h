// OpenAI request schemas of /v1/chat/completions, /v1/completions, /tokenize and /detokenize, parsed from
// JSON and validated: every failure is an ApiError (400) whose message and `param` name the field.
// Fields the server does not implement yet (response_format json, suffix, tool_choice required with several
// tools) are refused with 400 rather than silently ignored; unknown fields are listed for a warning.
// The policy per field: docs/request-fields.md. Test: tests/unit/server/request_test.cc.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "engine/sampling_params.h"
#include "server/api_error.h"
#include "tokenizer/harmony_message.h"

namespace volt::server {

// Sampling and stopping, shared by chat and completions. `sampling` is the engine's own type, filled by
// the parser and handed to Engine::submit as it is (the route sets its max_tokens and adds harmony's stop
// ids), down to the sample op's row: no copy field by field. Beside it, what only the server handles.
struct GenerationParams {
    engine::SamplingParams sampling;    // max_tokens there is set by the route from `max_tokens` below
    std::optional<int64_t> max_tokens;  // nullopt: chat fills max-model-len minus the prompt; completions 16
    std::vector<std::string> stop;      // stop strings, matched on the output text (final channel for chat)
    bool stream = false;
    bool include_usage = false;  // stream_options.include_usage
    bool skip_special_tokens = true;
    bool include_stop_str_in_output = false;  // vLLM's: the matched stop string stays in the text
    // sampling.top_k: 0 is off (-1 is accepted and means off too, as in vLLM); sampling.logprobs: -1
    // none, k >= 0 the logprob of each sampled token and the k most likely (chat: logprobs +
    // top_logprobs; completions: logprobs; completions with echo also get the prompt's).
};

// One chat message as the client sent it. Content parts are joined into one text.
struct ChatMessage {
    std::string role;  // system, developer, user, assistant, tool
    std::string content;
    std::string reasoning;  // assistant history: reasoning_content or reasoning
    struct ToolCall {
        std::string id, name, arguments;
    };
    std::vector<ToolCall> tool_calls;  // assistant history
    std::string tool_call_id;          // tool messages
};

struct ChatRequest {
    std::string model;
    std::vector<ChatMessage> messages;
    std::optional<std::string> reasoning_effort;  // "low", "medium", "high"
    // Declared functions, in the order sent (their JSON Schemas keep the client's key order). Empty
    // with tool_choice "none": the model is then not told about them.
    std::vector<tokenizer::ToolDescription> tools;
    // tool_choice naming a function, or "required" with exactly one tool: the call is forced.
    std::optional<std::string> forced_function;
    GenerationParams params;
    // Top-level fields this server does not know, in the order sent: accepted and ignored (as vLLM
    // does); the route logs a warning once per name (docs/request-fields.md).
    std::vector<std::string> unknown_fields;
};

// A completions prompt: text, or token ids.
using Prompt = std::variant<std::string, std::vector<int32_t>>;

struct CompletionRequest {
    std::string model;
    std::vector<Prompt> prompts;  // one or more; choice index = prompt index * n + j
    bool echo = false;
    // max_tokens 0 (allowed only with echo): the answer is the prompt alone, finish_reason "length".
    bool prompt_only = false;
    GenerationParams params;
    std::vector<std::string> unknown_fields;  // as ChatRequest::unknown_fields
};

struct TokenizeRequest {
    std::string model;  // optional in the request; empty then
    // Either `prompt` (text) or chat `messages` (rendered as the chat route would).
    std::optional<std::string> prompt;
    std::vector<ChatMessage> messages;
    std::optional<std::string> reasoning_effort;
    // With messages: `tools` and `tool_choice` as in chat (a forced function's header ends the prompt).
    std::vector<tokenizer::ToolDescription> tools;
    std::optional<std::string> forced_function;
    bool add_special_tokens = true;  // text: recognise special-token spellings
};

struct DetokenizeRequest {
    std::string model;
    std::vector<int32_t> tokens;
};

// Request bodies keep their key order (harmony renders tool schemas' properties in the client's order).
using RequestJson = nlohmann::ordered_json;

// Arrays and objects nested deeper than this are refused while the body is parsed. Every later step
// (copies, dump(), the harmony schema renderer) recurses once per level, so the limit is what keeps a
// hostile body from overflowing the stack; real requests (tool schemas included) nest a few levels.
inline constexpr int kMaxJsonDepth = 64;

// Parses a request body. Errors (400): malformed JSON (param null, code "invalid_json") or invalid UTF-8
// ("invalid_utf8"), their message quoting at most a short piece of the body; nesting past kMaxJsonDepth
// ("json_too_deep", param: the top-level field it is in), found before the deep value is built; a body
// that is not an object. Then the per-field checks below, whose messages also quote only short prefixes of
// what was sent.
std::variant<RequestJson, ApiError> parse_json_body(const std::string& body);

std::variant<ChatRequest, ApiError> parse_chat_request(const RequestJson& body);
std::variant<CompletionRequest, ApiError> parse_completion_request(const RequestJson& body);
std::variant<TokenizeRequest, ApiError> parse_tokenize_request(const RequestJson& body);
std::variant<DetokenizeRequest, ApiError> parse_detokenize_request(const RequestJson& body);

// A 400 invalid_request_error naming `param`.
ApiError bad_field(std::string param, std::string message, std::optional<std::string> code = std::nullopt);

}  // namespace volt::server
