// `voltllm router --backend URL [--backend URL ...]` or `voltllm router --launch N [--gpus-per-instance K]
// -- voltllm serve ARGS`: the proxy of router/router.h; with --launch it also starts N supervised servers
// (`voltllm supervise -- voltllm serve ARGS --port P+i`, CUDA_VISIBLE_DEVICES = their K GPUs) and stops
// them after its own drain.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>

#include "core/logging.h"
#include "core/signals.h"
#include "router/router.h"
#include "server/http_client.h"
#include "supervisor/process.h"
#include "tools/commands.h"

namespace volt::tools {
namespace {

struct RouterFlags {
    std::string host = "127.0.0.1", api_key, backend_api_key, log_dir;
    int port = 8000, launch = 0, gpus_per_instance = 1, base_port = 0;
    std::vector<std::string> backends, command;
    // Passed to each launched `voltllm supervise` (its flags of the same names), when set.
    std::string probe_interval, probe_timeout, unhealthy_timeout, ready_timeout;
    bool prefix_affinity = false;
    double connect_timeout = 2, first_byte_timeout = 60, idle_timeout = 120, health_interval = 1;
    double health_timeout = 2, eject_time = 2, shutdown_timeout = 30;
    int readmit_after = 2;
};

std::chrono::milliseconds ms(double seconds) {
    return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

[[noreturn]] void fail(const std::string& message) {
    std::fprintf(stderr, "router: %s\n", message.c_str());
    std::exit(2);
}

void run_router(const RouterFlags& f) {
    const sigset_t sigs = block_stop_signals();

    router::RouterConfig rc;
    rc.http.host = f.host;
    rc.http.port = f.port;
    rc.http.api_key = f.api_key;
    rc.http.max_admitted = 1 << 20;  // the backends bound the work; the router forwards what comes
    rc.http.shutdown_grace = ms(f.shutdown_timeout);
    rc.backends = f.backends;
    rc.connect_timeout = ms(f.connect_timeout);
    rc.first_byte_timeout = ms(f.first_byte_timeout);
    rc.idle_timeout = ms(f.idle_timeout);
    rc.health_interval = ms(f.health_interval);
    rc.health_timeout = ms(f.health_timeout);
    rc.eject_min = ms(f.eject_time);
    rc.readmit_after = f.readmit_after;
    rc.prefix_affinity = f.prefix_affinity;
    rc.backend_api_key = f.backend_api_key;

    std::vector<pid_t> supervisors;
    if (f.launch > 0) {
        if (f.command.empty()) fail("--launch N needs the server's command after --: voltllm serve ARGS");
        for (const std::string& a : f.command) {
            if (a == "--port" || a.rfind("--port=", 0) == 0)
                fail(
                    "--launch gives each server its own port (--launch-base-port + i): drop --port after --");
        }
        if (f.base_port <= 0 && f.port <= 0) fail("--port 0 with --launch: give --launch-base-port");
        const int base = f.base_port > 0 ? f.base_port : f.port + 1;
        for (int i = 0; i < f.launch; ++i) {
            const int port = base + i;
            supervisor::SpawnOptions so;
            so.argv = {"voltllm", "supervise"};
            for (const auto& [flag, value] :
                 {std::pair<const char*, const std::string*>{"--probe-interval", &f.probe_interval},
                  {"--probe-timeout", &f.probe_timeout},
                  {"--unhealthy-timeout", &f.unhealthy_timeout},
                  {"--ready-timeout", &f.ready_timeout}}) {
                if (value->empty()) continue;
                so.argv.push_back(flag);
                so.argv.push_back(*value);
            }
            if (!f.log_dir.empty()) {
                so.argv.push_back("--log-file");
                so.argv.push_back(f.log_dir + "/instance-" + std::to_string(i) + ".log");
            }
            so.argv.push_back("--");
            for (const std::string& a : f.command) so.argv.push_back(a);
            so.argv.push_back("--port");
            so.argv.push_back(std::to_string(port));
            std::string gpus;
            for (int g = 0; g < f.gpus_per_instance; ++g)
                gpus += (g ? "," : "") + std::to_string(i * f.gpus_per_instance + g);
            so.env = {{"CUDA_VISIBLE_DEVICES", gpus}};
            auto pid = supervisor::spawn(so);
            if (!pid) fail(pid.status().message());
            supervisors.push_back(*pid);
            spdlog::info("router: instance {} on port {} (CUDA_VISIBLE_DEVICES={}), supervisor pid {}", i,
                         port, gpus, *pid);
            rc.backends.push_back("http://127.0.0.1:" + std::to_string(port));
        }
    } else if (!f.command.empty()) {
        fail("a server command after -- is only for --launch N");
    }
    for (const std::string& b : rc.backends) {
        if (auto hp = server::parse_http_url(b); !hp) fail(hp.status().message());
    }
    router::Router router(rc);
    if (Status s = router.start(); !s.is_ok()) fail(s.message());
    std::printf("voltllm router: listening on http://%s:%d over %zu backend(s)\n", f.host.c_str(),
                router.port(), rc.backends.size());
    std::fflush(stdout);
    std::atomic<bool> stopped{false};
    std::thread signal_thread([&] {
        bool draining = false;
        while (!stopped.load()) {
            timespec tick{0, 100 * 1000 * 1000};
            const int sig = sigtimedwait(&sigs, nullptr, &tick);
            if (sig < 0) continue;
            if (!draining) {
                spdlog::info("router: received {}: draining", sig == SIGTERM ? "SIGTERM" : "SIGINT");
                draining = true;
                std::thread([&router] { router.shutdown(); }).detach();
            } else {
                spdlog::warn("router: second signal: exiting now");
                for (pid_t p : supervisors) kill(p, SIGTERM);
                std::_Exit(1);
            }
        }
    });
    router.run();
    stopped.store(true);
    signal_thread.join();
    // Our servers drain after the router did: each supervisor forwards SIGTERM and exits with its server.
    for (pid_t p : supervisors) kill(p, SIGTERM);
    for (pid_t p : supervisors) {
        const int st = supervisor::terminate(p, ms(f.shutdown_timeout + 60));
        spdlog::info("router: supervisor pid {} {}", p, supervisor::describe_exit(st));
    }
    spdlog::info("router: stopped");
    std::exit(0);
}

}  // namespace

void register_router(CLI::App& app) {
    auto f = std::make_shared<RouterFlags>();
    CLI::App* cmd = app.add_subcommand("router", "OpenAI-compatible load balancer over voltllm servers");
    cmd->add_option("--backend", f->backends, "A server's URL, http://host:port (repeat for each)");
    cmd->add_option("--launch", f->launch, "Start N supervised servers from the command after --")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--gpus-per-instance", f->gpus_per_instance,
                    "GPUs per launched server: instance i gets CUDA_VISIBLE_DEVICES i*K .. i*K+K-1")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    cmd->add_option("--launch-base-port", f->base_port,
                    "Port of launched server 0 (then +1 each; default --port + 1)");
    cmd->add_option("--launch-log-dir", f->log_dir, "Launched servers log to DIR/instance-I.log");
    cmd->add_option("--probe-interval", f->probe_interval,
                    "With --launch: each supervisor's --probe-interval");
    cmd->add_option("--probe-timeout", f->probe_timeout, "With --launch: each supervisor's --probe-timeout");
    cmd->add_option("--unhealthy-timeout", f->unhealthy_timeout,
                    "With --launch: each supervisor's --unhealthy-timeout");
    cmd->add_option("--ready-timeout", f->ready_timeout, "With --launch: each supervisor's --ready-timeout");
    cmd->add_option("command", f->command, "With --launch: the server's command line after --");
    cmd->add_option("--host", f->host, "Address to listen on")->capture_default_str();
    cmd->add_option("--port", f->port, "Port (0: any free port, printed at start)")->capture_default_str();
    cmd->add_option("--api-key", f->api_key,
                    "Require `Authorization: Bearer KEY` on every route but /health");
    cmd->add_option("--backend-api-key", f->backend_api_key,
                    "Key sent to the backends (default: the client's Authorization header is forwarded)");
    cmd->add_flag("--prefix-affinity", f->prefix_affinity,
                  "Send requests with the same conversation start to the same backend");
    cmd->add_option("--connect-timeout", f->connect_timeout, "Seconds to connect to a backend")
        ->capture_default_str();
    cmd->add_option("--first-byte-timeout", f->first_byte_timeout,
                    "Seconds from request to a backend's answer head")
        ->capture_default_str();
    cmd->add_option("--idle-timeout", f->idle_timeout, "Seconds a backend's answer may pause")
        ->capture_default_str();
    cmd->add_option("--health-interval", f->health_interval, "Seconds between health checks of a backend")
        ->capture_default_str();
    cmd->add_option("--health-timeout", f->health_timeout, "Seconds one health check may take")
        ->capture_default_str();
    cmd->add_option("--eject-time", f->eject_time, "Seconds an ejected backend stays out at least")
        ->capture_default_str();
    cmd->add_option("--readmit-after", f->readmit_after, "Good health checks in a row before re-admission")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    cmd->add_option("--shutdown-timeout", f->shutdown_timeout,
                    "Seconds in-flight requests may finish after SIGTERM")
        ->capture_default_str();
    cmd->callback([f] { run_router(*f); });
}

}  // namespace volt::tools
