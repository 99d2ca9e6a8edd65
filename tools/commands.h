// Subcommands of the `voltllm` binary. Each cmd_<name>.cc defines register_<name>, which adds its
// CLI11 subcommand and callback. Commands may exit(); library code never does.
#pragma once

#include <CLI/CLI.hpp>

namespace volt::tools {}  // namespace volt::tools

namespace volt::tools {
void register_bench(CLI::App& app);  // `voltllm bench serve` (cmd_bench.cc)
}  // namespace volt::tools
