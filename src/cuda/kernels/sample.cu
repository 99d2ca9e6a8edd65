// The sample op on the device (ops/sample.h; CPU twin src/cpu/sample.cc, same contract and order):
// raw logprobs -> allowed-id mask, logit bias -> repetition, frequency, presence penalties -> argmax, or
// temperature -> min_p -> top_k -> top_p -> one counter-based uniform (the CPU's splitmix64 draw, bit
// for bit) by inverse CDF over ids in ascending order. One block of 1024 threads per row; per-row
// scratch in global memory: the processed logits [V] f32 and a counter per id [V] i32 (zero between
// uses). Every reduction has a fixed order, so a row's result depends on the row only.
// Exactness against the CPU: every per-element operation is the CPU's; sums are in f64 like the CPU's but
// in another fixed order (block reductions; the inverse CDF adds 1024 contiguous chunks' sums), and expf
// may differ from glibc's by an ulp, so a draw can differ from the CPU's only when the uniform falls
// within ~1e-15 of a boundary. top_k: the k-th largest value found exactly (binary search on the f32
// bit patterns, counts are integers). top_p: the last kept value t by binary search on the mass of
// {w >= t} (f64, fixed order), then the first ceil((want - mass above t) / t) ids equal to t in id order.
#include <algorithm>
#include <cmath>

#include "cuda/cuda_check.h"
#include "cuda/device_util.cuh"
#include "cuda/pdl.cuh"

namespace volt::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr uint32_t kOneBits = 0x3F800000u;  // 1.0f: the largest relative probability

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
// ops::sample_uniform, the same integer operations.
__device__ __forceinline__ double sample_uniform(uint64_t seed, uint64_t counter) {
    return static_cast<double>(splitmix64(splitmix64(seed) ^ counter) >> 11) * (1.0 / 9007199254740992.0);
}

struct Smem {
    float f[32];
    double d[32];
    int i[32];
    Ranked r[32];
    double chunk[kThreads];  // chunk sums, then their exclusive prefix
    int count[kThreads];
    int64_t chosen;
    double target;
    int32_t token;
};

__global__ void __launch_bounds__(kThreads)
    sample_kernel(ops::SampleArgs a, int64_t row0, float* __restrict__ w_scratch,
                  int32_t* __restrict__ flags_scratch, int* error) {
    pdl_wait();  // pdl.cuh: nothing of an earlier kernel is touched before it
    pdl_launch_dependents();
    __shared__ Smem sm;
    const int tid = threadIdx.x;
    const int64_t r = row0 + blockIdx.x;
    const ops::SampleRow& row = a.rows[r];
    const int64_t V = a.vocab_size_real;
    const float* logits = row.logits;
    float* w = w_scratch + static_cast<int64_t>(blockIdx.x) * V;
    int32_t* flags = flags_scratch + static_cast<int64_t>(blockIdx.x) * V;
    const float kNegInf = -__int_as_float(0x7f800000);
    auto valid = [&](int32_t id) {
        const bool ok = id >= 0 && id < V;
        if (!ok) report_error(error, kBadSampleId);
        return ok;
    };

    // A NaN or an infinity anywhere in the row: no draw (ops::kNonFiniteToken; the engine fails the request).
    int bad = 0;
    for (int64_t i = tid; i < V; i += kThreads) bad |= !isfinite(logits[i]);
    if (__syncthreads_or(bad)) {
        if (tid == 0) a.tokens[r] = ops::kNonFiniteToken;
        return;
    }

    // Raw logprobs: log-softmax over the real vocabulary (f32 exp of f32 differences, summed in f64).
    const bool want_lp = row.num_logprobs >= 0;
    double lse = 0.0;
    if (want_lp) {
        float m = kNegInf;
        for (int64_t i = tid; i < V; i += kThreads) m = fmaxf(m, logits[i]);
        m = block_max<kThreads>(m, sm.f);
        double s = 0.0;
        for (int64_t i = tid; i < V; i += kThreads) s += static_cast<double>(expf(logits[i] - m));
        s = block_sum<kThreads>(s, sm.d);
        lse = static_cast<double>(m) + log(s);
        int64_t k = row.num_logprobs;
        if (k > a.max_top) {
            if (tid == 0) report_error(error, kBadSampleId);
            k = a.max_top;
        }
        Ranked prev{0.0f, -1};
        for (int64_t j = 0; j < k; ++j) {
            Ranked best{0.0f, -1};
            if (j == 0 || prev.id >= 0) {
                for (int64_t i = tid; i < V; i += kThreads) {
                    const Ranked c{logits[i], static_cast<int32_t>(i)};
                    if ((prev.id < 0 || ranks_before(prev, c)) && ranks_before(c, best)) best = c;
                }
            }
            best = block_best<kThreads>(best, sm.r);
            if (tid == 0) {
                a.top_ids[r * a.max_top + j] = best.id;
                a.top_logprobs[r * a.max_top + j] =
                    best.id >= 0 ? static_cast<float>(logits[best.id] - lse) : kNegInf;
            }
            prev = best;
        }
    }
    auto finish = [&](int32_t token) {
        if (tid == 0) {
            a.tokens[r] = token;
            if (want_lp) a.logprobs[r] = static_cast<float>(logits[token] - lse);
        }
    };
    if (row.target >= 0) {
        finish(row.target < V ? row.target : 0);
        if (row.target >= V && tid == 0) report_error(error, kBadSampleId);
        return;
    }

    // Processed logits: allowed-id mask, bias, penalties (flags[] is zero between the steps).
    for (int64_t i = tid; i < V; i += kThreads) {
        w[i] = logits[i];
        flags[i] = 0;
    }
    __syncthreads();
    if (row.num_allowed > 0) {
        for (int64_t j = tid; j < row.num_allowed; j += kThreads)
            if (valid(row.allowed_ids[j])) flags[row.allowed_ids[j]] = 1;
        __syncthreads();
        for (int64_t i = tid; i < V; i += kThreads) {
            if (flags[i] != 0)
                flags[i] = 0;
            else
                w[i] = kNegInf;
        }
        __syncthreads();
    }
    if (tid == 0) {  // in list order, like the CPU (a repeated id adds twice)
        for (int64_t j = 0; j < row.num_bias; ++j)
            if (valid(row.bias_ids[j])) w[row.bias_ids[j]] += row.bias_values[j];
    }
    __syncthreads();
    if (row.repetition_penalty != 1.0f) {
        // Each distinct id of prompt + output once: mark, then the thread that clears a mark applies it.
        const int64_t n = row.num_prompt + row.num_output;
        auto id_at = [&](int64_t j) {
            return j < row.num_prompt ? row.prompt_ids[j] : row.output_ids[j - row.num_prompt];
        };
        for (int64_t j = tid; j < n; j += kThreads)
            if (valid(id_at(j))) flags[id_at(j)] = 1;
        __syncthreads();
        for (int64_t j = tid; j < n; j += kThreads) {
            const int32_t id = id_at(j);
            if (id >= 0 && id < V && atomicExch(&flags[id], 0) == 1) {
                const float x = w[id];
                w[id] = x > 0 ? x / row.repetition_penalty : x * row.repetition_penalty;
            }
        }
        __syncthreads();
    }
    if (row.frequency_penalty != 0.0f || row.presence_penalty != 0.0f) {
        for (int64_t j = tid; j < row.num_output; j += kThreads)
            if (valid(row.output_ids[j])) atomicAdd(&flags[row.output_ids[j]], 1);
        __syncthreads();
        for (int64_t j = tid; j < row.num_output; j += kThreads) {
            const int32_t id = row.output_ids[j];
            if (id < 0 || id >= V) continue;
            const int c = atomicExch(&flags[id], 0);
            if (c > 0) w[id] -= static_cast<float>(c) * row.frequency_penalty + row.presence_penalty;
        }
        __syncthreads();
    }

    // Greedy: the first id of the largest processed logit.
    Ranked best{0.0f, -1};
    for (int64_t i = tid; i < V; i += kThreads) {
        const Ranked c{w[i], static_cast<int32_t>(i)};
        if (ranks_before(c, best)) best = c;
    }
    best = block_best<kThreads>(best, sm.r);
    if (row.temperature < ops::kGreedyTemperature || isinf(best.value)) {
        finish(best.id);
        return;
    }

    // Relative probabilities exp((w - max) / T) in (0, 1], then min_p.
    const float m = best.value;
    for (int64_t i = tid; i < V; i += kThreads) {
        float p = expf((w[i] - m) / row.temperature);
        if (row.min_p > 0.0f && p < row.min_p) p = 0.0f;
        w[i] = p;
    }
    __syncthreads();

    if (row.top_k > 0) {
        auto count_ge = [&](uint32_t bits) {
            const float t = __uint_as_float(bits);
            int c = 0;
            for (int64_t i = tid; i < V; i += kThreads) c += w[i] >= t ? 1 : 0;
            return block_sum<kThreads>(c, sm.i);
        };
        const int positive = count_ge(1u);
        if (row.top_k < positive) {
            // The k-th largest value: the largest bit pattern b with count(w >= b) >= k.
            uint32_t lo = 1u, hi = kOneBits;
            if (count_ge(hi) >= row.top_k) {
                lo = hi;
            } else {
                while (hi - lo > 1u) {
                    const uint32_t mid = lo + (hi - lo) / 2u;
                    if (count_ge(mid) >= row.top_k)
                        lo = mid;
                    else
                        hi = mid;
                }
            }
            const float kth = __uint_as_float(lo);  // ties with the k-th are kept (vLLM)
            for (int64_t i = tid; i < V; i += kThreads)
                if (w[i] < kth) w[i] = 0.0f;
            __syncthreads();
        }
    }

    const int64_t chunk = (V + kThreads - 1) / kThreads;
    const int64_t my_begin = tid * chunk, my_end = my_begin + chunk < V ? my_begin + chunk : V;
    if (row.top_p < 1.0f) {
        auto mass_ge = [&](uint32_t bits) {
            const float t = __uint_as_float(bits);
            double s = 0.0;
            for (int64_t i = tid; i < V; i += kThreads)
                if (w[i] >= t) s += w[i];
            return block_sum<kThreads>(s, sm.d);
        };
        const double total = mass_ge(1u);
        const double want = row.top_p * total;
        // The value t of the last kept token: the largest b with mass(w >= b) >= want.
        uint32_t lo = 1u, hi = kOneBits;
        if (mass_ge(hi) >= want) {
            lo = hi;
        } else {
            while (hi - lo > 1u) {
                const uint32_t mid = lo + (hi - lo) / 2u;
                if (mass_ge(mid) >= want)
                    lo = mid;
                else
                    hi = mid;
            }
        }
        const float t = __uint_as_float(lo);
        const double above = lo == kOneBits ? 0.0 : mass_ge(lo + 1u);
        // Tokens equal to t are added in id order until the mass reaches want (at least one token kept).
        int my_eq = 0;
        for (int64_t i = my_begin; i < my_end; ++i) my_eq += w[i] == t ? 1 : 0;
        sm.count[tid] = my_eq;
        __syncthreads();
        if (tid == 0) {
            int acc = 0;
            for (int c = 0; c < kThreads; ++c) {
                const int n = sm.count[c];
                sm.count[c] = acc;
                acc += n;
            }
            const double need = want - above;
            int64_t keep = need <= 0.0 ? 1 : static_cast<int64_t>(ceil(need / static_cast<double>(t)));
            keep = keep < 1 ? 1 : keep > acc ? acc : keep;
            sm.chosen = keep;
        }
        __syncthreads();
        const int64_t keep = sm.chosen;
        int64_t rank = sm.count[tid];
        for (int64_t i = my_begin; i < my_end; ++i) {
            const float x = w[i];
            if (x > t) continue;
            if (x == t && rank++ < keep) continue;
            w[i] = 0.0f;
        }
        __syncthreads();
    }

    // Inverse CDF in ascending id order: chunk sums, their prefix, then a walk inside the chosen chunk.
    double cs = 0.0;
    for (int64_t i = my_begin; i < my_end; ++i) cs += w[i];
    sm.chunk[tid] = cs;
    __syncthreads();
    if (tid == 0) {
        double acc = 0.0;
        for (int c = 0; c < kThreads; ++c) {
            const double s = sm.chunk[c];
            sm.chunk[c] = acc;
            acc += s;
        }
        const double target = sample_uniform(row.seed, row.counter) * acc;
        int64_t chosen = -1;
        for (int c = 0; c < kThreads; ++c) {
            const double next = c + 1 < kThreads ? sm.chunk[c + 1] : acc;
            if (next > target) {
                chosen = c;
                break;
            }
        }
        sm.chosen = chosen;
        sm.target = target;
        sm.token = -1;
    }
    __syncthreads();
    if (sm.chosen < 0) {
        // The mass never passed the target (rounding): the last id with a nonzero weight, as the CPU.
        int last = -1;
        for (int64_t i = tid; i < V; i += kThreads)
            if (w[i] != 0.0f) last = static_cast<int>(i);
        last = block_max<kThreads>(last, sm.i);
        finish(last >= 0 ? last : best.id);
        return;
    }
    if (tid == sm.chosen) {
        double cum = sm.chunk[tid];
        int32_t token = -1;
        for (int64_t i = my_begin; i < my_end; ++i) {
            if (w[i] == 0.0f) continue;
            cum += w[i];
            token = static_cast<int32_t>(i);
            if (cum > sm.target) break;
        }
        sm.token = token;
    }
    __syncthreads();
    finish(sm.token >= 0 ? sm.token : best.id);
}

}  // namespace

int64_t sample_scratch_bytes_per_row(int64_t vocab_size_real) { return vocab_size_real * 8; }

void launch_sample(const ops::SampleArgs& a, void* scratch, int64_t rows_per_launch, const Launch& ctx) {
    if (a.num_rows <= 0) return;
    VOLT_CHECK(a.vocab_size_real > 0 && a.vocab_size_real <= a.vocab_size) << a.vocab_size_real;
    VOLT_CHECK(a.vocab_size_real < (int64_t{1} << 31)) << a.vocab_size_real;
    VOLT_CHECK(rows_per_launch > 0 && scratch != nullptr);
    auto* w = static_cast<float*>(scratch);
    auto* flags = reinterpret_cast<int32_t*>(w + rows_per_launch * a.vocab_size_real);
    for (int64_t r0 = 0; r0 < a.num_rows; r0 += rows_per_launch) {
        const int64_t n = std::min(rows_per_launch, a.num_rows - r0);
        launch_kernel(sample_kernel, static_cast<unsigned>(n), kThreads, 0, ctx, a, r0, w, flags, ctx.error);
        VOLT_CUDA_CHECK_LAUNCH();
    }
}

}  // namespace volt::cuda
