// The operations pieces without the model: process.h (a stopped child gets SIGKILL at once, exit
// descriptions), the supervisor's reading of the server's command line, the router's affinity key, and
// the router over in-process HttpServer backends: a 5xx before the first byte is retried on another
// backend (and ejects the first), a backend that breaks an SSE answer mid-way gives the client an error
// event then [DONE], never a silent end; /v1/models is the union. Real processes: tests/api/chaos.test.mjs.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <thread>

#include "router/router.h"
#include "server/http_client.h"
#include "supervisor/process.h"
#include "supervisor/supervisor.h"

namespace volt {
namespace {

using namespace std::chrono_literals;

TEST(Process, AStoppedChildIsKilledWithoutWaitingForTheGrace) {
    auto pid = supervisor::spawn({{"sleep", "100"}, {}, -1});
    ASSERT_TRUE(pid.is_ok()) << pid.status().message();
    ASSERT_EQ(kill(*pid, SIGSTOP), 0);
    for (int i = 0; i < 500 && !supervisor::is_stopped(*pid); ++i) std::this_thread::sleep_for(10ms);
    ASSERT_TRUE(supervisor::is_stopped(*pid));
    // A one-hour grace: only the stopped-state check makes this return.
    const int st = supervisor::terminate(*pid, std::chrono::hours(1));
    ASSERT_TRUE(WIFSIGNALED(st));
    EXPECT_EQ(WTERMSIG(st), SIGKILL);
    EXPECT_EQ(supervisor::describe_exit(st).rfind("killed by signal 9", 0), 0u)
        << supervisor::describe_exit(st);
}

TEST(Process, ARunningChildGetsSigtermAndItsOwnProcessGroup) {
    auto pid = supervisor::spawn({{"sleep", "100"}, {{"VOLT_TEST_VAR", "1"}}, -1});
    ASSERT_TRUE(pid.is_ok());
    EXPECT_EQ(getpgid(*pid), *pid);
    const int st = supervisor::terminate(*pid, std::chrono::hours(1));
    ASSERT_TRUE(WIFSIGNALED(st));
    EXPECT_EQ(WTERMSIG(st), SIGTERM);
    auto missing = supervisor::spawn({{"/nonexistent/voltllm-test"}, {}, -1});
    ASSERT_TRUE(missing.is_ok());
    int st2 = 0;
    ASSERT_EQ(waitpid(*missing, &st2, 0), *missing);
    EXPECT_EQ(supervisor::describe_exit(st2), "exited with status 127");
}

TEST(Supervisor, ReadsTheServersAddressFromItsCommandLine) {
    supervisor::SupervisorConfig c;
    c.child_argv = {"voltllm", "serve", "--host", "0.0.0.0", "--port=8123", "--api-key", "k"};
    ASSERT_TRUE(supervisor::read_child_address(&c).is_ok());
    EXPECT_EQ(c.host, "127.0.0.1");
    EXPECT_EQ(c.port, 8123);
    EXPECT_EQ(c.api_key, "k");
    c.child_argv = {"voltllm", "serve"};
    EXPECT_FALSE(supervisor::read_child_address(&c).is_ok());
    c.child_argv = {"voltllm", "serve", "--port", "0"};
    EXPECT_FALSE(supervisor::read_child_address(&c).is_ok());
}

TEST(Router, AffinityKeyIsTheConversationStart) {
    const std::string a = R"({"messages":[{"role":"system","content":"S"},{"role":"user","content":"U"}]})";
    const std::string b =
        R"({"messages":[{"role":"system","content":"S"},{"role":"user","content":"U"},{"role":"assistant","content":"A"},{"role":"user","content":"next"}]})";
    EXPECT_EQ(router::affinity_key(a, 1024), router::affinity_key(b, 1024));
    EXPECT_NE(router::affinity_key(a, 1024),
              router::affinity_key(R"({"messages":[{"role":"user","content":"other"}]})", 1024));
    EXPECT_EQ(router::affinity_key(R"({"prompt":"abcdef"})", 3), "abc");
    EXPECT_EQ(router::affinity_key("not json", 10), "");
}

// A backend: its own HttpServer on a free port, run on a thread.
struct Backend {
    server::HttpServer http;
    std::thread thread;
    explicit Backend(const std::function<void(server::HttpServer&)>& routes) : http(config()) {
        http.get(
            "/health", [](const server::HttpRequest&, server::HttpResponse& r) { r.status = 200; }, true);
        routes(http);
        EXPECT_TRUE(http.bind().is_ok());
        thread = std::thread([this] { http.run(); });
    }
    ~Backend() {
        http.shutdown();
        thread.join();
    }
    std::string url() const { return "http://127.0.0.1:" + std::to_string(http.port()); }
    static server::HttpServerConfig config() {
        server::HttpServerConfig c;
        c.port = 0;
        c.io_threads = 1;
        c.shutdown_grace = 0ms;
        return c;
    }
};

void models_route(server::HttpServer& h, const std::string& id) {
    h.get("/v1/models", [id](const server::HttpRequest&, server::HttpResponse& r) {
        server::HttpServer::send_json(r, 200,
                                      {{"object", "list"}, {"data", {{{"id", id}, {"object", "model"}}}}});
    });
}

// An SSE body that sends one event, then breaks (no last chunk, connection closed): a dying backend.
class BreakingBody : public server::StreamBody {
  public:
    void set_wake(std::function<void()>) override {}
    bool pump(std::string* out, bool) override {
        *out = "data: {\"choices\":[{\"text\":\"a\"}]}\n\n";
        return true;
    }
    void cancel() override {}
    bool complete() const override { return false; }
};

struct RouterRun {
    router::Router router;
    std::thread thread;
    explicit RouterRun(router::RouterConfig c) : router(std::move(c)) {
        EXPECT_TRUE(router.start().is_ok());
        thread = std::thread([this] { router.run(); });
        // Admitted by the first good health check of each.
        for (int i = 0; i < 1000; ++i) {
            bool all = true;
            for (const auto& b : router.backends()) all = all && b.up;
            if (all) break;
            std::this_thread::sleep_for(10ms);
        }
    }
    ~RouterRun() {
        router.shutdown();
        thread.join();
    }
};

router::RouterConfig router_config(std::vector<std::string> backends) {
    router::RouterConfig c;
    c.http.port = 0;
    c.http.io_threads = 2;
    c.http.shutdown_grace = 0ms;
    c.backends = std::move(backends);
    c.health_interval = 50ms;
    c.eject_min = 60s;  // an ejected backend stays out for the whole test
    return c;
}

TEST(Router, A5xxBeforeTheFirstByteIsRetriedOnAnotherBackendAndEjects) {
    Backend failing([](server::HttpServer& h) {
        h.post("/v1/completions", [](const server::HttpRequest&, server::HttpResponse& r) {
            server::HttpServer::send_json(r, 500, {{"error", {{"message", "boom"}}}});
        });
        models_route(h, "model-a");
    });
    Backend good([](server::HttpServer& h) {
        h.post("/v1/completions", [](const server::HttpRequest& q, server::HttpResponse& r) {
            server::HttpServer::send_json(r, 200, {{"from", "good"}, {"echo", q.body}});
        });
        models_route(h, "model-b");
    });
    RouterRun run(router_config({failing.url(), good.url()}));
    for (const auto& b : run.router.backends()) ASSERT_TRUE(b.up) << b.url;
    server::HttpClient c("127.0.0.1", run.router.port(), 10s);
    // /v1/models: the union, while both are admitted.
    auto models = c.request("GET", "/v1/models");
    ASSERT_TRUE(models.is_ok());
    EXPECT_NE(models->body.find("model-a"), std::string::npos);
    EXPECT_NE(models->body.find("model-b"), std::string::npos);
    for (int i = 0; i < 4; ++i) {
        auto r = c.request("POST", "/v1/completions", "{\"n\":" + std::to_string(i) + "}");
        ASSERT_TRUE(r.is_ok()) << r.status().message();
        EXPECT_EQ(r->status, 200) << r->body;
        EXPECT_NE(r->body.find("\"good\""), std::string::npos) << r->body;
    }
    const auto views = run.router.backends();
    EXPECT_FALSE(views[0].up);        // ejected by the 500 (passive), kept out by eject_min
    EXPECT_EQ(views[0].requests, 1);  // the first request tried it (ties go in turn from the first)
    EXPECT_EQ(views[0].ejections, 1);
    EXPECT_EQ(views[1].requests, 4);
    EXPECT_NE(run.router.metrics_text().find("voltllm_router_retries_total 1\n"), std::string::npos)
        << run.router.metrics_text();
}

// The only backend answers 503 with Retry-After (a server still loading, or at capacity): no other backend
// does better, so the router relays that answer, its Retry-After included.
TEST(Router, AHeld503KeepsItsRetryAfter) {
    Backend busy([](server::HttpServer& h) {
        h.post("/v1/completions", [](const server::HttpRequest&, server::HttpResponse& r) {
            r.set_header("Retry-After", "7");
            server::HttpServer::send_json(r, 503, {{"error", {{"code", "queue_full"}}}});
        });
        models_route(h, "model-a");
    });
    RouterRun run(router_config({busy.url()}));
    ASSERT_TRUE(run.router.backends()[0].up);
    server::HttpClient c("127.0.0.1", run.router.port(), 10s);
    auto r = c.request("POST", "/v1/completions", "{}");
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(r->status, 503) << r->body;
    EXPECT_NE(r->body.find("queue_full"), std::string::npos) << r->body;
    EXPECT_EQ(r->header("Retry-After"), "7");
}

TEST(Router, ABackendBreakingAStreamMidwayGivesAnErrorEventThenDone) {
    Backend breaking([](server::HttpServer& h) {
        h.post("/v1/completions", [](const server::HttpRequest&, server::HttpResponse& r) {
            r.content_type = "text/event-stream";
            r.stream = std::make_shared<BreakingBody>();
        });
    });
    RouterRun run(router_config({breaking.url()}));
    server::HttpClient c("127.0.0.1", run.router.port(), 10s);
    auto r = c.request("POST", "/v1/completions", "{\"stream\":true}");
    ASSERT_TRUE(r.is_ok()) << r.status().message();  // the router's answer itself is complete
    EXPECT_EQ(r->status, 200);
    std::vector<std::string> events;
    server::SseSplitter sse;
    sse.feed(r->body, [&](const std::string& d) { events.push_back(d); });
    ASSERT_EQ(events.size(), 3u) << r->body;
    EXPECT_EQ(events[0], "{\"choices\":[{\"text\":\"a\"}]}");
    EXPECT_NE(events[1].find("\"code\":\"backend_failed\""), std::string::npos) << events[1];
    EXPECT_NE(events[1].find(breaking.url()), std::string::npos) << events[1];
    EXPECT_EQ(events[2], "[DONE]");
    EXPECT_NE(run.router.metrics_text().find("voltllm_router_midstream_failures_total 1\n"),
              std::string::npos);
}

// The router's own start: while no backend has passed /health (each still loading, as `voltllm serve`
// answers 503 to /health and /v1/models then), GET /v1/models is 503 no_backend, never an empty 200 that a
// client polling it for readiness would take for "ready"; once one is admitted, its list.
TEST(Router, ModelsIs503UntilABackendIsAdmitted) {
    std::atomic<bool> loaded{false};
    server::HttpServer backend(Backend::config());
    backend.get(
        "/health",
        [&loaded](const server::HttpRequest&, server::HttpResponse& r) {
            server::HttpServer::send_json(r, loaded.load() ? 200 : 503,
                                          {{"status", loaded.load() ? "ok" : "loading"}});
        },
        true);
    backend.get("/v1/models", [&loaded](const server::HttpRequest&, server::HttpResponse& r) {
        if (!loaded.load()) {
            server::HttpServer::send_json(r, 503, {{"error", {{"code", "model_loading"}}}});
            return;
        }
        server::HttpServer::send_json(
            r, 200, {{"object", "list"}, {"data", {{{"id", "model-a"}, {"object", "model"}}}}});
    });
    ASSERT_TRUE(backend.bind().is_ok());
    std::thread backend_thread([&backend] { backend.run(); });
    router::Router router(router_config({"http://127.0.0.1:" + std::to_string(backend.port())}));
    ASSERT_TRUE(router.start().is_ok());
    std::thread router_thread([&router] { router.run(); });
    server::HttpClient c("127.0.0.1", router.port(), 10s);

    std::this_thread::sleep_for(200ms);  // a few health rounds (50 ms), all 503
    ASSERT_FALSE(router.backends()[0].up);
    auto loading = c.request("GET", "/v1/models");
    ASSERT_TRUE(loading.is_ok()) << loading.status().message();
    EXPECT_EQ(loading->status, 503) << loading->body;
    EXPECT_NE(loading->body.find("\"code\":\"no_backend\""), std::string::npos) << loading->body;
    EXPECT_EQ(c.request("GET", "/health")->status, 503);

    loaded.store(true);
    for (int i = 0; i < 1000 && !router.backends()[0].up; ++i) std::this_thread::sleep_for(10ms);
    ASSERT_TRUE(router.backends()[0].up);
    auto ready = c.request("GET", "/v1/models");
    ASSERT_TRUE(ready.is_ok());
    EXPECT_EQ(ready->status, 200) << ready->body;
    EXPECT_NE(ready->body.find("model-a"), std::string::npos) << ready->body;

    // Every backend ejected again: 503, not the last known list (as /health).
    loaded.store(false);
    for (int i = 0; i < 1000 && router.backends()[0].up; ++i) std::this_thread::sleep_for(10ms);
    ASSERT_FALSE(router.backends()[0].up);
    auto ejected = c.request("GET", "/v1/models");
    ASSERT_TRUE(ejected.is_ok());
    EXPECT_EQ(ejected->status, 503) << ejected->body;
    EXPECT_NE(ejected->body.find("\"code\":\"no_backend\""), std::string::npos) << ejected->body;
    EXPECT_EQ(c.request("GET", "/health")->status, 503);

    router.shutdown();
    router_thread.join();
    backend.shutdown();
    backend_thread.join();
}

}  // namespace
}  // namespace volt
