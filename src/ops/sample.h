// The sample op: from rows of f32 logits to token ids and the logprobs asked for, one row per sequence
// draw (DESIGN.md: sampling is an op of the executor; logits never travel to the host). Order per row
// (vLLM V1's sampler): raw logprobs -> allowed-token mask, logit bias -> repetition, frequency, presence
// penalties -> greedy argmax, or temperature -> min_p -> top_k -> top_p -> one counter-based uniform
// draw by inverse CDF over token ids in ascending order. Implemented by ops::Backend::sample (CPU twin:
// src/cpu/sample.cc);
// tests: tests/unit/engine/sample_test.cc. C++17 so .cu files can include it.
#pragma once

#include <cstdint>

namespace volt::ops {

// One row of logits to sample from (or to score, when target >= 0). Pointers in the backend's memory
// (SampleArgs::rows too); all id arrays hold ids < vocab_size_real.
struct SampleRow {
    const float* logits = nullptr;  // [vocab_size] f32, read only
    int32_t target = -1;            // >= 0: no draw; report the logprob of this id (prompt logprobs)
    float temperature = 1.0f;       // < kGreedyTemperature: argmax (ties -> lower id)
    float top_p = 1.0f, min_p = 0.0f;
    int32_t top_k = 0;  // 0: off
    float presence_penalty = 0.0f, frequency_penalty = 0.0f, repetition_penalty = 1.0f;
    const int32_t* bias_ids = nullptr;   // [num_bias]
    const float* bias_values = nullptr;  // [num_bias] added to the logit
    int64_t num_bias = 0;
    const int32_t* allowed_ids = nullptr;  // [num_allowed]; 0 entries: every real id allowed
    int64_t num_allowed = 0;
    const int32_t* prompt_ids = nullptr;  // [num_prompt] repetition penalty only
    int64_t num_prompt = 0;
    const int32_t* output_ids = nullptr;  // [num_output] every penalty
    int64_t num_output = 0;
    uint64_t seed = 0;          // request seed + choice index
    uint64_t counter = 0;       // output index of the token being drawn
    int32_t num_logprobs = -1;  // -1: none; k >= 0: logprob of the token + top k (k <= max_top)
};

struct SampleArgs {
    const SampleRow* rows = nullptr;  // [num_rows]
    int64_t num_rows = 0, vocab_size = 0;
    int64_t vocab_size_real = 0;    // ids >= this (padding) are never drawn nor counted in logprobs
    int32_t* tokens = nullptr;      // [num_rows] out: drawn id (target for scored rows); kNonFiniteToken
                                    // when the row's raw logits (real ids) hold a NaN or an infinity
    float* logprobs = nullptr;      // [num_rows] out where num_logprobs >= 0: raw logprob of the token
    int32_t* top_ids = nullptr;     // [num_rows, max_top] out: top ids by raw logprob, descending (entries
                                    // past a row's num_logprobs are unspecified)
    float* top_logprobs = nullptr;  // [num_rows, max_top]
    int64_t max_top = 0;
};

inline constexpr float kGreedyTemperature = 1e-5f;

// The token of a row whose logits are not all finite: no id is drawn from NaN (other servers then emit
// token 0 forever, a stream of "!!!!"); the engine fails that request and keeps serving the others.
// Logprobs of such a row are unspecified.
inline constexpr int32_t kNonFiniteToken = -1;

// splitmix64 (Steele, Lea, Flood 2014): the finalizer of a 64-bit counter; a bijection.
inline uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// The one uniform in [0, 1) of draw `counter` of stream `seed`: counter-based, so a draw never depends
// on the batch, on preemption or on the backend. 53 random bits.
inline double sample_uniform(uint64_t seed, uint64_t counter) {
    return static_cast<double>(splitmix64(splitmix64(seed) ^ counter) >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace volt::ops
