// The repository root the GPU tests read their data from (tests/data, assets): $VOLT_SOURCE_DIR when set
// (a bundle run on the GPU machine, from a copy of the repository), else the build's VOLT_SOURCE_DIR.
// Test code; host only.
#pragma once

#include <cstdlib>
#include <string>

namespace volt::cuda::test {

inline std::string source_dir() {
    const char* env = std::getenv("VOLT_SOURCE_DIR");
    return env != nullptr && *env != 0 ? std::string(env) : std::string(VOLT_SOURCE_DIR);
}

}  // namespace volt::cuda::test
