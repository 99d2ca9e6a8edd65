// The router: backends, health, routing, forwarding; see router.h.
#include "router/router.h"

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>

#include "core/check.h"
#include "core/logging.h"
#include "server/http_client.h"

namespace volt::router {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Router::Backend {
    std::string url, host;
    int port = 0;
    std::atomic<int64_t> outstanding{0}, requests{0}, failures{0}, ejections{0};
    mutable std::mutex mu;
    bool up = false;       // admitted: requests go here
    bool ever_up = false;  // the first good check admits at once; after an ejection, readmit_after
    int good_checks = 0;   // in a row
    Clock::time_point ejected_at{};
    std::string last_error;
    json models = json::array();  // its /v1/models "data", from the last good check that fetched it
};

// One forwarded request: what the worker thread hands to the client's connection. All fields under mu.
struct Router::Proxy {
    std::mutex mu;
    std::condition_variable cv;
    std::function<void()> wake;
    bool head = false;  // status, type and headers are set: the head may go out
    int status = 0;
    std::string content_type;
    std::vector<std::pair<std::string, std::string>> headers;
    std::string buf;  // body bytes not pumped yet
    bool done = false, complete = true, cancelled = false;
    // What the worker needs.
    std::string target, body, key;
    server::HttpClient::Headers forward_headers;
    server::HttpServer::Ticket ticket;

    void notify() {
        std::function<void()> w;
        {
            std::lock_guard<std::mutex> l(mu);
            w = wake;
        }
        if (w) w();
    }
    void finish(int st, std::string type, std::string text, bool ok) {
        {
            std::lock_guard<std::mutex> l(mu);
            if (!head) {
                head = true;
                status = st;
                content_type = std::move(type);
            }
            buf += text;
            done = true;
            complete = ok;
        }
        notify();
    }
};

namespace {

constexpr size_t kMaxBuffered = 1 << 20;  // body bytes held for a slow client before the worker waits

class ProxyBody : public server::StreamBody {
  public:
    explicit ProxyBody(std::shared_ptr<Router::Proxy> p) : p_(std::move(p)) {}
    void set_wake(std::function<void()> wake) override {
        std::lock_guard<std::mutex> l(p_->mu);
        p_->wake = std::move(wake);
    }
    bool head_ready(server::HttpResponse* res) override {
        std::lock_guard<std::mutex> l(p_->mu);
        if (!p_->head) return false;
        res->status = p_->status;
        if (!p_->content_type.empty()) res->content_type = p_->content_type;
        for (const auto& [k, v] : p_->headers) res->set_header(k, v);
        return true;
    }
    bool pump(std::string* out, bool aborting) override {
        std::lock_guard<std::mutex> l(p_->mu);
        out->append(p_->buf);
        p_->buf.clear();
        p_->cv.notify_all();
        if (aborting && !p_->done) {
            // The router's drain is over: cut the stream (broken, never complete-looking).
            p_->cancelled = true;
            p_->done = true;
            p_->complete = false;
        }
        return p_->done;
    }
    void cancel() override {
        std::lock_guard<std::mutex> l(p_->mu);
        p_->cancelled = true;
        p_->cv.notify_all();
    }
    bool complete() const override {
        std::lock_guard<std::mutex> l(p_->mu);
        return p_->complete;
    }

  private:
    std::shared_ptr<Router::Proxy> p_;
};

json error_json(const std::string& message, const std::string& code) {
    return {{"error", {{"message", message}, {"type", "server_error"}, {"param", nullptr}, {"code", code}}}};
}

std::string escape_label(const std::string& s) {
    std::string out;
    for (char c : s) {
        if (c == '"' || c == '\\') out += '\\';
        out += c;
    }
    return out;
}

uint64_t fnv1a(const std::string& a, const std::string& b) {
    uint64_t h = 1469598103934665603ull;
    for (const std::string* s : {&a, &b}) {
        for (unsigned char c : *s) h = (h ^ c) * 1099511628211ull;
        h = (h ^ 0xff) * 1099511628211ull;
    }
    return h;
}

}  // namespace

std::string affinity_key(const std::string& body, size_t bytes) {
    json j = json::parse(body, nullptr, false);
    if (!j.is_object()) return "";
    std::string key;
    if (j.contains("messages") && j["messages"].is_array()) {
        json first = json::array();
        for (size_t i = 0; i < std::min<size_t>(2, j["messages"].size()); ++i)
            first.push_back(j["messages"][i]);
        key = first.dump();
    } else if (j.contains("prompt")) {
        key = j["prompt"].is_string() ? j["prompt"].get<std::string>() : j["prompt"].dump();
    }
    if (key.size() > bytes) key.resize(bytes);
    return key;
}

Router::Router(RouterConfig config) : config_(std::move(config)), server_(config_.http) {
    for (const std::string& url : config_.backends) {
        auto b = std::make_unique<Backend>();
        b->url = url;
        auto hp = server::parse_http_url(url);
        VOLT_CHECK(hp.is_ok()) << hp.status().message();
        b->host = hp->first == "localhost" ? "127.0.0.1" : hp->first;
        b->port = hp->second;
        backends_.push_back(std::move(b));
    }
    for (const char* path : {"/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize"}) {
        server_.post(path,
                     [this](const server::HttpRequest& q, server::HttpResponse& r) { proxy_route(q, r); });
    }
    server_.get("/v1/models", [this](const server::HttpRequest&, server::HttpResponse& res) {
        json data = json::array();
        std::set<std::string> seen;
        bool any_up = false;
        for (const auto& b : backends_) {
            std::lock_guard<std::mutex> l(b->mu);
            any_up = any_up || b->up;
        }
        // No backend admitted now (the router's start with its backends still loading, or every backend
        // ejected): 503, as `voltllm serve` answers while it loads and as /health says, not a 200 (empty,
        // or the last known list) that a client polling /v1/models for readiness would take for "ready"
        // (docs/operations.md).
        if (!any_up) {
            return server_.send_error(
                res, server::ApiError{503, "server_error",
                                      "No backend is admitted (loading, ejected or unreachable); GET /health "
                                      "turns 200 with the next.",
                                      std::nullopt, std::string("no_backend")});
        }
        for (const auto& b : backends_) {
            std::lock_guard<std::mutex> l(b->mu);
            if (!b->up) continue;
            for (const json& m : b->models) {
                const std::string id = m.value("id", "");
                if (!id.empty() && seen.insert(id).second) data.push_back(m);
            }
        }
        server::HttpServer::send_json(res, 200, {{"object", "list"}, {"data", data}});
    });
    server_.get(
        "/health",
        [this](const server::HttpRequest&, server::HttpResponse& res) {
            int64_t up = 0;
            for (const auto& b : backends_) {
                std::lock_guard<std::mutex> l(b->mu);
                up += b->up ? 1 : 0;
            }
            const bool ok = up > 0 && !server_.draining();
            server::HttpServer::send_json(res, ok ? 200 : 503,
                                          {{"status", server_.draining() ? "shutting down"
                                                      : ok               ? "ok"
                                                                         : "no backend admitted"},
                                           {"backends_up", up},
                                           {"backends", static_cast<int64_t>(backends_.size())}});
        },
        true);
    server_.get("/metrics", [this](const server::HttpRequest&, server::HttpResponse& res) {
        res.set_content(metrics_text(), "text/plain; version=0.0.4");
    });
}

Router::~Router() {
    shutdown();
    {
        std::lock_guard<std::mutex> l(stop_mu_);
        stopping_.store(true);
    }
    stop_cv_.notify_all();
    for (std::thread& t : health_threads_) {
        if (t.joinable()) t.join();
    }
}

Status Router::start() {
    if (backends_.empty()) return invalid_argument("no backend: give --backend URL or --launch N");
    VOLT_RETURN_IF_ERROR(server_.bind());
    for (const auto& b : backends_) {
        Backend* raw = b.get();
        health_threads_.emplace_back([this, raw] { health_loop(raw); });
    }
    return Status::ok();
}

void Router::run() {
    server_.run();
    {
        std::lock_guard<std::mutex> l(stop_mu_);
        stopping_.store(true);
    }
    stop_cv_.notify_all();
    for (std::thread& t : health_threads_) {
        if (t.joinable()) t.join();
    }
    // Workers end when their backend answer ends or their client is gone; bounded by the timeouts.
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (workers_.load() > 0 && Clock::now() < deadline) std::this_thread::sleep_for(milliseconds(20));
}

void Router::shutdown() { server_.shutdown(); }

void Router::eject(Backend* b, const std::string& why) {
    std::lock_guard<std::mutex> l(b->mu);
    b->last_error = why;
    b->good_checks = 0;
    if (!b->up) return;
    b->up = false;
    b->ejected_at = Clock::now();
    ++b->ejections;
    spdlog::warn("router: backend {} ejected: {}", b->url, why);
}

void Router::health_loop(Backend* b) {
    int64_t checks = 0;
    while (!stopping_.load()) {
        server::HttpClient c(b->host, b->port, config_.health_timeout);
        auto h = c.request("GET", "/health");
        const bool good = h && h->status == 200;
        if (good) {
            // The model list, on the first good check after a bad one and every 30th.
            bool fetch;
            {
                std::lock_guard<std::mutex> l(b->mu);
                fetch = !b->up || b->models.empty() || checks % 30 == 0;
            }
            if (fetch) {
                server::HttpClient::Headers headers;
                const std::string& key =
                    config_.backend_api_key.empty() ? config_.http.api_key : config_.backend_api_key;
                if (!key.empty()) headers.emplace_back("Authorization", "Bearer " + key);
                auto m = c.request("GET", "/v1/models", "", headers);
                if (m && m->status == 200) {
                    json j = json::parse(m->body, nullptr, false);
                    if (j.is_object() && j.contains("data") && j["data"].is_array()) {
                        std::lock_guard<std::mutex> l(b->mu);
                        b->models = j["data"];
                    }
                }
            }
            std::lock_guard<std::mutex> l(b->mu);
            ++b->good_checks;
            const bool may = !b->ever_up || (b->good_checks >= config_.readmit_after &&
                                             Clock::now() - b->ejected_at >= config_.eject_min);
            if (!b->up && may) {
                b->up = true;
                spdlog::info("router: backend {} {}", b->url, b->ever_up ? "re-admitted" : "admitted");
                b->ever_up = true;
            }
        } else {
            eject(b,
                  h ? "/health answered " + std::to_string(h->status) : "/health: " + h.status().message());
        }
        ++checks;
        std::unique_lock<std::mutex> l(stop_mu_);
        stop_cv_.wait_for(l, config_.health_interval, [&] { return stopping_.load(); });
    }
}

Router::Backend* Router::pick(const std::vector<Backend*>& tried, const std::string& key) {
    std::vector<Backend*> up, rest;
    for (const auto& b : backends_) {
        if (std::find(tried.begin(), tried.end(), b.get()) != tried.end()) continue;
        std::lock_guard<std::mutex> l(b->mu);
        (b->up ? up : rest).push_back(b.get());
    }
    // No admitted backend left: one that is out may still answer (better than failing at once).
    std::vector<Backend*>& from = up.empty() ? rest : up;
    if (from.empty()) return nullptr;
    if (config_.prefix_affinity && !key.empty()) {
        return *std::max_element(from.begin(), from.end(), [&](Backend* a, Backend* b) {
            return fnv1a(key, a->url) < fnv1a(key, b->url);
        });
    }
    const size_t start = static_cast<size_t>(turn_.fetch_add(1) % from.size());
    Backend* best = nullptr;
    for (size_t i = 0; i < from.size(); ++i) {
        Backend* b = from[(start + i) % from.size()];
        if (!best || b->outstanding.load() < best->outstanding.load()) best = b;
    }
    return best;
}

void Router::proxy_route(const server::HttpRequest& req, server::HttpResponse& res) {
    server::HttpServer::Ticket ticket = server_.try_admit(req.path);
    if (!ticket) {
        server_.send_error(res,
                           server::ApiError{503, "server_error",
                                            server_.draining() ? "The router is shutting down."
                                                               : "The router is at capacity; retry later.",
                                            std::nullopt, std::string("queue_full")});
        return;
    }
    auto p = std::make_shared<Proxy>();
    p->target = req.target;
    p->body = req.body;
    p->ticket = std::move(ticket);
    if (config_.prefix_affinity) p->key = affinity_key(req.body, config_.affinity_bytes);
    p->forward_headers.emplace_back("Content-Type", "application/json");
    if (!config_.backend_api_key.empty()) {
        p->forward_headers.emplace_back("Authorization", "Bearer " + config_.backend_api_key);
    } else if (req.has_header("Authorization")) {
        p->forward_headers.emplace_back("Authorization", req.get_header_value("Authorization"));
    }
    if (req.has_header("Accept")) p->forward_headers.emplace_back("Accept", req.get_header_value("Accept"));
    ++requests_;
    ++workers_;
    std::thread([this, p] {
        forward(p);
        --workers_;
    }).detach();
    res.stream = std::make_shared<ProxyBody>(p);
}

void Router::forward(std::shared_ptr<Proxy> p) {
    std::vector<Backend*> tried;
    const int attempts = config_.max_attempts > 0 ? config_.max_attempts : static_cast<int>(backends_.size());
    std::string last_error = "no backend is configured";
    bool have_5xx = false;
    int held_status = 0;
    std::string held_type, held_body, held_retry_after;
    for (int a = 0; a < attempts; ++a) {
        Backend* b = pick(tried, p->key);
        if (b == nullptr) break;
        tried.push_back(b);
        if (a > 0) ++retries_;
        ++b->outstanding;
        ++b->requests;
        server::HttpClient c(b->host, b->port, config_.first_byte_timeout);
        c.set_timeouts({config_.connect_timeout, config_.first_byte_timeout, config_.idle_timeout});
        // The backend's head is held until the first piece of its body (or its end), so that a backend
        // that fails in between is still retried: nothing has reached the client yet.
        bool relayed = false, got_head = false;
        int status = 0;
        std::string type, retry_after, held;
        auto relay_head = [&] {
            {
                std::lock_guard<std::mutex> l(p->mu);
                p->head = true;
                p->status = status;
                p->content_type = type;
                if (!retry_after.empty()) p->headers.emplace_back("Retry-After", retry_after);
            }
            relayed = true;
        };
        auto r = c.stream(
            "POST", p->target, p->body, p->forward_headers,
            [&](std::string_view piece) {
                if (!got_head) {
                    held.append(piece);  // a 5xx answer, kept for when no other backend does better
                    return true;
                }
                if (!relayed) relay_head();
                {
                    std::unique_lock<std::mutex> l(p->mu);
                    p->cv.wait(l, [&] { return p->buf.size() < kMaxBuffered || p->cancelled; });
                    if (p->cancelled) return false;
                    p->buf.append(piece);
                }
                p->notify();
                return true;
            },
            nullptr,
            [&](const server::HttpClientResponse& h) {
                status = h.status;
                type = h.header("Content-Type");
                retry_after = h.header("Retry-After");
                got_head = status < 500;
            });
        if (got_head && !relayed && r.is_ok()) relay_head();  // an empty body
        --b->outstanding;
        bool cancelled;
        {
            std::lock_guard<std::mutex> l(p->mu);
            cancelled = p->cancelled;
        }
        if (relayed) {
            if (r.is_ok() || cancelled) {
                p->finish(0, "", "", !cancelled || r.is_ok());
                return;
            }
            // The backend failed after its answer began: no retry (the client has bytes of it).
            ++b->failures;
            ++midstream_failures_;
            eject(b, "failed mid-answer: " + r.status().message());
            if (type.find("text/event-stream") != std::string::npos) {
                const json e = error_json("The backend " + b->url + " failed while streaming this answer (" +
                                              r.status().message() + "); it is incomplete.",
                                          "backend_failed");
                p->finish(0, "", "data: " + e.dump() + "\n\ndata: [DONE]\n\n", true);
            } else {
                p->finish(0, "", "", false);
            }
            return;
        }
        if (cancelled) {
            p->finish(499, "text/plain", "", false);
            return;
        }
        ++b->failures;
        if (r.is_ok()) {
            eject(b, "answered " + std::to_string(status));
            have_5xx = true;
            held_status = status;
            held_type = type;
            held_retry_after = retry_after;
            held_body = std::move(held);
            last_error = b->url + " answered " + std::to_string(status);
        } else {
            eject(b, r.status().message());
            last_error = b->url + ": " + r.status().message();
        }
    }
    ++unserved_;
    if (have_5xx) {
        if (!held_retry_after
                 .empty()) {  // a 503's "come back in N s" (model_loading, queue_full) goes with it
            std::lock_guard<std::mutex> l(p->mu);
            p->headers.emplace_back("Retry-After", held_retry_after);
        }
        p->finish(held_status, held_type, held_body, true);
        return;
    }
    p->finish(502, "application/json",
              error_json("No backend could take the request (" + last_error + ").", "no_backend").dump(),
              true);
}

std::vector<Router::BackendView> Router::backends() const {
    std::vector<BackendView> out;
    for (const auto& b : backends_) {
        BackendView v;
        v.url = b->url;
        v.outstanding = b->outstanding.load();
        v.requests = b->requests.load();
        v.failures = b->failures.load();
        v.ejections = b->ejections.load();
        std::lock_guard<std::mutex> l(b->mu);
        v.up = b->up;
        v.last_error = b->last_error;
        out.push_back(v);
    }
    return out;
}

std::string Router::metrics_text() const {
    std::string out;
    auto family = [&](const char* name, const char* type, const char* help) {
        out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    };
    const std::vector<BackendView> views = backends();
    auto per_backend = [&](const char* name, const char* type, const char* help,
                           const std::function<int64_t(const BackendView&)>& value) {
        family(name, type, help);
        for (const BackendView& v : views)
            out += std::string(name) + "{backend=\"" + escape_label(v.url) + "\"} " +
                   std::to_string(value(v)) + "\n";
    };
    per_backend("voltllm_router_backend_up", "gauge",
                "1 while the backend is admitted (healthy, not ejected)",
                [](const BackendView& v) { return v.up ? 1 : 0; });
    per_backend("voltllm_router_backend_outstanding", "gauge", "Requests being forwarded to the backend now",
                [](const BackendView& v) { return v.outstanding; });
    per_backend("voltllm_router_backend_requests_total", "counter", "Attempts sent to the backend",
                [](const BackendView& v) { return v.requests; });
    per_backend("voltllm_router_backend_failures_total", "counter",
                "Attempts that failed (connect error, timeout, 5xx, failure mid-answer)",
                [](const BackendView& v) { return v.failures; });
    per_backend("voltllm_router_backend_ejections_total", "counter", "Times the backend was ejected",
                [](const BackendView& v) { return v.ejections; });
    family("voltllm_router_requests_total", "counter", "Requests forwarded");
    out += "voltllm_router_requests_total " + std::to_string(requests_.load()) + "\n";
    family("voltllm_router_retries_total", "counter",
           "Attempts on another backend before any byte was relayed");
    out += "voltllm_router_retries_total " + std::to_string(retries_.load()) + "\n";
    family("voltllm_router_unserved_total", "counter",
           "Requests no backend could take (502 or a backend's 5xx)");
    out += "voltllm_router_unserved_total " + std::to_string(unserved_.load()) + "\n";
    family("voltllm_router_midstream_failures_total", "counter",
           "Answers cut by a backend failure after they began (SSE: an error event)");
    out += "voltllm_router_midstream_failures_total " + std::to_string(midstream_failures_.load()) + "\n";
    return out;
}

}  // namespace volt::router
