// CpuExecutor: the BackendExecutor (executor/backend_executor.h) on the CPU backend, the reference the
// engine tests run. Tests: tests/unit/engine/engine_test.cc.
#pragma once

#include <memory>
#include <vector>

#include "cpu/cpu_ops.h"  // (users of CpuExecutor often run the CPU ops directly too)
#include "executor/backend_executor.h"

namespace volt::executor {

class CpuExecutor final : public BackendExecutor {
  public:
    // kv_format: f32 (default, the reference) or f16. experts_on_host ([num_hidden_layers] or empty):
    // layers whose experts op runs the fast CPU kernel (cpu::HostExpertsRunner; CPU expert offload tested
    // on the CPU). The CPU places by reference: never fails.
    explicit CpuExecutor(std::shared_ptr<const model::ModelWeights> weights,
                         ops::Format kv_format = ops::Format::kF32, int max_in_flight = 1,
                         const std::vector<bool>& experts_on_host = {});
};

}  // namespace volt::executor
