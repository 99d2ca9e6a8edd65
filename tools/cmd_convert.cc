// `voltllm convert`: a bf16-layout checkpoint (transformers save_pretrained after fine-tuning) to the
// published MXFP4 layout with our quantizer. Library: model/convert.h; scale rules: docs/quantization.md.
#include <chrono>
#include <cstdio>
#include <memory>

#include "core/logging.h"
#include "model/convert.h"
#include "tools/commands.h"

namespace volt::tools {

void register_convert(CLI::App& app) {
    struct Options {
        std::string in, out, scale_rule = "best-of-2";
        int64_t max_shard_bytes = 5'000'000'000;
        int threads = 0;
    };
    auto opt = std::make_shared<Options>();
    CLI::App* cmd =
        app.add_subcommand("convert", "Convert a bf16-layout checkpoint to the published MXFP4 layout");
    cmd->add_option("--in", opt->in, "Input checkpoint directory (bf16 experts)")
        ->required()
        ->check(CLI::ExistingDirectory);
    cmd->add_option("--out", opt->out, "Output directory (created)")->required();
    cmd->add_option("--scale-rule", opt->scale_rule, "MXFP4 scale rule: best-of-2, ocp, no-saturate")
        ->check(CLI::IsMember({"best-of-2", "ocp", "no-saturate"}))
        ->capture_default_str();
    cmd->add_option("--max-shard-bytes", opt->max_shard_bytes, "Payload bytes per shard")
        ->capture_default_str();
    cmd->add_option("--threads", opt->threads, "Worker threads (0: all)")->capture_default_str();
    cmd->callback([opt] {
        model::ConvertOptions co;
        quant::parse_scale_rule(opt->scale_rule.c_str(), &co.scale_rule);
        co.max_shard_bytes = opt->max_shard_bytes;
        co.threads = opt->threads;
        const auto t0 = std::chrono::steady_clock::now();
        Status st = model::convert_to_mxfp4(opt->in, opt->out, co);
        if (!st.is_ok()) {
            std::fprintf(stderr, "convert: %s\n", st.to_string().c_str());
            std::exit(1);
        }
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        spdlog::info("convert: wrote {} in {:.1f} s", opt->out, s);
    });
}

}  // namespace volt::tools
