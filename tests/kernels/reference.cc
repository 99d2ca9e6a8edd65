// The double-precision reference of volt_op_test (see reference.h). Every function reads like the spec
// section it names; no fixed summation order, no fast paths: plain double loops.
#include "tests/kernels/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>

#include "core/check.h"
#include "core/dtype.h"

namespace volt::kernels::ref {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
}  // namespace

const char* injection_name(Injection inj) {
    switch (inj) {
        case Injection::kNone:
            return "none";
        case Injection::kSink:
            return "sink";
        case Injection::kWindow:
            return "window";
        case Injection::kMscale:
            return "mscale";
        case Injection::kClamp:
            return "clamp";
        case Injection::kGqa:
            return "gqa";
    }
    return "?";
}

bool parse_injection(const std::string& s, Injection* out) {
    for (Injection i : {Injection::kNone, Injection::kSink, Injection::kWindow, Injection::kMscale,
                        Injection::kClamp, Injection::kGqa}) {
        if (s == injection_name(i)) {
            *out = i;
            return true;
        }
    }
    return false;
}

// ---- decoders ----------------------------------------------------------------------------------------

double fp4_value(uint8_t code) {
    const int s = (code >> 3) & 1, e = (code >> 1) & 3, m = code & 1;
    const double mag = e == 0 ? 0.5 * m : std::ldexp(1.0 + 0.5 * m, e - 1);
    return s ? -mag : mag;
}

double e8m0_scale(uint8_t byte) { return std::ldexp(1.0, static_cast<int>(byte) - 127); }

double decode(ops::Format f, const void* data, int64_t i) {
    switch (f) {
        case ops::Format::kF32:
            return static_cast<const float*>(data)[i];
        case ops::Format::kF16:
            return f16_to_f32(static_cast<const uint16_t*>(data)[i]);
        case ops::Format::kBf16:
            return bf16_to_f32(static_cast<const uint16_t*>(data)[i]);
        default:
            return std::numeric_limits<double>::quiet_NaN();
    }
}

double vector_at(const ops::VectorWeight& v, int64_t i) {
    return v.data == nullptr ? 0.0 : decode(v.format, v.data, i);
}

void Matrix::row(int64_t r, double* out) const {
    if (format == ops::Format::kMxfp4) {
        // Spec §2.3: element c = 32 g + k is nibble (k even: low, odd: high) of byte k / 2 of block g,
        // times the block's scale.
        double fp4[16];
        for (int i = 0; i < 16; ++i) fp4[i] = fp4_value(static_cast<uint8_t>(i));
        const int64_t nb = cols / 32;
        const auto* blocks = static_cast<const uint8_t*>(data) + r * nb * 16;
        for (int64_t g = 0; g < nb; ++g) {
            const double scale = e8m0_scale(scales[r * nb + g]);
            for (int64_t k = 0; k < 32; ++k) {
                const uint8_t byte = blocks[g * 16 + k / 2];
                const uint8_t code = (k % 2 == 0) ? (byte & 0x0f) : (byte >> 4);
                out[32 * g + k] = fp4[code] * scale;
            }
        }
        return;
    }
    if (format == ops::Format::kInt8) {
        // docs/quantization.md: w[r, c] = q[r, c] * scale[r].
        const double s = f16_to_f32(f16_scales[r]);
        for (int64_t c = 0; c < cols; ++c) out[c] = static_cast<const int8_t*>(data)[r * cols + c] * s;
        return;
    }
    if (format == ops::Format::kInt4) {
        // AutoAWQ awq/utils/packing_utils.py dequantize_gemm: unpack_awq shifts each int32 right by
        // 0, 4, ..., 28 (so unpacked index k is bits 4k..4k+3), reverse_awq_order then gives column j of
        // each group of 8 the unpacked index AWQ_REVERSE_ORDER[j]; w = (iweight - izeros) * scales with
        // scales and izeros repeated group_size times along the input (rows of qweight).
        static constexpr int kReverse[8] = {0, 4, 1, 5, 2, 6, 3, 7};
        const int64_t words = rows / 8;
        const auto* qweight = static_cast<const uint32_t*>(data);
        const auto* qzeros = static_cast<const uint32_t*>(zeros);
        auto unpacked = [](uint32_t word, int k) { return static_cast<int>((word >> (4 * k)) & 0xf); };
        for (int64_t c = 0; c < cols; ++c) {
            const int64_t g = c / group_size;
            const int q = unpacked(qweight[c * words + r / 8], kReverse[r % 8]);
            const int z = unpacked(qzeros[g * words + r / 8], kReverse[r % 8]);
            out[c] = (q - z) * static_cast<double>(f16_to_f32(f16_scales[g * rows + r]));
        }
        return;
    }
    for (int64_t c = 0; c < cols; ++c) out[c] = decode(format, data, r * cols + c);
}

Matrix matrix_of(const ops::DenseWeight& w) {
    Matrix m;
    m.format = w.format;
    m.data = w.w;
    m.f16_scales = w.scales;
    m.zeros = w.zeros;
    m.group_size = w.group_size;
    m.rows = w.out;
    m.cols = w.in;
    return m;
}

Matrix expert_matrix(const ops::ExpertWeights& w, int64_t e) {
    Matrix m;
    m.format = w.format;
    m.rows = w.out;
    m.cols = w.in;
    if (w.format == ops::Format::kMxfp4) {
        const int64_t nb = w.in / 32;
        m.data = w.blocks + e * w.out * nb * 16;
        m.scales = w.scales + e * w.out * nb;
        return m;
    }
    const int64_t elem = w.format == ops::Format::kF32 ? 4 : 2;
    m.data = static_cast<const uint8_t*>(w.w) + e * w.out * w.in * elem;
    return m;
}

// ---- ops ---------------------------------------------------------------------------------------------

std::vector<double> rmsnorm(const std::vector<double>& x, int64_t rows, int64_t hidden,
                            const ops::VectorWeight& w, double eps) {
    std::vector<double> y(rows * hidden);
    for (int64_t r = 0; r < rows; ++r) {
        const double* xr = x.data() + r * hidden;
        double ss = 0.0;
        for (int64_t j = 0; j < hidden; ++j) ss += xr[j] * xr[j];
        const double inv = 1.0 / std::sqrt(ss / static_cast<double>(hidden) + eps);
        for (int64_t j = 0; j < hidden; ++j) y[r * hidden + j] = xr[j] * inv * vector_at(w, j);
    }
    return y;
}

std::vector<double> linear(const std::vector<double>& x, int64_t rows, const Matrix& w,
                           const ops::VectorWeight& bias) {
    std::vector<double> y(rows * w.rows), wrow(w.cols);
    for (int64_t o = 0; o < w.rows; ++o) {
        w.row(o, wrow.data());
        const double b = vector_at(bias, o);
        for (int64_t r = 0; r < rows; ++r) {
            const double* xr = x.data() + r * w.cols;
            double acc = 0.0;
            for (int64_t i = 0; i < w.cols; ++i) acc += wrow[i] * xr[i];
            y[r * w.rows + o] = acc + b;
        }
    }
    return y;
}

Yarn yarn(int64_t head_dim, double theta, double factor, double original_max_positions, double beta_fast,
          double beta_slow) {
    // Spec §3.5: D rotary pairs; r(beta) = D ln(L0 / (2 pi beta)) / ln theta; no floor/ceil (truncate =
    // false); gamma ramps from 0 at `low` to 1 at `high`; inv_freq blends omega and omega / factor.
    const int64_t D = head_dim / 2;
    const double pi = std::acos(-1.0);
    auto r = [&](double beta) {
        return static_cast<double>(D) * std::log(original_max_positions / (2.0 * pi * beta)) /
               std::log(theta);
    };
    const double low = r(beta_fast), high = r(beta_slow);
    Yarn y;
    y.inv_freq.resize(D);
    for (int64_t i = 0; i < D; ++i) {
        const double omega = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
        const double gamma = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
        y.inv_freq[i] = omega * (1.0 - gamma) + omega / factor * gamma;
    }
    y.mscale = 0.1 * std::log(factor) + 1.0;
    return y;
}

void rope(std::vector<double>* x, int64_t tokens, int64_t heads, int64_t head_dim, const int32_t* positions,
          const float* inv_freq, double mscale, Injection inj) {
    const int64_t half = head_dim / 2;
    const double m = inj == Injection::kMscale ? 1.0 : mscale;
    for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t i = 0; i < half; ++i) {
            // The angle in fp32, as the spec fixes it (one rounded product); cos and sin in double.
            const float phi = static_cast<float>(positions[t]) * inv_freq[i];
            const double c = m * std::cos(static_cast<double>(phi)),
                         s = m * std::sin(static_cast<double>(phi));
            for (int64_t h = 0; h < heads; ++h) {
                double* p = x->data() + (t * heads + h) * head_dim;
                const double x1 = p[i], x2 = p[i + half];
                p[i] = x1 * c - x2 * s;
                p[i + half] = x2 * c + x1 * s;
            }
        }
    }
}

std::vector<double> attention(const AttentionInput& in, Injection inj) {
    const int64_t nh = in.num_heads, nkv = in.kv.num_kv_heads, d = in.kv.head_dim, bs = in.kv.block_size;
    const int64_t group = nh / nkv;
    const int64_t T = in.query_start_loc[in.num_seqs];
    std::vector<double> out(T * nh * d, 0.0), scores;
    // The pools decoded once (f16 widening is exact): [num_blocks * block_size, nkv, d].
    const int64_t pool_elems = in.kv.num_blocks * bs * nkv * d;
    std::vector<double> kd(pool_elems), vd(pool_elems);
    for (int64_t i = 0; i < pool_elems; ++i) {
        kd[i] = decode(in.kv.format, in.kv.k, i);
        vd[i] = decode(in.kv.format, in.kv.v, i);
    }
    for (int64_t s = 0; s < in.num_seqs; ++s) {
        const int64_t first = in.query_start_loc[s], q_len = in.query_start_loc[s + 1] - first;
        const int32_t* table = in.block_tables + s * in.max_blocks;
        for (int64_t r = 0; r < q_len; ++r) {
            const int64_t t = first + r;
            const int64_t n = in.seq_lens[s] - q_len + r;  // this row's key index
            int64_t lo = 0;
            if (in.window > 0) lo = std::max<int64_t>(0, n - in.window + (inj == Injection::kWindow ? 0 : 1));
            for (int64_t h = 0; h < nh; ++h) {
                const int64_t g = inj == Injection::kGqa ? h % nkv : h / group;
                const double* q = in.q->data() + (t * nh + h) * d;
                const double sink = vector_at(in.sinks, h);
                scores.assign(n - lo + 1, 0.0);
                double m = sink;
                for (int64_t j = lo; j <= n; ++j) {
                    VOLT_CHECK(table[j / bs] >= 0)
                        << "the reference reads key " << j << " from a freed block";
                    const int64_t slot = static_cast<int64_t>(table[j / bs]) * bs + j % bs;
                    const double* k = kd.data() + (slot * nkv + g) * d;
                    double dot = 0.0;
                    for (int64_t i = 0; i < d; ++i) dot += q[i] * k[i];
                    scores[j - lo] = dot * in.scale;
                    m = std::max(m, scores[j - lo]);
                }
                // Spec §3.4 step 6: the sink is one more logit of the softmax, with no value vector.
                double denom = inj == Injection::kSink ? 0.0 : std::exp(sink - m);
                for (double& sc : scores) denom += (sc = std::exp(sc - m));
                double* o = out.data() + (t * nh + h) * d;
                for (int64_t j = lo; j <= n; ++j) {
                    const int64_t slot = static_cast<int64_t>(table[j / bs]) * bs + j % bs;
                    const double p = scores[j - lo] / denom;
                    const double* v = vd.data() + (slot * nkv + g) * d;
                    for (int64_t i = 0; i < d; ++i) o[i] += p * v[i];
                }
            }
        }
    }
    return out;
}

Routed router(const std::vector<double>& x, int64_t tokens, const Matrix& w, const ops::VectorWeight& bias,
              int64_t top_k) {
    const int64_t E = w.rows;
    const std::vector<double> logits = linear(x, tokens, w, bias);
    Routed r;
    r.ids.resize(tokens * top_k);
    r.weights.resize(tokens * top_k);
    r.margin.assign(tokens, kInf);
    std::vector<int32_t> order(E);
    for (int64_t t = 0; t < tokens; ++t) {
        const double* l = logits.data() + t * E;
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
        // Rounding errors of a logit scale with the row's logits (a dot product's error is relative to
        // the size of its terms), so the gaps are measured in units of the row's rms.
        double ss = 0.0;
        for (int64_t e = 0; e < E; ++e) ss += l[e] * l[e];
        const double scale = std::max(std::sqrt(ss / static_cast<double>(E)), 1e-300);
        for (int64_t j = 0; j < std::min<int64_t>(top_k, E - 1); ++j)
            r.margin[t] = std::min(r.margin[t], (l[order[j]] - l[order[j + 1]]) / scale);
        double sum = 0.0;
        for (int64_t j = 0; j < top_k; ++j) sum += std::exp(l[order[j]] - l[order[0]]);
        for (int64_t j = 0; j < top_k; ++j) {
            r.ids[t * top_k + j] = order[j];
            r.weights[t * top_k + j] = std::exp(l[order[j]] - l[order[0]]) / sum;
        }
    }
    return r;
}

double swiglu(double gate, double up, double limit, double alpha, Injection inj) {
    const double g = inj == Injection::kClamp ? gate : std::min(gate, limit);
    const double u = inj == Injection::kClamp ? up : std::clamp(up, -limit, limit);
    return g / (1.0 + std::exp(-alpha * g)) * (u + 1.0);
}

ExpertsResult experts(const std::vector<double>& x, int64_t tokens, const int32_t* ids, const float* weights,
                      int64_t top_k, const ops::ExpertWeights& gate_up, const ops::ExpertWeights& down,
                      double limit, double alpha, Injection inj) {
    const int64_t H = down.out, I = down.in;
    ExpertsResult res;
    res.branch.assign(tokens * H, 0.0);
    std::vector<double> hgu, a(I), y, row(std::max(H, I));
    for (int64_t t = 0; t < tokens; ++t) {
        const std::vector<double> xt(x.begin() + t * H, x.begin() + (t + 1) * H);
        for (int64_t j = 0; j < top_k; ++j) {
            const int32_t e = ids[t * top_k + j];
            const ops::VectorWeight b1{
                gate_up.bias.format,
                static_cast<const uint8_t*>(gate_up.bias.data) +
                    e * gate_up.out * (gate_up.bias.format == ops::Format::kF32 ? 4 : 2),
                gate_up.out};
            hgu = linear(xt, 1, expert_matrix(gate_up, e), b1);
            for (int64_t u = 0; u < I; ++u) {
                const double g = hgu[2 * u], up = hgu[2 * u + 1];
                res.gate_clamped += g > limit;
                res.up_clamped += std::abs(up) > limit;
                a[u] = swiglu(g, up, limit, alpha, inj);
            }
            res.units += I;
            const ops::VectorWeight b2{down.bias.format,
                                       static_cast<const uint8_t*>(down.bias.data) +
                                           e * down.out * (down.bias.format == ops::Format::kF32 ? 4 : 2),
                                       down.out};
            y = linear(a, 1, expert_matrix(down, e), b2);
            const double w = weights[t * top_k + j];
            for (int64_t o = 0; o < H; ++o) res.branch[t * H + o] += w * y[o];
        }
    }
    return res;
}

// ---- sample ------------------------------------------------------------------------------------------

uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

double sample_uniform(uint64_t seed, uint64_t counter) {
    return std::ldexp(static_cast<double>(splitmix64(splitmix64(seed) ^ counter) >> 11), -53);
}

SampleResult sample_row(const ops::SampleRow& row, int64_t V, const TieEpsilon& eps) {
    SampleResult res;
    const float* logits = row.logits;
    // Raw logprobs over the real vocabulary.
    double mx = -kInf;
    for (int64_t i = 0; i < V; ++i) mx = std::max(mx, static_cast<double>(logits[i]));
    double sum = 0.0;
    for (int64_t i = 0; i < V; ++i) sum += std::exp(logits[i] - mx);
    res.lse = mx + std::log(sum);
    if (row.num_logprobs > 0) {
        std::vector<double> all(logits, logits + V);
        const int64_t k = std::min<int64_t>(row.num_logprobs, V);
        std::partial_sort(all.begin(), all.begin() + k, all.end(), std::greater<double>());
        for (int64_t j = 0; j < k; ++j) res.top.push_back(all[j] - res.lse);
    }
    if (row.target >= 0) {
        res.token = row.target;
        return res;
    }

    // Processed logits: allowed mask, bias, then the penalties (vLLM's repetition penalty divides positive
    // and multiplies negative logits of every prompt or output id; frequency and presence subtract
    // count * f + p for output ids).
    std::vector<double> w(logits, logits + V);
    if (row.num_allowed > 0) {
        std::vector<double> kept(V, -kInf);
        for (int64_t j = 0; j < row.num_allowed; ++j) kept[row.allowed_ids[j]] = w[row.allowed_ids[j]];
        w.swap(kept);
    }
    for (int64_t j = 0; j < row.num_bias; ++j) w[row.bias_ids[j]] += row.bias_values[j];
    if (row.repetition_penalty != 1.0f) {
        std::vector<bool> seen(V, false);
        for (int64_t j = 0; j < row.num_prompt; ++j) seen[row.prompt_ids[j]] = true;
        for (int64_t j = 0; j < row.num_output; ++j) seen[row.output_ids[j]] = true;
        const double rp = row.repetition_penalty;
        for (int64_t i = 0; i < V; ++i)
            if (seen[i]) w[i] = w[i] > 0 ? w[i] / rp : w[i] * rp;
    }
    if (row.frequency_penalty != 0.0f || row.presence_penalty != 0.0f) {
        std::vector<int64_t> count(V, 0);
        for (int64_t j = 0; j < row.num_output; ++j) ++count[row.output_ids[j]];
        for (int64_t i = 0; i < V; ++i)
            if (count[i] > 0)
                w[i] -= static_cast<double>(count[i]) * row.frequency_penalty + row.presence_penalty;
    }

    int64_t best = 0;
    for (int64_t i = 1; i < V; ++i)
        if (w[i] > w[best]) best = i;
    if (row.temperature < ops::kGreedyTemperature || std::isinf(w[best])) {
        double second = -kInf;
        for (int64_t i = 0; i < V; ++i)
            if (i != best) second = std::max(second, w[i]);
        res.token = static_cast<int32_t>(best);
        res.near_tie = w[best] - second <= eps.logit * std::max(1.0, std::abs(w[best]));
        return res;
    }

    // Probabilities relative to the best (p_max = 1); filtered ids get 0.
    std::vector<double> p(V);
    for (int64_t i = 0; i < V; ++i) p[i] = std::exp((w[i] - w[best]) / row.temperature);
    if (row.min_p > 0.0f) {
        const double mp = row.min_p;
        for (int64_t i = 0; i < V; ++i) {
            if (p[i] > 0 && std::abs(p[i] - mp) <= eps.prob * mp) res.near_tie = true;
            if (p[i] < mp) p[i] = 0.0;
        }
    }
    std::vector<int32_t> ids;
    for (int64_t i = 0; i < V; ++i)
        if (p[i] > 0.0) ids.push_back(static_cast<int32_t>(i));
    auto by_prob = [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); };
    std::sort(ids.begin(), ids.end(), by_prob);
    if (row.top_k > 0 && row.top_k < static_cast<int64_t>(ids.size())) {
        // Ties with the k-th are kept (vLLM): the cut is by value.
        const double kth = p[ids[row.top_k - 1]];
        if (p[ids[row.top_k]] >= kth * (1.0 - eps.prob)) res.near_tie = true;
        for (int32_t id : ids)
            if (p[id] < kth) p[id] = 0.0;
        ids.erase(std::remove_if(ids.begin(), ids.end(), [&](int32_t id) { return p[id] == 0.0; }),
                  ids.end());
    }
    if (row.top_p < 1.0f) {
        // Keep the most likely ids until their mass reaches top_p of the total (at least one).
        double total = 0.0;
        for (int32_t id : ids) total += p[id];
        const double want = static_cast<double>(row.top_p) * total;
        double cum = 0.0;
        size_t keep = 0;
        while (keep < ids.size() && cum < want) {
            cum += p[ids[keep++]];
            if (std::abs(cum - want) <= eps.cdf * total) res.near_tie = true;
        }
        keep = std::max<size_t>(keep, 1);
        for (size_t i = keep; i < ids.size(); ++i) p[ids[i]] = 0.0;
    }
    // Inverse CDF over ids in ascending order with the row's one uniform.
    double total = 0.0;
    for (int64_t i = 0; i < V; ++i) total += p[i];
    const double target = sample_uniform(row.seed, row.counter) * total;
    double cum = 0.0;
    int64_t token = best;
    for (int64_t i = 0; i < V; ++i) {
        if (p[i] == 0.0) continue;
        const double before = cum;
        cum += p[i];
        token = i;
        if (cum > target) {
            if (target - before <= eps.cdf * total || cum - target <= eps.cdf * total) res.near_tie = true;
            break;
        }
    }
    res.token = static_cast<int32_t>(token);
    return res;
}

// ---- self-test ---------------------------------------------------------------------------------------

std::vector<std::string> self_test() {
    std::vector<std::string> bad;
    auto expect = [&](const std::string& what, double got, double want, double rel) {
        if (!(std::abs(got - want) <= rel * std::max(std::abs(want), 1e-300))) {
            std::ostringstream os;
            os.precision(10);
            os << what << ": got " << got << ", spec says " << want;
            bad.push_back(os.str());
        }
    };
    // Spec §8 MXFP4: byte 0x21, scale 127 -> (+0.5, +1.0); scale 130 -> (+4, +8); 0xF8 -> (-0, -6).
    const uint8_t blocks[16] = {0x21, 0xF8};
    for (uint8_t scale : {uint8_t{127}, uint8_t{130}}) {
        const uint8_t scales[1] = {scale};
        double row[32];
        Matrix mx;
        mx.format = ops::Format::kMxfp4;
        mx.data = blocks;
        mx.scales = scales;
        mx.rows = 1;
        mx.cols = 32;
        mx.row(0, row);
        const double m = scale == 127 ? 1.0 : 8.0;
        expect("mxfp4 element 0", row[0], 0.5 * m, 0);
        expect("mxfp4 element 1", row[1], 1.0 * m, 0);
        expect("mxfp4 element 3", row[3], -6.0 * m, 0);
        if (!std::signbit(row[2])) bad.push_back("mxfp4 element 2: expected -0");
    }
    // AWQ gemm, packed by hand (docs/quantization.md): 8 output columns, 2 inputs, one group of 2.
    // Input 0's word 0x86427531 holds nibbles 1,3,5,7,2,4,6,8 from the low end: AWQ_ORDER puts columns
    // 0,2,4,6,1,3,5,7 there, so column j holds j + 1. Input 1's word 0x000F0000: nibble 4 = column 1 = 15.
    // Zeros 0x88888838: column 2 (nibble 1) has zero 3, the others 8. Scales 0.5, column 3: 2.0.
    // (q - z) s by hand, column j at inputs (0, 1): (-3.5, -4) (-3, 3.5) (0, -1.5) (-8, -16) (-1.5, -4)
    // (-1, -4) (-0.5, -4) (0, -4).
    {
        const uint32_t qweight[2] = {0x86427531u, 0x000F0000u};
        const uint32_t qzeros[1] = {0x88888838u};
        uint16_t sc[8];
        for (int j = 0; j < 8; ++j) sc[j] = j == 3 ? 0x4000 : 0x3800;  // f16 2.0, 0.5
        const double want[8][2] = {{-3.5, -4}, {-3, 3.5}, {0, -1.5},  {-8, -16},
                                   {-1.5, -4}, {-1, -4},  {-0.5, -4}, {0, -4}};
        Matrix m;
        m.format = ops::Format::kInt4;
        m.data = qweight;
        m.f16_scales = sc;
        m.zeros = qzeros;
        m.group_size = 2;
        m.rows = 8;
        m.cols = 2;
        for (int j = 0; j < 8; ++j) {
            double row[2];
            m.row(j, row);
            expect("awq column " + std::to_string(j) + " input 0", row[0], want[j][0], 0);
            expect("awq column " + std::to_string(j) + " input 1", row[1], want[j][1], 0);
        }
    }
    // Spec §8 SwiGLU vectors (limit 7, alpha 1.702).
    expect("swiglu(10, 10)", swiglu(10, 10, 7, 1.702, Injection::kNone), 55.99962503, 1e-8);
    expect("swiglu(-3, 0.5)", swiglu(-3, 0.5, 7, 1.702, Injection::kNone), -0.02710696, 1e-6);
    expect("swiglu(1, -9)", swiglu(1, -9, 7, 1.702, Injection::kNone), -5.07477460, 1e-8);
    expect("swiglu(0, 3)", swiglu(0, 3, 7, 1.702, Injection::kNone), 0.0, 0);
    // Spec §8 sink softmax: scores (1, 2), sink 0.5 -> weights (0.23122390, 0.62853172). One head, d = 2,
    // scale 1: q = (1, 0), k = (1, 0), (2, 0) give the scores; v = (1, 0), (0, 1) read the weights.
    {
        const std::vector<double> q = {1.0, 0.0};
        const float kc[4] = {1, 0, 2, 0}, vc[4] = {1, 0, 0, 1};
        const float sink = 0.5f;
        const int32_t seq_len = 2, qsl[2] = {0, 1}, table[1] = {0};
        AttentionInput in;
        in.q = &q;
        in.kv = {ops::Format::kF32, kc, vc, 1, 2, 1, 2};
        in.seq_lens = &seq_len;
        in.query_start_loc = qsl;
        in.block_tables = table;
        in.sinks = {ops::Format::kF32, &sink, 1};
        in.num_seqs = 1;
        in.num_heads = 1;
        in.max_blocks = 1;
        in.scale = 1.0;
        const auto o = attention(in, Injection::kNone);
        expect("sink softmax weight 0", o[0], 0.23122390, 1e-7);
        expect("sink softmax weight 1", o[1], 0.62853172, 1e-7);
    }
    // Spec §3.5 YaRN reference values (theta 150000, d 64, factor 32, L0 4096, beta 32 / 1).
    const Yarn y = yarn(64, 150000.0, 32.0, 4096.0, 32.0, 1.0);
    const std::pair<int, double> inv[] = {{0, 1.0},         {8, 5.0813e-2},   {9, 3.17057e-2},
                                          {12, 6.79496e-3}, {16, 4.56484e-4}, {17, 1.29319e-4},
                                          {18, 3.83088e-5}, {31, 3.02351e-7}};
    for (auto [i, want] : inv)
        expect(("yarn inv_freq[" + std::to_string(i) + "]").c_str(), y.inv_freq[i], want, 1e-4);
    expect("yarn mscale", y.mscale, 1.3465736, 1e-7);
    // splitmix64 of state 0: the published first output of Vigna's splitmix64.c.
    if (splitmix64(0) != 0xE220A8397B1DCDAFull) bad.push_back("splitmix64(0) != 0xE220A8397B1DCDAF");
    return bad;
}

}  // namespace volt::kernels::ref
