// Resolving `--model` to a checkpoint directory, offline: an existing directory is itself; `org/name` is
// looked up in the Hugging Face hub cache (models--org--name/snapshots/<rev>/, rev from refs/<revision>).
// The directory is then opened by io::SafetensorsCheckpoint, which reads the shards its
// model.safetensors.index.json names, so the `original/` and `metal/` copies of the gpt-oss repositories are
// never read. Test: tests/unit/io/model_path_test.cc. Cache layout: huggingface_hub's file_download.py.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/status.h"

namespace volt::io {

struct ModelPathOptions {
    std::string revision =
        "main";                // --revision: a ref name under refs/, or a snapshot (commit) directory name
    std::string download_dir;  // --download-dir: searched first, as a hub cache root ("" = none)
    // The environment, so tests need not touch the process's: HF_HUB_CACHE, HF_HOME, XDG_CACHE_HOME, HOME.
    // Empty values count as unset. Fill it with model_path_environment().
    std::map<std::string, std::string> env;
};

// HF_HUB_CACHE, HF_HOME, XDG_CACHE_HOME and HOME from the process environment.
std::map<std::string, std::string> model_path_environment();

// The hub cache roots searched, in order: download_dir (when given), then huggingface_hub's own:
// $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else $HOME/.cache/huggingface/hub.
std::vector<std::string> hub_cache_roots(const ModelPathOptions& options);

// An existing directory `model` -> its absolute path. Else, when `model` looks like `org/name`, the
// snapshot directory in the first cache root that has it: snapshots/<sha of refs/<revision>>, else
// snapshots/<revision> itself, else (revision "main" with no refs/main) the only snapshot, or the most
// recently modified one. kNotFound lists every directory looked at; kInvalidArgument when `model` is
// neither an existing directory nor of the form org/name.
Result<std::string> resolve_model_path(const std::string& model, const ModelPathOptions& options);

}  // namespace volt::io
