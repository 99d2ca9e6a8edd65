// Subcommands of the `voltllm` binary. Each cmd_<name>.cc defines register_<name>, which adds its
// CLI11 subcommand and callback. Commands may exit(); library code never does.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace volt::tools {

void register_logits(CLI::App& app);
void register_generate(CLI::App& app);  // cmd_generate.cc

// "1,2,3" -> {1, 2, 3}; throws CLI::ValidationError on anything else.
std::vector<int32_t> parse_id_list(const std::string& s);
void register_make_model(CLI::App& app);  // cmd_make_model.cc
void register_convert(CLI::App& app);     // cmd_convert.cc
void register_tokenize(CLI::App& app);    // cmd_tokenize.cc
void register_bench(CLI::App& app);       // cmd_bench.cc: `voltllm bench serve`
void register_perplexity(CLI::App& app);  // cmd_perplexity.cc
void register_serve(CLI::App& app);       // cmd_serve.cc
void register_cuda_info(CLI::App& app);   // cmd_cuda_info.cc
void register_supervise(CLI::App& app);   // cmd_supervise.cc: `voltllm supervise -- voltllm serve ...`
void register_router(CLI::App& app);      // cmd_router.cc: `voltllm router --backend URL | --launch N`
// argv with vLLM's underscore flag spelling rewritten to dashes; for `serve`, also checked against
// vLLM's flag table (notices logged, unknown or rejected flags exit 2). cmd_serve.cc.
std::vector<std::string> prepare_args(CLI::App& app, int argc, char** argv);

}  // namespace volt::tools
