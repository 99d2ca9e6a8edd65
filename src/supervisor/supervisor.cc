// The supervise loop; see supervisor.h.
#include "supervisor/supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "core/logging.h"
#include "core/signals.h"
#include "server/http_client.h"
#include "server/http_server.h"
#include "supervisor/process.h"

namespace volt::supervisor {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

std::string seconds_text(milliseconds ms) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(ms.count()) / 1000.0);
    return buf;
}

// "tokens" of a /health body (the engine heartbeat), or -1.
int64_t heartbeat_tokens(const server::HttpClientResponse& r) {
    json j = json::parse(r.body, nullptr, false);
    if (j.is_object() && j.contains("tokens") && j["tokens"].is_number_integer())
        return j["tokens"].get<int64_t>();
    return -1;
}

std::string short_body(const std::string& body) {
    std::string s = body.substr(0, 160);
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
}

}  // namespace

Status read_child_address(SupervisorConfig* config) {
    const std::vector<std::string>& a = config->child_argv;
    std::optional<std::string> port;
    for (size_t i = 0; i < a.size(); ++i) {
        for (const char* flag : {"--port", "--host", "--api-key"}) {
            const std::string f = flag;
            std::optional<std::string> value;
            if (a[i] == f && i + 1 < a.size()) {
                value = a[i + 1];
            } else if (a[i].rfind(f + "=", 0) == 0) {
                value = a[i].substr(f.size() + 1);
            }
            if (!value) continue;
            if (f == "--port") port = *value;
            if (f == "--host") config->host = *value == "0.0.0.0" || value->empty() ? "127.0.0.1" : *value;
            if (f == "--api-key") config->api_key = *value;
        }
    }
    if (!port)
        return invalid_argument(
            "the server's command line has no --port: give it one, it is where "
            "the supervisor probes");
    if (port->empty() || port->find_first_not_of("0123456789") != std::string::npos ||
        std::stoi(*port) <= 0 || std::stoi(*port) > 65535)
        return invalid_argument("--port " + *port + ": a fixed port in 1..65535 is needed (not 0)");
    config->port = std::stoi(*port);
    return Status::ok();
}

Supervisor::Supervisor(SupervisorConfig config) : config_(std::move(config)) {}

SupervisorStatus Supervisor::status() const {
    std::lock_guard<std::mutex> l(mu_);
    return status_;
}

void Supervisor::set_state(const std::string& state, pid_t pid) {
    std::lock_guard<std::mutex> l(mu_);
    status_.state = state;
    status_.pid = pid;
}

void Supervisor::record_restart(const std::string& reason) {
    std::lock_guard<std::mutex> l(mu_);
    ++status_.restarts;
    status_.last_reason = reason;
    status_.reasons.push_back(reason);
}

// One line on our stderr and, when the child logs to a file, the same line in that file, so that the
// child's log shows where each run starts and why the last one ended.
void Supervisor::log_marker(const std::string& text) {
    spdlog::info("supervise: {}", text);
    if (log_fd_ < 0) return;
    char stamp[32];
    const std::time_t t = std::time(nullptr);
    std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
    const std::string line = std::string("==== voltllm supervise ") + stamp + ": " + text + " ====\n";
    ssize_t ignored = write(log_fd_, line.data(), line.size());
    (void)ignored;
}

bool Supervisor::ready_check() {
    server::HttpClient c(config_.host, config_.port, config_.probe_timeout);
    auto h = c.request("GET", "/health");
    if (!h || h->status != 200) return false;
    server::HttpClient::Headers headers;
    if (!config_.api_key.empty()) headers.emplace_back("Authorization", "Bearer " + config_.api_key);
    auto m = c.request("GET", "/v1/models", "", headers);
    if (!m || m->status != 200) return false;
    json j = json::parse(m->body, nullptr, false);
    if (!j.is_object() || !j.contains("data") || !j["data"].is_array() || j["data"].empty()) return false;
    model_ = j["data"][0].value("id", "");
    return !model_.empty();
}

Supervisor::Probe Supervisor::probe(std::string* why) {
    int64_t before = -1;
    {
        server::HttpClient c(config_.host, config_.port, config_.probe_timeout);
        auto h = c.request("GET", "/health");
        if (!h) {
            *why = "/health: " + h.status().message();
            return Probe::kFailed;
        }
        if (h->status != 200) {
            *why = "/health answered " + std::to_string(h->status) + " " + short_body(h->body);
            return Probe::kFailed;
        }
        before = heartbeat_tokens(*h);
    }
    if (!config_.completion_probe) return Probe::kOk;
    server::HttpClient c(config_.host, config_.port, config_.probe_timeout);
    server::HttpClient::Headers headers;
    if (!config_.api_key.empty()) headers.emplace_back("Authorization", "Bearer " + config_.api_key);
    const json body = {
        {"model", model_}, {"prompt", "ping"}, {"max_tokens", 1}, {"temperature", 0}, {"priority", -1000}};
    auto r = c.request("POST", "/v1/completions", body.dump(), headers);
    std::string failure;
    if (!r) {
        failure = "completion probe: " + r.status().message();
    } else if (r->status != 200) {
        failure = "completion probe answered " + std::to_string(r->status) + " " + short_body(r->body);
    } else {
        json j = json::parse(r->body, nullptr, false);
        if (j.is_object() && j.contains("choices")) return Probe::kOk;
        failure = "completion probe: not a completion: " + short_body(r->body);
    }
    // Slow or refused under load is not sick while the engine still produces tokens.
    server::HttpClient again(config_.host, config_.port, config_.probe_timeout);
    auto h = again.request("GET", "/health");
    if (h && h->status == 200 && before >= 0 && heartbeat_tokens(*h) > before) {
        *why = failure + "; the engine progresses";
        return Probe::kSlow;
    }
    *why = failure + "; no tokens produced meanwhile";
    return Probe::kFailed;
}

int Supervisor::run() {
    const sigset_t sigs = block_stop_signals();
    if (!config_.log_file.empty()) {
        log_fd_ = open(config_.log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (log_fd_ < 0) {
            spdlog::error("supervise: cannot open --log-file {}", config_.log_file);
            return 2;
        }
    }
    std::unique_ptr<server::HttpServer> status_server;
    std::thread status_thread;
    if (config_.status_port >= 0) {
        server::HttpServerConfig hc;
        hc.port = config_.status_port;
        hc.io_threads = 1;
        hc.shutdown_grace = milliseconds(0);
        status_server = std::make_unique<server::HttpServer>(hc);
        status_server->get(
            "/status",
            [this](const server::HttpRequest&, server::HttpResponse& res) {
                const SupervisorStatus s = status();
                server::HttpServer::send_json(res, 200,
                                              {{"state", s.state},
                                               {"pid", s.pid},
                                               {"restarts", s.restarts},
                                               {"last_reason", s.last_reason},
                                               {"reasons", s.reasons}});
            },
            true);
        if (Status b = status_server->bind(); !b.is_ok()) {
            spdlog::error("supervise: status endpoint: {}", b.message());
            return 2;
        }
        status_port_.store(status_server->port());
        std::printf("voltllm supervise: status on http://127.0.0.1:%d/status\n", status_server->port());
        std::fflush(stdout);
        status_thread = std::thread([&] { status_server->run(); });
    }
    auto finish = [&](int code) {
        if (status_server) {
            status_server->shutdown();
            status_thread.join();
        }
        if (log_fd_ >= 0) close(log_fd_);
        return code;
    };
    auto wait_signal = [&](milliseconds ms) {
        timespec ts{static_cast<time_t>(ms.count() / 1000), static_cast<long>(ms.count() % 1000) * 1000000};
        return sigtimedwait(&sigs, nullptr, &ts);
    };
    const milliseconds tick(100);
    int64_t backoff_step = 0;
    for (int64_t run_index = 0;; ++run_index) {
        SpawnOptions so;
        so.argv = config_.child_argv;
        so.env = config_.child_env;
        so.log_fd = log_fd_;
        auto spawned = spawn(so);
        if (!spawned) {
            spdlog::error("supervise: {}", spawned.status().message());
            return finish(1);
        }
        const pid_t pid = *spawned;
        set_state("starting", pid);
        log_marker(run_index == 0 ? "started the server, pid " + std::to_string(pid)
                                  : "restart " + std::to_string(run_index) + ": started the server, pid " +
                                        std::to_string(pid) + " (after: " + status().last_reason + ")");
        const Clock::time_point started = Clock::now();
        Clock::time_point ready_at{}, next_probe = started;
        std::optional<Clock::time_point> failing_since;
        bool ready = false;
        std::string reason;
        for (;;) {
            const int sig = wait_signal(tick);
            if (sig > 0) {
                // Forward, then wait for the child to drain; a second signal kills it.
                log_marker(std::string("received ") + (sig == SIGTERM ? "SIGTERM" : "SIGINT") +
                           ": forwarding SIGTERM to pid " + std::to_string(pid) + " and waiting for it");
                set_state("stopping", pid);
                kill(pid, SIGTERM);
                kill(pid, SIGCONT);  // a stopped server could not act on it otherwise
                int st = 0;
                while (!reap(pid, &st)) {
                    if (wait_signal(tick) > 0) {
                        log_marker("second signal: SIGKILL to pid " + std::to_string(pid));
                        kill(pid, SIGKILL);
                    }
                }
                log_marker("the server " + describe_exit(st) + "; exiting");
                return finish(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
            }
            int st = 0;
            if (reap(pid, &st)) {
                reason = "the server " + describe_exit(st);
                break;
            }
            const Clock::time_point now = Clock::now();
            if (now < next_probe) continue;
            if (!ready) {
                if (now - started > config_.ready_timeout) {
                    reason = "not ready within " + seconds_text(config_.ready_timeout);
                    terminate(pid, config_.kill_grace);
                    break;
                }
                if (ready_check()) {
                    ready = true;
                    ready_at = Clock::now();
                    set_state("ready", pid);
                    log_marker("pid " + std::to_string(pid) + " is ready (model " + model_ + ")");
                    next_probe = ready_at + config_.probe_interval;
                } else {
                    next_probe = Clock::now() + milliseconds(250);
                }
                continue;
            }
            std::string why;
            const Clock::time_point probe_start = now;
            const Probe p = probe(&why);
            next_probe = Clock::now() + config_.probe_interval;
            if (p != Probe::kFailed) {
                if (failing_since) log_marker("pid " + std::to_string(pid) + " answers again");
                if (p == Probe::kSlow) spdlog::info("supervise: slow probe, not sick: {}", why);
                failing_since.reset();
                set_state("ready", pid);
                continue;
            }
            if (!failing_since) {
                failing_since = probe_start;
                set_state("sick", pid);
                log_marker("probe failed: " + why);
            }
            const auto sick_for = std::chrono::duration_cast<milliseconds>(Clock::now() - *failing_since);
            if (sick_for >= config_.unhealthy_timeout) {
                reason = std::string(is_stopped(pid) ? "stopped" : "unhealthy") + " for " +
                         seconds_text(sick_for) + ": " + why;
                const int end = terminate(pid, config_.kill_grace);
                reason += " (" + describe_exit(end) + ")";
                break;
            }
        }
        if (ready && Clock::now() - ready_at >= config_.stable_after) backoff_step = 0;
        record_restart(reason);
        if (config_.max_restarts >= 0 && status().restarts > config_.max_restarts) {
            log_marker(reason + "; --max-restarts " + std::to_string(config_.max_restarts) +
                       " reached, giving up");
            return finish(1);
        }
        milliseconds delay = config_.backoff_initial;
        for (int64_t i = 0; i < backoff_step && delay < config_.backoff_max; ++i) delay *= 2;
        delay = std::min(delay, config_.backoff_max);
        ++backoff_step;
        set_state("backoff", -1);
        log_marker(reason + "; restart " + std::to_string(status().restarts) + " in " + seconds_text(delay));
        const Clock::time_point until = Clock::now() + delay;
        while (Clock::now() < until) {
            if (wait_signal(tick) > 0) {
                log_marker("signal during backoff: exiting without a server running");
                return finish(0);
            }
        }
    }
}

}  // namespace volt::supervisor
