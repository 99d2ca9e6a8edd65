// The fast MXFP4 experts kernel (experts_fast.h). Layout of the work: (1) routing lists, the (token,
// rank) pairs of each expert in pair order; (2) each token's x permuted into the order the decoder
// produces a block's values (lane_pos: AVX-512, the low nibbles, then the high ones, of bytes 0, 4, 8, 12,
// 1, 5, ..; AVX2 the same idea in four vectors of 8), so a decoded vector meets its x vector without a
// shuffle; (3) gate_up:
// work items (expert, 16 units), each unit's gate and up rows dotted with up to kChunk tokens of that
// expert at once (a block is decoded once for the chunk), clamped SwiGLU, activation stored in the down
// projection's permuted order; (4) down: items (expert, 32 rows), rows in pairs; (5) the weighted sum over
// the k experts in rank order into the residual, as the reference. The SIMD functions carry their own
// target attribute (no lambdas inside them: a lambda would not inherit it), so this file compiles for the
// baseline x86-64 and the binary runs anywhere.
#include "cpu/experts_fast.h"

// GCC 12's AVX-512 intrinsics seed their masked builtins with _mm512_undefined_*(), which -Wuninitialized
// reports inside the headers (a false positive of the headers, not of this code).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "cpu/cpu_ops.h"

namespace volt::cpu {

namespace {

constexpr int64_t kUnitTile = 16;  // gate_up: units (row pairs) per work item
constexpr int64_t kRowTile = 32;   // down: rows per work item
constexpr int kMaxChunk = 4;       // tokens dotted at once (AVX-512; AVX2 takes 2)

// Where element k (0..31) of a block sits in the permuted order of `isa` (see the file comment).
inline int lane_pos(Isa isa, int k) {
    const int b = k >> 1, nibble = k & 1;
    // AVX-512: lane l of a decoded vector holds byte b = 4 (l % 4) + l / 4 of the block (see dot2_avx512),
    // its low nibble (element 2b) in the first vector, its high one (2b + 1) in the second.
    if (isa == Isa::kAvx512) return nibble * 16 + 4 * (b % 4) + b / 4;
    // AVX2: vector v = 2 ((b % 4) / 2) + nibble, lane 4 ((b % 4) % 2) + b / 4 (see dot2_avx2).
    return 8 * (2 * ((b % 4) / 2) + nibble) + 4 * ((b % 4) % 2) + b / 4;
}

// dot2<NT>: rows r0 and r1 (codes b0/b1 [nb, 16], scales s0/s1 [nb]) dotted with the permuted rows
// xs[0..NT) (each [nb * 32] f32): y0[t] = r0 . x_t, y1[t] = r1 . x_t. Every token's arithmetic is the
// same sequence of operations whatever NT is: the batch invariance of the kernel rests on it.
using Dot2Fn = void (*)(const uint8_t* b0, const uint8_t* s0, const uint8_t* b1, const uint8_t* s1,
                        int64_t nb, const float* const* xs, float* y0, float* y1);

// ---- AVX-512 ---------------------------------------------------------------------------------------

// scaled[e][c] = E2M1 value of code c times 2^(e - 127) (e = 0: times 2^-127), the f32 product the kernel
// used to form per block (exact: a power of two; 6 x 2^127 is inf as before). 16 KiB, built once.
const float (*scaled_fp4_tables())[16] {
    alignas(64) static float t[256][16];
    static const bool built = [] {
        for (int e = 0; e < 256; ++e)
            for (int c = 0; c < 16; ++c) t[e][c] = kFp4Values[c] * e8m0_to_f32(static_cast<uint8_t>(e));
        return true;
    }();
    (void)built;
    return t;
}

template <int NT>
__attribute__((target("avx512f,avx512bw,avx512vl,fma"))) void dot2_avx512(
    const uint8_t* b0, const uint8_t* s0, const uint8_t* b1, const uint8_t* s1, int64_t nb,
    const float* const* xs, float* y0, float* y1) {
    const __m512i shift_lo = _mm512_set_epi32(24, 24, 24, 24, 16, 16, 16, 16, 8, 8, 8, 8, 0, 0, 0, 0);
    const __m512i shift_hi = _mm512_add_epi32(shift_lo, _mm512_set1_epi32(4));
    // Separate accumulators for the even and the odd elements: two independent FMA chains per row.
    __m512 e0[NT], o0[NT], e1[NT], o1[NT];
    for (int t = 0; t < NT; ++t) e0[t] = o0[t] = e1[t] = o1[t] = _mm512_setzero_ps();
    const float(*scaled)[16] = scaled_fp4_tables();
    for (int64_t g = 0; g < nb; ++g) {
        if ((g & 3) == 0) {  // 4 KiB ahead in each row's stream (the next rows): the hardware prefetcher
                             // alone left half the time waiting
            _mm_prefetch(reinterpret_cast<const char*>(b0 + 16 * g + 4096), _MM_HINT_T0);
            _mm_prefetch(reinterpret_cast<const char*>(b1 + 16 * g + 4096), _MM_HINT_T0);
        }
        // The 16 E2M1 values times the block's 2^(byte - 127), read from the table of that byte (one
        // load: no conversion, broadcast or multiply per block), then one lookup per nibble.
        const __m512 t0 = _mm512_load_ps(scaled[s0[g]]);
        const __m512 t1 = _mm512_load_ps(scaled[s1[g]]);
        // The block's 16 bytes in each 128-bit quarter (a load, no shuffle); lane l shifts its dword
        // (bytes 4 (l % 4) ..) right by 8 (l / 4) (+ 4): byte 4 (l % 4) + l / 4's low (high) nibble lands in
        // bits 0..3, all vpermps reads of an index.
        const __m512i c0 =
            _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b0 + 16 * g)));
        const __m512i c1 =
            _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b1 + 16 * g)));
        const __m512 we0 = _mm512_permutexvar_ps(_mm512_srlv_epi32(c0, shift_lo), t0);
        const __m512 wo0 = _mm512_permutexvar_ps(_mm512_srlv_epi32(c0, shift_hi), t0);
        const __m512 we1 = _mm512_permutexvar_ps(_mm512_srlv_epi32(c1, shift_lo), t1);
        const __m512 wo1 = _mm512_permutexvar_ps(_mm512_srlv_epi32(c1, shift_hi), t1);
        for (int t = 0; t < NT; ++t) {
            const float* x = xs[t] + 32 * g;
            const __m512 xe = _mm512_loadu_ps(x), xo = _mm512_loadu_ps(x + 16);
            e0[t] = _mm512_fmadd_ps(we0, xe, e0[t]);
            o0[t] = _mm512_fmadd_ps(wo0, xo, o0[t]);
            e1[t] = _mm512_fmadd_ps(we1, xe, e1[t]);
            o1[t] = _mm512_fmadd_ps(wo1, xo, o1[t]);
        }
    }
    for (int t = 0; t < NT; ++t) {
        y0[t] = _mm512_reduce_add_ps(_mm512_add_ps(e0[t], o0[t]));
        y1[t] = _mm512_reduce_add_ps(_mm512_add_ps(e1[t], o1[t]));
    }
}

// ---- AVX2 + FMA --------------------------------------------------------------------------------------

__attribute__((target("avx2,fma"))) inline float hsum256(__m256 v) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));  // 4 lanes
    const __m128 p = _mm_add_ps(s, _mm_movehl_ps(s, s));                                  // 2 lanes
    return _mm_cvtss_f32(_mm_add_ss(p, _mm_shuffle_ps(p, p, 1)));
}

// 8 codes (int32 lanes, 0..15) to their values from the positive / negative halves of the scaled table:
// vpermps reads the low 3 bits, bit 3 (the sign) picks the half through blendv (lane sign bit).
__attribute__((target("avx2,fma"))) inline __m256 lookup8(__m256i code, __m256 pos, __m256 neg) {
    return _mm256_blendv_ps(_mm256_permutevar8x32_ps(pos, code), _mm256_permutevar8x32_ps(neg, code),
                            _mm256_castsi256_ps(_mm256_slli_epi32(code, 28)));
}

template <int NT>
__attribute__((target("avx2,fma"))) void dot2_avx2(const uint8_t* b0, const uint8_t* s0, const uint8_t* b1,
                                                   const uint8_t* s1, int64_t nb, const float* const* xs,
                                                   float* y0, float* y1) {
    // Vector v (0..3) of a block, lane l: byte b = 4 (l % 4) + l / 4 + 2 (v / 2), nibble v % 2 (lane_pos):
    // the block's 16 bytes broadcast to both 128-bit halves (a load), lane l's dword shifted right by
    // 8 (l / 4 + 2 (v / 2)) + 4 (v % 2) puts the code in bits 0..3 (vpermps reads bits 0..2; the sign, bit
    // 3, goes to bit 31 for blendv).
    const __m256i shift[4] = {
        _mm256_set_epi32(8, 8, 8, 8, 0, 0, 0, 0), _mm256_set_epi32(12, 12, 12, 12, 4, 4, 4, 4),
        _mm256_set_epi32(24, 24, 24, 24, 16, 16, 16, 16), _mm256_set_epi32(28, 28, 28, 28, 20, 20, 20, 20)};
    const float(*scaled)[16] = scaled_fp4_tables();
    __m256 a0[NT], c0[NT], a1[NT], c1[NT];  // two FMA chains per (row, token)
    for (int t = 0; t < NT; ++t) a0[t] = c0[t] = a1[t] = c1[t] = _mm256_setzero_ps();
    for (int64_t g = 0; g < nb; ++g) {
        if ((g & 3) == 0) {  // as dot2_avx512
            _mm_prefetch(reinterpret_cast<const char*>(b0 + 16 * g + 4096), _MM_HINT_T0);
            _mm_prefetch(reinterpret_cast<const char*>(b1 + 16 * g + 4096), _MM_HINT_T0);
        }
        // The positive and negative halves of the block's scaled table (scaled_fp4_tables).
        const __m256 p0 = _mm256_load_ps(scaled[s0[g]]), n0 = _mm256_load_ps(scaled[s0[g]] + 8);
        const __m256 p1 = _mm256_load_ps(scaled[s1[g]]), n1 = _mm256_load_ps(scaled[s1[g]] + 8);
        const __m256i r0 =
            _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b0 + 16 * g)));
        const __m256i r1 =
            _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b1 + 16 * g)));
        __m256 w0[4], w1[4];
        for (int v = 0; v < 4; ++v) {
            w0[v] = lookup8(_mm256_srlv_epi32(r0, shift[v]), p0, n0);
            w1[v] = lookup8(_mm256_srlv_epi32(r1, shift[v]), p1, n1);
        }
        for (int t = 0; t < NT; ++t) {
            const float* x = xs[t] + 32 * g;
            const __m256 x0 = _mm256_loadu_ps(x), x1 = _mm256_loadu_ps(x + 8);
            const __m256 x2 = _mm256_loadu_ps(x + 16), x3 = _mm256_loadu_ps(x + 24);
            a0[t] = _mm256_fmadd_ps(w0[0], x0, a0[t]);
            c0[t] = _mm256_fmadd_ps(w0[1], x1, c0[t]);
            a1[t] = _mm256_fmadd_ps(w1[0], x0, a1[t]);
            c1[t] = _mm256_fmadd_ps(w1[1], x1, c1[t]);
            a0[t] = _mm256_fmadd_ps(w0[2], x2, a0[t]);
            c0[t] = _mm256_fmadd_ps(w0[3], x3, c0[t]);
            a1[t] = _mm256_fmadd_ps(w1[2], x2, a1[t]);
            c1[t] = _mm256_fmadd_ps(w1[3], x3, c1[t]);
        }
    }
    for (int t = 0; t < NT; ++t) {
        y0[t] = hsum256(_mm256_add_ps(a0[t], c0[t]));
        y1[t] = hsum256(_mm256_add_ps(a1[t], c1[t]));
    }
}

// The dot2 variants of an ISA, by chunk size 1..chunk.
struct Kernels {
    int chunk = 0;
    Dot2Fn dot2[kMaxChunk + 1] = {};
};

Kernels kernels_for(Isa isa) {
    Kernels k;
    if (isa == Isa::kAvx512) {
        k.chunk = 4;
        k.dot2[1] = dot2_avx512<1>;
        k.dot2[2] = dot2_avx512<2>;
        k.dot2[3] = dot2_avx512<3>;
        k.dot2[4] = dot2_avx512<4>;
    } else {
        k.chunk = 2;
        k.dot2[1] = dot2_avx2<1>;
        k.dot2[2] = dot2_avx2<2>;
    }
    return k;
}

int64_t vector_bytes(const ops::VectorWeight& v) {
    return v.data == nullptr ? 0 : (v.format == ops::Format::kF32 ? 4 : 2);
}

// Per-call scratch, kept by the calling thread between calls (a layer's step reuses the last one's).
struct Scratch {
    std::vector<int32_t> begin, order;  // routing lists: pairs of expert e at order[begin[e]..begin[e+1])
    std::vector<float> x, act, y;       // permuted x [T, H], permuted activations [pairs, I], y [pairs, H]
    struct Item {
        int32_t expert, row;
    };
    std::vector<Item> items;
};

}  // namespace

const char* isa_name(Isa isa) {
    switch (isa) {
        case Isa::kScalar:
            return "scalar";
        case Isa::kAvx2:
            return "avx2";
        case Isa::kAvx512:
            return "avx512";
    }
    return "?";
}

bool isa_supported(Isa isa) {
    switch (isa) {
        case Isa::kScalar:
            return true;
        case Isa::kAvx2:
            return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        case Isa::kAvx512:
            return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma");
    }
    return false;
}

Isa best_isa() {
    static const Isa best = isa_supported(Isa::kAvx512) ? Isa::kAvx512
                            : isa_supported(Isa::kAvx2) ? Isa::kAvx2
                                                        : Isa::kScalar;
    return best;
}

int64_t expert_bytes_read(const ops::ExpertsArgs& a) {
    std::vector<bool> seen(a.gate_up.num_experts, false);
    int64_t bytes = 0;
    for (int64_t p = 0; p < a.num_tokens * a.top_k; ++p) {
        const int32_t e = a.expert_ids[p];
        if (seen[e]) continue;
        seen[e] = true;
        for (const ops::ExpertWeights* w : {&a.gate_up, &a.down})
            bytes += w->out * (w->in / 2 + w->in / 32 + vector_bytes(w->bias));
    }
    return bytes;
}

void experts_fast(const ops::ExpertsArgs& a, Isa isa) {
    const ops::ExpertWeights& gu = a.gate_up;
    const ops::ExpertWeights& dn = a.down;
    const int64_t T = a.num_tokens, K = a.top_k, H = dn.out, I = dn.in, E = gu.num_experts;
    if (isa == Isa::kScalar || gu.format != ops::Format::kMxfp4 || dn.format != ops::Format::kMxfp4 ||
        H % 32 != 0 || I % 32 != 0 || gu.in != H || gu.out != 2 * I) {
        experts(a);
        return;
    }
    VOLT_CHECK(isa_supported(isa)) << "experts_fast: this CPU does not run " << isa_name(isa);
    if (T == 0) return;
    const Kernels kern = kernels_for(isa);
    const int64_t pairs = T * K;
    // The caller's scratch, named by a reference: the pool's lambdas must see this thread's instance (a
    // thread_local named inside them would be each worker's own).
    thread_local Scratch tls;
    Scratch& s = tls;

    // (1) Routing lists, stable: pairs of an expert in increasing pair order.
    s.begin.assign(E + 1, 0);
    for (int64_t p = 0; p < pairs; ++p) {
        const int32_t e = a.expert_ids[p];
        VOLT_CHECK(e >= 0 && e < E) << "expert id " << e << " of " << E;
        ++s.begin[e + 1];
    }
    for (int64_t e = 0; e < E; ++e) s.begin[e + 1] += s.begin[e];
    s.order.resize(pairs);
    {
        std::vector<int32_t> fill(s.begin.begin(), s.begin.end() - 1);
        for (int64_t p = 0; p < pairs; ++p) s.order[fill[a.expert_ids[p]]++] = static_cast<int32_t>(p);
    }
    int pos[32];
    for (int k = 0; k < 32; ++k) pos[k] = lane_pos(isa, k);
    auto& pool = cpu_thread_pool();

    // (2) x in the decoder's order.
    s.x.resize(T * H);
    pool.parallel_for(T, 8, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t)
            for (int64_t g = 0; g < H / 32; ++g)
                for (int k = 0; k < 32; ++k) s.x[t * H + 32 * g + pos[k]] = a.x[t * H + 32 * g + k];
    });

    // (3) gate_up + SwiGLU per (expert, tile of units).
    const int64_t nb_gu = H / 32, nb_dn = I / 32;
    s.act.resize(pairs * I);
    s.items.clear();
    for (int64_t e = 0; e < E; ++e)
        if (s.begin[e + 1] > s.begin[e])
            for (int64_t u = 0; u < I; u += kUnitTile)
                s.items.push_back({static_cast<int32_t>(e), static_cast<int32_t>(u)});
    pool.parallel_for(static_cast<int64_t>(s.items.size()), 1, [&](int64_t ib, int64_t ie) {
        const float* xs[kMaxChunk];
        float g[kMaxChunk], up[kMaxChunk];
        for (int64_t it = ib; it < ie; ++it) {
            const int64_t e = s.items[it].expert, u0 = s.items[it].row;
            const int32_t* list = s.order.data() + s.begin[e];
            const int64_t n = s.begin[e + 1] - s.begin[e];
            for (int64_t u = u0; u < std::min(u0 + kUnitTile, I); ++u) {
                const int64_t r = e * gu.out + 2 * u;  // gate row; up is r + 1
                const uint8_t* b0 = gu.blocks + r * nb_gu * 16;
                const uint8_t* s0 = gu.scales + r * nb_gu;
                const float bg = gu.bias.data != nullptr ? vector_at(gu.bias, r) : 0.0f;
                const float bu = gu.bias.data != nullptr ? vector_at(gu.bias, r + 1) : 0.0f;
                const int64_t dst = (u / 32) * 32 + pos[u % 32];
                for (int64_t c = 0; c < n; c += kern.chunk) {
                    const int nt = static_cast<int>(std::min<int64_t>(kern.chunk, n - c));
                    for (int j = 0; j < nt; ++j) xs[j] = s.x.data() + (list[c + j] / K) * H;
                    kern.dot2[nt](b0, s0, b0 + nb_gu * 16, s0 + nb_gu, nb_gu, xs, g, up);
                    for (int j = 0; j < nt; ++j)
                        s.act[list[c + j] * I + dst] =
                            swiglu_oai(g[j] + bg, up[j] + bu, a.swiglu_limit, a.swiglu_alpha);
                }
            }
        }
    });

    // (4) down + bias per (expert, tile of rows), rows in pairs (H is a multiple of 32).
    s.y.resize(pairs * H);
    s.items.clear();
    for (int64_t e = 0; e < E; ++e)
        if (s.begin[e + 1] > s.begin[e])
            for (int64_t o = 0; o < H; o += kRowTile)
                s.items.push_back({static_cast<int32_t>(e), static_cast<int32_t>(o)});
    pool.parallel_for(static_cast<int64_t>(s.items.size()), 1, [&](int64_t ib, int64_t ie) {
        const float* xs[kMaxChunk];
        float y0[kMaxChunk], y1[kMaxChunk];
        for (int64_t it = ib; it < ie; ++it) {
            const int64_t e = s.items[it].expert, o0 = s.items[it].row;
            const int32_t* list = s.order.data() + s.begin[e];
            const int64_t n = s.begin[e + 1] - s.begin[e];
            for (int64_t o = o0; o < std::min(o0 + kRowTile, H); o += 2) {
                const int64_t r = e * dn.out + o;
                const uint8_t* b0 = dn.blocks + r * nb_dn * 16;
                const uint8_t* s0 = dn.scales + r * nb_dn;
                const float bias0 = dn.bias.data != nullptr ? vector_at(dn.bias, r) : 0.0f;
                const float bias1 = dn.bias.data != nullptr ? vector_at(dn.bias, r + 1) : 0.0f;
                for (int64_t c = 0; c < n; c += kern.chunk) {
                    const int nt = static_cast<int>(std::min<int64_t>(kern.chunk, n - c));
                    for (int j = 0; j < nt; ++j) xs[j] = s.act.data() + list[c + j] * I;
                    kern.dot2[nt](b0, s0, b0 + nb_dn * 16, s0 + nb_dn, nb_dn, xs, y0, y1);
                    for (int j = 0; j < nt; ++j) {
                        s.y[list[c + j] * H + o] = y0[j] + bias0;
                        s.y[list[c + j] * H + o + 1] = y1[j] + bias1;
                    }
                }
            }
        }
    });

    // (5) The weighted sum over the k experts in rank order, added to the residual (as cpu::experts).
    pool.parallel_for(T, 1, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
            float* out = a.out + t * H;
            for (int64_t o = 0; o < H; ++o) {
                float sum = 0.0f;
                for (int64_t j = 0; j < K; ++j) sum += a.expert_weights[t * K + j] * s.y[(t * K + j) * H + o];
                out[o] += sum;
            }
        }
    });
}

double measure_host_read_gbps(int64_t bytes, int runs) {
    const int64_t n = std::max<int64_t>(bytes / 8, 1 << 16);
    std::vector<uint64_t> buf(n);
    auto& pool = cpu_thread_pool();
    pool.parallel_for(n, 1 << 16, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) buf[i] = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
    });
    const int parts = pool.num_threads();
    std::vector<uint64_t> sink(parts * 8, 0);  // one cache line per part
    double best = 0.0;
    for (int r = 0; r < runs; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        pool.parallel_for(parts, 1, [&](int64_t pb, int64_t pe) {
            for (int64_t p = pb; p < pe; ++p) {
                const int64_t b = n * p / parts / 8 * 8,
                              e = p + 1 == parts ? n / 8 * 8 : n * (p + 1) / parts / 8 * 8;
                uint64_t acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                for (int64_t i = b; i < e; i += 8)
                    for (int l = 0; l < 8; ++l) acc[l] += buf[i + l];
                sink[p * 8] = acc[0] ^ acc[1] ^ acc[2] ^ acc[3] ^ acc[4] ^ acc[5] ^ acc[6] ^ acc[7];
            }
        });
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = std::max(best, static_cast<double>(n / 8 * 8 * 8) / s / 1e9);
    }
    static volatile uint64_t keep;  // the sums are used, so the loads are not optimised away
    keep = keep + sink[0];
    return best;
}

}  // namespace volt::cpu
