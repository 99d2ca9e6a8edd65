// Harmony conversation model (spec §5.2-5.5): roles, messages, the system and developer settings and the
// helpers that turn OpenAI chat pieces (assistant tool calls, tool results) into harmony messages.
// Plain data, no tokenizer: harmony_renderer.h renders it, harmony_parser.h produces HarmonyMessage.
// Mirrors openai/harmony v0.0.8 src/chat.rs; tests in tests/unit/tokenizer/harmony_renderer_test.cc.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace volt::tokenizer {

enum class HarmonyRole { kSystem, kDeveloper, kUser, kAssistant, kTool };

// "system", "developer", "user", "assistant", "tool".
const char* harmony_role_name(HarmonyRole role);
// The role named exactly `name`, or nullopt.
std::optional<HarmonyRole> harmony_role_from_name(std::string_view name);

enum class ReasoningEffort { kLow, kMedium, kHigh };
// "low", "medium", "high".
const char* reasoning_effort_name(ReasoningEffort effort);

// Who wrote a message. Tools are named by their recipient name ("functions.get_weather",
// "browser.search"): the header of a tool message is that name instead of the role.
struct HarmonyAuthor {
    HarmonyRole role = HarmonyRole::kUser;
    std::optional<std::string> name;
    bool operator==(const HarmonyAuthor&) const = default;
};

// One harmony message (spec §5.2):
//   <|start|>AUTHOR[ to=RECIPIENT][<|channel|>CHANNEL][ CONTENT_TYPE]<|message|>CONTENT<|end|> or <|call|>
// content_type "<|constrain|>json" renders its marker as the special token (BUG-03).
struct HarmonyMessage {
    HarmonyAuthor author;
    std::optional<std::string> recipient;     // "functions.NAME", "assistant", "browser.search", ...
    std::optional<std::string> channel;       // "analysis", "commentary", "final"
    std::optional<std::string> content_type;  // "<|constrain|>json", "json", "code"
    std::string content;                      // UTF-8 text
    bool operator==(const HarmonyMessage&) const = default;

    static HarmonyMessage user(std::string text);
    // An assistant message on `channel` ("analysis", "final", "commentary").
    static HarmonyMessage assistant(std::string channel, std::string text);
    // An assistant tool call: `<|start|>assistant to=functions.NAME<|channel|>commentary
    // <|constrain|>json<|message|>ARGS<|call|>` (harmony library order, spec §5.5).
    static HarmonyMessage tool_call(std::string_view function_name, std::string arguments_json);
    // The result of function NAME: `<|start|>functions.NAME to=assistant<|channel|>commentary<|message|>
    // OUTPUT<|end|>` (spec §5.5, BUG-11). The server maps tool_call_id back to NAME.
    static HarmonyMessage tool_result(std::string_view function_name, std::string output);
};

// One function tool: name, description and JSON Schema of its parameters. The schema is an ordered_json
// because harmony renders properties in the order the client sent them (parse requests with
// nlohmann::ordered_json to keep it). An absent or null schema renders `type NAME = () => any;`.
struct ToolDescription {
    std::string name;
    std::string description;
    std::optional<nlohmann::ordered_json> parameters;
};

// A `## name` block of the `# Tools` section: a namespace of tools, or (no tools) free text.
struct ToolNamespace {
    std::string name;
    std::optional<std::string> description;
    std::vector<ToolDescription> tools;

    static ToolNamespace browser();  // built-in browser tool, text of openai/harmony v0.0.8
    static ToolNamespace python();   // built-in python tool, text of openai/harmony v0.0.8
};

// System message settings (spec §5.3). Defaults are harmony's SystemContent::default().
struct SystemOptions {
    std::optional<std::string> model_identity = "You are ChatGPT, a large language model trained by OpenAI.";
    std::optional<std::string> knowledge_cutoff = "2024-06";
    // "Current date: YYYY-MM-DD". A parameter (never read from the clock here) so renders are reproducible.
    std::optional<std::string> current_date;
    std::optional<ReasoningEffort> reasoning_effort = ReasoningEffort::kMedium;
    // "# Valid channels: ..." line; an empty list leaves the section out.
    std::vector<std::string> valid_channels = {"analysis", "commentary", "final"};
    bool channel_required = true;
    // Built-in tools (browser, python) rendered in the system message, sorted by name as harmony does.
    std::vector<ToolNamespace> builtin_tools;
};

// Developer message settings (spec §5.4).
struct DeveloperOptions {
    std::optional<std::string> instructions;
    // The `functions` namespace. The system message's "Calls to these tools must go to the commentary
    // channel: 'functions'." line appears exactly when this is not empty.
    std::vector<ToolDescription> function_tools;
};

// What is rendered, in order: the system message (if set), the developer message (if set), then the
// history messages (user, assistant, tool).
struct HarmonyConversation {
    std::optional<SystemOptions> system;
    std::optional<DeveloperOptions> developer;
    std::vector<HarmonyMessage> messages;
};

// One OpenAI assistant tool call: function name and JSON argument text.
struct HarmonyToolCall {
    std::string name;
    std::string arguments;
};

// Appends the harmony messages for one OpenAI assistant chat message (BUG-10, BUG-11): `reasoning` becomes
// an analysis message; `content` becomes the final answer when there are no tool calls, else a commentary
// preamble; each tool call becomes HarmonyMessage::tool_call. Empty strings add nothing, so
// reasoning + content + tool_calls together, or tool_calls alone, are all accepted.
void append_assistant_turn(std::vector<HarmonyMessage>& out, std::string_view reasoning,
                           std::string_view content, std::span<const HarmonyToolCall> tool_calls);

}  // namespace volt::tokenizer
