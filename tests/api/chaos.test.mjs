// The chaos test of issue 20: `voltllm router` over three `voltllm supervise -- voltllm serve` (the demo
// model on the CPU, real processes) under steady streaming load. (a) kill -9 one server; (b) SIGSTOP a
// second for less than its supervisor's bound, then SIGCONT: the router ejects and re-admits it and its
// supervisor does not restart it; (c) SIGSTOP a third past the bound: its supervisor kills and restarts it.
// Asserted: every request completes with all its tokens (usage), or, only when it had started streaming
// from a backend that died, ends with the router's error event naming that backend, then [DONE] (never
// a silent truncation, never another status); service is restored within 30 s of each event (a request
// started after it completes); every backend is admitted again at the end; the supervisors restarted
// exactly the processes that died or hung past the bound. Everything waits by polling with generous
// bounds; nothing asserts a duration it does not control. Then --launch: the router starts two
// supervised servers itself and stops them on SIGTERM.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fixedPort } from "./ports.mjs";

// As helpers.mjs has it (not imported: this test needs no npm package).
const BIN = process.env.VOLTLLM_BIN || path.resolve("build/tools/voltllm");

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Every process a test started, and every server pid it learned, so that a failing test leaves nothing
// running (SIGCONT first: a stopped process may be among them). Pids only, never names.
const spawned = [];
const serverPids = new Set();
// A failing test: SIGTERM first (a supervisor forwards it to its server, even one whose pid the test
// never learned), then SIGKILL what is left.
async function cleanup() {
    for (const p of spawned) if (p.exitCode === null && p.signalCode === null) p.kill("SIGTERM");
    const end = Date.now() + 10000;
    while (Date.now() < end && spawned.some((p) => p.exitCode === null && p.signalCode === null)) await sleep(50);
    killAll();
}
function killAll() {
    for (const pid of serverPids) {
        for (const sig of ["SIGCONT", "SIGKILL"]) {
            try {
                process.kill(pid, sig);
            } catch {}
        }
    }
    for (const p of spawned) if (p.exitCode === null && p.signalCode === null) p.kill("SIGKILL");
}
process.on("exit", killAll);
const t0 = Date.now();
const note = (what) => console.log(`# ${((Date.now() - t0) / 1000).toFixed(1)} s: ${what}`);

// Starts a process; resolves with it once `pattern` appears on its stdout (match[1] returned).
function start(args, pattern, timeoutMs = 120000) {
    const proc = spawn(BIN, args, { stdio: ["ignore", "pipe", "pipe"] });
    spawned.push(proc);
    let out = "", err = "";
    proc.stderr.on("data", (d) => (err += d));
    const exited = new Promise((resolve) => proc.on("exit", (code, signal) => resolve({ code, signal })));
    const found = new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no ${pattern} in ${timeoutMs} ms:\n${out}\n${err}`)), timeoutMs);
        proc.stdout.on("data", (d) => {
            out += d;
            const m = out.match(pattern);
            if (m) {
                clearTimeout(timer);
                resolve(m[1]);
            }
        });
        exited.then(({ code }) => reject(new Error(`exited (${code}):\n${out}\n${err}`)));
    });
    return found.then((value) => ({ proc, value, exited, log: () => out + err }));
}

async function getJson(url) {
    const r = await fetch(url, { signal: AbortSignal.timeout(5000) });
    return { status: r.status, json: await r.json() };
}

// Polls `fn` (async, returns a truthy value when done) every 100 ms for up to `ms`.
async function until(what, fn, ms = 60000) {
    const end = Date.now() + ms;
    let last;
    while (Date.now() < end) {
        try {
            last = await fn();
            if (last) return last;
        } catch (e) {
            last = e;
        }
        await sleep(100);
    }
    throw new Error(`timed out waiting for ${what} (last: ${JSON.stringify(String(last))})`);
}

async function routerMetrics(base) {
    const text = await (await fetch(base + "/metrics", { signal: AbortSignal.timeout(5000) })).text();
    const m = {};
    for (const line of text.split("\n")) {
        if (line.startsWith("#") || !line.trim()) continue;
        const i = line.lastIndexOf(" ");
        m[line.slice(0, i)] = Number(line.slice(i + 1));
    }
    return m;
}
const upKey = (url) => `voltllm_router_backend_up{backend="${url}"}`;

const MAX_TOKENS = 32;

// One streamed completion through the router; resolves with what happened (never rejects).
async function streamOnce(base) {
    const r = { start: Date.now(), end: 0, status: 0, chunks: 0, errorAt: -1, done: false, error: null, usage: null, exception: null };
    try {
        const res = await fetch(base + "/v1/completions", {
            method: "POST",
            headers: { "Content-Type": "application/json" },
            body: JSON.stringify({
                model: "demo-model",
                prompt: "Once upon a time",
                max_tokens: MAX_TOKENS,
                ignore_eos: true,
                temperature: 0,
                stream: true,
                stream_options: { include_usage: true },
            }),
            signal: AbortSignal.timeout(90000),
        });
        r.status = res.status;
        const text = await res.text();
        r.errorAt = text.indexOf('data: {"error"');
        for (const event of text.split("\n\n")) {
            const data = event
                .split("\n")
                .filter((l) => l.startsWith("data: "))
                .map((l) => l.slice(6))
                .join("\n");
            if (!data) continue;
            if (data === "[DONE]") {
                r.done = true;
                continue;
            }
            const j = JSON.parse(data);
            if (j.error) r.error = j.error;
            else if (j.usage) r.usage = j.usage;
            else r.chunks += 1;
        }
    } catch (e) {
        r.exception = String(e);
    }
    r.end = Date.now();
    return r;
}

test("router over three supervised servers: kill -9, a short SIGSTOP, a long SIGSTOP", { timeout: 170000 }, async (t) => {
    t.after(cleanup);
    const dir = mkdtempSync(path.join(tmpdir(), "voltllm-chaos-"));
    const ports = [await fixedPort(), await fixedPort(), await fixedPort()];
    const urls = ports.map((p) => `http://127.0.0.1:${p}`);
    const sups = await Promise.all(
        ports.map((p, i) =>
            start(
                [
                    "supervise", "--probe-interval", "0.5", "--probe-timeout", "2", "--unhealthy-timeout", "10",
                    "--backoff-initial", "0.5", "--kill-grace", "5", "--status-port", "0",
                    "--log-file", path.join(dir, `server-${i}.log`),
                    "--", BIN, "serve", "--port", String(p), "--kv-cache-memory-bytes", "64M", "--disable-log-stats",
                ],
                /status on (http:\/\/\S+)/,
            ),
        ),
    );
    const statusUrl = sups.map((s) => s.value);
    const status = async (i) => (await getJson(statusUrl[i])).json;
    const router = await start(
        [
            "router", "--port", "0", ...urls.flatMap((u) => ["--backend", u]),
            "--first-byte-timeout", "3", "--idle-timeout", "30", "--connect-timeout", "1",
            "--health-interval", "0.3", "--health-timeout", "1", "--eject-time", "1", "--readmit-after", "2",
        ],
        /listening on (http:\/\/\S+) over/,
    );
    const base = router.value;
    await until("three backends admitted", async () => (await getJson(base + "/health")).json.backends_up === 3, 120000);
    await until("three supervisors ready", async () => {
        for (let i = 0; i < 3; i++) if ((await status(i)).state !== "ready") return false;
        return true;
    });

    // Steady streaming load: 4 clients, each a request after the other.
    const results = [];
    let loading = true;
    const clients = Array.from({ length: 4 }, async () => {
        while (loading) results.push(await streamOnce(base));
    });
    await until("load running", async () => results.filter((r) => r.done).length >= 8, 60000);

    const events = [];
    const childPid = async (i) => {
        const pid = (await status(i)).pid;
        serverPids.add(pid);
        return pid;
    };
    for (let i = 0; i < 3; i++) await childPid(i);

    note("load running");
    // (a) kill -9 server 0: its supervisor restarts it, the router re-admits it.
    const pidA = await childPid(0);
    events.push({ name: "kill -9", t: Date.now() });
    process.kill(pidA, "SIGKILL");
    await until("supervisor 0 restarted its server", async () => {
        const s = await status(0);
        return s.restarts === 1 && s.state === "ready" && s.pid !== pidA;
    });
    await childPid(0);
    await until("server 0 re-admitted", async () => (await routerMetrics(base))[upKey(urls[0])] === 1);

    note("(a) done");
    // (b) SIGSTOP server 1 until the router ejected it (well inside the supervisor's 10 s), then SIGCONT.
    const pidB = await childPid(1);
    const stoppedAt = Date.now();
    events.push({ name: "short SIGSTOP", t: stoppedAt });
    process.kill(pidB, "SIGSTOP");
    await until("server 1 ejected", async () => (await routerMetrics(base))[upKey(urls[1])] === 0, 8000);
    await until("a second of being stopped", async () => Date.now() - stoppedAt >= 1500, 5000);
    process.kill(pidB, "SIGCONT");
    const contAt = Date.now();
    assert.ok(contAt - stoppedAt < 8000, `the short stop lasted ${contAt - stoppedAt} ms`);
    await until("server 1 re-admitted", async () => (await routerMetrics(base))[upKey(urls[1])] === 1);

    note("(b) done");
    // (c) SIGSTOP server 2 and leave it: the supervisor kills (SIGKILL: it is stopped) and restarts it.
    const pidC = await childPid(2);
    events.push({ name: "long SIGSTOP", t: Date.now() });
    process.kill(pidC, "SIGSTOP");
    await until("supervisor 2 restarted its stopped server", async () => {
        const s = await status(2);
        return s.restarts === 1 && s.state === "ready" && s.pid !== pidC;
    }, 60000);
    await childPid(2);
    await until("server 2 re-admitted", async () => (await routerMetrics(base))[upKey(urls[2])] === 1);
    note("(c) done");
    // Some requests after the last event, then stop the load.
    const after = results.length;
    await until("load after the last event", async () => results.slice(after).filter((r) => r.done).length >= 8, 60000);
    loading = false;
    await Promise.all(clients);

    // Every request: complete with all its tokens, or an error event from a backend that died mid-answer.
    const dead = [urls[0], urls[2]];
    let errors = 0;
    for (const r of results) {
        assert.equal(r.exception, null, `a request failed in the client: ${JSON.stringify(r)}`);
        assert.equal(r.status, 200, JSON.stringify(r));
        assert.ok(r.done, `a stream ended without [DONE] (truncated): ${JSON.stringify(r)}`);
        if (r.error) {
            errors += 1;
            assert.equal(r.error.code, "backend_failed", JSON.stringify(r));
            assert.ok(dead.some((u) => r.error.message.includes(u)), `error from a backend that did not die: ${r.error.message}`);
            // The router relays a backend's head with its first body bytes: an error event is never the
            // first thing a client gets (before that, the request is retried on another backend).
            assert.ok(r.errorAt > 0, `an error event on a request that had not started streaming: ${JSON.stringify(r)}`);
        } else {
            assert.equal(r.usage?.completion_tokens, MAX_TOKENS, `incomplete answer: ${JSON.stringify(r)}`);
        }
    }
    assert.ok(results.length >= 20, `only ${results.length} requests ran`);
    assert.ok(errors < results.length / 2, `${errors} of ${results.length} requests ended in an error event`);
    // Service restored within 30 s of each event: a request that started after it completed by then.
    for (const e of events) {
        const ok = results.some((r) => r.start >= e.t && !r.error && r.end - e.t <= 30000);
        assert.ok(ok, `no request completed within 30 s after ${e.name}`);
    }
    // No backend stays ejected; the supervisors restarted exactly the dead and the long-stopped one.
    await until("all backends admitted", async () => (await getJson(base + "/health")).json.backends_up === 3);
    const [s0, s1, s2] = [await status(0), await status(1), await status(2)];
    assert.equal(s0.restarts, 1, JSON.stringify(s0));
    assert.match(s0.last_reason, /killed by signal 9/);
    assert.equal(s1.restarts, 0, JSON.stringify(s1));
    assert.equal(s1.pid, pidB);
    assert.equal(s2.restarts, 1, JSON.stringify(s2));
    assert.match(s2.last_reason, /^stopped for/);
    // The server logs carry the restart markers.
    assert.match(readFileSync(path.join(dir, "server-0.log"), "utf8"), /==== voltllm supervise .*restart 1: started the server/);
    assert.match(readFileSync(path.join(dir, "server-2.log"), "utf8"), /==== voltllm supervise .*restart 1: started the server/);
    const m = await routerMetrics(base);
    assert.ok(m[`voltllm_router_backend_ejections_total{backend="${urls[1]}"}`] >= 1, "server 1 was never ejected");

    // SIGTERM: the router drains and exits 0; each supervisor forwards it and exits with its server's 0.
    router.proc.kill("SIGTERM");
    assert.equal((await router.exited).code, 0, router.log());
    for (const s of sups) s.proc.kill("SIGTERM");
    for (const s of sups) assert.equal((await s.exited).code, 0, s.log());
});

test("router --launch 2 starts two supervised servers and stops them on SIGTERM", { timeout: 120000 }, async (t) => {
    t.after(() => {
        for (const p of spawned) if (p.exitCode === null && p.signalCode === null) p.kill("SIGTERM");
    });
    const port = await fixedPort();
    const basePort = await fixedPort(2);  // --launch 2: basePort and basePort + 1
    const router = await start(
        [
            "router", "--port", String(port), "--launch", "2", "--launch-base-port", String(basePort),
            "--health-interval", "0.3", "--probe-interval", "1",
            "--", "voltllm", "serve", "--kv-cache-memory-bytes", "64M", "--disable-log-stats",
        ],
        /listening on (http:\/\/\S+) over 2 backend/,
    );
    const base = router.value;
    await until("two backends admitted", async () => (await getJson(base + "/health")).json.backends_up === 2, 100000);
    const models = (await getJson(base + "/v1/models")).json;
    assert.deepEqual(models.data.map((d) => d.id), ["demo-model"]);
    const r = await streamOnce(base);
    assert.ok(r.done && !r.error && r.usage?.completion_tokens === MAX_TOKENS, JSON.stringify(r));
    // Each instance answers on its own port.
    for (const p of [basePort, basePort + 1]) assert.equal((await getJson(`http://127.0.0.1:${p}/health`)).status, 200);
    router.proc.kill("SIGTERM");
    assert.equal((await router.exited).code, 0, router.log());
    for (const p of [basePort, basePort + 1]) {
        await assert.rejects(fetch(`http://127.0.0.1:${p}/health`, { signal: AbortSignal.timeout(2000) }));
    }
});
