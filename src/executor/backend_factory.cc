#include "executor/backend_factory.h"

#include "cpu/cpu_ops.h"

namespace volt::executor {

bool cuda_built() { return false; }

Result<std::unique_ptr<ops::Backend>> make_backend(const DeviceOptions& o) {
    if (o.device == "cpu") return std::unique_ptr<ops::Backend>(std::make_unique<cpu::CpuBackend>());
    if (o.device == "cuda")
        return unimplemented(
            "--device cuda: this voltllm was built without CUDA (configure with the volta, "
            "volta-ptx or cuda13 preset)");
    return invalid_argument("--device " + o.device + ": expected cpu or cuda");
}

}  // namespace volt::executor
