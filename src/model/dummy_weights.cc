#include "model/dummy_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "core/logging.h"
#include "core/thread_pool.h"
#include "model/loader.h"
#include "ops/sample.h"

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
        const uint64_t key = ops::splitmix64(seed_ ^ ops::splitmix64(++stream_));
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
        const uint64_t key = ops::splitmix64(seed_ ^ ops::splitmix64(++stream_));
        pool_.parallel_for((n + 7) / 8, 1 << 14, [&](int64_t lo, int64_t hi) {
            for (int64_t i = lo; i < hi; ++i) {
                const uint64_t r = ops::splitmix64(key + static_cast<uint64_t>(i));
                const int64_t m = std::min<int64_t>(8, n - 8 * i);
                std::memcpy(out + 8 * i, &r, static_cast<size_t>(m));
            }
        });
    }

  private:
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
    auto dense = [&](int64_t out, int64_t in, double std, bool bias, double bias_std) {
        ops::DenseWeight d;
        d.format = ops::Format::kBf16;
        d.out = out;
        d.in = in;
        auto* p = reinterpret_cast<uint16_t*>(storage->add(out * in * 2));
        fill.bf16(p, out * in, 0.0, std);
        d.w = p;
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

    auto w = std::make_shared<ModelWeights>();
    w->config = c;
    w->embed_tokens = dense(c.vocab_size, c.hidden_size, 1.0, false, 0);
    LayerWeights layer;
    layer.input_layernorm = vec(c.hidden_size, 1.0, 0.2);
    layer.q_proj = dense(c.q_dim(), c.hidden_size, 1.2 / std::sqrt(H), true, 0.1);
    layer.k_proj = dense(c.kv_dim(), c.hidden_size, 1.2 / std::sqrt(H), true, 0.1);
    layer.v_proj = dense(c.kv_dim(), c.hidden_size, 1.0 / std::sqrt(H), true, 0.1);
    layer.o_proj = dense(c.hidden_size, c.q_dim(), 1.0 / std::sqrt(Q), true, 0.05);
    layer.sinks = vec(c.num_attention_heads, 1.0, 1.5);
    layer.post_attention_layernorm = vec(c.hidden_size, 1.0, 0.2);
    layer.router = dense(c.num_local_experts, c.hidden_size, 2.0 / std::sqrt(H), true, 0.5);
    layer.gate_up = experts(2 * c.intermediate_size, c.hidden_size, 2.5 / std::sqrt(H), 1.0);
    layer.down = experts(c.hidden_size, c.intermediate_size, 0.3 / std::sqrt(I), 0.2);
    w->layers.assign(static_cast<size_t>(c.num_hidden_layers), layer);
    w->norm = vec(c.hidden_size, 1.0, 0.2);
    w->lm_head = dense(c.vocab_size, c.hidden_size, 2.0 / std::sqrt(H), false, 0);
    w->storage.push_back(storage);
    return w;
}

Result<std::shared_ptr<ModelWeights>> load_model_as(const std::string& dir, const std::string& load_format) {
    if (load_format == "auto" || load_format == "safetensors") return load_model(dir);
    if (load_format != "dummy")
        return invalid_argument("--load-format " + load_format + ": auto, safetensors or dummy");
    VOLT_ASSIGN_OR_RETURN(GptOssConfig config, load_config_file(dir + "/config.json"));
    spdlog::info("--load-format dummy: random weights for {} ({} layers, {} experts); no tensor file is read",
                 dir, config.num_hidden_layers, config.num_local_experts);
    return make_dummy_weights(config);
}

}  // namespace volt::model
