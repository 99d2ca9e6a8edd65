// CPU reference kernels for ops/ops.h. See cpu_ops.h for the determinism contract.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "cpu/cpu_ops.h"
#include "ops/kv_int8.h"
#include "quant/int_weights.h"

namespace volt::cpu {

namespace {

// Sums 8 interleaved partial sums in a fixed tree.
inline float reduce8(const float* p) {
    return ((p[0] + p[4]) + (p[2] + p[6])) + ((p[1] + p[5]) + (p[3] + p[7]));
}

inline float bf16(uint16_t h) { return bf16_to_f32(h); }

// Element loaders of the dense formats.
struct LoadBf16 {
    float operator()(const void* p, int64_t i) const {
        return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    }
};
struct LoadF16 {
    float operator()(const void* p, int64_t i) const {
        return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    }
};
struct LoadF32 {
    float operator()(const void* p, int64_t i) const { return static_cast<const float*>(p)[i]; }
};

// x . w[0..n) in the fixed order (8 interleaved partial sums, then reduce8).
template <typename Load>
inline float dot_f32(const float* x, const void* w, int64_t n, Load load) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; ++l) acc[l] += x[i + l] * load(w, i + l);
    for (int l = 0; i < n; ++i, ++l) acc[l] += x[i] * load(w, i);
    return reduce8(acc);
}

// Calls fn(load) with the element loader of a dense format.
template <typename Fn>
inline void with_loader(ops::Format f, Fn&& fn) {
    switch (f) {
        case ops::Format::kBf16:
            fn(LoadBf16{});
            return;
        case ops::Format::kF16:
            fn(LoadF16{});
            return;
        case ops::Format::kF32:
            fn(LoadF32{});
            return;
        default:
            VOLT_CHECK(false) << "the CPU backend reads no dense " << ops::format_name(f) << " weights";
    }
}

inline int64_t format_bytes(ops::Format f) { return f == ops::Format::kF32 ? 4 : 2; }

}  // namespace

float vector_at(const ops::VectorWeight& v, int64_t i) {
    switch (v.format) {
        case ops::Format::kBf16:
            return bf16_to_f32(static_cast<const uint16_t*>(v.data)[i]);
        case ops::Format::kF16:
            return f16_to_f32(static_cast<const uint16_t*>(v.data)[i]);
        case ops::Format::kF32:
            return static_cast<const float*>(v.data)[i];
        default:
            VOLT_CHECK(false) << "vector weights are bf16, f16 or f32, not " << ops::format_name(v.format);
    }
    return 0.0f;
}

float dot_f32_bf16(const float* x, const uint16_t* w, int64_t n) { return dot_f32(x, w, n, LoadBf16{}); }

float dot_f32_mxfp4(const float* x, const uint8_t* blocks, const uint8_t* scales, int64_t n) {
    const int64_t nblocks = n / 32;
    float total = 0.0f;
    for (int64_t g = 0; g < nblocks; ++g) {
        const uint8_t* b = blocks + g * 16;
        const float* xb = x + g * 32;
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int j = 0; j < 16; j += 4) {
            // byte j holds elements 2j (low nibble) and 2j+1 (high nibble), spec §2.3.
            for (int q = 0; q < 4; ++q) {
                const uint8_t byte = b[j + q];
                acc[2 * q] += xb[2 * (j + q)] * kFp4Values[byte & 0xf];
                acc[2 * q + 1] += xb[2 * (j + q) + 1] * kFp4Values[byte >> 4];
            }
        }
        total += reduce8(acc) * e8m0_to_f32(scales[g]);
    }
    return total;
}

float swiglu_oai(float gate, float up, float limit, float alpha) {
    const float g = std::min(gate, limit);
    const float u = std::clamp(up, -limit, limit);
    const float glu = g / (1.0f + std::exp(-alpha * g));
    return glu * (u + 1.0f);
}

void embedding(const ops::EmbeddingArgs& a) {
    const int64_t V = a.table.out, H = a.table.in;
    with_loader(a.table.format, [&](auto load) {
        cpu_thread_pool().parallel_for(a.num_tokens, 1, [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; ++t) {
                const int32_t id = a.ids[t];
                const int64_t vocab = a.vocab_size > 0 ? a.vocab_size : V;
                VOLT_CHECK(id >= 0 && id < vocab)
                    << "token id " << id << " outside the vocabulary of " << vocab;
                float* out = a.out + t * H;
                const int64_t local = id - a.id_begin;
                if (local < 0 || local >= V) {
                    std::fill(out, out + H, 0.0f);  // another rank's shard holds this id
                    continue;
                }
                const int64_t row = local * H;
                for (int64_t i = 0; i < H; ++i) out[i] = load(a.table.w, row + i);
            }
        });
    });
}

void rmsnorm(const ops::RmsNormArgs& a) {
    cpu_thread_pool().parallel_for(a.num_rows, 1, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
            const float* x = a.x + (a.rows != nullptr ? a.rows[t] : t) * a.hidden;
            float* y = a.y + t * a.hidden;
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            int64_t i = 0;
            for (; i + 8 <= a.hidden; i += 8)
                for (int l = 0; l < 8; ++l) acc[l] += x[i + l] * x[i + l];
            for (int l = 0; i < a.hidden; ++i, ++l) acc[l] += x[i] * x[i];
            const float inv = 1.0f / std::sqrt(reduce8(acc) / static_cast<float>(a.hidden) + a.eps);
            for (int64_t j = 0; j < a.hidden; ++j) y[j] = vector_at(a.w, j) * (x[j] * inv);
        }
    });
}

namespace {
// Integer weights (docs/quantization.md): each output row is dequantized into f32 (exact) and then
// takes the same fixed-order dot product as the bf16 path. kInt8 decodes one row per output, kInt4 the 8
// outputs of one packed word column at a time.
void linear_int(const ops::LinearArgs& a) {
    const auto& w = a.weight;
    const int64_t rows = a.rows != nullptr ? a.num_rows : a.num_tokens;
    const bool int4 = w.format == ops::Format::kInt4;
    const int64_t unit = int4 ? quant::kAwqPack : 1;  // outputs decoded together
    const int64_t units = w.out / unit;
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, unit * w.in * rows));
    cpu_thread_pool().parallel_for(units, grain, [&](int64_t ub, int64_t ue) {
        std::vector<float> dq(static_cast<size_t>(unit * w.in));
        for (int64_t u = ub; u < ue; ++u) {
            if (int4) {
                quant::decode_awq_columns(static_cast<const int32_t*>(w.w),
                                          static_cast<const int32_t*>(w.zeros), w.scales, w.in, w.out,
                                          w.group_size, u, dq.data());
            } else {
                quant::decode_int8_row(static_cast<const int8_t*>(w.w) + u * w.in, w.scales[u], w.in,
                                       dq.data());
            }
            for (int64_t j = 0; j < unit; ++j) {
                const int64_t o = u * unit + j;
                const float bias = w.b.data != nullptr ? vector_at(w.b, o) : 0.0f;
                for (int64_t r = 0; r < rows; ++r) {
                    const int64_t t = a.rows != nullptr ? a.rows[r] : r;
                    a.y[r * w.out + o] =
                        dot_f32(a.x + t * w.in, dq.data() + j * w.in, w.in, LoadF32{}) + bias;
                }
            }
        }
    });
}
}  // namespace

void linear(const ops::LinearArgs& a) {
    const auto& w = a.weight;
    if (w.format == ops::Format::kInt8 || w.format == ops::Format::kInt4) return linear_int(a);
    const int64_t rows = a.rows != nullptr ? a.num_rows : a.num_tokens;
    // Parallel over output units; each unit's dot products use one fixed order.
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, w.in * rows));
    const int64_t elem = format_bytes(w.format);
    with_loader(w.format, [&](auto load) {
        cpu_thread_pool().parallel_for(w.out, grain, [&](int64_t ob, int64_t oe) {
            for (int64_t o = ob; o < oe; ++o) {
                const void* wrow = static_cast<const uint8_t*>(w.w) + o * w.in * elem;
                const float bias = w.b.data != nullptr ? vector_at(w.b, o) : 0.0f;
                for (int64_t r = 0; r < rows; ++r) {
                    const int64_t t = a.rows != nullptr ? a.rows[r] : r;
                    a.y[r * w.out + o] = dot_f32(a.x + t * w.in, wrow, w.in, load) + bias;
                }
            }
        });
    });
}

void rope(const ops::RopeArgs& a) {
    const int64_t half = a.head_dim / 2;
    cpu_thread_pool().parallel_for(a.num_tokens, 1, [&](int64_t b, int64_t e) {
        std::vector<float> c(half), s(half);
        for (int64_t t = b; t < e; ++t) {
            const float p = static_cast<float>(a.positions[t]);
            for (int64_t i = 0; i < half; ++i) {
                const float phi = p * a.inv_freq[i];
                c[i] = std::cos(phi) * a.mscale;
                s[i] = std::sin(phi) * a.mscale;
            }
            auto rotate = [&](float* x) {
                for (int64_t i = 0; i < half; ++i) {
                    const float x1 = x[i], x2 = x[i + half];
                    x[i] = x1 * c[i] - x2 * s[i];
                    x[i + half] = x2 * c[i] + x1 * s[i];
                }
            };
            for (int64_t h = 0; h < a.num_heads; ++h) rotate(a.q + (t * a.num_heads + h) * a.head_dim);
            for (int64_t h = 0; h < a.num_kv_heads; ++h) rotate(a.k + (t * a.num_kv_heads + h) * a.head_dim);
        }
    });
}

void kv_write(const ops::KvWriteArgs& a) {
    const int64_t row = a.num_kv_heads * a.head_dim;
    const ops::Format f = a.kv.format;
    VOLT_CHECK(f == ops::Format::kF32 || f == ops::Format::kF16 || f == ops::Format::kInt8)
        << "KV cache format " << ops::format_name(f);
    for (int64_t t = 0; t < a.num_tokens; ++t) {
        const int64_t slot = a.slot_mapping[t];
        if (slot < 0) continue;
        if (f == ops::Format::kInt8) {
            // One scale per (slot, kv head): ops/kv_int8.h.
            for (int64_t g = 0; g < a.num_kv_heads; ++g) {
                const int64_t off = t * row + g * a.head_dim, dst = slot * row + g * a.head_dim;
                const int64_t si = slot * a.num_kv_heads + g;
                ops::kv_int8_quantize(a.k + off, a.head_dim, static_cast<int8_t*>(a.kv.k) + dst,
                                      a.kv.k_scales + si);
                ops::kv_int8_quantize(a.v + off, a.head_dim, static_cast<int8_t*>(a.kv.v) + dst,
                                      a.kv.v_scales + si);
            }
        } else if (f == ops::Format::kF16) {
            auto* kc = static_cast<uint16_t*>(a.kv.k) + slot * row;
            auto* vc = static_cast<uint16_t*>(a.kv.v) + slot * row;
            for (int64_t i = 0; i < row; ++i) {
                kc[i] = f32_to_f16(a.k[t * row + i]);
                vc[i] = f32_to_f16(a.v[t * row + i]);
            }
        } else {
            std::copy_n(a.k + t * row, row, static_cast<float*>(a.kv.k) + slot * row);
            std::copy_n(a.v + t * row, row, static_cast<float*>(a.kv.v) + slot * row);
        }
    }
}

void attention(const ops::AttentionArgs& a) {
    const int64_t group = a.num_heads / a.num_kv_heads;
    const int64_t kv_row = a.num_kv_heads * a.head_dim;
    // Sequence of each row, and the row's index within its sequence.
    std::vector<int32_t> seq_of(a.num_tokens), index_of(a.num_tokens);
    for (int64_t s = 0; s < a.num_seqs; ++s) {
        const int32_t first = a.query_start_loc[s], q_len = a.query_start_loc[s + 1] - first;
        for (int32_t i = 0; i < q_len; ++i) {
            seq_of[first + i] = static_cast<int32_t>(s);
            index_of[first + i] = a.seq_lens[s] - q_len + i;
        }
    }
    const ops::Format f = a.kv.format;
    VOLT_CHECK(f == ops::Format::kF32 || f == ops::Format::kF16 || f == ops::Format::kInt8)
        << "KV cache format " << ops::format_name(f);
    const int64_t block_size = a.kv.block_size;
    cpu_thread_pool().parallel_for(a.num_tokens * a.num_heads, 1, [&](int64_t b, int64_t e) {
        std::vector<float> scores, kbuf(a.head_dim), vbuf(a.head_dim);
        // Key or value row j of kv head g as f32: a view for f32 pools, a widened copy for f16, the codes
        // times the head's scale (one f32 product each, ops/kv_int8.h) for int8.
        auto row_of = [&](void* pool, const float* scales, int64_t slot, int64_t g,
                          std::vector<float>& buf) -> const float* {
            const int64_t off = slot * kv_row + g * a.head_dim;
            if (f == ops::Format::kF32) return static_cast<const float*>(pool) + off;
            if (f == ops::Format::kInt8) {
                ops::kv_int8_dequantize(static_cast<const int8_t*>(pool) + off,
                                        scales[slot * a.num_kv_heads + g], a.head_dim, buf.data());
                return buf.data();
            }
            const uint16_t* p = static_cast<const uint16_t*>(pool) + off;
            for (int64_t i = 0; i < a.head_dim; ++i) buf[i] = f16_to_f32(p[i]);
            return buf.data();
        };
        for (int64_t th = b; th < e; ++th) {
            const int64_t t = th / a.num_heads, h = th % a.num_heads, g = h / group;
            const int64_t s = seq_of[t];
            const int64_t p = index_of[t];
            const int64_t lo = a.window > 0 ? std::max<int64_t>(0, p - a.window + 1) : 0;
            const float* q = a.q + (t * a.num_heads + h) * a.head_dim;
            const int64_t row = a.table_rows != nullptr ? a.table_rows[s] : s;
            const int32_t* table = a.block_tables + row * a.max_blocks;
            auto slot_of = [&](int64_t j) {
                const int32_t block = table[j / block_size];
                VOLT_CHECK(block >= 0) << "attention reads key position " << j << " of a freed block";
                return static_cast<int64_t>(block) * block_size + j % block_size;
            };
            scores.resize(p - lo + 1);
            const float sink = vector_at(a.sinks, h);
            float m = sink;
            for (int64_t j = lo; j <= p; ++j) {
                const float* k = row_of(a.kv.k, a.kv.k_scales, slot_of(j), g, kbuf);
                float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                int64_t i = 0;
                for (; i + 8 <= a.head_dim; i += 8)
                    for (int l = 0; l < 8; ++l) acc[l] += q[i + l] * k[i + l];
                for (int l = 0; i < a.head_dim; ++i, ++l) acc[l] += q[i] * k[i];
                const float sc = reduce8(acc) * a.scale;
                scores[j - lo] = sc;
                m = std::max(m, sc);
            }
            float denom = std::exp(sink - m);
            for (auto& sc : scores) {
                sc = std::exp(sc - m);
                denom += sc;
            }
            float* out = a.out + t * a.num_heads * a.head_dim + h * a.head_dim;
            std::fill_n(out, a.head_dim, 0.0f);
            for (int64_t j = lo; j <= p; ++j) {
                const float pj = scores[j - lo] / denom;
                const float* v = row_of(a.kv.v, a.kv.v_scales, slot_of(j), g, vbuf);
                for (int64_t i = 0; i < a.head_dim; ++i) out[i] += pj * v[i];
            }
        }
    });
}

void router(const ops::RouterArgs& a) {
    const int64_t E = a.router.out;
    std::vector<float> logits(a.num_tokens * E);
    linear({.x = a.x, .weight = a.router, .y = logits.data(), .num_tokens = a.num_tokens});
    for (int64_t t = 0; t < a.num_tokens; ++t) {
        const float* l = logits.data() + t * E;
        int32_t* ids = a.expert_ids + t * a.top_k;
        float* w = a.expert_weights + t * a.top_k;
        // Top-k by value, descending; ties keep the lower index first (stable).
        std::vector<int32_t> order(E);
        for (int64_t e = 0; e < E; ++e) order[e] = static_cast<int32_t>(e);
        std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) { return l[x] > l[y]; });
        const float m = l[order[0]];
        float sum = 0.0f;
        for (int64_t j = 0; j < a.top_k; ++j) {
            ids[j] = order[j];
            w[j] = std::exp(l[order[j]] - m);
            sum += w[j];
        }
        for (int64_t j = 0; j < a.top_k; ++j) w[j] /= sum;
    }
}

namespace {
// One output row r of expert e applied to x (length `in`), plus the row's bias.
inline float expert_row(const ops::ExpertWeights& w, int64_t e, int64_t r, const float* x) {
    const int64_t row = e * w.out + r;
    float y;
    switch (w.format) {
        case ops::Format::kMxfp4: {
            const int64_t nb = w.in / 32;
            y = dot_f32_mxfp4(x, w.blocks + row * nb * 16, w.scales + row * nb, w.in);
            break;
        }
        case ops::Format::kBf16:
            y = dot_f32(x, static_cast<const uint16_t*>(w.w) + row * w.in, w.in, LoadBf16{});
            break;
        case ops::Format::kF16:
            y = dot_f32(x, static_cast<const uint16_t*>(w.w) + row * w.in, w.in, LoadF16{});
            break;
        default:
            VOLT_CHECK(false) << "expert weights in " << ops::format_name(w.format);
    }
    return w.bias.data != nullptr ? y + vector_at(w.bias, row) : y;  // no bias: a tp rank other than 0
}
}  // namespace

void experts(const ops::ExpertsArgs& a) {
    const int64_t H = a.down.out, I = a.down.in;
    const int64_t pairs = a.num_tokens * a.top_k;
    std::vector<float> act(pairs * I), y(pairs * H);
    auto& pool = cpu_thread_pool();
    // gate_up + SwiGLU: parallel over (pair, unit); unit u reads rows 2u (gate) and 2u+1 (up).
    pool.parallel_for(pairs * I, 64, [&](int64_t b, int64_t e) {
        for (int64_t pu = b; pu < e; ++pu) {
            const int64_t pr = pu / I, u = pu % I, t = pr / a.top_k;
            const int64_t ex = a.expert_ids[pr];
            const float* x = a.x + t * H;
            const float gate = expert_row(a.gate_up, ex, 2 * u, x);
            const float up = expert_row(a.gate_up, ex, 2 * u + 1, x);
            act[pu] = swiglu_oai(gate, up, a.swiglu_limit, a.swiglu_alpha);
        }
    });
    pool.parallel_for(pairs * H, 64, [&](int64_t b, int64_t e) {
        for (int64_t po = b; po < e; ++po) {
            const int64_t pr = po / H, o = po % H;
            y[po] = expert_row(a.down, a.expert_ids[pr], o, act.data() + pr * I);
        }
    });
    // Weighted sum over the k experts in rank order, added to the residual.
    pool.parallel_for(a.num_tokens, 1, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
            float* out = a.out + t * H;
            for (int64_t o = 0; o < H; ++o) {
                float s = 0.0f;
                for (int64_t j = 0; j < a.top_k; ++j)
                    s += a.expert_weights[t * a.top_k + j] * y[(t * a.top_k + j) * H + o];
                out[o] += s;
            }
        }
    });
}

void add(const ops::AddArgs& a) {
    for (int64_t i = 0; i < a.n; ++i) a.y[i] += a.x[i];
}

}  // namespace volt::cpu
