// What a request asks of the sampler and of the stop rules (OpenAI / vLLM meanings), and the logprob
// record returned for a token. Validated by validate_sampling_params; applied by the sample op
// (ops/sample.h, CPU twin src/cpu/sample.cc) and by the engine's token-level stop rules (engine.cc).
// Tests: tests/unit/engine/sample_test.cc, engine_test.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "core/status.h"

namespace volt::engine {

struct SamplingParams {
    float temperature = 1.0f;  // < 1e-5: greedy (argmax of the processed logits, ties -> lower id)
    float top_p = 1.0f;        // ranges: the k*Range constants below
    float min_p = 0.0f;
    int32_t top_k = 0;                                  // 0: off
    float presence_penalty = 0, frequency_penalty = 0;  // on output tokens (OpenAI)
    float repetition_penalty = 1.0f;                    // on prompt + output tokens (vLLM/HF)
    std::vector<std::pair<int32_t, float>> logit_bias;  // token id -> added to its logit
    std::optional<uint64_t> seed;                       // none: the engine draws one at submit
    int32_t max_tokens = 16;                            // >= 1
    std::vector<int32_t> stop_token_ids;
    bool ignore_eos = false;       // true: the model's EOS ids do not stop (stop_token_ids still do)
    int32_t n = 1;                 // choices; they share the prompt's KV blocks (copy-on-write)
    int32_t logprobs = -1;         // -1: none; k >= 0: the sampled token's logprob + the top k
    int32_t prompt_logprobs = -1;  // -1: none; k >= 0: logprob of every prompt token after the first + top k
    std::vector<int32_t> allowed_token_ids;  // empty: all (padded vocabulary ids are always masked)
    // vLLM's `priority`: waiting sequences are admitted lower values first (then round-robin across
    // requests, then arrival). The supervisor's probes use a negative one (docs/operations.md).
    int32_t priority = 0;
};

// Logprobs are vLLM's default ("raw_logprobs"): log_softmax of the model's raw logits over the real
// vocabulary, before logit bias, penalties, temperature, the allowed-token mask and top-k/p/min-p.
struct TokenLogprob {
    int32_t token = 0;
    float logprob = 0.0f;
    std::vector<std::pair<int32_t, float>> top;  // the k most likely tokens, descending (ties: lower id)
};

inline constexpr int32_t kMaxLogprobs = 20;

// The one definition of every numeric sampling range (OpenAI's, and vLLM's for its extensions): the
// request parser (src/server/request.cc) refuses a value outside it with a 400 naming the field, and
// validate_sampling_params checks the same bounds for every other caller (voltllm generate, tests, the
// engine's submit). `lo_open`: lo itself is outside. Field names are the API's.
struct SamplingRange {
    const char* field;
    double lo, hi;
    bool lo_open;
    bool contains(double x) const { return x >= lo && x <= hi && !(lo_open && x == lo); }
};
inline constexpr SamplingRange kTemperatureRange{"temperature", 0.0, 2.0, false};
inline constexpr SamplingRange kTopPRange{"top_p", 0.0, 1.0, true};
inline constexpr SamplingRange kMinPRange{"min_p", 0.0, 1.0, false};
inline constexpr SamplingRange kPresencePenaltyRange{"presence_penalty", -2.0, 2.0, false};
inline constexpr SamplingRange kFrequencyPenaltyRange{"frequency_penalty", -2.0, 2.0, false};
inline constexpr SamplingRange kRepetitionPenaltyRange{"repetition_penalty", 0.0, 2.0, true};
inline constexpr SamplingRange kTopKRange{"top_k", -1.0, 2147483647.0, false};  // -1 and 0: off
inline constexpr SamplingRange kNRange{"n", 1.0, 128.0, false};
inline constexpr SamplingRange kLogprobsRange{"logprobs", 0.0, kMaxLogprobs, false};  // -1 internally: none

// kInvalidArgument naming the field: the ranges above, max_tokens >= 1, token ids in logit_bias /
// stop_token_ids / allowed_token_ids below vocab_size_real.
Status validate_sampling_params(const SamplingParams& p, int64_t vocab_size_real);

}  // namespace volt::engine
