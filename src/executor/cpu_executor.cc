#include "executor/cpu_executor.h"

#include "core/check.h"
#include "cpu/cpu_ops.h"

namespace volt::executor {

CpuExecutor::CpuExecutor(std::shared_ptr<const model::ModelWeights> weights, ops::Format kv_format,
                         int max_in_flight, const std::vector<bool>& experts_on_host)
    : BackendExecutor(std::move(weights), kv_format, max_in_flight) {
    const Status st = make_ranks(
        {}, [](int) { return Result<std::unique_ptr<ops::Backend>>(std::make_unique<cpu::CpuBackend>()); },
        {}, thread_communicators, experts_on_host);
    VOLT_CHECK(st.is_ok()) << st.to_string();  // the CPU places by reference
}

}  // namespace volt::executor
