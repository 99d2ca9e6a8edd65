// Regex splitting: Oniguruma search loop, and the o200k ASCII matcher (fast_match) whose alternatives
// mirror the pattern's in order; see pretokenizer.h.
#include "tokenizer/pretokenizer.h"

#include <oniguruma.h>

#include <algorithm>
#include <mutex>

#include "tokenizer/byte_level.h"

namespace volt::tokenizer {

namespace {

void init_oniguruma() {
    static std::once_flag once;
    std::call_once(once, [] {
        OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
        onig_initialize(encodings, 1);
    });
}

std::string onig_message(int code, OnigErrorInfo* info) {
    OnigUChar buf[ONIG_MAX_ERROR_MESSAGE_LEN];
    int n = info ? onig_error_code_to_str(buf, code, info) : onig_error_code_to_str(buf, code);
    return std::string(reinterpret_cast<char*>(buf), n > 0 ? n : 0);
}

}  // namespace

namespace {

// Character classes of the o200k pattern, for ASCII.
constexpr uint8_t kLu = 1, kLl = 2, kDigit = 4, kSpace = 8;

// Does Oniguruma match `cls` (a bracket-free class expression) on the one-byte string `c`?
bool onig_class_has(const char* cls, uint8_t c) {
    std::string pat = std::string("\\A") + cls + "\\z";
    OnigRegex re = nullptr;
    OnigErrorInfo info;
    const auto* p = reinterpret_cast<const OnigUChar*>(pat.data());
    if (onig_new(&re, p, p + pat.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT, &info) !=
        ONIG_NORMAL) {
        return false;
    }
    OnigUChar str[1] = {c};
    int r = onig_match(re, str, str + 1, str, nullptr, ONIG_OPTION_NONE);
    onig_free(re);
    return r == 1;
}

struct VectorSink final : PieceSink {
    std::vector<std::string_view>* pieces;
    explicit VectorSink(std::vector<std::string_view>* p) : pieces(p) {}
    void operator()(std::string_view piece) override { pieces->push_back(piece); }
};

}  // namespace

Result<std::unique_ptr<RegexSplitter>> RegexSplitter::create(const std::string& pattern,
                                                             bool allow_fast_path) {
    init_oniguruma();
    std::unique_ptr<RegexSplitter> s(new RegexSplitter());
    s->pattern_ = pattern;
    OnigRegex re = nullptr;
    OnigErrorInfo info;
    const auto* p = reinterpret_cast<const OnigUChar*>(pattern.data());
    // Same options as the `onig` crate's Regex::new that Hugging Face uses: none, default syntax.
    int rc = onig_new(&re, p, p + pattern.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT,
                      &info);
    if (rc != ONIG_NORMAL) {
        return invalid_argument("pre-tokenizer regex '" + pattern +
                                "' does not compile: " + onig_message(rc, &info));
    }
    s->regex_ = re;
    if (allow_fast_path && pattern == kO200kPattern) {
        // The ASCII classes come from Oniguruma itself; the matcher assumes no ASCII character is Lt, Lm,
        // Lo or M and that every ASCII letter is Lu or Ll; otherwise it stays off.
        bool ok = true;
        for (int c = 0; c < 128; ++c) {
            uint8_t cls = 0;
            if (onig_class_has("\\p{Lu}", c)) cls |= kLu;
            if (onig_class_has("\\p{Ll}", c)) cls |= kLl;
            if (onig_class_has("\\p{N}", c)) cls |= kDigit;
            if (onig_class_has("\\s", c)) cls |= kSpace;
            bool letter = onig_class_has("\\p{L}", c);
            if (onig_class_has("[\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]", c) || letter != ((cls & (kLu | kLl)) != 0) ||
                (cls & kLu && cls & kLl)) {
                ok = false;
            }
            s->ascii_class_[c] = cls;
        }
        s->fast_ = ok;
    }
    return s;
}

RegexSplitter::~RegexSplitter() {
    if (regex_) onig_free(static_cast<OnigRegex>(regex_));
}

// The o200k alternatives, tried in order at `pos` as Oniguruma does (ordered alternation, greedy
// quantifiers), specialised to ASCII. Any non-ASCII byte that could change the outcome returns 0.
//   1  [^\r\n\p{L}\p{N}]?[\p{Lu}...\p{M}]*[\p{Ll}...\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//   2  [^\r\n\p{L}\p{N}]?[\p{Lu}...\p{M}]+[\p{Ll}...\p{M}]*(?i:...)?
//   3  \p{N}{1,3}      4  ' ?[^\s\p{L}\p{N}]+[\r\n/]*'      5  \s*[\r\n]+      6  \s+(?!\S)      7  \s+
size_t RegexSplitter::fast_match(const uint8_t* s, size_t n, size_t pos, size_t* steps) const {
    constexpr uint8_t kLetter = kLu | kLl;
    size_t i = pos;
    auto ascii = [&](size_t k) { return k < n && s[k] < 0x80; };
    auto fail_on_non_ascii = [&](size_t k) { return k < n && s[k] >= 0x80; };
    uint8_t c = s[pos];
    if (c >= 0x80) return 0;
    uint8_t cls = ascii_class_[c];
    // 1 and 2: an optional prefix character, then letters.
    if (cls & kLetter || (!(cls & kDigit) && c != '\r' && c != '\n')) {
        size_t start = cls & kLetter ? pos : pos + 1;
        size_t j = start;
        while (ascii(j) && ascii_class_[s[j]] & kLu) ++j;
        if (fail_on_non_ascii(j)) return 0;
        size_t k = j;
        while (ascii(k) && ascii_class_[s[k]] & kLl) ++k;
        if (fail_on_non_ascii(k)) return 0;
        *steps += k - pos + 1;
        if (k > start) {  // alternative 1 (some lowercase) or 2 (uppercase only)
            if (k < n && s[k] == '\'') {
                if (fail_on_non_ascii(k + 1) || fail_on_non_ascii(k + 2)) return 0;
                uint8_t a = k + 1 < n ? s[k + 1] | 0x20 : 0, b = k + 2 < n ? s[k + 2] | 0x20 : 0;
                if (a == 's' || a == 't' || a == 'm' || a == 'd') return k + 2;
                if (((a == 'r' || a == 'v') && b == 'e') || (a == 'l' && b == 'l')) return k + 3;
            }
            return k;
        }
    }
    // 3: one to three digits.
    if (cls & kDigit) {
        for (i = pos; i < pos + 3 && ascii(i) && ascii_class_[s[i]] & kDigit;) ++i;
        if (i < pos + 3 && fail_on_non_ascii(i)) return 0;
        *steps += i - pos;
        return i;
    }
    // 4: an optional space, then symbols (neither space, letter nor digit), then [\r\n/]*.
    i = c == ' ' ? pos + 1 : pos;
    size_t j = i;
    while (ascii(j) && !(ascii_class_[s[j]] & (kSpace | kLetter | kDigit))) ++j;
    if (fail_on_non_ascii(j)) return 0;
    *steps += j - pos + 1;
    if (j > i) {
        while (j < n && (s[j] == '\r' || s[j] == '\n' || s[j] == '/')) ++j;
        return j;
    }
    // 5, 6, 7: a run of white space [pos, w).
    size_t w = pos, last_newline = n;
    while (ascii(w) && ascii_class_[s[w]] & kSpace) {
        if (s[w] == '\r' || s[w] == '\n') last_newline = w;
        ++w;
    }
    if (fail_on_non_ascii(w)) return 0;
    *steps += w - pos + 1;
    if (w == pos) return 0;  // not reached for valid input: every ASCII byte is in some class above
    if (last_newline != n) return last_newline + 1;  // 5: \s* backtracks to the last newline
    if (w == n) return w;                            // 6: the run reaches the end
    if (w - pos >= 2) return w - 1;                  // 6: leave the last space for the next word
    return w;                                        // 7
}

Status RegexSplitter::split(std::string_view text, PieceSink& sink, EncodeStats* stats) const {
    if (text.empty()) return Status::ok();
    auto re = static_cast<OnigRegex>(regex_);
    const auto* str = reinterpret_cast<const OnigUChar*>(text.data());
    const auto* end = str + text.size();
    OnigRegion* region = nullptr;
    size_t pos = 0;  // where the next search starts
    size_t gap = 0;  // start of text not yet emitted
    size_t steps = 0;
    Status status;
    while (pos < text.size()) {
        if (fast_) {
            size_t fin = fast_match(str, text.size(), pos, &steps);
            if (fin > pos) {
                sink(text.substr(pos, fin - pos));
                pos = gap = fin;
                continue;
            }
        }
        if (!region) region = onig_region_new();
        int r = onig_search(re, str, end, str + pos, end, region, ONIG_OPTION_NONE);
        if (stats) ++stats->regex_searches;
        if (r == ONIG_MISMATCH) break;
        if (r < 0) {
            status = internal_error("pre-tokenizer regex '" + pattern_ + "' failed at byte " +
                                    std::to_string(pos) + ": " + onig_message(r, nullptr));
            break;
        }
        auto beg = static_cast<size_t>(region->beg[0]), fin = static_cast<size_t>(region->end[0]);
        if (beg > gap) sink(text.substr(gap, beg - gap));
        if (fin > beg) {
            sink(text.substr(beg, fin - beg));
            pos = fin;
        } else {
            // Empty match: step over one character, as the onig crate's find_iter does.
            if (beg >= text.size()) break;
            Utf8Sequence seq = utf8_sequence(text.substr(beg));
            pos = beg + (seq.kind == Utf8Sequence::kValid ? seq.length : 1);
        }
        gap = std::max(gap, fin);
    }
    if (status.is_ok() && gap < text.size()) sink(text.substr(gap));
    if (region) onig_region_free(region, 1);
    if (stats) stats->scan_steps += steps;
    return status;
}

Status RegexSplitter::split(std::string_view text, std::vector<std::string_view>* pieces,
                            EncodeStats* stats) const {
    VectorSink sink(pieces);
    return split(text, sink, stats);
}

void set_regex_retry_limit_per_search(unsigned long limit) {
    init_oniguruma();
    onig_set_retry_limit_in_search(limit);
}

std::string regex_escape(std::string_view literal) {
    std::string out;
    for (char c : literal) {
        if (std::string_view("\\^$.|?*+()[]{}-/").find(c) != std::string_view::npos) out.push_back('\\');
        out.push_back(c);
    }
    return out;
}

}  // namespace volt::tokenizer
