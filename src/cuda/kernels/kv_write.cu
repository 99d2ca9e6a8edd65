// KV write: this step's k and v rows [T, nkv * d] f32 into one layer's paged pools at slot_mapping[t]
// (f32 copied, f16 rounded to nearest even). Slots < 0 are skipped; a slot past the pool is reported
// (kBadSlot). One block per token. Reference: cpu::kv_write.
#include "cuda/cuda_check.h"
#include "cuda/device_util.cuh"

namespace volt::cuda {
namespace {

constexpr int kThreads = 256;

template <bool kF16>
__global__ void kv_write_kernel(const float* __restrict__ k, const float* __restrict__ v,
                                const int64_t* __restrict__ slots, void* __restrict__ kc,
                                void* __restrict__ vc, int64_t row, int64_t num_slots, int* error) {
    const int64_t t = blockIdx.x;
    const int64_t slot = slots[t];
    if (slot < 0) return;
    if (slot >= num_slots) {
        if (threadIdx.x == 0) report_error(error, kBadSlot);
        return;
    }
    for (int64_t i = threadIdx.x; i < row; i += kThreads) {
        const float kv = k[t * row + i], vv = v[t * row + i];
        if constexpr (kF16) {
            static_cast<uint16_t*>(kc)[slot * row + i] = __half_as_ushort(__float2half_rn(kv));
            static_cast<uint16_t*>(vc)[slot * row + i] = __half_as_ushort(__float2half_rn(vv));
        } else {
            static_cast<float*>(kc)[slot * row + i] = kv;
            static_cast<float*>(vc)[slot * row + i] = vv;
        }
    }
}

}  // namespace

void launch_kv_write(const ops::KvWriteArgs& a, const Launch& ctx) {
    if (a.num_tokens <= 0 || a.slot_mapping == nullptr) return;
    VOLT_CHECK(a.kv.format == ops::Format::kF16 || a.kv.format == ops::Format::kF32)
        << "KV cache format " << ops::format_name(a.kv.format);
    VOLT_CHECK(a.num_tokens < (int64_t{1} << 31)) << a.num_tokens;
    const int64_t row = a.num_kv_heads * a.head_dim, slots = a.kv.num_blocks * a.kv.block_size;
    const unsigned grid = static_cast<unsigned>(a.num_tokens);
    if (a.kv.format == ops::Format::kF16)
        kv_write_kernel<true><<<grid, kThreads, 0, ctx.stream>>>(a.k, a.v, a.slot_mapping, a.kv.k, a.kv.v,
                                                                 row, slots, ctx.error);
    else
        kv_write_kernel<false><<<grid, kThreads, 0, ctx.stream>>>(a.k, a.v, a.slot_mapping, a.kv.k, a.kv.v,
                                                                  row, slots, ctx.error);
    VOLT_CUDA_CHECK_LAUNCH();
}

}  // namespace volt::cuda
