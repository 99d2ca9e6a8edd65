// The host side of the CUDA communicators that is theirs alone, without a GPU (cuda/nccl_library.h): NCCL
// is loaded by soname at run time and its absence is a clear error naming the soname and what to do. The
// ranks' rendezvous is the CPU's: tests/unit/cpu/host_rendezvous_test.cc.
#include <gtest/gtest.h>

#include "cuda/nccl_library.h"

namespace volt::cuda {
namespace {

TEST(NcclLibrary, AbsentSonameIsAClearError) {
    auto n = NcclLibrary::open("libvolt-absent-nccl.so.2");
    ASSERT_FALSE(n.is_ok());
    EXPECT_EQ(n.status().code(), StatusCode::kFailedPrecondition);
    const std::string& m = n.status().message();
    EXPECT_EQ(m.rfind("cannot load libvolt-absent-nccl.so.2 (", 0), 0u) << m;
    EXPECT_NE(
        m.find("tensor / pipeline parallelism across GPUs needs NCCL 2 (libnccl.so.2): install libnccl2, "
               "add its directory to LD_LIBRARY_PATH, or use --tp-same-device"),
        std::string::npos)
        << m;
}

TEST(NcclLibrary, ALibraryWithoutNcclsSymbolsIsRefusedNamingOne) {
    auto n = NcclLibrary::open("libm.so.6");
    ASSERT_FALSE(n.is_ok());
    EXPECT_EQ(n.status().message(),
              "libm.so.6 has no ncclGetVersion: NCCL 2.7 or later is needed (send / recv)");
}

// Where libnccl.so.2 is installed (the CUDA 13 toolkit's here), it loads without a GPU and reports its
// version; elsewhere the test says why it skips.
TEST(NcclLibrary, LoadsTheInstalledNccl) {
    auto n = NcclLibrary::open();
    if (!n.is_ok()) GTEST_SKIP() << n.status().to_string();
    EXPECT_GE((*n)->version, 2700);
    EXPECT_TRUE((*n)->check(kNcclSuccess, "x").is_ok());
    const Status bad = (*n)->check(kNcclInvalidArgument, "ncclAllGather");
    EXPECT_EQ(bad.code(), StatusCode::kInternal);
    EXPECT_EQ(bad.message().rfind("ncclAllGather: ", 0), 0u) << bad.message();
}

}  // namespace
}  // namespace volt::cuda
