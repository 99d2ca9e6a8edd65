// Stop-string matching and the chat / text output processors; see output_processor.h.
#include "server/output_processor.h"

#include <algorithm>
#include <utility>

namespace volt::server {

namespace {

// The largest cut <= `pos` that does not split a UTF-8 character of `s`.
size_t utf8_boundary_at_or_before(const std::string& s, size_t pos) {
    while (pos > 0 && pos < s.size() && (static_cast<unsigned char>(s[pos]) & 0xC0) == 0x80) --pos;
    return pos;
}

}  // namespace

StopMatcher::StopMatcher(std::vector<std::string> stops, bool include_stop)
    : stops_(std::move(stops)), include_stop_(include_stop) {
    for (const std::string& s : stops_) hold_ = std::max(hold_, s.size() - 1);
}

std::string StopMatcher::push(std::string_view text) {
    if (stopped_) return {};
    if (stops_.empty()) return std::string(text);
    // Search only where a match can end in the new text: from len(longest) - 1 before it.
    size_t search_from = pending_.size() > hold_ ? pending_.size() - hold_ : 0;
    pending_ += text;
    size_t first = std::string::npos, first_len = 0;
    for (const std::string& s : stops_) {
        size_t at = pending_.find(s, search_from);
        // The earliest match; at one position, the longest stop (what the client would see included).
        if (at != std::string::npos && (at < first || (at == first && s.size() > first_len))) {
            first = at;
            first_len = s.size();
        }
    }
    if (first != std::string::npos) {
        stopped_ = true;
        std::string out = pending_.substr(0, first + (include_stop_ ? first_len : 0));
        pending_.clear();
        return out;
    }
    if (pending_.size() <= hold_) return {};
    size_t cut = utf8_boundary_at_or_before(pending_, pending_.size() - hold_);
    std::string out = pending_.substr(0, cut);
    pending_.erase(0, cut);
    return out;
}

std::string StopMatcher::flush() {
    if (stopped_) return {};
    std::string out;
    out.swap(pending_);
    return out;
}

namespace {

class ChatProcessor final : public OutputProcessor {
  public:
    ChatProcessor(std::shared_ptr<const tokenizer::HarmonyEncoding> encoding, ChatProcessorOptions o)
        : parser_(std::move(encoding), parser_options(o)), stop_(std::move(o.stops), o.include_stop) {
        // A forced call's header starts the tool call: that start goes out with the first delta.
        for (int32_t id : o.prefix) take(parser_.push(id), &pending_);
    }

    OutputDelta push(std::span<const int32_t> ids) override {
        OutputDelta d = std::exchange(pending_, OutputDelta{});
        for (int32_t id : ids) {
            if (stop_.stopped()) break;
            ++num_tokens_;
            take(parser_.push(id), &d);
        }
        return d;
    }
    OutputDelta finish(bool truncated) override {
        OutputDelta d = std::exchange(pending_, OutputDelta{});
        if (!stop_.stopped()) take(parser_.finish(truncated), &d);
        d.content += stop_.flush();
        return d;
    }
    bool stopped() const override { return stop_.stopped(); }
    int64_t num_tokens() const override { return num_tokens_; }

  private:
    static tokenizer::HarmonyParserOptions parser_options(const ChatProcessorOptions& o) {
        tokenizer::HarmonyParserOptions p;
        // Only declared functions are tool calls; a call to anything else is demoted to reasoning (BUG-02).
        p.function_names = o.functions;
        p.tool_call_id_prefix = o.call_id_prefix;
        return p;
    }
    void take(const std::vector<tokenizer::HarmonyEvent>& events, OutputDelta* d) {
        using T = tokenizer::HarmonyEventType;
        for (const auto& e : events) {
            if (stop_.stopped()) return;
            switch (e.type) {
                case T::kReasoningDelta:
                    d->reasoning += e.text;
                    break;
                case T::kContentDelta:
                case T::kPreambleDelta: {  // user-visible commentary: content, as vLLM does
                    if (e.text.empty()) break;
                    std::string text = e.text;
                    // A new message after content already sent (a preamble, then the final answer):
                    // a blank line between them, never "Let me explain.The answer is 4.".
                    if (content_sent_ && new_message_) text.insert(0, "\n\n");
                    new_message_ = false;
                    content_sent_ = true;
                    d->content += stop_.push(text);
                    break;
                }
                case T::kMessageDone:
                    new_message_ = true;
                    break;
                case T::kToolCallStart:
                    d->tool_calls.push_back({e.tool_index, e.tool_call_id, e.text, ""});
                    break;
                case T::kToolArgumentsDelta:
                    if (!d->tool_calls.empty() && d->tool_calls.back().index == e.tool_index) {
                        d->tool_calls.back().arguments += e.text;
                    } else {
                        d->tool_calls.push_back({e.tool_index, "", "", e.text});
                    }
                    break;
                default:  // message ends add no text
                    break;
            }
        }
    }

    tokenizer::HarmonyStreamParser parser_;
    OutputDelta pending_;
    StopMatcher stop_;
    int64_t num_tokens_ = 0;
    bool content_sent_ = false;  // some content text went out (or is held by the stop matcher)
    bool new_message_ = false;   // a message ended since the last content text
};

class TextProcessor final : public OutputProcessor {
  public:
    TextProcessor(std::shared_ptr<const tokenizer::Tokenizer> tokenizer, std::vector<std::string> stops,
                  bool skip_special, bool include_stop)
        : detok_(std::move(tokenizer), skip_special), stop_(std::move(stops), include_stop) {}

    OutputDelta push(std::span<const int32_t> ids) override {
        OutputDelta d;
        for (int32_t id : ids) {
            if (stop_.stopped()) break;
            ++num_tokens_;
            d.content += stop_.push(detok_.push(id));
        }
        return d;
    }
    OutputDelta finish(bool) override {
        OutputDelta d;
        if (!stop_.stopped()) d.content = stop_.push(detok_.flush());
        d.content += stop_.flush();
        return d;
    }
    bool stopped() const override { return stop_.stopped(); }
    int64_t num_tokens() const override { return num_tokens_; }

  private:
    tokenizer::IncrementalDetokenizer detok_;
    StopMatcher stop_;
    int64_t num_tokens_ = 0;
};

}  // namespace

std::unique_ptr<OutputProcessor> make_chat_processor(
    std::shared_ptr<const tokenizer::HarmonyEncoding> encoding, ChatProcessorOptions options) {
    return std::make_unique<ChatProcessor>(std::move(encoding), std::move(options));
}

std::unique_ptr<OutputProcessor> make_text_processor(std::shared_ptr<const tokenizer::Tokenizer> tokenizer,
                                                     std::vector<std::string> stops, bool skip_special,
                                                     bool include_stop) {
    return std::make_unique<TextProcessor>(std::move(tokenizer), std::move(stops), skip_special,
                                           include_stop);
}

}  // namespace volt::server
