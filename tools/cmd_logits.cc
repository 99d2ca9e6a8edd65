// `voltllm logits`: float32 logits [T, vocab] of a prompt given as token ids, as a NumPy .npy file, for
// RoPE positions P..P+T-1 on an empty cache. Needs no tokenizer files.
#include <cstdio>
#include <sstream>

#include "core/npy.h"
#include "cpu/cpu_ops.h"
#include "model/loader.h"
#include "model/sequence_runner.h"
#include "tools/commands.h"

namespace volt::tools {

std::vector<int32_t> parse_id_list(const std::string& s) {
    std::vector<int32_t> ids;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) {
        if (item.empty()) continue;
        size_t used = 0;
        long long v = std::stoll(item, &used);
        if (used != item.size() || v < 0 || v > INT32_MAX)
            throw CLI::ValidationError("--prompt-ids", "bad id '" + item + "'");
        ids.push_back(static_cast<int32_t>(v));
    }
    return ids;
}

void register_logits(CLI::App& app) {
    auto* cmd =
        app.add_subcommand("logits", "Write the logits of a prompt (token ids) as a float32 .npy [T, vocab]");
    auto model = std::make_shared<std::string>();
    auto ids = std::make_shared<std::string>();
    auto out = std::make_shared<std::string>();
    auto start = std::make_shared<int64_t>(0);
    cmd->add_option("--model", *model, "checkpoint directory")->required();
    cmd->add_option("--prompt-ids", *ids, "comma-separated token ids, e.g. 1,2,3")->required();
    cmd->add_option("--start-pos", *start, "RoPE position of the first token")->capture_default_str();
    cmd->add_option("--out", *out, "output .npy path")->required();
    cmd->callback([=] {
        const std::vector<int32_t> prompt = parse_id_list(*ids);
        if (prompt.empty()) throw CLI::ValidationError("--prompt-ids", "no ids given");
        auto weights = model::load_model(*model);
        if (!weights.is_ok()) {
            std::fprintf(stderr, "error: %s\n", weights.status().to_string().c_str());
            std::exit(1);
        }
        const int64_t V = (*weights)->config.vocab_size;
        for (int32_t id : prompt) {
            if (id >= V) {
                std::fprintf(stderr, "error: token id %d is outside the vocabulary (%lld ids)\n", id,
                             static_cast<long long>(V));
                std::exit(1);
            }
        }
        cpu::CpuBackend backend;
        model::Forward fwd(*weights, backend);
        model::SequenceRunner run(fwd, static_cast<int64_t>(prompt.size()));
        auto logits = run.append(prompt, /*all_rows=*/true, *start);
        Status st = write_npy_f32(*out, logits.data(), {static_cast<int64_t>(prompt.size()), V});
        if (!st.is_ok()) {
            std::fprintf(stderr, "error: %s\n", st.to_string().c_str());
            std::exit(1);
        }
        std::fprintf(stderr, "wrote %s: [%zu, %lld] float32\n", out->c_str(), prompt.size(),
                     static_cast<long long>(V));
    });
}

}  // namespace volt::tools
