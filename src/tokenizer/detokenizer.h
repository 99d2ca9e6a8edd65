// Streaming detokenization: ids go in one at a time and only complete UTF-8 comes out, so a character
// whose bytes span two tokens is never sent as U+FFFD halves (BUG-32). A tail that could still become a
// character is held back (at most 3 bytes); bytes that can never be UTF-8 come out at once as U+FFFD
// (one per maximal subpart, Unicode §3.9), so output always advances. flush() ends the stream.
// Test: tests/unit/tokenizer/tokenizer_detokenizer_test.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "tokenizer/tokenizer.h"

namespace volt::tokenizer {

// Raw bytes in, valid UTF-8 out. Reusable for any byte stream (e.g. a harmony channel's text).
class Utf8StreamDecoder {
  public:
    // Appends `bytes`; returns the text that is complete now (valid UTF-8, possibly empty).
    std::string push(std::string_view bytes);
    // Ends the stream: a held-back partial character becomes one U+FFFD (not dropped). Resets.
    std::string flush();
    // Bytes held back waiting for the rest of a character (0-3).
    size_t pending() const { return pending_.size(); }

  private:
    std::string pending_;
};

class IncrementalDetokenizer {
  public:
    // `skip_special`: drop added tokens marked special (as Tokenizer::decode does).
    explicit IncrementalDetokenizer(std::shared_ptr<const Tokenizer> tokenizer, bool skip_special = false);

    // The text completed by token `id` (valid UTF-8, possibly empty). Unknown ids add nothing.
    std::string push(int32_t id);
    // End of the stream: see Utf8StreamDecoder::flush.
    std::string flush() { return utf8_.flush(); }

  private:
    std::shared_ptr<const Tokenizer> tokenizer_;
    bool skip_special_;
    Utf8StreamDecoder utf8_;
};

}  // namespace volt::tokenizer
