// The HTTP layer against a real socket (httplib::Client): API key, open /health, oversized body (413,
// chunked too), unknown routes and admission (503 + Retry-After) all answer OpenAI error JSON; shutdown
// drains, and a shutdown before run() is not lost; in_flight() names the admitted requests.
#include "server/http_server.h"

#include <gtest/gtest.h>

#include <future>
#include <thread>

namespace volt::server {
namespace {

class HttpServerTest : public ::testing::Test {
  protected:
    void start(HttpServerConfig config) {
        config.port = 0;
        server_ = std::make_unique<HttpServer>(config);
        server_->get(
            "/health", [](const httplib::Request&, httplib::Response& res) { res.status = 200; }, true);
        server_->get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
            HttpServer::send_json(res, 200, {{"object", "list"}});
        });
        server_->post("/v1/echo", [this](const httplib::Request& req, httplib::Response& res) {
            HttpServer::Ticket ticket = server_->try_admit();
            if (!ticket) return server_->send_error(res, api_error_from_status(resource_exhausted("full")));
            res.set_chunked_content_provider("text/plain", [this, ticket](size_t, httplib::DataSink& sink) {
                // Holds its slot until the test releases it (or shutdown aborts it).
                while (!release_.load() && !server_->aborting()) {
                    std::this_thread::sleep_for(std::chrono::milliseconds(5));
                }
                DataSinkAdapter out(sink);
                out.write(server_->aborting() ? "aborted" : "done");
                sink.done();
                return true;
            });
        });
        ASSERT_TRUE(server_->bind().is_ok());
        thread_ = std::thread([this] { server_->run(); });
        client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    }
    void TearDown() override {
        release_.store(true);
        if (server_) server_->shutdown();
        if (thread_.joinable()) thread_.join();
    }
    static nlohmann::json body_of(const httplib::Result& r) { return nlohmann::json::parse(r->body); }

    std::unique_ptr<HttpServer> server_;
    std::thread thread_;
    std::unique_ptr<httplib::Client> client_;
    std::atomic<bool> release_{false};
};

TEST_F(HttpServerTest, ApiKeyOnEveryRouteButHealth) {
    HttpServerConfig c;
    c.api_key = "sekret";
    start(c);
    auto health = client_->Get("/health");
    ASSERT_TRUE(health);
    EXPECT_EQ(health->status, 200);
    auto no_key = client_->Get("/v1/models");
    ASSERT_TRUE(no_key);
    EXPECT_EQ(no_key->status, 401);
    EXPECT_EQ(body_of(no_key)["error"]["code"], "invalid_api_key");
    auto wrong = client_->Get("/v1/models", {{"Authorization", "Bearer nope"}});
    EXPECT_EQ(wrong->status, 401);
    auto right = client_->Get("/v1/models", {{"Authorization", "Bearer sekret"}});
    EXPECT_EQ(right->status, 200);
}

TEST_F(HttpServerTest, OversizedBodyAndUnknownRouteGiveErrorJson) {
    HttpServerConfig c;
    c.max_body_bytes = 100;
    start(c);
    auto big = client_->Post("/v1/echo", std::string(1000, 'x'), "application/json");
    ASSERT_TRUE(big);
    EXPECT_EQ(big->status, 413);
    EXPECT_EQ(body_of(big)["error"]["code"], "request_too_large");
    auto missing = client_->Get("/v2/nothing");
    ASSERT_TRUE(missing);
    EXPECT_EQ(missing->status, 404);
    EXPECT_EQ(body_of(missing)["error"]["type"], "invalid_request_error");
}

// Issue 11: httplib ignored chunked bodies' length, so a body of any size was read into memory.
TEST_F(HttpServerTest, ChunkedBodyOverTheLimitIs413) {
    HttpServerConfig c;
    c.max_body_bytes = 100;
    start(c);
    const std::string piece(50, 'x');
    int sent = 0;
    auto big = client_->Post(
        "/v1/echo",
        [&](size_t, httplib::DataSink& sink) {
            if (sent++ < 20) return sink.write(piece.data(), piece.size());  // 1000 bytes in 20 chunks
            sink.done();
            return true;
        },
        "application/json");
    ASSERT_TRUE(big) << httplib::to_string(big.error());
    EXPECT_EQ(big->status, 413);
    EXPECT_EQ(body_of(big)["error"]["code"], "request_too_large");
    // Under the limit, chunked: read whole.
    release_.store(true);  // the echo route answers at once
    sent = 0;
    auto small = client_->Post(
        "/v1/echo",
        [&](size_t, httplib::DataSink& sink) {
            if (sent++ < 2) return sink.write(piece.data(), 10);
            sink.done();
            return true;
        },
        "application/json");
    ASSERT_TRUE(small);
    EXPECT_EQ(small->status, 200);
    EXPECT_EQ(small->body, "done");
}

// Issue 11: httplib's stop() did nothing before its accept loop ran, so a shutdown just after bind() was
// lost and run() served forever.
TEST(HttpServerShutdown, ShutdownBeforeRunIsNotLost) {
    HttpServerConfig c;
    c.port = 0;
    c.num_threads = 2;
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
            httplib::Client c("127.0.0.1", server_->port());
            auto r = c.Post("/v1/echo", "{}", "application/json");
            statuses[i] = r ? r->status : -1;
        });
    }
    while (server_->admitted() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    auto third = client_->Post("/v1/echo", "{}", "application/json");
    ASSERT_TRUE(third);
    EXPECT_EQ(third->status, 503);
    EXPECT_EQ(third->get_header_value("Retry-After"), "1");
    EXPECT_EQ(body_of(third)["error"]["type"], "server_error");
    release_.store(true);
    for (auto& t : holders) t.join();
    EXPECT_EQ(statuses, (std::vector<int>{200, 200}));
    // A slot is released when httplib drops the response, just after the client has the last byte.
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
        httplib::Client c("127.0.0.1", server_->port());
        auto r = c.Post("/v1/echo", "{}", "application/json");
        if (r) body = r->body;
    });
    while (server_->admitted() < 1) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    server_->shutdown();
    holder.join();
    EXPECT_EQ(body, "aborted");
    thread_.join();
}

}  // namespace
}  // namespace volt::server
