#!/usr/bin/env python3
"""Golden logits from Hugging Face transformers' GptOssForCausalLM (the independent reference).

Runs on the GPU machine (its python3 has torch and transformers 5.17), on the CPU there for exact fp32
(no TF32): eager attention, every parameter in float32 (bf16 checkpoint values widen exactly; MXFP4
experts are dequantized by transformers itself, exactly). Writes, per checkpoint, the logits of each
prompt concatenated along rows as float32 .npy and a JSON with the prompts, their start positions and
row offsets, plus the hidden states after every layer for one prompt (for layer-by-layer debugging).

Traps handled (spec/gpt-oss.md §8): the experts' swiglu limit is a module attribute, set from the config;
the model is never cast with .to(bfloat16) (that would round the RoPE inv_freq buffer).

usage: transformers_logits.py --out DIR --vocab-size V CKPT_DIR [CKPT_DIR ...]
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
import transformers
from transformers import GptOssForCausalLM

PROMPTS = [  # (length, start position, seed)
    (12, 0, 1),
    (50, 0, 2),
    (300, 0, 3),
    (20, 100000, 4),
]
TRACE_PROMPT = 1


def load(ckpt):
    cfg = json.load(open(os.path.join(ckpt, "config.json")))
    kwargs = dict(dtype=torch.float32, attn_implementation="eager")
    how = "from_pretrained"
    if "quantization_config" in cfg:
        from transformers import Mxfp4Config
        kwargs["quantization_config"] = Mxfp4Config(dequantize=True)
        how = "from_pretrained(Mxfp4Config(dequantize=True))"
    model = GptOssForCausalLM.from_pretrained(ckpt, device_map="cpu", **kwargs)
    with torch.no_grad():
        for p in model.parameters():
            p.data = p.data.float()
    limit = float(cfg.get("swiglu_limit", 7.0))
    for layer in model.model.layers:
        layer.mlp.experts.limit = limit
    model.eval()
    return model, how


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--vocab-size", type=int, required=True, help="prompt ids are drawn below this")
    ap.add_argument("ckpts", nargs="+")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    torch.set_num_threads(8)
    meta = {"transformers": transformers.__version__, "torch": torch.__version__, "checkpoints": {}}
    prompts = []
    for n, start, seed in PROMPTS:
        g = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, a.vocab_size, (n,), generator=g).tolist()
        prompts.append({"ids": ids, "start_pos": start})
    meta["prompts"] = prompts
    for ckpt in a.ckpts:
        name = os.path.basename(os.path.normpath(ckpt))
        model, how = load(ckpt)
        rows, offsets = [], []
        off = 0
        for i, p in enumerate(prompts):
            ids = torch.tensor([p["ids"]])
            pos = torch.arange(p["start_pos"], p["start_pos"] + len(p["ids"]))[None]
            with torch.no_grad():
                out = model(input_ids=ids, position_ids=pos, use_cache=False, output_hidden_states=(i == TRACE_PROMPT))
            logits = out.logits[0].float().numpy()
            rows.append(logits)
            offsets.append(off)
            off += logits.shape[0]
            if i == TRACE_PROMPT:
                hs = torch.stack([h[0] for h in out.hidden_states]).float().numpy()  # [L+1, T, H]
                np.save(os.path.join(a.out, f"{name}.hidden.npy"), hs)
        np.save(os.path.join(a.out, f"{name}.logits.npy"), np.concatenate(rows, 0).astype(np.float32))
        meta["checkpoints"][name] = {"load": how, "row_offsets": offsets}
        print(name, how, "rows", off, file=sys.stderr)
    json.dump(meta, open(os.path.join(a.out, "golden.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
