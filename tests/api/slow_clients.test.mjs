// Hostile clients against the event-driven HTTP layer (issue 19), bounded and with liveness bounds of
// 10 s only (no timed assertions otherwise): 200 slow sockets trickling headers while /health and a real
// request keep answering; a burst of 256 fresh connections all answered; 1,000 idle keep-alive
// connections plus 256 open streams with at most 2 x cores + 8 server threads (/proc/<pid>/task); SIGTERM
// while slow clients trickle exits 0. RSS before and after is printed (test diagnostics), as are the
// latencies seen. Before (cpp-httplib, a thread per connection): /health timed out behind the slow
// sockets, the threads numbered 548, and SIGTERM never exited while a client trickled.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import net from "node:net";
import os from "node:os";
import { readFileSync, readdirSync } from "node:fs";
import { startServer, client, writeScript, ids } from "./helpers.mjs";

const LIVENESS_MS = 10000;
const cores = os.cpus().length;
const user = [{ role: "user", content: "x" }];

function status(pid) {
    const s = readFileSync(`/proc/${pid}/status`, "utf8");
    return {
        rssKiB: Number(s.match(/VmRSS:\s+(\d+) kB/)[1]),
        threads: readdirSync(`/proc/${pid}/task`).length,
    };
}

// Our own descriptor limit: the test scales its idle connections down when it is low (reported).
function fdLimit() {
    const m = readFileSync("/proc/self/limits", "utf8").match(/Max open files\s+(\d+)/);
    return m ? Number(m[1]) : 1024;
}

function connect(port) {
    return new Promise((resolve, reject) => {
        const s = net.connect(port, "127.0.0.1", () => resolve(s));
        s.on("error", reject);
    });
}

// One request on a fresh socket; resolves with the status line's code once the head arrived.
function rawGet(port, path, keepAlive) {
    return new Promise((resolve, reject) => {
        const s = net.connect(port, "127.0.0.1");
        let data = "";
        const timer = setTimeout(() => {
            s.destroy();
            reject(new Error(`no answer in ${LIVENESS_MS} ms`));
        }, LIVENESS_MS);
        s.on("data", (d) => {
            data += d;
            if (data.includes("\r\n\r\n")) {
                clearTimeout(timer);
                resolve({ code: Number(data.slice(9, 12)), socket: s });
                if (!keepAlive) s.destroy();
            }
        });
        s.on("error", (e) => {
            clearTimeout(timer);
            reject(e);
        });
        s.write(`GET ${path} HTTP/1.1\r\nHost: x\r\nConnection: ${keepAlive ? "keep-alive" : "close"}\r\n\r\n`);
    });
}

async function timed(fn) {
    const t0 = Date.now();
    const v = await fn();
    return { v, ms: Date.now() - t0 };
}

function withLiveness(promise, what) {
    let timer;
    return Promise.race([
        promise,
        new Promise((_, reject) => {
            timer = setTimeout(() => reject(new Error(`${what}: no answer in ${LIVENESS_MS} ms`)), LIVENESS_MS);
        }),
    ]).finally(() => clearTimeout(timer));
}

let server, port, openai;
const sockets = [];
before(async () => {
    // One running sequence at a time, each stream asking for 60,000 tokens past EOS: the 256 streams stay
    // open (one running, the rest queued, with heartbeats) however fast the scripted executor generates.
    const long = ids("<|channel|>final<|message|>" + "word ".repeat(100));
    server = await startServer([
        "--executor", "scripted", "--script", writeScript([long]), "--served-model-name", "m",
        "--max-num-seqs", "1", "--max-queued-requests", "1024", "--shutdown-timeout", "1",
        "--max-model-len", "65536", "--disable-log-stats",
    ]);
    port = Number(new URL(server.baseURL).port);
    openai = client(server);
});
after(async () => {
    for (const s of sockets) s.destroy();
    if (server.proc.exitCode === null) await server.stop();
});

test("200 slow sockets, a burst of 256, 1,000 idle keep-alive + 256 streams within 2 x cores + 8 threads; SIGTERM exits", async () => {
    const pid = server.proc.pid;
    const start = status(pid);
    console.log(`server at start: ${start.threads} threads, RSS ${start.rssKiB} KiB (${cores} cores)`);

    // 200 slow sockets: a header line every 500 ms, never finishing (each would hold a thread before).
    const slow = [];
    for (let i = 0; i < 200; ++i) {
        const s = await connect(port);
        s.on("error", () => {});
        s.write("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n");
        slow.push(s);
        sockets.push(s);
    }
    let line = 0;
    const trickle = setInterval(() => {
        for (const s of slow) if (!s.destroyed) s.write(`X-Slow-${line}: 1\r\n`);
        ++line;
    }, 500);
    try {
        await new Promise((r) => setTimeout(r, 1000));
        const health = await timed(() => withLiveness(fetch(server.url("/health")), "/health"));
        assert.equal(health.v.status, 200);
        const real = await timed(() => withLiveness(openai.chat.completions.create({ model: "m", messages: user, max_tokens: 3 }), "chat"));
        assert.equal(real.v.choices[0].finish_reason, "length");
        console.log(`with 200 slow sockets: /health ${health.ms} ms, a chat request ${real.ms} ms`);

        // A burst of 256 fresh connections, all at once: every one is answered (backlog = somaxconn).
        const burst = await timed(() => Promise.all(Array.from({ length: 256 }, () => rawGet(port, "/health", false))));
        assert.ok(burst.v.every((r) => r.code === 200), JSON.stringify(burst.v.map((r) => r.code)));
        console.log(`a burst of 256 connections: all answered in ${burst.ms} ms`);

        // 1,000 idle keep-alive connections (each served one /health, then left open) ...
        const idleWanted = Math.min(1000, Math.max(0, fdLimit() - 1000));
        if (idleWanted < 1000) console.log(`descriptor limit ${fdLimit()}: ${idleWanted} idle connections instead of 1,000`);
        for (let i = 0; i < idleWanted; i += 100) {
            const batch = await Promise.all(Array.from({ length: Math.min(100, idleWanted - i) }, () => rawGet(port, "/health", true)));
            for (const r of batch) {
                assert.equal(r.code, 200);
                r.socket.on("error", () => {});
                sockets.push(r.socket);
            }
        }
        // ... plus 256 streams, opened on raw sockets and read as they come.
        // Completions: no harmony stop ids, so ignore_eos really runs to max_tokens.
        const body = JSON.stringify({ model: "m", prompt: "x", stream: true, max_tokens: 60000, ignore_eos: true });
        let streamBytes = 0;
        for (let i = 0; i < 256; ++i) {
            const s = await connect(port);
            s.on("error", () => {});
            s.on("data", (d) => {
                streamBytes += d.length;
            });
            s.write(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
            sockets.push(s);
        }
        // Every stream admitted (running or queued) before counting.
        const t0 = Date.now();
        let admitted = 0;
        while (Date.now() - t0 < LIVENESS_MS) {
            const text = await (await fetch(server.url("/metrics"))).text();
            admitted = Number((text.match(/^voltllm_requests_admitted (\d+)/m) || [])[1] ?? 0);
            if (admitted >= 256) break;
            await new Promise((r) => setTimeout(r, 50));
        }
        assert.ok(admitted >= 256, `only ${admitted} streams admitted`);
        const loaded = status(pid);
        const bound = 2 * cores + 8;
        console.log(`with ${idleWanted} idle + 256 streams + 200 slow sockets: ${loaded.threads} threads (bound ${bound}), RSS ${loaded.rssKiB} KiB, ${streamBytes} stream bytes read`);
        assert.ok(loaded.threads <= bound, `${loaded.threads} threads > ${bound}`);
        const health2 = await timed(() => withLiveness(fetch(server.url("/health")), "/health under load"));
        assert.equal(health2.v.status, 200);
        console.log(`/health under the full load: ${health2.ms} ms`);
        // The idle connections and the streams go away: their requests are aborted, memory comes back.
        for (const s of sockets) if (!slow.includes(s)) s.destroy();
        const t1 = Date.now();
        while (Date.now() - t1 < LIVENESS_MS) {
            const text = await (await fetch(server.url("/metrics"))).text();
            if (Number((text.match(/^voltllm_requests_admitted (\d+)/m) || [])[1] ?? 1) === 0) break;
            await new Promise((r) => setTimeout(r, 50));
        }
        const after = status(pid);
        console.log(`after the clients left: ${after.threads} threads, RSS ${after.rssKiB} KiB (start ${start.rssKiB}, peak load ${loaded.rssKiB})`);
    } finally {
        clearInterval(trickle);
    }
    // SIGTERM while the slow sockets are still open (and the streams): exits 0 within the grace (1 s)
    // plus the liveness bound.
    for (const s of slow) if (!s.destroyed) s.write("X-More: 1\r\n");
    const stop = await withLiveness(server.stop(), "SIGTERM");
    assert.equal(stop.code, 0);
    console.log(`RSS: ${start.rssKiB} KiB at start, exit 0 after SIGTERM`);
});
