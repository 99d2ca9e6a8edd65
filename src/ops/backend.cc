// The coarse ops' defaults, built from the fine ops in spec order: what a backend without fused kernels
// (the CPU) runs, and the reference the fused GPU kernels are checked against by the op harness.
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "ops/ops.h"

namespace volt::ops {

const char* format_name(Format f) {
    switch (f) {
        case Format::kF32:
            return "f32";
        case Format::kF16:
            return "f16";
        case Format::kBf16:
            return "bf16";
        case Format::kMxfp4:
            return "mxfp4";
        case Format::kInt8:
            return "int8";
        case Format::kInt4:
            return "int4";
    }
    return "?";
}

Buffer::~Buffer() {
    if (backend_ != nullptr && data_ != nullptr) backend_->release(data_, bytes_);
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
    if (this != &o) {
        if (backend_ != nullptr && data_ != nullptr) backend_->release(data_, bytes_);
        backend_ = o.backend_;
        data_ = o.data_;
        bytes_ = o.bytes_;
        o.backend_ = nullptr;
        o.data_ = nullptr;
        o.bytes_ = 0;
    }
    return *this;
}

void Backend::copy_2d(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t width,
                      int64_t rows) {
    for (int64_t r = 0; r < rows; ++r)
        copy(static_cast<uint8_t*>(dst) + r * dst_pitch, static_cast<const uint8_t*>(src) + r * src_pitch,
             width);
}

void Backend::qkv_rope_kvwrite(const QkvRopeKvWriteArgs& a) {
    const int64_t T = a.num_tokens;
    rmsnorm({.x = a.x, .w = a.norm, .y = a.h, .num_rows = T, .hidden = a.hidden, .eps = a.eps});
    if (a.w.fused()) {
        VOLT_CHECK(false) << name() << ": the default qkv_rope_kvwrite needs unfused q/k/v weights";
    }
    linear({.x = a.h, .weight = a.w.q, .y = a.q, .num_tokens = T});
    linear({.x = a.h, .weight = a.w.k, .y = a.k, .num_tokens = T});
    linear({.x = a.h, .weight = a.w.v, .y = a.v, .num_tokens = T});
    rope({a.q, a.k, a.positions, a.inv_freq, a.mscale, T, a.num_heads, a.num_kv_heads, a.head_dim});
    kv_write({a.k, a.v, a.slot_mapping, a.kv, T, a.num_kv_heads, a.head_dim});
}

void Backend::o_proj_residual(const OProjResidualArgs& a) {
    linear({.x = a.attn, .weight = a.o, .y = a.out, .num_tokens = a.num_tokens});
    add({a.out, a.x, a.num_tokens * a.o.out});
}

void Backend::moe_route(const MoeRouteArgs& a) {
    rmsnorm({.x = a.x, .w = a.norm, .y = a.h, .num_rows = a.num_tokens, .hidden = a.hidden, .eps = a.eps});
    router({a.h, a.router, a.expert_ids, a.expert_weights, a.num_tokens, a.top_k});
}

void Backend::final_logits(const FinalLogitsArgs& a) {
    rmsnorm({.x = a.x,
             .w = a.norm,
             .y = a.h,
             .num_rows = a.num_rows,
             .hidden = a.hidden,
             .eps = a.eps,
             .rows = a.rows});
    linear({.x = a.h, .weight = a.lm_head, .y = a.logits, .num_tokens = a.num_rows});
}

void Backend::copy_blocks(const CopyBlocksArgs& a) {
    const int64_t code_bytes = a.block_bytes - a.scale_block_bytes;
    for (int64_t l = 0; l < a.num_layers; ++l) {
        const KvLayer& kv = a.layers[l];
        const std::pair<void*, int64_t> parts[] = {{kv.k, code_bytes},
                                                   {kv.v, code_bytes},
                                                   {kv.k_scales, a.scale_block_bytes},
                                                   {kv.v_scales, a.scale_block_bytes}};
        for (const auto& [pool, bytes] : parts) {
            if (bytes == 0) continue;
            auto* base = static_cast<uint8_t*>(pool);
            for (int64_t i = 0; i < a.num_copies; ++i)
                copy(base + a.dst[i] * bytes, base + a.src[i] * bytes, bytes);
        }
    }
}

void Backend::move_ids(const MoveIdsArgs& a) {
    if (a.num_moves <= 0) return;
    std::vector<IdMove> moves(static_cast<size_t>(a.num_moves));
    download(moves.data(), a.moves, a.num_moves * static_cast<int64_t>(sizeof(IdMove)));
    for (const IdMove& m : moves) {
        int32_t id = 0;
        download(&id, m.src, sizeof id);
        if (a.negative_to_zero && id < 0) id = 0;
        upload(m.dst, &id, sizeof id);
    }
}

void Backend::scatter_ids(const ScatterIdsArgs& a) {
    const int64_t n = a.num_fills + a.num_writes;
    if (n <= 0) return;
    std::vector<int32_t> pairs(static_cast<size_t>(2 * n));
    download(pairs.data(), a.pairs, 2 * n * static_cast<int64_t>(sizeof(int32_t)));
    std::vector<int32_t> minus;
    for (int64_t i = 0; i < a.num_fills; ++i) {
        const int32_t start = pairs[2 * i], count = pairs[2 * i + 1];
        if (count <= 0) continue;
        minus.assign(static_cast<size_t>(count), -1);
        upload(a.table + start, minus.data(), count * static_cast<int64_t>(sizeof(int32_t)));
    }
    for (int64_t i = a.num_fills; i < n; ++i)
        upload(a.table + pairs[2 * i], &pairs[2 * i + 1], sizeof(int32_t));
}

Result<Buffer> Backend::alloc_host(int64_t bytes) {
    return unimplemented(std::string("the ") + name() + " backend has no host memory for " +
                         std::to_string(bytes) + " bytes of swapped KV blocks");
}

void Backend::swap_blocks(const SwapBlocksArgs& a) {
    auto* host = static_cast<uint8_t*>(a.host_pool);
    const int64_t host_block = a.num_layers * 2 * a.block_bytes;
    const int64_t code_bytes = a.block_bytes - a.scale_block_bytes;
    for (int64_t i = 0; i < a.num_blocks; ++i) {
        for (int64_t l = 0; l < a.num_layers; ++l) {
            for (int kv = 0; kv < 2; ++kv) {
                const KvLayer& layer = a.layers[l];
                uint8_t* h = host + a.host_blocks[i] * host_block + (l * 2 + kv) * a.block_bytes;
                // The codes (or f32 / f16 elements), then the scales (kInt8).
                const std::pair<void*, int64_t> parts[] = {
                    {kv == 0 ? layer.k : layer.v, code_bytes},
                    {kv == 0 ? layer.k_scales : layer.v_scales, a.scale_block_bytes}};
                for (const auto& [pool, bytes] : parts) {
                    if (bytes == 0) continue;
                    uint8_t* dev = static_cast<uint8_t*>(pool) + a.device_blocks[i] * bytes;
                    if (a.to_host) {
                        download(h, dev, bytes);
                    } else {
                        upload(dev, h, bytes);
                    }
                    h += bytes;
                }
            }
        }
    }
}

}  // namespace volt::ops
