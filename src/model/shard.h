// Tensor- and pipeline-parallel shards of a loaded model (DESIGN.md "Tensor parallelism", docs/parallel.md):
// rank (tp_rank, pp_rank) of a tp x pp grid gets the layers of its pipeline stage and, within them, its
// attention heads (q/k/v rows, sinks, o_proj columns: TP must divide the KV heads), its experts'
// intermediate units in whole MXFP4 blocks of 32 (ceil(blocks / tp) per rank, a shorter last rank, maybe
// none), and its rows of embed_tokens / lm_head (ceil(V / tp) ids per rank). Biases summed by an
// all-reduce (o_proj, experts' down) stay on tp rank 0 only. Row slices are views into the full model's
// memory (the mmap); column slices (o_proj, down) and strided ones (experts) are copied into the shard's
// storage. Tests: tests/unit/executor/parallel_test.cc (ParallelShards, ParallelLogits, ParallelLayers).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "model/weights.h"

namespace volt::model {

struct ParallelConfig {
    int tensor_parallel_size = 1;
    int pipeline_parallel_size = 1;
    int world_size() const { return tensor_parallel_size * pipeline_parallel_size; }
};

// kInvalidArgument with the reason when the model cannot be split so: TP < 1 or not dividing
// num_key_value_heads (whole KV heads per rank; the divisors are listed), PP < 1 or above the layer count.
Status check_parallel(const GptOssConfig& c, const ParallelConfig& p);

// [begin, end) of pipeline stage `stage` of `stages` over `count` items: the first count % stages
// stages get one more.
struct Range {
    int64_t begin = 0, end = 0;
    int64_t size() const { return end - begin; }
};
Range stage_layers(int64_t num_layers, int stage, int stages);
// The experts' intermediate units of tp rank `rank`: whole blocks of 32 units, ceil(blocks / tp) per rank,
// clipped to the intermediate size (a late rank may get none).
Range expert_units(int64_t intermediate_size, int rank, int tp);
// The vocabulary ids of tp rank `rank`: ceil(V / tp) per rank, the last shorter.
Range vocab_rows(int64_t vocab_size, int rank, int tp);

// The shard of rank (tp_rank, pp_rank). check_parallel first. kUnimplemented for dense weights in
// int8/int4 (no column slicing of packed formats yet).
Result<std::shared_ptr<const ModelWeights>> shard_weights(std::shared_ptr<const ModelWeights> full,
                                                          const ParallelConfig& p, int tp_rank, int pp_rank);

}  // namespace volt::model
