#!/usr/bin/env python3
"""bench/compare/patch_llama.py LLAMA_SRC_DIR: the one local patch to llama.cpp (80fb11ac) the comparison runs.

Why: llama-server parses every completion's text with its chat parser, also on /v1/completions; with no
template parser that is the "Content-only" PEG parser, which decodes UTF-8 and fails on a malformed byte.
A random-weight checkpoint emits invalid UTF-8 (lone continuation bytes, a multi-byte start followed by an
unrelated token), so llama-server answered many requests with HTTP 500 "The model produced output that does
not match the expected Content-only format" (common/chat.cpp, common_chat_peg_parse; seen in the first set
of issue 16's runs, 2026-12-06) and its throughput and TTFT rows counted only the requests that survived.
The patch: where the parser is the pure content one (no template parser) and the parse fails, the whole
text is the message's content, which is what that parser returns for valid text. The work done per token
(the parse) is unchanged; only the throw is gone. JSON output already replaces invalid bytes
(error_handler_t::replace). Exit 1 when the code to patch is not found (another llama.cpp version).
"""
import sys
from pathlib import Path

path = Path(sys.argv[1]) / "common" / "chat.cpp"
src = path.read_text()
anchor = "    if (result.fail()) {\n        // During partial parsing, return partial results if any AST nodes were captured\n"
patch = (
    "    if (result.fail() && src_parser.empty()) {\n"
    "        // voltllm bench patch (bench/compare/patch_llama.py): the pure content parser failed on malformed\n"
    "        // UTF-8; the text is the content, as for valid text.\n"
    "        common_chat_msg msg;\n"
    "        msg.role = \"assistant\";\n"
    "        msg.content = input;\n"
    "        return msg;\n"
    "    }\n"
)
if "voltllm bench patch" in src:
    print("patch_llama: already patched")
    sys.exit(0)
if src.count(anchor) != 1:
    print(f"patch_llama: anchor not found once in {path}", file=sys.stderr)
    sys.exit(1)
path.write_text(src.replace(anchor, patch + anchor))
print(f"patch_llama: patched {path} (content-only parse failure on malformed UTF-8 -> content)")
