#include "engine/executor.h"

namespace volt::engine {

void StepBatch::clear() {
    num_tokens = num_seqs = 0;
    token_ids.clear();
    positions.clear();
    for (auto& s : slot_mapping) s.clear();
    query_start_loc.assign(1, 0);
    context_lens.clear();
    seq_slots.clear();
    deferred.clear();
    request_index.clear();
    swap_out.clear();
    swap_in.clear();
    table_updates.clear();
    copies.clear();
    logits_rows.clear();
    sampling.clear();
}

}  // namespace volt::engine
