// Status -> HTTP status + OpenAI error type; see api_error.h for the table.
#include "server/api_error.h"

namespace volt::server {

nlohmann::json ApiError::to_json() const {
    nlohmann::json e = {{"message", message},
                        {"type", type},
                        {"param", param ? nlohmann::json(*param) : nlohmann::json(nullptr)},
                        {"code", code ? nlohmann::json(*code) : nlohmann::json(nullptr)}};
    return {{"error", std::move(e)}};
}

ApiError api_error_from_status(const Status& status, std::optional<std::string> param,
                               std::optional<std::string> code) {
    ApiError e;
    e.message = status.message();
    e.param = std::move(param);
    e.code = std::move(code);
    switch (status.code()) {
        case StatusCode::kInvalidArgument:
        case StatusCode::kOutOfRange:
        case StatusCode::kUnimplemented:
            e.http_status = 400;
            e.type = "invalid_request_error";
            break;
        case StatusCode::kNotFound:
            e.http_status = 404;
            e.type = "invalid_request_error";
            break;
        case StatusCode::kResourceExhausted:
        case StatusCode::kUnavailable:
        case StatusCode::kFailedPrecondition:
            e.http_status = 503;
            e.type = "server_error";
            break;
        case StatusCode::kOk:  // a caller bug; still answer something a client can read
        case StatusCode::kDataLoss:
        case StatusCode::kInternal:
            e.http_status = 500;
            e.type = "server_error";
            break;
    }
    return e;
}

std::string short_text(std::string_view s, size_t max_bytes) {
    if (s.size() <= max_bytes) return std::string(s);
    size_t n = max_bytes;
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;  // not inside a character
    return std::string(s.substr(0, n)) + "...";
}

ApiError invalid_api_key_error() {
    return ApiError{401, "authentication_error", "Incorrect API key provided.", std::nullopt,
                    std::string("invalid_api_key")};
}

ApiError body_too_large_error(size_t limit_bytes) {
    return ApiError{413, "invalid_request_error",
                    "Request body too large: the limit is " + std::to_string(limit_bytes) + " bytes.",
                    std::nullopt, std::string("request_too_large")};
}

ApiError route_not_found_error(const std::string& method, const std::string& path) {
    return ApiError{404, "invalid_request_error", "No route " + method + " " + path + ".", std::nullopt,
                    std::string("unknown_url")};
}

}  // namespace volt::server
