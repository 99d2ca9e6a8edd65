// INT8 / AWQ conversion of the attention projections and lm_head (docs/quantization.md), one output shard
// at a time over make_model.h's shard writer. Calibration: one forward pass per window on the given
// backend collecting the normed inputs of q/k/v ("attn_norm") and the last residual (final norm applied
// here); the search scales are folded into input_layernorm / model.norm (AutoAWQ's scale_ln_fcs).
#include "model/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/dtype.h"
#include "core/logging.h"
#include "model/convert.h"
#include "model/forward.h"
#include "model/loader.h"
#include "model/make_model.h"
#include "model/placed_model.h"
#include "model/sequence_runner.h"
#include "quant/int_weights.h"

namespace volt::model {

namespace {

namespace fs = std::filesystem;

float bf(const void* p, int64_t i) { return bf16_to_f32(static_cast<const uint16_t*>(p)[i]); }

uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
uint64_t fnv1a(const std::string& s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
    return h;
}

// ---- AWQ search ------------------------------------------------------------------------------------

// y[t, r] = sum_i x[t, i] w[r, i] in double, parallel over r.
std::vector<double> matmul_t(const float* x, int64_t tokens, const float* w, int64_t rows, int64_t in,
                             ThreadPool& pool) {
    std::vector<double> y(static_cast<size_t>(tokens * rows));
    pool.parallel_for(rows, 1, [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r)
            for (int64_t t = 0; t < tokens; ++t) {
                double acc = 0;
                for (int64_t i = 0; i < in; ++i) acc += double(x[t * in + i]) * w[r * in + i];
                y[t * rows + r] = acc;
            }
    });
    return y;
}

// w[rows, in] -> AWQ quantized and dequantized, f32 [rows, in].
Status awq_fake_quant(const float* w, int64_t rows, int64_t in, int64_t g, std::vector<float>* out) {
    std::vector<int32_t> qw(static_cast<size_t>(in * rows / 8)), qz(static_cast<size_t>(in / g * rows / 8));
    std::vector<uint16_t> sc(static_cast<size_t>(in / g * rows));
    VOLT_RETURN_IF_ERROR(quant::quantize_awq(w, rows, in, g, qw.data(), qz.data(), sc.data()));
    out->resize(static_cast<size_t>(rows * in));
    std::vector<float> cols(static_cast<size_t>(8 * in));
    for (int64_t c = 0; c < rows / 8; ++c) {
        quant::decode_awq_columns(qw.data(), qz.data(), sc.data(), in, rows, g, c, cols.data());
        std::copy(cols.begin(), cols.end(), out->begin() + c * 8 * in);
    }
    return Status::ok();
}

}  // namespace

Status awq_search_scales(const float* w, int64_t rows, int64_t in, const float* x, int64_t tokens,
                         int64_t group_size, int grid, ThreadPool& pool, std::vector<float>* scales,
                         AwqSearchResult* result) {
    std::vector<double> x_mean(static_cast<size_t>(in), 0.0);
    for (int64_t t = 0; t < tokens; ++t)
        for (int64_t i = 0; i < in; ++i) x_mean[i] += std::fabs(x[t * in + i]);
    for (auto& m : x_mean) m /= static_cast<double>(std::max<int64_t>(tokens, 1));
    const std::vector<double> ref = matmul_t(x, tokens, w, rows, in, pool);
    std::vector<float> s(static_cast<size_t>(in)), ws(static_cast<size_t>(rows * in)), dq, xs;
    double best = std::numeric_limits<double>::infinity();
    for (int k = 0; k < grid; ++k) {
        const double alpha = static_cast<double>(k) / grid;
        double smax = 0, smin = std::numeric_limits<double>::infinity();
        std::vector<double> sd(static_cast<size_t>(in));
        for (int64_t i = 0; i < in; ++i) {
            sd[i] = std::max(std::pow(x_mean[i], alpha), 1e-4);
            smax = std::max(smax, sd[i]);
            smin = std::min(smin, sd[i]);
        }
        const double norm = std::sqrt(smax * smin);
        for (int64_t i = 0; i < in; ++i) s[i] = static_cast<float>(sd[i] / norm);
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t i = 0; i < in; ++i) ws[r * in + i] = w[r * in + i] * s[i];
        VOLT_RETURN_IF_ERROR(awq_fake_quant(ws.data(), rows, in, group_size, &dq));
        xs.resize(static_cast<size_t>(tokens * in));
        for (int64_t t = 0; t < tokens; ++t)
            for (int64_t i = 0; i < in; ++i) xs[t * in + i] = x[t * in + i] / s[i];
        const std::vector<double> y = matmul_t(xs.data(), tokens, dq.data(), rows, in, pool);
        double loss = 0;
        for (size_t j = 0; j < y.size(); ++j) loss += (y[j] - ref[j]) * (y[j] - ref[j]);
        loss /= static_cast<double>(std::max<size_t>(y.size(), 1));
        if (k == 0) result->loss_plain = loss;
        if (loss < best) {
            best = loss;
            *scales = s;
            result->alpha = alpha;
            result->loss = loss;
        }
    }
    return Status::ok();
}

namespace {

// ---- output units ----------------------------------------------------------------------------------

OutputUnit bf16_unit(const std::string& name, const std::vector<int64_t>& shape, const void* data) {
    OutputUnit u;
    u.names = {name};
    u.dtypes = {DType::kBF16};
    u.shapes = {shape};
    u.produce = [data](std::vector<std::vector<uint8_t>>& buf) {
        std::memcpy(buf[0].data(), data, buf[0].size());
        return Status::ok();
    };
    return u;
}

// A norm gain divided by the AWQ scales folded into it (bf16).
OutputUnit scaled_gain_unit(const std::string& name, int64_t n, const void* data, std::vector<float> s) {
    OutputUnit u;
    u.names = {name};
    u.dtypes = {DType::kBF16};
    u.shapes = {{n}};
    u.produce = [data, n, s = std::move(s)](std::vector<std::vector<uint8_t>>& buf) {
        auto* dst = reinterpret_cast<uint16_t*>(buf[0].data());
        for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(bf(data, i) / s[i]);
        return Status::ok();
    };
    return u;
}

// The integer form of the bf16 matrix w ([out, in]), each column i multiplied by s[i] first (s empty:
// 1), in chunks of 256 rows spread over the pool.
OutputUnit int_unit(const std::string& module, const ops::DenseWeight& w, std::vector<float> s,
                    QuantMethod method, int64_t g, std::shared_ptr<ThreadPool> pool) {
    const int64_t out = w.out, in = w.in;
    OutputUnit u;
    if (method == QuantMethod::kInt8) {
        u.names = {module + ".weight", module + ".weight_scale"};
        u.dtypes = {DType::kI8, DType::kF16};
        u.shapes = {{out, in}, {out}};
    } else {
        u.names = {module + ".qweight", module + ".qzeros", module + ".scales"};
        u.dtypes = {DType::kI32, DType::kI32, DType::kF16};
        u.shapes = {{in, out / 8}, {in / g, out / 8}, {in / g, out}};
    }
    const void* data = w.w;
    u.produce = [=, s = std::move(s)](std::vector<std::vector<uint8_t>>& buf) -> Status {
        constexpr int64_t kChunk = 256;
        const int64_t chunks = (out + kChunk - 1) / kChunk;
        std::vector<Status> errors(static_cast<size_t>(chunks));
        pool->parallel_for(chunks, 1, [&](int64_t b, int64_t e) {
            std::vector<float> f(static_cast<size_t>(kChunk * in));
            std::vector<int32_t> qw, qz;
            std::vector<uint16_t> sc;
            for (int64_t ch = b; ch < e; ++ch) {
                const int64_t r0 = ch * kChunk, rows = std::min(kChunk, out - r0);
                for (int64_t r = 0; r < rows; ++r)
                    for (int64_t i = 0; i < in; ++i)
                        f[r * in + i] = bf(data, (r0 + r) * in + i) * (s.empty() ? 1.0f : s[i]);
                if (method == QuantMethod::kInt8) {
                    auto* q = reinterpret_cast<int8_t*>(buf[0].data());
                    auto* scale = reinterpret_cast<uint16_t*>(buf[1].data());
                    for (int64_t r = 0; r < rows && errors[ch].is_ok(); ++r)
                        errors[ch] = quant::quantize_int8_row(f.data() + r * in, in, q + (r0 + r) * in,
                                                              scale + r0 + r);
                    continue;
                }
                const int64_t words = rows / 8, all_words = out / 8;
                qw.assign(static_cast<size_t>(in * words), 0);
                qz.assign(static_cast<size_t>(in / g * words), 0);
                sc.assign(static_cast<size_t>(in / g * rows), 0);
                errors[ch] = quant::quantize_awq(f.data(), rows, in, g, qw.data(), qz.data(), sc.data());
                if (!errors[ch].is_ok()) continue;
                auto* dqw = reinterpret_cast<int32_t*>(buf[0].data());
                auto* dqz = reinterpret_cast<int32_t*>(buf[1].data());
                auto* dsc = reinterpret_cast<uint16_t*>(buf[2].data());
                for (int64_t i = 0; i < in; ++i)
                    std::copy_n(qw.data() + i * words, words, dqw + i * all_words + r0 / 8);
                for (int64_t gi = 0; gi < in / g; ++gi) {
                    std::copy_n(qz.data() + gi * words, words, dqz + gi * all_words + r0 / 8);
                    std::copy_n(sc.data() + gi * rows, rows, dsc + gi * out + r0);
                }
            }
        });
        for (const Status& st : errors)
            if (!st.is_ok()) return invalid_argument(module + ": " + st.message());
        return Status::ok();
    };
    return u;
}

// Experts: MXFP4 blocks + scales copied, or a bf16 [E, out, in] view quantized to MXFP4.
OutputUnit expert_unit(const std::string& name, const ops::ExpertWeights& x, quant::ScaleRule rule,
                       std::shared_ptr<ThreadPool> pool) {
    const int64_t E = x.num_experts, out = x.out, in = x.in, nb = in / quant::kMxfp4BlockSize;
    OutputUnit u;
    u.names = {name + "_blocks", name + "_scales"};
    u.dtypes = {DType::kU8, DType::kU8};
    u.shapes = {{E, out, nb, 16}, {E, out, nb}};
    u.produce = [=](std::vector<std::vector<uint8_t>>& buf) -> Status {
        if (x.format == ops::Format::kMxfp4) {
            std::memcpy(buf[0].data(), x.blocks, buf[0].size());
            std::memcpy(buf[1].data(), x.scales, buf[1].size());
            return Status::ok();
        }
        std::vector<float> f(static_cast<size_t>(out * in));
        for (int64_t e = 0; e < E; ++e) {
            for (int64_t k = 0; k < out * in; ++k) f[k] = bf(x.w, e * out * in + k);
            Status st = quant::quantize_mxfp4_matrix(f.data(), out, in, rule, *pool,
                                                     buf[0].data() + e * out * nb * quant::kMxfp4BlockBytes,
                                                     buf[1].data() + e * out * nb);
            if (!st.is_ok())
                return invalid_argument(name + " expert " + std::to_string(e) + ": " + st.message());
        }
        return Status::ok();
    };
    return u;
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

// The input config with the published rope form and the new quantization_config.
nlohmann::ordered_json quantized_config(nlohmann::ordered_json j, const QuantizeOptions& o) {
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
    nlohmann::ordered_json q;
    q["quant_method"] = quant_method_name(o.method);
    if (o.method == QuantMethod::kAwq) {
        q["bits"] = 4;
        q["group_size"] = o.group_size;
        q["zero_point"] = true;
        q["version"] = "gemm";
    } else {
        q["bits"] = 8;
    }
    q["modules_to_not_convert"] = dense_quant_modules_not_converted();
    j["quantization_config"] = q;
    return j;
}

// Calibration activations: per layer the normed q/k/v inputs [rows, H], and the final-normed rows.
struct Calibration {
    std::vector<std::vector<float>> attn_norm;
    std::vector<float> final_norm;
    int64_t rows = 0;
};

Result<Calibration> calibrate(std::shared_ptr<const ModelWeights> w, ops::Backend& backend,
                              const QuantizeOptions& o) {
    const GptOssConfig& c = w->config;
    const int64_t H = c.hidden_size, L = c.num_hidden_layers;
    VOLT_ASSIGN_OR_RETURN(std::shared_ptr<const PlacedModel> placed, place_model(w, backend));
    Forward fwd(placed, backend);
    Calibration cal;
    cal.attn_norm.resize(static_cast<size_t>(L));
    std::vector<float> resid;
    fwd.set_trace([&](std::string_view name, int64_t layer, const float* data, int64_t rows, int64_t cols) {
        if (name == "attn_norm")
            cal.attn_norm[layer].insert(cal.attn_norm[layer].end(), data, data + rows * cols);
        if (name == "resid_mlp" && layer == L - 1) resid.insert(resid.end(), data, data + rows * cols);
    });
    int64_t total = 0;
    for (const auto& win : o.calibration)
        total += std::min<int64_t>(static_cast<int64_t>(win.size()), o.search_tokens);
    io::ProgressMeter meter("calibration", std::min(total, o.search_tokens), o.progress);
    for (const auto& win : o.calibration) {
        const int64_t n = std::min<int64_t>(static_cast<int64_t>(win.size()), o.search_tokens - cal.rows);
        if (n <= 0) break;
        for (int32_t id : win)
            if (id < 0 || id >= c.vocab_size)
                return invalid_argument("calibration: token id " + std::to_string(id) +
                                        " outside the vocabulary");
        SequenceRunner run(fwd, n);
        run.append(std::span<const int32_t>(win.data(), static_cast<size_t>(n)), /*all_rows=*/false);
        cal.rows += n;
        meter.add(n);
    }
    meter.finish();
    // model.norm on the last residual (spec §3.3, f32 as the forward pass computes it).
    cal.final_norm.resize(resid.size());
    for (int64_t t = 0; t < cal.rows; ++t) {
        double ss = 0;
        for (int64_t i = 0; i < H; ++i) ss += double(resid[t * H + i]) * resid[t * H + i];
        const float inv = static_cast<float>(1.0 / std::sqrt(ss / H + c.rms_norm_eps));
        for (int64_t i = 0; i < H; ++i)
            cal.final_norm[t * H + i] = bf(w->norm.data, i) * (resid[t * H + i] * inv);
    }
    return cal;
}

// Rows of `mats` stacked ([sum out, in] f32), whole words of 8 sampled when there are more than
// max_rows (deterministic in seed and the group's name).
std::vector<float> sample_rows(const std::vector<const ops::DenseWeight*>& mats, int64_t max_rows,
                               uint64_t seed, const std::string& group, int64_t* rows_out) {
    const int64_t in = mats[0]->in;
    std::vector<std::pair<const ops::DenseWeight*, int64_t>> words;  // (matrix, first row)
    for (const ops::DenseWeight* m : mats)
        for (int64_t r = 0; r < m->out; r += 8) words.push_back({m, r});
    const int64_t want =
        std::min<int64_t>(static_cast<int64_t>(words.size()), std::max<int64_t>(1, max_rows / 8));
    uint64_t st = splitmix64(seed ^ fnv1a(group));
    for (int64_t k = 0; k < want; ++k) {  // partial Fisher-Yates
        st = splitmix64(st);
        const int64_t j = k + static_cast<int64_t>(st % static_cast<uint64_t>(words.size() - k));
        std::swap(words[k], words[j]);
    }
    std::sort(words.begin(), words.begin() + want);
    std::vector<float> w(static_cast<size_t>(want * 8 * in));
    for (int64_t k = 0; k < want; ++k)
        for (int64_t r = 0; r < 8; ++r)
            for (int64_t i = 0; i < in; ++i)
                w[(k * 8 + r) * in + i] = bf(words[k].first->w, (words[k].second + r) * in + i);
    *rows_out = want * 8;
    return w;
}

}  // namespace

Status quantize_checkpoint(const std::string& in_dir, const std::string& out_dir, const QuantizeOptions& o,
                           ops::Backend& backend, std::vector<AwqSearchResult>* searches) {
    const std::string cfg_path = in_dir + "/config.json";
    VOLT_ASSIGN_OR_RETURN(nlohmann::ordered_json raw, read_json_file(cfg_path));
    VOLT_ASSIGN_OR_RETURN(GptOssConfig c, parse_config(nlohmann::json::parse(raw.dump()), cfg_path));
    if (c.quant_method == QuantMethod::kAwq || c.quant_method == QuantMethod::kInt8)
        return invalid_argument(cfg_path + ": the checkpoint is already " +
                                quant_method_name(c.quant_method) +
                                "; convert the bf16 or MXFP4 checkpoint it came from");
    if (o.method != QuantMethod::kAwq && o.method != QuantMethod::kInt8)
        return invalid_argument("convert: --quantization must be awq or int8 here");
    std::error_code same_ec;
    if (fs::exists(out_dir) && fs::equivalent(in_dir, out_dir, same_ec))
        return invalid_argument("convert: --output must differ from --model (" + in_dir + ")");
    const int64_t H = c.hidden_size, g = o.group_size;
    if (o.method == QuantMethod::kAwq) {
        if (g <= 0 || H % g != 0 || c.q_dim() % g != 0)
            return invalid_argument("convert: the AWQ group size " + std::to_string(g) +
                                    " must divide hidden_size (" + std::to_string(H) + ") and the q width (" +
                                    std::to_string(c.q_dim()) +
                                    ", o_proj's input); try --awq-group-size 64 or 32");
        for (auto [what, n] : {std::pair{"q width", c.q_dim()}, std::pair{"kv width", c.kv_dim()},
                               std::pair{"hidden_size", H}, std::pair{"vocab_size", c.vocab_size}})
            if (n % 8 != 0)
                return invalid_argument(std::string("convert: AWQ packs 8 output columns per int32; the ") +
                                        what + " " + std::to_string(n) + " is not a multiple of 8");
    }
    if (H % quant::kMxfp4BlockSize != 0 || c.intermediate_size % quant::kMxfp4BlockSize != 0)
        return invalid_argument(cfg_path +
                                ": hidden_size and intermediate_size must be multiples of 32 for MXFP4");

    LoadOptions lo;
    lo.num_threads = o.threads;
    lo.progress = o.progress;
    VOLT_ASSIGN_OR_RETURN(std::shared_ptr<ModelWeights> w, load_model(in_dir, lo));
    auto pool = std::make_shared<ThreadPool>(o.threads);
    const int64_t L = c.num_hidden_layers;

    // Activation-aware scales per group (empty: none).
    std::vector<std::vector<float>> qkv_scales(static_cast<size_t>(L));
    std::vector<float> lm_scales;
    const bool search = o.method == QuantMethod::kAwq && o.activation_aware && !o.calibration.empty();
    if (search) {
        VOLT_ASSIGN_OR_RETURN(Calibration cal, calibrate(w, backend, o));
        spdlog::info("convert: AWQ scale search on {} calibration tokens, {} groups", cal.rows, L + 1);
        io::ProgressMeter meter("awq search", L + 1, o.progress);
        for (int64_t l = 0; l <= L; ++l) {
            const bool head = l == L;
            AwqSearchResult r;
            r.group = head ? "lm_head" : "model.layers." + std::to_string(l) + ".self_attn.qkv";
            std::vector<const ops::DenseWeight*> mats;
            if (head)
                mats = {&w->lm_head};
            else
                mats = {&w->layers[l].q_proj, &w->layers[l].k_proj, &w->layers[l].v_proj};
            int64_t rows = 0;
            const std::vector<float> ws = sample_rows(mats, o.search_rows, o.seed, r.group, &rows);
            const std::vector<float>& x = head ? cal.final_norm : cal.attn_norm[l];
            std::vector<float> s;
            VOLT_RETURN_IF_ERROR(
                awq_search_scales(ws.data(), rows, H, x.data(), cal.rows, g, o.grid, *pool, &s, &r));
            spdlog::info("convert: {}: alpha {:.2f}, output MSE {:.4g} (plain {:.4g})", r.group, r.alpha,
                         r.loss, r.loss_plain);
            (head ? lm_scales : qkv_scales[l]) = std::move(s);
            if (searches != nullptr) searches->push_back(r);
            meter.add(1);
        }
        meter.finish();
    }

    std::vector<OutputUnit> units;
    units.push_back(bf16_unit("model.embed_tokens.weight", {c.vocab_size, H}, w->embed_tokens.w));
    for (int64_t l = 0; l < L; ++l) {
        const LayerWeights& lw = w->layers[l];
        const std::string p = "model.layers." + std::to_string(l) + ".";
        if (qkv_scales[l].empty())
            units.push_back(bf16_unit(p + "input_layernorm.weight", {H}, lw.input_layernorm.data));
        else
            units.push_back(
                scaled_gain_unit(p + "input_layernorm.weight", H, lw.input_layernorm.data, qkv_scales[l]));
        for (auto [name, d, scaled] :
             {std::tuple{"q_proj", &lw.q_proj, true}, std::tuple{"k_proj", &lw.k_proj, true},
              std::tuple{"v_proj", &lw.v_proj, true}, std::tuple{"o_proj", &lw.o_proj, false}}) {
            const std::string m = p + "self_attn." + name;
            units.push_back(
                int_unit(m, *d, scaled ? qkv_scales[l] : std::vector<float>{}, o.method, g, pool));
            if (d->b.data != nullptr) units.push_back(bf16_unit(m + ".bias", {d->out}, d->b.data));
        }
        units.push_back(bf16_unit(p + "self_attn.sinks", {c.num_attention_heads}, lw.sinks.data));
        units.push_back(
            bf16_unit(p + "post_attention_layernorm.weight", {H}, lw.post_attention_layernorm.data));
        units.push_back(bf16_unit(p + "mlp.router.weight", {lw.router.out, H}, lw.router.w));
        units.push_back(bf16_unit(p + "mlp.router.bias", {lw.router.out}, lw.router.b.data));
        units.push_back(expert_unit(p + "mlp.experts.gate_up_proj", lw.gate_up, o.scale_rule, pool));
        units.push_back(bf16_unit(p + "mlp.experts.gate_up_proj_bias",
                                  {lw.gate_up.num_experts, lw.gate_up.out}, lw.gate_up.bias.data));
        units.push_back(expert_unit(p + "mlp.experts.down_proj", lw.down, o.scale_rule, pool));
        units.push_back(bf16_unit(p + "mlp.experts.down_proj_bias", {lw.down.num_experts, lw.down.out},
                                  lw.down.bias.data));
    }
    if (lm_scales.empty())
        units.push_back(bf16_unit("model.norm.weight", {H}, w->norm.data));
    else
        units.push_back(scaled_gain_unit("model.norm.weight", H, w->norm.data, lm_scales));
    units.push_back(int_unit("lm_head", w->lm_head, lm_scales, o.method, g, pool));

    int64_t total = 0;
    for (const OutputUnit& u : units) total += u.bytes();
    {
        // The writer produces units in order; the meter follows it through the produce calls.
        auto meter = std::make_shared<io::ProgressMeter>("writing " + out_dir, total, o.progress);
        for (OutputUnit& u : units) {
            auto produce = std::move(u.produce);
            const int64_t bytes = u.bytes();
            u.produce = [produce = std::move(produce), meter, bytes](std::vector<std::vector<uint8_t>>& buf) {
                Status st = produce(buf);
                meter->add(bytes);
                return st;
            };
        }
        VOLT_RETURN_IF_ERROR(write_sharded_units(out_dir, units, o.max_shard_bytes));
        meter->finish();
    }
    VOLT_RETURN_IF_ERROR(write_text_file(out_dir + "/config.json", quantized_config(raw, o).dump(2) + "\n"));
    VOLT_RETURN_IF_ERROR(copy_side_files(in_dir, out_dir));
    spdlog::info("convert: {} -> {} ({}: attention and lm_head; experts MXFP4)", in_dir, out_dir,
                 quant_method_name(o.method));
    return Status::ok();
}

}  // namespace volt::model
