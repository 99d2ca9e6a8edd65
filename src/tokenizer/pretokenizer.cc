// Oniguruma-backed regex splitting; see pretokenizer.h.
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

Result<std::unique_ptr<RegexSplitter>> RegexSplitter::create(const std::string& pattern) {
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
    return s;
}

RegexSplitter::~RegexSplitter() {
    if (regex_) onig_free(static_cast<OnigRegex>(regex_));
}

Status RegexSplitter::split(std::string_view text, std::vector<std::string_view>* pieces,
                            EncodeStats* stats) const {
    if (text.empty()) return Status::ok();
    auto re = static_cast<OnigRegex>(regex_);
    const auto* str = reinterpret_cast<const OnigUChar*>(text.data());
    const auto* end = str + text.size();
    OnigRegion* region = onig_region_new();
    size_t pos = 0;  // where the next search starts
    size_t gap = 0;  // start of text not yet emitted
    Status status;
    while (pos < text.size()) {
        int r = onig_search(re, str, end, str + pos, end, region, ONIG_OPTION_NONE);
        if (stats) ++stats->regex_searches;
        if (r == ONIG_MISMATCH) break;
        if (r < 0) {
            status = internal_error("pre-tokenizer regex '" + pattern_ + "' failed at byte " +
                                    std::to_string(pos) + ": " + onig_message(r, nullptr));
            break;
        }
        auto beg = static_cast<size_t>(region->beg[0]), fin = static_cast<size_t>(region->end[0]);
        if (beg > gap) pieces->push_back(text.substr(gap, beg - gap));
        if (fin > beg) {
            pieces->push_back(text.substr(beg, fin - beg));
            pos = fin;
        } else {
            // Empty match: step over one character, as the onig crate's find_iter does.
            if (beg >= text.size()) break;
            Utf8Sequence seq = utf8_sequence(text.substr(beg));
            pos = beg + (seq.kind == Utf8Sequence::kValid ? seq.length : 1);
        }
        gap = std::max(gap, fin);
    }
    if (status.is_ok() && gap < text.size()) pieces->push_back(text.substr(gap));
    onig_region_free(region, 1);
    return status;
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
