#include "cpu/tcp_communicator.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/logging.h"
#include "cpu/comm_tags.h"

namespace volt::cpu {

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kMagic = kTcpHelloMagic;
using Hello = TcpHello;

Status sys_error(const std::string& what) { return internal_error(what + ": " + std::strerror(errno)); }

int remaining_ms(Clock::time_point deadline) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return ms <= 0 ? 0 : static_cast<int>(std::min<int64_t>(ms, 1 << 30));
}

// Waits until fd is readable (POLLIN) or writable (POLLOUT); false at the deadline.
bool wait_fd(int fd, short events, Clock::time_point deadline) {
    for (;;) {
        pollfd p{fd, events, 0};
        const int r = poll(&p, 1, remaining_ms(deadline));
        if (r > 0) return true;
        if (r == 0) return false;
        if (errno != EINTR) return true;  // let the read/write report it
    }
}

// 0: done; 1: the deadline passed; 2: the peer closed or an error (errno set for errors).
int write_all(int fd, const void* data, int64_t n, Clock::time_point deadline) {
    auto* p = static_cast<const uint8_t*>(data);
    while (n > 0) {
        if (!wait_fd(fd, POLLOUT, deadline)) return 1;
        const ssize_t w = ::send(fd, p, static_cast<size_t>(n), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (w <= 0) return 2;
        p += w;
        n -= w;
    }
    return 0;
}
int read_all(int fd, void* data, int64_t n, Clock::time_point deadline) {
    auto* p = static_cast<uint8_t*>(data);
    while (n > 0) {
        if (!wait_fd(fd, POLLIN, deadline)) return 1;
        const ssize_t r = ::recv(fd, p, static_cast<size_t>(n), MSG_DONTWAIT);
        if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (r <= 0) return 2;
        p += r;
        n -= r;
    }
    return 0;
}

Result<sockaddr_in> address(const std::string& host, int port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET, host.c_str(), &a.sin_addr) == 1) return a;
    // A host name (MASTER_ADDR=localhost, a node's name): its first IPv4 address.
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr)
        return invalid_argument("cannot resolve '" + host + "' to an IPv4 address");
    a.sin_addr = reinterpret_cast<const sockaddr_in*>(found->ai_addr)->sin_addr;
    freeaddrinfo(found);
    return a;
}

// Connects to host:port, retrying until the deadline (the peer may not listen yet).
Result<int> connect_retry(const sockaddr_in& a, Clock::time_point deadline, const std::string& what) {
    for (;;) {
        const int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) return sys_error("socket");
        if (connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0) {
            set_group_socket_options(fd);
            return fd;
        }
        close(fd);
        if (Clock::now() >= deadline)
            return Status(StatusCode::kUnavailable, "collective watchdog: cannot connect to " + what);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

Result<int> accept_until(int listen_fd, Clock::time_point deadline, sockaddr_in* peer) {
    if (!wait_fd(listen_fd, POLLIN, deadline)) return Status(StatusCode::kUnavailable, "timeout");
    socklen_t len = sizeof *peer;
    const int fd = accept(listen_fd, reinterpret_cast<sockaddr*>(peer), &len);
    if (fd < 0) return sys_error("accept");
    set_group_socket_options(fd);
    return fd;
}

struct PeerAddr {
    uint32_t ip;  // network order
    int32_t port;
};
struct Header {
    uint8_t kind;
    uint8_t pad[7];
    uint64_t step, seq;
    int64_t bytes;
};

// The world's connections (fds[r] to world rank r, -1 for this rank) and its failure (sticky), shared
// by the world communicator and its subgroups: a failure in any of them fails them all.
struct Mesh {
    int rank = 0, size = 1;
    std::vector<int> fds;
    mutable std::mutex mu;  // failed: abort and check_peers may come from another thread
    Status failed;
    ~Mesh() {
        for (int fd : fds)
            if (fd >= 0) close(fd);
    }
};

// The ranks `members` of the world (ascending, world ranks; this rank among them), communicator rank i
// = members[i]. Messages name world ranks.
class TcpGroupCommunicator : public TcpCommunicator {
  public:
    TcpGroupCommunicator(std::shared_ptr<Mesh> mesh, std::vector<int> members, ops::CommunicatorOptions o)
        : mesh_(std::move(mesh)), members_(std::move(members)), options_(o) {
        const auto it = std::find(members_.begin(), members_.end(), mesh_->rank);
        VOLT_CHECK(it != members_.end()) << "rank " << mesh_->rank << " outside its group";
        rank_ = static_cast<int>(it - members_.begin());
        size_ = static_cast<int>(members_.size());
    }
    const char* name() const override { return "tcp"; }
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    void begin_step(uint64_t step) override { tags_.begin_step(step); }
    uint64_t num_collectives() const override { return tags_.total(); }

    Status all_reduce_sum(float* data, int64_t count) override {
        const ops::CollectiveTag tag = tags_.next(ops::CollectiveKind::kAllReduceSum, count * 4);
        VOLT_RETURN_IF_ERROR(failed());
        if (size_ == 1) return Status::ok();
        const int64_t bytes = count * 4;
        if (rank_ != 0) {
            VOLT_RETURN_IF_ERROR(put(0, tag, data, bytes));
            return get(0, tag, data, bytes);
        }
        tmp_.resize(static_cast<size_t>(count));
        for (int r = 1; r < size_; ++r) {  // rank order: ((d0 + d1) + d2) + ...
            VOLT_RETURN_IF_ERROR(get(r, tag, tmp_.data(), bytes));
            for (int64_t i = 0; i < count; ++i) data[i] += tmp_[i];
        }
        for (int r = 1; r < size_; ++r) VOLT_RETURN_IF_ERROR(put(r, tag, data, bytes));
        return Status::ok();
    }

    Status gather(const float* in, const int64_t* counts, float* out, int root) override {
        int64_t total = 0;
        for (int r = 0; r < size_; ++r) total += counts[r];
        const ops::CollectiveTag tag = tags_.next(ops::CollectiveKind::kGather, total * 4);
        VOLT_RETURN_IF_ERROR(failed());
        if (rank_ != root) return put(root, tag, in, counts[rank_] * 4);
        int64_t off = 0;
        for (int r = 0; r < size_; ++r) {
            if (r == rank_) {
                if (counts[r] > 0) std::memmove(out + off, in, static_cast<size_t>(counts[r]) * 4);
            } else {
                VOLT_RETURN_IF_ERROR(get(r, tag, out + off, counts[r] * 4));
            }
            off += counts[r];
        }
        return Status::ok();
    }

    Status send(const void* data, int64_t bytes, int peer) override {
        VOLT_CHECK(peer >= 0 && peer < size_ && peer != rank_) << "send to rank " << peer;
        const ops::CollectiveTag tag = tags_.next_p2p(true, peer, bytes);
        VOLT_RETURN_IF_ERROR(failed());
        return put(peer, tag, data, bytes);
    }
    Status recv(void* data, int64_t bytes, int peer) override {
        VOLT_CHECK(peer >= 0 && peer < size_ && peer != rank_) << "recv from rank " << peer;
        const ops::CollectiveTag tag = tags_.next_p2p(false, peer, bytes);
        VOLT_RETURN_IF_ERROR(failed());
        return get(peer, tag, data, bytes);
    }

    Status wait_message(int peer, const std::atomic<bool>* stop) override {
        VOLT_CHECK(peer >= 0 && peer < size_ && peer != rank_) << "wait for rank " << peer;
        VOLT_RETURN_IF_ERROR(failed());
        for (;;) {
            if (stop != nullptr && stop->load())
                return failed_precondition("stopped: asked to leave the group");
            pollfd p{fd(peer), POLLIN, 0};
            const int r = poll(&p, 1, 100);
            if (r < 0 && errno != EINTR) return fail(sys_error("poll"));
            if (r <= 0) continue;
            uint8_t byte = 0;
            const ssize_t n = ::recv(fd(peer), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
            if (n > 0) return Status::ok();
            if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
            return fail(
                Status(StatusCode::kUnavailable, "rank " + world(peer) +
                                                     " closed its connection (failed or exited) while rank " +
                                                     world(rank_) + " waited for its next message"));
        }
    }

    Status check_peers() const override {
        VOLT_RETURN_IF_ERROR(failed());
        for (int r = 0; r < size_; ++r) {
            if (r == rank_) continue;
            pollfd p{fd(r), POLLRDHUP, 0};
            if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0)
                return Status(StatusCode::kUnavailable,
                              "rank " + world(r) + " closed its connection (failed or exited)");
        }
        return Status::ok();
    }

    void abort(const Status& why) override {
        (void)fail(why);
        for (int fd : mesh_->fds)
            if (fd >= 0) shutdown(fd, SHUT_RDWR);
    }

    std::unique_ptr<TcpCommunicator> subgroup(const std::vector<int>& ranks) const override {
        std::vector<int> members;
        for (const int r : ranks) {
            VOLT_CHECK(r >= 0 && r < size_ && (members.empty() || members_[r] > members.back()))
                << "subgroup ranks ascending within 0.." << size_ - 1;
            members.push_back(members_[r]);
        }
        return std::make_unique<TcpGroupCommunicator>(mesh_, std::move(members), options_);
    }

  private:
    int fd(int peer) const { return mesh_->fds[members_[peer]]; }
    std::string world(int r) const { return std::to_string(members_[r]); }
    Status failed() const {
        std::lock_guard<std::mutex> lock(mesh_->mu);
        return mesh_->failed;
    }
    Status fail(Status s) {
        std::lock_guard<std::mutex> lock(mesh_->mu);
        if (mesh_->failed.is_ok()) {
            mesh_->failed = s;
            spdlog::error("communicator (tcp, rank {} of {}): {}", mesh_->rank, mesh_->size, s.message());
        }
        return mesh_->failed;
    }
    Status io_failure(int code, int peer, const ops::CollectiveTag& tag) {
        if (code == 1)
            return fail(Status(StatusCode::kUnavailable, "collective watchdog: rank " + world(rank_) +
                                                             " waited " + seconds_text(options_.timeout_s) +
                                                             " s for rank " + world(peer) + " in " +
                                                             ops::describe(tag)));
        return fail(Status(StatusCode::kUnavailable, "rank " + world(peer) +
                                                         " closed its connection (failed or exited) during " +
                                                         ops::describe(tag) + " of rank " + world(rank_)));
    }
    Clock::time_point deadline() const {
        return Clock::now() +
               std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.timeout_s));
    }
    Status put(int peer, const ops::CollectiveTag& tag, const void* data, int64_t bytes) {
        Header h{static_cast<uint8_t>(tag.kind), {}, tag.step, tag.seq, tag.bytes};  // payload: `bytes`
        const auto dl = deadline();
        int rc = write_all(fd(peer), &h, sizeof h, dl);
        if (rc == 0 && bytes > 0) rc = write_all(fd(peer), data, bytes, dl);
        return rc == 0 ? Status::ok() : io_failure(rc, peer, tag);
    }
    Status get(int peer, const ops::CollectiveTag& want, void* data, int64_t bytes) {
        Header h{};
        const auto dl = deadline();
        int rc = read_all(fd(peer), &h, sizeof h, dl);
        if (rc != 0) return io_failure(rc, peer, want);
        const ops::CollectiveTag got{static_cast<ops::CollectiveKind>(h.kind), h.step, h.seq, h.bytes};
        if (got != want)
            return fail(internal_error("collective order differs across ranks: rank " + world(rank_) +
                                       " issued " + ops::describe(want) + ", rank " + world(peer) +
                                       " issued " + ops::describe(got)));
        if (bytes > 0) rc = read_all(fd(peer), data, bytes, dl);
        return rc == 0 ? Status::ok() : io_failure(rc, peer, want);
    }

    const std::shared_ptr<Mesh> mesh_;
    const std::vector<int> members_;
    int rank_ = 0, size_ = 1;
    const ops::CommunicatorOptions options_;
    TagCounter tags_;
    std::vector<float> tmp_;
};

// The world communicator of a finished rendezvous (fds: [size], -1 for this rank).
std::unique_ptr<TcpCommunicator> world_communicator(int rank, int size, const ops::CommunicatorOptions& o,
                                                    std::vector<int> fds) {
    auto mesh = std::make_shared<Mesh>();
    mesh->rank = rank;
    mesh->size = size;
    mesh->fds = std::move(fds);
    std::vector<int> all(size);
    for (int r = 0; r < size; ++r) all[r] = r;
    return std::make_unique<TcpGroupCommunicator>(std::move(mesh), std::move(all), o);
}

}  // namespace

void set_group_socket_options(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
#ifdef __linux__
    int idle = kKeepaliveIdleS, interval = kKeepaliveIntervalS, count = kKeepaliveCount;
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
#endif
}

Result<int> tcp_listen(const std::string& host, int port, int* bound_port) {
    VOLT_ASSIGN_OR_RETURN(sockaddr_in a, address(host, port));
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return sys_error("socket");
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 || listen(fd, 128) != 0) {
        const Status s = sys_error("listen on " + host + ":" + std::to_string(port));
        close(fd);
        return s;
    }
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    if (bound_port) *bound_port = ntohs(a.sin_port);
    return fd;
}

namespace {

// The sockets of a rendezvous in progress, closed unless handed to the communicator (every error path).
struct OpenSockets {
    std::vector<int> fds;
    int listen_fd = -1;
    explicit OpenSockets(int n) : fds(n, -1) {}
    ~OpenSockets() {
        for (int fd : fds)
            if (fd >= 0) close(fd);
        if (listen_fd >= 0) close(listen_fd);
    }
    std::vector<int> release() {
        if (listen_fd >= 0) close(listen_fd);
        listen_fd = -1;
        return std::exchange(fds, {});
    }
};

// A stranger (a port scanner, another program, a rank of some other group) gets this long to say Hello
// before it is dropped: one that connects and says nothing must not hold the rendezvous up.
constexpr double kHelloTimeoutS = 3.0;

Clock::time_point hello_deadline(Clock::time_point deadline) {
    return std::min(deadline, Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                 std::chrono::duration<double>(kHelloTimeoutS)));
}

std::string peer_text(const sockaddr_in& a) {
    char ip[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
    return std::string(ip) + ":" + std::to_string(ntohs(a.sin_port));
}

uint64_t secret_digest(const std::string& secret) {
    if (secret.empty()) return 0;
    uint64_t h = 14695981039346656037ull;  // FNV-1a 64 of a fixed prefix and the secret
    for (const char c : "voltllm group secret:" + secret)
        h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
    return h == 0 ? 1 : h;
}

// Rank `rank`'s Hello under options o (port: its mesh listener's, 0 when it has none).
Hello make_hello(const TcpOptions& o, int port) {
    Hello h{};
    h.magic = kMagic;
    h.rank = o.rank;
    h.size = o.size;
    h.port = port;
    h.secret = secret_digest(o.secret);
    std::snprintf(h.config, sizeof h.config, "%s", o.config.c_str());
    return h;
}

// Both sides' configurations differ: the refusal, naming both.
Status config_mismatch(const TcpOptions& o, const Hello& peer) {
    return invalid_argument("rank " + std::to_string(peer.rank) + " and rank " + std::to_string(o.rank) +
                            " are configured differently and cannot form a group: rank " +
                            std::to_string(peer.rank) + " has {" + peer.config + "} (a group of " +
                            std::to_string(peer.size) + "), rank " + std::to_string(o.rank) + " has {" +
                            o.config + "} (a group of " + std::to_string(o.size) + ")");
}
bool same_config(const TcpOptions& o, const Hello& peer) {
    return peer.size == o.size && std::strncmp(peer.config, o.config.c_str(), sizeof peer.config) == 0;
}

// Accepts until a connection sends a Hello from one of the ranks in [lo, size) not yet connected, with
// this group's secret; anyone else is logged, dropped and skipped. Answers the Hello with this rank's
// own (so the peer checks the configuration too). Errors: kUnavailable at the deadline; kInvalidArgument
// when the rank's configuration differs (config_mismatch; its socket is in fds then, closed with them).
Result<int> accept_rank(const TcpOptions& o, int listen_fd, int lo, std::vector<int>& fds,
                        Clock::time_point deadline, Hello* hello, sockaddr_in* peer) {
    const Hello mine = make_hello(o, 0);
    for (;;) {
        VOLT_ASSIGN_OR_RETURN(const int fd, accept_until(listen_fd, deadline, peer));
        Hello h{};
        // The magic number first: a stranger that sends anything else is dropped at once.
        const auto hello_dl = hello_deadline(deadline);
        const bool said = read_all(fd, &h.magic, sizeof h.magic, hello_dl) == 0 && h.magic == kMagic &&
                          read_all(fd, reinterpret_cast<uint8_t*>(&h) + sizeof h.magic,
                                   static_cast<int64_t>(sizeof h - sizeof h.magic), hello_dl) == 0;
        h.config[sizeof h.config - 1] = 0;
        const bool ours = said && h.rank >= lo && h.rank < o.size && fds[h.rank] < 0;
        if (ours && h.secret == mine.secret) {
            *hello = h;
            fds[h.rank] = fd;
            if (write_all(fd, &mine, sizeof mine, deadline) != 0)
                return Status(StatusCode::kUnavailable, "rank " + std::to_string(h.rank) + " hung up");
            if (!same_config(o, h)) return config_mismatch(o, h);
            return fd;
        }
        spdlog::warn("communicator (tcp, rank {}): dropped a connection from {}: {}", o.rank,
                     peer_text(*peer),
                     !said  ? "not a rank (no handshake)"
                     : ours ? "a rank with another VOLT_GROUP_SECRET"
                            : "a rank out of range or already connected");
        close(fd);
    }
}

// The answer to this rank's Hello on fd (a rank below it: rank 0 or a mesh peer `who`), checked.
Status read_answer(const TcpOptions& o, int fd, const std::string& who, Clock::time_point deadline) {
    Hello h{};
    if (read_all(fd, &h, sizeof h, deadline) != 0 || h.magic != kMagic)
        return Status(StatusCode::kUnavailable,
                      who + " hung up on rank " + std::to_string(o.rank) +
                          "'s handshake (a different VOLT_GROUP_SECRET, or not a rank of this group)");
    h.config[sizeof h.config - 1] = 0;
    if (h.secret != secret_digest(o.secret))
        return invalid_argument(who + " answered with another VOLT_GROUP_SECRET");
    if (!same_config(o, h)) return config_mismatch(o, h);
    return Status::ok();
}

}  // namespace

Result<std::unique_ptr<TcpCommunicator>> tcp_connect(const TcpOptions& o) {
    VOLT_CHECK(o.size >= 1 && o.rank >= 0 && o.rank < o.size) << "rank " << o.rank << " of " << o.size;
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(o.comm.timeout_s));
    OpenSockets open(o.size);
    std::vector<int>& fds = open.fds;
    if (o.size == 1) return world_communicator(0, 1, o.comm, open.release());
    auto watchdog = [&](const std::string& what) {
        return Status(StatusCode::kUnavailable, "collective watchdog: rank " + std::to_string(o.rank) +
                                                    " waited " + seconds_text(o.comm.timeout_s) +
                                                    " s at start-up for " + what);
    };
    if (o.rank == 0) {
        if (o.listen_fd >= 0) {
            open.listen_fd = o.listen_fd;
        } else {
            VOLT_ASSIGN_OR_RETURN(open.listen_fd, tcp_listen(o.host, o.port, nullptr));
        }
        std::vector<PeerAddr> table(o.size);
        for (int n = 1; n < o.size; ++n) {
            sockaddr_in peer{};
            Hello h{};
            auto fd = accept_rank(o, open.listen_fd, 1, fds, deadline, &h, &peer);
            if (!fd.is_ok() && fd.status().code() == StatusCode::kInvalidArgument) return fd.status();
            if (!fd.is_ok()) {
                std::string missing;
                for (int r = 1; r < o.size; ++r)
                    if (fds[r] < 0) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
                return watchdog("ranks " + missing + " to connect");
            }
            table[h.rank] = {peer.sin_addr.s_addr, h.port};
        }
        for (int r = 1; r < o.size; ++r)
            if (write_all(fds[r], table.data(), static_cast<int64_t>(table.size() * sizeof(PeerAddr)),
                          deadline) != 0)
                return watchdog("rank " + std::to_string(r) + " to take the address table");
    } else {
        VOLT_ASSIGN_OR_RETURN(sockaddr_in root, address(o.host, o.port));
        VOLT_ASSIGN_OR_RETURN(
            fds[0], connect_retry(root, deadline, "rank 0 at " + o.host + ":" + std::to_string(o.port)));
        // The mesh listener binds the local address this rank reaches rank 0 from (loopback stays
        // loopback), never every interface.
        sockaddr_in local{};
        socklen_t len = sizeof local;
        if (getsockname(fds[0], reinterpret_cast<sockaddr*>(&local), &len) != 0)
            return sys_error("getsockname");
        char ip[INET_ADDRSTRLEN] = "";
        inet_ntop(AF_INET, &local.sin_addr, ip, sizeof ip);
        int my_port = 0;
        VOLT_ASSIGN_OR_RETURN(open.listen_fd, tcp_listen(ip, 0, &my_port));
        const Hello h = make_hello(o, my_port);
        if (write_all(fds[0], &h, sizeof h, deadline) != 0) return watchdog("rank 0 to take its Hello");
        VOLT_RETURN_IF_ERROR(
            read_answer(o, fds[0], "rank 0 at " + o.host + ":" + std::to_string(o.port), deadline));
        std::vector<PeerAddr> table(o.size);
        if (read_all(fds[0], table.data(), static_cast<int64_t>(table.size() * sizeof(PeerAddr)), deadline) !=
            0)
            return watchdog("rank 0's address table");
        // Mesh among ranks 1..: connect to the lower ranks, accept the higher ones.
        for (int r = 1; r < o.rank; ++r) {
            sockaddr_in a{};
            a.sin_family = AF_INET;
            a.sin_port = htons(static_cast<uint16_t>(table[r].port));
            a.sin_addr.s_addr = table[r].ip;
            VOLT_ASSIGN_OR_RETURN(fds[r], connect_retry(a, deadline, "rank " + std::to_string(r)));
            const Hello me = make_hello(o, 0);
            if (write_all(fds[r], &me, sizeof me, deadline) != 0)
                return watchdog("rank " + std::to_string(r));
            VOLT_RETURN_IF_ERROR(read_answer(o, fds[r], "rank " + std::to_string(r), deadline));
        }
        for (int n = o.rank + 1; n < o.size; ++n) {
            sockaddr_in peer{};
            Hello got{};
            auto fd = accept_rank(o, open.listen_fd, o.rank + 1, fds, deadline, &got, &peer);
            if (!fd.is_ok() && fd.status().code() == StatusCode::kInvalidArgument) return fd.status();
            if (!fd.is_ok()) return watchdog("the ranks above " + std::to_string(o.rank) + " to connect");
        }
    }
    return world_communicator(o.rank, o.size, o.comm, open.release());
}

}  // namespace volt::cpu
