#include "cpu/host_experts.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/check.h"
#include "core/logging.h"

namespace volt::cpu {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

HostExpertsRunner::~HostExpertsRunner() {
    if (stats_.calls == 0) return;
    spdlog::info(
        "offload: {} experts calls on the CPU ({}): {:.2f} GB of expert weights read in {:.3f} s of kernel "
        "({:.1f} GB/s), {:.3f} s with the copies to and from the device",
        stats_.calls, isa_name(isa_), stats_.bytes / 1e9, stats_.kernel_s,
        stats_.kernel_s > 0 ? stats_.bytes / 1e9 / stats_.kernel_s : 0.0, stats_.total_s);
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
    const int64_t x_bytes = T * H * static_cast<int64_t>(sizeof(float));
    auto* x = static_cast<float*>(staging(0, primary, x_bytes));
    auto* ids = static_cast<int32_t*>(staging(1, primary, T * K * static_cast<int64_t>(sizeof(int32_t))));
    auto* w = static_cast<float*>(staging(2, primary, T * K * static_cast<int64_t>(sizeof(float))));
    auto* sum = static_cast<float*>(staging(3, primary, x_bytes));
    primary.download(x, a.x, x_bytes);
    primary.download(ids, a.expert_ids, T * K * static_cast<int64_t>(sizeof(int32_t)));
    primary.download(w, a.expert_weights, T * K * static_cast<int64_t>(sizeof(float)));
    std::memset(sum, 0, static_cast<size_t>(x_bytes));
    ops::ExpertsArgs host = a;
    host.x = x;
    host.expert_ids = ids;
    host.expert_weights = w;
    host.out = sum;
    stats_.bytes += expert_bytes_read(host);
    const auto k0 = std::chrono::steady_clock::now();
    experts_fast(host, isa_);
    stats_.kernel_s += seconds_since(k0);
    if (device_.bytes() < x_bytes) {
        device_ = ops::Buffer();
        VOLT_ASSIGN_OR_RETURN(device_, primary.alloc(x_bytes));
    }
    primary.upload(device_.data(), sum, x_bytes);
    primary.add({device_.as<float>(), a.out, T * H});
    stats_.total_s += seconds_since(t0);
    return Status::ok();
}

}  // namespace volt::cpu
