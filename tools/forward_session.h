// A checkpoint loaded, placed on the backend the command line names and wrapped in a Forward: what
// `voltllm logits` and `voltllm perplexity` run on. Exits with a message on any error (tools only).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "executor/backend_factory.h"
#include "model/forward.h"
#include "model/loader.h"

namespace volt::tools {

struct ForwardSession {
    std::shared_ptr<const model::ModelWeights> host;
    std::unique_ptr<ops::Backend> backend;
    std::shared_ptr<const model::PlacedModel> placed;
    std::unique_ptr<model::Forward> forward;
};

ForwardSession open_forward_or_exit(const std::string& model_dir, const executor::DeviceOptions& device);

// Adds --device, --dtype and --cuda-kernels to a subcommand.
void add_device_flags(CLI::App* cmd, executor::DeviceOptions* device);

}  // namespace volt::tools
