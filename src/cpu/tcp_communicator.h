// The CPU communicator of ranks that are processes (on one host or several), over TCP: a full mesh of
// connections set up through a rendezvous on rank 0 (every rank connects to rank 0's address and learns
// the others' listening ports from it). The all-reduce goes through rank 0, which adds the ranks' buffers
// in rank order (r0 + r1 + ...) and sends the sum back, so results are bitwise equal on every rank and to
// the thread communicator's. Every message carries its collective's tag (the order check); the watchdog
// bounds every wait (CommunicatorOptions::timeout_s), and a peer that closes its connection fails the
// collective at once; subgroup() splits the world into groups over the same connections. The multi-process
// test of CI: tests/unit/cpu/communicator_test.cc; the engine across processes (the step channel on the same
// connections): tests/unit/executor/multiprocess_generate.sh.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ops/communicator.h"

namespace volt::cpu {

struct TcpOptions {
    int rank = 0, size = 1;
    std::string host = "127.0.0.1";  // rank 0's address (every rank) and the interface rank 0 listens on
    int port = 0;                    // rank 0's port
    int listen_fd = -1;              // rank 0 only: an already listening socket (tcp_listen) instead of
                                     // port; tcp_connect closes it
    // What every rank must agree on (the engine's: executor::group_fingerprint: world size, tp x pp,
    // model identity, KV dtype, device, dtype), at most 255 bytes: a rank whose text differs is refused
    // with both texts named. `secret` (VOLT_GROUP_SECRET, docs/parallel.md): a rank with another one is
    // dropped as a stranger. Only a digest travels; it keeps groups from joining by mistake, it is no
    // authentication against someone who can read the traffic (the group's network must be trusted).
    std::string config{};
    std::string secret{};
    ops::CommunicatorOptions comm;  // the watchdog bounds the rendezvous too
};

// The first message on every connection of a rendezvous, both ways (the joining rank's, then the
// accepting rank's answer); layout for tests that forge one.
inline constexpr uint32_t kTcpHelloMagic = 0x566f6c74;  // "Volt"
struct TcpHello {
    uint32_t magic;
    int32_t rank, size, port;  // port: the sender's mesh listener (workers to rank 0), else 0
    uint64_t secret;           // digest of TcpOptions::secret (0: none)
    char config[256];          // TcpOptions::config, NUL-terminated
};

// Every socket of a group: TCP_NODELAY, and TCP keepalive probes after kKeepaliveIdleS idle seconds,
// every kKeepaliveIntervalS, kKeepaliveCount unanswered closing the connection: a peer whose host died
// or whose link went down is noticed within 10 + 5 x 3 = 25 s even by a rank that sends nothing (an idle
// worker waiting for rank 0's next step, wait_message). A peer process that exits is noticed at once (its
// kernel closes the connection); one that is frozen (SIGSTOP) still answers probes: the step's watchdog
// bounds it once a step runs.
inline constexpr int kKeepaliveIdleS = 10, kKeepaliveIntervalS = 5, kKeepaliveCount = 3;
void set_group_socket_options(int fd);

// A listening TCP socket on host:port (port 0: any free one, returned in *bound_port). Errors: kInternal
// naming the address and errno.
Result<int> tcp_listen(const std::string& host, int port, int* bound_port);

// An ops::Communicator over TCP plus what the engine across processes needs beyond the interface
// (executor/backend_executor.h "process ranks"): an unbounded wait between steps, a check for peers that
// went away, and an abort that the peers notice at once.
class TcpCommunicator : public ops::Communicator {
  public:
    // Waits with no deadline until `peer` has sent this rank something (its next message is readable)
    // or closed its connection; `stop`, when given, is polled every 100 ms. A worker rank waits so for
    // the next step: a server may be idle for hours, and the watchdog bounds the step that follows.
    // Errors: kUnavailable when the peer closed its connection (it exited or failed), kFailedPrecondition
    // when *stop became true, the group's earlier failure.
    virtual Status wait_message(int peer, const std::atomic<bool>* stop = nullptr) = 0;
    // Ok while every peer's connection is open; else kUnavailable naming the first rank whose connection
    // closed (or the group's earlier failure). Never blocks and reads nothing: it may run on a thread of
    // its own beside the collectives.
    virtual Status check_peers() const = 0;
    // Fails the group with `why` (sticky: every later call returns it) and shuts every connection down,
    // so that each peer's next read or wait fails at once ("rank r closed its connection") instead of
    // waiting for its watchdog. Thread-safe against check_peers; not against a collective in progress.
    virtual void abort(const Status& why) = 0;
    // The communicator of `ranks` (ranks of this communicator, ascending, this rank among them) over the
    // same connections: its own collective tags (every member issues the same collectives on it), the
    // failure shared with this communicator and every other subgroup (a failure in one fails them all;
    // abort shuts every connection). Messages name the world's ranks. The engine across
    // processes splits the world into a tensor-parallel group per stage and a pipeline group per tp lane
    // (executor::RankGroup::create_process_rank); one connection then carries several groups' messages,
    // in the same program order on both ends.
    virtual std::unique_ptr<TcpCommunicator> subgroup(const std::vector<int>& ranks) const = 0;
};

// Joins the group: blocks until every rank has connected (or the watchdog's timeout passes: kUnavailable
// naming the ranks still missing). Rank 0 listens on host:port; every other rank listens for the ranks
// above it on the local address it reaches rank 0 from (loopback when host is), never on every interface.
// A connection that is not a rank of this group (no Hello within a few seconds, a wrong magic number, a
// rank out of range or already connected) is logged and dropped; the rendezvous goes on. Every socket is
// closed on every error. Errors: kInvalidArgument naming both sides when ranks disagree on the size or
// TcpOptions::config.
Result<std::unique_ptr<TcpCommunicator>> tcp_connect(const TcpOptions& options);

}  // namespace volt::cpu
