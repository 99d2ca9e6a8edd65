// HarmonyEncoding: control-token lookup by name and pieces -> ids; see harmony_encoding.h.
// Tests: tests/unit/tokenizer/harmony_encoding_test.cc.
#include "tokenizer/harmony_encoding.h"

#include <utility>

namespace volt::tokenizer {
namespace {

Result<int32_t> special_id(const Tokenizer& tokenizer, std::string_view name) {
    std::optional<int32_t> id = tokenizer.token_to_id(name);
    if (!id || !tokenizer.is_special(*id)) {
        return not_found("harmony: the tokenizer has no special token " + std::string(name));
    }
    return *id;
}

}  // namespace

Result<std::shared_ptr<const HarmonyEncoding>> HarmonyEncoding::create(
    std::shared_ptr<const Tokenizer> tokenizer) {
    if (tokenizer == nullptr) return invalid_argument("harmony: no tokenizer");
    std::shared_ptr<HarmonyEncoding> enc(new HarmonyEncoding());
    VOLT_ASSIGN_OR_RETURN(enc->ids_.start, special_id(*tokenizer, "<|start|>"));
    VOLT_ASSIGN_OR_RETURN(enc->ids_.end, special_id(*tokenizer, "<|end|>"));
    VOLT_ASSIGN_OR_RETURN(enc->ids_.message, special_id(*tokenizer, "<|message|>"));
    VOLT_ASSIGN_OR_RETURN(enc->ids_.channel, special_id(*tokenizer, "<|channel|>"));
    VOLT_ASSIGN_OR_RETURN(enc->ids_.constrain, special_id(*tokenizer, "<|constrain|>"));
    VOLT_ASSIGN_OR_RETURN(enc->ids_.return_, special_id(*tokenizer, "<|return|>"));
    VOLT_ASSIGN_OR_RETURN(enc->ids_.call, special_id(*tokenizer, "<|call|>"));
    if (auto eot = special_id(*tokenizer, "<|endoftext|>"); eot.is_ok()) enc->ids_.endoftext = *eot;
    enc->tokenizer_ = std::move(tokenizer);
    return std::shared_ptr<const HarmonyEncoding>(std::move(enc));
}

Result<std::vector<int32_t>> HarmonyEncoding::encode_pieces(std::span<const HarmonyPiece> pieces) const {
    std::vector<int32_t> ids;
    for (const HarmonyPiece& piece : pieces) {
        if (piece.special) {
            VOLT_ASSIGN_OR_RETURN(int32_t id, special_id(*tokenizer_, piece.text));
            ids.push_back(id);
        } else {
            VOLT_ASSIGN_OR_RETURN(std::vector<int32_t> text_ids,
                                  tokenizer_->encode(piece.text, SpecialTokens::kIgnore));
            ids.insert(ids.end(), text_ids.begin(), text_ids.end());
        }
    }
    return ids;
}

Result<HarmonyPrompt> HarmonyEncoding::render_for_completion(const HarmonyConversation& conversation,
                                                             const CompletionOptions& options) const {
    VOLT_ASSIGN_OR_RETURN(std::vector<HarmonyPiece> pieces, render_completion_pieces(conversation, options));
    HarmonyPrompt prompt;
    VOLT_ASSIGN_OR_RETURN(prompt.ids, encode_pieces(pieces));
    std::vector<HarmonyPiece> prefill = completion_prefill_pieces(options);
    VOLT_ASSIGN_OR_RETURN(prompt.parser_prefix, encode_pieces(prefill));
    return prompt;
}

}  // namespace volt::tokenizer
