// The model voltllm runs when none is given: the shipped demo model (assets/demo-model, issue 8) when
// it is there, else `tiny-chat` (random weights, the real gpt-oss tokenizer), generated on first use into
// the models/ folder beside the binary's data root (core/paths.h), never relative to the cwd.
#pragma once

#include <string>

#include "core/status.h"

namespace volt::tools {

// Errors: those of make_model (I/O), kNotFound when the tokenizer files are missing (run setup).
Result<std::string> resolve_default_model();

}  // namespace volt::tools
