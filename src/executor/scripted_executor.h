// ScriptedExecutor: an executor with no model that replays fixed token ids, for server and engine tests
// (`voltllm serve --executor scripted --script FILE`). Script file: JSON, either a list of lists of
// token ids, or {"outputs": [[...], ...], "end_token": 200002, "vocab_size": 201088,
// "max_position_embeddings": 131072}; an id of -1 stands for logits that were not finite (the sample
// op's kNonFiniteToken: the engine fails that request). Request i (submission order) draws outputs[i % size]:
// its k-th sampled token (every choice alike) is outputs[i % size][k], then end_token once the list is
// exhausted (default: the first EOS id; set eos/end so requests finish). Prompt rows report their target.
// Logprobs are 0 for the returned token and the top list is that token alone. KV blocks cost nothing.
// Tests: tests/unit/engine/engine_test.cc.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "executor/sync_executor.h"

namespace volt::executor {

using engine::ExecutorInfo;
using engine::kNumKvGroups;

struct ScriptedOptions {
    std::vector<std::vector<int32_t>> outputs;
    int32_t end_token = 200002;  // <|return|> of the gpt-oss tokenizer
    int64_t vocab_size = 201088;
    int64_t max_position_embeddings = 131072;
    int64_t sliding_window = 0;  // > 0: a sliding-window KV group too (block accounting only)
    std::vector<int32_t> eos_token_ids = {200002, 199999, 200012};  // <|return|>, <|endoftext|>, <|call|>
};

class ScriptedExecutor final : public SyncExecutor {
  public:
    explicit ScriptedExecutor(ScriptedOptions options);
    // Reads the script file described above. kNotFound / kInvalidArgument naming the file.
    static Result<std::unique_ptr<ScriptedExecutor>> from_file(const std::string& path);

    ExecutorInfo info() const override;
    int64_t bytes_per_block(int64_t, int) const override { return 0; }
    engine::ExecutorMemory memory() const override { return {}; }
    Status init_cache(const engine::CacheConfig& c) override {
        set_num_slots(c.max_num_seqs);
        return Status::ok();
    }

  protected:
    Status run(const engine::StepBatch& batch, engine::StepResult* result) override;

  private:
    ScriptedOptions options_;
};

}  // namespace volt::executor
