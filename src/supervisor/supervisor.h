// `voltllm supervise`: keeps one `voltllm serve` alive and honest. It starts the server as its child
// (process.h: own process group, signalled by pid only), waits for /health 200 (up to ready_timeout:
// minutes, a 120b load is slow), then every probe_interval probes /health and a real 1-token completion
// sent with `priority` -1000 (admitted before any waiting request). A probe fails on an error, a
// timeout or a non-200 answer, unless the engine's heartbeat (the `tokens` of /health) rose meanwhile:
// slow under load is not sick. Sick for unhealthy_timeout in a row, not ready in time, or exited: the
// child is ended (SIGKILL when stopped, else SIGTERM then SIGKILL after kill_grace) and restarted after
// an exponential backoff (backoff_initial doubling up to backoff_max; back to the start after the child
// has been ready for stable_after). SIGTERM/SIGINT are forwarded to the child (with SIGCONT), and the
// supervisor exits with it once it has drained (a second signal: SIGKILL). Restarts are marked in the log and
// reported on GET /status (status_port) and in log lines. docs/operations.md. Tests:
// tests/unit/supervisor/supervisor_test.cc, tests/api/chaos.test.mjs.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace volt::supervisor {

using std::chrono::milliseconds;

struct SupervisorConfig {
    std::vector<std::string> child_argv;  // `voltllm serve ... --port N`
    std::vector<std::pair<std::string, std::string>> child_env;
    std::string log_file;            // empty: the child writes to our stdout/stderr
    std::string host = "127.0.0.1";  // where the child listens (0.0.0.0 is probed on 127.0.0.1)
    int port = 0;                    // the child's --port (required: found in child_argv)
    std::string api_key;             // the child's --api-key, for the completion probe
    milliseconds ready_timeout{600000};
    milliseconds probe_interval{5000};
    milliseconds probe_timeout{10000};
    milliseconds unhealthy_timeout{30000};  // failing probes for this long: restart
    milliseconds kill_grace{15000};         // SIGTERM -> SIGKILL
    milliseconds backoff_initial{1000};
    milliseconds backoff_max{60000};
    milliseconds stable_after{60000};  // ready this long: the backoff starts over
    bool completion_probe = true;
    int status_port = -1;       // GET /status on 127.0.0.1:status_port; -1: none, 0: any free port
    int64_t max_restarts = -1;  // -1: no limit; past it the supervisor exits with the child's failure
};

// The host, port and API key of a `voltllm serve` command line (--host H, --port N, --api-key K, also
// as --flag=value). kInvalidArgument when there is no --port (the supervisor must know where to probe).
Status read_child_address(SupervisorConfig* config);

// What GET /status reports.
struct SupervisorStatus {
    std::string state;  // starting, ready, sick, backoff, stopping
    pid_t pid = -1;
    int64_t restarts = 0;
    std::string last_reason;           // why the last restart happened ("" before any)
    std::vector<std::string> reasons;  // every restart's reason, oldest first
};

class Supervisor {
  public:
    explicit Supervisor(SupervisorConfig config);
    // Blocks SIGTERM/SIGINT (call before other threads start), supervises until a forwarded signal made
    // the child exit; returns the exit code for the process (the child's, or 1).
    int run();
    SupervisorStatus status() const;
    int status_port() const { return status_port_.load(); }

  private:
    enum class Probe { kOk, kSlow, kFailed };
    Probe probe(std::string* why);
    bool ready_check();
    void log_marker(const std::string& text);
    void set_state(const std::string& state, pid_t pid);
    void record_restart(const std::string& reason);

    SupervisorConfig config_;
    std::string model_;  // the first id of /v1/models, for the completion probe
    int log_fd_ = -1;
    mutable std::mutex mu_;
    SupervisorStatus status_;  // guarded by mu_
    std::atomic<int> status_port_{-1};
};

}  // namespace volt::supervisor
