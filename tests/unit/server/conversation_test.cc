// Chat messages -> harmony prompt: where system and developer messages go (docs/api.md), reasoning
// effort, assistant history with reasoning, tool results by tool_call_id. The expected prompt text is
// written by hand from spec/gpt-oss.md §5.3-5.5.
#include <gtest/gtest.h>

#include "server/openai_routes.h"
#include "tokenizer/harmony_renderer.h"

namespace volt::server {
namespace {

ChatMessage msg(std::string role, std::string content) {
    ChatMessage m;
    m.role = std::move(role);
    m.content = std::move(content);
    return m;
}

std::string render(const std::vector<ChatMessage>& messages, std::optional<std::string> effort) {
    auto conv = build_conversation(messages, effort, "2025-09-01");
    EXPECT_TRUE(std::holds_alternative<tokenizer::HarmonyConversation>(conv));
    auto pieces = tokenizer::render_completion_pieces(std::get<tokenizer::HarmonyConversation>(conv));
    EXPECT_TRUE(pieces.is_ok());
    return tokenizer::pieces_to_text(*pieces);
}

}  // namespace

TEST(Conversation, SystemAndDeveloperMessagesBecomeDeveloperInstructions) {
    std::string text =
        render({msg("system", "Be brief."), msg("user", "Hi"), msg("developer", "Use English.")}, "high");
    EXPECT_EQ(
        text,
        "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
        "Knowledge cutoff: 2024-06\nCurrent date: 2025-09-01\n\nReasoning: high\n\n"
        "# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>"
        "<|start|>developer<|message|># Instructions\n\nBe brief.\n\nUse English.<|end|>"
        "<|start|>user<|message|>Hi<|end|><|start|>assistant");
}

TEST(Conversation, NoDeveloperMessageWithoutInstructionsAndMediumByDefault) {
    std::string text = render({msg("user", "Hi")}, std::nullopt);
    EXPECT_NE(text.find("Reasoning: medium"), std::string::npos);
    EXPECT_EQ(text.find("<|start|>developer"), std::string::npos);
}

TEST(Conversation, AssistantHistoryWithReasoningAndToolResults) {
    ChatMessage call = msg("assistant", "");
    call.reasoning = "Need the weather.";
    call.tool_calls.push_back({"call_1", "get_weather", "{\"city\":\"Paris\"}"});
    ChatMessage result = msg("tool", "{\"temp\":20}");
    result.tool_call_id = "call_1";
    std::string text = render({msg("user", "Weather?"), call, result}, std::nullopt);
    // The unfinished turn keeps its analysis; the call and the result as harmony writes them (§5.5).
    EXPECT_NE(text.find("<|start|>assistant<|channel|>analysis<|message|>Need the weather.<|end|>"
                        "<|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json"
                        "<|message|>{\"city\":\"Paris\"}<|call|>"
                        "<|start|>functions.get_weather "
                        "to=assistant<|channel|>commentary<|message|>{\"temp\":20}<|end|>"),
              std::string::npos)
        << text;

    ChatMessage orphan = msg("tool", "x");
    orphan.tool_call_id = "call_9";
    auto bad = build_conversation({msg("user", "u"), orphan}, std::nullopt, "2025-09-01");
    ASSERT_TRUE(std::holds_alternative<ApiError>(bad));
    EXPECT_EQ(std::get<ApiError>(bad).param, "messages[1].tool_call_id");
}

}  // namespace volt::server
