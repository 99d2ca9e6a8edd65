// Harmony streaming parser: OpenAI's parse goldens (test_simple_reasoning_response, test_simple_tool_call,
// test_streamable_parser, test_tool_response_parsing and the parser cases of inputs-tests.rs /
// inputs-test_harmony.py, non-strict mode) message for message, and every parsing case of
// docs/public-bugs.md (BUG-01, 02, 04, 06, 07, 09, 12, 16, 32) as event-level assertions.
#include "tokenizer/harmony_parser.h"

#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>

#include "harmony_testdata.h"

namespace volt::tokenizer {
namespace {

using testing::gptoss_encoding;
using testing::read_harmony_golden;

class HarmonyParser : public ::testing::Test {
  protected:
    void SetUp() override {
        enc_ = gptoss_encoding();
        ASSERT_NE(enc_, nullptr);
    }
    // Text with control tokens written by name -> ids (special tokens recognised).
    std::vector<int32_t> ids(const std::string& text) const {
        auto r = enc_->tokenizer().encode(text, SpecialTokens::kRecognise);
        EXPECT_TRUE(r.is_ok()) << r.status().to_string();
        return r.is_ok() ? *r : std::vector<int32_t>{};
    }
    std::vector<int32_t> ordinary(const std::string& text) const {
        auto r = enc_->tokenizer().encode(text, SpecialTokens::kIgnore);
        EXPECT_TRUE(r.is_ok());
        return r.is_ok() ? *r : std::vector<int32_t>{};
    }
    // openai/harmony parse_messages_from_completion_tokens (non-strict, keeps parsing after <|return|>).
    std::vector<HarmonyMessage> harmony_parse(const std::vector<int32_t>& tokens, bool role_assistant) const {
        HarmonyParserOptions opts;
        opts.start_in_assistant_header = role_assistant;
        opts.stop_at_terminal = false;
        return parse_completion(enc_, tokens, opts).messages;
    }
    // Generation: the prompt ended in <|start|>assistant.
    ParsedCompletion generate(const std::string& text, HarmonyParserOptions opts = {}) const {
        return parse_completion(enc_, ids(text), opts);
    }
    std::shared_ptr<const HarmonyEncoding> enc_;
};

HarmonyMessage assistant(std::optional<std::string> channel, std::string text) {
    HarmonyMessage m;
    m.author.role = HarmonyRole::kAssistant;
    m.channel = std::move(channel);
    m.content = std::move(text);
    return m;
}

HarmonyMessage with_call(HarmonyMessage m, std::string recipient, std::string content_type) {
    m.recipient = std::move(recipient);
    m.content_type = std::move(content_type);
    return m;
}

std::vector<int32_t> read_token_file(const std::string& name) {
    std::ifstream in(testing::harmony_golden_path(name));
    std::vector<int32_t> out;
    for (int32_t v; in >> v;) out.push_back(v);
    return out;
}

bool has_markup(const std::string& s) {
    for (const char* name : {"<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>",
                             "<|return|>", "<|call|>", "<|endoftext|>"}) {
        if (s.find(name) != std::string::npos) return true;
    }
    return false;
}

void expect_no_markup(const ParsedCompletion& p) {
    EXPECT_FALSE(has_markup(p.content)) << p.content;
    EXPECT_FALSE(has_markup(p.reasoning)) << p.reasoning;
    EXPECT_FALSE(has_markup(p.preamble)) << p.preamble;
    for (const auto& call : p.tool_calls) {
        EXPECT_FALSE(has_markup(call.name)) << call.name;
        EXPECT_FALSE(has_markup(call.arguments)) << call.arguments;
    }
}

// ---- openai/harmony parse goldens ----

TEST_F(HarmonyParser, SimpleReasoningResponse) {
    const std::vector<int32_t> tokens = read_token_file("test_simple_reasoning_response.txt");
    ASSERT_EQ(tokens.size(), 35u);
    const std::vector<HarmonyMessage> expected = {
        assistant("analysis", "User asks: \"What is 2 + 2?\" Simple arithmetic. Provide answer."),
        assistant("final", "2 + 2 = 4.")};
    EXPECT_EQ(harmony_parse(tokens, true), expected);
}

TEST_F(HarmonyParser, SimpleToolCall) {
    const std::vector<HarmonyMessage> expected = {
        assistant("analysis",
                  "User asks: \"What is the weather in Tokyo?\" We need to use lookup_weather tool."),
        with_call(assistant("analysis", "{\"location\": \"Tokyo\"}"), "lookup_weather", "code")};
    // The token file (recipient on the role) and the inline ids of tests.rs (recipient after the channel).
    EXPECT_EQ(harmony_parse(read_token_file("test_simple_tool_call.txt"), true), expected);
    const std::vector<int32_t> inline_ids = {
        200005, 35644, 200008, 1844,  31064,  25,    392,    4827,  382,  290,    11122,  306,    40510,
        16842,  1416,  1309,   316,   1199,   37342, 170154, 4584,  13,   200007, 200006, 173781, 200005,
        35644,  316,   28,     29712, 170154, 3490,  200008, 10848, 7693, 1243,   392,    173844, 18583};
    EXPECT_EQ(harmony_parse(inline_ids, true), expected);
}

TEST_F(HarmonyParser, StreamableParserGolden) {
    auto messages = harmony_parse(ids(read_harmony_golden("test_streamable_parser.txt")), true);
    ASSERT_EQ(messages.size(), 3u);
    EXPECT_EQ(messages[0].channel, std::optional<std::string>("analysis"));
    EXPECT_TRUE(messages[0].content.starts_with("User asks \"Who is the current US president?\""));
    EXPECT_EQ(messages[1],
              with_call(assistant("commentary",
                                  "{\"query\": \"current US president July 2025\", \"topn\": 10, "
                                  "\"source\": \"news\"}"),
                        "browser.search", "code"));
    HarmonyMessage tool;
    tool.author = {HarmonyRole::kTool, "browser.search"};
    tool.recipient = "assistant";
    tool.channel = "commentary";
    tool.content = "{\"result\": \"https://openai.com/\"}";
    EXPECT_EQ(messages[2], tool);
}

TEST_F(HarmonyParser, ToolResponseParsing) {
    HarmonyMessage expected;
    expected.author = {HarmonyRole::kTool, "browser.search"};
    expected.recipient = "assistant";
    expected.channel = "commentary";
    expected.content = "{\"result\": \"https://openai.com/\"}";
    auto pieces = render_message_pieces(expected);
    ASSERT_TRUE(pieces.is_ok());
    auto tokens = enc_->encode_pieces(*pieces);
    ASSERT_TRUE(tokens.is_ok());
    tokens->pop_back();  // drop <|end|>, as the golden does
    EXPECT_EQ(enc_->tokenizer().decode(*tokens), read_harmony_golden("test_tool_response_parsing.txt"));
    auto messages = harmony_parse(*tokens, false);
    ASSERT_EQ(messages.size(), 1u);
    EXPECT_EQ(messages[0], expected);
}

TEST_F(HarmonyParser, ToolCallWithConstrainVariants) {
    const HarmonyMessage tokyo = with_call(assistant("commentary", "{\"location\": \"Tokyo\"}"),
                                           "functions.get_weather", "<|constrain|>json");
    EXPECT_EQ(
        harmony_parse(ids("<|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json"
                          "<|message|>{\"location\": \"Tokyo\"}<|call|>"),
                      false),
        std::vector<HarmonyMessage>{tokyo});
    EXPECT_EQ(
        harmony_parse(ids("<|start|>assistant to=functions.get_weather<|channel|>commentary<|constrain|>json"
                          "<|message|>{\"location\": \"Tokyo\"}<|end|>"),
                      false),
        std::vector<HarmonyMessage>{tokyo});
    EXPECT_EQ(
        harmony_parse(ids("<|start|>assistant<|channel|>commentary to=functions.get_weather<|constrain|>json"
                          "<|message|>{\"latitude\":48.8566,\"longitude\":2.3522}<|call|>"),
                      false),
        std::vector<HarmonyMessage>{
            with_call(assistant("commentary", "{\"latitude\":48.8566,\"longitude\":2.3522}"),
                      "functions.get_weather", "<|constrain|>json")});
    // test_tool_call_with_constrain_tokenized_correctly: parse, render back, same ids.
    const std::vector<int32_t> t =
        ids("<|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>"
            "{\"location\": \"Tokyo\"}<|call|>");
    EXPECT_EQ(enc_->encode_pieces(*render_message_pieces(tokyo)).value(), t);
}

TEST_F(HarmonyParser, MissingMessageTokenNonStrict) {
    const std::string tail =
        "<|start|>assistant<|channel|>analysis<|message|>We must refuse<|end|>"
        "<|start|>assistant<|channel|>final<|message|>I'm sorry, but I can't help with that.<|return|>";
    const std::vector<HarmonyMessage> expected = {
        assistant(std::nullopt, "I must refuse"), assistant("analysis", "We must refuse"),
        assistant("final", "I'm sorry, but I can't help with that.")};
    EXPECT_EQ(harmony_parse(ids("I must refuse<|end|>" + tail), true), expected);
    std::vector<HarmonyMessage> expected2 = expected;
    expected2[0].channel = "analysis";
    EXPECT_EQ(harmony_parse(ids("<|channel|>analysis I must refuse<|end|>" + tail), true), expected2);
    EXPECT_EQ(harmony_parse(ids("... Let's use the tool.<|end|><|start|>assistant to=functions.get_weather"
                                "<|channel|>commentary json<|message|>{\"location\": \"Tokyo\"}<|call|>"),
                            true),
              (std::vector<HarmonyMessage>{assistant(std::nullopt, "... Let's use the tool."),
                                           with_call(assistant("commentary", "{\"location\": \"Tokyo\"}"),
                                                     "functions.get_weather", "json")}));
    EXPECT_EQ(harmony_parse(ids("<|channel|>commentary Hello<|end|>"), true),
              std::vector<HarmonyMessage>{assistant("commentary", "Hello")});
}

// ---- UTF-8 handling (inputs-test_harmony.py / tests.rs streamable parser cases) ----

class HarmonyParserUtf8 : public HarmonyParser {
  protected:
    void SetUp() override {
        HarmonyParser::SetUp();
        // Token 9552 is the bytes [32, 240, 159]: a space and the start of a 4-byte character.
        ASSERT_EQ(enc_->tokenizer().token_bytes(9552), (std::vector<uint8_t>{32, 240, 159}));
    }
    std::string parse_one(const std::vector<int32_t>& body, bool end) {
        std::vector<int32_t> t = ids("<|start|>assistant<|message|>");
        t.insert(t.end(), body.begin(), body.end());
        if (end) t.push_back(enc_->special_ids().end);
        auto messages = harmony_parse(t, false);
        EXPECT_EQ(messages.size(), 1u);
        return messages.empty() ? "" : messages[0].content;
    }
};

TEST_F(HarmonyParserUtf8, InvalidSequences) {
    std::vector<int32_t> body = {9552, 9552};
    for (int32_t id : ordinary("worked")) body.push_back(id);
    EXPECT_EQ(parse_one(body, true), " \uFFFD \uFFFDworked");

    body = {9552};
    for (int32_t id : ordinary("XY")) body.push_back(id);
    EXPECT_EQ(parse_one(body, true), " \uFFFDXY");

    body = {9552};
    for (int32_t id : ordinary(" interesting")) body.push_back(id);
    EXPECT_EQ(parse_one(body, true), " \uFFFD interesting");
}

TEST_F(HarmonyParserUtf8, DeltasWithoutEndMarker) {
    HarmonyParserOptions opts;
    opts.start_in_assistant_header = false;
    HarmonyStreamParser parser(enc_, opts);
    std::vector<int32_t> t = ids("<|start|>assistant<|message|>");
    t.push_back(9552);
    for (int32_t id : ordinary(" interesting")) t.push_back(id);
    for (int32_t id : ordinary(" story")) t.push_back(id);
    std::string deltas;
    for (int32_t id : t) {
        for (const HarmonyEvent& e : parser.push(id)) {
            ASSERT_EQ(e.type, HarmonyEventType::kContentDelta);
            deltas += e.text;
        }
    }
    EXPECT_EQ(deltas, " \uFFFD interesting story");
    auto more = parser.push(ordinary("Y")[0]);
    ASSERT_EQ(more.size(), 1u);
    EXPECT_EQ(more[0].text, "Y");
}

TEST_F(HarmonyParserUtf8, FlushesPartialBytesAtEnd) {
    std::vector<int32_t> body = {9552};
    for (int32_t id : ordinary("Hi")) body.push_back(id);
    EXPECT_EQ(parse_one(body, false), " \uFFFDHi");
    // A character cut by max tokens comes out as one U+FFFD at finish (BUG-32), not dropped.
    EXPECT_EQ(parse_one({9552}, false), " \uFFFD");
}

TEST_F(HarmonyParserUtf8, WaitsForMultiTokenCharacter) {
    const std::vector<int32_t> emoji = ordinary("\U0001F496");
    ASSERT_GE(emoji.size(), 2u);
    HarmonyParserOptions opts;
    opts.start_in_assistant_header = false;
    HarmonyStreamParser parser(enc_, opts);
    for (int32_t id : ids("<|start|>assistant<|message|>")) EXPECT_TRUE(parser.push(id).empty());
    std::string deltas;
    for (size_t i = 0; i < emoji.size(); ++i) {
        auto events = parser.push(emoji[i]);
        if (i + 1 < emoji.size()) EXPECT_TRUE(events.empty());
        for (const auto& e : events) deltas += e.text;
    }
    EXPECT_EQ(deltas, "\U0001F496");
    auto end = parser.push(enc_->special_ids().end);
    ASSERT_EQ(end.size(), 1u);
    EXPECT_EQ(end[0].type, HarmonyEventType::kMessageDone);
    EXPECT_EQ(parser.messages(), std::vector<HarmonyMessage>{assistant(std::nullopt, "\U0001F496")});
}

TEST_F(HarmonyParserUtf8, DoesNotLeakBytesBetweenMessages) {
    std::vector<int32_t> t = ids("<|start|>assistant<|message|>");
    t.push_back(9552);
    t.push_back(9552);
    for (int32_t id : ids("<|end|><|start|>assistant<|message|>Hi<|end|>")) t.push_back(id);
    auto messages = harmony_parse(t, false);
    ASSERT_EQ(messages.size(), 2u);
    EXPECT_EQ(messages[1], assistant(std::nullopt, "Hi"));
}

TEST_F(HarmonyParserUtf8, InvalidTokenIdBecomesReplacement) {
    std::vector<int32_t> t =
        ids("<|start|>assistant<|channel|>analysis<|message|>Practice invalid token handling.");
    t.push_back(-1);  // u32::MAX in the Rust test
    auto messages = harmony_parse(t, false);
    ASSERT_EQ(messages.size(), 1u);
    EXPECT_EQ(messages[0], assistant("analysis", "Practice invalid token handling.\uFFFD"));
}

TEST_F(HarmonyParserUtf8, TrickyText) {
    const std::string tricky =
        "Hello M\u00fcller, \u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5, "
        "\u041f\u0440\u0438\u0432\u0435\u0442, "
        "\u05e9\u05dc\u05d5\u05dd, \u0645\u0631\u062d\u0628\u0627, \u0928\u092e\u0938\u094d\u0924\u0947, "
        "\u3053\u3093\u306b\u3061\u306f, \uc548\ub155\ud558\uc138\uc694, \u4f60\u597d. Normalized "
        "(na\u00efve) vs. "
        "decomposed (nai\u0308ve) characters. Some emojis: \U0001F60A\U0001F44B\U0001F3FE"
        "\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466\U0001F1FA\U0001F1F8.";
    HarmonyParserOptions opts;
    opts.start_in_assistant_header = false;
    HarmonyStreamParser parser(enc_, opts);
    std::vector<int32_t> t = ids("<|start|>assistant<|message|>");
    for (int32_t id : ordinary(tricky)) t.push_back(id);
    t.push_back(enc_->special_ids().end);
    std::string deltas;
    for (int32_t id : t) {
        for (const auto& e : parser.push(id)) {
            EXPECT_EQ(e.text.find("\uFFFD"), std::string::npos);
            deltas += e.text;
        }
    }
    EXPECT_EQ(deltas, tricky);
    EXPECT_EQ(parser.messages(), std::vector<HarmonyMessage>{assistant(std::nullopt, tricky)});
}

// ---- generation: events and public bug cases ----

// BUG-01: reasoning and answer separated from ids, nothing glued ("analysis...assistantfinal").
TEST_F(HarmonyParser, Bug01ReasoningAndContentSeparated) {
    HarmonyStreamParser parser(enc_);
    std::vector<HarmonyEvent> events;
    for (int32_t id : ids("<|channel|>analysis<|message|>User wants 2+2. Answer 4.<|end|>"
                          "<|start|>assistant<|channel|>final<|message|>4<|return|>")) {
        for (auto& e : parser.push(id)) events.push_back(std::move(e));
    }
    EXPECT_TRUE(parser.done());
    std::string reasoning, content;
    for (const auto& e : events) {
        if (e.type == HarmonyEventType::kReasoningDelta) reasoning += e.text;
        if (e.type == HarmonyEventType::kContentDelta) content += e.text;
    }
    EXPECT_EQ(reasoning, "User wants 2+2. Answer 4.");
    EXPECT_EQ(content, "4");
    ASSERT_FALSE(events.empty());
    EXPECT_EQ(events.back().type, HarmonyEventType::kMessageDone);
    EXPECT_TRUE(parser.finish().empty());
}

// BUG-02 (a): a well-formed call gives the declared name and an id, arguments streamed as they come.
TEST_F(HarmonyParser, Bug02WellFormedToolCall) {
    HarmonyParserOptions opts;
    opts.function_names = std::vector<std::string>{"exec"};
    opts.tool_call_id_prefix = "call_req7_";
    HarmonyStreamParser parser(enc_, opts);
    std::vector<HarmonyEvent> events;
    for (int32_t id : ids("<|channel|>commentary to=functions.exec <|constrain|>json<|message|>"
                          "{\"command\": \"ls -la /tmp\"}<|call|>")) {
        for (auto& e : parser.push(id)) events.push_back(std::move(e));
    }
    ASSERT_GE(events.size(), 3u);
    EXPECT_EQ(events[0], (HarmonyEvent{HarmonyEventType::kToolCallStart, "exec", "call_req7_0", 0}));
    std::string args;
    for (size_t i = 1; i + 1 < events.size(); ++i) {
        EXPECT_EQ(events[i].type, HarmonyEventType::kToolArgumentsDelta);
        EXPECT_EQ(events[i].tool_call_id, "call_req7_0");
        args += events[i].text;
    }
    EXPECT_EQ(args, "{\"command\": \"ls -la /tmp\"}");
    EXPECT_EQ(events.back(), (HarmonyEvent{HarmonyEventType::kMessageDone, "", "call_req7_0", 0}));
    EXPECT_TRUE(parser.done());
    EXPECT_EQ(parser.tool_call_count(), 1);
}

// BUG-02 (b): a recipient followed by another channel marker never yields a name with markup; an
// undeclared function is not a tool call (its text goes to reasoning, never to content).
TEST_F(HarmonyParser, Bug02PollutedOrUndeclaredRecipient) {
    HarmonyParserOptions opts;
    opts.function_names = std::vector<std::string>{"exec"};
    auto p = generate(
        "<|channel|>commentary to=functions.exec<|channel|>analysis <|constrain|>json<|message|>"
        "{\"command\": \"pwd\"}<|call|>",
        opts);
    expect_no_markup(p);
    for (const auto& call : p.tool_calls) EXPECT_EQ(call.name, "exec");
    auto q = generate(
        "<|start|>assistant<|channel|>commentary to=functions.assistant<|channel|>analysis<|message|>"
        "{\"command\": \"pwd\"}<|call|>",
        opts);
    expect_no_markup(q);
    EXPECT_TRUE(q.tool_calls.empty());
    EXPECT_EQ(q.content, "");
    EXPECT_EQ(q.reasoning, "{\"command\": \"pwd\"}");
    auto r = generate(
        "<|channel|>commentary to=functions.rm <|constrain|>json<|message|>{\"path\": \"/\"}<|call|>", opts);
    EXPECT_TRUE(r.tool_calls.empty());
    EXPECT_EQ(r.reasoning, "{\"path\": \"/\"}");
}

// BUG-04: after <|return|> the rest is ignored; text where <|start|> belongs does not break parsing.
TEST_F(HarmonyParser, Bug04TerminatorWhereStartBelongs) {
    auto p = generate("<|channel|>final<|message|>hi<|return|><|return|>");
    EXPECT_EQ(p.content, "hi");
    EXPECT_TRUE(p.done);
    auto q = generate(
        "<|channel|>final<|message|>hi<|return|><|start|>assistant<|channel|>final<|message|>more<|end|>");
    EXPECT_EQ(q.content, "hi");
    auto r = generate(
        "<|channel|>analysis<|message|>think<|end|> <|start|>assistant<|channel|>final<|message|>"
        "Hello!<|return|>");
    EXPECT_EQ(r.reasoning, "think");
    EXPECT_EQ(r.content, "Hello!");
    expect_no_markup(r);
}

// BUG-06: headers that never reach <|message|>, or carry extra text.
TEST_F(HarmonyParser, Bug06HeaderNotClosed) {
    auto a = generate("<|channel|>final The answer is 4.<|return|>");
    EXPECT_EQ(a.content, "The answer is 4.");
    auto b = generate(
        "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final The answer is "
        "4.<|return|>");
    EXPECT_EQ(b.reasoning, "Think.");
    EXPECT_EQ(b.content, "The answer is 4.");
    auto c = generate("<|channel|>commentary -commentary<|message|>Checking now.<|end|>");
    EXPECT_EQ(c.preamble, "Checking now.");
    auto d = generate("<|channel|>final <|constrain|>response<|message|>Paris<|return|>");
    EXPECT_EQ(d.content, "Paris");
    auto e = generate("<|channel|>final Hello<|return|>");
    EXPECT_EQ(e.content, "Hello");
    auto f = generate("<|channel|>commentary to=functions.get_weather json {\"city\": \"Oslo\"}<|call|>");
    ASSERT_EQ(f.tool_calls.size(), 1u);
    EXPECT_EQ(f.tool_calls[0].name, "get_weather");
    EXPECT_EQ(f.tool_calls[0].arguments, "{\"city\": \"Oslo\"}");
    for (const auto* p : {&a, &b, &c, &d, &e, &f}) expect_no_markup(*p);
}

// BUG-07: junk after <|channel|>; the later well-formed analysis + final pair still gives the answer.
TEST_F(HarmonyParser, Bug07JunkAfterChannel) {
    const std::string good =
        "<|end|><|start|>assistant<|channel|>analysis<|message|>Think.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Answer.<|return|>";
    for (const std::string junk :
         {"<|channel|>??", "<|channel|>commentary 2?", "<|channel|>commentary?commentary?",
          "<|channel|>commentary to=assistant<|channel|>commentary?",
          "<|channel|>free text about the question"}) {
        auto p = generate(junk + good);
        EXPECT_EQ(p.content, "Answer.") << junk;
        EXPECT_TRUE(p.reasoning.ends_with("Think.")) << junk;
        EXPECT_TRUE(p.tool_calls.empty());
        expect_no_markup(p);
    }
    // Junk channel with a <|message|>: demoted to reasoning, not content.
    auto q = generate(
        "<|channel|>commentary?commentary?<|message|>junk<|end|><|start|>assistant<|channel|>final"
        "<|message|>Answer.<|return|>");
    EXPECT_EQ(q.content, "Answer.");
    EXPECT_EQ(q.reasoning, "junk");
}

// BUG-09: trailing <|end|> or text after the last message is harmless.
TEST_F(HarmonyParser, Bug09TrailingOutput) {
    auto p = generate("<|channel|>final<|message|>ok<|end|>");
    EXPECT_EQ(p.content, "ok");
    auto q = generate("<|channel|>final<|message|>ok<|end|><|end|>");
    EXPECT_EQ(q.content, "ok");
    auto r = generate("<|channel|>final<|message|>ok<|end|>trailing words");
    EXPECT_TRUE(r.content.starts_with("ok"));
    expect_no_markup(r);
}

// BUG-12: a commentary message without recipient is a preamble, never raw markup in content; one
// addressed to a function is a tool call.
TEST_F(HarmonyParser, Bug12CommentaryAfterToolResults) {
    auto p = generate(
        "<|channel|>commentary<|message|>{ \"note\": \"no matches\" }<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Nothing found.<|return|>");
    EXPECT_EQ(p.preamble, "{ \"note\": \"no matches\" }");
    EXPECT_EQ(p.content, "Nothing found.");
    expect_no_markup(p);
    auto q = generate(
        "<|channel|>commentary to=functions.search <|constrain|>json<|message|>{\"q\": \"x\"}<|call|>");
    ASSERT_EQ(q.tool_calls.size(), 1u);
    EXPECT_EQ(q.tool_calls[0].name, "search");
    EXPECT_EQ(q.content, "");
}

// BUG-16: arguments are returned as the raw string even when they are not valid JSON.
TEST_F(HarmonyParser, Bug16UnparseableArgumentsStayRaw) {
    const std::string args = "{\"file_path\": \"a.c\", \"content\": \"/** {x} */\\n\"}]";
    auto p = generate("<|channel|>commentary to=functions.write_file <|constrain|>json<|message|>" + args +
                      "<|call|>");
    ASSERT_EQ(p.tool_calls.size(), 1u);
    EXPECT_EQ(p.tool_calls[0].arguments, args);
}

// BUG-32: a character split across tokens is never sent as U+FFFD halves, in every kind of delta.
TEST_F(HarmonyParser, Bug32SplitCharactersInEveryDelta) {
    const std::string text = "\u4f60\u597d \U0001F496 na\u0308ive \U0001F468\u200d\U0001F469\u200d\U0001F467";
    HarmonyParserOptions opts;
    HarmonyStreamParser parser(enc_, opts);
    std::vector<int32_t> t;
    auto add = [&](const std::string& s, bool special) {
        for (int32_t id : special ? ids(s) : ordinary(s)) t.push_back(id);
    };
    add("<|channel|>analysis<|message|>", true);
    add(text, false);
    add("<|end|><|start|>assistant<|channel|>commentary to=functions.say <|constrain|>json<|message|>", true);
    add(text, false);
    add("<|call|>", true);
    std::string reasoning, args;
    for (int32_t id : t) {
        for (const auto& e : parser.push(id)) {
            EXPECT_EQ(e.text.find("\uFFFD"), std::string::npos);
            if (e.type == HarmonyEventType::kReasoningDelta) reasoning += e.text;
            if (e.type == HarmonyEventType::kToolArgumentsDelta) args += e.text;
        }
    }
    EXPECT_EQ(reasoning, text);
    EXPECT_EQ(args, text);
}

TEST_F(HarmonyParser, PlainTextWithoutStructureIsContent) {
    auto p = generate("Hello world.\nSecond line.");
    EXPECT_EQ(p.content, "Hello world.\nSecond line.");
    EXPECT_FALSE(p.done);
    // A long answer with no newline streams before the end (header limit), unchanged.
    std::string long_text;
    for (int i = 0; i < 40; ++i) long_text += "word" + std::to_string(i) + " ";
    HarmonyStreamParser parser(enc_);
    std::string streamed;
    for (int32_t id : ordinary(long_text)) {
        for (const auto& e : parser.push(id)) streamed += e.text;
    }
    EXPECT_FALSE(streamed.empty());
    for (const auto& e : parser.finish()) streamed += e.text;
    EXPECT_EQ(streamed, long_text);
}

TEST_F(HarmonyParser, CutByMaxTokens) {
    auto p = generate("<|channel|>analysis<|message|>Thinking about");
    EXPECT_EQ(p.reasoning, "Thinking about");
    EXPECT_FALSE(p.done);
    auto q = generate("<|channel|>analysis<|message|>A.<|end|><|start|>assistant<|channel|>fin");
    EXPECT_EQ(q.reasoning, "A.");
    EXPECT_EQ(q.content, "");
    expect_no_markup(q);
    auto r = generate("<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\":");
    ASSERT_EQ(r.tool_calls.size(), 1u);
    EXPECT_EQ(r.tool_calls[0].arguments, "{\"a\":");
}

TEST_F(HarmonyParser, SeveralAnalysisMessages) {
    auto p = generate(
        "<|channel|>analysis<|message|>A<|end|><|start|>assistant<|channel|>analysis<|message|>B<|end|>"
        "<|start|>assistant<|channel|>final<|message|>C<|return|>");
    EXPECT_EQ(p.reasoning, "A\nB");
    EXPECT_EQ(p.content, "C");
    // A message that starts without <|end|> first still splits cleanly.
    auto q =
        generate("<|channel|>analysis<|message|>A<|start|>assistant<|channel|>final<|message|>C<|return|>");
    EXPECT_EQ(q.reasoning, "A");
    EXPECT_EQ(q.content, "C");
    auto r = generate("<|channel|>analysis<|message|>A<|channel|>final<|message|>C<|return|>");
    EXPECT_EQ(r.reasoning, "A");
    EXPECT_EQ(r.content, "C");
}

TEST_F(HarmonyParser, ForcedToolCallPrefix) {
    HarmonyConversation c;
    c.messages = {HarmonyMessage::user("Weather in Oslo?")};
    CompletionOptions copts;
    copts.forced_function = "get_weather";
    auto prompt = enc_->render_for_completion(c, copts);
    ASSERT_TRUE(prompt.is_ok());
    std::vector<int32_t> output = prompt->parser_prefix;
    for (int32_t id : ids("{\"city\": \"Oslo\"}<|call|>")) output.push_back(id);
    auto p = parse_completion(enc_, output);
    ASSERT_EQ(p.tool_calls.size(), 1u);
    EXPECT_EQ(p.tool_calls[0].name, "get_weather");
    EXPECT_EQ(p.tool_calls[0].id, "call_0");
    EXPECT_EQ(p.tool_calls[0].arguments, "{\"city\": \"Oslo\"}");
}

// Seeded random mixes of control and ordinary tokens: never markup in any event text, and the
// non-streaming result equals the concatenated stream.
TEST_F(HarmonyParser, RandomStreamsNeverLeakMarkup) {
    const HarmonySpecialIds& s = enc_->special_ids();
    std::vector<int32_t> pool = {s.start,   s.end,  s.message, s.channel, s.constrain,
                                 s.return_, s.call, 200013,    9552};
    for (int32_t id : ordinary(" analysis final commentary assistant to=functions.f json {\"a\": 1} hi\n")) {
        pool.push_back(id);
    }
    std::mt19937 rng(1234);
    for (int trial = 0; trial < 300; ++trial) {
        std::vector<int32_t> t(1 + rng() % 40);
        for (int32_t& id : t) id = pool[rng() % pool.size()];
        HarmonyParserOptions opts;
        opts.stop_at_terminal = trial % 2 == 0;
        HarmonyStreamParser parser(enc_, opts);
        std::string content;
        for (int32_t id : t) {
            for (const auto& e : parser.push(id)) {
                ASSERT_FALSE(has_markup(e.text)) << "trial " << trial;
                if (e.type == HarmonyEventType::kContentDelta) content += e.text;
            }
        }
        for (const auto& e : parser.finish()) {
            ASSERT_FALSE(has_markup(e.text)) << "trial " << trial;
            if (e.type == HarmonyEventType::kContentDelta) content += e.text;
        }
        EXPECT_EQ(parse_completion(enc_, t, opts).content, content) << "trial " << trial;
    }
}

}  // namespace
}  // namespace volt::tokenizer
