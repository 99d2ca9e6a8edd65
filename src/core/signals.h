// Stop signals for the long-running commands (serve, supervise, router): SIGTERM and SIGINT blocked in
// the calling thread (and every thread it starts afterwards), to be taken by one thread with sigwait /
// sigtimedwait on the returned set, never delivered to a worker in the middle of a write; SIGPIPE
// ignored (a peer that closed shows as a write error instead). Call before starting any thread.
#pragma once

#include <pthread.h>
#include <signal.h>

namespace volt {

inline sigset_t block_stop_signals() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    signal(SIGPIPE, SIG_IGN);
    return set;
}

}  // namespace volt
