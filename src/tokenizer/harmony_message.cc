// Harmony conversation model: role names, message constructors and the built-in tool texts (copied from
// openai/harmony v0.0.8 src/chat.rs, Apache-2.0, so renders match its goldens byte for byte).
// Tests: tests/unit/tokenizer/harmony_renderer_test.cc.
#include "tokenizer/harmony_message.h"

#include <utility>

namespace volt::tokenizer {

const char* harmony_role_name(HarmonyRole role) {
    switch (role) {
        case HarmonyRole::kSystem:
            return "system";
        case HarmonyRole::kDeveloper:
            return "developer";
        case HarmonyRole::kUser:
            return "user";
        case HarmonyRole::kAssistant:
            return "assistant";
        case HarmonyRole::kTool:
            return "tool";
    }
    return "user";
}

std::optional<HarmonyRole> harmony_role_from_name(std::string_view name) {
    for (HarmonyRole r : {HarmonyRole::kSystem, HarmonyRole::kDeveloper, HarmonyRole::kUser,
                          HarmonyRole::kAssistant, HarmonyRole::kTool}) {
        if (name == harmony_role_name(r)) return r;
    }
    return std::nullopt;
}

const char* reasoning_effort_name(ReasoningEffort effort) {
    switch (effort) {
        case ReasoningEffort::kLow:
            return "low";
        case ReasoningEffort::kMedium:
            return "medium";
        case ReasoningEffort::kHigh:
            return "high";
    }
    return "medium";
}

HarmonyMessage HarmonyMessage::user(std::string text) {
    HarmonyMessage m;
    m.author.role = HarmonyRole::kUser;
    m.content = std::move(text);
    return m;
}

HarmonyMessage HarmonyMessage::assistant(std::string channel, std::string text) {
    HarmonyMessage m;
    m.author.role = HarmonyRole::kAssistant;
    m.channel = std::move(channel);
    m.content = std::move(text);
    return m;
}

HarmonyMessage HarmonyMessage::tool_call(std::string_view function_name, std::string arguments_json) {
    HarmonyMessage m;
    m.author.role = HarmonyRole::kAssistant;
    m.recipient = "functions." + std::string(function_name);
    m.channel = "commentary";
    m.content_type = "<|constrain|>json";
    m.content = std::move(arguments_json);
    return m;
}

HarmonyMessage HarmonyMessage::tool_result(std::string_view function_name, std::string output) {
    HarmonyMessage m;
    m.author.role = HarmonyRole::kTool;
    m.author.name = "functions." + std::string(function_name);
    m.recipient = "assistant";
    m.channel = "commentary";
    m.content = std::move(output);
    return m;
}

ToolNamespace ToolNamespace::browser() {
    ToolNamespace ns;
    ns.name = "browser";
    ns.description =
        "Tool for browsing.\n"
        "The `cursor` appears in brackets before each browsing display: `[{cursor}]`.\n"
        "Cite information from the tool using the following format:\n"
        "`\u3010{cursor}\u2020L{line_start}(-L{line_end})?\u3011`, for example: `\u30106\u2020L9-L11\u3011` "
        "or "
        "`\u30108\u2020L3\u3011`.\n"
        "Do not quote more than 10 words directly from the tool output.\n"
        "sources=web (default: web)";
    ns.tools.push_back({"search", "Searches for information related to `query` and displays `topn` results.",
                        nlohmann::ordered_json::parse(R"({"type": "object", "properties": {
                            "query": {"type": "string"},
                            "topn": {"type": "number", "default": 10},
                            "source": {"type": "string"}}, "required": ["query"]})")});
    ns.tools.push_back(
        {"open",
         "Opens the link `id` from the page indicated by `cursor` starting at line number `loc`, showing "
         "`num_lines` lines.\n"
         "Valid link ids are displayed with the formatting: `\u3010{id}\u2020.*\u3011`.\n"
         "If `cursor` is not provided, the most recent page is implied.\n"
         "If `id` is a string, it is treated as a fully qualified URL associated with `source`.\n"
         "If `loc` is not provided, the viewport will be positioned at the beginning of the document or "
         "centered on the most relevant passage, if available.\n"
         "Use this function without `id` to scroll to a new location of an opened page.",
         nlohmann::ordered_json::parse(R"({"type": "object", "properties": {
             "id": {"type": ["number", "string"], "default": -1},
             "cursor": {"type": "number", "default": -1},
             "loc": {"type": "number", "default": -1},
             "num_lines": {"type": "number", "default": -1},
             "view_source": {"type": "boolean", "default": false},
             "source": {"type": "string"}}})")});
    ns.tools.push_back(
        {"find", "Finds exact matches of `pattern` in the current page, or the page given by `cursor`.",
         nlohmann::ordered_json::parse(R"({"type": "object", "properties": {
             "pattern": {"type": "string"},
             "cursor": {"type": "number", "default": -1}}, "required": ["pattern"]})")});
    return ns;
}

ToolNamespace ToolNamespace::python() {
    ToolNamespace ns;
    ns.name = "python";
    ns.description =
        "Use this tool to execute Python code in your chain of thought. The code will not be shown to the "
        "user. This tool should be used for internal reasoning, but not for code that is intended to be "
        "visible to the user (e.g. when creating plots, tables, or files).\n\n"
        "When you send a message containing Python code to python, it will be executed in a stateful Jupyter "
        "notebook environment. python will respond with the output of the execution or time out after 120.0 "
        "seconds. The drive at '/mnt/data' can be used to save and persist user files. Internet access for "
        "this session is UNKNOWN. Depends on the cluster.";
    return ns;
}

void append_assistant_turn(std::vector<HarmonyMessage>& out, std::string_view reasoning,
                           std::string_view content, std::span<const HarmonyToolCall> tool_calls) {
    if (!reasoning.empty()) out.push_back(HarmonyMessage::assistant("analysis", std::string(reasoning)));
    if (!content.empty()) {
        out.push_back(
            HarmonyMessage::assistant(tool_calls.empty() ? "final" : "commentary", std::string(content)));
    }
    for (const HarmonyToolCall& call : tool_calls)
        out.push_back(HarmonyMessage::tool_call(call.name, call.arguments));
}

}  // namespace volt::tokenizer
