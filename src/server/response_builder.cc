// JobStream, init_job and start_response; see response_builder.h.
#include "server/response_builder.h"

#include <spdlog/spdlog.h>

#include "server/api_error.h"

namespace volt::server {

JobStream::JobStream(std::shared_ptr<Job> job, HttpServer::Ticket ticket, std::chrono::milliseconds heartbeat)
    : job_(std::move(job)), ticket_(std::move(ticket)), heartbeat_(heartbeat), last_write_(Clock::now()) {}

JobStream::~JobStream() { set_wake(nullptr); }

void JobStream::set_wake(std::function<void()> wake) {
    for (SubRequest& s : job_->subs) {
        if (s.handle) s.handle->set_notify(wake);
    }
}

bool JobStream::pump(std::string* out, bool aborting) {
    Job& job = *job_;
    if (!started_) {
        started_ = true;
        if (job.stream) *out += job.stream_start();
    }
    if (aborting && !aborted_for_shutdown_) {
        job.abort_all();
        aborted_for_shutdown_ = true;
    }
    for (SubRequest& sub : job.subs) {
        if (sub.finished()) continue;
        engine::RequestOutput o;
        while (!sub.finished() && sub.handle->next(&o, std::chrono::milliseconds(0)))
            *out += job.apply(sub, o);
        if (!sub.finished() && sub.handle->done()) {
            // The engine ended the request without a finish for some choice (it should not): close them.
            for (ChoiceState& c : sub.choices) {
                if (c.finish) continue;
                OutputDelta f = c.proc->finish();
                c.finish = "abort";
                if (job.stream) {
                    *out += job.stream_delta(c, f, true);
                } else {
                    c.content += f.content;
                    c.reasoning += f.reasoning;
                }
            }
        }
    }
    const Clock::time_point now = Clock::now();
    if (job.finished()) {
        job.record_finish(job.engine_error.empty() ? *job.subs[0].choices[0].finish : "error");
        if (!job.engine_error.empty()) {
            // The status line (200) may be out already (heartbeats): the error travels in the body, as
            // OpenAI's error object, so that a client never takes a failed generation for an answer.
            const std::string e =
                ApiError{500, "server_error", job.engine_error, std::nullopt, "engine_error"}.to_json().dump(
                    -1, ' ', false, nlohmann::json::error_handler_t::replace);
            *out += job.stream ? "data: " + e + "\n\ndata: [DONE]\n\n" : e;
            return true;
        }
        *out += job.stream ? job.stream_end() : job.full_response();
        return true;
    }
    // SSE comment lines are ignored by clients; whitespace before a JSON body is allowed by JSON. The
    // second write after the peer closed fails, which is how a silent disconnect is seen.
    if (out->empty() && now - last_write_ >= heartbeat_) *out += job.stream ? ": ping\n\n" : " ";
    if (!out->empty()) last_write_ = now;
    return false;
}

void JobStream::cancel() { job_->abort_all(); }

void init_job(Job& job, const HttpRequest& req, HttpResponse& res, const char* prefix,
              const GenerationParams& p, const std::shared_ptr<VllmMetrics>& metrics,
              const RoutesConfig& config, Clock::time_point arrival, int64_t prompt_tokens,
              const std::string& prompt_log) {
    const std::string header_name(kRequestIdHeader);
    std::optional<std::string> header;
    if (req.has_header(header_name.c_str())) header = req.get_header_value(header_name.c_str());
    job.request_id = choose_request_id(header);
    res.set_header(header_name.c_str(), job.request_id);
    job.id = prefix + job.request_id;
    job.max_tokens = p.max_tokens.value_or(0);
    job.n = p.sampling.n;
    job.arrival = arrival;
    job.log_requests = config.log_requests;
    if (metrics) {
        job.metrics = metrics;
        job.recorder.emplace(*metrics, arrival);
    }
    if (config.log_requests) {
        json params = {{"n", p.sampling.n},
                       {"temperature", p.sampling.temperature},
                       {"top_p", p.sampling.top_p},
                       {"top_k", p.sampling.top_k},
                       {"max_tokens", p.max_tokens ? json(*p.max_tokens) : json(nullptr)},
                       {"stop", p.stop},
                       {"seed", p.sampling.seed ? json(*p.sampling.seed) : json(nullptr)}};
        spdlog::info("{}", format_request_received(job.request_id, prompt_log, prompt_tokens, to_text(params),
                                                   config.max_log_len));
    }
}

void start_response(HttpResponse& res, std::shared_ptr<Job> job, HttpServer::Ticket ticket,
                    std::chrono::milliseconds heartbeat) {
    if (job->stream) {
        res.set_header("Cache-Control", "no-cache");
        res.set_header("X-Accel-Buffering", "no");
    }
    res.status = 200;
    res.content_type = job->stream ? "text/event-stream" : "application/json";
    res.stream = std::make_shared<JobStream>(std::move(job), std::move(ticket), heartbeat);
}

}  // namespace volt::server
