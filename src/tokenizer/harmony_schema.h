// JSON Schema -> TypeScript-like declarations for the harmony `# Tools` section (spec §5.4). A port of
// openai/harmony v0.0.8 `json_schema_to_typescript` and `template_tools_section` (src/encoding.rs), kept
// rule for rule so our output matches its goldens byte for byte, quirks included.
// Tests: tests/unit/tokenizer/harmony_renderer_test.cc (test_render_functions_with_parameters, browser).
#pragma once

#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>

#include "tokenizer/harmony_message.h"

namespace volt::tokenizer {

// The TypeScript type of `schema`: objects become `{\n name?: type, // default: X\n}` blocks with
// description/title/examples comments, enums `"a" | "b"`, arrays `T[]`, nullable `T | null`, oneOf a
// ` | ` list; anything unrecognised is `any`. `indent` prefixes the lines inside objects. Never fails.
std::string json_schema_to_typescript(const nlohmann::ordered_json& schema, std::string_view indent);

// "# Tools\n\n## NAME\n\nnamespace NAME {\n\n// description\ntype f = (_: {...}) => any;\n\n} // namespace
// NAME" for each namespace in the given order (callers sort by name, as harmony's BTreeMap does).
std::string render_tools_section(std::span<const ToolNamespace> namespaces);

}  // namespace volt::tokenizer
