#include "engine/block_manager.h"

#include <algorithm>
#include <string>

#include "core/check.h"

namespace volt::engine {

FreeList::FreeList(int64_t n) {
    free_.reserve(n);
    for (int64_t i = n - 1; i >= 0; --i) free_.push_back(static_cast<int32_t>(i));
}

int32_t FreeList::take() {
    VOLT_CHECK(!free_.empty()) << "free list is empty";
    const int32_t id = free_.back();
    free_.pop_back();
    return id;
}

void FreeList::give(int32_t id) {
    if (fence_ < 0) {
        free_.push_back(id);
    } else {
        held_.emplace_back(fence_, id);
    }
}

void FreeList::hold_until(int64_t step) {
    VOLT_CHECK(step >= fence_) << "fence goes back from " << fence_ << " to " << step;
    fence_ = step;
}

void FreeList::release_through(int64_t step) {
    while (!held_.empty() && held_.front().first <= step) {
        free_.push_back(held_.front().second);
        held_.pop_front();
    }
    if (step >= fence_) fence_ = -1;
}

std::vector<int32_t> FreeList::held_ids() const {
    std::vector<int32_t> ids;
    for (const auto& h : held_) ids.push_back(h.second);
    return ids;
}

BlockPool::BlockPool(int64_t num_blocks) : ref_(num_blocks, 0), list_(num_blocks) {}

int32_t BlockPool::allocate() {
    VOLT_CHECK(list_.num_free() > 0) << "no free KV block";
    const int32_t b = list_.take();
    VOLT_CHECK(ref_[b] == 0) << "allocated block " << b << " has ref count " << ref_[b];
    ref_[b] = 1;
    return b;
}

void BlockPool::incref(int32_t b) {
    VOLT_CHECK(ref_[b] > 0) << "incref of free block " << b;
    ++ref_[b];
}

void BlockPool::decref(int32_t b) {
    VOLT_CHECK(ref_[b] > 0) << "decref of free block " << b;
    if (--ref_[b] == 0) list_.give(b);
}

BlockManager::BlockManager(int64_t block_size, const int64_t num_blocks[kNumKvGroups], int64_t window,
                           const bool has_group[kNumKvGroups], const int64_t* num_host_blocks)
    : block_size_(block_size), window_(window), has_group_{has_group[0], has_group[1]} {
    for (int g = 0; g < kNumKvGroups; ++g) {
        pools_.emplace_back(has_group[g] ? num_blocks[g] : 0);
        host_pools_.emplace_back(has_group[g] && num_host_blocks != nullptr ? num_host_blocks[g] : 0);
    }
}

int64_t BlockManager::blocks_needed(const SeqBlocks& s, int64_t computed, int64_t q, int g) const {
    if (!has_group_[g] || q <= 0) return 0;
    const auto& t = s.table[g];
    int64_t n = 0;
    for (int64_t j = computed / block_size_; j <= (computed + q - 1) / block_size_; ++j) {
        // A swapped sequence's entries come back as private device blocks.
        if (j >= static_cast<int64_t>(t.size()) || t[j] < 0 || (!s.swapped && pools_[g].refcount(t[j]) > 1))
            ++n;
    }
    return n;
}

bool BlockManager::can_append(const SeqBlocks& s, int64_t computed, int64_t q) const {
    for (int g = 0; g < kNumKvGroups; ++g)
        if (blocks_needed(s, computed, q, g) > pools_[g].num_free()) return false;
    return true;
}

bool BlockManager::can_append_after_release(const SeqBlocks& s, int64_t computed, int64_t q) const {
    for (int g = 0; g < kNumKvGroups; ++g)
        if (blocks_needed(s, computed, q, g) > pools_[g].num_free() + pools_[g].num_held()) return false;
    return true;
}

void BlockManager::append(int32_t slot, SeqBlocks* s, int64_t computed, int64_t q,
                          std::vector<BlockTableUpdate>* up, std::vector<BlockCopy>* copies) {
    VOLT_CHECK(can_append(*s, computed, q)) << "slot " << slot << " appends without free blocks";
    for (int g = 0; g < kNumKvGroups; ++g) {
        if (!has_group_[g] || q <= 0) continue;
        auto& t = s->table[g];
        const int64_t last = (computed + q - 1) / block_size_;
        if (static_cast<int64_t>(t.size()) <= last) t.resize(last + 1, -1);
        for (int64_t j = computed / block_size_; j <= last; ++j) {
            const int32_t old = t[j];
            if (old >= 0 && pools_[g].refcount(old) == 1) continue;
            const int32_t b = pools_[g].allocate();
            if (old >= 0) {  // shared with a fork: copy what is already written, then write our own
                copies->push_back({g, old, b});
                pools_[g].decref(old);
            }
            t[j] = b;
            up->push_back({slot, g, static_cast<int32_t>(j), b});
        }
    }
}

void BlockManager::free_outside_window(int32_t slot, SeqBlocks* s, int64_t computed,
                                       std::vector<BlockTableUpdate>* up) {
    if (!has_group_[1] || window_ <= 0) return;
    auto& t = s->table[1];
    const int64_t first_needed = std::max<int64_t>(0, computed - window_ + 1);
    const int64_t end = std::min<int64_t>(first_needed / block_size_, static_cast<int64_t>(t.size()));
    for (int64_t j = s->sliding_freed; j < end; ++j) {
        if (t[j] >= 0) {
            pools_[1].decref(t[j]);
            t[j] = -1;
            up->push_back({slot, 1, static_cast<int32_t>(j), -1});
        }
    }
    s->sliding_freed = std::max(s->sliding_freed, end);
}

void BlockManager::fork(const SeqBlocks& parent, int32_t child_slot, SeqBlocks* child,
                        std::vector<BlockTableUpdate>* up) {
    *child = parent;
    for (int g = 0; g < kNumKvGroups; ++g) {
        const auto& t = child->table[g];
        for (size_t j = 0; j < t.size(); ++j) {
            if (t[j] < 0) continue;
            pools_[g].incref(t[j]);
            up->push_back({child_slot, g, static_cast<int32_t>(j), t[j]});
        }
    }
}

void BlockManager::free(int32_t slot, SeqBlocks* s, std::vector<BlockTableUpdate>* up) {
    for (int g = 0; g < kNumKvGroups; ++g) {
        BlockPool& p = s->swapped ? host_pools_[g] : pools_[g];
        for (int32_t b : s->table[g])
            if (b >= 0) p.decref(b);
        s->table[g].clear();
        if (has_group_[g] && !s->swapped) up->push_back({slot, g, -1, -1});
    }
    s->sliding_freed = 0;
    s->swapped = false;
}

bool BlockManager::can_swap_out(const SeqBlocks& s) const {
    if (s.swapped) return false;
    for (int g = 0; g < kNumKvGroups; ++g) {
        const auto live =
            std::count_if(s.table[g].begin(), s.table[g].end(), [](int32_t b) { return b >= 0; });
        if (live > host_pools_[g].num_free()) return false;
    }
    return true;
}

void BlockManager::swap_out(int32_t slot, SeqBlocks* s, std::vector<BlockTableUpdate>* up,
                            std::vector<BlockSwap>* swaps) {
    VOLT_CHECK(can_swap_out(*s)) << "slot " << slot << " swaps out without free host blocks";
    for (int g = 0; g < kNumKvGroups; ++g) {
        for (int32_t& b : s->table[g]) {
            if (b < 0) continue;
            const int32_t h = host_pools_[g].allocate();
            swaps->push_back({g, b, h});
            pools_[g].decref(b);  // a fork's sibling keeps a shared block
            b = h;
        }
        if (has_group_[g]) up->push_back({slot, g, -1, -1});
    }
    s->swapped = true;
}

bool BlockManager::can_swap_in(const SeqBlocks& s, int64_t computed, int64_t q) const {
    if (!s.swapped) return false;
    for (int g = 0; g < kNumKvGroups; ++g) {
        const auto live =
            std::count_if(s.table[g].begin(), s.table[g].end(), [](int32_t b) { return b >= 0; });
        if (live + blocks_needed(s, computed, q, g) > pools_[g].num_free()) return false;
    }
    return true;
}

void BlockManager::swap_in(int32_t slot, SeqBlocks* s, std::vector<BlockTableUpdate>* up,
                           std::vector<BlockSwap>* swaps) {
    VOLT_CHECK(s->swapped) << "slot " << slot << " swaps in a sequence that is not swapped out";
    for (int g = 0; g < kNumKvGroups; ++g) {
        auto& t = s->table[g];
        for (size_t j = 0; j < t.size(); ++j) {
            if (t[j] < 0) continue;
            const int32_t d = pools_[g].allocate();
            swaps->push_back({g, d, t[j]});
            host_pools_[g].decref(t[j]);
            t[j] = d;
            up->push_back({slot, g, static_cast<int32_t>(j), d});
        }
    }
    s->swapped = false;
}

void BlockManager::hold_frees(int64_t step) {
    for (BlockPool& p : pools_) p.list().hold_until(step);
}

void BlockManager::release_frees(int64_t step) {
    for (BlockPool& p : pools_) p.list().release_through(step);
}

Status BlockManager::check(const std::vector<const SeqBlocks*>& all) const {
    for (int pool = 0; pool < 2 * kNumKvGroups; ++pool) {
        const int g = pool % kNumKvGroups;
        const bool host = pool >= kNumKvGroups;
        const BlockPool& p = host ? host_pools_[g] : pools_[g];
        const std::string name = std::string(host ? "host " : "") + "KV group " + std::to_string(g);
        std::vector<int8_t> listed(p.num_total(), 0);
        for (const std::vector<int32_t>& ids : {p.list().free_ids(), p.list().held_ids()}) {
            for (int32_t b : ids) {
                if (b < 0 || b >= p.num_total() || listed[b]++ != 0)
                    return internal_error(name + ": block " + std::to_string(b) + " listed twice or unknown");
                if (p.refcount(b) != 0)
                    return internal_error(name + ": free or held block " + std::to_string(b) +
                                          " has ref count " + std::to_string(p.refcount(b)));
            }
        }
        std::vector<int32_t> refs(p.num_total(), 0);
        for (const SeqBlocks* s : all) {
            if (s->swapped != host) continue;
            for (int32_t b : s->table[g]) {
                if (b < 0) continue;
                if (b >= p.num_total())
                    return internal_error(name + ": table entry " + std::to_string(b) + " is out of range");
                ++refs[b];
            }
        }
        int64_t used = 0;
        for (int64_t b = 0; b < p.num_total(); ++b) {
            if (refs[b] != p.refcount(static_cast<int32_t>(b)))
                return internal_error(name + " block " + std::to_string(b) + ": ref count " +
                                      std::to_string(p.refcount(b)) + " but " + std::to_string(refs[b]) +
                                      " table entries");
            if (host && refs[b] > 1)
                return internal_error(name + " block " + std::to_string(b) + " is shared");
            used += refs[b] > 0 ? 1 : 0;
        }
        if (used + p.num_free() + p.num_held() != p.num_total())
            return internal_error(name + ": used " + std::to_string(used) + " + free " +
                                  std::to_string(p.num_free()) + " + held " + std::to_string(p.num_held()) +
                                  " != total " + std::to_string(p.num_total()));
    }
    return Status::ok();
}

}  // namespace volt::engine
