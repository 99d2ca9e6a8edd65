#include "cpu/host_experts.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>

#include "core/check.h"
#include "core/dtype.h"
#include "core/logging.h"

namespace volt::cpu {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string gib(int64_t bytes) {
    return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / 1073741824.0);
}

// Which path prompt rows of offloaded layers take, said once per process (the first prepare()).
std::atomic<bool> g_prompt_path_logged{false};

// Element i of a bias vector as f32 (bf16 / f16 widen exactly, as the GPU's place_vector_f32 does).
float bias_at(const ops::VectorWeight& v, int64_t i) {
    switch (v.format) {
        case ops::Format::kF32:
            return static_cast<const float*>(v.data)[i];
        case ops::Format::kBf16:
            return bf16_to_f32(static_cast<const uint16_t*>(v.data)[i]);
        case ops::Format::kF16:
            return f16_to_f32(static_cast<const uint16_t*>(v.data)[i]);
        default:
            VOLT_CHECK(false) << "bias format " << ops::format_name(v.format);
            return 0.0f;
    }
}
}  // namespace

std::vector<int32_t> distinct_experts(const int32_t* ids, int64_t n, int64_t num_experts) {
    std::vector<bool> seen(static_cast<size_t>(std::max<int64_t>(num_experts, 0)), false);
    for (int64_t i = 0; i < n; ++i)
        if (ids[i] >= 0 && ids[i] < num_experts) seen[ids[i]] = true;
    std::vector<int32_t> out;
    for (int64_t e = 0; e < num_experts; ++e)
        if (seen[e]) out.push_back(static_cast<int32_t>(e));
    return out;
}

std::vector<std::pair<uintptr_t, uintptr_t>> page_ranges(std::vector<std::pair<uintptr_t, uintptr_t>> ranges,
                                                         uintptr_t page) {
    ranges.erase(
        std::remove_if(ranges.begin(), ranges.end(), [](const auto& r) { return r.second <= r.first; }),
        ranges.end());
    for (auto& [b, e] : ranges) {
        b = b / page * page;
        e = (e + page - 1) / page * page;
    }
    std::sort(ranges.begin(), ranges.end());
    std::vector<std::pair<uintptr_t, uintptr_t>> out;
    for (const auto& r : ranges) {
        if (!out.empty() && r.first <= out.back().second)
            out.back().second = std::max(out.back().second, r.second);
        else
            out.push_back(r);
    }
    return out;
}

HostExpertsRunner::~HostExpertsRunner() {
    if (pinned_by_ != nullptr)
        for (const void* p : pinned_) pinned_by_->unpin_host(p);
    if (stats_.calls == 0) return;
    spdlog::info(
        "offload: {} experts calls, rows on the CPU ({}): {:.2f} GB of expert weights read in {:.3f} s of "
        "kernel "
        "({:.1f} GB/s), {:.3f} s with the copies to and from the device; prompt rows on the device in {} "
        "calls ({} rows, {} experts, {:.2f} GB uploaded)",
        stats_.calls, isa_name(isa_), stats_.bytes / 1e9, stats_.kernel_s,
        stats_.kernel_s > 0 ? stats_.bytes / 1e9 / stats_.kernel_s : 0.0, stats_.total_s, stats_.staged_calls,
        stats_.staged_rows, stats_.staged_experts, stats_.staged_bytes / 1e9);
}

Status HostExpertsRunner::prepare(ops::Backend& primary, const std::vector<ops::HostExpertLayer>& layers) {
    host_prompt_reason_.clear();
    int64_t need = 0;
    if (primary.memory_is_host()) {
        host_prompt_reason_ = "the backend's memory is host memory";
    } else {
        for (const ops::HostExpertLayer& l : layers) {
            const int64_t b = ops::expert_staging_layout(l.gate_up, l.down).bytes;
            if (b == 0) {
                host_prompt_reason_ = "the offloaded experts are not MXFP4 (the staging copies MXFP4 codes)";
                break;
            }
            need = std::max(need, b);
        }
        if (host_prompt_reason_.empty() && need == 0) host_prompt_reason_ = "no offloaded layer";
    }
    if (host_prompt_reason_.empty()) {
        auto buf = primary.alloc(need);
        if (buf.is_ok()) {
            stage_ = std::move(*buf);
        } else {
            host_prompt_reason_ = "no room for the staging: " + buf.status().message();
        }
    }
    if (stage_.data() != nullptr) {
        // Page-lock the codes and scales (the bulk; biases are widened through pinned staging instead), so
        // the uploads run by DMA while the CPU computes the generated rows.
        std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
        for (const ops::HostExpertLayer& l : layers)
            for (const ops::ExpertWeights* w : {&l.gate_up, &l.down}) {
                const auto rows = w->num_experts * w->out, nb = w->in / 32;
                const auto b = reinterpret_cast<uintptr_t>(w->blocks),
                           s = reinterpret_cast<uintptr_t>(w->scales);
                ranges.emplace_back(b, b + static_cast<uintptr_t>(rows * nb * 16));
                ranges.emplace_back(s, s + static_cast<uintptr_t>(rows * nb));
            }
        const auto t0 = std::chrono::steady_clock::now();
        int64_t total = 0;
        for (const auto& [b, e] :
             page_ranges(std::move(ranges), static_cast<uintptr_t>(sysconf(_SC_PAGESIZE)))) {
            const auto* p = reinterpret_cast<const void*>(b);
            const auto n = static_cast<int64_t>(e - b);
            total += n;
            if (primary.pin_host(p, n)) {
                pinned_.push_back(p);
                pinned_bytes_ += n;
            }
        }
        pinned_by_ = &primary;
        if (!g_prompt_path_logged.exchange(true))
            spdlog::info(
                "offload: prompt rows of offloaded layers run on the {}'s experts kernels: the experts they "
                "route to are copied into a {} staging buffer in its memory ({} of {} host expert weights "
                "page-locked in {:.2f} s{}); generated rows run on the CPU (docs/architecture.md, \"CPU "
                "expert offload\")",
                primary.name(), gib(stage_.bytes()), gib(pinned_bytes_), gib(total), seconds_since(t0),
                pinned_bytes_ < total ? "; the rest is copied from pageable memory" : "");
    } else if (!layers.empty() && !g_prompt_path_logged.exchange(true)) {
        spdlog::info("offload: prompt rows of offloaded layers run on the CPU, as generated rows do ({})",
                     host_prompt_reason_);
    }
    return Status::ok();
}

void* HostExpertsRunner::staging(int slot, ops::Backend& primary, int64_t bytes) {
    Host& h = host_[slot];
    if (h.bytes >= bytes) return h.data;
    const int64_t grown = std::max<int64_t>(bytes, h.bytes * 2);
    h.pinned = ops::Buffer();
    auto pinned = primary.alloc_host(grown);
    if (pinned.is_ok()) {
        h.pinned = std::move(*pinned);
        h.plain.clear();
        h.data = h.pinned.data();
    } else {
        h.plain.assign(static_cast<size_t>(grown), 0);
        h.data = h.plain.data();
    }
    h.bytes = grown;
    return h.data;
}

Status HostExpertsRunner::run_prompt_rows(ops::Backend& primary, const ops::ExpertsArgs& a,
                                          const ops::ExpertStagingLayout& l, int64_t P,
                                          const int32_t* host_ids) {
    const int64_t E = a.gate_up.num_experts;
    VOLT_CHECK_EQ(a.down.num_experts, E);
    const std::vector<int32_t> experts = distinct_experts(host_ids, P * a.top_k, E);
    auto* stage = static_cast<uint8_t*>(stage_.data());
    const int64_t bias_floats =
        a.gate_up.bias.data != nullptr || a.down.bias.data != nullptr ? E * (a.gate_up.out + a.down.out) : 0;
    // Rewritten by every call while its uploads may still be queued: safe only because run() first
    // downloads this layer's ids, which waits for the stream (every earlier upload from it is done).
    // Prefetching the next layer's experts would need an event per buffer (review, 2026-12-06).
    auto* bias_host = static_cast<float*>(staging(4, primary, std::max<int64_t>(bias_floats, 1) * 4));
    // Runs [e0, e1) of consecutive experts: one copy per tensor each. Nothing is kept from an earlier call:
    // the staging serves every offloaded layer in turn (and a layer's own experts of the previous step
    // would save copies only where a single layer is offloaded).
    for (size_t i = 0; i < experts.size();) {
        const int32_t e0 = experts[i];
        int32_t e1 = e0 + 1;
        ++i;
        while (i < experts.size() && experts[i] == e1) {
            ++e1;
            ++i;
        }
        const int64_t n = e1 - e0;
        int64_t bias_off = 0;  // f32 offset of this projection's biases in bias_host
        for (const auto& [w, p] : {std::pair{&a.gate_up, &l.gate_up}, std::pair{&a.down, &l.down}}) {
            primary.upload_async(stage + p->blocks_at + e0 * p->block_bytes, w->blocks + e0 * p->block_bytes,
                                 n * p->block_bytes);
            primary.upload_async(stage + p->scales_at + e0 * p->scale_bytes, w->scales + e0 * p->scale_bytes,
                                 n * p->scale_bytes);
            stats_.staged_bytes += n * (p->block_bytes + p->scale_bytes + p->bias_bytes);
            if (p->bias_bytes > 0) {
                float* dst = bias_host + bias_off + e0 * w->out;
                for (int64_t j = 0; j < n * w->out; ++j) dst[j] = bias_at(w->bias, e0 * w->out + j);
                primary.upload_async(stage + p->bias_at + e0 * p->bias_bytes, dst, n * p->bias_bytes);
            }
            bias_off += E * w->out;
        }
        stats_.staged_experts += n;
    }
    auto staged = [&](const ops::ExpertWeights& w, const ops::StagedProjection& p) {
        ops::ExpertWeights s = w;
        s.blocks = stage + p.blocks_at;
        s.scales = stage + p.scales_at;
        s.bias = w.bias.data != nullptr ? ops::VectorWeight{ops::Format::kF32, stage + p.bias_at, E * w.out}
                                        : ops::VectorWeight{};
        return s;
    };
    ops::ExpertsArgs d = a;
    d.gate_up = staged(a.gate_up, l.gate_up);
    d.down = staged(a.down, l.down);
    d.num_tokens = P;
    d.prompt_rows = P;
    primary.experts_residual(d);
    ++stats_.staged_calls;
    stats_.staged_rows += P;
    return Status::ok();
}

Status HostExpertsRunner::run(ops::Backend& primary, const ops::ExpertsArgs& a) {
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t T = a.num_tokens, K = a.top_k, H = a.down.out;
    if (T == 0) return Status::ok();
    ++stats_.calls;
    if (primary.memory_is_host()) {
        stats_.bytes += expert_bytes_read(a);
        experts_fast(a, isa_);
        stats_.kernel_s += seconds_since(t0);
        stats_.total_s += seconds_since(t0);
        return Status::ok();
    }
    // Prompt rows [0, P) on the primary where the staging holds this layer's shape; rows [first, T) here.
    const int64_t P = std::clamp<int64_t>(a.prompt_rows, 0, T);
    ops::ExpertStagingLayout layout;
    if (P > 0 && stage_.data() != nullptr) layout = ops::expert_staging_layout(a.gate_up, a.down);
    const bool staged = layout.bytes > 0 && layout.bytes <= stage_.bytes();
    const int64_t first = staged ? P : 0, D = T - first;
    // The device sum is sized for every row of the call, whichever kind: the profiling step (all prompt
    // rows, max_num_batched_tokens of them) brings it to its peak before memory planning measures.
    const int64_t all_bytes = T * H * static_cast<int64_t>(sizeof(float));
    if (device_.bytes() < all_bytes) {
        device_ = ops::Buffer();
        VOLT_ASSIGN_OR_RETURN(device_, primary.alloc(all_bytes));
    }
    // Every download first (each waits for the device): afterwards the stream is idle, and what is queued
    // below runs while the CPU computes.
    auto* ids = static_cast<int32_t*>(staging(1, primary, T * K * static_cast<int64_t>(sizeof(int32_t))));
    primary.download(ids, a.expert_ids, T * K * static_cast<int64_t>(sizeof(int32_t)));
    const int64_t x_bytes = D * H * static_cast<int64_t>(sizeof(float));
    float* x = nullptr;
    float* w = nullptr;
    if (D > 0) {
        x = static_cast<float*>(staging(0, primary, x_bytes));
        w = static_cast<float*>(staging(2, primary, D * K * static_cast<int64_t>(sizeof(float))));
        primary.download(x, a.x + first * H, x_bytes);
        primary.download(w, a.expert_weights + first * K, D * K * static_cast<int64_t>(sizeof(float)));
    }
    if (staged) VOLT_RETURN_IF_ERROR(run_prompt_rows(primary, a, layout, P, ids));
    if (D > 0) {
        auto* sum = static_cast<float*>(staging(3, primary, x_bytes));
        std::memset(sum, 0, static_cast<size_t>(x_bytes));
        ops::ExpertsArgs host = a;
        host.x = x;
        host.expert_ids = ids + first * K;
        host.expert_weights = w;
        host.out = sum;
        host.num_tokens = D;
        host.prompt_rows = 0;
        stats_.bytes += expert_bytes_read(host);
        const auto k0 = std::chrono::steady_clock::now();
        experts_fast(host, isa_);
        stats_.kernel_s += seconds_since(k0);
        primary.upload(device_.data(), sum, x_bytes);
        primary.add({device_.as<float>(), a.out + first * H, D * H});
    }
    stats_.total_s += seconds_since(t0);
    return Status::ok();
}

}  // namespace volt::cpu
