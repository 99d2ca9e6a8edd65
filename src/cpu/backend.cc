// CpuBackend memory: host memory. alloc uses calloc so that large pools (the KV cache) come from fresh
// zero pages the kernel maps on first write: a big budget costs no time or resident memory until used.
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "cpu/cpu_ops.h"

namespace volt::cpu {

Result<ops::Buffer> CpuBackend::alloc(int64_t bytes) {
    void* p = std::calloc(static_cast<size_t>(bytes > 0 ? bytes : 1), 1);
    if (p == nullptr)
        return resource_exhausted("cannot allocate " + std::to_string(bytes) + " bytes of host memory");
    return ops::Buffer(this, p, bytes);
}

void CpuBackend::release(void* data, int64_t) { std::free(data); }
void CpuBackend::upload(void* dst, const void* src, int64_t bytes) { std::memcpy(dst, src, bytes); }
void CpuBackend::download(void* dst, const void* src, int64_t bytes) { std::memcpy(dst, src, bytes); }
void CpuBackend::copy(void* dst, const void* src, int64_t bytes) { std::memmove(dst, src, bytes); }
void CpuBackend::fill(void* dst, uint8_t byte, int64_t bytes) { std::memset(dst, byte, bytes); }

namespace {
bool dense_format(ops::Format f) {
    return f == ops::Format::kBf16 || f == ops::Format::kF16 || f == ops::Format::kF32;
}
Status unreadable(const char* what, ops::Format f) {
    return unimplemented(std::string("the CPU backend reads no ") + what + " in " + ops::format_name(f));
}
Status check_vector(const ops::VectorWeight& v) {
    return v.data == nullptr || dense_format(v.format) ? Status::ok()
                                                       : unreadable("vector weights", v.format);
}
// Integer weights (kInt8, kInt4: docs/quantization.md) are read by linear and final_logits only: the
// attention projections and lm_head.
Status check_dense(const ops::DenseWeight& d, bool integer_ok) {
    if (d.format == ops::Format::kInt8 || d.format == ops::Format::kInt4) {
        if (!integer_ok) return unreadable("embedding or router weights", d.format);
        if (d.scales == nullptr) return invalid_argument("int weights without scales");
        if (d.format == ops::Format::kInt4 &&
            (d.zeros == nullptr || d.group_size <= 0 || d.in % d.group_size != 0 || d.out % 8 != 0))
            return invalid_argument("int4 weights [" + std::to_string(d.out) + ", " + std::to_string(d.in) +
                                    "] need zero points, out % 8 == 0 and in % group_size (" +
                                    std::to_string(d.group_size) + ") == 0");
        return check_vector(d.b);
    }
    if (!dense_format(d.format)) return unreadable("dense weights", d.format);
    return check_vector(d.b);
}
}  // namespace

Result<ops::DenseWeight> CpuBackend::place_dense(const ops::DenseWeight& host, ops::WeightRole role,
                                                 std::vector<ops::Buffer>*) {
    VOLT_RETURN_IF_ERROR(
        check_dense(host, role == ops::WeightRole::kAttention || role == ops::WeightRole::kLmHead));
    return host;
}

Result<ops::QkvWeights> CpuBackend::place_qkv(const ops::QkvWeights& host, std::vector<ops::Buffer>*) {
    for (const ops::DenseWeight* d : {&host.q, &host.k, &host.v}) VOLT_RETURN_IF_ERROR(check_dense(*d, true));
    return host;
}

Result<ops::ExpertWeights> CpuBackend::place_experts(const ops::ExpertWeights& host,
                                                     std::vector<ops::Buffer>*) {
    if (host.format != ops::Format::kMxfp4 && host.format != ops::Format::kBf16 &&
        host.format != ops::Format::kF16)
        return unreadable("expert weights", host.format);
    VOLT_RETURN_IF_ERROR(check_vector(host.bias));
    return host;
}

Result<ops::VectorWeight> CpuBackend::place_vector(const ops::VectorWeight& host, std::vector<ops::Buffer>*) {
    VOLT_RETURN_IF_ERROR(check_vector(host));
    return host;
}

// Free means MemAvailable (what can be allocated without swapping: free pages plus reclaimable page
// cache), not MemFree, which a machine that just read big files shows near zero.
ops::MemoryStats CpuBackend::memory() const {
    const int64_t page = sysconf(_SC_PAGESIZE);
    ops::MemoryStats m{sysconf(_SC_PHYS_PAGES) * page, sysconf(_SC_AVPHYS_PAGES) * page};
    std::ifstream meminfo("/proc/meminfo");
    std::string key;
    int64_t kib = 0;
    std::string unit;
    while (meminfo >> key >> kib >> unit) {
        if (key == "MemAvailable:") {
            m.free_bytes = kib * 1024;
            break;
        }
    }
    return m;
}

}  // namespace volt::cpu
