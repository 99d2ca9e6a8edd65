#include "cuda/nccl_communicator.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "core/check.h"
#include "core/logging.h"
#include "cpu/comm_tags.h"
#include "cpu/host_rendezvous.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_check.h"
#include "cuda/grow_scratch.h"
#include "cuda/launch.h"
#include "cuda/peer_access.h"

namespace volt::cuda {

using ops::CollectiveKind;
using ops::CollectiveTag;

class NcclGroupState {
  public:
    NcclGroupState(std::shared_ptr<const NcclLibrary> lib, std::vector<int> gpus, ops::CommunicatorOptions o)
        : host(static_cast<int>(gpus.size()), "nccl", o),
          nccl(std::move(lib)),
          gpus(std::move(gpus)),
          comms(this->gpus.size(), nullptr),
          options(o) {}
    ~NcclGroupState() {
        // A process rank always aborts: a peer process may be gone, and ncclCommDestroy could wait for it.
        const bool failed = process || !host.failed().is_ok();
        for (NcclComm c : comms)
            if (c != nullptr) failed ? nccl->comm_abort(c) : nccl->comm_destroy(c);
        for (void* p : one_shot_buffers)
            if (cudaFree(p) == cudaErrorCudartUnloading) return;
    }
    cpu::HostRendezvous host;
    std::shared_ptr<const NcclLibrary> nccl;
    std::vector<int> gpus;
    std::vector<NcclComm> comms;  // [size] (a process rank: only its own entry)
    ops::CommunicatorOptions options;
    // A group whose ranks are processes (NcclGroup::join_process): this process holds one rank, `host`
    // only keeps the sticky failure (no meets), and waits poll `peers_alive` (may be null).
    bool process = false;
    std::function<Status()> peers_alive;
    // The one-shot all-reduce (empty vectors when off): rank r's buffers live on gpus[r].
    bool one_shot = false;
    std::vector<float*> staging;   // [size] each [2, kOneShotMaxBytes / 4] f32 (halves by epoch parity)
    std::vector<unsigned*> flags;  // [size] each [kMaxCommRanks] u32, zeroed
    std::vector<int*> errors;      // [size] each [1] i32: a peer's flag came too late
    std::vector<int> sm_counts;    // [size]
    std::vector<void*> one_shot_buffers;
};

namespace {

class NcclCommunicator : public ops::Communicator {
  public:
    NcclCommunicator(std::shared_ptr<NcclGroupState> g, int rank) : g_(std::move(g)), rank_(rank) {}
    ~NcclCommunicator() override {
        if (scratch_ != nullptr && cudaFree(scratch_) == cudaErrorCudartUnloading) return;
        if (step_done_ != nullptr) cudaEventDestroy(step_done_);
    }
    const char* name() const override { return "nccl"; }
    int rank() const override { return rank_; }
    int size() const override { return g_->host.size(); }

    Status attach(ops::Backend& backend) override {
        auto* cuda = dynamic_cast<CudaBackend*>(&backend);
        if (cuda == nullptr)
            return invalid_argument(std::string("the NCCL communicator drives CUDA backends, not ") +
                                    backend.name());
        if (cuda->device_ordinal() != g_->gpus[rank_])
            return invalid_argument("NCCL rank " + std::to_string(rank_) + " belongs on GPU " +
                                    std::to_string(g_->gpus[rank_]) + ", its backend is on GPU " +
                                    std::to_string(cuda->device_ordinal()));
        stream_ = cuda->stream();
        VOLT_CUDA_CHECK(cudaSetDevice(g_->gpus[rank_]));
        if (step_done_ == nullptr)
            VOLT_CUDA_CHECK(cudaEventCreateWithFlags(&step_done_, cudaEventDisableTiming));
        return Status::ok();
    }

    Status all_reduce_sum(float* data, int64_t count) override {
        const CollectiveTag tag = tags_.next(CollectiveKind::kAllReduceSum, count * 4);
        if (size() == 1) return Status::ok();
        VOLT_RETURN_IF_ERROR(meet(tag, data));
        if (g_->one_shot && count * 4 <= NcclGroup::kOneShotMaxBytes) {
            // Every rank makes the same calls in the same order (checked above): the epochs agree.
            const unsigned epoch = ++epoch_;
            const int64_t half = (epoch & 1u) * (NcclGroup::kOneShotMaxBytes / 4);
            VOLT_CUDA_CHECK(cudaMemcpyAsync(g_->staging[rank_] + half, data, static_cast<size_t>(count) * 4,
                                            cudaMemcpyDeviceToDevice, stream_));
            OneShotArgs a;
            for (int q = 0; q < size(); ++q) {
                a.in[q] = g_->staging[q] + half;
                a.flags[q] = g_->flags[q];
            }
            a.n = size();
            a.rank = rank_;
            a.epoch = epoch;
            a.out = data;
            a.count = count;
            a.error = g_->errors[rank_];
            a.timeout_ns = static_cast<uint64_t>(g_->options.timeout_s * 1e9);
            launch_one_shot_all_reduce(a, g_->sm_counts[rank_], stream_);
            used_one_shot_ = true;
            return Status::ok();
        }
        float* all = grow_scratch(count * size());
        VOLT_RETURN_IF_ERROR(nccl_call(
            g_->nccl->all_gather(data, all, static_cast<size_t>(count), kNcclFloat32, comm(), stream_),
            "ncclAllGather"));
        launch_rank_sum_strided_f32(all, size(), count, data, count, stream_);
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
        VOLT_RETURN_IF_ERROR(meet(tag, in));
        if (rank_ != root) {
            if (counts[rank_] == 0) return Status::ok();
            return nccl_call(
                g_->nccl->send(in, static_cast<size_t>(counts[rank_]), kNcclFloat32, root, comm(), stream_),
                "ncclSend");
        }
        VOLT_RETURN_IF_ERROR(nccl_call(g_->nccl->group_start(), "ncclGroupStart"));
        int64_t off = 0;
        Status s = Status::ok();
        for (int q = 0; q < size() && s.is_ok(); ++q) {
            if (counts[q] > 0 && q == rank_)
                VOLT_CUDA_CHECK(cudaMemcpyAsync(out + off, in, static_cast<size_t>(counts[q]) * sizeof(float),
                                                cudaMemcpyDeviceToDevice, stream_));
            else if (counts[q] > 0)
                s = nccl_call(g_->nccl->recv(out + off, static_cast<size_t>(counts[q]), kNcclFloat32, q,
                                             comm(), stream_),
                              "ncclRecv");
            off += counts[q];
        }
        const Status end = nccl_call(g_->nccl->group_end(), "ncclGroupEnd");
        return s.is_ok() ? end : s;
    }

    Status send(const void* data, int64_t bytes, int peer) override {
        VOLT_CHECK(peer >= 0 && peer < size() && peer != rank_) << "send to rank " << peer;
        const CollectiveTag tag = tags_.next_p2p(true, peer, bytes);
        // The tag goes through the host mailbox first: the receiver checks it before enqueueing its recv.
        if (g_->process) {
            VOLT_RETURN_IF_ERROR(g_->host.failed());
        } else {
            VOLT_RETURN_IF_ERROR(g_->host.wait_mailbox(rank_, rank_, peer, true, tag));
            g_->host.set_mailbox(rank_, peer, true, tag);
        }
        return nccl_call(g_->nccl->send(data, static_cast<size_t>(bytes), kNcclUint8, peer, comm(), stream_),
                         "ncclSend");
    }
    Status recv(void* data, int64_t bytes, int peer) override {
        VOLT_CHECK(peer >= 0 && peer < size() && peer != rank_) << "recv from rank " << peer;
        const CollectiveTag tag = tags_.next_p2p(false, peer, bytes);
        if (g_->process) {
            VOLT_RETURN_IF_ERROR(g_->host.failed());
        } else {
            VOLT_RETURN_IF_ERROR(g_->host.wait_mailbox(rank_, peer, rank_, false, tag));
            g_->host.set_mailbox(peer, rank_, false, tag);
        }
        return nccl_call(g_->nccl->recv(data, static_cast<size_t>(bytes), kNcclUint8, peer, comm(), stream_),
                         "ncclRecv");
    }

    void begin_step(uint64_t step) override {
        tags_.begin_step(step);
        step_ = step;
    }
    // Waits for the step's device work (NCCL kernels included) up to the watchdog's timeout, polling NCCL's
    // asynchronous error; past it, or on an NCCL error, the communicator is aborted and the group fails.
    Status finish_step() override {
        VOLT_RETURN_IF_ERROR(g_->host.failed());
        if (stream_ == nullptr || size() == 1) return Status::ok();
        VOLT_RETURN_IF_ERROR(wait_device("NCCL work of step " + std::to_string(step_)));
        return check_one_shot();
    }
    Status drain() override {
        VOLT_RETURN_IF_ERROR(g_->host.failed());
        if (stream_ == nullptr || size() == 1) return Status::ok();
        return wait_device("collectives of step " + std::to_string(step_) + " before its results");
    }
    uint64_t num_collectives() const override { return tags_.total(); }

  private:
    NcclComm comm() const { return g_->comms[rank_]; }
    // The host meet of an in-process group (order check, watchdog); a process rank has none.
    Status meet(const CollectiveTag& tag, const void* data) {
        if (g_->process) return g_->host.failed();
        return g_->host.meet(rank_, {tag, data});
    }
    // Waits until the stream's work so far has finished, up to the watchdog's timeout, polling NCCL's
    // asynchronous error (and a process rank's peers every 5 ms). A failure fails the group (and aborts a
    // process rank's NCCL communicator at once: nothing else would end its kernels).
    Status wait_device(const std::string& what) {
        VOLT_CUDA_CHECK(cudaEventRecord(step_done_, stream_));
        const auto start = std::chrono::steady_clock::now();
        const auto deadline = start + std::chrono::duration<double>(g_->options.timeout_s);
        auto next_peer_check = start;
        for (;;) {
            const cudaError_t e = cudaEventQuery(step_done_);
            if (e == cudaSuccess) return Status::ok();
            VOLT_CHECK(e == cudaErrorNotReady) << "cudaEventQuery: " << cudaGetErrorString(e);
            int async = kNcclSuccess;
            const Status polled =
                g_->nccl->check(g_->nccl->comm_get_async_error(comm(), &async), "ncclCommGetAsyncError");
            Status why = !polled.is_ok() ? polled : g_->nccl->check(async, "NCCL (asynchronous error)");
            const auto now = std::chrono::steady_clock::now();
            if (why.is_ok() && g_->peers_alive && now >= next_peer_check) {
                why = g_->peers_alive();
                next_peer_check = now + std::chrono::milliseconds(5);
            }
            if (why.is_ok() && now > deadline)
                why = Status(StatusCode::kUnavailable, "collective watchdog: rank " + std::to_string(rank_) +
                                                           "'s " + what + " did not finish in " +
                                                           cpu::seconds_text(g_->options.timeout_s) + " s");
            if (!why.is_ok()) {
                spdlog::error("nccl: {}", why.to_string());
                fail_now(why);
                return why;  // an in-process group's destructor aborts its NCCL communicators
            }
            std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
    }
    void fail_now(const Status& why) {
        g_->host.fail(why);
        if (g_->process && g_->comms[rank_] != nullptr) {
            g_->nccl->comm_abort(g_->comms[rank_]);
            g_->comms[rank_] = nullptr;
        }
    }
    // After the step's work: a one-shot kernel that gave up waiting for a peer's flag fails the group.
    Status check_one_shot() {
        if (!used_one_shot_) return Status::ok();
        used_one_shot_ = false;
        int late = 0;
        VOLT_CUDA_CHECK(cudaMemcpy(&late, g_->errors[rank_], sizeof(int), cudaMemcpyDeviceToHost));
        if (late == 0) return Status::ok();
        Status why(StatusCode::kUnavailable, "collective watchdog: rank " + std::to_string(rank_) +
                                                 "'s one-shot all-reduce of step " + std::to_string(step_) +
                                                 " waited " + cpu::seconds_text(g_->options.timeout_s) +
                                                 " s for a peer's flag");
        fail_now(why);
        return why;
    }
    Status nccl_call(int result, const char* what) {
        Status s = g_->nccl->check(result, what);
        if (!s.is_ok()) fail_now(s);
        return s;
    }
    // [count] floats of this rank's gather scratch, grown after the stream drains.
    float* grow_scratch(int64_t count) {
        return grow_f32_scratch(&scratch_, &scratch_count_, count, stream_);
    }

    std::shared_ptr<NcclGroupState> g_;
    const int rank_;
    cpu::TagCounter tags_;
    uint64_t step_ = 0;
    cudaStream_t stream_ = nullptr;
    cudaEvent_t step_done_ = nullptr;
    float* scratch_ = nullptr;
    int64_t scratch_count_ = 0;
    unsigned epoch_ = 0;          // one-shot calls so far (flags hold the last epoch seen)
    bool used_one_shot_ = false;  // in this step
};

// Every rank's one-shot buffers on its GPU (after probe_peer_access passed).
void enable_one_shot(NcclGroupState& s) {
    int current = 0;
    VOLT_CUDA_CHECK(cudaGetDevice(&current));
    for (int gpu : s.gpus) {
        VOLT_CUDA_CHECK(cudaSetDevice(gpu));
        void *staging = nullptr, *flags = nullptr;
        VOLT_CUDA_CHECK(cudaMalloc(&staging, static_cast<size_t>(2 * NcclGroup::kOneShotMaxBytes)));
        VOLT_CUDA_CHECK(cudaMalloc(&flags, kMaxCommRanks * sizeof(unsigned) + sizeof(int)));
        VOLT_CUDA_CHECK(cudaMemset(flags, 0, kMaxCommRanks * sizeof(unsigned) + sizeof(int)));
        s.one_shot_buffers.push_back(staging);
        s.one_shot_buffers.push_back(flags);
        s.staging.push_back(static_cast<float*>(staging));
        s.flags.push_back(static_cast<unsigned*>(flags));
        s.errors.push_back(reinterpret_cast<int*>(static_cast<unsigned*>(flags) + kMaxCommRanks));
        int sms = 0;
        VOLT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, gpu));
        s.sm_counts.push_back(sms);
    }
    VOLT_CUDA_CHECK(cudaSetDevice(current));
    s.one_shot = true;
}

}  // namespace

Result<NcclGroup> NcclGroup::create(std::shared_ptr<const NcclLibrary> nccl, const std::vector<int>& gpus,
                                    ops::CommunicatorOptions options, bool one_shot) {
    for (size_t i = 0; i < gpus.size(); ++i)
        for (size_t j = 0; j < i; ++j)
            if (gpus[i] == gpus[j])
                return invalid_argument("NCCL ranks " + std::to_string(j) + " and " + std::to_string(i) +
                                        " on one GPU (" + std::to_string(gpus[i]) +
                                        "): NCCL refuses that; --tp-same-device runs every rank on one GPU");
    NcclGroup g;
    g.state_ = std::make_shared<NcclGroupState>(std::move(nccl), gpus, options);
    NcclGroupState& s = *g.state_;
    // The probe runs before NCCL starts (public-bugs.md BUG-34: peer writes silently dropped hang NCCL's
    // own P2P transport): a failed probe also turns NCCL's P2P off, unless the user set it already.
    bool probed_ok = false;
    if (one_shot && gpus.size() > 1 && static_cast<int>(gpus.size()) <= kMaxCommRanks) {
        const Status probed = probe_peer_access(gpus);
        probed_ok = probed.is_ok();
        if (!probed_ok) {
            spdlog::warn("custom all-reduce: off, NCCL alone, and NCCL_P2P_DISABLE=1 unless set ({})",
                         probed.message());
            setenv("NCCL_P2P_DISABLE", "1", /*overwrite=*/0);
        }
    }
    if (gpus.size() > 1)
        VOLT_RETURN_IF_ERROR(
            s.nccl->check(s.nccl->comm_init_all(s.comms.data(), static_cast<int>(gpus.size()), gpus.data()),
                          "ncclCommInitAll"));
    if (probed_ok) {
        enable_one_shot(s);
        spdlog::info(
            "custom all-reduce: on for {} GPUs (one-shot over peer memory up to {} KiB; the peer-access "
            "probe passed for every pair)",
            gpus.size(), kOneShotMaxBytes >> 10);
    }
    return g;
}

Result<std::unique_ptr<ops::Communicator>> NcclGroup::join_process(std::shared_ptr<const NcclLibrary> nccl,
                                                                   const NcclUniqueId& id, int size, int rank,
                                                                   int gpu, ops::CommunicatorOptions options,
                                                                   std::function<Status()> peers_alive) {
    if (size < 1 || rank < 0 || rank >= size)
        return invalid_argument("NCCL rank " + std::to_string(rank) + " of " + std::to_string(size));
    std::vector<int> gpus(static_cast<size_t>(size), -1);
    gpus[static_cast<size_t>(rank)] = gpu;
    auto state = std::make_shared<NcclGroupState>(std::move(nccl), gpus, options);
    state->process = true;
    state->peers_alive = std::move(peers_alive);
    if (size > 1) {
        VOLT_CUDA_CHECK(cudaSetDevice(gpu));
        NcclComm comm = nullptr;
        VOLT_RETURN_IF_ERROR(
            state->nccl->check(state->nccl->comm_init_rank(&comm, size, id, rank), "ncclCommInitRank"));
        state->comms[static_cast<size_t>(rank)] = comm;
    }
    return std::unique_ptr<ops::Communicator>(std::make_unique<NcclCommunicator>(std::move(state), rank));
}

bool NcclGroup::one_shot() const { return state_->one_shot; }

std::unique_ptr<ops::Communicator> NcclGroup::communicator(int rank) const {
    VOLT_CHECK(rank >= 0 && rank < size()) << "rank " << rank << " of " << size();
    return std::make_unique<NcclCommunicator>(state_, rank);
}

int NcclGroup::size() const { return state_->host.size(); }
void NcclGroup::fail(const Status& why) const { state_->host.fail(why); }

}  // namespace volt::cuda
