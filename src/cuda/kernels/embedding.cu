// Embedding lookup (spec §3.1): out[t, :] = table[ids[t], :] widened exactly to f32. One block per token,
// threads striding over H. Reference: cpu::embedding (src/cpu/ops.cc); an id outside [0, V) is reported
// (kBadTokenId) and its row written as zeros. A vocab-sharded table (tensor parallelism: rows [id_begin,
// id_begin + rows) of a vocabulary of V) writes zeros for the ids of the other shards.
#include "cuda/cuda_check.h"
#include "cuda/device_util.cuh"
#include "cuda/pdl.cuh"

namespace volt::cuda {
namespace {

constexpr int kThreads = 256;

template <WFmt F>
__global__ void embedding_kernel(const int32_t* __restrict__ ids, const void* __restrict__ table,
                                 float* __restrict__ out, int64_t vocab, int64_t id_begin, int64_t rows,
                                 int64_t hidden, int* error) {
    pdl_wait();  // pdl.cuh: nothing of an earlier kernel is touched before it
    pdl_launch_dependents();
    const int64_t t = blockIdx.x;
    const int32_t id = ids[t];
    const bool valid = id >= 0 && id < vocab;
    if (!valid && threadIdx.x == 0) report_error(error, kBadTokenId);
    const int64_t local = static_cast<int64_t>(id) - id_begin;
    const bool ok = valid && local >= 0 && local < rows;
    float* row = out + t * hidden;
    const int64_t base = (ok ? local : 0) * hidden;
    for (int64_t i = threadIdx.x; i < hidden; i += kThreads) row[i] = ok ? load_w<F>(table, base + i) : 0.0f;
}

}  // namespace

void launch_embedding(const ops::EmbeddingArgs& a, const Launch& ctx) {
    if (a.num_tokens <= 0) return;
    VOLT_CHECK(a.num_tokens < (int64_t{1} << 31)) << a.num_tokens;
    const dim3 grid(static_cast<unsigned>(a.num_tokens));
    const int64_t rows = a.table.out, H = a.table.in;
    const int64_t V = a.vocab_size > 0 ? a.vocab_size : rows;
    VOLT_CHECK(a.id_begin >= 0 && a.id_begin + rows <= V) << a.id_begin << " + " << rows << " rows of " << V;
    switch (a.table.format) {
        case ops::Format::kBf16:
            launch_kernel(embedding_kernel<WFmt::kBf16>, grid, kThreads, 0, ctx, a.ids, a.table.w, a.out, V,
                          a.id_begin, rows, H, ctx.error);
            break;
        case ops::Format::kF16:
            launch_kernel(embedding_kernel<WFmt::kF16>, grid, kThreads, 0, ctx, a.ids, a.table.w, a.out, V,
                          a.id_begin, rows, H, ctx.error);
            break;
        case ops::Format::kF32:
            launch_kernel(embedding_kernel<WFmt::kF32>, grid, kThreads, 0, ctx, a.ids, a.table.w, a.out, V,
                          a.id_begin, rows, H, ctx.error);
            break;
        default:
            VOLT_CHECK(false) << "cuda embedding: no " << ops::format_name(a.table.format) << " tables";
    }
    VOLT_CUDA_CHECK_LAUNCH();
}

}  // namespace volt::cuda
