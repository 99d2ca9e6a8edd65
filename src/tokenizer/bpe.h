// Byte-pair encoding of one pre-token (Hugging Face `BPE` model semantics): start from one token per
// byte, repeatedly apply the merge of lowest rank (leftmost on ties) until none applies. With
// `ignore_merges` a pre-token that is itself in the vocabulary is one id. Tables: open addressing, bytes
// -> id and (left, right) -> (rank, merged id). Short pieces: linear scan; long ones: binary heap,
// O(n log n), so a 1M-byte piece stays near-linear (BUG-31). Source: huggingface/tokenizers
// src/models/bpe/word.rs (merge_all). Tests: tests/unit/tokenizer/tokenizer_bpe_test.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "tokenizer/pretokenizer.h"

namespace volt::tokenizer {

class BpeModel {
  public:
    // `id_bytes[id]`: the raw bytes of token `id` (empty for an id the vocabulary lacks). `merges`: pairs
    // of token ids in rank order (rank 0 first). kDataLoss (naming `source`) when two ids share bytes, a
    // merge's result is not in the vocabulary, or a pair appears twice.
    static Result<std::unique_ptr<BpeModel>> create(std::vector<std::string> id_bytes,
                                                    const std::vector<std::pair<int32_t, int32_t>>& merges,
                                                    bool ignore_merges, const std::string& source);

    // Appends the ids of one pre-token (raw bytes). Bytes without a single-byte token are dropped (HF's
    // behaviour with no unk token and no byte fallback; never the case for a complete byte-level vocab).
    void encode_piece(std::string_view piece, std::vector<int32_t>* out, EncodeStats* stats) const;

    std::optional<int32_t> find(std::string_view bytes) const;
    // Raw bytes of `id`, empty when out of range or absent.
    std::string_view bytes(int32_t id) const;
    // Number of ids covered (max id + 1).
    int32_t size() const { return static_cast<int32_t>(offset_.size()) - 1; }
    bool has(int32_t id) const { return id >= 0 && id < size() && present_[id]; }

  private:
    static constexpr uint64_t kNoMerge = ~0ull;
    // (rank << 32 | merged id) of the pair, or kNoMerge.
    uint64_t merge_of(int32_t left, int32_t right) const;
    void bpe_linear(std::string_view piece, std::vector<int32_t>* out, EncodeStats* stats) const;
    void bpe_heap(std::string_view piece, std::vector<int32_t>* out, EncodeStats* stats) const;

    std::string blob_;                  // all token bytes, id order
    std::vector<uint32_t> offset_;      // [size + 1]: token id spans blob_[offset_[id], offset_[id + 1])
    std::vector<uint8_t> present_;      // [size]
    std::vector<int32_t> vocab_slots_;  // open addressing over ids, -1 empty; size a power of two
    uint64_t vocab_mask_ = 0;
    std::vector<uint64_t> merge_keys_;  // left << 32 | right, kNoMerge empty
    std::vector<uint64_t> merge_vals_;  // rank << 32 | merged id
    int merge_shift_ = 64;
    int32_t byte_id_[256];
    bool ignore_merges_ = true;
};

}  // namespace volt::tokenizer
