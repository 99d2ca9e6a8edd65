// The chat -> harmony mapping; see chat_mapping.h.
#include "server/chat_mapping.h"

#include <ctime>
#include <unordered_map>

namespace volt::server {

namespace {

std::string today_utc() {
    std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[16];
    std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
    return buf;
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

std::variant<tokenizer::HarmonyPrompt, ApiError> render_chat_prompt(
    const tokenizer::HarmonyEncoding& encoding, const std::vector<ChatMessage>& messages,
    const std::optional<std::string>& effort, const std::vector<tokenizer::ToolDescription>& tools,
    const std::optional<std::string>& forced_function, const std::string& current_date) {
    auto conv =
        build_conversation(messages, effort, current_date.empty() ? today_utc() : current_date, tools);
    if (auto* e = std::get_if<ApiError>(&conv)) return *e;
    tokenizer::CompletionOptions options;
    options.forced_function = forced_function;
    auto prompt = encoding.render_for_completion(std::get<tokenizer::HarmonyConversation>(conv), options);
    if (!prompt.is_ok()) return api_error_from_status(prompt.status(), std::string("messages"));
    return std::move(*prompt);
}

}  // namespace volt::server
