// `voltllm convert`: a bf16-layout GPT-OSS checkpoint (what transformers' save_pretrained writes after
// dequantized fine-tuning: gate_up_proj [E, H, 2I], down_proj [E, I, H], no quantization_config) to the
// published MXFP4 layout (spec §2.1/§2.3) with quant/mxfp4.h. Non-expert tensors are copied (bf16 stays
// byte-identical; f32/f16 are rounded to bf16, the published dtype). Test: tests/unit/quant/convert_test.cc.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "quant/mxfp4.h"

namespace volt::model {

struct ConvertOptions {
    quant::ScaleRule scale_rule = quant::kDefaultScaleRule;
    int64_t max_shard_bytes = 5'000'000'000;
    int threads = 0;  // <= 0: all hardware threads
};

// Copies every top-level file of in_dir but config.json, the safetensors index and the shards into out_dir
// (generation_config.json, tokenizer files, chat template): what every convert writes beside its tensors.
// Errors: kInternal naming the file that could not be listed or copied.
Status copy_side_files(const std::string& in_dir, const std::string& out_dir);

// Reads in_dir (config.json + safetensors, sharded or not) and writes out_dir: shards + index in the
// published tensor order, config.json with quantization_config and the published rope form (rope_scaling
// + rope_theta; other fields kept), and every other top-level file copied (generation_config.json,
// tokenizer files, chat template). Memory: one output shard plus one expert's f32 matrix.
// Errors: kInvalidArgument when the input is already MXFP4, a tensor has the wrong shape or dtype, an
// expert weight is not finite (naming tensor, expert and row), or a tensor is not part of GPT-OSS;
// kNotFound for a missing tensor or file; kInternal for I/O failures. All name the file or tensor.
Status convert_to_mxfp4(const std::string& in_dir, const std::string& out_dir, const ConvertOptions& options);

}  // namespace volt::model
