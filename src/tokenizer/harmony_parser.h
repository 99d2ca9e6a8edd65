// Harmony streaming parser (spec §5.7): generated token ids -> events (reasoning, final content and
// commentary-preamble deltas, tool call start / argument deltas, message done) and completed messages.
// Tolerant by design: malformed output (junk after <|channel|>, missing <|message|>, a terminator where a
// start belongs, plain text without harmony structure, output cut by max tokens) never fails and never
// puts control markup into any text. One parser per request. Tests:
// tests/unit/tokenizer/harmony_parser_test.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tokenizer/detokenizer.h"
#include "tokenizer/harmony_encoding.h"
#include "tokenizer/harmony_message.h"

namespace volt::tokenizer {

enum class HarmonyEventType {
    kReasoningDelta,      // analysis text (and demoted malformed or non-function messages)
    kContentDelta,        // final-channel text, or text with no harmony structure at all
    kPreambleDelta,       // commentary text without a recipient (user-visible preamble)
    kToolCallStart,       // text = function name (without "functions."), tool_call_id, tool_index
    kToolArgumentsDelta,  // text = a piece of the arguments (raw, JSON not checked), tool_call_id, tool_index
    kMessageDone,         // a message ended (terminator, implicit end, or finish()); tool_index if a call
};

struct HarmonyEvent {
    HarmonyEventType type = HarmonyEventType::kContentDelta;
    std::string text;          // valid UTF-8, never contains control tokens
    std::string tool_call_id;  // tool events only
    int tool_index = -1;       // 0, 1, ... for tool events, else -1
    bool operator==(const HarmonyEvent&) const = default;
};

struct HarmonyParserOptions {
    // The prompt ended with `<|start|>assistant`, so output begins inside an assistant header (true for
    // generation). False to parse whole messages that start with <|start|> (harmony's role=None).
    bool start_in_assistant_header = true;
    // Declared function names. A call to any other name is not a tool call (its text becomes reasoning,
    // BUG-02). nullopt accepts any well-formed name ([A-Za-z0-9_.-]+).
    std::optional<std::vector<std::string>> function_names;
    // Tool call ids are prefix + index ("call_0", ...). Make it unique per request (clients send ids back).
    std::string tool_call_id_prefix = "call_";
    // After <|return|> or <|call|> ignore the rest (generation: BUG-04, ignore_eos). False treats them
    // like <|end|> and keeps parsing, as openai/harmony's parser does for whole transcripts.
    bool stop_at_terminal = true;
};

class HarmonyStreamParser {
  public:
    explicit HarmonyStreamParser(std::shared_ptr<const HarmonyEncoding> encoding,
                                 HarmonyParserOptions options = {});

    // Consumes one generated id; returns the events it completes (often none, e.g. inside a header or a
    // UTF-8 character split across tokens). After <|return|> or <|call|> everything is ignored.
    std::vector<HarmonyEvent> push(int32_t id);
    // End of generation (stop token, EOS, max tokens): ends the open message, flushing a dangling partial
    // UTF-8 character as U+FFFD and the text of a header that never reached <|message|> -- unless
    // `truncated` (max tokens) cut a header with a <|channel|>: then that header is dropped, not text.
    std::vector<HarmonyEvent> finish(bool truncated = false);

    // Completed messages so far (author, recipient, channel, content type, full text).
    const std::vector<HarmonyMessage>& messages() const { return messages_; }
    // True once <|return|>, <|call|> or <|endoftext|> ended the output (stop_at_terminal), or after finish().
    bool done() const { return state_ == State::kDone; }
    // Number of tool calls started so far.
    int tool_call_count() const { return tool_calls_; }

  private:
    enum class State { kExpectStart, kHeader, kContent, kDone };
    enum class Kind { kReasoning, kContent, kPreamble, kToolCall };
    struct Header {
        HarmonyAuthor author;
        std::optional<std::string> recipient;
        std::optional<std::string> channel;
        std::optional<std::string> content_type;
        std::string leftover;  // text after the recognised header parts
    };

    void on_header_token(int32_t id, std::vector<HarmonyEvent>& out);
    void on_content_token(int32_t id, std::vector<HarmonyEvent>& out);
    void begin_header(bool role_known);
    // Parses header_text_ (role, channel, recipient, content type); the rest is `leftover`, which is
    // content when no <|message|> came and ignored otherwise.
    Header parse_header() const;
    void open_message(const Header& header, std::vector<HarmonyEvent>& out);
    // Ends a header that never reached <|message|>: its leftover text becomes a message if non-empty.
    void close_header_as_message(std::vector<HarmonyEvent>& out);
    void emit_text(std::string text, std::vector<HarmonyEvent>& out);
    void close_message(std::vector<HarmonyEvent>& out);
    Kind classify(const Header& header, std::string* function_name) const;
    bool is_terminal(int32_t id) const;

    std::shared_ptr<const HarmonyEncoding> enc_;
    HarmonyParserOptions options_;
    State state_ = State::kExpectStart;
    std::vector<HarmonyMessage> messages_;

    // Current header.
    bool role_known_ = false;  // the role was given (<|start|>assistant in the prompt), not in the text
    int header_tokens_ = 0;
    std::string header_text_;  // decoded, control tokens written as their names
    Utf8StreamDecoder utf8_;   // per message: header bytes, then content bytes

    // Current message.
    HarmonyMessage current_;
    Kind kind_ = Kind::kContent;
    std::string call_id_;
    int call_index_ = -1;
    int tool_calls_ = 0;
    bool emitted_[3] = {false, false, false};  // reasoning, content, preamble text already sent
    bool message_has_text_ = false;
};

// The whole output at once, built from the same parser (same rules as streaming).
struct HarmonyToolCallOut {
    std::string id;
    std::string name;
    std::string arguments;
};
struct ParsedCompletion {
    std::string reasoning;  // concatenation of the reasoning deltas
    std::string content;    // concatenation of the content deltas
    std::string preamble;   // concatenation of the preamble deltas
    std::vector<HarmonyToolCallOut> tool_calls;
    std::vector<HarmonyMessage> messages;
    bool done = false;  // a terminal token was seen
};
ParsedCompletion parse_completion(std::shared_ptr<const HarmonyEncoding> encoding,
                                  std::span<const int32_t> ids, HarmonyParserOptions options = {});

}  // namespace volt::tokenizer
