// Loading tokenizer.json (checks every supported field, refuses the rest with kUnimplemented) and the
// encode/decode entry points; see tokenizer.h.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer_json.h"

namespace volt::tokenizer {

using nlohmann::json;

namespace {

const json* find_field(const json& j, const char* key) {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
}

bool get_bool(const json& j, const char* key, bool fallback) {
    const json* v = find_field(j, key);
    return v && v->is_boolean() ? v->get<bool>() : fallback;
}

}  // namespace

Result<std::shared_ptr<const Tokenizer>> Tokenizer::from_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return not_found("tokenizer file " + path + " cannot be opened");
    std::stringstream ss;
    ss << f.rdbuf();
    if (f.bad()) return internal_error("tokenizer file " + path + ": read error");
    return from_json(ss.str(), path);
}

Result<std::shared_ptr<const Tokenizer>> Tokenizer::from_json(std::string_view json_text,
                                                              const std::string& source) {
    std::shared_ptr<Tokenizer> t(new Tokenizer());
    VOLT_RETURN_IF_ERROR(t->load(json_text, source));
    return std::shared_ptr<const Tokenizer>(std::move(t));
}

Status Tokenizer::load(std::string_view json_text, const std::string& src) {
    VOLT_ASSIGN_OR_RETURN(TokenizerJson parsed, parse_tokenizer_json(json_text, src));
    const json& j = parsed.rest;
    if (!j.is_object()) return data_loss(src + ": not a JSON object (malformed tokenizer.json)");

    if (find_field(j, "normalizer"))
        return unimplemented(src + ": 'normalizer' is not supported (must be null)");

    // Pre-tokenizer: Split (Isolated) and ByteLevel, alone or in a Sequence.
    bool byte_level = false;
    std::vector<const json*> pres;
    if (const json* pre = find_field(j, "pre_tokenizer")) {
        if (pre->value("type", "") == "Sequence") {
            const json* list = find_field(*pre, "pretokenizers");
            if (!list || !list->is_array())
                return data_loss(src + ": pre_tokenizer.pretokenizers must be a list");
            for (const auto& p : *list) pres.push_back(&p);
        } else {
            pres.push_back(pre);
        }
    }
    for (const json* p : pres) {
        std::string type = p->value("type", "");
        if (type == "Split") {
            const json* pat = find_field(*p, "pattern");
            std::string regex;
            if (pat && pat->contains("Regex") && (*pat)["Regex"].is_string()) {
                regex = (*pat)["Regex"].get<std::string>();
            } else if (pat && pat->contains("String") && (*pat)["String"].is_string()) {
                regex = regex_escape((*pat)["String"].get<std::string>());
            } else {
                return data_loss(src + ": pre_tokenizer Split.pattern must hold 'Regex' or 'String'");
            }
            if (p->value("behavior", "") != "Isolated" || get_bool(*p, "invert", false)) {
                return unimplemented(
                    src + ": pre_tokenizer Split supports behavior 'Isolated' without invert, got '" +
                    p->value("behavior", "") + "'");
            }
            VOLT_ASSIGN_OR_RETURN(auto splitter, RegexSplitter::create(regex));
            splitters_.push_back(std::move(splitter));
        } else if (type == "ByteLevel") {
            byte_level = true;
            if (get_bool(*p, "add_prefix_space", true)) {
                return unimplemented(src +
                                     ": pre_tokenizer ByteLevel.add_prefix_space=true is not supported");
            }
            if (get_bool(*p, "use_regex", true)) {
                VOLT_ASSIGN_OR_RETURN(auto splitter, RegexSplitter::create(kGpt2Pattern));
                splitters_.push_back(std::move(splitter));
            }
        } else {
            return unimplemented(src + ": pre_tokenizer type '" + type +
                                 "' is not supported (Split, ByteLevel)");
        }
    }
    if (!byte_level)
        return unimplemented(src + ": only ByteLevel tokenizers are supported (no ByteLevel pre_tokenizer)");

    // Model: BPE over ByteLevel spellings.
    const json* model = find_field(j, "model");
    if (!model || !model->is_object()) return data_loss(src + ": 'model' is missing");
    if (model->value("type", "BPE") != "BPE") {
        return unimplemented(src + ": model type '" + model->value("type", "") + "' is not supported (BPE)");
    }
    if (find_field(*model, "dropout") || find_field(*model, "continuing_subword_prefix") ||
        find_field(*model, "end_of_word_suffix") || get_bool(*model, "byte_fallback", false)) {
        return unimplemented(
            src +
            ": model.dropout, continuing_subword_prefix, end_of_word_suffix and byte_fallback "
            "are not supported");
    }
    if (!parsed.has_vocab) return data_loss(src + ": model.vocab must be an object");
    if (!parsed.has_merges) return data_loss(src + ": model.merges must be a list");

    std::vector<std::string> id_bytes;
    std::unordered_map<std::string, int32_t> spelling_to_id;  // only while loading the merges
    spelling_to_id.reserve(parsed.vocab.size());
    for (auto& [spelling, id64] : parsed.vocab) {
        if (id64 < 0 || id64 > INT32_MAX - 1) {
            return data_loss(src + ": model.vocab['" + spelling + "'] must be a non-negative integer id");
        }
        auto id = static_cast<int32_t>(id64);
        if (static_cast<size_t>(id) >= id_bytes.size()) id_bytes.resize(id + 1);
        if (!id_bytes[id].empty())
            return data_loss(src + ": model.vocab uses id " + std::to_string(id) + " twice");
        id_bytes[id] = byte_level_to_bytes(spelling);
        if (id_bytes[id].empty()) return data_loss(src + ": model.vocab has an empty token");
        spelling_to_id.emplace(std::move(spelling), id);
    }
    parsed.vocab = {};
    std::vector<std::pair<int32_t, int32_t>> merge_ids;
    merge_ids.reserve(parsed.merges.size());
    for (size_t i = 0; i < parsed.merges.size(); ++i) {
        auto ia = spelling_to_id.find(parsed.merges[i].first),
             ib = spelling_to_id.find(parsed.merges[i].second);
        if (ia == spelling_to_id.end() || ib == spelling_to_id.end()) {
            return data_loss(src + ": model.merges[" + std::to_string(i) +
                             "] uses a token not in model.vocab");
        }
        merge_ids.emplace_back(ia->second, ib->second);
    }
    parsed.merges = {};
    spelling_to_id = {};
    vocab_size_ = static_cast<int32_t>(id_bytes.size());
    VOLT_ASSIGN_OR_RETURN(bpe_, BpeModel::create(std::move(id_bytes), merge_ids,
                                                 get_bool(*model, "ignore_merges", false), src));

    // Added tokens: split out of the text before the pre-tokenizer (special ones only in kRecognise).
    if (const json* added = find_field(j, "added_tokens")) {
        if (!added->is_array()) return data_loss(src + ": added_tokens must be a list");
        for (const auto& a : *added) {
            if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
                !a.contains("content") || !a["content"].is_string()) {
                return data_loss(src + ": added_tokens entries need an integer 'id' and a string 'content'");
            }
            AddedToken t{static_cast<int32_t>(a["id"].get<int64_t>()), a["content"].get<std::string>(),
                         get_bool(a, "special", false)};
            if (t.id < 0 || t.content.empty())
                return data_loss(src + ": added token with a bad id or empty content");
            if (get_bool(a, "single_word", false) || get_bool(a, "lstrip", false) ||
                get_bool(a, "rstrip", false)) {
                return unimplemented(src + ": added token '" + t.content +
                                     "': single_word, lstrip and rstrip are not supported");
            }
            if (find_invalid_utf8(t.content)) return data_loss(src + ": added token content is not UTF-8");
            // Names and ids must map one to one (BUG-29: two names sharing id 200018 cannot round-trip).
            if (added_by_id_.count(t.id) && added_[added_by_id_[t.id]].content != t.content) {
                return data_loss(src + ": added tokens '" + added_[added_by_id_[t.id]].content + "' and '" +
                                 t.content + "' share id " + std::to_string(t.id));
            }
            if (auto it = added_by_content_.find(t.content); it != added_by_content_.end()) {
                if (it->second != t.id) {
                    return data_loss(src + ": added token '" + t.content + "' has two ids");
                }
                continue;
            }
            added_by_content_.emplace(t.content, t.id);
            added_by_id_[t.id] = added_.size();
            added_.push_back(std::move(t));
            vocab_size_ = std::max(vocab_size_, added_.back().id + 1);
        }
    }
    // Longest first, so the first match at a position is the longest (HF: leftmost-longest).
    std::vector<size_t> order(added_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return added_[a].content.size() > added_[b].content.size(); });
    std::vector<AddedToken> sorted;
    for (size_t i : order) sorted.push_back(added_[i]);
    added_ = std::move(sorted);
    for (size_t i = 0; i < added_.size(); ++i) {
        added_by_id_[added_[i].id] = i;
        auto first = static_cast<uint8_t>(added_[i].content[0]);
        added_first_byte_[1][first] = true;
        if (!added_[i].special) added_first_byte_[0][first] = true;
    }
    for (int b = 0; b < 256; ++b) {
        if (!added_first_byte_[1][b]) continue;
        single_first_byte_ = single_first_byte_ == -1 ? b : -2;
    }
    if (single_first_byte_ == -2) single_first_byte_ = -1;
    return Status::ok();
}

const Tokenizer::AddedToken* Tokenizer::match_added(std::string_view text, SpecialTokens mode) const {
    for (const auto& t : added_) {
        if (t.special && mode == SpecialTokens::kIgnore) continue;
        if (text.substr(0, t.content.size()) == t.content) return &t;
    }
    return nullptr;
}

namespace {

// The last stage: BPE on each piece.
struct BpeSink final : PieceSink {
    const BpeModel* bpe;
    std::vector<int32_t>* out;
    EncodeStats* stats;
    BpeSink(const BpeModel* b, std::vector<int32_t>* o, EncodeStats* s) : bpe(b), out(o), stats(s) {}
    void operator()(std::string_view piece) override { bpe->encode_piece(piece, out, stats); }
};

// A middle stage: splits each piece again with the next pre-tokenizer.
struct SplitSink final : PieceSink {
    const RegexSplitter* splitter;
    PieceSink* next;
    EncodeStats* stats;
    Status status;
    SplitSink(const RegexSplitter* r, PieceSink* n, EncodeStats* s) : splitter(r), next(n), stats(s) {}
    void operator()(std::string_view piece) override {
        if (status.is_ok()) status = splitter->split(piece, *next, stats);
    }
};

}  // namespace

Status Tokenizer::encode_ordinary(std::string_view text, std::vector<int32_t>* out,
                                  EncodeStats* stats) const {
    if (text.empty()) return Status::ok();
    BpeSink bpe(bpe_.get(), out, stats);
    if (splitters_.empty()) {
        bpe(text);
        return Status::ok();
    }
    // Pieces stream through the stages; nothing the size of the text is materialised.
    std::vector<std::unique_ptr<SplitSink>> stages;
    PieceSink* next = &bpe;
    for (size_t i = splitters_.size(); i-- > 1;) {
        stages.push_back(std::make_unique<SplitSink>(splitters_[i].get(), next, stats));
        next = stages.back().get();
    }
    VOLT_RETURN_IF_ERROR(splitters_[0]->split(text, *next, stats));
    for (const auto& stage : stages) VOLT_RETURN_IF_ERROR(stage->status);
    return Status::ok();
}

Result<std::vector<int32_t>> Tokenizer::encode(std::string_view text, SpecialTokens mode) const {
    return encode_with_stats(text, mode, nullptr);
}

Result<std::vector<int32_t>> Tokenizer::encode_with_stats(std::string_view text, SpecialTokens mode,
                                                          EncodeStats* stats) const {
    if (auto bad = find_invalid_utf8(text)) {
        char hex[8];
        std::snprintf(hex, sizeof(hex), "0x%02X", static_cast<unsigned>(static_cast<uint8_t>(text[*bad])));
        return invalid_argument("text is not valid UTF-8: byte " + std::string(hex) + " at offset " +
                                std::to_string(*bad));
    }
    std::vector<int32_t> out;
    out.reserve(text.size() / 4 + 4);
    const bool* may_start = added_first_byte_[mode == SpecialTokens::kRecognise ? 1 : 0];
    size_t segment = 0;
    for (size_t i = 0; i < text.size();) {
        if (!may_start[static_cast<uint8_t>(text[i])]) {
            // Jump to the next candidate byte (gpt-oss: every added token starts with '<').
            if (single_first_byte_ >= 0) {
                const void* next = std::memchr(text.data() + i + 1, single_first_byte_, text.size() - i - 1);
                i = next ? static_cast<size_t>(static_cast<const char*>(next) - text.data()) : text.size();
            } else {
                ++i;
            }
            continue;
        }
        const AddedToken* t = match_added(text.substr(i), mode);
        if (!t) {
            ++i;
            continue;
        }
        VOLT_RETURN_IF_ERROR(encode_ordinary(text.substr(segment, i - segment), &out, stats));
        out.push_back(t->id);
        i += t->content.size();
        segment = i;
    }
    VOLT_RETURN_IF_ERROR(encode_ordinary(text.substr(segment), &out, stats));
    return out;
}

std::string_view Tokenizer::token_bytes_view(int32_t id) const {
    if (auto it = added_by_id_.find(id); it != added_by_id_.end()) return added_[it->second].content;
    return bpe_->bytes(id);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
    std::string out;
    for (int32_t id : ids) {
        if (skip_special && is_special(id)) continue;
        out += token_bytes_view(id);
    }
    return out;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
    if (auto it = added_by_content_.find(std::string(token)); it != added_by_content_.end())
        return it->second;
    std::string bytes = byte_level_to_bytes(token);
    auto id = bpe_->find(bytes);
    // Only the exact ByteLevel spelling names a token (" hello" is not a spelling; "Ġhello" is).
    if (id && bytes_to_byte_level(bytes) == token) return id;
    return std::nullopt;
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
    if (auto it = added_by_id_.find(id); it != added_by_id_.end()) return added_[it->second].content;
    if (!bpe_->has(id)) return std::nullopt;
    return bytes_to_byte_level(bpe_->bytes(id));
}

bool Tokenizer::is_special(int32_t id) const {
    auto it = added_by_id_.find(id);
    return it != added_by_id_.end() && added_[it->second].special;
}

std::vector<uint8_t> Tokenizer::token_bytes(int32_t id) const {
    std::string_view b = token_bytes_view(id);
    return {b.begin(), b.end()};
}

}  // namespace volt::tokenizer
