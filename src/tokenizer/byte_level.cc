// GPT-2 byte table (built once) and strict UTF-8 validation (Unicode Table 3-7, ASCII fast path);
// see byte_level.h.
#include "tokenizer/byte_level.h"

#include <array>
#include <cstring>

namespace volt::tokenizer {

namespace {

struct ByteTable {
    std::array<uint32_t, 256> to_cp{};
    std::array<int16_t, 512> from_cp{};  // code point (< 512) -> byte, -1 when not in the table
    ByteTable() {
        from_cp.fill(-1);
        // Printable Latin-1 bytes stand for themselves; the rest get 256, 257, ... in byte order.
        uint32_t next = 256;
        for (int b = 0; b < 256; ++b) {
            bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            to_cp[b] = printable ? static_cast<uint32_t>(b) : next++;
            from_cp[to_cp[b]] = static_cast<int16_t>(b);
        }
    }
};

const ByteTable& table() {
    static const ByteTable t;
    return t;
}

void append_utf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
        out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

}  // namespace

uint32_t byte_to_codepoint(uint8_t b) { return table().to_cp[b]; }

Utf8Sequence utf8_sequence(std::string_view text) {
    const auto* s = reinterpret_cast<const uint8_t*>(text.data());
    uint8_t c = s[0];
    if (c < 0x80) return {Utf8Sequence::kValid, 1};
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return {Utf8Sequence::kInvalid, 1};
    }
    for (size_t i = 1; i < need; ++i) {
        if (i >= text.size()) return {Utf8Sequence::kIncomplete, text.size()};
        uint8_t b = s[i];
        uint8_t l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (b < l || b > h) return {Utf8Sequence::kInvalid, i};
    }
    return {Utf8Sequence::kValid, need};
}

std::optional<size_t> find_invalid_utf8(std::string_view text) {
    size_t i = 0, n = text.size();
    while (i < n) {
        // ASCII fast path, eight bytes at a time.
        while (i + 8 <= n) {
            uint64_t w;
            std::memcpy(&w, text.data() + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= n) break;
        if (static_cast<uint8_t>(text[i]) < 0x80) {
            ++i;
            continue;
        }
        Utf8Sequence seq = utf8_sequence(text.substr(i));
        if (seq.kind != Utf8Sequence::kValid) return i;
        i += seq.length;
    }
    return std::nullopt;
}

std::string byte_level_to_bytes(std::string_view token) {
    std::string out;
    out.reserve(token.size());
    size_t i = 0;
    while (i < token.size()) {
        Utf8Sequence seq = utf8_sequence(token.substr(i));
        if (seq.kind != Utf8Sequence::kValid) {  // not UTF-8: keep the byte (JSON strings are UTF-8)
            out.push_back(token[i++]);
            continue;
        }
        size_t len = seq.length;
        const auto* s = reinterpret_cast<const uint8_t*>(token.data() + i);
        uint32_t cp = len == 1   ? s[0]
                      : len == 2 ? ((s[0] & 0x1Fu) << 6) | (s[1] & 0x3Fu)
                      : len == 3 ? ((s[0] & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu)
                                 : ((s[0] & 0x07u) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) |
                                       (s[3] & 0x3Fu);
        if (cp < 512 && table().from_cp[cp] >= 0) {
            out.push_back(static_cast<char>(table().from_cp[cp]));
        } else {
            out.append(token.substr(i, len));
        }
        i += len;
    }
    return out;
}

std::string bytes_to_byte_level(std::string_view bytes) {
    std::string out;
    out.reserve(bytes.size() * 2);
    for (char c : bytes) append_utf8(byte_to_codepoint(static_cast<uint8_t>(c)), &out);
    return out;
}

}  // namespace volt::tokenizer
