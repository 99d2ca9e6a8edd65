// BackendExecutor: the executor seam over model::Forward on any ops::Backend (the CPU, a GPU): the
// shared StepBuilder turns each StepBatch into the forward pass's inputs (one StepUpload), blocks are
// copied on write, the forward pass runs the rows that need logits and the sample op draws from each
// chunk of logits in backend memory; only the sampled ids and the logprobs asked for come back. The
// sample rows and their id lists are staged into backend memory with one upload per chunk (a copy on
// the CPU, where backend memory is host memory), so the CPU runs exactly the GPU's path. Synchronous
// (SyncExecutor): the asynchronous CUDA executor with pinned staging and graphs is a later issue.
// Tests: tests/unit/engine/engine_test.cc (through CpuExecutor), scripts/gpu/check.sh (--device cuda).
#pragma once

#include <memory>
#include <vector>

#include "executor/step_builder.h"
#include "executor/sync_executor.h"
#include "model/forward.h"
#include "model/kv_store.h"
#include "ops/ops.h"

namespace volt::executor {

class BackendExecutor : public SyncExecutor {
  public:
    // Places `weights` on `backend`. kv_format: f32 (the reference) or f16. Errors: placement's (no
    // memory for the weights, a format the backend does not read).
    static Result<std::unique_ptr<BackendExecutor>> create(std::shared_ptr<const model::ModelWeights> weights,
                                                           std::unique_ptr<ops::Backend> backend,
                                                           ops::Format kv_format, int max_in_flight = 1);

    engine::ExecutorInfo info() const override;
    int64_t bytes_per_block(int64_t block_size, int group) const override;
    engine::ExecutorMemory memory() const override;
    Status init_cache(const engine::CacheConfig& config) override;

    // The profiling run of memory planning (vLLM's profile_run): one step of max_num_batched_tokens
    // prompt tokens of one sequence through the whole forward pass and the sample op (on a temporary KV
    // cache just large enough, freed after), so that the step workspace and every scratch buffer the
    // backend grows on first use reach their peak size now. memory() then reports what is left for the
    // KV pools. The workspace is kept for init_cache. Errors: out of memory, the step's.
    Status profile(const engine::CacheConfig& config);

    model::Forward& forward() { return *forward_; }
    ops::Backend& backend() { return *backend_; }

  protected:
    BackendExecutor(std::shared_ptr<const model::ModelWeights> weights, std::unique_ptr<ops::Backend> backend,
                    ops::Format kv_format, int max_in_flight);
    Status place();
    Status run(const engine::StepBatch& batch, engine::StepResult* result) override;

  private:
    // Packs rows [first, first + count) of the sample op into backend memory, runs it, and copies the
    // outputs into tokens_ / logprobs_ / top_ids_ / top_logprobs_ at row `first`.
    Status sample_chunk(const std::vector<ops::SampleRow>& rows, int64_t first, int64_t vocab_size,
                        int64_t vocab_size_real);

    std::shared_ptr<const model::ModelWeights> weights_;
    ops::Format kv_format_;
    std::unique_ptr<ops::Backend> backend_;
    std::unique_ptr<model::Forward> forward_;
    model::KvStore cache_;
    model::Workspace ws_;
    model::StepUpload upload_;
    StepBuilder builder_;
    std::vector<int32_t> copy_src_, copy_dst_, tokens_, top_ids_;
    std::vector<ops::KvLayer> group_layers_;
    std::vector<float> logprobs_, top_logprobs_;
    ops::Buffer sample_device_;
    std::vector<uint8_t> sample_staging_, sample_out_;
};

}  // namespace volt::executor
