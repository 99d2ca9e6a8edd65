// KV write: this step's k and v rows [T, nkv * d] f32 into one layer's paged pools at slot_mapping[t]
// (f32 copied, f16 rounded to nearest even, int8 quantized per (slot, kv head) exactly as ops/kv_int8.h:
// s = max|v| / 127 and q = clamp(rint(v / s), -127, 127) with IEEE divisions (__fdiv_rn), ties to even;
// all-zero: s = 0, q = 0; NaN or inf anywhere in the head vector: s = NaN, q = 0). Slots < 0 are skipped;
// a slot past the pool is reported (kBadSlot). One block per token (int8: a warp per (K or V, kv head)).
// Reference: cpu::kv_write; checked by volt_op_test kv_write / qkv_rope_kvwrite --kv int8.
#include "cuda/cuda_check.h"
#include "cuda/device_util.cuh"
#include "cuda/pdl.cuh"

namespace volt::cuda {
namespace {

constexpr int kThreads = 256;

template <bool kF16>
__global__ void kv_write_kernel(const float* __restrict__ k, const float* __restrict__ v,
                                const int64_t* __restrict__ slots, void* __restrict__ kc,
                                void* __restrict__ vc, int64_t row, int64_t num_slots, int* error) {
    pdl_wait();  // pdl.cuh: nothing of an earlier kernel is touched before it
    pdl_launch_dependents();
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

// int8: warp w of the block takes the head vectors w, w + 8, ... of the token's 2 nkv (K heads, then V).
__global__ void __launch_bounds__(kThreads)
    kv_write_int8_kernel(const float* __restrict__ k, const float* __restrict__ v,
                         const int64_t* __restrict__ slots, int8_t* __restrict__ kc, int8_t* __restrict__ vc,
                         float* __restrict__ ks, float* __restrict__ vs, int64_t nkv, int64_t d,
                         int64_t num_slots, int* error) {
    pdl_wait();  // pdl.cuh: nothing of an earlier kernel is touched before it
    pdl_launch_dependents();
    const int64_t t = blockIdx.x;
    const int64_t slot = slots[t];
    if (slot < 0) return;
    if (slot >= num_slots) {
        if (threadIdx.x == 0) report_error(error, kBadSlot);
        return;
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int64_t item = warp; item < 2 * nkv; item += kThreads / 32) {
        const bool is_v = item >= nkv;
        const int64_t g = is_v ? item - nkv : item;
        const float* src = (is_v ? v : k) + (t * nkv + g) * d;
        int8_t* dst = (is_v ? vc : kc) + (slot * nkv + g) * d;
        float amax = 0.0f;
        bool finite = true;
        for (int64_t i = lane; i < d; i += 32) {
            const float x = src[i];
            finite = finite && isfinite(x);
            amax = fmaxf(amax, fabsf(x));
        }
        amax = warp_max(amax);  // a maximum: exact in any order
        finite = __all_sync(kFullMask, finite);
        const float s = finite ? __fdiv_rn(amax, 127.0f) : __int_as_float(0x7fc00000);
        if (lane == 0) (is_v ? vs : ks)[slot * nkv + g] = s;
        const bool zero = !finite || s == 0.0f;
        for (int64_t i = lane; i < d; i += 32) {
            const float r = zero ? 0.0f : rintf(__fdiv_rn(src[i], s));  // rint: ties to even
            dst[i] = static_cast<int8_t>(fminf(127.0f, fmaxf(-127.0f, r)));
        }
    }
}

}  // namespace

void launch_kv_write(const ops::KvWriteArgs& a, const Launch& ctx) {
    if (a.num_tokens <= 0 || a.slot_mapping == nullptr) return;
    VOLT_CHECK(a.kv.format == ops::Format::kF16 || a.kv.format == ops::Format::kF32 ||
               a.kv.format == ops::Format::kInt8)
        << "KV cache format " << ops::format_name(a.kv.format);
    VOLT_CHECK(a.num_tokens < (int64_t{1} << 31)) << a.num_tokens;
    const int64_t row = a.num_kv_heads * a.head_dim, slots = a.kv.num_blocks * a.kv.block_size;
    const unsigned grid = static_cast<unsigned>(a.num_tokens);
    if (a.kv.format == ops::Format::kInt8) {
        VOLT_CHECK(a.kv.k_scales != nullptr && a.kv.v_scales != nullptr) << "int8 KV cache without scales";
        launch_kernel(kv_write_int8_kernel, grid, kThreads, 0, ctx, a.k, a.v, a.slot_mapping,
                      static_cast<int8_t*>(a.kv.k), static_cast<int8_t*>(a.kv.v), a.kv.k_scales,
                      a.kv.v_scales, a.num_kv_heads, a.head_dim, slots, ctx.error);
    } else if (a.kv.format == ops::Format::kF16)
        launch_kernel(kv_write_kernel<true>, grid, kThreads, 0, ctx, a.k, a.v, a.slot_mapping, a.kv.k, a.kv.v,
                      row, slots, ctx.error);
    else
        launch_kernel(kv_write_kernel<false>, grid, kThreads, 0, ctx, a.k, a.v, a.slot_mapping, a.kv.k,
                      a.kv.v, row, slots, ctx.error);
    VOLT_CUDA_CHECK_LAUNCH();
}

}  // namespace volt::cuda
