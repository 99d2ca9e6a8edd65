// The per-choice output processor of the server: generated token ids -> text deltas. Chat: harmony
// stream parser (analysis -> reasoning, final/plain text -> content). Completions: incremental
// detokenizer. Both match stop strings on the content text only (never the reasoning), holding back
// len(longest stop) - 1 bytes while streaming, and trim the match and everything after it.
// Tests: tests/unit/server/output_processor_test.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tokenizer/detokenizer.h"
#include "tokenizer/harmony_encoding.h"
#include "tokenizer/harmony_parser.h"

namespace volt::server {

// Finds stop strings in a text stream. push() returns the text that is safe to send: everything except
// a tail that could still be the start of a stop string (at most longest - 1 bytes, cut back to a UTF-8
// character boundary). Once a stop string is found, the text before it is returned, stopped() is true
// and later input is ignored.
class StopMatcher {
  public:
    // `include_stop`: the matched stop string is part of the text returned (vLLM's
    // include_stop_str_in_output); the text after it is still dropped.
    explicit StopMatcher(std::vector<std::string> stops, bool include_stop = false);
    std::string push(std::string_view text);
    // End of the stream: the held-back tail (no stop string in it).
    std::string flush();
    bool stopped() const { return stopped_; }

  private:
    std::vector<std::string> stops_;
    bool include_stop_ = false;
    size_t hold_ = 0;  // longest stop - 1
    std::string pending_;
    bool stopped_ = false;
};

// A piece of a tool call: the first piece of call `index` carries its id and name.
struct ToolCallDelta {
    int index = 0;
    std::string id, name;  // set on the first piece only
    std::string arguments;
};

struct OutputDelta {
    std::string content;
    std::string reasoning;
    std::vector<ToolCallDelta> tool_calls;
    bool empty() const { return content.empty() && reasoning.empty() && tool_calls.empty(); }
};

class OutputProcessor {
  public:
    virtual ~OutputProcessor() = default;
    // New token ids of this choice -> the text they complete. Ignored once stopped().
    virtual OutputDelta push(std::span<const int32_t> ids) = 0;
    // End of generation: flushes held-back text and partial UTF-8. `truncated`: max_tokens ended it (a
    // harmony header cut there is dropped rather than returned as text).
    virtual OutputDelta finish(bool truncated = false) = 0;
    // A stop string matched: the caller ends the choice with finish_reason "stop".
    virtual bool stopped() const = 0;
    // Ids consumed until the stop (all pushed ids when not stopped): completion_tokens.
    virtual int64_t num_tokens() const = 0;
};

// Chat: harmony parser over the ids; stop strings on the final-channel (and plain) text. Calls of the
// declared `functions` become tool-call deltas with ids `call_id_prefix` + index; calls of anything else
// are demoted to reasoning (BUG-02). `prefix`: prompt ids that open the model's message (a forced call's
// header), fed to the parser first and not counted. Preamble text (commentary without a recipient: the
// user-visible "Let me check." of OpenAI's harmony guide) goes to content; each new message's text is
// separated from the content before it by a blank line ("Let me explain.\n\nThe answer is 4.").
struct ChatProcessorOptions {
    std::vector<std::string> stops;
    bool include_stop = false;  // include_stop_str_in_output
    std::vector<std::string> functions;
    std::string call_id_prefix = "call_";
    std::vector<int32_t> prefix;
};
std::unique_ptr<OutputProcessor> make_chat_processor(
    std::shared_ptr<const tokenizer::HarmonyEncoding> encoding, ChatProcessorOptions options);
// Completions: detokenized text (special tokens dropped when skip_special); stop strings on it.
std::unique_ptr<OutputProcessor> make_text_processor(std::shared_ptr<const tokenizer::Tokenizer> tokenizer,
                                                     std::vector<std::string> stops, bool skip_special,
                                                     bool include_stop = false);

}  // namespace volt::server
