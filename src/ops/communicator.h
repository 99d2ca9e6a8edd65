// The Communicator interface of tensor and pipeline parallelism: the collectives the forward pass issues
// (an f32 all-reduce sum, a gather of vocab-sharded logits, point-to-point activations between pipeline
// stages) over buffers in the backend's memory, implemented by the CPU communicators (src/cpu: threads of
// one process, processes over TCP) and later by the CUDA ones (NCCL, one-shot peer all-reduce,
// same-device). Design and who calls what: docs/parallel.md. Tests: tests/unit/cpu/communicator_test.cc.
// C++17 (the .cu files may include it); depends on core/status.h only.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace volt::ops {

class Backend;  // ops/ops.h

enum class CollectiveKind : uint8_t { kAllReduceSum, kGather, kSend, kRecv };
const char* collective_name(CollectiveKind k);

// What one collective is, for the order check: every rank of a group must issue the same kinds with the
// same sizes in the same order within a step. `seq` counts the group's collectives of the step (from 0);
// point-to-point transfers count per (peer, direction) instead, so a sender's n-th send to a peer
// matches that peer's n-th receive from it.
struct CollectiveTag {
    CollectiveKind kind = CollectiveKind::kAllReduceSum;
    uint64_t step = 0;
    uint64_t seq = 0;
    int64_t bytes = 0;
    bool operator==(const CollectiveTag& o) const {
        return kind == o.kind && step == o.step && seq == o.seq && bytes == o.bytes;
    }
    bool operator!=(const CollectiveTag& o) const { return !(*this == o); }
};
// "all_reduce_sum #3 of step 7 (16384 bytes)".
std::string describe(const CollectiveTag& t);

// Start-up options shared by every implementation.
struct CommunicatorOptions {
    // The collective watchdog: a rank that waits longer than this in one collective (a peer that never
    // arrives, a peer that issued a different collective) fails it with kUnavailable and a log line, and
    // the whole group fails from then on (every later collective returns the first error at once), so
    // the engine fails loudly instead of hanging.
    double timeout_s = 300.0;
    // Compare every collective's tag across ranks (the CPU communicators always do: it costs one compare
    // per collective). A device communicator may make it a debug mode.
    bool check_order = true;
};

// One rank's handle on a group of `size()` ranks. Every pointer is in the memory of the backend this
// communicator was made for (host memory for the CPU communicators). Calls of one rank come from one
// thread at a time. Errors are sticky: after a failure (watchdog timeout, an order mismatch, a peer that
// failed or went away) every call returns an error naming the first failure. An asynchronous device
// implementation may return ok when it enqueues and report a failure from a later call or from
// finish_step().
class Communicator {
  public:
    virtual ~Communicator() = default;
    virtual const char* name() const = 0;  // "threads", "tcp", "nccl", ...
    virtual int rank() const = 0;
    virtual int size() const = 0;

    // Binds this rank's handle to the backend its pointers live in and whose stream orders its
    // collectives (a device communicator takes the backend's stream and device here; the CPU ones need
    // nothing). executor::RankGroup calls it once per rank, after making the rank's backend and before
    // the first collective. Errors: kInvalidArgument for a backend this communicator cannot drive.
    virtual Status attach(Backend& /*backend*/) { return Status::ok(); }

    // data[i] := sum over ranks r = 0, 1, ..., size-1 of rank r's data[i], added in that order, so the
    // result does not depend on timing and is bitwise equal on every rank. count f32 elements, the same
    // on every rank (checked).
    virtual Status all_reduce_sum(float* data, int64_t count) = 0;

    // Rank `root`'s `out` receives every rank's `in` concatenated in rank order: rank r sends counts[r]
    // f32 (counts[] is the same array on every rank; counts[r] may be 0); out [sum counts] is read only
    // on root (may be null elsewhere).
    virtual Status gather(const float* in, const int64_t* counts, float* out, int root) = 0;

    // Point to point (pipeline stages): bytes from this rank to `peer`, received by that peer's recv with
    // the same size. send may return before the peer receives (a buffered copy), never before `data`
    // may be reused.
    virtual Status send(const void* data, int64_t bytes, int peer) = 0;
    virtual Status recv(void* data, int64_t bytes, int peer) = 0;

    // Step boundaries of the order check: every rank calls begin_step with the same number before the
    // step's first collective; finish_step after its last (a device implementation waits for its
    // enqueued work here and reports its errors).
    virtual void begin_step(uint64_t step) = 0;
    virtual Status finish_step() { return Status::ok(); }
    // Waits until this rank's collectives issued so far have completed, bounded by the watchdog (an
    // asynchronous device implementation polls its errors and fails the group past timeout_s; the CPU
    // communicators complete every call before returning: ok at once, or the group's failure). The
    // output rank calls it before downloading what it sampled, so a collective stuck on the device ends
    // in the watchdog's error instead of a download that never returns.
    virtual Status drain() { return Status::ok(); }

    // Whether the collectives may be recorded into one graph with every rank of the group
    // (ops::Backend::capture_group over the ranks' backends, every rank's calls made during the capture:
    // BackendExecutor's decode graphs at TP x PP > 1). Such a communicator enqueues only work a capture can
    // hold while its backend captures (no host wait on the device, no allocation; a buffer too small spoils
    // the capture instead, which the backend reports as kUnavailable), and after the capture waits on no
    // event recorded inside it. The same-device communicator is; the CPU ones (no graphs) and NCCL's (not
    // yet: docs/parallel.md "CUDA graphs") are not.
    virtual bool capturable() const { return false; }

    // Collectives this rank has issued since creation (all kinds); equal on every rank of a group that is
    // in step (tests).
    virtual uint64_t num_collectives() const = 0;
};

}  // namespace volt::ops
