// `voltllm bench serve`: a serving load generator after vLLM's benchmark_serving (src/bench_serve/): random
// or dataset prompts, a Poisson request rate or a concurrency cap, streaming TTFT / TPOT / ITL / E2E
// percentiles, req/s and tok/s; prints vLLM's result block and, with --save-result, writes its JSON.
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <limits>

#include "bench_serve/load_generator.h"
#include "tools/commands.h"

namespace volt::tools {

void register_bench(CLI::App& app) {
    auto* bench = app.add_subcommand("bench", "Benchmarks");
    bench->require_subcommand(1);
    auto* cmd = bench->add_subcommand(
        "serve", "Load-test an OpenAI-compatible server (like vLLM's benchmark_serving)");

    struct Options {
        bench::BenchConfig config;
        std::string host = "127.0.0.1";
        int port = 8000;
        std::string request_rate = "inf";
        bool save_result = false;
        std::string result_filename;
    };
    auto opt = std::make_shared<Options>();
    bench::BenchConfig& c = opt->config;
    c.base_url.clear();
    cmd->add_option("--base-url", c.base_url,
                    "Server URL, e.g. http://127.0.0.1:8000 (default: from --host/--port)");
    cmd->add_option("--host", opt->host, "Server host")->capture_default_str();
    cmd->add_option("--port", opt->port, "Server port")->capture_default_str();
    cmd->add_option("--endpoint", c.endpoint, "/v1/completions or /v1/chat/completions")
        ->check(CLI::IsMember({"/v1/completions", "/v1/chat/completions"}))
        ->capture_default_str();
    cmd->add_option("--model", c.model, "Model name to send (default: the first of GET /v1/models)");
    cmd->add_option("--api-key", c.api_key, "Bearer token");
    cmd->add_option("--num-prompts", c.num_prompts, "Requests to send")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    cmd->add_option("--request-rate", opt->request_rate,
                    "Requests per second (Poisson arrivals) or inf (all at once)")
        ->capture_default_str();
    cmd->add_option("--max-concurrency", c.max_concurrency, "Requests in flight at most (0: no limit)")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    cmd->add_option("--random-input-len", c.random_input_len, "Prompt tokens of each random prompt")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    cmd->add_option("--random-output-len", c.random_output_len,
                    "max_tokens of each request (exact with ignore_eos)")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    cmd->add_option("--dataset-path", c.dataset_path,
                    "JSONL of {\"prompt\": text or token ids, \"output_len\": N} instead of random prompts");
    cmd->add_flag("!--no-ignore-eos", c.ignore_eos, "Let requests stop at EOS (output lengths then vary)");
    cmd->add_option("--seed", c.seed, "Seed of the random prompts and arrival times")->capture_default_str();
    cmd->add_option("--timeout", c.timeout_s, "Per-request read timeout, seconds")->capture_default_str();
    cmd->add_flag("--save-result", opt->save_result, "Write the results as JSON (vLLM's field names)");
    cmd->add_option("--result-filename", opt->result_filename,
                    "JSON file for --save-result (default voltllm-bench-<rate>qps-<date>.json)");

    cmd->callback([opt] {
        bench::BenchConfig& c = opt->config;
        if (c.base_url.empty()) c.base_url = "http://" + opt->host + ":" + std::to_string(opt->port);
        if (opt->request_rate == "inf") {
            c.request_rate = std::numeric_limits<double>::infinity();
        } else {
            try {
                c.request_rate = std::stod(opt->request_rate);
            } catch (const std::exception&) {
                throw CLI::ValidationError("--request-rate",
                                           "'" + opt->request_rate + "' is not a number or inf");
            }
            if (!(c.request_rate > 0)) throw CLI::ValidationError("--request-rate", "must be > 0 or inf");
        }
        std::vector<bench::BenchRequest> requests;
        if (!c.dataset_path.empty()) {
            auto loaded = bench::load_dataset(c.dataset_path, c);
            if (!loaded.is_ok()) {
                std::fprintf(stderr, "error: %s\n", loaded.status().to_string().c_str());
                std::exit(1);
            }
            requests = std::move(*loaded);
        } else {
            requests = bench::make_random_requests(c);
        }
        std::fprintf(stderr, "bench serve: %lld requests to %s%s, rate %s, max concurrency %lld\n",
                     static_cast<long long>(requests.size()), c.base_url.c_str(), c.endpoint.c_str(),
                     opt->request_rate.c_str(), static_cast<long long>(c.max_concurrency));
        auto run = bench::run_benchmark(c, requests);
        if (!run.is_ok()) {
            std::fprintf(stderr, "error: %s\n", run.status().to_string().c_str());
            std::exit(1);
        }
        std::fputs(bench::format_report(c, *run).c_str(), stdout);
        if (std::string causes = bench::failure_causes(*run); !causes.empty())
            std::fprintf(stderr, "failed requests, by cause:\n%s", causes.c_str());
        if (opt->save_result) {
            std::string path = opt->result_filename;
            if (path.empty()) {
                char date[32];
                std::time_t now = std::time(nullptr);
                std::strftime(date, sizeof(date), "%Y%m%d-%H%M%S", std::gmtime(&now));
                path = "voltllm-bench-" + opt->request_rate + "qps-" + date + ".json";
            }
            std::ofstream out(path);
            out << bench::result_json(c, *run).dump(2) << "\n";
            if (!out) {
                std::fprintf(stderr, "error: cannot write %s\n", path.c_str());
                std::exit(1);
            }
            std::fprintf(stderr, "results written to %s\n", path.c_str());
        }
        if (run->summary.completed == 0) std::exit(1);
    });
}

}  // namespace volt::tools
