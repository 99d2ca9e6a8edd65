// CpuBackend memory: host memory. alloc uses calloc so that large pools (the KV cache) come from fresh
// zero pages the kernel maps on first write: a big budget costs no time or resident memory until used.
#include <unistd.h>

#include <cstdlib>
#include <cstring>

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

ops::MemoryStats CpuBackend::memory() const {
    const int64_t page = sysconf(_SC_PAGESIZE);
    return {sysconf(_SC_PHYS_PAGES) * page, sysconf(_SC_AVPHYS_PAGES) * page};
}

}  // namespace volt::cpu
