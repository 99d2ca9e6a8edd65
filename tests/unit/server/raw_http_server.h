// A scripted HTTP/1.1 peer on raw POSIX sockets, for what the client must survive that our own server never
// does on purpose: a keep-alive connection closed while idle (llama-server closes idle keep-alive
// connections), a connection closed with the request unanswered or the response cut. One thread accepts
// connections one at a time and hands each to the script with its index (0, 1, ...); the connection is
// closed when the script returns. Used by tests/unit/server/http_client_test.cc and
// tests/unit/bench_serve/bench_serve_test.cc.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace volt::test_support {

class RawHttpServer {
  public:
    class Conn {
      public:
        Conn(RawHttpServer& owner, int fd) : owner_(owner), fd_(fd) {}
        // The next request (head and Content-Length body, as sent), recorded in requests(); nullopt when the
        // peer closes first or nothing whole arrives within 10 s (a liveness bound).
        std::optional<std::string> read_request() {
            const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
            for (;;) {
                const size_t head_end = pending_.find("\r\n\r\n");
                if (head_end != std::string::npos) {
                    const size_t total = head_end + 4 + content_length(pending_.substr(0, head_end));
                    if (pending_.size() >= total) {
                        std::string request = pending_.substr(0, total);
                        pending_.erase(0, total);
                        std::lock_guard<std::mutex> lock(owner_.mu_);
                        owner_.requests_.push_back(request);
                        return request;
                    }
                }
                if (std::chrono::steady_clock::now() > deadline) return std::nullopt;
                pollfd p{fd_, POLLIN, 0};
                if (::poll(&p, 1, 50) <= 0) continue;
                char buf[4096];
                const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
                if (n <= 0) return std::nullopt;
                pending_.append(buf, static_cast<size_t>(n));
            }
        }
        bool send(std::string_view bytes) {
            return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
                   static_cast<ssize_t>(bytes.size());
        }

      private:
        static size_t content_length(const std::string& head) {
            size_t pos = 0;
            while ((pos = head.find("\r\n", pos)) != std::string::npos) {
                pos += 2;
                static constexpr std::string_view kName = "content-length:";
                if (strncasecmp(head.c_str() + pos, kName.data(), kName.size()) == 0)
                    return std::stoul(head.substr(pos + kName.size()));
            }
            return 0;
        }
        RawHttpServer& owner_;
        int fd_;
        std::string pending_;
    };
    using Script = std::function<void(Conn& conn, int index)>;

    explicit RawHttpServer(Script script) : script_(std::move(script)) {
        listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = 0;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
        ::listen(listen_fd_, 16);
        socklen_t len = sizeof a;
        ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
        port_ = ntohs(a.sin_port);
        thread_ = std::thread([this] { accept_loop(); });
    }
    ~RawHttpServer() {
        stop_.store(true);
        thread_.join();
        ::close(listen_fd_);
    }
    RawHttpServer(const RawHttpServer&) = delete;
    RawHttpServer& operator=(const RawHttpServer&) = delete;

    int port() const { return port_; }
    std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
    int accepted() const { return accepted_.load(); }
    int closed() const { return closed_.load(); }
    std::vector<std::string> requests() {
        std::lock_guard<std::mutex> lock(mu_);
        return requests_;
    }
    // Waits until the server has closed `n` connections (false past `limit`, a liveness bound).
    bool wait_closed(int n, std::chrono::milliseconds limit = std::chrono::seconds(10)) const {
        const auto deadline = std::chrono::steady_clock::now() + limit;
        while (closed_.load() < n) {
            if (std::chrono::steady_clock::now() > deadline) return false;
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        return true;
    }

    // A whole keep-alive response: status 200, Content-Length framing, `Connection: keep-alive`.
    static std::string ok(std::string_view body, std::string_view content_type = "text/plain") {
        return "HTTP/1.1 200 OK\r\nContent-Type: " + std::string(content_type) +
               "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: keep-alive\r\n\r\n" +
               std::string(body);
    }

  private:
    void accept_loop() {
        while (!stop_.load()) {
            pollfd p{listen_fd_, POLLIN, 0};
            if (::poll(&p, 1, 20) <= 0) continue;
            const int fd = ::accept(listen_fd_, nullptr, nullptr);
            if (fd < 0) continue;
            const int index = accepted_.fetch_add(1);
            {
                Conn conn(*this, fd);
                script_(conn, index);
            }
            ::close(fd);
            closed_.fetch_add(1);
        }
    }

    Script script_;
    int listen_fd_ = -1;
    int port_ = 0;
    std::thread thread_;
    std::atomic<bool> stop_{false};
    std::atomic<int> accepted_{0}, closed_{0};
    std::mutex mu_;
    std::vector<std::string> requests_;
};

}  // namespace volt::test_support
