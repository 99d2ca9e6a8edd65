// The CUDA backend on the GPU (CTest label `cuda`; every test skips with a message where no GPU is
// found): each op against its CPU twin (src/cpu, itself checked against transformers) on fresh random
// inputs with the output poisoned first, at shapes named after the kernels' edges (one warp, partial row
// tiles, head_dim 16..128, GQA ratios, windows, vocabularies of 1,000 and 201,088); and batch invariance
// of the whole forward pass: a sequence's logits bitwise equal alone and inside a batch of 17 (prefill
// and decode), in every dtype and with the Volta kernels forced. The op harness (tests/kernels,
// volt_op_test --backend cuda) checks every op against a double-precision reference; this file is the
// backend's own, and what scripts/gpu/check.sh runs under compute-sanitizer.
// Data: the golden checkpoints (VOLT_SOURCE_DIR/tests/data/golden; the environment variable
// VOLT_SOURCE_DIR overrides the build's path on the GPU machine).
#include "cuda/cuda_backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"
#include "cpu/cpu_ops.h"
#include "cpu/host_experts.h"
#include "model/forward.h"
#include "model/kv_store.h"
#include "model/loader.h"
#include "model/sequence_runner.h"
#include "quant/int_weights.h"
#include "source_dir.h"

namespace volt::cuda {
namespace {

using test::source_dir;

// VOLT_CUDA_EDGE_ONLY=1 (scripts/gpu/check.sh under compute-sanitizer): only the small edge shapes, not
// the model-size ones (hidden 2880, vocabulary 201,088), which the sanitizers would take minutes over.
bool edge_only() {
    const char* env = std::getenv("VOLT_CUDA_EDGE_ONLY");
    return env != nullptr && std::string(env) == "1";
}

// A backend, or a skip with the reason (no GPU, no driver) when none can be made.
// VOLT_CUDA_TEST_KERNELS=sm70 forces the Volta kernels (and no cuBLAS) in the op tests.
std::unique_ptr<CudaBackend> make_backend(const std::string& dtype, const std::string& kernels = "") {
    CudaOptions o;
    o.dtype = dtype;
    const char* env = std::getenv("VOLT_CUDA_TEST_KERNELS");
    o.cuda_kernels = !kernels.empty() ? kernels : env != nullptr && *env != 0 ? std::string(env) : "auto";
    auto b = CudaBackend::create(o);
    if (!b.is_ok()) return nullptr;
    return std::move(*b);
}

#define VOLT_NEED_GPU(backend)                                                                \
    if (!(backend)) {                                                                         \
        auto probe = probe_device(0);                                                         \
        GTEST_SKIP() << "no CUDA device: "                                                    \
                     << (probe.is_ok() ? "backend not created" : probe.status().to_string()); \
    }

template <typename T>
ops::Buffer put(ops::Backend& b, const std::vector<T>& v) {
    auto buf = b.alloc(static_cast<int64_t>(std::max<size_t>(v.size(), 1) * sizeof(T)));
    VOLT_CHECK(buf.is_ok()) << buf.status().to_string();
    b.upload(buf->data(), v.data(), static_cast<int64_t>(v.size() * sizeof(T)));
    return std::move(*buf);
}
// A device buffer of n T filled with NaN bytes (0xff): every output must be written.
template <typename T>
ops::Buffer poisoned(ops::Backend& b, int64_t n) {
    auto buf = b.alloc(std::max<int64_t>(n, 1) * static_cast<int64_t>(sizeof(T)));
    VOLT_CHECK(buf.is_ok());
    b.fill(buf->data(), 0xff, n * static_cast<int64_t>(sizeof(T)));
    return std::move(*buf);
}
template <typename T>
std::vector<T> get(ops::Backend& b, const ops::Buffer& buf, int64_t n) {
    std::vector<T> v(n);
    b.download(v.data(), buf.data(), n * static_cast<int64_t>(sizeof(T)));
    return v;
}

std::vector<float> randn(int64_t n, uint64_t seed, float scale = 1.0f) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}
std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
    std::vector<uint16_t> o(v.size());
    for (size_t i = 0; i < v.size(); ++i) o[i] = f32_to_bf16(v[i]);
    return o;
}
std::vector<uint16_t> to_f16(const std::vector<float>& v) {
    std::vector<uint16_t> o(v.size());
    for (size_t i = 0; i < v.size(); ++i) o[i] = f32_to_f16(v[i]);
    return o;
}
std::vector<float> rounded_f16(std::vector<float> v) {
    for (auto& x : v) x = f16_to_f32(f32_to_f16(x));
    return v;
}

// Host MXFP4 experts for the op tests, owning their bytes: gate_up [E, 2I, H] and down [E, H, I], codes
// random bytes from `seed`'s stream, E8M0 scales scale_lo + (draw % scale_span), drawn gate_up's codes,
// its scales, down's codes, its scales in that order; bf16 biases N(0, 0.5) from the seeds bias_seed and
// bias_seed + 1.
struct HostMxExperts {
    int64_t E, H, I;
    std::vector<uint8_t> b1, s1, b2, s2;
    std::vector<uint16_t> bias1, bias2;
    ops::ExpertWeights gate_up() const {
        return {ops::Format::kMxfp4,
                b1.data(),
                s1.data(),
                nullptr,
                {ops::Format::kBf16, bias1.data(), E * 2 * I},
                E,
                2 * I,
                H};
    }
    ops::ExpertWeights down() const {
        return {ops::Format::kMxfp4,
                b2.data(),
                s2.data(),
                nullptr,
                {ops::Format::kBf16, bias2.data(), E * H},
                E,
                H,
                I};
    }
};
HostMxExperts host_mx_experts(int64_t E, int64_t H, int64_t I, uint64_t seed, int scale_lo, int scale_span,
                              uint64_t bias_seed) {
    HostMxExperts m{E, H, I, {}, {}, {}, {}, {}, {}};
    std::mt19937_64 rng(seed);
    auto fill = [&](int64_t out, int64_t in, std::vector<uint8_t>* bl, std::vector<uint8_t>* sc) {
        bl->resize(E * out * in / 2);
        sc->resize(E * out * in / 32);
        for (auto& v : *bl) v = static_cast<uint8_t>(rng());
        for (auto& v : *sc) v = static_cast<uint8_t>(scale_lo + static_cast<int>(rng() % scale_span));
    };
    fill(2 * I, H, &m.b1, &m.s1);
    fill(H, I, &m.b2, &m.s2);
    m.bias1 = to_bf16(randn(E * 2 * I, bias_seed, 0.5f));
    m.bias2 = to_bf16(randn(E * H, bias_seed + 1, 0.5f));
    return m;
}

// |a - b| <= rel * scale + abs for every element; reports the worst.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rel, double abs,
                  const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    double scale = 0;
    for (float w : want) scale = std::max(scale, std::fabs(double(w)));
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const double d = std::fabs(double(got[i]) - double(want[i]));
        if (!(d <= worst)) {
            worst = d;
            at = i;
        }
    }
    EXPECT_LE(worst, rel * scale + abs)
        << what << ": worst at " << at << ": " << got[at] << " vs " << want[at] << " (scale " << scale << ")";
}

// ---- fine ops against the CPU ----

TEST(CudaOps, LinearMatchesCpuAtTileEdges) {
    auto f32 = make_backend("float");
    VOLT_NEED_GPU(f32);
    auto f16 = make_backend("half");
    struct Shape {
        int64_t rows, out, in;
        bool indexed;
    };
    const Shape shapes[] = {{1, 1, 32, false},    {3, 7, 48, false},     {8, 33, 64, true},
                            {9, 100, 200, false}, {65, 257, 2880, true}, {130, 64, 96, false}};
    for (const Shape& s : shapes) {
        if (edge_only() && s.in > 1000) continue;
        for (ops::Format fmt : {ops::Format::kBf16, ops::Format::kF16, ops::Format::kF32}) {
            for (CudaBackend* gpu : {f32.get(), f16.get()}) {
                const std::string what = "linear rows " + std::to_string(s.rows) + " out " +
                                         std::to_string(s.out) + " in " + std::to_string(s.in) + " " +
                                         ops::format_name(fmt) + " " + operand_name(gpu->operand());
                const int64_t xrows = s.indexed ? s.rows + 5 : s.rows;
                std::vector<float> x = randn(xrows * s.in, s.rows * 7 + s.in);
                const std::vector<float> wf = randn(s.out * s.in, s.out + 3, 0.05f), bias = randn(s.out, 11);
                std::vector<int32_t> rows(s.rows);
                for (int64_t r = 0; r < s.rows; ++r) rows[r] = static_cast<int32_t>((r * 7 + 3) % xrows);
                std::vector<uint16_t> w16 = fmt == ops::Format::kBf16 ? to_bf16(wf) : to_f16(wf);
                const void* host_w =
                    fmt == ops::Format::kF32 ? static_cast<const void*>(wf.data()) : w16.data();
                ops::DenseWeight hw{
                    fmt, host_w, nullptr, nullptr, 0, {ops::Format::kF32, bias.data(), s.out}, s.out, s.in};
                std::vector<ops::Buffer> owned;
                auto dw = gpu->place_dense(hw, ops::WeightRole::kAttention, &owned);
                ASSERT_TRUE(dw.is_ok()) << dw.status().to_string();
                ops::Buffer dx = put(*gpu, x), dr = put(*gpu, rows),
                            dy = poisoned<float>(*gpu, s.rows * s.out);
                ops::LinearArgs ga{
                    .x = dx.as<float>(), .weight = *dw, .y = dy.as<float>(), .num_tokens = s.rows};
                if (s.indexed) {
                    ga.rows = dr.as<int32_t>();
                    ga.num_rows = s.rows;
                }
                gpu->linear(ga);
                const std::vector<float> got = get<float>(*gpu, dy, s.rows * s.out);
                // The CPU twin with the operands the GPU multiplies (x rounded in half mode).
                const std::vector<float> xo = gpu->operand() == Operand::kF16 ? rounded_f16(x) : x;
                std::vector<float> want(s.rows * s.out);
                ops::LinearArgs ca{.x = xo.data(), .weight = hw, .y = want.data(), .num_tokens = s.rows};
                if (s.indexed) {
                    ca.rows = rows.data();
                    ca.num_rows = s.rows;
                }
                cpu::linear(ca);
                expect_close(got, want, 2e-5, 1e-5, what);
            }
        }
    }
}

TEST(CudaOps, RmsnormEmbeddingAddRope) {
    auto gpu = make_backend("float");
    VOLT_NEED_GPU(gpu);
    for (int64_t H : {32, 64, 2880, 3200}) {
        if (edge_only() && H > 64) continue;
        const int64_t T = 5;
        std::vector<float> x = randn(T * H, H, 3.0f);
        const std::vector<uint16_t> w = to_bf16(randn(H, H + 1, 0.5f));
        const std::vector<int32_t> rows = {4, 0, 2};
        ops::VectorWeight hw{ops::Format::kBf16, w.data(), H};
        std::vector<ops::Buffer> owned;
        auto dw = gpu->place_vector(hw, &owned);
        ASSERT_TRUE(dw.is_ok());
        ops::Buffer dx = put(*gpu, x), dr = put(*gpu, rows), dy = poisoned<float>(*gpu, 3 * H);
        gpu->rmsnorm({.x = dx.as<float>(),
                      .w = *dw,
                      .y = dy.as<float>(),
                      .num_rows = 3,
                      .hidden = H,
                      .eps = 1e-5f,
                      .rows = dr.as<int32_t>()});
        std::vector<float> want(3 * H);
        cpu::rmsnorm({.x = x.data(),
                      .w = hw,
                      .y = want.data(),
                      .num_rows = 3,
                      .hidden = H,
                      .eps = 1e-5f,
                      .rows = rows.data()});
        expect_close(get<float>(*gpu, dy, 3 * H), want, 1e-6, 1e-6, "rmsnorm H " + std::to_string(H));
        // In place, every row.
        gpu->rmsnorm(
            {.x = dx.as<float>(), .w = *dw, .y = dx.as<float>(), .num_rows = T, .hidden = H, .eps = 1e-5f});
        std::vector<float> want_all(T * H);
        cpu::rmsnorm(
            {.x = x.data(), .w = hw, .y = want_all.data(), .num_rows = T, .hidden = H, .eps = 1e-5f});
        expect_close(get<float>(*gpu, dx, T * H), want_all, 1e-6, 1e-6, "rmsnorm in place");
    }
    {  // embedding, then add
        const int64_t V = 300, H = 96, T = 7;
        const std::vector<uint16_t> table = to_bf16(randn(V * H, 5));
        const std::vector<int32_t> ids = {0, 299, 17, 17, 150, 1, 298};
        ops::DenseWeight ht{ops::Format::kBf16, table.data(), nullptr, nullptr, 0, {}, V, H};
        std::vector<ops::Buffer> owned;
        auto dt = gpu->place_dense(ht, ops::WeightRole::kEmbedding, &owned);
        ASSERT_TRUE(dt.is_ok());
        ops::Buffer di = put(*gpu, ids), dout = poisoned<float>(*gpu, T * H);
        gpu->embedding({di.as<int32_t>(), *dt, dout.as<float>(), T});
        std::vector<float> want(T * H);
        cpu::embedding({ids.data(), ht, want.data(), T});
        EXPECT_EQ(get<float>(*gpu, dout, T * H), want);
        const std::vector<float> y = randn(T * H, 9);
        ops::Buffer dy = put(*gpu, y);
        gpu->add({dout.as<float>(), dy.as<float>(), T * H});
        std::vector<float> sum = y;
        cpu::add({want.data(), sum.data(), T * H});
        EXPECT_EQ(get<float>(*gpu, dy, T * H), sum);
    }
    for (int64_t d : {16, 64, 80, 128}) {  // rope
        const int64_t T = 4, nh = 3, nkv = 2;
        std::vector<float> q = randn(T * nh * d, d), k = randn(T * nkv * d, d + 1);
        const std::vector<int32_t> pos = {0, 1, 4095, 100000};
        std::vector<float> inv(d / 2);
        for (int64_t i = 0; i < d / 2; ++i) inv[i] = std::pow(150000.0f, -2.0f * i / d);
        ops::Buffer dq = put(*gpu, q), dk = put(*gpu, k), dp = put(*gpu, pos), di = put(*gpu, inv);
        gpu->rope(
            {dq.as<float>(), dk.as<float>(), dp.as<int32_t>(), di.as<float>(), 1.3465736f, T, nh, nkv, d});
        cpu::rope({q.data(), k.data(), pos.data(), inv.data(), 1.3465736f, T, nh, nkv, d});
        expect_close(get<float>(*gpu, dq, T * nh * d), q, 2e-6, 2e-6, "rope q d " + std::to_string(d));
        expect_close(get<float>(*gpu, dk, T * nkv * d), k, 2e-6, 2e-6, "rope k d " + std::to_string(d));
    }
}

TEST(CudaOps, KvWriteAndAttentionMatchCpu) {
    auto f32 = make_backend("float");
    VOLT_NEED_GPU(f32);
    auto f16 = make_backend("half");
    struct Heads {
        int64_t nh, nkv, d;
    };
    const Heads heads[] = {{4, 2, 16}, {8, 1, 64}, {2, 2, 80}, {16, 2, 128}, {6, 3, 32}};
    // Three sequences: (keys before this step, new rows): a prefill, a decode, a chunk after a prefix.
    const int64_t prior[3] = {0, 20, 37}, qlen[3] = {5, 1, 3};
    const int64_t bs = 16, max_blocks = 4, num_blocks = 12;
    for (const Heads& h : heads) {
        for (ops::Format kvf : {ops::Format::kF32, ops::Format::kF16, ops::Format::kInt8}) {
            for (int64_t window : {0, 8}) {
                for (CudaBackend* gpu : {f32.get(), f16.get()}) {
                    const std::string what = "attention nh " + std::to_string(h.nh) + " nkv " +
                                             std::to_string(h.nkv) + " d " + std::to_string(h.d) + " kv " +
                                             ops::format_name(kvf) + " window " + std::to_string(window) +
                                             " " + operand_name(gpu->operand());
                    // Block tables: sequence s owns blocks 3s+2, 3s+1, 3s (reversed, to catch index
                    // mistakes).
                    std::vector<int32_t> tables(3 * max_blocks, -1);
                    for (int64_t s = 0; s < 3; ++s)
                        for (int64_t j = 0; j < 3; ++j)
                            tables[s * max_blocks + j] = static_cast<int32_t>(3 * s + 2 - j);
                    // Every key of every sequence is written through kv_write (one step holding them all).
                    std::vector<int64_t> slots;
                    for (int64_t s = 0; s < 3; ++s)
                        for (int64_t j = 0; j < prior[s] + qlen[s]; ++j)
                            slots.push_back(tables[s * max_blocks + j / bs] * bs + j % bs);
                    slots.push_back(-1);  // skipped
                    const auto nk = static_cast<int64_t>(slots.size());
                    const bool int8 = kvf == ops::Format::kInt8;
                    const int64_t row = h.nkv * h.d, elem = kvf == ops::Format::kF32   ? 4
                                                            : kvf == ops::Format::kF16 ? 2
                                                                                       : 1;
                    std::vector<float> k = randn(nk * row, h.d * 3), v = randn(nk * row, h.d * 5);
                    if (int8) {
                        // int8 (ops/kv_int8.h): key 0's first head all zero (s = 0), key 1's first V head
                        // on the grid of s = 1 with ties (0.5 -> 0, 1.5 -> 2, -2.5 -> -2: rint, not round).
                        std::fill(k.begin(), k.begin() + h.d, 0.0f);
                        for (int64_t i = 0; i < h.d; ++i) v[row + i] = static_cast<float>(i % 7) - 2.5f;
                        v[row] = 127.0f;
                    }
                    std::vector<uint8_t> ck(num_blocks * bs * row * elem, 0), cv(ck.size(), 0);
                    // int8: the scales [num_blocks, bs, nkv] f32 (else unused).
                    std::vector<float> cks(int8 ? num_blocks * bs * h.nkv : 0, 0.0f), cvs(cks.size(), 0.0f);
                    ops::KvLayer ckv{kvf,
                                     ck.data(),
                                     cv.data(),
                                     num_blocks,
                                     bs,
                                     int8 ? cks.data() : nullptr,
                                     int8 ? cvs.data() : nullptr};
                    cpu::kv_write({k.data(), v.data(), slots.data(), ckv, nk, h.nkv, h.d});
                    auto gk = gpu->alloc(static_cast<int64_t>(ck.size()));
                    auto gv = gpu->alloc(static_cast<int64_t>(cv.size()));
                    ASSERT_TRUE(gk.is_ok() && gv.is_ok());
                    gpu->fill(gk->data(), 0, static_cast<int64_t>(ck.size()));
                    gpu->fill(gv->data(), 0, static_cast<int64_t>(cv.size()));
                    ops::Buffer gks = put(*gpu, cks), gvs = put(*gpu, cvs);  // zeros, like the CPU's
                    ops::KvLayer gkv{kvf,
                                     gk->data(),
                                     gv->data(),
                                     num_blocks,
                                     bs,
                                     int8 ? gks.as<float>() : nullptr,
                                     int8 ? gvs.as<float>() : nullptr};
                    ops::Buffer dk = put(*gpu, k), dv = put(*gpu, v), ds = put(*gpu, slots);
                    gpu->kv_write({dk.as<float>(), dv.as<float>(), ds.as<int64_t>(), gkv, nk, h.nkv, h.d});
                    std::vector<uint8_t> back(ck.size());
                    gpu->download(back.data(), gk->data(), static_cast<int64_t>(back.size()));
                    EXPECT_EQ(back, ck) << what << ": K cache";
                    if (int8) {
                        // The format's rounding rules are exact: codes and scales bitwise the CPU's.
                        gpu->download(back.data(), gv->data(), static_cast<int64_t>(back.size()));
                        EXPECT_EQ(back, cv) << what << ": V cache";
                        EXPECT_EQ(get<float>(*gpu, gks, static_cast<int64_t>(cks.size())), cks) << what;
                        EXPECT_EQ(get<float>(*gpu, gvs, static_cast<int64_t>(cvs.size())), cvs) << what;
                    }

                    const int64_t T = qlen[0] + qlen[1] + qlen[2];
                    const std::vector<int32_t> lens = {5, 21, 40}, qsl = {0, 5, 6, 9};
                    std::vector<float> q = randn(T * h.nh * h.d, h.nh + h.d);
                    if (gpu->operand() == Operand::kF16) q = rounded_f16(q);
                    const std::vector<uint16_t> sinks = to_bf16(randn(h.nh, 3));
                    ops::VectorWeight hs{ops::Format::kBf16, sinks.data(), h.nh};
                    std::vector<ops::Buffer> owned;
                    auto dsinks = gpu->place_vector(hs, &owned);
                    ASSERT_TRUE(dsinks.is_ok());
                    ops::Buffer dq = put(*gpu, q), dl = put(*gpu, lens), dqsl = put(*gpu, qsl),
                                dt = put(*gpu, tables);
                    const float scale = 1.0f / std::sqrt(static_cast<float>(h.d));
                    // max_seq_len sizes the grid only (ops.h): 600 (up to 3 splits a row) gives the bits of
                    // 40 (one split).
                    auto attend = [&](int64_t max_seq_len) {
                        ops::Buffer out = poisoned<float>(*gpu, T * h.nh * h.d);
                        gpu->attention({.q = dq.as<float>(),
                                        .kv = gkv,
                                        .seq_lens = dl.as<int32_t>(),
                                        .query_start_loc = dqsl.as<int32_t>(),
                                        .block_tables = dt.as<int32_t>(),
                                        .sinks = *dsinks,
                                        .out = out.as<float>(),
                                        .num_seqs = 3,
                                        .num_tokens = T,
                                        .num_heads = h.nh,
                                        .num_kv_heads = h.nkv,
                                        .head_dim = h.d,
                                        .max_blocks = max_blocks,
                                        .window = window,
                                        .scale = scale,
                                        .max_seq_len = max_seq_len});
                        return get<float>(*gpu, out, T * h.nh * h.d);
                    };
                    const std::vector<float> got = attend(40), got2 = attend(600);
                    std::vector<float> want(T * h.nh * h.d);
                    cpu::attention({.q = q.data(),
                                    .kv = ckv,
                                    .seq_lens = lens.data(),
                                    .query_start_loc = qsl.data(),
                                    .block_tables = tables.data(),
                                    .sinks = hs,
                                    .out = want.data(),
                                    .num_seqs = 3,
                                    .num_tokens = T,
                                    .num_heads = h.nh,
                                    .num_kv_heads = h.nkv,
                                    .head_dim = h.d,
                                    .max_blocks = max_blocks,
                                    .window = window,
                                    .scale = scale});
                    // Half mode rounds p to f16 before it multiplies V (what a tensor-core kernel does).
                    const double tol = gpu->operand() == Operand::kF16 ? 2e-3 : 2e-6;
                    expect_close(got, want, tol, tol, what);
                    EXPECT_EQ(std::memcmp(got.data(), got2.data(), got.size() * 4), 0)
                        << what << ": max_seq_len 600 vs 40";
                }
            }
        }
    }
}

TEST(CudaOps, RouterAndExpertsMatchCpu) {
    auto f32 = make_backend("float");
    VOLT_NEED_GPU(f32);
    auto f16 = make_backend("half");
    for (int64_t E : {4, 32, 128}) {
        for (int64_t k : {1, 2, 4}) {
            if (k > E) continue;
            const int64_t T = 6, H = 64;
            const std::vector<float> x = randn(T * H, E + k);
            std::vector<float> wr = randn(E * H, E * 3, 0.2f);
            // Experts 1 and 2 identical: an exact tie, which goes to the lower index.
            std::copy(wr.begin() + H, wr.begin() + 2 * H, wr.begin() + 2 * H);
            const std::vector<uint16_t> w16 = to_bf16(wr);
            std::vector<uint16_t> b16 = to_bf16(randn(E, 4, 0.1f));
            b16[2] = b16[1];
            ops::DenseWeight hw{ops::Format::kBf16,
                                w16.data(),
                                nullptr,
                                nullptr,
                                0,
                                {ops::Format::kBf16, b16.data(), E},
                                E,
                                H};
            std::vector<ops::Buffer> owned;
            auto dw = f16->place_dense(hw, ops::WeightRole::kRouter, &owned);
            ASSERT_TRUE(dw.is_ok());
            ops::Buffer dx = put(*f16, x), di = poisoned<int32_t>(*f16, T * k),
                        dwt = poisoned<float>(*f16, T * k);
            f16->router({dx.as<float>(), *dw, di.as<int32_t>(), dwt.as<float>(), T, k});
            std::vector<int32_t> ids(T * k);
            std::vector<float> wts(T * k);
            cpu::router({x.data(), hw, ids.data(), wts.data(), T, k});
            EXPECT_EQ(get<int32_t>(*f16, di, T * k), ids) << "router E " << E << " k " << k;
            expect_close(get<float>(*f16, dwt, T * k), wts, 1e-5, 1e-6, "router weights");
        }
    }
    // Experts: MXFP4 (random codes and scales around 2^-4) and dense bf16, at a small and the real width.
    for (int64_t H : {64, 2880}) {
        if (edge_only() && H > 64) continue;
        const int64_t I = H, E = 4, k = 2, T = H > 64 ? 2 : 5;
        const HostMxExperts mx = host_mx_experts(E, H, I, H, 120, 5, 1);
        const ops::ExpertWeights gu = mx.gate_up(), dn = mx.down();
        const std::vector<float> x = randn(T * H, 3, 2.0f), y0 = randn(T * H, 4);
        std::vector<int32_t> ids(T * k);
        std::vector<float> wts(T * k);
        for (int64_t i = 0; i < T * k; ++i) {
            ids[i] = static_cast<int32_t>((i * 3 + i / k) % E);
            wts[i] = 0.25f + 0.5f * (i % k);
        }
        for (CudaBackend* gpu : {f32.get(), f16.get()}) {
            std::vector<ops::Buffer> owned;
            auto dgu = gpu->place_experts(gu, &owned);
            auto ddn = gpu->place_experts(dn, &owned);
            ASSERT_TRUE(dgu.is_ok() && ddn.is_ok());
            ops::Buffer dx = put(*gpu, x), dids = put(*gpu, ids), dwts = put(*gpu, wts), dout = put(*gpu, y0);
            gpu->experts({dx.as<float>(), dids.as<int32_t>(), dwts.as<float>(), *dgu, *ddn, dout.as<float>(),
                          T, k, 7.0f, 1.702f});
            const std::vector<float> xo = gpu->operand() == Operand::kF16 ? rounded_f16(x) : x;
            std::vector<float> want = y0;
            cpu::experts({xo.data(), ids.data(), wts.data(), gu, dn, want.data(), T, k, 7.0f, 1.702f});
            // Half mode also rounds the SwiGLU output (the down projection's operand).
            const double tol = gpu->operand() == Operand::kF16 ? 2e-3 : 2e-5;
            expect_close(get<float>(*gpu, dout, T * H), want, tol, 1e-5,
                         "experts mxfp4 H " + std::to_string(H) + " " + operand_name(gpu->operand()));
        }
        // Dense bf16 experts, kept dense by --dtype float.
        const std::vector<uint16_t> w1 = to_bf16(randn(E * 2 * I * H, 8, 0.05f)),
                                    w2 = to_bf16(randn(E * H * I, 9, 0.05f));
        ops::ExpertWeights gud{ops::Format::kBf16, nullptr, nullptr, w1.data(), gu.bias, E, 2 * I, H};
        ops::ExpertWeights dnd{ops::Format::kBf16, nullptr, nullptr, w2.data(), dn.bias, E, H, I};
        std::vector<ops::Buffer> owned;
        auto dgu = f32->place_experts(gud, &owned);
        auto ddn = f32->place_experts(dnd, &owned);
        ASSERT_TRUE(dgu.is_ok() && ddn.is_ok());
        EXPECT_EQ(dgu->format, ops::Format::kBf16);
        ops::Buffer dx = put(*f32, x), dids = put(*f32, ids), dwts = put(*f32, wts), dout = put(*f32, y0);
        f32->experts({dx.as<float>(), dids.as<int32_t>(), dwts.as<float>(), *dgu, *ddn, dout.as<float>(), T,
                      k, 7.0f, 1.702f});
        std::vector<float> want = y0;
        cpu::experts({x.data(), ids.data(), wts.data(), gud, dnd, want.data(), T, k, 7.0f, 1.702f});
        expect_close(get<float>(*f32, dout, T * H), want, 2e-5, 1e-5,
                     "experts bf16 dense H " + std::to_string(H));
    }
}

// Which kernel takes the generated rows of MXFP4 experts: the GEMV under --max-num-seqs 1
// (CudaOptions::single_sequence), the MMA kernel otherwise on sm_80+ (f16/bf16 operands), the GEMV under f32
// operands; never the basic kernel while a fast one is chosen, and never changed by reserve(). (A process
// with --max-num-seqs 1 once fell through to the basic kernel on sm_80+: every answer right, decode 4x and
// prefill 100x slower, which no correctness test could see.)
TEST(CudaOps, ExpertsKernelFollowsMaxNumSeqs) {
    auto probe = make_backend("half");
    VOLT_NEED_GPU(probe);
    const int64_t H = 64, I = 64, E = 4, k = 2;
    const HostMxExperts mx = host_mx_experts(E, H, I, 5, 120, 5, 1);
    const ops::ExpertWeights gu = mx.gate_up(), dn = mx.down();
    const bool fast_chosen = probe->dispatch().uses(OpKind::kExperts, "experts_gemv_mxfp4_f16x2") ||
                             probe->dispatch().uses(OpKind::kExperts, "experts_mma_m16n8k16");
    const bool mma_chosen = probe->dispatch().uses(OpKind::kExperts, "experts_mma_m16n8k16");
    const char* env = std::getenv("VOLT_CUDA_TEST_KERNELS");
    for (const char* dtype : {"half", "bfloat16", "float"}) {
        for (bool single : {true, false}) {
            CudaOptions o;
            o.dtype = dtype;
            o.cuda_kernels = env != nullptr && *env != 0 ? std::string(env) : "auto";
            o.single_sequence = single;
            auto created = CudaBackend::create(o);
            if (!created.is_ok()) continue;  // bfloat16 under the Volta kernels
            CudaBackend& gpu = **created;
            std::vector<ops::Buffer> owned;
            auto dgu = gpu.place_experts(gu, &owned);
            auto ddn = gpu.place_experts(dn, &owned);
            ASSERT_TRUE(dgu.is_ok() && ddn.is_ok());
            const ops::ExpertsArgs a{nullptr, nullptr, nullptr, *dgu, *ddn, nullptr, 8, k, 7.0f, 1.702f};
            const std::string want = !fast_chosen ? "experts_warp_mxfp4_3pass"
                                     : mma_chosen && !single && std::string(dtype) != "float"
                                         ? "experts_mma_m16n8k16"
                                         : "experts_gemv_mxfp4_f16x2";
            const std::string what =
                std::string(dtype) + (single ? ", single sequence, " : ", ") + describe(gpu.dispatch());
            EXPECT_EQ(gpu.experts_kernel(a), want) << what;
            // reserve() grows buffers only: the choice stays (batch invariance across the process).
            ASSERT_TRUE(
                gpu.reserve({.max_tokens = 64, .max_seqs = single ? 1 : 32, .max_seq_len = 128}).is_ok());
            ASSERT_TRUE(gpu.reserve({.max_tokens = 64, .max_seqs = 64, .max_seq_len = 128}).is_ok());
            EXPECT_EQ(gpu.experts_kernel(a), want) << what << ", after reserve";
        }
    }
}

TEST(CudaOps, SampleDrawsWhatTheCpuDraws) {
    auto gpu = make_backend("float");
    VOLT_NEED_GPU(gpu);
    for (int64_t V : {1000, 201088}) {
        if (edge_only() && V > 1000) continue;
        const int64_t Vreal = V == 1000 ? 990 : 200019;
        // Rows: greedy, seeded draws with each filter, penalties, masks, bias, logprobs, a scored row.
        const int rows_n = 12;
        std::vector<float> logits = randn(rows_n * V, V, 2.0f);
        logits[3 * V + 5] = logits[3 * V + 9] = 50.0f;  // a greedy tie: lower id wins
        const std::vector<int32_t> prompt = {1, 2, 3, 3, 7}, output = {7, 7, 9, 11, 2},
                                   allowed = {4, 8, 15, 16, 23, 42}, bias_ids = {5, 6, 5};
        const std::vector<float> bias_values = {3.0f, -100.0f, 1.5f};
        std::vector<ops::SampleRow> host(rows_n);
        for (int r = 0; r < rows_n; ++r) {
            host[r].seed = 1234 + r;
            host[r].counter = static_cast<uint64_t>(r * 3);
            host[r].temperature = 0.8f;
        }
        host[0].temperature = 0.0f;
        host[3].temperature = 0.0f;
        host[1].num_logprobs = 5;
        host[2].top_k = 5;
        host[4].top_p = 0.9f;
        host[5].min_p = 0.1f;
        host[6].top_k = 50;
        host[6].top_p = 0.5f;
        host[6].num_logprobs = 20;
        host[7].repetition_penalty = 1.3f;
        host[7].frequency_penalty = 0.5f;
        host[7].presence_penalty = 0.25f;
        host[8].num_allowed = static_cast<int64_t>(allowed.size());
        host[9].num_bias = static_cast<int64_t>(bias_ids.size());
        host[10].target = 17;
        host[10].num_logprobs = 3;
        host[11].temperature = 1.5f;
        host[11].top_p = 0.999f;
        ops::Buffer dl = put(*gpu, logits), dp = put(*gpu, prompt), dout = put(*gpu, output),
                    da = put(*gpu, allowed), dbi = put(*gpu, bias_ids), dbv = put(*gpu, bias_values);
        std::vector<ops::SampleRow> dev = host;
        for (int r = 0; r < rows_n; ++r) {
            host[r].logits = logits.data() + r * V;
            dev[r].logits = dl.as<float>() + r * V;
            host[r].prompt_ids = prompt.data();
            dev[r].prompt_ids = dp.as<int32_t>();
            host[r].output_ids = output.data();
            dev[r].output_ids = dout.as<int32_t>();
            host[r].num_prompt = dev[r].num_prompt = static_cast<int64_t>(prompt.size());
            host[r].num_output = dev[r].num_output = static_cast<int64_t>(output.size());
            host[r].allowed_ids = allowed.data();
            dev[r].allowed_ids = da.as<int32_t>();
            host[r].bias_ids = bias_ids.data();
            dev[r].bias_ids = dbi.as<int32_t>();
            host[r].bias_values = bias_values.data();
            dev[r].bias_values = dbv.as<float>();
        }
        const int64_t max_top = 20;
        std::vector<int32_t> tokens(rows_n, -7), top_ids(rows_n * max_top, -7);
        std::vector<float> lps(rows_n, 0), top_lps(rows_n * max_top, 0);
        ops::SampleArgs ca{host.data(),    rows_n,         V,      Vreal, tokens.data(), lps.data(),
                           top_ids.data(), top_lps.data(), max_top};
        cpu::sample(ca);
        ops::Buffer drows = put(*gpu, dev), dt = poisoned<int32_t>(*gpu, rows_n),
                    dlp = poisoned<float>(*gpu, rows_n), dti = poisoned<int32_t>(*gpu, rows_n * max_top),
                    dtl = poisoned<float>(*gpu, rows_n * max_top);
        ops::SampleArgs ga{
            drows.as<ops::SampleRow>(), rows_n,          V,      Vreal, dt.as<int32_t>(), dlp.as<float>(),
            dti.as<int32_t>(),          dtl.as<float>(), max_top};
        gpu->sample(ga);
        const std::vector<int32_t> gt = get<int32_t>(*gpu, dt, rows_n);
        const std::vector<float> glp = get<float>(*gpu, dlp, rows_n);
        const std::vector<int32_t> gti = get<int32_t>(*gpu, dti, rows_n * max_top);
        const std::vector<float> gtl = get<float>(*gpu, dtl, rows_n * max_top);
        for (int r = 0; r < rows_n; ++r) {
            EXPECT_EQ(gt[r], tokens[r]) << "V " << V << " row " << r;
            if (host[r].num_logprobs < 0) continue;
            EXPECT_NEAR(glp[r], lps[r], 1e-4) << "V " << V << " row " << r;
            for (int j = 0; j < host[r].num_logprobs; ++j) {
                EXPECT_EQ(gti[r * max_top + j], top_ids[r * max_top + j]) << "row " << r << " top " << j;
                EXPECT_NEAR(gtl[r * max_top + j], top_lps[r * max_top + j], 1e-4)
                    << "row " << r << " top " << j;
            }
        }
        EXPECT_EQ(gt[3], 5);
        EXPECT_EQ(gt[10], 17);
    }
}

// ---- the forward pass: batch invariance ----

std::shared_ptr<const model::ModelWeights> load_golden(const std::string& name) {
    auto w =
        model::load_model(source_dir() + "/tests/data/golden/" + name, {.progress = io::ProgressMode::kOff});
    VOLT_CHECK(w.is_ok()) << w.status().to_string();
    return *w;
}

// Logits of `target` (all rows) alone and as sequence `place` of a 17-sequence prefill step, then of one
// decode token alone and inside 17 decodes: bitwise equal.
void check_batch_invariance(CudaBackend& gpu, const std::shared_ptr<const model::ModelWeights>& host,
                            ops::Format kv_format, const std::string& what) {
    auto placed = model::place_model(host, gpu);
    ASSERT_TRUE(placed.is_ok()) << placed.status().to_string();
    model::Forward fwd(*placed, gpu);
    const model::GptOssConfig& c = host->config;
    const int64_t V = c.vocab_size, bs = 16, cap = 96, nb = cap / bs, S = 17;
    std::mt19937 rng(5);
    std::vector<std::vector<int32_t>> prompts(S);
    for (int64_t s = 0; s < S; ++s) {
        prompts[s].resize(s == 0 ? 40 : 1 + rng() % 70);
        for (auto& id : prompts[s]) id = static_cast<int32_t>(rng() % V);
    }
    const int32_t next_token = 7;

    // Alone: the SequenceRunner (contiguous blocks 0..), prefill then one decode.
    model::SequenceRunner alone(fwd, cap, bs, kv_format);
    const std::vector<float> alone_prefill = alone.append(prompts[0], /*all_rows=*/true);
    const std::vector<float> alone_decode = alone.append(std::vector<int32_t>{next_token}, false, 0,
                                                         /*generated=*/true);

    const int64_t place = 5;  // where the target sits in the batch
    std::vector<int64_t> order(S);
    std::iota(order.begin(), order.end(), 0);
    std::swap(order[0], order[place]);  // order[i] = the sequence at batch index i
    const int64_t blocks[ops::kNumKvGroups] = {S * nb, S * nb};
    auto cache = model::KvStore::create(gpu, c, bs, blocks, kv_format);
    ASSERT_TRUE(cache.is_ok());
    auto ws = model::Workspace::create(gpu, c, 1024, 64);
    ASSERT_TRUE(ws.is_ok());
    ASSERT_TRUE(gpu.reserve({1024, S, cap}).is_ok());
    model::StepUpload upload;
    std::vector<int64_t> done(S, 0);
    auto step = [&](bool decode) {
        model::HostStep st;
        st.query_start_loc = {0};
        for (int g = 0; g < ops::kNumKvGroups; ++g) {
            st.max_blocks[g] = nb;
            st.block_tables[g].resize(S * nb);
        }
        for (int64_t i = 0; i < S; ++i) {
            const int64_t s = order[i];
            const std::vector<int32_t> ids =
                decode ? std::vector<int32_t>{s == 0 ? next_token : static_cast<int32_t>(s)} : prompts[s];
            for (size_t j = 0; j < ids.size(); ++j) {
                const int64_t p = done[s] + static_cast<int64_t>(j);
                st.token_ids.push_back(ids[j]);
                st.positions.push_back(static_cast<int32_t>(p));
                for (int g = 0; g < ops::kNumKvGroups; ++g)
                    st.slot_mapping[g].push_back((s * nb + p / bs) * bs + p % bs);
                if (s == 0 && (!decode || j + 1 == ids.size()))
                    st.logits_rows.push_back(static_cast<int32_t>(st.token_ids.size() - 1));
            }
            done[s] += static_cast<int64_t>(ids.size());
            st.query_start_loc.push_back(static_cast<int32_t>(st.token_ids.size()));
            st.seq_lens.push_back(static_cast<int32_t>(done[s]));
            for (int g = 0; g < ops::kNumKvGroups; ++g)
                for (int64_t b = 0; b < nb; ++b)
                    st.block_tables[g][i * nb + b] = static_cast<int32_t>(s * nb + b);
        }
        st.num_prompt_rows = decode ? 0 : st.num_tokens();  // as SequenceRunner: a prefill is prompt rows
        auto fb = upload.upload(gpu, st);
        VOLT_CHECK(fb.is_ok());
        std::vector<float> out(st.logits_rows.size() * V);
        const Status ran =
            fwd.run(*fb, cache->layers(), *ws, [&](int64_t first, int64_t count, const float* l) {
                gpu.download(out.data() + first * V, l, count * V * static_cast<int64_t>(sizeof(float)));
            });
        VOLT_CHECK(ran.is_ok()) << ran.to_string();
        return out;
    };
    const std::vector<float> batch_prefill = step(false);
    const std::vector<float> batch_decode = step(true);
    ASSERT_EQ(batch_prefill.size(), alone_prefill.size());
    EXPECT_EQ(std::memcmp(batch_prefill.data(), alone_prefill.data(), alone_prefill.size() * 4), 0)
        << what << ": prefill logits differ alone and in a batch of 17";
    ASSERT_EQ(batch_decode.size(), alone_decode.size());
    EXPECT_EQ(std::memcmp(batch_decode.data(), alone_decode.data(), alone_decode.size() * 4), 0)
        << what << ": decode logits differ alone and in a batch of 17";
    bool finite = true;
    for (float x : batch_prefill) finite = finite && std::isfinite(x);
    EXPECT_TRUE(finite) << what;
}

// The fast kernels (issue 14) against the basic ones they replace, and their batch invariance: a row
// computed alone and inside a batch of 9 must be bitwise equal (the per-row order is fixed by the shape).
TEST(CudaOps, FastKernelsMatchBasicAndAreBatchInvariant) {
    if (edge_only()) GTEST_SKIP() << "model widths (the sanitizers check the fast kernels in volt_op_test)";
    const char* env = std::getenv("VOLT_CUDA_TEST_KERNELS");
    const bool sm70 = env != nullptr && std::string(env) == "sm70";
    for (const char* dtype : {"half", "float"}) {
        auto fast = make_backend(dtype, sm70 ? "sm70" : "auto");
        VOLT_NEED_GPU(fast);
        auto basic = make_backend(dtype, sm70 ? "sm70-basic" : "basic");
        ASSERT_TRUE(basic);
        const bool half = std::string(dtype) == "half";
        // Dense: f16-placed bf16 weights (half) or bf16 (float), out not a multiple of 8, 9 rows.
        {
            const int64_t T = 9, in = 2880, out = 1003;
            const std::vector<float> x = randn(T * in, 11, 3.0f);
            const std::vector<uint16_t> w = to_bf16(randn(out * in, 12, 0.02f)),
                                        b = to_bf16(randn(out, 13, 0.5f));
            const ops::DenseWeight hw{ops::Format::kBf16,
                                      w.data(),
                                      nullptr,
                                      nullptr,
                                      0,
                                      {ops::Format::kBf16, b.data(), out},
                                      out,
                                      in};
            std::vector<float> y[2];
            for (int which = 0; which < 2; ++which) {
                CudaBackend& be = which == 0 ? *fast : *basic;
                std::vector<ops::Buffer> owned;
                auto dw = be.place_dense(hw, ops::WeightRole::kAttention, &owned);
                ASSERT_TRUE(dw.is_ok());
                ops::Buffer dx = put(be, x), dy = poisoned<float>(be, T * out);
                be.linear({dx.as<float>(), *dw, dy.as<float>(), T});
                y[which] = get<float>(be, dy, T * out);
                if (which == 0) {
                    // Row 5 alone, from its own buffer.
                    const std::vector<float> x5(x.begin() + 5 * in, x.begin() + 6 * in);
                    ops::Buffer dx5 = put(be, x5), dy5 = poisoned<float>(be, out);
                    be.linear({dx5.as<float>(), *dw, dy5.as<float>(), 1});
                    const std::vector<float> y5 = get<float>(be, dy5, out);
                    for (int64_t o = 0; o < out; ++o)
                        ASSERT_EQ(y5[o], y[0][5 * out + o]) << "linear row 5 alone vs in 9, output " << o;
                }
            }
            expect_close(y[0], y[1], half ? 2e-3 : 1e-5, 1e-5, std::string("linear fast vs basic ") + dtype);
        }
        // Experts: MXFP4 at the model's width, E 8, k 4, 17 tokens, every one routed to expert 0 first (its
        // 17 pairs span three tiles of the decode MMA kernel) and to three of the others.
        {
            const int64_t T = 17, H = 2880, I = 2880, E = 8, k = 4;
            const HostMxExperts mx = host_mx_experts(E, H, I, 77, 119, 3, 21);
            const ops::ExpertWeights gu = mx.gate_up(), dn = mx.down();
            const std::vector<float> x = randn(T * H, 23, 1.5f), y0 = randn(T * H, 24, 100.0f);
            std::vector<int32_t> ids(T * k);
            std::vector<float> wts(T * k);
            for (int64_t t = 0; t < T; ++t)
                for (int64_t j = 0; j < k; ++j) {
                    ids[t * k + j] = j == 0 ? 0 : static_cast<int32_t>(1 + (t + 2 * j) % (E - 1));
                    wts[t * k + j] = 0.1f + 0.2f * static_cast<float>(j);
                }
            std::vector<float> y[2];
            for (int which = 0; which < 2; ++which) {
                CudaBackend& be = which == 0 ? *fast : *basic;
                std::vector<ops::Buffer> owned;
                auto dgu = be.place_experts(gu, &owned);
                auto ddn = be.place_experts(dn, &owned);
                ASSERT_TRUE(dgu.is_ok() && ddn.is_ok());
                ops::Buffer dx = put(be, x), di = put(be, ids), dwt = put(be, wts), dout = put(be, y0);
                be.experts_residual({dx.as<float>(), di.as<int32_t>(), dwt.as<float>(), *dgu, *ddn,
                                     dout.as<float>(), T, k, 7.0f, 1.702f});
                y[which] = get<float>(be, dout, T * H);
                if (which == 0) {
                    const int64_t r = 6;
                    const std::vector<float> xr(x.begin() + r * H, x.begin() + (r + 1) * H),
                        yr(y0.begin() + r * H, y0.begin() + (r + 1) * H);
                    const std::vector<int32_t> ir(ids.begin() + r * k, ids.begin() + (r + 1) * k);
                    const std::vector<float> wr(wts.begin() + r * k, wts.begin() + (r + 1) * k);
                    ops::Buffer dxr = put(be, xr), dir = put(be, ir), dwr = put(be, wr), dor = put(be, yr);
                    be.experts_residual({dxr.as<float>(), dir.as<int32_t>(), dwr.as<float>(), *dgu, *ddn,
                                         dor.as<float>(), 1, k, 7.0f, 1.702f});
                    const std::vector<float> got = get<float>(be, dor, H);
                    for (int64_t o = 0; o < H; ++o)
                        ASSERT_EQ(got[o], y[0][r * H + o]) << "experts token 6 alone vs in 17, output " << o;
                }
            }
            // Compare the branches (the residual of ~100 would hide their error).
            std::vector<float> b0(T * H), b1v(T * H);
            for (int64_t i = 0; i < T * H; ++i) {
                b0[i] = y[0][i] - y0[i];
                b1v[i] = y[1][i] - y0[i];
            }
            expect_close(b0, b1v, half ? 1e-2 : 1e-5, 1e-4, std::string("experts fast vs basic ") + dtype);
        }
    }
}

// Prompt rows (ops.h prompt_rows) take the tensor-core GEMMs: a prompt row's outputs must be bitwise the
// same alone and in a batch (experts: 1 token's pairs in tiles of 32 rows vs 120 tokens' in tiles of 64),
// a generated row's the same as the GEMV's alone, and both close to the GEMV of the same row. Where the
// build has no prompt GEMM (the Volta kernels: prompt_rows_as_generated) prompt rows take the GEMVs, and the
// same checks hold bitwise: alone = in a batch, and prompt row = generated row (no test skipped on a GPU).
TEST(CudaOps, PromptRowGemmsAreBatchInvariant) {
    if (edge_only()) GTEST_SKIP() << "model widths";
    for (const char* dtype : {"half", "bfloat16"}) {
        auto be = make_backend(dtype);
        // The Volta kernels (a volta-ptx build, VOLT_CUDA_TEST_KERNELS=sm70) refuse bfloat16: that dtype has
        // nothing to check there, and VOLT_NEED_GPU would mark the whole test skipped after the half pass.
        if (!be && std::string(dtype) == "bfloat16" && probe_device(0).is_ok()) continue;
        VOLT_NEED_GPU(be);
        const bool gemm = be->dispatch().uses(OpKind::kPromptGemm, "gemm_mma_m16n8k16_f32acc");
        // The other family of the same row: close (a GEMM vs a GEMV), or bitwise where both are the GEMV.
        auto same_or_close = [&](const std::vector<float>& a, const std::vector<float>& b, double rtol,
                                 double atol, const std::string& what) {
            if (gemm) return expect_close(a, b, rtol, atol, what);
            for (size_t o = 0; o < a.size(); ++o)
                ASSERT_EQ(a[o], b[o]) << what << " (no prompt GEMM) output " << o;
        };
        const double tol = std::string(dtype) == "half" ? 1e-2 : 3e-2;
        // o_proj + residual: 70 rows, the first 50 prompt rows.
        {
            const int64_t T = 70, P = 50, in = 4096, H = 2880;
            const std::vector<float> x = randn(T * in, 31, 2.0f), r0 = randn(T * H, 32, 10.0f);
            const std::vector<uint16_t> w = to_bf16(randn(H * in, 33, 0.02f)),
                                        b = to_bf16(randn(H, 34, 0.5f));
            const ops::DenseWeight hw{
                ops::Format::kBf16, w.data(), nullptr, nullptr, 0, {ops::Format::kBf16, b.data(), H}, H, in};
            std::vector<ops::Buffer> owned;
            auto dw = be->place_dense(hw, ops::WeightRole::kAttention, &owned);
            ASSERT_TRUE(dw.is_ok());
            auto run = [&](int64_t first, int64_t n, int64_t p) {
                const std::vector<float> xs(x.begin() + first * in, x.begin() + (first + n) * in),
                    rs(r0.begin() + first * H, r0.begin() + (first + n) * H);
                ops::Buffer dx = put(*be, xs), dr = put(*be, rs);
                be->o_proj_residual({dx.as<float>(), *dw, dr.as<float>(), nullptr, n, false, p});
                return get<float>(*be, dr, n * H);
            };
            const std::vector<float> all = run(0, T, P);
            for (const auto& [row, prompt] : {std::pair<int64_t, bool>{3, true}, {49, true}, {60, false}}) {
                const std::vector<float> alone = run(row, 1, prompt ? 1 : 0);
                for (int64_t o = 0; o < H; ++o)
                    ASSERT_EQ(alone[o], all[row * H + o])
                        << dtype << " o_proj row " << row << " output " << o;
                // The same row by the other family: close, not equal.
                const std::vector<float> other = run(row, 1, prompt ? 0 : 1);
                std::vector<float> ba(H), bo(H);
                for (int64_t o = 0; o < H; ++o) {
                    ba[o] = alone[o] - r0[row * H + o];
                    bo[o] = other[o] - r0[row * H + o];
                }
                same_or_close(ba, bo, tol, 1e-4, std::string("o_proj GEMM vs GEMV ") + dtype);
            }
        }
        // Experts: 120 tokens, all prompt rows (480 pairs over 8 experts: tiles of 64) vs one alone (32).
        {
            const int64_t T = 120, H = 2880, I = 2880, E = 8, k = 4;
            const HostMxExperts mx = host_mx_experts(E, H, I, 91, 119, 3, 41);
            const ops::ExpertWeights gu = mx.gate_up(), dn = mx.down();
            std::vector<ops::Buffer> owned;
            auto dgu = be->place_experts(gu, &owned);
            auto ddn = be->place_experts(dn, &owned);
            ASSERT_TRUE(dgu.is_ok() && ddn.is_ok());
            const std::vector<float> x = randn(T * H, 43, 1.5f), y0 = randn(T * H, 44, 100.0f);
            std::vector<int32_t> ids(T * k);
            std::vector<float> wts(T * k);
            for (int64_t t = 0; t < T; ++t)
                for (int64_t j = 0; j < k; ++j) {
                    ids[t * k + j] = static_cast<int32_t>((t * 5 + 3 * j) % E);
                    wts[t * k + j] = 0.1f + 0.2f * static_cast<float>(j);
                }
            auto run = [&](int64_t first, int64_t n, int64_t p) {
                const std::vector<float> xs(x.begin() + first * H, x.begin() + (first + n) * H),
                    ys(y0.begin() + first * H, y0.begin() + (first + n) * H);
                const std::vector<int32_t> is(ids.begin() + first * k, ids.begin() + (first + n) * k);
                const std::vector<float> ws(wts.begin() + first * k, wts.begin() + (first + n) * k);
                ops::Buffer dx = put(*be, xs), di = put(*be, is), dwt = put(*be, ws), dout = put(*be, ys);
                be->experts_residual({dx.as<float>(), di.as<int32_t>(), dwt.as<float>(), *dgu, *ddn,
                                      dout.as<float>(), n, k, 7.0f, 1.702f, p});
                return get<float>(*be, dout, n * H);
            };
            const std::vector<float> all = run(0, T, T);
            for (int64_t row : {0, 77}) {
                const std::vector<float> alone = run(row, 1, 1);
                for (int64_t o = 0; o < H; ++o)
                    ASSERT_EQ(alone[o], all[row * H + o])
                        << dtype << " experts token " << row << " output " << o;
                const std::vector<float> gemv = run(row, 1, 0);
                std::vector<float> ba(H), bg(H);
                for (int64_t o = 0; o < H; ++o) {
                    ba[o] = alone[o] - y0[row * H + o];
                    bg[o] = gemv[o] - y0[row * H + o];
                }
                same_or_close(ba, bg, tol, 1e-3, std::string("experts GEMM vs GEMV ") + dtype);
            }
        }
    }
}

// RMSNorm fused into the GEMVs of qkv_rope_kvwrite, moe_route and final_logits (the decode path) must
// give bitwise the outputs of rmsnorm then the GEMV (the trace path, keep_intermediates, and the default
// coarse ops of src/ops/backend.cc), for 1 row and for 6 rows (the 4-row tile path), f16 and f32 operands.
TEST(CudaOps, FusedNormGemvIsBitwiseRmsnormThenGemv) {
    for (const char* dtype : {"half", "float"}) {
        auto gpu = make_backend(dtype);
        VOLT_NEED_GPU(gpu);
        const int64_t H = 320, nh = 4, nkv = 2, d = 64, E = 32, V = 1000, k = 4;
        std::vector<ops::Buffer> owned;
        auto dense = [&](int64_t out, int64_t in, uint64_t seed, ops::WeightRole role, bool bias) {
            std::vector<std::vector<uint16_t>> keep;  // host copies, uploaded by place_dense
            keep.reserve(2);
            keep.push_back(to_bf16(randn(out * in, seed, 0.05f)));
            ops::DenseWeight w{ops::Format::kBf16, keep.back().data()};
            w.out = out;
            w.in = in;
            if (bias) {
                keep.push_back(to_bf16(randn(out, seed + 1, 0.1f)));
                w.b = {ops::Format::kBf16, keep.back().data(), out};
            }
            auto p = gpu->place_dense(w, role, &owned);
            VOLT_CHECK(p.is_ok()) << p.status().to_string();
            return *p;
        };
        const std::vector<uint16_t> gain_h = to_bf16(randn(H, 3, 0.3f));
        auto gain = gpu->place_vector({ops::Format::kBf16, gain_h.data(), H}, &owned);
        ASSERT_TRUE(gain.is_ok());
        std::vector<uint16_t> wq = to_bf16(randn(nh * d * H, 4, 0.05f)),
                              wk = to_bf16(randn(nkv * d * H, 5, 0.05f)),
                              wv = to_bf16(randn(nkv * d * H, 6, 0.05f));
        ops::QkvWeights hq;
        hq.q = {ops::Format::kBf16, wq.data()};
        hq.q.out = nh * d;
        hq.q.in = H;
        hq.k = {ops::Format::kBf16, wk.data()};
        hq.k.out = nkv * d;
        hq.k.in = H;
        hq.v = {ops::Format::kBf16, wv.data()};
        hq.v.out = nkv * d;
        hq.v.in = H;
        auto qkv = gpu->place_qkv(hq, &owned);
        ASSERT_TRUE(qkv.is_ok());
        if (!qkv->fused()) GTEST_SKIP() << "q/k/v not fused: the fast kernels are off";
        const ops::DenseWeight router = dense(E, H, 7, ops::WeightRole::kRouter, true);
        const ops::DenseWeight lm = dense(V, H, 9, ops::WeightRole::kLmHead, false);
        std::vector<float> inv_freq(d / 2);
        for (int64_t i = 0; i < d / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / d);
        ops::Buffer dfreq = put(*gpu, inv_freq);
        // [keep]: the fused path writes K and V with RoPE in one launch (rope_kv_write); the other path runs
        // rope alone (no slots) and then kv_write: the pools must hold the same bytes.
        ops::Buffer kpool[2] = {poisoned<uint16_t>(*gpu, 16 * nkv * d),
                                poisoned<uint16_t>(*gpu, 16 * nkv * d)},
                    vpool[2] = {poisoned<uint16_t>(*gpu, 16 * nkv * d),
                                poisoned<uint16_t>(*gpu, 16 * nkv * d)};
        for (int64_t T : {1, 6}) {
            const std::vector<float> x = randn(T * H, 10 + T, 3.0f);
            std::vector<int32_t> pos(T);
            for (int64_t t = 0; t < T; ++t) pos[t] = static_cast<int32_t>(100 * t + 7);
            std::vector<int64_t> slots(T, -1);  // slot 15 - t, the last row none (a padding row)
            for (int64_t t = 0; t + 1 < T; ++t) slots[t] = 15 - t;
            ops::Buffer dx = put(*gpu, x), dpos = put(*gpu, pos), dslots = put(*gpu, slots);
            std::vector<uint16_t> pools[2][2];  // [keep][K, V]
            std::vector<float> out[2][5];       // [keep][q, k, v, moe h, logits]
            std::vector<int32_t> ids[2];
            std::vector<float> wts[2];
            for (int keep = 0; keep < 2; ++keep) {
                ops::Buffer h = poisoned<float>(*gpu, T * H), q = poisoned<float>(*gpu, T * nh * d),
                            kk = poisoned<float>(*gpu, T * nkv * d), v = poisoned<float>(*gpu, T * nkv * d);
                gpu->qkv_rope_kvwrite(
                    {.x = dx.as<float>(),
                     .norm = *gain,
                     .w = *qkv,
                     .positions = dpos.as<int32_t>(),
                     .inv_freq = dfreq.as<float>(),
                     .mscale = 1.25f,
                     .slot_mapping = keep == 0 ? dslots.as<int64_t>() : nullptr,
                     .kv = {ops::Format::kF16, kpool[keep].data(), vpool[keep].data(), 1, 16},
                     .h = h.as<float>(),
                     .q = q.as<float>(),
                     .k = kk.as<float>(),
                     .v = v.as<float>(),
                     .num_tokens = T,
                     .hidden = H,
                     .num_heads = nh,
                     .num_kv_heads = nkv,
                     .head_dim = d,
                     .eps = 1e-5f,
                     .keep_intermediates = keep == 1});
                if (keep == 1)
                    gpu->kv_write({kk.as<float>(),
                                   v.as<float>(),
                                   dslots.as<int64_t>(),
                                   {ops::Format::kF16, kpool[1].data(), vpool[1].data(), 1, 16},
                                   T,
                                   nkv,
                                   d});
                pools[keep][0] = get<uint16_t>(*gpu, kpool[keep], 16 * nkv * d);
                pools[keep][1] = get<uint16_t>(*gpu, vpool[keep], 16 * nkv * d);
                out[keep][0] = get<float>(*gpu, q, T * nh * d);
                out[keep][1] = get<float>(*gpu, kk, T * nkv * d);
                out[keep][2] = get<float>(*gpu, v, T * nkv * d);
                ops::Buffer mh = poisoned<float>(*gpu, T * H), di = poisoned<int32_t>(*gpu, T * k),
                            dw = poisoned<float>(*gpu, T * k);
                const ops::MoeRouteArgs mr{
                    dx.as<float>(), *gain, router, mh.as<float>(), di.as<int32_t>(), dw.as<float>(), T, H, k,
                    1e-5f};
                if (keep == 1)
                    gpu->ops::Backend::moe_route(mr);  // the default: rmsnorm, then router
                else
                    gpu->moe_route(mr);
                out[keep][3] = get<float>(*gpu, mh, T * H);
                ids[keep] = get<int32_t>(*gpu, di, T * k);
                wts[keep] = get<float>(*gpu, dw, T * k);
                std::vector<int32_t> rows(T);
                for (int64_t t = 0; t < T; ++t) rows[t] = static_cast<int32_t>(T - 1 - t);
                ops::Buffer drows = put(*gpu, rows), fh = poisoned<float>(*gpu, T * H),
                            lg = poisoned<float>(*gpu, T * V);
                const ops::FinalLogitsArgs fl{
                    dx.as<float>(), *gain,          lm,       drows.as<int32_t>(), T, H, 1e-5f,
                    fh.as<float>(), lg.as<float>(), keep == 1};
                if (keep == 1)
                    gpu->ops::Backend::final_logits(fl);
                else
                    gpu->final_logits(fl);
                out[keep][4] = get<float>(*gpu, lg, T * V);
            }
            const char* names[5] = {"q", "k", "v", "moe h", "logits"};
            for (int i = 0; i < 5; ++i) {
                ASSERT_EQ(out[0][i].size(), out[1][i].size());
                EXPECT_EQ(std::memcmp(out[0][i].data(), out[1][i].data(), out[0][i].size() * 4), 0)
                    << dtype << " T " << T << ": " << names[i] << " fused vs rmsnorm then GEMV";
            }
            EXPECT_EQ(pools[0][0], pools[1][0])
                << dtype << " T " << T << ": K cache, rope_kv_write vs kv_write";
            EXPECT_EQ(pools[0][1], pools[1][1])
                << dtype << " T " << T << ": V cache, rope_kv_write vs kv_write";
            EXPECT_EQ(ids[0], ids[1]) << dtype << " T " << T;
            EXPECT_EQ(std::memcmp(wts[0].data(), wts[1].data(), wts[0].size() * 4), 0) << dtype << " T " << T;
        }
    }
}

// The int8 KV cache's special vectors (ops/kv_int8.h): NaN or inf anywhere stores s = NaN and q = 0, a
// vector whose scale underflows stores s = 0 and q = 0, subnormal scales and the clamp at +-127: kv_write
// bitwise the CPU's. Then copy_blocks and swap_blocks move the scales with the codes (swapped out and back
// in, every byte of every pool equal).
TEST(CudaOps, Int8KvSpecialValuesAndBlockMoves) {
    auto gpu = make_backend("half");
    VOLT_NEED_GPU(gpu);
    ASSERT_TRUE(gpu->supports_kv_format(ops::Format::kInt8));
    const int64_t nkv = 2, d = 64, bs = 4, nb = 4, T = 8, row = nkv * d;
    std::vector<float> k = randn(T * row, 41, 3.0f), v = randn(T * row, 42, 1e-3f);
    k[0 * row + 5] = std::nanf("");
    k[1 * row + d + 7] = INFINITY;
    v[2 * row + 3] = -INFINITY;
    for (int64_t i = 0; i < d; ++i) {
        k[3 * row + i] = std::ldexp(static_cast<float>(i % 5), -148);      // s = max / 127 underflows to 0
        v[3 * row + i] = std::ldexp(static_cast<float>(i) - 31.5f, -128);  // subnormal s
        k[4 * row + d + i] = i % 2 ? 1e30f : -3e29f;                       // large
    }
    std::vector<int64_t> slots(T);
    for (int64_t t = 0; t < T; ++t) slots[t] = (t * 5 + 3) % (nb * bs);
    std::vector<int8_t> ck(nb * bs * row, 0), cv(ck.size(), 0);
    std::vector<float> cks(nb * bs * nkv, 0.0f), cvs(cks.size(), 0.0f);
    cpu::kv_write({k.data(), v.data(), slots.data(),
                   ops::KvLayer{ops::Format::kInt8, ck.data(), cv.data(), nb, bs, cks.data(), cvs.data()}, T,
                   nkv, d});
    ops::Buffer gk = put(*gpu, std::vector<int8_t>(ck.size(), 0)),
                gv = put(*gpu, std::vector<int8_t>(cv.size(), 0)),
                gks = put(*gpu, std::vector<float>(cks.size(), 0.0f)),
                gvs = put(*gpu, std::vector<float>(cvs.size(), 0.0f));
    const ops::KvLayer layer{ops::Format::kInt8, gk.data(),      gv.data(), nb, bs,
                             gks.as<float>(),    gvs.as<float>()};
    ops::Buffer dk = put(*gpu, k), dv = put(*gpu, v), ds = put(*gpu, slots);
    gpu->kv_write({dk.as<float>(), dv.as<float>(), ds.as<int64_t>(), layer, T, nkv, d});
    auto bits = [](const std::vector<float>& f) {
        std::vector<uint32_t> u(f.size());
        std::memcpy(u.data(), f.data(), f.size() * 4);
        return u;
    };
    EXPECT_EQ(get<int8_t>(*gpu, gk, static_cast<int64_t>(ck.size())), ck);
    EXPECT_EQ(get<int8_t>(*gpu, gv, static_cast<int64_t>(cv.size())), cv);
    EXPECT_EQ(bits(get<float>(*gpu, gks, static_cast<int64_t>(cks.size()))), bits(cks));  // NaN bits too
    EXPECT_EQ(bits(get<float>(*gpu, gvs, static_cast<int64_t>(cvs.size()))), bits(cvs));
    EXPECT_TRUE(std::isnan(cks[slots[0] * nkv])) << "the CPU's own rule (kv_int8.h)";
    EXPECT_EQ(cks[slots[3] * nkv], 0.0f);

    // copy_blocks: block 1 := block 2 (codes and scales); then swap blocks 0..3 out and back in.
    const int64_t block_bytes = bs * nkv * (d + 4), scale_block = bs * nkv * 4;
    auto pools = [&] {
        return std::vector<std::vector<uint8_t>>{
            get<uint8_t>(*gpu, gk, nb * bs * row), get<uint8_t>(*gpu, gv, nb * bs * row),
            get<uint8_t>(*gpu, gks, nb * bs * nkv * 4), get<uint8_t>(*gpu, gvs, nb * bs * nkv * 4)};
    };
    std::vector<std::vector<uint8_t>> want = pools();
    const int32_t src[1] = {2}, dst[1] = {1};
    gpu->copy_blocks({&layer, 1, src, dst, 1, block_bytes, scale_block});
    for (auto& p : want) {
        const size_t per = p.size() / nb;
        std::copy(p.begin() + 2 * per, p.begin() + 3 * per, p.begin() + 1 * per);
    }
    EXPECT_EQ(pools(), want) << "copy_blocks";
    auto host = gpu->alloc_host(nb * 2 * block_bytes);
    ASSERT_TRUE(host.is_ok()) << host.status().to_string();
    const int32_t dev_ids[4] = {0, 1, 2, 3}, host_ids[4] = {3, 2, 1, 0};
    gpu->swap_blocks({&layer, 1, host->data(), dev_ids, host_ids, 4, block_bytes, true, scale_block});
    gpu->synchronize();
    // The host layout (ops.h SwapBlocksArgs): host block h = [K codes, K scales, V codes, V scales].
    const auto* hp = static_cast<const uint8_t*>(host->data());
    for (int64_t i = 0; i < 4; ++i) {
        const uint8_t* hb = hp + host_ids[i] * 2 * block_bytes;
        const int64_t codes = bs * row;
        EXPECT_EQ(0, std::memcmp(hb, want[0].data() + i * codes, codes)) << "K codes of block " << i;
        EXPECT_EQ(0, std::memcmp(hb + codes, want[2].data() + i * scale_block, scale_block)) << i;
        EXPECT_EQ(0, std::memcmp(hb + block_bytes, want[1].data() + i * codes, codes)) << "V codes " << i;
        EXPECT_EQ(0, std::memcmp(hb + block_bytes + codes, want[3].data() + i * scale_block, scale_block))
            << i;
    }
    for (ops::Buffer* b : {&gk, &gv, &gks, &gvs}) gpu->fill(b->data(), 0xff, b->bytes());
    gpu->swap_blocks({&layer, 1, host->data(), dev_ids, host_ids, 4, block_bytes, false, scale_block});
    EXPECT_EQ(pools(), want) << "swapped out and back in";
}

// Integer weights (INT8, AWQ int4 in groups of 32, 64, 128 and 16: the last takes the basic kernel) on the
// GEMV: against the CPU twin with the same operands, a row alone bitwise equal to the same row inside a
// batch of 17 (the one-row pipelined path vs 4-row tiles), the fused o_proj + residual bitwise linear + add,
// prompt rows (the tensor-core GEMM on sm_80+ with f16/bf16 operands) against the CPU and alone vs in 17,
// and final_logits (rmsnorm fused) against the CPU; the basic kernels (--cuda-kernels basic) against the
// CPU too.
TEST(CudaOps, IntegerWeightsMatchCpuAndAreBatchInvariant) {
    const char* env = std::getenv("VOLT_CUDA_TEST_KERNELS");
    const bool sm70 = env != nullptr && std::string(env) == "sm70";
    struct IntCase {
        ops::Format f;
        int64_t group;
    };
    const int64_t T = 17, in = edge_only() ? 256 : 2880, out = edge_only() ? 136 : 1000;
    for (const char* dtype : {"half", "float", "bfloat16"}) {
        auto fast = make_backend(dtype, sm70 ? "sm70" : "auto");
        if (!fast && std::string(dtype) == "bfloat16") continue;  // compute capability < 8.0
        VOLT_NEED_GPU(fast);
        auto basic = make_backend(dtype, sm70 ? "sm70-basic" : "basic");
        ASSERT_TRUE(basic);
        for (const IntCase& ic : {IntCase{ops::Format::kInt8, 0}, IntCase{ops::Format::kInt4, 64},
                                  IntCase{ops::Format::kInt4, 128}, IntCase{ops::Format::kInt4, 32},
                                  IntCase{ops::Format::kInt4, 16}}) {
            if (in % std::max<int64_t>(ic.group, 1) != 0) continue;
            const std::string what =
                std::string(ops::format_name(ic.f)) + " group " + std::to_string(ic.group) + " " + dtype;
            // Weights quantized from N(0, 0.02) by the convert quantizers (quant/int_weights.h).
            const std::vector<float> wf = randn(out * in, 51, 0.02f);
            std::vector<int8_t> q8;
            std::vector<uint16_t> s16;
            std::vector<int32_t> qw, qz;
            ops::DenseWeight hw;
            hw.format = ic.f;
            hw.out = out;
            hw.in = in;
            if (ic.f == ops::Format::kInt8) {
                q8.resize(out * in);
                s16.resize(out);
                for (int64_t o = 0; o < out; ++o)
                    ASSERT_TRUE(quant::quantize_int8_row(wf.data() + o * in, in, q8.data() + o * in, &s16[o])
                                    .is_ok());
                hw.w = q8.data();
            } else {
                qw.resize(in * out / 8);
                qz.resize(in / ic.group * out / 8);
                s16.resize(in / ic.group * out);
                ASSERT_TRUE(
                    quant::quantize_awq(wf.data(), out, in, ic.group, qw.data(), qz.data(), s16.data())
                        .is_ok());
                hw.w = qw.data();
                hw.zeros = qz.data();
                hw.group_size = ic.group;
            }
            hw.scales = s16.data();
            const std::vector<uint16_t> bias = to_bf16(randn(out, 52, 0.5f));
            hw.b = {ops::Format::kBf16, bias.data(), out};
            const std::vector<float> x = randn(T * in, 53, 3.0f);
            // The CPU twin with the operands the GPU multiplies (x rounded to the operand format).
            std::vector<float> xo = x;
            for (float& e : xo)
                e = fast->operand() == Operand::kF16    ? f16_to_f32(f32_to_f16(e))
                    : fast->operand() == Operand::kBf16 ? bf16_to_f32(f32_to_bf16(e))
                                                        : e;
            std::vector<float> want(T * out);
            cpu::linear({.x = xo.data(), .weight = hw, .y = want.data(), .num_tokens = T});
            for (int which = 0; which < 2; ++which) {
                CudaBackend& be = which == 0 ? *fast : *basic;
                const std::string w2 = what + (which == 0 ? " fast" : " basic");
                std::vector<ops::Buffer> owned;
                auto dw = be.place_dense(hw, ops::WeightRole::kAttention, &owned);
                ASSERT_TRUE(dw.is_ok()) << dw.status().to_string();
                EXPECT_TRUE(dw->cuda_layout);
                ops::Buffer dx = put(be, x), dy = poisoned<float>(be, T * out);
                be.linear({dx.as<float>(), *dw, dy.as<float>(), T});
                const std::vector<float> y = get<float>(be, dy, T * out);
                // The fast GEMV with f16/bf16 operands sums in f16 chains of 8 products per half (gemv.cu,
                // docs/quantization.md "Integer weights on the GPU"): against this twin (x already rounded)
                // its error has a standard deviation of at most sqrt(4.5) 2^-11 / sqrt(3) = 6.0e-4 of
                // rms(y) <= max|y|; 4e-3 of max|y| is more than 6 of them. Otherwise f32 sums (2e-5).
                const bool f16_chains = which == 0 && be.operand() != Operand::kF32;
                expect_close(y, want, f16_chains ? 4e-3 : 2e-5, 1e-5, "linear " + w2);
                for (int64_t r : {int64_t{0}, int64_t{5}, int64_t{16}}) {
                    const std::vector<float> xr(x.begin() + r * in, x.begin() + (r + 1) * in);
                    ops::Buffer dxr = put(be, xr), dyr = poisoned<float>(be, out);
                    be.linear({dxr.as<float>(), *dw, dyr.as<float>(), 1});
                    const std::vector<float> yr = get<float>(be, dyr, out);
                    for (int64_t o = 0; o < out; ++o)
                        ASSERT_EQ(yr[o], y[r * out + o])
                            << w2 << ": row " << r << " alone vs in 17, output " << o;
                }
                // o_proj_residual: x0 + (W a + b), bitwise the linear's outputs added in f32.
                const std::vector<float> res0 = randn(T * out, 54, 100.0f);
                ops::Buffer dres = put(be, res0), dout = poisoned<float>(be, T * out);
                ops::DenseWeight ow = *dw;
                be.o_proj_residual({dx.as<float>(), ow, dres.as<float>(), dout.as<float>(), T, true, 0});
                const std::vector<float> res = get<float>(be, dres, T * out);
                for (int64_t i = 0; i < T * out; ++i)
                    ASSERT_EQ(res[i], res0[i] + y[i]) << w2 << " o_proj " << i;
                // Prompt rows (ops.h prompt_rows: the tensor-core GEMM where it runs, else the GEMV): all 17
                // rows as prompt rows against the CPU, and row 5 alone as a prompt row bitwise the same.
                {
                    const std::vector<float> z(T * out, 0.0f);
                    ops::Buffer dz = put(be, z), dp = poisoned<float>(be, T * out);
                    be.o_proj_residual({dx.as<float>(), ow, dz.as<float>(), dp.as<float>(), T, true, T});
                    const std::vector<float> yp = get<float>(be, dp, T * out);
                    expect_close(yp, want, 2e-3, 1e-5, "prompt rows " + w2);
                    const std::vector<float> x5(x.begin() + 5 * in, x.begin() + 6 * in), z5(out, 0.0f);
                    ops::Buffer dx5 = put(be, x5), dz5 = put(be, z5), dp5 = poisoned<float>(be, out);
                    be.o_proj_residual({dx5.as<float>(), ow, dz5.as<float>(), dp5.as<float>(), 1, true, 1});
                    const std::vector<float> y5 = get<float>(be, dp5, out);
                    for (int64_t o = 0; o < out; ++o)
                        ASSERT_EQ(y5[o], yp[5 * out + o])
                            << w2 << ": prompt row 5 alone vs in 17, output " << o;
                }
                // final_logits (lm_head role): rows 16, 3 of x normed (f32 gain) then the GEMV.
                std::vector<ops::Buffer> owned2;
                auto lw = be.place_dense(hw, ops::WeightRole::kLmHead, &owned2);
                ASSERT_TRUE(lw.is_ok()) << lw.status().to_string();
                const std::vector<uint16_t> gain = to_bf16(randn(in, 55, 0.3f));
                const ops::VectorWeight hg{ops::Format::kBf16, gain.data(), in};
                auto dg = be.place_vector(hg, &owned2);
                ASSERT_TRUE(dg.is_ok());
                const std::vector<int32_t> rows = {16, 3};
                ops::Buffer drows = put(be, rows), dh = poisoned<float>(be, 2 * in),
                            dl = poisoned<float>(be, 2 * out);
                be.final_logits({dx.as<float>(), *dg, *lw, drows.as<int32_t>(), 2, in, 1e-5f, dh.as<float>(),
                                 dl.as<float>()});
                std::vector<float> h(2 * in), hl(2 * out);
                cpu::rmsnorm({.x = x.data(),
                              .w = hg,
                              .y = h.data(),
                              .num_rows = 2,
                              .hidden = in,
                              .eps = 1e-5f,
                              .rows = rows.data()});
                for (float& e : h)
                    e = be.operand() == Operand::kF16    ? f16_to_f32(f32_to_f16(e))
                        : be.operand() == Operand::kBf16 ? bf16_to_f32(f32_to_bf16(e))
                                                         : e;
                cpu::linear({.x = h.data(), .weight = hw, .y = hl.data(), .num_tokens = 2});
                // The GPU's rmsnorm differs from the CPU's in its last bits, which may move an operand
                // by one f16/bf16 ulp: the linear entry's tolerance for those modes.
                expect_close(get<float>(be, dl, 2 * out), hl, be.operand() == Operand::kF32 ? 2e-5 : 5e-3,
                             1e-5, "final_logits " + w2);
            }
        }
    }
}

TEST(CudaForward, BatchInvariantLogits) {
    auto probe = probe_device(0);
    if (!probe.is_ok()) GTEST_SKIP() << "no CUDA device: " << probe.status().to_string();
    const auto mxfp4 = load_golden("tiny-mxfp4");
    const auto bf16 = load_golden("tiny-bf16");
    struct Mode {
        const char* dtype;
        const char* kernels;
        ops::Format kv;
    };
    const bool bf16_ok = probe->cc() >= 80 && probe->kernel_arch >= 800;
    std::vector<Mode> modes = {{"float", "auto", ops::Format::kF32},
                               {"half", "auto", ops::Format::kF16},
                               {"half", "sm70", ops::Format::kF16},
                               {"float", "sm70", ops::Format::kF32}};
    if (bf16_ok) modes.push_back({"bfloat16", "auto", ops::Format::kF16});
    for (const Mode& m : modes) {
        auto gpu = make_backend(m.dtype, m.kernels);
        ASSERT_TRUE(gpu) << m.dtype << " " << m.kernels;
        const std::string what =
            std::string(m.dtype) + " kernels " + m.kernels + " kv " + ops::format_name(m.kv);
        check_batch_invariance(*gpu, mxfp4, m.kv, "tiny-mxfp4 " + what);
        check_batch_invariance(*gpu, bf16, m.kv, "tiny-bf16 " + what);
    }
}

// ---- CPU expert offload (issue 22): prompt rows of offloaded layers on the GPU's experts kernels ----

std::vector<ops::HostExpertLayer> host_expert_layers(const model::ModelWeights& w,
                                                     const std::vector<bool>& on) {
    std::vector<ops::HostExpertLayer> out;
    for (size_t l = 0; l < on.size(); ++l)
        if (on[l]) out.push_back({w.layers[l].gate_up, w.layers[l].down});
    return out;
}

struct OffloadRun {
    std::vector<float> prompt, decode;  // logits of every prompt row; of each decode step's row
};

// A 72-token prompt (logits of every row), then 3 generated tokens one step each, with the experts of
// `on_host` layers in host memory run by `runner` (prepared: prompt rows on the GPU from its staging).
OffloadRun offload_run(CudaBackend& gpu, const std::shared_ptr<const model::ModelWeights>& host,
                       const std::vector<bool>& on_host, cpu::HostExpertsRunner* runner) {
    auto placed = model::place_model(host, gpu, on_host);
    VOLT_CHECK(placed.is_ok()) << placed.status().to_string();
    if (runner != nullptr) {
        const Status st = runner->prepare(gpu, host_expert_layers(*host, on_host));
        VOLT_CHECK(st.is_ok()) << st.to_string();
    }
    model::Forward fwd(*placed, gpu);
    fwd.set_host_experts(runner);
    model::SequenceRunner run(fwd, 96, 16, ops::Format::kF16);
    const int64_t V = host->config.vocab_size;
    std::vector<int32_t> prompt(72);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 37 + 11) % V);
    OffloadRun out;
    out.prompt = run.append(prompt, /*all_rows=*/true);
    for (int32_t id : {101, 2024, 77}) {
        const std::vector<float> l = run.append(std::vector<int32_t>{id}, false, 0, /*generated=*/true);
        out.decode.insert(out.decode.end(), l.begin(), l.end());
    }
    return out;
}

// Logits with offload (the last 2 layers, every layer) against the same backend without: prompt rows run
// the GPU's own experts kernels on the staged experts, so their logits are the same bits; generated rows
// run the CPU's f32 kernel: with --dtype float within scripts/gpu/offload.sh's tolerance (max |diff| <=
// 1e-3 x max |logit|), with half-precision experts on the GPU only finite (the CPU is f32, the GPU not).
// Data: the demo model (assets/demo-model: MXFP4 experts, H 256, 8 experts; gemm_mma prompt GEMM under
// half, the GEMV under float).
TEST(CudaOffload, LogitsMatchNoOffloadPromptRowsBitwise) {
    auto probe = probe_device(0);
    if (!probe.is_ok()) GTEST_SKIP() << "no CUDA device: " << probe.status().to_string();
    auto loaded =
        model::load_model(source_dir() + "/assets/demo-model", {.progress = io::ProgressMode::kOff});
    ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
    const std::shared_ptr<const model::ModelWeights> host = *loaded;
    const int64_t L = host->config.num_hidden_layers;
    for (const char* dtype : {"float", "half"}) {
        auto gpu = make_backend(dtype);
        ASSERT_TRUE(gpu) << dtype;
        const OffloadRun ref = offload_run(*gpu, host, {}, nullptr);
        std::vector<bool> last2(L, false), all(L, true);
        last2[L - 1] = last2[L - 2] = true;
        for (const auto& [name, on_host] : {std::pair{"last 2", last2}, std::pair{"all", all}}) {
            const std::string what = std::string(dtype) + ", offload " + name;
            cpu::HostExpertsRunner runner;
            const OffloadRun off = offload_run(*gpu, host, on_host, &runner);
            EXPECT_GT(runner.staging_bytes(), 0) << what << ": " << runner.host_prompt_reason();
            const int64_t n = std::count(on_host.begin(), on_host.end(), true);
            EXPECT_EQ(runner.stats().staged_calls, n) << what;  // the prompt step, each offloaded layer
            EXPECT_EQ(runner.stats().staged_rows, 72 * n) << what;
            ASSERT_EQ(off.prompt.size(), ref.prompt.size());
            EXPECT_EQ(std::memcmp(off.prompt.data(), ref.prompt.data(), ref.prompt.size() * 4), 0)
                << what << ": prompt logits differ from the same backend without offload";
            ASSERT_EQ(off.decode.size(), ref.decode.size());
            bool finite = true;
            for (float v : off.decode) finite = finite && std::isfinite(v);
            EXPECT_TRUE(finite) << what;
            if (std::string(dtype) == "float")
                expect_close(off.decode, ref.decode, 1e-3, 0.0, what + " decode");
        }
    }
}

// One experts call of 70 prompt rows and 3 generated rows through the runner on the GPU: the prompt rows
// are the same bits alone as beside the generated rows and the same bits as the layer not offloaded (the
// GPU's experts on its placed weights); the generated rows the same bits alone as beside the prompt rows.
TEST(CudaOffload, PromptRowsAreBatchInvariantAcrossRowKinds) {
    auto probe = probe_device(0);
    if (!probe.is_ok()) GTEST_SKIP() << "no CUDA device: " << probe.status().to_string();
    auto loaded =
        model::load_model(source_dir() + "/assets/demo-model", {.progress = io::ProgressMode::kOff});
    ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
    const model::LayerWeights& layer = (*loaded)->layers[1];
    const int64_t H = layer.down.out, E = layer.gate_up.num_experts, K = 2, P = 70, D = 3, T = P + D;
    for (const char* dtype : {"float", "half"}) {
        auto gpu = make_backend(dtype);
        ASSERT_TRUE(gpu) << dtype;
        std::mt19937 rng(9);
        std::vector<int32_t> ids(T * K);
        for (int64_t t = 0; t < T; ++t) {
            ids[t * K] = static_cast<int32_t>(rng() % E);
            ids[t * K + 1] = static_cast<int32_t>((ids[t * K] + 1 + rng() % (E - 1)) % E);
        }
        std::vector<float> wts(T * K);
        for (int64_t t = 0; t < T; ++t) {
            wts[t * K] = 0.5f + 0.4f * static_cast<float>(rng() % 1000) / 1000.0f;
            wts[t * K + 1] = 1.0f - wts[t * K];
        }
        const std::vector<float> x = randn(T * H, 21), resid = randn(T * H, 22);
        ops::Buffer dx = put(*gpu, x), di = put(*gpu, ids), dw = put(*gpu, wts);
        std::vector<ops::Buffer> owned;
        auto pg = gpu->place_experts(layer.gate_up, &owned);
        auto pd = gpu->place_experts(layer.down, &owned);
        ASSERT_TRUE(pg.is_ok() && pd.is_ok());
        auto args = [&](int64_t first, int64_t n, int64_t prompt, const ops::Buffer& out, bool placed) {
            return ops::ExpertsArgs{.x = dx.as<float>() + first * H,
                                    .expert_ids = di.as<int32_t>() + first * K,
                                    .expert_weights = dw.as<float>() + first * K,
                                    .gate_up = placed ? *pg : layer.gate_up,
                                    .down = placed ? *pd : layer.down,
                                    .out = const_cast<float*>(out.as<float>()) + first * H,
                                    .num_tokens = n,
                                    .top_k = K,
                                    .swiglu_limit = 7.0f,
                                    .swiglu_alpha = 1.702f,
                                    .prompt_rows = prompt};
        };
        cpu::HostExpertsRunner runner;
        ASSERT_TRUE(runner.prepare(*gpu, {{layer.gate_up, layer.down}}).is_ok());
        ASSERT_GT(runner.staging_bytes(), 0) << runner.host_prompt_reason();
        ops::Buffer mixed = put(*gpu, resid), alone = put(*gpu, resid), gen = put(*gpu, resid),
                    placed = put(*gpu, resid);
        ASSERT_TRUE(runner.run(*gpu, args(0, T, P, mixed, false)).is_ok());
        ASSERT_TRUE(runner.run(*gpu, args(0, P, P, alone, false)).is_ok());
        ASSERT_TRUE(runner.run(*gpu, args(P, D, 0, gen, false)).is_ok());
        gpu->experts_residual(args(0, P, P, placed, true));
        const std::vector<float> m = get<float>(*gpu, mixed, T * H), a = get<float>(*gpu, alone, T * H),
                                 g = get<float>(*gpu, gen, T * H), p = get<float>(*gpu, placed, T * H);
        EXPECT_EQ(std::memcmp(m.data(), a.data(), P * H * 4), 0) << dtype << ": prompt rows alone vs mixed";
        EXPECT_EQ(std::memcmp(m.data(), p.data(), P * H * 4), 0) << dtype << ": prompt rows vs not offloaded";
        EXPECT_EQ(std::memcmp(m.data() + P * H, g.data() + P * H, D * H * 4), 0)
            << dtype << ": generated rows alone vs mixed";
        EXPECT_NE(std::memcmp(m.data(), resid.data(), T * H * 4), 0) << dtype << ": nothing was added";
        EXPECT_EQ(runner.stats().staged_calls, 2);
    }
}

TEST(CudaBackendInfo, DtypeRulesFollowVllm) {
    DeviceInfo v100;
    v100.name = "Tesla V100-SXM2-32GB";
    v100.cc_major = 7;
    v100.cc_minor = 0;
    EXPECT_EQ(*resolve_dtype("auto", v100, false), Operand::kF16);
    auto refused = resolve_dtype("bfloat16", v100, false);
    ASSERT_FALSE(refused.is_ok());
    EXPECT_EQ(
        refused.status().message(),
        "Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla "
        "V100-SXM2-32GB GPU has compute capability 7.0. You can use float16 instead by explicitly setting "
        "the `dtype` flag in CLI, for example: --dtype=half.");
    DeviceInfo h200;
    h200.name = "NVIDIA H200";
    h200.cc_major = 9;
    EXPECT_EQ(*resolve_dtype("auto", h200, false), Operand::kBf16);
    EXPECT_EQ(*resolve_dtype("auto", h200, true), Operand::kF16);  // the Volta kernels: as on a V100
    EXPECT_FALSE(resolve_dtype("bfloat16", h200, true).is_ok());
    EXPECT_EQ(*resolve_dtype("float", h200, true), Operand::kF32);
    // Volta code on an H200 and --cuda-kernels sm70 both mean: sm_70 variants, no cuBLAS.
    std::string why;
    EXPECT_FALSE(cublas_allowed({90, 700, false, false}, &why));
    EXPECT_FALSE(cublas_allowed({90, 900, true, false}, &why));
    EXPECT_TRUE(cublas_allowed({90, 900, false, false}, &why));
    EXPECT_TRUE(cublas_allowed({70, 700, false, false}, &why));  // a real V100: cuBLAS 12/11 allowed
    EXPECT_TRUE(cublas_allowed({89, 860, false, false}, &why));  // sm_86 code on Ada is not Volta
    int n = 0;
    EXPECT_STREQ(Cublas::sonames_for(70, &n)[0], "libcublas.so.12");
    EXPECT_STREQ(Cublas::sonames_for(90, &n)[0], "libcublas.so.13");
    const Dispatch d = choose_dispatch({90, 700, false, true});
    for (int i = 0; i < static_cast<int>(OpKind::kCount); ++i) {
        ASSERT_NE(d.variant[i], nullptr);
        EXPECT_EQ(d.variant[i]->min_cc, 70);
        EXPECT_FALSE(d.variant[i]->needs_cublas);
    }
    // The fast kernels of issue 14 win where they exist; --cuda-kernels basic gives issue 13's table back.
    EXPECT_TRUE(choose_dispatch({90, 900, false, true}).uses(OpKind::kLinear, "linear_gemv_ld128_f32acc"));
    EXPECT_TRUE(choose_dispatch({90, 900, false, true}).uses(OpKind::kExperts, "experts_mma_m16n8k16"));
    EXPECT_TRUE(choose_dispatch({80, 800, false, true}).uses(OpKind::kExperts, "experts_mma_m16n8k16"));
    EXPECT_TRUE(choose_dispatch({90, 700, false, true}).uses(OpKind::kExperts, "experts_gemv_mxfp4_f16x2"));
    EXPECT_TRUE(choose_dispatch({80, 750, false, true}).uses(OpKind::kExperts, "experts_gemv_mxfp4_f16x2"));
    DispatchInput off{90, 900, false, true};
    off.off = "linear_gemv_ld128_f32acc,experts_mma_m16n8k16";  // VOLT_CUDA_KERNELS_OFF: the next one down
    EXPECT_TRUE(choose_dispatch(off).uses(OpKind::kExperts, "experts_gemv_mxfp4_f16x2"));
    EXPECT_TRUE(choose_dispatch(off).uses(OpKind::kLinear, "linear_cublas_f16_tiles64"));
    off.off = "experts_mma_m16n8k1";  // a prefix is not a name
    EXPECT_TRUE(choose_dispatch(off).uses(OpKind::kExperts, "experts_mma_m16n8k16"));
    EXPECT_TRUE(
        choose_dispatch({90, 900, false, true, true}).uses(OpKind::kLinear, "linear_cublas_f16_tiles64"));
    EXPECT_TRUE(
        choose_dispatch({90, 900, false, true, true}).uses(OpKind::kExperts, "experts_warp_mxfp4_3pass"));
    EXPECT_TRUE(choose_dispatch({70, 700, true, false, true}).uses(OpKind::kLinear, "linear_warp_f32acc"));
    // Prompt rows on tensor cores only with sm_80+ code on an sm_80+ GPU (a fat binary's sm_75 code on an
    // A100 or compute_70 PTX on an H200 keeps the GEMVs), never under --cuda-kernels basic.
    EXPECT_TRUE(
        choose_dispatch({90, 900, false, true}).uses(OpKind::kPromptGemm, "gemm_mma_m16n8k16_f32acc"));
    EXPECT_TRUE(
        choose_dispatch({80, 800, false, false}).uses(OpKind::kPromptGemm, "gemm_mma_m16n8k16_f32acc"));
    EXPECT_TRUE(
        choose_dispatch({80, 750, false, true}).uses(OpKind::kPromptGemm, "prompt_rows_as_generated"));
    EXPECT_TRUE(
        choose_dispatch({75, 750, false, true}).uses(OpKind::kPromptGemm, "prompt_rows_as_generated"));
    EXPECT_TRUE(
        choose_dispatch({90, 900, false, true, true}).uses(OpKind::kPromptGemm, "prompt_rows_as_generated"));
}

}  // namespace
}  // namespace volt::cuda
