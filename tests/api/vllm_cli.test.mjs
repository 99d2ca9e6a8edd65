// vLLM's command line, end to end (issue 7): the article's command lines and vLLM's gpt-oss recipe start
// `voltllm serve` verbatim (the article's command lines, docs/flags.md), become ready, answer a
// chat request and the article's watchdog, and exit 0 on SIGTERM; `org/name` models resolve offline in a
// fake Hugging Face cache (HF_HOME) through the index, never reading original/ or metal/; and the honoured
// flags of docs/flags.md that had no API test have one here. Model: tiny-chat (helpers.mjs).
import { test, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, mkdirSync, readdirSync, renameSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { BIN, tinyChatDir, writeScript, ids, metrics, NO_HARMONY_STOP } from "./helpers.mjs";

const TINY = path.resolve(tinyChatDir());

// tiny-chat with gpt-oss-120b's 8 KV heads (16 query heads), so the article's --tensor-parallel-size 4
// really splits it (CPU: four rank threads; TP must divide the KV heads, and tiny-chat has 2).
function tinyChatKv8Dir() {
    const dir = path.join(path.dirname(BIN), "..", "test-models", "tiny-chat-kv8");
    if (!existsSync(path.join(dir, "config.json"))) {
        mkdirSync(path.dirname(dir), { recursive: true });
        const tmp = `${dir}.tmp-${process.pid}`;
        execFileSync(BIN, ["--log-level", "warning", "make-model", "--preset", "tiny-chat", "--heads", "16",
            "--kv-heads", "8", "--out", tmp], { stdio: "inherit" });
        try {
            renameSync(tmp, dir);
        } catch (e) {
            if (!existsSync(path.join(dir, "config.json"))) throw e;  // another test made it meanwhile
        }
    }
    return path.resolve(dir);
}

// tiny-chat-kv8 through the V100 recipes' convert line (`--model X --output Y --dtype half --quantization
// awq --awq-zero-point`, docs/quantization.md), with --awq-group-size 64 (tiny's hidden size is 64 and
// each of 4 tensor-parallel ranks gets 64 of o_proj's inputs): AWQ attention and lm_head, MXFP4 experts.
function tinyChatKv8AwqDir() {
    const dir = path.join(path.dirname(BIN), "..", "test-models", "tiny-chat-kv8-awq");
    if (!existsSync(path.join(dir, "config.json"))) {
        const tmp = `${dir}.tmp-${process.pid}`;
        execFileSync(BIN, ["--log-level", "warning", "convert", "--model", tinyChatKv8Dir(), "--output", tmp,
            "--dtype", "half", "--quantization", "awq", "--awq-zero-point", "--awq-group-size", "64"],
            { stdio: "inherit" });
        try {
            renameSync(tmp, dir);
        } catch (e) {
            if (!existsSync(path.join(dir, "config.json"))) throw e;  // another test made it meanwhile
        }
    }
    return path.resolve(dir);
}

// A folder holding `gpt-oss-120b-vllm`, the article's model directory (tiny-chat-kv8 behind a symlink;
// its AWQ conversion for the line that says --quantization awq).
function articleDir({ awq = false } = {}) {
    const dir = mkdtempSync(path.join(tmpdir(), "voltllm-cli-"));
    symlinkSync(awq ? tinyChatKv8AwqDir() : tinyChatKv8Dir(), path.join(dir, "gpt-oss-120b-vllm"));
    return dir;
}

// A fake Hugging Face home: hub/models--openai--<name>/snapshots/<sha>/ with tiny-chat's files as symlinks
// (as huggingface_hub stores blobs), refs/main naming <sha>, and the gpt-oss repositories' original/ and
// metal/ copies as junk that fails any load that reads it.
const SHA = "8b193b0ef83bd41b40eb71fee8f1432315e02a3e";
const SHA_V2 = "0123456789abcdef0123456789abcdef01234567";
function fakeHfHome(names) {
    const home = mkdtempSync(path.join(tmpdir(), "voltllm-hf-"));
    for (const name of names) {
        const repo = path.join(home, "hub", `models--openai--${name}`);
        const snap = path.join(repo, "snapshots", SHA);
        mkdirSync(snap, { recursive: true });
        for (const f of readdirSync(TINY)) symlinkSync(path.join(TINY, f), path.join(snap, f));
        for (const junk of ["original", "metal"]) {
            mkdirSync(path.join(snap, junk));
            writeFileSync(path.join(snap, junk, "model.safetensors"), "not a safetensors file");
            writeFileSync(path.join(snap, junk, "config.json"), "{ junk");
        }
        mkdirSync(path.join(repo, "refs"));
        writeFileSync(path.join(repo, "refs", "main"), SHA);
        // Revision v2: a snapshot with a broken config.json, so serving it fails in a recognisable way.
        mkdirSync(path.join(repo, "snapshots", SHA_V2));
        writeFileSync(path.join(repo, "snapshots", SHA_V2, "config.json"), "{ junk");
        writeFileSync(path.join(repo, "refs", "v2"), SHA_V2);
    }
    return home;
}

// The argv of a command line as users type it. The article's lines say `--port 8000` / `--port 8001`;
// CTest runs test files in parallel (and several checkouts share this machine), so a fixed port would
// collide: the port number is replaced by 0 (any free port, printed at start). Nothing else is changed.
function argv(line) {
    const a = line.trim().split(/\s+/);
    const i = a.indexOf("--port");
    if (i >= 0) a[i + 1] = "0";
    return a;
}

// Every server this file starts: a test that fails before its stop() would leave one running, which keeps
// node's event loop (and ctest) waiting forever; after() kills what is left.
const children = new Set();
after(() => {
    for (const p of children) if (p.exitCode === null && p.signalCode === null) p.kill("SIGKILL");
});

// Starts `voltllm <args>` (args begin with "serve"); resolves once it printed "ready".
async function serve(args, { cwd, env = {}, readyTimeoutMs = 120000 } = {}) {
    const proc = spawn(BIN, args, { cwd, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
    children.add(proc);
    let out = "", err = "";
    proc.stderr.on("data", (d) => (err += d));
    const exited = new Promise((resolve) => proc.on("exit", (code, signal) => resolve({ code, signal })));
    const baseURL = await new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`not ready in ${readyTimeoutMs} ms:\n${out}\n${err}`)), readyTimeoutMs);
        proc.stdout.on("data", (d) => {
            out += d;
            const m = out.match(/listening on (http:\/\/[^\s]+)/);
            if (m && out.includes("ready:")) {
                clearTimeout(timer);
                resolve(m[1]);
            }
        });
        exited.then(({ code }) => {
            clearTimeout(timer);
            reject(new Error(`exited (${code}) before ready:\n${out}\n${err}`));
        });
    });
    return {
        baseURL,
        url: (p) => baseURL + p,
        stdout: () => out,
        stderr: () => err,
        log: () => out + err,
        async stop() {
            if (proc.exitCode !== null) return { code: proc.exitCode, signal: null };
            proc.kill("SIGTERM");
            return exited;
        },
    };
}

// Polls `cond` every 50 ms until it holds or `timeoutMs` passes (the assertions after it say what failed).
async function until(cond, timeoutMs) {
    const t0 = Date.now();
    while (!cond() && Date.now() - t0 < timeoutMs) await new Promise((r) => setTimeout(r, 50));
}

// The server's log (stdout + stderr) matches `re`, waiting up to `timeoutMs` for it: the two are separate
// pipes, so "ready" on stdout can reach node before lines the server wrote to stderr earlier (seen under a
// loaded CI machine: the stderr was still empty).
async function logMatches(s, re, timeoutMs = 10000) {
    await until(() => re.test(s.log()), timeoutMs);
    assert.match(s.log(), re);
}

async function postJson(server, route, body, headers = {}) {
    const res = await fetch(server.url(route), {
        method: "POST",
        headers: { "Content-Type": "application/json", ...headers },
        body: JSON.stringify(body),
    });
    return { status: res.status, json: await res.json().catch(() => null) };
}

// What every command line must give: ready (above), /health 200, a chat answer, the watchdog's request
// (model = the directory's basename) 200 within its 10 s, /v1/models, then SIGTERM -> exit 0.
async function checkServes(server, { echoed, watchdogModel }) {
    assert.equal((await fetch(server.url("/health"))).status, 200);
    const models = await (await fetch(server.url("/v1/models"))).json();
    assert.equal(models.data[0].id, echoed);
    const chat = await postJson(server, "/v1/chat/completions", {
        model: echoed, messages: [{ role: "user", content: "Hello!" }], max_tokens: 4, ignore_eos: true, ...NO_HARMONY_STOP,
    });
    assert.equal(chat.status, 200, JSON.stringify(chat.json));
    assert.equal(chat.json.model, echoed);
    assert.equal(chat.json.usage.completion_tokens, 4);
    const t0 = Date.now();
    const watchdog = await postJson(server, "/v1/completions", { model: watchdogModel, prompt: "test", max_tokens: 1 });
    assert.equal(watchdog.status, 200, JSON.stringify(watchdog.json));
    assert.ok(Date.now() - t0 < 10000, "the watchdog restarts servers slower than 10 s");
    assert.equal(watchdog.json.usage.completion_tokens, 1);
    assert.equal(watchdog.json.choices.length, 1);
    const { code, signal } = await server.stop();
    assert.equal(signal, null);
    assert.equal(code, 0, "SIGTERM exits 0");
}

describe("the article's command lines start verbatim (anchors.md)", () => {
    const watchdog = { echoed: "./gpt-oss-120b-vllm", watchdogModel: "gpt-oss-120b-vllm" };

    test("line 1: -tp 4, 0.95, 4096, eager, no custom all-reduce, --dtype half --quantization awq, port 8000", async () => {
        const s = await serve(["serve", ...argv(
            "--model ./gpt-oss-120b-vllm --tensor-parallel-size 4 --gpu-memory-utilization 0.95 --max-model-len 4096 " +
            "--enforce-eager --disable-custom-all-reduce --dtype half --quantization awq --port 8000")],
            { cwd: articleDir({ awq: true }) });
        await logMatches(s, /KV blocks of/);  // the start-up log has arrived (notices come before it)
        assert.doesNotMatch(s.stderr(), /--quantization awq: ignored/);  // honoured: it matches the checkpoint
        await logMatches(s, /tensor-parallel-size 4 x pipeline-parallel-size 1 = 4 ranks/);
        assert.match(s.stdout(), /max-model-len 4096/);
        await checkServes(s, watchdog);
    });

    test("--quantization that does not match the checkpoint fails at start, naming both", () => {
        const r = spawnSync(BIN, ["serve", "--model", "./gpt-oss-120b-vllm", "--quantization", "awq", "--port", "0"],
            { cwd: articleDir(), encoding: "utf8", timeout: 120000 });
        assert.notEqual(r.status, 0);
        assert.match(r.stderr, /--quantization awq does not match the checkpoint .*says mxfp4/);
    });

    test("line 2: --block-size 16 --swap-space 4, port 8000", async () => {
        const s = await serve(["serve", ...argv(
            "--model ./gpt-oss-120b-vllm --tensor-parallel-size 4 --gpu-memory-utilization 0.90 --max-model-len 2048 " +
            "--enforce-eager --disable-custom-all-reduce --block-size 16 --swap-space 4 --port 8000")], { cwd: articleDir() });
        await logMatches(s, /KV blocks of/);
        assert.doesNotMatch(s.log(), /--swap-space 4: /);  // honoured: no notice
        assert.match(s.stdout(), /max-model-len 2048/);
        await checkServes(s, watchdog);
    });

    test("line 3: CUDA_VISIBLE_DEVICES=0, pipeline rank 0 of 2, port 8001", async () => {
        const s = await serve(["serve", ...argv(
            "--model ./gpt-oss-120b-vllm --tensor-parallel-size 1 --pipeline-parallel-size 2 " +
            "--pipeline-parallel-rank 0 --port 8001")], { cwd: articleDir(), env: { CUDA_VISIBLE_DEVICES: "0" } });
        await logMatches(s, /--pipeline-parallel-rank 0: not a vLLM flag/);
        await checkServes(s, watchdog);
    });

    test("line 4: --disable-log-stats --disable-log-requests", async () => {
        const s = await serve(["serve", ...argv("--model ./gpt-oss-120b-vllm --disable-log-stats --disable-log-requests")],
            { cwd: articleDir() });
        await logMatches(s, /--disable-log-requests: removed from vLLM/);
        await checkServes(s, watchdog);
    });

    test("the watchdog's literal name gpt-oss-120b is not the basename of ./gpt-oss-120b-vllm: 404 model_not_found", async () => {
        const s = await serve(["serve", ...argv("--model ./gpt-oss-120b-vllm --port 8000")], { cwd: articleDir() });
        const r = await postJson(s, "/v1/completions", { model: "gpt-oss-120b", prompt: "test", max_tokens: 1 });
        assert.equal(r.status, 404);
        assert.equal(r.json.error.code, "model_not_found");
        assert.equal((await s.stop()).code, 0);
    });
});

describe("Hugging Face model ids resolve offline (HF_HOME)", () => {
    let home;
    before(() => {
        home = fakeHfHome(["gpt-oss-20b", "gpt-oss-120b"]);
    });

    test("voltllm serve openai/gpt-oss-20b: loads the snapshot through its index, original/ and metal/ ignored", async () => {
        const s = await serve(["serve", "openai/gpt-oss-20b", "--port", "0", "--max-model-len", "2048", "--kv-cache-memory-bytes", "64M"],
            { env: { HF_HOME: home, HF_HUB_CACHE: "" } });
        await logMatches(s, new RegExp(`snapshots/${SHA}`));
        await checkServes(s, { echoed: "openai/gpt-oss-20b", watchdogModel: "gpt-oss-20b" });
    });

    test("vLLM's gpt-oss recipe: openai/gpt-oss-120b --tool-call-parser openai --enable-auto-tool-choice --reasoning-parser openai_gptoss", async () => {
        // The recipe names no port (vLLM's default 8000): `--port 0` is appended for the reason argv() gives.
        for (const extra of [[], ["--async-scheduling"]]) {
            const s = await serve(["serve", ...argv(
                "openai/gpt-oss-120b --tool-call-parser openai --enable-auto-tool-choice --reasoning-parser openai_gptoss"),
                ...extra, "--port", "0"], { env: { HF_HOME: home, HF_HUB_CACHE: "" } });
            // The recipe's flags are the server's own (no "not wired" notice, no "ignored" notice).
            await logMatches(s, /KV blocks of/);
            assert.ok(!/(tool-call-parser|auto-tool-choice|reasoning-parser|async-scheduling)[^\n]*(not wired|ignored)/.test(s.log()), s.log());
            await checkServes(s, { echoed: "openai/gpt-oss-120b", watchdogModel: "gpt-oss-120b" });
        }
    });

    test("a parser other than gpt-oss's is refused, naming the one there is", () => {
        for (const [flag, value, known] of [["--tool-call-parser", "hermes", "openai"], ["--reasoning-parser", "deepseek_r1", "openai_gptoss"]]) {
            const r = spawnSync(BIN, ["serve", TINY, flag, value, "--port", "0"], { encoding: "utf8" });
            assert.notEqual(r.status, 0);
            assert.ok(r.stderr.includes(value) && r.stderr.includes(known), r.stderr);
        }
    });

    test("--revision picks the snapshot refs/<revision> names; a revision with none fails naming it", () => {
        const env = { ...process.env, HF_HOME: home, HF_HUB_CACHE: "" };
        const v2 = spawnSync(BIN, ["serve", "openai/gpt-oss-20b", "--revision", "v2", "--port", "0"], { encoding: "utf8", env });
        assert.notEqual(v2.status, 0);
        assert.ok(v2.stderr.includes(SHA_V2), v2.stderr);  // its broken config.json is what failed
        assert.ok(!/not found offline/.test(v2.stderr), v2.stderr);
        const v3 = spawnSync(BIN, ["serve", "openai/gpt-oss-20b", "--revision", "v3", "--port", "0"], { encoding: "utf8", env });
        assert.notEqual(v3.status, 0);
        assert.match(v3.stderr, /not found offline; looked in:[^]*\(revision v3\)/);
    });

    test("a model in no cache exits non-zero and lists every place looked", () => {
        const dl = mkdtempSync(path.join(tmpdir(), "voltllm-dl-"));
        const r = spawnSync(BIN, ["serve", "openai/gpt-oss-999b", "--download-dir", dl, "--port", "0"],
            { encoding: "utf8", env: { ...process.env, HF_HOME: home, HF_HUB_CACHE: "" } });
        assert.notEqual(r.status, 0);
        assert.match(r.stderr, /model 'openai\/gpt-oss-999b' not found offline; looked in:/);
        assert.ok(r.stderr.includes(path.join(dl, "models--openai--gpt-oss-999b")), r.stderr);
        assert.ok(r.stderr.includes(path.join(home, "hub", "models--openai--gpt-oss-999b")), r.stderr);
    });

    test("voltllm generate --model openai/gpt-oss-20b resolves the same way", () => {
        const r = spawnSync(BIN, ["generate", "--model", "openai/gpt-oss-20b", "--prompt-ids", "1,2,3", "--max-tokens", "2", "--ignore-eos",
            "--kv-cache-memory-bytes", "67108864", "--max-model-len", "256"],
            { encoding: "utf8", env: { ...process.env, HF_HOME: home, HF_HUB_CACHE: "" } });
        assert.equal(r.status, 0, r.stderr);
    });
});

describe("honoured flags observed through the API (docs/flags.md)", () => {
    const TINY_ARGS = ["--max-model-len", "2048", "--kv-cache-memory-bytes", "64M"];

    test("--block-size: blocks hold that many tokens (the same KV bytes hold the same tokens)", async () => {
        const capacity = {};
        for (const bs of [16, 32]) {
            const s = await serve(["serve", TINY, "--port", "0", ...TINY_ARGS, "--block-size", String(bs)]);
            await logMatches(s, new RegExp(`KV blocks of ${bs} tokens`));
            const m = await metrics(s);
            capacity[bs] = { full: m['voltllm_kv_blocks_total{group="full"}'], sliding: m['voltllm_kv_blocks_total{group="sliding"}'] };
            assert.equal((await s.stop()).code, 0);
        }
        assert.equal(16 * (capacity[16].full + capacity[16].sliding), 32 * (capacity[32].full + capacity[32].sliding));
        assert.ok(capacity[32].full < capacity[16].full);
    });

    test("--kv-cache-memory-bytes: twice the bytes hold twice the tokens", async () => {
        const tokens = {};
        for (const bytes of ["64M", "128M"]) {
            const s = await serve(["serve", TINY, "--port", "0", "--max-model-len", "2048", "--kv-cache-memory-bytes", bytes]);
            const m = await metrics(s);
            tokens[bytes] = 16 * (m['voltllm_kv_blocks_total{group="full"}'] + m['voltllm_kv_blocks_total{group="sliding"}']);
            assert.equal((await s.stop()).code, 0);
        }
        assert.equal(tokens["128M"], 2 * tokens["64M"]);
    });

    test("--kv-cache-dtype int8: the same KV bytes hold more tokens and it serves; fp8 is refused", async () => {
        const tokens = {};
        for (const dtype of ["auto", "int8"]) {
            const s = await serve(["serve", TINY, "--port", "0", "--max-model-len", "2048", "--kv-cache-memory-bytes", "32M",
                "--kv-cache-dtype", dtype, "--served-model-name", "m"]);
            await logMatches(s, /KV blocks of/);
            assert.doesNotMatch(s.stderr(), /--kv-cache-dtype.*ignored/);
            const m = await metrics(s);
            tokens[dtype] = 16 * (m['voltllm_kv_blocks_total{group="full"}'] + m['voltllm_kv_blocks_total{group="sliding"}']);
            const r = await postJson(s, "/v1/completions", { model: "m", prompt: "The old harbor", max_tokens: 4, temperature: 0, ignore_eos: true });
            assert.equal(r.status, 200, JSON.stringify(r.json));
            assert.equal(r.json.usage.completion_tokens, 4);
            assert.equal((await s.stop()).code, 0);
        }
        // CPU auto is f32 (4d bytes a head vector), int8 d + 4: more than twice the tokens for any d >= 8.
        assert.ok(tokens.int8 > 2 * tokens.auto, JSON.stringify(tokens));
        for (const v of ["fp8", "fp8_e4m3", "fp8_e5m2"]) {
            const r = spawnSync(BIN, ["serve", TINY, "--port", "0", "--kv-cache-dtype", v], { encoding: "utf8" });
            assert.notEqual(r.status, 0);
            assert.match(r.stderr, new RegExp(`--kv-cache-dtype ${v} is not implemented.*int8`));
        }
    });

    test("--max-num-batched-tokens: the chunk budget the sliding-window pool must hold", () => {
        const r = spawnSync(BIN, ["serve", TINY, "--port", "0", "--max-model-len", "2048", "--num-kv-blocks", "100", "--max-num-batched-tokens", "2048"],
            { encoding: "utf8" });
        assert.notEqual(r.status, 0);
        assert.match(r.stderr, /max_num_batched_tokens 2048/);
    });

    test("--tokenizer: a tokenizer.json from elsewhere for a checkpoint that has none", async () => {
        const dir = mkdtempSync(path.join(tmpdir(), "voltllm-notok-"));
        for (const f of readdirSync(TINY)) if (f !== "tokenizer.json") symlinkSync(path.join(TINY, f), path.join(dir, f));
        const without = spawnSync(BIN, ["serve", dir, "--port", "0"], { encoding: "utf8" });
        assert.notEqual(without.status, 0);
        assert.match(without.stderr, /tokenizer\.json/);
        const s = await serve(["serve", dir, "--port", "0", "--tokenizer", path.join(TINY, "tokenizer.json"), "--served-model-name", "t",
            "--max-model-len", "2048", "--kv-cache-memory-bytes", "64M"]);
        const r = await postJson(s, "/tokenize", { prompt: "The quick brown fox" });
        assert.deepEqual(r.json.tokens, ids("The quick brown fox"));
        assert.equal((await s.stop()).code, 0);
    });

    test("--host 0.0.0.0 listens on every interface (reached here through 127.0.0.1)", async () => {
        const s = await serve(["serve", "--host", "0.0.0.0", "--port", "0", "--executor", "scripted", "--script", writeScript([ids(" x")])]);
        assert.match(s.stdout(), /listening on http:\/\/0\.0\.0\.0:\d+/);
        assert.ok(!s.stdout().includes("only this machine can connect"));
        const port = new URL(s.baseURL).port;
        assert.equal((await fetch(`http://127.0.0.1:${port}/health`)).status, 200);
        assert.equal((await s.stop()).code, 0);
    });

    test("--num-kv-blocks, --num-kv-blocks-override and --num-gpu-blocks-override pin the pool", async () => {
        for (const flag of ["--num-kv-blocks", "--num-kv-blocks-override", "--num-gpu-blocks-override"]) {
            const s = await serve(["serve", TINY, "--port", "0", "--max-model-len", "512", "--max-num-batched-tokens", "512", flag, "300"]);
            const m = await metrics(s);
            assert.equal(m['voltllm_kv_blocks_total{group="full"}'], 300, flag);
            assert.equal(m['voltllm_kv_blocks_total{group="sliding"}'], 300, flag);
            assert.equal((await s.stop()).code, 0);
        }
    });

    test("--api-key takes one key: a second value is an error", () => {
        const r = spawnSync(BIN, ["serve", TINY, "--api-key", "k1", "k2"], { encoding: "utf8" });
        assert.equal(r.status, 2);
        assert.match(r.stderr, /unexpected argument 'k2'/);
    });

    test("--enable-log-requests with --max-log-len logs each request; off by default", async () => {
        const script = writeScript([ids(" fine.")]);
        const on = await serve(["serve", "--port", "0", "--executor", "scripted", "--script", script, "--served-model-name", "m",
            "--enable-log-requests", "--max-log-len", "5"]);
        const off = await serve(["serve", "--port", "0", "--executor", "scripted", "--script", script, "--served-model-name", "m"]);
        for (const s of [on, off]) {
            const r = await postJson(s, "/v1/completions", { model: "m", prompt: "abcdefghij", max_tokens: 2 }, { "X-Request-Id": "log-me" });
            assert.equal(r.status, 200);
        }
        await until(() => /Finished request/.test(on.stderr()), 5000);
        assert.match(on.stderr(), /Received request [^:]*log-me[^:]*: prompt: 'abcde', params:/);
        assert.match(on.stderr(), /Finished request [^:]*log-me[^:]*: finish_reason: length, prompt_tokens: \d+, generation_tokens: 2/);
        assert.ok(!/Received request|Finished request/.test(off.stderr()), off.stderr());
        assert.equal((await on.stop()).code, 0);
        assert.equal((await off.stop()).code, 0);
    });

    test("--disable-log-stats: no periodic stats line (vLLM's, every 10 s)", async () => {
        const script = writeScript([ids(" fine.")]);
        const base = ["--log-level", "debug", "serve", "--port", "0", "--executor", "scripted", "--script", script, "--served-model-name", "m"];
        const on = await serve(base);
        const off = await serve([...base, "--disable-log-stats"]);
        // The first line is due 10 s after start; wait for it (a loaded machine may be late), then the
        // other server, started at the same time, has had as long.
        await until(() => /Avg prompt throughput/.test(on.stderr()), 30000);
        assert.match(on.stderr(), /Avg prompt throughput: [\d.]+ tokens\/s, Avg generation throughput/);
        assert.ok(!/Avg prompt throughput/.test(off.stderr()), off.stderr());
        assert.equal((await on.stop()).code, 0);
        assert.equal((await off.stop()).code, 0);
    });
});
