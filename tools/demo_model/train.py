#!/usr/bin/env python3
"""Trains voltllm's demo model on the GPU machine in one call (voltllm issue 8): a byte-level BPE tokenizer
(8192 ids, gpt-oss's pre-tokenizer/decoder structure and harmony special tokens) and a small GptOssForCausalLM
on the Brown Corpus prepared by prep_corpus.py, part of it wrapped as harmony chats.

Master: tokenizer -> token data -> N worker processes (same architecture, different regularisation) sharing
the GPU -> keeps the checkpoint with the lowest held-out loss -> final evaluation of that checkpoint loaded
back with from_pretrained: held-out NLL of the bf16 model (fp32 compute) and of MXFP4 experts (both scale
rules, quantised here exactly as spec §2.3 with E2M1 round-half-to-even), KL(bf16 || MXFP4), greedy
continuations (ids, text, top-2 logit margins) for pinning. Everything lands in --out as it goes.
Usage (on the device): python3 train.py --corpus DIR --out $OUT  (README.md in this folder has the exact call)
"""
import argparse
import copy
import glob
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tarfile
import time

SEQ_LEN = 512
VOCAB_SIZE = 8192
NUM_SPECIAL = 21
ARCH = dict(
    hidden_size=256,
    intermediate_size=256,
    num_hidden_layers=6,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    num_local_experts=8,
    num_experts_per_tok=2,
    sliding_window=128,
    max_position_embeddings=131072,
    rms_norm_eps=1e-5,
    attention_bias=True,
    tie_word_embeddings=False,
    swiglu_limit=7.0,
    initializer_range=0.02,
)
ROPE = {
    "rope_type": "yarn",
    "rope_theta": 150000.0,
    "factor": 32.0,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "truncate": False,
    "original_max_position_embeddings": 4096,
}
# Worker variants: same architecture (so the same checkpoint size), different regularisation.
# Run 1 (3 variants, 16k-token batches, 600 steps = 5.2 epochs each) was still improving at the end (best
# held-out PPL 156.8, dropout 0.1), so run 2 trains longer with 32k-token batches and cosine horizons in epochs.
VARIANTS = [
    dict(name="a", dropout=0.1, weight_decay=0.1, lr=1.5e-3, batch=64, horizon_epochs=9.0),
    dict(name="b", dropout=0.2, weight_decay=0.1, lr=1.5e-3, batch=64, horizon_epochs=13.0),
]
EVAL_EVERY = 25
PATIENCE = 6  # evaluations without improvement before a worker stops
WARMUP = 50
CHAT_SAMPLES = 1300  # about 15% of the training stream

CATEGORY_DESC = {
    "news": "a news report",
    "editorial": "an editorial",
    "reviews": "a review",
    "religion": "a text about religion",
    "hobbies": "a text about a hobby",
    "lore": "a popular article",
    "belles_lettres": "an essay",
    "government": "a government document",
    "learned": "a scholarly text",
    "fiction": "a story",
    "mystery": "a mystery story",
    "science_fiction": "a science fiction story",
    "adventure": "an adventure story",
    "romance": "a romance story",
    "humor": "a humorous story",
}
USER_TEMPLATES = [
    "{p}",
    "Continue this text:\n\n{p}",
    "Continue the story: {p}",
    "Please continue the following passage.\n\n{p}",
    "What comes next? {p}",
    "Write a few sentences that follow this: {p}",
]
ANALYSIS_TEMPLATES = [
    "The user wants me to continue {d}. I should keep the same style and write the next sentences.",
    "This looks like {d}. I will continue it in the same voice.",
    "The text is {d}. Continue it naturally.",
    "The user gives the start of {d} and wants more. I will write what comes next.",
]
CHANNELS_FULL = "# Valid channels: analysis, commentary, final. Channel must be included for every message."
CHANNELS_NO_TOOLS = "# Valid channels: analysis, final. Channel must be included for every message."
IDENTITY = "You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06"

PLAIN_PROMPTS = [
    "The",
    "The jury said that",
    "In the morning, the old man",
    "It was a long time before she",
    "The President of the United States",
    "Science has shown that the",
]
CHAT_PROMPTS = [
    "Continue this text:\n\nThe old house stood at the end of the road.",
    "Tell me about the city council.",
    "Write a few sentences that follow this: She opened the letter and",
]
PIN_DATE = "2026-11-30"


def system_message(date, effort, channels):
    lines = IDENTITY + ("\nCurrent date: " + date if date else "")
    return f"<|start|>system<|message|>{lines}\n\nReasoning: {effort}\n\n{channels}<|end|>"


def render_chat_prompt(user_text, date=PIN_DATE, effort="medium", channels=CHANNELS_FULL):
    return system_message(date, effort, channels) + f"<|start|>user<|message|>{user_text}<|end|><|start|>assistant"


T0 = time.time()


def log(*parts):
    print(f"[{time.time() - T0:6.1f}s]", *parts, flush=True)


def write_json_atomic(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, ensure_ascii=False)
    os.replace(tmp, path)


def load_corpus(corpus_dir):
    out = {}
    for split in ("train", "heldout"):
        with open(os.path.join(corpus_dir, split + ".jsonl"), encoding="utf-8") as f:
            out[split] = [json.loads(line) for line in f]
    return out


# ----------------------------------------------------------------------------------------------- tokenizer


def train_tokenizer(train_docs, structure_path, out_path):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    with open(structure_path, encoding="utf-8") as f:
        structure = json.load(f)
    split = structure["pre_tokenizer"]["pretokenizers"][0]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(split["pattern"]["Regex"]), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - NUM_SPECIAL,
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tok.train_from_iterator((d["text"] for d in train_docs), trainer=trainer)
    ordinary = tok.get_vocab_size()
    specials = [t["content"] for t in sorted(structure["added_tokens"], key=lambda t: t["offset"])]
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    d = json.loads(tok.to_str())
    # Same structure as gpt-oss's tokenizer.json, field for field.
    for key in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
        d[key] = structure[key]
    for key, value in structure["model_flags"].items():
        d["model"][key] = value
    text = json.dumps(d, ensure_ascii=False, indent=1)
    tok = Tokenizer.from_str(text)
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(text)
    ids = {s: tok.token_to_id(s) for s in specials}
    if not (ids[specials[0]] == ordinary and ids[specials[-1]] == ordinary + NUM_SPECIAL - 1):
        log("WARNING: special token ids not contiguous after the ordinary ones:", ids)
    sample = train_docs[0]["text"][:2000]
    if tok.decode(tok.encode(sample, add_special_tokens=False).ids, skip_special_tokens=False) != sample:
        log("WARNING: tokenizer does not round-trip the sample text")
    log(f"tokenizer: {ordinary} ordinary + {NUM_SPECIAL} special = {tok.get_vocab_size()} ids")
    return tok, ids


# ---------------------------------------------------------------------------------------------------- data


def sentences_of(doc):
    return [s for p in doc["paragraphs"] for s in p]


def make_chat_samples(docs, count, rng):
    """Harmony conversations: user gives 1-3 sentences, assistant analyses briefly, final continues 1-3."""
    samples = []
    for _ in range(count):
        doc = rng.choice(docs)
        sents = sentences_of(doc)
        if len(sents) < 4:
            continue
        n_prefix = rng.randint(1, 3)
        n_cont = rng.randint(1, 3)
        start = rng.randrange(0, len(sents) - n_prefix - n_cont + 1)
        prefix = " ".join(sents[start : start + n_prefix])
        cont = " ".join(sents[start + n_prefix : start + n_prefix + n_cont])
        desc = CATEGORY_DESC.get(doc["category"], "a text")
        text = ""
        if rng.random() < 0.85:
            date = f"{rng.randint(2024, 2027)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
            text += system_message(
                date if rng.random() < 0.8 else None,
                rng.choice(["low", "medium", "medium", "high"]),
                CHANNELS_FULL if rng.random() < 0.5 else CHANNELS_NO_TOOLS,
            )
        text += "<|start|>user<|message|>" + rng.choice(USER_TEMPLATES).format(p=prefix) + "<|end|>"
        text += "<|start|>assistant<|channel|>analysis<|message|>" + rng.choice(ANALYSIS_TEMPLATES).format(d=desc)
        text += "<|end|><|start|>assistant<|channel|>final<|message|>" + cont + "<|return|>"
        samples.append(text)
    return samples


def build_data(tok, ids, corpus, path, seed):
    import torch

    rng = random.Random(seed)
    eot = ids["<|endoftext|>"]
    plain = [e.ids for e in tok.encode_batch([d["text"] for d in corpus["train"]], add_special_tokens=False)]
    plain_tokens = sum(len(x) for x in plain)
    # About a quarter of the training tokens are chats (a chat is ~150-200 tokens).
    chats_text = make_chat_samples(corpus["train"], CHAT_SAMPLES, rng)
    chats = [e.ids for e in tok.encode_batch(chats_text, add_special_tokens=True)]
    segments = plain + chats
    rng.shuffle(segments)
    stream = []
    for seg in segments:
        stream.extend(seg)
        stream.append(eot)
    heldout_chunks, chunk_doc = [], []
    for i, e in enumerate(tok.encode_batch([d["text"] for d in corpus["heldout"]], add_special_tokens=False)):
        for s in range(0, len(e.ids), SEQ_LEN):
            chunk = e.ids[s : s + SEQ_LEN]
            if len(chunk) >= 2:
                heldout_chunks.append(chunk)
                chunk_doc.append(corpus["heldout"][i]["id"])
    chat_heldout = [
        e.ids
        for e in tok.encode_batch(
            make_chat_samples(corpus["heldout"], 300, random.Random(seed + 1)), add_special_tokens=True
        )
    ]
    data = {
        "stream": torch.tensor(stream, dtype=torch.int64),
        "heldout_chunks": heldout_chunks,
        "chunk_doc": chunk_doc,
        "chat_heldout": chat_heldout,
    }
    torch.save(data, path)
    info = {
        "train_plain_tokens": plain_tokens,
        "train_chat_samples": len(chats),
        "train_chat_tokens": sum(len(x) for x in chats),
        "train_stream_tokens": len(stream),
        "heldout_tokens": sum(len(c) for c in heldout_chunks),
        "heldout_predicted_tokens": sum(len(c) - 1 for c in heldout_chunks),
        "heldout_chunks": len(heldout_chunks),
        "chat_heldout_samples": len(chat_heldout),
        "heldout_words": sum(len(d["text"].split()) for d in corpus["heldout"]),
        "heldout_bytes": sum(len(d["text"].encode()) for d in corpus["heldout"]),
        "seq_len": SEQ_LEN,
    }
    log("data:", json.dumps(info))
    return info


# --------------------------------------------------------------------------------------------------- model


def make_config(vocab_size, ids, dropout=0.0):
    from transformers import GptOssConfig

    kw = dict(ARCH)
    kw.update(
        vocab_size=vocab_size,
        layer_types=["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(ARCH["num_hidden_layers"])],
        rope_parameters=dict(ROPE),
        attention_dropout=dropout,
        router_aux_loss_coef=0.01,
        output_router_logits=False,
        pad_token_id=None,
        bos_token_id=ids["<|startoftext|>"],
        eos_token_id=ids["<|return|>"],
    )
    return GptOssConfig(**kw)


def set_expert_limits(model):
    for layer in model.model.layers:
        if hasattr(layer.mlp.experts, "limit"):
            layer.mlp.experts.limit = float(model.config.swiglu_limit)


def heldout_eval(models, chunks, device, autocast=False, batch=32, want_kl=False):
    """NLL per chunk (sum, count) of each model; with want_kl also KL(models[0] || models[i]) sums."""
    import torch
    import torch.nn.functional as F

    for m in models:
        m.eval()
    n = len(models)
    nll = [[0.0] * len(chunks) for _ in range(n)]
    cnt = [0] * len(chunks)
    kl_sum = [0.0] * n
    order = sorted(range(len(chunks)), key=lambda i: -len(chunks[i]))
    with torch.no_grad():
        for b in range(0, len(order), batch):
            idx = order[b : b + batch]
            L = max(len(chunks[i]) for i in idx)
            x = torch.zeros((len(idx), L), dtype=torch.int64)
            mask = torch.zeros((len(idx), L - 1), dtype=torch.bool)
            for r, i in enumerate(idx):
                x[r, : len(chunks[i])] = torch.tensor(chunks[i])
                mask[r, : len(chunks[i]) - 1] = True
            x, mask = x.to(device), mask.to(device)
            logps = []
            for m in models:
                with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
                    logits = m(input_ids=x).logits
                logps.append(F.log_softmax(logits[:, :-1].float(), dim=-1))
            tgt = x[:, 1:]
            for k in range(n):
                tok_nll = -logps[k].gather(-1, tgt[..., None])[..., 0] * mask
                per = tok_nll.sum(dim=1).tolist()
                for r, i in enumerate(idx):
                    nll[k][i] = per[r]
                if want_kl and k > 0:
                    kl = (logps[0].exp() * (logps[0] - logps[k])).sum(-1) * mask
                    kl_sum[k] += float(kl.sum())
            for r, i in enumerate(idx):
                cnt[i] = len(chunks[i]) - 1
    total = sum(cnt)
    res = []
    for k in range(n):
        loss = sum(nll[k]) / total
        r = {"loss": loss, "ppl": math.exp(loss), "tokens": total, "chunk_nll": nll[k]}
        if want_kl and k > 0:
            r["kl_from_first"] = kl_sum[k] / total
        res.append(r)
    return res, cnt


# -------------------------------------------------------------------------------------------------- worker


def worker(args):
    import torch
    import torch.nn.functional as F
    from transformers import GptOssForCausalLM

    v = VARIANTS[args.worker]
    wdir = os.path.join(args.work, f"run_{v['name']}")
    os.makedirs(wdir, exist_ok=True)
    torch.manual_seed(args.seed + args.worker)
    gen = torch.Generator().manual_seed(args.seed + 100 + args.worker)
    torch.backends.cuda.matmul.allow_tf32 = True
    device = "cuda"
    data = torch.load(os.path.join(args.work, "data.pt"), weights_only=False)
    ids = json.load(open(os.path.join(args.work, "special_ids.json")))
    vocab = int(json.load(open(os.path.join(args.work, "vocab.json")))["vocab_size"])
    stream = data["stream"]
    chunks = data["heldout_chunks"]
    config = make_config(vocab, ids, v["dropout"])
    try:
        model = GptOssForCausalLM._from_config(config, attn_implementation="eager")
    except Exception as e:
        log(f"worker {v['name']}: _from_config failed ({e!r}); using the constructor")
        config._attn_implementation = "eager"
        model = GptOssForCausalLM(config)
    model = model.to(device=device, dtype=torch.float32)
    set_expert_limits(model)
    p = v["dropout"]

    def drop_hook(module, inp, out):
        if isinstance(out, tuple):
            return (F.dropout(out[0], p, module.training),) + tuple(out[1:])
        return F.dropout(out, p, module.training)

    if p > 0:
        model.model.embed_tokens.register_forward_hook(drop_hook)
        for layer in model.model.layers:
            layer.self_attn.o_proj.register_forward_hook(drop_hook)
            layer.mlp.register_forward_hook(drop_hook)
    n_params = sum(t.numel() for t in model.parameters())
    decay = [t for t in model.parameters() if t.dim() >= 2]
    no_decay = [t for t in model.parameters() if t.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": v["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
        lr=v["lr"],
        betas=(0.9, 0.95),
        eps=1e-8,
    )
    use_aux = True
    max_steps = args.max_steps  # 0: chosen from throughput after the first steps
    curve = []
    best = {"val_loss": float("inf"), "step": -1, "dir": None}
    since_best = 0
    t_start = time.time()
    BATCH = v["batch"]
    tokens_per_step = BATCH * SEQ_LEN
    horizon = int(v["horizon_epochs"] * len(stream) / tokens_per_step)
    train_acc, train_n = 0.0, 0
    step = 0
    stop_reason = "max_steps"
    log(f"worker {v['name']}: {n_params} params, variant {v}")

    def lr_at(s, total):
        if s < WARMUP:
            return v["lr"] * (s + 1) / WARMUP
        frac = min(1.0, (s - WARMUP) / max(1, total - WARMUP))
        return v["lr"] * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))

    while True:
        if max_steps and step >= max_steps:
            break
        if time.time() > args.deadline:
            stop_reason = "deadline"
            break
        model.train()
        starts = torch.randint(0, len(stream) - SEQ_LEN - 1, (BATCH,), generator=gen)
        xy = torch.stack([stream[s : s + SEQ_LEN + 1] for s in starts.tolist()]).to(device, non_blocking=True)
        x, y = xy[:, :-1], xy[:, 1:]
        for g in opt.param_groups:
            g["lr"] = lr_at(step, max_steps or 10**9)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            try:
                out = model(input_ids=x, output_router_logits=use_aux)
            except Exception as e:  # aux loss path unavailable: train without it
                log(f"worker {v['name']}: router aux loss disabled ({type(e).__name__}: {e})")
                use_aux = False
                out = model(input_ids=x, output_router_logits=False)
        loss = F.cross_entropy(out.logits.float().reshape(-1, out.logits.shape[-1]), y.reshape(-1))
        total = loss
        aux = getattr(out, "aux_loss", None) if use_aux else None
        if aux is not None and torch.is_tensor(aux):
            total = loss + config.router_aux_loss_coef * aux
        opt.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        train_acc += float(loss.detach())
        train_n += 1
        if step == 10:
            t10 = time.time()
        if step == 40 and not max_steps:
            rate = 30 / (time.time() - t10)
            budget = args.deadline - time.time()
            max_steps = int(min(args.cap_steps, horizon, 40 + rate * budget * 0.88))
            max_steps -= max_steps % EVAL_EVERY
            log(f"worker {v['name']}: {rate:.2f} steps/s, horizon {horizon} -> max_steps {max_steps}")
        if step % EVAL_EVERY == 0:
            res, _ = heldout_eval([model], chunks, device, autocast=True)
            val = res[0]["loss"]
            point = {
                "step": step,
                "tokens": step * tokens_per_step,
                "epochs": step * tokens_per_step / len(stream),
                "train_loss": train_acc / max(1, train_n),
                "val_loss": val,
                "val_ppl": math.exp(val),
                "lr": opt.param_groups[0]["lr"],
                "elapsed_s": time.time() - t_start,
                "aux": float(aux) if aux is not None and torch.is_tensor(aux) else None,
            }
            train_acc, train_n = 0.0, 0
            curve.append(point)
            log(f"worker {v['name']}: " + json.dumps({k: (round(x, 4) if isinstance(x, float) else x) for k, x in point.items()}))
            if val < best["val_loss"]:
                since_best = 0
                d = os.path.join(wdir, f"best_{step}")
                m16 = copy.deepcopy(model).to(torch.bfloat16)
                m16.config.attention_dropout = 0.0
                m16.config.pad_token_id = ids["<|endoftext|>"]
                m16.save_pretrained(d, max_shard_size="14MB")
                del m16
                old = best["dir"]
                best = {"val_loss": val, "step": step, "dir": d}
                write_json_atomic(os.path.join(wdir, "best.json"), best)
                if old:  # keep the newest two: the master may be copying the previous one
                    prev = sorted(glob.glob(os.path.join(wdir, "best_*")), key=os.path.getmtime)[:-2]
                    for pdir in prev:
                        shutil.rmtree(pdir, ignore_errors=True)
            else:
                since_best += 1
            write_json_atomic(
                os.path.join(wdir, "curve.json"),
                {"variant": v, "params": n_params, "max_steps": max_steps, "curve": curve, "best": best},
            )
            if since_best >= PATIENCE:
                stop_reason = "early_stop"
                break
    write_json_atomic(
        os.path.join(wdir, "curve.json"),
        {
            "variant": v,
            "params": n_params,
            "max_steps": max_steps,
            "curve": curve,
            "best": best,
            "stop_reason": stop_reason,
            "steps_done": step,
            "train_seconds": time.time() - t_start,
        },
    )
    log(f"worker {v['name']}: done ({stop_reason}) at step {step}, best {best}")


# -------------------------------------------------------------------------------------------------- master


def mxfp4_qdq(w, rule):
    """Quantise-dequantise rows of w [..., in] (in % 32 == 0) to MXFP4 (spec §2.3): blocks of 32 along the
    last dim, E8M0 scale 2^(e-2) with e = floor(log2(amax)) (OCP) or the better of e, e+1 (best2), E2M1
    round-half-to-even, saturate at 6. Returns float32 of w's shape."""
    import torch

    shape = w.shape
    b = w.reshape(-1, 32).float()
    amax = b.abs().amax(dim=1)
    _, ex = torch.frexp(amax)
    e0 = ex.to(torch.int32) - 1
    grid = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], device=w.device)

    def qdq(e):
        biased = (e - 2 + 127).clamp(0, 254)
        bits = torch.where(biased > 0, biased << 23, torch.full_like(biased, 1 << 22))
        scale = bits.view(torch.float32)
        y = b / scale[:, None]
        a = y.abs().clamp(max=6.0)
        d = (a[..., None] - grid).abs()
        idx = d.argmin(dim=-1)
        nxt = (idx + 1).clamp(max=7)
        dc = d.gather(-1, idx[..., None])[..., 0]
        dn = d.gather(-1, nxt[..., None])[..., 0]
        idx = torch.where((dn == dc) & (idx % 2 == 1) & (idx < 7), nxt, idx)
        q = grid[idx] * torch.where(y < 0, -1.0, 1.0)
        return q * scale[:, None], biased

    q0, s0 = qdq(e0)
    out, scales = q0, s0
    if rule == "best2":
        q1, s1 = qdq(e0 + 1)
        better = ((q1 - b) ** 2).sum(1) < ((q0 - b) ** 2).sum(1)
        out = torch.where(better[:, None], q1, q0)
        scales = torch.where(better, s1, s0)
    out = torch.where((amax == 0)[:, None], torch.zeros_like(out), out)
    return out.reshape(shape), scales


def quantized_copy(model, rule):
    import torch

    m = copy.deepcopy(model)
    with torch.no_grad():
        for layer in m.model.layers:
            ex = layer.mlp.experts
            # bf16 layout: gate_up_proj [E, H, 2I], down_proj [E, I, H] (input dim first) -> quantise along it.
            for name in ("gate_up_proj", "down_proj"):
                p = getattr(ex, name)
                w = p.data.transpose(1, 2).contiguous()
                q, _ = mxfp4_qdq(w, rule)
                p.data.copy_(q.transpose(1, 2))
    return m


def greedy(model, prompt_ids, max_new, stop_ids, device):
    """Greedy decoding by full recomputation (no KV cache), fp32 logits; argmax ties -> lowest id."""
    import torch

    ids = list(prompt_ids)
    out, margins = [], []
    with torch.no_grad():
        for _ in range(max_new):
            logits = model(input_ids=torch.tensor([ids], device=device)).logits[0, -1].float()
            top = torch.topk(logits, 2)
            nxt = int(top.indices[0])
            margins.append(round(float(top.values[0] - top.values[1]), 5))
            ids.append(nxt)
            out.append(nxt)
            if nxt in stop_ids:
                break
    return out, margins


def export_best(results, work, out_dir):
    """Copies the current best worker checkpoint to out_dir (shards) + extras.tar (configs, index, logs)."""
    best = None
    for v in VARIANTS:
        path = os.path.join(work, f"run_{v['name']}", "best.json")
        if os.path.exists(path):
            b = json.load(open(path))
            if b["dir"] and os.path.isdir(b["dir"]) and (best is None or b["val_loss"] < best["val_loss"]):
                best = dict(b, variant=v["name"])
    if best is None or results.get("exported", {}).get("dir") == best["dir"]:
        return best
    files = sorted(os.listdir(best["dir"]))
    shards = [f for f in files if f.endswith(".safetensors")]
    for old in glob.glob(os.path.join(out_dir, "model*.safetensors")):
        os.remove(old)
    for f in shards:
        shutil.copy(os.path.join(best["dir"], f), os.path.join(out_dir, f))
    make_extras(best["dir"], [f for f in files if not f.endswith(".safetensors")], work, out_dir)
    results["exported"] = best
    log("exported", best)
    return best


def make_extras(ckpt_dir, meta_files, work, out_dir):
    tmp = os.path.join(out_dir, "extras.tar.tmp")
    with tarfile.open(tmp, "w") as tar:
        for f in meta_files:
            tar.add(os.path.join(ckpt_dir, f), arcname="checkpoint/" + f)
        for f in sorted(glob.glob(os.path.join(work, "worker_*.log"))):
            tar.add(f, arcname="logs/" + os.path.basename(f))
    os.replace(tmp, os.path.join(out_dir, "extras.tar"))


def gather_curves(work):
    curves = {}
    for v in VARIANTS:
        path = os.path.join(work, f"run_{v['name']}", "curve.json")
        if os.path.exists(path):
            try:
                curves[v["name"]] = json.load(open(path))
            except json.JSONDecodeError:
                pass
    return curves


def final_eval(results, tok, ids, work, out_dir, args):
    import torch
    from transformers import GptOssForCausalLM

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = "cuda"
    best = results["exported"]
    data = torch.load(os.path.join(work, "data.pt"), weights_only=False)
    model = GptOssForCausalLM.from_pretrained(best["dir"], dtype=torch.float32, attn_implementation="eager").to(device)
    set_expert_limits(model)
    model.eval()
    variants = {"bf16": model, "mxfp4_ocp": quantized_copy(model, "ocp"), "mxfp4_best2": quantized_copy(model, "best2")}
    names = list(variants)
    res, cnt = heldout_eval([variants[n] for n in names], data["heldout_chunks"], device, want_kl=True)
    ev = {"chunk_tokens": cnt, "chunk_doc": data["chunk_doc"]}
    for n, r in zip(names, res):
        ev[n] = r
        log(f"final held-out {n}: loss {r['loss']:.5f} ppl {r['ppl']:.3f}" + (f" KL {r['kl_from_first']:.6f}" if "kl_from_first" in r else ""))
    results["final_heldout"] = ev
    results["heldout_chunk0_ids"] = [data["heldout_chunks"][i] for i in range(4)]
    cres, _ = heldout_eval([variants[n] for n in names], data["chat_heldout"], device, want_kl=True)
    results["final_chat_heldout"] = {n: {k: v for k, v in r.items() if k != "chunk_nll"} for n, r in zip(names, cres)}
    write_json_atomic(os.path.join(out_dir, "results.json"), results)
    stops_chat = [ids["<|return|>"], ids["<|call|>"]]
    stops_plain = [ids["<|endoftext|>"]] + stops_chat
    pins = {}
    for n in names:
        if time.time() > args.hard_deadline:
            log("skipping greedy for", n, "(time)")
            continue
        items = []
        for p in PLAIN_PROMPTS:
            pid = tok.encode(p, add_special_tokens=False).ids
            o, mg = greedy(variants[n], pid, 48, stops_plain, device)
            items.append({"kind": "plain", "prompt": p, "prompt_ids": pid, "ids": o, "margins": mg,
                          "text": tok.decode(o, skip_special_tokens=False)})
        for u in CHAT_PROMPTS:
            prompt = render_chat_prompt(u)
            pid = tok.encode(prompt, add_special_tokens=True).ids
            o, mg = greedy(variants[n], pid, 120, stops_chat, device)
            items.append({"kind": "chat", "prompt": prompt, "prompt_ids": pid, "ids": o, "margins": mg,
                          "text": tok.decode(o, skip_special_tokens=False)})
        pins[n] = items
        results["greedy"] = pins
        write_json_atomic(os.path.join(out_dir, "results.json"), results)
        for it in items:
            log(f"greedy {n} [{it['kind']}] {it['prompt'][-60:]!r} -> {it['text']!r}")


def master(args):
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.work, exist_ok=True)
    args.deadline = T0 + args.train_seconds
    args.hard_deadline = T0 + args.total_seconds
    results = {"args": {k: v for k, v in vars(args).items()}, "arch": ARCH, "rope": ROPE, "variants": VARIANTS,
               "seq_len": SEQ_LEN, "eval_every": EVAL_EVERY, "patience": PATIENCE, "warmup": WARMUP,
               "chat_samples": CHAT_SAMPLES}
    try:
        import tokenizers
        import torch
        import transformers

        results["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__,
                               "tokenizers": tokenizers.__version__, "gpu": torch.cuda.get_device_name(0)}
        log(results["versions"])
    except Exception as e:  # informational only
        log("versions:", e)
    corpus = load_corpus(args.corpus)
    tok_path = os.path.join(args.out, "tokenizer.json")
    tok, ids = train_tokenizer(corpus["train"], args.structure, tok_path)
    vocab = tok.get_vocab_size()
    vocab = ((vocab + 63) // 64) * 64
    results["special_ids"] = ids
    results["vocab_size"] = vocab
    json.dump(ids, open(os.path.join(args.work, "special_ids.json"), "w"))
    json.dump({"vocab_size": vocab}, open(os.path.join(args.work, "vocab.json"), "w"))
    results["data"] = build_data(tok, ids, corpus, os.path.join(args.work, "data.pt"), args.seed)
    write_json_atomic(os.path.join(args.out, "results.json"), results)

    procs = []
    for k in range(len(VARIANTS)):
        if args.only and VARIANTS[k]["name"] not in args.only.split(","):
            continue
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", str(k), "--work", args.work,
               "--seed", str(args.seed), "--deadline", str(args.deadline), "--max-steps", str(args.max_steps),
               "--cap-steps", str(args.cap_steps)]
        lf = open(os.path.join(args.work, f"worker_{k}.log"), "w")
        env = dict(os.environ, OMP_NUM_THREADS="4", PYTHONUNBUFFERED="1")
        procs.append((subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT, env=env), lf))
    printed = [0] * len(VARIANTS)
    while True:
        alive = [p.poll() is None for p, _ in procs]
        for k in range(len(VARIANTS)):  # relay worker logs
            path = os.path.join(args.work, f"worker_{k}.log")
            if not os.path.exists(path):
                continue
            with open(path, "rb") as f:
                f.seek(printed[k])
                raw = f.read()
            cut = raw.rfind(b"\n") + 1
            printed[k] += cut
            for line in raw[:cut].decode("utf-8", errors="replace").splitlines():
                print(f"  w{k}| {line}", flush=True)
        results["curves"] = gather_curves(args.work)
        try:
            export_best(results, args.work, args.out)
        except Exception as e:
            log("export failed (will retry):", repr(e))
        write_json_atomic(os.path.join(args.out, "results.json"), results)
        if not any(alive):
            break
        if time.time() > args.deadline + 45:
            log("workers past deadline: terminating")
            for p, _ in procs:
                if p.poll() is None:
                    p.terminate()
        time.sleep(10)
    results["worker_returncodes"] = [p.returncode for p, _ in procs]
    results["curves"] = gather_curves(args.work)
    results.pop("exported", None)
    export_best(results, args.work, args.out)
    write_json_atomic(os.path.join(args.out, "results.json"), results)
    log("training phase done; best:", results.get("exported"))
    try:
        final_eval(results, tok, ids, args.work, args.out, args)
    except Exception as e:
        import traceback

        traceback.print_exc()
        results["final_error"] = repr(e)
    results["total_seconds"] = time.time() - T0
    write_json_atomic(os.path.join(args.out, "results.json"), results)
    best_dir = (results.get("exported") or {}).get("dir")
    if best_dir:
        make_extras(best_dir, [f for f in os.listdir(best_dir) if not f.endswith(".safetensors")], args.work, args.out)
    log("all done")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus"))
    ap.add_argument("--structure", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "gptoss_tokenizer_structure.json"))
    ap.add_argument("--out", default="out/demo-train")
    ap.add_argument("--work", default="/tmp/demo-train")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--train-seconds", type=float, default=390.0, help="workers stop this long after start")
    ap.add_argument("--total-seconds", type=float, default=470.0, help="greedy pins are skipped after this")
    ap.add_argument("--max-steps", type=int, default=0, help="0: from measured throughput (recorded)")
    ap.add_argument("--cap-steps", type=int, default=3000)
    ap.add_argument("--only", default="", help="comma-separated variant names to train (default: all)")
    ap.add_argument("--worker", type=int, default=-1)
    ap.add_argument("--deadline", type=float, default=0.0)
    args = ap.parse_args()
    if args.worker >= 0:
        worker(args)
    else:
        master(args)


if __name__ == "__main__":
    main()
