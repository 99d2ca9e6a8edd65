#!/usr/bin/env python3
"""Extracts the test pins for the demo model from train.py's results.json (made by transformers on the GPU
machine) into tests/data/demo/transformers_pins.json: greedy continuations (prompt ids, generated ids, text,
top-2 logit margins) of the export (MXFP4 experts, best-of-2 scale rule = `voltllm convert`'s default) and of
the bf16 model, and the held-out NLL of the first chunks with their token ids. Standard library only.
Usage: python3 tools/demo_model/make_pins.py tools/demo_model/run/results.json tests/data/demo/transformers_pins.json
"""
import json
import sys

NUM_CHUNKS = 4


def main():
    src, dst = sys.argv[1], sys.argv[2]
    with open(src, encoding="utf-8") as f:
        r = json.load(f)
    ev = r["final_heldout"]
    pins = {
        "source": "tools/demo_model/train.py on the GPU machine (transformers "
        + r["versions"]["transformers"]
        + ", torch "
        + r["versions"]["torch"]
        + "), GptOssForCausalLM eager, fp32 compute from the bf16 checkpoint; 'export' = experts "
        "quantised to MXFP4 in train.py (best-of-2 scale rule, E2M1 round-half-to-even), i.e. what "
        "`voltllm convert` writes; greedy = argmax of fp32 logits, full recomputation each step",
        "special_ids": r["special_ids"],
        "greedy": {
            "export": r["greedy"]["mxfp4_best2"],
            "bf16": r["greedy"]["bf16"],
        },
        "heldout": {
            "note": "chunks = held-out texts (prep_corpus.py, cats.txt index % 10 == 9) tokenised without "
            "special tokens and cut into 512-token windows, each scored from its first token; nll = sum "
            "over tokens 1..n-1 of -log p (nats)",
            "tokens": ev["bf16"]["tokens"],
            "ppl": {k: ev[k]["ppl"] for k in ("bf16", "mxfp4_best2", "mxfp4_ocp")},
            "kl_from_bf16": {k: ev[k]["kl_from_first"] for k in ("mxfp4_best2", "mxfp4_ocp")},
            "chunks": [
                {
                    "doc": ev["chunk_doc"][i],
                    "ids": r["heldout_chunk0_ids"][i],
                    "nll_export": ev["mxfp4_best2"]["chunk_nll"][i],
                    "nll_bf16": ev["bf16"]["chunk_nll"][i],
                    "predicted_tokens": ev["chunk_tokens"][i],
                }
                for i in range(NUM_CHUNKS)
            ],
        },
    }
    with open(dst, "w", encoding="utf-8") as f:
        json.dump(pins, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
