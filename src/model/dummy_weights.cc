#include "model/dummy_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/logging.h"
#include "core/thread_pool.h"
#include "model/loader.h"
#include "ops/sample.h"
#include "quant/int_weights.h"

namespace volt::model {
namespace {

struct HostTensors : WeightStorage {
    std::vector<std::unique_ptr<uint8_t[]>> bytes;
    uint8_t* add(int64_t n) {  // left uninitialised: the filler writes every byte (or, unfilled, none)
        bytes.emplace_back(new uint8_t[static_cast<size_t>(n)]);
        return bytes.back().get();
    }
};

class Filler {
  public:
    Filler(uint64_t seed, int num_threads, bool enabled)
        : seed_(seed), enabled_(enabled), pool_(num_threads) {}

    // bf16 values mean + std * u, u uniform on [-sqrt 3, sqrt 3) (unit variance), from stream `stream`.
    void bf16(uint16_t* out, int64_t n, double mean, double std) {
        if (!enabled_) return;
        const uint64_t key = next_key();
        const double a = std * std::sqrt(3.0) * 2.0 / 65536.0, b = mean - std * std::sqrt(3.0);
        pool_.parallel_for((n + 3) / 4, 1 << 14, [&](int64_t lo, int64_t hi) {
            for (int64_t i = lo; i < hi; ++i) {
                const uint64_t r = ops::splitmix64(key + static_cast<uint64_t>(i));
                for (int64_t j = 0; j < 4 && 4 * i + j < n; ++j)
                    out[4 * i + j] =
                        f32_to_bf16(static_cast<float>(b + a * double((r >> (16 * j)) & 0xffff)));
            }
        });
    }
    // Uniformly random bytes (MXFP4 codes: two uniform E2M1 nibbles per byte).
    void bytes(uint8_t* out, int64_t n) {
        if (!enabled_) return;
        const uint64_t key = next_key();
        pool_.parallel_for((n + 7) / 8, 1 << 14, [&](int64_t lo, int64_t hi) {
            for (int64_t i = lo; i < hi; ++i) {
                const uint64_t r = ops::splitmix64(key + static_cast<uint64_t>(i));
                const int64_t m = std::min<int64_t>(8, n - 8 * i);
                std::memcpy(out + 8 * i, &r, static_cast<size_t>(m));
            }
        });
    }

    // INT8 codes, near-uniform on [-127, 127] (16 random bits each: (u * 255) >> 16, less 127).
    void int8_codes(int8_t* out, int64_t n) {
        if (!enabled_) return;
        const uint64_t key = next_key();
        pool_.parallel_for((n + 3) / 4, 1 << 14, [&](int64_t lo, int64_t hi) {
            for (int64_t i = lo; i < hi; ++i) {
                const uint64_t r = ops::splitmix64(key + static_cast<uint64_t>(i));
                for (int64_t j = 0; j < 4 && 4 * i + j < n; ++j)
                    out[4 * i + j] = static_cast<int8_t>(
                        static_cast<int>((((r >> (16 * j)) & 0xffff) * 255) >> 16) - quant::kInt8Max);
            }
        });
    }
    // AWQ zero points: every nibble 7 or 8 (one random bit), so q - z (q uniform on 0..15) has mean 0, as
    // the zero points of a group symmetric about 0 are.
    void awq_zeros(uint32_t* out, int64_t n) {
        if (!enabled_) return;
        bytes(reinterpret_cast<uint8_t*>(out), n * 4);
        for (int64_t i = 0; i < n; ++i) out[i] = 0x77777777u + (out[i] & 0x11111111u);
    }

  private:
    uint64_t next_key() { return ops::splitmix64(seed_ ^ ops::splitmix64(++stream_)); }

    uint64_t seed_, stream_ = 0;
    bool enabled_;
    ThreadPool pool_;
};

// The E8M0 scale byte that gives uniform E2M1 codes (RMS 2.93) a standard deviation of `std`.
uint8_t e8m0_for(double std) {
    const double rms = std::sqrt((0 + 0.25 + 1 + 2.25 + 4 + 9 + 16 + 36) / 8.0);
    const long e = std::lround(std::log2(std / rms)) + 127;
    return static_cast<uint8_t>(std::clamp<long>(e, 1, 254));
}

// The RMS of the integer factors the dummy integer weights multiply their scale by: INT8 codes uniform on
// [-127, 127] (variance (255^2 - 1) / 12); AWQ q - z with q uniform on 0..15 (variance 21.25) and z 7 or 8
// (variance 0.25).
const double kInt8CodeRms = std::sqrt((255.0 * 255.0 - 1.0) / 12.0);
const double kAwqCodeRms = std::sqrt(21.25 + 0.25);

}  // namespace

Result<std::shared_ptr<ModelWeights>> make_dummy_weights(const GptOssConfig& c, uint64_t seed,
                                                         int num_threads, bool fill_values) {
    VOLT_RETURN_IF_ERROR(validate_config(c, "--load-format dummy"));
    if (c.hidden_size % 32 != 0 || c.intermediate_size % 32 != 0)
        return invalid_argument(
            "--load-format dummy: MXFP4 experts need hidden_size and intermediate_size "
            "to be multiples of 32");
    auto storage = std::make_shared<HostTensors>();
    Filler fill(seed, num_threads, fill_values);
    const double H = static_cast<double>(c.hidden_size), I = static_cast<double>(c.intermediate_size);
    const double Q = static_cast<double>(c.q_dim());
    auto vec = [&](int64_t n, double mean, double std) {
        auto* p = reinterpret_cast<uint16_t*>(storage->add(n * 2));
        fill.bf16(p, n, mean, std);
        return ops::VectorWeight{ops::Format::kBf16, p, n};
    };
    // A dense weight in the format the config gives `module` (docs/quantization.md): bf16, or INT8 codes
    // + f16 scales [out], or AWQ qweight [in, out/8] + qzeros [in/g, out/8] (AutoAWQ's gemm layout) + f16
    // scales [in/g, out]. One scale for the whole tensor, chosen for the standard deviation `std` (as the
    // MXFP4 experts' E8M0 scale).
    auto dense = [&](const std::string& module, int64_t out, int64_t in, double std, bool bias,
                     double bias_std) -> Result<ops::DenseWeight> {
        ops::DenseWeight d;
        d.format = ops::Format::kBf16;
        d.out = out;
        d.in = in;
        if (!dense_quantized(c, module)) {
            auto* p = reinterpret_cast<uint16_t*>(storage->add(out * in * 2));
            fill.bf16(p, out * in, 0.0, std);
            d.w = p;
        } else if (c.quant_method == QuantMethod::kInt8) {
            d.format = ops::Format::kInt8;
            auto* q = reinterpret_cast<int8_t*>(storage->add(out * in));
            fill.int8_codes(q, out * in);
            auto* s = reinterpret_cast<uint16_t*>(storage->add(out * 2));
            if (fill_values) std::fill(s, s + out, f32_to_f16(static_cast<float>(std / kInt8CodeRms)));
            d.w = q;
            d.scales = s;
        } else {
            const int64_t g = c.awq_group_size;
            if (g <= 0 || out % quant::kAwqPack != 0 || in % g != 0)
                return invalid_argument("--load-format dummy: " + module + ": AWQ needs out (" +
                                        std::to_string(out) + ") a multiple of 8 and in (" +
                                        std::to_string(in) + ") a multiple of group_size " +
                                        std::to_string(g) + " (config.json)");
            d.format = ops::Format::kInt4;
            d.group_size = g;
            const int64_t words = in * (out / quant::kAwqPack), zwords = (in / g) * (out / quant::kAwqPack);
            auto* qw = storage->add(words * 4);
            fill.bytes(qw, words * 4);  // uniform nibbles: q uniform on 0..15
            auto* qz = reinterpret_cast<uint32_t*>(storage->add(zwords * 4));
            fill.awq_zeros(qz, zwords);
            auto* s = reinterpret_cast<uint16_t*>(storage->add((in / g) * out * 2));
            if (fill_values)
                std::fill(s, s + (in / g) * out, f32_to_f16(static_cast<float>(std / kAwqCodeRms)));
            d.w = qw;
            d.zeros = qz;
            d.scales = s;
        }
        if (bias) d.b = vec(out, 0.0, bias_std);
        return d;
    };
    auto experts = [&](int64_t out, int64_t in, double std, double bias_std) {
        ops::ExpertWeights x;
        x.format = ops::Format::kMxfp4;
        x.num_experts = c.num_local_experts;
        x.out = out;
        x.in = in;
        const int64_t rows = x.num_experts * out, nblocks = rows * (in / 32);
        uint8_t* blocks = storage->add(nblocks * 16);
        fill.bytes(blocks, nblocks * 16);
        uint8_t* scales = storage->add(nblocks);
        if (fill_values) std::memset(scales, e8m0_for(std), static_cast<size_t>(nblocks));
        x.blocks = blocks;
        x.scales = scales;
        x.bias = vec(rows, 0.0, bias_std);
        return x;
    };

    // The attention projections of a layer; which of them are quantized may differ between layers
    // (modules_to_not_convert can name single layers), so layers share one set per pattern.
    const char* const kAttn[4] = {"q_proj", "k_proj", "v_proj", "o_proj"};
    auto attention = [&](int64_t i, LayerWeights* layer) -> Status {
        const std::string prefix = "model.layers." + std::to_string(i) + ".self_attn.";
        VOLT_ASSIGN_OR_RETURN(
            layer->q_proj, dense(prefix + kAttn[0], c.q_dim(), c.hidden_size, 1.2 / std::sqrt(H), true, 0.1));
        VOLT_ASSIGN_OR_RETURN(layer->k_proj, dense(prefix + kAttn[1], c.kv_dim(), c.hidden_size,
                                                   1.2 / std::sqrt(H), true, 0.1));
        VOLT_ASSIGN_OR_RETURN(layer->v_proj, dense(prefix + kAttn[2], c.kv_dim(), c.hidden_size,
                                                   1.0 / std::sqrt(H), true, 0.1));
        VOLT_ASSIGN_OR_RETURN(layer->o_proj, dense(prefix + kAttn[3], c.hidden_size, c.q_dim(),
                                                   1.0 / std::sqrt(Q), true, 0.05));
        return Status::ok();
    };
    auto pattern = [&](int64_t i) {
        int mask = 0;
        for (int k = 0; k < 4; ++k)
            if (dense_quantized(c, "model.layers." + std::to_string(i) + ".self_attn." + kAttn[k]))
                mask |= 1 << k;
        return mask;
    };

    auto w = std::make_shared<ModelWeights>();
    w->config = c;
    VOLT_ASSIGN_OR_RETURN(w->embed_tokens,
                          dense("model.embed_tokens", c.vocab_size, c.hidden_size, 1.0, false, 0));
    LayerWeights layer;
    layer.input_layernorm = vec(c.hidden_size, 1.0, 0.2);
    VOLT_RETURN_IF_ERROR(attention(0, &layer));
    layer.sinks = vec(c.num_attention_heads, 1.0, 1.5);
    layer.post_attention_layernorm = vec(c.hidden_size, 1.0, 0.2);
    VOLT_ASSIGN_OR_RETURN(layer.router, dense("model.layers.0.mlp.router", c.num_local_experts, c.hidden_size,
                                              2.0 / std::sqrt(H), true, 0.5));
    layer.gate_up = experts(2 * c.intermediate_size, c.hidden_size, 2.5 / std::sqrt(H), 1.0);
    layer.down = experts(c.hidden_size, c.intermediate_size, 0.3 / std::sqrt(I), 0.2);
    w->layers.assign(static_cast<size_t>(c.num_hidden_layers), layer);
    std::map<int, LayerWeights> by_pattern = {{pattern(0), layer}};
    for (int64_t i = 1; i < c.num_hidden_layers; ++i) {
        const int mask = pattern(i);
        if (by_pattern.count(mask) == 0) {
            LayerWeights other = layer;
            VOLT_RETURN_IF_ERROR(attention(i, &other));
            by_pattern.emplace(mask, other);
        }
        w->layers[static_cast<size_t>(i)] = by_pattern.at(mask);
    }
    w->norm = vec(c.hidden_size, 1.0, 0.2);
    VOLT_ASSIGN_OR_RETURN(w->lm_head,
                          dense("lm_head", c.vocab_size, c.hidden_size, 2.0 / std::sqrt(H), false, 0));
    w->storage.push_back(storage);
    return w;
}

Result<std::shared_ptr<ModelWeights>> load_model_as(const std::string& dir, const std::string& load_format) {
    if (load_format == "auto" || load_format == "safetensors") return load_model(dir);
    if (load_format != "dummy")
        return invalid_argument("--load-format " + load_format + ": auto, safetensors or dummy");
    VOLT_ASSIGN_OR_RETURN(GptOssConfig config, load_config_file(dir + "/config.json"));
    std::string dense = "bf16";
    if (config.quant_method == QuantMethod::kInt8) dense = "int8";
    if (config.quant_method == QuantMethod::kAwq)
        dense = "awq, group " + std::to_string(config.awq_group_size);
    spdlog::info(
        "--load-format dummy: random weights for {} ({} layers, {} experts, attention + lm_head {}); no "
        "tensor file is read",
        dir, config.num_hidden_layers, config.num_local_experts, dense);
    return make_dummy_weights(config);
}

}  // namespace volt::model
