// Child processes for `voltllm supervise` and `voltllm router --launch`: fork/exec in the child's own
// process group with an empty signal mask, optional extra environment and log file, and signals sent
// to one pid only (never a group, never a name). Linux (/proc/PID/stat for the stopped state).
// Tests: tests/unit/supervisor/supervisor_test.cc.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace volt::supervisor {

struct SpawnOptions {
    std::vector<std::string> argv;  // argv[0] "voltllm": this very binary (/proc/self/exe); else PATH
    std::vector<std::pair<std::string, std::string>> env;  // set (or replaced) in the child
    int log_fd = -1;  // >= 0: the child's stdout and stderr (else it inherits ours)
};

// Starts the child; kInternal with errno's text when fork fails. An exec failure shows as the child
// exiting with status 127 (its message on its stderr).
Result<pid_t> spawn(const SpawnOptions& options);

// How a child ended, from waitpid's status: "exited with status 3", "killed by signal 9 (Killed)".
std::string describe_exit(int wait_status);

// True while the process is stopped (SIGSTOP, SIGTSTP, a tracer): /proc/PID/stat state T or t.
bool is_stopped(pid_t pid);

// Ends `pid` (our child): SIGKILL at once when it is stopped (it could not act on SIGTERM), else
// SIGTERM, then SIGKILL after `grace`; reaps it. Returns its wait status.
int terminate(pid_t pid, std::chrono::milliseconds grace);

// waitpid(pid, WNOHANG): true and the status once it has ended.
bool reap(pid_t pid, int* wait_status);

// This binary's path (/proc/self/exe).
std::string self_exe();

}  // namespace volt::supervisor
