// SafetensorsFile / SafetensorsCheckpoint: files written by our writer and by hand (raw header bytes)
// read back, and every malformed case rejected with a message naming the file and the tensor at fault.
#include "io/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "io/safetensors_writer.h"

namespace volt::io {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class SafetensorsTest : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = fs::path(testing::TempDir()) /
               ("st_reader_" + std::string(testing::UnitTest::GetInstance()->current_test_info()->name()));
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string p(const std::string& name) const { return (dir_ / name).string(); }

    // A file from raw parts: 8-byte LE size of `header` (not padded here), header, payload.
    std::string raw(const std::string& name, const std::string& header, const std::string& payload,
                    uint64_t header_len_override = 0) {
        const uint64_t n = header_len_override ? header_len_override : header.size();
        std::string bytes(8, '\0');
        for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(n >> (8 * i));
        bytes += header + payload;
        std::ofstream(p(name), std::ios::binary) << bytes;
        return p(name);
    }
    fs::path dir_;
};

TEST_F(SafetensorsTest, ReadsWhatWasWritten) {
    const uint16_t w[2][3] = {{0x3f80, 0x4000, 0x4040}, {0xbf80, 0x0000, 0x7f80}};
    const uint8_t u[5] = {1, 2, 3, 4, 250};
    ASSERT_TRUE(write_safetensors(p("a.safetensors"),
                                  {{"w", DType::kBF16, {2, 3}, w}, {"u", DType::kU8, {5}, u}},
                                  {{"format", "pt"}})
                    .is_ok());
    auto f = SafetensorsFile::open(p("a.safetensors"));
    ASSERT_TRUE(f.is_ok()) << f.status().to_string();
    EXPECT_EQ((*f)->metadata().at("format"), "pt");
    ASSERT_EQ((*f)->tensors().size(), 2u);
    const TensorInfo* tw = (*f)->find("w");
    ASSERT_NE(tw, nullptr);
    EXPECT_EQ(tw->dtype, DType::kBF16);
    EXPECT_EQ(tw->shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(tw->nbytes, 12);
    EXPECT_EQ(tw->numel(), 6);
    uint16_t e5;
    std::memcpy(&e5, tw->data + 10, 2);
    EXPECT_EQ(e5, 0x7f80);
    const TensorInfo* tu = (*f)->find("u");
    ASSERT_NE(tu, nullptr);
    EXPECT_EQ(tu->data[4], 250);
    EXPECT_EQ(tu->data, tw->data + 12);
    EXPECT_EQ((*f)->find("nope"), nullptr);
    // Hand-built file with tensors listed out of payload order and a scalar.
    const float one = 1.0f;
    std::string payload("\x09\x08", 2);
    payload.append(reinterpret_cast<const char*>(&one), 4);
    auto g = SafetensorsFile::open(raw("b.safetensors",
                                       R"({"s":{"dtype":"F32","shape":[],"data_offsets":[2,6]},)"
                                       R"("v":{"dtype":"I8","shape":[2],"data_offsets":[0,2]}})",
                                       payload));
    ASSERT_TRUE(g.is_ok()) << g.status().to_string();
    EXPECT_EQ((*g)->tensors()[0].name, "v");
    EXPECT_EQ((*g)->find("s")->shape_string(), "[]");
    float s;
    std::memcpy(&s, (*g)->find("s")->data, 4);
    EXPECT_EQ(s, 1.0f);
    EXPECT_EQ((*g)->find("v")->data[1], 8);
}

TEST_F(SafetensorsTest, MissingFile) {
    auto f = SafetensorsFile::open(p("none.safetensors"));
    ASSERT_FALSE(f.is_ok());
    EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
    EXPECT_THAT(f.status().message(), HasSubstr("none.safetensors"));
}

TEST_F(SafetensorsTest, DirectoryIsNotAFile) {
    auto f = SafetensorsFile::open(dir_.string());
    ASSERT_FALSE(f.is_ok());
    EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(f.status().message(), HasSubstr("not a regular file"));
}

TEST_F(SafetensorsTest, TruncatedPayloadNamesTensor) {
    std::vector<uint8_t> a(64, 1), b(64, 2);
    ASSERT_TRUE(write_safetensors(p("t.safetensors"), {{"first", DType::kU8, {64}, a.data()},
                                                       {"last", DType::kU8, {64}, b.data()}})
                    .is_ok());
    fs::resize_file(p("t.safetensors"), fs::file_size(p("t.safetensors")) - 10);
    auto f = SafetensorsFile::open(p("t.safetensors"));
    ASSERT_FALSE(f.is_ok());
    EXPECT_EQ(f.status().code(), StatusCode::kDataLoss);
    EXPECT_THAT(f.status().message(), HasSubstr(p("t.safetensors")));
    EXPECT_THAT(f.status().message(), HasSubstr("tensor last"));
    EXPECT_THAT(f.status().message(), HasSubstr("truncated"));
}

TEST_F(SafetensorsTest, TruncatedBeforeHeaderSize) {
    std::ofstream(p("tiny.safetensors"), std::ios::binary) << "abc";
    auto f = SafetensorsFile::open(p("tiny.safetensors"));
    ASSERT_FALSE(f.is_ok());
    EXPECT_EQ(f.status().code(), StatusCode::kDataLoss);
    EXPECT_THAT(f.status().message(), HasSubstr("tiny.safetensors"));
    EXPECT_THAT(f.status().message(), HasSubstr("truncated"));
}

TEST_F(SafetensorsTest, HeaderLengthPastEof) {
    const std::string path =
        raw("h.safetensors", R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "x", 4096);
    auto f = SafetensorsFile::open(path);
    ASSERT_FALSE(f.is_ok());
    EXPECT_EQ(f.status().code(), StatusCode::kDataLoss);
    EXPECT_THAT(f.status().message(), HasSubstr(path));
    EXPECT_THAT(f.status().message(), HasSubstr("header size 4096"));
}

TEST_F(SafetensorsTest, BadHeaderJson) {
    const std::string path = raw("j.safetensors", R"({"a":{"dtype":"U8",)", "");
    auto f = SafetensorsFile::open(path);
    ASSERT_FALSE(f.is_ok());
    EXPECT_EQ(f.status().code(), StatusCode::kDataLoss);
    EXPECT_THAT(f.status().message(), HasSubstr(path));
    EXPECT_THAT(f.status().message(), HasSubstr("not valid JSON"));
    auto arr = SafetensorsFile::open(raw("arr.safetensors", "[1,2]", ""));
    EXPECT_EQ(arr.status().code(), StatusCode::kDataLoss);
    // An entry without data_offsets names its tensor.
    auto entry = SafetensorsFile::open(raw("e.safetensors", R"({"wq":{"dtype":"U8","shape":[1]}})", "x"));
    EXPECT_EQ(entry.status().code(), StatusCode::kDataLoss);
    EXPECT_THAT(entry.status().message(), HasSubstr("tensor wq"));
}

TEST_F(SafetensorsTest, OverlappingOffsets) {
    const std::string path = raw("o.safetensors",
                                 R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                                 R"("b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
                                 "123456");
    auto f = SafetensorsFile::open(path);
    ASSERT_FALSE(f.is_ok());
    EXPECT_EQ(f.status().code(), StatusCode::kDataLoss);
    EXPECT_THAT(f.status().message(), HasSubstr(path));
    EXPECT_THAT(f.status().message(), HasSubstr("tensor b overlaps tensor a"));
}

TEST_F(SafetensorsTest, GapTrailingBytesAndSizeMismatch) {
    auto gap = SafetensorsFile::open(raw("g.safetensors",
                                         R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                                         R"("b":{"dtype":"U8","shape":[2],"data_offsets":[3,5]}})",
                                         "12345"));
    EXPECT_EQ(gap.status().code(), StatusCode::kDataLoss);
    EXPECT_THAT(gap.status().message(), HasSubstr("tensor b: gap of 1 bytes"));
    auto trail = SafetensorsFile::open(
        raw("tr.safetensors", R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", "1234"));
    EXPECT_EQ(trail.status().code(), StatusCode::kDataLoss);
    EXPECT_THAT(trail.status().message(), HasSubstr("2 bytes after the last tensor"));
    // BF16 [3] needs 6 bytes, the offsets give 4.
    auto size = SafetensorsFile::open(
        raw("sz.safetensors", R"({"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,4]}})", "1234"));
    EXPECT_EQ(size.status().code(), StatusCode::kDataLoss);
    EXPECT_THAT(size.status().message(), HasSubstr("tensor w: data_offsets [0, 4) do not hold the 6 bytes"));
}

TEST_F(SafetensorsTest, UnknownDtype) {
    const std::string path =
        raw("d.safetensors", R"({"experts":{"dtype":"F4_E2M1","shape":[2],"data_offsets":[0,2]}})", "12");
    auto f = SafetensorsFile::open(path);
    ASSERT_FALSE(f.is_ok());
    EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(f.status().message(), HasSubstr(path));
    EXPECT_THAT(f.status().message(), HasSubstr("tensor experts"));
    EXPECT_THAT(f.status().message(), HasSubstr("F4_E2M1"));
}

std::vector<TensorToWrite> three_tensors(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b,
                                         const std::vector<uint8_t>& c) {
    return {{"a", DType::kU8, {static_cast<int64_t>(a.size())}, a.data()},
            {"b", DType::kU8, {static_cast<int64_t>(b.size())}, b.data()},
            {"c", DType::kU8, {static_cast<int64_t>(c.size())}, c.data()}};
}

TEST_F(SafetensorsTest, CheckpointFromIndexIgnoresOriginalAndMetal) {
    std::vector<uint8_t> a(40, 1), b(40, 2), c(40, 3);
    ASSERT_TRUE(write_sharded_safetensors(dir_.string(), three_tensors(a, b, c), 50).is_ok());
    // Junk that must never be opened: a broken original/ checkpoint, metal/, and a stray top-level
    // .safetensors that the index does not name.
    fs::create_directories(dir_ / "original");
    fs::create_directories(dir_ / "metal");
    std::ofstream(dir_ / "original" / "model.safetensors") << "junk";
    std::ofstream(dir_ / "metal" / "model.bin") << "junk";
    std::ofstream(dir_ / "stray.safetensors") << "junk";
    auto ck = SafetensorsCheckpoint::open(dir_.string());
    ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
    EXPECT_EQ((*ck)->files().size(), 3u);
    EXPECT_EQ((*ck)->tensor_names(), (std::vector<std::string>{"a", "b", "c"}));
    EXPECT_EQ((*ck)->total_bytes(), 120);
    const SafetensorsFile* file = nullptr;
    const TensorInfo* t = (*ck)->find("c", &file);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->data[39], 3);
    EXPECT_EQ(fs::path(file->path()).filename(), "model-00002-of-00002.safetensors");
    EXPECT_EQ((*ck)->find("zz"), nullptr);
}

TEST_F(SafetensorsTest, CheckpointWithoutIndexIgnoresSubdirectories) {
    std::vector<uint8_t> a(8, 1), b(8, 2), c(8, 3);
    ASSERT_TRUE(write_safetensors(p("part-a.safetensors"), {three_tensors(a, b, c)[0]}).is_ok());
    ASSERT_TRUE(write_safetensors(p("part-b.safetensors"), {three_tensors(a, b, c)[1]}).is_ok());
    fs::create_directories(dir_ / "original");
    std::ofstream(dir_ / "original" / "model.safetensors") << "junk";
    auto ck = SafetensorsCheckpoint::open(dir_.string());
    ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
    EXPECT_EQ((*ck)->tensor_names(), (std::vector<std::string>{"a", "b"}));
    // model.safetensors wins over other top-level files when present.
    ASSERT_TRUE(write_safetensors(p("model.safetensors"), {three_tensors(a, b, c)[2]}).is_ok());
    auto single = SafetensorsCheckpoint::open(dir_.string());
    ASSERT_TRUE(single.is_ok()) << single.status().to_string();
    EXPECT_EQ((*single)->tensor_names(), (std::vector<std::string>{"c"}));
    // A path to one file opens that file.
    auto one = SafetensorsCheckpoint::open(p("part-b.safetensors"));
    ASSERT_TRUE(one.is_ok());
    EXPECT_EQ((*one)->tensor_names(), (std::vector<std::string>{"b"}));
}

TEST_F(SafetensorsTest, IndexNamingMissingShard) {
    std::vector<uint8_t> a(40, 1), b(40, 2), c(40, 3);
    ASSERT_TRUE(write_sharded_safetensors(dir_.string(), three_tensors(a, b, c), 50).is_ok());
    fs::remove(dir_ / "model-00001-of-00002.safetensors");
    auto ck = SafetensorsCheckpoint::open(dir_.string());
    ASSERT_FALSE(ck.is_ok());
    EXPECT_EQ(ck.status().code(), StatusCode::kNotFound);
    EXPECT_THAT(ck.status().message(), HasSubstr("model-00001-of-00002.safetensors"));
    EXPECT_THAT(ck.status().message(), HasSubstr("model.safetensors.index.json"));
    EXPECT_THAT(ck.status().message(), HasSubstr("tensor b"));
}

TEST_F(SafetensorsTest, IndexMappingToWrongShardOrOutside) {
    std::vector<uint8_t> a(40, 1), b(40, 2), c(40, 3);
    ASSERT_TRUE(write_sharded_safetensors(dir_.string(), three_tensors(a, b, c), 50).is_ok());
    std::ofstream(dir_ / "model.safetensors.index.json")
        << R"({"weight_map": {"a": "model-00000-of-00002.safetensors", "b": "model-00000-of-00002.safetensors"}})";
    auto wrong = SafetensorsCheckpoint::open(dir_.string());
    ASSERT_FALSE(wrong.is_ok());
    EXPECT_EQ(wrong.status().code(), StatusCode::kDataLoss);
    EXPECT_THAT(wrong.status().message(), HasSubstr("tensor b"));
    EXPECT_THAT(wrong.status().message(), HasSubstr("model-00000-of-00002.safetensors"));
    std::ofstream(dir_ / "model.safetensors.index.json") << R"({"weight_map": {"a": "../x.safetensors"}})";
    auto outside = SafetensorsCheckpoint::open(dir_.string());
    EXPECT_EQ(outside.status().code(), StatusCode::kDataLoss);
    EXPECT_THAT(outside.status().message(), HasSubstr("../x.safetensors"));
    std::ofstream(dir_ / "model.safetensors.index.json") << R"({"weight_map": )";
    auto bad = SafetensorsCheckpoint::open(dir_.string());
    EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
    EXPECT_THAT(bad.status().message(), HasSubstr("model.safetensors.index.json"));
}

TEST_F(SafetensorsTest, DuplicateTensorAcrossFilesAndEmptyDir) {
    auto empty = SafetensorsCheckpoint::open(dir_.string());
    EXPECT_EQ(empty.status().code(), StatusCode::kNotFound);
    EXPECT_EQ(SafetensorsCheckpoint::open(p("nothing")).status().code(), StatusCode::kNotFound);
    std::vector<uint8_t> a(8, 1);
    ASSERT_TRUE(write_safetensors(p("x.safetensors"), {{"dup", DType::kU8, {8}, a.data()}}).is_ok());
    ASSERT_TRUE(write_safetensors(p("y.safetensors"), {{"dup", DType::kU8, {8}, a.data()}}).is_ok());
    auto ck = SafetensorsCheckpoint::open(dir_.string());
    ASSERT_FALSE(ck.is_ok());
    EXPECT_THAT(ck.status().message(), HasSubstr("tensor dup"));
    EXPECT_THAT(ck.status().message(), HasSubstr("x.safetensors"));
    EXPECT_THAT(ck.status().message(), HasSubstr("y.safetensors"));
}

}  // namespace
}  // namespace volt::io
