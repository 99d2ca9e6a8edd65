#include "executor/scripted_executor.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace volt::executor {

using engine::LogitsRow;

ScriptedExecutor::ScriptedExecutor(ScriptedOptions options) : options_(std::move(options)) {}

Result<std::unique_ptr<ScriptedExecutor>> ScriptedExecutor::from_file(const std::string& path) {
    std::ifstream in(path);
    if (!in) return not_found("script file " + path + " cannot be opened");
    std::stringstream ss;
    ss << in.rdbuf();
    auto j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return invalid_argument("script file " + path + " is not valid JSON");
    ScriptedOptions o;
    const nlohmann::json* outputs = &j;
    if (j.is_object()) {
        if (!j.contains("outputs")) return invalid_argument("script file " + path + ": no \"outputs\" field");
        outputs = &j["outputs"];
        auto get = [&](const char* key, auto* field) -> Status {
            if (!j.contains(key)) return Status::ok();
            if (!j[key].is_number_integer())
                return invalid_argument("script file " + path + ": \"" + key + "\" must be an integer");
            *field = j[key].get<std::remove_pointer_t<decltype(field)>>();
            return Status::ok();
        };
        VOLT_RETURN_IF_ERROR(get("end_token", &o.end_token));
        VOLT_RETURN_IF_ERROR(get("vocab_size", &o.vocab_size));
        VOLT_RETURN_IF_ERROR(get("max_position_embeddings", &o.max_position_embeddings));
    }
    if (!outputs->is_array() || outputs->empty())
        return invalid_argument("script file " + path +
                                ": outputs must be a non-empty list of lists of token ids");
    for (const auto& list : *outputs) {
        if (!list.is_array())
            return invalid_argument("script file " + path + ": every output must be a list of ids");
        auto& v = o.outputs.emplace_back();
        for (const auto& t : list) {
            // -1 (ops::kNonFiniteToken) plays the sample op's answer to NaN logits (tests of that path).
            if (!t.is_number_integer() || t.get<int64_t>() < -1 || t.get<int64_t>() >= o.vocab_size)
                return invalid_argument("script file " + path + ": token " + t.dump() +
                                        " is not an id below " + std::to_string(o.vocab_size));
            v.push_back(t.get<int32_t>());
        }
    }
    return std::make_unique<ScriptedExecutor>(std::move(o));
}

ExecutorInfo ScriptedExecutor::info() const {
    ExecutorInfo info;
    info.vocab_size = options_.vocab_size;
    info.max_position_embeddings = options_.max_position_embeddings;
    info.eos_token_ids = options_.eos_token_ids;
    info.sliding_window = options_.sliding_window;
    info.has_group[1] = options_.sliding_window > 0;
    return info;
}

Status ScriptedExecutor::run(const engine::StepBatch& b, engine::StepResult* result) {
    result->tokens.clear();
    result->logprobs.clear();
    bool any_lp = false;
    for (const LogitsRow& r : b.logits_rows) {
        int32_t token = r.target;
        if (token < 0) {
            const auto& out = options_.outputs[b.request_index[r.seq] % options_.outputs.size()];
            token =
                r.output_index < static_cast<int64_t>(out.size()) ? out[r.output_index] : options_.end_token;
        }
        result->tokens.push_back(token);
        any_lp = any_lp || r.num_logprobs >= 0;
    }
    if (any_lp) {
        result->logprobs.resize(b.logits_rows.size());
        for (size_t i = 0; i < b.logits_rows.size(); ++i) {
            if (b.logits_rows[i].num_logprobs < 0) continue;
            result->logprobs[i].token = result->tokens[i];
            if (b.logits_rows[i].num_logprobs > 0) result->logprobs[i].top = {{result->tokens[i], 0.0f}};
        }
    }
    return Status::ok();
}

}  // namespace volt::executor
