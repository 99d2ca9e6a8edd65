// Random-weight GPT-OSS checkpoints in the published layout (spec/gpt-oss.md §1.1, §2.1): config.json,
// generation_config.json, shards model-0000k-of-0000n.safetensors + model.safetensors.index.json, MXFP4
// experts from quant/mxfp4.h (or the bf16 save_pretrained layout), bf16 elsewhere. Values come from a
// counter-based splitmix64 + Box-Muller stream per tensor, so they are the same on every platform and
// thread count; the weight statistics and why: docs/quantization.md. Test:
// tests/unit/quant/make_model_test.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "model/config.h"
#include "quant/mxfp4.h"

namespace volt::model {

// How the expert matrices are stored.
enum class ExpertLayout {
    // Published: gate_up_proj_blocks [E, 2I, H/32, 16] u8 + _scales [E, 2I, H/32] u8, down_proj_blocks
    // [E, H, I/32, 16] + _scales [E, H, I/32]; config has quantization_config and rope_scaling.
    kMxfp4,
    // What transformers' save_pretrained writes after dequantized fine-tuning: gate_up_proj [E, H, 2I]
    // bf16, down_proj [E, I, H] bf16 (both [E, in, out]); no quantization_config; rope_parameters.
    kBf16,
};

// ---- Portable random numbers ------------------------------------------------------------------------

// The splitmix64 output function (Steele, Lea, Flood 2014) applied to x: a bijective 64-bit mix.
uint64_t splitmix64(uint64_t x);
// The stream key of one tensor: splitmix64 of the seed and an FNV-1a hash of the name.
uint64_t tensor_key(uint64_t seed, std::string_view name);
// Standard normals number first .. first+n-1 of the stream `key` (Box-Muller on pairs (2k, 2k+1) of
// uniforms from splitmix64(key + 2*golden*k ...)); any sub-range gives the same values as the whole.
void fill_normal(uint64_t key, int64_t first, int64_t n, float* out);

// ---- Configs ----------------------------------------------------------------------------------------

// Sizes that override a preset; unset fields keep the preset's value.
struct ConfigOverrides {
    std::optional<int64_t> num_hidden_layers, hidden_size, intermediate_size, num_local_experts,
        num_experts_per_tok, num_attention_heads, num_key_value_heads, head_dim, vocab_size, sliding_window;
};

// "tiny": V=1000, H=64, d=16, 4 heads, 2 KV heads, 4 experts top-2, I=64, 4 layers, window 8, the real
// YaRN parameters. "tiny-chat": tiny with the real vocabulary (201088). "20b", "120b": spec §1.1.
// Overrides then apply (layers keep the sliding/full alternation); special ids follow the vocabulary
// (gpt-oss ids when it holds them, else bos V-3, eos V-2 and V-1, pad V-1).
// Errors: kInvalidArgument for an unknown preset or an inconsistent result (validate_config; H and I
// must be multiples of 32 for MXFP4).
Result<GptOssConfig> preset_config(std::string_view preset, const ConfigOverrides& overrides = {});

// config.json as written for `layout` (kBf16: no quantization_config, rope_parameters holding rope_theta).
nlohmann::json make_config_json(const GptOssConfig& c, ExpertLayout layout);
// generation_config.json: bos 199998, eos [200002, 199999, 200012], pad 199999 for the gpt-oss
// vocabulary (spec §1.1, hub file); the V-3 / [V-2, V-1] / V-1 analogue for small vocabularies.
nlohmann::json make_generation_config_json(const GptOssConfig& c);

// ---- Weights ----------------------------------------------------------------------------------------

// Logical float values of rows [first_row, first_row + num_rows) of the tensor `name` with the config's
// shapes, before bf16 rounding. `name` is a published bf16 tensor name, or for experts the logical
// "model.layers.{i}.mlp.experts.gate_up_proj" ([E*2I, H], row = (expert, output unit), gate/up
// interleaved) and "...down_proj" ([E*H, I]). Out: num_rows * row length floats.
// Errors: kNotFound for a name that is not a tensor of this config.
Status generate_rows(const GptOssConfig& c, uint64_t seed, const std::string& name, int64_t first_row,
                     int64_t num_rows, float* out);

struct MakeModelOptions {
    ExpertLayout layout = ExpertLayout::kMxfp4;
    uint64_t seed = 0;
    quant::ScaleRule scale_rule = quant::kDefaultScaleRule;
    int64_t max_shard_bytes = 5'000'000'000;  // transformers' default "5GB": 3 shards for 20b
    std::string tokenizer_dir;  // copy tokenizer.json + tokenizer_config.json from here; "" = none
    int threads = 0;            // <= 0: all hardware threads
    bool config_only = false;   // config.json, generation_config.json and the tokenizer, no tensors
                                // (for `--load-format dummy`)
};

// The tensors of a checkpoint in file order (spec §2.1). Each expert matrix appears once under its
// logical name ("model.layers.{i}.mlp.experts.gate_up_proj" / "...down_proj") with shape [E, out, in]
// and expert = true; the stored form depends on the layout (_blocks/_scales, or bf16 [E, in, out]).
struct PublishedTensor {
    std::string name;
    std::vector<int64_t> shape;
    bool expert = false;
};
std::vector<PublishedTensor> published_tensors(const GptOssConfig& c);

// One group of output tensors produced together and kept in one shard (e.g. MXFP4 blocks + scales).
struct OutputUnit {
    std::vector<std::string> names;
    std::vector<DType> dtypes;
    std::vector<std::vector<int64_t>> shapes;
    // Fills one buffer per tensor, each already sized prod(shape) * dtype_size(dtype) bytes.
    std::function<Status(std::vector<std::vector<uint8_t>>& buffers)> produce;
    int64_t bytes() const;
};

// Writes `units` in order as shards model-0000k-of-0000n.safetensors (the published naming, k from 0,
// n = last index) of at most max_shard_bytes payload unless one unit is larger (a new shard starts when
// the next unit would pass the limit), then model.safetensors.index.json {"metadata": {"total_size"},
// "weight_map"}. Only one shard's tensors are in memory at a time.
// Errors: those of `produce`, kInternal for I/O failures naming the path.
Status write_sharded_units(const std::string& dir, const std::vector<OutputUnit>& units,
                           int64_t max_shard_bytes);

// Writes `text` to `path` (replacing it). Errors: kInternal naming the path.
Status write_text_file(const std::string& path, const std::string& text);

// Writes the checkpoint into out_dir (created). A config made awq / int8 by set_dense_quantization
// (model/config.h) is written with its quantization_config, as `voltllm convert` writes it, and only with
// config_only (the tensors then come from --load-format dummy) and the MXFP4 layout. Memory stays bounded by
// one shard: shards are generated and written one at a time (MXFP4 experts row by row). Expert weights are
// rounded to bf16 before quantization, so the MXFP4 layout equals `convert` of the bf16 layout with the same
// seed. Errors: kInternal for I/O failures (naming the path), kNotFound for a missing tokenizer file,
// kInvalidArgument for an awq / int8 config without config_only or with the bf16 layout.
Status make_model(const GptOssConfig& c, const MakeModelOptions& options, const std::string& out_dir);

}  // namespace volt::model
