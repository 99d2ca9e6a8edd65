// One libFuzzer harness per route's body parser (parse_json_body + the route's schema parser): any bytes
// must give a request or an ApiError with a 4xx status, never a crash, UB (UBSan), a leak (ASan) or an
// exception. The error is serialised as the server does (invalid UTF-8 quoted from the body becomes
// U+FFFD: HttpServer::send_error). The route is the macro's argument.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>
#include <variant>

#include "server/request.h"

#define VOLT_REQUEST_FUZZER(parse)                                                             \
    extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {                  \
        std::string body(reinterpret_cast<const char*>(data), size);                           \
        auto json = volt::server::parse_json_body(body);                                       \
        if (auto* e = std::get_if<volt::server::ApiError>(&json)) {                            \
            if (e->http_status != 400) std::abort();                                           \
            (void)e->to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); \
            return 0;                                                                          \
        }                                                                                      \
        auto parsed = parse(std::get<volt::server::RequestJson>(json));                        \
        if (auto* e = std::get_if<volt::server::ApiError>(&parsed)) {                          \
            if (e->http_status < 400 || e->http_status >= 500) std::abort();                   \
            (void)e->to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); \
        }                                                                                      \
        return 0;                                                                              \
    }
