// CPU twin of the sample op (ops/sample.h): plain f32/f64 loops over the vocabulary in ascending id
// order, one row per thread-pool item. Math follows vLLM V1's sampler (vllm/v1/sample/sampler.py):
// repetition penalty divides positive / multiplies negative logits of prompt+output ids, frequency and
// presence subtract count * f + p for output ids; min_p keeps p >= min_p * p_max; top_p keeps the most
// likely tokens until their mass reaches top_p. Tests: tests/unit/engine/sample_test.cc.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/check.h"
#include "core/thread_pool.h"
#include "cpu/cpu_ops.h"

namespace volt::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Top k ids of `x` over [0, n), descending, ties -> lower id.
void top_k_ids(const float* x, int64_t n, int64_t k, std::vector<int32_t>* out) {
    out->clear();
    k = std::min(k, n);
    if (k <= 0) return;
    auto better = [&](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); };
    for (int64_t i = 0; i < n; ++i) {
        const auto id = static_cast<int32_t>(i);
        if (static_cast<int64_t>(out->size()) == k && !better(id, out->back())) continue;
        auto pos = std::upper_bound(out->begin(), out->end(), id, better);
        out->insert(pos, id);
        if (static_cast<int64_t>(out->size()) > k) out->pop_back();
    }
}

void sample_row(const ops::SampleArgs& a, int64_t r, std::vector<float>& w, std::vector<int32_t>& ids) {
    const ops::SampleRow& row = a.rows[r];
    const int64_t V = a.vocab_size_real;
    const float* logits = row.logits;
    for (int64_t i = 0; i < V; ++i) {
        if (!std::isfinite(logits[i])) {
            a.tokens[r] = ops::kNonFiniteToken;
            return;
        }
    }

    // Raw logprobs: log_softmax over the real vocabulary, sum in f64 in id order.
    double lse = 0.0;
    if (row.num_logprobs >= 0) {
        float m = kNegInf;
        for (int64_t i = 0; i < V; ++i) m = std::max(m, logits[i]);
        double s = 0.0;
        for (int64_t i = 0; i < V; ++i) s += std::exp(logits[i] - m);
        lse = m + std::log(s);
        VOLT_CHECK_LE(row.num_logprobs, a.max_top);
        top_k_ids(logits, V, row.num_logprobs, &ids);
        for (int64_t j = 0; j < row.num_logprobs; ++j) {
            const bool have = j < static_cast<int64_t>(ids.size());
            a.top_ids[r * a.max_top + j] = have ? ids[j] : -1;
            a.top_logprobs[r * a.max_top + j] = have ? static_cast<float>(logits[ids[j]] - lse) : kNegInf;
        }
    }
    auto finish = [&](int32_t token) {
        a.tokens[r] = token;
        if (row.num_logprobs >= 0) a.logprobs[r] = static_cast<float>(logits[token] - lse);
    };
    if (row.target >= 0) {
        VOLT_CHECK_LT(row.target, V);
        finish(row.target);
        return;
    }

    // Processed logits: mask, bias, penalties.
    w.assign(logits, logits + V);
    if (row.num_allowed > 0) {
        std::vector<float> kept(V, kNegInf);
        for (int64_t j = 0; j < row.num_allowed; ++j) kept[row.allowed_ids[j]] = w[row.allowed_ids[j]];
        w.swap(kept);
    }
    for (int64_t j = 0; j < row.num_bias; ++j) w[row.bias_ids[j]] += row.bias_values[j];
    if (row.repetition_penalty != 1.0f) {
        ids.assign(row.prompt_ids, row.prompt_ids + row.num_prompt);
        ids.insert(ids.end(), row.output_ids, row.output_ids + row.num_output);
        std::sort(ids.begin(), ids.end());
        ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
        for (int32_t id : ids)
            w[id] = w[id] > 0 ? w[id] / row.repetition_penalty : w[id] * row.repetition_penalty;
    }
    if (row.frequency_penalty != 0.0f || row.presence_penalty != 0.0f) {
        ids.assign(row.output_ids, row.output_ids + row.num_output);
        std::sort(ids.begin(), ids.end());
        for (size_t i = 0; i < ids.size();) {
            size_t j = i;
            while (j < ids.size() && ids[j] == ids[i]) ++j;
            w[ids[i]] -= static_cast<float>(j - i) * row.frequency_penalty + row.presence_penalty;
            i = j;
        }
    }

    int32_t best = 0;
    for (int64_t i = 1; i < V; ++i)
        if (w[i] > w[best]) best = static_cast<int32_t>(i);
    if (row.temperature < ops::kGreedyTemperature || std::isinf(w[best])) {
        finish(best);
        return;
    }

    // Relative probabilities exp((w - max) / T); p_max = 1. Filtered tokens get 0.
    const float m = w[best];
    for (int64_t i = 0; i < V; ++i) w[i] = std::exp((w[i] - m) / row.temperature);
    if (row.min_p > 0.0f)
        for (int64_t i = 0; i < V; ++i)
            if (w[i] < row.min_p) w[i] = 0.0f;
    ids.clear();
    for (int64_t i = 0; i < V; ++i)
        if (w[i] > 0.0f) ids.push_back(static_cast<int32_t>(i));
    auto by_prob = [&](int32_t x, int32_t y) { return w[x] > w[y] || (w[x] == w[y] && x < y); };
    if (row.top_k > 0 && row.top_k < static_cast<int64_t>(ids.size())) {
        std::nth_element(ids.begin(), ids.begin() + row.top_k - 1, ids.end(), by_prob);
        const float kth = w[ids[row.top_k - 1]];  // ties with the k-th are kept (vLLM)
        for (int32_t id : ids)
            if (w[id] < kth) w[id] = 0.0f;
        ids.erase(std::remove_if(ids.begin(), ids.end(), [&](int32_t id) { return w[id] == 0.0f; }),
                  ids.end());
    }
    if (row.top_p < 1.0f) {
        // Keep the most likely tokens until their mass reaches top_p of the total. Sorting only the
        // top k candidates (k growing 4x) avoids sorting the whole vocabulary when the mass is peaked.
        double total = 0.0;
        for (int32_t id : ids) total += w[id];
        const double want = row.top_p * total;
        const auto n = static_cast<int64_t>(ids.size());
        for (int64_t k = std::min<int64_t>(256, n);; k = std::min<int64_t>(4 * k, n)) {
            if (k < n) std::nth_element(ids.begin(), ids.begin() + k - 1, ids.end(), by_prob);
            std::sort(ids.begin(), ids.begin() + k, by_prob);
            double cum = 0.0;
            int64_t keep = 0;
            while (keep < k && cum < want) cum += w[ids[keep++]];
            if (cum >= want || k == n) {
                for (int64_t i = std::max<int64_t>(keep, 1); i < n; ++i) w[ids[i]] = 0.0f;
                break;
            }
        }
    }
    // Inverse CDF in ascending id order with one counter-based uniform.
    double total = 0.0;
    for (int64_t i = 0; i < V; ++i) total += w[i];
    const double target = ops::sample_uniform(row.seed, row.counter) * total;
    double cum = 0.0;
    int32_t token = best;
    for (int64_t i = 0; i < V; ++i) {
        if (w[i] == 0.0f) continue;
        cum += w[i];
        token = static_cast<int32_t>(i);
        if (cum > target) break;
    }
    finish(token);
}

}  // namespace

void sample(const ops::SampleArgs& a) {
    VOLT_CHECK(a.vocab_size_real > 0 && a.vocab_size_real <= a.vocab_size) << a.vocab_size_real;
    cpu_thread_pool().parallel_for(a.num_rows, 1, [&](int64_t b, int64_t e) {
        // Per-thread scratch kept across calls: a fresh vocabulary-sized buffer per call costs page faults.
        thread_local std::vector<float> w;
        thread_local std::vector<int32_t> ids;
        for (int64_t r = b; r < e; ++r) sample_row(a, r, w, ids);
    });
}

}  // namespace volt::cpu
