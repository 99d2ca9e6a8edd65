// Cases of the sample op (ops/sample.h): rows of every kind (greedy, temperature with top_k / top_p /
// min_p, penalties over a repeated history, logit bias, allowed ids, prompt rows with a target), 1 and 64
// rows, vocabularies of 1000 and 201088 with padding ids past vocab_size_real whose logits are the
// largest of the row (a backend that draws or counts them fails). Tokens are compared exactly except
// where the reference finds a decision within the backend's tie epsilon; logprobs within tolerance.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "tests/kernels/harness.h"

namespace volt::kernels {

namespace {

constexpr int64_t kMaxTop = 8;

// Host-side description of one row; pointers are filled in twice (host copy, backend copy).
struct RowSpec {
    ops::SampleRow row;
    std::vector<int32_t> bias_ids, allowed, prompt, output;
    std::vector<float> bias_values;
};

RowSpec make_row(Rng& rng, int64_t kind, int64_t V, const std::vector<int32_t>& boosted) {
    RowSpec s;
    ops::SampleRow& r = s.row;
    r.seed = rng.next();
    r.counter = rng.below(1 << 20);
    auto some_ids = [&](int64_t n, bool with_boosted) {
        std::vector<int32_t> v;
        for (int64_t i = 0; i < n; ++i) v.push_back(static_cast<int32_t>(rng.below(V)));
        if (with_boosted)
            for (int64_t i = 0; i < 3; ++i) v.push_back(boosted[i]);
        return v;
    };
    switch (kind % 12) {
        case 0:  // greedy
            r.temperature = 0.0f;
            r.num_logprobs = 5;
            break;
        case 1:
            r.temperature = 0.7f;
            r.top_k = 50;
            r.top_p = 0.9f;
            r.min_p = 0.05f;
            r.num_logprobs = 1;
            break;
        case 2:
            r.temperature = 1.0f;
            r.num_logprobs = 0;
            break;
        case 3:
            r.temperature = 0.7f;
            r.top_p = 0.5f;
            break;
        case 4: {  // penalties over a repeated history that includes the likely ids
            r.temperature = 0.8f;
            r.repetition_penalty = 1.3f;
            r.frequency_penalty = 0.5f;
            r.presence_penalty = 0.3f;
            s.prompt = some_ids(20, true);
            s.output = some_ids(12, true);
            s.output.push_back(boosted[0]);
            s.output.push_back(boosted[0]);
            r.num_logprobs = 2;
            break;
        }
        case 5:  // greedy with a bias that removes the likeliest id and lifts another
            r.temperature = 0.0f;
            s.bias_ids = {boosted[0], static_cast<int32_t>(rng.below(V)), boosted[1]};
            s.bias_values = {-100.0f, 12.0f, 0.5f};
            break;
        case 6:
            r.temperature = 1.0f;
            s.allowed = some_ids(8, false);
            s.allowed.push_back(boosted[2]);
            s.allowed.push_back(boosted[3]);
            r.num_logprobs = 3;
            break;
        case 7:  // a prompt row: score the target, no draw
            r.target = static_cast<int32_t>(rng.below(V));
            r.num_logprobs = static_cast<int32_t>(kMaxTop);
            break;
        case 8:  // greedy under a repetition penalty that hits the argmax
            r.temperature = 0.0f;
            r.repetition_penalty = 1.5f;
            s.prompt = some_ids(5, true);
            r.num_logprobs = 1;
            break;
        case 9:
            r.temperature = 0.7f;
            r.top_k = 1;
            break;
        case 10:
            r.temperature = 1.2f;
            r.min_p = 0.1f;
            r.num_logprobs = 4;
            break;
        case 11:
            r.temperature = 0.5f;
            r.top_k = 5;
            r.frequency_penalty = 1.0f;
            s.output = some_ids(6, true);
            s.bias_ids = {boosted[4], boosted[5]};
            s.bias_values = {3.0f, -2.0f};
            break;
    }
    return s;
}

void sample_case(Case& c, int64_t R, int64_t V, int64_t V_real) {
    Rng& rng = c.rng();
    // Logits: N(0, 1.5^2) with 20 boosted ids per row (+8..+14), so the mass sits on a few ids as for a
    // language model; padding ids get the largest logits of all.
    std::vector<float> logits(R * V);
    std::vector<std::vector<int32_t>> boosted(R);
    for (int64_t r = 0; r < R; ++r) {
        float* l = logits.data() + r * V;
        for (int64_t i = 0; i < V_real; ++i) l[i] = static_cast<float>(1.5 * rng.normal());
        boosted[r] = rng.distinct(20, V_real);
        for (int32_t id : boosted[r]) l[id] += static_cast<float>(rng.uniform(8.0, 14.0));
        for (int64_t i = V_real; i < V; ++i) l[i] = 30.0f;
    }
    std::vector<RowSpec> specs;
    for (int64_t r = 0; r < R; ++r) specs.push_back(make_row(rng, R == 1 ? 1 : r, V_real, boosted[r]));

    // All id and bias arrays in one arena each; rows point into them (host or backend copy).
    std::vector<int32_t> ids;
    std::vector<float> bias;
    struct Off {
        int64_t bias_ids, bias_values, allowed, prompt, output;
    };
    std::vector<Off> offs;
    auto put = [&](const std::vector<int32_t>& v) {
        const auto o = static_cast<int64_t>(ids.size());
        ids.insert(ids.end(), v.begin(), v.end());
        return o;
    };
    for (const RowSpec& s : specs) {
        Off o;
        o.bias_ids = put(s.bias_ids);
        o.bias_values = static_cast<int64_t>(bias.size());
        bias.insert(bias.end(), s.bias_values.begin(), s.bias_values.end());
        o.allowed = put(s.allowed);
        o.prompt = put(s.prompt);
        o.output = put(s.output);
        offs.push_back(o);
    }
    ids.push_back(0);
    bias.push_back(0.0f);
    const float* d_logits = c.upload(logits);
    const int32_t* d_ids = c.upload(ids);
    const float* d_bias = c.upload(bias);
    auto rows_for = [&](const float* lg, const int32_t* id, const float* bs) {
        std::vector<ops::SampleRow> rows;
        for (int64_t r = 0; r < R; ++r) {
            const RowSpec& s = specs[r];
            ops::SampleRow row = s.row;
            row.logits = lg + r * V;
            row.bias_ids = id + offs[r].bias_ids;
            row.bias_values = bs + offs[r].bias_values;
            row.num_bias = static_cast<int64_t>(s.bias_ids.size());
            row.allowed_ids = id + offs[r].allowed;
            row.num_allowed = static_cast<int64_t>(s.allowed.size());
            row.prompt_ids = id + offs[r].prompt;
            row.num_prompt = static_cast<int64_t>(s.prompt.size());
            row.output_ids = id + offs[r].output;
            row.num_output = static_cast<int64_t>(s.output.size());
            rows.push_back(row);
        }
        return rows;
    };
    const std::vector<ops::SampleRow> host_rows = rows_for(logits.data(), ids.data(), bias.data());
    const std::vector<ops::SampleRow> dev_rows = rows_for(d_logits, d_ids, d_bias);
    const auto* d_rows = static_cast<const ops::SampleRow*>(
        c.upload_bytes(dev_rows.data(), static_cast<int64_t>(dev_rows.size() * sizeof(ops::SampleRow))));
    int32_t* d_tokens = c.poisoned<int32_t>(R);
    float* d_lp = c.poisoned<float>(R);
    int32_t* d_top = c.poisoned<int32_t>(R * kMaxTop);
    float* d_top_lp = c.poisoned<float>(R * kMaxTop);
    ops::SampleArgs args;
    args.rows = d_rows;
    args.num_rows = R;
    args.vocab_size = V;
    args.vocab_size_real = V_real;
    args.tokens = d_tokens;
    args.logprobs = d_lp;
    args.top_ids = d_top;
    args.top_logprobs = d_top_lp;
    args.max_top = kMaxTop;
    c.reserve(R, R, 1);
    c.backend().sample(args);
    const auto tokens = c.download(d_tokens, R);
    const auto lp = c.download(d_lp, R);
    const auto top = c.download(d_top, R * kMaxTop);
    const auto top_lp = c.download(d_top_lp, R * kMaxTop);

    const ref::TieEpsilon eps{c.tol("sample.tie_logit").rel, c.tol("sample.tie_prob").rel,
                              c.tol("sample.tie_cdf").rel};
    std::vector<int32_t> want_tokens(R);
    std::vector<bool> skip(R);
    int64_t drawn = 0, ties = 0;
    std::vector<float> lp_got;
    std::vector<double> lp_want;
    for (int64_t r = 0; r < R; ++r) {
        const ops::SampleRow& row = host_rows[r];
        const ref::SampleResult w = ref::sample_row(row, V_real, eps);
        want_tokens[r] = w.token;
        skip[r] = w.near_tie;
        if (row.target < 0) {
            ++drawn;
            ties += w.near_tie;
        }
        const int32_t tok = tokens[r];
        if (tok < 0 || tok >= V_real) {
            c.fail("row " + std::to_string(r) + ": token " + std::to_string(tok) +
                   " outside [0, vocab_size_real)");
            continue;
        }
        if (row.num_logprobs < 0) continue;
        // The row's logprob is the raw logprob of the token the backend returned.
        lp_got.push_back(lp[r]);
        lp_want.push_back(logits[r * V + tok] - w.lse);
        for (int64_t j = 0; j < row.num_logprobs; ++j) {
            const int32_t id = top[r * kMaxTop + j];
            if (id < 0 || id >= V_real ||
                std::find(top.begin() + r * kMaxTop, top.begin() + r * kMaxTop + j, id) !=
                    top.begin() + r * kMaxTop + j) {
                c.fail("row " + std::to_string(r) + ": top id " + std::to_string(id) + " at " +
                       std::to_string(j) + " is padding, out of range or repeated");
                continue;
            }
            // Position j holds the j-th largest raw logprob, and the id it names has that logprob.
            lp_got.push_back(top_lp[r * kMaxTop + j]);
            lp_want.push_back(w.top[j]);
            lp_got.push_back(static_cast<float>(logits[r * V + id] - w.lse));
            lp_want.push_back(w.top[j]);
        }
    }
    c.compare_ids("tokens", tokens, want_tokens, 1, skip);
    c.compare("logprobs", lp_got, lp_want, c.tol("sample.logprob"));
    c.near_ties(ties, drawn, 0.34);
    c.bench([&] { c.backend().sample(args); }, R * V_real * 4);
}

}  // namespace

void add_sample_cases(const Options& opt, std::vector<CaseDef>* out) {
    struct S {
        int64_t R, V, V_real;
        ShapeSet set;
    };
    for (const S& s : {S{1, 1024, 1000, ShapeSet::kEdge}, S{64, 1024, 1000, ShapeSet::kEdge},
                       S{64, 4097, 4097, ShapeSet::kEdge}, S{1, 201088, 200019, ShapeSet::kModel},
                       S{64, 201088, 200019, ShapeSet::kModel}}) {
        add_case(out, "sample",
                 shape_str({{"rows", std::to_string(s.R)},
                            {"V", std::to_string(s.V)},
                            {"V_real", std::to_string(s.V_real)}}),
                 s.set, [s](Case& c) { sample_case(c, s.R, s.V, s.V_real); });
    }
}

}  // namespace volt::kernels
