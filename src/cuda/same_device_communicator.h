// The same-device communicator (docs/parallel.md "Communicators"): tensor- and pipeline-parallel ranks
// whose buffers all live on one GPU, each rank a thread of this process with its own CudaBackend and
// stream (the GPU tests of TP / PP on one GPU; NCCL refuses two ranks on one GPU). Ranks meet at host
// barriers with the CPU communicators' watchdog and order check; the device work is ordered with CUDA
// events only (cudaStreamWaitEvent on events already recorded), so no kernel ever waits for another
// stream and nothing can deadlock on one GPU. The all-reduce runs the rank-order sum kernel
// (kernels/comm.cu): bitwise equal on every rank and to the CPU communicators. Capturable
// (ops::Communicator::capturable): with every rank's stream in one CudaBackend::capture_group the same
// calls record the graph's cross-stream edges (the executor's decode graphs at TP x PP > 1). Tests:
// tests/unit/cuda/parallel_cuda_test.cc, tests/unit/cuda/parallel_graph_test.cc.
#pragma once

#include <memory>

#include "ops/communicator.h"

namespace volt::cuda {

class SameDeviceGroupState;

// The shared state of `size` ranks on GPU `device` (an ordinal); communicator(r) is rank r's handle,
// to be attached to rank r's CudaBackend (ops::Communicator::attach: kInvalidArgument for another
// backend or another GPU) before its first collective. At most kMaxCommRanks (16) ranks.
class SameDeviceGroup {
  public:
    SameDeviceGroup(int size, int device, ops::CommunicatorOptions options = {});
    std::unique_ptr<ops::Communicator> communicator(int rank) const;
    int size() const;
    // Fails the group now (sticky): waiting and later collectives of every rank return `why`.
    void fail(const Status& why) const;

  private:
    std::shared_ptr<SameDeviceGroupState> state_;
};

}  // namespace volt::cuda
