// `voltllm convert --quantization awq|int8`: a GPT-OSS checkpoint (published MXFP4 layout or the bf16
// layout) to one whose attention projections (q/k/v/o) and lm_head are INT8 or AWQ (AutoAWQ's gemm
// layout), experts MXFP4 (kept, or quantized from bf16 with quant/mxfp4.h), everything else kept.
// Formats, the quantization_config written and the activation-aware scale search: docs/quantization.md.
// Test: tests/unit/quant/quantize_test.cc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "io/progress.h"
#include "model/config.h"
#include "ops/ops.h"
#include "quant/mxfp4.h"

namespace volt::model {

struct QuantizeOptions {
    QuantMethod method = QuantMethod::kAwq;  // kAwq or kInt8
    int64_t group_size = 128;                // kAwq: input elements per scale and zero point
    // kAwq: AutoAWQ's activation-aware scale search over `calibration` (windows of token ids, each run
    // from position 0); off or no calibration: plain group-wise quantization (s = 1).
    bool activation_aware = true;
    std::vector<std::vector<int32_t>> calibration;
    int64_t search_tokens = 512;  // calibration rows (tokens) used by the search, per linear group
    int64_t search_rows = 1024;   // output rows (whole words of 8) sampled for the search's loss
    int grid = 20;                // alpha = k / grid, k = 0 .. grid-1 (AutoAWQ's n_grid)
    uint64_t seed = 0;            // picks the sampled output rows
    quant::ScaleRule scale_rule = quant::kDefaultScaleRule;  // bf16 experts -> MXFP4
    int64_t max_shard_bytes = 5'000'000'000;
    int threads = 0;  // <= 0: all hardware threads
    io::ProgressMode progress = io::ProgressMode::kAuto;
};

// What the search chose, per linear group (for the log and the tests).
struct AwqSearchResult {
    std::string group;                    // "model.layers.3.self_attn.qkv", "lm_head"
    double alpha = 0.0;                   // the chosen exponent (0: no scaling)
    double loss = 0.0, loss_plain = 0.0;  // output MSE at alpha and at alpha 0 on the sampled rows
};

// Reads in_dir and writes out_dir (shards + index, config.json with quantization_config, the other
// top-level files copied). The calibration forward pass runs on `backend` (the CPU backend in the tool)
// in the input checkpoint's precision. Memory: the input mapping, one output shard and one matrix in f32.
// Errors: kInvalidArgument when the input is already AWQ / INT8, a size does not fit the format (out %
// 8, in % group_size: naming the tensor), a weight is not finite, out_dir is in_dir; the loader's errors
// for the input; kInternal for I/O.
Status quantize_checkpoint(const std::string& in_dir, const std::string& out_dir,
                           const QuantizeOptions& options, ops::Backend& backend,
                           std::vector<AwqSearchResult>* searches = nullptr);

// The activation-aware scale search of one linear group (AutoAWQ awq/quantize/quantizer.py
// _search_best_scale without duo scaling): w [rows, in] f32 (the group's output rows, or a sample of
// them in whole words of 8), x [tokens, in] f32 (the group's input activations). For alpha = k / grid:
// s_i = max(mean_t |x[t, i]|^alpha, 1e-4), s /= sqrt(max s * min s), loss = mean over (t, r) of
// (x w^T - x diag(1/s) Q(w diag(s))^T)^2 with Q the AWQ quantizer (group_size); returns the s of the
// lowest loss (ties: the smaller alpha) in *scales [in] and its alpha and losses.
// Parallel over rows on `pool`; the result does not depend on the thread count.
Status awq_search_scales(const float* w, int64_t rows, int64_t in, const float* x, int64_t tokens,
                         int64_t group_size, int grid, ThreadPool& pool, std::vector<float>* scales,
                         AwqSearchResult* result);

}  // namespace volt::model
