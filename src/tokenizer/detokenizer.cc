// UTF-8 stream assembly for streaming output: complete characters out, a possible prefix held back,
// U+FFFD per maximal invalid subpart; see detokenizer.h.
#include "tokenizer/detokenizer.h"

#include "tokenizer/byte_level.h"

namespace volt::tokenizer {

namespace {
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
}  // namespace

std::string Utf8StreamDecoder::push(std::string_view bytes) {
    std::string in;
    std::string_view text = bytes;
    if (!pending_.empty()) {
        in = pending_ + std::string(bytes);
        text = in;
        pending_.clear();
    }
    std::string out;
    out.reserve(text.size());
    size_t i = 0;
    while (i < text.size()) {
        Utf8Sequence seq = utf8_sequence(text.substr(i));
        if (seq.kind == Utf8Sequence::kValid) {
            out.append(text.substr(i, seq.length));
        } else if (seq.kind == Utf8Sequence::kIncomplete) {
            pending_ = std::string(text.substr(i));  // may still become a character
        } else {
            out.append(kReplacement);
        }
        i += seq.length;
    }
    return out;
}

std::string Utf8StreamDecoder::flush() {
    if (pending_.empty()) return {};
    pending_.clear();
    return std::string(kReplacement);
}

IncrementalDetokenizer::IncrementalDetokenizer(std::shared_ptr<const Tokenizer> tokenizer, bool skip_special)
    : tokenizer_(std::move(tokenizer)), skip_special_(skip_special) {}

std::string IncrementalDetokenizer::push(int32_t id) {
    if (skip_special_ && tokenizer_->is_special(id)) return {};
    return utf8_.push(tokenizer_->token_bytes_view(id));
}

}  // namespace volt::tokenizer
