// Names of collectives for the order check's messages (ops/communicator.h).
#include "ops/communicator.h"

namespace volt::ops {

const char* collective_name(CollectiveKind k) {
    switch (k) {
        case CollectiveKind::kAllReduceSum:
            return "all_reduce_sum";
        case CollectiveKind::kGather:
            return "gather";
        case CollectiveKind::kSend:
            return "send";
        case CollectiveKind::kRecv:
            return "recv";
    }
    return "?";
}

std::string describe(const CollectiveTag& t) {
    return std::string(collective_name(t.kind)) + " #" + std::to_string(t.seq) + " of step " +
           std::to_string(t.step) + " (" + std::to_string(t.bytes) + " bytes)";
}

}  // namespace volt::ops
