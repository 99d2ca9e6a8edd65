// safetensors_writer: the bytes on disk checked against the format definition
// (https://github.com/huggingface/safetensors#format): u64 LE header size, JSON header padded with
// spaces to a multiple of 8, payloads at 8 + N + data_offsets. Expected headers are written out by hand.
#include "io/safetensors_writer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

namespace volt::io {
namespace {

namespace fs = std::filesystem;

std::string read_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

uint64_t le64(const std::string& s) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(s[i]);
    return v;
}

class WriterTest : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = fs::path(testing::TempDir()) /
               ("st_writer_" + std::string(testing::UnitTest::GetInstance()->current_test_info()->name()));
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    fs::path dir_;
};

TEST_F(WriterTest, SingleTensorExactBytes) {
    const uint8_t data[3] = {7, 8, 9};
    const std::string path = (dir_ / "a.safetensors").string();
    ASSERT_TRUE(write_safetensors(path, {{"a", DType::kU8, {3}, data}}).is_ok());
    // {"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}} is 53 characters; padded to 56.
    const std::string json = R"({"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}})";
    ASSERT_EQ(json.size(), 53u);
    std::string expected("\x38\0\0\0\0\0\0\0", 8);
    expected += json + "   " + "\x07\x08\x09";
    EXPECT_EQ(read_bytes(path), expected);
}

TEST_F(WriterTest, MetadataAndSeveralTensors) {
    const uint16_t bf[2][3] = {{0x3f80, 0x4000, 0x4040}, {0xbf80, 0x0000, 0x7f80}};  // 1 2 3 / -1 0 inf
    const float f[2] = {0.5f, -2.0f};
    const std::string path = (dir_ / "m.safetensors").string();
    ASSERT_TRUE(write_safetensors(path, {{"w", DType::kBF16, {2, 3}, bf}, {"b", DType::kF32, {2}, f}},
                                  {{"format", "pt"}})
                    .is_ok());
    const std::string bytes = read_bytes(path);
    const uint64_t n = le64(bytes);
    EXPECT_EQ(n % 8, 0u);
    ASSERT_EQ(bytes.size(), 8 + n + 12 + 8);
    const std::string header = bytes.substr(8, n);
    const size_t end = header.find_last_not_of(' ');
    EXPECT_LT(n - (end + 1), 8u);
    auto j = nlohmann::json::parse(header.substr(0, end + 1));
    EXPECT_EQ(j["__metadata__"], nlohmann::json({{"format", "pt"}}));
    EXPECT_EQ(j["w"]["dtype"], "BF16");
    EXPECT_EQ(j["w"]["shape"], nlohmann::json({2, 3}));
    EXPECT_EQ(j["w"]["data_offsets"], nlohmann::json({0, 12}));
    EXPECT_EQ(j["b"]["dtype"], "F32");
    EXPECT_EQ(j["b"]["data_offsets"], nlohmann::json({12, 20}));
    const char* payload = bytes.data() + 8 + n;
    // bf16 0x4000 little-endian at element 1: bytes 00 40.
    EXPECT_EQ(static_cast<uint8_t>(payload[2]), 0x00);
    EXPECT_EQ(static_cast<uint8_t>(payload[3]), 0x40);
    EXPECT_EQ(std::memcmp(payload, bf, 12), 0);
    // 0.5f = 0x3f000000, little-endian 00 00 00 3f.
    EXPECT_EQ(static_cast<uint8_t>(payload[15]), 0x3f);
    EXPECT_EQ(std::memcmp(payload + 12, f, 8), 0);
}

TEST_F(WriterTest, EmptyTensorAndNoTempFileLeft) {
    const std::string path = (dir_ / "e.safetensors").string();
    ASSERT_TRUE(write_safetensors(path, {{"z", DType::kF32, {0, 4}, nullptr}}).is_ok());
    const std::string bytes = read_bytes(path);
    const uint64_t n = le64(bytes);
    EXPECT_EQ(bytes.size(), 8 + n);
    int files = 0;
    for (const auto& e : fs::directory_iterator(dir_)) files += e.is_regular_file() ? 1 : 0;
    EXPECT_EQ(files, 1);
}

TEST_F(WriterTest, RejectsBadInput) {
    const uint8_t d[2] = {1, 2};
    const std::string path = (dir_ / "x.safetensors").string();
    Status dup = write_safetensors(path, {{"a", DType::kU8, {1}, d}, {"a", DType::kU8, {1}, d}});
    EXPECT_EQ(dup.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(dup.message().find("a"), std::string::npos);
    Status neg = write_safetensors(path, {{"neg", DType::kU8, {-1}, d}});
    EXPECT_EQ(neg.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(neg.message().find("neg"), std::string::npos);
    Status null = write_safetensors(path, {{"nul", DType::kU8, {2}, nullptr}});
    EXPECT_EQ(null.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(null.message().find("nul"), std::string::npos);
    EXPECT_FALSE(fs::exists(path));
    Status nodir =
        write_safetensors((dir_ / "missing" / "x.safetensors").string(), {{"a", DType::kU8, {1}, d}});
    EXPECT_EQ(nodir.code(), StatusCode::kInternal);
    EXPECT_NE(nodir.message().find("missing"), std::string::npos);
}

TEST(ShardName, MatchesPublishedRepos) {
    // gpt-oss-20b: model-00000-of-00002 ... model-00002-of-00002 (spec §2.1).
    EXPECT_EQ(shard_file_name(0, 3), "model-00000-of-00002.safetensors");
    EXPECT_EQ(shard_file_name(2, 3), "model-00002-of-00002.safetensors");
    EXPECT_EQ(shard_file_name(14, 15), "model-00014-of-00014.safetensors");
}

TEST_F(WriterTest, ShardsAndIndex) {
    std::vector<uint8_t> a(40, 1), b(40, 2), c(40, 3);
    const std::string out = (dir_ / "ckpt").string();
    ASSERT_TRUE(write_sharded_safetensors(out,
                                          {{"a", DType::kU8, {40}, a.data()},
                                           {"b", DType::kU8, {4, 10}, b.data()},
                                           {"c", DType::kU8, {40}, c.data()}},
                                          100)
                    .is_ok());
    // a + b = 80 bytes fit under 100; c would make 120, so it starts shard 2 of 2.
    const std::string s0 = out + "/model-00000-of-00001.safetensors";
    const std::string s1 = out + "/model-00001-of-00001.safetensors";
    ASSERT_TRUE(fs::exists(s0));
    ASSERT_TRUE(fs::exists(s1));
    auto index = nlohmann::json::parse(read_bytes(out + "/model.safetensors.index.json"));
    EXPECT_EQ(index["metadata"]["total_size"], 120);
    EXPECT_EQ(index["weight_map"], nlohmann::json({{"a", "model-00000-of-00001.safetensors"},
                                                   {"b", "model-00000-of-00001.safetensors"},
                                                   {"c", "model-00001-of-00001.safetensors"}}));
    const std::string bytes0 = read_bytes(s0), bytes1 = read_bytes(s1);
    const uint64_t n0 = le64(bytes0), n1 = le64(bytes1);
    ASSERT_EQ(bytes0.size(), 8 + n0 + 80);
    ASSERT_EQ(bytes1.size(), 8 + n1 + 40);
    EXPECT_EQ(bytes0.substr(8 + n0), std::string(40, '\x01') + std::string(40, '\x02'));
    EXPECT_EQ(bytes1.substr(8 + n1), std::string(40, '\x03'));
    auto h0 = nlohmann::json::parse(bytes0.substr(8, n0));
    EXPECT_EQ(h0["__metadata__"]["format"], "pt");
    EXPECT_EQ(h0["b"]["shape"], nlohmann::json({4, 10}));
    EXPECT_EQ(h0["b"]["data_offsets"], nlohmann::json({40, 80}));
}

TEST_F(WriterTest, OversizedTensorGetsOwnShard) {
    std::vector<uint8_t> big(300, 5), small(10, 6);
    const std::string out = (dir_ / "big").string();
    ASSERT_TRUE(write_sharded_safetensors(out,
                                          {{"s1", DType::kU8, {10}, small.data()},
                                           {"big", DType::kU8, {300}, big.data()},
                                           {"s2", DType::kU8, {10}, small.data()}},
                                          100)
                    .is_ok());
    auto index = nlohmann::json::parse(read_bytes(out + "/model.safetensors.index.json"));
    EXPECT_EQ(index["weight_map"]["s1"], "model-00000-of-00002.safetensors");
    EXPECT_EQ(index["weight_map"]["big"], "model-00001-of-00002.safetensors");
    EXPECT_EQ(index["weight_map"]["s2"], "model-00002-of-00002.safetensors");
    EXPECT_EQ(write_sharded_safetensors(out, {}, 0).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace volt::io
