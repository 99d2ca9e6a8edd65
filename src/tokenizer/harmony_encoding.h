// HarmonyEncoding: the harmony control tokens of a tokenizer, looked up by name (never by fixed id, so
// any tokenizer.json that defines them works), and the step from renderer pieces to token ids: special
// pieces -> their id, text pieces -> encode(kIgnore) one by one, as openai/harmony does (spec §5.2).
// Tests: tests/unit/tokenizer/harmony_encoding_test.cc (ids of the goldens, BUG-03 ids).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/harmony_renderer.h"
#include "tokenizer/tokenizer.h"

namespace volt::tokenizer {

// Ids of the harmony control tokens (o200k_harmony: start 200006, end 200007, message 200008,
// channel 200005, constrain 200003, return 200002, call 200012).
struct HarmonySpecialIds {
    int32_t start = -1;
    int32_t end = -1;
    int32_t message = -1;
    int32_t channel = -1;
    int32_t constrain = -1;
    int32_t return_ = -1;              // <|return|>: end of the final answer, a stop token
    int32_t call = -1;                 // <|call|>: end of a tool call, a stop token
    std::optional<int32_t> endoftext;  // <|endoftext|> when the tokenizer has it: ends a stream too
};

// A prompt ready for prefill. `parser_prefix` is the tail of `ids` that opens the model's own message
// (the forced tool-call header, else empty): feed it to HarmonyStreamParser before the generated ids.
struct HarmonyPrompt {
    std::vector<int32_t> ids;
    std::vector<int32_t> parser_prefix;
};

class HarmonyEncoding {
  public:
    // kNotFound naming the token when the tokenizer lacks one of <|start|> <|end|> <|message|>
    // <|channel|> <|constrain|> <|return|> <|call|>, or has it as an ordinary token.
    static Result<std::shared_ptr<const HarmonyEncoding>> create(std::shared_ptr<const Tokenizer> tokenizer);

    const Tokenizer& tokenizer() const { return *tokenizer_; }
    const std::shared_ptr<const Tokenizer>& tokenizer_ptr() const { return tokenizer_; }
    const HarmonySpecialIds& special_ids() const { return ids_; }

    // Sampling stops on these: {<|return|>, <|call|>} (spec §5.5; never <|end|>).
    std::vector<int32_t> stop_token_ids() const { return {ids_.return_, ids_.call}; }

    // Pieces -> ids. kNotFound for a special piece the tokenizer does not define as a special token;
    // kInvalidArgument (from encode) for text that is not valid UTF-8.
    Result<std::vector<int32_t>> encode_pieces(std::span<const HarmonyPiece> pieces) const;

    // The prompt for the next assistant turn, ending in `<|start|>assistant` (+ forced tool-call header).
    Result<HarmonyPrompt> render_for_completion(const HarmonyConversation& conversation,
                                                const CompletionOptions& options = {}) const;

  private:
    HarmonyEncoding() = default;
    std::shared_ptr<const Tokenizer> tokenizer_;
    HarmonySpecialIds ids_;
};

}  // namespace volt::tokenizer
