// The one table from volt::StatusCode (and the HTTP-only failures: bad key, oversized body, unknown
// route) to an HTTP status and OpenAI error JSON {"error": {"message", "type", "param", "code"}}.
// docs/api.md prints the same table for users. Test: tests/unit/server/api_error_test.cc.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace volt::server {

// One error as the client sees it.
struct ApiError {
    int http_status = 500;
    std::string type;                  // "invalid_request_error", "authentication_error", "server_error"
    std::string message;               // says what was wrong, with the real numbers
    std::optional<std::string> param;  // the request field at fault ("messages[1].content"), if one is
    std::optional<std::string> code;   // machine-readable reason ("context_length_exceeded"), if one is

    // {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}; absent param/code are null.
    nlohmann::json to_json() const;
};

// The table: kInvalidArgument/kOutOfRange/kUnimplemented -> 400 invalid_request_error, kNotFound -> 404
// invalid_request_error, kResourceExhausted/kUnavailable/kFailedPrecondition -> 503 server_error,
// kDataLoss/kInternal -> 500 server_error. `status` must not be ok.
ApiError api_error_from_status(const Status& status, std::optional<std::string> param = std::nullopt,
                               std::optional<std::string> code = std::nullopt);

// The failures that have no StatusCode.
ApiError invalid_api_key_error();                                                    // 401
ApiError body_too_large_error(size_t limit_bytes);                                   // 413
ApiError route_not_found_error(const std::string& method, const std::string& path);  // 404

// At most `max_bytes` of `s`, cut at a UTF-8 character boundary, with "..." appended when cut. Error
// messages and log lines quote client input through this, never whole (a field can be megabytes).
inline constexpr size_t kQuoteBytes = 40;
std::string short_text(std::string_view s, size_t max_bytes = kQuoteBytes);

// A request-schema failure: a Status whose message names the field, plus that field, so the route can
// build ApiError{param}. Returned by the parsers in request.h.
struct FieldError {
    Status status;
    std::string param;
};

}  // namespace volt::server
