// Cases of the attention ops: rope (spec §3.5), kv_write (the paged cache), attention (§3.4: sinks,
// sliding window, GQA, paging with block tables whose sliding-window entries before the window are
// freed, -1) and the coarse qkv_rope_kvwrite (§3.3 + §3.4 steps 1-3 + the cache write). KV pools start as
// 0xFF bytes (NaN): a kernel that reads a block the table does not name, or writes a slot the mapping does
// not name, is caught; slots past a sequence's end hold finite "stale" values a wrong mask would mix in.
// The int8 KV cache (--kv int8, docs/quantization.md "KV cache"): kv_write's codes and scales are checked
// against the format's definition (the scale exactly, every element within the bound), qkv_rope_kvwrite's
// within the bound plus the chain's tolerance, attention against
// the reference twice (on the dequantized cache: the f32 tolerance; on the values before quantization: a
// tolerance derived from the bound, see int8_attention_bound).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "core/dtype.h"
#include "tests/kernels/harness.h"

namespace volt::kernels {

namespace {

using ops::Format;

// YaRN of gpt-oss (spec §1.1, §3.5) for any head_dim, rounded to the f32 table the op receives.
struct RopeTable {
    std::vector<float> inv_freq;
    float mscale;
};
RopeTable rope_table(int64_t head_dim) {
    const ref::Yarn y = ref::yarn(head_dim, 150000.0, 32.0, 4096.0, 32.0, 1.0);
    return {{y.inv_freq.begin(), y.inv_freq.end()}, static_cast<float>(y.mscale)};
}

// Positions up to the 131072 of max_position_embeddings, with 0 and the largest among them.
std::vector<int32_t> random_positions(Rng& rng, int64_t T) {
    std::vector<int32_t> p(T);
    for (auto& x : p) x = static_cast<int32_t>(rng.below(131072));
    p[0] = 0;
    if (T > 1) p[T - 1] = 131071;
    return p;
}

// Stores float values into a pool of `f` (f32 or f16) at element offset `off`.
void store(std::vector<uint8_t>& pool, Format f, int64_t off, float x) {
    if (f == Format::kF32) {
        std::memcpy(pool.data() + 4 * off, &x, 4);
    } else {
        const uint16_t h = f32_to_f16(x);
        std::memcpy(pool.data() + 2 * off, &h, 2);
    }
}

// Checks K and V pools after a cache write: slot slots[i] holds rows k_want[i], v_want[i] (within tol);
// every other byte is still the 0xFF poison.
void check_pools(Case& c, Format f, int64_t row, const std::vector<uint8_t>& k_got,
                 const std::vector<uint8_t>& v_got, const std::vector<int64_t>& slots,
                 const std::vector<double>& k_want, const std::vector<double>& v_want, const Tolerance& tol) {
    const int64_t eb = format_bytes(f);
    std::vector<float> kg, vg;
    std::vector<double> kw, vw;
    std::vector<uint8_t> k_rest = k_got, v_rest = v_got;
    for (size_t i = 0; i < slots.size(); ++i) {
        if (slots[i] < 0) continue;
        for (int64_t e = 0; e < row; ++e) {
            const int64_t off = slots[i] * row + e;
            kg.push_back(static_cast<float>(ref::decode(f, k_got.data(), off)));
            vg.push_back(static_cast<float>(ref::decode(f, v_got.data(), off)));
            kw.push_back(k_want[i * row + e]);
            vw.push_back(v_want[i * row + e]);
        }
        std::memset(k_rest.data() + slots[i] * row * eb, 0xFF, row * eb);
        std::memset(v_rest.data() + slots[i] * row * eb, 0xFF, row * eb);
    }
    c.compare("k_cache", kg, kw, tol);
    c.compare("v_cache", vg, vw, tol);
    const std::vector<uint8_t> poison(k_got.size(), 0xFF);
    c.compare_bytes("k_untouched", k_rest, poison);
    c.compare_bytes("v_untouched", v_rest, poison);
}

// ---- rope ----------------------------------------------------------------------------------------------

void rope_case(Case& c, int64_t T, int64_t nh, int64_t nkv, int64_t d) {
    Rng& rng = c.rng();
    const std::vector<float> q = rng.normal_f32(T * nh * d, 1.0), k = rng.normal_f32(T * nkv * d, 1.0);
    const std::vector<int32_t> pos = random_positions(rng, T);
    const RopeTable rt = rope_table(d);
    float* d_q = c.upload(q);
    float* d_k = c.upload(k);
    const int32_t* d_pos = c.upload(pos);
    const float* d_inv = c.upload(rt.inv_freq);
    c.reserve(T, 1, T);
    c.backend().rope({d_q, d_k, d_pos, d_inv, rt.mscale, T, nh, nkv, d});
    std::vector<double> qw = to_double(q), kw = to_double(k);
    ref::rope(&qw, T, nh, d, pos.data(), rt.inv_freq.data(), rt.mscale, c.inject());
    ref::rope(&kw, T, nkv, d, pos.data(), rt.inv_freq.data(), rt.mscale, c.inject());
    c.compare("q", c.download(d_q, T * nh * d), qw, c.tol("rope"));
    c.compare("k", c.download(d_k, T * nkv * d), kw, c.tol("rope"));
    c.bench(
        [&] {
            c.backend().rope({d_q, d_k, d_pos, d_inv, rt.mscale, T, nh, nkv, d});
        },
        T * (nh + nkv) * d * 8 + T * 4);
}

// ---- kv_write ------------------------------------------------------------------------------------------

// Distinct slots of a pool, every 7th replaced by -1 (a row that is not stored).
std::vector<int64_t> random_slots(Rng& rng, int64_t T, int64_t num_slots) {
    const std::vector<int32_t> d = rng.distinct(T, num_slots);
    std::vector<int64_t> s(d.begin(), d.end());
    for (int64_t t = 3; t < T; t += 7) s[t] = -1;
    return s;
}

// ---- the int8 KV format, written here from docs/quantization.md (not from src/ops/kv_int8.h, so a bug
// in the format's implementation cannot hide in the test) ------------------------------------------------

// |q s - v| <= s (1/2 + 254 u) per element, u = 2^-24 (the doc's derivation: f32 roundings of v / s and
// of q s on top of the exact s/2).
constexpr double kInt8KvBound = 0.5 + 254.0 / 16777216.0;

// Codes and scale of one head vector: s = max|v| / 127 in f32, q = clamp(rint(v / s), -127, 127).
void int8_quantize_head(const float* v, int64_t d, int8_t* q, float* s) {
    float amax = 0.0f;
    for (int64_t i = 0; i < d; ++i) amax = std::max(amax, std::abs(v[i]));
    *s = amax / 127.0f;
    for (int64_t i = 0; i < d; ++i) {
        const double r = *s == 0.0f ? 0.0 : std::nearbyint(static_cast<double>(v[i] / *s));
        q[i] = static_cast<int8_t>(std::clamp(r, -127.0, 127.0));
    }
}

// An int8 cache after a write of rows k, v [T, nkv, d]. rel == 0 (kv_write: k, v are the op's exact f32
// inputs): every stored scale must be exactly max|v| / 127 (f32) and every element within the bound.
// rel > 0 (qkv_rope_kvwrite: k, v are the double reference of an f32 chain within rel of the row's rms or
// the element): the scale within that of max|v| / 127, every element within c s + rel max(|v_i|, rms).
// Every other byte of the code and scale pools must still be the poison.
void check_int8_pools(Case& c, int64_t nkv, int64_t d, const std::vector<int64_t>& slots,
                      const std::vector<double>& k, const std::vector<double>& v,
                      const std::vector<std::vector<uint8_t>>& got /* k codes, v codes, k scales, v scales */,
                      double rel = 0.0) {
    std::vector<std::vector<uint8_t>> rest = got;
    int64_t bad = 0;
    std::string first;
    double worst = 0.0;  // largest |error| / allowed seen
    for (size_t t = 0; t < slots.size(); ++t) {
        if (slots[t] < 0) continue;
        for (int kv = 0; kv < 2; ++kv) {
            const std::vector<double>& want = kv == 0 ? k : v;
            const auto* codes = reinterpret_cast<const int8_t*>(got[kv].data());
            double ss = 0;
            for (int64_t i = 0; i < nkv * d; ++i) ss += want[t * nkv * d + i] * want[t * nkv * d + i];
            const double rms = std::sqrt(ss / static_cast<double>(nkv * d));
            for (int64_t g = 0; g < nkv; ++g) {
                const int64_t si = slots[t] * nkv + g;
                float scale;
                std::memcpy(&scale, got[2 + kv].data() + 4 * si, 4);
                const double* src = want.data() + (t * nkv + g) * d;
                std::vector<float> f(src, src + d);
                int8_t q_ref[1024];
                float s_ref;
                int8_quantize_head(f.data(), d, q_ref, &s_ref);
                const bool scale_ok = rel == 0.0
                                          ? std::memcmp(&scale, &s_ref, 4) == 0
                                          : std::abs(127.0 * scale - 127.0 * s_ref) <=
                                                rel * std::max(127.0 * s_ref, rms) + 1e-6 * 127.0 * s_ref;
                if (!scale_ok && bad++ == 0)
                    first = (kv == 0 ? "k" : "v") + std::string(" scale of slot ") +
                            std::to_string(slots[t]) + " head " + std::to_string(g) + ": " + num(scale) +
                            " vs max|v|/127 = " + num(s_ref);
                for (int64_t i = 0; i < d; ++i) {
                    const int8_t q = codes[si * d + i];
                    const double err = std::abs(static_cast<double>(q) * scale - src[i]);
                    const double allowed = kInt8KvBound * scale + rel * std::max(std::abs(src[i]), rms);
                    if (allowed > 0) worst = std::max(worst, err / allowed);
                    if ((q == -128 || !(err <= allowed)) && bad++ == 0)
                        first = (kv == 0 ? "k" : "v") + std::string(" slot ") + std::to_string(slots[t]) +
                                " head " + std::to_string(g) + " element " + std::to_string(i) + ": code " +
                                std::to_string(q) + " x " + num(scale) + " vs " + num(src[i]);
                }
                std::memset(rest[kv].data() + si * d, 0xFF, d);
                std::memset(rest[2 + kv].data() + 4 * si, 0xFF, 4);
            }
        }
    }
    if (bad > 0) c.fail(std::to_string(bad) + " int8 KV values off the format (first: " + first + ")");
    c.note("int8 KV: at most " + num(worst) + " of the allowed error");
    const char* names[] = {"k_untouched", "v_untouched", "k_scales_untouched", "v_scales_untouched"};
    for (int p = 0; p < 4; ++p)
        c.compare_bytes(names[p], rest[p], std::vector<uint8_t>(rest[p].size(), 0xFF));
}

void kv_write_int8_case(Case& c, int64_t T, int64_t nkv, int64_t d, int64_t bs, int64_t nb) {
    if (!c.backend().supports_kv_format(Format::kInt8)) {
        c.skip("the backend has no int8 KV cache");
        return;
    }
    Rng& rng = c.rng();
    const int64_t row = nkv * d, code_bytes = nb * bs * row, scale_bytes = nb * bs * nkv * 4;
    std::vector<float> k = rng.normal_f32(T * row, 1.0), v = rng.normal_f32(T * row, 1.0);
    // Edge vectors: an all-zero head (s = 0), a tie at the maximum, huge and tiny magnitudes.
    if (T > 1) std::fill_n(k.begin() + row, d, 0.0f);
    if (T > 2) std::fill_n(v.begin() + 2 * row, d, -3.5f);
    if (T > 4)
        for (int64_t i = 0; i < d; ++i) k[4 * row + i] *= 1e30f;
    if (T > 5)
        for (int64_t i = 0; i < d; ++i) v[5 * row + i] *= 1e-30f;
    const std::vector<int64_t> slots = random_slots(rng, T, nb * bs);
    const float* d_k = c.upload(k);
    const float* d_v = c.upload(v);
    const int64_t* d_slots = c.upload(slots);
    void* kp = c.poisoned<uint8_t>(code_bytes);
    void* vp = c.poisoned<uint8_t>(code_bytes);
    auto* ks = static_cast<float*>(static_cast<void*>(c.poisoned<uint8_t>(scale_bytes)));
    auto* vs = static_cast<float*>(static_cast<void*>(c.poisoned<uint8_t>(scale_bytes)));
    const ops::KvLayer kv{Format::kInt8, kp, vp, nb, bs, ks, vs};
    c.reserve(T, 1, T);
    c.backend().kv_write({d_k, d_v, d_slots, kv, T, nkv, d});
    check_int8_pools(
        c, nkv, d, slots, to_double(k), to_double(v),
        {c.download(static_cast<uint8_t*>(kp), code_bytes), c.download(static_cast<uint8_t*>(vp), code_bytes),
         c.download(reinterpret_cast<uint8_t*>(ks), scale_bytes),
         c.download(reinterpret_cast<uint8_t*>(vs), scale_bytes)});
}

void kv_write_case(Case& c, int64_t T, int64_t nkv, int64_t d, int64_t bs, int64_t nb, Format f) {
    if (f == Format::kInt8) {
        kv_write_int8_case(c, T, nkv, d, bs, nb);
        return;
    }
    Rng& rng = c.rng();
    const int64_t row = nkv * d, pool_bytes = nb * bs * row * format_bytes(f);
    const std::vector<float> k = rng.normal_f32(T * row, 1.0), v = rng.normal_f32(T * row, 1.0);
    const std::vector<int64_t> slots = random_slots(rng, T, nb * bs);
    const float* d_k = c.upload(k);
    const float* d_v = c.upload(v);
    const int64_t* d_slots = c.upload(slots);
    void* kp = c.poisoned<uint8_t>(pool_bytes);
    void* vp = c.poisoned<uint8_t>(pool_bytes);
    const ops::KvLayer kv{f, kp, vp, nb, bs};
    c.reserve(T, 1, T);
    c.backend().kv_write({d_k, d_v, d_slots, kv, T, nkv, d});
    check_pools(c, f, row, c.download(static_cast<uint8_t*>(kp), pool_bytes),
                c.download(static_cast<uint8_t*>(vp), pool_bytes), slots, to_double(k), to_double(v),
                c.tol(f == Format::kF16 ? "kv_write.f16" : "kv_write.f32"));
    c.bench(
        [&] {
            c.backend().kv_write({d_k, d_v, d_slots, kv, T, nkv, d});
        },
        T * row * (8 + 2 * format_bytes(f)) + T * 8);
}

// ---- attention -----------------------------------------------------------------------------------------

struct Seq {
    int32_t q_len, seq_len;
};
struct AttnShape {
    std::vector<Seq> seqs;
    int64_t nh, nkv, d, bs, window;
    int64_t max_seq_len_bound = 0;  // > 0: passed instead of the true maximum (never changes a result)
};

// The int8 cache against the reference on the values before quantization: out = sum_j p_j v_j with
// scores x_j = scale q.k_j and the sink z in the denominator only. Every element of a dequantized key is
// within c s_k of the true one (c = kInt8KvBound, s_k its head's scale), so each score moves by at most
// D = scale sum_i |q_i| c max_j s_kj. Then p^_j / p_j = e^(d_j) D / D^ lies in [e^-2D, e^2D] (the
// denominator, sink included, moves by at most a factor e^D), so sum_j |p^_j - p_j| |v_j| <= (e^2D - 1)
// max_j |v_j|; the values add sum_j p^_j c s_vj <= c max_j s_vj (sum p^ <= 1). Per row (t, h), over the
// keys it reads: |out^ - out| <= (e^2D - 1) max |v| + c max s_v, plus the f32 kernel's own error (the
// attention tolerance). A bound, not an estimate: the note reports how much of it was used.
void check_int8_attention_bound(Case& c, const AttnShape& a, const std::vector<float>& got,
                                const std::vector<double>& want, const std::vector<float>& q,
                                const std::vector<float>& vorig, const std::vector<float>& kscale,
                                const std::vector<float>& vscale, const std::vector<int32_t>& qsl,
                                const std::vector<int32_t>& tables, int64_t max_blocks, float scale) {
    const int64_t row = a.nkv * a.d, group = a.nh / a.nkv;
    double ss = 0;
    for (double w : want) ss += w * w;
    const double floor = std::sqrt(ss / static_cast<double>(std::max<size_t>(want.size(), 1)));
    const double f32_tol = c.tol("attention").rel;
    int64_t bad = 0;
    double used = 0;
    std::string first;
    for (size_t s = 0; s < a.seqs.size(); ++s) {
        for (int32_t i = 0; i < a.seqs[s].q_len; ++i) {
            const int64_t t = qsl[s] + i, n = a.seqs[s].seq_len - a.seqs[s].q_len + i;
            const int64_t lo = a.window > 0 ? std::max<int64_t>(0, n - a.window + 1) : 0;
            for (int64_t h = 0; h < a.nh; ++h) {
                const int64_t g = h / group;
                double sk = 0, sv = 0, vmax = 0, q1 = 0;
                for (int64_t j = lo; j <= n; ++j) {
                    const int64_t slot =
                        static_cast<int64_t>(tables[s * max_blocks + j / a.bs]) * a.bs + j % a.bs;
                    sk = std::max<double>(sk, kscale[slot * a.nkv + g]);
                    sv = std::max<double>(sv, vscale[slot * a.nkv + g]);
                    for (int64_t e = 0; e < a.d; ++e)
                        vmax = std::max<double>(vmax, std::abs(vorig[slot * row + g * a.d + e]));
                }
                for (int64_t e = 0; e < a.d; ++e) q1 += std::abs(q[(t * a.nh + h) * a.d + e]);
                const double dmax = scale * q1 * kInt8KvBound * sk;
                const double bound = std::expm1(2 * dmax) * vmax + kInt8KvBound * sv;
                for (int64_t e = 0; e < a.d; ++e) {
                    const int64_t o = (t * a.nh + h) * a.d + e;
                    const double err = std::abs(got[o] - want[o]);
                    const double allowed = bound + f32_tol * std::max(std::abs(want[o]), floor);
                    used = std::max(used, err / allowed);
                    if (!(err <= allowed) && bad++ == 0)
                        first = "row " + std::to_string(t) + " head " + std::to_string(h) + " element " +
                                std::to_string(e) + ": |" + num(got[o]) + " - " + num(want[o]) + "| > " +
                                num(allowed);
                }
            }
        }
    }
    if (bad > 0) c.fail(std::to_string(bad) + " outputs beyond the int8 KV bound (first: " + first + ")");
    c.note("int8 KV vs the unquantized cache: at most " + num(used) + " of the derived bound");
}

void attention_case(Case& c, const AttnShape& a, Format f) {
    Rng& rng = c.rng();
    const bool int8 = f == Format::kInt8;
    if (int8 && !c.backend().supports_kv_format(f)) {
        c.skip("the backend has no int8 KV cache");
        return;
    }
    // int8: the values are drawn as f32 (the same draws), then quantized head by head below.
    const Format vf = int8 ? Format::kF32 : f;
    const int64_t S = static_cast<int64_t>(a.seqs.size()), row = a.nkv * a.d, eb = format_bytes(vf);
    std::vector<int32_t> qsl = {0}, lens;
    int64_t max_len = 0, max_blocks = 0, live_blocks = 0;
    for (const Seq& s : a.seqs) {
        qsl.push_back(qsl.back() + s.q_len);
        lens.push_back(s.seq_len);
        max_len = std::max<int64_t>(max_len, s.seq_len);
        max_blocks = std::max<int64_t>(max_blocks, (s.seq_len + a.bs - 1) / a.bs + 1);
    }
    const int64_t T = qsl.back();
    // Block tables: blocks wholly before the first query's window are freed (-1), as the block manager
    // does for the sliding group (keeping the key just before the window, which --inject window reads);
    // live blocks get random distinct physical blocks; 3 blocks stay unused.
    std::vector<int32_t> first_live(S);
    for (int64_t s = 0; s < S; ++s) {
        const int64_t lo =
            a.window > 0 ? std::max<int64_t>(0, a.seqs[s].seq_len - a.seqs[s].q_len - a.window) : 0;
        first_live[s] = static_cast<int32_t>(lo / a.bs);
        live_blocks += (a.seqs[s].seq_len + a.bs - 1) / a.bs - first_live[s];
    }
    const int64_t nb = live_blocks + 3;
    const std::vector<int32_t> phys = rng.distinct(nb, nb);
    std::vector<int32_t> tables(S * max_blocks, -1);
    std::vector<uint8_t> kpool(nb * a.bs * row * eb, 0xFF), vpool(kpool.size(), 0xFF);
    int64_t next = 0;
    for (int64_t s = 0; s < S; ++s) {
        const int64_t L = a.seqs[s].seq_len;
        for (int64_t b = first_live[s]; b < (L + a.bs - 1) / a.bs; ++b) {
            const int32_t p = phys[next++];
            tables[s * max_blocks + b] = p;
            for (int64_t o = 0; o < a.bs; ++o) {
                // Keys past the sequence's end are stale but finite, and larger: a wrong mask shows.
                const double sigma = b * a.bs + o < L ? 1.0 : 3.0;
                for (int64_t e = 0; e < row; ++e) {
                    const int64_t off = (static_cast<int64_t>(p) * a.bs + o) * row + e;
                    store(kpool, vf, off, static_cast<float>(sigma * rng.normal()));
                    store(vpool, vf, off, static_cast<float>(sigma * rng.normal()));
                }
            }
        }
    }
    const std::vector<float> q = rng.normal_f32(T * a.nh * a.d, 1.0);
    const HostTensor sinks = random_dense(rng, Format::kBf16, a.nh, 1.5, 1.0);
    const ops::VectorWeight sinks_host{Format::kBf16, sinks.data(), a.nh};
    ops::VectorWeight ps;
    if (!c.place(sinks_host, &ps)) return;
    const float* d_q = c.upload(q);
    ops::KvLayer kv{f, c.upload(kpool), c.upload(vpool), nb, a.bs};
    // int8: codes (poison 0xFF = -1 where no block was written), scales (poison: NaN), and the dequantized
    // values q s as f32 (exact in double; the f32 rounding is within 2^-24, far below the tolerance) for
    // the reference.
    std::vector<float> korig, vorig, kdq, vdq, kscale, vscale;
    if (int8) {
        auto as_f32 = [](const std::vector<uint8_t>& p) {
            std::vector<float> x(p.size() / 4);
            std::memcpy(x.data(), p.data(), p.size());
            return x;
        };
        korig = as_f32(kpool);
        vorig = as_f32(vpool);
        kdq = korig;
        vdq = vorig;
        std::vector<int8_t> kq(nb * a.bs * row, -1), vq(kq.size(), -1);
        kscale.assign(nb * a.bs * a.nkv, std::numeric_limits<float>::quiet_NaN());
        vscale = kscale;
        for (int64_t h = 0; h < nb * a.bs * a.nkv; ++h) {
            if (std::isnan(korig[h * a.d])) continue;  // a block no table names: left as poison
            int8_quantize_head(korig.data() + h * a.d, a.d, kq.data() + h * a.d, &kscale[h]);
            int8_quantize_head(vorig.data() + h * a.d, a.d, vq.data() + h * a.d, &vscale[h]);
            for (int64_t e = 0; e < a.d; ++e) {
                kdq[h * a.d + e] = static_cast<float>(static_cast<double>(kq[h * a.d + e]) * kscale[h]);
                vdq[h * a.d + e] = static_cast<float>(static_cast<double>(vq[h * a.d + e]) * vscale[h]);
            }
        }
        std::memcpy(kpool.data(), kdq.data(), kpool.size());
        std::memcpy(vpool.data(), vdq.data(), vpool.size());
        kv = {f, c.upload(kq), c.upload(vq), nb, a.bs, c.upload(kscale), c.upload(vscale)};
    }
    const int32_t* d_lens = c.upload(lens);
    const int32_t* d_qsl = c.upload(qsl);
    const int32_t* d_tables = c.upload(tables);
    float* out = c.poisoned<float>(T * a.nh * a.d);
    const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(a.d)));
    const int64_t bound = a.max_seq_len_bound > 0 ? a.max_seq_len_bound : max_len;
    c.reserve(T, S, bound);
    const ops::AttentionArgs args{d_q, kv,   d_lens, d_qsl, d_tables,   ps,       out,   S,
                                  T,   a.nh, a.nkv,  a.d,   max_blocks, a.window, scale, bound};
    c.backend().attention(args);
    const std::vector<double> qd = to_double(q);
    ref::AttentionInput in;
    in.q = &qd;
    in.kv = {vf, kpool.data(), vpool.data(), nb, a.bs, a.nkv, a.d};  // int8: the dequantized cache
    in.seq_lens = lens.data();
    in.query_start_loc = qsl.data();
    in.block_tables = tables.data();
    in.sinks = sinks_host;
    in.num_seqs = S;
    in.num_heads = a.nh;
    in.max_blocks = max_blocks;
    in.window = a.window;
    in.scale = scale;
    const std::vector<float> got = c.download(out, T * a.nh * a.d);
    c.compare("out", got, ref::attention(in, c.inject()), c.tol("attention"));
    if (int8) {
        in.kv = {Format::kF32, korig.data(), vorig.data(), nb, a.bs, a.nkv, a.d};
        check_int8_attention_bound(c, a, got, ref::attention(in, c.inject()), q, vorig, kscale, vscale, qsl,
                                   tables, max_blocks, scale);
    }
    // Bytes read at least: every key and value in some query's range, once.
    int64_t keys = 0;
    for (const Seq& s : a.seqs) {
        const int64_t lo = a.window > 0 ? std::max<int64_t>(0, s.seq_len - s.q_len - a.window + 1) : 0;
        keys += s.seq_len - lo;
    }
    const int64_t kv_bytes = keys * (int8 ? row + a.nkv * 4 : row * eb) * 2;
    // Sliding layers read 128 keys per sequence: their KV (~17 MB at batch 64) stays in L2 between calls.
    if (kv_bytes < (int64_t{256} << 20))
        c.bench_info("working_set", "below 4x L2 (L2-resident between calls)");
    c.bench([&] { c.backend().attention(args); }, kv_bytes + T * a.nh * a.d * 8);
}

// ---- qkv_rope_kvwrite ----------------------------------------------------------------------------------

struct QkvShape {
    int64_t T, H, nh, nkv, d, bs;
    double x_rms;
    bool keep;
    Format wf;
    int64_t P = 0;      // prompt rows (ops.h: a GPU computes them on tensor cores)
    int64_t group = 0;  // wf kInt4: the AWQ group size (docs/quantization.md)
};

void qkv_case(Case& c, const QkvShape& s, Format f) {
    if (f == Format::kInt8 && !c.backend().supports_kv_format(f)) {
        c.skip("the backend has no int8 KV cache");
        return;
    }
    Rng& rng = c.rng();
    const int64_t T = s.T, H = s.H, qd = s.nh * s.d, kvd = s.nkv * s.d;
    const std::vector<float> x = rng.normal_f32(T * H, s.x_rms);
    const HostTensor norm = random_dense(rng, Format::kBf16, H, 0.3, 1.0);
    const double sigma = 1.0 / std::sqrt(static_cast<double>(H));
    // Integer weights (int8, AWQ int4): random codes in the host layouts (harness.h random_int_weight).
    const bool int_w = s.wf == Format::kInt8 || s.wf == Format::kInt4;
    const Format dense_f = int_w ? Format::kBf16 : s.wf;
    const HostTensor wq = random_dense(rng, dense_f, int_w ? 1 : qd * H, sigma),
                     wk = random_dense(rng, dense_f, int_w ? 1 : kvd * H, sigma),
                     wv = random_dense(rng, dense_f, int_w ? 1 : kvd * H, sigma);
    IntWeight iq, ik, iv;
    if (int_w) {
        iq = random_int_weight(rng, s.wf, qd, H, s.group);
        ik = random_int_weight(rng, s.wf, kvd, H, s.group);
        iv = random_int_weight(rng, s.wf, kvd, H, s.group);
    }
    const HostTensor bq = random_dense(rng, Format::kBf16, qd, 0.5),
                     bk = random_dense(rng, Format::kBf16, kvd, 0.5),
                     bv = random_dense(rng, Format::kBf16, kvd, 0.5);
    const std::vector<int32_t> pos = random_positions(rng, T);
    const RopeTable rt = rope_table(s.d);
    const int64_t nb = (T + s.bs - 1) / s.bs + 2;
    const std::vector<int64_t> slots = random_slots(rng, T, nb * s.bs);
    ops::QkvWeights host{dense_view(s.wf, wq.data(), qd, H, {Format::kBf16, bq.data(), qd}),
                         dense_view(s.wf, wk.data(), kvd, H, {Format::kBf16, bk.data(), kvd}),
                         dense_view(s.wf, wv.data(), kvd, H, {Format::kBf16, bv.data(), kvd})};
    if (int_w) {
        host.q = iq.view;
        host.k = ik.view;
        host.v = iv.view;
        host.q.b = {Format::kBf16, bq.data(), qd};
        host.k.b = {Format::kBf16, bk.data(), kvd};
        host.v.b = {Format::kBf16, bv.data(), kvd};
    }
    const ops::VectorWeight norm_host{Format::kBf16, norm.data(), H};
    ops::QkvWeights pw;
    ops::VectorWeight pn;
    if (!c.place(host, &pw) || !c.place(norm_host, &pn)) return;
    const int64_t pool_bytes = nb * s.bs * kvd * format_bytes(f);
    const float* d_x = c.upload(x);
    const int32_t* d_pos = c.upload(pos);
    const float* d_inv = c.upload(rt.inv_freq);
    const int64_t* d_slots = c.upload(slots);
    void* kp = c.poisoned<uint8_t>(pool_bytes);
    void* vp = c.poisoned<uint8_t>(pool_bytes);
    const bool int8 = f == Format::kInt8;
    const int64_t scale_bytes = int8 ? nb * s.bs * s.nkv * 4 : 0;
    float* ks = int8 ? static_cast<float*>(static_cast<void*>(c.poisoned<uint8_t>(scale_bytes))) : nullptr;
    float* vs = int8 ? static_cast<float*>(static_cast<void*>(c.poisoned<uint8_t>(scale_bytes))) : nullptr;
    float* d_h = c.poisoned<float>(T * H);
    float* d_q = c.poisoned<float>(T * qd);
    float* d_k = c.poisoned<float>(T * kvd);
    float* d_v = c.poisoned<float>(T * kvd);
    const float eps = 1e-5f;
    c.reserve(T, 1, T);
    const ops::QkvRopeKvWriteArgs args{
        d_x, pn,  pw,     d_pos, d_inv, rt.mscale, d_slots, {f, kp, vp, nb, s.bs, ks, vs},
        d_h, d_q, d_k,    d_v,   T,     H,         s.nh,    s.nkv,
        s.d, eps, s.keep, s.P};
    c.backend().qkv_rope_kvwrite(args);

    const auto h = ref::rmsnorm(to_double(x), T, H, norm_host, eps);
    auto q = ref::linear(h, T, ref::matrix_of(host.q), host.q.b);
    auto k = ref::linear(h, T, ref::matrix_of(host.k), host.k.b);
    const auto v = ref::linear(h, T, ref::matrix_of(host.v), host.v.b);
    ref::rope(&q, T, s.nh, s.d, pos.data(), rt.inv_freq.data(), rt.mscale, c.inject());
    ref::rope(&k, T, s.nkv, s.d, pos.data(), rt.inv_freq.data(), rt.mscale, c.inject());
    const Tolerance& tol = c.tol("qkv_rope_kvwrite");
    c.compare("q", c.download(d_q, T * qd), q, tol);
    if (s.keep) {
        c.compare("h", c.download(d_h, T * H), h, tol);
        c.compare("k", c.download(d_k, T * kvd), k, tol);
        c.compare("v", c.download(d_v, T * kvd), v, tol);
    }
    if (int8) {
        // The chain's f32 k, v are within tol of the reference; their quantization adds c s (see
        // check_int8_pools).
        check_int8_pools(c, s.nkv, s.d, slots, k, v,
                         {c.download(static_cast<uint8_t*>(kp), pool_bytes),
                          c.download(static_cast<uint8_t*>(vp), pool_bytes),
                          c.download(reinterpret_cast<uint8_t*>(ks), scale_bytes),
                          c.download(reinterpret_cast<uint8_t*>(vs), scale_bytes)},
                         tol.rel);
    } else {
        check_pools(c, f, kvd, c.download(static_cast<uint8_t*>(kp), pool_bytes),
                    c.download(static_cast<uint8_t*>(vp), pool_bytes), slots, k, v,
                    f == Format::kF16 ? c.tol("qkv_rope_kvwrite.kv_f16") : tol);
    }
    const int64_t weight_bytes = int_w ? int_weight_bytes(iq) + int_weight_bytes(ik) + int_weight_bytes(iv)
                                       : (qd + 2 * kvd) * H * format_bytes(s.wf);
    c.bench([&] { c.backend().qkv_rope_kvwrite(args); },
            weight_bytes + T * (H + qd) * 4 + T * 2 * kvd * format_bytes(f));
}

}  // namespace

void add_attention_cases(const Options& opt, std::vector<CaseDef>* out) {
    const auto E = ShapeSet::kEdge, M = ShapeSet::kModel;
    auto n = [](int64_t v) { return std::to_string(v); };

    struct Rope {
        int64_t T, nh, nkv, d;
        ShapeSet set;
    };
    for (const Rope& r :
         {Rope{1, 64, 8, 64, E}, Rope{2, 8, 1, 16, E}, Rope{31, 4, 4, 32, E}, Rope{33, 16, 2, 128, E},
          Rope{255, 2, 1, 16, E}, Rope{257, 8, 8, 64, E}, Rope{4, 64, 8, 64, M}, Rope{64, 64, 8, 64, M}}) {
        add_case(out, "rope", shape_str({{"T", n(r.T)}, {"nh", n(r.nh)}, {"nkv", n(r.nkv)}, {"d", n(r.d)}}),
                 r.set, [r](Case& c) { rope_case(c, r.T, r.nh, r.nkv, r.d); });
    }

    for (Format f : opt.kv_formats) {
        const std::string kvs = format_str(f);
        struct Kvw {
            int64_t T, nkv, d, bs, nb;
            ShapeSet set;
        };
        for (const Kvw& k : {Kvw{1, 8, 64, 16, 4, E}, Kvw{31, 4, 16, 8, 8, E}, Kvw{33, 2, 32, 24, 3, E},
                             Kvw{257, 1, 128, 16, 20, E}, Kvw{16, 8, 64, 16, 64, M}}) {
            add_case(
                out, "kv_write",
                shape_str({{"T", n(k.T)}, {"nkv", n(k.nkv)}, {"d", n(k.d)}, {"bs", n(k.bs)}, {"kv", kvs}}),
                k.set, [k, f](Case& c) { kv_write_case(c, k.T, k.nkv, k.d, k.bs, k.nb, f); });
        }

        // Attention: (q_len, seq_len) per sequence; GQA ratios 1, 2, 8 and nkv = 1; head_dim 16..128;
        // block sizes 16, 8 and 24 (no power of two); windows 8 and 128 crossing block edges, and full.
        struct Named {
            AttnShape a;
            ShapeSet set;
        };
        std::vector<Named> shapes = {
            {{{{1, 1}}, 8, 8, 64, 16, 0}, E},
            {{{{33, 33}}, 4, 2, 32, 16, 8}, E},
            {{{{1, 17}, {5, 40}, {17, 17}, {1, 130}}, 16, 2, 64, 16, 128}, E},
            {{{{1, 17}, {5, 40}, {17, 17}, {1, 130}}, 16, 2, 64, 16, 0}, E},
            {{{{31, 64}, {32, 32}, {33, 100}, {2, 257}}, 8, 1, 128, 24, 8}, E},
            {{{{1, 2049}}, 8, 8, 16, 16, 0}, E},
            {{{{3, 257}}, 2, 1, 64, 8, 128}, E},
            {{{{64, 200}, {64, 64}, {64, 129}, {65, 300}}, 4, 4, 32, 16, 128}, E},
            {{{{255, 255}}, 4, 2, 16, 16, 0}, E},
            {{{{2, 50}, {1, 9}}, 8, 4, 64, 16, 0, 4096}, E},
            {{{{1, 2048}, {1, 4097}, {1, 1}, {1, 3000}}, 64, 8, 64, 16, 128}, M},
            {{{{1, 2048}, {1, 4097}, {1, 1}, {1, 3000}}, 64, 8, 64, 16, 0}, M},
            {{{{4, 4097}}, 64, 8, 64, 16, 128}, M},
            {{{{4, 4097}}, 64, 8, 64, 16, 0}, M},
        };
        // --shapes bench: decode at batch 64 x 2k and batch 8 x 32k, full and sliding layers (gpt-oss:
        // 64 query heads, 8 KV heads, d 64, window 128; block size 16 as the engine's default).
        for (const auto& [S, L] : {std::pair{64, 2048}, std::pair{8, 32768}}) {
            for (int64_t win : {int64_t{0}, int64_t{128}}) {
                AttnShape a{std::vector<Seq>(S, Seq{1, L}), 64, 8, 64, 16, win};
                shapes.push_back({a, ShapeSet::kBench});
            }
        }
        for (const Named& s : shapes) {
            std::string ql, sl;
            const bool same = std::all_of(s.a.seqs.begin(), s.a.seqs.end(), [&](const Seq& q) {
                return q.q_len == s.a.seqs[0].q_len && q.seq_len == s.a.seqs[0].seq_len;
            });
            if (same && s.a.seqs.size() > 4) {  // "64x1", "64x2048": batch x length
                ql = n(static_cast<int64_t>(s.a.seqs.size())) + "x" + n(s.a.seqs[0].q_len);
                sl = n(static_cast<int64_t>(s.a.seqs.size())) + "x" + n(s.a.seqs[0].seq_len);
            }
            for (const Seq& q : s.a.seqs) {
                if (same && s.a.seqs.size() > 4) break;
                ql += (ql.empty() ? "" : "/") + n(q.q_len);
                sl += (sl.empty() ? "" : "/") + n(q.seq_len);
            }
            std::string label = shape_str({{"q_len", ql},
                                           {"ctx", sl},
                                           {"nh", n(s.a.nh)},
                                           {"nkv", n(s.a.nkv)},
                                           {"d", n(s.a.d)},
                                           {"bs", n(s.a.bs)},
                                           {"win", n(s.a.window)},
                                           {"kv", kvs}});
            if (s.a.max_seq_len_bound > 0) label += ",max_seq_len=" + n(s.a.max_seq_len_bound);
            const AttnShape a = s.a;
            add_case(out, "attention", label, s.set, [a, f](Case& c) { attention_case(c, a, f); });
        }

        for (const auto& [q, set] :
             {std::pair{QkvShape{1, 2880, 64, 8, 64, 16, 1e5, true, Format::kBf16}, E},
              std::pair{QkvShape{33, 96, 4, 2, 32, 24, 1.0, false, Format::kF16}, E},
              std::pair{QkvShape{257, 64, 2, 1, 16, 16, 8.0, true, Format::kBf16}, E},
              std::pair{QkvShape{2, 64, 8, 8, 128, 8, 1.0, true, Format::kF32}, E},
              std::pair{QkvShape{4, 2880, 64, 8, 64, 16, 1e5, false, Format::kBf16}, M},
              std::pair{QkvShape{16, 2880, 64, 8, 64, 16, 30.0, true, Format::kBf16}, M},
              // Prompt rows (tensor-core GEMM on sm_80+) and a mixed step (rows past P by the GEMV).
              std::pair{QkvShape{70, 2880, 64, 8, 64, 16, 1e5, false, Format::kBf16, 70}, E},
              std::pair{QkvShape{150, 96, 4, 2, 32, 24, 1.0, true, Format::kF16, 131}, E},
              std::pair{QkvShape{64, 64, 2, 1, 16, 16, 8.0, false, Format::kBf16, 1}, E},
              std::pair{QkvShape{512, 2880, 64, 8, 64, 16, 1.0, false, Format::kBf16, 512}, M},
              // Integer weights (issue 21): the fused q|k|v GEMV (int8; int4 groups of 32/64), a group of
              // 16 (not the GEMV's: the basic kernel), prompt rows, the model's shapes.
              std::pair{QkvShape{3, 256, 4, 2, 32, 16, 1.0, true, Format::kInt8}, E},
              std::pair{QkvShape{5, 256, 4, 2, 32, 16, 8.0, true, Format::kInt4, 0, 32}, E},
              std::pair{QkvShape{2, 64, 2, 1, 16, 16, 1.0, true, Format::kInt4, 0, 16}, E},
              std::pair{QkvShape{37, 128, 4, 2, 32, 24, 1e5, false, Format::kInt4, 20, 64}, E},
              std::pair{QkvShape{1, 2880, 64, 8, 64, 16, 1e5, false, Format::kInt8}, M},
              std::pair{QkvShape{4, 2880, 64, 8, 64, 16, 30.0, true, Format::kInt4, 0, 64}, M}}) {
            add_case(out, "qkv_rope_kvwrite",
                     shape_str({{"T", n(q.T)},
                                {"H", n(q.H)},
                                {"nh", n(q.nh)},
                                {"nkv", n(q.nkv)},
                                {"d", n(q.d)},
                                {"bs", n(q.bs)},
                                {"x_rms", num(q.x_rms)},
                                {"keep", q.keep ? "1" : "0"},
                                {"w", format_str(q.wf)},
                                {"kv", kvs}}) +
                         (q.P > 0 ? ",P=" + n(q.P) : "") + (q.group > 0 ? ",group=" + n(q.group) : ""),
                     set, [q = q, f](Case& c) { qkv_case(c, q, f); });
        }
    }
}

}  // namespace volt::kernels
