// Engine: EngineCore on its own thread, fed through a mutex-protected queue; RequestHandle channels.
#include "engine/engine.h"

#include <algorithm>
#include <random>
#include <thread>

#include "core/logging.h"
#include "engine/engine_core.h"

namespace volt::engine {

// What submit(), abort() and the engine thread share.
class EngineShared {
  public:
    struct Pending {
        std::shared_ptr<RequestHandle> handle;
        std::vector<int32_t> prompt;
        SamplingParams params;
        uint64_t seed;
        int64_t group;
    };
    std::mutex mu;
    std::condition_variable cv;
    std::vector<Pending> incoming;
    bool stop = false;
    bool woken = false;
    int64_t next_id = 0;
    int64_t num_waiting = 0;  // waiting sequences at the end of the last step
    int64_t num_finished = 0;
    // When the first request of a busy spell was submitted (nothing was pending before it): the step
    // bound of /health runs from here until the engine thread beats, so no read between the submit and
    // the engine's wake-up sees an idle engine's old beat as a hang.
    std::chrono::steady_clock::time_point
        work_since{};  // handles whose every choice finished (pushed); next_id - this are pending
    void wake() {
        {
            std::lock_guard<std::mutex> l(mu);
            woken = true;
        }
        cv.notify_all();
    }
};

RequestHandle::RequestHandle(int64_t id, int32_t num_prompt_tokens, int32_t n,
                             std::shared_ptr<EngineShared> shared)
    : id_(id), num_prompt_tokens_(num_prompt_tokens), n_(n), shared_(std::move(shared)) {}

bool RequestHandle::next(RequestOutput* out, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> l(mu_);
    if (finished_taken_ >= n_) return false;
    // A zero timeout polls: no timed wait, which would sleep for the timer slack (tests poll every step).
    if (timeout.count() <= 0 ? queue_.empty() : !cv_.wait_for(l, timeout, [&] { return !queue_.empty(); }))
        return false;
    *out = std::move(queue_.front());
    queue_.pop_front();
    if (out->finish != FinishReason::kNone) ++finished_taken_;
    return true;
}

void RequestHandle::abort() {
    {
        std::lock_guard<std::mutex> l(mu_);
        aborted_ = true;
    }
    if (shared_) shared_->wake();
}

bool RequestHandle::done() const {
    std::lock_guard<std::mutex> l(mu_);
    return finished_taken_ >= n_;
}

bool RequestHandle::aborted() const {
    std::lock_guard<std::mutex> l(mu_);
    return aborted_;
}

void RequestHandle::push(RequestOutput out) {
    std::function<void()> notify;
    bool last = false;
    {
        std::lock_guard<std::mutex> l(mu_);
        if (out.finish != FinishReason::kNone) last = ++finished_pushed_ == n_;
        queue_.push_back(std::move(out));
        notify = notify_;
    }
    if (last && shared_) {
        std::lock_guard<std::mutex> l(shared_->mu);
        ++shared_->num_finished;
    }
    cv_.notify_all();
    if (notify) notify();
}

void RequestHandle::set_notify(std::function<void()> notify) {
    std::lock_guard<std::mutex> l(mu_);
    notify_ = std::move(notify);
}

class Engine::Impl {
  public:
    std::unique_ptr<Executor> executor;
    std::unique_ptr<EngineCore> core;
    std::shared_ptr<EngineShared> shared = std::make_shared<EngineShared>();
    mutable std::mutex stats_mu;
    EngineStats stats;
    std::deque<int64_t> step_tokens;  // guarded by stats_mu; take_step_tokens()
    EngineHeartbeat beat;             // guarded by stats_mu
    std::thread thread;
    std::once_flag shutdown_once;

    void loop();
};

void Engine::Impl::loop() {
    for (;;) {
        std::vector<EngineShared::Pending> incoming;
        bool stop;
        {
            std::unique_lock<std::mutex> l(shared->mu);
            shared->cv.wait(l, [&] {
                return shared->stop || shared->woken || !shared->incoming.empty() || core->has_requests();
            });
            shared->woken = false;
            incoming.swap(shared->incoming);
            stop = shared->stop;
        }
        const bool was_idle = !core->has_requests();
        for (auto& p : incoming)
            core->add_request(std::move(p.handle), std::move(p.prompt), std::move(p.params), p.seed, p.group);
        {
            // Work taken while idle starts the clock of the step bound now, not at the last step.
            std::lock_guard<std::mutex> l(stats_mu);
            if (was_idle) beat.last_beat = std::chrono::steady_clock::now();
        }
        if (stop) {
            core->abort_all();
            break;
        }
        Result<bool> ran = core->step();
        if (!ran.is_ok()) {
            // Every request fails with the cause (finish_reason error; the API answers with an error
            // object), so a client or `voltllm generate` sees why rather than a silent abort.
            spdlog::error("engine step failed, failing every request: {}", ran.status().to_string());
            core->abort_all(FinishReason::kError, "engine step failed: " + ran.status().to_string());
        }
        {
            std::lock_guard<std::mutex> l(stats_mu);
            const int64_t before = stats.prompt_tokens + stats.generated_tokens;
            stats = core->stats();
            const int64_t tokens = stats.prompt_tokens + stats.generated_tokens - before;
            if (tokens > 0) {
                step_tokens.push_back(tokens);
                if (step_tokens.size() > 65536) step_tokens.pop_front();
            }
            beat.steps = stats.num_steps;
            beat.tokens = stats.prompt_tokens + stats.generated_tokens;
            beat.last_beat = std::chrono::steady_clock::now();
        }
        {
            std::lock_guard<std::mutex> l(shared->mu);
            shared->num_waiting = core->num_waiting_requests();
        }
    }
    std::lock_guard<std::mutex> l(stats_mu);
    stats = core->stats();
    beat.stopped = true;
}

bool engine_healthy(const EngineHeartbeat& hb, std::chrono::steady_clock::time_point now,
                    std::chrono::milliseconds step_bound) {
    if (hb.stopped) return false;
    return hb.pending_requests == 0 || now - hb.last_beat <= step_bound;
}

EngineHeartbeat Engine::heartbeat() const {
    EngineHeartbeat hb;
    {
        std::lock_guard<std::mutex> l(impl_->stats_mu);
        hb = impl_->beat;
    }
    std::lock_guard<std::mutex> l(impl_->shared->mu);
    hb.pending_requests = impl_->shared->next_id - impl_->shared->num_finished;
    hb.last_beat = std::max(hb.last_beat, impl_->shared->work_since);
    return hb;
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Engine::~Engine() { shutdown(); }

Result<std::unique_ptr<Engine>> Engine::create(EngineConfig config, std::unique_ptr<Executor> executor) {
    auto impl = std::make_unique<Impl>();
    impl->executor = std::move(executor);
    VOLT_ASSIGN_OR_RETURN(impl->core, EngineCore::create(std::move(config), impl->executor.get()));
    impl->stats = impl->core->stats();
    impl->beat.last_beat = std::chrono::steady_clock::now();
    const KvPlan& plan = impl->core->plan();
    spdlog::info("engine: KV blocks of {} tokens: {} full-attention, {} sliding-window; max_model_len {}",
                 impl->core->config().block_size, plan.num_blocks[0], plan.num_blocks[1], plan.max_model_len);
    Impl* raw = impl.get();
    impl->thread = std::thread([raw] { raw->loop(); });
    return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Result<std::shared_ptr<RequestHandle>> Engine::submit(std::vector<int32_t> prompt, SamplingParams params,
                                                      int64_t group) {
    VOLT_RETURN_IF_ERROR(impl_->core->validate(prompt, params));
    uint64_t seed = 0;
    if (params.seed) {
        seed = *params.seed;
    } else {
        std::random_device rd;
        seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
    }
    std::shared_ptr<RequestHandle> handle;
    {
        std::lock_guard<std::mutex> l(impl_->shared->mu);
        if (impl_->shared->stop) return Status(StatusCode::kUnavailable, "the engine is shut down");
        const int64_t queued =
            static_cast<int64_t>(impl_->shared->incoming.size()) + impl_->shared->num_waiting;
        if (queued >= impl_->core->config().max_queued_requests)
            return resource_exhausted("the waiting queue is full (" + std::to_string(queued) +
                                      " requests, max_queued_requests " +
                                      std::to_string(impl_->core->config().max_queued_requests) + ")");
        if (impl_->shared->next_id == impl_->shared->num_finished)
            impl_->shared->work_since = std::chrono::steady_clock::now();
        handle = std::make_shared<RequestHandle>(
            impl_->shared->next_id++, static_cast<int32_t>(prompt.size()), params.n, impl_->shared);
        impl_->shared->incoming.push_back({handle, std::move(prompt), std::move(params), seed, group});
    }
    impl_->shared->cv.notify_all();
    return handle;
}

void Engine::shutdown() {
    std::call_once(impl_->shutdown_once, [this] {
        {
            std::lock_guard<std::mutex> l(impl_->shared->mu);
            impl_->shared->stop = true;
        }
        impl_->shared->cv.notify_all();
        if (impl_->thread.joinable()) impl_->thread.join();
    });
}

EngineStats Engine::stats() const {
    std::lock_guard<std::mutex> l(impl_->stats_mu);
    return impl_->stats;
}

std::vector<int64_t> Engine::take_step_tokens() {
    std::lock_guard<std::mutex> l(impl_->stats_mu);
    std::vector<int64_t> out(impl_->step_tokens.begin(), impl_->step_tokens.end());
    impl_->step_tokens.clear();
    return out;
}

int64_t Engine::max_model_len() const { return impl_->core->plan().max_model_len; }

const EngineConfig& Engine::config() const { return impl_->core->config(); }

}  // namespace volt::engine
