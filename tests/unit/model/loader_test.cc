// load_model on tiny checkpoints written with io::write_safetensors in both expert layouts (names and
// shapes from spec/gpt-oss.md §2.1, written out here independently of the loader's table): pointers
// give back the bytes written, the bf16 expert transpose is checked element by element and at one
// hand-indexed element, F32/F16 conversions against hand-computed bf16 bits, and each error names the
// file and the tensor. Tiny config: H 64, 2 layers, 4 experts top-2, head_dim 16, 4 heads, 2 kv heads,
// vocab 100, I 64.
#include "model/loader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "io/safetensors_writer.h"

namespace volt::model {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr int64_t kH = 64, kL = 2, kE = 4, kD = 16, kNh = 4, kNkv = 2, kV = 100, kI = 64;

nlohmann::json tiny_config(int64_t intermediate = kI) {
    return {{"architectures", {"GptOssForCausalLM"}},
            {"model_type", "gpt_oss"},
            {"num_hidden_layers", kL},
            {"num_local_experts", kE},
            {"num_experts_per_tok", 2},
            {"hidden_size", kH},
            {"intermediate_size", intermediate},
            {"head_dim", kD},
            {"num_attention_heads", kNh},
            {"num_key_value_heads", kNkv},
            {"vocab_size", kV},
            {"sliding_window", 8},
            {"layer_types", {"sliding_attention", "full_attention"}},
            {"rope_theta", 150000},
            {"rope_scaling",
             {{"rope_type", "yarn"},
              {"factor", 32.0},
              {"beta_fast", 32.0},
              {"beta_slow", 1.0},
              {"original_max_position_embeddings", 4096},
              {"truncate", false}}},
            {"initial_context_length", 4096},
            {"max_position_embeddings", 131072},
            {"swiglu_limit", 7.0},
            {"rms_norm_eps", 1e-05},
            {"attention_bias", true},
            {"tie_word_embeddings", false},
            {"eos_token_id", 99},
            {"pad_token_id", 98}};
}

enum class Layout { kMxfp4, kBf16 };

// A checkpoint being built: payload bytes kept here to compare against what the loader points at.
class TinyCheckpoint {
  public:
    explicit TinyCheckpoint(Layout layout, int64_t intermediate = kI) {
        add("model.embed_tokens.weight", DType::kBF16, {kV, kH});
        for (int64_t i = 0; i < kL; ++i) {
            const std::string p = "model.layers." + std::to_string(i) + ".";
            add(p + "input_layernorm.weight", DType::kBF16, {kH});
            add(p + "self_attn.q_proj.weight", DType::kBF16, {kNh * kD, kH});
            add(p + "self_attn.q_proj.bias", DType::kBF16, {kNh * kD});
            add(p + "self_attn.k_proj.weight", DType::kBF16, {kNkv * kD, kH});
            add(p + "self_attn.k_proj.bias", DType::kBF16, {kNkv * kD});
            add(p + "self_attn.v_proj.weight", DType::kBF16, {kNkv * kD, kH});
            add(p + "self_attn.v_proj.bias", DType::kBF16, {kNkv * kD});
            add(p + "self_attn.o_proj.weight", DType::kBF16, {kH, kNh * kD});
            add(p + "self_attn.o_proj.bias", DType::kBF16, {kH});
            add(p + "self_attn.sinks", DType::kBF16, {kNh});
            add(p + "post_attention_layernorm.weight", DType::kBF16, {kH});
            add(p + "mlp.router.weight", DType::kBF16, {kE, kH});
            add(p + "mlp.router.bias", DType::kBF16, {kE});
            if (layout == Layout::kMxfp4) {
                add(p + "mlp.experts.gate_up_proj_blocks", DType::kU8, {kE, 2 * intermediate, kH / 32, 16});
                add(p + "mlp.experts.gate_up_proj_scales", DType::kU8, {kE, 2 * intermediate, kH / 32});
                add(p + "mlp.experts.down_proj_blocks", DType::kU8, {kE, kH, intermediate / 32, 16});
                add(p + "mlp.experts.down_proj_scales", DType::kU8, {kE, kH, intermediate / 32});
            } else {
                add(p + "mlp.experts.gate_up_proj", DType::kBF16, {kE, kH, 2 * intermediate});
                add(p + "mlp.experts.down_proj", DType::kBF16, {kE, intermediate, kH});
            }
            add(p + "mlp.experts.gate_up_proj_bias", DType::kBF16, {kE, 2 * intermediate});
            add(p + "mlp.experts.down_proj_bias", DType::kBF16, {kE, kH});
        }
        add("model.norm.weight", DType::kBF16, {kH});
        add("lm_head.weight", DType::kBF16, {kV, kH});
    }

    // Byte k of tensor number n is (n * 37 + k * 11 + k / 256) mod 256: distinct per tensor and position.
    void add(const std::string& name, DType dtype, std::vector<int64_t> shape) {
        int64_t n = dtype_size(dtype);
        for (int64_t d : shape) n *= d;
        std::vector<uint8_t> b(static_cast<size_t>(n));
        const size_t id = order_.size();
        for (int64_t k = 0; k < n; ++k) b[k] = static_cast<uint8_t>(id * 37 + k * 11 + k / 256);
        set(name, dtype, std::move(shape), std::move(b));
    }
    void set(const std::string& name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
        if (!bytes_.count(name)) order_.push_back(name);
        bytes_[name] = std::move(bytes);
        meta_[name] = {dtype, std::move(shape)};
    }
    void remove(const std::string& name) {
        bytes_.erase(name);
        order_.erase(std::find(order_.begin(), order_.end(), name));
    }
    const std::vector<uint8_t>& bytes(const std::string& name) const { return bytes_.at(name); }

    std::vector<io::TensorToWrite> tensors() const {
        std::vector<io::TensorToWrite> out;
        for (const auto& name : order_) {
            const auto& m = meta_.at(name);
            out.push_back({name, m.first, m.second, bytes_.at(name).data()});
        }
        return out;
    }

  private:
    std::vector<std::string> order_;
    std::map<std::string, std::vector<uint8_t>> bytes_;
    std::map<std::string, std::pair<DType, std::vector<int64_t>>> meta_;
};

class LoaderTest : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = fs::path(testing::TempDir()) /
               ("loader_" + std::string(testing::UnitTest::GetInstance()->current_test_info()->name()));
        fs::remove_all(dir_);
        fs::create_directories(dir_);
        write_config(tiny_config());
    }
    void TearDown() override { fs::remove_all(dir_); }
    void write_config(const nlohmann::json& j) { std::ofstream(dir_ / "config.json") << j.dump(2); }
    void write_single(const TinyCheckpoint& ck) {
        ASSERT_TRUE(io::write_safetensors((dir_ / "model.safetensors").string(), ck.tensors()).is_ok());
    }
    Result<std::shared_ptr<ModelWeights>> load() {
        LoadOptions o;
        o.progress = io::ProgressMode::kOff;
        o.num_threads = 2;
        return load_model(dir_.string(), o);
    }
    std::string file() const { return (dir_ / "model.safetensors").string(); }

    fs::path dir_;
};

// The pointer gives back exactly the payload written for `name`.
template <typename T>
void expect_bytes(const T* p, const TinyCheckpoint& ck, const std::string& name) {
    ASSERT_NE(p, nullptr) << name;
    const auto& b = ck.bytes(name);
    EXPECT_EQ(std::memcmp(p, b.data(), b.size()), 0) << name;
}

void expect_bytes(const ops::VectorWeight& v, const TinyCheckpoint& ck, const std::string& name) {
    expect_bytes(v.data, ck, name);
}
void expect_bytes(const ops::DenseWeight& d, const TinyCheckpoint& ck, const std::string& name) {
    expect_bytes(d.w, ck, name);
}
// Element i of a 16-bit tensor view.
uint16_t u16(const void* p, int64_t i) { return static_cast<const uint16_t*>(p)[i]; }

void expect_dense(const ops::DenseWeight& d, const TinyCheckpoint& ck, const std::string& name, int64_t out,
                  int64_t in) {
    EXPECT_EQ(d.out, out) << name;
    EXPECT_EQ(d.in, in) << name;
    expect_bytes(d.w, ck, name + ".weight");
    expect_bytes(d.b, ck, name + ".bias");
}

TEST_F(LoaderTest, Mxfp4LayoutPointsAtWrittenBytes) {
    TinyCheckpoint ck(Layout::kMxfp4);
    ck.add("model.layers.0.mlp.extra_unknown", DType::kF32, {3});  // ignored
    write_single(ck);
    auto r = load();
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    const ModelWeights& w = **r;
    EXPECT_EQ(w.config.hidden_size, kH);
    ASSERT_EQ(w.layers.size(), static_cast<size_t>(kL));
    expect_bytes(w.embed_tokens, ck, "model.embed_tokens.weight");
    expect_bytes(w.norm, ck, "model.norm.weight");
    expect_bytes(w.lm_head.w, ck, "lm_head.weight");
    EXPECT_EQ(w.lm_head.b.data, nullptr);
    EXPECT_EQ(w.lm_head.out, kV);
    EXPECT_EQ(w.lm_head.in, kH);
    for (int64_t i = 0; i < kL; ++i) {
        const std::string p = "model.layers." + std::to_string(i) + ".";
        const LayerWeights& l = w.layers[i];
        expect_bytes(l.input_layernorm, ck, p + "input_layernorm.weight");
        expect_bytes(l.post_attention_layernorm, ck, p + "post_attention_layernorm.weight");
        expect_bytes(l.sinks, ck, p + "self_attn.sinks");
        expect_dense(l.q_proj, ck, p + "self_attn.q_proj", 64, 64);
        expect_dense(l.k_proj, ck, p + "self_attn.k_proj", 32, 64);
        expect_dense(l.v_proj, ck, p + "self_attn.v_proj", 32, 64);
        expect_dense(l.o_proj, ck, p + "self_attn.o_proj", 64, 64);
        expect_dense(l.router, ck, p + "mlp.router", 4, 64);
        EXPECT_EQ(l.gate_up.format, ops::Format::kMxfp4);
        EXPECT_EQ(l.gate_up.num_experts, 4);
        EXPECT_EQ(l.gate_up.out, 128);
        EXPECT_EQ(l.gate_up.in, 64);
        EXPECT_EQ(l.gate_up.w, nullptr);
        expect_bytes(l.gate_up.blocks, ck, p + "mlp.experts.gate_up_proj_blocks");
        expect_bytes(l.gate_up.scales, ck, p + "mlp.experts.gate_up_proj_scales");
        expect_bytes(l.gate_up.bias, ck, p + "mlp.experts.gate_up_proj_bias");
        EXPECT_EQ(l.down.out, 64);
        EXPECT_EQ(l.down.in, 64);
        expect_bytes(l.down.blocks, ck, p + "mlp.experts.down_proj_blocks");
        expect_bytes(l.down.scales, ck, p + "mlp.experts.down_proj_scales");
        expect_bytes(l.down.bias, ck, p + "mlp.experts.down_proj_bias");
    }
    // One value by hand. Tensor ids in constructor order: embed 0; layer 0: 1..19; layer 1:
    // input_layernorm 20, q_proj.weight 21.
    // Byte 5 of id 21 = (21*37 + 5*11) mod 256 = (777 + 55) mod 256 = 832 mod 256 = 64.
    EXPECT_EQ(reinterpret_cast<const uint8_t*>(w.layers[1].q_proj.w)[5], 64);
}

TEST_F(LoaderTest, Bf16LayoutTransposedToOutIn) {
    TinyCheckpoint ck(Layout::kBf16);
    // gate_up_proj [E, H, 2I]: element (e, h, j) holds the bits e*10000 + h*128 + j (all distinct).
    std::vector<uint8_t> gu(kE * kH * 2 * kI * 2);
    for (int64_t e = 0; e < kE; ++e)
        for (int64_t h = 0; h < kH; ++h)
            for (int64_t j = 0; j < 2 * kI; ++j) {
                const uint16_t v = static_cast<uint16_t>(e * 10000 + h * 128 + j);
                std::memcpy(&gu[((e * kH + h) * 2 * kI + j) * 2], &v, 2);
            }
    ck.set("model.layers.1.mlp.experts.gate_up_proj", DType::kBF16, {kE, kH, 2 * kI}, gu);
    // down_proj [E, I, H] as F32 (converted): element (e, i, h) = e + i/64 + h/4096, exact in bf16?
    // No: use values exact in bf16, 2^(e) * (1 + (h % 8) / 8), so conversion loses nothing.
    std::vector<uint8_t> dn(kE * kI * kH * 4);
    for (int64_t e = 0; e < kE; ++e)
        for (int64_t i = 0; i < kI; ++i)
            for (int64_t h = 0; h < kH; ++h) {
                const float v = static_cast<float>(1 << e) * (1.0f + static_cast<float>((i + h) % 8) / 8.0f);
                std::memcpy(&dn[((e * kI + i) * kH + h) * 4], &v, 4);
            }
    ck.set("model.layers.1.mlp.experts.down_proj", DType::kF32, {kE, kI, kH}, dn);
    write_single(ck);
    auto r = load();
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    const LayerWeights& l = (*r)->layers[1];
    ASSERT_EQ(l.gate_up.format, ops::Format::kBf16);
    EXPECT_EQ(l.gate_up.blocks, nullptr);
    EXPECT_EQ(l.gate_up.out, 2 * kI);
    EXPECT_EQ(l.gate_up.in, kH);
    ASSERT_NE(l.gate_up.w, nullptr);
    // Hand-indexed: expert 2, output row 77, input column 5 sits at (2*128 + 77)*64 + 5 = 21317 and
    // must hold source element (2, 5, 77) = 20000 + 640 + 77 = 20717.
    EXPECT_EQ(u16(l.gate_up.w, 21317), 20717);
    for (int64_t e = 0; e < kE; ++e)
        for (int64_t j = 0; j < 2 * kI; ++j)
            for (int64_t h = 0; h < kH; ++h)
                ASSERT_EQ(u16(l.gate_up.w, (e * 2 * kI + j) * kH + h), e * 10000 + h * 128 + j)
                    << e << " " << j << " " << h;
    expect_bytes(l.gate_up.bias, ck, "model.layers.1.mlp.experts.gate_up_proj_bias");
    // down: [E, I, H] -> [E, H, I]; bf16 of 2^e * (1 + k/8) is 0x3f80 + e*0x80 + k*0x10 (exponent
    // field +1 per doubling, top 3 mantissa bits = k).
    EXPECT_EQ(l.down.format, ops::Format::kBf16);
    EXPECT_EQ(l.down.out, kH);
    EXPECT_EQ(l.down.in, kI);
    for (int64_t e = 0; e < kE; ++e)
        for (int64_t h = 0; h < kH; ++h)
            for (int64_t i = 0; i < kI; ++i)
                ASSERT_EQ(u16(l.down.w, (e * kH + h) * kI + i), 0x3f80 + e * 0x80 + ((i + h) % 8) * 0x10);
    EXPECT_EQ(u16(l.down.w, (3 * kH + 1) * kI + 2), 0x4130);  // 8 * 1.375 = 11 = 0x4130 in bf16
    // Layer 0 is bf16 too, with the generated pattern; spot check one transposed byte pair.
    const auto& src = ck.bytes("model.layers.0.mlp.experts.down_proj");  // [E, I, H]
    uint16_t s;
    std::memcpy(&s, &src[((1 * kI + 7) * kH + 9) * 2], 2);
    EXPECT_EQ(u16((*r)->layers[0].down.w, (1 * kH + 9) * kI + 7), s);
}

TEST_F(LoaderTest, NonExpertF32AndF16ConvertedToBf16) {
    TinyCheckpoint ck(Layout::kMxfp4);
    // norm [64] F32: 1.5 -> 0x3fc0 exactly; 1 + 2^-8 (0x3f808000) is a tie -> even 0x3f80;
    // 1 + 3*2^-8 (0x3f818000) is a tie -> even 0x3f82; -2 -> 0xc000.
    std::vector<float> norm(kH, 1.5f);
    norm[1] = 1.00390625f;
    norm[2] = 1.01171875f;
    norm[3] = -2.0f;
    std::vector<uint8_t> nb(kH * 4);
    std::memcpy(nb.data(), norm.data(), nb.size());
    ck.set("model.norm.weight", DType::kF32, {kH}, nb);
    // sinks [4] F16: 1.0 = 0x3c00 -> 0x3f80; -0.5 = 0xb800 -> 0xbf00; 65504 = 0x7bff -> 0x4780 (f32
    // 0x477fe000, low half 0xe000 rounds up); 2^-24 = 0x0001 -> 0x3380.
    const uint16_t sinks[4] = {0x3c00, 0xb800, 0x7bff, 0x0001};
    std::vector<uint8_t> sb(8);
    std::memcpy(sb.data(), sinks, 8);
    ck.set("model.layers.0.self_attn.sinks", DType::kF16, {kNh}, sb);
    write_single(ck);
    auto r = load();
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    const ModelWeights& w = **r;
    EXPECT_EQ(u16(w.norm.data, 0), 0x3fc0);
    EXPECT_EQ(u16(w.norm.data, 1), 0x3f80);
    EXPECT_EQ(u16(w.norm.data, 2), 0x3f82);
    EXPECT_EQ(u16(w.norm.data, 3), 0xc000);
    EXPECT_EQ(u16(w.norm.data, 63), 0x3fc0);
    EXPECT_EQ(u16(w.layers[0].sinks.data, 0), 0x3f80);
    EXPECT_EQ(u16(w.layers[0].sinks.data, 1), 0xbf00);
    EXPECT_EQ(u16(w.layers[0].sinks.data, 2), 0x4780);
    EXPECT_EQ(u16(w.layers[0].sinks.data, 3), 0x3380);
}

TEST_F(LoaderTest, ShardedWithIndexIgnoresOriginal) {
    TinyCheckpoint ck(Layout::kMxfp4);
    ASSERT_TRUE(io::write_sharded_safetensors(dir_.string(), ck.tensors(), 20000).is_ok());
    int shards = 0;
    for (const auto& e : fs::directory_iterator(dir_)) shards += e.path().extension() == ".safetensors";
    EXPECT_GE(shards, 3);
    fs::create_directories(dir_ / "original");
    std::ofstream(dir_ / "original" / "model.safetensors") << "junk that is not safetensors";
    std::ofstream(dir_ / "original" / "config.json") << "{";
    fs::create_directories(dir_ / "metal");
    std::ofstream(dir_ / "metal" / "model.bin") << "junk";
    LoadOptions o;
    o.progress = io::ProgressMode::kLog;  // exercises the log path; the bar needs a terminal
    auto r = load_model(dir_.string(), o);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    expect_bytes((*r)->lm_head.w, ck, "lm_head.weight");
    expect_bytes((*r)->layers[1].down.blocks, ck, "model.layers.1.mlp.experts.down_proj_blocks");
    expect_bytes((*r)->embed_tokens, ck, "model.embed_tokens.weight");
}

TEST_F(LoaderTest, MissingTensor) {
    TinyCheckpoint ck(Layout::kMxfp4);
    ck.remove("model.layers.1.self_attn.sinks");
    write_single(ck);
    auto r = load();
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
    EXPECT_THAT(r.status().message(), HasSubstr("tensor model.layers.1.self_attn.sinks"));
    EXPECT_THAT(r.status().message(), HasSubstr(dir_.string()));
    EXPECT_THAT(r.status().message(), HasSubstr("model.safetensors"));
}

TEST_F(LoaderTest, MissingExpertsNamesBothLayouts) {
    TinyCheckpoint ck(Layout::kMxfp4);
    ck.remove("model.layers.0.mlp.experts.down_proj_blocks");
    write_single(ck);
    auto r = load();
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
    EXPECT_THAT(r.status().message(), HasSubstr("model.layers.0.mlp.experts.down_proj_blocks"));
    EXPECT_THAT(r.status().message(), HasSubstr("model.layers.0.mlp.experts.down_proj (bf16 layout)"));
}

TEST_F(LoaderTest, WrongDtype) {
    TinyCheckpoint ck(Layout::kMxfp4);
    ck.set("model.layers.0.mlp.router.weight", DType::kI32, {kE, kH}, std::vector<uint8_t>(kE * kH * 4, 1));
    write_single(ck);
    auto r = load();
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr(file()));
    EXPECT_THAT(r.status().message(),
                HasSubstr("tensor model.layers.0.mlp.router.weight has dtype I32, expected BF16"));
}

TEST_F(LoaderTest, WrongDtypeForBlocks) {
    TinyCheckpoint ck(Layout::kMxfp4);
    ck.set("model.layers.1.mlp.experts.gate_up_proj_scales", DType::kI8, {kE, 2 * kI, kH / 32},
           std::vector<uint8_t>(kE * 2 * kI * kH / 32, 127));
    write_single(ck);
    auto r = load();
    ASSERT_FALSE(r.is_ok());
    EXPECT_THAT(r.status().message(), HasSubstr(file()));
    EXPECT_THAT(r.status().message(),
                HasSubstr("tensor model.layers.1.mlp.experts.gate_up_proj_scales has dtype I8, expected U8"));
}

TEST_F(LoaderTest, WrongShape) {
    TinyCheckpoint ck(Layout::kMxfp4);
    // k_proj must be [nkv * d, H] = [32, 64]; a q-sized [64, 64] is wrong.
    ck.set("model.layers.1.self_attn.k_proj.weight", DType::kBF16, {64, 64},
           std::vector<uint8_t>(64 * 64 * 2));
    write_single(ck);
    auto r = load();
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr(file()));
    EXPECT_THAT(
        r.status().message(),
        HasSubstr("tensor model.layers.1.self_attn.k_proj.weight has shape [64, 64], expected [32, 64]"));
}

TEST_F(LoaderTest, WrongShapeBf16Experts) {
    // save_pretrained's down_proj is [E, I, H]; an already-transposed [E, H, I] with I != H must fail.
    write_config(tiny_config(96));
    TinyCheckpoint ck96(Layout::kBf16, 96);
    ck96.set("model.layers.0.mlp.experts.down_proj", DType::kBF16, {kE, kH, 96},
             std::vector<uint8_t>(kE * kH * 96 * 2));
    write_single(ck96);
    auto r = load();
    ASSERT_FALSE(r.is_ok());
    EXPECT_THAT(
        r.status().message(),
        HasSubstr("tensor model.layers.0.mlp.experts.down_proj has shape [4, 64, 96], expected [4, 96, 64]"));
}

TEST_F(LoaderTest, Mxfp4NeedsInputMultipleOf32) {
    write_config(tiny_config(48));
    TinyCheckpoint ck(Layout::kMxfp4, 48);
    write_single(ck);
    auto r = load();
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr("model.layers.0.mlp.experts.down_proj_blocks"));
    EXPECT_THAT(r.status().message(), HasSubstr("48"));
}

TEST_F(LoaderTest, TruncatedShardAndMissingShard) {
    TinyCheckpoint ck(Layout::kMxfp4);
    ASSERT_TRUE(io::write_sharded_safetensors(dir_.string(), ck.tensors(), 20000).is_ok());
    std::ifstream index_file(dir_ / "model.safetensors.index.json");
    const auto index = nlohmann::json::parse(index_file);
    const fs::path shard1 = dir_ / index["weight_map"]["model.layers.1.self_attn.sinks"].get<std::string>();
    ASSERT_NE(shard1.filename(), "model-00000-of-00003.safetensors");
    fs::resize_file(shard1, fs::file_size(shard1) - 1);
    auto truncated = load();
    ASSERT_FALSE(truncated.is_ok());
    EXPECT_EQ(truncated.status().code(), StatusCode::kDataLoss);
    EXPECT_THAT(truncated.status().message(), HasSubstr(shard1.string()));
    EXPECT_THAT(truncated.status().message(), HasSubstr("truncated"));
    fs::remove(shard1);
    auto missing = load();
    ASSERT_FALSE(missing.is_ok());
    EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
    EXPECT_THAT(missing.status().message(), HasSubstr(shard1.string()));
    EXPECT_THAT(missing.status().message(), HasSubstr("model.safetensors.index.json"));
}

TEST_F(LoaderTest, MissingConfig) {
    fs::remove(dir_ / "config.json");
    auto r = load();
    ASSERT_FALSE(r.is_ok());
    EXPECT_THAT(r.status().message(), HasSubstr("config.json"));
}

}  // namespace
}  // namespace volt::model
