// .npy round trip and the exact header bytes numpy writes (numpy.lib.format, version 1.0: magic,
// header dict padded with spaces to a multiple of 64 bytes, ending in a newline).
#include "core/npy.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>

namespace volt {

TEST(Npy, HeaderIsWhatNumpyWrites) {
    const std::string path = ::testing::TempDir() + "/a.npy";
    const float v[6] = {1, 2, 3, 4, 5, 6};
    ASSERT_TRUE(write_npy_f32(path, v, {2, 3}).is_ok());
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string s = ss.str();
    // np.save of a float32 (2, 3) array writes exactly this 128-byte-aligned header (numpy >= 1.x).
    const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    ASSERT_EQ(s.size(), 128u + 24u);  // 10 + 59 + 1 bytes padded to 128
    EXPECT_EQ(s.substr(0, 6), "\x93NUMPY");
    EXPECT_EQ(s.substr(10, dict.size()), dict);
    EXPECT_EQ(s[127], '\n');
    auto r = read_npy(path);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(r->shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(r->f32()[5], 6.0f);
}

TEST(Npy, OneDimensionalShapeHasTrailingComma) {
    const std::string path = ::testing::TempDir() + "/b.npy";
    const float v[2] = {1, 2};
    ASSERT_TRUE(write_npy_f32(path, v, {2}).is_ok());
    auto r = read_npy(path);
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ(r->shape, (std::vector<int64_t>{2}));
}

}  // namespace volt
