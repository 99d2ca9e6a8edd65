// Cases of the MoE ops (spec §3.6): router (top-k 1 and 4 over 4..128 experts, softmax over the k),
// the coarse moe_route (rmsnorm + router), experts and experts_residual (MXFP4 with random codes and
// scale bytes that give gate/up values of ~5 rms, so the clamp at 7 is reached; dense bf16/f16), the
// result accumulated into a residual of up to 1e5.
#include <cmath>
#include <string>

#include "tests/kernels/harness.h"

namespace volt::kernels {

namespace {

using ops::Format;

// ---- router / moe_route --------------------------------------------------------------------------------

// Compares ids (rank order) and weights on the rows whose reference margin is above the backend's
// decision epsilon; counts the others.
void check_routing(Case& c, const ref::Routed& want, const std::vector<int32_t>& ids,
                   const std::vector<float>& weights, int64_t T, int64_t k) {
    const double eps = c.tol("router.tie").rel;
    std::vector<bool> skip(T);
    int64_t skipped = 0;
    std::vector<float> wg;
    std::vector<double> ww;
    for (int64_t t = 0; t < T; ++t) {
        skip[t] = want.margin[t] <= eps;
        skipped += skip[t];
        if (skip[t]) continue;
        for (int64_t j = 0; j < k; ++j) {
            wg.push_back(weights[t * k + j]);
            ww.push_back(want.weights[t * k + j]);
        }
    }
    c.compare_ids("expert_ids", ids, want.ids, k, skip);
    c.compare("expert_weights", wg, ww, c.tol("router.weights"));
    c.near_ties(skipped, T, 0.25);
}

void router_case(Case& c, int64_t T, int64_t H, int64_t E, int64_t k) {
    Rng& rng = c.rng();
    const std::vector<float> x = rng.normal_f32(T * H, 1.0);
    const HostTensor w = random_dense(rng, Format::kBf16, E * H, 2.0 / std::sqrt(static_cast<double>(H)));
    const HostTensor b = random_dense(rng, Format::kBf16, E, 0.5);
    ops::DenseWeight host = dense_view(Format::kBf16, w.data(), E, H, {Format::kBf16, b.data(), E});
    ops::DenseWeight pw;
    if (!c.place(host, ops::WeightRole::kRouter, &pw)) return;
    const float* d_x = c.upload(x);
    int32_t* d_ids = c.poisoned<int32_t>(T * k);
    float* d_w = c.poisoned<float>(T * k);
    c.reserve(T, 1, T);
    auto run = [&] { c.backend().router({d_x, pw, d_ids, d_w, T, k}); };
    run();
    check_routing(c, ref::router(to_double(x), T, ref::matrix_of(host), host.b, k), c.download(d_ids, T * k),
                  c.download(d_w, T * k), T, k);
    c.bench(run, E * H * 2 + T * H * 4 + T * k * 8);
}

void moe_route_case(Case& c, int64_t T, int64_t H, int64_t E, int64_t k, double x_rms) {
    Rng& rng = c.rng();
    const std::vector<float> x = rng.normal_f32(T * H, x_rms);
    const HostTensor norm = random_dense(rng, Format::kBf16, H, 0.3, 1.0);
    const HostTensor w = random_dense(rng, Format::kBf16, E * H, 2.0 / std::sqrt(static_cast<double>(H)));
    const HostTensor b = random_dense(rng, Format::kBf16, E, 0.5);
    ops::DenseWeight host = dense_view(Format::kBf16, w.data(), E, H, {Format::kBf16, b.data(), E});
    const ops::VectorWeight norm_host{Format::kBf16, norm.data(), H};
    ops::DenseWeight pw;
    ops::VectorWeight pn;
    if (!c.place(host, ops::WeightRole::kRouter, &pw) || !c.place(norm_host, &pn)) return;
    const float* d_x = c.upload(x);
    float* d_h = c.poisoned<float>(T * H);
    int32_t* d_ids = c.poisoned<int32_t>(T * k);
    float* d_w = c.poisoned<float>(T * k);
    const float eps = 1e-5f;
    c.reserve(T, 1, T);
    const ops::MoeRouteArgs args{d_x, pn, pw, d_h, d_ids, d_w, T, H, k, eps};
    c.backend().moe_route(args);
    const auto h = ref::rmsnorm(to_double(x), T, H, norm_host, eps);
    c.compare("h", c.download(d_h, T * H), h, c.tol("moe_route.h"));
    check_routing(c, ref::router(h, T, ref::matrix_of(host), host.b, k), c.download(d_ids, T * k),
                  c.download(d_w, T * k), T, k);
    c.bench([&] { c.backend().moe_route(args); }, E * H * 2 + T * H * 8 + T * k * 8);
}

// ---- experts -------------------------------------------------------------------------------------------

struct ExpertsShape {
    int64_t T, H, I, E, k;
    Format f;
    double out_rms;
    int64_t P = 0;  // prompt rows (ops.h: a GPU computes them on tensor cores)
};

// One projection of E experts, [E, out, in]: MXFP4 with random codes and scale bytes around a base chosen
// for a row rms of `row_rms` on unit inputs (codes have rms 2.93), or dense values of that rms.
struct HostExperts {
    std::vector<uint8_t> blocks, scales;
    HostTensor dense, bias;
    ops::ExpertWeights view;
};
HostExperts random_experts(Rng& rng, Format f, int64_t E, int64_t out, int64_t in, double row_rms,
                           double bias_sigma) {
    HostExperts x;
    const double elem_rms = row_rms / std::sqrt(static_cast<double>(in));
    x.view.format = f;
    x.view.num_experts = E;
    x.view.out = out;
    x.view.in = in;
    if (f == Format::kMxfp4) {
        x.blocks.resize(E * out * in / 2);
        rng.bytes(x.blocks.data(), static_cast<int64_t>(x.blocks.size()));
        const auto base = static_cast<int>(127 + std::lround(std::log2(elem_rms / 2.93)));
        x.scales.resize(E * out * in / 32);
        uint64_t bits = 0;
        for (size_t i = 0; i < x.scales.size(); ++i) {
            if (i % 32 == 0) bits = rng.next();
            x.scales[i] = static_cast<uint8_t>(base - 1 + static_cast<int>((bits >> (2 * (i % 32))) & 3) % 3);
        }
        x.view.blocks = x.blocks.data();
        x.view.scales = x.scales.data();
    } else {
        x.dense = random_dense(rng, f, E * out * in, elem_rms);
        x.view.w = x.dense.data();
    }
    x.bias = random_dense(rng, Format::kBf16, E * out, bias_sigma);
    x.view.bias = {Format::kBf16, x.bias.data(), E * out};
    return x;
}

int64_t expert_bytes(const ops::ExpertWeights& w) {
    const int64_t n = w.out * w.in;
    return (w.format == Format::kMxfp4 ? n / 2 + n / 32 : n * format_bytes(w.format)) + w.out * 2;
}

void experts_case(Case& c, const ExpertsShape& s, bool coarse) {
    Rng& rng = c.rng();
    const int64_t T = s.T, H = s.H, I = s.I, k = s.k;
    // gate/up ~5 rms (|g| > 7 in ~15% of units); down sized for outputs of ~2 from SwiGLU values of ~15.
    const HostExperts gu = random_experts(rng, s.f, s.E, 2 * I, H, 5.0, 1.0);
    const HostExperts dn = random_experts(rng, s.f, s.E, H, I, 2.0 / 15.0, 0.5);
    const std::vector<float> x = rng.normal_f32(T * H, 1.0), out0 = rng.normal_f32(T * H, s.out_rms);
    std::vector<int32_t> ids;
    std::vector<float> weights;
    std::vector<bool> used(s.E, false);
    for (int64_t t = 0; t < T; ++t) {
        const auto pick = rng.distinct(k, s.E);
        std::vector<double> l(k);
        double sum = 0.0;
        for (auto& v : l) sum += (v = std::exp(rng.normal()));
        for (int64_t j = 0; j < k; ++j) {
            ids.push_back(pick[j]);
            weights.push_back(static_cast<float>(l[j] / sum));
            used[pick[j]] = true;
        }
    }
    ops::ExpertWeights pgu, pdn;
    if (!c.place(gu.view, &pgu) || !c.place(dn.view, &pdn)) return;
    const float* d_x = c.upload(x);
    const int32_t* d_ids = c.upload(ids);
    const float* d_w = c.upload(weights);
    float* d_out = c.upload(out0);
    c.reserve(T, 1, T);
    const ops::ExpertsArgs args{d_x, d_ids, d_w, pgu, pdn, d_out, T, k, 7.0f, 1.702f, s.P};
    if (coarse) {
        c.backend().experts_residual(args);
    } else {
        c.backend().experts(args);
    }
    const auto r = ref::experts(to_double(x), T, ids.data(), weights.data(), k, gu.view, dn.view, 7.0, 1.702,
                                c.inject());
    std::vector<double> want(T * H);
    for (int64_t i = 0; i < T * H; ++i) want[i] = out0[i] + r.branch[i];
    c.compare_residual("out", c.download(d_out, T * H), want, r.branch, c.tol("experts"));
    c.note("clamped: gate " + num(100.0 * r.gate_clamped / r.units) + "%, up " +
           num(100.0 * r.up_clamped / r.units) + "%");
    if (r.units >= 256 && (r.gate_clamped == 0 || r.up_clamped == 0))
        c.fail("the inputs never reach the SwiGLU clamp: a lost clamp would pass");
    int64_t bytes = T * H * 12;
    for (int64_t e = 0; e < s.E; ++e)
        if (used[e]) bytes += expert_bytes(gu.view) + expert_bytes(dn.view);
    c.bench([&] { coarse ? c.backend().experts_residual(args) : c.backend().experts(args); }, bytes);
}

}  // namespace

void add_moe_cases(const Options& opt, std::vector<CaseDef>* out) {
    const auto E = ShapeSet::kEdge, M = ShapeSet::kModel;
    auto n = [](int64_t v) { return std::to_string(v); };

    struct Route {
        int64_t T, H, E, k;
        ShapeSet set;
    };
    for (const Route& r :
         {Route{1, 64, 4, 1, E}, Route{2, 96, 8, 4, E}, Route{31, 2880, 32, 4, E}, Route{32, 2880, 128, 4, E},
          Route{33, 64, 128, 4, E}, Route{255, 96, 128, 1, E}, Route{257, 64, 4, 4, E},
          Route{4, 2880, 32, 4, M}, Route{4, 2880, 128, 4, M}, Route{64, 2880, 128, 4, M}}) {
        add_case(out, "router", shape_str({{"T", n(r.T)}, {"H", n(r.H)}, {"E", n(r.E)}, {"k", n(r.k)}}),
                 r.set, [r](Case& c) { router_case(c, r.T, r.H, r.E, r.k); });
    }
    struct Moe {
        int64_t T, H, E, k;
        double x_rms;
        ShapeSet set;
    };
    for (const Moe& m : {Moe{1, 2880, 32, 4, 1e5, E}, Moe{33, 96, 128, 4, 1.0, E}, Moe{257, 64, 8, 1, 8.0, E},
                         Moe{4, 2880, 128, 4, 1e5, M}}) {
        add_case(
            out, "moe_route",
            shape_str({{"T", n(m.T)}, {"H", n(m.H)}, {"E", n(m.E)}, {"k", n(m.k)}, {"x_rms", num(m.x_rms)}}),
            m.set, [m](Case& c) { moe_route_case(c, m.T, m.H, m.E, m.k, m.x_rms); });
    }

    struct Exp {
        const char* op;
        ExpertsShape s;
        ShapeSet set;
    };
    const Format mx = Format::kMxfp4, bf = Format::kBf16, f16 = Format::kF16;
    for (const Exp& e : {
             Exp{"experts", {1, 64, 64, 4, 1, mx, 1.0}, E},
             Exp{"experts", {2, 96, 32, 8, 4, mx, 1.0}, E},
             Exp{"experts", {31, 64, 96, 32, 4, bf, 1.0}, E},
             Exp{"experts", {32, 96, 64, 128, 4, mx, 1.0}, E},
             Exp{"experts", {33, 64, 64, 128, 1, mx, 1e5}, E},
             Exp{"experts", {255, 64, 32, 4, 4, mx, 1.0}, E},
             Exp{"experts", {257, 96, 96, 32, 4, bf, 3e4}, E},
             Exp{"experts", {2, 2880, 2880, 8, 4, mx, 1e5}, E},
             Exp{"experts", {2, 2880, 256, 8, 4, f16, 1.0}, E},
             Exp{"experts_residual", {1, 2880, 2880, 8, 4, mx, 1e5}, E},
             Exp{"experts_residual", {33, 96, 64, 32, 4, mx, 1.0}, E},
             Exp{"experts_residual", {257, 64, 32, 128, 1, bf, 1.0}, E},
             Exp{"experts", {4, 2880, 2880, 32, 4, mx, 1e5}, M},
             Exp{"experts_residual", {4, 2880, 2880, 32, 4, mx, 1e5}, M},
             Exp{"experts_residual", {2, 2880, 2880, 128, 4, mx, 1e5}, M},
             // Prompt rows (tensor-core grouped GEMM on sm_80+), alone and with generated rows after them.
             Exp{"experts_residual", {96, 2880, 2880, 32, 4, mx, 1e5, 80}, E},
             Exp{"experts_residual", {300, 96, 64, 32, 4, mx, 1.0, 300}, E},
             Exp{"experts_residual", {130, 64, 96, 4, 2, mx, 1.0, 129}, E},
             Exp{"experts_residual", {128, 2880, 2880, 32, 4, mx, 1.0, 128}, M},
             Exp{"experts_residual", {128, 2880, 2880, 128, 4, mx, 1.0, 128}, M},
         }) {
        const bool coarse = std::string(e.op) == "experts_residual";
        add_case(out, e.op,
                 shape_str({{"T", n(e.s.T)},
                            {"H", n(e.s.H)},
                            {"I", n(e.s.I)},
                            {"E", n(e.s.E)},
                            {"k", n(e.s.k)},
                            {"w", format_str(e.s.f)},
                            {"out_rms", num(e.s.out_rms)}}) +
                     (e.s.P > 0 ? ",P=" + n(e.s.P) : ""),
                 e.set, [s = e.s, coarse](Case& c) { experts_case(c, s, coarse); });
    }
}

}  // namespace volt::kernels
