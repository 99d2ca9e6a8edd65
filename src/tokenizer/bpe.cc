// BPE merge loops (linear scan for short pieces, heap for long ones) and the open-addressing tables of
// tokens and merges; see bpe.h.
#include "tokenizer/bpe.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <queue>

namespace volt::tokenizer {

namespace {

// Pieces up to this many bytes take the linear scan; it beats the heap on short words.
constexpr size_t kLinearMax = 48;

uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// A fast non-cryptographic hash of a short byte string (tokens average ~6 bytes): 8 bytes per step,
// splitmix64-style mixing.
uint64_t hash_bytes(std::string_view s) {
    const char* p = s.data();
    size_t n = s.size();
    uint64_t h = 0x9E3779B97F4A7C15ull * (n + 1), w;
    while (n >= 8) {
        std::memcpy(&w, p, 8);
        h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
        p += 8;
        n -= 8;
    }
    if (n) {
        w = 0;
        std::memcpy(&w, p, n);
        h = (h ^ w) * 0x94D049BB133111EBull;
    }
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 32);
}

}  // namespace

Result<std::unique_ptr<BpeModel>> BpeModel::create(std::vector<std::string> id_bytes,
                                                   const std::vector<std::pair<int32_t, int32_t>>& merges,
                                                   bool ignore_merges, const std::string& source) {
    std::unique_ptr<BpeModel> m(new BpeModel());
    m->ignore_merges_ = ignore_merges;
    size_t n = id_bytes.size();
    m->offset_.resize(n + 1);
    m->present_.assign(n, 0);
    size_t total = 0;
    for (const auto& b : id_bytes) total += b.size();
    m->blob_.reserve(total);
    size_t slots = 1;
    while (slots < 2 * n + 16) slots <<= 1;
    m->vocab_slots_.assign(slots, -1);
    m->vocab_mask_ = slots - 1;
    std::fill(std::begin(m->byte_id_), std::end(m->byte_id_), -1);
    for (size_t id = 0; id < n; ++id) {
        m->offset_[id] = static_cast<uint32_t>(m->blob_.size());
        if (id_bytes[id].empty()) continue;
        m->blob_ += id_bytes[id];
        m->present_[id] = 1;
        std::string_view key = id_bytes[id];
        for (uint64_t h = hash_bytes(key) & m->vocab_mask_;; h = (h + 1) & m->vocab_mask_) {
            int32_t other = m->vocab_slots_[h];
            if (other < 0) {
                m->vocab_slots_[h] = static_cast<int32_t>(id);
                break;
            }
            if (id_bytes[other] == key) {
                return data_loss(source + ": vocabulary ids " + std::to_string(other) + " and " +
                                 std::to_string(id) + " stand for the same bytes");
            }
        }
        if (key.size() == 1) m->byte_id_[static_cast<uint8_t>(key[0])] = static_cast<int32_t>(id);
    }
    m->offset_[n] = static_cast<uint32_t>(m->blob_.size());

    size_t mslots = 1;
    int bits = 0;
    while (mslots < 2 * merges.size() + 16) mslots <<= 1, ++bits;
    m->merge_keys_.assign(mslots, kNoMerge);
    m->merge_vals_.assign(mslots, kNoMerge);
    m->merge_shift_ = 64 - bits;
    for (size_t rank = 0; rank < merges.size(); ++rank) {
        auto [l, r] = merges[rank];
        std::string joined = id_bytes[l] + id_bytes[r];
        auto merged = m->find(joined);
        if (!merged) {
            return data_loss(source + ": merge #" + std::to_string(rank) + " (ids " + std::to_string(l) +
                             ", " + std::to_string(r) + ") makes a token that is not in the vocabulary");
        }
        uint64_t key = pair_key(l, r);
        uint64_t h = (key * 0x9E3779B97F4A7C15ull) >> m->merge_shift_;
        for (;; h = (h + 1) & (mslots - 1)) {
            if (m->merge_keys_[h] == kNoMerge) break;
            if (m->merge_keys_[h] == key) {
                return data_loss(source + ": merge #" + std::to_string(rank) + " repeats an earlier pair");
            }
        }
        m->merge_keys_[h] = key;
        m->merge_vals_[h] = (static_cast<uint64_t>(rank) << 32) | static_cast<uint32_t>(*merged);
    }
    return m;
}

std::optional<int32_t> BpeModel::find(std::string_view bytes) const {
    for (uint64_t h = hash_bytes(bytes) & vocab_mask_;; h = (h + 1) & vocab_mask_) {
        int32_t id = vocab_slots_[h];
        if (id < 0) return std::nullopt;
        if (this->bytes(id) == bytes) return id;
    }
}

std::string_view BpeModel::bytes(int32_t id) const {
    if (id < 0 || id >= size()) return {};
    return std::string_view(blob_).substr(offset_[id], offset_[id + 1] - offset_[id]);
}

uint64_t BpeModel::merge_of(int32_t left, int32_t right) const {
    uint64_t key = pair_key(left, right);
    uint64_t mask = merge_keys_.size() - 1;
    for (uint64_t h = (key * 0x9E3779B97F4A7C15ull) >> merge_shift_;; h = (h + 1) & mask) {
        uint64_t k = merge_keys_[h];
        if (k == key) return merge_vals_[h];
        if (k == kNoMerge) return kNoMerge;
    }
}

void BpeModel::encode_piece(std::string_view piece, std::vector<int32_t>* out, EncodeStats* stats) const {
    if (piece.empty()) return;
    if (stats) ++stats->pieces;
    if (piece.size() == 1 || ignore_merges_) {
        if (auto id = find(piece)) {
            out->push_back(*id);
            return;
        }
    }
    if (piece.size() <= kLinearMax) {
        bpe_linear(piece, out, stats);
    } else {
        bpe_heap(piece, out, stats);
    }
}

void BpeModel::bpe_linear(std::string_view piece, std::vector<int32_t>* out, EncodeStats* stats) const {
    int32_t ids[kLinearMax];
    uint64_t merge[kLinearMax];  // merge[i]: merge_of(ids[i], ids[i + 1]); kNoMerge for the last
    size_t n = 0;
    for (char c : piece) {
        int32_t id = byte_id_[static_cast<uint8_t>(c)];
        if (id >= 0) ids[n++] = id;
    }
    size_t lookups = 0, merges = 0;
    for (size_t i = 0; i + 1 < n; ++i) merge[i] = merge_of(ids[i], ids[i + 1]);
    lookups += n;
    if (n > 0) merge[n - 1] = kNoMerge;
    while (n > 1) {
        // Lowest rank wins; equal packed values are the same pair, and the first (leftmost) is taken.
        size_t best = 0;
        for (size_t i = 1; i + 1 < n; ++i) {
            if (merge[i] < merge[best]) best = i;
        }
        if (merge[best] == kNoMerge) break;
        ids[best] = static_cast<int32_t>(merge[best] & 0xFFFFFFFFu);
        ++merges;
        for (size_t i = best + 1; i + 1 < n; ++i) {
            ids[i] = ids[i + 1];
            merge[i] = merge[i + 1];
        }
        --n;
        merge[best] = best + 1 < n ? merge_of(ids[best], ids[best + 1]) : kNoMerge;
        if (best > 0) merge[best - 1] = merge_of(ids[best - 1], ids[best]);
        lookups += 2;
    }
    out->insert(out->end(), ids, ids + n);
    if (stats) {
        stats->bpe_merges += merges;
        stats->bpe_lookups += lookups;
    }
}

void BpeModel::bpe_heap(std::string_view piece, std::vector<int32_t>* out, EncodeStats* stats) const {
    struct Symbol {
        int32_t id;
        int32_t prev;  // index of the previous live symbol, -1 at the start
        int32_t next;  // index of the next live symbol, -1 at the end
        bool live;
    };
    std::vector<Symbol> sym;
    sym.reserve(piece.size());
    for (char c : piece) {
        int32_t id = byte_id_[static_cast<uint8_t>(c)];
        if (id < 0) continue;
        auto i = static_cast<int32_t>(sym.size());
        sym.push_back({id, i - 1, i + 1, true});
    }
    if (sym.empty()) return;
    sym.back().next = -1;
    // Candidate (rank << 32 | position): the min-heap pops the lowest rank, then the leftmost position.
    // Stale entries (a side already merged away) are skipped when popped, as in word.rs.
    std::vector<uint64_t> heap;
    size_t lookups = 0, merges = 0;
    auto push = [&](int32_t pos) {
        ++lookups;
        uint64_t m = merge_of(sym[pos].id, sym[sym[pos].next].id);
        if (m != kNoMerge) {
            heap.push_back((m & 0xFFFFFFFF00000000ull) | static_cast<uint32_t>(pos));
            std::push_heap(heap.begin(), heap.end(), std::greater<>());
        }
    };
    for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) push(i);
    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), std::greater<>());
        uint64_t top = heap.back();
        heap.pop_back();
        auto pos = static_cast<int32_t>(top & 0xFFFFFFFFu);
        Symbol& s = sym[pos];
        if (!s.live || s.next < 0) continue;
        ++lookups;
        uint64_t m = merge_of(s.id, sym[s.next].id);
        if (m == kNoMerge || (m >> 32) != (top >> 32)) continue;  // the pair changed since it was pushed
        Symbol& right = sym[s.next];
        s.id = static_cast<int32_t>(m & 0xFFFFFFFFu);
        right.live = false;
        s.next = right.next;
        if (s.next >= 0) sym[s.next].prev = pos;
        ++merges;
        if (s.prev >= 0) push(s.prev);
        if (s.next >= 0) push(pos);
    }
    for (int32_t i = 0; i >= 0; i = sym[i].next) out->push_back(sym[i].id);
    if (stats) {
        stats->bpe_merges += merges;
        stats->bpe_lookups += lookups;
    }
}

}  // namespace volt::tokenizer
