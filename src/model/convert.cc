// bf16 layout -> published MXFP4 layout, one output shard at a time over the shared shard writer of
// make_model.h. Expert matrices are transposed per expert ([in, out] -> [out, in] rows, spec §2.3 blocks
// run along the input dimension) into f32 and quantized row by row. Test: tests/unit/quant/convert_test.cc.
#include "model/convert.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/dtype.h"
#include "core/logging.h"
#include "core/thread_pool.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/make_model.h"

namespace volt::model {

namespace {

namespace fs = std::filesystem;

// Element i of a floating-point tensor as f32 (exact for bf16/f16/f32).
inline float element(const io::TensorInfo& t, int64_t i) {
    switch (t.dtype) {
        case DType::kBF16: {
            uint16_t h;
            std::memcpy(&h, t.data + 2 * i, 2);
            return bf16_to_f32(h);
        }
        case DType::kF16: {
            uint16_t h;
            std::memcpy(&h, t.data + 2 * i, 2);
            return f16_to_f32(h);
        }
        default: {
            float f;
            std::memcpy(&f, t.data + 4 * i, 4);
            return f;
        }
    }
}

Status check_tensor(const io::TensorInfo* t, const std::string& name, const std::vector<int64_t>& shape,
                    const std::string& src) {
    if (t == nullptr) return not_found(src + ": tensor " + name + " is missing");
    if (t->dtype != DType::kBF16 && t->dtype != DType::kF16 && t->dtype != DType::kF32)
        return invalid_argument(src + ": tensor " + name + " has dtype " + std::string(dtype_name(t->dtype)) +
                                ", expected BF16, F16 or F32");
    if (t->shape != shape)
        return invalid_argument(src + ": tensor " + name + " has shape " + t->shape_string() + ", expected " +
                                io::shape_to_string(shape));
    return Status::ok();
}

Result<nlohmann::ordered_json> read_json_file(const std::string& path) {
    std::ifstream f(path);
    if (!f) return not_found("cannot open " + path);
    std::stringstream ss;
    ss << f.rdbuf();
    auto j = nlohmann::ordered_json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return invalid_argument(path + ": not valid JSON");
    return j;
}

// The input config with quantization_config added and rope_parameters turned into the published
// rope_scaling + rope_theta.
nlohmann::ordered_json published_config(nlohmann::ordered_json j) {
    if (auto it = j.find("rope_parameters"); it != j.end()) {
        nlohmann::ordered_json rp = *it;
        j.erase("rope_parameters");
        if (rp.contains("rope_theta")) {
            j["rope_theta"] = rp["rope_theta"];
            rp.erase("rope_theta");
        }
        if (rp.value("rope_type", "default") != "default") j["rope_scaling"] = rp;
    }
    j.erase("dtype");
    j["quantization_config"] = {
        {"modules_to_not_convert",
         {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}},
        {"quant_method", "mxfp4"}};
    return j;
}

}  // namespace

Status copy_side_files(const std::string& in_dir, const std::string& out_dir) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(in_dir, ec)) {
        if (!entry.is_regular_file()) continue;
        const std::string name = entry.path().filename().string();
        if (name == "config.json" || name == "model.safetensors.index.json" ||
            entry.path().extension() == ".safetensors")
            continue;
        fs::copy_file(entry.path(), fs::path(out_dir) / name, fs::copy_options::overwrite_existing, ec);
        if (ec)
            return internal_error("cannot copy " + entry.path().string() + " to " + out_dir + ": " +
                                  ec.message());
    }
    if (ec) return internal_error("cannot list " + in_dir + ": " + ec.message());
    return Status::ok();
}

Status convert_to_mxfp4(const std::string& in_dir, const std::string& out_dir, const ConvertOptions& o) {
    const std::string cfg_path = in_dir + "/config.json";
    VOLT_ASSIGN_OR_RETURN(nlohmann::ordered_json raw, read_json_file(cfg_path));
    VOLT_ASSIGN_OR_RETURN(GptOssConfig c, parse_config(nlohmann::json::parse(raw.dump()), cfg_path));
    if (c.mxfp4_quantized)
        return invalid_argument(cfg_path + ": the checkpoint is already MXFP4 (quantization_config present)");
    if (c.hidden_size % quant::kMxfp4BlockSize != 0 || c.intermediate_size % quant::kMxfp4BlockSize != 0)
        return invalid_argument(cfg_path +
                                ": hidden_size and intermediate_size must be multiples of 32 for MXFP4");
    std::error_code same_ec;
    if (fs::exists(out_dir) && fs::equivalent(in_dir, out_dir, same_ec))
        return invalid_argument("convert: --out must differ from --in (" + in_dir + ")");
    VOLT_ASSIGN_OR_RETURN(std::unique_ptr<io::SafetensorsCheckpoint> ckpt,
                          io::SafetensorsCheckpoint::open(in_dir));
    const io::SafetensorsCheckpoint* ck = ckpt.get();
    const std::string src = in_dir;

    // Check every tensor before writing anything.
    const std::vector<PublishedTensor> tensors = published_tensors(c);
    std::set<std::string> used;
    for (const PublishedTensor& t : tensors) {
        // Experts are stored [E, in, out] in the bf16 layout.
        const std::vector<int64_t> shape =
            t.expert ? std::vector<int64_t>{t.shape[0], t.shape[2], t.shape[1]} : t.shape;
        VOLT_RETURN_IF_ERROR(check_tensor(ck->find(t.name), t.name, shape, src));
        used.insert(t.name);
    }
    for (const std::string& name : ck->tensor_names())
        if (!used.count(name))
            return invalid_argument(src + ": tensor " + name +
                                    " is not part of a GPT-OSS checkpoint of this config");

    auto pool = std::make_shared<ThreadPool>(o.threads);
    std::vector<OutputUnit> units;
    for (const PublishedTensor& t : tensors) {
        const io::TensorInfo* in = ck->find(t.name);
        OutputUnit u;
        if (!t.expert) {
            u.names = {t.name};
            u.dtypes = {DType::kBF16};
            u.shapes = {t.shape};
            u.produce = [in](std::vector<std::vector<uint8_t>>& buf) {
                if (in->dtype == DType::kBF16) {
                    std::memcpy(buf[0].data(), in->data, static_cast<size_t>(in->nbytes));
                } else {
                    auto* dst = reinterpret_cast<uint16_t*>(buf[0].data());
                    for (int64_t i = 0; i < in->numel(); ++i) dst[i] = f32_to_bf16(element(*in, i));
                }
                return Status::ok();
            };
        } else {
            const int64_t E = t.shape[0], out = t.shape[1], inner = t.shape[2],
                          nb = inner / quant::kMxfp4BlockSize;
            u.names = {t.name + "_blocks", t.name + "_scales"};
            u.dtypes = {DType::kU8, DType::kU8};
            u.shapes = {{E, out, nb, 16}, {E, out, nb}};
            u.produce = [in, E, out, inner, nb, pool, rule = o.scale_rule,
                         name = t.name](std::vector<std::vector<uint8_t>>& buf) -> Status {
                std::vector<float> w(static_cast<size_t>(out * inner));  // one expert, [out, in]
                for (int64_t e = 0; e < E; ++e) {
                    const int64_t base = e * inner * out;  // input [E, in, out]
                    // Rows of 64 outputs at a time read 64 consecutive input elements per k.
                    pool->parallel_for((out + 63) / 64, 1, [&](int64_t b, int64_t end) {
                        for (int64_t r0 = b * 64; r0 < std::min(out, end * 64); r0 += 64) {
                            const int64_t r1 = std::min(out, r0 + 64);
                            for (int64_t k = 0; k < inner; ++k)
                                for (int64_t r = r0; r < r1; ++r)
                                    w[r * inner + k] = element(*in, base + k * out + r);
                        }
                    });
                    Status st = quant::quantize_mxfp4_matrix(
                        w.data(), out, inner, rule, *pool,
                        buf[0].data() + e * out * nb * quant::kMxfp4BlockBytes, buf[1].data() + e * out * nb);
                    if (!st.is_ok())
                        return invalid_argument(name + " expert " + std::to_string(e) + ": " + st.message());
                }
                return Status::ok();
            };
        }
        units.push_back(std::move(u));
    }
    VOLT_RETURN_IF_ERROR(write_sharded_units(out_dir, units, o.max_shard_bytes));
    VOLT_RETURN_IF_ERROR(write_text_file(out_dir + "/config.json", published_config(raw).dump(2) + "\n"));

    // Everything else at the top level travels along (generation_config.json, tokenizer, chat template).
    VOLT_RETURN_IF_ERROR(copy_side_files(in_dir, out_dir));
    spdlog::info("convert: {} -> {} ({} tensors)", in_dir, out_dir, ck->tensor_names().size());
    return Status::ok();
}

}  // namespace volt::model
