// HttpClient's kept-alive connection against a scripted peer (raw_http_server.h): a connection the server
// closed while idle is retried once on a new connection (request() and stream(), any method, the body
// sent again), but never when part of the response arrived, never when the connection was fresh, and only
// once. Each script answers normally on the connection a forbidden retry would use, so a retry that must
// not happen shows as a success where the test expects the failure (no timing is involved).
#include "server/http_client.h"

#include <gtest/gtest.h>

#include "server/raw_http_server.h"

namespace volt::server {
namespace {

using test_support::RawHttpServer;
using namespace std::chrono_literals;

// Answers one request with keep-alive, then closes the connection (idle, as llama-server does).
void answer_once_then_close(RawHttpServer::Conn& conn, int index) {
    if (conn.read_request()) conn.send(RawHttpServer::ok("answer " + std::to_string(index)));
}

TEST(HttpClientReuse, IdleConnectionClosedByTheServerIsRetriedOnANewOne) {
    RawHttpServer server(answer_once_then_close);
    HttpClient client("127.0.0.1", server.port(), 10s);
    auto first = client.request("GET", "/first");
    ASSERT_TRUE(first.is_ok()) << first.status().to_string();
    EXPECT_EQ(first->body, "answer 0");
    ASSERT_TRUE(server.wait_closed(1));  // the kept-alive connection is gone before the next request

    auto second = client.request("POST", "/second", R"({"x":1})");
    ASSERT_TRUE(second.is_ok()) << second.status().to_string();
    EXPECT_EQ(second->status, 200);
    EXPECT_EQ(second->body, "answer 1");
    EXPECT_EQ(server.accepted(), 2);
    const std::vector<std::string> requests = server.requests();
    ASSERT_EQ(requests.size(), 2u);  // the first write went to the closed socket, never read
    EXPECT_EQ(requests[1].rfind("POST /second ", 0), 0u) << requests[1];
    EXPECT_NE(requests[1].find(R"({"x":1})"), std::string::npos) << requests[1];

    ASSERT_TRUE(server.wait_closed(2));
    auto third = client.request("GET", "/third");  // and again: each stale connection gets its retry
    ASSERT_TRUE(third.is_ok()) << third.status().to_string();
    EXPECT_EQ(third->body, "answer 2");
}

TEST(HttpClientReuse, StreamOnAClosedIdleConnectionIsRetriedBeforeAnyCallback) {
    RawHttpServer server(answer_once_then_close);
    HttpClient client("127.0.0.1", server.port(), 10s);
    ASSERT_TRUE(client.request("GET", "/first").is_ok());
    ASSERT_TRUE(server.wait_closed(1));
    std::string data;
    std::vector<int> statuses;
    auto r = client.stream(
        "POST", "/v1/completions", "{}", {},
        [&](std::string_view piece) {
            data.append(piece);
            return true;
        },
        [&](int status) { statuses.push_back(status); });
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(statuses, std::vector<int>{200});  // once: the failed try called nothing
    EXPECT_EQ(data, "answer 1");
}

TEST(HttpClientReuse, NoRetryOnceResponseBytesArrived) {
    // Connection 0 answers the first request, then sends part of the second answer and closes; 1 would
    // answer normally.
    for (const std::string& cut :
         {std::string("HTTP/1.1 2"), std::string("HTTP/1.1 200 OK\r\nContent-Length: "
                                                 "20\r\n\r\npartial")}) {
        RawHttpServer server([&](RawHttpServer::Conn& conn, int index) {
            if (!conn.read_request()) return;
            if (index > 0) {
                conn.send(RawHttpServer::ok("retried"));
                return;
            }
            conn.send(RawHttpServer::ok("first"));
            if (conn.read_request()) conn.send(cut);
        });
        HttpClient client("127.0.0.1", server.port(), 10s);
        ASSERT_TRUE(client.request("GET", "/first").is_ok());
        std::string data;
        auto r = client.stream("GET", "/second", "", {}, [&](std::string_view piece) {
            data.append(piece);
            return true;
        });
        ASSERT_FALSE(r.is_ok()) << "retried after part of the response: " << r->body << data;
        EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
        EXPECT_EQ(server.accepted(), 1);
    }
}

TEST(HttpClientReuse, NoRetryOnAFreshConnection) {
    // Connection 0 reads the request and closes unanswered; 1 would answer.
    RawHttpServer server([](RawHttpServer::Conn& conn, int index) {
        if (conn.read_request() && index > 0) conn.send(RawHttpServer::ok("retried"));
    });
    HttpClient client("127.0.0.1", server.port(), 10s);
    auto r = client.request("POST", "/once", "{}");
    ASSERT_FALSE(r.is_ok()) << "a fresh connection was retried: " << r->body;
    EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(r.status().message().find("end of stream"), std::string::npos) << r.status().message();
}

TEST(HttpClientReuse, RetriedOnlyOnce) {
    // 0 answers and closes; 1 (the retry, a fresh connection) reads the request and closes unanswered; 2
    // would answer.
    RawHttpServer server([](RawHttpServer::Conn& conn, int index) {
        if (!conn.read_request()) return;
        if (index != 1) conn.send(RawHttpServer::ok("answer " + std::to_string(index)));
    });
    HttpClient client("127.0.0.1", server.port(), 10s);
    ASSERT_TRUE(client.request("GET", "/first").is_ok());
    ASSERT_TRUE(server.wait_closed(1));
    auto r = client.request("POST", "/second", "{}");
    ASSERT_FALSE(r.is_ok()) << "retried twice: " << r->body;
    EXPECT_NE(r.status().message().find("end of stream"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("new connection"), std::string::npos) << r.status().message();
    EXPECT_EQ(server.accepted(), 2);
    // The client is usable afterwards: the next call connects afresh (connection 2 answers).
    auto next = client.request("GET", "/next");
    ASSERT_TRUE(next.is_ok()) << next.status().to_string();
    EXPECT_EQ(next->body, "answer 2");
}

}  // namespace
}  // namespace volt::server
