// Streaming tokenizer.json reader: a SAX handler that builds a tree except under model.vocab and
// model.merges; see tokenizer_json.h.
#include "tokenizer/tokenizer_json.h"

namespace volt::tokenizer {

namespace {

using nlohmann::json;

// A SAX handler that builds a JSON tree except under model.vocab and model.merges.
class Handler {
  public:
    explicit Handler(TokenizerJson* out) : out_(out) {}

    bool null() { return value(json(nullptr)); }
    bool boolean(bool v) { return value(json(v)); }
    bool number_integer(json::number_integer_t v) { return mode_ == kVocab ? vocab_id(v) : value(json(v)); }
    bool number_unsigned(json::number_unsigned_t v) {
        if (mode_ == kVocab) return v > INT64_MAX ? fail("model.vocab id out of range") : vocab_id(v);
        return value(json(v));
    }
    bool number_float(json::number_float_t v, const json::string_t&) {
        if (mode_ != kNone)
            return fail("model.vocab ids and model.merges entries cannot be numbers like that");
        return value(json(v));
    }
    bool string(json::string_t& s) {
        if (mode_ == kVocab) return fail("model.vocab['" + vocab_key_ + "'] must be an integer id");
        if (mode_ == kMerges) {
            if (in_pair_) {
                pair_.push_back(std::move(s));
                return pair_.size() <= 2 || fail("a model.merges entry has more than two tokens");
            }
            size_t sp = s.find(' ');  // the older "a b" form
            if (sp == std::string::npos) return fail("model.merges entry '" + s + "' is not 'a b'");
            out_->merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
            return true;
        }
        return value(json(std::move(s)));
    }
    bool binary(json::binary_t&) { return fail("binary value"); }
    bool start_object(std::size_t) {
        if (mode_ != kNone) return fail("model.vocab and model.merges hold no objects");
        if (at_model() && key_ == "vocab") {
            mode_ = kVocab;
            return true;
        }
        return open(json::object());
    }
    bool key(json::string_t& k) {
        (mode_ == kVocab ? vocab_key_ : key_) = std::move(k);
        return true;
    }
    bool end_object() {
        if (mode_ == kVocab) {
            mode_ = kNone;
            out_->has_vocab = true;
            return true;
        }
        return close();
    }
    bool start_array(std::size_t) {
        if (mode_ == kVocab) return fail("model.vocab holds no lists");
        if (mode_ == kMerges) {
            if (in_pair_) return fail("a model.merges entry holds a list");
            in_pair_ = true;
            pair_.clear();
            return true;
        }
        if (at_model() && key_ == "merges") {
            mode_ = kMerges;
            return true;
        }
        return open(json::array());
    }
    bool end_array() {
        if (mode_ == kMerges) {
            if (!in_pair_) {
                mode_ = kNone;
                out_->has_merges = true;
                return true;
            }
            in_pair_ = false;
            if (pair_.size() != 2) return fail("a model.merges entry is not a pair");
            out_->merges.emplace_back(std::move(pair_[0]), std::move(pair_[1]));
            return true;
        }
        return close();
    }
    bool parse_error(std::size_t position, const std::string&, const json::exception& ex) {
        error_ = "malformed JSON at byte " + std::to_string(position) + ": " + ex.what();
        return false;
    }
    const std::string& error() const { return error_; }

  private:
    enum Mode { kNone, kVocab, kMerges };

    // Directly inside the root object's "model" object.
    bool at_model() const { return stack_.size() == 2 && keys_[1] == "model" && stack_[1]->is_object(); }
    bool fail(std::string message) {
        error_ = std::move(message);
        return false;
    }
    bool vocab_id(int64_t id) {
        out_->vocab.emplace_back(std::move(vocab_key_), id);
        return true;
    }
    // Inserts `v` into the innermost open container; returns where it now lives. Only the innermost
    // container grows, so pointers to the open ones stay valid.
    json* add(json v) {
        if (stack_.empty()) {
            out_->rest = std::move(v);
            return &out_->rest;
        }
        json* parent = stack_.back();
        if (parent->is_object()) {
            json& slot = (*parent)[key_];
            slot = std::move(v);
            return &slot;
        }
        parent->push_back(std::move(v));
        return &parent->back();
    }
    bool value(json v) {
        add(std::move(v));
        return true;
    }
    bool open(json container) {
        std::string key = !stack_.empty() && stack_.back()->is_object() ? key_ : std::string();
        stack_.push_back(add(std::move(container)));
        keys_.push_back(std::move(key));
        return true;
    }
    bool close() {
        stack_.pop_back();
        keys_.pop_back();
        return true;
    }

    TokenizerJson* out_;
    std::vector<json*> stack_;       // open containers, root first
    std::vector<std::string> keys_;  // the key each open container has in its parent ("" in a list)
    std::string key_, vocab_key_;
    Mode mode_ = kNone;
    bool in_pair_ = false;
    std::vector<std::string> pair_;
    std::string error_;
};

}  // namespace

Result<TokenizerJson> parse_tokenizer_json(std::string_view text, const std::string& source) {
    TokenizerJson out;
    Handler handler(&out);
    bool ok = json::sax_parse(text.begin(), text.end(), &handler);
    if (!ok) {
        return data_loss(source + ": " + (handler.error().empty() ? "malformed JSON" : handler.error()));
    }
    return out;
}

}  // namespace volt::tokenizer
