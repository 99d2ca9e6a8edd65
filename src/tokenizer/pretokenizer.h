// Pre-tokenizer: HF `Split` (behaviour `Isolated`) through Oniguruma, the engine HF `tokenizers` uses, so
// \p{L}, \s ... match exactly as there; matches and gaps both become pieces, never crossing the text's end.
// Input must be valid UTF-8. For the o200k pattern (gpt-oss) a hand-written matcher decides positions
// that involve only ASCII and hands the rest to Oniguruma; both give the same pieces
// (tests/unit/tokenizer/tokenizer_pretokenizer_test.cc fuzzes one against the other).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace volt::tokenizer {

// Deterministic work counters of one or more encode calls (for the linear-work tests, BUG-31).
struct EncodeStats {
    size_t regex_searches = 0;  // onig_search calls
    size_t scan_steps = 0;      // bytes examined by the o200k ASCII matcher
    size_t pieces = 0;          // pre-tokens given to BPE
    size_t bpe_merges = 0;      // merges applied
    size_t bpe_lookups = 0;     // merge-table look-ups (the BPE inner loop's unit of work)
};

// Receives pieces in order.
class PieceSink {
  public:
    virtual void operator()(std::string_view piece) = 0;

  protected:
    ~PieceSink() = default;
};

// The Split regex of o200k_base / o200k_harmony (gpt-oss tokenizer.json).
inline constexpr const char* kO200kPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The regex of Hugging Face `ByteLevel` with `use_regex: true` (GPT-2's pattern).
inline constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class RegexSplitter {
  public:
    // Compiles `pattern` (Oniguruma syntax, UTF-8). kInvalidArgument names the pattern on failure.
    // `allow_fast_path`: use the ASCII matcher when `pattern` is kO200kPattern (tests turn it off to
    // compare against Oniguruma alone).
    static Result<std::unique_ptr<RegexSplitter>> create(const std::string& pattern,
                                                         bool allow_fast_path = true);
    ~RegexSplitter();
    RegexSplitter(const RegexSplitter&) = delete;
    RegexSplitter& operator=(const RegexSplitter&) = delete;

    // Gives the pieces of `text` (views into it, in order, covering it exactly) to `sink`. Thread-safe.
    // kInternal if Oniguruma reports an error (e.g. a retry limit, see below).
    Status split(std::string_view text, PieceSink& sink, EncodeStats* stats) const;
    // The same, appending the pieces to `pieces`.
    Status split(std::string_view text, std::vector<std::string_view>* pieces, EncodeStats* stats) const;
    bool has_fast_path() const { return fast_; }

  private:
    RegexSplitter() = default;
    // End of the o200k match at `pos` (> pos), or 0 when the decision needs a non-ASCII character.
    size_t fast_match(const uint8_t* s, size_t n, size_t pos, size_t* steps) const;

    void* regex_ = nullptr;  // OnigRegex; kept opaque so users do not include oniguruma.h
    std::string pattern_;
    bool fast_ = false;
    uint8_t ascii_class_[128] = {};  // kLu | kLl | kDigit | kSpace bits, read from Oniguruma at create()
};

// Oniguruma's process-wide budget of backtracking steps per search (onig_set_retry_limit_in_search);
// 0, the default, is unlimited. A search over budget fails with kInternal. Tests use it to show the
// regex work on pathological input is bounded by a multiple of its length.
void set_regex_retry_limit_per_search(unsigned long limit);

// Escapes `literal` so it matches itself (Hugging Face `Split` with a `String` pattern).
std::string regex_escape(std::string_view literal);

}  // namespace volt::tokenizer
