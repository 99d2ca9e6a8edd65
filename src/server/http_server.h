// The HTTP layer of `voltllm serve` on cpp-httplib 0.11.4 (Debian): a worker pool sized for every
// admitted request plus slack (httplib's own task queue cannot refuse work), our bounded admission
// (503 + Retry-After when running + queued requests reach the limit), the API key check (from the headers,
// before any body byte is read), the body size limit (413) enforced while the body is read, chunked
// bodies included, OpenAI error JSON for every failure, and a graceful shutdown (stop admitting, let
// in-flight responses finish for a grace period, then ask them to abort, then stop) that a stop requested
// before run() cannot miss. Routes live in openai_routes.h. Tests: tests/unit/server/http_server_test.cc,
// tests/api/hostile.test.mjs, tests/api/shutdown.test.mjs.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "server/api_error.h"

namespace volt::server {

struct HttpServerConfig {
    std::string host = "127.0.0.1";
    int port = 8000;      // 0: any free port (read it back with HttpServer::port())
    std::string api_key;  // empty: no key needed; else `Authorization: Bearer KEY` on all but /health
    // Generation requests admitted at once (running + waiting in the engine); one more gets 503.
    int64_t max_admitted = 512;
    // Worker threads; 0: max_admitted + 32 (each admitted response holds one thread while it streams; the
    // slack serves /health, /v1/models, idle keep-alive connections and the 503 answers).
    int num_threads = 0;
    // Request bodies larger than this get 413 (a declared Content-Length at once, a chunked body as soon
    // as it passes the limit); never more than this is held in memory for one body.
    size_t max_body_bytes = 32u << 20;
    std::chrono::milliseconds shutdown_grace{5000};  // in-flight responses may finish within this
    int retry_after_seconds = 1;                     // the Retry-After header of a 503
};

// The byte sink of one response as a generation loop sees it; httplib's DataSink in production, a string
// in tests. write() false means the client is gone (or the write failed): stop and abort.
class ResponseSink {
  public:
    virtual ~ResponseSink() = default;
    virtual bool write(std::string_view bytes) = 0;
    // False when the client is known to be gone. Cheap; called every poll step.
    virtual bool alive() = 0;
};

// httplib::Server whose listening socket can be closed whether or not the accept loop has started.
// httplib's own stop() does nothing until listen_after_bind() has set its running flag, so a stop asked for
// just after bind() was lost and the server then served until SIGKILL (issue 11).
class Listener : public httplib::Server {
  public:
    // Closes the listening socket; later calls do nothing. A running accept loop ends at once; one that has
    // not started yet returns as soon as it starts. Thread-safe (the socket is swapped out atomically).
    void close_listener();
};

class HttpServer {
  public:
    using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;
    // Holds one admission slot while it lives; keep it in the response's content provider.
    using Ticket = std::shared_ptr<void>;

    explicit HttpServer(HttpServerConfig config);
    ~HttpServer();
    HttpServer(const HttpServer&) = delete;
    HttpServer& operator=(const HttpServer&) = delete;

    // Routes; register them all before bind(). `open`: no API key needed (only /health).
    void get(const std::string& path, Handler handler, bool open = false);
    // A POST route. Before a byte of the body is read, a request without the API key gets 401 and one whose
    // Content-Length is over max_body_bytes gets 413; then the body (Content-Length or chunked) is read
    // into req.body, 413 as soon as it passes max_body_bytes and 400 when it cannot be read; `handler` runs
    // only with the whole body. Those early answers are written first; then what the client still sends is
    // dropped for up to 2 s (at most 1 GiB), so that a client still sending reads the answer rather than a
    // reset; then the connection is closed: unread bytes are never taken for a request.
    void post(const std::string& path, Handler handler);

    // Binds host:port (and adds the catch-all routes: any other POST/PUT/PATCH/DELETE gets 404 without
    // its body being read). kUnavailable with the address when it cannot.
    Status bind();
    int port() const { return bound_port_; }
    // Serves until shutdown() (blocking). Call after bind(); returns at once if shutdown() came first.
    void run();
    // From any thread (a signal-waiting thread): stop admitting, wait up to shutdown_grace for admitted
    // responses, set aborting(), wait for them to end, close the listener. Returns when run() may return
    // (run() still waits for the worker threads to finish their connections). Also before run() or
    // concurrently with its start: the stop is never lost.
    void shutdown();

    // Takes an admission slot, or nullptr when full or shutting down. `what` names the request in
    // in_flight() until describe() renames it.
    Ticket try_admit(std::string what = "request");
    // Renames an admitted request in in_flight() (with its response id once that is known).
    void describe(const Ticket& ticket, std::string what);
    // The admitted requests, oldest first, as try_admit()/describe() named them: what a forced exit logs.
    std::vector<std::string> in_flight() const;
    int64_t admitted() const { return admitted_.load(); }
    // True once in-flight responses must abort their engine requests (shutdown past its grace).
    bool aborting() const { return aborting_.load(); }
    bool draining() const { return draining_.load(); }

    // Writes `error` as OpenAI error JSON with its HTTP status (and Retry-After for 503).
    void send_error(httplib::Response& res, const ApiError& error) const;
    static void send_json(httplib::Response& res, int http_status, const nlohmann::json& body);

  private:
    bool authorized(const httplib::Request& req) const;
    void release_admission(uint64_t id);
    // Reads the body of a POST into req.body within max_body_bytes, stopping as soon as it passes them.
    // nullopt: read whole; else the error to answer (413, 400) with answer_and_close.
    std::optional<ApiError> read_body(const httplib::Request& req, const httplib::ContentReader& reader);
    // Answers `error` through a content provider that writes it, then (when `reader`) reads and drops what
    // the client still sends (a lingering close, bounded in bytes and time), then makes httplib close
    // the connection. See post().
    void answer_and_close(const httplib::Request& req, httplib::Response& res, const ApiError& error,
                          const httplib::ContentReader* reader);

    HttpServerConfig config_;
    Listener http_;
    int bound_port_ = -1;
    std::atomic<int64_t> admitted_{0};
    std::atomic<bool> draining_{false};
    std::atomic<bool> aborting_{false};
    mutable std::mutex mu_;
    std::condition_variable released_;
    uint64_t next_admission_ = 0;                // guarded by mu_
    std::map<uint64_t, std::string> in_flight_;  // admission id -> what; guarded by mu_
};

// Adapts httplib's DataSink to ResponseSink. alive(): DataSink::is_writable (false after a failed write).
class DataSinkAdapter : public ResponseSink {
  public:
    explicit DataSinkAdapter(httplib::DataSink& sink) : sink_(sink) {}
    bool write(std::string_view bytes) override;
    bool alive() override { return sink_.is_writable(); }

  private:
    httplib::DataSink& sink_;
};

}  // namespace volt::server
