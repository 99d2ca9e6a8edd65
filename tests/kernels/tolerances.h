// The tolerance table of the op harness: one entry per (backend, check), each with the reason for its
// number (tolerances.cc). `rel` bounds the error metric of harness.h (|got - ref| over max(|ref|, rms(ref)),
// or over the branch for residual outputs); decision epsilons (keys ending in ".tie*") bound the margins
// of reference.h below which a token or expert choice is not compared.
#pragma once

#include <string>
#include <vector>

namespace volt::kernels {

struct Tolerance {
    const char* backend;  // ops::Backend::name(): "cpu", "cuda"
    const char* key;      // op or op.output
    double rel;
    const char* reason;
};

// Every entry, in table order (README.md prints the same table).
const std::vector<Tolerance>& tolerance_table();
// The entry for (backend, key), or nullptr: a backend without its own entries is not judged.
const Tolerance* find_tolerance(const std::string& backend, const std::string& key);

}  // namespace volt::kernels
