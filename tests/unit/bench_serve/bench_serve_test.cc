// Tests of `voltllm bench serve`'s library (src/bench_serve/): percentiles against hand-computed numpy
// "linear" values, the summary over a fixed list of results, the SSE parser, and whole runs against a fake
// OpenAI SSE server written here on the HTTP layer (server/http_server.h). No assertion depends on timing:
// runs are checked by counts, token totals, JSON fields and a concurrency bound.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "bench_serve/load_generator.h"
#include "bench_serve/stats.h"
#include "server/http_server.h"
#include "server/raw_http_server.h"

namespace volt::bench {
namespace {

TEST(BenchStats, PercentileIsNumpyLinear) {
    // rank = q/100 * (n-1), interpolated: [1,2,3,4] -> p50 at rank 1.5 = 2.5, p90 at 2.7 = 3.7, p99 at 2.97.
    EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 50), 2.5);
    EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4}, 90), 3.7);
    EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4}, 99), 3.97);
    EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4}, 0), 1);
    EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4}, 100), 4);
    // rank 0.4 * 4 = 1.6: 20 + 0.6 * (35 - 20) = 29.
    EXPECT_DOUBLE_EQ(percentile({15, 20, 35, 40, 50}, 40), 29);
    EXPECT_DOUBLE_EQ(percentile({5}, 99), 5);
    EXPECT_DOUBLE_EQ(percentile({}, 50), 0);
    // Population standard deviation: mean 5, squared deviations sum to 32 over 8 values -> 2.
    EXPECT_DOUBLE_EQ(stddev({2, 4, 4, 4, 5, 5, 7, 9}), 2.0);
    EXPECT_DOUBLE_EQ(mean({}), 0);
}

TEST(BenchStats, SummaryOfAFixedList) {
    RequestResult a;
    a.success = true;
    a.prompt_len = 10;
    a.output_tokens = 11;
    a.ttft = 0.1;
    a.latency = 1.1;  // TPOT (1.1 - 0.1) / 10 = 0.1
    a.itl = std::vector<double>(10, 0.1);
    RequestResult b;
    b.success = true;
    b.prompt_len = 20;
    b.output_tokens = 5;
    b.ttft = 0.3;
    b.latency = 0.7;  // TPOT 0.4 / 4 = 0.1
    b.itl = {0.1, 0.1, 0.1, 0.1};
    RequestResult failed;
    failed.error = "HTTP 500";
    BenchSummary s = summarize({a, b, failed}, 2.0);
    EXPECT_EQ(s.completed, 2);
    EXPECT_EQ(s.failed, 1);
    EXPECT_EQ(s.total_input_tokens, 30);
    EXPECT_EQ(s.total_output_tokens, 16);
    EXPECT_DOUBLE_EQ(s.request_throughput, 1.0);
    EXPECT_DOUBLE_EQ(s.output_throughput, 8.0);
    EXPECT_DOUBLE_EQ(s.total_token_throughput, 23.0);
    EXPECT_NEAR(s.ttft.mean_ms, 200, 1e-9);
    EXPECT_NEAR(s.ttft.median_ms, 200, 1e-9);
    EXPECT_NEAR(s.ttft.p90_ms, 280, 1e-9);  // 100 + 0.9 * 200
    EXPECT_NEAR(s.ttft.p99_ms, 298, 1e-9);
    EXPECT_NEAR(s.ttft.std_ms, 100, 1e-9);
    EXPECT_NEAR(s.tpot.mean_ms, 100, 1e-9);
    EXPECT_NEAR(s.itl.median_ms, 100, 1e-9);
    EXPECT_NEAR(s.e2el.mean_ms, 900, 1e-9);
}

TEST(BenchLoad, ArrivalTimes) {
    EXPECT_EQ(arrival_times(3, std::numeric_limits<double>::infinity(), 1), (std::vector<double>{0, 0, 0}));
    std::vector<double> t = arrival_times(2000, 10.0, 7);
    EXPECT_EQ(t.front(), 0.0);
    EXPECT_TRUE(std::is_sorted(t.begin(), t.end()));
    EXPECT_EQ(t, arrival_times(2000, 10.0, 7));  // seeded
    // 1999 exponential gaps of mean 0.1 s: the sample mean is within 10% with overwhelming probability
    // (standard error 0.1 / sqrt(1999) = 2.2%), and the seed fixes it anyway.
    EXPECT_NEAR(t.back() / 1999.0, 0.1, 0.01);
}

TEST(BenchLoad, RandomRequestsAndBodies) {
    BenchConfig c;
    c.num_prompts = 3;
    c.random_input_len = 5;
    c.random_output_len = 9;
    c.random_vocab_size = 100;
    std::vector<BenchRequest> r = make_random_requests(c);
    ASSERT_EQ(r.size(), 3u);
    for (const BenchRequest& q : r) {
        EXPECT_EQ(q.prompt_ids.size(), 5u);
        EXPECT_EQ(q.prompt_len, 5);
        for (int32_t id : q.prompt_ids) EXPECT_TRUE(id >= 0 && id < 100);
    }
    nlohmann::json body = request_body(c, "m", r[0]);
    EXPECT_EQ(body["model"], "m");
    EXPECT_EQ(body["max_tokens"], 9);
    EXPECT_EQ(body["ignore_eos"], true);
    EXPECT_EQ(body["stream"], true);
    EXPECT_EQ(body["stream_options"]["include_usage"], true);
    EXPECT_EQ(body["prompt"].size(), 5u);

    c.endpoint = "/v1/chat/completions";
    std::vector<BenchRequest> chat = make_random_requests(c);
    EXPECT_TRUE(chat[0].prompt_ids.empty());
    EXPECT_EQ(chat[0].prompt_text.rfind("t", 0), 0u);
    nlohmann::json cb = request_body(c, "m", chat[0]);
    EXPECT_EQ(cb["messages"][0]["role"], "user");
    EXPECT_EQ(cb["max_completion_tokens"], 9);
}

TEST(BenchLoad, SseParserAcrossChunkBoundaries) {
    SseStreamParser p;
    std::string stream =
        "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n"
        "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"hm\"}}]}\r\n\r\n"
        "data: {\"choices\":[{\"delta\":{\"content\":\"A\"}}]}\n\n"
        "data: {\"choices\":[{\"text\":\"B\"}]}\n\n"
        ": a comment line\n\n"
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3}}\n\n"
        "data: [DONE]\n\n";
    for (size_t i = 0; i < stream.size(); i += 5)
        ASSERT_TRUE(p.feed(stream.substr(i, 5), static_cast<double>(i)));
    EXPECT_EQ(p.token_times().size(), 3u);  // reasoning, content, text; not the role chunk
    EXPECT_EQ(p.usage_prompt_tokens(), 7);
    EXPECT_EQ(p.usage_completion_tokens(), 3);
    EXPECT_TRUE(p.done());

    SseStreamParser bad;
    EXPECT_FALSE(bad.feed("data: {nope\n\n", 0));
    EXPECT_NE(bad.error().find("malformed"), std::string::npos);
}

TEST(BenchLoad, DatasetFile) {
    auto path = std::filesystem::temp_directory_path() / "volt_bench_dataset_test.jsonl";
    std::ofstream(path) << "{\"prompt\": \"hello\", \"output_len\": 3}\n\n{\"prompt\": [1, 2, 3]}\n";
    BenchConfig c;
    c.num_prompts = 3;
    c.random_output_len = 8;
    auto r = load_dataset(path.string(), c);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    ASSERT_EQ(r->size(), 3u);
    EXPECT_EQ((*r)[0].prompt_text, "hello");
    EXPECT_EQ((*r)[0].output_len, 3);
    EXPECT_EQ((*r)[1].prompt_ids, (std::vector<int32_t>{1, 2, 3}));
    EXPECT_EQ((*r)[1].output_len, 8);
    EXPECT_EQ((*r)[2].prompt_text, "hello");  // cycles

    std::ofstream(path) << "{\"prompt\": \"ok\"}\n{\"prompt\": 5}\n";
    auto bad = load_dataset(path.string(), c);
    ASSERT_FALSE(bad.is_ok());
    EXPECT_NE(bad.status().message().find("line 2"), std::string::npos) << bad.status().message();
    std::filesystem::remove(path);
    EXPECT_EQ(load_dataset(path.string(), c).status().code(), StatusCode::kNotFound);
}

// A fake OpenAI server on the HTTP layer (server/http_server.h): streams max_tokens chunks of one
// character each, then usage and [DONE]. A prompt "FAIL" gets a 400. It records the largest number of
// requests in flight at once.
class FakeServer {
  public:
    FakeServer() : server_(config()) {
        server_.get("/v1/models", [](const server::HttpRequest&, server::HttpResponse& res) {
            res.set_content(R"({"object":"list","data":[{"id":"fake-model","object":"model"}]})",
                            "application/json");
        });
        auto handler = [this](const server::HttpRequest& req, server::HttpResponse& res) {
            nlohmann::json body = nlohmann::json::parse(req.body);
            const bool chat = req.path == "/v1/chat/completions";
            {
                std::lock_guard<std::mutex> lock(mu_);
                bodies_.push_back(body);
            }
            std::string prompt = chat ? body["messages"][0]["content"].get<std::string>()
                                      : (body["prompt"].is_string() ? body["prompt"].get<std::string>() : "");
            if (prompt == "FAIL") {
                res.status = 400;
                res.set_content(R"({"error":{"message":"bad prompt"}})", "application/json");
                return;
            }
            int64_t prompt_tokens =
                body["prompt"].is_array() ? static_cast<int64_t>(body["prompt"].size()) : 4;
            int64_t n =
                chat ? body["max_completion_tokens"].get<int64_t>() : body["max_tokens"].get<int64_t>();
            int now = ++in_flight_;
            for (int seen = max_in_flight_.load();
                 now > seen && !max_in_flight_.compare_exchange_weak(seen, now);) {
            }
            res.content_type = "text/event-stream";
            res.stream = std::make_shared<Stream>(this, chat, n, prompt_tokens);
        };
        server_.post("/v1/completions", handler);
        server_.post("/v1/chat/completions", handler);
        EXPECT_TRUE(server_.bind().is_ok());
        thread_ = std::thread([this] { server_.run(); });
    }
    ~FakeServer() {
        server_.shutdown();
        thread_.join();
    }
    std::string url() const { return "http://127.0.0.1:" + std::to_string(server_.port()); }
    int max_in_flight() const { return max_in_flight_.load(); }
    std::vector<nlohmann::json> bodies() {
        std::lock_guard<std::mutex> lock(mu_);
        return bodies_;
    }

  private:
    static server::HttpServerConfig config() {
        server::HttpServerConfig c;
        c.port = 0;
        c.heartbeat = std::chrono::milliseconds(5);  // the pump tick that ends the hold below
        c.shutdown_grace = std::chrono::milliseconds(0);
        return c;
    }
    // Holds the stream open a little so requests overlap (no assertion depends on this time), then sends
    // it whole.
    class Stream : public server::StreamBody {
      public:
        Stream(FakeServer* owner, bool chat, int64_t n, int64_t prompt_tokens)
            : owner_(owner), chat_(chat), n_(n), prompt_tokens_(prompt_tokens) {}
        void set_wake(std::function<void()>) override {}
        bool pump(std::string* out, bool) override {
            if (std::chrono::steady_clock::now() - start_ < std::chrono::milliseconds(20)) return false;
            if (chat_) *out += "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\n\n";
            for (int64_t i = 0; i < n_; ++i) {
                *out += chat_ ? "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n"
                              : "data: {\"choices\":[{\"index\":0,\"text\":\"x\"}]}\n\n";
            }
            *out += "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":" + std::to_string(prompt_tokens_) +
                    ",\"completion_tokens\":" + std::to_string(n_) + "}}\n\n";
            *out += "data: [DONE]\n\n";
            --owner_->in_flight_;
            return true;
        }
        void cancel() override { --owner_->in_flight_; }

      private:
        FakeServer* owner_;
        bool chat_;
        int64_t n_, prompt_tokens_;
        std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
    };

    server::HttpServer server_;
    std::thread thread_;
    std::atomic<int> in_flight_{0}, max_in_flight_{0};
    std::mutex mu_;
    std::vector<nlohmann::json> bodies_;
};

TEST(BenchRun, CompletionsWithConcurrencyCap) {
    FakeServer fake;
    BenchConfig c;
    c.base_url = fake.url();
    c.model = "fake-model";
    c.num_prompts = 6;
    c.random_input_len = 7;
    c.random_output_len = 5;
    c.max_concurrency = 2;
    auto run = run_benchmark(c, make_random_requests(c));
    ASSERT_TRUE(run.is_ok()) << run.status().to_string();
    const BenchSummary& s = run->summary;
    EXPECT_EQ(s.completed, 6);
    EXPECT_EQ(s.failed, 0);
    EXPECT_EQ(s.total_input_tokens, 42);
    EXPECT_EQ(s.total_output_tokens, 30);
    EXPECT_LE(fake.max_in_flight(), 2);
    for (const RequestResult& r : run->results) {
        EXPECT_TRUE(r.success) << r.error;
        EXPECT_EQ(r.output_tokens, 5);
        EXPECT_EQ(r.itl.size(), 4u);  // 5 chunks with text -> 4 gaps
        EXPECT_GE(r.latency, r.ttft);
    }
    std::vector<nlohmann::json> bodies = fake.bodies();
    ASSERT_EQ(bodies.size(), 6u);
    for (const nlohmann::json& b : bodies) {
        EXPECT_EQ(b["model"], "fake-model");
        EXPECT_EQ(b["max_tokens"], 5);
        EXPECT_EQ(b["ignore_eos"], true);
        EXPECT_EQ(b["prompt"].size(), 7u);
    }

    nlohmann::json j = result_json(c, *run);
    EXPECT_EQ(j["completed"], 6);
    EXPECT_EQ(j["failed"], 0);
    EXPECT_EQ(j["total_output_tokens"], 30);
    EXPECT_EQ(j["max_concurrency"], 2);
    EXPECT_EQ(j["request_rate"], "inf");
    EXPECT_EQ(j["input_lens"], nlohmann::json::array({7, 7, 7, 7, 7, 7}));
    EXPECT_EQ(j["output_lens"], nlohmann::json::array({5, 5, 5, 5, 5, 5}));
    EXPECT_EQ(j["itls"].size(), 6u);
    for (const char* key :
         {"mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p90_ttft_ms", "p99_ttft_ms", "mean_tpot_ms",
          "p99_tpot_ms", "mean_itl_ms", "p99_itl_ms", "mean_e2el_ms", "p99_e2el_ms", "duration",
          "request_throughput", "output_throughput", "total_token_throughput", "total_input_tokens"}) {
        EXPECT_TRUE(j.contains(key)) << key;
    }
    EXPECT_NE(format_report(c, *run).find("Successful requests:                     6"), std::string::npos);
}

TEST(BenchRun, ChatFromDatasetWithAFailureAndModelFromServer) {
    FakeServer fake;
    auto path = std::filesystem::temp_directory_path() / "volt_bench_chat_test.jsonl";
    std::ofstream(path) << "{\"prompt\": \"hi\", \"output_len\": 3}\n{\"prompt\": \"FAIL\"}\n"
                           "{\"prompt\": \"yo\", \"output_len\": 1}\n";
    BenchConfig c;
    c.base_url = fake.url();
    c.endpoint = "/v1/chat/completions";
    c.num_prompts = 3;
    c.random_output_len = 2;
    c.request_rate = 1000;  // Poisson arrivals; the counts below do not depend on them
    auto requests = load_dataset(path.string(), c);
    std::filesystem::remove(path);
    ASSERT_TRUE(requests.is_ok());
    auto run = run_benchmark(c, *requests);
    ASSERT_TRUE(run.is_ok()) << run.status().to_string();
    EXPECT_EQ(run->model, "fake-model");
    EXPECT_EQ(run->summary.completed, 2);
    EXPECT_EQ(run->summary.failed, 1);
    EXPECT_EQ(run->summary.total_output_tokens, 4);
    EXPECT_EQ(run->summary.total_input_tokens, 8);  // the fake answers 4 prompt tokens for text
    EXPECT_NE(run->results[1].error.find("HTTP 400"), std::string::npos) << run->results[1].error;
    EXPECT_EQ(run->results[2].itl.size(), 0u);
    EXPECT_EQ(fake.bodies()[0]["model"], "fake-model");
}

// A /v1/completions answer of two one-character chunks, usage and [DONE], as one keep-alive response.
std::string sse_answer() {
    return test_support::RawHttpServer::ok(
        "data: {\"choices\":[{\"index\":0,\"text\":\"x\"}]}\n\n"
        "data: {\"choices\":[{\"index\":0,\"text\":\"y\"}]}\n\n"
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\n"
        "data: [DONE]\n\n",
        "text/event-stream");
}

// A server that closes every kept-alive connection after one answer (llama-server closes idle ones): each
// worker's next request finds its connection closed and is sent again on a new one, so none fails (it
// failed with "transport: read: end of stream" before the client retried).
TEST(BenchRun, KeptAliveConnectionsClosedByTheServerLoseNoRequest) {
    test_support::RawHttpServer server([](test_support::RawHttpServer::Conn& conn, int) {
        if (conn.read_request()) conn.send(sse_answer());
    });
    BenchConfig c;
    c.base_url = server.url();
    c.model = "m";
    c.num_prompts = 4;
    c.random_input_len = 3;
    c.random_output_len = 2;
    c.max_concurrency = 1;
    auto run = run_benchmark(c, make_random_requests(c));
    ASSERT_TRUE(run.is_ok()) << run.status().to_string();
    for (const RequestResult& r : run->results) EXPECT_TRUE(r.success) << r.error;
    EXPECT_EQ(run->summary.completed, 4);
    EXPECT_EQ(run->summary.failed, 0);
    EXPECT_EQ(run->summary.total_output_tokens, 8);
    EXPECT_EQ(server.accepted(), 4);
    EXPECT_EQ(server.requests().size(), 4u);
}

// A request whose retry fails too is counted as failed, with the transport's cause in its error.
TEST(BenchRun, ARequestThatStillFailsIsCountedWithItsCause) {
    // Connection 0 answers and closes; 1 (the second request's retry) reads it and closes unanswered; 2 (the
    // third request's) answers.
    test_support::RawHttpServer server([](test_support::RawHttpServer::Conn& conn, int index) {
        if (conn.read_request() && index != 1) conn.send(sse_answer());
    });
    BenchConfig c;
    c.base_url = server.url();
    c.model = "m";
    c.num_prompts = 3;
    c.random_input_len = 3;
    c.random_output_len = 2;
    c.max_concurrency = 1;
    auto run = run_benchmark(c, make_random_requests(c));
    ASSERT_TRUE(run.is_ok()) << run.status().to_string();
    EXPECT_EQ(run->summary.completed, 2);
    EXPECT_EQ(run->summary.failed, 1);
    EXPECT_TRUE(run->results[0].success) << run->results[0].error;
    EXPECT_FALSE(run->results[1].success);
    EXPECT_EQ(run->results[1].error.rfind("transport: read: end of stream", 0), 0u) << run->results[1].error;
    EXPECT_TRUE(run->results[2].success) << run->results[2].error;
    EXPECT_EQ(result_json(c, *run)["errors"][1], run->results[1].error);
    EXPECT_NE(format_report(c, *run).find("Failed requests:                         1"), std::string::npos);
    EXPECT_EQ(failure_causes(*run), "1 x " + run->results[1].error + "\n");  // what bench serve prints
}

TEST(BenchRun, FailureCausesCountedByDistinctError) {
    BenchRun run;
    run.results.resize(6);
    run.results[0].success = true;
    run.results[1].error = "HTTP 500: x";
    run.results[2].error = "transport: read: end of stream";
    run.results[3].error = "HTTP 500: x";
    run.results[4].error = "stream ended without [DONE]";
    run.results[5].error = std::string(400, 'e');
    EXPECT_EQ(failure_causes(run),
              "2 x HTTP 500: x\n1 x transport: read: end of stream\n"
              "1 x stream ended without [DONE]\n1 x " +
                  std::string(300, 'e') + "...\n");
    EXPECT_EQ(failure_causes(run, 2),
              "2 x HTTP 500: x\n1 x transport: read: end of stream\n... and 2 more causes\n");
    run.results.resize(1);
    EXPECT_EQ(failure_causes(run), "");
}

TEST(BenchRun, UnreachableServerIsUnavailable) {
    BenchConfig c;
    c.base_url = "http://127.0.0.1:1";  // nothing listens on port 1
    c.num_prompts = 1;
    auto run = run_benchmark(c, make_random_requests(c));
    ASSERT_FALSE(run.is_ok());
    EXPECT_EQ(run.status().code(), StatusCode::kUnavailable);
}

// Without --model, the first GET /v1/models of a server still loading (voltllm serve: 503 model_loading)
// fails at once with what to wait for, as `vllm bench serve` fails when /v1/models does not answer 200.
TEST(BenchRun, ServerStillLoadingIsAClearError) {
    server::HttpServerConfig hc;
    hc.port = 0;
    hc.shutdown_grace = std::chrono::milliseconds(0);
    server::HttpServer loading(hc);
    loading.get("/v1/models", [](const server::HttpRequest&, server::HttpResponse& res) {
        server::HttpServer::send_json(res, 503,
                                      {{"error",
                                        {{"message", "The model is still loading."},
                                         {"type", "server_error"},
                                         {"code", "model_loading"}}}});
    });
    ASSERT_TRUE(loading.bind().is_ok());
    std::thread thread([&loading] { loading.run(); });
    BenchConfig c;
    c.base_url = "http://127.0.0.1:" + std::to_string(loading.port());
    c.num_prompts = 1;
    auto run = run_benchmark(c, make_random_requests(c));
    loading.shutdown();
    thread.join();
    ASSERT_FALSE(run.is_ok());
    EXPECT_EQ(run.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(run.status().message().find("HTTP 503"), std::string::npos) << run.status().message();
    EXPECT_NE(run.status().message().find("still loading the model"), std::string::npos)
        << run.status().message();
}

}  // namespace
}  // namespace volt::bench
