// Locating files the binary needs at run time (default model, tokenizer) relative to the executable,
// never the current directory: an install prefix (<prefix>/bin/voltllm -> <prefix>/share/voltllm) or the
// source tree (<root>/build/tools/voltllm -> <root>).
#pragma once

#include <optional>
#include <string>

namespace volt {

// Absolute path of the running executable (/proc/self/exe).
std::string executable_path();

// Searches `relative` under <exe_dir>/../share/voltllm, then the source-tree roots above the executable
// (<exe_dir>/.., <exe_dir>/../..). Returns the first that exists.
std::optional<std::string> find_data_path(const std::string& relative);

// The directory that holds generated default models: the first existing data root (see above) + "/models".
std::string default_models_dir();

}  // namespace volt
