// The HTTP/1.1 client side of the HTTP layer (Boost.Beast, blocking calls on a private io_context): one
// connection (kept alive between calls), a whole-body request, and a streamed one whose body (chunked or
// not) is handed over piece by piece as it arrives, plus an SSE splitter. For the router (issue 20), the
// load generator (voltllm bench serve) and the tests. Every call has a deadline (`timeout` per call, not
// per read). Tests: tests/unit/server/http_server_test.cc, tests/unit/bench_serve/bench_serve_test.cc.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace volt::server {

struct HttpClientResponse {
    int status = 0;
    std::vector<std::pair<std::string, std::string>> headers;
    std::string body;  // empty after stream()
    // The first value of `name` (case-insensitive), or "".
    std::string header(std::string_view name) const;
};

// Deadlines of one exchange when they should differ (the router's backends): connecting; from the
// request's first byte to the response's head (first byte); then between two pieces of the body.
// Zero: the client's `timeout` for that part.
struct HttpClientTimeouts {
    std::chrono::milliseconds connect{0}, first_byte{0}, idle{0};
};

class HttpClient {
  public:
    using Headers = std::vector<std::pair<std::string, std::string>>;
    HttpClient(std::string host, int port, std::chrono::milliseconds timeout = std::chrono::seconds(60));
    ~HttpClient();
    HttpClient(const HttpClient&) = delete;
    HttpClient& operator=(const HttpClient&) = delete;

    // One request, the whole answer. kUnavailable when the server cannot be reached or the exchange fails
    // (the connection is closed then; the next call reconnects), also past `timeout`.
    // A kept-alive connection the server closed while idle (llama-server closes idle ones) is retried:
    // when a request on a REUSED connection fails with end of stream, a reset or a broken pipe before a
    // single byte of the response came, the server cannot have processed it, so it is sent once more on a
    // new connection, whatever the method (as curl, urllib3 and httpx do). Never after a byte of the
    // response, never on a fresh connection, never twice; a retry that fails too says so in its message.
    // The retry's connect and exchange get deadlines of their own. Same rule for stream().
    Result<HttpClientResponse> request(const std::string& method, const std::string& target,
                                       const std::string& body = "", const Headers& headers = {},
                                       const std::string& content_type = "application/json");
    // As request(), but the body goes to `on_data` as it arrives (chunk framing removed); on_data false
    // stops reading (the connection is closed). `on_status`, when set, gets the status code once the
    // headers are in (before the first piece of the body); `on_head` the status and headers.
    // With set_timeouts() the deadlines are per part (connect, first byte, between pieces) instead of
    // one for the whole exchange. The retry of a closed idle connection (see request()) happens before
    // any callback is called, so the callbacks see one response.
    Result<HttpClientResponse> stream(
        const std::string& method, const std::string& target, const std::string& body, const Headers& headers,
        const std::function<bool(std::string_view)>& on_data,
        const std::function<void(int)>& on_status = nullptr,
        const std::function<void(const HttpClientResponse&)>& on_head = nullptr);
    void set_timeouts(const HttpClientTimeouts& t);

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// Splits an SSE byte stream into events: feed() calls `on_event` with the joined `data:` lines of each
// complete event (comments and other fields are skipped). Pieces may split anywhere.
// "http://host:port" (a trailing path or slash is ignored; the port defaults to 80) -> host and port.
// kInvalidArgument for another scheme or a bad port.
Result<std::pair<std::string, int>> parse_http_url(const std::string& url);

class SseSplitter {
  public:
    void feed(std::string_view bytes, const std::function<void(const std::string& data)>& on_event);

  private:
    std::string pending_;
};

}  // namespace volt::server
