// Router top-k (spec §3.6) over logits [T, E] (already Wr x + br, computed by the linear kernel with
// f32 operands: routing is discontinuous, so it never sees rounded activations): the k largest in
// order, ties to the lower index (the CPU's stable sort), then softmax over the k in f32 with the
// top-1 logit subtracted, summed in rank order. One warp per token: pass j picks the best expert that
// ranks after pass j-1's pick. Reference: cpu::router. E <= 256 and k <= 32 (gpt-oss: 32 or 128 experts,
// k = 4) keep the row in registers (device_util.cuh warp_topk_softmax); larger ones take the loop over
// global memory. Both give the same bits.
#include "cuda/cuda_check.h"
#include "cuda/device_util.cuh"
#include "cuda/pdl.cuh"

namespace volt::cuda {
namespace {

__global__ void router_topk_kernel(const float* __restrict__ logits, int64_t num_experts, int64_t top_k,
                                   int32_t* __restrict__ ids, float* __restrict__ weights) {
    pdl_wait();  // pdl.cuh: nothing of an earlier kernel is touched before it
    pdl_launch_dependents();
    const int lane = threadIdx.x;
    const int64_t t = blockIdx.x;
    const float* row = logits + t * num_experts;
    int32_t* out_ids = ids + t * top_k;
    float* out_w = weights + t * top_k;
    Ranked prev{0.0f, -1};
    for (int64_t j = 0; j < top_k; ++j) {
        Ranked best{0.0f, -1};
        for (int64_t e = lane; e < num_experts; e += 32) {
            const Ranked c{row[e], static_cast<int32_t>(e)};
            if ((prev.id < 0 || ranks_before(prev, c)) && ranks_before(c, best)) best = c;
        }
        best = warp_best(best);
        if (lane == 0) {
            out_ids[j] = best.id;
            out_w[j] = best.value;  // the logit for now
        }
        prev = best;
    }
    if (lane == 0) {
        const float m = out_w[0];
        float sum = 0.0f;
        for (int64_t j = 0; j < top_k; ++j) {
            out_w[j] = expf(out_w[j] - m);
            sum += out_w[j];
        }
        for (int64_t j = 0; j < top_k; ++j) out_w[j] /= sum;
    }
}

// The same picks and weights from registers (device_util.cuh warp_topk_softmax): E <= 32 kPerLane, k <= 32.
template <int kPerLane>
__global__ void router_topk_reg_kernel(const float* __restrict__ logits, int64_t num_experts, int64_t top_k,
                                       int32_t* __restrict__ ids, float* __restrict__ weights) {
    pdl_wait();  // pdl.cuh: nothing of an earlier kernel is touched before it
    pdl_launch_dependents();
    const int64_t t = blockIdx.x;
    warp_topk_softmax<kPerLane>(logits + t * num_experts, num_experts, top_k, ids + t * top_k,
                                weights + t * top_k);
}

}  // namespace

void launch_router_topk(const float* logits, int64_t num_tokens, int64_t num_experts, int64_t top_k,
                        int32_t* expert_ids, float* expert_weights, const Launch& ctx) {
    if (num_tokens <= 0) return;
    VOLT_CHECK(top_k >= 1 && top_k <= num_experts) << "router: top-" << top_k << " of " << num_experts;
    VOLT_CHECK(num_tokens < (int64_t{1} << 31) && num_experts < (int64_t{1} << 31));
    const unsigned grid = static_cast<unsigned>(num_tokens);
    if (top_k > 32 || num_experts > 256) {
        launch_kernel(router_topk_kernel, grid, 32, 0, ctx, logits, num_experts, top_k, expert_ids,
                      expert_weights);
    } else if (num_experts <= 32) {
        launch_kernel(router_topk_reg_kernel<1>, grid, 32, 0, ctx, logits, num_experts, top_k, expert_ids,
                      expert_weights);
    } else if (num_experts <= 64) {
        launch_kernel(router_topk_reg_kernel<2>, grid, 32, 0, ctx, logits, num_experts, top_k, expert_ids,
                      expert_weights);
    } else if (num_experts <= 128) {
        launch_kernel(router_topk_reg_kernel<4>, grid, 32, 0, ctx, logits, num_experts, top_k, expert_ids,
                      expert_weights);
    } else {
        launch_kernel(router_topk_reg_kernel<8>, grid, 32, 0, ctx, logits, num_experts, top_k, expert_ids,
                      expert_weights);
    }
    VOLT_CUDA_CHECK_LAUNCH();
}

}  // namespace volt::cuda
