// Byte-level helpers shared by the tokenizer: GPT-2's byte <-> character table that Hugging Face
// `ByteLevel` uses to write raw bytes as printable characters in tokenizer.json, and strict UTF-8
// validation (the rules of Rust's `str`: no overlongs, no surrogates, nothing above U+10FFFF).
// Source of the table: openai/gpt-2 encoder.py `bytes_to_unicode`. Tests: tests/unit/tokenizer/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace volt::tokenizer {

// The code point that stands for byte `b` in a ByteLevel vocabulary ('a' -> 'a', ' ' -> U+0120 'Ġ').
uint32_t byte_to_codepoint(uint8_t b);

// Raw bytes of a vocabulary entry written in ByteLevel characters ("Ġhello" -> " hello"). A character
// outside the table is kept as its own UTF-8 bytes, as Hugging Face's ByteLevel decoder does.
std::string byte_level_to_bytes(std::string_view token);

// Raw bytes -> their ByteLevel spelling (the inverse of byte_level_to_bytes).
std::string bytes_to_byte_level(std::string_view bytes);

// Byte offset of the first byte that does not start a valid UTF-8 sequence, or nullopt when `text` is
// entirely valid UTF-8.
std::optional<size_t> find_invalid_utf8(std::string_view text);

// The UTF-8 sequence that starts at text[0] (Unicode ch. 3, Table 3-7).
struct Utf8Sequence {
    enum Kind { kValid, kIncomplete, kInvalid } kind;
    // kValid: its length (1-4). kIncomplete: text.size() (a valid prefix that more bytes may complete).
    // kInvalid: the "maximal subpart" to replace by one U+FFFD (>= 1 byte; Unicode §3.9 U+FFFD policy).
    size_t length;
};
Utf8Sequence utf8_sequence(std::string_view text);  // text must not be empty

}  // namespace volt::tokenizer
