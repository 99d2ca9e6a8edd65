// libFuzzer: the tokenizer (the demo model's tokenizer.json). Text -> encode (both special-token modes)
// -> decode; valid UTF-8 must decode back to itself without specials recognised (byte-level BPE loses
// nothing), and decode of any id sequence must not crash.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "tokenizer/tokenizer.h"

namespace {
const volt::tokenizer::Tokenizer& tokenizer() {
    static auto tok = [] {
        auto t = volt::tokenizer::Tokenizer::from_file(VOLT_SOURCE_DIR "/assets/demo-model/tokenizer.json");
        if (!t) std::abort();
        return *t;
    }();
    return *tok;
}

bool valid_utf8(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        const unsigned char c = s[i];
        size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (n == 0 || i + n > s.size()) return false;
        uint32_t cp = n == 1 ? c : c & (0xFF >> (n + 1));
        for (size_t k = 1; k < n; ++k) {
            const unsigned char d = s[i + k];
            if ((d & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (d & 0x3F);
        }
        if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += n;
    }
    return true;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const auto& tok = tokenizer();
    std::string_view text(reinterpret_cast<const char*>(data), size);
    auto ignore = tok.encode(text, volt::tokenizer::SpecialTokens::kIgnore);
    if (ignore && valid_utf8(text) && tok.decode(*ignore, false) != text) std::abort();
    auto recognise = tok.encode(text, volt::tokenizer::SpecialTokens::kRecognise);
    if (recognise) (void)tok.decode(*recognise, true);
    // The same bytes as ids.
    std::vector<int32_t> ids;
    for (size_t i = 0; i + 1 < size; i += 2) ids.push_back((data[i] | (data[i + 1] << 8)) % tok.vocab_size());
    (void)tok.decode(ids, false);
    (void)tok.decode(ids, true);
    return 0;
}
