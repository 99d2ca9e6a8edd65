#include "executor/nccl_rendezvous.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "cpu/tcp_communicator.h"

namespace volt::executor {

namespace {
// A worker's place on the wire.
struct PlaceWire {
    char host[128];
    char bus_id[64];
    int32_t ordinal;
    int32_t pad;
};
// Rank 0's verdict: then `message_bytes` of text (an error) or `count` ids.
struct VerdictWire {
    int32_t code;  // StatusCode
    int32_t count;
    int32_t message_bytes;
    int32_t pad;
};
constexpr int32_t kMaxMessageBytes = 4096;
constexpr int32_t kMaxIds = 64;  // P + T ids of at most kMaxCommRanks-sized groups

void copy_text(char* dst, size_t size, const std::string& s) {
    std::memset(dst, 0, size);
    std::memcpy(dst, s.data(), std::min(s.size(), size - 1));
}
}  // namespace

Status check_distinct_gpus(const std::vector<GpuPlace>& places) {
    for (size_t i = 0; i < places.size(); ++i)
        for (size_t j = 0; j < i; ++j)
            if (places[i].host == places[j].host && places[i].bus_id == places[j].bus_id)
                return invalid_argument(
                    "ranks " + std::to_string(j) + " and " + std::to_string(i) + " would both use GPU " +
                    places[i].bus_id + " (ordinal " + std::to_string(places[j].ordinal) + " and " +
                    std::to_string(places[i].ordinal) + ") of host " + places[i].host +
                    ": NCCL refuses two ranks on one GPU (Duplicate GPU detected); run at most one process "
                    "per GPU of a host, with LOCAL_RANK (torchrun sets it) or CUDA_VISIBLE_DEVICES per "
                    "process");
    return Status::ok();
}

int nccl_id_count(const model::ParallelConfig& p) {
    const int tp = p.tensor_parallel_size, pp = p.pipeline_parallel_size;
    return (tp > 1 ? pp : 0) + (pp > 1 ? tp : 0);
}

int tp_id_index(const model::ParallelConfig& p, int i) {
    return p.tensor_parallel_size > 1 ? i / p.tensor_parallel_size : -1;
}

int pp_id_index(const model::ParallelConfig& p, int i) {
    const int tp = p.tensor_parallel_size, pp = p.pipeline_parallel_size;
    return pp > 1 ? (tp > 1 ? pp : 0) + i % tp : -1;
}

Result<std::vector<cuda::NcclUniqueId>> exchange_nccl_ids(cpu::TcpCommunicator& world, const GpuPlace& mine,
                                                          int count, const MakeNcclId& make_id) {
    static_assert(sizeof(cuda::NcclUniqueId) == 128, "nccl.h's NCCL_UNIQUE_ID_BYTES");
    VOLT_CHECK(count >= 0 && count <= kMaxIds) << count << " NCCL ids";
    const int n = world.size();
    world.begin_step(0);
    std::vector<cuda::NcclUniqueId> ids(static_cast<size_t>(count));
    if (world.rank() != 0) {
        PlaceWire w{};
        copy_text(w.host, sizeof w.host, mine.host);
        copy_text(w.bus_id, sizeof w.bus_id, mine.bus_id);
        w.ordinal = mine.ordinal;
        VOLT_RETURN_IF_ERROR(world.send(&w, sizeof w, 0));
        VerdictWire v{};
        VOLT_RETURN_IF_ERROR(world.recv(&v, sizeof v, 0));
        if (v.message_bytes < 0 || v.message_bytes > kMaxMessageBytes ||
            (v.code == 0) != (v.message_bytes == 0) || (v.code == 0 && v.count != count))
            return internal_error("a malformed NCCL id message from rank 0 (code " + std::to_string(v.code) +
                                  ", " + std::to_string(v.count) + " ids where " + std::to_string(count) +
                                  " were expected, " + std::to_string(v.message_bytes) + " bytes of text)");
        if (v.code != 0) {
            std::string text(static_cast<size_t>(v.message_bytes), '\0');
            VOLT_RETURN_IF_ERROR(world.recv(text.data(), v.message_bytes, 0));
            return Status(static_cast<StatusCode>(v.code), "rank 0: " + text);
        }
        if (count > 0) VOLT_RETURN_IF_ERROR(world.recv(ids.data(), int64_t{count} * 128, 0));
        return ids;
    }
    std::vector<GpuPlace> places(static_cast<size_t>(n));
    places[0] = mine;
    for (int r = 1; r < n; ++r) {
        PlaceWire w{};
        VOLT_RETURN_IF_ERROR(world.recv(&w, sizeof w, r));
        w.host[sizeof w.host - 1] = 0;
        w.bus_id[sizeof w.bus_id - 1] = 0;
        places[r] = {w.host, w.bus_id, w.ordinal};
    }
    Status verdict = check_distinct_gpus(places);
    for (int i = 0; i < count && verdict.is_ok(); ++i) {
        Result<cuda::NcclUniqueId> id = make_id();
        if (id.is_ok())
            ids[static_cast<size_t>(i)] = *id;
        else
            verdict = id.status();
    }
    const std::string text =
        verdict.message().empty() ? std::string("failed") : verdict.message().substr(0, kMaxMessageBytes);
    for (int r = 1; r < n; ++r) {
        const VerdictWire v{static_cast<int32_t>(verdict.code()), verdict.is_ok() ? count : 0,
                            verdict.is_ok() ? 0 : static_cast<int32_t>(text.size()), 0};
        VOLT_RETURN_IF_ERROR(world.send(&v, sizeof v, r));
        if (!verdict.is_ok()) {
            if (!text.empty())
                VOLT_RETURN_IF_ERROR(world.send(text.data(), static_cast<int64_t>(text.size()), r));
        } else if (count > 0) {
            VOLT_RETURN_IF_ERROR(world.send(ids.data(), int64_t{count} * 128, r));
        }
    }
    if (!verdict.is_ok()) return verdict;
    return ids;
}

}  // namespace volt::executor
