#include "cuda/nccl_library.h"

#include <dlfcn.h>

namespace volt::cuda {

namespace {

template <typename F>
bool resolve(void* lib, const char* name, F* out, std::string* missing) {
    *out = reinterpret_cast<F>(dlsym(lib, name));
    if (*out == nullptr && missing->empty()) *missing = name;
    return *out != nullptr;
}

}  // namespace

Result<std::shared_ptr<const NcclLibrary>> NcclLibrary::open(const std::string& soname) {
    dlerror();
    void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
        const char* why = dlerror();
        return failed_precondition(
            "cannot load " + soname + " (" + (why ? why : "dlopen failed") +
            "): tensor / pipeline parallelism across GPUs needs NCCL 2 (libnccl.so.2): "
            "install libnccl2, add its directory to LD_LIBRARY_PATH, or use "
            "--tp-same-device to run every rank on one GPU");
    }
    auto n = std::make_shared<NcclLibrary>();
    n->soname = soname;
    std::string missing;
    resolve(lib, "ncclGetVersion", &n->get_version, &missing);
    resolve(lib, "ncclGetUniqueId", &n->get_unique_id, &missing);
    resolve(lib, "ncclCommInitAll", &n->comm_init_all, &missing);
    resolve(lib, "ncclCommInitRank", &n->comm_init_rank, &missing);
    resolve(lib, "ncclCommDestroy", &n->comm_destroy, &missing);
    resolve(lib, "ncclCommAbort", &n->comm_abort, &missing);
    resolve(lib, "ncclCommGetAsyncError", &n->comm_get_async_error, &missing);
    resolve(lib, "ncclGetErrorString", &n->get_error_string, &missing);
    resolve(lib, "ncclAllGather", &n->all_gather, &missing);
    resolve(lib, "ncclSend", &n->send, &missing);
    resolve(lib, "ncclRecv", &n->recv, &missing);
    resolve(lib, "ncclGroupStart", &n->group_start, &missing);
    resolve(lib, "ncclGroupEnd", &n->group_end, &missing);
    if (!missing.empty())
        return failed_precondition(soname + " has no " + missing +
                                   ": NCCL 2.7 or later is needed (send / recv)");
    VOLT_RETURN_IF_ERROR(n->check(n->get_version(&n->version), "ncclGetVersion"));
    // NCCL_VERSION_CODE: major * 1000 + minor * 100 + patch up to 2.8, major * 10000 + minor * 100 +
    // patch from 2.9 on; 2.7.0 (2700) added send / recv.
    if (n->version < 2700)
        return failed_precondition(soname + " is NCCL version code " + std::to_string(n->version) +
                                   ": NCCL 2.7 or later is needed (send / recv)");
    return std::shared_ptr<const NcclLibrary>(std::move(n));
}

Status NcclLibrary::check(int result, const char* call) const {
    if (result == kNcclSuccess) return Status::ok();
    const char* text = get_error_string != nullptr ? get_error_string(result) : nullptr;
    return internal_error(std::string(call) + ": " + (text ? text : "NCCL error") + " (" +
                          std::to_string(result) + ")");
}

Result<NcclUniqueId> NcclLibrary::unique_id() const {
    NcclUniqueId id{};
    VOLT_RETURN_IF_ERROR(check(get_unique_id(&id), "ncclGetUniqueId"));
    return id;
}

}  // namespace volt::cuda
