// Harmony renderer core (spec §5.2-5.5): conversation -> pieces, each a special token (by name, e.g.
// "<|start|>") or ordinary text, with the same piece boundaries as openai/harmony v0.0.8 (each text piece
// is BPE-encoded on its own). pieces_to_text() gives the goldens' text form; HarmonyEncoding
// (harmony_encoding.h) turns pieces into token ids. Tests: tests/unit/tokenizer/harmony_renderer_test.cc.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "tokenizer/harmony_message.h"

namespace volt::tokenizer {

// A special token, by name ("<|start|>"), or ordinary UTF-8 text (encoded without special tokens, so
// user text can never inject control tokens).
struct HarmonyPiece {
    bool special = false;
    std::string text;
    bool operator==(const HarmonyPiece&) const = default;
};

// Which assistant `analysis` messages of the history are rendered.
enum class AnalysisPolicy {
    // Drop every analysis message that a later assistant `final` message follows: finished turns lose
    // their chain of thought, the unfinished turn (analysis -> tool call -> tool result) keeps it
    // (spec §5.5, BUG-11). The default for serving.
    kDropFinishedTurns,
    // openai/harmony's auto_drop_analysis: only when the last assistant message is `final`, drop the
    // analysis messages before the first `final` message (golden test_keep_analysis_between_finals).
    kHarmonyLibrary,
    kKeepAll,
};

struct RenderOptions {
    AnalysisPolicy analysis = AnalysisPolicy::kDropFinishedTurns;
};

struct CompletionOptions {
    AnalysisPolicy analysis = AnalysisPolicy::kDropFinishedTurns;
    // Forces a call of this function (tool_choice naming a function, or "required" with one tool): the
    // prompt continues `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>` after
    // `<|start|>assistant`, the header the model itself writes for a call (spec §5.5).
    std::optional<std::string> forced_function;
};

// The system message text (spec §5.3): identity / knowledge cutoff / current date lines, "Reasoning: X",
// built-in tools, the valid-channels line and, when `has_function_tools`, the 'functions' line.
std::string render_system_text(const SystemOptions& system, bool has_function_tools);
// The developer message text (spec §5.4): "# Instructions\n\nTEXT" and the `functions` tools section.
std::string render_developer_text(const DeveloperOptions& developer);

// One message. Terminator: <|call|> for an assistant message with a recipient, else <|end|>.
// kInvalidArgument for a tool message without an author name.
Result<std::vector<HarmonyPiece>> render_message_pieces(const HarmonyMessage& message);

// The whole conversation (system, developer, history) without a generation prompt.
Result<std::vector<HarmonyPiece>> render_conversation_pieces(const HarmonyConversation& conversation,
                                                             const RenderOptions& options = {});

// The prompt for the next assistant turn: the conversation, then `<|start|>assistant`, then the forced
// tool-call header if requested (see completion_prefill_pieces).
Result<std::vector<HarmonyPiece>> render_completion_pieces(const HarmonyConversation& conversation,
                                                           const CompletionOptions& options = {});

// The pieces after `<|start|>assistant` that the prompt adds (empty unless forced_function). The
// stream parser must be fed their ids before the generated ids, since they open the model's message.
std::vector<HarmonyPiece> completion_prefill_pieces(const CompletionOptions& options);

// Concatenation, special tokens written as their names: the text form of harmony goldens.
std::string pieces_to_text(std::span<const HarmonyPiece> pieces);

// Deepest nesting of a tool's `parameters` schema that function_tools_from_openai copies: copying and
// rendering a schema recurse once per level, so a deeper one (from a caller that did not bound the
// nesting while parsing) is refused rather than overflowing the stack.
inline constexpr int kMaxToolSchemaDepth = 64;

// OpenAI chat `tools` ([{"type": "function", "function": {name, description, parameters}}]) ->
// function tools, in order. Entries whose type is not "function" are skipped. kInvalidArgument naming
// the index for a non-array input, an entry without a string function.name, or parameters nested deeper
// than kMaxToolSchemaDepth (checked without recursion, before the copy).
Result<std::vector<ToolDescription>> function_tools_from_openai(const nlohmann::ordered_json& tools);

}  // namespace volt::tokenizer
