// The HTTP layer against real sockets (HttpClient and raw POSIX sockets for what a client library will not
// send): API key, open /health, oversized body (413, chunked too), unknown routes and admission
// (503 + Retry-After) answer OpenAI error JSON; shutdown drains, and a shutdown before run() is not lost;
// in_flight() names the admitted requests (issue 11). Issue 19: per-request header deadline (a trickling
// client is cut), slow sockets do not starve /health, half-closed clients are answered, strict framing,
// the connection cap, the system backlog, streams woken from another thread, and backpressure (a reader
// that stops reading cancels its stream instead of making the server buffer).
#include "server/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <future>
#include <thread>

#include "server/http_client.h"

namespace volt::server {
namespace {

using namespace std::chrono_literals;

// A raw client socket with a receive helper; closed on destruction.
class RawSocket {
  public:
    explicit RawSocket(int port) {
        fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(static_cast<uint16_t>(port));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ok_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    }
    ~RawSocket() {
        if (fd_ >= 0) ::close(fd_);
    }
    bool ok() const { return ok_; }
    bool send(std::string_view s) {
        return ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size());
    }
    void shutdown_write() { ::shutdown(fd_, SHUT_WR); }
    // Reads until the peer closes or `limit` passes (a liveness bound); what arrived.
    std::string read_all(std::chrono::milliseconds limit = 10s) {
        std::string out;
        const auto deadline = std::chrono::steady_clock::now() + limit;
        while (std::chrono::steady_clock::now() < deadline) {
            pollfd p{fd_, POLLIN, 0};
            if (::poll(&p, 1, 50) <= 0) continue;
            char buf[4096];
            ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
            if (n <= 0) {
                closed_ = true;
                break;
            }
            out.append(buf, static_cast<size_t>(n));
        }
        return out;
    }
    // Reads until `needle` arrived, the peer closed, or `limit` passed.
    std::string read_until(std::string_view needle, std::chrono::milliseconds limit = 10s) {
        std::string out;
        const auto deadline = std::chrono::steady_clock::now() + limit;
        while (std::chrono::steady_clock::now() < deadline && out.find(needle) == std::string::npos) {
            pollfd p{fd_, POLLIN, 0};
            if (::poll(&p, 1, 50) <= 0) continue;
            char buf[4096];
            ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
            if (n <= 0) {
                closed_ = true;
                break;
            }
            out.append(buf, static_cast<size_t>(n));
        }
        return out;
    }
    bool closed() const { return closed_; }
    int fd() const { return fd_; }

  private:
    int fd_ = -1;
    bool ok_ = false;
    bool closed_ = false;
};

int status_of(const std::string& response) {
    if (response.size() < 12 || response.rfind("HTTP/1.1 ", 0) != 0) return -1;
    return std::stoi(response.substr(9, 3));
}

// A stream that holds its admission slot until released (or aborted by shutdown).
class HoldStream : public StreamBody {
  public:
    HoldStream(std::atomic<bool>& release, const HttpServer& server, HttpServer::Ticket ticket)
        : release_(release), server_(server), ticket_(std::move(ticket)) {}
    void set_wake(std::function<void()>) override {}
    bool pump(std::string* out, bool aborting) override {
        if (aborting) {
            *out = "aborted";
            return true;
        }
        if (!release_.load()) return false;
        *out = "done";
        return true;
    }
    void cancel() override {}

  private:
    std::atomic<bool>& release_;
    const HttpServer& server_;
    HttpServer::Ticket ticket_;
};

class HttpServerTest : public ::testing::Test {
  protected:
    void start(HttpServerConfig config) {
        config.port = 0;
        server_ = std::make_unique<HttpServer>(config);
        server_->get(
            "/health", [](const HttpRequest&, HttpResponse& res) { res.status = 200; }, true);
        server_->get("/v1/models", [](const HttpRequest&, HttpResponse& res) {
            HttpServer::send_json(res, 200, {{"object", "list"}});
        });
        server_->get("/v1/models/(.+)", [](const HttpRequest& req, HttpResponse& res) {
            HttpServer::send_json(res, 200, {{"id", req.matches.at(1)}});
        });
        server_->post("/v1/echo", [this](const HttpRequest& req, HttpResponse& res) {
            HttpServer::Ticket ticket = server_->try_admit();
            if (!ticket) return server_->send_error(res, api_error_from_status(resource_exhausted("full")));
            res.stream = std::make_shared<HoldStream>(release_, *server_, std::move(ticket));
        });
        server_->post("/v1/body", [](const HttpRequest& req, HttpResponse& res) {
            res.set_content(std::to_string(req.body.size()), "text/plain");
        });
        ASSERT_TRUE(server_->bind().is_ok());
        thread_ = std::thread([this] { server_->run(); });
        client_ = std::make_unique<HttpClient>("127.0.0.1", server_->port());
    }
    void TearDown() override {
        release_.store(true);
        if (server_ && thread_.joinable()) server_->shutdown();
        if (thread_.joinable()) thread_.join();
    }
    static nlohmann::json body_of(const Result<HttpClientResponse>& r) {
        return nlohmann::json::parse(r->body);
    }

    std::unique_ptr<HttpServer> server_;
    std::thread thread_;
    std::unique_ptr<HttpClient> client_;
    std::atomic<bool> release_{false};
};

TEST_F(HttpServerTest, ApiKeyOnEveryRouteButHealth) {
    HttpServerConfig c;
    c.api_key = "sekret";
    start(c);
    auto health = client_->request("GET", "/health");
    ASSERT_TRUE(health) << health.status().message();
    EXPECT_EQ(health->status, 200);
    auto no_key = client_->request("GET", "/v1/models");
    ASSERT_TRUE(no_key);
    EXPECT_EQ(no_key->status, 401);
    EXPECT_EQ(body_of(no_key)["error"]["code"], "invalid_api_key");
    for (const char* wrong :
         {"Bearer nope", "Bearer sekre", "Bearer sekrett", "Bearer SEKRET", "sekret", ""}) {
        auto r = client_->request("GET", "/v1/models", "", {{"Authorization", wrong}});
        ASSERT_TRUE(r);
        EXPECT_EQ(r->status, 401) << wrong;
    }
    auto right = client_->request("GET", "/v1/models", "", {{"Authorization", "Bearer sekret"}});
    EXPECT_EQ(right->status, 200);
    auto regex_route = client_->request("GET", "/v1/models/abc", "", {{"Authorization", "Bearer sekret"}});
    EXPECT_EQ(regex_route->status, 200);
    EXPECT_EQ(body_of(regex_route)["id"], "abc");
}

// Issue 11: the key is checked before a byte of the body is read: the 401 comes while the body is held
// back.
TEST_F(HttpServerTest, ApiKeyBeforeTheBody) {
    HttpServerConfig c;
    c.api_key = "sekret";
    start(c);
    RawSocket s(server_->port());
    ASSERT_TRUE(s.send("POST /v1/body HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n"));
    std::string r = s.read_until("}}");
    EXPECT_EQ(status_of(r), 401) << r;
    EXPECT_NE(r.find("Connection: close"), std::string::npos);
}

TEST_F(HttpServerTest, OversizedBodyAndUnknownRouteGiveErrorJson) {
    HttpServerConfig c;
    c.max_body_bytes = 100;
    start(c);
    auto big = client_->request("POST", "/v1/echo", std::string(1000, 'x'));
    ASSERT_TRUE(big) << big.status().message();
    EXPECT_EQ(big->status, 413);
    EXPECT_EQ(body_of(big)["error"]["code"], "request_too_large");
    auto missing = client_->request("GET", "/v2/nothing");
    ASSERT_TRUE(missing);
    EXPECT_EQ(missing->status, 404);
    EXPECT_EQ(body_of(missing)["error"]["type"], "invalid_request_error");
}

// Issue 11: a chunked body's length was not limited while reading.
TEST_F(HttpServerTest, ChunkedBodyOverTheLimitIs413) {
    HttpServerConfig c;
    c.max_body_bytes = 100;
    start(c);
    RawSocket s(server_->port());
    ASSERT_TRUE(s.send("POST /v1/body HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"));
    for (int i = 0; i < 20; ++i) s.send("32\r\n" + std::string(50, 'x') + "\r\n");
    std::string r = s.read_until("}}");
    EXPECT_EQ(status_of(r), 413) << r;
    // Under the limit, chunked: read whole.
    RawSocket t(server_->port());
    ASSERT_TRUE(
        t.send("POST /v1/body HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
               "a\r\n0123456789\r\n5\r\n01234\r\n0\r\n\r\n"));
    std::string ok = t.read_until("\r\n\r\n15");
    EXPECT_EQ(status_of(ok), 200) << ok;
}

// Issue 19: two Content-Length headers, TE + CL, a TE other than chunked, and a bad chunk size were
// accepted (httplib took the first length): each is 400 and a close.
TEST_F(HttpServerTest, StrictFraming) {
    start(HttpServerConfig{});
    const char* bad[] = {
        "POST /v1/body HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
        "POST /v1/body HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
        "5\r\nhello\r\n0\r\n\r\n",
        "POST /v1/body HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\nhello",
        "POST /v1/body HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
        "POST /v1/body HTTP/1.1\r\nHost: x\r\nContent-Length: 5x\r\n\r\nhello",
    };
    for (const char* req : bad) {
        RawSocket s(server_->port());
        ASSERT_TRUE(s.send(req));
        std::string r = s.read_all();
        EXPECT_EQ(status_of(r), 400) << req << "\n-> " << r;
        EXPECT_TRUE(s.closed()) << req;
    }
}

// Issue 19: a client that half-closes after its request got no answer from httplib.
TEST_F(HttpServerTest, HalfClosedClientIsAnswered) {
    start(HttpServerConfig{});
    RawSocket s(server_->port());
    ASSERT_TRUE(s.send("POST /v1/body HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"));
    s.shutdown_write();
    std::string r = s.read_all();
    EXPECT_EQ(status_of(r), 200) << r;
    EXPECT_NE(r.find("\r\n\r\n3"), std::string::npos) << r;
}

// Issue 19: httplib's timeout was per read, so a client sending a header line every second held its
// connection (and thread) forever. The header deadline is per request.
TEST_F(HttpServerTest, TricklingHeadersHitTheRequestDeadline) {
    HttpServerConfig c;
    c.header_timeout = 1s;
    start(c);
    RawSocket s(server_->port());
    ASSERT_TRUE(s.send("GET /health HTTP/1.1\r\n"));
    bool cut = false;
    // 60 lines, one per 200 ms (12 s), each well within any per-read timeout.
    for (int i = 0; i < 60 && !cut; ++i) {
        std::this_thread::sleep_for(200ms);
        if (!s.send("X-Trickle-" + std::to_string(i) + ": 1\r\n")) cut = true;
        pollfd p{s.fd(), POLLIN, 0};
        if (::poll(&p, 1, 0) > 0) cut = true;
    }
    EXPECT_TRUE(cut) << "the server still read headers after 12 s with a 1 s header deadline";
    std::string r = s.read_all(5s);
    if (!r.empty()) {
        EXPECT_EQ(status_of(r), 408) << r;
    }
}

// Issue 19: with a thread per connection, slow sockets took every thread and /health timed out. Here
// 200 sockets hold partial headers on 2 io threads while /health keeps answering.
TEST_F(HttpServerTest, SlowSocketsDoNotStarveHealth) {
    HttpServerConfig c;
    c.io_threads = 2;
    start(c);
    std::vector<std::unique_ptr<RawSocket>> slow;
    for (int i = 0; i < 200; ++i) {
        slow.push_back(std::make_unique<RawSocket>(server_->port()));
        ASSERT_TRUE(slow.back()->send("GET /health HTTP/1.1\r\nX-Slow: "));
    }
    for (int i = 0; i < 5; ++i) {
        HttpClient fresh("127.0.0.1", server_->port(), 10s);
        auto r = fresh.request("GET", "/health");
        ASSERT_TRUE(r) << r.status().message();
        EXPECT_EQ(r->status, 200);
    }
    EXPECT_GE(server_->connections(), 200);
}

// Issue 19: a connection cap with a clear refusal: 503 + error JSON, then a close.
TEST_F(HttpServerTest, ConnectionsPastTheCapGet503) {
    HttpServerConfig c;
    c.max_connections = 4;
    start(c);
    std::vector<std::unique_ptr<RawSocket>> held;
    for (int i = 0; i < 4; ++i) {
        held.push_back(std::make_unique<RawSocket>(server_->port()));
        ASSERT_TRUE(held.back()->send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
        EXPECT_EQ(status_of(held.back()->read_until("\r\n\r\n")), 200);
    }
    RawSocket extra(server_->port());
    extra.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    std::string r = extra.read_all();
    EXPECT_EQ(status_of(r), 503) << r;
    EXPECT_NE(r.find("too_many_connections"), std::string::npos) << r;
    EXPECT_NE(r.find("Retry-After: 1"), std::string::npos) << r;
    held.pop_back();  // one closes: a new one is served again
    for (int i = 0; i < 200 && server_->connections() >= 4; ++i) std::this_thread::sleep_for(10ms);
    auto again = client_->request("GET", "/health");
    ASSERT_TRUE(again);
    EXPECT_EQ(again->status, 200);
}

// Issue 19: httplib listened with a backlog of 5, so bursts overflowed the accept queue. The listening
// socket's backlog (ss's Send-Q for a listener) is the system's maximum.
TEST_F(HttpServerTest, ListenBacklogIsTheSystemMaximum) {
    start(HttpServerConfig{});
    int somaxconn = 0;
    std::ifstream("/proc/sys/net/core/somaxconn") >> somaxconn;
    ASSERT_GT(somaxconn, 0);
    EXPECT_EQ(server_->backlog(), somaxconn);
    const std::string cmd = "ss -ltnH 'sport = :" + std::to_string(server_->port()) + "' 2>/dev/null";
    FILE* p = popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    char line[512] = {0};
    const bool got = fgets(line, sizeof line, p) != nullptr;
    pclose(p);
    if (!got) GTEST_SKIP() << "no ss here";
    // "LISTEN 0 4096 127.0.0.1:PORT ...": the third column is the backlog.
    char state[32];
    int recvq = -1, sendq = -1;
    ASSERT_EQ(std::sscanf(line, "%31s %d %d", state, &recvq, &sendq), 3) << line;
    EXPECT_EQ(sendq, somaxconn) << line;
}

TEST_F(HttpServerTest, ExpectContinueGetsItsGoAndTheBody) {
    start(HttpServerConfig{});
    RawSocket s(server_->port());
    ASSERT_TRUE(
        s.send("POST /v1/body HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n"));
    std::string go = s.read_until("\r\n\r\n");
    EXPECT_EQ(status_of(go), 100) << go;
    ASSERT_TRUE(s.send("abcd"));
    std::string r = s.read_until("\r\n\r\n4");
    EXPECT_NE(r.find("200 OK"), std::string::npos) << r;
}

// Issue 11: httplib's stop() did nothing before its accept loop ran, so a shutdown just after bind() was
// lost and run() served forever.
TEST(HttpServerShutdown, ShutdownBeforeRunIsNotLost) {
    HttpServerConfig c;
    c.port = 0;
    auto server = std::make_unique<HttpServer>(c);
    ASSERT_TRUE(server->bind().is_ok());
    server->shutdown();
    auto done = std::make_shared<std::promise<void>>();
    std::future<void> ran = done->get_future();
    std::thread runner([s = server.get(), done] {
        s->run();
        done->set_value();
    });
    if (ran.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
        ADD_FAILURE() << "run() still serving 10 s after shutdown()";
        runner.detach();
        server.release();  // still in use by the detached runner
        return;
    }
    runner.join();
}

TEST_F(HttpServerTest, InFlightNamesTheAdmittedRequests) {
    start(HttpServerConfig{});
    HttpServer::Ticket a = server_->try_admit("first");
    HttpServer::Ticket b = server_->try_admit("second");
    ASSERT_TRUE(a && b);
    server_->describe(b, "chatcmpl-42 (POST /v1/chat/completions)");
    EXPECT_EQ(server_->in_flight(),
              (std::vector<std::string>{"first", "chatcmpl-42 (POST /v1/chat/completions)"}));
    a.reset();
    EXPECT_EQ(server_->in_flight(), (std::vector<std::string>{"chatcmpl-42 (POST /v1/chat/completions)"}));
    b.reset();
    EXPECT_TRUE(server_->in_flight().empty());
    EXPECT_EQ(server_->admitted(), 0);
}

TEST_F(HttpServerTest, AdmissionRefusesPastTheLimitWith503) {
    HttpServerConfig c;
    c.max_admitted = 2;
    start(c);
    std::vector<std::thread> holders;
    std::vector<int> statuses(2, 0);
    for (int i = 0; i < 2; ++i) {
        holders.emplace_back([this, i, &statuses] {
            HttpClient c("127.0.0.1", server_->port());
            auto r = c.request("POST", "/v1/echo", "{}");
            statuses[i] = r ? r->status : -1;
        });
    }
    while (server_->admitted() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    auto third = client_->request("POST", "/v1/echo", "{}");
    ASSERT_TRUE(third);
    EXPECT_EQ(third->status, 503);
    EXPECT_EQ(third->header("Retry-After"), "1");
    EXPECT_EQ(body_of(third)["error"]["type"], "server_error");
    release_.store(true);
    for (auto& t : holders) t.join();
    EXPECT_EQ(statuses, (std::vector<int>{200, 200}));
    for (int i = 0; i < 1000 && server_->admitted() != 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_EQ(server_->admitted(), 0);
}

TEST_F(HttpServerTest, ShutdownAbortsInFlightAfterTheGrace) {
    HttpServerConfig c;
    c.shutdown_grace = std::chrono::milliseconds(100);
    start(c);
    std::string body;
    std::thread holder([this, &body] {
        HttpClient c("127.0.0.1", server_->port());
        auto r = c.request("POST", "/v1/echo", "{}");
        if (r) body = r->body;
    });
    while (server_->admitted() < 1) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    server_->shutdown();
    holder.join();
    EXPECT_EQ(body, "aborted");
    thread_.join();
}

// Issue 19: SIGTERM never exited while a client trickled headers: the shutdown completes whatever the
// clients do (slow headers, idle keep-alive, a stream nobody reads).
TEST_F(HttpServerTest, ShutdownCompletesWithSlowAndIdleClients) {
    HttpServerConfig c;
    c.shutdown_grace = 200ms;
    start(c);
    RawSocket trickle(server_->port());
    trickle.send("GET /health HTTP/1.1\r\nX-A: ");
    RawSocket idle(server_->port());
    idle.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    idle.read_until("\r\n\r\n");
    RawSocket stuck(server_->port());
    stuck.send("POST /v1/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}");
    while (server_->admitted() < 1) std::this_thread::sleep_for(2ms);
    auto done = std::async(std::launch::async, [this] {
        server_->shutdown();
        thread_.join();
    });
    EXPECT_EQ(done.wait_for(20s), std::future_status::ready);
}

// Streams are woken from another thread (the engine's notify path): each piece arrives as it is produced.
class WokenStream : public StreamBody {
  public:
    void set_wake(std::function<void()> wake) override {
        std::lock_guard<std::mutex> l(mu_);
        wake_ = std::move(wake);
    }
    void produce(std::string piece, bool last) {
        std::function<void()> w;
        {
            std::lock_guard<std::mutex> l(mu_);
            ready_ += piece;
            last_ = last;
            w = wake_;
        }
        if (w) w();
    }
    bool pump(std::string* out, bool) override {
        std::lock_guard<std::mutex> l(mu_);
        *out = std::move(ready_);
        ready_.clear();
        return last_;
    }
    void cancel() override {}

  private:
    std::mutex mu_;
    std::function<void()> wake_;
    std::string ready_;
    bool last_ = false;
};

TEST(HttpServerStream, PiecesArriveAsTheyAreProducedAndSseSplits) {
    HttpServerConfig c;
    c.port = 0;
    c.heartbeat = 10s;  // only the wake can deliver the pieces in time
    HttpServer server(c);
    auto body = std::make_shared<WokenStream>();
    server.get("/s", [body](const HttpRequest&, HttpResponse& res) {
        res.content_type = "text/event-stream";
        res.stream = body;
    });
    ASSERT_TRUE(server.bind().is_ok());
    std::thread run([&] { server.run(); });
    std::thread producer([body] {
        for (int i = 0; i < 5; ++i) {
            std::this_thread::sleep_for(20ms);
            body->produce("data: {\"i\":" + std::to_string(i) + "}\n\n", false);
        }
        body->produce("data: [DONE]\n\n", true);
    });
    HttpClient client("127.0.0.1", server.port(), 10s);
    SseSplitter sse;
    std::vector<std::string> events;
    auto r = client.stream("GET", "/s", "", {}, [&](std::string_view piece) {
        sse.feed(piece, [&](const std::string& data) { events.push_back(data); });
        return true;
    });
    producer.join();
    ASSERT_TRUE(r) << r.status().message();
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->header("Transfer-Encoding"), "chunked");
    EXPECT_EQ(events, (std::vector<std::string>{"{\"i\":0}", "{\"i\":1}", "{\"i\":2}", "{\"i\":3}",
                                                "{\"i\":4}", "[DONE]"}));
    server.shutdown();
    run.join();
}

// A stream that always has 64 KiB ready, counting what it produced and whether it was cancelled.
class FloodStream : public StreamBody {
  public:
    void set_wake(std::function<void()> wake) override { wake_ = std::move(wake); }
    bool pump(std::string* out, bool) override {
        out->assign(64 << 10, 'x');
        produced += out->size();
        if (wake_) wake_();
        return false;
    }
    void cancel() override { cancelled = true; }
    std::atomic<size_t> produced{0};
    std::atomic<bool> cancelled{false};

  private:
    std::function<void()> wake_;
};

// Issue 19: a slow reader must never make the server buffer without bound. A client that stops reading
// gets its stream cancelled after write_timeout; meanwhile nothing is pumped beyond what the socket took.
TEST(HttpServerStream, AReaderThatStopsReadingIsCancelledNotBuffered) {
    HttpServerConfig c;
    c.port = 0;
    c.write_timeout = 500ms;
    HttpServer server(c);
    auto body = std::make_shared<FloodStream>();
    server.get("/flood", [body](const HttpRequest&, HttpResponse& res) { res.stream = body; });
    ASSERT_TRUE(server.bind().is_ok());
    std::thread run([&] { server.run(); });
    RawSocket s(server.port());
    int small = 4096;
    setsockopt(s.fd(), SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    ASSERT_TRUE(s.send("GET /flood HTTP/1.1\r\nHost: x\r\n\r\n"));
    for (int i = 0; i < 1000 && !body->cancelled.load(); ++i) std::this_thread::sleep_for(10ms);
    EXPECT_TRUE(body->cancelled.load()) << "not cancelled within 10 s";
    // What the socket buffers hold (a few MiB at most on loopback), plus one pump: nothing unbounded.
    EXPECT_LT(body->produced.load(), size_t(64) << 20);
    server.shutdown();
    run.join();
}

}  // namespace
}  // namespace volt::server

namespace volt::server {
namespace {

class OneShot : public StreamBody {
  public:
    void set_wake(std::function<void()>) override {}
    bool pump(std::string* out, bool) override {
        *out = "hello stream";
        return true;
    }
    void cancel() override {}
};

// An HTTP/1.0 client cannot read chunked encoding: its stream comes unframed, ended by the close.
TEST(HttpServerStream, Http10GetsAnUnframedStreamEndedByTheClose) {
    HttpServerConfig c;
    c.port = 0;
    HttpServer server(c);
    server.get("/s", [](const HttpRequest&, HttpResponse& res) { res.stream = std::make_shared<OneShot>(); });
    ASSERT_TRUE(server.bind().is_ok());
    std::thread run([&] { server.run(); });
    RawSocket s(server.port());
    ASSERT_TRUE(s.send("GET /s HTTP/1.0\r\n\r\n"));
    std::string r = s.read_all();
    EXPECT_TRUE(s.closed());
    EXPECT_EQ(r.find("Transfer-Encoding"), std::string::npos) << r;
    EXPECT_NE(r.find("\r\n\r\nhello stream"), std::string::npos) << r;
    RawSocket t(server.port());
    ASSERT_TRUE(t.send("GET /s HTTP/1.1\r\nHost: x\r\n\r\n"));
    std::string chunked = t.read_until("0\r\n\r\n");
    EXPECT_NE(chunked.find("Transfer-Encoding: chunked"), std::string::npos) << chunked;
    EXPECT_NE(chunked.find("\r\nc\r\nhello stream\r\n0\r\n\r\n"), std::string::npos) << chunked;
    server.shutdown();
    run.join();
}

}  // namespace
}  // namespace volt::server
