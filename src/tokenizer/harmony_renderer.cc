// Harmony renderer core: conversation -> pieces (special token names and ordinary text), following
// openai/harmony v0.0.8 `Render<Message>`, `Render<SystemContent>`, `Render<DeveloperContent>` and
// `render_conversation_into` (src/encoding.rs) piece for piece. Tests: harmony_renderer_test.cc.
#include "tokenizer/harmony_renderer.h"

#include <algorithm>
#include <utility>

#include "tokenizer/harmony_schema.h"

namespace volt::tokenizer {
namespace {

constexpr std::string_view kConstrain = "<|constrain|>";

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
    std::string out;
    for (size_t i = 0; i < parts.size(); ++i) {
        if (i > 0) out += sep;
        out += parts[i];
    }
    return out;
}

void add_special(std::vector<HarmonyPiece>& out, const char* name) { out.push_back({true, name}); }
void add_text(std::vector<HarmonyPiece>& out, std::string text) {
    if (!text.empty()) out.push_back({false, std::move(text)});
}

std::vector<HarmonyPiece> simple_message(const char* role, std::string text) {
    std::vector<HarmonyPiece> out;
    add_special(out, "<|start|>");
    add_text(out, role);
    add_special(out, "<|message|>");
    add_text(out, std::move(text));
    add_special(out, "<|end|>");
    return out;
}

bool has_function_tools(const HarmonyConversation& c) {
    return c.developer && !c.developer->function_tools.empty();
}

// Indices of the history messages that the analysis policy leaves out.
std::vector<bool> dropped_messages(const std::vector<HarmonyMessage>& messages, AnalysisPolicy policy) {
    std::vector<bool> drop(messages.size(), false);
    auto is_analysis = [](const HarmonyMessage& m) { return m.channel && *m.channel == "analysis"; };
    auto is_final = [](const HarmonyMessage& m) { return m.channel && *m.channel == "final"; };
    if (policy == AnalysisPolicy::kHarmonyLibrary) {
        bool last_assistant_is_final = false;
        for (auto it = messages.rbegin(); it != messages.rend(); ++it) {
            if (it->author.role == HarmonyRole::kAssistant) {
                last_assistant_is_final = is_final(*it);
                break;
            }
        }
        auto first_final = std::find_if(messages.begin(), messages.end(), is_final);
        if (!last_assistant_is_final || first_final == messages.end()) return drop;
        for (size_t i = 0; i < static_cast<size_t>(first_final - messages.begin()); ++i) {
            drop[i] = is_analysis(messages[i]);
        }
    } else if (policy == AnalysisPolicy::kDropFinishedTurns) {
        bool final_follows = false;
        for (size_t i = messages.size(); i-- > 0;) {
            const HarmonyMessage& m = messages[i];
            if (is_analysis(m) && final_follows) drop[i] = true;
            if (m.author.role == HarmonyRole::kAssistant && is_final(m)) final_follows = true;
        }
    }
    return drop;
}

}  // namespace

std::string render_system_text(const SystemOptions& system, bool has_function_tools) {
    std::vector<std::string> sections;
    std::vector<std::string> top;
    if (system.model_identity) top.push_back(*system.model_identity);
    if (system.knowledge_cutoff) top.push_back("Knowledge cutoff: " + *system.knowledge_cutoff);
    if (system.current_date) top.push_back("Current date: " + *system.current_date);
    if (!top.empty()) sections.push_back(join(top, "\n"));
    if (system.reasoning_effort) {
        sections.push_back(std::string("Reasoning: ") + reasoning_effort_name(*system.reasoning_effort));
    }
    if (!system.builtin_tools.empty()) {
        std::vector<ToolNamespace> sorted = system.builtin_tools;
        std::stable_sort(sorted.begin(), sorted.end(),
                         [](const ToolNamespace& a, const ToolNamespace& b) { return a.name < b.name; });
        sections.push_back(render_tools_section(sorted));
    }
    if (!system.valid_channels.empty()) {
        std::string channels = "# Valid channels: " + join(system.valid_channels, ", ") + ".";
        if (system.channel_required) channels += " Channel must be included for every message.";
        if (has_function_tools)
            channels += "\nCalls to these tools must go to the commentary channel: 'functions'.";
        sections.push_back(std::move(channels));
    }
    return join(sections, "\n\n");
}

std::string render_developer_text(const DeveloperOptions& developer) {
    std::vector<std::string> sections;
    if (developer.instructions) {
        sections.push_back("# Instructions");
        sections.push_back(*developer.instructions);
    }
    if (!developer.function_tools.empty()) {
        ToolNamespace functions{"functions", std::nullopt, developer.function_tools};
        sections.push_back(render_tools_section(std::span<const ToolNamespace>(&functions, 1)));
    }
    return join(sections, "\n\n");
}

Result<std::vector<HarmonyPiece>> render_message_pieces(const HarmonyMessage& message) {
    std::vector<HarmonyPiece> out;
    add_special(out, "<|start|>");
    if (message.author.role == HarmonyRole::kTool) {
        if (!message.author.name || message.author.name->empty()) {
            return invalid_argument("harmony: a tool message needs an author name (functions.NAME)");
        }
        add_text(out, *message.author.name);
    } else {
        add_text(out, harmony_role_name(message.author.role));
        if (message.author.name) add_text(out, ":" + *message.author.name);
    }
    if (message.recipient && *message.recipient != "all") add_text(out, " to=" + *message.recipient);
    if (message.channel) {
        add_special(out, "<|channel|>");
        add_text(out, *message.channel);
    }
    if (message.content_type) {
        std::string_view type = *message.content_type;
        if (type.starts_with(kConstrain)) {
            add_text(out, " ");
            add_special(out, "<|constrain|>");
            add_text(out, std::string(type.substr(kConstrain.size())));
        } else {
            add_text(out, " " + *message.content_type);
        }
    }
    add_special(out, "<|message|>");
    add_text(out, message.content);
    bool is_call = message.author.role == HarmonyRole::kAssistant && message.recipient.has_value();
    add_special(out, is_call ? "<|call|>" : "<|end|>");
    return out;
}

Result<std::vector<HarmonyPiece>> render_conversation_pieces(const HarmonyConversation& conversation,
                                                             const RenderOptions& options) {
    std::vector<HarmonyPiece> out;
    if (conversation.system) {
        auto msg = simple_message("system",
                                  render_system_text(*conversation.system, has_function_tools(conversation)));
        out.insert(out.end(), msg.begin(), msg.end());
    }
    if (conversation.developer) {
        auto msg = simple_message("developer", render_developer_text(*conversation.developer));
        out.insert(out.end(), msg.begin(), msg.end());
    }
    std::vector<bool> drop = dropped_messages(conversation.messages, options.analysis);
    for (size_t i = 0; i < conversation.messages.size(); ++i) {
        if (drop[i]) continue;
        VOLT_ASSIGN_OR_RETURN(std::vector<HarmonyPiece> msg, render_message_pieces(conversation.messages[i]));
        out.insert(out.end(), msg.begin(), msg.end());
    }
    return out;
}

std::vector<HarmonyPiece> completion_prefill_pieces(const CompletionOptions& options) {
    std::vector<HarmonyPiece> out;
    if (!options.forced_function) return out;
    add_special(out, "<|channel|>");
    add_text(out, "commentary to=functions." + *options.forced_function + " ");
    add_special(out, "<|constrain|>");
    add_text(out, "json");
    add_special(out, "<|message|>");
    return out;
}

Result<std::vector<HarmonyPiece>> render_completion_pieces(const HarmonyConversation& conversation,
                                                           const CompletionOptions& options) {
    VOLT_ASSIGN_OR_RETURN(std::vector<HarmonyPiece> out,
                          render_conversation_pieces(conversation, RenderOptions{options.analysis}));
    add_special(out, "<|start|>");
    add_text(out, "assistant");
    std::vector<HarmonyPiece> prefill = completion_prefill_pieces(options);
    out.insert(out.end(), prefill.begin(), prefill.end());
    return out;
}

std::string pieces_to_text(std::span<const HarmonyPiece> pieces) {
    std::string out;
    for (const HarmonyPiece& p : pieces) out += p.text;
    return out;
}

namespace {

// True when `v` nests arrays and objects at most `limit` levels deep (a scalar is 0 levels). Iterative, so
// it is safe on any input; it stops at the first level past the limit.
bool nesting_at_most(const nlohmann::ordered_json& v, int limit) {
    std::vector<std::pair<const nlohmann::ordered_json*, int>> stack{{&v, 0}};
    while (!stack.empty()) {
        auto [node, depth] = stack.back();
        stack.pop_back();
        if (!node->is_structured()) continue;
        if (depth + 1 > limit) return false;
        for (const auto& child : *node) stack.emplace_back(&child, depth + 1);
    }
    return true;
}

}  // namespace

Result<std::vector<ToolDescription>> function_tools_from_openai(const nlohmann::ordered_json& tools) {
    if (!tools.is_array()) return invalid_argument("tools: expected an array of tool definitions");
    std::vector<ToolDescription> out;
    for (size_t i = 0; i < tools.size(); ++i) {
        const auto& tool = tools[i];
        const std::string where = "tools[" + std::to_string(i) + "]";
        if (!tool.is_object()) return invalid_argument(where + ": expected an object");
        auto type = tool.find("type");
        if (type != tool.end() && !(type->is_string() && type->get<std::string>() == "function")) continue;
        auto fn = tool.find("function");
        if (fn == tool.end() || !fn->is_object())
            return invalid_argument(where + ".function: expected an object");
        auto name = fn->find("name");
        if (name == fn->end() || !name->is_string() || name->get<std::string>().empty()) {
            return invalid_argument(where + ".function.name: expected a non-empty string");
        }
        ToolDescription desc;
        desc.name = name->get<std::string>();
        if (auto d = fn->find("description"); d != fn->end() && d->is_string())
            desc.description = d->get<std::string>();
        if (auto p = fn->find("parameters"); p != fn->end() && !p->is_null()) {
            // The copy below recurses once per level: check the depth first, without recursion.
            if (!nesting_at_most(*p, kMaxToolSchemaDepth)) {
                return invalid_argument(where + ".function.parameters: nested more than " +
                                        std::to_string(kMaxToolSchemaDepth) + " levels deep");
            }
            desc.parameters = *p;
        }
        out.push_back(std::move(desc));
    }
    return out;
}

}  // namespace volt::tokenizer
