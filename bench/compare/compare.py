#!/usr/bin/env python3
"""bench/compare/compare.py: the figures of bench/compare (issue 16) in one place, called by run_20b.sh (call A)
and serve_20b.sh (call B). Every result is one JSON line:
  {"figure", "engine", "value", "unit", "repeats": [...], "command", "versions", ...}
with value = the median of the repeats. Subcommands (standard library only, except the kld-* ones: numpy):

  ids N [SEED]                  N token ids, comma-separated: a fixed pseudo-random sequence of ids 10..99 (byte
                                tokens in the demo tokenizer and in gpt-oss's; short enough for 32k on one argv)
  text-of-heldout JSONL N OUT   the first N characters of the held-out Brown texts (tools/demo_model/prep_corpus.py)
  llama-bench JSON CMD VERSIONS [ubatch]  llama-bench -o json rows -> figure rows (pp -> prefill_N, tg128 @ depth
                                d -> decode_b1_ctx{128|d}; with "ubatch", each name ends in _ub{n_ubatch}); the
                                value is the median of llama-bench's samples_ts
  gen-seconds LOG               the seconds of `voltllm generate`'s throughput line (its last) in LOG
  gen-seconds-runs LOG          "SECONDS GENERATED" of each `run K/N:` line of `voltllm generate --repeat N`, in order
  gen TSV CMD VERSIONS          voltllm generate timings (N, max_tokens, rep, seconds, rc per line) -> rows:
                                prefill_N = N / t(N, 1); decode_b1_ctxX = 128 / (t(N, 129) - t(N, 1)), per repeat
  serve JSONS... --engine E --figure F --command C --versions V [--field output_throughput|ttft]
                                voltllm bench serve result files (one per repeat) -> one row
  kld-write --model-logits NPY... --tokens-from BASE.kld --out V.kld
                                voltllm's logits of each chunk -> llama.cpp's --kl-divergence-base file, byte
                                layout and 16-bit quantization of tools/perplexity/perplexity.cpp (header copied)
  kld-check BASE.kld NPY...     KL(base file || logits) as llama-perplexity --kl-divergence computes it (numpy)
  kld-parse LOG --engine E --base B --command C --versions V
                                llama-perplexity --kl-divergence output -> KL / same-top / PPL rows
  kld-tokens BASE.kld K [BOS]   the ids of chunk K of a base file (comma-separated; the first replaced by BOS
                                when given: llama.cpp does so where its vocabulary adds a BOS)
  kld-npy --base NPY... --model NPY... --ids WINDOWS.json
                                KL(base || model), same-top rate, both perplexities from two sets of voltllm
                                logits of the same windows (float64, unquantized; scored as perplexity.cpp)
  windows TOKENS.json N_CTX N_CHUNK OUT
                                the first N_CHUNK windows of N_CTX ids of a `voltllm tokenize` output
  gguf-bos GGUF                 "ADD_BOS BOS_ID" of a GGUF (gguf-py of the llama.cpp source on sys.path)
  table A.jsonl B.jsonl         the markdown rows of docs/performance.md (see table_rows)
"""
import json
import math
import re
import statistics
import struct
import sys


def emit(row):
    print(json.dumps(row), flush=True)


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def spread(xs):
    """(max - min) / median of the repeats: the noise figure of a row."""
    xs = [x for x in xs if x is not None]
    if len(xs) < 2 or not statistics.median(xs):
        return None
    return round((max(xs) - min(xs)) / statistics.median(xs), 4)


def engine_label(engine, versions):
    """voltllm's volta-ptx build (the Volta kernels, compute_70 PTX JIT-compiled on a newer GPU) is a smoke row of
    its own beside the cuda13 rows: the label says which, from the versions string (bundle MANIFEST's preset)."""
    return "voltllm (volta-ptx)" if engine == "voltllm" and " volta-ptx " in f" {versions} " else engine


def row(figure, engine, repeats, unit, command, versions, **extra):
    engine = engine_label(engine, versions)
    r = {"figure": figure, "engine": engine, "value": med(repeats), "unit": unit,
         "repeats": [round(x, 3) if isinstance(x, float) else x for x in repeats], "spread": spread(repeats),
         "command": command, "versions": versions}
    r.update(extra)
    return r


# ---------------------------------------------------------------- prompts
def cmd_ids(n, seed=0):
    """Ids 10..99 (two digits: 32,768 of them fit one command-line argument, < 128 KiB)."""
    n, seed = int(n), int(seed)
    x = 2463534242 + seed
    ids = []
    for _ in range(n):  # xorshift32: the same ids in every run
        x ^= (x << 13) & 0xFFFFFFFF
        x ^= x >> 17
        x ^= (x << 5) & 0xFFFFFFFF
        ids.append(10 + x % 90)
    print(",".join(map(str, ids)))


def cmd_text_of_heldout(path, n, out):
    text = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            text.append(json.loads(line)["text"])
            if sum(map(len, text)) >= int(n):
                break
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n\n".join(text)[: int(n)] + "\n")


# ---------------------------------------------------------------- llama-bench, voltllm generate, bench serve
def cmd_llama_bench(path, cmd, versions, tag=""):
    """Rows from `llama-bench -o json`. tag "ubatch": the figure names end in _ub{n_ubatch} (a sweep of -ub beside
    the main rows, which run llama.cpp's default, 512)."""
    try:
        rows = json.load(open(path))
    except Exception as e:  # noqa: BLE001 (one error row instead of a traceback)
        emit({"figure": "llama_bench", "engine": "llama.cpp", "value": None, "error": str(e), "command": cmd})
        return
    for r in rows:
        d = r.get("n_depth", 0) or 0
        if r.get("n_gen", 0) == 0:
            fig = f"prefill_{r['n_prompt']}" + (f"_at{d}" if d else "")
        else:
            fig = f"decode_b1_ctx{d if d else r['n_gen']}"
        if tag == "ubatch":
            fig += f"_ub{r.get('n_ubatch', 'default')}"
        emit(row(fig, "llama.cpp", r.get("samples_ts") or [r.get("avg_ts")], "tok/s", cmd, versions,
                 test=f"{'pp' + str(r['n_prompt']) if not r.get('n_gen') else 'tg' + str(r['n_gen'])}"
                 + (f" @ d{d}" if d else ""), model_bytes=r.get("model_size"), build=r.get("build_commit")))


def parse_gen_seconds(log):
    m = None
    for line in open(log, errors="replace"):
        m = re.search(r"(\d+) prompt tokens, (\d+) generated tokens in ([0-9.]+) s", line) or m
    return float(m.group(3)) if m else None


def cmd_gen_seconds(log):
    s = parse_gen_seconds(log)
    print("" if s is None else s)


def cmd_gen_seconds_runs(log):
    """The seconds and generated tokens of each `run K/N:` line of `voltllm generate --repeat N`, in run order,
    "SECONDS GENERATED" a line (a run that failed prints its line too, with fewer tokens)."""
    runs = {}
    for line in open(log, errors="replace"):
        m = re.search(r"run (\d+)/\d+: (\d+) prompts?, (\d+) prompt tokens, (\d+) generated tokens in ([0-9.]+) s", line)
        if m:
            runs[int(m.group(1))] = (float(m.group(5)), int(m.group(4)))
    for k in sorted(runs):
        print(*runs[k])


def cmd_gen(tsv, cmd, versions):
    t = {}  # (n, max_tokens) -> {rep: seconds}
    for line in open(tsv):
        # "N MAX_TOKENS REP SECONDS RC"; SECONDS is empty when the process printed no time (killed, failed).
        f = line.rstrip("\n").split(" ")
        if len(f) != 5:
            continue
        n, mt, rep, sec, rc = f
        if rc == "0" and sec not in ("", "None"):
            t.setdefault((int(n), int(mt)), {})[int(rep)] = float(sec)
    for (n, mt), reps in sorted(t.items()):
        if mt != 1:
            continue
        if n >= 64:
            per = [n / s for _, s in sorted(reps.items())]
            emit(row(f"prefill_{n}", "voltllm", per, "tok/s", cmd.replace("{N}", str(n)).replace("{M}", "1"),
                     versions, note="N / time of generate with --max-tokens 1 (one prefill step plus one sample)"))
        long = t.get((n, 129))
        if not long:
            continue
        per = [128 / (long[k] - reps[k]) for k in sorted(reps) if k in long and long[k] > reps[k]]
        ctx = 128 if n <= 1 else n
        emit(row(f"decode_b1_ctx{ctx}", "voltllm", per, "tok/s", cmd.replace("{N}", str(n)).replace("{M}", "129 and 1"),
                 versions, note="128 / (t(max_tokens 129) - t(max_tokens 1)) on the same prompt, per repeat"))


def cmd_serve(args):
    opts = {"--engine": None, "--figure": None, "--command": "", "--versions": "", "--field": "output_throughput"}
    files = []
    it = iter(args)
    for a in it:
        if a in opts:
            opts[a] = next(it)
        else:
            files.append(a)
    vals, completed, failed, errs = [], [], [], []
    for f in files:
        try:
            r = json.load(open(f))
        except Exception as e:  # noqa: BLE001
            errs.append(f"{f}: {e}")
            continue
        completed.append(r.get("completed"))
        failed.append(r.get("failed"))
        if opts["--field"] == "ttft":  # the TTFT of every request that completed, every repeat (ms)
            ok = [not e and n for e, n in zip(r.get("errors", []), r.get("output_lens", []))]
            vals.extend(x * 1000 for x, good in zip(r.get("ttfts", []), ok) if good)
        elif opts["--field"] == "tpot":
            vals.append(1000.0 / r["median_tpot_ms"] if r.get("median_tpot_ms") else None)
        else:
            vals.append(r.get(opts["--field"]))
    unit = {"ttft": "ms", "tpot": "tok/s"}.get(opts["--field"], "tok/s")
    emit(row(opts["--figure"], opts["--engine"], vals, unit, opts["--command"], opts["--versions"],
             completed=completed, failed=failed, **({"errors": errs} if errs else {})))


# ---------------------------------------------------------------- llama.cpp's KL base file
# Layout (tools/perplexity/perplexity.cpp, perplexity() with --kl-divergence-base, read by kl_divergence()):
#   "_logits_" | int32 n_ctx | int32 n_vocab | int32 n_chunk | int32 tokens[n_chunk * n_ctx] |
#   per chunk, per scored position p = n_ctx/2 .. n_ctx-2 (the logits there predict token p+1): nv uint16,
#   nv = 2*((n_vocab+1)/2) + 4: float32 scale, float32 min_log_prob, then n_vocab uint16 q with
#   log p(i) = scale * q[i] + min_log_prob (q = 0 for logits <= max - 16), padding to nv.
def read_base_header(path):
    f = open(path, "rb")
    if f.read(8) != b"_logits_":
        raise SystemExit(f"{path}: not a llama.cpp log-probability file")
    n_ctx, n_vocab, n_chunk = struct.unpack("<iii", f.read(12))
    import numpy as np
    tokens = np.frombuffer(f.read(4 * n_ctx * n_chunk), dtype="<i4").reshape(n_chunk, n_ctx)
    return f, n_ctx, n_vocab, n_chunk, tokens


def quantize_rows(logits):
    """perplexity.cpp's log_softmax(n_vocab, logits, log_prob, tok), rows at a time, in float32 like the C code
    (the sum of exponentials in float64 as there)."""
    import numpy as np
    x = np.ascontiguousarray(logits, dtype=np.float32)
    mx = x.max(axis=1)
    mn = np.maximum(x.min(axis=1), mx - np.float32(16))
    sum_exp = np.exp(x - mx[:, None]).astype(np.float64).sum(axis=1)
    lse = np.log(sum_exp).astype(np.float32)
    min_log_prob = (mn - mx - lse).astype(np.float32)
    scale = ((mx - mn) / np.float32(65535)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(scale > 0, np.float32(1) / scale, np.float32(0)).astype(np.float32)
    q = np.rint(inv[:, None] * (x - mn[:, None])).astype(np.int64)  # nearest_int: round half to even
    q = np.where(x > mn[:, None], q, 0)
    q = np.clip(q, 0, 65535).astype(np.uint16)
    return scale, min_log_prob, q


def cmd_kld_write(args):
    import numpy as np
    npys = args[args.index("--model-logits") + 1: args.index("--tokens-from")]
    base = args[args.index("--tokens-from") + 1]
    out = args[args.index("--out") + 1]
    f, n_ctx, n_vocab, n_chunk, tokens = read_base_header(base)
    f.close()
    if len(npys) != n_chunk:
        raise SystemExit(f"kld-write: {len(npys)} logits files for {n_chunk} chunks")
    nv = 2 * ((n_vocab + 1) // 2) + 4
    first = n_ctx // 2
    with open(out, "wb") as o:
        o.write(b"_logits_" + struct.pack("<iii", n_ctx, n_vocab, n_chunk))
        o.write(tokens.astype("<i4").tobytes())
        for npy in npys:
            lg = np.load(npy, mmap_mode="r")
            if lg.shape != (n_ctx, n_vocab):
                raise SystemExit(f"kld-write: {npy} has shape {lg.shape}, the base file wants ({n_ctx}, {n_vocab})")
            for r0 in range(first, n_ctx - 1, 128):
                r1 = min(r0 + 128, n_ctx - 1)
                scale, mlp, q = quantize_rows(lg[r0:r1])
                buf = np.zeros((r1 - r0, nv), dtype="<u2")
                buf[:, :4] = np.stack([scale, mlp], axis=1).astype("<f4").view("<u2").reshape(r1 - r0, 4)
                buf[:, 4:4 + n_vocab] = q
                o.write(buf.tobytes())
    print(json.dumps({"kld_write": out, "n_ctx": n_ctx, "n_vocab": n_vocab, "n_chunk": n_chunk,
                      "rows": n_chunk * (n_ctx - 1 - first)}))


def cmd_kld_check(base, npys):
    """KL(base || model) per scored position as kl_divergence() computes it, summed over the base file."""
    import numpy as np
    f, n_ctx, n_vocab, n_chunk, tokens = read_base_header(base)
    nv = 2 * ((n_vocab + 1) // 2) + 4
    first = n_ctx // 2
    n_rows = n_ctx - 1 - first
    kl, nll, nll_base, same = [], [], [], 0
    for c, npy in enumerate(npys):
        raw = np.frombuffer(f.read(2 * nv * n_rows), dtype="<u2").reshape(n_rows, nv)
        sc = raw[:, :4].copy().view("<f4")  # [rows, 2]: scale, min_log_prob
        q = raw[:, 4:4 + n_vocab].astype(np.float64)
        plog_base = sc[:, 0:1].astype(np.float64) * q + sc[:, 1:2].astype(np.float64)
        lg = np.load(npy, mmap_mode="r")[first:n_ctx - 1].astype(np.float64)
        lsm = lg - lg.max(axis=1, keepdims=True)
        lsm -= np.log(np.exp(lsm).sum(axis=1, keepdims=True))
        tok = tokens[c, first + 1:n_ctx]
        idx = np.arange(n_rows)
        nll.extend((-lsm[idx, tok]).tolist())
        nll_base.extend((-plog_base[idx, tok]).tolist())
        m = plog_base > -16
        kl.extend((np.where(m, np.exp(plog_base) * (plog_base - lsm), 0)).sum(axis=1).tolist())
        same += int((lg.argmax(axis=1) == plog_base.argmax(axis=1)).sum())
    n = len(kl)
    print(json.dumps({"kld_check": base, "count": n, "mean_kld": sum(kl) / n, "same_top": same / n,
                      "ppl_model": math.exp(sum(nll) / n), "ppl_base": math.exp(sum(nll_base) / n)}))


def cmd_kld_npy(args):
    """KL(base || model), the same-top-token rate and both perplexities over perplexity.cpp's scored positions
    (the second half of each window, each predicting the next id), from two sets of voltllm logits .npy of the
    same windows: `kld-npy --base B0.npy B1.npy --model M0.npy M1.npy --ids WINDOWS.json` (an array of arrays
    of ids, window k of both sets). KL in float64 over the whole vocabulary (no 16-bit quantization here)."""
    import numpy as np
    base = args[args.index("--base") + 1: args.index("--model")]
    model = args[args.index("--model") + 1: args.index("--ids")]
    windows = json.load(open(args[args.index("--ids") + 1]))
    if not (len(base) == len(model) == len(windows)):
        raise SystemExit(f"kld-npy: {len(base)} base, {len(model)} model files for {len(windows)} windows")

    def log_softmax(x):
        x = x - x.max(axis=1, keepdims=True)
        return x - np.log(np.exp(x).sum(axis=1, keepdims=True))

    kl, nll, nll_base, same = [], [], [], 0
    for b, m, ids in zip(base, model, windows):
        n_ctx = len(ids)
        first = n_ctx // 2
        lb = log_softmax(np.load(b, mmap_mode="r")[first:n_ctx - 1].astype(np.float64))
        lm = log_softmax(np.load(m, mmap_mode="r")[first:n_ctx - 1].astype(np.float64))
        tok = np.asarray(ids[first + 1:n_ctx])
        idx = np.arange(len(tok))
        nll.extend((-lm[idx, tok]).tolist())
        nll_base.extend((-lb[idx, tok]).tolist())
        kl.extend((np.exp(lb) * (lb - lm)).sum(axis=1).tolist())
        same += int((lb.argmax(axis=1) == lm.argmax(axis=1)).sum())
    n = len(kl)
    kl_sorted = sorted(kl)
    print(json.dumps({"count": n, "mean_kld": sum(kl) / n, "median_kld": kl_sorted[n // 2], "max_kld": kl_sorted[-1],
                      "same_top": same / n, "ppl_model": math.exp(sum(nll) / n),
                      "ppl_base": math.exp(sum(nll_base) / n)}))


def cmd_windows(tokens_json, n_ctx, n_chunk, out):
    """The first N_CHUNK windows of N_CTX ids of a `voltllm tokenize` output, as a JSON array of arrays."""
    ids = json.load(open(tokens_json))
    n_ctx, n_chunk = int(n_ctx), int(n_chunk)
    if len(ids) < n_ctx * n_chunk:
        raise SystemExit(f"windows: {len(ids)} ids, {n_ctx * n_chunk} needed")
    json.dump([ids[k * n_ctx:(k + 1) * n_ctx] for k in range(n_chunk)], open(out, "w"))


def cmd_kld_tokens(base, k, bos=None):
    f, n_ctx, n_vocab, n_chunk, tokens = read_base_header(base)
    ids = [int(x) for x in tokens[int(k)]]
    if bos not in (None, "", "-"):
        ids[0] = int(bos)
    print(",".join(map(str, ids)))


def cmd_gguf_bos(gguf_path, gguf_py):
    sys.path.insert(0, gguf_py)
    from gguf import GGUFReader  # noqa: E402 (the llama.cpp source's gguf-py)
    r = GGUFReader(gguf_path)

    def val(key):
        fld = r.fields.get(key)
        return None if fld is None else fld.parts[fld.data[0]][0].item()

    add = val("tokenizer.ggml.add_bos_token")
    print(f"{int(bool(add)) if add is not None else '-'} {val('tokenizer.ggml.bos_token_id')}")


def cmd_kld_parse(log, args):
    o = dict(zip(args[::2], args[1::2]))
    text = open(log, errors="replace").read()

    def num(label):
        m = re.search(re.escape(label) + r"\s*:\s*(-?[0-9.]+)", text)
        return float(m.group(1)) if m else None
    same = re.search(r"Same top p:\s*([0-9.]+)", text)
    rows = {"kld_mean": (num("Mean    KLD"), "nats"), "kld_median": (num("Median  KLD"), "nats"),
            "kld_max": (num("Maximum KLD"), "nats"), "kld_99": (num("99.0%   KLD"), "nats"),
            "same_top": (float(same.group(1)) / 100 if same else None, "fraction"),
            "ppl_q": (num("Mean PPL(Q)"), "ppl"), "ppl_base": (num("Mean PPL(base)"), "ppl")}
    for k, (v, unit) in rows.items():
        emit({"figure": f"agree_{o['--model']}_{k}", "engine": o["--engine"], "value": v, "unit": unit, "repeats": [v],
              "base": o["--base"], "command": o["--command"], "versions": o["--versions"]})


# ---------------------------------------------------------------- the table of docs/performance.md
FIGS = [  # figure, label, compared as (higher is better)
    ("decode_b1_ctx128", "decode, batch 1, context 128 (tok/s)"),
    ("decode_b1_ctx2048", "decode, batch 1, context 2k (tok/s)"),
    ("decode_b1_ctx32768", "decode, batch 1, context 32k (tok/s)"),
    ("serve_c8_out", "output tok/s, concurrency 8, 2k + 128"),
    ("serve_c32_out", "output tok/s, concurrency 32, 2k + 128"),
    ("serve_c128_out", "output tok/s, concurrency 128, 2k + 128"),
    ("prefill_512", "prefill 512 tokens (tok/s)"),
    ("prefill_2048", "prefill 2,048 tokens (tok/s)"),
    ("ttft_512", "TTFT, 512-token prompt (ms, lower is better)"),
    ("ttft_2048", "TTFT, 2,048-token prompt (ms, lower is better)"),
    ("gpu_mem_peak", "GPU memory, peak while serving (MiB)"),
]


def bytes_per_token(cfg, figure):
    """Bytes that one decoded token must read, for the fraction of the limit: the weights (dense f16, MXFP4
    experts at 17/32 byte a value, 4 of E experts; at concurrency C the distinct experts of C x 4 picks, the
    dense weights once per step, divided by C) plus the KV cache (f16) at that context (sliding layers: 128)."""
    H, I, E, L, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_local_experts"], cfg["num_hidden_layers"], cfg["vocab_size"]
    k = cfg.get("experts_per_token", cfg.get("num_experts_per_tok"))
    d, nh, nkv = cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    win = cfg.get("sliding_window", 128)
    types = cfg.get("layer_types") or ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(L)]
    dense = L * ((H * (nh + 2 * nkv) * d + nh * d * H) * 2 + E * H * 2) + V * H * 2
    expert = (2 * I * H + H * I) * 17 / 32
    m = re.match(r"decode_b1_ctx(\d+)", figure)
    s = re.match(r"serve_c(\d+)_out", figure)
    if m:
        c, ctx = 1, int(m.group(1))
        ctx = ctx // 2 if ctx == 128 else ctx + 64  # tg128 from an empty context: 64 on average; else d + 64
    elif s:
        c, ctx = int(s.group(1)), 2048 + 64
    else:
        return None
    experts_read = E * (1 - (1 - k / E) ** c) if c > 1 else k
    kv = sum(2 * nkv * d * 2 * (min(ctx, win) if t == "sliding_attention" else ctx) for t in types)
    return (dense + L * experts_read * expert) / c + kv


def cmd_table(paths):
    rows, meta = [], {}
    for p in paths:
        for line in open(p):
            line = line.strip()
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            if r.get("figure") in ("read_bandwidth", "model_config", "versions"):
                meta.setdefault(r["figure"], []).append(r)
            elif "figure" in r and "engine" in r:
                r["engine"] = engine_label(r["engine"], r.get("versions", ""))  # rows written without row()
                rows.append(r)
    bws = [r["value"] for r in meta.get("read_bandwidth", []) if r.get("value")]
    bw = med(bws)
    cfg = meta["model_config"][0]["config"] if meta.get("model_config") else None
    by = {(r["figure"], r["engine"]): r for r in rows}
    print(f"Read bandwidth of the run(s): {', '.join(f'{x:,.0f}' for x in bws)} GB/s (limit = median {bw or 0:,.0f}).")
    print()
    print("| figure | engine | value (median of repeats) | repeats | spread | bytes/token | fraction of the limit | voltllm / llama.cpp | command | versions |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    lower_better = ("ttft_", "gpu_mem")
    agree = [r for r in rows if r["figure"].startswith("agree_")]
    rows = [r for r in rows if not r["figure"].startswith("agree_")]
    for fig, label in FIGS + [(f, f) for f in sorted({r["figure"] for r in rows} - {f for f, _ in FIGS})]:
        for eng in ("voltllm", "llama.cpp", "voltllm (volta-ptx)"):
            r = by.get((fig, eng))
            if not r:
                continue
            v = r.get("value")
            bpt = bytes_per_token(cfg, fig) if cfg else None
            frac = f"{v * bpt / (bw * 1e9):.1%}" if (v and bpt and bw) else "-"
            ratio = "-"
            other = by.get((fig, "llama.cpp"))
            if eng == "voltllm" and other and other.get("value") and v:  # (a volta-ptx row is a smoke row: no ratio)
                x = v / other["value"]
                ratio = f"{(1 / x if fig.startswith(lower_better) else x):.2f}x" + (" (llama.cpp / voltllm)" if fig.startswith(lower_better) else "")
            reps = ", ".join(f"{x:,.1f}" if isinstance(x, (int, float)) else str(x) for x in (r.get("repeats") or [])[:6])
            val = f"{v:,.1f}" if isinstance(v, (int, float)) else "n/a"
            if any(r.get("failed") or []):
                val += f" ({sum(x or 0 for x in r['failed'])} requests failed)"
            if r.get("ran") and r["ran"] != "alone":
                val += f" (ran {r['ran']})"
            sp = f"{r['spread']:.1%}" if r.get("spread") is not None else "-"
            print(f"| {label} | {eng} | **{val}** {r.get('unit', '')} | {reps} | {sp} | "
                  f"{f'{bpt / 1e9:.3f} GB' if bpt else '-'} | {frac} | {ratio} | `{r.get('command', '')}` | {r.get('versions', '')} |")
    if agree:
        print()
        print("| agreement figure | computed by | base (P) | value | command |")
        print("|---|---|---|---|---|")
        for r in agree:
            v = r.get("value")
            print(f"| {r['figure']} | {r['engine']} | {r.get('base', '-')} | "
                  f"{'n/a' if v is None else f'{v:.6g}'} {r.get('unit', '')} | `{r.get('command', '')}` |")


def main(argv):
    if not argv:
        raise SystemExit(__doc__)
    c, a = argv[0], argv[1:]
    if c == "ids":
        cmd_ids(*a)
    elif c == "text-of-heldout":
        cmd_text_of_heldout(*a)
    elif c == "llama-bench":
        cmd_llama_bench(*a)
    elif c == "gen-seconds":
        cmd_gen_seconds(*a)
    elif c == "gen-seconds-runs":
        cmd_gen_seconds_runs(*a)
    elif c == "gen":
        cmd_gen(*a)
    elif c == "serve":
        cmd_serve(a)
    elif c == "kld-write":
        cmd_kld_write(a)
    elif c == "kld-npy":
        cmd_kld_npy(a)
    elif c == "windows":
        cmd_windows(*a)
    elif c == "kld-check":
        cmd_kld_check(a[0], a[1:])
    elif c == "kld-parse":
        cmd_kld_parse(a[0], a[1:])
    elif c == "kld-tokens":
        cmd_kld_tokens(*a)
    elif c == "gguf-bos":
        cmd_gguf_bos(*a)
    elif c == "table":
        cmd_table(a)
    else:
        raise SystemExit(f"compare.py: unknown subcommand {c}\n" + __doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
