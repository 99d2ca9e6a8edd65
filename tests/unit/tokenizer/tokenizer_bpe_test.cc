// BPE, added tokens, decode and loader errors on a tiny hand-written tokenizer.json whose results are
// worked out by hand from the BPE definition (lowest merge rank first, leftmost on ties; HF word.rs).
// The GPT-2 byte table values are those of openai/gpt-2 encoder.py (' ' -> U+0120 'Ġ', '\n' -> U+010A).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"

namespace volt::tokenizer {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

// Byte tokens a=0 b=1 c=2 d=3 Ġ=4 <=20 |=21 x=22 y=23 >=24 N=25 S=26; merges in rank order below.
json tiny_json(bool ignore_merges) {
    json vocab = {{"a", 0},  {"b", 1},   {"c", 2},  {"d", 3},    {"\u0120", 4}, {"ab", 5},
                  {"bc", 6}, {"abc", 7}, {"aa", 8}, {"aaaa", 9}, {"bca", 12},   {"<", 20},
                  {"|", 21}, {"x", 22},  {"y", 23}, {">", 24},   {"N", 25},     {"S", 26}};
    json merges = json::array({json::array({"b", "c"}), json::array({"a", "b"}), json::array({"a", "bc"}),
                               json::array({"a", "a"}), json::array({"aa", "aa"})});
    json added = json::array({
        {{"id", 101}, {"content", "<|xy|>"}, {"special", true}},
        {{"id", 102}, {"content", "NS"}, {"special", false}},
        {{"id", 103}, {"content", "xy"}, {"special", false}},
    });
    return {
        {"version", "1.0"},
        {"normalizer", nullptr},
        {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
        {"added_tokens", added},
        {"model", {{"type", "BPE"}, {"ignore_merges", ignore_merges}, {"vocab", vocab}, {"merges", merges}}}};
}

std::shared_ptr<const Tokenizer> tiny(bool ignore_merges = false) {
    auto t = Tokenizer::from_json(tiny_json(ignore_merges).dump(), "tiny");
    EXPECT_TRUE(t.is_ok()) << t.status().to_string();
    return t.is_ok() ? *t : nullptr;
}

Ids enc(const Tokenizer& t, std::string_view s, SpecialTokens m = SpecialTokens::kRecognise) {
    auto r = t.encode(s, m);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    return r.is_ok() ? *r : Ids{};
}

TEST(TokenizerByteLevel, Gpt2Table) {
    EXPECT_EQ(byte_to_codepoint(' '), 0x120u);
    EXPECT_EQ(byte_to_codepoint('\n'), 0x10Au);
    EXPECT_EQ(byte_to_codepoint('\t'), 0x109u);
    EXPECT_EQ(byte_to_codepoint(0), 0x100u);
    EXPECT_EQ(byte_to_codepoint('!'), 0x21u);
    EXPECT_EQ(byte_to_codepoint(0x7F), 0x121u);
    EXPECT_EQ(byte_to_codepoint(0xA0), 0x142u);
    EXPECT_EQ(byte_to_codepoint(0xAD), 0x143u);
    EXPECT_EQ(byte_to_codepoint(0xFF), 0xFFu);
    EXPECT_EQ(byte_level_to_bytes("\u0120hello\u010A"), " hello\n");
    EXPECT_EQ(bytes_to_byte_level(" hello\n"), "\u0120hello\u010A");
}

TEST(TokenizerUtf8, Validation) {
    EXPECT_EQ(find_invalid_utf8(""), std::nullopt);
    EXPECT_EQ(find_invalid_utf8("plain ascii text that is long"), std::nullopt);
    EXPECT_EQ(find_invalid_utf8("\xE4\xB8\xAD\xF0\x9F\x91\x8D"), std::nullopt);
    EXPECT_EQ(find_invalid_utf8("ab\xE6\xAD"), 2u);        // truncated 3-byte character (BUG-32)
    EXPECT_EQ(find_invalid_utf8("abcdefghij\x80"), 10u);   // lone continuation byte
    EXPECT_EQ(find_invalid_utf8("\xC0\xAF"), 0u);          // overlong '/'
    EXPECT_EQ(find_invalid_utf8("x\xED\xA0\xBD"), 1u);     // UTF-8 of surrogate U+D83D
    EXPECT_EQ(find_invalid_utf8("\xF4\x90\x80\x80"), 0u);  // above U+10FFFF
}

TEST(TokenizerBpe, MergesByRank) {
    auto t = tiny();
    // b+c (rank 0) before a+b (rank 1), then a+bc (rank 2).
    EXPECT_EQ(enc(*t, "abc"), (Ids{7}));
    EXPECT_EQ(enc(*t, "ab"), (Ids{5}));
    // Without ignore_merges "bca" is b+c then (bc, a) has no merge, although "bca" is in the vocabulary.
    EXPECT_EQ(enc(*t, "bca"), (Ids{6, 0}));
    // Leftmost wins between equal ranks: (aa) a; then a a a a a -> aa aa a -> aaaa a.
    EXPECT_EQ(enc(*t, "aaa"), (Ids{8, 0}));
    EXPECT_EQ(enc(*t, "aaaaa"), (Ids{9, 0}));
    // Space goes with the following word (GPT-2 regex " ?\p{L}+"), byte token Ġ=4 when alone.
    // " abc": Ġ a b c -> Ġ a bc -> Ġ abc; (Ġ, abc) has no merge.
    EXPECT_EQ(enc(*t, "ab abc"), (Ids{5, 4, 7}));
    EXPECT_EQ(enc(*t, "ab  "), (Ids{5, 4, 4}));
}

TEST(TokenizerBpe, IgnoreMergesTakesWholeVocabularyPieces) {
    auto t = tiny(/*ignore_merges=*/true);
    EXPECT_EQ(enc(*t, "bca"), (Ids{12}));
    EXPECT_EQ(enc(*t, "abc"), (Ids{7}));
}

TEST(TokenizerBpe, LongPiecesTakeTheHeapPathWithTheSameRules) {
    auto t = tiny();
    // 100 a's: a+a pairs from the left, then aa+aa: 25 x "aaaa". Longer than the linear-scan limit.
    EXPECT_EQ(enc(*t, std::string(100, 'a')), Ids(25, 9));
    Ids expect101(25, 9);
    expect101.push_back(0);
    EXPECT_EQ(enc(*t, std::string(101, 'a')), expect101);
    Ids expect102(25, 9);
    expect102.push_back(8);
    EXPECT_EQ(enc(*t, std::string(102, 'a')), expect102);
    // "abc" x 30: each word piece is one 90-byte letter run; b+c everywhere, then a+bc -> 30 x abc.
    std::string abc;
    for (int i = 0; i < 30; ++i) abc += "abc";
    EXPECT_EQ(enc(*t, abc), Ids(30, 7));
}

TEST(TokenizerBpe, AddedTokensInBothModes) {
    auto t = tiny();
    EXPECT_EQ(enc(*t, "a<|xy|>b"), (Ids{0, 101, 1}));
    // Ordinary-text mode: the special token is text, but the non-special "xy" is still recognised.
    EXPECT_EQ(enc(*t, "a<|xy|>b", SpecialTokens::kIgnore), (Ids{0, 20, 21, 103, 21, 24, 1}));
    EXPECT_EQ(enc(*t, "NSab", SpecialTokens::kIgnore), (Ids{102, 5}));
    EXPECT_EQ(enc(*t, "<|xy|><|xy|>"), (Ids{101, 101}));
    EXPECT_EQ(enc(*t, "<|xy|"), (Ids{20, 21, 103, 21}));
}

TEST(TokenizerBpe, EmptyAndInvalidInput) {
    auto t = tiny();
    EXPECT_EQ(enc(*t, ""), Ids{});
    auto bad = t->encode("ab\xE6\xAD", SpecialTokens::kRecognise);
    ASSERT_FALSE(bad.is_ok());
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(bad.status().message().find("offset 2"), std::string::npos) << bad.status().message();
}

TEST(TokenizerBpe, DecodeAndLookups) {
    auto t = tiny();
    Ids ids{7, 4, 101, -1, 5000, 200018};
    EXPECT_EQ(t->decode(ids), "abc <|xy|>");
    EXPECT_EQ(t->decode(ids, /*skip_special=*/true), "abc ");
    EXPECT_EQ(t->token_to_id("\u0120"), 4);
    EXPECT_EQ(t->token_to_id(" "), std::nullopt);  // the spelling is "Ġ", not the raw byte
    EXPECT_EQ(t->token_to_id("<|xy|>"), 101);
    EXPECT_EQ(t->id_to_token(4), "\u0120");
    EXPECT_EQ(t->id_to_token(101), "<|xy|>");
    EXPECT_EQ(t->id_to_token(50), std::nullopt);
    EXPECT_TRUE(t->is_special(101));
    EXPECT_FALSE(t->is_special(102));
    EXPECT_FALSE(t->is_special(7));
    EXPECT_EQ(t->vocab_size(), 104);
    EXPECT_EQ(t->token_bytes(4), (std::vector<uint8_t>{0x20}));
    EXPECT_TRUE(t->token_bytes(99).empty());
}

TEST(TokenizerLoad, MergesAsSpaceSeparatedStrings) {
    json j = tiny_json(false);
    j["model"]["merges"] = json::array({"b c", "a b", "a bc", "a a", "aa aa"});  // the older form
    auto t = Tokenizer::from_json(j.dump(), "strings.json");
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    EXPECT_EQ(enc(**t, "abc"), (Ids{7}));
    EXPECT_EQ(enc(**t, "aaaaa"), (Ids{9, 0}));
}

Status load_error(const json& j) {
    auto t = Tokenizer::from_json(j.dump(), "test.json");
    return t.is_ok() ? Status::ok() : t.status();
}

TEST(TokenizerLoad, Errors) {
    auto missing = Tokenizer::from_file("/nonexistent/tokenizer.json");
    EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
    EXPECT_EQ(Tokenizer::from_json("{not json", "x").status().code(), StatusCode::kDataLoss);

    json j = tiny_json(false);
    j["normalizer"] = {{"type", "NFC"}};
    EXPECT_EQ(load_error(j).code(), StatusCode::kUnimplemented);

    // BUG-29: two names for one id cannot round-trip; refuse the file.
    j = tiny_json(false);
    j["added_tokens"].push_back({{"id", 101}, {"content", "<|other|>"}, {"special", true}});
    Status s = load_error(j);
    EXPECT_EQ(s.code(), StatusCode::kDataLoss);
    EXPECT_NE(s.message().find("share id 101"), std::string::npos) << s.message();

    j = tiny_json(false);
    j["model"]["merges"].push_back(json::array({"c", "d"}));  // "cd" is not in the vocabulary
    EXPECT_EQ(load_error(j).code(), StatusCode::kDataLoss);

    j = tiny_json(false);
    j["model"]["vocab"]["ab"] = "5";
    s = load_error(j);
    EXPECT_EQ(s.code(), StatusCode::kDataLoss);
    EXPECT_NE(s.message().find("model.vocab['ab']"), std::string::npos) << s.message();

    j = tiny_json(false);
    j["model"]["merges"].push_back(json::array({"a"}));
    EXPECT_EQ(load_error(j).code(), StatusCode::kDataLoss);

    j = tiny_json(false);
    j["model"].erase("vocab");
    EXPECT_EQ(load_error(j).code(), StatusCode::kDataLoss);

    j = tiny_json(false);
    j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "("}}}, {"behavior", "Isolated"}};
    EXPECT_EQ(load_error(j).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace volt::tokenizer
