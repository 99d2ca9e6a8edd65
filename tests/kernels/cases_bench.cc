// The benchmark shapes (--shapes bench, run with --bench; issue 14): the decode ops of gpt-oss-20b and
// -120b, each rotating over enough copies of its data that the working set is >= 4x the H200's L2
// (~60 MB: kMinWorkingSet = 256 MB), so a BENCH line measures device memory, not L2. Every case is also
// checked against the reference on its first copy where the double reference takes under a few seconds
// (noted otherwise). Bytes per call are the least the op must move (weights of the experts touched, KV of
// the keys in range); the JSON line carries them with the read-bandwidth reference of the same run.
#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "tests/kernels/harness.h"

namespace volt::kernels {

namespace {

using ops::Format;

constexpr int64_t kMinWorkingSet = int64_t{256} << 20;

int copies_for(int64_t bytes_per_call) {
    return static_cast<int>(std::max<int64_t>(1, (kMinWorkingSet + bytes_per_call - 1) / bytes_per_call));
}

// ---- experts: all E experts of one layer placed, each call routes to other experts -------------------

struct MxHost {
    std::vector<uint8_t> blocks, scales;
    HostTensor bias;
    ops::ExpertWeights view;
};
// As cases_moe.cc random_experts (MXFP4): random codes, scale bytes around the row rms asked for.
MxHost random_mx(Rng& rng, int64_t E, int64_t out, int64_t in, double row_rms, double bias_sigma) {
    MxHost x;
    x.view.format = Format::kMxfp4;
    x.view.num_experts = E;
    x.view.out = out;
    x.view.in = in;
    x.blocks.resize(E * out * in / 2);
    rng.bytes(x.blocks.data(), static_cast<int64_t>(x.blocks.size()));
    const double elem_rms = row_rms / std::sqrt(static_cast<double>(in));
    const auto base = static_cast<int>(127 + std::lround(std::log2(elem_rms / 2.93)));
    x.scales.resize(E * out * in / 32);
    uint64_t bits = 0;
    for (size_t i = 0; i < x.scales.size(); ++i) {
        if (i % 32 == 0) bits = rng.next();
        x.scales[i] = static_cast<uint8_t>(base - 1 + static_cast<int>((bits >> (2 * (i % 32))) & 3) % 3);
    }
    x.view.blocks = x.blocks.data();
    x.view.scales = x.scales.data();
    x.bias = random_dense(rng, Format::kBf16, E * out, bias_sigma);
    x.view.bias = {Format::kBf16, x.bias.data(), E * out};
    return x;
}

int64_t mx_expert_bytes(const ops::ExpertWeights& w) {
    return w.out * w.in / 2 + w.out * w.in / 32 + w.out * 4;
}

void experts_bench_case(Case& c, int64_t T, int64_t E, const char* model) {
    Rng& rng = c.rng();
    const int64_t H = 2880, I = 2880, k = 4;
    const MxHost gu = random_mx(rng, E, 2 * I, H, 5.0, 1.0);
    const MxHost dn = random_mx(rng, E, H, I, 2.0 / 15.0, 0.5);
    ops::ExpertWeights pgu, pdn;
    if (!c.place(gu.view, &pgu) || !c.place(dn.view, &pdn)) return;
    const int64_t per_expert = mx_expert_bytes(gu.view) + mx_expert_bytes(dn.view);
    // Routing sets: batch 1 walks the experts in groups of k (every expert once over E/k calls); larger
    // batches route each token to k distinct random experts (a random router spreads tokens evenly: the
    // worst case for weight reuse) with as many sets as the working set needs.
    std::vector<std::vector<int32_t>> sets;
    std::vector<std::vector<float>> wsets;
    double distinct_sum = 0.0;
    const int n_sets =
        T == 1 ? static_cast<int>(E / k) : std::max(8, copies_for(per_expert * std::min(E, T * k)));
    for (int s = 0; s < n_sets; ++s) {
        std::vector<int32_t> ids;
        std::vector<float> wts;
        std::set<int32_t> used;
        for (int64_t t = 0; t < T; ++t) {
            std::vector<int32_t> pick;
            if (T == 1) {
                for (int64_t j = 0; j < k; ++j) pick.push_back(static_cast<int32_t>((s * k + j) % E));
            } else {
                pick = rng.distinct(k, E);
            }
            double sum = 0.0;
            std::vector<double> l(k);
            for (auto& v : l) sum += (v = std::exp(rng.normal()));
            for (int64_t j = 0; j < k; ++j) {
                ids.push_back(pick[j]);
                wts.push_back(static_cast<float>(l[j] / sum));
                used.insert(pick[j]);
            }
        }
        distinct_sum += static_cast<double>(used.size());
        sets.push_back(std::move(ids));
        wsets.push_back(std::move(wts));
    }
    const double distinct = distinct_sum / n_sets;
    const std::vector<float> x = rng.normal_f32(T * H, 1.0), out0 = rng.normal_f32(T * H, 1.0);
    const float* d_x = c.upload(x);
    float* d_out = c.upload(out0);
    std::vector<const int32_t*> d_ids;
    std::vector<const float*> d_w;
    for (int s = 0; s < n_sets; ++s) {
        d_ids.push_back(c.upload(sets[s]));
        d_w.push_back(c.upload(wsets[s]));
    }
    c.reserve(T, 1, T);
    auto args = [&](int s) {
        return ops::ExpertsArgs{d_x, d_ids[s], d_w[s], pgu, pdn, d_out, T, k, 7.0f, 1.702f};
    };
    c.backend().experts_residual(args(0));
    if (T <= 8) {
        const auto r = ref::experts(to_double(x), T, sets[0].data(), wsets[0].data(), k, gu.view, dn.view,
                                    7.0, 1.702, c.inject());
        std::vector<double> want(T * H);
        for (int64_t i = 0; i < T * H; ++i) want[i] = out0[i] + r.branch[i];
        c.compare_residual("out", c.download(d_out, T * H), want, r.branch, c.tol("experts"));
    } else {
        c.note("not compared here (the double reference of " + std::to_string(T * k) +
               " pairs is slow; the edge and model cases check this op)");
    }
    char d[32];
    std::snprintf(d, sizeof d, "%.2f", distinct);
    c.note("distinct experts per call " + std::string(d) + " of " + std::to_string(E));
    c.bench_info("model", model);
    c.bench_info("distinct_experts", d);
    c.bench_info("routing", T == 1 ? "round-robin groups of 4" : "uniform random top-4 (worst case)");
    const auto bytes = static_cast<int64_t>(distinct * static_cast<double>(per_expert)) + T * H * 12;
    c.bench_rotating([&](int s) { c.backend().experts_residual(args(s)); }, n_sets, bytes);
}

// ---- dense GEMV: copies of one weight ------------------------------------------------------------------

// f: kBf16, or the integer formats (issue 21: kInt8, kInt4 with `group`), whose bytes per call are the
// format's (AWQ: codes, zero words and f16 scales; the CUDA layout's scale|zero word per (row, group) is 4
// bytes where AWQ's are 2.5, +1.5 / 32 bytes per group of 64 codes).
void linear_bench_case(Case& c, int64_t T, int64_t in, int64_t out, const char* what,
                       Format f = Format::kBf16, int64_t group = 0) {
    Rng& rng = c.rng();
    const bool int_w = f == Format::kInt8 || f == Format::kInt4;
    const HostTensor w =
        random_dense(rng, Format::kBf16, int_w ? 1 : out * in, 1.0 / std::sqrt(static_cast<double>(in)));
    const HostTensor b = random_dense(rng, Format::kBf16, out, 0.5);
    IntWeight iw;
    if (int_w) iw = random_int_weight(rng, f, out, in, group);
    ops::DenseWeight host = dense_view(Format::kBf16, w.data(), out, in, {Format::kBf16, b.data(), out});
    if (int_w) {
        host = iw.view;
        host.b = {Format::kBf16, b.data(), out};
    }
    const int64_t weight_bytes = int_w ? int_weight_bytes(iw) : out * in * 2;
    const int copies = copies_for(weight_bytes);
    std::vector<ops::DenseWeight> placed(copies);
    for (int i = 0; i < copies; ++i)
        if (!c.place(host, ops::WeightRole::kAttention, &placed[i])) return;
    const std::vector<float> x = rng.normal_f32(T * in, 1.0);
    const float* d_x = c.upload(x);
    float* y = c.poisoned<float>(T * out);
    c.reserve(T, 1, T);
    c.backend().linear({d_x, placed[0], y, T});
    c.compare("y", c.download(y, T * out), ref::linear(to_double(x), T, ref::matrix_of(host), host.b),
              c.tol(int_w ? "linear." + format_str(f) : std::string("linear")));
    c.bench_info("weight", what);
    c.bench_info("placed_format", format_str(placed[0].format));
    c.bench_rotating(
        [&](int i) {
            c.backend().linear({d_x, placed[i], y, T});
        },
        copies, (int_w ? weight_bytes : out * in * format_bytes(placed[0].format)) + T * (in + out) * 4);
}

void lm_head_bench_case(Case& c, int64_t R, Format f = Format::kBf16, int64_t group = 0) {
    Rng& rng = c.rng();
    const int64_t H = 2880, V = 201088, T = R;
    const bool int_w = f == Format::kInt8 || f == Format::kInt4;
    const std::vector<float> x = rng.normal_f32(T * H, 100.0);
    const HostTensor norm = random_dense(rng, Format::kBf16, H, 0.3, 1.0);
    const HostTensor w =
        random_dense(rng, Format::kBf16, int_w ? 1 : V * H, 1.0 / std::sqrt(static_cast<double>(H)));
    IntWeight iw;
    if (int_w) iw = random_int_weight(rng, f, V, H, group);
    std::vector<int32_t> rows(R);
    for (int64_t r = 0; r < R; ++r) rows[r] = static_cast<int32_t>(r);
    const ops::DenseWeight host = int_w ? iw.view : dense_view(Format::kBf16, w.data(), V, H);
    const ops::VectorWeight norm_host{Format::kBf16, norm.data(), H};
    ops::DenseWeight pw;
    ops::VectorWeight pn;
    if (!c.place(host, ops::WeightRole::kLmHead, &pw) || !c.place(norm_host, &pn)) return;
    const float* d_x = c.upload(x);
    const int32_t* d_rows = c.upload(rows);
    float* d_h = c.poisoned<float>(R * H);
    float* d_logits = c.poisoned<float>(R * V);
    c.reserve(T, 1, T);
    const ops::FinalLogitsArgs args{d_x, pn, pw, d_rows, R, H, 1e-5f, d_h, d_logits};
    c.backend().final_logits(args);
    if (R == 1) {
        const auto h = ref::rmsnorm(to_double(x), R, H, norm_host, 1e-5f);
        c.compare("logits", c.download(d_logits, R * V), ref::linear(h, R, ref::matrix_of(host), host.b),
                  c.tol(int_w ? "final_logits." + format_str(f) : std::string("final_logits")));
    } else {
        c.note("not compared here (64 x 579M double products); final_logits' other cases check it");
    }
    c.bench_info("placed_format", format_str(pw.format));
    c.bench_rotating([&](int) { c.backend().final_logits(args); }, 1,
                     (int_w ? int_weight_bytes(iw) : V * H * format_bytes(pw.format)) + R * (H + V) * 4);
}

}  // namespace

void add_bench_cases(const Options& opt, std::vector<CaseDef>* out) {
    (void)opt;
    const auto B = ShapeSet::kBench;
    auto n = [](int64_t v) { return std::to_string(v); };
    for (const auto& [model, E] : {std::pair{"20b", int64_t{32}}, std::pair{"120b", int64_t{128}}}) {
        for (int64_t T : {1, 8, 32, 128}) {
            add_case(out, "experts_residual",
                     shape_str({{"model", model}, {"T", n(T)}, {"E", n(E)}, {"k", "4"}, {"w", "mxfp4"}}), B,
                     [T, E, model](Case& c) { experts_bench_case(c, T, E, model); });
        }
    }
    struct Lin {
        const char* what;
        int64_t in, out;
    };
    for (const Lin& l : {Lin{"qkv", 2880, 5120}, Lin{"o_proj", 4096, 2880}}) {
        for (int64_t T : {1, 8, 64}) {
            add_case(
                out, "linear",
                shape_str({{"what", l.what}, {"T", n(T)}, {"in", n(l.in)}, {"out", n(l.out)}, {"w", "bf16"}}),
                B, [l, T](Case& c) { linear_bench_case(c, T, l.in, l.out, l.what); });
        }
    }
    for (int64_t R : {1, 64}) {
        add_case(out, "final_logits",
                 shape_str({{"what", "lm_head"}, {"rows", n(R)}, {"H", "2880"}, {"V", "201088"}}), B,
                 [R](Case& c) { lm_head_bench_case(c, R); });
    }
    // Integer weights (issue 21): INT8 and AWQ int4 in groups of 64 (gpt-oss's hidden 2880 is not a
    // multiple of 128: docs/quantization.md) at the same shapes.
    struct IntW {
        Format f;
        int64_t group;
    };
    for (const IntW& iw : {IntW{Format::kInt8, 0}, IntW{Format::kInt4, 64}}) {
        for (const Lin& l : {Lin{"qkv", 2880, 5120}, Lin{"o_proj", 4096, 2880}}) {
            for (int64_t T : {1, 8, 64}) {
                add_case(
                    out, "linear",
                    shape_str({{"what", l.what},
                               {"T", n(T)},
                               {"in", n(l.in)},
                               {"out", n(l.out)},
                               {"w", format_str(iw.f)},
                               {"group", n(iw.group)}}),
                    B, [l, T, iw](Case& c) { linear_bench_case(c, T, l.in, l.out, l.what, iw.f, iw.group); });
            }
        }
        for (int64_t R : {1, 64}) {
            add_case(out, "final_logits",
                     shape_str({{"what", "lm_head"},
                                {"rows", n(R)},
                                {"H", "2880"},
                                {"V", "201088"},
                                {"w", format_str(iw.f)},
                                {"group", n(iw.group)}}),
                     B, [R, iw](Case& c) { lm_head_bench_case(c, R, iw.f, iw.group); });
        }
    }
}

}  // namespace volt::kernels
