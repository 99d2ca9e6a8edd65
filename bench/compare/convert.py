#!/usr/bin/env python3
"""bench/compare/convert.py LLAMA_DIR [--pre-tokenizer NAME] -- CONVERT_ARGS...: llama.cpp's own
convert_hf_to_gguf.py (LLAMA_DIR/convert_hf_to_gguf.py, unpatched), run in this process. With --pre-tokenizer,
the converter's lookup of the BPE pre-tokenizer by the hash of a test string's ids is answered with NAME:
the demo model's tokenizer (assets/demo-model) has gpt-oss's pre-tokenizer (tools/demo_model/README.md: copied
from the real tokenizer.json) but its own 8,192-id vocabulary, so no hash of the converter's table matches it;
the real gpt-oss tokenizer maps to "gpt-4o" there. Without --pre-tokenizer this is the converter as it is.
"""
import sys

llama_dir = sys.argv[1]
args = sys.argv[2:]
pre = None
if args[:1] == ["--pre-tokenizer"]:
    pre, args = args[1], args[2:]
if args[:1] == ["--"]:
    args = args[1:]
sys.path.insert(0, llama_dir)
sys.argv = [llama_dir + "/convert_hf_to_gguf.py"] + args
import convert_hf_to_gguf  # noqa: E402

if pre:
    from conversion import base  # noqa: E402

    def fixed_pre(self, tokenizer, _name=pre):
        return _name

    base.TextModel.get_vocab_base_pre = fixed_pre
convert_hf_to_gguf.main()
