// Cases of the dense ops: embedding (spec §3.1), rmsnorm (§3.3), linear (§3 y = W x + b), add, and the
// coarse o_proj_residual (§3.4 step 7 + the residual of §3.2) and final_logits (§3.7). Residual inputs
// reach 1e5 where the op must keep f32 (rmsnorm's input, the residual adds, final_logits' norm).
#include <algorithm>
#include <cmath>
#include <string>

#include "core/dtype.h"
#include "tests/kernels/harness.h"

namespace volt::kernels {

namespace {

using ops::Format;

std::string fmt(Format f) { return format_str(f); }

// ---- embedding -----------------------------------------------------------------------------------------

void embedding_case(Case& c, int64_t T, int64_t V, int64_t H, Format f) {
    Rng& rng = c.rng();
    const HostTensor table = random_dense(rng, f, V * H, 0.5);
    std::vector<int32_t> ids(T);
    for (auto& id : ids) id = static_cast<int32_t>(rng.below(V));
    ids[0] = static_cast<int32_t>(V - 1);  // the last row of the table
    if (T > 1) ids[T - 1] = 0;
    ops::DenseWeight host = dense_view(f, table.data(), V, H);
    ops::DenseWeight w;
    if (!c.place(host, ops::WeightRole::kEmbedding, &w)) return;
    const int32_t* d_ids = c.upload(ids);
    float* out = c.poisoned<float>(T * H);
    c.reserve(T, 1, T);
    auto run = [&] { c.backend().embedding({d_ids, w, out, T}); };
    run();
    const auto got = c.download(out, T * H);
    std::vector<double> want(T * H);
    for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < H; ++i) want[t * H + i] = ref::decode(f, table.data(), ids[t] * H + i);
    c.compare("out", got, want, c.tol("embedding"));
    c.bench(run, T * H * (format_bytes(f) + 4) + T * 4);
}

// ---- rmsnorm -------------------------------------------------------------------------------------------

enum class NormVariant { kPlain, kRows, kInPlace };

void rmsnorm_case(Case& c, int64_t T, int64_t H, Format wf, NormVariant variant, double x_rms) {
    Rng& rng = c.rng();
    const std::vector<float> x = rng.normal_f32(T * H, x_rms);
    const HostTensor w = random_dense(rng, wf, H, 0.3, 1.0);
    std::vector<int32_t> rows;
    if (variant == NormVariant::kRows) {
        for (int64_t r = 0; r < (T + 1) / 2; ++r) rows.push_back(static_cast<int32_t>(rng.below(T)));
        rows.back() = static_cast<int32_t>(T - 1);
    }
    const int64_t R = variant == NormVariant::kRows ? static_cast<int64_t>(rows.size()) : T;
    ops::VectorWeight wv;
    if (!c.place(ops::VectorWeight{wf, w.data(), H}, &wv)) return;
    float* d_x = c.upload(x);
    const int32_t* d_rows = rows.empty() ? nullptr : c.upload(rows);
    float* y = variant == NormVariant::kInPlace ? d_x : c.poisoned<float>(R * H);
    const float eps = 1e-5f;
    c.reserve(T, 1, T);
    c.backend().rmsnorm({d_x, wv, y, R, H, eps, d_rows});
    const auto got = c.download(y, R * H);
    std::vector<double> xin(R * H);
    for (int64_t r = 0; r < R; ++r)
        for (int64_t i = 0; i < H; ++i) xin[r * H + i] = x[(rows.empty() ? r : rows[r]) * H + i];
    c.compare("y", got, ref::rmsnorm(xin, R, H, ops::VectorWeight{wf, w.data(), H}, eps), c.tol("rmsnorm"));
    if (variant != NormVariant::kInPlace) {
        c.bench(
            [&] {
                c.backend().rmsnorm({d_x, wv, y, R, H, eps, d_rows});
            },
            R * H * 8 + H * format_bytes(wf));
    }
}

// ---- linear --------------------------------------------------------------------------------------------

void linear_case(Case& c, int64_t T, int64_t in, int64_t out, Format f, bool bias, int64_t num_rows) {
    Rng& rng = c.rng();
    const std::vector<float> x = rng.normal_f32(T * in, 1.0);
    const HostTensor w = random_dense(rng, f, out * in, 1.0 / std::sqrt(static_cast<double>(in)));
    const HostTensor b = random_dense(rng, Format::kBf16, out, 0.5);
    std::vector<int32_t> rows;
    for (int64_t r = 0; r < num_rows; ++r) rows.push_back(static_cast<int32_t>(rng.below(T)));
    const int64_t R = num_rows > 0 ? num_rows : T;
    ops::DenseWeight host = dense_view(f, w.data(), out, in);
    if (bias) host.b = {Format::kBf16, b.data(), out};
    ops::DenseWeight pw;
    if (!c.place(host, ops::WeightRole::kAttention, &pw)) return;
    const float* d_x = c.upload(x);
    const int32_t* d_rows = rows.empty() ? nullptr : c.upload(rows);
    float* y = c.poisoned<float>(R * out);
    c.reserve(T, 1, T);
    auto run = [&] { c.backend().linear({d_x, pw, y, T, d_rows, num_rows}); };
    run();
    const auto got = c.download(y, R * out);
    std::vector<double> xin(R * in);
    for (int64_t r = 0; r < R; ++r)
        for (int64_t i = 0; i < in; ++i) xin[r * in + i] = x[(rows.empty() ? r : rows[r]) * in + i];
    c.compare("y", got, ref::linear(xin, R, ref::matrix_of(host), host.b), c.tol("linear"));
    c.bench(run, out * in * format_bytes(f) + R * (in + out) * 4 + (bias ? out * 2 : 0));
}

// ---- integer weights (docs/quantization.md): linear and final_logits over INT8 and AWQ gemm ----------

}  // namespace

IntWeight random_int_weight(Rng& rng, Format f, int64_t out, int64_t in, int64_t group) {
    IntWeight w;
    const double sigma = 1.0 / std::sqrt(static_cast<double>(in));
    w.view.format = f;
    w.view.out = out;
    w.view.in = in;
    if (f == Format::kInt8) {
        w.q8.resize(out * in);
        for (auto& q : w.q8) q = static_cast<int8_t>(static_cast<int64_t>(rng.below(255)) - 127);
        w.scales.resize(out);
        for (auto& sc : w.scales) sc = f32_to_f16(static_cast<float>(sigma / 73.0 * rng.uniform(0.5, 1.5)));
        w.view.w = w.q8.data();
    } else {
        w.qweight.resize(in * out / 8);
        w.qzeros.resize(in / group * out / 8);
        for (auto& q : w.qweight) q = static_cast<uint32_t>(rng.next());
        for (auto& z : w.qzeros) z = static_cast<uint32_t>(rng.next());
        w.scales.resize(in / group * out);
        for (auto& sc : w.scales) sc = f32_to_f16(static_cast<float>(sigma / 6.0 * rng.uniform(0.5, 1.5)));
        w.view.w = w.qweight.data();
        w.view.zeros = w.qzeros.data();
        w.view.group_size = group;
    }
    w.view.scales = w.scales.data();
    return w;
}

int64_t int_weight_bytes(const IntWeight& w) {
    return static_cast<int64_t>(w.q8.size() + 4 * (w.qweight.size() + w.qzeros.size()) + 2 * w.scales.size());
}

namespace {

void int_linear_case(Case& c, int64_t T, int64_t in, int64_t out, Format f, int64_t group, bool bias,
                     int64_t num_rows) {
    Rng& rng = c.rng();
    const std::vector<float> x = rng.normal_f32(T * in, 1.0);
    IntWeight w = random_int_weight(rng, f, out, in, group);
    const HostTensor b = random_dense(rng, Format::kBf16, out, 0.5);
    std::vector<int32_t> rows;
    for (int64_t r = 0; r < num_rows; ++r) rows.push_back(static_cast<int32_t>(rng.below(T)));
    const int64_t R = num_rows > 0 ? num_rows : T;
    if (bias) w.view.b = {Format::kBf16, b.data(), out};
    ops::DenseWeight pw;
    if (!c.place(w.view, ops::WeightRole::kAttention, &pw)) return;
    const float* d_x = c.upload(x);
    const int32_t* d_rows = rows.empty() ? nullptr : c.upload(rows);
    float* y = c.poisoned<float>(R * out);
    c.reserve(T, 1, T);
    auto run = [&] { c.backend().linear({d_x, pw, y, T, d_rows, num_rows}); };
    run();
    const auto got = c.download(y, R * out);
    std::vector<double> xin(R * in);
    for (int64_t r = 0; r < R; ++r)
        for (int64_t i = 0; i < in; ++i) xin[r * in + i] = x[(rows.empty() ? r : rows[r]) * in + i];
    c.compare("y", got, ref::linear(xin, R, ref::matrix_of(w.view), w.view.b), c.tol("linear." + fmt(f)));
    c.bench(run, int_weight_bytes(w) + R * (in + out) * 4 + (bias ? out * 2 : 0));
}

// o_proj_residual over integer weights: x += Wo attn + bo (the fused GEMV + residual on a GPU).
void int_o_proj_case(Case& c, int64_t T, int64_t in, int64_t H, Format f, int64_t group, double x_rms,
                     bool keep, int64_t P) {
    Rng& rng = c.rng();
    const std::vector<float> attn = rng.normal_f32(T * in, 1.0), x0 = rng.normal_f32(T * H, x_rms);
    IntWeight w = random_int_weight(rng, f, H, in, group);
    const HostTensor b = random_dense(rng, Format::kBf16, H, 0.5);
    w.view.b = {Format::kBf16, b.data(), H};
    ops::DenseWeight pw;
    if (!c.place(w.view, ops::WeightRole::kAttention, &pw)) return;
    const float* d_attn = c.upload(attn);
    float* d_x = c.upload(x0);
    float* d_out = c.poisoned<float>(T * H);
    c.reserve(T, 1, T);
    c.backend().o_proj_residual({d_attn, pw, d_x, d_out, T, keep, P});
    const auto got_x = c.download(d_x, T * H);
    const auto branch = ref::linear(to_double(attn), T, ref::matrix_of(w.view), w.view.b);
    std::vector<double> want(T * H);
    for (int64_t i = 0; i < T * H; ++i) want[i] = x0[i] + branch[i];
    c.compare_residual("x", got_x, want, branch, c.tol("o_proj_residual"));
    if (keep) c.compare("out", c.download(d_out, T * H), branch, c.tol("o_proj_residual"));
    c.bench(
        [&] {
            c.backend().o_proj_residual({d_attn, pw, d_x, d_out, T, keep, P});
        },
        int_weight_bytes(w) + T * (in + 2 * H) * 4);
}

void int_final_logits_case(Case& c, int64_t T, int64_t R, int64_t H, int64_t V, Format f, int64_t group) {
    Rng& rng = c.rng();
    const std::vector<float> x = rng.normal_f32(T * H, 30.0);
    const HostTensor norm = random_dense(rng, Format::kBf16, H, 0.3, 1.0);
    IntWeight w = random_int_weight(rng, f, V, H, group);
    std::vector<int32_t> rows = rng.distinct(R, T);
    const ops::VectorWeight norm_host{Format::kBf16, norm.data(), H};
    ops::DenseWeight pw;
    ops::VectorWeight pn;
    if (!c.place(w.view, ops::WeightRole::kLmHead, &pw) || !c.place(norm_host, &pn)) return;
    const float* d_x = c.upload(x);
    const int32_t* d_rows = c.upload(rows);
    float* d_h = c.poisoned<float>(R * H);
    float* d_logits = c.poisoned<float>(R * V);
    const float eps = 1e-5f;
    c.reserve(T, 1, T);
    auto run = [&] { c.backend().final_logits({d_x, pn, pw, d_rows, R, H, eps, d_h, d_logits}); };
    run();
    const auto got = c.download(d_logits, R * V);
    std::vector<double> xin(R * H);
    for (int64_t r = 0; r < R; ++r)
        for (int64_t i = 0; i < H; ++i) xin[r * H + i] = x[rows[r] * H + i];
    const auto h = ref::rmsnorm(xin, R, H, norm_host, eps);
    c.compare("logits", got, ref::linear(h, R, ref::matrix_of(w.view), w.view.b),
              c.tol("final_logits." + fmt(f)));
    c.bench(run, int_weight_bytes(w) + R * (H + V) * 4);
}

// ---- add -----------------------------------------------------------------------------------------------

void add_op_case(Case& c, int64_t n, double y_rms) {
    Rng& rng = c.rng();
    const std::vector<float> x = rng.normal_f32(n, 1.0), y0 = rng.normal_f32(n, y_rms);
    const float* d_x = c.upload(x);
    float* d_y = c.upload(y0);
    c.backend().add({d_x, d_y, n});
    const auto got = c.download(d_y, n);
    std::vector<double> want(n), branch = to_double(x);
    for (int64_t i = 0; i < n; ++i) want[i] = static_cast<double>(y0[i]) + x[i];
    c.compare_residual("y", got, want, branch, c.tol("add"));
    c.bench([&] { c.backend().add({d_x, d_y, n}); }, n * 12);
}

// ---- o_proj_residual -----------------------------------------------------------------------------------

void o_proj_case(Case& c, int64_t T, int64_t in, int64_t H, Format f, double x_rms, bool keep, int64_t P) {
    Rng& rng = c.rng();
    const std::vector<float> attn = rng.normal_f32(T * in, 1.0), x0 = rng.normal_f32(T * H, x_rms);
    const HostTensor w = random_dense(rng, f, H * in, 1.0 / std::sqrt(static_cast<double>(in)));
    const HostTensor b = random_dense(rng, Format::kBf16, H, 0.5);
    ops::DenseWeight host = dense_view(f, w.data(), H, in, {Format::kBf16, b.data(), H});
    ops::DenseWeight pw;
    if (!c.place(host, ops::WeightRole::kAttention, &pw)) return;
    const float* d_attn = c.upload(attn);
    float* d_x = c.upload(x0);
    float* d_out = c.poisoned<float>(T * H);
    c.reserve(T, 1, T);
    c.backend().o_proj_residual({d_attn, pw, d_x, d_out, T, keep, P});
    const auto got_x = c.download(d_x, T * H);
    const auto branch = ref::linear(to_double(attn), T, ref::matrix_of(host), host.b);
    std::vector<double> want(T * H);
    for (int64_t i = 0; i < T * H; ++i) want[i] = x0[i] + branch[i];
    c.compare_residual("x", got_x, want, branch, c.tol("o_proj_residual"));
    if (keep) c.compare("out", c.download(d_out, T * H), branch, c.tol("o_proj_residual"));
    c.bench(
        [&] {
            c.backend().o_proj_residual({d_attn, pw, d_x, d_out, T, keep, P});
        },
        H * in * format_bytes(f) + T * (in + 2 * H) * 4);
}

// ---- final_logits --------------------------------------------------------------------------------------

void final_logits_case(Case& c, int64_t T, int64_t R, int64_t H, int64_t V, Format f, double x_rms) {
    Rng& rng = c.rng();
    const std::vector<float> x = rng.normal_f32(T * H, x_rms);
    const HostTensor norm = random_dense(rng, Format::kBf16, H, 0.3, 1.0);
    const HostTensor w = random_dense(rng, f, V * H, 1.0 / std::sqrt(static_cast<double>(H)));
    std::vector<int32_t> rows = rng.distinct(R, T);
    if (std::find(rows.begin(), rows.end(), T - 1) == rows.end()) rows[0] = static_cast<int32_t>(T - 1);
    ops::DenseWeight host = dense_view(f, w.data(), V, H);
    const ops::VectorWeight norm_host{Format::kBf16, norm.data(), H};
    ops::DenseWeight pw;
    ops::VectorWeight pn;
    if (!c.place(host, ops::WeightRole::kLmHead, &pw) || !c.place(norm_host, &pn)) return;
    const float* d_x = c.upload(x);
    const int32_t* d_rows = c.upload(rows);
    float* d_h = c.poisoned<float>(R * H);
    float* d_logits = c.poisoned<float>(R * V);
    const float eps = 1e-5f;
    c.reserve(T, 1, T);
    auto run = [&] { c.backend().final_logits({d_x, pn, pw, d_rows, R, H, eps, d_h, d_logits}); };
    run();
    const auto got = c.download(d_logits, R * V);
    std::vector<double> xin(R * H);
    for (int64_t r = 0; r < R; ++r)
        for (int64_t i = 0; i < H; ++i) xin[r * H + i] = x[rows[r] * H + i];
    const auto h = ref::rmsnorm(xin, R, H, norm_host, eps);
    c.compare("logits", got, ref::linear(h, R, ref::matrix_of(host), host.b), c.tol("final_logits"));
    c.bench(run, V * H * format_bytes(f) + R * (H + V) * 4);
}

}  // namespace

void add_dense_cases(const Options& opt, std::vector<CaseDef>* out) {
    const auto E = ShapeSet::kEdge, M = ShapeSet::kModel;
    auto n = [](int64_t v) { return std::to_string(v); };

    // embedding: vocabularies that are no multiple of a tile; the model's table (201088 x 2880).
    struct Emb {
        int64_t T, V, H;
        Format f;
        ShapeSet set;
    };
    for (const Emb& e : {Emb{1, 1000, 64, Format::kBf16, E}, Emb{2, 4097, 96, Format::kF16, E},
                         Emb{31, 1000, 2880, Format::kBf16, E}, Emb{32, 4097, 64, Format::kF32, E},
                         Emb{33, 1000, 96, Format::kBf16, E}, Emb{255, 4097, 64, Format::kBf16, E},
                         Emb{257, 1000, 2880, Format::kBf16, E}, Emb{4, 201088, 2880, Format::kBf16, M}}) {
        add_case(out, "embedding", shape_str({{"T", n(e.T)}, {"V", n(e.V)}, {"H", n(e.H)}, {"w", fmt(e.f)}}),
                 e.set, [e](Case& c) { embedding_case(c, e.T, e.V, e.H, e.f); });
    }

    // rmsnorm: rms 1e5 (f16 overflows on the input) and rms 8 (the sum of squares of 2880 values
    // overflows f16 from rms 4.8 on) must stay f32.
    struct Norm {
        int64_t T, H;
        Format f;
        NormVariant v;
        double x_rms;
        ShapeSet set;
    };
    const char* vname[] = {"plain", "rows", "inplace"};
    for (const Norm& r : {Norm{1, 64, Format::kBf16, NormVariant::kPlain, 1.0, E},
                          Norm{2, 96, Format::kF16, NormVariant::kPlain, 1.0, E},
                          Norm{31, 2880, Format::kBf16, NormVariant::kPlain, 1.0, E},
                          Norm{32, 64, Format::kF32, NormVariant::kInPlace, 1.0, E},
                          Norm{33, 2880, Format::kBf16, NormVariant::kRows, 1.0, E},
                          Norm{255, 96, Format::kBf16, NormVariant::kPlain, 1.0, E},
                          Norm{257, 64, Format::kBf16, NormVariant::kRows, 1.0, E},
                          Norm{4, 2880, Format::kBf16, NormVariant::kPlain, 1e5, E},
                          Norm{8, 2880, Format::kBf16, NormVariant::kPlain, 8.0, E},
                          Norm{4, 2880, Format::kBf16, NormVariant::kPlain, 1e5, M},
                          Norm{64, 2880, Format::kBf16, NormVariant::kRows, 30.0, M}}) {
        add_case(out, "rmsnorm",
                 shape_str({{"T", n(r.T)},
                            {"H", n(r.H)},
                            {"w", fmt(r.f)},
                            {"x_rms", num(r.x_rms)},
                            {"mode", vname[static_cast<int>(r.v)]}}),
                 r.set, [r](Case& c) { rmsnorm_case(c, r.T, r.H, r.f, r.v, r.x_rms); });
    }

    // linear: token counts at the tiling and dispatch edges (63/64/65: where cuBLAS paths switch).
    struct Lin {
        int64_t T, in, out;
        Format f;
        bool bias;
        int64_t rows;
        ShapeSet set;
    };
    for (const Lin& l :
         {Lin{1, 2880, 4096, Format::kBf16, true, 0, E}, Lin{2, 64, 96, Format::kF16, true, 0, E},
          Lin{31, 96, 64, Format::kF32, true, 0, E}, Lin{32, 2880, 512, Format::kBf16, true, 0, E},
          Lin{33, 4096, 64, Format::kBf16, true, 0, E}, Lin{63, 128, 200, Format::kBf16, true, 0, E},
          Lin{64, 128, 200, Format::kF16, true, 0, E}, Lin{65, 128, 200, Format::kBf16, true, 0, E},
          Lin{255, 64, 1000, Format::kBf16, false, 0, E}, Lin{257, 96, 4097, Format::kBf16, true, 0, E},
          Lin{33, 2880, 1000, Format::kBf16, false, 7, E}, Lin{4, 2880, 4096, Format::kBf16, true, 0, M},
          Lin{4, 2880, 512, Format::kBf16, true, 0, M}, Lin{4, 4096, 2880, Format::kBf16, true, 0, M},
          Lin{16, 2880, 4096, Format::kBf16, true, 0, M}}) {
        add_case(out, "linear",
                 shape_str({{"T", n(l.T)},
                            {"in", n(l.in)},
                            {"out", n(l.out)},
                            {"w", fmt(l.f)},
                            {"bias", l.bias ? "1" : "0"},
                            {"rows", n(l.rows)}}),
                 l.set, [l](Case& c) { linear_case(c, l.T, l.in, l.out, l.f, l.bias, l.rows); });
    }

    // Integer weights: one word column (out 8), partial groups of 8 outputs never occur (out % 8 == 0 is
    // the format's rule), groups of 32 / 64 / 128, token counts at the GEMV / GEMM edges, rows subsets,
    // and the model's shapes (q 4096 x 2880, k/v 512 x 2880, o 2880 x 4096; lm_head below).
    struct IntLin {
        int64_t T, in, out;
        Format f;
        int64_t group;
        bool bias;
        int64_t rows;
        ShapeSet set;
    };
    for (const IntLin& l :
         {IntLin{1, 128, 8, Format::kInt4, 128, true, 0, E}, IntLin{1, 64, 8, Format::kInt8, 0, true, 0, E},
          IntLin{2, 256, 200, Format::kInt4, 32, true, 0, E},
          IntLin{3, 96, 200, Format::kInt8, 0, false, 0, E},
          IntLin{31, 2880, 512, Format::kInt4, 64, true, 0, E},
          IntLin{33, 2880, 512, Format::kInt8, 0, true, 0, E},
          IntLin{65, 256, 1000, Format::kInt4, 128, true, 0, E},
          IntLin{64, 128, 96, Format::kInt8, 0, true, 0, E},
          IntLin{33, 2880, 1000, Format::kInt4, 64, false, 7, E},
          IntLin{33, 2880, 1000, Format::kInt8, 0, false, 7, E},
          IntLin{1, 2880, 4096, Format::kInt4, 64, true, 0, M},
          IntLin{1, 2880, 4096, Format::kInt8, 0, true, 0, M},
          IntLin{4, 2880, 512, Format::kInt4, 64, true, 0, M},
          IntLin{1, 4096, 2880, Format::kInt4, 128, true, 0, M},
          IntLin{1, 4096, 2880, Format::kInt8, 0, true, 0, M},
          IntLin{16, 2880, 4096, Format::kInt4, 64, true, 0, M}}) {
        add_case(out, "linear",
                 shape_str({{"T", n(l.T)},
                            {"in", n(l.in)},
                            {"out", n(l.out)},
                            {"w", fmt(l.f)},
                            {"group", n(l.group)},
                            {"bias", l.bias ? "1" : "0"},
                            {"rows", n(l.rows)}}),
                 l.set, [l](Case& c) { int_linear_case(c, l.T, l.in, l.out, l.f, l.group, l.bias, l.rows); });
    }
    struct IntFinal {
        int64_t T, R, H, V;
        Format f;
        int64_t group;
        ShapeSet set;
    };
    for (const IntFinal& f :
         {IntFinal{1, 1, 256, 1000, Format::kInt4, 128, E}, IntFinal{5, 3, 2880, 4104, Format::kInt8, 0, E},
          IntFinal{5, 2, 2880, 4104, Format::kInt4, 64, E},
          IntFinal{1, 1, 2880, 201088, Format::kInt4, 64, M},
          IntFinal{1, 1, 2880, 201088, Format::kInt8, 0, M}}) {
        add_case(out, "final_logits",
                 shape_str({{"T", n(f.T)},
                            {"rows", n(f.R)},
                            {"H", n(f.H)},
                            {"V", n(f.V)},
                            {"w", fmt(f.f)},
                            {"group", n(f.group)}}),
                 f.set, [f](Case& c) { int_final_logits_case(c, f.T, f.R, f.H, f.V, f.f, f.group); });
    }

    // o_proj_residual over integer weights (issue 21): one word column, the GEMV's groups (32, 128) and a
    // group of 8 (the basic kernel), prompt rows, the model's shape (o_proj 2880 x 4096).
    struct IntOProj {
        int64_t T, in, H;
        Format f;
        int64_t group;
        double x_rms;
        bool keep;
        int64_t P;
        ShapeSet set;
    };
    for (const IntOProj& o : {IntOProj{1, 128, 8, Format::kInt4, 32, 1.0, true, 0, E},
                              IntOProj{5, 128, 96, Format::kInt8, 0, 1e5, true, 0, E},
                              IntOProj{9, 256, 64, Format::kInt4, 128, 3e4, false, 4, E},
                              IntOProj{3, 64, 16, Format::kInt4, 8, 1.0, true, 0, E},
                              IntOProj{1, 4096, 2880, Format::kInt4, 128, 1e5, true, 0, M},
                              IntOProj{1, 4096, 2880, Format::kInt8, 0, 1e5, false, 0, M},
                              IntOProj{4, 4096, 2880, Format::kInt4, 64, 1.0, true, 4, M}}) {
        add_case(out, "o_proj_residual",
                 shape_str({{"T", n(o.T)},
                            {"in", n(o.in)},
                            {"H", n(o.H)},
                            {"w", fmt(o.f)},
                            {"group", n(o.group)},
                            {"x_rms", num(o.x_rms)},
                            {"keep", o.keep ? "1" : "0"}}) +
                     (o.P > 0 ? ",P=" + n(o.P) : ""),
                 o.set,
                 [o](Case& c) { int_o_proj_case(c, o.T, o.in, o.H, o.f, o.group, o.x_rms, o.keep, o.P); });
    }

    // add: y is the residual (1e5 where an fp16 residual would overflow).
    for (auto [count, y_rms, set] :
         {std::tuple{int64_t{1}, 1.0, E}, std::tuple{int64_t{31}, 1e5, E}, std::tuple{int64_t{33}, 1.0, E},
          std::tuple{int64_t{257 * 2880}, 1e5, E}, std::tuple{int64_t{4 * 2880}, 3e4, M}}) {
        add_case(out, "add", shape_str({{"n", n(count)}, {"y_rms", num(y_rms)}}), set,
                 [count, y_rms](Case& c) { add_op_case(c, count, y_rms); });
    }

    struct OProj {
        int64_t T, in, H;
        Format f;
        double x_rms;
        bool keep;
        ShapeSet set;
        int64_t P = 0;  // prompt rows (ops.h: a GPU computes them on tensor cores)
    };
    for (const OProj& o :
         {OProj{1, 4096, 2880, Format::kBf16, 1e5, true, E}, OProj{33, 64, 96, Format::kF16, 1.0, false, E},
          OProj{257, 128, 64, Format::kBf16, 3e4, true, E}, OProj{4, 4096, 2880, Format::kBf16, 1e5, true, M},
          OProj{70, 4096, 2880, Format::kBf16, 1e5, true, E, 70},
          OProj{200, 128, 96, Format::kF16, 1.0, false, E, 137},
          OProj{65, 64, 200, Format::kBf16, 3e4, true, E, 65},
          OProj{512, 4096, 2880, Format::kBf16, 1.0, false, M, 512}}) {
        add_case(out, "o_proj_residual",
                 shape_str({{"T", n(o.T)},
                            {"in", n(o.in)},
                            {"H", n(o.H)},
                            {"w", fmt(o.f)},
                            {"x_rms", num(o.x_rms)},
                            {"keep", o.keep ? "1" : "0"}}) +
                     (o.P > 0 ? ",P=" + n(o.P) : ""),
                 o.set, [o](Case& c) { o_proj_case(c, o.T, o.in, o.H, o.f, o.x_rms, o.keep, o.P); });
    }

    struct Final {
        int64_t T, R, H, V;
        Format f;
        double x_rms;
        ShapeSet set;
    };
    for (const Final& f :
         {Final{1, 1, 64, 1000, Format::kBf16, 1.0, E}, Final{33, 5, 2880, 4097, Format::kBf16, 1e5, E},
          Final{257, 3, 96, 1000, Format::kBf16, 1.0, E}, Final{2, 2, 2880, 1000, Format::kF16, 8.0, E},
          Final{4, 2, 2880, 201088, Format::kBf16, 1e5, M}}) {
        add_case(out, "final_logits",
                 shape_str({{"T", n(f.T)},
                            {"rows", n(f.R)},
                            {"H", n(f.H)},
                            {"V", n(f.V)},
                            {"w", fmt(f.f)},
                            {"x_rms", num(f.x_rms)}}),
                 f.set, [f](Case& c) { final_logits_case(c, f.T, f.R, f.H, f.V, f.f, f.x_rms); });
    }
}

}  // namespace volt::kernels
