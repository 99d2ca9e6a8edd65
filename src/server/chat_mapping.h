// The chat -> harmony mapping (docs/api.md "Chat through harmony"): OpenAI chat messages, reasoning effort
// and tools -> a HarmonyConversation, and its render for completion. Tests: tests/unit/server/
// conversation_test.cc, tests/api/contract.test.mjs (rendered text against harmony's golden files).
#pragma once

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "server/api_error.h"
#include "server/request.h"
#include "tokenizer/harmony_encoding.h"

namespace volt::server {

// Chat messages -> harmony conversation: our system message (identity, knowledge cutoff, `current_date`,
// reasoning effort: `effort` or medium, the channels line); every system and developer message, in
// order, joined by a blank line, as the developer message's instructions; user text as user messages;
// assistant history with its reasoning as analysis (append_assistant_turn); tool results authored by the
// function that an earlier tool_call_id names; `tools` as the developer message's functions namespace.
// 400 naming the field for an unknown tool_call_id.
std::variant<tokenizer::HarmonyConversation, ApiError> build_conversation(
    const std::vector<ChatMessage>& messages, const std::optional<std::string>& effort,
    const std::string& current_date, const std::vector<tokenizer::ToolDescription>& tools = {});

// build_conversation + the harmony render of the generation prompt (a forced call's header included).
// `current_date` empty: today's UTC date.
std::variant<tokenizer::HarmonyPrompt, ApiError> render_chat_prompt(
    const tokenizer::HarmonyEncoding& encoding, const std::vector<ChatMessage>& messages,
    const std::optional<std::string>& effort, const std::vector<tokenizer::ToolDescription>& tools,
    const std::optional<std::string>& forced_function, const std::string& current_date);

}  // namespace volt::server
