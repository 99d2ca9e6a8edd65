// The engine across processes (docs/parallel.md "Several processes") behind the API: `voltllm serve` on
// the demo model as 2 tensor-parallel processes launched vLLM's way (--nnodes 2 --node-rank K
// --master-addr --master-port): rank 0 serves HTTP and drives rank 1. A greedy chat answer (text and
// logprobs) equals the same split as threads of one process; SIGTERM to rank 0 ends both processes with
// exit 0; a worker killed while rank 0 is idle makes rank 0 shut down with exit 1, naming the cause.
import { test, describe } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { BIN, startServer, client } from "./helpers.mjs";
import { fixedPort } from "./ports.mjs";

const COMMON = ["--kv-cache-memory-bytes", "256M", "--tensor-parallel-size", "2", "--collective-timeout", "20"];

// Rank 1: no HTTP; resolves its exit status.
function startWorker(port) {
    const proc = spawn(BIN, ["serve", ...COMMON, "--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1", "--master-port", String(port)], { stdio: ["ignore", "pipe", "pipe"] });
    let err = "";
    proc.stderr.on("data", (d) => {
        err += d;
    });
    proc.stdout.on("data", () => {});
    const exited = new Promise((resolve) => proc.on("exit", (code, signal) => resolve({ code, signal })));
    return { proc, exited, stderr: () => err };
}

async function startPair() {
    const port = await fixedPort();
    const worker = startWorker(port);
    const server = await startServer([...COMMON, "--nnodes", "2", "--node-rank", "0", "--master-addr", "127.0.0.1", "--master-port", String(port)], { readyTimeoutMs: 300000 });
    return { worker, server };
}

function within(ms, promise, what) {
    return Promise.race([promise, new Promise((_, reject) => setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms))]);
}

async function greedyChat(server) {
    const openai = client(server);
    const model = (await openai.models.list()).data[0].id;
    const r = await openai.chat.completions.create({
        model,
        messages: [{ role: "user", content: "Tell me about the old harbor town." }],
        max_tokens: 48,
        temperature: 0,
        logprobs: true,
        top_logprobs: 2,
    });
    const c = r.choices[0];
    return { content: c.message.content, reasoning: c.message.reasoning_content ?? c.message.reasoning, finish: c.finish_reason, logprobs: c.logprobs };
}

describe("serve across 2 processes (TP 2, --nnodes)", () => {
    test("a greedy chat answer equals the threads' one; SIGTERM to rank 0 ends both with exit 0", async () => {
        const threads = await startServer(COMMON, { readyTimeoutMs: 300000 });
        const want = await greedyChat(threads);
        assert.equal((await threads.stop()).code, 0);

        const { worker, server } = await startPair();
        const got = await greedyChat(server);
        assert.ok((got.reasoning ?? "").length + (got.content ?? "").length > 0, "empty answer");
        assert.ok(got.logprobs && got.logprobs.content.length > 0, "no logprobs");
        assert.deepEqual(got, want);
        assert.equal((await server.stop()).code, 0);
        const w = await within(20000, worker.exited, "the worker's exit");
        assert.equal(w.code, 0, worker.stderr());
        assert.match(worker.stderr(), /rank 1 of 2: stopped/);
    });

    test("a worker killed while rank 0 is idle: rank 0 shuts down with exit 1, naming the cause", async () => {
        const { worker, server } = await startPair();
        await greedyChat(server);  // the group works first
        worker.proc.kill("SIGKILL");
        const r = await within(20000, server.exited, "rank 0's exit");
        assert.equal(r.code, 1, server.stderr());
        assert.match(server.stderr(), /parallel: the group of processes is lost \(rank 1 closed its connection \(failed or exited\)\); shutting down/);
        assert.match(server.stderr(), /stopped: the group of processes was lost/);
    });
});
