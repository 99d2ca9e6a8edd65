// libFuzzer: the safetensors header parser (SafetensorsFile::open validates the header in full). The
// input is the whole file, handed over as an in-memory file (memfd) so that the real mmap path runs.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const int fd = memfd_create("safetensors_fuzz", 0);
    if (fd < 0) std::abort();
    size_t off = 0;
    while (off < size) {
        ssize_t n = write(fd, data + off, size - off);
        if (n <= 0) std::abort();
        off += static_cast<size_t>(n);
    }
    auto f = volt::io::SafetensorsFile::open("/proc/self/fd/" + std::to_string(fd));
    if (f) {
        for (const auto& t : (*f)->tensors()) (void)(*f)->find(t.name);
    }
    close(fd);
    return 0;
}
