// voltllm: the command-line entry point. Subcommands are registered from tools/cmd_*.cc.
#include <cstdio>
#include <string>
#include <vector>

#include "core/logging.h"
#include "core/version.h"
#include "tools/commands.h"

int main(int argc, char** argv) {
    CLI::App app{"voltllm: GPT-OSS inference for every NVIDIA GPU from Volta on, and the CPU"};
    app.require_subcommand(1);
    std::string log_level = "info";
    app.add_option("--log-level", log_level, "trace, debug, info, warning, error")->capture_default_str();
    app.set_version_flag("--version", "voltllm " VOLT_VERSION);
    volt::tools::register_logits(app);
    volt::tools::register_generate(app);
    app.parse_complete_callback([&] { volt::init_logging(log_level); });
    volt::tools::register_make_model(app);
    volt::tools::register_convert(app);
    volt::tools::register_tokenize(app);
    volt::tools::register_bench(app);
    volt::tools::register_perplexity(app);
    volt::tools::register_serve(app);
    volt::tools::register_cuda_info(app);
    volt::tools::register_supervise(app);
    volt::tools::register_router(app);
    // vLLM spelling and flag table: `--max_model_len` is `--max-model-len` (tools/cmd_serve.cc).
    std::vector<std::string> args = volt::tools::prepare_args(app, argc, argv);
    std::vector<char*> arg_ptrs;
    for (std::string& a : args) arg_ptrs.push_back(a.data());
    CLI11_PARSE(app, static_cast<int>(arg_ptrs.size()), arg_ptrs.data());
    return 0;
}
