// cpp-httplib wiring, admission and graceful shutdown; see http_server.h.
#include "server/http_server.h"

#include <spdlog/spdlog.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <thread>

namespace volt::server {

namespace {

bool is_chunked(const httplib::Request& req) {
    return strcasecmp(req.get_header_value("Transfer-Encoding").c_str(), "chunked") == 0;
}

// The Content-Length of a body that is not chunked (httplib reads chunked first, as we do). nullopt:
// none given (the body then runs to the end of the connection). `valid` false: not a number.
std::optional<uint64_t> declared_length(const httplib::Request& req, bool* valid) {
    *valid = true;
    if (is_chunked(req) || !req.has_header("Content-Length")) return std::nullopt;
    const std::string v = req.get_header_value("Content-Length");
    uint64_t len = 0;
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), len);
    if (ec != std::errc() || end != v.data() + v.size() || v.empty()) {
        *valid = false;
        return std::nullopt;
    }
    return len;
}

bool carries_body(const std::string& method) {
    return method == "POST" || method == "PUT" || method == "PATCH" || method == "DELETE";
}

}  // namespace

void Listener::close_listener() {
    // svr_sock_ is what httplib's accept loop tests before every accept() (and before its first one):
    // swapping it out is a stop that also holds when the loop has not started.
    socket_t sock = svr_sock_.exchange(INVALID_SOCKET);
    if (sock == INVALID_SOCKET) return;
    ::shutdown(sock, SHUT_RDWR);  // wakes a blocked accept()
    ::close(sock);
}

HttpServer::HttpServer(HttpServerConfig config) : config_(std::move(config)) {
    int threads = config_.num_threads > 0 ? config_.num_threads : static_cast<int>(config_.max_admitted) + 32;
    http_.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    http_.set_payload_max_length(config_.max_body_bytes);
    // httplib answers by itself (413 body too large, 404 no route, 400 bad request line) with an empty
    // body; give those the OpenAI error shape. Answers of ours are left alone (a body, or the content
    // provider of answer_and_close).
    http_.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty() || res.content_provider_) return;
        int status = res.status;
        if (status == 413) {
            send_error(res, body_too_large_error(config_.max_body_bytes));
        } else if (status == 404) {
            send_error(res, route_not_found_error(req.method, short_text(req.path)));
        } else {
            send_error(res, ApiError{status, status >= 500 ? "server_error" : "invalid_request_error",
                                     "HTTP " + std::to_string(status), std::nullopt, std::nullopt});
        }
        res.status = status;
    });
    // A handler that throws (it should not) still gets an answer and the server stays up.
    http_.set_exception_handler(
        [this](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
            std::string what = "unknown exception";
            try {
                if (ep) std::rethrow_exception(ep);
            } catch (const std::exception& e) {
                what = e.what();
            } catch (...) {
            }
            spdlog::error("{} {}: {}", req.method, short_text(req.path), short_text(what, 200));
            send_error(res, ApiError{500, "server_error", "Internal error: " + short_text(what, 200),
                                     std::nullopt, std::nullopt});
        });
    // `Expect: 100-continue`: the client waits for our go before sending the body, so a missing key or a
    // declared length over the limit is refused before the body exists on the wire.
    http_.set_expect_100_continue_handler([this](const httplib::Request& req, httplib::Response& res) {
        if (!carries_body(req.method)) return 100;
        bool valid = true;
        std::optional<uint64_t> len = declared_length(req, &valid);
        std::optional<ApiError> refuse;
        if (!authorized(req)) {
            refuse = invalid_api_key_error();
        } else if (len && *len > config_.max_body_bytes) {
            refuse = body_too_large_error(config_.max_body_bytes);
        }
        if (!refuse) return 100;
        send_error(res, *refuse);
        res.set_header("Connection", "close");  // it may send the body anyway: never read it as a request
        return refuse->http_status;
    });
    // PRI is the one method httplib reads a body for (into memory, chunked unbounded) without offering a
    // content reader: answer it without reading.
    http_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
        if (req.method != "PRI") return httplib::Server::HandlerResponse::Unhandled;
        answer_and_close(req, res, route_not_found_error(req.method, short_text(req.path)), nullptr);
        return httplib::Server::HandlerResponse::Handled;
    });
}

HttpServer::~HttpServer() { http_.close_listener(); }

bool HttpServer::authorized(const httplib::Request& req) const {
    if (config_.api_key.empty()) return true;
    std::string auth = req.get_header_value("Authorization");
    return auth == "Bearer " + config_.api_key;
}

void HttpServer::get(const std::string& path, Handler handler, bool open) {
    http_.Get(path, [this, handler = std::move(handler), open](const httplib::Request& req,
                                                               httplib::Response& res) {
        if (!open && !authorized(req)) return send_error(res, invalid_api_key_error());
        handler(req, res);
    });
}

void HttpServer::post(const std::string& path, Handler handler) {
    // A content-reader handler runs once the headers are in, before httplib reads any of the body.
    http_.Post(path, [this, handler = std::move(handler)](const httplib::Request& req, httplib::Response& res,
                                                          const httplib::ContentReader& reader) {
        if (!authorized(req)) return answer_and_close(req, res, invalid_api_key_error(), &reader);
        if (std::optional<ApiError> error = read_body(req, reader))
            return answer_and_close(req, res, *error, &reader);
        handler(req, res);
    });
}

std::optional<ApiError> HttpServer::read_body(const httplib::Request& req,
                                              const httplib::ContentReader& reader) {
    const size_t max = config_.max_body_bytes;
    if (req.is_multipart_form_data()) {
        return ApiError{400, "invalid_request_error",
                        "The request body must be JSON, not multipart/form-data.", std::nullopt,
                        std::string("invalid_json")};
    }
    bool valid = true;
    std::optional<uint64_t> len = declared_length(req, &valid);
    if (!valid) {
        return ApiError{400, "invalid_request_error", "The Content-Length header is not a number.",
                        std::nullopt, std::nullopt};
    }
    if (len && *len > max) return body_too_large_error(max);

    // httplib passes content-reader handlers the Request it owns (not a const object) as const; the body
    // goes where the routes and httplib's logger expect it.
    std::string& body = const_cast<httplib::Request&>(req).body;
    body.clear();
    bool too_large = false;
    const bool complete = reader([&](const char* data, size_t n) {
        // Only a chunked body, or one without a length, can pass the limit here: stop reading at once
        // (answer_and_close drops the rest after the 413 is out).
        if (n > max - body.size()) {
            too_large = true;
            std::string().swap(body);
            return false;
        }
        body.append(data, n);
        return true;
    });
    if (too_large) return body_too_large_error(max);
    if (!complete) {
        return ApiError{400, "invalid_request_error",
                        "The request body could not be read (a malformed chunked body, or the client stopped "
                        "sending).",
                        std::nullopt, std::nullopt};
    }
    return std::nullopt;
}

void HttpServer::answer_and_close(const httplib::Request& req, httplib::Response& res, const ApiError& error,
                                  const httplib::ContentReader* reader) {
    std::string body = error.to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    res.status = error.http_status;
    if (error.http_status == 503) res.set_header("Retry-After", std::to_string(config_.retry_after_seconds));
    res.set_header("Connection", "close");
    // After the answer, what the client still sends is read and dropped for a while before the close: a
    // close with unread bytes resets the connection, and a client still sending would lose our answer with
    // it (a lingering close). The bound is time, so that a busy client gets to read the answer however
    // fast it sends (a byte cap only stops it sooner if it sends a lot); the memory is httplib's 4 KB
    // read buffer. A client that stops sending or closes ends the drain at once.
    std::function<void()> drain;
    if (reader) {
        constexpr size_t kDropLimit = size_t(1) << 30;
        drain = [reader = *reader, &req] {
            // Without its framing headers the body reads as raw bytes to the end of the connection, whatever
            // was read of it before (a chunked read cut mid-chunk cannot resume) and whatever it declared.
            // The Request is httplib's own, alive (not const) until the response is written.
            auto& headers = const_cast<httplib::Request&>(req).headers;
            for (const char* h :
                 {"Transfer-Encoding", "Content-Length", "Content-Encoding", "Content-Type"}) {
                headers.erase(h);
            }
            const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
            size_t dropped = 0;
            try {
                // DELETE without a length reads nothing; any read error or the client's close ends it too.
                reader([&](const char*, size_t n) {
                    dropped += n;
                    return dropped <= kDropLimit && std::chrono::steady_clock::now() < deadline;
                });
            } catch (...) {
                // Nothing to do: the connection is closed next anyway.
            }
        };
    }
    const size_t n_bytes = body.size();  // before the lambda below takes `body`
    res.set_content_provider(n_bytes, "application/json",
                             [body = std::move(body), drain = std::move(drain)](size_t offset, size_t length,
                                                                                httplib::DataSink& sink) {
                                 sink.write(body.data() + offset, length);  // the whole answer, first
                                 if (drain) drain();
                                 // false: httplib ends the keep-alive loop and closes the connection.
                                 return false;
                             });
}

Status HttpServer::bind() {
    // Registered last, so that they only catch what no route took: answered without reading the body
    // (httplib would otherwise read it whole into memory, chunked bodies without any limit).
    auto unknown = [this](const httplib::Request& req, httplib::Response& res,
                          const httplib::ContentReader& reader) {
        answer_and_close(req, res, route_not_found_error(req.method, short_text(req.path)), &reader);
    };
    http_.Post(".*", unknown);
    http_.Put(".*", unknown);
    http_.Patch(".*", unknown);
    http_.Delete(".*", unknown);

    if (config_.port == 0) {
        bound_port_ = http_.bind_to_any_port(config_.host);
    } else if (http_.bind_to_port(config_.host, config_.port)) {
        bound_port_ = config_.port;
    }
    if (bound_port_ <= 0) {
        return Status(StatusCode::kUnavailable, "cannot listen on " + config_.host + ":" +
                                                    std::to_string(config_.port) +
                                                    " (address in use, or not an address of this machine)");
    }
    return Status::ok();
}

void HttpServer::run() { http_.listen_after_bind(); }

HttpServer::Ticket HttpServer::try_admit(std::string what) {
    if (draining_.load()) return nullptr;
    int64_t n = admitted_.fetch_add(1) + 1;
    if (n > config_.max_admitted) {
        admitted_.fetch_sub(1);
        return nullptr;
    }
    uint64_t id;
    {
        std::lock_guard<std::mutex> lock(mu_);
        id = next_admission_++;
        in_flight_.emplace(id, std::move(what));
    }
    return Ticket(new uint64_t(id), [this](void* p) {
        auto* id_ptr = static_cast<uint64_t*>(p);
        release_admission(*id_ptr);
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

void HttpServer::release_admission(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_.erase(id);
    admitted_.fetch_sub(1);
    released_.notify_all();
}

void HttpServer::shutdown() {
    draining_.store(true);
    spdlog::info("shutting down: {} request(s) in flight, {} ms to finish", admitted_.load(),
                 config_.shutdown_grace.count());
    std::unique_lock<std::mutex> lock(mu_);
    if (!released_.wait_for(lock, config_.shutdown_grace, [this] { return admitted_.load() == 0; })) {
        spdlog::info("aborting {} request(s) still in flight", admitted_.load());
        aborting_.store(true);
        // Aborted responses end within a poll step or two; do not hang on a stuck client.
        released_.wait_for(lock, std::chrono::seconds(5), [this] { return admitted_.load() == 0; });
    }
    lock.unlock();
    // Not httplib's stop(): that one is a no-op until the accept loop runs (see Listener).
    http_.close_listener();
}

void HttpServer::send_error(httplib::Response& res, const ApiError& error) const {
    if (error.http_status == 503) {
        res.set_header("Retry-After", std::to_string(config_.retry_after_seconds));
    }
    send_json(res, error.http_status, error.to_json());
}

void HttpServer::send_json(httplib::Response& res, int http_status, const nlohmann::json& body) {
    res.status = http_status;
    res.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "application/json");
}

bool DataSinkAdapter::write(std::string_view bytes) {
    // An empty write would end httplib's chunked loop (it reads a 0-length write as "no more data").
    if (bytes.empty()) return sink_.is_writable();
    return sink_.write(bytes.data(), bytes.size());
}

}  // namespace volt::server
