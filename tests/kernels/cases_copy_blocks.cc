// Cases of copy_blocks (KV copy-on-write): pools of random bytes, random distinct destination blocks
// copied from random sources; afterwards every byte of every pool of every layer is compared with the
// expected pools (the copied blocks changed, everything else untouched). swap_blocks (KV swap to host
// memory): random device blocks swapped out to random host blocks of an alloc_host pool (every host block
// compared with its layout [layer, K/V, block bytes], untouched ones still zero), then the device pools
// overwritten with other random bytes and the host blocks swapped in to other random device blocks
// (every byte of every pool compared: swapped-in blocks hold what went out, the rest untouched).
#include <cstring>
#include <string>

#include "tests/kernels/harness.h"

namespace volt::kernels {

namespace {

void copy_blocks_case(Case& c, int64_t layers, int64_t nb, int64_t bs, int64_t nkv, int64_t d, ops::Format f,
                      int64_t copies) {
    Rng& rng = c.rng();
    const int64_t block_bytes = bs * nkv * d * format_bytes(f), pool_bytes = nb * block_bytes;
    // Destinations distinct and never a source (a copy never reads a block written by the same call).
    const std::vector<int32_t> perm = rng.distinct(nb, nb);
    std::vector<int32_t> dst(perm.begin(), perm.begin() + copies), src;
    for (int64_t i = 0; i < copies; ++i) src.push_back(perm[copies + rng.below(nb - copies)]);
    std::vector<std::vector<uint8_t>> host(2 * layers, std::vector<uint8_t>(pool_bytes));
    std::vector<ops::KvLayer> kv;
    std::vector<void*> pools;
    for (auto& p : host) {
        rng.bytes(p.data(), pool_bytes);
        pools.push_back(c.upload_bytes(p.data(), pool_bytes));
    }
    for (int64_t l = 0; l < layers; ++l) kv.push_back({f, pools[2 * l], pools[2 * l + 1], nb, bs});
    const ops::CopyBlocksArgs args{kv.data(), layers, src.data(), dst.data(), copies, block_bytes};
    c.backend().copy_blocks(args);
    c.backend().synchronize();
    for (size_t p = 0; p < host.size(); ++p) {
        std::vector<uint8_t> want = host[p];
        for (int64_t i = 0; i < copies; ++i)
            std::memcpy(want.data() + dst[i] * block_bytes, host[p].data() + src[i] * block_bytes,
                        block_bytes);
        c.compare_bytes((p % 2 == 0 ? "k" : "v") + std::to_string(p / 2),
                        c.download(static_cast<uint8_t*>(pools[p]), pool_bytes), want);
    }
    c.bench([&] { c.backend().copy_blocks(args); }, 2 * 2 * layers * copies * block_bytes);
}

void swap_blocks_case(Case& c, int64_t layers, int64_t nb, int64_t nh, int64_t bs, int64_t nkv, int64_t d,
                      ops::Format f, int64_t swaps) {
    Rng& rng = c.rng();
    const int64_t block_bytes = bs * nkv * d * format_bytes(f), pool_bytes = nb * block_bytes;
    const int64_t host_block = layers * 2 * block_bytes;
    auto host_pool = c.backend().alloc_host(nh * host_block);
    if (!host_pool.is_ok()) {
        c.fail(host_pool.status().to_string());
        return;
    }
    auto* hp = static_cast<uint8_t*>(host_pool->data());
    const std::vector<int32_t> out_dev = rng.distinct(swaps, nb), host_ids = rng.distinct(swaps, nh);
    const std::vector<int32_t> in_dev = rng.distinct(swaps, nb);  // independent of out_dev
    std::vector<std::vector<uint8_t>> before(2 * layers, std::vector<uint8_t>(pool_bytes)), after = before;
    std::vector<ops::KvLayer> kv;
    std::vector<void*> pools;
    for (auto& p : before) {
        rng.bytes(p.data(), pool_bytes);
        pools.push_back(c.upload_bytes(p.data(), pool_bytes));
    }
    for (int64_t l = 0; l < layers; ++l) kv.push_back({f, pools[2 * l], pools[2 * l + 1], nb, bs});
    c.backend().swap_blocks(
        {kv.data(), layers, hp, out_dev.data(), host_ids.data(), swaps, block_bytes, true});
    c.backend().synchronize();
    std::vector<uint8_t> want_host(nh * host_block, 0);  // alloc_host zeroes
    for (int64_t i = 0; i < swaps; ++i)
        for (int64_t p = 0; p < 2 * layers; ++p)
            std::memcpy(want_host.data() + host_ids[i] * host_block + p * block_bytes,
                        before[p].data() + out_dev[i] * block_bytes, block_bytes);
    c.compare_bytes("host", std::vector<uint8_t>(hp, hp + nh * host_block), want_host);
    for (size_t p = 0; p < after.size(); ++p) {
        rng.bytes(after[p].data(), pool_bytes);
        c.backend().upload(pools[p], after[p].data(), pool_bytes);
    }
    c.backend().swap_blocks(
        {kv.data(), layers, hp, in_dev.data(), host_ids.data(), swaps, block_bytes, false});
    c.backend().synchronize();
    for (size_t p = 0; p < after.size(); ++p) {
        std::vector<uint8_t> want = after[p];
        for (int64_t i = 0; i < swaps; ++i)
            std::memcpy(want.data() + in_dev[i] * block_bytes, before[p].data() + out_dev[i] * block_bytes,
                        block_bytes);
        c.compare_bytes((p % 2 == 0 ? "k" : "v") + std::to_string(p / 2),
                        c.download(static_cast<uint8_t*>(pools[p]), pool_bytes), want);
    }
    c.bench(
        [&] {
            c.backend().swap_blocks(
                {kv.data(), layers, hp, out_dev.data(), host_ids.data(), swaps, block_bytes, true});
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
