#include "tools/forward_session.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>

namespace volt::tools {

namespace {
[[noreturn]] void fail(const Status& s) {
    std::fprintf(stderr, "error: %s\n", s.to_string().c_str());
    std::exit(1);
}
}  // namespace

ForwardSession open_forward_or_exit(const std::string& model_dir, const executor::DeviceOptions& device) {
    ForwardSession s;
    auto backend = executor::make_backend(device);
    if (!backend.is_ok()) fail(backend.status());
    s.backend = std::move(*backend);
    auto weights = model::load_model(model_dir);
    if (!weights.is_ok()) fail(weights.status());
    s.host = std::move(*weights);
    auto placed = model::place_model(s.host, *s.backend);
    if (!placed.is_ok()) fail(placed.status());
    s.placed = std::move(*placed);
    s.forward = std::make_unique<model::Forward>(s.placed, *s.backend);
    return s;
}

void add_device_flags(CLI::App* cmd, executor::DeviceOptions* d) {
    cmd->add_option("--device", d->device, "cpu or cuda")
        ->check(CLI::IsMember({"cpu", "cuda"}))
        ->capture_default_str();
    cmd->add_option("--dtype", d->dtype, "auto, half, float or bfloat16 (GPU operands; auto: half on sm_70)")
        ->check(CLI::IsMember({"auto", "half", "float16", "float", "float32", "bfloat16"}))
        ->capture_default_str();
    cmd->add_option("--cuda-kernels", d->cuda_kernels, "auto or sm70 (force the Volta kernels, no cuBLAS)")
        ->check(CLI::IsMember({"auto", "sm70"}))
        ->capture_default_str();
}

}  // namespace volt::tools
