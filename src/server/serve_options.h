// What `voltllm serve` reads from its command line besides the engine's own settings: the vLLM-style
// flag spelling pre-pass (`--max_model_len` == `--max-model-len`) and human-readable token counts
// (`32k` = 32,000, `32K` = 32,768, `auto`). Test: tests/unit/server/serve_options_test.cc.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace volt::server {

// Rewrites underscores to dashes in the name of every long flag ("--max_num_seqs=8" ->
// "--max-num-seqs=8"); values, positionals and short flags are left as they are. Stops at "--".
std::vector<std::string> normalize_flag_spelling(const std::vector<std::string>& args);

// A token count: a plain integer, or a number with a suffix: k/m/g are powers of 1000, K/M/G powers
// of 1024 (vLLM's human_readable_int); "auto" (any case) gives 0, meaning "let the engine decide".
// kInvalidArgument naming `flag` for anything else, negative values or overflow.
Result<int64_t> parse_token_count(std::string_view text, std::string_view flag);

}  // namespace volt::server
