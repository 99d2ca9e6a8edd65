# Checks voltllm make-model checkpoints with transformers (an independent loader and MXFP4 dequantizer)
# on the GPU machine; results are recorded in docs/quantization.md. DIR holds tiny_mx/ and tiny_bf/
# (`voltllm make-model --preset tiny --seed 5 [--layout bf16]`), the voltllm binary and its libspdlog/libfmt.
# Usage: OUT=<dir> python3 tools/quant/check_transformers.py DIR   (writes $OUT/report.json)
import json, os, sys, time, traceback, subprocess
import torch

OUT = os.environ["OUT"]
D = sys.argv[1] if len(sys.argv) > 1 else ".dev-quant"
report = {}


def save():
    with open(f"{OUT}/report.json", "w") as f:
        json.dump(report, f, indent=1)


def step(name):
    def deco(fn):
        t0 = time.time()
        try:
            report[name] = fn()
        except Exception as e:
            report[name] = {"error": repr(e), "trace": traceback.format_exc()[-3000:]}
        report[name + "_seconds"] = round(time.time() - t0, 1)
        print(name, json.dumps(report[name])[:2000], flush=True)
        save()
        return fn
    return deco


import transformers
from transformers import GptOssForCausalLM, Mxfp4Config
from safetensors.torch import load_file
report["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__}

FP4 = torch.tensor([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], dtype=torch.float32)


def spec_decode(blocks, scales):
    # spec §2.3: [E, out, G, 16] u8 + [E, out, G] -> [E, out, G*32]; even element = low nibble.
    lo = FP4[(blocks & 0xF).long()]
    hi = FP4[(blocks >> 4).long()]
    v = torch.stack([lo, hi], dim=-1).reshape(*blocks.shape[:-1], 32)
    v = v * torch.exp2(scales.to(torch.float32) - 127).unsqueeze(-1)
    return v.reshape(blocks.shape[0], blocks.shape[1], -1)


def load(path, mx, dtype, device):
    kw = dict(dtype=dtype, attn_implementation="eager", output_loading_info=True)
    if mx:
        kw["quantization_config"] = Mxfp4Config(dequantize=True)
    m, info = GptOssForCausalLM.from_pretrained(path, device_map=device, **kw)
    return m.eval(), {k: sorted(v)[:20] if isinstance(v, (list, set)) else str(v) for k, v in info.items()}


ORIENT = {"in_out": True}
TOKENS = [(t * 7919 + 13) % 1000 for t in range(24)]


@step("tiny")
def tiny():
    r = {}
    mb, r["bf16_info"] = load(f"{D}/tiny_bf", False, torch.float32, "cuda")
    mm, r["mx_info"] = load(f"{D}/tiny_mx", True, torch.float32, "cuda")
    raw = {}
    for f in os.listdir(f"{D}/tiny_mx"):
        if f.endswith(".safetensors"):
            raw.update(load_file(f"{D}/tiny_mx/{f}"))
    layers = []
    for l in range(4):
        eb, em = mb.model.layers[l].mlp.experts, mm.model.layers[l].mlp.experts
        d = {}
        for p in ["gate_up_proj", "down_proj"]:
            wb = getattr(eb, p).detach().float().cpu()
            wm = getattr(em, p).detach().float().cpu()
            spec = spec_decode(raw[f"model.layers.{l}.mlp.experts.{p}_blocks"],
                               raw[f"model.layers.{l}.mlp.experts.{p}_scales"])  # [E, out, in]
            if p == "gate_up_proj":
                # transformers' in-memory layout: [E, in, out] (as saved) or [E, out, in].
                ORIENT["in_out"] = list(wm.shape) == [spec.shape[0], spec.shape[2], spec.shape[1]]
            if not ORIENT["in_out"]:
                wb, wm = wb.transpose(1, 2), wm.transpose(1, 2)
            spec = spec.transpose(1, 2)  # now everything [E, in, out]
            E, n_in, n_out = wb.shape
            blk = wb.transpose(1, 2).reshape(E, n_out, n_in // 32, 32)
            amax = blk.abs().amax(-1, keepdim=True)
            err = (wm.transpose(1, 2).reshape(E, n_out, n_in // 32, 32) - blk).abs()
            d[p] = {"shape_hf": list(wm.shape), "hf_equals_spec_decode": bool(torch.equal(wm, spec)),
                    "rel_rmse_vs_bf16": float(((wm - wb) ** 2).sum().sqrt() / (wb ** 2).sum().sqrt()),
                    "max_err_over_amax": float((err / amax).max())}
        layers.append(d)
    r["experts"] = layers
    ids = torch.tensor([TOKENS], device="cuda")
    with torch.no_grad():
        lb = mb(ids).logits[0].float().cpu()
        lm = mm(ids).logits[0].float().cpu()
    r["logits_std_bf16"] = float(lb.std())
    r["logits_std_mx"] = float(lm.std())
    r["bf16_vs_mx_logits_maxdiff"] = float((lb - lm).abs().max())
    torch.save({"tokens": TOKENS, "logits_mx": lm, "logits_bf16": lb}, f"{OUT}/tiny_logits.pt")
    with open(f"{OUT}/tiny_logits_mx.json", "w") as f:
        json.dump({"tokens": TOKENS, "last": lm[-1].tolist(), "first": lm[0].tolist(),
                   "mid": lm[12].tolist()}, f)
    return r


env = dict(os.environ, LD_LIBRARY_PATH=f"{os.getcwd()}/{D}")


def run(cmd, timeout):
    t0 = time.time()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    return {"rc": p.returncode, "seconds": round(time.time() - t0, 1), "tail": (p.stdout + p.stderr)[-1500:]}


@step("make20b")
def make20b():
    os.chmod(f"{D}/voltllm", 0o755)
    import resource
    r = run([f"{D}/voltllm", "make-model", "--preset", "20b", "--seed", "1", "--no-tokenizer",
             "--out", "/tmp/m20"], 240)
    r["max_rss_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    r["files"] = sorted(os.listdir("/tmp/m20")) if os.path.isdir("/tmp/m20") else []
    r["bytes"] = sum(os.path.getsize(f"/tmp/m20/{f}") for f in r["files"])
    return r


@step("hf20b")
def hf20b():
    if not os.path.exists("/tmp/m20/config.json"):
        return "skipped"
    r = {}
    m, r["info"] = load("/tmp/m20", True, torch.bfloat16, "cuda")
    from safetensors import safe_open
    shard = json.load(open("/tmp/m20/model.safetensors.index.json"))["weight_map"][
        "model.layers.23.mlp.experts.down_proj_blocks"]
    with safe_open("/tmp/m20/" + shard, framework="pt") as f:
        spec = spec_decode(f.get_tensor("model.layers.23.mlp.experts.down_proj_blocks")[:4],
                           f.get_tensor("model.layers.23.mlp.experts.down_proj_scales")[:4])
    if ORIENT["in_out"]:
        spec = spec.transpose(1, 2)
    w = m.model.layers[23].mlp.experts.down_proj.detach()[:4].float().cpu()
    r["down23_shape"] = list(m.model.layers[23].mlp.experts.down_proj.shape)
    r["down23_equals_spec_decode_bf16"] = bool(torch.equal(w, spec.to(torch.bfloat16).float()))
    ids = torch.tensor([[200006, 1428, 200008, 13225, 200007, 200006, 173781, 200005]], device="cuda")
    with torch.no_grad():
        lg = m(ids).logits[0].float()
    r["logits_finite"] = bool(torch.isfinite(lg).all())
    r["logits_std_last"] = float(lg[-1].std())
    r["logits_max_last"] = float(lg[-1].max())
    r["num_params"] = sum(p.numel() for p in m.parameters())
    return r


save()
