// The fast CPU experts op for MXFP4 weights (issue 22, CPU expert offload): the math of the reference
// cpu::experts (spec §3.6: interleaved gate_up + bias, clamped SwiGLU, down + bias, routing-weighted sum
// in rank order, added to the f32 residual) with E2M1 decoded in registers (a 16-entry f32 table scaled by
// the block's E8M0 multiplier, looked up with vpermps), the tokens that chose the same expert batched so
// each expert row is streamed once per call, and the work split over the CPU thread pool by (expert, tile
// of output rows). AVX2+FMA and AVX-512 variants (per-function target attributes) chosen at run time;
// without AVX2 (or for weights that are not MXFP4) it runs the scalar reference. Batch invariant: each
// output row of a token is one fixed-order sum of that token's data, whatever the batch, the other
// tokens' experts or the thread count. Tests: tests/unit/cpu/experts_fast_test.cc; benchmark:
// bench/cpu_experts_bench.cc (docs/performance.md).
#pragma once

#include <cstdint>

#include "ops/ops.h"

namespace volt::cpu {

// Instruction sets of the fast experts kernel, in increasing order.
enum class Isa { kScalar, kAvx2, kAvx512 };

const char* isa_name(Isa isa);  // "scalar", "avx2", "avx512"
// The best variant this CPU (and OS) runs: kAvx512 with AVX-512 F/BW/VL, kAvx2 with AVX2 and FMA, else
// kScalar (__builtin_cpu_supports, checked once).
Isa best_isa();
// Whether this CPU runs `isa`.
bool isa_supported(Isa isa);

// out[t] += sum_j w[t, j] * (W2[e] a + b2[e]), a = SwiGLU(W1[e] x[t] + b1[e]), e = expert_ids[t, j]: the
// contract of ops::ExpertsArgs (every pointer in host memory). MXFP4 experts with `in` a multiple of 32
// run the `isa` variant (precondition: isa_supported(isa)); anything else, or kScalar, runs cpu::experts.
// Against cpu::experts the result differs only by f32 summation order: each dot product accumulates
// whole rows in SIMD lanes (16 lanes for AVX-512, 8 for AVX2) and reduces them at the end, where the
// reference sums each block of 32 first and scales it; the test states the tolerance.
void experts_fast(const ops::ExpertsArgs& a, Isa isa);
inline void experts_fast(const ops::ExpertsArgs& a) { experts_fast(a, best_isa()); }

// Bytes of expert weights one experts_fast call reads: for each distinct expert the call routes to,
// its gate_up and down rows (E2M1 codes, E8M0 scales, bf16/f16/f32 biases). What the benchmark divides by
// time to get GB/s streamed.
int64_t expert_bytes_read(const ops::ExpertsArgs& a);

// The host's read bandwidth in GB/s measured now: every CPU pool thread sums 64-byte lines of its part
// of a fresh `bytes` buffer (faulted in first), best of `runs`. The ceiling of the offloaded experts.
double measure_host_read_gbps(int64_t bytes, int runs = 5);

}  // namespace volt::cpu
