// `voltllm cuda-info [--dtype D] [--cuda-kernels K]`: the arch probe. Creates the CUDA backend as
// `--device cuda` would and prints one JSON object: the GPU, its compute capability and memory, the
// kernel arch actually running (__CUDA_ARCH__ read by a probe kernel: 700 in the volta-ptx build, 900
// in cuda13), the variant the dispatch table chose for every op, the operand dtype and cuBLAS's status.
// Exit 1 with the reason where there is no GPU or no CUDA in this build.
#include <cstdio>

#include "executor/backend_factory.h"
#include "tools/commands.h"
#include "tools/forward_session.h"
#if defined(VOLT_HAVE_CUDA)
#include "cuda/cuda_backend.h"
#endif

namespace volt::tools {

void register_cuda_info(CLI::App& app) {
    auto* cmd =
        app.add_subcommand("cuda-info", "Probe the GPU: compute capability, kernel arch, dispatch, cuBLAS");
    auto device = std::make_shared<executor::DeviceOptions>();
    device->device = "cuda";
    cmd->add_option("--dtype", device->dtype, "auto, half, float or bfloat16")
        ->check(CLI::IsMember({"auto", "half", "float16", "float", "float32", "bfloat16"}))
        ->capture_default_str();
    cmd->add_option("--cuda-kernels", device->cuda_kernels, "auto or sm70")
        ->check(CLI::IsMember({"auto", "sm70"}))
        ->capture_default_str();
    cmd->callback([device] {
        auto backend = executor::make_backend(*device);
        if (!backend.is_ok()) {
            std::fprintf(stderr, "error: %s\n", backend.status().to_string().c_str());
            std::exit(1);
        }
#if defined(VOLT_HAVE_CUDA)
        const auto* cuda = dynamic_cast<const cuda::CudaBackend*>(backend->get());
        std::printf("%s\n", cuda->info_json().c_str());
#endif
    });
}

}  // namespace volt::tools
