#include "core/check.h"

#include <cstdio>
#include <cstdlib>

namespace volt::detail {

CheckFailure::CheckFailure(const char* file, int line, const char* cond) {
    stream_ << file << ":" << line << ": check failed: " << cond << " ";
}

CheckFailure::~CheckFailure() {
    std::string s = stream_.str();
    std::fprintf(stderr, "%s\n", s.c_str());
    std::fflush(stderr);
    std::abort();
}

}  // namespace volt::detail
