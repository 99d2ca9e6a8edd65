// Random weights for any config, in host memory, without a checkpoint: vLLM's `--load-format dummy`
// (benchmarks and memory checks at the real shapes: gpt-oss-20b, gpt-oss-120b). The values are not a
// model: every layer shares one set of host tensors (placement then gives each layer its own copy in
// backend memory, so a forward pass reads the real number of bytes), dense weights are uniform with the
// standard deviations of `voltllm make-model` (docs/quantization.md, "Random checkpoints": q.k logits of
// std ~1-2, router and lm_head logits of std ~2), and the MXFP4 experts are uniformly random E2M1 codes
// under one E8M0 scale per tensor chosen for the same standard deviation (uniform codes have an RMS of
// 2.93). A random router spreads tokens evenly over the experts (the worst case for a grouped GEMM).
// A config whose quantization_config is awq or int8 (as `voltllm convert` or `voltllm make-model
// --config-only --quantization` writes it) gets the attention projections and lm_head that
// modules_to_not_convert does not name in exactly that format (docs/quantization.md "Random checkpoints"):
// INT8 codes near-uniform on [-127, 127] + f16 scales [out]; AWQ qweight of uniform nibbles, qzeros of
// nibbles 7 or 8 (AutoAWQ's gemm packing) + f16 scales [in/g, out]; one scale value per tensor, chosen for
// the same standard deviation as the bf16 weight. So a GPU runs the kernels of a converted checkpoint.
// Test: tests/unit/model/dummy_weights_test.cc.
#pragma once

#include <cstdint>
#include <memory>

#include "core/status.h"
#include "model/config.h"
#include "model/weights.h"

namespace volt::model {

// Builds every tensor of `config` (validated first) with values from `seed`; bf16 dense weights (INT8 / AWQ
// attention and lm_head when the config says so) and MXFP4 experts, the layout the loader produces from a
// published (or converted) checkpoint. Host memory: one layer's tensors
// plus the embedding and lm_head (20b: 1.3 GB, 120b: 3.9 GB). Uses `num_threads` (0: all hardware
// threads). fill_values false: the tensors are allocated but never written (their bytes are undefined and
// their pages never touched): the shapes alone, for counting and memory planning. Errors:
// kInvalidArgument for an invalid config (H and I must be multiples of 32; AWQ: out % 8 and in % group_size
// of every quantized projection, named).
Result<std::shared_ptr<ModelWeights>> make_dummy_weights(const GptOssConfig& config, uint64_t seed = 0,
                                                         int num_threads = 0, bool fill_values = true);

// `load_format` "auto" or "safetensors": load_model(dir); "dummy": dir/config.json and
// make_dummy_weights (no tensor file is read). Errors: the loader's, or kInvalidArgument for an unknown
// format.
Result<std::shared_ptr<ModelWeights>> load_model_as(const std::string& dir, const std::string& load_format);

}  // namespace volt::model
