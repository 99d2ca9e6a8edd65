#!/usr/bin/env python3
"""The HTTP checks of scripts/gpu/serve.sh against a running `voltllm serve --device cuda` (python3 with
requests or httpx on the GPU machine; no Node there). Prints one JSON line per check and exits 1 if any
failed.

  serve_client.py URL MODEL [--quick]

Checks: chat with reasoning (reasoning_content and content apart), a forced tool call (tool_choice names
the function: the answer is a tool_calls message), streaming (role chunk, deltas, finish, [DONE]), n = 2,
logprobs with top_logprobs, prompt logprobs over a 2,000-token prompt (completions with echo + logprobs),
64 concurrent streams, and a client that disconnects mid-stream: vllm:kv_cache_usage_perc returns to 0
at idle and the server keeps answering.
"""
import concurrent.futures as cf
import json
import sys
import time

import requests

URL, MODEL = sys.argv[1].rstrip("/"), sys.argv[2]
QUICK = "--quick" in sys.argv
failed = 0


def report(name, ok, **info):
    global failed
    failed += 0 if ok else 1
    print(json.dumps({"check": name, "pass": bool(ok), **info}), flush=True)


def chat(messages, **kw):
    r = requests.post(f"{URL}/v1/chat/completions", json={"model": MODEL, "messages": messages, **kw}, timeout=300)
    return r


def metric(name):
    text = requests.get(f"{URL}/metrics", timeout=30).text
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            return float(line.rsplit(" ", 1)[1])
    return None


def run(name, fn):
    t0 = time.time()
    try:
        fn()
    except Exception as e:  # a check that raised failed; the others still run
        report(name, False, error=repr(e)[:300], seconds=round(time.time() - t0, 2))


def c_chat():
    r = chat([{"role": "user", "content": "Tell me about the old harbor town."}], max_tokens=96, temperature=0)
    j = r.json()
    m = j["choices"][0]["message"]
    report("chat", r.status_code == 200 and isinstance(m.get("content"), (str, type(None))) and "usage" in j,
           status=r.status_code, finish=j["choices"][0].get("finish_reason"),
           reasoning_chars=len(m.get("reasoning_content") or ""), content_chars=len(m.get("content") or ""),
           completion_tokens=j["usage"]["completion_tokens"])


def c_tool():
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                               "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                              "required": ["city"]}}}]
    r = chat([{"role": "user", "content": "What is the weather in Oslo?"}], tools=tools, max_tokens=64,
             temperature=0, tool_choice={"type": "function", "function": {"name": "get_weather"}})
    j = r.json()
    calls = j["choices"][0]["message"].get("tool_calls") or []
    report("tool_call", r.status_code == 200 and len(calls) >= 1 and calls[0]["function"]["name"] == "get_weather",
           status=r.status_code, finish=j["choices"][0].get("finish_reason"), calls=len(calls))


def stream_once(max_tokens=32, disconnect_after=None):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Count slowly."}], "max_tokens": max_tokens,
            "stream": True, "temperature": 1.0, "seed": 7, "stream_options": {"include_usage": True}}
    chunks, done, role, finish = 0, False, False, None
    with requests.post(f"{URL}/v1/chat/completions", json=body, stream=True, timeout=300) as r:
        for line in r.iter_lines():
            if not line or not line.startswith(b"data: "):
                continue
            data = line[6:]
            if data == b"[DONE]":
                done = True
                break
            j = json.loads(data)
            for ch in j.get("choices", []):
                role = role or ch.get("delta", {}).get("role") == "assistant"
                finish = ch.get("finish_reason") or finish
            chunks += 1
            if disconnect_after is not None and chunks >= disconnect_after:
                return {"chunks": chunks, "disconnected": True}
    return {"chunks": chunks, "done": done, "role": role, "finish": finish}


def c_stream():
    s = stream_once()
    report("stream", s["done"] and s["role"] and s["finish"] in ("length", "stop"), **s)


def c_n2_logprobs():
    r = chat([{"role": "user", "content": "Say something."}], max_tokens=16, n=2, temperature=1.0, seed=3,
             logprobs=True, top_logprobs=3)
    j = r.json()
    ok = r.status_code == 200 and len(j["choices"]) == 2
    lp = j["choices"][0].get("logprobs") or {}
    content = lp.get("content") or []
    ok = ok and len(content) > 0 and len(content[0]["top_logprobs"]) == 3 and content[0]["logprob"] <= 0
    report("n2_logprobs", ok, status=r.status_code, choices=len(j.get("choices", [])), logprob_entries=len(content))


def c_prompt_logprobs():
    # OpenAI's completions form: echo + logprobs give every prompt token's logprob (the first has none).
    ids = [(i * 7919) % 8000 for i in range(2000)]  # valid in the demo vocabulary (8,192) too
    r = requests.post(f"{URL}/v1/completions", json={"model": MODEL, "prompt": ids, "max_tokens": 1, "echo": True,
                                                     "logprobs": 1, "temperature": 0}, timeout=300)
    j = r.json()
    lp = (j["choices"][0].get("logprobs") or {}).get("token_logprobs") if r.status_code == 200 else None
    n = len(lp) if lp else 0
    finite = lp is not None and all(v is None or (v == v and v <= 0 and v > -1e30) for v in lp)
    report("prompt_logprobs_2k", r.status_code == 200 and n >= 2000 and finite and lp[0] is None, status=r.status_code,
           entries=n, error=None if r.status_code == 200 else r.text[:200])


def c_concurrent():
    k = 16 if QUICK else 64
    t0 = time.time()
    with cf.ThreadPoolExecutor(k) as ex:
        res = list(ex.map(lambda _: stream_once(max_tokens=48), range(k)))
    ok = all(s.get("done") for s in res)
    report(f"concurrent_{k}_streams", ok, seconds=round(time.time() - t0, 2),
           chunks=sum(s["chunks"] for s in res))


def c_disconnect():
    s = stream_once(max_tokens=2000, disconnect_after=5)
    usage = None
    for _ in range(100):  # the engine notices the closed socket within a keep-alive tick and frees the blocks
        usage = metric("vllm:kv_cache_usage_perc")
        if usage == 0.0:
            break
        time.sleep(0.1)
    after = chat([{"role": "user", "content": "Still there?"}], max_tokens=8)
    report("disconnect_frees_kv", usage == 0.0 and after.status_code == 200, kv_usage=usage, **s)


for name, fn in [("chat", c_chat), ("tool_call", c_tool), ("stream", c_stream), ("n2_logprobs", c_n2_logprobs),
                 ("prompt_logprobs_2k", c_prompt_logprobs), ("concurrent", c_concurrent),
                 ("disconnect_frees_kv", c_disconnect)]:
    run(name, fn)
sys.exit(1 if failed else 0)
