// `voltllm convert`: without --quantization (or with mxfp4) a bf16-layout checkpoint to the published
// MXFP4 layout (model/convert.h); with --quantization awq|int8 the attention projections and lm_head to
// AWQ (AutoAWQ gemm) or INT8, experts MXFP4 (model/quantize.h). Accepts the V100 recipes' line as
// written: `--model X --output Y --dtype half --quantization awq --awq-zero-point`. docs/quantization.md.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/logging.h"
#include "cpu/cpu_ops.h"
#include "model/calibration_text.h"
#include "model/convert.h"
#include "model/quantize.h"
#include "tokenizer/tokenizer.h"
#include "tools/commands.h"

namespace volt::tools {

namespace {

[[noreturn]] void fail(const std::string& m) {
    std::fprintf(stderr, "convert: %s\n", m.c_str());
    std::exit(1);
}

// Calibration windows: token ids from a JSON file, or the text (a file, else the default sample)
// tokenized with the model's tokenizer.json, cut into windows of `window` tokens.
std::vector<std::vector<int32_t>> calibration_windows(const std::string& model, const std::string& text_file,
                                                      const std::string& ids_file, int64_t window) {
    std::vector<std::vector<int32_t>> out;
    if (!ids_file.empty()) {
        std::ifstream f(ids_file);
        const auto j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
        if (!f || j.is_discarded() || !j.is_array()) fail(ids_file + " is not a JSON array of arrays of ids");
        for (const auto& w : j) out.push_back(w.get<std::vector<int32_t>>());
        return out;
    }
    std::string text = model::default_calibration_text();
    if (!text_file.empty()) {
        std::ifstream f(text_file);
        if (!f) fail("cannot open the calibration text " + text_file);
        std::stringstream ss;
        ss << f.rdbuf();
        text = ss.str();
    }
    auto tok = tokenizer::Tokenizer::from_file(model + "/tokenizer.json");
    if (!tok)
        fail("the AWQ scale search tokenizes its calibration text with " + model + "/tokenizer.json: " +
             tok.status().message() + " (pass --calibration-ids FILE, or --no-awq-scale-search)");
    auto ids = (*tok)->encode(text, tokenizer::SpecialTokens::kIgnore);
    if (!ids) fail("calibration text: " + ids.status().message());
    for (size_t b = 0; b < ids->size(); b += static_cast<size_t>(window))
        out.emplace_back(ids->begin() + b,
                         ids->begin() + std::min(ids->size(), b + static_cast<size_t>(window)));
    return out;
}

}  // namespace

void register_convert(CLI::App& app) {
    struct Options {
        std::string in, out, scale_rule = "best-of-2", quantization, dtype = "auto";
        std::string calibration, calibration_ids;
        bool awq_zero_point = false, no_search = false;
        int64_t group_size = 128, calibration_tokens = 512, window = 256, search_rows = 1024;
        uint64_t seed = 0;
        int64_t max_shard_bytes = 5'000'000'000;
        int threads = 0;
    };
    auto opt = std::make_shared<Options>();
    CLI::App* cmd = app.add_subcommand(
        "convert", "Convert a checkpoint: bf16 experts to MXFP4, or attention + lm_head to AWQ / INT8");
    cmd->add_option("--model,--in", opt->in, "Input checkpoint directory (bf16 layout or published MXFP4)")
        ->required()
        ->check(CLI::ExistingDirectory);
    cmd->add_option("--output,--out", opt->out, "Output directory (created)")->required();
    cmd->add_option("--quantization,-q", opt->quantization,
                    "awq (AutoAWQ gemm, 4-bit, zero points) or int8 for attention and lm_head; mxfp4 or "
                    "none: only the experts (bf16 -> MXFP4)")
        ->check(CLI::IsMember({"awq", "int8", "mxfp4"}));
    cmd->add_flag("--awq-zero-point", opt->awq_zero_point,
                  "AWQ with zero points (the only AWQ form: AutoAWQ's gemm layout stores them)");
    cmd->add_option("--awq-group-size", opt->group_size, "AWQ input elements per scale / zero point")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    cmd->add_flag("--no-awq-scale-search", opt->no_search,
                  "AWQ without the activation-aware scale search (plain group-wise quantization)");
    cmd->add_option("--calibration", opt->calibration,
                    "Text file for the AWQ scale search (default: a built-in 17 KB sample of the demo "
                    "model's training text)");
    cmd->add_option("--calibration-ids", opt->calibration_ids,
                    "JSON array of arrays of token ids for the AWQ scale search (instead of text)");
    cmd->add_option("--calibration-tokens", opt->calibration_tokens, "Calibration tokens used by the search")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    cmd->add_option("--calibration-window", opt->window, "Tokens per calibration window (from position 0)")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    cmd->add_option("--awq-search-rows", opt->search_rows, "Output rows sampled for the search's loss")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    cmd->add_option("--seed", opt->seed, "Seed of the sampled rows (the result is a function of it)")
        ->capture_default_str();
    cmd->add_option("--dtype", opt->dtype,
                    "half/float16: the scales are fp16 (always); other tensors keep their bf16 dtype")
        ->check(CLI::IsMember({"auto", "half", "float16", "bfloat16"}))
        ->capture_default_str();
    cmd->add_option("--scale-rule", opt->scale_rule, "MXFP4 scale rule: best-of-2, ocp, no-saturate")
        ->check(CLI::IsMember({"best-of-2", "ocp", "no-saturate"}))
        ->capture_default_str();
    cmd->add_option("--max-shard-bytes", opt->max_shard_bytes, "Payload bytes per shard")
        ->capture_default_str();
    cmd->add_option("--threads", opt->threads, "Worker threads (0: all)")->capture_default_str();
    cmd->callback([opt] {
        const auto t0 = std::chrono::steady_clock::now();
        quant::ScaleRule rule;
        quant::parse_scale_rule(opt->scale_rule.c_str(), &rule);
        Status st;
        if (opt->quantization.empty() || opt->quantization == "mxfp4") {
            model::ConvertOptions co;
            co.scale_rule = rule;
            co.max_shard_bytes = opt->max_shard_bytes;
            co.threads = opt->threads;
            st = model::convert_to_mxfp4(opt->in, opt->out, co);
        } else {
            model::QuantizeOptions qo;
            qo.method = opt->quantization == "awq" ? model::QuantMethod::kAwq : model::QuantMethod::kInt8;
            if (qo.method == model::QuantMethod::kAwq && !opt->awq_zero_point)
                fail(
                    "--quantization awq writes AutoAWQ's gemm layout, which has zero points: pass "
                    "--awq-zero-point (as the recipes do)");
            qo.group_size = opt->group_size;
            qo.activation_aware = !opt->no_search;
            qo.search_tokens = opt->calibration_tokens;
            qo.search_rows = opt->search_rows;
            qo.seed = opt->seed;
            qo.scale_rule = rule;
            qo.max_shard_bytes = opt->max_shard_bytes;
            qo.threads = opt->threads;
            if (qo.method == model::QuantMethod::kAwq && qo.activation_aware)
                qo.calibration =
                    calibration_windows(opt->in, opt->calibration, opt->calibration_ids, opt->window);
            cpu::CpuBackend backend;
            st = model::quantize_checkpoint(opt->in, opt->out, qo, backend);
        }
        if (!st.is_ok()) fail(st.to_string());
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        spdlog::info("convert: wrote {} in {:.1f} s", opt->out, s);
    });
}

}  // namespace volt::tools
