// `voltllm supervise [options] -- voltllm serve ARGS...`: the watchdog of supervisor/supervisor.h.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "supervisor/supervisor.h"
#include "tools/commands.h"

namespace volt::tools {
namespace {

struct SuperviseFlags {
    std::vector<std::string> command;
    std::string log_file;
    double ready_timeout = 600, probe_interval = 5, probe_timeout = 10, unhealthy_timeout = 30;
    double kill_grace = 15, backoff_initial = 1, backoff_max = 60, stable_after = 60;
    bool no_completion_probe = false;
    int status_port = -1;
    int64_t max_restarts = -1;
};

std::chrono::milliseconds ms(double seconds) {
    return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

}  // namespace

void register_supervise(CLI::App& app) {
    auto f = std::make_shared<SuperviseFlags>();
    CLI::App* cmd = app.add_subcommand(
        "supervise", "Run `voltllm serve` as a child: probe it, restart it when it exits, hangs or is sick");
    cmd->add_option("command", f->command,
                    "The server's command line, after --: voltllm serve ARGS (with --port)")
        ->required();
    cmd->add_option("--log-file", f->log_file, "Append the server's output and the restart markers to FILE");
    cmd->add_option("--ready-timeout", f->ready_timeout, "Seconds the server may take to become ready")
        ->capture_default_str();
    cmd->add_option("--probe-interval", f->probe_interval, "Seconds between probes")->capture_default_str();
    cmd->add_option("--probe-timeout", f->probe_timeout, "Seconds one probe request may take")
        ->capture_default_str();
    cmd->add_option("--unhealthy-timeout", f->unhealthy_timeout,
                    "Seconds of failing probes (no tokens produced) before a restart")
        ->capture_default_str();
    cmd->add_option("--kill-grace", f->kill_grace, "Seconds between SIGTERM and SIGKILL on a restart")
        ->capture_default_str();
    cmd->add_option("--backoff-initial", f->backoff_initial, "Seconds before the first restart (doubling)")
        ->capture_default_str();
    cmd->add_option("--backoff-max", f->backoff_max, "Cap of the restart delay, seconds")
        ->capture_default_str();
    cmd->add_option("--stable-after", f->stable_after, "Seconds ready after which the backoff starts over")
        ->capture_default_str();
    cmd->add_flag("--no-completion-probe", f->no_completion_probe, "Probe /health only");
    cmd->add_option("--status-port", f->status_port,
                    "Serve GET /status (restarts, last reason, pid) on 127.0.0.1:PORT (0: any free port)")
        ->capture_default_str();
    cmd->add_option("--max-restarts", f->max_restarts, "Give up after this many restarts (-1: never)")
        ->capture_default_str();
    cmd->callback([f] {
        supervisor::SupervisorConfig c;
        c.child_argv = f->command;
        c.log_file = f->log_file;
        c.ready_timeout = ms(f->ready_timeout);
        c.probe_interval = ms(f->probe_interval);
        c.probe_timeout = ms(f->probe_timeout);
        c.unhealthy_timeout = ms(f->unhealthy_timeout);
        c.kill_grace = ms(f->kill_grace);
        c.backoff_initial = ms(f->backoff_initial);
        c.backoff_max = ms(f->backoff_max);
        c.stable_after = ms(f->stable_after);
        c.completion_probe = !f->no_completion_probe;
        c.status_port = f->status_port;
        c.max_restarts = f->max_restarts;
        if (Status s = supervisor::read_child_address(&c); !s.is_ok()) {
            std::fprintf(stderr, "supervise: %s\n", s.message().c_str());
            std::exit(2);
        }
        supervisor::Supervisor sup(c);
        std::exit(sup.run());
    });
}

}  // namespace volt::tools
