// The fast MXFP4 experts kernel (src/cpu/experts_fast.h) against the scalar reference cpu::experts
// (itself checked against spec §8's vectors in ops_test.cc and the double reference of volt_op_test), for
// every instruction set this CPU runs; and its batch invariance, bitwise: a token alone and the same token
// in a batch of 17 that routes elsewhere give the same bits.
#include "cpu/experts_fast.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "cpu/cpu_ops.h"

namespace volt::cpu {
namespace {

// Random MXFP4 experts: every code byte uniform (all 16 E2M1 codes, both signs; their rms is 2.93),
// scale bytes around the one that gives rows of rms `row_rms` against unit-rms inputs (gate/up at 5 reach
// the SwiGLU clamp of 7 in part of the units), bf16 biases.
struct Experts {
    std::vector<uint8_t> blocks, scales;
    std::vector<uint16_t> bias;
    ops::ExpertWeights view;
};
Experts random_experts(std::mt19937_64& rng, int64_t E, int64_t out, int64_t in, double row_rms) {
    Experts x;
    const int scale = 127 + static_cast<int>(std::lround(std::log2(row_rms / std::sqrt(double(in)) / 2.93)));
    std::uniform_int_distribution<int> byte(0, 255), sc(scale - 1, scale + 1);
    std::normal_distribution<float> normal(0.0f, 0.5f);
    x.blocks.resize(E * out * in / 2);
    for (auto& b : x.blocks) b = static_cast<uint8_t>(byte(rng));
    x.scales.resize(E * out * in / 32);
    for (auto& s : x.scales) s = static_cast<uint8_t>(sc(rng));
    x.bias.resize(E * out);
    for (auto& b : x.bias) b = f32_to_bf16(normal(rng));
    x.view.format = ops::Format::kMxfp4;
    x.view.blocks = x.blocks.data();
    x.view.scales = x.scales.data();
    x.view.bias = {ops::Format::kBf16, x.bias.data(), E * out};
    x.view.num_experts = E;
    x.view.out = out;
    x.view.in = in;
    return x;
}

struct Problem {
    int64_t T, K, H, I, E;
    Experts gu, dn;
    std::vector<float> x, w, resid;
    std::vector<int32_t> ids;
};

// T tokens, each routed to K distinct random experts with softmax-like weights; x ~ N(0, 1) (normed h).
Problem make_problem(uint64_t seed, int64_t T, int64_t K, int64_t H, int64_t I, int64_t E) {
    std::mt19937_64 rng(seed);
    Problem p{T,  K,  H,  I, E, random_experts(rng, E, 2 * I, H, 5.0), random_experts(rng, E, H, I, 1.0),
              {}, {}, {}, {}};
    std::normal_distribution<float> normal(0.0f, 1.0f);
    p.x.resize(T * H);
    for (auto& v : p.x) v = normal(rng);
    p.resid.resize(T * H);
    for (auto& v : p.resid) v = normal(rng) * 4.0f;
    for (int64_t t = 0; t < T; ++t) {
        std::vector<int32_t> all(E);
        for (int64_t e = 0; e < E; ++e) all[e] = static_cast<int32_t>(e);
        std::shuffle(all.begin(), all.end(), rng);
        float sum = 0.0f;
        std::vector<float> wt(K);
        for (int64_t j = 0; j < K; ++j) sum += wt[j] = std::exp(normal(rng));
        for (int64_t j = 0; j < K; ++j) {
            p.ids.push_back(all[j]);
            p.w.push_back(wt[j] / sum);
        }
    }
    return p;
}

ops::ExpertsArgs args_of(const Problem& p, float* out, int64_t first = 0, int64_t count = -1) {
    return {.x = p.x.data() + first * p.H,
            .expert_ids = p.ids.data() + first * p.K,
            .expert_weights = p.w.data() + first * p.K,
            .gate_up = p.gu.view,
            .down = p.dn.view,
            .out = out,
            .num_tokens = count < 0 ? p.T : count,
            .top_k = p.K,
            .swiglu_limit = 7.0f,
            .swiglu_alpha = 1.702f};
}

std::vector<Isa> simd_isas() {
    std::vector<Isa> v;
    for (Isa i : {Isa::kAvx2, Isa::kAvx512})
        if (isa_supported(i)) v.push_back(i);
    return v;
}

// Tolerance, relative to the largest |expert contribution| of the case: the two kernels sum the same
// f32 products in different orders (the reference: 8 partial sums per 32-value block, scaled per block;
// the fast one: 8 or 16 SIMD lanes over the whole row), each within n*eps*sum|w x| of the exact value;
// with n <= 2880 and random signs the observed difference is <= 5e-7 of the output scale, and a wrong
// nibble, scale or bias gives O(1). The SwiGLU clamp (7) bounds how an input difference grows.
constexpr double kRelTol = 2e-5;

void expect_close_to_reference(const Problem& p, Isa isa) {
    std::vector<float> ref = p.resid, fast = p.resid;
    experts(args_of(p, ref.data()));
    experts_fast(args_of(p, fast.data()), isa);
    double scale = 0.0, worst = 0.0;
    for (size_t i = 0; i < ref.size(); ++i) scale = std::max(scale, std::fabs(double(ref[i]) - p.resid[i]));
    ASSERT_GT(scale, 1.0) << "the experts contribute nothing: the case tests nothing";
    for (size_t i = 0; i < ref.size(); ++i) {
        ASSERT_TRUE(std::isfinite(fast[i])) << i;
        worst = std::max(worst, std::fabs(double(fast[i]) - ref[i]));
    }
    EXPECT_LE(worst, kRelTol * scale)
        << isa_name(isa) << ": worst |fast - reference| " << worst << " at an output scale of " << scale;
}

TEST(ExpertsFast, BestIsaIsSupported) {
    EXPECT_TRUE(isa_supported(best_isa()));
    EXPECT_TRUE(isa_supported(Isa::kScalar));
}

TEST(ExpertsFast, MatchesReferenceSmallShapes) {
    if (simd_isas().empty())
        GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512: the scalar reference runs";
    for (Isa isa : simd_isas()) {
        // One token; 17 tokens over few experts (chunks of 4 and a partial chunk); H != I.
        expect_close_to_reference(make_problem(1, 1, 4, 96, 64, 8), isa);
        expect_close_to_reference(make_problem(2, 17, 4, 96, 64, 5), isa);
        expect_close_to_reference(make_problem(3, 33, 2, 64, 160, 3), isa);
    }
}

TEST(ExpertsFast, MatchesReferenceGptOssShape) {
    // gpt-oss rows: H = I = 2880 (90 blocks), 4 of 6 experts, 3 tokens.
    if (simd_isas().empty()) GTEST_SKIP() << "no AVX2";
    const Problem p = make_problem(4, 3, 4, 2880, 2880, 6);
    for (Isa isa : simd_isas()) expect_close_to_reference(p, isa);
}

TEST(ExpertsFast, BatchInvariantBitwise) {
    if (simd_isas().empty()) GTEST_SKIP() << "no AVX2";
    const Problem p = make_problem(5, 17, 4, 96, 64, 6);
    for (Isa isa : simd_isas()) {
        std::vector<float> batch = p.resid;
        experts_fast(args_of(p, batch.data()), isa);
        for (int64_t t : {0, 7, 16}) {
            std::vector<float> alone(p.resid.begin() + t * p.H, p.resid.begin() + (t + 1) * p.H);
            experts_fast(args_of(p, alone.data(), t, 1), isa);
            EXPECT_EQ(std::memcmp(alone.data(), batch.data() + t * p.H, p.H * sizeof(float)), 0)
                << isa_name(isa) << ": token " << t << " alone differs from the same token in a batch of 17";
        }
    }
}

TEST(ExpertsFast, NonMxfp4RunsTheReference) {
    // Dense bf16 experts take the scalar reference: bitwise cpu::experts.
    std::mt19937_64 rng(6);
    Problem p = make_problem(6, 2, 2, 64, 32, 3);
    std::vector<uint16_t> gu(3 * 64 * 64), dn(3 * 64 * 32);
    std::normal_distribution<float> normal(0.0f, 0.2f);
    for (auto& v : gu) v = f32_to_bf16(normal(rng));
    for (auto& v : dn) v = f32_to_bf16(normal(rng));
    p.gu.view.format = p.dn.view.format = ops::Format::kBf16;
    p.gu.view.w = gu.data();
    p.dn.view.w = dn.data();
    std::vector<float> ref = p.resid, fast = p.resid;
    experts(args_of(p, ref.data()));
    experts_fast(args_of(p, fast.data()));
    EXPECT_EQ(std::memcmp(ref.data(), fast.data(), ref.size() * sizeof(float)), 0);
}

TEST(ExpertsFast, BytesReadCountsDistinctExperts) {
    // Two tokens sharing expert 1: experts {0, 1, 2} are read once each. Per expert: gate_up 2I rows of
    // H/2 code bytes + H/32 scales + 2-byte bias, down H rows of I/2 + I/32 + 2.
    Problem p = make_problem(7, 2, 2, 64, 32, 4);
    p.ids = {0, 1, 1, 2};
    const int64_t per = 64 * (64 / 2 + 64 / 32 + 2) + 64 * (32 / 2 + 32 / 32 + 2);
    std::vector<float> out = p.resid;
    EXPECT_EQ(expert_bytes_read(args_of(p, out.data())), 3 * per);
}

}  // namespace
}  // namespace volt::cpu
