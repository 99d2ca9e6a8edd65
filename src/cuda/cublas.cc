#include "cuda/cublas.h"

#include <dlfcn.h>

#include <climits>

namespace volt::cuda {

namespace {
// The ABI subset (cublas_api.h of cuBLAS 11-13): enums as int, handles as pointers.
using Handle = void*;
constexpr int kOpN = 0, kOpT = 1;    // cublasOperation_t
constexpr int kR16F = 2, kR32F = 0;  // cudaDataType_t
constexpr int kCompute32F = 68;      // cublasComputeType_t CUBLAS_COMPUTE_32F
constexpr int kGemmDefault = -1;     // cublasGemmAlgo_t CUBLAS_GEMM_DEFAULT
using CreateFn = int (*)(Handle*);
using DestroyFn = int (*)(Handle);
using SetStreamFn = int (*)(Handle, cudaStream_t);
using GetVersionFn = int (*)(Handle, int*);
using GemmExFn = int (*)(Handle, int, int, int, int, int, const void*, const void*, int, int, const void*,
                         int, int, const void*, void*, int, int, int, int);

constexpr const char* kVoltaSonames[] = {"libcublas.so.12", "libcublas.so.11"};
constexpr const char* kNewerSonames[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so.11"};
}  // namespace

struct Cublas::Api {
    CreateFn create = nullptr;
    DestroyFn destroy = nullptr;
    SetStreamFn set_stream = nullptr;
    GetVersionFn get_version = nullptr;
    GemmExFn gemm_ex = nullptr;
};

const char* const* Cublas::sonames_for(int cc, int* count) {
    if (cc < 75) {
        *count = 2;
        return kVoltaSonames;
    }
    *count = 3;
    return kNewerSonames;
}

std::unique_ptr<Cublas> Cublas::open(int cc, cudaStream_t stream, std::string* why) {
    int n = 0;
    const char* const* names = sonames_for(cc, &n);
    std::string tried;
    for (int i = 0; i < n; ++i) {
        void* lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (lib == nullptr) {
            const char* err = dlerror();
            tried += std::string(tried.empty() ? "" : "; ") + names[i] + ": " + (err ? err : "not found");
            continue;
        }
        auto api = std::make_unique<Api>();
        api->create = reinterpret_cast<CreateFn>(dlsym(lib, "cublasCreate_v2"));
        api->destroy = reinterpret_cast<DestroyFn>(dlsym(lib, "cublasDestroy_v2"));
        api->set_stream = reinterpret_cast<SetStreamFn>(dlsym(lib, "cublasSetStream_v2"));
        api->get_version = reinterpret_cast<GetVersionFn>(dlsym(lib, "cublasGetVersion_v2"));
        api->gemm_ex = reinterpret_cast<GemmExFn>(dlsym(lib, "cublasGemmEx"));
        if (!api->create || !api->destroy || !api->set_stream || !api->get_version || !api->gemm_ex) {
            tried += std::string(tried.empty() ? "" : "; ") + names[i] + ": missing entry points";
            dlclose(lib);
            continue;
        }
        Handle h = nullptr;
        const int st = api->create(&h);
        if (st != 0 || h == nullptr) {
            tried += std::string(tried.empty() ? "" : "; ") + names[i] +
                     ": cublasCreate failed with status " + std::to_string(st);
            dlclose(lib);
            continue;
        }
        std::unique_ptr<Cublas> c(new Cublas());
        c->api_ = std::move(api);
        c->lib_ = lib;
        c->handle_ = h;
        c->soname_ = names[i];
        c->api_->get_version(h, &c->version_);
        if (c->api_->set_stream(h, stream) != 0) {
            *why = std::string(names[i]) + ": cublasSetStream failed";
            return nullptr;
        }
        return c;
    }
    *why = "not found (" + tried + ")";
    return nullptr;
}

Cublas::~Cublas() {
    if (handle_ != nullptr && api_) api_->destroy(handle_);
    if (lib_ != nullptr) dlclose(lib_);
}

Status Cublas::gemm_f16_f32(const uint16_t* a, const uint16_t* b, float* c, int64_t m, int64_t n, int64_t k) {
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX)
        return invalid_argument("cuBLAS GEMM dimension above 2^31");
    const float alpha = 1.0f, beta = 0.0f;
    // Column-major view: C^T [n, m] = B [n, k] (stored as k x n: op T) times A^T (stored as k x m: op N).
    const int st =
        api_->gemm_ex(handle_, kOpT, kOpN, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                      &alpha, b, kR16F, static_cast<int>(k), a, kR16F, static_cast<int>(k), &beta, c, kR32F,
                      static_cast<int>(n), kCompute32F, kGemmDefault);
    if (st != 0) return internal_error("cublasGemmEx failed with status " + std::to_string(st));
    return Status::ok();
}

}  // namespace volt::cuda
