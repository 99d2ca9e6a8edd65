// The serving load generator; see load_generator.h.
#include "bench_serve/load_generator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <random>
#include <thread>

#include "server/http_client.h"

namespace volt::bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

server::HttpClient::Headers auth_headers(const BenchConfig& config) {
    server::HttpClient::Headers h;
    if (!config.api_key.empty()) h.emplace_back("Authorization", "Bearer " + config.api_key);
    return h;
}

// A keep-alive client of config.base_url whose every request must end within timeout_s.
Result<std::unique_ptr<server::HttpClient>> make_client(const BenchConfig& config) {
    auto url = server::parse_http_url(config.base_url);
    if (!url) return url.status();
    const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::duration<double>(config.timeout_s));
    return std::make_unique<server::HttpClient>(url->first, url->second, timeout);
}

RequestResult send_one(server::HttpClient& cli, const BenchConfig& config, const std::string& model,
                       const BenchRequest& request, Clock::time_point run_start) {
    RequestResult r;
    r.prompt_len = request.prompt_len;
    server::HttpClient::Headers headers = auth_headers(config);
    headers.emplace_back("Content-Type", "application/json");
    const std::string body = request_body(config, model, request).dump();

    SseStreamParser parser;
    int status = 0;
    std::string error_body;
    const Clock::time_point sent = Clock::now();
    r.start = std::chrono::duration<double>(sent - run_start).count();
    auto res = cli.stream(
        "POST", config.endpoint, body, headers,
        [&](std::string_view data) {
            if (status != 200) {
                if (error_body.size() < 2000) error_body.append(data);
                return true;
            }
            return parser.feed(data, seconds_since(sent));
        },
        [&](int s) { status = s; });
    r.latency = seconds_since(sent);
    if (status != 200 && status != 0) {
        r.error = "HTTP " + std::to_string(status) + ": " + error_body;
        return r;
    }
    if (!res) {
        r.error = parser.error().empty() ? "transport: " + res.status().message() : parser.error();
        return r;
    }
    if (!parser.error().empty()) {
        r.error = parser.error();
        return r;
    }
    if (!parser.done()) {
        r.error = "stream ended without [DONE]";
        return r;
    }
    const std::vector<double>& times = parser.token_times();
    if (times.empty()) {
        r.error = "no generated text in the stream";
        return r;
    }
    r.ttft = times.front();
    for (size_t i = 1; i < times.size(); ++i) r.itl.push_back(times[i] - times[i - 1]);
    r.output_tokens = parser.usage_completion_tokens() >= 0 ? parser.usage_completion_tokens()
                                                            : static_cast<int64_t>(times.size());
    if (parser.usage_prompt_tokens() >= 0) r.prompt_len = parser.usage_prompt_tokens();
    r.success = true;
    return r;
}

Result<std::string> first_model(const BenchConfig& config) {
    auto cli = make_client(config);
    if (!cli) return cli.status();
    auto res = (*cli)->request("GET", "/v1/models", "", auth_headers(config));
    if (!res)
        return Status(StatusCode::kUnavailable, config.base_url + "/v1/models: " + res.status().message());
    if (res->status != 200) {
        // As `vllm bench serve`: no waiting here; a server still loading its model (voltllm serve answers
        // 503 model_loading then) gets a clear error that says what to wait for.
        std::string hint;
        if (res->status == 503 && res->body.find("model_loading") != std::string::npos)
            hint =
                " (the server is still loading the model: start the benchmark once GET /health answers 200)";
        return Status(StatusCode::kUnavailable, config.base_url + "/v1/models: HTTP " +
                                                    std::to_string(res->status) + ": " + res->body + hint);
    }
    nlohmann::json j = nlohmann::json::parse(res->body, nullptr, false);
    if (j.is_discarded() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
        !j["data"][0].contains("id") || !j["data"][0]["id"].is_string()) {
        return invalid_argument(config.base_url + "/v1/models: no model id in the answer; pass --model");
    }
    return j["data"][0]["id"].get<std::string>();
}

}  // namespace

std::vector<BenchRequest> make_random_requests(const BenchConfig& config) {
    std::mt19937_64 rng(config.seed);
    std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(config.random_vocab_size - 1));
    const bool chat = config.endpoint.find("chat") != std::string::npos;
    std::vector<BenchRequest> out;
    for (int64_t i = 0; i < config.num_prompts; ++i) {
        BenchRequest r;
        r.output_len = config.random_output_len;
        for (int64_t t = 0; t < config.random_input_len; ++t) r.prompt_ids.push_back(dist(rng));
        if (chat) {
            for (int32_t id : r.prompt_ids)
                r.prompt_text += (r.prompt_text.empty() ? "t" : " t") + std::to_string(id);
            r.prompt_ids.clear();
        } else {
            r.prompt_len = config.random_input_len;
        }
        out.push_back(std::move(r));
    }
    return out;
}

Result<std::vector<BenchRequest>> load_dataset(const std::string& path, const BenchConfig& config) {
    std::ifstream in(path);
    if (!in) return not_found("dataset " + path + ": cannot open");
    std::vector<BenchRequest> all;
    std::string line;
    for (int line_no = 1; std::getline(in, line); ++line_no) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        auto where = [&] { return "dataset " + path + " line " + std::to_string(line_no) + ": "; };
        nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_discarded() || !j.is_object()) return invalid_argument(where() + "not a JSON object");
        BenchRequest r;
        r.output_len = config.random_output_len;
        auto p = j.find("prompt");
        if (p == j.end()) return invalid_argument(where() + "no \"prompt\"");
        if (p->is_string()) {
            r.prompt_text = p->get<std::string>();
        } else if (p->is_array()) {
            for (const auto& id : *p) {
                if (!id.is_number_integer())
                    return invalid_argument(where() + "\"prompt\" array holds a non-integer");
                r.prompt_ids.push_back(id.get<int32_t>());
            }
            r.prompt_len = static_cast<int64_t>(r.prompt_ids.size());
        } else {
            return invalid_argument(where() + "\"prompt\" is neither a string nor an array of token ids");
        }
        if (auto o = j.find("output_len"); o != j.end()) {
            if (!o->is_number_integer() || o->get<int64_t>() < 1) {
                return invalid_argument(where() + "\"output_len\" is not a positive integer");
            }
            r.output_len = o->get<int64_t>();
        }
        all.push_back(std::move(r));
    }
    if (all.empty()) return invalid_argument("dataset " + path + ": no prompts");
    std::vector<BenchRequest> out;
    for (int64_t i = 0; i < config.num_prompts; ++i) out.push_back(all[static_cast<size_t>(i) % all.size()]);
    return out;
}

std::vector<double> arrival_times(int64_t n, double request_rate, uint64_t seed) {
    std::vector<double> out(static_cast<size_t>(n), 0.0);
    if (!std::isfinite(request_rate) || request_rate <= 0) return out;
    std::mt19937_64 rng(seed);
    std::exponential_distribution<double> gap(request_rate);
    double t = 0;
    for (double& a : out) {
        a = t;
        t += gap(rng);
    }
    return out;
}

nlohmann::json request_body(const BenchConfig& config, const std::string& model,
                            const BenchRequest& request) {
    nlohmann::json body = {{"model", model},
                           {"stream", true},
                           {"stream_options", {{"include_usage", true}}},
                           {"temperature", 0.0},
                           {"ignore_eos", config.ignore_eos}};
    if (config.endpoint.find("chat") != std::string::npos) {
        body["messages"] = {{{"role", "user"}, {"content", request.prompt_text}}};
        body["max_completion_tokens"] = request.output_len;
    } else {
        if (!request.prompt_ids.empty()) {
            body["prompt"] = request.prompt_ids;
        } else {
            body["prompt"] = request.prompt_text;
        }
        body["max_tokens"] = request.output_len;
    }
    return body;
}

bool SseStreamParser::feed(std::string_view bytes, double now_s) {
    buffer_.append(bytes);
    // Events end with a blank line; accept \r\n line ends too.
    for (;;) {
        size_t end = buffer_.find("\n\n");
        size_t sep = 2;
        size_t crlf = buffer_.find("\r\n\r\n");
        if (crlf != std::string::npos && (end == std::string::npos || crlf < end)) {
            end = crlf;
            sep = 4;
        }
        if (end == std::string::npos) return true;
        std::string event = buffer_.substr(0, end);
        buffer_.erase(0, end + sep);
        std::string data;
        size_t pos = 0;
        while (pos <= event.size()) {
            size_t nl = event.find('\n', pos);
            std::string line = event.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
            if (!line.empty() && line.back() == '\r') line.pop_back();
            if (line.rfind("data:", 0) == 0) {
                std::string_view v = std::string_view(line).substr(5);
                if (!v.empty() && v.front() == ' ') v.remove_prefix(1);
                if (!data.empty()) data += "\n";
                data.append(v);
            }
            if (nl == std::string::npos) break;
            pos = nl + 1;
        }
        if (!data.empty() && !handle_event(data, now_s)) return false;
    }
}

bool SseStreamParser::handle_event(std::string_view data, double now_s) {
    if (data == "[DONE]") {
        done_ = true;
        return true;
    }
    nlohmann::json j = nlohmann::json::parse(data, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
        error_ = "malformed SSE data: " + std::string(data.substr(0, 200));
        return false;
    }
    if (j.contains("error")) {
        error_ = "error in stream: " + j["error"].dump();
        return false;
    }
    bool has_text = false;
    if (auto c = j.find("choices"); c != j.end() && c->is_array()) {
        for (const auto& choice : *c) {
            auto nonempty = [](const nlohmann::json& o, const char* key) {
                auto it = o.find(key);
                return it != o.end() && it->is_string() && !it->get<std::string>().empty();
            };
            if (nonempty(choice, "text")) has_text = true;
            if (auto d = choice.find("delta"); d != choice.end() && d->is_object()) {
                if (nonempty(*d, "content") || nonempty(*d, "reasoning_content") ||
                    nonempty(*d, "reasoning")) {
                    has_text = true;
                }
            }
        }
    }
    if (has_text) token_times_.push_back(now_s);
    if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
        if (auto p = u->find("prompt_tokens"); p != u->end() && p->is_number_integer())
            usage_prompt_ = p->get<int64_t>();
        if (auto c = u->find("completion_tokens"); c != u->end() && c->is_number_integer()) {
            usage_completion_ = c->get<int64_t>();
        }
    }
    return true;
}

Result<BenchRun> run_benchmark(const BenchConfig& config, const std::vector<BenchRequest>& requests) {
    BenchRun run;
    run.model = config.model;
    if (auto url = server::parse_http_url(config.base_url); !url) return url.status();
    if (run.model.empty()) {
        VOLT_ASSIGN_OR_RETURN(run.model, first_model(config));
    }
    const int64_t n = static_cast<int64_t>(requests.size());
    const std::vector<double> arrivals = arrival_times(n, config.request_rate, config.seed);
    run.results.resize(static_cast<size_t>(n));
    // One worker per concurrency slot: a worker takes the next request, waits for its arrival time, sends
    // it and waits for the stream to end, so at most `workers` are in flight and a request that arrives while
    // all are busy waits for a slot (vLLM's --max-concurrency semaphore).
    const int64_t workers = config.max_concurrency > 0 ? std::min(config.max_concurrency, n) : n;
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> last_end_ns{0};
    const Clock::time_point start = Clock::now();
    std::vector<std::thread> threads;
    for (int64_t w = 0; w < workers; ++w) {
        threads.emplace_back([&] {
            auto cli = make_client(config);  // the URL was checked above
            if (!cli) return;
            for (int64_t i; (i = next.fetch_add(1)) < n;) {
                std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
                                                          std::chrono::duration<double>(arrivals[i])));
                run.results[i] = send_one(**cli, config, run.model, requests[i], start);
                int64_t end_ns =
                    std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
                int64_t prev = last_end_ns.load();
                while (end_ns > prev && !last_end_ns.compare_exchange_weak(prev, end_ns)) {
                }
            }
        });
    }
    for (std::thread& t : threads) t.join();
    run.summary = summarize(run.results, static_cast<double>(last_end_ns.load()) * 1e-9);
    return run;
}

nlohmann::json result_json(const BenchConfig& config, const BenchRun& run) {
    const BenchSummary& s = run.summary;
    char date[32];
    std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof(date), "%Y%m%d-%H%M%S", std::gmtime(&now));
    nlohmann::json j;
    j["date"] = date;
    j["backend"] = "openai";
    j["base_url"] = config.base_url;
    j["endpoint"] = config.endpoint;
    j["model_id"] = run.model;
    j["num_prompts"] = static_cast<int64_t>(run.results.size());
    j["request_rate"] =
        std::isfinite(config.request_rate) ? nlohmann::json(config.request_rate) : nlohmann::json("inf");
    j["max_concurrency"] =
        config.max_concurrency > 0 ? nlohmann::json(config.max_concurrency) : nlohmann::json();
    j["duration"] = s.duration_s;
    j["completed"] = s.completed;
    j["failed"] = s.failed;
    j["total_input_tokens"] = s.total_input_tokens;
    j["total_output_tokens"] = s.total_output_tokens;
    j["request_throughput"] = s.request_throughput;
    j["output_throughput"] = s.output_throughput;
    j["total_token_throughput"] = s.total_token_throughput;
    auto put = [&](const char* name, const LatencyStats& l) {
        std::string n(name);
        j["mean_" + n + "_ms"] = l.mean_ms;
        j["median_" + n + "_ms"] = l.median_ms;
        j["std_" + n + "_ms"] = l.std_ms;
        j["p90_" + n + "_ms"] = l.p90_ms;
        j["p99_" + n + "_ms"] = l.p99_ms;
    };
    put("ttft", s.ttft);
    put("tpot", s.tpot);
    put("itl", s.itl);
    put("e2el", s.e2el);
    nlohmann::json input_lens = nlohmann::json::array(), output_lens = nlohmann::json::array(),
                   ttfts = nlohmann::json::array(), itls = nlohmann::json::array(),
                   errors = nlohmann::json::array();
    for (const RequestResult& r : run.results) {
        input_lens.push_back(r.prompt_len);
        output_lens.push_back(r.output_tokens);
        ttfts.push_back(r.ttft);
        itls.push_back(r.itl);
        errors.push_back(r.error);
    }
    j["input_lens"] = input_lens;
    j["output_lens"] = output_lens;
    j["ttfts"] = ttfts;
    j["itls"] = itls;
    j["errors"] = errors;
    return j;
}

std::string failure_causes(const BenchRun& run, size_t max_lines) {
    std::vector<std::pair<std::string, int64_t>> causes;  // by first occurrence
    for (const RequestResult& r : run.results) {
        if (r.success) continue;
        std::string cause = r.error.empty() ? "unknown error" : r.error;
        if (cause.size() > 300) cause = cause.substr(0, 300) + "...";
        auto it = std::find_if(causes.begin(), causes.end(), [&](const auto& c) { return c.first == cause; });
        if (it == causes.end()) {
            causes.emplace_back(std::move(cause), 1);
        } else {
            ++it->second;
        }
    }
    std::string out;
    for (size_t i = 0; i < causes.size() && i < max_lines; ++i)
        out += std::to_string(causes[i].second) + " x " + causes[i].first + "\n";
    if (causes.size() > max_lines)
        out += "... and " + std::to_string(causes.size() - max_lines) + " more causes\n";
    return out;
}

std::string format_report(const BenchConfig& config, const BenchRun& run) {
    const BenchSummary& s = run.summary;
    std::string out;
    char buf[160];
    auto line = [&](const char* label, const std::string& value) {
        std::snprintf(buf, sizeof(buf), "%-40s %-10s\n", label, value.c_str());
        out += buf;
    };
    auto num = [](double v, int digits = 2) {
        char b[64];
        std::snprintf(b, sizeof(b), "%.*f", digits, v);
        return std::string(b);
    };
    auto latency = [&](const char* title, const char* abbr, const LatencyStats& l) {
        std::snprintf(buf, sizeof(buf), "%s\n", title);
        out += buf;
        std::string a(abbr);
        line(("Mean " + a + " (ms):").c_str(), num(l.mean_ms));
        line(("Median " + a + " (ms):").c_str(), num(l.median_ms));
        line(("P90 " + a + " (ms):").c_str(), num(l.p90_ms));
        line(("P99 " + a + " (ms):").c_str(), num(l.p99_ms));
    };
    out += "============ Serving Benchmark Result ============\n";
    line("Model:", run.model);
    line("Endpoint:", config.endpoint);
    line("Request rate (req/s):", std::isfinite(config.request_rate) ? num(config.request_rate) : "inf");
    line("Max concurrency:", config.max_concurrency > 0 ? std::to_string(config.max_concurrency) : "none");
    line("Successful requests:", std::to_string(s.completed));
    line("Failed requests:", std::to_string(s.failed));
    line("Benchmark duration (s):", num(s.duration_s));
    line("Total input tokens:", std::to_string(s.total_input_tokens));
    line("Total generated tokens:", std::to_string(s.total_output_tokens));
    line("Request throughput (req/s):", num(s.request_throughput));
    line("Output token throughput (tok/s):", num(s.output_throughput));
    line("Total Token throughput (tok/s):", num(s.total_token_throughput));
    latency("---------------Time to First Token----------------", "TTFT", s.ttft);
    latency("-----Time per Output Token (excl. 1st token)------", "TPOT", s.tpot);
    latency("---------------Inter-token Latency----------------", "ITL", s.itl);
    latency("----------------End-to-end Latency----------------", "E2EL", s.e2el);
    out += "==================================================\n";
    return out;
}

}  // namespace volt::bench
