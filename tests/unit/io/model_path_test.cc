// Tests of offline model resolution (src/io/model_path.h) over fake Hugging Face cache trees built in a temp
// directory, laid out as huggingface_hub writes them (models--org--name/{refs/main,snapshots/<sha>/}), and a
// resolved snapshot opened through its index (original/ and metal/ never read).
#include "io/model_path.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "io/safetensors.h"
#include "io/safetensors_writer.h"

namespace volt::io {
namespace {
namespace fs = std::filesystem;

class ModelPathTest : public ::testing::Test {
  protected:
    void SetUp() override {
        root_ = fs::temp_directory_path() /
                ("volt_model_path_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                 "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(root_);
        fs::create_directories(root_);
    }
    void TearDown() override { fs::remove_all(root_); }
    static void write(const fs::path& p, const std::string& text) {
        fs::create_directories(p.parent_path());
        std::ofstream(p) << text;
    }
    // A hub cache entry with the given snapshots; refs/main -> `main_sha` when non-empty.
    fs::path make_repo(const fs::path& hub, const std::string& org_name, std::vector<std::string> shas,
                       const std::string& main_sha) {
        std::string dir = "models--" + org_name.substr(0, org_name.find('/')) + "--" +
                          org_name.substr(org_name.find('/') + 1);
        fs::path repo = hub / dir;
        for (const std::string& sha : shas) write(repo / "snapshots" / sha / "config.json", "{}");
        if (!main_sha.empty()) write(repo / "refs" / "main", main_sha + "\n");
        return repo;
    }
    fs::path root_;
};

TEST_F(ModelPathTest, ExistingDirectoryIsItself) {
    fs::create_directories(root_ / "gpt-oss-120b");
    ModelPathOptions o;
    auto r = resolve_model_path((root_ / "gpt-oss-120b").string(), o);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(*r, (root_ / "gpt-oss-120b").string());
}

TEST_F(ModelPathTest, HfHomeRefsMain) {
    make_repo(root_ / "hf" / "hub", "openai/gpt-oss-20b", {"aaa111", "bbb222"}, "bbb222");
    ModelPathOptions o;
    o.env = {{"HF_HOME", (root_ / "hf").string()}, {"HOME", (root_ / "home").string()}};
    auto r = resolve_model_path("openai/gpt-oss-20b", o);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(*r, (root_ / "hf" / "hub" / "models--openai--gpt-oss-20b" / "snapshots" / "bbb222").string());
}

TEST_F(ModelPathTest, HomeDefaultCacheAndRevision) {
    fs::path hub = root_ / "home" / ".cache" / "huggingface" / "hub";
    fs::path repo = make_repo(hub, "openai/gpt-oss-20b", {"aaa111", "ccc333"}, "aaa111");
    write(repo / "refs" / "v2", "ccc333");
    ModelPathOptions o;
    o.env = {{"HOME", (root_ / "home").string()}};
    EXPECT_EQ(*resolve_model_path("openai/gpt-oss-20b", o), (repo / "snapshots" / "aaa111").string());
    o.revision = "v2";  // a ref name
    EXPECT_EQ(*resolve_model_path("openai/gpt-oss-20b", o), (repo / "snapshots" / "ccc333").string());
    o.revision = "ccc333";  // a commit hash that is a snapshot directory
    EXPECT_EQ(*resolve_model_path("openai/gpt-oss-20b", o), (repo / "snapshots" / "ccc333").string());
}

TEST_F(ModelPathTest, NoRefsMainTakesTheNewestSnapshot) {
    fs::path hub = root_ / "hub";
    fs::path repo = make_repo(hub, "openai/gpt-oss-20b", {"old"}, "");
    write(repo / "snapshots" / "new" / "config.json", "{}");
    fs::last_write_time(repo / "snapshots" / "old", fs::file_time_type::clock::now() - std::chrono::hours(1));
    fs::last_write_time(repo / "snapshots" / "new", fs::file_time_type::clock::now());
    ModelPathOptions o;
    o.env = {{"HF_HUB_CACHE", hub.string()}};
    EXPECT_EQ(*resolve_model_path("openai/gpt-oss-20b", o), (repo / "snapshots" / "new").string());
}

TEST_F(ModelPathTest, DownloadDirIsSearchedFirst) {
    make_repo(root_ / "hub", "openai/gpt-oss-20b", {"x"}, "x");
    make_repo(root_ / "dl", "openai/gpt-oss-20b", {"y"}, "y");
    ModelPathOptions o;
    o.env = {{"HF_HUB_CACHE", (root_ / "hub").string()}};
    o.download_dir = (root_ / "dl").string();
    EXPECT_EQ(hub_cache_roots(o),
              (std::vector<std::string>{(root_ / "dl").string(), (root_ / "hub").string()}));
    EXPECT_EQ(*resolve_model_path("openai/gpt-oss-20b", o),
              (root_ / "dl" / "models--openai--gpt-oss-20b" / "snapshots" / "y").string());
}

TEST_F(ModelPathTest, CacheRootPrecedence) {
    ModelPathOptions o;
    o.env = {{"HF_HUB_CACHE", "/a"}, {"HF_HOME", "/b"}, {"XDG_CACHE_HOME", "/c"}, {"HOME", "/d"}};
    EXPECT_EQ(hub_cache_roots(o), std::vector<std::string>{"/a"});
    o.env.erase("HF_HUB_CACHE");
    EXPECT_EQ(hub_cache_roots(o), std::vector<std::string>{"/b/hub"});
    o.env.erase("HF_HOME");
    EXPECT_EQ(hub_cache_roots(o), std::vector<std::string>{"/c/huggingface/hub"});
    o.env.erase("XDG_CACHE_HOME");
    EXPECT_EQ(hub_cache_roots(o), std::vector<std::string>{"/d/.cache/huggingface/hub"});
}

TEST_F(ModelPathTest, MissingModelSaysWhereItLooked) {
    ModelPathOptions o;
    o.env = {{"HF_HOME", (root_ / "hf").string()}};
    o.download_dir = (root_ / "dl").string();
    auto r = resolve_model_path("openai/gpt-oss-120b", o);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
    const std::string& m = r.status().message();
    EXPECT_NE(m.find(fs::absolute("openai/gpt-oss-120b").string()), std::string::npos) << m;
    EXPECT_NE(m.find((root_ / "dl" / "models--openai--gpt-oss-120b" / "snapshots").string()),
              std::string::npos)
        << m;
    EXPECT_NE(m.find((root_ / "hf" / "hub" / "models--openai--gpt-oss-120b" / "snapshots").string()),
              std::string::npos)
        << m;

    auto local = resolve_model_path("./no-such-dir", o);
    ASSERT_FALSE(local.is_ok());
    EXPECT_EQ(local.status().code(), StatusCode::kNotFound);
    EXPECT_NE(local.status().message().find("not a Hugging Face id"), std::string::npos);
}

TEST_F(ModelPathTest, BrokenRefIsReported) {
    fs::path repo = make_repo(root_ / "hub", "openai/gpt-oss-20b", {"aaa"}, "zzz");
    ModelPathOptions o;
    o.env = {{"HF_HUB_CACHE", (root_ / "hub").string()}};
    auto r = resolve_model_path("openai/gpt-oss-20b", o);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find((repo / "snapshots" / "zzz").string()), std::string::npos);
}

// gpt-oss repositories ship original/ (the reference checkpoint) and metal/ next to the HF safetensors. A
// resolved snapshot opened by SafetensorsCheckpoint reads only the shards of the index: original/ repeats a
// tensor name, which would be a kDataLoss "found in two files" if it were read.
TEST_F(ModelPathTest, ResolvedSnapshotLoadsThroughTheIndex) {
    fs::path repo = make_repo(root_ / "hub", "openai/gpt-oss-20b", {"abc"}, "abc");
    fs::path snap = repo / "snapshots" / "abc";
    const float a[2] = {1, 2}, b[3] = {3, 4, 5};
    ASSERT_TRUE(write_sharded_safetensors(
                    snap.string(), {{"model.a", DType::kF32, {2}, a}, {"model.b", DType::kF32, {3}, b}}, 8)
                    .is_ok());
    fs::create_directories(snap / "original");
    ASSERT_TRUE(write_safetensors((snap / "original" / "model.safetensors").string(),
                                  {{"model.a", DType::kF32, {2}, a}})
                    .is_ok());
    write(snap / "metal" / "model.bin", "not safetensors");

    ModelPathOptions o;
    o.env = {{"HF_HUB_CACHE", (root_ / "hub").string()}};
    auto dir = resolve_model_path("openai/gpt-oss-20b", o);
    ASSERT_TRUE(dir.is_ok()) << dir.status().to_string();
    auto ckpt = SafetensorsCheckpoint::open(*dir);
    ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
    EXPECT_EQ((*ckpt)->files().size(), 2u);
    for (const auto& f : (*ckpt)->files())
        EXPECT_EQ(f->path().find("original"), std::string::npos) << f->path();
    EXPECT_EQ((*ckpt)->tensor_names(), (std::vector<std::string>{"model.a", "model.b"}));
}

}  // namespace
}  // namespace volt::io
