// CpuExecutor: the executor seam over model::Forward on the CPU backend: the shared StepBuilder turns
// each StepBatch into the forward pass's inputs, blocks are copied on write, the forward pass runs the
// rows that need logits and the sample op draws from each chunk of logits as it comes. Synchronous
// (SyncExecutor). Tests: tests/unit/engine/engine_test.cc.
#pragma once

#include <memory>
#include <vector>

#include "cpu/cpu_ops.h"
#include "executor/step_builder.h"
#include "executor/sync_executor.h"
#include "model/forward.h"
#include "model/kv_store.h"

namespace volt::executor {

class CpuExecutor final : public SyncExecutor {
  public:
    // kv_format: f32 (default, the reference) or f16.
    explicit CpuExecutor(std::shared_ptr<const model::ModelWeights> weights,
                         ops::Format kv_format = ops::Format::kF32, int max_in_flight = 1);

    engine::ExecutorInfo info() const override;
    int64_t bytes_per_block(int64_t block_size, int group) const override;
    engine::ExecutorMemory memory() const override;
    Status init_cache(const engine::CacheConfig& config) override;

  protected:
    Status run(const engine::StepBatch& batch, engine::StepResult* result) override;

  private:
    std::shared_ptr<const model::ModelWeights> weights_;
    ops::Format kv_format_;
    cpu::CpuBackend backend_;
    std::unique_ptr<model::Forward> forward_;
    model::KvStore cache_;
    model::Workspace ws_;
    model::StepUpload upload_;
    StepBuilder builder_;
    std::vector<int32_t> copy_src_, copy_dst_, tokens_, top_ids_;
    std::vector<ops::KvLayer> group_layers_;
    std::vector<float> logprobs_, top_logprobs_;
};

}  // namespace volt::executor
