// Cases of the attention ops: rope (spec §3.5), kv_write (the paged cache), attention (§3.4: sinks,
// sliding window, GQA, paging with block tables whose sliding-window entries before the window are
// freed, -1) and the coarse qkv_rope_kvwrite (§3.3 + §3.4 steps 1-3 + the cache write). KV pools start as
// 0xFF bytes (NaN): a kernel that reads a block the table does not name, or writes a slot the mapping does
// not name, is caught; slots past a sequence's end hold finite "stale" values a wrong mask would mix in.
#include <algorithm>
#include <cmath>
#include <cstring>
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

void kv_write_case(Case& c, int64_t T, int64_t nkv, int64_t d, int64_t bs, int64_t nb, Format f) {
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

void attention_case(Case& c, const AttnShape& a, Format f) {
    Rng& rng = c.rng();
    const int64_t S = static_cast<int64_t>(a.seqs.size()), row = a.nkv * a.d, eb = format_bytes(f);
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
                    store(kpool, f, off, static_cast<float>(sigma * rng.normal()));
                    store(vpool, f, off, static_cast<float>(sigma * rng.normal()));
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
    const ops::KvLayer kv{f, c.upload(kpool), c.upload(vpool), nb, a.bs};
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
    in.kv = {f, kpool.data(), vpool.data(), nb, a.bs, a.nkv, a.d};
    in.seq_lens = lens.data();
    in.query_start_loc = qsl.data();
    in.block_tables = tables.data();
    in.sinks = sinks_host;
    in.num_seqs = S;
    in.num_heads = a.nh;
    in.max_blocks = max_blocks;
    in.window = a.window;
    in.scale = scale;
    c.compare("out", c.download(out, T * a.nh * a.d), ref::attention(in, c.inject()), c.tol("attention"));
    // Bytes read at least: every key and value in some query's range, once.
    int64_t keys = 0;
    for (const Seq& s : a.seqs) {
        const int64_t lo = a.window > 0 ? std::max<int64_t>(0, s.seq_len - s.q_len - a.window + 1) : 0;
        keys += s.seq_len - lo;
    }
    const int64_t kv_bytes = keys * row * eb * 2;
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
    int64_t P = 0;  // prompt rows (ops.h: a GPU computes them on tensor cores)
};

void qkv_case(Case& c, const QkvShape& s, Format f) {
    Rng& rng = c.rng();
    const int64_t T = s.T, H = s.H, qd = s.nh * s.d, kvd = s.nkv * s.d;
    const std::vector<float> x = rng.normal_f32(T * H, s.x_rms);
    const HostTensor norm = random_dense(rng, Format::kBf16, H, 0.3, 1.0);
    const double sigma = 1.0 / std::sqrt(static_cast<double>(H));
    const HostTensor wq = random_dense(rng, s.wf, qd * H, sigma),
                     wk = random_dense(rng, s.wf, kvd * H, sigma),
                     wv = random_dense(rng, s.wf, kvd * H, sigma);
    const HostTensor bq = random_dense(rng, Format::kBf16, qd, 0.5),
                     bk = random_dense(rng, Format::kBf16, kvd, 0.5),
                     bv = random_dense(rng, Format::kBf16, kvd, 0.5);
    const std::vector<int32_t> pos = random_positions(rng, T);
    const RopeTable rt = rope_table(s.d);
    const int64_t nb = (T + s.bs - 1) / s.bs + 2;
    const std::vector<int64_t> slots = random_slots(rng, T, nb * s.bs);
    const ops::QkvWeights host{dense_view(s.wf, wq.data(), qd, H, {Format::kBf16, bq.data(), qd}),
                               dense_view(s.wf, wk.data(), kvd, H, {Format::kBf16, bk.data(), kvd}),
                               dense_view(s.wf, wv.data(), kvd, H, {Format::kBf16, bv.data(), kvd})};
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
    float* d_h = c.poisoned<float>(T * H);
    float* d_q = c.poisoned<float>(T * qd);
    float* d_k = c.poisoned<float>(T * kvd);
    float* d_v = c.poisoned<float>(T * kvd);
    const float eps = 1e-5f;
    c.reserve(T, 1, T);
    const ops::QkvRopeKvWriteArgs args{
        d_x, pn,   pw,    d_pos, d_inv, rt.mscale, d_slots, {f, kp, vp, nb, s.bs}, d_h, d_q, d_k, d_v, T,
        H,   s.nh, s.nkv, s.d,   eps,   s.keep,    s.P};
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
    check_pools(c, f, kvd, c.download(static_cast<uint8_t*>(kp), pool_bytes),
                c.download(static_cast<uint8_t*>(vp), pool_bytes), slots, k, v,
                f == Format::kF16 ? c.tol("qkv_rope_kvwrite.kv_f16") : tol);
    c.bench([&] { c.backend().qkv_rope_kvwrite(args); },
            (qd + 2 * kvd) * H * format_bytes(s.wf) + T * (H + qd) * 4 + T * 2 * kvd * format_bytes(f));
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
              std::pair{QkvShape{512, 2880, 64, 8, 64, 16, 1.0, false, Format::kBf16, 512}, M}}) {
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
                         (q.P > 0 ? ",P=" + n(q.P) : ""),
                     set, [q = q, f](Case& c) { qkv_case(c, q, f); });
        }
    }
}

}  // namespace volt::kernels
