// Request parsing and validation; see request.h. Limits follow the OpenAI API reference (temperature
// [0, 2], top_p (0, 1], penalties [-2, 2], top_logprobs <= 20) and vLLM's extensions (top_k, min_p,
// repetition_penalty, stop_token_ids, ignore_eos, skip_special_tokens).
#include "server/request.h"

#include <cmath>
#include <limits>

#include "tokenizer/harmony_renderer.h"

namespace volt::server {

ApiError bad_field(std::string param, std::string message, std::optional<std::string> code) {
    return ApiError{400, "invalid_request_error", std::move(message), std::move(param), std::move(code)};
}

namespace {

using json = RequestJson;

const char* type_name(const json& v) {
    switch (v.type()) {
        case json::value_t::null:
            return "null";
        case json::value_t::object:
            return "an object";
        case json::value_t::array:
            return "an array";
        case json::value_t::string:
            return "a string";
        case json::value_t::boolean:
            return "a boolean";
        case json::value_t::number_float:
            return "a number";
        default:
            return "an integer";
    }
}

// A value as an error message shows it: numbers, booleans and null as JSON, a string as a short quote,
// an object or array by its type only (never serialised: it may be large).
std::string preview(const json& v) {
    if (v.is_string()) {
        std::string out = "'";
        out += short_text(v.get_ref<const std::string&>());
        out += "'";
        return out;
    }
    if (v.is_object() || v.is_array()) return type_name(v);
    return v.dump();
}

// Reads optional fields of one JSON object; the first failure is kept in `error` and later reads do
// nothing. Absent and null fields leave the output untouched.
class Reader {
  public:
    Reader(const json& obj, std::string prefix) : obj_(obj), prefix_(std::move(prefix)) {}

    std::optional<ApiError> error;

    std::string path(const std::string& name) const { return prefix_.empty() ? name : prefix_ + "." + name; }
    const json* find(const char* name) const {
        auto it = obj_.find(name);
        if (it == obj_.end() || it->is_null()) return nullptr;
        return &*it;
    }
    void fail(const std::string& param, std::string message) {
        if (!error) error = bad_field(param, std::move(message));
    }
    void wrong_type(const char* name, const char* expected, const json& v) {
        fail(path(name), "'" + path(name) + "' must be " + expected + ", not " + type_name(v) + ".");
    }

    void get_bool(const char* name, bool* out) {
        const json* v = find(name);
        if (error || !v) return;
        if (!v->is_boolean()) return wrong_type(name, "a boolean", *v);
        *out = v->get<bool>();
    }
    void get_string(const char* name, std::string* out) {
        const json* v = find(name);
        if (error || !v) return;
        if (!v->is_string()) return wrong_type(name, "a string", *v);
        *out = v->get<std::string>();
    }
    // A number inside an engine sampling range (the one definition: engine/sampling_params.h).
    void get_float(const engine::SamplingRange& r, float* out) {
        get_float(r.field, r.lo, r.hi, r.lo_open, out);
    }
    template <typename Int>
    void get_int(const engine::SamplingRange& r, Int* out) {
        get_int(r.field, static_cast<int64_t>(r.lo), static_cast<int64_t>(r.hi), out);
    }
    // A number in [lo, hi] (lo excluded when lo_open).
    void get_float(const char* name, double lo, double hi, bool lo_open, float* out) {
        const json* v = find(name);
        if (error || !v) return;
        if (!v->is_number()) return wrong_type(name, "a number", *v);
        double x = v->get<double>();
        if (!std::isfinite(x) || x < lo || x > hi || (lo_open && x == lo)) {
            return fail(path(name), "'" + path(name) + "' is " + v->dump() + "; it must be " +
                                        (lo_open ? "> " : ">= ") + json(lo).dump() +
                                        " and <= " + json(hi).dump() + ".");
        }
        *out = static_cast<float>(x);
    }
    void get_int(const char* name, int64_t lo, int64_t hi, std::optional<int64_t>* out) {
        const json* v = find(name);
        if (error || !v) return;
        if (!v->is_number_integer()) return wrong_type(name, "an integer", *v);
        if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi)) {
            return fail(path(name), "'" + path(name) + "' is " + v->dump() + "; the maximum is " +
                                        std::to_string(hi) + ".");
        }
        int64_t x = v->get<int64_t>();
        if (x < lo || x > hi) {
            return fail(path(name), "'" + path(name) + "' is " + v->dump() + "; it must be between " +
                                        std::to_string(lo) + " and " + std::to_string(hi) + ".");
        }
        *out = x;
    }
    template <typename Int>
    void get_int(const char* name, int64_t lo, int64_t hi, Int* out) {
        std::optional<int64_t> v;
        get_int(name, lo, hi, &v);
        if (v) *out = static_cast<Int>(*v);
    }
    void refuse(const char* name, const std::string& why) {
        if (error || !find(name)) return;
        error = bad_field(path(name), "'" + path(name) + "' is not supported yet: " + why, "unsupported");
    }

  private:
    const json& obj_;
    std::string prefix_;
};

constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();

// Token ids: non-negative int32 (the vocabulary bound is checked where the tokenizer is known).
void get_token_ids(Reader& r, const json& v, const std::string& param, std::vector<int32_t>* out) {
    for (size_t i = 0; i < v.size(); ++i) {
        const json& t = v[i];
        if (!t.is_number_integer() || (t.is_number_unsigned() && t.get<uint64_t>() > kMaxInt32) ||
            t.get<int64_t>() < 0 || t.get<int64_t>() > kMaxInt32) {
            return r.fail(param, "'" + param + "[" + std::to_string(i) +
                                     "]' must be a token id (an integer >= 0), not " + preview(t) + ".");
        }
        out->push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
}

void parse_generation(Reader& r, bool chat, GenerationParams* p) {
    r.get_float(engine::kTemperatureRange, &p->sampling.temperature);
    r.get_float(engine::kTopPRange, &p->sampling.top_p);
    r.get_int(engine::kTopKRange, &p->sampling.top_k);
    if (p->sampling.top_k < 0) p->sampling.top_k = 0;
    r.get_float(engine::kMinPRange, &p->sampling.min_p);
    r.get_float(engine::kPresencePenaltyRange, &p->sampling.presence_penalty);
    r.get_float(engine::kFrequencyPenaltyRange, &p->sampling.frequency_penalty);
    r.get_float(engine::kRepetitionPenaltyRange, &p->sampling.repetition_penalty);
    r.get_int(engine::kNRange, &p->sampling.n);
    std::optional<int64_t> seed;
    r.get_int("seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), &seed);
    if (seed) p->sampling.seed = static_cast<uint64_t>(*seed);
    // Completions accept 0 (with echo: the prompt alone); the caller checks echo.
    r.get_int("max_tokens", chat ? 1 : 0, std::numeric_limits<int64_t>::max(), &p->max_tokens);
    if (chat) r.get_int("max_completion_tokens", 1, std::numeric_limits<int64_t>::max(), &p->max_tokens);
    r.get_bool("ignore_eos", &p->sampling.ignore_eos);
    r.get_int("priority", std::numeric_limits<int32_t>::min(), kMaxInt32, &p->sampling.priority);
    r.get_bool("skip_special_tokens", &p->skip_special_tokens);
    r.get_bool("include_stop_str_in_output", &p->include_stop_str_in_output);
    r.get_bool("stream", &p->stream);
    if (r.error) return;

    if (const json* v = r.find("stop")) {
        if (v->is_string()) {
            p->stop.push_back(v->get<std::string>());
        } else if (v->is_array()) {
            for (size_t i = 0; i < v->size(); ++i) {
                if (!(*v)[i].is_string()) {
                    return r.fail("stop", "'stop[" + std::to_string(i) + "]' must be a string, not " +
                                              type_name((*v)[i]) + ".");
                }
                p->stop.push_back((*v)[i].get<std::string>());
            }
        } else {
            return r.wrong_type("stop", "a string or an array of strings", *v);
        }
        for (const std::string& s : p->stop) {
            if (s.empty()) return r.fail("stop", "'stop' strings must not be empty.");
        }
    }
    if (const json* v = r.find("stop_token_ids")) {
        if (!v->is_array()) return r.wrong_type("stop_token_ids", "an array of token ids", *v);
        get_token_ids(r, *v, "stop_token_ids", &p->sampling.stop_token_ids);
    }
    if (const json* v = r.find("logit_bias")) {
        if (!v->is_object()) return r.wrong_type("logit_bias", "an object of token id -> bias", *v);
        for (auto it = v->begin(); it != v->end(); ++it) {
            const std::string& key = it.key();
            bool digits =
                !key.empty() && key.size() <= 10 && key.find_first_not_of("0123456789") == std::string::npos;
            if (!digits || std::stoll(key) > kMaxInt32) {
                return r.fail("logit_bias",
                              "'logit_bias' keys must be token ids, not '" + short_text(key) + "'.");
            }
            if (!it.value().is_number() || std::abs(it.value().get<double>()) > 100.0) {
                return r.fail("logit_bias", "'logit_bias[" + key + "]' must be a number in [-100, 100].");
            }
            p->sampling.logit_bias.emplace_back(static_cast<int32_t>(std::stoll(key)),
                                                it.value().get<float>());
        }
    }
    if (const json* v = r.find("stream_options")) {
        if (!v->is_object()) return r.wrong_type("stream_options", "an object", *v);
        if (!p->stream)
            return r.fail("stream_options", "'stream_options' is only allowed when 'stream' is true.");
        Reader so(*v, "stream_options");
        so.get_bool("include_usage", &p->include_usage);
        if (so.error) r.error = so.error;
    }
}

// Content: a string, or an array of {"type": "text", "text": ...} parts joined with no separator.
void parse_content(Reader& r, const json& v, const std::string& param, std::string* out) {
    if (v.is_string()) {
        *out = v.get<std::string>();
        return;
    }
    if (!v.is_array()) {
        return r.fail(param, "'" + param + "' must be a string or an array of text parts, not " +
                                 std::string(type_name(v)) + ".");
    }
    for (size_t i = 0; i < v.size(); ++i) {
        std::string part_param = param + "[" + std::to_string(i) + "]";
        const json& part = v[i];
        if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
            return r.fail(part_param, "'" + part_param + "' must be an object with a string 'type'.");
        }
        std::string type = part["type"].get<std::string>();
        if (type != "text") {
            r.error = bad_field(part_param,
                                "'" + part_param + "' has type '" + short_text(type) +
                                    "'; only text parts are supported (gpt-oss reads text only).",
                                "unsupported");
            return;
        }
        if (!part.contains("text") || !part["text"].is_string()) {
            return r.fail(part_param + ".text", "'" + part_param + ".text' must be a string.");
        }
        *out += part["text"].get<std::string>();
    }
}

void parse_messages(Reader& r, std::vector<ChatMessage>* out) {
    const json* v = r.find("messages");
    if (r.error) return;
    if (!v) return r.fail("messages", "'messages' is required.");
    if (!v->is_array()) return r.wrong_type("messages", "an array", *v);
    if (v->empty()) return r.fail("messages", "'messages' must hold at least one message.");
    for (size_t i = 0; i < v->size(); ++i) {
        std::string param = "messages[" + std::to_string(i) + "]";
        const json& m = (*v)[i];
        if (!m.is_object()) return r.fail(param, "'" + param + "' must be an object.");
        Reader mr(m, param);
        ChatMessage msg;
        const json* role = mr.find("role");
        if (!role) return r.fail(param + ".role", "'" + param + ".role' is required.");
        if (!role->is_string()) return r.fail(param + ".role", "'" + param + ".role' must be a string.");
        msg.role = role->get<std::string>();
        if (msg.role != "system" && msg.role != "developer" && msg.role != "user" &&
            msg.role != "assistant" && msg.role != "tool") {
            return r.fail(param + ".role", "'" + param + ".role' is '" + short_text(msg.role) +
                                               "'; expected system, developer, user, assistant or tool.");
        }
        const json* content = mr.find("content");
        if (content) {
            parse_content(r, *content, param + ".content", &msg.content);
            if (r.error) return;
        } else if (msg.role != "assistant") {
            return r.fail(param + ".content",
                          "'" + param + ".content' is required for a " + msg.role + " message.");
        }
        if (msg.role == "assistant") {
            // Clients differ: vLLM <= 0.11 and DeepSeek-style clients send reasoning_content, newer vLLM
            // and OpenRouter send reasoning. Either is the analysis of that turn.
            mr.get_string("reasoning_content", &msg.reasoning);
            if (msg.reasoning.empty()) mr.get_string("reasoning", &msg.reasoning);
            if (const json* calls = mr.find("tool_calls")) {
                if (!calls->is_array())
                    return r.fail(param + ".tool_calls", "'" + param + ".tool_calls' must be an array.");
                for (size_t j = 0; j < calls->size(); ++j) {
                    std::string cp = param + ".tool_calls[" + std::to_string(j) + "]";
                    const json& c = (*calls)[j];
                    if (!c.is_object() || !c.contains("function") || !c["function"].is_object() ||
                        !c["function"].contains("name") || !c["function"]["name"].is_string()) {
                        return r.fail(cp, "'" + cp + "' must be an object with function.name (a string).");
                    }
                    ChatMessage::ToolCall call;
                    const json& fn = c["function"];
                    call.name = fn["name"].get<std::string>();
                    if (c.contains("id") && c["id"].is_string()) call.id = c["id"].get<std::string>();
                    // By reference: never a copy of client JSON (an object here is dumped once, below the
                    // depth limit of parse_json_body).
                    if (auto args = fn.find("arguments"); args != fn.end()) {
                        call.arguments = args->is_string() ? args->get<std::string>() : args->dump();
                    }
                    msg.tool_calls.push_back(std::move(call));
                }
            }
        }
        if (msg.role == "tool") mr.get_string("tool_call_id", &msg.tool_call_id);
        if (mr.error) {
            r.error = mr.error;
            return;
        }
        out->push_back(std::move(msg));
    }
}

void parse_reasoning_effort(Reader& r, std::optional<std::string>* out) {
    std::string effort;
    r.get_string("reasoning_effort", &effort);
    if (r.error || effort.empty()) return;
    if (effort != "low" && effort != "medium" && effort != "high") {
        return r.fail("reasoning_effort",
                      "'reasoning_effort' is '" + short_text(effort) + "'; expected low, medium or high.");
    }
    *out = effort;
}

void require_model(Reader& r, std::string* model) {
    const json* v = r.find("model");
    if (r.error) return;
    if (!v) return r.fail("model", "'model' is required.");
    if (!v->is_string()) return r.wrong_type("model", "a string", *v);
    *model = v->get<std::string>();
}

// tools: [{"type": "function", "function": {"name", "description", "parameters"}}]; tool_choice: "none",
// "auto", "required" or {"type": "function", "function": {"name"}}.
void parse_tools(Reader& r, ChatRequest* req) {
    const json* tools = r.find("tools");
    if (r.error) return;
    if (tools) {
        if (!tools->is_array()) return r.wrong_type("tools", "an array", *tools);
        for (size_t i = 0; i < tools->size(); ++i) {
            const json& t = (*tools)[i];
            std::string param = "tools[" + std::to_string(i) + "]";
            if (!t.is_object())
                return r.fail(param, "'" + param + "' must be an object, not " + type_name(t) + ".");
            auto type = t.find("type");
            if (type == t.end() || !type->is_string() || type->get_ref<const std::string&>() != "function") {
                return r.fail(param + ".type",
                              "'" + param + ".type' must be \"function\", not " +
                                  (type == t.end() ? std::string("missing") : preview(*type)) + ".");
            }
            // Pointers into the request, never copies of its JSON.
            auto fit = t.find("function");
            const json* f = fit == t.end() ? nullptr : &*fit;
            if (!f || !f->is_object() || !f->contains("name") || !(*f)["name"].is_string()) {
                return r.fail(param + ".function.name", "'" + param + ".function.name' must be a string.");
            }
            std::string name = (*f)["name"].get<std::string>();
            if (name.empty() || name.size() > 64 ||
                name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") !=
                    std::string::npos) {
                return r.fail(param + ".function.name", "'" + param + ".function.name' is '" +
                                                            short_text(name) +
                                                            "'; names are 1-64 of a-z, A-Z, 0-9, _ and -.");
            }
            if (f->contains("parameters") && !(*f)["parameters"].is_object() &&
                !(*f)["parameters"].is_null()) {
                return r.fail(param + ".function.parameters",
                              "'" + param + ".function.parameters' must be an object.");
            }
        }
        auto described = tokenizer::function_tools_from_openai(*tools);
        if (!described.is_ok()) return r.fail("tools", described.status().message());
        req->tools = std::move(*described);
    }
    const json* tc = r.find("tool_choice");
    if (!tc) return;
    auto has = [&](const std::string& name) {
        for (const auto& t : req->tools) {
            if (t.name == name) return true;
        }
        return false;
    };
    if (tc->is_string()) {
        std::string choice = tc->get<std::string>();
        if (choice == "none") {
            req->tools.clear();
        } else if (choice == "required") {
            if (req->tools.empty())
                return r.fail("tool_choice", "'tool_choice' is \"required\" but no tools are given.");
            if (req->tools.size() > 1) {
                r.error = bad_field(
                    "tool_choice",
                    "'tool_choice' \"required\" with several tools cannot be enforced yet (it needs "
                    "constrained decoding); name one function instead.",
                    "unsupported");
                return;
            }
            req->forced_function = req->tools[0].name;
        } else if (choice != "auto") {
            return r.fail("tool_choice", "'tool_choice' is '" + short_text(choice) +
                                             "'; expected none, auto, required or a function.");
        }
        return;
    }
    if (!tc->is_object() || !tc->contains("function") || !(*tc)["function"].is_object() ||
        !(*tc)["function"].contains("name") || !(*tc)["function"]["name"].is_string()) {
        return r.fail(
            "tool_choice",
            "'tool_choice' must be a string or {\"type\": \"function\", \"function\": {\"name\"}}.");
    }
    std::string name = (*tc)["function"]["name"].get<std::string>();
    if (!has(name))
        return r.fail("tool_choice",
                      "'tool_choice' names '" + short_text(name) + "', which is not in 'tools'.");
    req->forced_function = name;
}

void refuse_unsupported(Reader& r, bool chat) {
    if (const json* rf = r.find("response_format"); rf && !r.error) {
        if (!rf->is_object()) return r.wrong_type("response_format", "an object", *rf);
        auto type = rf->find("type");
        if (type == rf->end() || !type->is_string()) {
            return r.fail("response_format.type",
                          "'response_format.type' must be a string (text, json_object or json_schema), not " +
                              (type == rf->end() ? std::string("missing") : std::string(type_name(*type))) +
                              ".");
        }
        if (type->get_ref<const std::string&>() != "text") {
            r.refuse("response_format", "structured output needs grammar-constrained decoding.");
        }
    }
    if (!chat) r.refuse("suffix", "gpt-oss has no fill-in-the-middle.");
}

// Chat: logprobs (bool) + top_logprobs (0..20, needs logprobs). Completions: logprobs (0..20).
void parse_logprobs(Reader& r, bool chat, GenerationParams* p) {
    if (chat) {
        bool want = false;
        r.get_bool("logprobs", &want);
        std::optional<int64_t> top;
        r.get_int("top_logprobs", static_cast<int64_t>(engine::kLogprobsRange.lo),
                  static_cast<int64_t>(engine::kLogprobsRange.hi), &top);
        if (r.error) return;
        if (top && !want) return r.fail("top_logprobs", "'top_logprobs' needs 'logprobs': true.");
        if (want) p->sampling.logprobs = static_cast<int32_t>(top.value_or(0));
    } else {
        r.get_int(engine::kLogprobsRange, &p->sampling.logprobs);
    }
}

// Fields with no effect here that are accepted as OpenAI and vLLM accept them; their type is still checked.
void accept_ignored(Reader& r, bool chat) {
    std::string user;
    r.get_string("user", &user);  // OpenAI: an end-user id for abuse monitoring
    bool parallel = true;
    // gpt-oss samples until <|call|>, so a reply holds at most one call whatever this says.
    if (chat) r.get_bool("parallel_tool_calls", &parallel);
}

// Every top-level field the parsers read (docs/request-fields.md); any other is an unknown field.
constexpr const char* kCommonFields[] = {"model",
                                         "temperature",
                                         "top_p",
                                         "top_k",
                                         "min_p",
                                         "presence_penalty",
                                         "frequency_penalty",
                                         "repetition_penalty",
                                         "n",
                                         "seed",
                                         "max_tokens",
                                         "ignore_eos",
                                         "priority",
                                         "skip_special_tokens",
                                         "include_stop_str_in_output",
                                         "stream",
                                         "stop",
                                         "stop_token_ids",
                                         "logit_bias",
                                         "stream_options",
                                         "response_format",
                                         "logprobs",
                                         "user"};
constexpr const char* kChatFields[] = {"messages",    "reasoning_effort", "max_completion_tokens", "tools",
                                       "tool_choice", "top_logprobs",     "parallel_tool_calls"};
constexpr const char* kCompletionFields[] = {"prompt", "echo", "suffix", "best_of"};

std::vector<std::string> unknown_fields(const json& body, bool chat) {
    std::vector<std::string> out;
    for (auto it = body.begin(); it != body.end(); ++it) {
        auto in = [&](const auto& names) {
            for (const char* n : names) {
                if (it.key() == n) return true;
            }
            return false;
        };
        if (!in(kCommonFields) && !(chat ? in(kChatFields) : in(kCompletionFields))) out.push_back(it.key());
    }
    return out;
}

}  // namespace

std::variant<RequestJson, ApiError> parse_json_body(const std::string& body) {
    // Thrown by the parser callback at the first container past the limit: the parse stops there, so a
    // deep value is never built (nor copied, dumped or destroyed recursively later).
    struct TooDeep {};
    std::string field;  // the top-level field being parsed, for `param`
    json::parser_callback_t limit_depth = [&field](int depth, json::parse_event_t event, json& parsed) {
        // `depth` counts the containers already open: 0 for the body object itself.
        if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
            depth >= kMaxJsonDepth) {
            throw TooDeep{};
        }
        if (event == json::parse_event_t::key && depth == 1)
            field = short_text(parsed.get_ref<const std::string&>());
        return true;
    };
    json j;
    try {
        j = json::parse(body.begin(), body.end(), limit_depth);
    } catch (const TooDeep&) {
        std::optional<std::string> param;
        if (!field.empty()) param = field;
        return ApiError{400, "invalid_request_error",
                        "The request body nests arrays and objects more than " +
                            std::to_string(kMaxJsonDepth) + " levels deep" +
                            (field.empty() ? std::string() : " (in '" + field + "')") + "; " +
                            std::to_string(kMaxJsonDepth) + " is the limit.",
                        std::move(param), std::string("json_too_deep")};
    } catch (const json::exception& e) {
        std::string what = e.what();
        bool utf8 = what.find("UTF-8") != std::string::npos || what.find("surrogate") != std::string::npos;
        // The parser's message quotes the token it stopped in ("last read: '...'"), which can be a whole
        // string value of the body: keep the start of it only.
        constexpr size_t kMaxWhat = 200;
        if (what.size() > kMaxWhat) what = short_text(what, kMaxWhat) + "'";
        return ApiError{400, "invalid_request_error",
                        std::string(utf8 ? "The request body is not valid UTF-8: "
                                         : "The request body is not valid JSON: ") +
                            what,
                        std::nullopt, std::string(utf8 ? "invalid_utf8" : "invalid_json")};
    }
    if (!j.is_object()) {
        return ApiError{400, "invalid_request_error",
                        std::string("The request body must be a JSON object, not ") + type_name(j) + ".",
                        std::nullopt, std::string("invalid_json")};
    }
    return j;
}

std::variant<ChatRequest, ApiError> parse_chat_request(const RequestJson& body) {
    ChatRequest req;
    Reader r(body, "");
    require_model(r, &req.model);
    parse_messages(r, &req.messages);
    parse_reasoning_effort(r, &req.reasoning_effort);
    parse_generation(r, true, &req.params);
    refuse_unsupported(r, true);
    parse_tools(r, &req);
    parse_logprobs(r, true, &req.params);
    accept_ignored(r, true);
    if (r.error) return *r.error;
    req.unknown_fields = unknown_fields(body, true);
    return req;
}

std::variant<CompletionRequest, ApiError> parse_completion_request(const RequestJson& body) {
    CompletionRequest req;
    Reader r(body, "");
    require_model(r, &req.model);
    r.get_bool("echo", &req.echo);
    parse_generation(r, false, &req.params);
    refuse_unsupported(r, false);
    parse_logprobs(r, false, &req.params);
    accept_ignored(r, false);
    if (!r.error && req.params.max_tokens == 0) {
        if (!req.echo) {
            return bad_field("max_tokens",
                             "'max_tokens' is 0; it must be at least 1 (0 is allowed only with 'echo': true, "
                             "which returns the prompt alone).");
        }
        req.prompt_only = true;
    }
    if (!r.error) {
        std::optional<int64_t> best_of;
        r.get_int("best_of", 1, 128, &best_of);
        if (best_of && *best_of != req.params.sampling.n) r.refuse("best_of", "best_of must equal n.");
    }
    if (r.error) return *r.error;
    req.unknown_fields = unknown_fields(body, false);

    const json* p = r.find("prompt");
    if (!p) return bad_field("prompt", "'prompt' is required.");
    auto empty_prompt = [] { return bad_field("prompt", "'prompt' must not be empty."); };
    if (p->is_string()) {
        if (p->get<std::string>().empty()) return empty_prompt();
        req.prompts.emplace_back(p->get<std::string>());
    } else if (p->is_array()) {
        if (p->empty()) return empty_prompt();
        if ((*p)[0].is_number_integer()) {
            std::vector<int32_t> ids;
            get_token_ids(r, *p, "prompt", &ids);
            if (r.error) return *r.error;
            req.prompts.emplace_back(std::move(ids));
        } else {
            for (size_t i = 0; i < p->size(); ++i) {
                const json& e = (*p)[i];
                std::string param = "prompt[" + std::to_string(i) + "]";
                if (e.is_string()) {
                    if (e.get<std::string>().empty()) return empty_prompt();
                    req.prompts.emplace_back(e.get<std::string>());
                } else if (e.is_array()) {
                    if (e.empty()) return empty_prompt();
                    std::vector<int32_t> ids;
                    get_token_ids(r, e, "prompt", &ids);
                    if (r.error) return *r.error;
                    req.prompts.emplace_back(std::move(ids));
                } else {
                    return bad_field("prompt", "'" + param +
                                                   "' must be a string or an array of token ids, not " +
                                                   type_name(e) + ".");
                }
            }
        }
    } else {
        return bad_field("prompt",
                         std::string("'prompt' must be a string, an array of strings, an array of token "
                                     "ids or an array of such arrays, not ") +
                             type_name(*p) + ".");
    }
    return req;
}

std::variant<TokenizeRequest, ApiError> parse_tokenize_request(const RequestJson& body) {
    TokenizeRequest req;
    Reader r(body, "");
    r.get_string("model", &req.model);
    r.get_bool("add_special_tokens", &req.add_special_tokens);
    if (r.error) return *r.error;
    if (body.contains("messages")) {
        parse_messages(r, &req.messages);
        parse_reasoning_effort(r, &req.reasoning_effort);
        ChatRequest chat;
        parse_tools(r, &chat);
        req.tools = std::move(chat.tools);
        req.forced_function = std::move(chat.forced_function);
    } else {
        const json* p = r.find("prompt");
        if (!p) return bad_field("prompt", "'prompt' (text) or 'messages' is required.");
        if (!p->is_string())
            return bad_field("prompt", std::string("'prompt' must be a string, not ") + type_name(*p) + ".");
        req.prompt = p->get<std::string>();
    }
    if (r.error) return *r.error;
    return req;
}

std::variant<DetokenizeRequest, ApiError> parse_detokenize_request(const RequestJson& body) {
    DetokenizeRequest req;
    Reader r(body, "");
    r.get_string("model", &req.model);
    if (r.error) return *r.error;
    const json* t = r.find("tokens");
    if (!t) return bad_field("tokens", "'tokens' is required.");
    if (!t->is_array())
        return bad_field("tokens",
                         std::string("'tokens' must be an array of token ids, not ") + type_name(*t) + ".");
    get_token_ids(r, *t, "tokens", &req.tokens);
    if (r.error) return *r.error;
    return req;
}

}  // namespace volt::server
