#include "cuda/peer_access.h"

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "core/logging.h"
#include "cuda/cuda_check.h"
#include "cuda/launch.h"

namespace volt::cuda {

namespace {

constexpr int64_t kProbeWords = 1 << 16;  // 256 KiB each way: several pages, several blocks

std::string pair(int i, int j) { return "GPU " + std::to_string(i) + " -> GPU " + std::to_string(j); }

// One ordered pair, peer access already enabled from i to j.
Status write_and_verify(int i, int j) {
    const size_t bytes = kProbeWords * sizeof(uint32_t);
    uint32_t *src = nullptr, *dst = nullptr, *local = nullptr;
    std::vector<uint32_t> pattern(kProbeWords), back(kProbeWords);
    for (int64_t k = 0; k < kProbeWords; ++k) pattern[k] = static_cast<uint32_t>(k * 40503u + 17u);
    const uint32_t seed = 0x9e3779b9u ^ static_cast<uint32_t>(i * 131 + j);
    VOLT_CUDA_CHECK(cudaSetDevice(j));
    VOLT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&src), bytes));
    VOLT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&dst), bytes));
    VOLT_CUDA_CHECK(cudaMemcpy(src, pattern.data(), bytes, cudaMemcpyHostToDevice));
    VOLT_CUDA_CHECK(cudaMemset(dst, 0, bytes));
    VOLT_CUDA_CHECK(cudaSetDevice(i));
    VOLT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&local), bytes));
    launch_peer_probe(src, dst, local, kProbeWords, seed, nullptr);
    VOLT_CUDA_CHECK(cudaDeviceSynchronize());
    Status s = Status::ok();
    VOLT_CUDA_CHECK(cudaMemcpy(back.data(), local, bytes, cudaMemcpyDeviceToHost));
    for (int64_t k = 0; k < kProbeWords && s.is_ok(); ++k)
        if (back[k] != pattern[k])
            s = Status(StatusCode::kUnavailable,
                       pair(i, j) + ": a read of peer memory returned a wrong word at " + std::to_string(k));
    VOLT_CUDA_CHECK(cudaSetDevice(j));
    VOLT_CUDA_CHECK(cudaMemcpy(back.data(), dst, bytes, cudaMemcpyDeviceToHost));
    for (int64_t k = 0; k < kProbeWords && s.is_ok(); ++k)
        if (back[k] != (seed ^ static_cast<uint32_t>(k * 2654435761u)))
            s = Status(StatusCode::kUnavailable,
                       pair(i, j) + ": a write into peer memory landed wrong at word " + std::to_string(k));
    VOLT_CUDA_CHECK(cudaFree(src));
    VOLT_CUDA_CHECK(cudaFree(dst));
    VOLT_CUDA_CHECK(cudaSetDevice(i));
    VOLT_CUDA_CHECK(cudaFree(local));
    return s;
}

}  // namespace

Status probe_peer_access(const std::vector<int>& gpus) {
    int current = 0;
    VOLT_CUDA_CHECK(cudaGetDevice(&current));
    Status s = Status::ok();
    for (size_t a = 0; a < gpus.size() && s.is_ok(); ++a) {
        for (size_t b = 0; b < gpus.size() && s.is_ok(); ++b) {
            const int i = gpus[a], j = gpus[b];
            if (i == j) continue;
            int can = 0;
            VOLT_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, i, j));
            if (can == 0) {
                s = Status(StatusCode::kUnavailable, pair(i, j) + ": no peer path (cudaDeviceCanAccessPeer)");
                break;
            }
            VOLT_CUDA_CHECK(cudaSetDevice(i));
            const cudaError_t e = cudaDeviceEnablePeerAccess(j, 0);
            if (e == cudaErrorPeerAccessAlreadyEnabled) {
                cudaGetLastError();  // not sticky
            } else if (e != cudaSuccess) {
                cudaGetLastError();
                s = Status(StatusCode::kUnavailable,
                           pair(i, j) + ": cudaDeviceEnablePeerAccess: " + cudaGetErrorString(e));
                break;
            }
            s = write_and_verify(i, j);
            // The verdict per ordered pair (scripts/gpu/multi_gpu.sh reads these lines).
            spdlog::info("peer access: {}: {}", pair(i, j),
                         s.is_ok() ? "ok (peer path, access enabled, 256 KiB written and read back exactly)"
                                   : s.message());
        }
    }
    VOLT_CUDA_CHECK(cudaSetDevice(current));
    return s;
}

}  // namespace volt::cuda
