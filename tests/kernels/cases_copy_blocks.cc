// Cases of copy_blocks (KV copy-on-write): pools of random bytes, random distinct destination blocks
// copied from random sources; afterwards every byte of every pool of every layer is compared with the
// expected pools (the copied blocks changed, everything else untouched). swap_blocks (KV swap to host
// memory): random device blocks swapped out to random host blocks of an alloc_host pool (every host block
// compared with its layout [layer, K/V, block bytes], untouched ones still zero), then the device pools
// overwritten with other random bytes and the host blocks swapped in to other random device blocks
// (every byte of every pool compared: swapped-in blocks hold what went out, the rest untouched). int8 KV:
// each layer has four pools, codes K and V and their f32 scales, all copied and swapped (a host block
// holds per pool its codes, then its scales: ops::SwapBlocksArgs).
#include <cstring>
#include <string>

#include "tests/kernels/harness.h"

namespace volt::kernels {

namespace {

// Pools of one layer: K, V, and for int8 the scales of K and V; bytes of one block of each.
struct LayerPools {
    std::vector<int64_t> block_bytes;  // [2 or 4]
    int64_t code_bytes = 0, scale_bytes = 0;
};
LayerPools layer_pools(int64_t bs, int64_t nkv, int64_t d, ops::Format f) {
    LayerPools lp;
    lp.code_bytes = bs * nkv * d * format_bytes(f);
    lp.scale_bytes = f == ops::Format::kInt8 ? bs * nkv * 4 : 0;
    lp.block_bytes = {lp.code_bytes, lp.code_bytes};
    if (lp.scale_bytes > 0) lp.block_bytes.insert(lp.block_bytes.end(), {lp.scale_bytes, lp.scale_bytes});
    return lp;
}
const char* pool_name(size_t i) {
    static const char* names[] = {"k", "v", "k_scales", "v_scales"};
    return names[i];
}
ops::KvLayer kv_layer(ops::Format f, void* const* p, size_t n, int64_t nb, int64_t bs) {
    ops::KvLayer l{f, p[0], p[1], nb, bs};
    if (n == 4) {
        l.k_scales = static_cast<float*>(p[2]);
        l.v_scales = static_cast<float*>(p[3]);
    }
    return l;
}

void copy_blocks_case(Case& c, int64_t layers, int64_t nb, int64_t bs, int64_t nkv, int64_t d, ops::Format f,
                      int64_t copies) {
    if (!c.backend().supports_kv_format(f)) {
        c.skip(std::string("the backend has no ") + format_str(f) + " KV cache");
        return;
    }
    Rng& rng = c.rng();
    const LayerPools lp = layer_pools(bs, nkv, d, f);
    const size_t per = lp.block_bytes.size();
    const int64_t block_bytes = lp.code_bytes + lp.scale_bytes;
    // Destinations distinct and never a source (a copy never reads a block written by the same call).
    const std::vector<int32_t> perm = rng.distinct(nb, nb);
    std::vector<int32_t> dst(perm.begin(), perm.begin() + copies), src;
    for (int64_t i = 0; i < copies; ++i) src.push_back(perm[copies + rng.below(nb - copies)]);
    std::vector<std::vector<uint8_t>> host(per * layers);
    std::vector<ops::KvLayer> kv;
    std::vector<void*> pools;
    for (size_t p = 0; p < host.size(); ++p) {
        host[p].resize(nb * lp.block_bytes[p % per]);
        rng.bytes(host[p].data(), static_cast<int64_t>(host[p].size()));
        pools.push_back(c.upload_bytes(host[p].data(), static_cast<int64_t>(host[p].size())));
    }
    for (int64_t l = 0; l < layers; ++l) kv.push_back(kv_layer(f, pools.data() + per * l, per, nb, bs));
    const ops::CopyBlocksArgs args{kv.data(), layers,      src.data(),    dst.data(),
                                   copies,    block_bytes, lp.scale_bytes};
    c.backend().copy_blocks(args);
    c.backend().synchronize();
    for (size_t p = 0; p < host.size(); ++p) {
        const int64_t pb = lp.block_bytes[p % per];
        std::vector<uint8_t> want = host[p];
        for (int64_t i = 0; i < copies; ++i)
            std::memcpy(want.data() + dst[i] * pb, host[p].data() + src[i] * pb, pb);
        c.compare_bytes(pool_name(p % per) + std::to_string(p / per),
                        c.download(static_cast<uint8_t*>(pools[p]), static_cast<int64_t>(want.size())), want);
    }
    c.bench([&] { c.backend().copy_blocks(args); }, 2 * 2 * layers * copies * block_bytes);
}

void swap_blocks_case(Case& c, int64_t layers, int64_t nb, int64_t nh, int64_t bs, int64_t nkv, int64_t d,
                      ops::Format f, int64_t swaps) {
    if (!c.backend().supports_kv_format(f)) {
        c.skip(std::string("the backend has no ") + format_str(f) + " KV cache");
        return;
    }
    Rng& rng = c.rng();
    const LayerPools lp = layer_pools(bs, nkv, d, f);
    const size_t per = lp.block_bytes.size();
    const int64_t block_bytes = lp.code_bytes + lp.scale_bytes;
    const int64_t host_block = layers * 2 * block_bytes;
    // Offset of pool p's part within a host block: [layer, K then V, codes then scales].
    auto host_off = [&](size_t p) {
        const int64_t l = static_cast<int64_t>(p / per), kind = static_cast<int64_t>(p % per);
        return (l * 2 + kind % 2) * block_bytes + (kind >= 2 ? lp.code_bytes : 0);
    };
    auto host_pool = c.backend().alloc_host(nh * host_block);
    if (!host_pool.is_ok()) {
        c.fail(host_pool.status().to_string());
        return;
    }
    auto* hp = static_cast<uint8_t*>(host_pool->data());
    const std::vector<int32_t> out_dev = rng.distinct(swaps, nb), host_ids = rng.distinct(swaps, nh);
    const std::vector<int32_t> in_dev = rng.distinct(swaps, nb);  // independent of out_dev
    std::vector<std::vector<uint8_t>> before(per * layers), after;
    std::vector<ops::KvLayer> kv;
    std::vector<void*> pools;
    for (size_t p = 0; p < before.size(); ++p) {
        before[p].resize(nb * lp.block_bytes[p % per]);
        rng.bytes(before[p].data(), static_cast<int64_t>(before[p].size()));
        pools.push_back(c.upload_bytes(before[p].data(), static_cast<int64_t>(before[p].size())));
    }
    after = before;
    for (int64_t l = 0; l < layers; ++l) kv.push_back(kv_layer(f, pools.data() + per * l, per, nb, bs));
    c.backend().swap_blocks(
        {kv.data(), layers, hp, out_dev.data(), host_ids.data(), swaps, block_bytes, true, lp.scale_bytes});
    c.backend().synchronize();
    std::vector<uint8_t> want_host(nh * host_block, 0);  // alloc_host zeroes
    for (int64_t i = 0; i < swaps; ++i)
        for (size_t p = 0; p < before.size(); ++p) {
            const int64_t pb = lp.block_bytes[p % per];
            std::memcpy(want_host.data() + host_ids[i] * host_block + host_off(p),
                        before[p].data() + out_dev[i] * pb, pb);
        }
    c.compare_bytes("host", std::vector<uint8_t>(hp, hp + nh * host_block), want_host);
    for (size_t p = 0; p < after.size(); ++p) {
        rng.bytes(after[p].data(), static_cast<int64_t>(after[p].size()));
        c.backend().upload(pools[p], after[p].data(), static_cast<int64_t>(after[p].size()));
    }
    c.backend().swap_blocks(
        {kv.data(), layers, hp, in_dev.data(), host_ids.data(), swaps, block_bytes, false, lp.scale_bytes});
    c.backend().synchronize();
    for (size_t p = 0; p < after.size(); ++p) {
        const int64_t pb = lp.block_bytes[p % per];
        std::vector<uint8_t> want = after[p];
        for (int64_t i = 0; i < swaps; ++i)
            std::memcpy(want.data() + in_dev[i] * pb, before[p].data() + out_dev[i] * pb, pb);
        c.compare_bytes(pool_name(p % per) + std::to_string(p / per),
                        c.download(static_cast<uint8_t*>(pools[p]), static_cast<int64_t>(want.size())), want);
    }
    c.bench(
        [&] {
            c.backend().swap_blocks({kv.data(), layers, hp, out_dev.data(), host_ids.data(), swaps,
                                     block_bytes, true, lp.scale_bytes});
        },
        2 * layers * swaps * block_bytes);
}

}  // namespace

void add_copy_blocks_cases(const Options& opt, std::vector<CaseDef>* out) {
    struct S {
        int64_t layers, nb, bs, nkv, d, copies;
        ShapeSet set;
    };
    for (ops::Format f : opt.kv_formats) {
        for (const S& s : {S{1, 8, 16, 8, 64, 3, ShapeSet::kEdge}, S{3, 10, 24, 2, 16, 1, ShapeSet::kEdge},
                           S{2, 40, 8, 1, 128, 17, ShapeSet::kEdge}, S{2, 6, 16, 4, 32, 0, ShapeSet::kEdge},
                           S{24, 64, 16, 8, 64, 8, ShapeSet::kModel}}) {
            add_case(out, "copy_blocks",
                     shape_str({{"layers", std::to_string(s.layers)},
                                {"blocks", std::to_string(s.nb)},
                                {"bs", std::to_string(s.bs)},
                                {"nkv", std::to_string(s.nkv)},
                                {"d", std::to_string(s.d)},
                                {"copies", std::to_string(s.copies)},
                                {"kv", format_str(f)}}),
                     s.set,
                     [s, f](Case& c) { copy_blocks_case(c, s.layers, s.nb, s.bs, s.nkv, s.d, f, s.copies); });
        }
        struct W {
            int64_t layers, nb, nh, bs, nkv, d, swaps;
            ShapeSet set;
        };
        for (const W& s :
             {W{1, 8, 4, 16, 8, 64, 3, ShapeSet::kEdge}, W{3, 10, 12, 24, 2, 16, 10, ShapeSet::kEdge},
              W{2, 6, 6, 16, 4, 32, 0, ShapeSet::kEdge}, W{18, 64, 64, 16, 8, 64, 40, ShapeSet::kModel}}) {
            add_case(out, "swap_blocks",
                     shape_str({{"layers", std::to_string(s.layers)},
                                {"blocks", std::to_string(s.nb)},
                                {"host_blocks", std::to_string(s.nh)},
                                {"bs", std::to_string(s.bs)},
                                {"nkv", std::to_string(s.nkv)},
                                {"d", std::to_string(s.d)},
                                {"swaps", std::to_string(s.swaps)},
                                {"kv", format_str(f)}}),
                     s.set, [s, f](Case& c) {
                         swap_blocks_case(c, s.layers, s.nb, s.nh, s.bs, s.nkv, s.d, f, s.swaps);
                     });
        }
    }
}

}  // namespace volt::kernels
