#include "engine/sampling_params.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace volt::engine {
namespace {
Status check_id(int32_t id, int64_t vocab, const char* field) {
    if (id < 0 || id >= vocab)
        return invalid_argument(std::string(field) + ": token id " + std::to_string(id) +
                                " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    return Status::ok();
}
// A bound or value as JSON would print it (2, 0.5, -1), not std::to_string's 2.000000.
std::string fmt_bound(double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", x);
    std::string s = buf;
    if (std::strtod(s.c_str(), nullptr) != x) return s;
    for (int prec = 1; prec <= 17; ++prec) {  // the shortest text that reads back as x
        std::snprintf(buf, sizeof buf, "%.*g", prec, x);
        if (std::strtod(buf, nullptr) == x) return buf;
    }
    return s;
}
}  // namespace

Status validate_sampling_params(const SamplingParams& p, int64_t vocab) {
    auto bad = [](const std::string& m) { return invalid_argument(m); };
    auto check = [&](const SamplingRange& r, double x) -> Status {
        if (std::isfinite(x) && r.contains(x)) return Status::ok();
        return bad(std::string(r.field) + " must be " + (r.lo_open ? "> " : ">= ") + fmt_bound(r.lo) +
                   " and <= " + fmt_bound(r.hi) + ", got " + fmt_bound(x));
    };
    VOLT_RETURN_IF_ERROR(check(kTemperatureRange, p.temperature));
    VOLT_RETURN_IF_ERROR(check(kTopPRange, p.top_p));
    VOLT_RETURN_IF_ERROR(check(kMinPRange, p.min_p));
    VOLT_RETURN_IF_ERROR(check(kTopKRange, p.top_k));
    VOLT_RETURN_IF_ERROR(check(kPresencePenaltyRange, p.presence_penalty));
    VOLT_RETURN_IF_ERROR(check(kFrequencyPenaltyRange, p.frequency_penalty));
    VOLT_RETURN_IF_ERROR(check(kRepetitionPenaltyRange, p.repetition_penalty));
    VOLT_RETURN_IF_ERROR(check(kNRange, p.n));
    if (p.logprobs != -1) VOLT_RETURN_IF_ERROR(check(kLogprobsRange, p.logprobs));
    if (p.prompt_logprobs != -1) {
        SamplingRange r = kLogprobsRange;
        r.field = "prompt_logprobs";
        VOLT_RETURN_IF_ERROR(check(r, p.prompt_logprobs));
    }
    if (p.max_tokens < 1) return bad("max_tokens must be >= 1, got " + std::to_string(p.max_tokens));
    for (const auto& [id, bias] : p.logit_bias) {
        VOLT_RETURN_IF_ERROR(check_id(id, vocab, "logit_bias"));
        if (std::isnan(bias)) return bad("logit_bias: NaN bias for token " + std::to_string(id));
    }
    for (int32_t id : p.stop_token_ids) VOLT_RETURN_IF_ERROR(check_id(id, vocab, "stop_token_ids"));
    for (int32_t id : p.allowed_token_ids) VOLT_RETURN_IF_ERROR(check_id(id, vocab, "allowed_token_ids"));
    return Status::ok();
}

}  // namespace volt::engine
