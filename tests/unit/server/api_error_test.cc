// The error table: StatusCode -> HTTP status + OpenAI error type, and the JSON shape the openai clients
// parse ({"error": {"message", "type", "param", "code"}}, absent fields as null).
#include "server/api_error.h"

#include <gtest/gtest.h>

namespace volt::server {

TEST(ApiError, TableMapsEveryStatusCode) {
    struct Row {
        StatusCode code;
        int http;
        const char* type;
    };
    // Expected values from the OpenAI API's error codes page: 400 bad request, 404 not found,
    // 503 overloaded, 500 server error.
    const Row rows[] = {
        {StatusCode::kInvalidArgument, 400, "invalid_request_error"},
        {StatusCode::kOutOfRange, 400, "invalid_request_error"},
        {StatusCode::kUnimplemented, 400, "invalid_request_error"},
        {StatusCode::kNotFound, 404, "invalid_request_error"},
        {StatusCode::kResourceExhausted, 503, "server_error"},
        {StatusCode::kUnavailable, 503, "server_error"},
        {StatusCode::kFailedPrecondition, 503, "server_error"},
        {StatusCode::kDataLoss, 500, "server_error"},
        {StatusCode::kInternal, 500, "server_error"},
    };
    for (const Row& row : rows) {
        ApiError e = api_error_from_status(Status(row.code, "m"));
        EXPECT_EQ(e.http_status, row.http) << status_code_name(row.code);
        EXPECT_EQ(e.type, row.type) << status_code_name(row.code);
        EXPECT_EQ(e.message, "m");
    }
}

TEST(ApiError, JsonHasAllFourFieldsWithNulls) {
    ApiError e = api_error_from_status(out_of_range("too long"), std::string("messages"),
                                       std::string("context_length_exceeded"));
    EXPECT_EQ(e.to_json(), nlohmann::json::parse(R"({"error": {"message": "too long", "type":
        "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}})"));
    ApiError plain = api_error_from_status(internal_error("x"));
    EXPECT_TRUE(plain.to_json()["error"]["param"].is_null());
    EXPECT_TRUE(plain.to_json()["error"]["code"].is_null());
}

TEST(ApiError, HttpOnlyFailures) {
    EXPECT_EQ(invalid_api_key_error().http_status, 401);
    EXPECT_EQ(invalid_api_key_error().code, "invalid_api_key");
    ApiError big = body_too_large_error(1024);
    EXPECT_EQ(big.http_status, 413);
    EXPECT_NE(big.message.find("1024"), std::string::npos);
    EXPECT_EQ(route_not_found_error("GET", "/nope").http_status, 404);
}

}  // namespace volt::server
