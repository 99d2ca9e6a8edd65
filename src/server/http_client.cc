// Beast client; see http_client.h.
#include "server/http_client.h"

#include <strings.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace volt::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

std::string HttpClientResponse::header(std::string_view name) const {
    for (const auto& [k, v] : headers) {
        if (k.size() == name.size() && strncasecmp(k.data(), name.data(), k.size()) == 0) return v;
    }
    return {};
}

struct HttpClient::Impl {
    std::string host;
    int port;
    std::chrono::milliseconds timeout;
    HttpClientTimeouts parts;  // zero parts: `timeout` for the whole exchange
    asio::io_context ioc;
    std::unique_ptr<beast::tcp_stream> stream;
    beast::flat_buffer buf;

    // Runs the async operations started by `start` to completion (each under the stream's deadline).
    template <typename Start>
    beast::error_code run(Start&& start) {
        beast::error_code result;
        bool done = false;
        start([&](beast::error_code ec, auto&&...) {
            result = ec;
            done = true;
        });
        ioc.restart();
        while (!done && ioc.run_one() > 0) {
        }
        return result;
    }

    // Opens a connection unless the kept-alive one is still open; `reused` says which.
    Status connect(bool* reused) {
        *reused = stream && stream->socket().is_open();
        if (*reused) return Status::ok();
        stream = std::make_unique<beast::tcp_stream>(ioc);
        buf.clear();
        beast::error_code ec;
        auto address = asio::ip::make_address(host == "localhost" ? "127.0.0.1" : host, ec);
        if (ec) return Status(StatusCode::kUnavailable, "bad address " + host + ": " + ec.message());
        stream->expires_after(parts.connect.count() > 0 ? parts.connect : timeout);
        ec = run([&](auto h) {
            stream->async_connect(tcp::endpoint(address, static_cast<unsigned short>(port)), h);
        });
        if (ec) {
            stream.reset();
            return Status(StatusCode::kUnavailable,
                          "cannot connect to " + host + ":" + std::to_string(port) + ": " + ec.message());
        }
        return Status::ok();
    }
    Status fail(const std::string& what, beast::error_code ec) {
        stream.reset();
        return Status(StatusCode::kUnavailable, what + ": " + ec.message());
    }
    // One try of stream() on the connection at hand. `stale` is set when it failed the way a connection
    // the server closed while idle fails: the write, or the read before a single byte of the response
    // came, ended by end of stream, a reset or a broken pipe.
    Result<HttpClientResponse> exchange(const bhttp::request<bhttp::string_body>& req,
                                        const std::function<bool(std::string_view)>& on_data,
                                        const std::function<void(int)>& on_status,
                                        const std::function<void(const HttpClientResponse&)>& on_head,
                                        bool* stale);
};

namespace {

// What a connection closed by the peer while idle gives on the next write or read.
bool closed_by_peer(const beast::error_code& ec) {
    return ec == bhttp::error::end_of_stream || ec == asio::error::eof ||
           ec == asio::error::connection_reset || ec == asio::error::broken_pipe ||
           ec == asio::error::connection_aborted;
}

}  // namespace

HttpClient::HttpClient(std::string host, int port, std::chrono::milliseconds timeout)
    : impl_(std::make_unique<Impl>()) {
    impl_->host = std::move(host);
    impl_->port = port;
    impl_->timeout = timeout;
}

HttpClient::~HttpClient() = default;

Result<HttpClientResponse> HttpClient::request(const std::string& method, const std::string& target,
                                               const std::string& body, const Headers& headers,
                                               const std::string& content_type) {
    std::string all;
    Headers with_type = headers;
    with_type.emplace_back("Content-Type", content_type);
    auto r = stream(method, target, body, body.empty() && method != "POST" ? headers : with_type,
                    [&](std::string_view piece) {
                        all.append(piece);
                        return true;
                    });
    if (!r) return r.status();
    HttpClientResponse out = std::move(*r);
    out.body = std::move(all);
    return out;
}

Result<HttpClientResponse> HttpClient::stream(const std::string& method, const std::string& target,
                                              const std::string& body, const Headers& headers,
                                              const std::function<bool(std::string_view)>& on_data,
                                              const std::function<void(int)>& on_status,
                                              const std::function<void(const HttpClientResponse&)>& on_head) {
    Impl& m = *impl_;
    bhttp::request<bhttp::string_body> req(bhttp::string_to_verb(method), target, 11);
    if (req.method() == bhttp::verb::unknown) req.method_string(method);
    req.set(bhttp::field::host, m.host + ":" + std::to_string(m.port));
    bool has_type = false;
    for (const auto& [k, v] : headers) {
        if (strcasecmp(k.c_str(), "Content-Type") == 0) has_type = true;
        req.set(k, v);
    }
    if (!body.empty() || method == "POST") {
        if (!has_type) req.set(bhttp::field::content_type, "application/json");
        req.body() = body;
        req.prepare_payload();
    }
    bool reused = false;
    if (Status s = m.connect(&reused); !s.is_ok()) return s;
    bool stale = false;
    auto r = m.exchange(req, on_data, on_status, on_head, &stale);
    if (r.is_ok() || !stale || !reused) return r;
    // The kept-alive connection was closed by the server while idle: it cannot have processed the request,
    // so it goes once more on a new connection (whatever the method), like curl and urllib3.
    if (Status s = m.connect(&reused); !s.is_ok()) return s;
    auto again = m.exchange(req, on_data, on_status, on_head, &stale);
    if (again.is_ok()) return again;
    return Status(again.status().code(),
                  again.status().message() + " (on a new connection: the kept-alive one was closed)");
}

Result<HttpClientResponse> HttpClient::Impl::exchange(
    const bhttp::request<bhttp::string_body>& req, const std::function<bool(std::string_view)>& on_data,
    const std::function<void(int)>& on_status, const std::function<void(const HttpClientResponse&)>& on_head,
    bool* stale) {
    *stale = false;
    // One deadline for the whole exchange, unless set_timeouts() split it.
    stream->expires_after(parts.first_byte.count() > 0 ? parts.first_byte : timeout);
    if (auto ec = run([&](auto h) { bhttp::async_write(*stream, req, h); })) {
        *stale = closed_by_peer(ec);
        return fail("write", ec);
    }

    bhttp::response_parser<bhttp::buffer_body> p;
    p.body_limit(boost::none);
    if (auto ec = run([&](auto h) { bhttp::async_read_header(*stream, buf, p, h); })) {
        *stale = closed_by_peer(ec) && !p.got_some() && buf.size() == 0;
        return fail("read", ec);
    }
    HttpClientResponse out;
    out.status = static_cast<int>(p.get().result_int());
    for (const auto& f : p.get())
        out.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    if (on_status) on_status(out.status);
    if (on_head) on_head(out);
    std::vector<char> piece(64 << 10);
    while (!p.is_done()) {
        if (parts.idle.count() > 0) stream->expires_after(parts.idle);
        p.get().body().data = piece.data();
        p.get().body().size = piece.size();
        beast::error_code ec = run([&](auto h) { bhttp::async_read_some(*stream, buf, p, h); });
        if (ec == bhttp::error::need_buffer) ec = {};
        if (ec) return fail("read", ec);
        const size_t n = piece.size() - p.get().body().size;
        if (n > 0 && !on_data(std::string_view(piece.data(), n))) {
            stream.reset();
            return out;
        }
    }
    if (!p.keep_alive()) stream.reset();
    return out;
}

void HttpClient::set_timeouts(const HttpClientTimeouts& t) { impl_->parts = t; }

Result<std::pair<std::string, int>> parse_http_url(const std::string& url) {
    const std::string scheme = "http://";
    if (url.rfind(scheme, 0) != 0) return invalid_argument("'" + url + "' is not an http:// URL");
    std::string rest = url.substr(scheme.size());
    rest = rest.substr(0, rest.find('/'));
    const size_t colon = rest.rfind(':');
    if (colon == std::string::npos) return std::make_pair(rest, 80);
    const std::string digits = rest.substr(colon + 1);
    if (digits.empty() || digits.size() > 5 || digits.find_first_not_of("0123456789") != std::string::npos)
        return invalid_argument("'" + url + "' has a bad port");
    const int port = std::stoi(digits);
    if (port <= 0 || port > 65535) return invalid_argument("'" + url + "' has a bad port");
    return std::make_pair(rest.substr(0, colon), port);
}

void SseSplitter::feed(std::string_view bytes, const std::function<void(const std::string& data)>& on_event) {
    pending_.append(bytes);
    for (;;) {
        size_t end = pending_.find("\n\n");
        if (end == std::string::npos) return;
        std::string event = pending_.substr(0, end);
        pending_.erase(0, end + 2);
        std::string data;
        bool any = false;
        size_t pos = 0;
        while (pos <= event.size()) {
            size_t nl = event.find('\n', pos);
            std::string line = event.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
            if (line.rfind("data:", 0) == 0) {
                std::string v = line.substr(5);
                if (!v.empty() && v[0] == ' ') v.erase(0, 1);
                if (any) data += '\n';
                data += v;
                any = true;
            }
            if (nl == std::string::npos) break;
            pos = nl + 1;
        }
        if (any) on_event(data);
    }
}

}  // namespace volt::server
