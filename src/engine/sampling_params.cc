#include "engine/sampling_params.h"

#include <cmath>
#include <string>

namespace volt::engine {
namespace {
Status check_id(int32_t id, int64_t vocab, const char* field) {
    if (id < 0 || id >= vocab)
        return invalid_argument(std::string(field) + ": token id " + std::to_string(id) +
                                " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    return Status::ok();
}
}  // namespace

Status validate_sampling_params(const SamplingParams& p, int64_t vocab) {
    auto bad = [](const std::string& m) { return invalid_argument(m); };
    if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature))
        return bad("temperature must be >= 0, got " + std::to_string(p.temperature));
    if (!(p.top_p > 0.0f && p.top_p <= 1.0f))
        return bad("top_p must be in (0, 1], got " + std::to_string(p.top_p));
    if (!(p.min_p >= 0.0f && p.min_p <= 1.0f))
        return bad("min_p must be in [0, 1], got " + std::to_string(p.min_p));
    if (p.top_k < 0) return bad("top_k must be >= 0 (0: off), got " + std::to_string(p.top_k));
    if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f))
        return bad("presence_penalty must be in [-2, 2], got " + std::to_string(p.presence_penalty));
    if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f))
        return bad("frequency_penalty must be in [-2, 2], got " + std::to_string(p.frequency_penalty));
    if (!(p.repetition_penalty > 0.0f) || !std::isfinite(p.repetition_penalty))
        return bad("repetition_penalty must be > 0, got " + std::to_string(p.repetition_penalty));
    if (p.max_tokens < 1) return bad("max_tokens must be >= 1, got " + std::to_string(p.max_tokens));
    if (p.n < 1) return bad("n must be >= 1, got " + std::to_string(p.n));
    if (p.logprobs < -1 || p.logprobs > kMaxLogprobs)
        return bad("logprobs must be in [0, " + std::to_string(kMaxLogprobs) + "], got " +
                   std::to_string(p.logprobs));
    if (p.prompt_logprobs < -1 || p.prompt_logprobs > kMaxLogprobs)
        return bad("prompt_logprobs must be in [0, " + std::to_string(kMaxLogprobs) + "], got " +
                   std::to_string(p.prompt_logprobs));
    for (const auto& [id, bias] : p.logit_bias) {
        VOLT_RETURN_IF_ERROR(check_id(id, vocab, "logit_bias"));
        if (std::isnan(bias)) return bad("logit_bias: NaN bias for token " + std::to_string(id));
    }
    for (int32_t id : p.stop_token_ids) VOLT_RETURN_IF_ERROR(check_id(id, vocab, "stop_token_ids"));
    for (int32_t id : p.allowed_token_ids) VOLT_RETURN_IF_ERROR(check_id(id, vocab, "allowed_token_ids"));
    return Status::ok();
}

}  // namespace volt::engine
