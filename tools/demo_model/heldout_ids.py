#!/usr/bin/env python3
"""Held-out token ids of the demo model without HF `tokenizers`: a standard-library byte-level BPE over
assets/demo-model/tokenizer.json, valid for ASCII text only (the Brown corpus is pure ASCII), where the
o200k Split regex's Unicode classes reduce to ASCII ones. Checks itself against the HF-made pins
(tests/data/demo/transformers_pins.json: the first held-out chunks and the plain greedy prompts) and
writes the 512-token windows of every held-out text, exactly as train.py cuts them, as a JSON array of
arrays (input for `voltllm perplexity --chunks`).
Usage: python3 tools/demo_model/heldout_ids.py out/demo-corpus/heldout.jsonl out/demo-heldout-chunks.json
"""
import json
import re
import sys

SEQ_LEN = 512
CONTRACTION = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
# spec/gpt-oss.md §6 pattern with \p{L} -> [A-Za-z], \p{Lu}.. -> [A-Z], \p{Ll}.. -> [a-z], \p{N} -> [0-9].
PATTERN = re.compile(
    r"[^\r\nA-Za-z0-9]?[A-Z]*[a-z]+" + CONTRACTION
    + r"|[^\r\nA-Za-z0-9]?[A-Z]+[a-z]*" + CONTRACTION
    + r"|[0-9]{1,3}"
    + r"| ?[^\sA-Za-z0-9]+[\r\n/]*"
    + r"|\s*[\r\n]+"
    + r"|\s+(?!\S)"
    + r"|\s+"
)


def byte_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


class Bpe:
    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
        self.vocab = d["model"]["vocab"]
        self.ranks = {}
        for i, m in enumerate(d["model"]["merges"]):
            a, b = m if isinstance(m, list) else m.split(" ")
            self.ranks[(a, b)] = i
        self.ignore_merges = d["model"].get("ignore_merges", False)
        self.b2u = byte_to_unicode()

    def encode_piece(self, piece):
        word = "".join(self.b2u[b] for b in piece.encode("utf-8"))
        if self.ignore_merges and word in self.vocab:
            return [self.vocab[word]]
        parts = list(word)
        while len(parts) > 1:
            best = min(range(len(parts) - 1), key=lambda i: self.ranks.get((parts[i], parts[i + 1]), 1 << 30))
            if (parts[best], parts[best + 1]) not in self.ranks:
                break
            parts[best : best + 2] = [parts[best] + parts[best + 1]]
        return [self.vocab[p] for p in parts]

    def encode(self, text):
        assert text.isascii(), "ASCII only"
        ids = []
        for m in PATTERN.finditer(text):
            ids.extend(self.encode_piece(m.group(0)))
        return ids


def main():
    src, dst = sys.argv[1], sys.argv[2]
    bpe = Bpe("assets/demo-model/tokenizer.json")
    with open("tests/data/demo/transformers_pins.json", encoding="utf-8") as f:
        pins = json.load(f)
    for item in pins["greedy"]["export"]:
        if item["kind"] == "plain":
            assert bpe.encode(item["prompt"]) == item["prompt_ids"], item["prompt"]
    with open(src, encoding="utf-8") as f:
        docs = [json.loads(line) for line in f]
    chunks = []
    for doc in docs:
        ids = bpe.encode(doc["text"])
        chunks.extend(ids[s : s + SEQ_LEN] for s in range(0, len(ids), SEQ_LEN) if len(ids[s : s + SEQ_LEN]) >= 2)
    for i, c in enumerate(pins["heldout"]["chunks"]):
        assert chunks[i] == c["ids"], f"chunk {i} differs from HF tokenizers"
    total = sum(len(c) - 1 for c in chunks)
    assert total == pins["heldout"]["tokens"], (total, pins["heldout"]["tokens"])
    with open(dst, "w", encoding="utf-8") as f:
        json.dump(chunks, f)
    print(f"{len(chunks)} chunks, {total} predicted tokens; matches the HF pins")


if __name__ == "__main__":
    main()
