// Loads a GPT-OSS checkpoint directory (config.json + safetensors, spec/gpt-oss.md §2.1) into
// ModelWeights. Two expert layouts: the published MXFP4 one (*_blocks / *_scales [E, out, in/32, 16]
// and [E, out, in/32] u8, pointed into the mmap) and the bf16 one of transformers' save_pretrained
// (gate_up_proj [E, H, 2I], down_proj [E, I, H]; transposed at load to [E, out, in]). Non-expert tensors
// are BF16; F32/F16 ones are converted to BF16 at load (one info log line). Tests:
// tests/unit/model/loader_test.cc.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "io/progress.h"
#include "model/weights.h"

namespace volt::model {

struct LoadOptions {
    // Fault every page of the mapped tensors in during load (one byte read per 4 KiB page, after
    // madvise WILLNEED), so that the first forward pass does not pay for disk reads.
    bool touch_pages = true;
    io::ProgressMode progress = io::ProgressMode::kAuto;
    int num_threads = 0;  // for transposes and dtype conversions; 0 = all hardware threads
};

// Reads `dir`/config.json (model/config.h) and the checkpoint's tensors (io::SafetensorsCheckpoint:
// index + shards, model.safetensors, or top-level *.safetensors; original/ and metal/ are never read).
// Every shape is derived from the config. Tensors the model does not use are ignored (debug log).
// The attention biases may be absent when attention_bias is false (pointers stay null). lm_head.weight
// is always required (config validation refuses tie_word_embeddings, which GPT-OSS never sets).
// Errors: those of config and checkpoint opening; kNotFound for a missing tensor (naming it and the
// checkpoint); kInvalidArgument for a wrong dtype (file, tensor, expected and found dtype), a wrong
// shape (file, tensor, expected and found shape), or an expert input size not a multiple of 32 in
// the MXFP4 layout. All of these are found before any data is read.
Result<std::shared_ptr<ModelWeights>> load_model(const std::string& dir, const LoadOptions& options = {});

}  // namespace volt::model
