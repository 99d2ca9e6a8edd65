// The CPU sample op (ops/sample.h, src/cpu/sample.cc) against values worked out by hand from the
// definitions: vLLM's penalties, log_softmax, min_p / top_k / top_p filters, and the draw frequencies
// of the softmax (law of large numbers over 20000 counter-based draws).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "cpu/cpu_ops.h"

namespace volt::ops {
namespace {

struct Sampler {
    std::vector<int32_t> tokens, top_ids;
    std::vector<float> logprobs, top_lp;
    // Runs every row with vocab V (real V_real) and returns the tokens.
    const std::vector<int32_t>& run(std::vector<SampleRow> rows, int64_t V, int64_t V_real = -1,
                                    int64_t max_top = 4) {
        const auto R = static_cast<int64_t>(rows.size());
        tokens.assign(R, -7);
        logprobs.assign(R, 0.0f);
        top_ids.assign(R * max_top, -7);
        top_lp.assign(R * max_top, 0.0f);
        SampleArgs a;
        a.rows = rows.data();
        a.num_rows = R;
        a.vocab_size = V;
        a.vocab_size_real = V_real < 0 ? V : V_real;
        a.tokens = tokens.data();
        a.logprobs = logprobs.data();
        a.top_ids = top_ids.data();
        a.top_logprobs = top_lp.data();
        a.max_top = max_top;
        cpu::sample(a);
        return tokens;
    }
};

SampleRow greedy(const float* logits) {
    SampleRow r;
    r.logits = logits;
    r.temperature = 0.0f;
    return r;
}

TEST(SampleTest, GreedyArgmaxTiesAndPaddingMask) {
    const std::vector<float> l = {1.0f, 3.0f, 3.0f, 0.5f, 9.0f, 9.0f};  // ids 4, 5 are padding
    Sampler s;
    EXPECT_EQ(s.run({greedy(l.data())}, 6, 4)[0], 1);  // tie between 1 and 2 -> lower id; 4, 5 masked
    EXPECT_EQ(s.run({greedy(l.data())}, 6, 6)[0], 4);
}

// NaN or Inf anywhere in a row's real ids: kNonFiniteToken, never an id (other servers answer NaN with
// token 0, a stream of "!!!!"); scored and seeded rows too; other rows and padded ids are unaffected.
TEST(SampleTest, NonFiniteLogitsGiveNoToken) {
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    const std::vector<float> a = {1.0f, nan, 0.0f, 2.0f}, b = {1.0f, 0.0f, -inf, 2.0f},
                             c = {3.0f, 0.0f, 1.0f, 2.0f},
                             d = {1.0f, 0.0f, 2.0f, nan};  // d: NaN only in a padded id
    Sampler s;
    SampleRow scored = greedy(b.data());
    scored.target = 2;
    scored.num_logprobs = 1;
    SampleRow seeded = greedy(a.data());
    seeded.temperature = 1.0f;
    seeded.seed = 5;
    const auto& t = s.run({greedy(a.data()), scored, greedy(c.data()), seeded, greedy(d.data())}, 4, 4);
    EXPECT_EQ(t[0], kNonFiniteToken);
    EXPECT_EQ(t[1], kNonFiniteToken);
    EXPECT_EQ(t[2], 0);
    EXPECT_EQ(t[3], kNonFiniteToken);
    EXPECT_EQ(s.run({greedy(d.data())}, 4, 3)[0], 2);
}

TEST(SampleTest, BiasAllowedMaskAndPenalties) {
    const std::vector<float> l = {2.0f, 1.0f, -1.0f, 0.5f};
    Sampler s;
    SampleRow r = greedy(l.data());
    const int32_t bias_id = 3;
    const float bias = 2.0f;  // 0.5 + 2 = 2.5 > 2
    r.bias_ids = &bias_id;
    r.bias_values = &bias;
    r.num_bias = 1;
    EXPECT_EQ(s.run({r}, 4)[0], 3);

    SampleRow a = greedy(l.data());
    const std::vector<int32_t> allowed = {1, 2};
    a.allowed_ids = allowed.data();
    a.num_allowed = 2;
    EXPECT_EQ(s.run({a}, 4)[0], 1);

    // Repetition 4 on prompt ids {0, 2}: 2 / 4 = 0.5, -1 * 4 = -4 -> [0.5, 1, -4, 0.5]: argmax 1.
    SampleRow rep = greedy(l.data());
    const std::vector<int32_t> prompt = {0, 2, 0};
    rep.prompt_ids = prompt.data();
    rep.num_prompt = 3;
    rep.repetition_penalty = 4.0f;
    EXPECT_EQ(s.run({rep}, 4)[0], 1);
    rep.repetition_penalty = 1.5f;  // 2 / 1.5 = 1.33 > 1: still 0
    EXPECT_EQ(s.run({rep}, 4)[0], 0);

    // Frequency 0.3 x count 2 + presence 0.5 on output id 0: 2 - 1.1 = 0.9 < 1 -> argmax 1. Prompt ids
    // are not penalized by frequency/presence.
    SampleRow fp = greedy(l.data());
    const std::vector<int32_t> output = {0, 0};
    fp.output_ids = output.data();
    fp.num_output = 2;
    fp.frequency_penalty = 0.3f;
    fp.presence_penalty = 0.5f;
    EXPECT_EQ(s.run({fp}, 4)[0], 1);
    fp.presence_penalty = 0.3f;  // 2 - 0.9 = 1.1 > 1
    EXPECT_EQ(s.run({fp}, 4)[0], 0);
}

TEST(SampleTest, RawLogprobsAndTopK) {
    // logits = log([1, 2, 3, 4]) + 5: logprobs log([0.1, 0.2, 0.3, 0.4]) whatever the processing.
    const std::vector<float> l = {5.0f + std::log(1.0f), 5.0f + std::log(2.0f), 5.0f + std::log(3.0f),
                                  5.0f + std::log(4.0f), 100.0f};  // id 4: padding
    Sampler s;
    SampleRow r = greedy(l.data());
    r.num_logprobs = 2;
    const int32_t bias_id = 0;
    const float bias = 10.0f;
    r.bias_ids = &bias_id;
    r.bias_values = &bias;
    r.num_bias = 1;
    s.run({r}, 5, 4);
    EXPECT_EQ(s.tokens[0], 0);                         // the bias decides the draw...
    EXPECT_NEAR(s.logprobs[0], std::log(0.1f), 1e-5);  // ...but logprobs are raw
    EXPECT_EQ(s.top_ids[0], 3);
    EXPECT_NEAR(s.top_lp[0], std::log(0.4f), 1e-5);
    EXPECT_EQ(s.top_ids[1], 2);
    EXPECT_NEAR(s.top_lp[1], std::log(0.3f), 1e-5);

    SampleRow p;  // a prompt row: the target's logprob, nothing drawn
    p.logits = l.data();
    p.target = 1;
    p.num_logprobs = 0;
    s.run({p}, 5, 4);
    EXPECT_EQ(s.tokens[0], 1);
    EXPECT_NEAR(s.logprobs[0], std::log(0.2f), 1e-5);
}

// Draw frequencies over `n` counters of one seed.
std::vector<double> frequencies(SampleRow r, int64_t V, int n) {
    std::vector<SampleRow> rows(n, r);
    for (int i = 0; i < n; ++i) rows[i].counter = static_cast<uint64_t>(i);
    Sampler s;
    s.run(rows, V);
    std::vector<double> f(V, 0.0);
    for (int32_t t : s.tokens) f[t] += 1.0 / n;
    return f;
}

TEST(SampleTest, DrawsFollowTheSoftmaxAndFilters) {
    const std::vector<float> l = {std::log(0.1f), std::log(0.2f), std::log(0.3f), std::log(0.4f)};
    SampleRow r;
    r.logits = l.data();
    r.seed = 12345;
    constexpr int kN = 20000;  // binomial std <= 0.0036: 0.015 is four of them
    auto f = frequencies(r, 4, kN);
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(f[i], 0.1 * (i + 1), 0.015) << i;

    r.temperature = 0.5f;  // p^2 normalized: [1, 4, 9, 16] / 30
    f = frequencies(r, 4, kN);
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(f[i], (i + 1) * (i + 1) / 30.0, 0.015) << i;

    r.temperature = 1.0f;
    r.top_k = 2;  // {0.3, 0.4} renormalized
    f = frequencies(r, 4, kN);
    EXPECT_EQ(f[0] + f[1], 0.0);
    EXPECT_NEAR(f[3], 4.0 / 7.0, 0.015);

    r.top_k = 0;
    r.top_p = 0.6f;  // 0.4 < 0.6, 0.4 + 0.3 >= 0.6: {2, 3}
    f = frequencies(r, 4, kN);
    EXPECT_EQ(f[0] + f[1], 0.0);
    EXPECT_NEAR(f[2], 3.0 / 7.0, 0.015);

    r.top_p = 1.0f;
    r.min_p = 0.6f;  // p >= 0.6 * 0.4 = 0.24: {2, 3}
    f = frequencies(r, 4, kN);
    EXPECT_EQ(f[0] + f[1], 0.0);
    EXPECT_NEAR(f[2], 3.0 / 7.0, 0.015);
}

TEST(SampleTest, ADrawDependsOnlyOnSeedAndCounter) {
    std::vector<float> a(50), b(50);
    for (int i = 0; i < 50; ++i) {
        a[i] = std::sin(0.3f * i);
        b[i] = std::cos(0.7f * i);
    }
    SampleRow x;
    x.logits = a.data();
    x.seed = 99;
    x.counter = 7;
    SampleRow y = x;
    y.logits = b.data();
    y.seed = 5;
    Sampler s;
    const int32_t alone = s.run({x}, 50)[0];
    for (int k = 0; k < 8; ++k) {
        std::vector<SampleRow> rows(8, y);
        rows[k] = x;
        EXPECT_EQ(s.run(rows, 50)[k], alone) << "position " << k;
    }
    // Different counters give different draws somewhere (the stream moves).
    int changed = 0;
    for (uint64_t c = 0; c < 32; ++c) {
        SampleRow z = x;
        z.counter = c;
        changed += s.run({z}, 50)[0] != alone ? 1 : 0;
    }
    EXPECT_GT(changed, 0);
}

TEST(SampleTest, UniformIsInUnitInterval) {
    double lo = 1.0, hi = 0.0, sum = 0.0;
    for (uint64_t c = 0; c < 100000; ++c) {
        const double u = sample_uniform(42, c);
        lo = std::min(lo, u);
        hi = std::max(hi, u);
        sum += u;
    }
    EXPECT_GE(lo, 0.0);
    EXPECT_LT(hi, 1.0);
    EXPECT_NEAR(sum / 100000, 0.5, 0.005);  // std of the mean 0.0009
}

}  // namespace
}  // namespace volt::ops
