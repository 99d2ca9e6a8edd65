#include "core/status.h"

#include <gtest/gtest.h>

namespace volt {

Result<int> half(int x) {
    if (x % 2 != 0) return invalid_argument("odd: " + std::to_string(x));
    return x / 2;
}

Result<int> quarter(int x) {
    VOLT_ASSIGN_OR_RETURN(int h, half(x));
    VOLT_ASSIGN_OR_RETURN(int q, half(h));
    return q;
}

TEST(Status, PropagatesTheFirstError) {
    EXPECT_EQ(*quarter(8), 2);
    auto r = quarter(6);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().to_string(), "InvalidArgument: odd: 3");
}

}  // namespace volt
