#include "engine/engine_core.h"

#include <algorithm>
#include <limits>
#include <string>

#include "core/check.h"
#include "ops/sample.h"

namespace volt::engine {
namespace {
constexpr int64_t kScriptedBlocks = 4096;  // per group when the executor's blocks cost nothing

std::string str(int64_t v) { return std::to_string(v); }
}  // namespace

Result<KvPlan> plan_kv_cache(const EngineConfig& c, const Executor& ex) {
    if (c.block_size <= 0 || c.max_num_seqs <= 0 || c.max_num_batched_tokens <= 0 ||
        c.max_queued_requests <= 0)
        return invalid_argument(
            "block_size, max_num_seqs, max_num_batched_tokens and max_queued_requests must be > 0");
    if (c.max_model_len < 0) return invalid_argument("max_model_len must be >= 0 (0: auto)");
    const ExecutorInfo info = ex.info();
    const int64_t bs = c.block_size, w = info.sliding_window;
    const bool* has = info.has_group;
    // Blocks one chunk of max_num_batched_tokens can span in the sliding group (window before it included).
    const int64_t chunk_blocks =
        has[1] ? (std::max<int64_t>(w, 1) - 1 + c.max_num_batched_tokens - 1) / bs + 2 : 0;
    KvPlan plan;
    if (c.num_kv_blocks_override > 0) {
        for (int g = 0; g < kNumKvGroups; ++g) plan.num_blocks[g] = has[g] ? c.num_kv_blocks_override : 0;
    } else {
        const int64_t bpb[2] = {has[0] ? ex.bytes_per_block(bs, 0) : 0,
                                has[1] ? ex.bytes_per_block(bs, 1) : 0};
        const int64_t budget = c.kv_cache_memory_bytes;
        if (bpb[0] + bpb[1] == 0) {
            for (int g = 0; g < kNumKvGroups; ++g) plan.num_blocks[g] = has[g] ? kScriptedBlocks : 0;
        } else if (has[0] && has[1]) {
            // The sliding group needs only about window / block_size blocks per running sequence; the
            // rest of the budget goes to the full-attention group.
            const int64_t need = c.max_num_seqs * ((w - 1) / bs + 2) + chunk_blocks;
            plan.num_blocks[1] = std::min(need, budget / 2 / bpb[1]);
            plan.num_blocks[0] = (budget - plan.num_blocks[1] * bpb[1]) / bpb[0];
        } else {
            const int g = has[0] ? 0 : 1;
            plan.num_blocks[g] = budget / bpb[g];
        }
        // Never more full-attention blocks than max_num_seqs sequences of the longest length can use
        // (an explicit --max-model-len, else the model's limit): a small model or a short
        // --max-model-len then allocates what it needs, not the whole budget.
        const int64_t longest = c.max_model_len > 0 ? c.max_model_len : info.max_position_embeddings;
        if (has[0] && longest > 0)
            plan.num_blocks[0] = std::min(plan.num_blocks[0], c.max_num_seqs * ((longest + bs - 1) / bs));
    }
    if (has[0] && plan.num_blocks[0] <= 0)
        return invalid_argument("kv_cache_memory_bytes " + str(c.kv_cache_memory_bytes) +
                                " holds no full-attention KV block of " + str(ex.bytes_per_block(bs, 0)) +
                                " bytes");
    if (has[1] && plan.num_blocks[1] < chunk_blocks)
        return out_of_range("the sliding-window KV group has " + str(plan.num_blocks[1]) +
                            " blocks but one chunk of max_num_batched_tokens " +
                            str(c.max_num_batched_tokens) + " with window " + str(w) + " needs " +
                            str(chunk_blocks));
    // The pools must fit in what the executor's device has free (host memory for the CPU, whose pools
    // are calloc'd and cost nothing until written, so only a budget past the machine's memory fails).
    const ExecutorMemory mem = ex.memory();
    int64_t pool_bytes = 0;
    for (int g = 0; g < kNumKvGroups; ++g)
        pool_bytes += has[g] ? plan.num_blocks[g] * ex.bytes_per_block(bs, g) : 0;
    if (mem.total_bytes > 0 && pool_bytes > mem.free_bytes)
        return resource_exhausted("the KV cache needs " + str(pool_bytes) + " bytes but the device has " +
                                  str(mem.free_bytes) + " free of " + str(mem.total_bytes) +
                                  ": lower --kv-cache-memory-bytes, --max-model-len or --max-num-seqs");
    // Preemption mode and the host swap pools.
    if (c.swap_space_bytes < 0)
        return invalid_argument("swap_space " + str(c.swap_space_bytes) +
                                " bytes must be >= 0 (--swap-space)");
    if (c.preemption_mode == PreemptionMode::kSwap) {
        if (c.swap_space_bytes == 0)
            return invalid_argument(
                "--preemption-mode swap needs host memory for the swapped blocks: --swap-space is 0");
        if (!info.can_swap)
            return invalid_argument("--preemption-mode swap: this executor cannot swap KV blocks");
    }
    plan.swap = c.preemption_mode == PreemptionMode::kSwap ||
                (c.preemption_mode == PreemptionMode::kAuto && info.can_swap && !info.kv_in_host_memory &&
                 c.swap_space_bytes > 0);
    if (plan.swap) {
        for (int g = 0; g < kNumKvGroups; ++g) {
            const int64_t bpb = has[g] ? ex.bytes_per_block(bs, g) : 0;
            if (bpb == 0 || pool_bytes == 0) continue;
            plan.num_host_blocks[g] = static_cast<int64_t>(static_cast<__int128>(c.swap_space_bytes) *
                                                           plan.num_blocks[g] / pool_bytes);
            if (plan.num_host_blocks[g] == 0)
                return invalid_argument(
                    "--swap-space " + str(c.swap_space_bytes) + " bytes holds no swapped block of KV group " +
                    str(g) + " (" + str(bpb) + " bytes each); raise it or use --preemption-mode recompute");
        }
    }
    plan.pool_max_len = has[0] ? plan.num_blocks[0] * bs : std::numeric_limits<int64_t>::max();
    const int64_t model_cap =
        info.max_position_embeddings > 0 ? info.max_position_embeddings : std::numeric_limits<int64_t>::max();
    if (c.max_model_len == 0) {
        plan.max_model_len = std::min(model_cap, plan.pool_max_len);
    } else {
        if (c.max_model_len > model_cap)
            return invalid_argument("max_model_len " + str(c.max_model_len) + " is over the model's " +
                                    "max_position_embeddings " + str(model_cap));
        if (c.max_model_len > plan.pool_max_len)
            return out_of_range("max_model_len " + str(c.max_model_len) +
                                " does not fit in the KV cache: one " + "sequence can hold at most " +
                                str(plan.pool_max_len) + " tokens (" + str(plan.num_blocks[0]) +
                                " blocks of " + str(bs) + ")");
        plan.max_model_len = c.max_model_len;
    }
    return plan;
}

Result<std::unique_ptr<EngineCore>> EngineCore::create(EngineConfig config, Executor* executor) {
    VOLT_ASSIGN_OR_RETURN(KvPlan plan, plan_kv_cache(config, *executor));
    ExecutorInfo info = executor->info();
    if (config.vocab_size_real <= 0 || config.vocab_size_real > info.vocab_size)
        config.vocab_size_real = static_cast<int32_t>(info.vocab_size);
    if (config.eos_token_ids.empty()) config.eos_token_ids = info.eos_token_ids;
    CacheConfig cache;
    cache.block_size = config.block_size;
    for (int g = 0; g < kNumKvGroups; ++g) {
        cache.num_blocks[g] = plan.num_blocks[g];
        cache.num_host_blocks[g] = plan.num_host_blocks[g];
    }
    cache.max_num_seqs = config.max_num_seqs;
    cache.max_num_batched_tokens = config.max_num_batched_tokens;
    cache.max_model_len = plan.max_model_len;
    VOLT_RETURN_IF_ERROR(executor->init_cache(cache));
    return std::unique_ptr<EngineCore>(new EngineCore(std::move(config), plan, executor, info));
}

EngineCore::EngineCore(EngineConfig config, KvPlan plan, Executor* executor, const ExecutorInfo& info)
    : config_(std::move(config)),
      plan_(plan),
      executor_(executor),
      info_(info),
      max_in_flight_(static_cast<size_t>(std::max(1, executor->max_in_flight()))),
      blocks_(config_.block_size, plan_.num_blocks, info.sliding_window, info.has_group,
              plan_.num_host_blocks),
      scheduler_({config_.max_num_seqs, config_.max_num_batched_tokens, plan_.max_model_len,
                  config_.long_prefill_token_threshold < 0 ? 0
                  : config_.long_prefill_token_threshold == 0
                      ? std::max<int64_t>(1, config_.max_num_batched_tokens / 4)
                      : config_.long_prefill_token_threshold,
                  config_.max_num_partial_prefills, plan_.swap},
                 &blocks_) {
    stats_.kv_blocks_total[0] = plan_.num_blocks[0];
    stats_.kv_blocks_total[1] = plan_.num_blocks[1];
}

Status EngineCore::validate(const std::vector<int32_t>& prompt, const SamplingParams& p) const {
    if (prompt.empty()) return invalid_argument("prompt is empty");
    for (size_t i = 0; i < prompt.size(); ++i)
        if (prompt[i] < 0 || prompt[i] >= config_.vocab_size_real)
            return invalid_argument("prompt token " + str(static_cast<int64_t>(i)) + " = " + str(prompt[i]) +
                                    " is outside the vocabulary [0, " + str(config_.vocab_size_real) + ")");
    VOLT_RETURN_IF_ERROR(validate_sampling_params(p, config_.vocab_size_real));
    if (p.n > config_.max_num_seqs)
        return invalid_argument("n = " + str(p.n) + " is over max_num_seqs " + str(config_.max_num_seqs));
    // Compared without forming the sum, which could overflow for a huge max_tokens.
    const auto num_prompt = static_cast<int64_t>(prompt.size());
    const int64_t max_tokens = p.max_tokens;
    if (num_prompt > plan_.max_model_len || max_tokens > plan_.max_model_len - num_prompt) {
        const bool sum_fits = max_tokens <= std::numeric_limits<int64_t>::max() - num_prompt;
        return out_of_range("prompt (" + str(num_prompt) + " tokens) + max_tokens (" + str(max_tokens) + ")" +
                            (sum_fits ? " = " + str(num_prompt + max_tokens) : std::string()) +
                            " is over max_model_len " + str(plan_.max_model_len));
    }
    return Status::ok();
}

void EngineCore::add_request(std::shared_ptr<RequestHandle> handle, std::vector<int32_t> prompt,
                             SamplingParams params, uint64_t seed, int64_t group) {
    auto r = std::make_unique<Request>();
    r->index = handle->id();
    // Groups of their own get ids that no client group uses (client groups are >= 0).
    r->group = group >= 0 ? group : -1 - r->index;
    r->handle = std::move(handle);
    r->seed = seed;
    r->prompt = std::make_shared<const std::vector<int32_t>>(std::move(prompt));
    r->params = std::move(params);
    auto s = std::make_unique<Sequence>();
    s->id = next_seq_++;
    s->req = r.get();
    s->pending_forks = r->params.n - 1;
    r->seqs.push_back(s.get());
    scheduler_.add_waiting(s.get());
    seqs_[s->id] = std::move(s);
    requests_[r->index] = std::move(r);
}

void EngineCore::abort_request(Request* r, FinishReason reason, const std::string& error) {
    for (Sequence* s : r->seqs) {
        scheduler_.remove(s, &pending_updates_);
        for (int32_t c = s->choice; c <= s->choice + s->pending_forks; ++c) {
            RequestOutput d;
            d.choice = c;
            d.finish = reason;
            d.error = error;
            r->handle->push(std::move(d));
        }
        seqs_.erase(s->id);
    }
    requests_.erase(r->index);
}

void EngineCore::abort_all(FinishReason reason, const std::string& error) {
    while (!requests_.empty()) abort_request(requests_.begin()->second.get(), reason, error);
    // The steps in flight may still read the freed blocks: wait for them (their rows name no live
    // sequence now). A failing executor's errors change nothing here: everything is aborted already.
    while (!in_flight_.empty()) (void)collect_step();
    dead_.clear();
}

void EngineCore::finish_seq(Sequence* s) {
    scheduler_.remove(s, &pending_updates_);
    Request* r = s->req;
    r->seqs.erase(std::find(r->seqs.begin(), r->seqs.end(), s));
    ++r->num_finished;
    dead_.push_back(s->id);
}

void EngineCore::append_token(Sequence* s, int32_t token, TokenLogprob* lp, bool has_lp) {
    Request* r = s->req;
    const SamplingParams& p = r->params;
    ++stats_.generated_tokens;
    auto has = [token](const std::vector<int32_t>& v) {
        return std::find(v.begin(), v.end(), token) != v.end();
    };
    RequestOutput d;
    d.choice = s->choice;
    if (s->choice == 0 && !r->first_delta_sent) {
        if (p.prompt_logprobs >= 0) d.prompt_logprobs = std::move(r->prompt_logprobs);
        r->first_delta_sent = true;
    }
    if (has(p.stop_token_ids) || (!p.ignore_eos && has(config_.eos_token_ids))) {
        d.finish = FinishReason::kStop;
        d.stop_token = token;
    } else {
        s->output.push_back(token);
        d.tokens.push_back(token);
        if (has_lp) d.logprobs.push_back(std::move(*lp));
        if (static_cast<int64_t>(s->output.size()) >= p.max_tokens || s->num_tokens() >= plan_.max_model_len)
            d.finish = FinishReason::kLength;
    }
    const bool finished = d.finish != FinishReason::kNone;
    r->handle->push(std::move(d));
    if (finished) finish_seq(s);
}

void EngineCore::build_batch(const std::vector<ScheduledSeq>& sched) {
    StepBatch& b = batch_;
    const int64_t bs = config_.block_size;
    b.num_seqs = static_cast<int64_t>(sched.size());
    b.vocab_size_real = config_.vocab_size_real;
    for (size_t i = 0; i < sched.size(); ++i) {
        Sequence* s = sched[i].seq;
        const Request* r = s->req;
        const int64_t c = s->num_computed, q = sched[i].num_new;
        const auto start = static_cast<int32_t>(b.token_ids.size());
        for (int64_t p = c; p < c + q; ++p) {
            if (p < s->num_tokens()) {
                b.token_ids.push_back(s->token_at(p));
            } else {  // the pending token, drawn by the previous step (Scheduler::ready_tokens)
                VOLT_CHECK(p == s->num_tokens() && s->num_pending == 1) << "sequence " << s->id;
                b.deferred.push_back({static_cast<int32_t>(b.token_ids.size()), s->slot});
                b.token_ids.push_back(-1);
            }
            b.positions.push_back(static_cast<int32_t>(p));
            for (int g = 0; g < kNumKvGroups; ++g)
                b.slot_mapping[g].push_back(blocks_.has_group(g) ? s->blocks.table[g][p / bs] * bs + p % bs
                                                                 : -1);
        }
        b.query_start_loc.push_back(static_cast<int32_t>(b.token_ids.size()));
        b.context_lens.push_back(static_cast<int32_t>(c + q));
        b.seq_slots.push_back(s->slot);
        b.request_index.push_back(r->index);
        b.sampling.push_back({&r->params, r->prompt.get(), &s->output, s->num_pending > 0});
        const auto seq = static_cast<int32_t>(i);
        if (r->params.prompt_logprobs >= 0) {
            // Rows asked before (by a step still in flight, or before a preemption) are not asked again.
            const int64_t lo = std::max<int64_t>(c, s->req->prompt_logprobs_asked);
            const int64_t hi = std::min<int64_t>(c + q, s->num_prompt() - 1);
            s->req->prompt_logprobs_asked = std::max(s->req->prompt_logprobs_asked, hi);
            for (int64_t p = lo; p < hi; ++p) {
                LogitsRow row;
                row.row = start + static_cast<int32_t>(p - c);
                row.seq = seq;
                row.target = (*r->prompt)[p + 1];
                row.num_logprobs = r->params.prompt_logprobs;
                b.logits_rows.push_back(row);
            }
        }
        if (c + q == s->num_tokens_with_pending()) {
            for (int32_t k = 0; k <= s->pending_forks; ++k) {
                LogitsRow row;
                row.row = start + static_cast<int32_t>(q - 1);
                row.seq = seq;
                row.seed = r->seed + static_cast<uint64_t>(s->choice + k);
                row.output_index = static_cast<int64_t>(s->output.size()) + s->num_pending;
                row.num_logprobs = r->params.logprobs;
                // The next step may decode this draw before it is collected (a sequence with choices
                // left to fork never is: its forks happen at collect).
                row.feeds_slot = max_in_flight_ > 1 && s->pending_forks == 0;
                b.logits_rows.push_back(row);
            }
        }
    }
    b.num_tokens = static_cast<int64_t>(b.token_ids.size());
}

Result<bool> EngineCore::step() {
    std::vector<Request*> aborted;
    for (auto& [id, r] : requests_)
        if (r->handle->aborted()) aborted.push_back(r.get());
    for (Request* r : aborted) abort_request(r);

    bool submitted = false;
    if (in_flight_.size() < max_in_flight_) {
        VOLT_ASSIGN_OR_RETURN(submitted, submit_step());
    }
    if (in_flight_.empty() || (submitted && in_flight_.size() < max_in_flight_)) {
        VOLT_CHECK(submitted || (scheduler_.running().empty() && scheduler_.waiting().empty()))
            << "sequences wait but none can be scheduled";
        return submitted;
    }
    VOLT_RETURN_IF_ERROR(collect_step());
    return true;
}

Result<bool> EngineCore::submit_step() {
    batch_.clear();
    const int64_t prev_step = in_flight_.empty() ? -1 : in_flight_.back().step;
    std::vector<ScheduledSeq> sched = scheduler_.schedule(prev_step, &pending_updates_, &batch_.copies,
                                                          &pending_swap_out_, &pending_swap_in_);
    if (sched.empty()) return false;
    batch_.table_updates.swap(pending_updates_);
    pending_updates_.clear();
    batch_.swap_out.swap(pending_swap_out_);
    pending_swap_out_.clear();
    batch_.swap_in.swap(pending_swap_in_);
    pending_swap_in_.clear();
    build_batch(sched);
    VOLT_ASSIGN_OR_RETURN(StepHandle handle, executor_->submit(batch_));
    InFlight f;
    f.handle = handle;
    f.step = next_step_++;
    f.rows = batch_.logits_rows;
    // Whatever is freed from now on may be read by this step.
    scheduler_.hold_frees(f.step);
    size_t r = 0;
    for (size_t i = 0; i < sched.size(); ++i) {
        Sequence* s = sched[i].seq;
        const int64_t c = s->num_computed, q = sched[i].num_new;
        s->num_computed += q;
        stats_.prompt_tokens += std::max<int64_t>(0, std::min(c + q, s->num_prompt()) - c);
        const size_t first = r;
        bool samples = false;
        for (; r < f.rows.size() && f.rows[r].seq == static_cast<int32_t>(i); ++r)
            samples = samples || f.rows[r].target < 0;
        if (samples) {
            ++s->num_pending;
            s->pending_step = f.step;
        }
        f.seqs.push_back({s->id, static_cast<int32_t>(r - first)});
        blocks_.free_outside_window(s->slot, &s->blocks, s->num_computed, &pending_updates_);
    }
    in_flight_.push_back(std::move(f));
    ++stats_.num_steps;
    return true;
}

Status EngineCore::collect_step() {
    const InFlight f = std::move(in_flight_.front());
    in_flight_.pop_front();
    result_.tokens.clear();
    result_.logprobs.clear();
    const Status collected = executor_->collect(f.handle, &result_);
    // The step read nothing after this: what was freed for it may be handed out again.
    scheduler_.release_frees(f.step);
    VOLT_RETURN_IF_ERROR(collected);
    VOLT_CHECK_EQ(result_.tokens.size(), f.rows.size());
    const bool have_lp = !result_.logprobs.empty();
    VOLT_CHECK(!have_lp || result_.logprobs.size() == f.rows.size()) << "logprobs per logits row";

    size_t end = 0;
    std::vector<int64_t> touched;  // request indices that drew tokens
    for (const InFlight::Seq& e : f.seqs) {
        size_t r = end;
        end += static_cast<size_t>(e.num_rows);
        auto it = seqs_.find(e.id);
        // Finished since submit (a stop applied one step late: this row is the discarded extra one) or
        // aborted: its rows are ignored.
        if (it == seqs_.end()) continue;
        Sequence* s = it->second.get();
        Request* req = s->req;
        // NaN or Inf in a row's logits (ops::kNonFiniteToken): that request fails, never with token 0.
        if (std::find(result_.tokens.begin() + static_cast<std::ptrdiff_t>(r),
                      result_.tokens.begin() + static_cast<std::ptrdiff_t>(end),
                      ops::kNonFiniteToken) != result_.tokens.begin() + static_cast<std::ptrdiff_t>(end)) {
            ++stats_.requests_failed;
            abort_request(req, FinishReason::kError,
                          "the model produced non-finite logits (NaN or Inf) at engine step " +
                              std::to_string(f.step) + " (position " + std::to_string(s->num_computed) +
                              " of the sequence); the request failed, "
                              "other requests are unaffected");
            continue;
        }
        for (; r < end && f.rows[r].target >= 0; ++r) {
            VOLT_CHECK(have_lp) << "the executor returned no logprobs for a prompt row";
            req->prompt_logprobs.push_back(std::move(result_.logprobs[r]));
        }
        if (r == end) continue;
        VOLT_CHECK(s->num_pending > 0) << "sequence " << s->id << " draws a token it did not wait for";
        if (--s->num_pending == 0) s->pending_step = -1;
        // The prompt is done: fork the other choices (they share every block), then append each draw.
        // A parent preempted while this step was in flight forks children that recompute from scratch.
        std::vector<Sequence*> takers{s};
        for (int32_t k = 1; k <= s->pending_forks; ++k) {
            auto child = std::make_unique<Sequence>();
            child->id = next_seq_++;
            child->req = req;
            child->choice = k;
            if (s->slot >= 0) {
                child->num_computed = s->num_computed;
                scheduler_.add_running(child.get());  // takes the child's seq_slot
                blocks_.fork(s->blocks, child->slot, &child->blocks, &pending_updates_);
            } else {
                scheduler_.add_waiting(child.get());
            }
            req->seqs.push_back(child.get());
            takers.push_back(child.get());
            seqs_[child->id] = std::move(child);
        }
        s->pending_forks = 0;
        VOLT_CHECK_EQ(takers.size(), end - r);
        for (size_t k = 0; k < takers.size(); ++k) {
            const size_t row = r + k;
            TokenLogprob* lp = have_lp ? &result_.logprobs[row] : nullptr;
            append_token(takers[k], result_.tokens[row], lp, have_lp && f.rows[row].num_logprobs >= 0);
        }
        touched.push_back(req->index);
    }
    // Forget finished sequences, then requests whose choices all finished.
    for (int64_t id : dead_) seqs_.erase(id);
    dead_.clear();
    for (int64_t index : touched) {
        auto it = requests_.find(index);
        if (it == requests_.end() || it->second->num_finished < it->second->params.n) continue;
        ++stats_.requests_finished;
        requests_.erase(it);
    }
    return Status::ok();
}

int64_t EngineCore::num_waiting_requests() const { return static_cast<int64_t>(scheduler_.waiting().size()); }

EngineStats EngineCore::stats() const {
    EngineStats st = stats_;
    st.num_running_seqs = static_cast<int64_t>(scheduler_.running().size());
    st.num_waiting_seqs = static_cast<int64_t>(scheduler_.waiting().size());
    st.num_preemptions = scheduler_.num_preemptions();
    st.num_swapped_preemptions = scheduler_.num_swapped_preemptions();
    st.kv_blocks_swapped_out = scheduler_.num_blocks_swapped_out();
    st.kv_blocks_swapped_in = scheduler_.num_blocks_swapped_in();
    for (int g = 0; g < kNumKvGroups; ++g)  // blocks held for steps in flight are not free yet
        st.kv_blocks_used[g] = blocks_.pool(g).num_total() - blocks_.pool(g).num_free();
    return st;
}

Status EngineCore::check_invariants() const {
    std::vector<const SeqBlocks*> all;
    for (const auto& [id, s] : seqs_) all.push_back(&s->blocks);
    VOLT_RETURN_IF_ERROR(blocks_.check(all));
    VOLT_RETURN_IF_ERROR(scheduler_.check_slots());
    const auto in_flight = static_cast<int64_t>(in_flight_.size());
    int64_t seats = scheduler_.num_held_slots();
    for (const auto& [id, s] : seqs_) {
        if (s->num_pending < 0 || s->num_pending > in_flight ||
            (s->num_pending > 0) != (s->pending_step >= 0))
            return internal_error("sequence " + str(s->id) + " has " + str(s->num_pending) +
                                  " pending tokens (pending step " + str(s->pending_step) + ") with " +
                                  str(in_flight) + " steps in flight");
    }
    for (const Sequence* s : scheduler_.waiting()) {
        if (s->blocks.swapped) continue;  // its blocks are in the host pools (BlockManager::check)
        if (!s->blocks.table[0].empty() || !s->blocks.table[1].empty() || s->num_computed != 0)
            return internal_error("waiting sequence " + str(s->id) + " holds blocks");
    }
    for (const Sequence* s : scheduler_.running())
        if (s->blocks.swapped) return internal_error("running sequence " + str(s->id) + " is swapped out");
    for (const Sequence* s : scheduler_.running()) {
        seats += 1 + s->pending_forks;
        if (s->num_computed >= s->num_tokens() && s->num_pending == 0)
            return internal_error("running sequence " + str(s->id) + " has nothing left to compute");
        // Only the last pending token is not computed yet: a sequence is scheduled with a pending token
        // only after computing every known one (a preempted one waits until its token is known).
        const int64_t computable = s->num_tokens_with_pending() - (s->num_pending > 0 ? 1 : 0);
        if (s->num_computed > computable || (s->num_pending > 0 && s->num_computed != computable))
            return internal_error("running sequence " + str(s->id) + " computed " + str(s->num_computed) +
                                  " of " + str(s->num_tokens()) + " tokens with " + str(s->num_pending) +
                                  " pending");
        if (blocks_.has_group(1) && info_.sliding_window > 0) {
            int64_t held = 0;
            for (int32_t b : s->blocks.table[1]) held += b >= 0 ? 1 : 0;
            const int64_t bound = (info_.sliding_window - 1) / config_.block_size + 2;
            if (held > bound)
                return internal_error("sequence " + str(s->id) + " holds " + str(held) +
                                      " sliding blocks between steps, over " + str(bound));
        }
    }
    // Held slots count as taken, so that the forks still to come find a slot.
    if (seats > config_.max_num_seqs)
        return internal_error("running sequences, their forks to come and held slots take " + str(seats) +
                              " seats, over max_num_seqs " + str(config_.max_num_seqs));
    if (all.size() != scheduler_.running().size() + scheduler_.waiting().size())
        return internal_error("sequences neither running nor waiting");
    return Status::ok();
}

}  // namespace volt::engine
