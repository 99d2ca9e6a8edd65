// Pre-tokenizer: splits text into pieces with a regex (Hugging Face `Split` with behaviour `Isolated`),
// through Oniguruma, the engine Hugging Face `tokenizers` uses, so Unicode classes (\p{L}, \s ...) match
// exactly as there. Matches and the gaps between them both become pieces; a piece never crosses the
// end of the text it is given. Input must be valid UTF-8. Test: tests/unit/tokenizer/tokenizer_test.cc.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace volt::tokenizer {

// Deterministic work counters of one or more encode calls (for the linear-work tests, BUG-31).
struct EncodeStats {
    size_t regex_searches = 0;  // onig_search calls
    size_t pieces = 0;          // pre-tokens produced
    size_t bpe_merges = 0;      // merges applied
    size_t bpe_lookups = 0;     // merge-table look-ups (the BPE inner loop's unit of work)
};

class RegexSplitter {
  public:
    // Compiles `pattern` (Oniguruma syntax, UTF-8). kInvalidArgument names the pattern on failure.
    static Result<std::unique_ptr<RegexSplitter>> create(const std::string& pattern);
    ~RegexSplitter();
    RegexSplitter(const RegexSplitter&) = delete;
    RegexSplitter& operator=(const RegexSplitter&) = delete;

    // Appends the pieces of `text` (views into it, in order, covering it exactly) to `pieces`.
    // Thread-safe. kInternal if Oniguruma reports an error (e.g. its retry limit).
    Status split(std::string_view text, std::vector<std::string_view>* pieces, EncodeStats* stats) const;

  private:
    RegexSplitter() = default;
    void* regex_ = nullptr;  // OnigRegex; kept opaque so users do not include oniguruma.h
    std::string pattern_;
};

// Oniguruma's process-wide budget of backtracking steps per search (onig_set_retry_limit_in_search);
// 0, the default, is unlimited. A search over budget fails with kInternal. Tests use it to show the
// regex work on pathological input is bounded by a multiple of its length.
void set_regex_retry_limit_per_search(unsigned long limit);

// Escapes `literal` so it matches itself (Hugging Face `Split` with a `String` pattern).
std::string regex_escape(std::string_view literal);

// The regex of Hugging Face `ByteLevel` with `use_regex: true` (GPT-2's pattern).
inline constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace volt::tokenizer
