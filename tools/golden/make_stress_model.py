#!/usr/bin/env python3
"""Turns a `voltllm make-model` checkpoint into the fp16 stress model (issue 15: fp16 safety).

Every layer's expert down-projection bias is set to +BOOST in a few hidden dimensions for every expert,
so each MoE block adds about BOOST (the routing weights sum to 1) to those dimensions of the residual
stream: after L layers the f32 residual reaches about L x BOOST (36 x 3000 = 108,000, past fp16's 65,504
by layer 22, like the real gpt-oss-120b whose residual passes 65,504 around layer 35), while every single
op output stays inside fp16 (a MoE output of about BOOST, RMSNorm outputs bounded by sqrt(H / dims)).
An engine that keeps the residual in f32 stays finite and matches fp32; one that carries it in fp16
overflows to inf and then NaN (transformers in fp16 is the negative control).

Standard library only (edits the safetensors bytes in place). The recipe (tests/data/README.md):
  voltllm make-model --preset tiny --layers 36 --seed 7 --max-shard-bytes 100000000 --out DIR
  python3 tools/golden/make_stress_model.py DIR --boost 3000 --dims 3,17,40,61
usage: make_stress_model.py DIR [--boost B] [--dims i,j,...]
"""
import argparse
import glob
import json
import os
import struct


def bf16_bytes(x):
    f = struct.unpack("<I", struct.pack("<f", x))[0]
    f += 0x7FFF + ((f >> 16) & 1)  # round to nearest even
    return struct.pack("<H", (f >> 16) & 0xFFFF)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--boost", type=float, default=3000.0)
    ap.add_argument("--dims", default="3,17,40,61")
    a = ap.parse_args()
    dims = [int(d) for d in a.dims.split(",")]
    cfg = json.load(open(os.path.join(a.dir, "config.json")))
    hidden, experts = cfg["hidden_size"], cfg["num_local_experts"]
    value = bf16_bytes(a.boost)
    edited = 0
    for path in sorted(glob.glob(os.path.join(a.dir, "*.safetensors"))):
        with open(path, "r+b") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
            base = 8 + n
            for name, t in header.items():
                if not name.endswith("mlp.experts.down_proj_bias"):
                    continue
                assert t["dtype"] == "BF16" and t["shape"] == [experts, hidden], (name, t)
                start = base + t["data_offsets"][0]
                for e in range(experts):
                    for d in dims:
                        f.seek(start + 2 * (e * hidden + d))
                        f.write(value)
                edited += 1
    assert edited == cfg["num_hidden_layers"], f"edited {edited} down_proj_bias tensors"
    meta = {"stress": {"boost": a.boost, "dims": dims, "layers": edited,
                       "expected_residual": a.boost * edited}}
    json.dump(meta, open(os.path.join(a.dir, "stress.json"), "w"), indent=1)
    print(f"{a.dir}: down_proj_bias of {edited} layers boosted by {a.boost} in dims {dims}")


if __name__ == "__main__":
    main()
