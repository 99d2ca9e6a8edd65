#include "cuda/same_device_communicator.h"

#include <string>
#include <vector>

#include "core/check.h"
#include "cpu/comm_tags.h"
#include "cpu/host_rendezvous.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_check.h"
#include "cuda/grow_scratch.h"
#include "cuda/launch.h"

namespace volt::cuda {

using ops::CollectiveKind;
using ops::CollectiveTag;

namespace {
bool unloading(cudaError_t e) { return e == cudaErrorCudartUnloading; }
}  // namespace

// Host side (HostRendezvous): two barriers per group collective (publish, then "done reading"), a tag
// mailbox per ordered pair of ranks for send / recv. Device side, all-reduce on rank r's stream:
//   record ready[r]; barrier 1; wait ready[q] for every q; sum kernel -> scratch[r]; record done[r];
//   barrier 2; wait done[q] for every q; copy scratch[r] -> data.
// Rank q records ready[q] again only after barrier 2, by which time every rank has enqueued its wait on
// it; it records done[q] again only after the next barrier 1, after every rank's wait on done[q].
// Graph capture (ops::Communicator::capturable; CudaBackend::capture_group over every rank's backend):
// the same calls, made while every rank's stream is in one capture, become the graph's edges (each
// all-reduce and gather records before it waits, so they never wait on an older record). Only a mailbox's
// `consumed` is waited on one transfer later: a send waits on it only when it was recorded in the same
// capture (or both outside any), never on an event recorded inside another capture or outside this one
// (illegal in a capture, and no real event after it); the executor orders every rank's stream after
// every other's around a capture, which covers the receiver's copy that event stood for. A buffer too
// small inside a capture spoils it (CudaBackend::spoil_capture: kUnavailable, the step then runs eagerly
// and grows it) instead of waiting for the device; a buffer that moves bumps the backend's scratch epoch
// (graphs holding its address are captured again).
class SameDeviceGroupState {
  public:
    SameDeviceGroupState(int size, int device, ops::CommunicatorOptions o)
        : host(size, "same-device, GPU " + std::to_string(device), o),
          device_(device),
          ready_(size, nullptr),
          done_(size, nullptr),
          mail_(static_cast<size_t>(size) * size) {}
    ~SameDeviceGroupState() {
        for (Mailbox& m : mail_) {
            if (m.buf != nullptr && unloading(cudaFree(m.buf))) return;
            if (m.sent != nullptr && unloading(cudaEventDestroy(m.sent))) return;
            if (m.consumed != nullptr && unloading(cudaEventDestroy(m.consumed))) return;
        }
    }

    // A buffered transfer src -> dst: the sender copies into buf on its stream and records `sent`; the
    // receiver waits for `sent`, copies out, records `consumed`, and only then empties the host mailbox,
    // so the sender's next copy into buf (after waiting for `consumed`) cannot overtake it.
    struct Mailbox {
        void* buf = nullptr;  // [cap] bytes on the device
        int64_t cap = 0;
        cudaEvent_t sent = nullptr, consumed = nullptr;
        // The capture (CudaBackend::capture_serial) each was last recorded in; 0: outside any.
        uint64_t sent_in = 0, consumed_in = 0;
    };

    int size() const { return host.size(); }
    int device() const { return device_; }
    // Written once per rank by attach, before the group's first collective.
    cudaEvent_t ready(int r) const { return ready_[r]; }
    cudaEvent_t done(int r) const { return done_[r]; }
    void attach(int rank, cudaEvent_t ready, cudaEvent_t done) {
        ready_[rank] = ready;
        done_[rank] = done;
    }
    Mailbox& mailbox(int src, int dst) { return mail_[src * host.size() + dst]; }

    cpu::HostRendezvous host;

  private:
    const int device_;
    std::vector<cudaEvent_t> ready_, done_;  // [size], each rank's own (created at attach)
    std::vector<Mailbox> mail_;              // [src * size + dst]
};

namespace {

class SameDeviceCommunicator : public ops::Communicator {
  public:
    SameDeviceCommunicator(std::shared_ptr<SameDeviceGroupState> g, int rank)
        : g_(std::move(g)), rank_(rank) {}
    ~SameDeviceCommunicator() override {
        if (scratch_ != nullptr && unloading(cudaFree(scratch_))) return;
        if (ready_ != nullptr && unloading(cudaEventDestroy(ready_))) return;
        if (done_ != nullptr) cudaEventDestroy(done_);
    }
    const char* name() const override { return "same-device"; }
    bool capturable() const override { return true; }
    int rank() const override { return rank_; }
    int size() const override { return g_->size(); }

    Status attach(ops::Backend& backend) override {
        auto* cuda = dynamic_cast<CudaBackend*>(&backend);
        if (cuda == nullptr)
            return invalid_argument(std::string("the same-device communicator drives CUDA backends, not ") +
                                    backend.name());
        if (cuda->device_ordinal() != g_->device())
            return invalid_argument("same-device communicator of GPU " + std::to_string(g_->device()) +
                                    ": rank " + std::to_string(rank_) + " is on GPU " +
                                    std::to_string(cuda->device_ordinal()));
        stream_ = cuda->stream();
        backend_ = cuda;
        VOLT_CUDA_CHECK(cudaSetDevice(g_->device()));
        if (ready_ == nullptr) {
            VOLT_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
            VOLT_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
        }
        g_->attach(rank_, ready_, done_);
        return Status::ok();
    }

    Status all_reduce_sum(float* data, int64_t count) override {
        const CollectiveTag tag = tags_.next(CollectiveKind::kAllReduceSum, count * 4);
        if (size() == 1) return Status::ok();
        VOLT_CHECK(stream_ != nullptr) << "same-device communicator: attach() before the first collective";
        VOLT_CUDA_CHECK(cudaEventRecord(ready_, stream_));
        VOLT_RETURN_IF_ERROR(g_->host.meet(rank_, {tag, data}));
        RankPointers in{};
        for (int q = 0; q < size(); ++q) {
            in.p[q] = static_cast<const float*>(g_->host.post(q).data);
            if (q != rank_) VOLT_CUDA_CHECK(cudaStreamWaitEvent(stream_, g_->ready(q), 0));
        }
        float* out = grow_scratch(count);  // null: the capture is spoiled; enqueue no sum, no copy
        if (out != nullptr) launch_rank_sum_f32(in, size(), out, count, stream_);
        VOLT_CUDA_CHECK(cudaEventRecord(done_, stream_));
        VOLT_RETURN_IF_ERROR(g_->host.finish(rank_, tag));
        // Nobody writes its buffer before every rank's sum has read it.
        for (int q = 0; q < size(); ++q)
            if (q != rank_) VOLT_CUDA_CHECK(cudaStreamWaitEvent(stream_, g_->done(q), 0));
        if (out != nullptr)
            VOLT_CUDA_CHECK(cudaMemcpyAsync(data, out, static_cast<size_t>(count) * sizeof(float),
                                            cudaMemcpyDeviceToDevice, stream_));
        return Status::ok();
    }

    Status gather(const float* in, const int64_t* counts, float* out, int root) override {
        int64_t total = 0;
        for (int r = 0; r < size(); ++r) total += counts[r];
        const CollectiveTag tag = tags_.next(CollectiveKind::kGather, total * 4);
        if (size() == 1) {
            if (counts[0] > 0)
                VOLT_CUDA_CHECK(cudaMemcpyAsync(out, in, static_cast<size_t>(counts[0]) * sizeof(float),
                                                cudaMemcpyDeviceToDevice, stream_));
            return Status::ok();
        }
        VOLT_CHECK(stream_ != nullptr) << "same-device communicator: attach() before the first collective";
        VOLT_CUDA_CHECK(cudaEventRecord(ready_, stream_));
        VOLT_RETURN_IF_ERROR(g_->host.meet(rank_, {tag, in}));
        if (rank_ == root) {
            int64_t off = 0;
            for (int q = 0; q < size(); ++q) {
                if (q != rank_) VOLT_CUDA_CHECK(cudaStreamWaitEvent(stream_, g_->ready(q), 0));
                if (counts[q] > 0)
                    VOLT_CUDA_CHECK(cudaMemcpyAsync(out + off, g_->host.post(q).data,
                                                    static_cast<size_t>(counts[q]) * sizeof(float),
                                                    cudaMemcpyDeviceToDevice, stream_));
                off += counts[q];
            }
            VOLT_CUDA_CHECK(cudaEventRecord(done_, stream_));
        }
        VOLT_RETURN_IF_ERROR(g_->host.finish(rank_, tag));
        // The others may overwrite `in` only after the root's copies.
        if (rank_ != root) VOLT_CUDA_CHECK(cudaStreamWaitEvent(stream_, g_->done(root), 0));
        return Status::ok();
    }

    Status send(const void* data, int64_t bytes, int peer) override {
        VOLT_CHECK(peer >= 0 && peer < size() && peer != rank_) << "send to rank " << peer;
        const CollectiveTag tag = tags_.next_p2p(true, peer, bytes);
        VOLT_CHECK(stream_ != nullptr) << "same-device communicator: attach() before the first collective";
        VOLT_RETURN_IF_ERROR(g_->host.wait_mailbox(rank_, rank_, peer, true, tag));
        // The mailbox is empty: the receiver's copy out of it is enqueued and `consumed` recorded after it.
        SameDeviceGroupState::Mailbox& m = g_->mailbox(rank_, peer);
        if (m.sent == nullptr) {
            VOLT_CUDA_CHECK(cudaEventCreateWithFlags(&m.sent, cudaEventDisableTiming));
            VOLT_CUDA_CHECK(cudaEventCreateWithFlags(&m.consumed, cudaEventDisableTiming));
        }
        const uint64_t capture = backend_->capture_serial();
        bool copy = bytes > 0;
        if (m.cap < bytes && capture != 0) {
            backend_->spoil_capture();  // growing waits for the device: the eager step grows it
            copy = false;
        } else if (m.cap < bytes) {
            // Nothing may still touch buf before it is freed: the receiver's last copy out of it (its
            // `consumed`, a real event only when recorded outside a capture) and this sender's own queued
            // work (its last copy into it, or a replayed graph that the executor ordered before this
            // stream's work; grow_device_buffer waits for this stream): both, whichever recorded what.
            if (m.consumed_in == 0) VOLT_CUDA_CHECK(cudaEventSynchronize(m.consumed));
            grow_device_buffer(&m.buf, &m.cap, bytes, 256, stream_);
            backend_->scratch_moved();
        }
        if (m.consumed_in == capture) VOLT_CUDA_CHECK(cudaStreamWaitEvent(stream_, m.consumed, 0));
        if (copy)
            VOLT_CUDA_CHECK(
                cudaMemcpyAsync(m.buf, data, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, stream_));
        VOLT_CUDA_CHECK(cudaEventRecord(m.sent, stream_));
        m.sent_in = capture;
        g_->host.set_mailbox(rank_, peer, true, tag);
        return Status::ok();
    }

    Status recv(void* data, int64_t bytes, int peer) override {
        VOLT_CHECK(peer >= 0 && peer < size() && peer != rank_) << "recv from rank " << peer;
        const CollectiveTag tag = tags_.next_p2p(false, peer, bytes);
        VOLT_CHECK(stream_ != nullptr) << "same-device communicator: attach() before the first collective";
        VOLT_RETURN_IF_ERROR(g_->host.wait_mailbox(rank_, peer, rank_, false, tag));
        SameDeviceGroupState::Mailbox& m = g_->mailbox(peer, rank_);
        const uint64_t capture = backend_->capture_serial();
        VOLT_CHECK(m.sent_in == capture) << "same-device communicator: a send and its recv on either side of "
                                            "a graph capture's edge (every rank captures or none)";
        VOLT_CUDA_CHECK(cudaStreamWaitEvent(stream_, m.sent, 0));
        bool copy = bytes > 0;
        if (m.cap < bytes) {  // only inside a capture the sender spoiled (else it grew the buffer)
            VOLT_CHECK(capture != 0) << "same-device mailbox of " << m.cap << " bytes for " << bytes;
            backend_->spoil_capture();
            copy = false;
        }
        if (copy)
            VOLT_CUDA_CHECK(
                cudaMemcpyAsync(data, m.buf, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, stream_));
        VOLT_CUDA_CHECK(cudaEventRecord(m.consumed, stream_));
        m.consumed_in = capture;
        g_->host.set_mailbox(peer, rank_, false, tag);
        return Status::ok();
    }

    void begin_step(uint64_t step) override { tags_.begin_step(step); }
    uint64_t num_collectives() const override { return tags_.total(); }

  private:
    // This rank's sum scratch, at least count floats (grown after this rank's stream drains; a move makes
    // graphs captured before stale). Inside a capture it cannot grow: null, and the capture is spoiled.
    float* grow_scratch(int64_t count) {
        if (scratch_count_ >= count) return scratch_;
        if (backend_->capture_serial() != 0) {
            backend_->spoil_capture();
            return nullptr;
        }
        backend_->scratch_moved();
        return grow_f32_scratch(&scratch_, &scratch_count_, count, stream_);
    }

    std::shared_ptr<SameDeviceGroupState> g_;
    const int rank_;
    cpu::TagCounter tags_;
    cudaStream_t stream_ = nullptr;
    CudaBackend* backend_ = nullptr;  // attach's: the capture state, scratch moves
    cudaEvent_t ready_ = nullptr, done_ = nullptr;
    float* scratch_ = nullptr;
    int64_t scratch_count_ = 0;
};

}  // namespace

SameDeviceGroup::SameDeviceGroup(int size, int device, ops::CommunicatorOptions options)
    : state_(std::make_shared<SameDeviceGroupState>(size, device, options)) {
    VOLT_CHECK(size >= 1 && size <= kMaxCommRanks)
        << "a same-device group of " << size << " ranks (1.." << kMaxCommRanks << ")";
}

std::unique_ptr<ops::Communicator> SameDeviceGroup::communicator(int rank) const {
    VOLT_CHECK(rank >= 0 && rank < state_->size()) << "rank " << rank << " of " << state_->size();
    return std::make_unique<SameDeviceCommunicator>(state_, rank);
}

int SameDeviceGroup::size() const { return state_->size(); }
void SameDeviceGroup::fail(const Status& why) const { state_->host.fail(why); }

}  // namespace volt::cuda
