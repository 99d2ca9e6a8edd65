// Peer access among the GPUs of a tensor-parallel group, for the one-shot all-reduce of the NCCL
// communicator (docs/parallel.md "GPU ranks"): every ordered pair must report a peer path
// (cudaDeviceCanAccessPeer), get peer access enabled (cudaDeviceEnablePeerAccess), and pass a
// write-and-verify probe (a kernel on GPU i writes a pattern into GPU j's memory and reads another from
// it; both checked on the host). Compiled, not yet run: it needs two GPUs.
#pragma once

#include <vector>

#include "core/status.h"

namespace volt::cuda {

// ok when every ordered pair of `gpus` (distinct ordinals) passes; peer access then stays enabled.
// kUnavailable naming the pair and the step that failed otherwise (the caller logs it and uses NCCL
// alone). Restores the calling thread's current device.
Status probe_peer_access(const std::vector<int>& gpus);

}  // namespace volt::cuda
