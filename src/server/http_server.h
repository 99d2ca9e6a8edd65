// The HTTP/1.1 server of `voltllm serve` (and of the router, issue 20): Boost.Beast's request parser over
// Asio, event-driven. Design (docs/api.md "HTTP layer"):
// - Threads: one io_context run by a fixed pool of `io_threads` (default: the cores, 1..4). A connection is
//   a C++20 coroutine on its own strand; no thread per connection, none per stream.
// - Reading: an idle keep-alive connection may wait `idle_timeout` for its next request's first byte; from
//   there the whole header block must arrive within `header_timeout` and the whole body within
//   `body_timeout` (deadlines per request, not per read). The header block is limited to
//   `max_header_bytes` (431), the body to `max_body_bytes` (413, a declared Content-Length at once, a
//   chunked body as soon as it passes it). The API key (401), the route (404) and a declared length over
//   the limit are checked from the headers, before a byte of the body is read; those early answers close
//   the connection after a lingering drain, so that unread bytes are never taken for a request.
// - Framing is strict (Beast's parser): two Content-Length headers, Transfer-Encoding with Content-Length,
//   a Transfer-Encoding other than chunked, or a bad chunk size get 400 and a close.
// - A client that half-closes (shutdown(SHUT_WR)) after its request still gets its answer.
// - Connections past `max_connections` are answered 503 + OpenAI error JSON and closed at once (the
//   request is not read). The listen backlog is the system's maximum (/proc/sys/net/core/somaxconn).
// - Streaming (StreamBody): engine output reaches the connection through StreamBody::set_wake, which the
//   body calls from any thread (the engine's RequestHandle notify path) and which posts a pump to the
//   connection's strand; a timer pumps every `heartbeat` too (heartbeats, shutdown aborts). Backpressure:
//   nothing is pumped while a write is pending, so the server holds at most one pump's bytes per
//   connection plus what the body has not pulled yet; a write that has not completed within
//   `write_timeout` (a reader that stopped reading) cancels the body (its engine requests are aborted) and
//   closes the connection.
// - A StreamBody may delay the head (head_ready: the router's proxy) and end a response as broken
//   (complete: no last chunk, the connection closed).
// - Shutdown: stop accepting at once, wait up to shutdown_grace for admitted requests, then set aborting()
//   and wake every stream, wait up to 5 s more, then stop the io_context (every socket closes): run()
//   returns whatever the clients do. A shutdown() before run() is not lost.
// Tests: tests/unit/server/http_server_test.cc, tests/unit/server/http_hostile_test.cc, tests/api/*.mjs.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/status.h"
#include "server/api_error.h"

namespace volt::server {

struct HttpServerConfig {
    std::string host = "127.0.0.1";
    int port = 8000;      // 0: any free port (read it back with HttpServer::port())
    std::string api_key;  // empty: no key needed; else `Authorization: Bearer KEY` on all but open routes
    // Sequences admitted at once (running + waiting in the engine; a request weighs prompts x n): one
    // more gets 503.
    int64_t max_admitted = 512;
    int io_threads = 0;                  // threads running the io_context; 0: the cores, clamped to 1..4
    int64_t max_connections = 4096;      // open connections; one more is answered 503 and closed
    size_t max_header_bytes = 64 << 10;  // request line + headers; more: 431
    // Request bodies larger than this get 413 (a declared Content-Length at once, a chunked body as soon
    // as it passes the limit); never more than this is held in memory for one body.
    size_t max_body_bytes = 32u << 20;
    std::chrono::milliseconds idle_timeout{60000};    // keep-alive wait for a request's first byte
    std::chrono::milliseconds header_timeout{10000};  // first byte -> end of the header block
    std::chrono::milliseconds body_timeout{60000};    // end of the headers -> end of the body
    std::chrono::milliseconds write_timeout{30000};   // one write of a response (a reader that stopped)
    std::chrono::milliseconds heartbeat{100};         // a stream's pump tick (heartbeats, aborts)
    std::chrono::milliseconds shutdown_grace{5000};   // in-flight responses may finish within this
    int retry_after_seconds = 1;                      // the Retry-After header of a 503
};

// A request as a route sees it. Header names compare case-insensitively.
struct HttpRequest {
    std::string method, target, path;  // path: the target without its query
    std::vector<std::pair<std::string, std::string>> headers;
    std::string body;
    std::vector<std::string> matches;  // a regex route's groups; [0] is the whole path
    bool has_header(std::string_view name) const;
    // The first value of `name`, or "" when absent.
    std::string get_header_value(std::string_view name) const;
};

struct HttpResponse;

// The body of a streamed (chunked) response, driven by the connection's strand. All calls but the wake
// function come from that strand, one at a time.
class StreamBody {
  public:
    virtual ~StreamBody() = default;
    // Called once before the first pump: `wake` may be called from any thread, any number of times, to ask
    // for a pump soon (after the connection is gone it does nothing).
    virtual void set_wake(std::function<void()> wake) = 0;
    // Appends what is ready now to *out, without blocking; true when the body is complete (its last bytes
    // appended). `aborting`: the server is shutting down past its grace: abort and finish quickly.
    virtual bool pump(std::string* out, bool aborting) = 0;
    // The client is gone (a failed or timed-out write): free what the body holds. No pump follows.
    virtual void cancel() = 0;
    // Asked before the head is written, and again on every wake and heartbeat tick until it is true: a
    // body may set the response's status, content type and headers late (the router waits for its
    // backend's head, so that it can still retry elsewhere). Default: ready at once.
    virtual bool head_ready(HttpResponse* res) { return true; }
    // Asked after pump() returned true: false ends the response as broken, without the last chunk, and
    // closes the connection, so that the client sees a truncated message, never a complete-looking one.
    virtual bool complete() const { return true; }
};

struct HttpResponse {
    int status = 200;
    std::vector<std::pair<std::string, std::string>> headers;
    std::string content_type = "text/plain";
    std::string body;
    std::shared_ptr<StreamBody> stream;  // non-null: a chunked response driven by it; `body` unused
    bool close = false;                  // close the connection after this response
    void set_header(std::string name, std::string value);
    void set_content(std::string b, std::string type) {
        body = std::move(b);
        content_type = std::move(type);
    }
};

class HttpServer {
  public:
    using Handler = std::function<void(const HttpRequest&, HttpResponse&)>;
    // Holds one admission slot while it lives; keep it in the response's StreamBody.
    using Ticket = std::shared_ptr<void>;

    explicit HttpServer(HttpServerConfig config);
    ~HttpServer();
    HttpServer(const HttpServer&) = delete;
    HttpServer& operator=(const HttpServer&) = delete;

    // Routes; register them all before bind(). `path` is an exact path, or a regex when it contains '('.
    // `open`: no API key needed (only /health). Handlers run on an io thread: they must not block for
    // long (generation streams through StreamBody).
    void get(const std::string& path, Handler handler, bool open = false);
    // A POST route: the key, the route and a declared length are checked before the body is read; the
    // handler runs with the whole body.
    void post(const std::string& path, Handler handler);

    // Binds host:port with the system's maximum backlog. kUnavailable with the address when it cannot.
    Status bind();
    int port() const { return bound_port_; }
    // The backlog passed to listen() (the system's maximum).
    int backlog() const { return backlog_; }
    // Serves until shutdown() (blocking; the io threads are joined). Call after bind(); returns at once if
    // shutdown() came first.
    void run();
    // From any thread: see the header comment. Returns when run() may return.
    void shutdown();

    // Takes `weight` admission slots (the request's sequences), or nullptr when they do not fit or the
    // server is shutting down. `what` names the request in in_flight() until describe() renames it.
    Ticket try_admit(std::string what = "request", int64_t weight = 1);
    void describe(const Ticket& ticket, std::string what);
    // The admitted requests, oldest first, as try_admit()/describe() named them: what a forced exit logs.
    std::vector<std::string> in_flight() const;
    // Admitted sequences (what max_admitted bounds) and admitted requests.
    int64_t admitted() const { return admitted_.load(); }
    int64_t admitted_requests() const;
    int64_t connections() const { return connections_.load(); }
    // True once in-flight responses must abort their engine requests (shutdown past its grace).
    bool aborting() const { return aborting_.load(); }
    bool draining() const { return draining_.load(); }
    const HttpServerConfig& config() const { return config_; }

    // Writes `error` as OpenAI error JSON with its HTTP status (and Retry-After for 503).
    void send_error(HttpResponse& res, const ApiError& error) const;
    static void send_json(HttpResponse& res, int http_status, const nlohmann::json& body);

    // Bearer-token check in constant time (the key's length is not secret).
    bool authorized(std::string_view authorization_header) const;

    struct Impl;  // the Asio side (http_server.cc)

  private:
    struct Route {
        std::string method, path;
        std::optional<std::regex> re;
        Handler handler;
        bool open = false;
    };
    friend struct Impl;
    const Route* find_route(const std::string& method, const std::string& path,
                            std::vector<std::string>* matches) const;
    void release_admission(uint64_t id, int64_t weight);

    HttpServerConfig config_;
    std::vector<Route> routes_;
    std::unique_ptr<Impl> impl_;
    int bound_port_ = -1;
    int backlog_ = 0;
    std::atomic<int64_t> admitted_{0};
    std::atomic<int64_t> connections_{0};
    std::atomic<bool> draining_{false};
    std::atomic<bool> aborting_{false};
    std::atomic<bool> stopped_{false};
    mutable std::mutex mu_;
    std::condition_variable released_;
    uint64_t next_admission_ = 0;                // guarded by mu_
    std::map<uint64_t, std::string> in_flight_;  // admission id -> what; guarded by mu_
};

// The system's maximum listen backlog: /proc/sys/net/core/somaxconn, else SOMAXCONN.
int system_max_backlog();

}  // namespace volt::server
