// cpp-httplib wiring, admission and graceful shutdown; see http_server.h.
#include "server/http_server.h"

#include <spdlog/spdlog.h>

#include <thread>

namespace volt::server {

HttpServer::HttpServer(HttpServerConfig config) : config_(std::move(config)) {
    int threads = config_.num_threads > 0 ? config_.num_threads : static_cast<int>(config_.max_admitted) + 32;
    http_.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    http_.set_payload_max_length(config_.max_body_bytes);
    // httplib answers by itself (413 body too large, 404 no route, 400 bad request line) with an empty
    // body; give those the OpenAI error shape.
    http_.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return;
        int status = res.status;
        if (status == 413) {
            send_error(res, body_too_large_error(config_.max_body_bytes));
        } else if (status == 404) {
            send_error(res, route_not_found_error(req.method, req.path));
        } else {
            send_error(res, ApiError{status, status >= 500 ? "server_error" : "invalid_request_error",
                                     "HTTP " + std::to_string(status), std::nullopt, std::nullopt});
        }
        res.status = status;
    });
    // A handler that throws (it should not) still gets an answer and the server stays up.
    http_.set_exception_handler([this](const httplib::Request& req, httplib::Response& res,
                                       std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
            if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
            what = e.what();
        } catch (...) {
        }
        spdlog::error("{} {}: {}", req.method, req.path, what);
        send_error(res, ApiError{500, "server_error", "Internal error: " + what, std::nullopt, std::nullopt});
    });
}

HttpServer::~HttpServer() { http_.stop(); }

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
    http_.Post(path,
               [this, handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
                   if (!authorized(req)) return send_error(res, invalid_api_key_error());
                   handler(req, res);
               });
}

Status HttpServer::bind() {
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

HttpServer::Ticket HttpServer::try_admit() {
    if (draining_.load()) return nullptr;
    int64_t n = admitted_.fetch_add(1) + 1;
    if (n > config_.max_admitted) {
        admitted_.fetch_sub(1);
        return nullptr;
    }
    return Ticket(this, [](void* self) { static_cast<HttpServer*>(self)->release_admission(); });
}

void HttpServer::release_admission() {
    std::lock_guard<std::mutex> lock(mu_);
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
    http_.stop();
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
