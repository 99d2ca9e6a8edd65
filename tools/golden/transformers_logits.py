#!/usr/bin/env python3
"""Golden logits from Hugging Face transformers' GptOssForCausalLM (the independent reference).

Runs on the GPU machine (its python3 has torch and transformers 5.17), on the CPU there for exact fp32
(no TF32): eager attention, every parameter in float32 (bf16 checkpoint values widen exactly; MXFP4
experts are dequantized by transformers itself, exactly). Writes, per checkpoint, the logits of each
prompt concatenated along rows as float32 .npy and a JSON with the prompts, their start positions and
row offsets, plus the hidden states after every layer for one prompt (for layer-by-layer debugging).
With --trace, also every named intermediate of that prompt under DIR/<checkpoint>.trace/ as
<name>.npy (no layer) or L<layer>.<name>.npy, float32 [T, cols], named as our forward pass names them
(model/forward.cc; `voltllm logits --trace` writes the same files): embedding, attn_norm, q and k
(after RoPE), v, attn (the heads before o_proj), attn_out (o_proj + bias), resid_attn, mlp_norm,
resid_mlp, final_norm. Taken with forward hooks and a wrapper around transformers' apply_rotary_pos_emb.

Traps handled (spec/gpt-oss.md §8): the experts' swiglu limit is a module attribute, set from the config;
the model is never cast with .to(bfloat16) (that would round the RoPE inv_freq buffer).

With --fp16-control, also runs every prompt with the model in float16 on the GPU (as an fp16 engine
would carry the residual) and records in the JSON how many logits came out non-finite, and, from the
fp32 run, the largest |residual| after each layer: the negative control of the fp16 stress model
(tools/golden/make_stress_model.py), whose f32 residual passes fp16's 65,504.

usage: transformers_logits.py --out DIR --vocab-size V [--trace] [--fp16-control] CKPT_DIR [CKPT_DIR ...]
"""
import argparse
import copy
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


def fp16_control(model, prompts):
    """The fp32 run's max |residual| after each layer (prompt 2), then the same prompts in float16 on
    the GPU: the fraction of non-finite logits per prompt."""
    out = {}
    p = prompts[2]
    ids = torch.tensor([p["ids"]])
    pos = torch.arange(p["start_pos"], p["start_pos"] + len(p["ids"]))[None]
    with torch.no_grad():
        hs = model(input_ids=ids, position_ids=pos, use_cache=False, output_hidden_states=True).hidden_states
    out["fp32_max_abs_residual_per_layer"] = [float(h.abs().max()) for h in hs[1:]]
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    half = copy.deepcopy(model).to(device=dev, dtype=torch.float16)
    fracs = []
    for q in prompts:
        ids = torch.tensor([q["ids"]], device=dev)
        pos = torch.arange(q["start_pos"], q["start_pos"] + len(q["ids"]), device=dev)[None]
        with torch.no_grad():
            logits = half(input_ids=ids, position_ids=pos, use_cache=False).logits.float()
        fracs.append(float((~torch.isfinite(logits)).float().mean()))
    out["fp16_nonfinite_fraction_per_prompt"] = fracs
    out["fp16_device"] = dev
    del half
    return out


def capture_trace(model):
    """Hooks that fill a dict name -> [T, cols] float32 array for one forward call; returns (dict, undo)."""
    from transformers.models.gpt_oss import modeling_gpt_oss as mg
    got, handles = {}, []
    layer_of = {}

    def put(name, t):
        got[name] = t.detach().reshape(t.shape[-2] if t.dim() == 3 else t.shape[0], -1).float().numpy().copy()

    def flat_heads(t):  # [B, heads, T, d] -> [T, heads * d]
        return t[0].transpose(0, 1).reshape(t.shape[2], -1)

    handles.append(model.model.embed_tokens.register_forward_hook(lambda m, i, o: put("embedding", o[0])))
    for l, layer in enumerate(model.model.layers):
        p = f"L{l}."
        layer_of[id(layer.self_attn)] = l
        handles.append(layer.input_layernorm.register_forward_hook(lambda m, i, o, p=p: put(p + "attn_norm", o[0])))
        handles.append(layer.self_attn.v_proj.register_forward_hook(lambda m, i, o, p=p: put(p + "v", o[0])))
        handles.append(layer.self_attn.o_proj.register_forward_pre_hook(lambda m, i, p=p: put(p + "attn", i[0][0])))
        handles.append(layer.self_attn.o_proj.register_forward_hook(lambda m, i, o, p=p: put(p + "attn_out", o[0])))
        handles.append(layer.post_attention_layernorm.register_forward_pre_hook(
            lambda m, i, p=p: put(p + "resid_attn", i[0][0])))
        handles.append(layer.post_attention_layernorm.register_forward_hook(
            lambda m, i, o, p=p: put(p + "mlp_norm", o[0])))
        handles.append(layer.register_forward_hook(
            lambda m, i, o, p=p: put(p + "resid_mlp", (o[0] if isinstance(o, tuple) else o)[0])))
    handles.append(model.model.norm.register_forward_hook(lambda m, i, o: put("final_norm", o[0])))
    # q and k after RoPE: the attention module calls the module-level apply_rotary_pos_emb once per
    # layer, in layer order.
    original = mg.apply_rotary_pos_emb
    calls = [0]

    def wrapped(q, k, *args, **kwargs):
        q2, k2 = original(q, k, *args, **kwargs)
        l = calls[0]
        calls[0] += 1
        got[f"L{l}.q"] = flat_heads(q2).detach().float().numpy().copy()
        got[f"L{l}.k"] = flat_heads(k2).detach().float().numpy().copy()
        return q2, k2

    mg.apply_rotary_pos_emb = wrapped

    def undo():
        mg.apply_rotary_pos_emb = original
        for h in handles:
            h.remove()

    return got, undo


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--vocab-size", type=int, required=True, help="prompt ids are drawn below this")
    ap.add_argument("--trace", action="store_true", help="also write the named intermediates of one prompt")
    ap.add_argument("--fp16-control", action="store_true", help="also run in float16 on the GPU (negative control)")
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
    meta["trace_prompt"] = TRACE_PROMPT
    for ckpt in a.ckpts:
        name = os.path.basename(os.path.normpath(ckpt))
        model, how = load(ckpt)
        rows, offsets = [], []
        off = 0
        for i, p in enumerate(prompts):
            ids = torch.tensor([p["ids"]])
            pos = torch.arange(p["start_pos"], p["start_pos"] + len(p["ids"]))[None]
            traced, undo = capture_trace(model) if (a.trace and i == TRACE_PROMPT) else (None, None)
            with torch.no_grad():
                out = model(input_ids=ids, position_ids=pos, use_cache=False, output_hidden_states=(i == TRACE_PROMPT))
            if traced is not None:
                undo()
                tdir = os.path.join(a.out, f"{name}.trace")
                os.makedirs(tdir, exist_ok=True)
                for key, arr in traced.items():
                    np.save(os.path.join(tdir, f"{key}.npy"), arr.astype(np.float32))
            logits = out.logits[0].float().numpy()
            rows.append(logits)
            offsets.append(off)
            off += logits.shape[0]
            if i == TRACE_PROMPT:
                hs = torch.stack([h[0] for h in out.hidden_states]).float().numpy()  # [L+1, T, H]
                np.save(os.path.join(a.out, f"{name}.hidden.npy"), hs)
        np.save(os.path.join(a.out, f"{name}.logits.npy"), np.concatenate(rows, 0).astype(np.float32))
        meta["checkpoints"][name] = {"load": how, "row_offsets": offsets}
        if a.fp16_control:
            meta["checkpoints"][name]["fp16_control"] = fp16_control(model, prompts)
        print(name, how, "rows", off, file=sys.stderr)
    json.dump(meta, open(os.path.join(a.out, "golden.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
