// Request schemas: valid bodies give the values sent; each malformed one gives 400 with the `param` the
// OpenAI API names for it.
#include "server/request.h"

#include <gtest/gtest.h>

#include "tokenizer/harmony_renderer.h"

namespace volt::server {
namespace {

using json = RequestJson;

ApiError chat_error(const std::string& body) {
    auto j = parse_json_body(body);
    if (auto* e = std::get_if<ApiError>(&j)) return *e;
    auto r = parse_chat_request(std::get<json>(j));
    EXPECT_TRUE(std::holds_alternative<ApiError>(r)) << body;
    return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : ApiError{};
}

ApiError completion_error(const std::string& body) {
    auto r = parse_completion_request(json::parse(body));
    EXPECT_TRUE(std::holds_alternative<ApiError>(r)) << body;
    return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : ApiError{};
}

}  // namespace

TEST(Request, ChatFields) {
    auto r = parse_chat_request(json::parse(R"({
        "model": "m", "stream": true, "stream_options": {"include_usage": true},
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "assistant", "content": null, "reasoning_content": "think"},
            {"role": "assistant", "content": "x", "reasoning": "think2",
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "42"}],
        "max_completion_tokens": 7, "temperature": 0, "top_p": 0.5, "top_k": -1, "seed": 3, "n": 2,
        "stop": ["END", "STOP"], "reasoning_effort": "low", "logit_bias": {"17": -100},
        "ignore_eos": true, "stop_token_ids": [5], "tools": [], "tool_choice": "none", "logprobs": false})"));
    ASSERT_TRUE(std::holds_alternative<ChatRequest>(r)) << std::get<ApiError>(r).message;
    const ChatRequest& c = std::get<ChatRequest>(r);
    EXPECT_EQ(c.model, "m");
    ASSERT_EQ(c.messages.size(), 5u);
    EXPECT_EQ(c.messages[1].content, "ab");
    EXPECT_EQ(c.messages[2].content, "");
    EXPECT_EQ(c.messages[2].reasoning, "think");
    EXPECT_EQ(c.messages[3].reasoning, "think2");
    ASSERT_EQ(c.messages[3].tool_calls.size(), 1u);
    EXPECT_EQ(c.messages[3].tool_calls[0].name, "f");
    EXPECT_EQ(c.messages[4].tool_call_id, "c1");
    EXPECT_TRUE(c.params.stream);
    EXPECT_TRUE(c.params.include_usage);
    EXPECT_EQ(c.params.max_tokens, 7);
    EXPECT_EQ(c.params.sampling.temperature, 0.0f);
    EXPECT_EQ(c.params.sampling.top_p, 0.5f);
    EXPECT_EQ(c.params.sampling.top_k, 0);
    EXPECT_EQ(c.params.sampling.seed, 3u);
    EXPECT_EQ(c.params.sampling.n, 2);
    EXPECT_EQ(c.params.stop, (std::vector<std::string>{"END", "STOP"}));
    EXPECT_EQ(c.reasoning_effort, "low");
    ASSERT_EQ(c.params.sampling.logit_bias.size(), 1u);
    EXPECT_EQ(c.params.sampling.logit_bias[0], (std::pair<int32_t, float>{17, -100.0f}));
    EXPECT_TRUE(c.params.sampling.ignore_eos);
    EXPECT_EQ(c.params.sampling.stop_token_ids, std::vector<int32_t>{5});
    EXPECT_EQ(c.params.sampling.logprobs, -1);
}

TEST(Request, Logprobs) {
    auto chat = parse_chat_request(json::parse(
        R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 3})"));
    ASSERT_TRUE(std::holds_alternative<ChatRequest>(chat));
    EXPECT_EQ(std::get<ChatRequest>(chat).params.sampling.logprobs, 3);
    auto cmpl = parse_completion_request(json::parse(R"({"model": "m", "prompt": "x", "logprobs": 0})"));
    ASSERT_TRUE(std::holds_alternative<CompletionRequest>(cmpl));
    EXPECT_EQ(std::get<CompletionRequest>(cmpl).params.sampling.logprobs, 0);
    EXPECT_EQ(completion_error(R"({"model": "m", "prompt": "x", "logprobs": 21})").param, "logprobs");
}

TEST(Request, PriorityIsVllmsIntegerField) {
    auto r = parse_completion_request(json::parse(R"({"model": "m", "prompt": "x", "priority": -1000})"));
    ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r)) << std::get<ApiError>(r).message;
    EXPECT_EQ(std::get<CompletionRequest>(r).params.sampling.priority, -1000);
    auto d = parse_completion_request(json::parse(R"({"model": "m", "prompt": "x"})"));
    ASSERT_TRUE(std::holds_alternative<CompletionRequest>(d));
    EXPECT_EQ(std::get<CompletionRequest>(d).params.sampling.priority, 0);
    EXPECT_EQ(completion_error(R"({"model": "m", "prompt": "x", "priority": 1.5})").param,
              std::optional<std::string>("priority"));
    EXPECT_EQ(
        chat_error(R"({"model": "m", "messages": [{"role": "user", "content": "a"}], "priority": "high"})")
            .param,
        std::optional<std::string>("priority"));
}

TEST(Request, ChatErrorsNameTheField) {
    EXPECT_EQ(chat_error("{").code, "invalid_json");
    EXPECT_EQ(chat_error("[1]").code, "invalid_json");
    EXPECT_EQ(chat_error(R"({"model": "m", "n": 1e999})").code, "invalid_json");  // overflow, not a crash
    // Invalid UTF-8 (a lone 0xFF byte) and an unpaired surrogate escape.
    EXPECT_EQ(
        chat_error("{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"\xff\"}]}").code,
        "invalid_utf8");
    EXPECT_EQ(chat_error(R"({"model": "m", "messages": [{"role": "user", "content": "\ud83d"}]})").code,
              "invalid_utf8");
    struct Case {
        const char* body;
        const char* param;
    };
    const Case cases[] = {
        {R"({"messages": [{"role": "user", "content": "x"}]})", "model"},
        {R"({"model": 5, "messages": [{"role": "user", "content": "x"}]})", "model"},
        {R"({"model": "m"})", "messages"},
        {R"({"model": "m", "messages": []})", "messages"},
        {R"({"model": "m", "messages": "hi"})", "messages"},
        {R"({"model": "m", "messages": [{"content": "x"}]})", "messages[0].role"},
        {R"({"model": "m", "messages": [{"role": "king", "content": "x"}]})", "messages[0].role"},
        {R"({"model": "m", "messages": [{"role": "user"}]})", "messages[0].content"},
        {R"({"model": "m", "messages": [{"role": "user", "content": 5}]})", "messages[0].content"},
        {R"({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
         "messages[0].content[0]"},
        {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0})", "max_tokens"},
        {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": "5"})",
         "max_tokens"},
        {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1.5})",
         "max_tokens"},
        {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_completion_tokens": -1})",
         "max_completion_tokens"},
        {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": 3})",
         "temperature"},
        {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": true})",
         "temperature"},
        {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "top_p": 0})", "top_p"},
        {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "n": 0})", "n"},
        {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "stop": 5})", "stop"},
        {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "stop": [""]})", "stop"},
        {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": "yes"})", "stream"},
        {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "stream_options": {"include_usage": true}})",
         "stream_options"},
        {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "reasoning_effort": "max"})",
         "reasoning_effort"},
        {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "logit_bias": {"a": 1}})",
         "logit_bias"},
        {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "stop_token_ids": [-1]})",
         "stop_token_ids"},
        {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})",
         "tools[0].function.name"},
        {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "code"}]})",
         "tools[0].type"},
        {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": ["f"]})", "tools[0]"},
        {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})",
         "tool_choice"},
        {R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
             "tools": [{"type": "function", "function": {"name": "a"}}], "tool_choice": {"type": "function",
             "function": {"name": "b"}}})",
         "tool_choice"},
        {R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
             "tools": [{"type": "function", "function": {"name": "a"}}, {"type": "function", "function": {"name": "b"}}],
             "tool_choice": "required"})",
         "tool_choice"},
        {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "logprobs": 1})", "logprobs"},
        {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})",
         "top_logprobs"},
        {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "logprobs": true,
             "top_logprobs": 21})",
         "top_logprobs"},
        {R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
             "response_format": {"type": "json_object"}})",
         "response_format"},
    };
    for (const Case& c : cases) {
        ApiError e = chat_error(c.body);
        EXPECT_EQ(e.http_status, 400) << c.body;
        EXPECT_EQ(e.type, "invalid_request_error") << c.body;
        EXPECT_EQ(e.param, std::string(c.param)) << c.body << " -> " << e.message;
    }
}

TEST(Request, CompletionPromptForms) {
    auto prompts = [](const char* body) {
        auto r = parse_completion_request(json::parse(body));
        EXPECT_TRUE(std::holds_alternative<CompletionRequest>(r)) << body;
        return std::get<CompletionRequest>(r).prompts;
    };
    EXPECT_EQ(prompts(R"({"model": "m", "prompt": "hi"})"), std::vector<Prompt>{Prompt(std::string("hi"))});
    EXPECT_EQ(prompts(R"({"model": "m", "prompt": ["a", "b"]})").size(), 2u);
    EXPECT_EQ(prompts(R"({"model": "m", "prompt": [1, 2, 3]})"),
              std::vector<Prompt>{Prompt(std::vector<int32_t>{1, 2, 3})});
    EXPECT_EQ(prompts(R"({"model": "m", "prompt": [[1], [2, 3]]})").size(), 2u);

    EXPECT_EQ(completion_error(R"({"model": "m"})").param, "prompt");
    EXPECT_EQ(completion_error(R"({"model": "m", "prompt": ""})").param, "prompt");
    EXPECT_EQ(completion_error(R"({"model": "m", "prompt": []})").param, "prompt");
    EXPECT_EQ(completion_error(R"({"model": "m", "prompt": [1, -2]})").param, "prompt");
    EXPECT_EQ(completion_error(R"({"model": "m", "prompt": [1, "a"]})").param, "prompt");
    EXPECT_EQ(completion_error(R"({"model": "m", "prompt": {"a": 1}})").param, "prompt");
    EXPECT_EQ(completion_error(R"({"model": "m", "prompt": "x", "suffix": "y"})").param, "suffix");
    EXPECT_EQ(completion_error(R"({"model": "m", "prompt": "x", "best_of": 3})").param, "best_of");
}

TEST(Request, TokenizeAndDetokenize) {
    auto t = parse_tokenize_request(json::parse(R"({"prompt": "hello", "add_special_tokens": false})"));
    ASSERT_TRUE(std::holds_alternative<TokenizeRequest>(t));
    EXPECT_EQ(std::get<TokenizeRequest>(t).prompt, "hello");
    EXPECT_FALSE(std::get<TokenizeRequest>(t).add_special_tokens);
    EXPECT_TRUE(std::holds_alternative<ApiError>(parse_tokenize_request(json::parse(R"({"prompt": 1})"))));
    auto d = parse_detokenize_request(json::parse(R"({"tokens": [1, 2]})"));
    ASSERT_TRUE(std::holds_alternative<DetokenizeRequest>(d));
    EXPECT_EQ(std::get<DetokenizeRequest>(d).tokens, (std::vector<int32_t>{1, 2}));
    EXPECT_TRUE(
        std::holds_alternative<ApiError>(parse_detokenize_request(json::parse(R"({"tokens": ["a"]})"))));
}

}  // namespace volt::server

namespace volt::server {

TEST(Request, ToolsKeepTheClientsOrderAndToolChoiceForcesOne) {
    auto r = parse_chat_request(
        RequestJson::parse(R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather.",
                   "parameters": {"type": "object", "properties": {"zone": {"type": "string"},
                                                                   "at": {"type": "number"}}}}}],
        "tool_choice": "required"})"));
    ASSERT_TRUE(std::holds_alternative<ChatRequest>(r)) << std::get<ApiError>(r).message;
    const ChatRequest& c = std::get<ChatRequest>(r);
    ASSERT_EQ(c.tools.size(), 1u);
    EXPECT_EQ(c.tools[0].name, "get_weather");
    EXPECT_EQ(c.tools[0].description, "Weather.");
    ASSERT_TRUE(c.tools[0].parameters.has_value());
    EXPECT_EQ((*c.tools[0].parameters)["properties"].begin().key(), "zone");  // as sent, not sorted
    EXPECT_EQ(c.forced_function, "get_weather");

    auto none = parse_chat_request(
        RequestJson::parse(R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
        "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "none"})"));
    ASSERT_TRUE(std::holds_alternative<ChatRequest>(none));
    EXPECT_TRUE(std::get<ChatRequest>(none).tools.empty());
    EXPECT_FALSE(std::get<ChatRequest>(none).forced_function.has_value());
}

}  // namespace volt::server

namespace volt::server {

// docs/request-fields.md: unknown fields are listed (the route warns once per name); user and
// parallel_tool_calls are accepted but type-checked; max_tokens 0 is allowed only with echo.
TEST(Request, UnknownAndAcceptedFields) {
    auto r = parse_chat_request(RequestJson::parse(
        R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "zeta": 1, "user": "u",
            "parallel_tool_calls": false, "alpha": null, "max_completion_tokens": 3})"));
    ASSERT_TRUE(std::holds_alternative<ChatRequest>(r)) << std::get<ApiError>(r).message;
    EXPECT_EQ(std::get<ChatRequest>(r).unknown_fields, (std::vector<std::string>{"zeta", "alpha"}));
    EXPECT_EQ(
        chat_error(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "user": 1})").param,
        "user");
    EXPECT_EQ(chat_error(R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
                             "parallel_tool_calls": "yes"})")
                  .param,
              "parallel_tool_calls");

    auto c = parse_completion_request(
        RequestJson::parse(R"({"model": "m", "prompt": "x", "max_completion_tokens": 3, "echo": true,
                               "max_tokens": 0})"));
    ASSERT_TRUE(std::holds_alternative<CompletionRequest>(c)) << std::get<ApiError>(c).message;
    EXPECT_EQ(std::get<CompletionRequest>(c).unknown_fields,
              std::vector<std::string>{"max_completion_tokens"});
    EXPECT_TRUE(std::get<CompletionRequest>(c).prompt_only);
    EXPECT_EQ(completion_error(R"({"model": "m", "prompt": "x", "max_tokens": 0})").param, "max_tokens");
    EXPECT_EQ(chat_error(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0})")
                  .param,
              "max_tokens");
}

TEST(Request, TokenizeMessagesWithTools) {
    auto t = parse_tokenize_request(RequestJson::parse(
        R"({"messages": [{"role": "user", "content": "x"}],
            "tools": [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "g"}}],
            "tool_choice": {"type": "function", "function": {"name": "g"}}})"));
    ASSERT_TRUE(std::holds_alternative<TokenizeRequest>(t)) << std::get<ApiError>(t).message;
    EXPECT_EQ(std::get<TokenizeRequest>(t).tools.size(), 2u);
    EXPECT_EQ(std::get<TokenizeRequest>(t).forced_function, "g");
}

namespace {

std::string nested(const std::string& open, const std::string& inner, const std::string& close, int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += open;
    s += inner;
    for (int i = 0; i < n; ++i) s += close;
    return s;
}

ApiError body_error(const std::string& body) {
    auto j = parse_json_body(body);
    EXPECT_TRUE(std::holds_alternative<ApiError>(j)) << body.substr(0, 200);
    return std::holds_alternative<ApiError>(j) ? std::get<ApiError>(j) : ApiError{};
}

}  // namespace

// Issue 11: ~75,000 nested brackets overflowed the stack (dump() in an error message, recursive copies).
// The limit stops the parse at the first level past kMaxJsonDepth, before a deep value exists.
TEST(Request, DeepNestingIsRefusedWhileParsing) {
    const int deep = 200000;
    const std::string arrays = nested("[", "", "]", deep);
    const std::string objects = nested(R"({"a":)", "1", "}", deep);
    struct Case {
        std::string body;
        std::optional<std::string> param;
    };
    const Case cases[] = {
        {R"({"tokens":)" + arrays + "}", "tokens"},
        {R"({"model":"m","prompt":)" + arrays + "}", "prompt"},
        {R"({"model":"m","messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":)" +
             objects + "}}]}]}",
         "messages"},
        {R"({"model":"m","tools":[{"type":"function","function":{"name":"f","parameters":)" + objects +
             "}}]}",
         "tools"},
        {arrays, std::nullopt},
    };
    for (const Case& c : cases) {
        ApiError e = body_error(c.body);
        EXPECT_EQ(e.http_status, 400);
        EXPECT_EQ(e.type, "invalid_request_error");
        EXPECT_EQ(e.code, "json_too_deep");
        EXPECT_EQ(e.param, c.param);
        EXPECT_NE(e.message.find("64"), std::string::npos) << e.message;
        EXPECT_LT(e.message.size(), 200u);
    }
    // The body object is level 1: 63 arrays inside it are 64 levels (allowed), 64 arrays are 65.
    EXPECT_TRUE(
        std::holds_alternative<RequestJson>(parse_json_body(R"({"a":)" + nested("[", "", "]", 63) + "}")));
    EXPECT_EQ(body_error(R"({"a":)" + nested("[", "", "]", 64) + "}").code, "json_too_deep");
    // Still an ordinary parse: key order kept, errors as before.
    auto ok = parse_json_body(R"({"b": 1, "a": {"c": [1, {"d": 2}]}})");
    ASSERT_TRUE(std::holds_alternative<RequestJson>(ok));
    EXPECT_EQ(std::get<RequestJson>(ok).dump(), R"({"b":1,"a":{"c":[1,{"d":2}]}})");
    EXPECT_EQ(body_error(R"({"a": [1, 2)").code, "invalid_json");
}

// A deep schema from a caller that parsed without the limit: checked without recursion, never copied.
TEST(Request, ToolSchemaDepthIsCheckedBeforeTheCopy) {
    auto tools = RequestJson::parse(R"([{"type":"function","function":{"name":"f","parameters":)" +
                                    nested(R"({"a":)", "1", "}", 200000) + "}}]");
    auto r = tokenizer::function_tools_from_openai(tools);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("tools[0].function.parameters"), std::string::npos);
    auto shallow = tokenizer::function_tools_from_openai(
        RequestJson::parse(R"([{"type":"function","function":{"name":"f","parameters":)" +
                           nested(R"({"a":)", "1", "}", 64) + "}}]"));
    EXPECT_TRUE(shallow.is_ok());
}

// Issue 11: a non-string type answered 500 with the JSON library's exception text.
TEST(Request, TypeMismatchesAre400WithParam) {
    const std::string user = R"("model": "m", "messages": [{"role": "user", "content": "x"}])";
    struct Case {
        std::string extra;
        const char* param;
    };
    const Case cases[] = {
        {R"("response_format": {"type": 5})", "response_format.type"},
        {R"("response_format": {"type": ["text"]})", "response_format.type"},
        {R"("response_format": {})", "response_format.type"},
        {R"("response_format": "text")", "response_format"},
        {R"("tools": [{"type": 7, "function": {"name": "f"}}])", "tools[0].type"},
        {R"("tools": [{"type": null, "function": {"name": "f"}}])", "tools[0].type"},
        {R"("tools": [{"function": {"name": "f"}}])", "tools[0].type"},
        {R"("tools": [{"type": "function", "function": {"name": "f"}}, {"type": {}, "function": {"name": "g"}}])",
         "tools[1].type"},
    };
    for (const Case& c : cases) {
        const std::string body = "{" + user + ", " + c.extra + "}";
        ApiError e = chat_error(body);
        EXPECT_EQ(e.http_status, 400) << body;
        EXPECT_EQ(e.param, std::string(c.param)) << body << " -> " << e.message;
        EXPECT_EQ(e.message.find("json.exception"), std::string::npos) << e.message;
    }
    EXPECT_EQ(completion_error(R"({"model": "m", "prompt": "x", "response_format": {"type": 5}})").param,
              "response_format.type");
    auto t = parse_tokenize_request(RequestJson::parse(
        R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": 1, "function": {"name": "f"}}]})"));
    ASSERT_TRUE(std::holds_alternative<ApiError>(t));
    EXPECT_EQ(std::get<ApiError>(t).param, "tools[0].type");
    // The text format is still accepted.
    auto ok =
        parse_chat_request(RequestJson::parse("{" + user + R"(, "response_format": {"type": "text"}})"));
    EXPECT_TRUE(std::holds_alternative<ChatRequest>(ok));
}

// Error messages quote at most a short prefix of a value the client sent.
TEST(Request, ErrorMessagesQuoteOnlyAShortPrefix) {
    const std::string big(1 << 20, 'y');
    const std::string user = R"("model": "m", "messages": [{"role": "user", "content": "x"}])";
    struct Case {
        std::string body;
        bool quotes;  // a string value is quoted (its prefix); an object only named by its type
    };
    const Case cases[] = {
        {R"({"model": "m", "messages": [{"role": ")" + big + R"(", "content": "x"}]})", true},
        {"{" + user + R"(, "reasoning_effort": ")" + big + R"("})", true},
        {"{" + user + R"(, "tool_choice": ")" + big + R"("})", true},
        {"{" + user + R"(, "tools": [{"type": "function", "function": {"name": ")" + big + R"("}}]})", true},
        {"{" + user + R"(, "logit_bias": {")" + big + R"(": 1}})", true},
        {"{" + user + R"(, "stop_token_ids": [")" + big + R"("]})", true},
        {"{" + user + R"(, "stop_token_ids": [{"a": ")" + big + R"("}]})", false},
        {R"({"model": "m", "messages": [{"role": "user", "content": [{"type": ")" + big + R"("}]}]})", true},
        // Invalid JSON inside a long string: the parser's "last read" token is the whole string.
        {R"({"model": "m", "prompt": ")" + big + "\x01" + R"("})", true},
    };
    for (const Case& c : cases) {
        ApiError e = chat_error(c.body);
        EXPECT_EQ(e.http_status, 400);
        EXPECT_LT(e.message.size(), 400u) << e.message.substr(0, 200);
        if (c.quotes)
            EXPECT_NE(e.message.find("yyy"), std::string::npos) << "the prefix is quoted: " << e.message;
    }
    EXPECT_EQ(short_text("abc"), "abc");
    EXPECT_EQ(short_text(std::string(50, 'a')), std::string(40, 'a') + "...");
    // Never cut inside a UTF-8 character: "é" is 2 bytes, the 40th byte is its first.
    EXPECT_EQ(short_text(std::string(39, 'a') + "\xc3\xa9" + "zz"), std::string(39, 'a') + "...");
}

}  // namespace volt::server

namespace volt::server {

// Issue 19: the sampling ranges have one definition (engine/sampling_params.h). At each range's edges the
// request parser and the engine's validate_sampling_params give the same verdict, and both name the field.
TEST(Request, SamplingRangesAreTheEngines) {
    using engine::SamplingParams;
    using engine::SamplingRange;
    struct Field {
        const SamplingRange* range;
        bool integer;
        void (*set)(SamplingParams&, double);
    };
    const Field fields[] = {
        {&engine::kTemperatureRange, false, [](SamplingParams& p, double v) { p.temperature = float(v); }},
        {&engine::kTopPRange, false, [](SamplingParams& p, double v) { p.top_p = float(v); }},
        {&engine::kMinPRange, false, [](SamplingParams& p, double v) { p.min_p = float(v); }},
        {&engine::kPresencePenaltyRange, false,
         [](SamplingParams& p, double v) { p.presence_penalty = float(v); }},
        {&engine::kFrequencyPenaltyRange, false,
         [](SamplingParams& p, double v) { p.frequency_penalty = float(v); }},
        {&engine::kRepetitionPenaltyRange, false,
         [](SamplingParams& p, double v) { p.repetition_penalty = float(v); }},
        {&engine::kNRange, true, [](SamplingParams& p, double v) { p.n = int32_t(v); }},
        {&engine::kLogprobsRange, true, [](SamplingParams& p, double v) { p.logprobs = int32_t(v); }},
    };
    for (const Field& f : fields) {
        const SamplingRange& r = *f.range;
        const double step = f.integer ? 1.0 : 0.25;
        // Inside: the bounds themselves (lo only when closed) and the midpoint; outside: past each bound.
        // (Integers go 2 below lo: logprobs -1 is the engine's "none", which the API spells by omission.)
        std::vector<std::pair<double, bool>> values = {
            {r.hi, true}, {r.hi + step, false}, {r.lo - 2 * step, false}, {r.lo, !r.lo_open}};
        if (!f.integer) values.push_back({(r.lo + r.hi) / 2, true});
        for (const auto& [v, inside] : values) {
            SCOPED_TRACE(std::string(r.field) + " = " + std::to_string(v));
            json body = {{"model", "m"}, {"prompt", "x"}, {r.field, v}};
            if (f.integer) body[r.field] = static_cast<int64_t>(v);
            auto parsed = parse_completion_request(body);
            SamplingParams p;
            f.set(p, v);
            const Status engine = engine::validate_sampling_params(p, 1000);
            EXPECT_EQ(engine.is_ok(), inside) << engine.message();
            EXPECT_EQ(std::holds_alternative<CompletionRequest>(parsed), inside);
            if (!inside) {
                EXPECT_NE(engine.message().find(r.field), std::string::npos) << engine.message();
                if (auto* e = std::get_if<ApiError>(&parsed)) EXPECT_EQ(e->param, r.field);
            }
        }
    }
}

}  // namespace volt::server
