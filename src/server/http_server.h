// The HTTP layer of `voltllm serve` on cpp-httplib 0.11.4 (Debian): a worker pool sized for every
// admitted request plus slack (httplib's own task queue cannot refuse work), our bounded admission
// (503 + Retry-After when running + queued requests reach the limit), the API key check, the body size
// limit (413), OpenAI error JSON for every failure, and a graceful shutdown (stop admitting, let in-flight
// responses finish for a grace period, then ask them to abort, then stop). Routes live in
// openai_routes.h. Test: tests/unit/server/http_server_test.cc.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

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

class HttpServer {
  public:
    using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;
    // Holds one admission slot while it lives; keep it in the response's content provider.
    using Ticket = std::shared_ptr<void>;

    explicit HttpServer(HttpServerConfig config);
    ~HttpServer();
    HttpServer(const HttpServer&) = delete;
    HttpServer& operator=(const HttpServer&) = delete;

    // `open`: no API key needed (only /health).
    void get(const std::string& path, Handler handler, bool open = false);
    void post(const std::string& path, Handler handler);

    // Binds host:port. kUnavailable with the address when it cannot.
    Status bind();
    int port() const { return bound_port_; }
    // Serves until shutdown() (blocking). Call after bind().
    void run();
    // From any thread (a signal-waiting thread): stop admitting, wait up to shutdown_grace for admitted
    // responses, set aborting(), wait for them to end, stop the listener. Returns when run() may return.
    void shutdown();

    // Takes an admission slot, or nullptr when full or shutting down.
    Ticket try_admit();
    int64_t admitted() const { return admitted_.load(); }
    // True once in-flight responses must abort their engine requests (shutdown past its grace).
    bool aborting() const { return aborting_.load(); }
    bool draining() const { return draining_.load(); }

    // Writes `error` as OpenAI error JSON with its HTTP status (and Retry-After for 503).
    void send_error(httplib::Response& res, const ApiError& error) const;
    static void send_json(httplib::Response& res, int http_status, const nlohmann::json& body);

  private:
    bool authorized(const httplib::Request& req) const;
    void release_admission();

    HttpServerConfig config_;
    httplib::Server http_;
    int bound_port_ = -1;
    std::atomic<int64_t> admitted_{0};
    std::atomic<bool> draining_{false};
    std::atomic<bool> aborting_{false};
    std::mutex mu_;
    std::condition_variable released_;
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
