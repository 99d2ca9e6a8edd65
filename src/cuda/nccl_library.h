// NCCL loaded at run time (dlopen of "libnccl.so.2"), so that the binary needs NCCL only when tensor or
// pipeline parallelism spans GPUs (docs/parallel.md). No NCCL header is installed here: the few types and
// entry points used are declared below as nccl.h of NCCL 2.x defines them (their ABI has been stable
// since 2.0: ncclUniqueId is 128 bytes passed by value, ncclComm_t and cudaStream_t are pointers, the
// enums are ints). Plain C++ (streams are void*): the load and its failure message are tested without a
// GPU (tests/unit/cuda/nccl_library_test.cc).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "core/status.h"

namespace volt::cuda {

// nccl.h's values.
enum NcclResult : int {
    kNcclSuccess = 0,
    kNcclUnhandledCudaError = 1,
    kNcclSystemError = 2,
    kNcclInternalError = 3,
    kNcclInvalidArgument = 4,
    kNcclInvalidUsage = 5,
    kNcclRemoteError = 6,
    kNcclInProgress = 7,
};
enum NcclDataType : int { kNcclUint8 = 1, kNcclFloat32 = 7 };
struct NcclUniqueId {
    char internal[128];  // NCCL_UNIQUE_ID_BYTES
};
using NcclComm = void*;  // ncclComm_t: an opaque pointer

struct NcclLibrary {
    // dlopen(soname) and every symbol below. Errors: kFailedPrecondition naming the soname, dlerror()'s
    // reason and what to do ("tensor / pipeline parallelism across GPUs needs NCCL 2 (libnccl.so.2):
    // install libnccl2, add its directory to LD_LIBRARY_PATH, or use --tp-same-device to run every rank
    // on one GPU"); a missing symbol names it. The library stays loaded for the process's life.
    static Result<std::shared_ptr<const NcclLibrary>> open(const std::string& soname = "libnccl.so.2");

    std::string soname;
    int version = 0;  // ncclGetVersion: 22105 for 2.21.5
    // nccl.h's signatures, with ncclComm_t / cudaStream_t as void* and the enums as int.
    int (*get_version)(int* version) = nullptr;
    int (*get_unique_id)(NcclUniqueId* id) = nullptr;  // no GPU needed: starts the id's bootstrap root
    int (*comm_init_all)(NcclComm* comms, int ndev, const int* devlist) = nullptr;
    // Blocks until all nranks ranks of the id's group have called it (one rank per process or thread).
    int (*comm_init_rank)(NcclComm* comm, int nranks, NcclUniqueId id, int rank) = nullptr;
    int (*comm_destroy)(NcclComm comm) = nullptr;
    int (*comm_abort)(NcclComm comm) = nullptr;
    int (*comm_get_async_error)(NcclComm comm, int* async_error) = nullptr;
    const char* (*get_error_string)(int result) = nullptr;
    int (*all_gather)(const void* sendbuff, void* recvbuff, size_t sendcount, int datatype, NcclComm comm,
                      void* stream) = nullptr;
    int (*send)(const void* sendbuff, size_t count, int datatype, int peer, NcclComm comm,
                void* stream) = nullptr;
    int (*recv)(void* recvbuff, size_t count, int datatype, int peer, NcclComm comm, void* stream) = nullptr;
    int (*group_start)() = nullptr;
    int (*group_end)() = nullptr;

    // "ncclAllGather: unhandled cuda error (1)" for a failed call (kInternal); ok for kNcclSuccess.
    Status check(int result, const char* call) const;
    // A new unique id (ncclGetUniqueId; no GPU needed). The process that makes it hosts the group's
    // bootstrap root until every rank has joined. Errors: check's.
    Result<NcclUniqueId> unique_id() const;
};

}  // namespace volt::cuda
