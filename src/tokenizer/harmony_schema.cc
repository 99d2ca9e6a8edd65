// JSON Schema -> TypeScript for harmony tool declarations: a rule-for-rule port of openai/harmony v0.0.8
// (src/encoding.rs `json_schema_to_typescript`, `template_tools_section`, Apache-2.0). Where the original
// uses Rust's str::lines() and serde_json's Display, rust_lines() and dump() reproduce them.
// Tests: tests/unit/tokenizer/harmony_renderer_test.cc.
#include "tokenizer/harmony_schema.h"

#include <set>
#include <vector>

namespace volt::tokenizer {
namespace {

using Json = nlohmann::ordered_json;

// Rust str::lines(): split on '\n', drop one trailing '\r' per line, no final empty line.
std::vector<std::string> rust_lines(std::string_view text) {
    std::vector<std::string> lines;
    size_t pos = 0;
    while (pos < text.size()) {
        size_t nl = text.find('\n', pos);
        std::string_view line =
            text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        lines.emplace_back(line);
        if (nl == std::string_view::npos) break;
        pos = nl + 1;
    }
    return lines;
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
    std::string out;
    for (size_t i = 0; i < parts.size(); ++i) {
        if (i > 0) out += sep;
        out += parts[i];
    }
    return out;
}

const Json* get(const Json& obj, const char* key) {
    if (!obj.is_object()) return nullptr;
    auto it = obj.find(key);
    return it == obj.end() ? nullptr : &*it;
}

const std::string* get_string(const Json& obj, const char* key) {
    const Json* v = get(obj, key);
    return v != nullptr && v->is_string() ? v->get_ptr<const std::string*>() : nullptr;
}

bool is_enum(const Json& schema) {
    const Json* e = get(schema, "enum");
    return e != nullptr && e->is_array() && !e->empty();
}

bool is_nullable(const Json& schema) {
    const Json* n = get(schema, "nullable");
    return n != nullptr && n->is_boolean() && n->get<bool>();
}

// serde_json's Display of a value: compact JSON (invalid UTF-8 replaced rather than thrown).
std::string json_display(const Json& v) { return v.dump(-1, ' ', false, Json::error_handler_t::replace); }

// "default: \"x\"" for a string default of a non-enum, "default: x" for an enum's string, JSON otherwise.
std::string default_comment(const Json& schema, const Json& def) {
    if (def.is_string()) {
        const std::string& s = def.get_ref<const std::string&>();
        return is_enum(schema) ? "default: " + s : "default: \"" + s + "\"";
    }
    return "default: " + json_display(def);
}

std::string with_nullable(const Json& variant, std::string type_str) {
    if (is_nullable(variant) && type_str.find("null") == std::string::npos) type_str += " | null";
    return type_str;
}

std::string one_of_top_level(const Json& arr, std::string_view indent) {
    std::string out;
    for (const Json& variant : arr) {
        out += "\n";
        out += indent;
        out += " | ";
        out += with_nullable(variant, json_schema_to_typescript(variant, std::string(indent) + "   "));
        std::vector<std::string> trailing;
        if (const std::string* desc = get_string(variant, "description")) trailing.push_back(*desc);
        if (const Json* def = get(variant, "default")) trailing.push_back(default_comment(variant, *def));
        if (!trailing.empty()) out += " // " + join(trailing, " ");
    }
    return out;
}

void render_one_of_property(std::string& out, const std::string& key, const Json& val, const Json& arr,
                            bool required, std::string_view indent) {
    const std::string* property_desc = get_string(val, "description");
    bool skip_property_desc = false;
    if (property_desc != nullptr && !arr.empty()) {
        const std::string* first_desc = get_string(arr.front(), "description");
        if (first_desc != nullptr && *first_desc == *property_desc) skip_property_desc = true;
    }
    bool rendered_desc_above = false;
    if (!skip_property_desc && property_desc != nullptr) {
        out += std::string(indent) + "// " + *property_desc + "\n";
        rendered_desc_above = true;
    }
    if (const Json* def = get(val, "default"))
        out += std::string(indent) + "// " + default_comment(val, *def) + "\n";
    out += std::string(indent) + key + (required ? "" : "?") + ":\n";
    for (size_t i = 0; i < arr.size(); ++i) {
        const Json& variant = arr[i];
        out += std::string(indent) + " | ";
        out += with_nullable(variant, json_schema_to_typescript(variant, std::string(indent) + "   "));
        std::vector<std::string> trailing;
        if (!(i == 0 && rendered_desc_above)) {
            const std::string* desc = get_string(variant, "description");
            if (desc != nullptr && (property_desc == nullptr || *desc != *property_desc))
                trailing.push_back(*desc);
        }
        if (const Json* def = get(variant, "default")) trailing.push_back(default_comment(variant, *def));
        if (!trailing.empty()) out += " // " + join(trailing, " ");
        out += "\n";
    }
    out += std::string(indent) + ",\n";
}

std::string object_to_typescript(const Json& schema, std::string_view indent) {
    std::string out;
    if (const std::string* desc = get_string(schema, "description")) {
        out += std::string(indent) + "// " + *desc + "\n";
    }
    out += "{\n";
    const Json* props = get(schema, "properties");
    if (props != nullptr && props->is_object()) {
        std::set<std::string> required;
        if (const Json* req = get(schema, "required"); req != nullptr && req->is_array()) {
            for (const Json& r : *req) {
                if (r.is_string()) required.insert(r.get<std::string>());
            }
        }
        for (const auto& [key, val] : props->items()) {
            bool is_required = required.count(key) > 0;
            if (const std::string* title = get_string(val, "title")) {
                out += std::string(indent) + "// " + *title + "\n" + std::string(indent) + "//\n";
            }
            const Json* one_of = get(val, "oneOf");
            if (one_of == nullptr) {
                if (const std::string* desc = get_string(val, "description")) {
                    out += std::string(indent) + "// " + *desc + "\n";
                }
            }
            if (const Json* examples = get(val, "examples");
                examples != nullptr && examples->is_array() && !examples->empty()) {
                out += std::string(indent) + "// Examples:\n";
                for (const Json& ex : *examples) {
                    if (ex.is_string())
                        out += std::string(indent) + "// - \"" + ex.get<std::string>() + "\"\n";
                }
            }
            if (one_of != nullptr && one_of->is_array()) {
                render_one_of_property(out, key, val, *one_of, is_required, indent);
                continue;
            }
            out += std::string(indent) + key + (is_required ? "" : "?") + ": ";
            out += with_nullable(val, json_schema_to_typescript(val, std::string(indent) + "    "));
            out += ",";
            if (one_of == nullptr) {
                if (const Json* def = get(val, "default")) out += " // " + default_comment(val, *def);
            }
            out += "\n";
        }
    }
    out += std::string(indent) + "}";
    return out;
}

}  // namespace

std::string json_schema_to_typescript(const Json& schema, std::string_view indent) {
    if (const Json* one_of = get(schema, "oneOf"); one_of != nullptr && one_of->is_array()) {
        return one_of_top_level(*one_of, indent);
    }
    const Json* type = get(schema, "type");
    if (type != nullptr && type->is_array()) {
        std::vector<std::string> names;
        for (const Json& t : *type) {
            if (!t.is_string()) continue;
            const std::string& s = t.get_ref<const std::string&>();
            names.push_back(s == "integer" ? "number" : s);
        }
        if (!names.empty()) return join(names, " | ");
    }
    if (type == nullptr || !type->is_string()) return "any";
    const std::string& t = type->get_ref<const std::string&>();
    if (t == "object") return object_to_typescript(schema, indent);
    if (t == "string") {
        if (const Json* e = get(schema, "enum"); e != nullptr && e->is_array()) {
            std::vector<std::string> values;
            for (const Json& v : *e) {
                if (v.is_string()) values.push_back("\"" + v.get<std::string>() + "\"");
            }
            if (!values.empty()) return join(values, " | ");
        }
        return "string";
    }
    if (t == "number" || t == "integer") return "number";
    if (t == "boolean") return "boolean";
    if (t == "array") {
        const Json* items = get(schema, "items");
        return items != nullptr ? json_schema_to_typescript(*items, indent) + "[]" : "Array<any>";
    }
    return "any";
}

std::string render_tools_section(std::span<const ToolNamespace> namespaces) {
    std::vector<std::string> sections = {"# Tools"};
    for (const ToolNamespace& ns : namespaces) {
        std::vector<std::string> lines = {"## " + ns.name + "\n"};
        if (ns.description) {
            for (const std::string& line : rust_lines(*ns.description)) {
                lines.push_back(ns.tools.empty() ? line : "// " + line);
            }
        }
        if (!ns.tools.empty()) {
            lines.push_back("namespace " + ns.name + " {\n");
            for (const ToolDescription& tool : ns.tools) {
                for (const std::string& line : rust_lines(tool.description)) lines.push_back("// " + line);
                if (tool.parameters && !tool.parameters->is_null()) {
                    lines.push_back("type " + tool.name + " = (_: " +
                                    json_schema_to_typescript(*tool.parameters, "") + ") => any;\n");
                } else {
                    lines.push_back("type " + tool.name + " = () => any;\n");
                }
            }
            lines.push_back("} // namespace " + ns.name);
        }
        sections.push_back(join(lines, "\n"));
    }
    return join(sections, "\n\n");
}

}  // namespace volt::tokenizer
