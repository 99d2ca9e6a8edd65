// VOLT_CHECK(cond) << "context": invariant checks that stay on in release builds and abort with
// file:line and the message. For bugs only; expected failures return a Status (status.h).
#pragma once

#include <sstream>
#include <string>

namespace volt::detail {

class CheckFailure {
  public:
    CheckFailure(const char* file, int line, const char* cond);
    [[noreturn]] ~CheckFailure();
    template <typename T>
    CheckFailure& operator<<(const T& v) {
        stream_ << v;
        return *this;
    }

  private:
    std::ostringstream stream_;
};

// Lets `VOLT_CHECK(c) << x;` be a single expression whose stream part only runs on failure.
struct Voidify {
    void operator&(CheckFailure&) {}
    void operator&(CheckFailure&&) {}  // a bare VOLT_CHECK(cond) with no message
};

}  // namespace volt::detail

#define VOLT_CHECK(cond) \
    (cond) ? (void)0 : ::volt::detail::Voidify() & ::volt::detail::CheckFailure(__FILE__, __LINE__, #cond)
#define VOLT_CHECK_EQ(a, b) VOLT_CHECK((a) == (b)) << #a " = " << (a) << ", " #b " = " << (b) << " "
#define VOLT_CHECK_LT(a, b) VOLT_CHECK((a) < (b)) << #a " = " << (a) << ", " #b " = " << (b) << " "
#define VOLT_CHECK_LE(a, b) VOLT_CHECK((a) <= (b)) << #a " = " << (a) << ", " #b " = " << (b) << " "
