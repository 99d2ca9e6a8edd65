// The vLLM `serve` flags users bring, one table: each flag is honoured, accepted with a one-line notice,
// or rejected with a reason; plus the pre-pass that checks a command line against it (spelling
// normaliser, `--flag=value` split, nearest-flag suggestion) and vLLM's human-readable integers.
// docs/flags.md is checked against the table by tests/unit/server/vllm_flags_test.cc (they cannot drift).
// Sources: vllm/engine/arg_utils.py, vllm/entrypoints/openai/cli_args.py (see docs/flags.md for versions).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace volt::server {

enum class FlagStatus {
    kHonoured,            // has its effect here
    kAcceptedWithNotice,  // parsed and ignored, with a one-line notice in the log
    kRejected,            // the command line fails, naming the reason
};

enum class FlagArity {
    kSwitch,  // no value; `--no-<name>` sets it false when `negatable`
    kValue,   // exactly one value
    kValues,  // one or more values up to the next flag (vLLM's nargs="+")
};

// Where a flag comes from (for docs/flags.md).
enum class FlagOrigin {
    kVllm,         // in current vLLM
    kVllmRemoved,  // removed from vLLM, still in older recipes
    kArticle,      // invented by the article this project answers
    kVoltllm,      // ours (or SGLang's name), not vLLM's
};

struct VllmFlag {
    std::string_view name;   // canonical long spelling, "--max-model-len"
    std::string_view alias;  // short spelling ("-tp") or empty
    FlagArity arity;
    FlagStatus status;
    FlagOrigin origin;
    bool negatable;         // kSwitch only: `--no-<name>` is accepted (argparse BooleanOptionalAction)
    std::string_view text;  // honoured: what it does here; notice: the notice; rejected: the reason
};

// Every row, sorted by name. Names are unique; aliases are unique.
std::span<const VllmFlag> vllm_flag_table();

// Canonical spelling of a flag name: underscores after the leading dashes become dashes
// ("--max_model_len" -> "--max-model-len"); a `=value` tail is kept as it is.
std::string normalize_flag_name(std::string_view arg);

// The row as docs/flags.md shows it: "| `--name` | `-a` | honoured | value | vLLM | text |" (status:
// honoured / notice / rejected; arity: switch / value / values; origin: vLLM / removed from vLLM / article /
// voltllm). A test checks docs/flags.md holds exactly these rows.
std::string flag_markdown_row(const VllmFlag& flag);

// The row for a (normalised) long name or short alias; nullptr when unknown. `--no-X` is not looked up here.
const VllmFlag* find_vllm_flag(std::string_view name);

// The table name nearest to `unknown` by Levenshtein distance (ties: first in table order), or empty
// when the nearest is further than max(2, len/3) edits, so wild guesses are not suggested.
std::string suggest_nearest(std::string_view unknown);

// One flag as found on a command line: its row, the spelling it came with, its values (empty for a switch;
// a negated switch has `negated` true).
struct ParsedFlag {
    const VllmFlag* flag = nullptr;
    std::string given;  // as typed, before normalisation ("--max_model_len=4096")
    std::vector<std::string> values;
    bool negated = false;
};

struct VllmCommandLine {
    std::optional<std::string> model;  // `serve MODEL` positional, or --model's value (the flag wins)
    std::vector<ParsedFlag> flags;     // in command-line order, every accepted flag
    std::vector<std::string> notices;  // one line per accepted-with-notice flag, for the log
    // The honoured flags only, normalised, `--flag=value` split into `--flag value`: what the server's
    // own CLI11 parser should see. Notice-only flags are dropped; the positional model is left out.
    std::vector<std::string> honoured_args;

    // The last occurrence of a flag (vLLM's argparse: last wins), or nullptr.
    const ParsedFlag* find(std::string_view name) const;
};

// Checks `args` (argv after `serve`) against the table. kInvalidArgument for: an unknown flag ("unknown flag
// --max-modle-len; did you mean --max-model-len?"), a rejected flag ("--uds is not supported: <reason>"),
// a value-taking flag with no value, a value given to a switch, or a second positional argument.
// `--pipeline-parallel-rank` (the article's) makes --pipeline-parallel-size notice-only as well: each such
// process serves the whole model as one replica (docs/flags.md says why).
// `wired`: the honoured flags this build's caller actually implements (its own option names, canonical
// spelling). Honoured rows missing from it are turned into notices ("--seed 1: not wired in this build yet;
// ignored") instead of reaching the caller's parser; empty means every honoured row is wired.
Result<VllmCommandLine> parse_vllm_command_line(const std::vector<std::string>& args,
                                                const std::vector<std::string_view>& wired = {});

// The flags this module's pieces honour, read from a checked command line: the periodic stats line
// (--disable-log-stats), request logging (--enable-log-requests / --no-enable-log-requests, --max-log-len),
// served names (--served-model-name) and model resolution (--revision, --download-dir).
struct OpsSettings {
    bool log_stats = true;      // create a PeriodicStatsLogger
    bool log_requests = false;  // log format_request_received / format_request_finished lines
    int64_t max_log_len = -1;   // -1: whole prompts
    std::vector<std::string> served_model_names;  // empty: derive with served_model_names()
    std::string revision = "main";
    std::string download_dir;
};
// kInvalidArgument when --max-log-len is not a non-negative integer.
Result<OpsSettings> ops_settings(const VllmCommandLine& cl);

// vLLM's human_readable_int: "4096"; "32k" = 32,000, "25.6k" = 25,600 (k/m/g/t: powers of 1000, decimals
// allowed, the product truncated to an integer, computed exactly in decimal); "32K" = 32,768 (K/M/G/T:
// powers of 1024, integers only). With `allow_auto`, "auto" (any case) and "-1" give kAutoValue
// (human_readable_int_or_auto). kInvalidArgument naming `flag` for anything else, negatives, overflow.
inline constexpr int64_t kAutoValue = -1;
Result<int64_t> parse_human_int(std::string_view text, std::string_view flag, bool allow_auto);

// The names a server answers to in a request's `model` field. With --served-model-name: exactly those
// (vLLM). Without: the --model argument as given (echoed, as vLLM does) plus two aliases that are accepted
// but never echoed: the basename of the directory ("./gpt-oss-120b/" -> "gpt-oss-120b", what the
// article's watchdog sends) and the last part of an `org/name` id ("openai/gpt-oss-20b" -> "gpt-oss-20b").
struct ServedModelNames {
    std::vector<std::string> names;    // names[0]: echoed in responses, the Prometheus model_name label
    std::vector<std::string> aliases;  // also accepted
    const std::string& primary() const { return names.front(); }
    bool accepts(std::string_view requested) const;
};
// `served_flag`: the values of --served-model-name (empty when not given). `model_arg` must be non-empty.
ServedModelNames served_model_names(std::string_view model_arg, const std::vector<std::string>& served_flag);

}  // namespace volt::server
