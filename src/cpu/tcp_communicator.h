// The CPU communicator of ranks that are processes (on one host or several), over TCP: a full mesh of
// connections set up through a rendezvous on rank 0 (every rank connects to rank 0's address and learns
// the others' listening ports from it). The all-reduce goes through rank 0, which adds the ranks' buffers
// in rank order (r0 + r1 + ...) and sends the sum back, so results are bitwise equal on every rank and to
// the thread communicator's. Every message carries its collective's tag (the order check); the watchdog
// bounds every wait (CommunicatorOptions::timeout_s), and a peer that closes its connection fails the
// collective at once. The multi-process test of CI: tests/unit/cpu/communicator_test.cc.
#pragma once

#include <memory>
#include <string>

#include "ops/communicator.h"

namespace volt::cpu {

struct TcpOptions {
    int rank = 0, size = 1;
    std::string host = "127.0.0.1";  // rank 0's address (every rank) and the interface rank 0 listens on
    int port = 0;                    // rank 0's port
    int listen_fd = -1;              // rank 0 only: an already listening socket (tcp_listen) instead of port
    ops::CommunicatorOptions comm;   // the watchdog bounds the rendezvous too
};

// A listening TCP socket on host:port (port 0: any free one, returned in *bound_port). Errors: kInternal
// naming the address and errno.
Result<int> tcp_listen(const std::string& host, int port, int* bound_port);

// Joins the group: blocks until every rank has connected (or the watchdog's timeout passes: kUnavailable
// naming the ranks still missing). Errors: kInvalidArgument for ranks that disagree on the size.
Result<std::unique_ptr<ops::Communicator>> tcp_connect(const TcpOptions& options);

}  // namespace volt::cpu
