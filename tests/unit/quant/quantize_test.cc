// `voltllm convert --quantization awq|int8` (model/quantize.h) on make-model tiny checkpoints (MXFP4 and
// bf16 layouts): the files hold the formats of docs/quantization.md (tensor names, dtypes, shapes, the
// quantization_config), every dequantized weight is within the format's bound of the original (decoded
// here from the definition, independently of src/quant), the experts are the input's MXFP4 bytes, the
// converted checkpoint loads and runs on the CPU close to the original, the output is a function of the
// seed, and the errors (already quantized, AWQ experts, --quantization mismatch) say what they should.
#include "model/quantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/dtype.h"
#include "cpu/cpu_ops.h"
#include "executor/engine_flags.h"
#include "io/safetensors.h"
#include "model/dummy_weights.h"
#include "model/loader.h"
#include "model/make_model.h"
#include "model/placed_model.h"
#include "model/sequence_runner.h"

namespace volt::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string temp_dir(const std::string& name) {
    const std::string d = (fs::temp_directory_path() / ("volt_quantize_test_" + name)).string();
    fs::remove_all(d);
    return d;
}

std::string read_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

std::string tiny(ExpertLayout layout, const std::string& name) {
    const std::string dir = temp_dir(name);
    MakeModelOptions mo;
    mo.layout = layout;
    mo.seed = 5;
    EXPECT_TRUE(make_model(*preset_config("tiny"), mo, dir).is_ok());
    return dir;
}

std::vector<std::vector<int32_t>> calibration_ids() {
    std::vector<std::vector<int32_t>> w(3);
    uint64_t x = 7;
    for (auto& win : w)
        for (int i = 0; i < 40; ++i) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            win.push_back(static_cast<int32_t>((x >> 33) % 997));
        }
    return w;
}

double f16(const uint8_t* p, int64_t i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    return f16_to_f32(h);
}
double bf16(const uint8_t* p, int64_t i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    return bf16_to_f32(h);
}

// docs/quantization.md, AWQ: column j of word column c is nibble k of the int32 where AWQ_ORDER[k] = j.
int awq_value(uint32_t word, int j) {
    static const int kOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};
    for (int k = 0; k < 8; ++k)
        if (kOrder[k] == j) return static_cast<int>((word >> (4 * k)) & 15);
    return -1;
}

std::vector<float> logits_of(const std::string& dir, const std::vector<int32_t>& ids) {
    auto w = load_model(dir);
    EXPECT_TRUE(w.is_ok()) << w.status().to_string();
    cpu::CpuBackend backend;
    auto placed = place_model(*w, backend);
    EXPECT_TRUE(placed.is_ok()) << placed.status().to_string();
    Forward fwd(*placed, backend);
    SequenceRunner run(fwd, static_cast<int64_t>(ids.size()));
    return run.append(ids, /*all_rows=*/true);
}

// The logits of the converted checkpoint `dir` with every integer weight replaced by its f32 matrix,
// dequantized here from the file's tensors by the definitions above (independent of src/quant and of
// the CPU kernel's integer path).
std::vector<float> logits_dequantized(const std::string& dir, const std::vector<int32_t>& ids) {
    auto loaded = load_model(dir);
    EXPECT_TRUE(loaded.is_ok());
    std::shared_ptr<ModelWeights> w = *loaded;
    auto ck = io::SafetensorsCheckpoint::open(dir);
    EXPECT_TRUE(ck.is_ok());
    std::vector<std::unique_ptr<std::vector<float>>> keep;
    auto dequantize = [&](const std::string& m, ops::DenseWeight& d) {
        auto f = std::make_unique<std::vector<float>>(d.out * d.in);
        if (const io::TensorInfo* q = (*ck)->find(m + ".weight_scale")) {
            const io::TensorInfo* w8 = (*ck)->find(m + ".weight");
            for (int64_t o = 0; o < d.out; ++o)
                for (int64_t i = 0; i < d.in; ++i)
                    (*f)[o * d.in + i] =
                        static_cast<float>(static_cast<int8_t>(w8->data[o * d.in + i]) * f16(q->data, o));
        } else {
            const io::TensorInfo* qw = (*ck)->find(m + ".qweight");
            const io::TensorInfo* qz = (*ck)->find(m + ".qzeros");
            const io::TensorInfo* sc = (*ck)->find(m + ".scales");
            EXPECT_TRUE(qw && qz && sc) << m;
            const int64_t g = d.in / qz->shape[0];
            for (int64_t o = 0; o < d.out; ++o)
                for (int64_t i = 0; i < d.in; ++i) {
                    uint32_t word, zword;
                    std::memcpy(&word, qw->data + 4 * (i * (d.out / 8) + o / 8), 4);
                    std::memcpy(&zword, qz->data + 4 * ((i / g) * (d.out / 8) + o / 8), 4);
                    (*f)[o * d.in + i] =
                        static_cast<float>((awq_value(word, o % 8) - awq_value(zword, o % 8)) *
                                           f16(sc->data, (i / g) * d.out + o));
                }
        }
        d.format = ops::Format::kF32;
        d.w = f->data();
        d.scales = nullptr;
        d.zeros = nullptr;
        keep.push_back(std::move(f));
    };
    for (size_t l = 0; l < w->layers.size(); ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
        dequantize(p + "q_proj", w->layers[l].q_proj);
        dequantize(p + "k_proj", w->layers[l].k_proj);
        dequantize(p + "v_proj", w->layers[l].v_proj);
        dequantize(p + "o_proj", w->layers[l].o_proj);
    }
    dequantize("lm_head", w->lm_head);
    cpu::CpuBackend backend;
    auto placed = place_model(w, backend);
    EXPECT_TRUE(placed.is_ok()) << placed.status().to_string();
    Forward fwd(*placed, backend);
    SequenceRunner run(fwd, static_cast<int64_t>(ids.size()));
    return run.append(ids, /*all_rows=*/true);
}

// Relative RMS difference of two logit arrays.
double rel_rms(const std::vector<float>& a, const std::vector<float>& b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i)
        num += (a[i] - b[i]) * double(a[i] - b[i]), den += double(b[i]) * b[i];
    return std::sqrt(num / den);
}

TEST(Quantize, Int8FilesBoundsAndRun) {
    const std::string in = tiny(ExpertLayout::kMxfp4, "int8_in"), out = temp_dir("int8_out");
    QuantizeOptions o;
    o.method = QuantMethod::kInt8;
    cpu::CpuBackend backend;
    ASSERT_TRUE(quantize_checkpoint(in, out, o, backend).is_ok());
    const json cfg = json::parse(read_bytes(out + "/config.json"));
    EXPECT_EQ(cfg["quantization_config"]["quant_method"], "int8");
    EXPECT_EQ(cfg["quantization_config"]["bits"], 8);
    auto src = io::SafetensorsCheckpoint::open(in);
    auto dst = io::SafetensorsCheckpoint::open(out);
    ASSERT_TRUE(src.is_ok() && dst.is_ok());
    for (const std::string m :
         {"model.layers.0.self_attn.q_proj", "model.layers.3.self_attn.o_proj", "lm_head"}) {
        const io::TensorInfo* w = (*src)->find(m + ".weight");
        const io::TensorInfo* q = (*dst)->find(m + ".weight");
        const io::TensorInfo* s = (*dst)->find(m + ".weight_scale");
        ASSERT_TRUE(w && q && s) << m;
        EXPECT_EQ(q->dtype, DType::kI8);
        EXPECT_EQ(s->dtype, DType::kF16);
        const int64_t rows = w->shape[0], cols = w->shape[1];
        for (int64_t r = 0; r < rows; ++r) {
            double amax = 0;
            for (int64_t i = 0; i < cols; ++i) amax = std::max(amax, std::abs(bf16(w->data, r * cols + i)));
            const double sc = f16(s->data, r);
            EXPECT_NEAR(sc, amax / 127, amax / 127 * 1e-3) << m << " row " << r;
            for (int64_t i = 0; i < cols; ++i) {
                const double dq = static_cast<int8_t>(q->data[r * cols + i]) * sc;
                ASSERT_LE(std::abs(dq - bf16(w->data, r * cols + i)), 0.5 * sc * 1.001)
                    << m << " " << r << "," << i;
            }
        }
    }
    // Experts and the rest: the input's bytes.
    for (const std::string n :
         {"model.layers.1.mlp.experts.gate_up_proj_blocks", "model.layers.1.mlp.experts.down_proj_scales",
          "model.embed_tokens.weight", "model.layers.2.input_layernorm.weight",
          "model.layers.2.self_attn.q_proj.bias"}) {
        const io::TensorInfo* a = (*src)->find(n);
        const io::TensorInfo* b = (*dst)->find(n);
        ASSERT_TRUE(a && b) << n;
        EXPECT_EQ(std::memcmp(a->data, b->data, a->nbytes), 0) << n;
    }
    // The checkpoint runs, and computes what its dequantized weights define. Against the original only a
    // sanity bound: on a random tiny model, router top-k flips amplify the weights' 0.5 % error.
    const std::vector<int32_t> ids = calibration_ids()[0];
    const std::vector<float> got = logits_of(out, ids);
    EXPECT_LT(rel_rms(got, logits_dequantized(out, ids)), 1e-5);
    EXPECT_LT(rel_rms(got, logits_of(in, ids)), 0.2) << "int8 logits vs the original";
}

TEST(Quantize, AwqFilesBoundsAndRun) {
    const std::string in = tiny(ExpertLayout::kBf16, "awq_in"), out = temp_dir("awq_out");
    QuantizeOptions o;
    o.method = QuantMethod::kAwq;
    o.group_size = 32;
    o.activation_aware = false;
    cpu::CpuBackend backend;
    ASSERT_TRUE(quantize_checkpoint(in, out, o, backend).is_ok());
    const json cfg = json::parse(read_bytes(out + "/config.json"));
    const json& q = cfg["quantization_config"];
    EXPECT_EQ(q["quant_method"], "awq");
    EXPECT_EQ(q["bits"], 4);
    EXPECT_EQ(q["group_size"], 32);
    EXPECT_EQ(q["zero_point"], true);
    EXPECT_EQ(q["version"], "gemm");
    auto src = io::SafetensorsCheckpoint::open(in);
    auto dst = io::SafetensorsCheckpoint::open(out);
    ASSERT_TRUE(src.is_ok() && dst.is_ok());
    for (const std::string m :
         {"model.layers.0.self_attn.k_proj", "model.layers.3.self_attn.o_proj", "lm_head"}) {
        const io::TensorInfo* w = (*src)->find(m + ".weight");
        const io::TensorInfo* qw = (*dst)->find(m + ".qweight");
        const io::TensorInfo* qz = (*dst)->find(m + ".qzeros");
        const io::TensorInfo* sc = (*dst)->find(m + ".scales");
        ASSERT_TRUE(w && qw && qz && sc) << m;
        const int64_t out_f = w->shape[0], in_f = w->shape[1], g = 32;
        EXPECT_EQ(qw->dtype, DType::kI32);
        EXPECT_EQ(qw->shape, (std::vector<int64_t>{in_f, out_f / 8}));
        EXPECT_EQ(qz->shape, (std::vector<int64_t>{in_f / g, out_f / 8}));
        EXPECT_EQ(sc->shape, (std::vector<int64_t>{in_f / g, out_f}));
        EXPECT_EQ(sc->dtype, DType::kF16);
        for (int64_t o2 = 0; o2 < out_f; ++o2)
            for (int64_t i = 0; i < in_f; ++i) {
                uint32_t word, zword;
                std::memcpy(&word, qw->data + 4 * (i * (out_f / 8) + o2 / 8), 4);
                std::memcpy(&zword, qz->data + 4 * ((i / g) * (out_f / 8) + o2 / 8), 4);
                const double s = f16(sc->data, (i / g) * out_f + o2);
                const double dq = (awq_value(word, o2 % 8) - awq_value(zword, o2 % 8)) * s;
                ASSERT_LE(std::abs(dq - bf16(w->data, o2 * in_f + i)), 0.51 * s)
                    << m << " " << o2 << "," << i;
            }
    }
    EXPECT_EQ((*dst)->find("model.layers.0.mlp.experts.gate_up_proj_blocks")->dtype, DType::kU8);
    EXPECT_EQ((*dst)->find("lm_head.weight"), nullptr);
    const std::vector<int32_t> ids = calibration_ids()[1];
    const std::vector<float> got = logits_of(out, ids);
    EXPECT_LT(rel_rms(got, logits_dequantized(out, ids)), 1e-5);
    EXPECT_LT(rel_rms(got, logits_of(in, ids)), 1.0) << "awq logits vs the original: correlated, not garbage";
}

TEST(Quantize, AwqScaleSearchIsDeterministicAndNoWorse) {
    const std::string in = tiny(ExpertLayout::kMxfp4, "search_in");
    const std::string a = temp_dir("search_a"), b = temp_dir("search_b");
    QuantizeOptions o;
    o.method = QuantMethod::kAwq;
    o.group_size = 32;
    o.calibration = calibration_ids();
    o.seed = 3;
    o.threads = 2;
    cpu::CpuBackend backend;
    std::vector<AwqSearchResult> ra, rb;
    ASSERT_TRUE(quantize_checkpoint(in, a, o, backend, &ra).is_ok());
    o.threads = 1;
    ASSERT_TRUE(quantize_checkpoint(in, b, o, backend, &rb).is_ok());
    ASSERT_EQ(ra.size(), 5u);  // 4 layers' q/k/v + lm_head
    for (size_t i = 0; i < ra.size(); ++i) {
        EXPECT_LE(ra[i].loss, ra[i].loss_plain) << ra[i].group;  // alpha 0 is on the grid
        EXPECT_EQ(ra[i].alpha, rb[i].alpha);
    }
    for (const auto& f : fs::directory_iterator(a))
        EXPECT_EQ(read_bytes(f.path().string()), read_bytes(b + "/" + f.path().filename().string()))
            << f.path().filename();
    // The scales are folded into the norm gains: input_layernorm changed where alpha > 0.
    auto src = io::SafetensorsCheckpoint::open(in);
    auto dst = io::SafetensorsCheckpoint::open(a);
    for (int l = 0; l < 4; ++l) {
        const std::string n = "model.layers." + std::to_string(l) + ".input_layernorm.weight";
        const bool same =
            std::memcmp((*src)->find(n)->data, (*dst)->find(n)->data, (*src)->find(n)->nbytes) == 0;
        EXPECT_EQ(same, ra[l].alpha == 0.0) << n;
    }
    const std::vector<int32_t> ids = calibration_ids()[2];
    EXPECT_LT(rel_rms(logits_of(a, ids), logits_dequantized(a, ids)), 1e-5);
}

TEST(Quantize, Errors) {
    const std::string in = tiny(ExpertLayout::kMxfp4, "err_in"), out = temp_dir("err_out");
    QuantizeOptions o;
    o.method = QuantMethod::kInt8;
    cpu::CpuBackend backend;
    ASSERT_TRUE(quantize_checkpoint(in, out, o, backend).is_ok());
    Status again = quantize_checkpoint(out, temp_dir("err_again"), o, backend);
    EXPECT_NE(again.message().find("already int8"), std::string::npos) << again.to_string();
    o.method = QuantMethod::kAwq;
    o.group_size = 128;  // tiny's hidden size is 64
    Status g = quantize_checkpoint(in, temp_dir("err_g"), o, backend);
    EXPECT_NE(g.message().find("--awq-group-size"), std::string::npos) << g.to_string();

    // --quantization must match.
    auto c = load_config_file(out + "/config.json");
    ASSERT_TRUE(c.is_ok());
    EXPECT_TRUE(executor::check_quantization_flag("", *c, out).is_ok());
    EXPECT_TRUE(executor::check_quantization_flag("int8", *c, out).is_ok());
    Status mm = executor::check_quantization_flag("awq", *c, out);
    EXPECT_NE(mm.message().find("says int8"), std::string::npos) << mm.to_string();
    EXPECT_FALSE(executor::check_quantization_flag("gptq", *c, out).is_ok());
    auto mx = load_config_file(in + "/config.json");
    EXPECT_TRUE(executor::check_quantization_flag("mxfp4", *mx, in).is_ok());
    EXPECT_NE(executor::check_quantization_flag("awq", *mx, in).message().find("--awq-zero-point"),
              std::string::npos);

    // AWQ experts are refused with the reason.
    json j = json::parse(read_bytes(in + "/config.json"));
    j["quantization_config"] = {
        {"quant_method", "awq"},
        {"bits", 4},
        {"group_size", 32},
        {"zero_point", true},
        {"modules_to_not_convert", {"model.embed_tokens", "model.layers.*.mlp.router"}}};
    auto bad = parse_config(j, "config.json");
    ASSERT_FALSE(bad.is_ok());
    EXPECT_NE(bad.status().message().find("AutoAWQ cannot quantize gpt-oss experts"), std::string::npos);
    j["quantization_config"]["modules_to_not_convert"] = {"model.embed_tokens", "mlp.router", "mlp.experts",
                                                          "model.layers.*.self_attn"};
    auto ok = parse_config(j, "config.json");
    ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
    EXPECT_FALSE(dense_quantized(*ok, "model.layers.2.self_attn.q_proj"));
    EXPECT_TRUE(dense_quantized(*ok, "lm_head"));
    j["quantization_config"]["zero_point"] = false;
    EXPECT_FALSE(parse_config(j, "config.json").is_ok());
}

// `make-model --config-only --quantization awq|int8` writes the quantization_config that convert writes,
// and --load-format dummy of that config gives the tensors the loader gives for the converted checkpoint:
// the same formats, shapes and group size everywhere (the GPU then runs the same kernels).
TEST(Quantize, ConfigOnlyMatchesConvertAndDummyMatchesTheLoader) {
    const std::string in = tiny(ExpertLayout::kMxfp4, "dummy_in");
    cpu::CpuBackend backend;
    for (QuantMethod m : {QuantMethod::kInt8, QuantMethod::kAwq}) {
        const std::string name = quant_method_name(m);
        SCOPED_TRACE(name);
        QuantizeOptions o;
        o.method = m;
        o.group_size = 32;
        o.activation_aware = false;
        const std::string converted = temp_dir("dummy_conv_" + name);
        ASSERT_TRUE(quantize_checkpoint(in, converted, o, backend).is_ok());

        auto c = preset_config("tiny");
        ASSERT_TRUE(c.is_ok());
        ASSERT_TRUE(set_dense_quantization(&*c, m, 32).is_ok());
        const std::string cfg = temp_dir("dummy_cfg_" + name);
        MakeModelOptions mo;
        mo.config_only = true;
        ASSERT_TRUE(make_model(*c, mo, cfg).is_ok());
        EXPECT_FALSE(fs::exists(cfg + "/model.safetensors.index.json"));
        EXPECT_EQ(json::parse(read_bytes(cfg + "/config.json"))["quantization_config"],
                  json::parse(read_bytes(converted + "/config.json"))["quantization_config"]);

        auto real = load_model(converted);
        auto dummy = load_model_as(cfg, "dummy");
        ASSERT_TRUE(real.is_ok() && dummy.is_ok()) << dummy.status().to_string();
        auto same = [](const ops::DenseWeight& a, const ops::DenseWeight& b, const std::string& what) {
            EXPECT_EQ(a.format, b.format) << what;
            EXPECT_EQ(a.out, b.out) << what;
            EXPECT_EQ(a.in, b.in) << what;
            EXPECT_EQ(a.group_size, b.group_size) << what;
            EXPECT_EQ(a.scales != nullptr, b.scales != nullptr) << what;
            EXPECT_EQ(a.zeros != nullptr, b.zeros != nullptr) << what;
            EXPECT_EQ(a.b.data != nullptr, b.b.data != nullptr) << what;
        };
        same((*real)->lm_head, (*dummy)->lm_head, "lm_head");
        same((*real)->embed_tokens, (*dummy)->embed_tokens, "embed_tokens");
        EXPECT_EQ((*dummy)->lm_head.format,
                  m == QuantMethod::kInt8 ? ops::Format::kInt8 : ops::Format::kInt4);
        for (size_t l = 0; l < (*real)->layers.size(); ++l) {
            const LayerWeights &a = (*real)->layers[l], &b = (*dummy)->layers[l];
            same(a.q_proj, b.q_proj, "q_proj");
            same(a.k_proj, b.k_proj, "k_proj");
            same(a.v_proj, b.v_proj, "v_proj");
            same(a.o_proj, b.o_proj, "o_proj");
            same(a.router, b.router, "router");
            EXPECT_EQ(a.gate_up.format, b.gate_up.format);
            EXPECT_EQ(a.down.format, b.down.format);
        }

        // --quantization is checked against the dummy config as against a checkpoint.
        const GptOssConfig& dc = (*dummy)->config;
        EXPECT_TRUE(executor::check_quantization_flag(name, dc, cfg).is_ok());
        EXPECT_TRUE(executor::check_quantization_flag("", dc, cfg).is_ok());
        const std::string other = m == QuantMethod::kInt8 ? "awq" : "int8";
        Status mm = executor::check_quantization_flag(other, dc, cfg);
        EXPECT_NE(mm.message().find("--quantization " + other + " does not match"), std::string::npos)
            << mm.to_string();
        EXPECT_NE(mm.message().find("says " + name), std::string::npos) << mm.to_string();
        EXPECT_FALSE(executor::check_quantization_flag("mxfp4", dc, cfg).is_ok());

        // make-model refuses integer tensors (convert makes those) and the bf16 expert layout.
        mo.config_only = false;
        Status full = make_model(*c, mo, temp_dir("dummy_full_" + name));
        EXPECT_NE(full.message().find("voltllm convert"), std::string::npos) << full.to_string();
        mo.config_only = true;
        mo.layout = ExpertLayout::kBf16;
        EXPECT_FALSE(make_model(*c, mo, temp_dir("dummy_bf16_" + name)).is_ok());
    }
}

}  // namespace
}  // namespace volt::model
