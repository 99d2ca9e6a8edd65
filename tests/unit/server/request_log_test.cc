// Tests of the X-Request-Id policy and the --enable-log-requests lines (src/server/request_log.h); expected
// strings written by hand.
#include "server/request_log.h"

#include <gtest/gtest.h>

namespace volt::server {
namespace {

TEST(RequestId, ClientIdIsHonoured) {
    EXPECT_EQ(choose_request_id("abc-123"), "abc-123");
    EXPECT_EQ(choose_request_id(std::string(128, 'x')), std::string(128, 'x'));
}

TEST(RequestId, BadOrMissingIdIsReplaced) {
    for (std::optional<std::string_view> bad :
         {std::optional<std::string_view>{}, std::optional<std::string_view>{""},
          std::optional<std::string_view>{"has space"}, std::optional<std::string_view>{"line\nbreak"}}) {
        std::string id = choose_request_id(bad);
        EXPECT_EQ(id.size(), 32u);
        EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
    }
    std::string too_long(129, 'x');
    EXPECT_NE(choose_request_id(too_long), too_long);
    EXPECT_NE(choose_request_id({}), choose_request_id({}));
}

TEST(RequestLog, ReceivedLine) {
    EXPECT_EQ(format_request_received("r1", "Hi 'you'\n", 5, R"({"max_tokens":8})", -1),
              R"(Received request r1: prompt: 'Hi \'you\'\n', params: {"max_tokens":8}, prompt_tokens: 5)");
    // --max-log-len 4 cuts "héllo" (h, 2-byte é, l, l, o) to 4 bytes "hél" rather than splitting é.
    EXPECT_EQ(format_request_received("r2", "h\xc3\xa9llo", 2, "{}", 4),
              "Received request r2: prompt: 'h\xc3\xa9l', params: {}, prompt_tokens: 2");
    EXPECT_EQ(format_request_received("r3", "h\xc3\xa9llo", 2, "{}", 2),
              "Received request r3: prompt: 'h', params: {}, prompt_tokens: 2");
    EXPECT_EQ(format_request_received("r4", "abc", 1, "{}", 0),
              "Received request r4: prompt: '', params: {}, prompt_tokens: 1");
}

TEST(RequestLog, FinishedLine) {
    EXPECT_EQ(
        format_request_finished("r1", "length", 12, 30, 1.23456),
        "Finished request r1: finish_reason: length, prompt_tokens: 12, generation_tokens: 30, e2e: 1.235 s");
}

}  // namespace
}  // namespace volt::server
