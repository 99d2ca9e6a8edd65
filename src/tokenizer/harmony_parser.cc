// Harmony streaming parser: a state machine over ids (expect-start / header / content / done) after
// openai/harmony v0.0.8 StreamableParser (src/encoding.rs), made tolerant: every malformed shape has a
// defined outcome instead of an error, and control tokens never reach text. Header rules: the channel is
// the text after <|channel|> up to whitespace or '<'; then the role word, `to=RECIPIENT` and a content
// type (`<|constrain|>json`, or a plain word right after the recipient). Tests: harmony_parser_test.cc.
#include "tokenizer/harmony_parser.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "core/check.h"

namespace volt::tokenizer {
namespace {

// A header longer than this, or one holding a newline, is text with no <|message|> (a real header is
// "<|channel|>commentary to=functions.NAME <|constrain|>json", about 10-20 tokens): stream it as content.
constexpr int kMaxHeaderTokens = 64;
constexpr std::string_view kChannel = "<|channel|>";
constexpr std::string_view kConstrain = "<|constrain|>";
constexpr std::string_view kFunctionsPrefix = "functions.";
// Bytes that can never be UTF-8: an unknown id decodes to U+FFFD through the UTF-8 decoder.
constexpr std::string_view kInvalidByte = "\xFF";

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string_view trim_left(std::string_view s) {
    while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
    return s;
}

// Removes control-token spellings ("<|name|>", no spaces inside) so leftover header text never carries
// markup.
std::string strip_markup(std::string_view s) {
    std::string out;
    size_t i = 0;
    while (i < s.size()) {
        if (s.compare(i, 2, "<|") == 0) {
            size_t close = s.find("|>", i + 2);
            if (close != std::string_view::npos && close - i <= 48) {
                std::string_view inner = s.substr(i + 2, close - i - 2);
                if (std::none_of(inner.begin(), inner.end(),
                                 [](char c) { return is_space(c) || c == '<'; })) {
                    i = close + 2;
                    continue;
                }
            }
        }
        out += s[i++];
    }
    return out;
}

bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
}

bool is_content_type_word(std::string_view w) {
    if (w.starts_with(kConstrain)) return true;
    return !w.empty() &&
           std::all_of(w.begin(), w.end(), [](char c) { return is_name_char(c) || c == '/' || c == '+'; });
}

}  // namespace

HarmonyStreamParser::HarmonyStreamParser(std::shared_ptr<const HarmonyEncoding> encoding,
                                         HarmonyParserOptions options)
    : enc_(std::move(encoding)), options_(std::move(options)) {
    VOLT_CHECK(enc_ != nullptr) << "HarmonyStreamParser needs an encoding";
    if (options_.start_in_assistant_header) begin_header(true);
}

bool HarmonyStreamParser::is_terminal(int32_t id) const {
    const HarmonySpecialIds& s = enc_->special_ids();
    return id == s.return_ || id == s.call || (s.endoftext && id == *s.endoftext);
}

void HarmonyStreamParser::begin_header(bool role_known) {
    state_ = State::kHeader;
    role_known_ = role_known;
    header_tokens_ = 0;
    header_text_.clear();
    utf8_ = Utf8StreamDecoder();
}

std::vector<HarmonyEvent> HarmonyStreamParser::push(int32_t id) {
    std::vector<HarmonyEvent> out;
    const HarmonySpecialIds& s = enc_->special_ids();
    switch (state_) {
        case State::kDone:
            break;
        case State::kHeader:
            on_header_token(id, out);
            break;
        case State::kContent:
            on_content_token(id, out);
            break;
        case State::kExpectStart:
            if (id == s.start) {
                begin_header(false);
            } else if (is_terminal(id)) {
                if (options_.stop_at_terminal) state_ = State::kDone;
            } else if (id == s.channel || !enc_->tokenizer().is_special(id)) {
                // Text or a channel where <|start|> belongs: an assistant message that lost its start.
                begin_header(true);
                on_header_token(id, out);
            }  // <|end|> and other control tokens between messages are dropped.
            break;
    }
    return out;
}

std::vector<HarmonyEvent> HarmonyStreamParser::finish(bool truncated) {
    std::vector<HarmonyEvent> out;
    if (state_ == State::kHeader) {
        // Cut by max_tokens inside a header that has harmony structure (right after `<|channel|>commentary
        // to`): none of it is text (the "to" once leaked into content). A model that ended a header
        // without <|message|> (BUG-06), and plain text with no structure, still give their text.
        if (truncated && header_text_.find(kChannel) != std::string::npos) {
            state_ = State::kExpectStart;
        } else {
            close_header_as_message(out);
        }
    }
    if (state_ == State::kContent) close_message(out);
    state_ = State::kDone;
    return out;
}

void HarmonyStreamParser::on_header_token(int32_t id, std::vector<HarmonyEvent>& out) {
    const HarmonySpecialIds& s = enc_->special_ids();
    if (id == s.message) {
        header_text_ += utf8_.flush();
        utf8_ = Utf8StreamDecoder();
        Header header = parse_header();
        if (!header.leftover.empty())
            spdlog::debug("harmony: ignoring extra header text '{}'", header.leftover);
        open_message(header, out);
        return;
    }
    if (id == s.end || is_terminal(id)) {
        close_header_as_message(out);
        state_ = (id != s.end && options_.stop_at_terminal) ? State::kDone : State::kExpectStart;
        return;
    }
    if (id == s.start) {
        close_header_as_message(out);
        begin_header(false);
        return;
    }
    if (id == s.channel || id == s.constrain) {
        header_text_ += utf8_.flush();
        header_text_ += id == s.channel ? kChannel : kConstrain;
        ++header_tokens_;
        return;
    }
    if (enc_->tokenizer().is_special(id)) return;
    std::string_view bytes = enc_->tokenizer().token_bytes_view(id);
    header_text_ += utf8_.push(bytes.empty() ? kInvalidByte : bytes);
    ++header_tokens_;
    if (header_tokens_ > kMaxHeaderTokens || header_text_.find('\n') != std::string::npos) {
        // No header after all: text without <|message|>. Stream what we have as the message's content.
        Header header = parse_header();
        open_message(header, out);
        emit_text(header.leftover, out);
    }
}

void HarmonyStreamParser::on_content_token(int32_t id, std::vector<HarmonyEvent>& out) {
    const HarmonySpecialIds& s = enc_->special_ids();
    if (id == s.end) {
        close_message(out);
        return;
    }
    if (is_terminal(id)) {
        close_message(out);
        if (options_.stop_at_terminal) state_ = State::kDone;
        return;
    }
    if (id == s.start || id == s.channel) {
        // A new message began without <|end|>: end this one here.
        close_message(out);
        begin_header(id == s.channel);
        if (id == s.channel) on_header_token(id, out);
        return;
    }
    if (enc_->tokenizer().is_special(id)) return;  // stray <|message|>, <|constrain|>, reserved ids
    std::string_view bytes = enc_->tokenizer().token_bytes_view(id);
    emit_text(utf8_.push(bytes.empty() ? kInvalidByte : bytes), out);
}

HarmonyStreamParser::Header HarmonyStreamParser::parse_header() const {
    Header h;
    h.author.role = HarmonyRole::kAssistant;
    std::string s = header_text_;
    if (size_t pos = s.find(kChannel); pos != std::string::npos) {
        size_t begin = pos + kChannel.size();
        size_t end = begin;
        while (end < s.size() && !is_space(s[end]) && s[end] != '<') ++end;
        if (end > begin) h.channel = s.substr(begin, end - begin);
        s = s.substr(0, pos) + s.substr(end);
    }
    // "to=x<|constrain|>json" -> "to=x <|constrain|>json" (the model sometimes omits the space).
    for (size_t pos = s.find(kConstrain); pos != std::string::npos;
         pos = s.find(kConstrain, pos + 1 + kConstrain.size())) {
        s.insert(pos, " ");
    }
    std::string_view rest = trim_left(s);
    auto next_word = [&rest]() {
        size_t n = 0;
        while (n < rest.size() && !is_space(rest[n])) ++n;
        return rest.substr(0, n);
    };
    auto consume = [&rest](size_t n) { rest = trim_left(rest.substr(n)); };

    std::string_view w = next_word();
    if (role_known_) {
        if (w == "assistant") consume(w.size());
    } else if (std::optional<HarmonyRole> role = harmony_role_from_name(w)) {
        h.author.role = *role;
        consume(w.size());
    } else if (!w.empty() && !w.starts_with("to=")) {
        h.author = {HarmonyRole::kTool, std::string(w)};  // "functions.x to=assistant": a tool's message
        consume(w.size());
    }
    bool after_recipient = false;
    while (!rest.empty()) {
        w = next_word();
        if (w.starts_with("to=") && !h.recipient) {
            std::string_view r = w.substr(3);
            r = r.substr(0, r.find("<|"));  // "to=functions.x<|channel|>analysis" -> "functions.x" (BUG-02)
            h.recipient = std::string(r);
            after_recipient = true;
        } else if (!h.content_type &&
                   (w.starts_with(kConstrain) || (after_recipient && is_content_type_word(w)))) {
            h.content_type = std::string(w);
            after_recipient = false;
        } else {
            break;
        }
        consume(w.size());
    }
    h.leftover = std::string(trim_left(strip_markup(rest)));
    return h;
}

HarmonyStreamParser::Kind HarmonyStreamParser::classify(const Header& h, std::string* function_name) const {
    if (h.author.role != HarmonyRole::kAssistant) return Kind::kReasoning;
    if (h.recipient && *h.recipient != "all" && *h.recipient != "assistant" && !h.recipient->empty()) {
        std::string_view r = *h.recipient;
        if (!r.starts_with(kFunctionsPrefix)) return Kind::kReasoning;  // built-in or unknown tool
        std::string_view name = r.substr(kFunctionsPrefix.size());
        bool valid = !name.empty() && std::all_of(name.begin(), name.end(), is_name_char);
        if (valid && options_.function_names) {
            const auto& names = *options_.function_names;
            valid = std::find(names.begin(), names.end(), name) != names.end();
        }
        if (!valid) return Kind::kReasoning;
        *function_name = std::string(name);
        return Kind::kToolCall;
    }
    if (!h.channel || *h.channel == "final") return Kind::kContent;
    if (*h.channel == "analysis") return Kind::kReasoning;
    if (*h.channel == "commentary") return Kind::kPreamble;
    return Kind::kReasoning;  // junk after <|channel|> (BUG-07): never the answer
}

void HarmonyStreamParser::open_message(const Header& header, std::vector<HarmonyEvent>& out) {
    current_ = HarmonyMessage{header.author, header.recipient, header.channel, header.content_type, ""};
    std::string name;
    kind_ = classify(header, &name);
    message_has_text_ = false;
    state_ = State::kContent;
    if (kind_ == Kind::kToolCall) {
        call_index_ = tool_calls_++;
        call_id_ = options_.tool_call_id_prefix + std::to_string(call_index_);
        out.push_back({HarmonyEventType::kToolCallStart, name, call_id_, call_index_});
    }
}

void HarmonyStreamParser::emit_text(std::string text, std::vector<HarmonyEvent>& out) {
    if (text.empty()) return;
    current_.content += text;
    if (kind_ == Kind::kToolCall) {
        out.push_back({HarmonyEventType::kToolArgumentsDelta, std::move(text), call_id_, call_index_});
        message_has_text_ = true;
        return;
    }
    static constexpr HarmonyEventType kTypes[] = {
        HarmonyEventType::kReasoningDelta, HarmonyEventType::kContentDelta, HarmonyEventType::kPreambleDelta};
    int k = static_cast<int>(kind_);
    // Several messages of one kind (two analysis messages) read as paragraphs, not glued words.
    if (emitted_[k] && !message_has_text_) text.insert(0, "\n");
    out.push_back({kTypes[k], std::move(text), "", -1});
    emitted_[k] = true;
    message_has_text_ = true;
}

void HarmonyStreamParser::close_message(std::vector<HarmonyEvent>& out) {
    emit_text(utf8_.flush(), out);
    messages_.push_back(std::move(current_));
    current_ = HarmonyMessage{};
    out.push_back({HarmonyEventType::kMessageDone, "", kind_ == Kind::kToolCall ? call_id_ : "",
                   kind_ == Kind::kToolCall ? call_index_ : -1});
    state_ = State::kExpectStart;
}

void HarmonyStreamParser::close_header_as_message(std::vector<HarmonyEvent>& out) {
    header_text_ += utf8_.flush();
    Header header = parse_header();
    std::string unused;
    if (header.leftover.empty() && classify(header, &unused) != Kind::kToolCall) {
        state_ = State::kExpectStart;
        return;
    }
    spdlog::debug("harmony: message without <|message|>, header text '{}'", header_text_);
    open_message(header, out);
    emit_text(header.leftover, out);
    close_message(out);
}

ParsedCompletion parse_completion(std::shared_ptr<const HarmonyEncoding> encoding,
                                  std::span<const int32_t> ids, HarmonyParserOptions options) {
    HarmonyStreamParser parser(std::move(encoding), std::move(options));
    ParsedCompletion result;
    auto collect = [&result](const std::vector<HarmonyEvent>& events) {
        for (const HarmonyEvent& e : events) {
            switch (e.type) {
                case HarmonyEventType::kReasoningDelta:
                    result.reasoning += e.text;
                    break;
                case HarmonyEventType::kContentDelta:
                    result.content += e.text;
                    break;
                case HarmonyEventType::kPreambleDelta:
                    result.preamble += e.text;
                    break;
                case HarmonyEventType::kToolCallStart:
                    result.tool_calls.push_back({e.tool_call_id, e.text, ""});
                    break;
                case HarmonyEventType::kToolArgumentsDelta:
                    result.tool_calls[e.tool_index].arguments += e.text;
                    break;
                case HarmonyEventType::kMessageDone:
                    break;
            }
        }
    };
    for (int32_t id : ids) {
        collect(parser.push(id));
        if (parser.done()) break;
    }
    result.done = parser.done();
    collect(parser.finish());
    result.messages = parser.messages();
    return result;
}

}  // namespace volt::tokenizer
