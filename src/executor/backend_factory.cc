#include "executor/backend_factory.h"

#include "cpu/cpu_ops.h"
#if defined(VOLT_HAVE_CUDA)
#include "cuda/cuda_backend.h"
#endif

namespace volt::executor {

#if defined(VOLT_HAVE_CUDA)
bool cuda_built() { return true; }
#else
bool cuda_built() { return false; }
#endif

Result<std::unique_ptr<ops::Backend>> make_backend(const DeviceOptions& o) {
    if (o.device == "cpu") return std::unique_ptr<ops::Backend>(std::make_unique<cpu::CpuBackend>());
    if (o.device == "cuda") {
#if defined(VOLT_HAVE_CUDA)
        cuda::CudaOptions co;
        co.dtype = o.dtype;
        co.cuda_kernels = o.cuda_kernels;
        co.embedding_in_host_memory = o.embedding_in_host_memory;
        VOLT_ASSIGN_OR_RETURN(auto backend, cuda::CudaBackend::create(co));
        return std::unique_ptr<ops::Backend>(std::move(backend));
#else
        return unimplemented(
            "--device cuda: this voltllm was built without CUDA (configure with the volta, "
            "volta-ptx or cuda13 preset)");
#endif
    }
    return invalid_argument("--device " + o.device + ": expected cpu or cuda");
}

}  // namespace volt::executor
