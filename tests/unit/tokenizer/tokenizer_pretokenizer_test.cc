// The o200k pre-tokenizer's ASCII matcher against Oniguruma alone: identical pieces on seeded random
// strings drawn from the characters where the regex alternatives compete (letters of both cases,
// apostrophes and contraction letters, digits, symbols, every kind of white space, CR/LF, '/') mixed
// with non-ASCII letters, marks, digits and spaces that force the hand-over. HF parity of both
// engines is in tokenizer_golden_test.cc.
#include <gtest/gtest.h>

#include <random>

#include "tokenizer/pretokenizer.h"

namespace volt::tokenizer {
namespace {

std::vector<std::string_view> pieces_of(const RegexSplitter& s, std::string_view text, EncodeStats* stats) {
    std::vector<std::string_view> out;
    Status st = s.split(text, &out, stats);
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    return out;
}

TEST(TokenizerPretokenizer, FastPathOnlyForTheO200kPattern) {
    auto fast = RegexSplitter::create(kO200kPattern);
    auto gpt2 = RegexSplitter::create(kGpt2Pattern);
    ASSERT_TRUE(fast.is_ok() && gpt2.is_ok());
    EXPECT_TRUE((*fast)->has_fast_path());
    EXPECT_FALSE((*gpt2)->has_fast_path());
}

TEST(TokenizerPretokenizer, AsciiMatcherAgreesWithOniguruma) {
    auto fast = RegexSplitter::create(kO200kPattern);
    auto onig = RegexSplitter::create(kO200kPattern, /*allow_fast_path=*/false);
    ASSERT_TRUE(fast.is_ok() && onig.is_ok());
    ASSERT_FALSE((*onig)->has_fast_path());
    const std::vector<std::string> alphabet = {"a",
                                               "b",
                                               "s",
                                               "t",
                                               "m",
                                               "d",
                                               "r",
                                               "e",
                                               "v",
                                               "l",
                                               "S",
                                               "T",
                                               "R",
                                               "E",
                                               "L",
                                               "D",
                                               "A",
                                               "Z",
                                               "'",
                                               "'",
                                               "0",
                                               "1",
                                               "9",
                                               " ",
                                               " ",
                                               " ",
                                               "\t",
                                               "\n",
                                               "\r",
                                               "\r\n",
                                               "\v",
                                               "\f",
                                               "/",
                                               "!",
                                               ".",
                                               "-",
                                               "(",
                                               "<",
                                               "|",
                                               "\x01",
                                               "\x1f",
                                               "\x7f",
                                               "_",
                                               "\xC3\xA9" /* é */,
                                               "\xC3\x89" /* É */,
                                               "\xC5\xBF" /* ſ folds to s */,
                                               "\xC2\xA0" /* NBSP */,
                                               "\xC2\x85" /* NEL */,
                                               "\xE1\xA0\x8E" /* U+180E */,
                                               "\xE3\x80\x80" /* U+3000 */,
                                               "\xCC\x81" /* combining acute */,
                                               "\xD9\xA3" /* Arabic-Indic 3 */,
                                               "\xE4\xB8\xAD" /* CJK */,
                                               "\xF0\x9F\x91\x8D" /* emoji */,
                                               "\xE2\x80\x99" /* right quote */,
                                               "\xC7\x85" /* Lt */};
    std::mt19937 rng(1234);
    std::uniform_int_distribution<size_t> pick(0, alphabet.size() - 1), len(0, 24);
    EncodeStats fast_stats, onig_stats;
    for (int n = 0; n < 20000; ++n) {
        std::string text;
        for (size_t i = 0, l = len(rng); i < l; ++i) text += alphabet[pick(rng)];
        ASSERT_EQ(pieces_of(**fast, text, &fast_stats), pieces_of(**onig, text, &onig_stats)) << text;
    }
    // The fast path really ran, and really handed over.
    EXPECT_GT(fast_stats.scan_steps, 100000u);
    EXPECT_GT(fast_stats.regex_searches, 1000u);
    EXPECT_LT(fast_stats.regex_searches, onig_stats.regex_searches / 2);
}

std::string repeat(std::string_view unit, size_t n) {
    std::string s;
    for (size_t i = 0; i < n; ++i) s += unit;
    return s;
}

// BUG-31 for Oniguruma alone (the path of non-ASCII text and of other patterns): 1M repeats split with
// at most 4 backtracking steps per byte, and the number of searches grows linearly.
TEST(TokenizerPretokenizer, OnigurumaStaysLinearOnRepeatedCharacters) {
    auto onig = RegexSplitter::create(kO200kPattern, /*allow_fast_path=*/false);
    ASSERT_TRUE(onig.is_ok());
    for (std::string_view unit : {"^", "a", " ", "\n", "1", "\xC2\xA0", "\xF0\x9F\x91\x8D"}) {
        EncodeStats small, big;
        std::string s = repeat(unit, 10000), b = repeat(unit, 1000000);
        set_regex_retry_limit_per_search(4 * s.size());
        std::vector<std::string_view> ps = pieces_of(**onig, s, &small);
        set_regex_retry_limit_per_search(4 * b.size());
        std::vector<std::string_view> pb = pieces_of(**onig, b, &big);
        set_regex_retry_limit_per_search(0);
        size_t covered = 0;
        for (auto p : pb) covered += p.size();
        EXPECT_EQ(covered, b.size());
        EXPECT_LE(static_cast<double>(big.regex_searches), 101.0 * std::max<size_t>(small.regex_searches, 1));
    }
}

}  // namespace
}  // namespace volt::tokenizer
