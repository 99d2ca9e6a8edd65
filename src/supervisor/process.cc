// fork/exec and single-pid signalling; see process.h.
#include "supervisor/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

namespace volt::supervisor {

std::string self_exe() {
    char buf[4096];
    const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) return "voltllm";
    return std::string(buf, static_cast<size_t>(n));
}

Result<pid_t> spawn(const SpawnOptions& options) {
    if (options.argv.empty()) return invalid_argument("no command to start");
    std::vector<std::string> argv = options.argv;
    if (argv[0] == "voltllm") argv[0] = self_exe();
    // Everything the child needs is built before fork: after it only async-signal-safe calls.
    std::vector<char*> args;
    for (std::string& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
        const std::string entry = *e;
        const std::string name = entry.substr(0, entry.find('='));
        bool replaced = false;
        for (const auto& [k, v] : options.env) replaced = replaced || k == name;
        if (!replaced) env_strings.push_back(entry);
    }
    for (const auto& [k, v] : options.env) env_strings.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (std::string& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    const bool path_search = argv[0].find('/') == std::string::npos;

    const pid_t pid = fork();
    if (pid < 0) return internal_error(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
        setpgid(0, 0);  // its own process group: a terminal's Ctrl-C reaches only the supervisor
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, nullptr);
        signal(SIGPIPE, SIG_DFL);
        if (options.log_fd >= 0) {
            dup2(options.log_fd, STDOUT_FILENO);
            dup2(options.log_fd, STDERR_FILENO);
        }
        if (path_search) {
            execvpe(args[0], args.data(), envp.data());
        } else {
            execve(args[0], args.data(), envp.data());
        }
        const char* msg = "voltllm supervise: exec failed\n";
        ssize_t ignored = write(STDERR_FILENO, msg, std::strlen(msg));
        (void)ignored;
        _exit(127);
    }
    setpgid(pid, pid);  // also from the parent: no race with a signal sent right after spawn
    return pid;
}

std::string describe_exit(int st) {
    if (WIFEXITED(st)) return "exited with status " + std::to_string(WEXITSTATUS(st));
    if (WIFSIGNALED(st)) {
        const int sig = WTERMSIG(st);
        return "killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
    }
    return "ended (wait status " + std::to_string(st) + ")";
}

bool is_stopped(pid_t pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(f, line)) return false;
    // "pid (comm) S ...": comm may hold spaces and parentheses; the state follows the last ')'.
    const size_t close = line.rfind(')');
    if (close == std::string::npos || close + 2 >= line.size()) return false;
    const char state = line[close + 2];
    return state == 'T' || state == 't';
}

bool reap(pid_t pid, int* wait_status) {
    int st = 0;
    const pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) {
        *wait_status = st;
        return true;
    }
    return false;
}

int terminate(pid_t pid, std::chrono::milliseconds grace) {
    int st = 0;
    if (reap(pid, &st)) return st;
    if (is_stopped(pid)) {
        kill(pid, SIGKILL);
    } else {
        kill(pid, SIGTERM);
        const auto deadline = std::chrono::steady_clock::now() + grace;
        while (std::chrono::steady_clock::now() < deadline) {
            if (reap(pid, &st)) return st;
            // Stopped meanwhile (or SIGTERM cannot be acted on): no point waiting for the grace.
            if (is_stopped(pid)) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        kill(pid, SIGKILL);
    }
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    return st;
}

}  // namespace volt::supervisor
