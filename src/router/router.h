// `voltllm router`: an OpenAI-compatible proxy on one port over several `voltllm serve` backends
// (docs/operations.md). The front is the HTTP layer's server (http_server.h: the API key is checked
// here, before the body; SIGTERM drains); each proxied request is forwarded by a worker thread with the
// HTTP layer's client, its answer passed through piece by piece (StreamBody; the head waits for the
// backend's, head_ready). Routing: least outstanding requests among the admitted backends (ties in
// turn), or with prefix affinity the rendezvous-hash winner of the conversation's first messages (or the
// prompt's first bytes) among them. Health: an active check of GET /health per backend every
// health_interval (re-admission after readmit_after good ones in a row, eject_min after the ejection at
// the earliest); passive ejection on a connect error, a timeout (connect, first byte, idle) or a 5xx.
// A request is retried on another backend only while nothing of it has reached the client (the
// backend's head is relayed together with the first bytes of its body); a backend failing after that ends an
// SSE stream with an error event then [DONE], and any other body as a broken chunked message (never a
// complete-looking truncation). GET /v1/models is the union of the admitted backends' lists; GET /metrics is
// Prometheus text per backend; GET /health is 200 while a backend is admitted. Tests:
// tests/unit/router/router_test.cc, tests/api/chaos.test.mjs.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "server/http_server.h"

namespace volt::router {

using std::chrono::milliseconds;

struct RouterConfig {
    server::HttpServerConfig http;      // the front: host, port, api_key, shutdown_grace, limits
    std::vector<std::string> backends;  // http://host:port
    milliseconds connect_timeout{2000};
    milliseconds first_byte_timeout{60000};  // request sent -> the backend's head
    milliseconds idle_timeout{120000};       // between two pieces of a backend's body
    milliseconds health_interval{1000};
    milliseconds health_timeout{2000};
    milliseconds eject_min{2000};  // an ejected backend stays out at least this long
    int readmit_after = 2;         // good health checks in a row before re-admission
    bool prefix_affinity = false;
    size_t affinity_bytes = 1024;  // bytes of the conversation's first messages (or the prompt) hashed
    // Sent to the backends as `Authorization: Bearer KEY`; empty: the client's Authorization header is
    // forwarded as it came.
    std::string backend_api_key;
    int max_attempts = 0;  // backends one request may try; 0: each backend once
};

// The affinity key of a request body: the first two messages of a chat (system/developer + the first
// user turn: what a conversation keeps), or the prompt of a completion, cut to `bytes`. "" when the body
// has neither (no affinity: least outstanding).
std::string affinity_key(const std::string& body, size_t bytes);

class Router {
  public:
    explicit Router(RouterConfig config);
    ~Router();
    Router(const Router&) = delete;
    Router& operator=(const Router&) = delete;

    // Binds the front (kUnavailable when it cannot) and starts the health checks.
    Status start();
    int port() const { return server_.port(); }
    // Serves until shutdown(); then waits (bounded) for the forwarding workers.
    void run();
    // From any thread or a signal thread: stop accepting, drain (shutdown_grace), stop.
    void shutdown();

    // For tests and /metrics: the state of backend i.
    struct BackendView {
        std::string url;
        bool up = false;
        int64_t outstanding = 0, requests = 0, failures = 0, ejections = 0;
        std::string last_error;
    };
    std::vector<BackendView> backends() const;
    std::string metrics_text() const;

    struct Backend;  // router.cc
    struct Proxy;    // one forwarded request (router.cc)

  private:
    Backend* pick(const std::vector<Backend*>& tried, const std::string& key);
    void eject(Backend* b, const std::string& why);
    void health_loop(Backend* b);
    void forward(std::shared_ptr<Proxy> proxy);
    void proxy_route(const server::HttpRequest& req, server::HttpResponse& res);

    RouterConfig config_;
    server::HttpServer server_;
    std::vector<std::unique_ptr<Backend>> backends_;
    std::vector<std::thread> health_threads_;
    std::atomic<bool> stopping_{false};
    std::mutex stop_mu_;
    std::condition_variable stop_cv_;
    std::atomic<uint64_t> turn_{0};
    std::atomic<int64_t> workers_{0};
    std::atomic<int64_t> requests_{0}, retries_{0}, unserved_{0}, midstream_failures_{0};
};

}  // namespace volt::router
