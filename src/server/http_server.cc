// Beast/Asio wiring, admission and graceful shutdown; see http_server.h.
#include "server/http_server.h"

#include <spdlog/spdlog.h>
#include <strings.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <charconv>
#include <fstream>

namespace volt::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kAwait = asio::as_tuple(asio::use_awaitable);
// head()'s length for a body that runs to the connection's close (a stream to an HTTP/1.0 client).
constexpr size_t kCloseDelimited = std::numeric_limits<size_t>::max();

bool iequals(std::string_view a, std::string_view b) {
    return a.size() == b.size() && strncasecmp(a.data(), b.data(), a.size()) == 0;
}

// What a lingering close drops at most, and for how long: a client still sending its body when we answer
// early reads the answer instead of a reset.
constexpr size_t kDropLimit = size_t(1) << 30;
constexpr auto kDropTime = std::chrono::seconds(2);

std::string reason(int status) {
    return std::string(bhttp::obsolete_reason(bhttp::int_to_status(static_cast<unsigned>(status))));
}

std::string error_text(const ApiError& e) {
    return e.to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

ApiError plain_error(int status, std::string message) {
    return ApiError{status, status >= 500 ? "server_error" : "invalid_request_error", std::move(message),
                    std::nullopt, std::nullopt};
}

// A header value as we write it: CR and LF would end the header (response splitting), so they go.
std::string clean_value(std::string_view v) {
    std::string out;
    for (char c : v) {
        if (c != '\r' && c != '\n') out += c;
    }
    return out;
}

}  // namespace

int system_max_backlog() {
    std::ifstream f("/proc/sys/net/core/somaxconn");
    int n = 0;
    if (f >> n && n > 0) return n;
    return SOMAXCONN;
}

bool HttpRequest::has_header(std::string_view name) const {
    for (const auto& [k, v] : headers) {
        if (iequals(k, name)) return true;
    }
    return false;
}

std::string HttpRequest::get_header_value(std::string_view name) const {
    for (const auto& [k, v] : headers) {
        if (iequals(k, name)) return v;
    }
    return {};
}

void HttpResponse::set_header(std::string name, std::string value) {
    for (auto& [k, v] : headers) {
        if (iequals(k, name)) {
            v = std::move(value);
            return;
        }
    }
    headers.emplace_back(std::move(name), std::move(value));
}

// One connection: its socket (on its own strand), the wake-up of a streamed response, its id in the
// server's table (shutdown wakes every stream).
struct Conn {
    explicit Conn(tcp::socket s) : stream(std::move(s)), wake_timer(stream.get_executor()) {}
    beast::tcp_stream stream;
    asio::steady_timer wake_timer;
    bool woken = false;  // a wake came while the stream was not waiting; strand only
    uint64_t id = 0;
};

struct HttpServer::Impl {
    explicit Impl(HttpServer& s, int threads)
        : server(s), n_threads(threads), acceptor(asio::make_strand(ioc)) {}
    HttpServer& server;
    const int n_threads;
    // Declared before ioc: destroying ioc destroys the sessions' frames, which unregister themselves.
    std::mutex conns_mu;
    std::map<uint64_t, std::weak_ptr<Conn>> conns;  // guarded by conns_mu
    uint64_t next_conn = 0;                         // guarded by conns_mu
    asio::io_context ioc;
    tcp::acceptor acceptor;

    asio::awaitable<void> accept_loop();
    asio::awaitable<void> refuse(tcp::socket socket);
    asio::awaitable<void> session(std::shared_ptr<Conn> c);
    // Writes `bytes` within write_timeout; false when the client is gone or too slow.
    asio::awaitable<bool> write(Conn& c, std::string bytes);
    // Writes an error answer with Connection: close, then drops what the client still sends for a while
    // (bounded in bytes and time), then closes.
    asio::awaitable<void> answer_and_close(Conn& c, const ApiError& error);
    asio::awaitable<void> linger_close(Conn& c);
    std::string head(const HttpResponse& res, bool chunked, bool keep_alive, size_t length) const;
    void wake_all();
};

std::string HttpServer::Impl::head(const HttpResponse& res, bool chunked, bool keep_alive,
                                   size_t length) const {
    std::string h = "HTTP/1.1 " + std::to_string(res.status) + " " + reason(res.status) + "\r\n";
    bool has_type = false;
    for (const auto& [k, v] : res.headers) {
        if (iequals(k, "Content-Length") || iequals(k, "Transfer-Encoding") || iequals(k, "Connection"))
            continue;
        if (iequals(k, "Content-Type")) has_type = true;
        h += clean_value(k) + ": " + clean_value(v) + "\r\n";
    }
    if (!has_type) h += "Content-Type: " + clean_value(res.content_type) + "\r\n";
    if (chunked) {
        h += "Transfer-Encoding: chunked\r\n";
    } else if (length == kCloseDelimited) {
        // HTTP/1.0 has no chunked encoding: the body runs to the close.
    } else {
        h += "Content-Length: " + std::to_string(length) + "\r\n";
    }
    h += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    return h;
}

asio::awaitable<bool> HttpServer::Impl::write(Conn& c, std::string bytes) {
    c.stream.expires_after(server.config_.write_timeout);
    auto [ec, n] = co_await asio::async_write(c.stream, asio::buffer(bytes), kAwait);
    co_return !ec;
}

asio::awaitable<void> HttpServer::Impl::linger_close(Conn& c) {
    beast::error_code ec;
    c.stream.socket().shutdown(tcp::socket::shutdown_send, ec);
    const auto deadline = Clock::now() + kDropTime;
    size_t dropped = 0;
    std::vector<char> scratch(16 << 10);
    while (dropped <= kDropLimit && Clock::now() < deadline) {
        c.stream.expires_at(deadline);
        auto [rec, n] = co_await c.stream.async_read_some(asio::buffer(scratch), kAwait);
        if (rec) break;  // the client's close, a reset, or the deadline
        dropped += n;
    }
    c.stream.close();
}

asio::awaitable<void> HttpServer::Impl::answer_and_close(Conn& c, const ApiError& error) {
    HttpResponse res;
    server.send_error(res, error);
    std::string bytes = head(res, false, false, res.body.size()) + res.body;
    if (co_await write(c, std::move(bytes))) co_await linger_close(c);
    c.stream.close();
}

void HttpServer::Impl::wake_all() {
    std::lock_guard<std::mutex> lock(conns_mu);
    for (auto& [id, weak] : conns) {
        if (std::shared_ptr<Conn> c = weak.lock()) {
            asio::post(c->stream.get_executor(), [c] {
                c->woken = true;
                c->wake_timer.cancel();
            });
        }
    }
}

asio::awaitable<void> HttpServer::Impl::refuse(tcp::socket socket) {
    Conn c(std::move(socket));
    const ApiError error{
        503, "server_error",
        "Too many open connections (" + std::to_string(server.config_.max_connections) + "); retry later.",
        std::nullopt, std::string("too_many_connections")};
    co_await answer_and_close(c, error);
}

asio::awaitable<void> HttpServer::Impl::accept_loop() {
    for (;;) {
        auto [ec, socket] = co_await acceptor.async_accept(asio::make_strand(ioc), kAwait);
        if (!acceptor.is_open() || server.draining_.load()) co_return;
        if (ec) {
            // Out of descriptors (EMFILE) and the like: wait a little instead of spinning on accept().
            asio::steady_timer t(acceptor.get_executor(), std::chrono::milliseconds(50));
            co_await t.async_wait(kAwait);
            continue;
        }
        beast::error_code ignored;
        socket.set_option(tcp::no_delay(true), ignored);
        if (server.connections_.load() >= server.config_.max_connections) {
            auto executor = socket.get_executor();
            asio::co_spawn(executor, refuse(std::move(socket)), asio::detached);
            continue;
        }
        auto c = std::make_shared<Conn>(std::move(socket));
        {
            std::lock_guard<std::mutex> lock(conns_mu);
            c->id = next_conn++;
            conns.emplace(c->id, c);
        }
        server.connections_.fetch_add(1);
        auto executor = c->stream.get_executor();
        asio::co_spawn(executor, session(std::move(c)), asio::detached);
    }
}

asio::awaitable<void> HttpServer::Impl::session(std::shared_ptr<Conn> cp) {
    Conn& c = *cp;
    const HttpServerConfig& cfg = server.config_;
    struct Unregister {
        Impl* impl;
        uint64_t id;
        ~Unregister() {
            std::lock_guard<std::mutex> lock(impl->conns_mu);
            impl->conns.erase(id);
            impl->server.connections_.fetch_sub(1);
        }
    } unregister{this, c.id};

    beast::flat_buffer buf;
    // An answer that ends the connection (framing, limits, deadlines, early refusals with a body): written
    // after the loop. A named local, not a temporary in a co_await expression (GCC 12 mis-destroys those).
    std::optional<ApiError> fatal;
    for (;;) {
        if (buf.size() == 0) {
            // Keep-alive idle: the next request's first byte.
            c.stream.expires_after(cfg.idle_timeout);
            auto [ec, n] = co_await c.stream.async_read_some(buf.prepare(4096), kAwait);
            if (ec) break;
            buf.commit(n);
        }
        bhttp::request_parser<bhttp::string_body> p;
        p.header_limit(static_cast<uint32_t>(std::min<size_t>(cfg.max_header_bytes, UINT32_MAX)));
        // No body limit while the headers are read: the key and the route are checked before the length.
        p.body_limit(std::numeric_limits<uint64_t>::max());
        c.stream.expires_after(cfg.header_timeout);  // the whole header block, however it trickles
        {
            auto [ec, n] = co_await bhttp::async_read_header(c.stream, buf, p, kAwait);
            if (ec) {
                if (ec == bhttp::error::header_limit) {
                    fatal = plain_error(431, "The request headers are larger than " +
                                                 std::to_string(cfg.max_header_bytes) + " bytes.");
                } else if (ec == beast::error::timeout) {
                    fatal = plain_error(408, "The request headers did not arrive within " +
                                                 std::to_string(cfg.header_timeout.count()) + " ms.");
                } else if (ec != bhttp::error::end_of_stream && ec != asio::error::eof &&
                           ec != bhttp::error::partial_message && ec != asio::error::connection_reset &&
                           ec != asio::error::operation_aborted) {
                    fatal = plain_error(400, "Malformed request: " + ec.message() + ".");
                }
                break;
            }
        }
        auto& req = p.get();
        HttpRequest r;
        r.method = std::string(req.method_string());
        r.target = std::string(req.target());
        r.path = r.target.substr(0, r.target.find('?'));
        int n_length = 0, n_te = 0;
        std::string first_length;
        bool lengths_differ = false;
        for (const auto& f : req) {
            std::string name(f.name_string());
            if (iequals(name, "Content-Length")) {
                if (n_length++ == 0) {
                    first_length = std::string(f.value());
                } else if (f.value() != first_length) {
                    lengths_differ = true;
                }
            }
            if (iequals(name, "Transfer-Encoding")) ++n_te;
            r.headers.emplace_back(std::move(name), std::string(f.value()));
        }
        // Strict framing (request smuggling): a proxy in front may frame the body differently.
        if (lengths_differ || (n_te > 0 && n_length > 0) || (n_te > 0 && !p.chunked())) {
            fatal = plain_error(400, lengths_differ ? "Two different Content-Length headers."
                                     : n_length > 0 ? "Transfer-Encoding together with Content-Length."
                                                    : "A Transfer-Encoding other than chunked.");
            break;
        }
        const bool has_body = p.chunked() || (p.content_length() && *p.content_length() > 0);
        const Route* route = server.find_route(r.method, r.path, &r.matches);
        std::optional<ApiError> early;
        if (!route) {
            early = route_not_found_error(r.method, short_text(r.path));
        } else if (!route->open && !server.authorized(r.get_header_value("Authorization"))) {
            early = invalid_api_key_error();
        } else if (p.content_length() && *p.content_length() > cfg.max_body_bytes) {
            early = body_too_large_error(cfg.max_body_bytes);
        }
        if (early) {
            if (has_body) {
                fatal = *early;
                break;
            }
            HttpResponse res;
            server.send_error(res, *early);
            const bool keep = req.keep_alive() && !server.draining_.load();
            std::string bytes = head(res, false, keep, res.body.size()) + res.body;
            if (!co_await write(c, std::move(bytes)) || !keep) break;
            continue;
        }
        if (has_body) {
            if (iequals(r.get_header_value("Expect"), "100-continue")) {
                std::string go = "HTTP/1.1 100 Continue\r\n\r\n";
                if (!co_await write(c, std::move(go))) break;
            }
            p.body_limit(cfg.max_body_bytes);
            c.stream.expires_after(cfg.body_timeout);  // the whole body
            auto [ec, n] = co_await bhttp::async_read(c.stream, buf, p, kAwait);
            if (ec) {
                if (ec == bhttp::error::body_limit) {
                    fatal = body_too_large_error(cfg.max_body_bytes);
                } else if (ec == beast::error::timeout) {
                    fatal = plain_error(408, "The request body did not arrive within " +
                                                 std::to_string(cfg.body_timeout.count()) + " ms.");
                } else if (ec != asio::error::operation_aborted) {
                    fatal =
                        plain_error(400, "The request body could not be read (" + ec.message() +
                                             "): a malformed chunked body, or the client stopped sending.");
                }
                break;
            }
            r.body = std::move(req.body());
        }
        const bool keep_alive = req.keep_alive() && req.version() >= 11;
        HttpResponse res;
        try {
            route->handler(r, res);
        } catch (const std::exception& e) {
            spdlog::error("{} {}: {}", r.method, short_text(r.path), short_text(e.what(), 200));
            res = HttpResponse{};
            server.send_error(res, plain_error(500, "Internal error: " + short_text(e.what(), 200)));
        }
        const bool keep = keep_alive && !res.close && !server.draining_.load();
        if (!res.stream) {
            std::string bytes = head(res, false, keep, res.body.size()) + res.body;
            if (!co_await write(c, std::move(bytes)) || !keep) break;
            continue;
        }
        // A streamed response: chunked; pumped on every wake and every heartbeat tick.
        std::shared_ptr<StreamBody> body = std::move(res.stream);
        std::weak_ptr<Conn> weak = cp;
        auto executor = c.stream.get_executor();
        body->set_wake([weak, executor] {
            asio::post(executor, [weak] {
                if (std::shared_ptr<Conn> conn = weak.lock()) {
                    conn->woken = true;
                    conn->wake_timer.cancel();
                }
            });
        });
        // The head may wait for the body (StreamBody::head_ready); nothing is written meanwhile.
        while (!body->head_ready(&res)) {
            if (!c.woken) {
                c.wake_timer.expires_after(cfg.heartbeat);
                co_await c.wake_timer.async_wait(kAwait);
            }
            c.woken = false;
        }
        const bool keep_stream = keep && !res.close;
        // An HTTP/1.0 client gets the stream unframed, ended by the close.
        const bool chunked = req.version() >= 11;
        std::string first = head(res, chunked, keep_stream && chunked, chunked ? 0 : kCloseDelimited);
        bool ok = co_await write(c, std::move(first));
        bool broken = false;
        while (ok) {
            std::string out;
            const bool done = body->pump(&out, server.aborting_.load());
            std::string frame;
            if (!chunked) {
                frame = std::move(out);
            } else if (!out.empty()) {
                char size[24];
                auto [end, unused] = std::to_chars(size, size + sizeof size, out.size(), 16);
                frame.append(size, end).append("\r\n").append(out).append("\r\n");
            }
            broken = done && !body->complete();
            if (done && chunked && !broken) frame += "0\r\n\r\n";
            // Nothing more is pumped until this write completes: the backpressure (http_server.h).
            if (!frame.empty() && !co_await write(c, std::move(frame))) {
                ok = false;
                break;
            }
            if (done) break;
            if (!c.woken) {
                c.wake_timer.expires_after(cfg.heartbeat);
                co_await c.wake_timer.async_wait(kAwait);
            }
            c.woken = false;
        }
        if (!ok) body->cancel();
        body->set_wake(nullptr);
        body.reset();  // releases its admission ticket, after the last byte went out
        if (!ok || broken || !keep_stream || !chunked) break;
    }
    if (fatal) {
        co_await answer_and_close(c, *fatal);
        co_return;
    }
    beast::error_code ec;
    c.stream.socket().shutdown(tcp::socket::shutdown_send, ec);
    c.stream.close();
}

HttpServer::HttpServer(HttpServerConfig config) : config_(std::move(config)) {
    int threads = config_.io_threads;
    if (threads <= 0) threads = std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, 4);
    impl_ = std::make_unique<Impl>(*this, threads);
}

HttpServer::~HttpServer() {
    stopped_.store(true);
    impl_->ioc.stop();
    impl_.reset();
}

bool HttpServer::authorized(std::string_view header) const {
    if (config_.api_key.empty()) return true;
    const std::string expected = "Bearer " + config_.api_key;
    // Constant time in the header's content: every byte of `expected` is compared whatever matched before.
    unsigned diff = expected.size() == header.size() ? 0u : 1u;
    for (size_t i = 0; i < expected.size(); ++i) {
        const unsigned char h = i < header.size() ? static_cast<unsigned char>(header[i]) : 0;
        diff |= static_cast<unsigned char>(expected[i]) ^ h;
    }
    return diff == 0;
}

void HttpServer::get(const std::string& path, Handler handler, bool open) {
    Route r{"GET", path, std::nullopt, std::move(handler), open};
    if (path.find('(') != std::string::npos) r.re.emplace(path);
    routes_.push_back(std::move(r));
}

void HttpServer::post(const std::string& path, Handler handler) {
    Route r{"POST", path, std::nullopt, std::move(handler), false};
    if (path.find('(') != std::string::npos) r.re.emplace(path);
    routes_.push_back(std::move(r));
}

const HttpServer::Route* HttpServer::find_route(const std::string& method, const std::string& path,
                                                std::vector<std::string>* matches) const {
    for (const Route& r : routes_) {
        if (r.method != method) continue;
        if (!r.re) {
            if (r.path == path) return &r;
            continue;
        }
        std::smatch m;
        if (path.size() <= 4096 && std::regex_match(path, m, *r.re)) {
            matches->clear();
            for (const auto& g : m) matches->push_back(g.str());
            return &r;
        }
    }
    return nullptr;
}

Status HttpServer::bind() {
    beast::error_code ec;
    asio::ip::address address =
        asio::ip::make_address(config_.host == "localhost" ? "127.0.0.1" : config_.host, ec);
    tcp::acceptor& a = impl_->acceptor;
    if (!ec) {
        tcp::endpoint ep(address, static_cast<unsigned short>(config_.port));
        a.open(ep.protocol(), ec);
        if (!ec) a.set_option(asio::socket_base::reuse_address(true), ec);
        if (!ec) a.bind(ep, ec);
        backlog_ = system_max_backlog();
        if (!ec) a.listen(backlog_, ec);
        if (!ec) bound_port_ = a.local_endpoint(ec).port();
    }
    if (ec || bound_port_ <= 0) {
        beast::error_code ignored;
        a.close(ignored);
        return Status(StatusCode::kUnavailable, "cannot listen on " + config_.host + ":" +
                                                    std::to_string(config_.port) + " (" + ec.message() +
                                                    ": address in use, or not an address of this machine)");
    }
    asio::co_spawn(a.get_executor(), impl_->accept_loop(), asio::detached);
    return Status::ok();
}

void HttpServer::run() {
    if (stopped_.load()) return;
    std::vector<std::thread> threads;
    for (int i = 1; i < impl_->n_threads; ++i) threads.emplace_back([this] { impl_->ioc.run(); });
    impl_->ioc.run();
    for (auto& t : threads) t.join();
}

HttpServer::Ticket HttpServer::try_admit(std::string what, int64_t weight) {
    if (draining_.load() || weight <= 0) return nullptr;
    int64_t n = admitted_.fetch_add(weight) + weight;
    if (n > config_.max_admitted) {
        admitted_.fetch_sub(weight);
        return nullptr;
    }
    uint64_t id;
    {
        std::lock_guard<std::mutex> lock(mu_);
        id = next_admission_++;
        in_flight_.emplace(id, std::move(what));
    }
    return Ticket(new uint64_t(id), [this, weight](void* p) {
        auto* id_ptr = static_cast<uint64_t*>(p);
        release_admission(*id_ptr, weight);
        delete id_ptr;
    });
}

void HttpServer::describe(const Ticket& ticket, std::string what) {
    if (!ticket) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = in_flight_.find(*static_cast<const uint64_t*>(ticket.get()));
    if (it != in_flight_.end()) it->second = std::move(what);
}

std::vector<std::string> HttpServer::in_flight() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> out;
    for (const auto& [id, what] : in_flight_) out.push_back(what);
    return out;
}

int64_t HttpServer::admitted_requests() const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int64_t>(in_flight_.size());
}

void HttpServer::release_admission(uint64_t id, int64_t weight) {
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_.erase(id);
    admitted_.fetch_sub(weight);
    released_.notify_all();
}

void HttpServer::shutdown() {
    if (draining_.exchange(true)) {
        // A second caller waits for the first one's stop.
        while (!stopped_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        return;
    }
    // Stop accepting at once (on the acceptor's strand; also before run(): the handler then never runs,
    // and run() returns at once below).
    asio::post(impl_->acceptor.get_executor(), [this] {
        beast::error_code ec;
        impl_->acceptor.close(ec);
    });
    spdlog::info("shutting down: {} request(s) in flight, {} ms to finish", admitted_.load(),
                 config_.shutdown_grace.count());
    std::unique_lock<std::mutex> lock(mu_);
    if (!released_.wait_for(lock, config_.shutdown_grace, [this] { return admitted_.load() == 0; })) {
        spdlog::info("aborting {} request(s) still in flight", admitted_.load());
        aborting_.store(true);
        lock.unlock();
        impl_->wake_all();
        lock.lock();
        // Aborted responses end within a pump or two; do not hang on a stuck client.
        released_.wait_for(lock, std::chrono::seconds(5), [this] { return admitted_.load() == 0; });
    }
    lock.unlock();
    stopped_.store(true);
    impl_->ioc.stop();  // every connection ends with it; run() returns
}

void HttpServer::send_error(HttpResponse& res, const ApiError& error) const {
    if (error.http_status == 503) {
        res.set_header("Retry-After", std::to_string(config_.retry_after_seconds));
    }
    res.status = error.http_status;
    res.set_content(error_text(error), "application/json");
}

void HttpServer::send_json(HttpResponse& res, int http_status, const nlohmann::json& body) {
    res.status = http_status;
    res.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "application/json");
}

}  // namespace volt::server
