// The int8 KV cache (docs/quantization.md "KV cache"): the quantizer of ops/kv_int8.h against its
// definition and error bound, the CPU's kv_write and attention on an int8 KvStore, copy-on-write and swap
// of int8 blocks (codes and scales, bitwise), the pool sizes, and the refusal on a backend without it.
#include "ops/kv_int8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cpu/cpu_ops.h"
#include "model/counting_backend.h"
#include "model/kv_store.h"
#include "model/random_model.h"

namespace volt {
namespace {

// |fl(q s) - v| <= s (1/2 + 254 u), u = 2^-24 (docs/quantization.md).
constexpr double kBound = 0.5 + 254.0 / 16777216.0;

std::vector<float> normal(int64_t n, double sigma, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, static_cast<float>(sigma));
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

// Quantizes, dequantizes, and checks the definition: s == fl(max|v| / 127), codes in [-127, 127], every
// element within the bound of its true value (and within s/2 in exact arithmetic up to the f32 division).
void check_round_trip(const std::vector<float>& v) {
    const int64_t d = static_cast<int64_t>(v.size());
    std::vector<int8_t> q(d);
    std::vector<float> back(d);
    float s = -1;
    ops::kv_int8_quantize(v.data(), d, q.data(), &s);
    ops::kv_int8_dequantize(q.data(), s, d, back.data());
    float amax = 0;
    for (float x : v) amax = std::max(amax, std::abs(x));
    ASSERT_EQ(s, amax / 127.0f);
    for (int64_t i = 0; i < d; ++i) {
        ASSERT_GE(q[i], -127) << i;
        ASSERT_EQ(back[i], static_cast<float>(q[i]) * s) << i;  // one f32 product
        const double exact = std::abs(static_cast<double>(q[i]) * s - v[i]);
        const double stored = std::abs(static_cast<double>(back[i]) - v[i]);
        ASSERT_LE(exact, s * (0.5 + 127.0 / 16777216.0)) << "element " << i << " v " << v[i] << " s " << s;
        ASSERT_LE(stored, s * kBound) << "element " << i << " v " << v[i] << " s " << s;
    }
}

TEST(KvInt8, RoundTripWithinTheBound) {
    for (int64_t d : {2, 16, 64, 128}) {
        for (double sigma : {1.0, 1e-3, 300.0, 1e30, 1e-30}) {
            for (uint32_t seed = 0; seed < 20; ++seed) check_round_trip(normal(d, sigma, seed + 100 * d));
        }
    }
    // The maximum is exactly +-127, and a vector of one repeated value.
    check_round_trip({-3.0f, 1.0f, 2.0f, 0.5f});
    check_round_trip(std::vector<float>(64, 7.25f));
    // Large magnitudes up to 2^127 (the format's stated range: at FLT_MAX, 127 * fl(FLT_MAX / 127) can
    // round past FLT_MAX to inf).
    check_round_trip({1.7e38f, -1.7e38f, 3.0f});
}

TEST(KvInt8, TiesRoundToEvenAndTheMaximumIs127) {
    // max 15.875 = 127 / 8: s = 0.125 exactly, so v / s is exact: 2.5 -> 2, 3.5 -> 4, -0.5 -> 0, 1.5 -> 2.
    const std::vector<float> v = {15.875f, 0.3125f, 0.4375f, -0.0625f, 0.1875f, -15.875f};
    std::vector<int8_t> q(v.size());
    float s;
    ops::kv_int8_quantize(v.data(), static_cast<int64_t>(v.size()), q.data(), &s);
    EXPECT_EQ(s, 0.125f);
    EXPECT_EQ(std::vector<int>(q.begin(), q.end()), (std::vector<int>{127, 2, 4, 0, 2, -127}));
}

TEST(KvInt8, ZeroAndUnderflowingVectorsStoreScaleZero) {
    std::vector<int8_t> q(4, 9);
    float s = 1;
    const std::vector<float> zero(4, 0.0f);
    ops::kv_int8_quantize(zero.data(), 4, q.data(), &s);
    EXPECT_EQ(s, 0.0f);
    EXPECT_EQ(std::vector<int>(q.begin(), q.end()), std::vector<int>(4, 0));
    // The smallest subnormal: max / 127 underflows to 0, so the vector reads back as 0 (error < 2^-149).
    const std::vector<float> tiny = {std::numeric_limits<float>::denorm_min(), 0.0f, 0.0f, 0.0f};
    std::fill(q.begin(), q.end(), 9);
    ops::kv_int8_quantize(tiny.data(), 4, q.data(), &s);
    EXPECT_EQ(s, 0.0f);
    EXPECT_EQ(std::vector<int>(q.begin(), q.end()), std::vector<int>(4, 0));
}

TEST(KvInt8, NonFiniteVectorsReadBackAsNaN) {
    // A NaN or inf must stay non-finite through the cache (the engine fails such a request), never become
    // a finite code.
    for (const float bad : {std::nanf(""), std::numeric_limits<float>::infinity()}) {
        std::vector<int8_t> q(4, 9);
        float s = 1;
        const std::vector<float> v = {1.0f, bad, -2.0f, 0.5f};
        ops::kv_int8_quantize(v.data(), 4, q.data(), &s);
        EXPECT_TRUE(std::isnan(s));
        std::vector<float> back(4);
        ops::kv_int8_dequantize(q.data(), s, 4, back.data());
        for (float b : back) EXPECT_TRUE(std::isnan(b));
    }
}

class KvInt8Store : public ::testing::Test {
  protected:
    KvInt8Store() : config_(model::testing::small_config(2)) {}
    model::KvStore make(int64_t blocks, ops::Format f = ops::Format::kInt8) {
        const int64_t counts[2] = {blocks, blocks};
        auto s = model::KvStore::create(backend_, config_, kBlock, counts, f);
        EXPECT_TRUE(s.is_ok()) << s.status().to_string();
        return std::move(*s);
    }
    // kv_write of random rows into slots [0, n) of layer 0.
    void write(const model::KvStore& s, int64_t n, uint32_t seed) {
        const int64_t row = config_.kv_dim();
        const std::vector<float> k = normal(n * row, 1.0, seed), v = normal(n * row, 2.0, seed + 1);
        std::vector<int64_t> slots(n);
        for (int64_t i = 0; i < n; ++i) slots[i] = i;
        backend_.kv_write({k.data(), v.data(), slots.data(), s.layers()[0], n, config_.num_key_value_heads,
                           config_.head_dim});
    }
    static constexpr int64_t kBlock = 4;
    model::GptOssConfig config_;
    cpu::CpuBackend backend_;
};

TEST_F(KvInt8Store, SizesCountTheScales) {
    const auto& c = config_;
    const int64_t bs = 16, nkv = c.num_key_value_heads, d = c.head_dim;
    for (int g = 0; g < 2; ++g) {
        int64_t layers = 0;
        for (int64_t l = 0; l < c.num_hidden_layers; ++l) layers += model::kv_group_of(c, l) == g;
        const int64_t i8 = model::KvStore::bytes_per_block(c, bs, g, ops::Format::kInt8);
        const int64_t f16 = model::KvStore::bytes_per_block(c, bs, g, ops::Format::kF16);
        EXPECT_EQ(i8, layers * 2 * bs * nkv * (d + 4));
        EXPECT_EQ(f16, layers * 2 * bs * nkv * d * 2);
        // int8 + scales = 0.5 x f16 + the scales' 4 bytes per head vector.
        EXPECT_EQ(2 * i8, f16 + layers * 2 * bs * nkv * 8);
    }
    // gpt-oss (d = 64): 68 / 128 bytes per head vector.
    model::GptOssConfig g = c;
    g.head_dim = 64;
    EXPECT_DOUBLE_EQ(static_cast<double>(model::KvStore::pool_block_bytes(g, 16, ops::Format::kInt8)) /
                         static_cast<double>(model::KvStore::pool_block_bytes(g, 16, ops::Format::kF16)),
                     68.0 / 128.0);
    const model::KvStore s = make(3);
    EXPECT_EQ(s.block_bytes(), model::KvStore::pool_block_bytes(c, kBlock, ops::Format::kInt8));
    EXPECT_EQ(s.scale_block_bytes(), kBlock * nkv * 4);
    for (const ops::KvLayer& l : s.layers()) {
        EXPECT_NE(l.k_scales, nullptr);
        EXPECT_NE(l.v_scales, nullptr);
    }
    EXPECT_EQ(make(3, ops::Format::kF32).layers()[0].k_scales, nullptr);
}

TEST_F(KvInt8Store, KvWriteStoresTheQuantizerOutput) {
    const model::KvStore s = make(4);
    const int64_t n = 10, nkv = config_.num_key_value_heads, d = config_.head_dim, row = config_.kv_dim();
    write(s, n, 5);
    const std::vector<float> k = normal(n * row, 1.0, 5);
    const ops::KvLayer& l = s.layers()[0];
    for (int64_t t = 0; t < n; ++t) {
        for (int64_t g = 0; g < nkv; ++g) {
            std::vector<int8_t> q(d);
            float sc;
            ops::kv_int8_quantize(k.data() + (t * nkv + g) * d, d, q.data(), &sc);
            EXPECT_EQ(l.k_scales[t * nkv + g], sc);
            EXPECT_EQ(std::memcmp(static_cast<const int8_t*>(l.k) + (t * nkv + g) * d, q.data(), d), 0);
        }
    }
}

TEST_F(KvInt8Store, CopyAndSwapMoveCodesAndScalesBitwise) {
    const model::KvStore s = make(6);
    write(s, 6 * kBlock, 9);  // every block of layer 0
    const ops::KvLayer l = s.layers()[0];
    const int64_t cb = s.block_bytes() - s.scale_block_bytes(), sb = s.scale_block_bytes();
    auto block = [&](const void* pool, int64_t b, int64_t n) {
        const auto* p = static_cast<const uint8_t*>(pool) + b * n;
        return std::vector<uint8_t>(p, p + n);
    };
    auto all = [&](int64_t b) {
        return std::vector<std::vector<uint8_t>>{block(l.k, b, cb), block(l.v, b, cb),
                                                 block(l.k_scales, b, sb), block(l.v_scales, b, sb)};
    };
    const auto b1 = all(1), b5 = all(5);
    ASSERT_NE(b1, all(4));
    const int32_t src = 1, dst = 4;
    backend_.copy_blocks({&l, 1, &src, &dst, 1, s.block_bytes(), s.scale_block_bytes()});
    EXPECT_EQ(all(4), b1);
    EXPECT_EQ(all(1), b1);
    // Out to host block 2, overwrite the device block, back into device block 0.
    auto host = backend_.alloc_host(3 * 2 * s.block_bytes());
    ASSERT_TRUE(host.is_ok());
    const int32_t dev_out = 5, host_id = 2, dev_in = 0;
    backend_.swap_blocks({&l, 1, host->data(), &dev_out, &host_id, 1, s.block_bytes(), true, sb});
    // The host block: K codes, K scales, V codes, V scales.
    const auto* h = host->as<uint8_t>() + 2 * 2 * s.block_bytes();
    EXPECT_EQ(std::vector<uint8_t>(h, h + cb), b5[0]);
    EXPECT_EQ(std::vector<uint8_t>(h + cb, h + cb + sb), b5[2]);
    EXPECT_EQ(std::vector<uint8_t>(h + cb + sb, h + 2 * cb + sb), b5[1]);
    EXPECT_EQ(std::vector<uint8_t>(h + 2 * cb + sb, h + 2 * (cb + sb)), b5[3]);
    backend_.swap_blocks({&l, 1, host->data(), &dev_in, &host_id, 1, s.block_bytes(), false, sb});
    EXPECT_EQ(all(0), b5);
}

// Attention over the int8 cache equals attention over an f32 cache holding the dequantized values q s
// bitwise (the kernel reads exactly q * s in f32), and differs from the f32 cache of the true values.
TEST_F(KvInt8Store, AttentionReadsTheDequantizedValues) {
    const int64_t n = 11, nkv = config_.num_key_value_heads, d = config_.head_dim, row = config_.kv_dim();
    const int64_t nh = config_.num_attention_heads;
    const model::KvStore i8 = make(4), f32 = make(4, ops::Format::kF32), deq = make(4, ops::Format::kF32);
    write(i8, n, 21);
    write(f32, n, 21);
    const ops::KvLayer& l = i8.layers()[0];
    for (int64_t slot = 0; slot < n; ++slot)
        for (int64_t g = 0; g < nkv; ++g) {
            const int64_t off = slot * row + g * d;
            ops::kv_int8_dequantize(static_cast<const int8_t*>(l.k) + off, l.k_scales[slot * nkv + g], d,
                                    static_cast<float*>(deq.layers()[0].k) + off);
            ops::kv_int8_dequantize(static_cast<const int8_t*>(l.v) + off, l.v_scales[slot * nkv + g], d,
                                    static_cast<float*>(deq.layers()[0].v) + off);
        }
    const std::vector<float> q = normal(2 * nh * d, 1.0, 3), sinks(nh, 0.5f);
    const int32_t lens[2] = {static_cast<int32_t>(n), 7}, qsl[3] = {0, 1, 2};
    const int32_t tables[2 * 3] = {0, 1, 2, 0, 1, -1};
    auto run = [&](const model::KvStore& s, int64_t window) {
        std::vector<float> out(2 * nh * d);
        backend_.attention({q.data(),
                            s.layers()[0],
                            lens,
                            qsl,
                            tables,
                            {ops::Format::kF32, sinks.data(), nh},
                            out.data(),
                            2,
                            2,
                            nh,
                            nkv,
                            d,
                            3,
                            window,
                            0.125f,
                            n});
        return out;
    };
    for (int64_t window : {0, 4}) {
        const auto a = run(i8, window), b = run(deq, window), c = run(f32, window);
        EXPECT_EQ(a, b) << "window " << window;
        EXPECT_NE(a, c) << "window " << window;
        double worst = 0;
        for (size_t i = 0; i < a.size(); ++i)
            worst = std::max(worst, std::abs(static_cast<double>(a[i]) - c[i]));
        EXPECT_LT(worst, 0.1) << "window " << window;  // loose: the op harness checks the bound
    }
}

TEST(KvInt8Refusal, BackendWithoutInt8RefusesNamingTheFlag) {
    volt::testing::CountingBackend b(int64_t{1} << 30);
    const int64_t counts[2] = {2, 2};
    auto s = model::KvStore::create(b, model::testing::small_config(2), 4, counts, ops::Format::kInt8);
    ASSERT_FALSE(s.is_ok());
    EXPECT_EQ(s.status().code(), StatusCode::kUnimplemented);
    EXPECT_NE(s.status().message().find("--kv-cache-dtype int8"), std::string::npos) << s.status().message();
    EXPECT_TRUE(
        model::KvStore::create(b, model::testing::small_config(2), 4, counts, ops::Format::kF16).is_ok());
}

}  // namespace
}  // namespace volt
