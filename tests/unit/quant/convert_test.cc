// convert round trip: a bf16-layout tiny checkpoint converted to MXFP4. Every expert block is checked
// against the bf16 weights with arithmetic written here from spec §2.3 and the OCP MX definition (own
// nibble order and E2M1 table, scale exponent by repeated halving, nearest value by brute force, the
// amax/4 error bound); non-expert tensors must be byte-identical. Also: f32 inputs, single-file inputs,
// the published config form, and the errors.
#include "model/convert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/dtype.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "model/make_model.h"

namespace volt::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string temp_dir(const std::string& name) {
    const std::string d = (fs::temp_directory_path() / ("volt_convert_test_" + name)).string();
    fs::remove_all(d);
    return d;
}

std::string read_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

json read_json(const std::string& path) { return json::parse(read_bytes(path)); }

// The E2M1 values (spec §2.3), sign bit 3.
double fp4(int code) {
    static const double kMag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    return (code & 8 ? -1.0 : 1.0) * kMag[code & 7];
}

int floor_log2(double a) {
    int e = 0;
    while (a >= 2.0) a /= 2.0, ++e;
    while (a < 1.0) a *= 2.0, --e;
    return e;
}

double bf16_at(const io::TensorInfo& t, int64_t i) {
    uint16_t h;
    std::memcpy(&h, t.data + 2 * i, 2);
    uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// Checks one converted expert matrix against the bf16 input [E, in, out]. Returns the number of blocks
// that chose e_ocp + 1 (so the caller can see both exponents were exercised).
int64_t check_expert(const io::TensorInfo& w, const io::TensorInfo& blocks, const io::TensorInfo& scales) {
    const int64_t E = w.shape[0], in = w.shape[1], out = w.shape[2], nb = in / 32;
    EXPECT_EQ(blocks.shape, (std::vector<int64_t>{E, out, nb, 16}));
    EXPECT_EQ(scales.shape, (std::vector<int64_t>{E, out, nb}));
    int64_t upper = 0;
    for (int64_t e = 0; e < E; ++e)
        for (int64_t r = 0; r < out; ++r)
            for (int64_t g = 0; g < nb; ++g) {
                double x[32], amax = 0;
                for (int k = 0; k < 32; ++k) {
                    x[k] = bf16_at(w, (e * in + g * 32 + k) * out + r);  // W[e][r][32g+k] stored at [e][k][r]
                    amax = std::max(amax, std::fabs(x[k]));
                }
                const int scale = scales.data[(e * out + r) * nb + g];
                const int e_ocp = floor_log2(amax) - 2 + 127;
                EXPECT_TRUE(scale == e_ocp || scale == e_ocp + 1)
                    << "expert " << e << " row " << r << " block " << g;
                upper += scale == e_ocp + 1;
                const double s = std::ldexp(1.0, scale - 127);
                double err = 0, err_other = 0;
                const double s_other = std::ldexp(1.0, (scale == e_ocp ? e_ocp + 1 : e_ocp) - 127);
                for (int k = 0; k < 32; ++k) {
                    const uint8_t byte = blocks.data[((e * out + r) * nb + g) * 16 + k / 2];
                    const int code = k % 2 == 0 ? byte & 0xF : byte >> 4;  // even element = low nibble
                    const double d = std::fabs(fp4(code) * s - x[k]);
                    double best = INFINITY, best_other = INFINITY;
                    for (int c = 0; c < 16; ++c) {
                        best = std::min(best, std::fabs(fp4(c) * s - x[k]));
                        best_other = std::min(best_other, std::fabs(fp4(c) * s_other - x[k]));
                    }
                    EXPECT_EQ(d, best)
                        << "not the nearest value: expert " << e << " row " << r << " col " << g * 32 + k;
                    EXPECT_LE(d, amax / 4);
                    err += d * d;
                    err_other += best_other * best_other;
                }
                // best-of-2 (the default): the kept exponent has the lower error (ties keep e_ocp).
                if (scale == e_ocp)
                    EXPECT_LE(err, err_other);
                else
                    EXPECT_LT(err, err_other);
            }
    return upper;
}

TEST(Convert, TinyRoundTrip) {
    const std::string bf = temp_dir("bf16"), mx = temp_dir("mxfp4"), ref = temp_dir("ref");
    MakeModelOptions mo;
    mo.seed = 21;
    mo.layout = ExpertLayout::kBf16;
    mo.max_shard_bytes = 150000;  // several input shards
    const GptOssConfig c = *preset_config("tiny");
    ASSERT_TRUE(make_model(c, mo, bf).is_ok());
    std::ofstream(bf + "/tokenizer.json") << "{\"dummy\": true}";
    ConvertOptions co;
    co.threads = 2;
    Status st = convert_to_mxfp4(bf, mx, co);
    ASSERT_TRUE(st.is_ok()) << st.to_string();

    auto in = io::SafetensorsCheckpoint::open(bf);
    auto out = io::SafetensorsCheckpoint::open(mx);
    ASSERT_TRUE(in.is_ok() && out.is_ok());
    EXPECT_EQ((*out)->tensor_names().size(), 19u * 4 + 3);
    int64_t upper = 0;
    for (const std::string& name : (*in)->tensor_names()) {
        const io::TensorInfo* a = (*in)->find(name);
        if (name.size() > 5 &&
            (name.ends_with("experts.gate_up_proj") || name.ends_with("experts.down_proj"))) {
            const io::TensorInfo* b = (*out)->find(name + "_blocks");
            const io::TensorInfo* s = (*out)->find(name + "_scales");
            ASSERT_TRUE(b && s) << name;
            upper += check_expert(*a, *b, *s);
            EXPECT_EQ((*out)->find(name), nullptr);
            continue;
        }
        const io::TensorInfo* b = (*out)->find(name);
        ASSERT_NE(b, nullptr) << name;
        EXPECT_EQ(b->dtype, DType::kBF16) << name;
        EXPECT_EQ(b->shape, a->shape) << name;
        ASSERT_EQ(b->nbytes, a->nbytes) << name;
        EXPECT_EQ(std::memcmp(a->data, b->data, a->nbytes), 0) << name << " is not byte-identical";
    }
    EXPECT_GT(upper, 0);  // some blocks took e_ocp + 1

    // Config: the published form, parsed as MXFP4 with the same sizes; other files copied.
    const json cfg = read_json(mx + "/config.json");
    EXPECT_EQ(cfg["quantization_config"]["quant_method"], "mxfp4");
    EXPECT_FALSE(cfg.contains("rope_parameters"));
    EXPECT_EQ(cfg["rope_theta"], 150000.0);
    EXPECT_EQ(cfg["rope_scaling"]["factor"], 32.0);
    auto parsed = load_config_file(mx + "/config.json");
    ASSERT_TRUE(parsed.is_ok()) << parsed.status().to_string();
    EXPECT_TRUE(parsed->mxfp4_quantized);
    EXPECT_EQ(parsed->num_hidden_layers, 4);
    EXPECT_EQ(read_bytes(mx + "/generation_config.json"), read_bytes(bf + "/generation_config.json"));
    EXPECT_EQ(read_bytes(mx + "/tokenizer.json"), "{\"dummy\": true}");

    // make-model's MXFP4 layout is quantized from the same bf16 values: the files agree byte for byte.
    MakeModelOptions ro;
    ro.seed = 21;
    ASSERT_TRUE(make_model(c, ro, ref).is_ok());
    EXPECT_EQ(read_bytes(ref + "/model-00000-of-00000.safetensors"),
              read_bytes(mx + "/model-00000-of-00000.safetensors"));

    // Converting the MXFP4 output again is refused.
    EXPECT_EQ(convert_to_mxfp4(mx, temp_dir("again"), co).code(), StatusCode::kInvalidArgument);
    for (const auto& d : {bf, mx, ref}) fs::remove_all(d);
}

// Rewrites a bf16-layout checkpoint as one unindexed weights.safetensors (the reader then takes every
// *.safetensors of the directory) with `edit` applied to each tensor; false drops it.
struct Tensor {
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
};
void rewrite(const std::string& from, const std::string& to,
             const std::function<bool(const std::string&, Tensor&)>& edit) {
    auto in = io::SafetensorsCheckpoint::open(from);
    ASSERT_TRUE(in.is_ok());
    std::map<std::string, Tensor> keep;
    for (const std::string& name : (*in)->tensor_names()) {
        const io::TensorInfo* t = (*in)->find(name);
        Tensor x{t->dtype, t->shape, std::vector<uint8_t>(t->data, t->data + t->nbytes)};
        if (edit(name, x)) keep[name] = std::move(x);
    }
    std::vector<io::TensorToWrite> w;
    for (auto& [name, t] : keep) w.push_back({name, t.dtype, t.shape, t.bytes.data()});
    fs::create_directories(to);
    ASSERT_TRUE(io::write_safetensors(to + "/weights.safetensors", w).is_ok());
    fs::copy_file(from + "/config.json", to + "/config.json");
}

std::vector<uint8_t> bf16_to_f32_bytes(const std::vector<uint8_t>& b) {
    std::vector<uint8_t> out(b.size() * 2);
    for (size_t i = 0; i < b.size() / 2; ++i) {
        uint16_t h;
        std::memcpy(&h, &b[2 * i], 2);
        const float f = bf16_to_f32(h);
        std::memcpy(&out[4 * i], &f, 4);
    }
    return out;
}

TEST(Convert, AcceptsF32TensorsAndASingleFile) {
    const std::string bf = temp_dir("bf16_b"), f32 = temp_dir("f32"), a = temp_dir("out_a"),
                      b = temp_dir("out_b");
    MakeModelOptions mo;
    mo.seed = 8;
    mo.layout = ExpertLayout::kBf16;
    ASSERT_TRUE(make_model(*preset_config("tiny"), mo, bf).is_ok());
    // Norms and expert weights in f32 (as transformers keeps some modules in fp32): values are the
    // same numbers, so the output must not change.
    rewrite(bf, f32, [](const std::string& name, Tensor& t) {
        if (name.ends_with("layernorm.weight") || name.ends_with("experts.gate_up_proj")) {
            t.bytes = bf16_to_f32_bytes(t.bytes);
            t.dtype = DType::kF32;
        }
        return true;
    });
    ConvertOptions co;
    ASSERT_TRUE(convert_to_mxfp4(bf, a, co).is_ok());
    Status st = convert_to_mxfp4(f32, b, co);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    EXPECT_EQ(read_bytes(a + "/model-00000-of-00000.safetensors"),
              read_bytes(b + "/model-00000-of-00000.safetensors"));
    for (const auto& d : {bf, f32, a, b}) fs::remove_all(d);
}

TEST(Convert, ReportsBadInputs) {
    const std::string bf = temp_dir("bf16_c"), bad = temp_dir("bad"), out = temp_dir("out_c");
    MakeModelOptions mo;
    mo.layout = ExpertLayout::kBf16;
    ASSERT_TRUE(make_model(*preset_config("tiny"), mo, bf).is_ok());
    ConvertOptions co;

    rewrite(bf, bad,
            [](const std::string& name, Tensor&) { return name != "model.layers.2.self_attn.sinks"; });
    Status st = convert_to_mxfp4(bad, out, co);
    EXPECT_EQ(st.code(), StatusCode::kNotFound);
    EXPECT_NE(st.message().find("model.layers.2.self_attn.sinks"), std::string::npos) << st.message();
    fs::remove_all(bad);

    rewrite(bf, bad, [](const std::string& name, Tensor& t) {
        if (name == "model.layers.1.mlp.experts.down_proj") {
            const uint16_t nan = 0x7fc0;
            std::memcpy(&t.bytes[2 * (3 * 64 * 64 + 5 * 64 + 7)], &nan, 2);  // expert 3, in 5, out 7
        }
        return true;
    });
    st = convert_to_mxfp4(bad, out, co);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("model.layers.1.mlp.experts.down_proj expert 3: row 7"), std::string::npos)
        << st.message();
    fs::remove_all(bad);

    rewrite(bf, bad, [](const std::string& name, Tensor& t) {
        if (name == "model.layers.0.mlp.experts.gate_up_proj") t.shape = {4, 128, 64};  // [E, out, in]: wrong
        return true;
    });
    st = convert_to_mxfp4(bad, out, co);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("[4, 64, 128]"), std::string::npos) << st.message();
    fs::remove_all(bad);

    rewrite(bf, bad, [](const std::string&, Tensor&) { return true; });
    {
        // An extra tensor is refused rather than silently dropped.
        std::vector<uint16_t> v(4);
        ASSERT_TRUE(
            io::write_safetensors(bad + "/extra.safetensors", {{"score.weight", DType::kBF16, {4}, v.data()}})
                .is_ok());
    }
    st = convert_to_mxfp4(bad, out, co);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("score.weight"), std::string::npos) << st.message();
    for (const auto& d : {bf, bad, out}) fs::remove_all(d);
}

}  // namespace
}  // namespace volt::model
