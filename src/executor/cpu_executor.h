// CpuExecutor: the executor seam over model::Forward on the CPU backend and the CPU sample op. Keeps
// each sequence's block tables (updated from StepBatch::table_updates), copies blocks on write, runs
// the forward pass on the rows that need logits and samples them with cpu::sample (ops/sample.h).
// Tests: tests/unit/engine/engine_test.cc.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "cpu/cpu_ops.h"
#include "executor/sync_executor.h"
#include "model/forward.h"
#include "model/kv_cache.h"
#include "ops/sample.h"

namespace volt::executor {

using engine::kNumKvGroups;

class CpuExecutor final : public SyncExecutor {
  public:
    explicit CpuExecutor(std::shared_ptr<const model::ModelWeights> weights);

    engine::ExecutorInfo info() const override;
    int64_t bytes_per_block(int64_t block_size, int group) const override;
    engine::ExecutorMemory memory() const override;
    Status init_cache(int64_t block_size, const int64_t num_blocks[kNumKvGroups],
                      int64_t max_num_seqs) override;

  protected:
    Status run(const engine::StepBatch& batch, engine::StepResult* result) override;

    model::Forward& forward() { return forward_; }

  private:
    std::shared_ptr<const model::ModelWeights> weights_;
    cpu::CpuBackend backend_;
    model::Forward forward_;
    std::unique_ptr<model::KvCache> cache_;
    std::vector<std::vector<int32_t>> tables_[kNumKvGroups];  // [slot] block table
    // Scratch reused across steps.
    std::vector<int32_t> step_tables_[kNumKvGroups], rows_;
    std::vector<float> logits_;
    std::vector<ops::SampleRow> sample_rows_;
    std::vector<std::vector<int32_t>> bias_ids_;
    std::vector<std::vector<float>> bias_values_;
    std::vector<int32_t> tokens_, top_ids_;
    std::vector<float> logprobs_, top_logprobs_;
};

}  // namespace volt::executor
