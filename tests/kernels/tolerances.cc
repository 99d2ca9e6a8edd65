// The tolerance table (see tolerances.h). CPU numbers: f32 arithmetic against double, 5-10 times the worst
// error seen (in brackets), and well below what a real bug gives (an fp16 narrowing is 2^-11 = 4.9e-4;
// every --inject gives > 1e-2). CUDA numbers: what fp16 operands (rounding
// 2^-11 relative per element) with f32 accumulation honestly give, larger than the CPU's by design; ops
// with no matmul keep f32 tolerances on the GPU too (the residual stream and norms stay f32, STYLE.md).
#include "tests/kernels/tolerances.h"

namespace volt::kernels {

namespace {
// 2^-11: the largest relative rounding error of one f16 conversion (round to nearest).
constexpr double kF16Round = 4.8828125e-4;

const std::vector<Tolerance> kTable = {
    // ---- cpu ---- (worst seen over seeds 1..20 of --shapes edge and 1..3 of --shapes model in brackets)
    {"cpu", "embedding", 0.0, "a copy: bf16/f16 -> f32 widening is exact [0]"},
    {"cpu", "rmsnorm", 3e-6,
     "f32 sum of squares of H <= 2880 terms in 8 partial sums, one sqrt, two products [3.6e-7]"},
    {"cpu", "linear", 2e-5, "f32 dot products of K <= 4096 terms in 8 partial sums against double [2.1e-6]"},
    {"cpu", "rope", 3e-6,
     "f32 cos/sin (< 1 ulp) of the fp32 angle the spec fixes (both sides round phi alike), two products "
     "[3.8e-7]"},
    {"cpu", "kv_write.f32", 0.0, "a copy [0]"},
    {"cpu", "kv_write.f16", kF16Round,
     "f32 -> f16 round to nearest: at most half an ulp, 2^-11 relative [4.88e-4]"},
    {"cpu", "attention", 5e-5,
     "f32 q.k over d <= 128, exp, a denominator of up to 4097 terms and the weighted sum of v [9.1e-6 at "
     "4097 keys]"},
    {"cpu", "router.weights", 2e-5,
     "softmax over k <= 4 logits, each an f32 dot product of H = 2880 terms [3.6e-6]"},
    {"cpu", "router.tie", 1e-5,
     "f32 logits carry ~1e-6 of the row's rms: closer top-k neighbours may swap (gap over rms(logits))"},
    {"cpu", "experts", 2e-5,
     "two chained f32 dot products (H, I <= 2880) with the SwiGLU between (slope up to ~8) [2.4e-6]"},
    {"cpu", "add", 1e-6, "one f32 addition: nothing but the sum's own rounding (allowed by the metric) [0]"},
    {"cpu", "o_proj_residual", 2e-5,
     "the linear entry, relative to the branch; the residual add is f32 [1.9e-6]"},
    {"cpu", "final_logits", 2e-5, "rmsnorm, then an f32 dot product of H = 2880 terms [2.4e-6]"},
    {"cpu", "linear.int8", 2e-5, "the linear entry: q * s is exact in f32, so only the f32 dot product errs"},
    {"cpu", "linear.int4", 2e-5,
     "the linear entry: (q - z) * s is exact in f32, so only the f32 dot product errs"},
    {"cpu", "final_logits.int8", 2e-5, "the final_logits entry (exact dequantization)"},
    {"cpu", "final_logits.int4", 2e-5, "the final_logits entry (exact dequantization)"},
    {"cpu", "qkv_rope_kvwrite", 2e-5, "rmsnorm, linear and rope in f32, chained [2.0e-6]"},
    {"cpu", "qkv_rope_kvwrite.kv_f16", kF16Round + 2e-5,
     "the chain above, then stored as f16 (2^-11) [4.86e-4]"},
    {"cpu", "moe_route.h", 3e-6, "the rmsnorm entry [2.5e-7]"},
    {"cpu", "sample.logprob", 1e-6,
     "logit - logsumexp: f32 max, a double sum of f32 exp over <= 200019 ids; over max(|lp|, rms) [9.6e-8]"},
    {"cpu", "sample.tie_logit", 1e-5,
     "greedy: best and second within 1e-5 of max(1, |best|) (bias, penalties in f32)"},
    {"cpu", "sample.tie_prob", 1e-5, "min_p and top_k cuts within 1e-5 relative: f32 exp((w - m) / T)"},
    {"cpu", "sample.tie_cdf", 1e-6,
     "top_p mass and the inverse-CDF draw within 1e-6 of the total mass (f32 weights summed in double)"},
    {"cpu", "copy_blocks", 0.0, "a copy: every byte of every pool compared [0]"},
    {"cpu", "swap_blocks", 0.0, "a copy: every byte of the host pool and of every device pool compared"},

    // ---- cuda ----
    {"cuda", "embedding", 5e-6,
     "a copy; room for a bf16 -> f16 table placed below f16's normal range (2^-14: absolute 3e-8)"},
    {"cuda", "rmsnorm", 1e-5,
     "f32 throughout (STYLE.md), a tree reduction and rsqrtf (2 ulp) instead of sqrt"},
    {"cuda", "linear", 5e-3,
     "fp16 operands, f32 accumulation: x rounded to f16 (2^-11 each) gives ~3e-4 rms(y) typical, 5 sigma of "
     "1e6 "
     "outputs ~1.5e-3, and a weight placed as f16 (from f32) doubles it"},
    {"cuda", "rope", 2e-5,
     "f32 sincosf of the fp32 angle (full range reduction, no __sinf); no fp16 operands"},
    {"cuda", "kv_write.f32", 0.0, "a copy"},
    {"cuda", "kv_write.f16", kF16Round, "__float2half_rn: at most half an ulp, 2^-11 relative"},
    {"cuda", "attention", 1e-2,
     "fp16 q, k, v operands into f32 accumulators: score errors ~2^-11 |q||k|, softmax in f32, P rounded to "
     "f16 "
     "for the P.V product"},
    {"cuda", "router.weights", 5e-3, "the linear entry on logits of ~2 through a 4-way f32 softmax"},
    {"cuda", "router.tie", 5e-3,
     "fp16-operand logits carry ~5e-4 of the row's rms (2^-11 per operand over 2880 terms): 10x that may "
     "swap"},
    {"cuda", "experts", 1e-2,
     "two chained fp16-operand GEMMs (x and the SwiGLU output as f16; MXFP4 codes exact in f16) and the "
     "SwiGLU "
     "slope between"},
    {"cuda", "add", 1e-6, "f32 addition (the residual stream is f32 on every backend)"},
    {"cuda", "o_proj_residual", 5e-3, "the linear entry, relative to the branch; the residual add stays f32"},
    {"cuda", "final_logits", 5e-3, "f32 rmsnorm, then the linear entry"},
    {"cuda", "linear.int8", 5e-3, "the linear entry: fp16 activations, exact dequantization in registers"},
    {"cuda", "linear.int4", 5e-3, "the linear entry: fp16 activations, exact dequantization in registers"},
    {"cuda", "final_logits.int8", 5e-3, "the final_logits entry"},
    {"cuda", "final_logits.int4", 5e-3, "the final_logits entry"},
    {"cuda", "qkv_rope_kvwrite", 6e-3, "f32 rmsnorm, the linear entry, f32 rope"},
    {"cuda", "qkv_rope_kvwrite.kv_f16", kF16Round + 6e-3, "the chain above, then stored as f16"},
    {"cuda", "moe_route.h", 1e-5, "the rmsnorm entry"},
    {"cuda", "sample.logprob", 1e-5, "f32 logits, an f32 max and parallel f32 sums of expf over 200019 ids"},
    {"cuda", "sample.tie_logit", 1e-5, "f32 processing of the logits, as the CPU"},
    {"cuda", "sample.tie_prob", 1e-4, "expf in a different order of operations (2 ulp), relative gap 1e-4"},
    {"cuda", "sample.tie_cdf", 1e-5, "parallel prefix sums of f32 weights: 1e-5 of the total mass"},
    {"cuda", "copy_blocks", 0.0, "a copy: every byte of every pool compared"},
    {"cuda", "swap_blocks", 0.0, "a copy: every byte of the host pool and of every device pool compared"},
};
}  // namespace

const std::vector<Tolerance>& tolerance_table() { return kTable; }

const Tolerance* find_tolerance(const std::string& backend, const std::string& key) {
    for (const auto& t : kTable)
        if (backend == t.backend && key == t.key) return &t;
    return nullptr;
}

}  // namespace volt::kernels
