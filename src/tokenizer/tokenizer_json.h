// Reads a Hugging Face tokenizer.json in one streaming (SAX) pass: the bulk, model.vocab and
// model.merges (27 MB and 446k merges for gpt-oss), goes straight into vectors; everything else becomes
// a small JSON tree. Saves building and freeing a DOM of the whole file (about 2/3 of load time).
// Used by tokenizer.cc; covered by every tokenizer test that loads a file.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace volt::tokenizer {

struct TokenizerJson {
    nlohmann::json rest;                                 // the document without model.vocab and model.merges
    std::vector<std::pair<std::string, int64_t>> vocab;  // (spelling, id), file order
    std::vector<std::pair<std::string, std::string>> merges;  // (left, right) spellings, rank order
    bool has_vocab = false;
    bool has_merges = false;
};

// kDataLoss (naming `source` and the byte offset) for malformed JSON, a vocab value that is not an
// integer, or a merge that is neither ["a", "b"] nor "a b".
Result<TokenizerJson> parse_tokenizer_json(std::string_view text, const std::string& source);

}  // namespace volt::tokenizer
