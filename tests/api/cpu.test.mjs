// API tests against the CPU executor on tiny-chat (random weights, the real gpt-oss tokenizer; made once
// with `voltllm make-model`, helpers.mjs): chat, streaming (equal to non-streaming under greedy decoding),
// completions, tokenize, 256 concurrent streams, client disconnects mid-stream and before the first
// byte free every KV block (BUG-26), a full queue answers 503 with Retry-After, SIGTERM mid-stream ends
// the stream cleanly and exits 0. Random weights make the text arbitrary: the assertions are on shape,
// counts and equalities that hold for any model.
import { test, before, after, describe } from "node:test";
import assert from "node:assert/strict";
import { startServer, client, ids, post, apiError, metrics, waitForMetrics, tinyChatDir, NO_HARMONY_STOP } from "./helpers.mjs";

const CONTROL = ["<|channel|>", "<|message|>", "<|start|>", "<|end|>", "<|return|>", "<|call|>"];
const idle = (m) =>
    m['voltllm_kv_blocks_used{group="full"}'] === 0 &&
    m['voltllm_kv_blocks_used{group="sliding"}'] === 0 &&
    m.voltllm_num_requests_running === 0 &&
    m.voltllm_num_requests_waiting === 0;

describe("tiny-chat on the CPU", () => {
    let server, openai;
    before(async () => {
        server = await startServer([tinyChatDir(), "--served-model-name", "tiny-chat", "--max-model-len", "2048", "--max-num-seqs", "256", "--kv-cache-memory-bytes", "256M"], { readyTimeoutMs: 300000 });
        openai = client(server);
    });
    after(async () => assert.equal((await server.stop()).code, 0));

    test("chat: greedy non-streaming equals streaming; usage counts", async () => {
        const req = { model: "tiny-chat", messages: [{ role: "user", content: "Hello!" }], max_tokens: 12, temperature: 0, ignore_eos: true };
        const r = await openai.chat.completions.create(req);
        assert.equal(r.choices[0].finish_reason, "length");
        assert.equal(r.usage.completion_tokens, 12);
        const m = r.choices[0].message;
        for (const c of CONTROL) assert.ok(!(m.content ?? "").includes(c));
        const stream = await openai.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
        let content = "", reasoning = "", usage = null;
        for await (const c of stream) {
            content += c.choices[0]?.delta?.content ?? "";
            reasoning += c.choices[0]?.delta?.reasoning_content ?? "";
            if (c.usage) usage = c.usage;
        }
        assert.equal(content, m.content ?? "");
        assert.equal(reasoning, m.reasoning_content ?? "");
        assert.deepEqual(usage, r.usage);
    });

    test("completions with token ids and tokenize", async () => {
        const prompt = ids("The quick brown fox");
        const r = await openai.completions.create({ model: "tiny-chat", prompt, max_tokens: 5, temperature: 0, ignore_eos: true });
        assert.equal(r.usage.prompt_tokens, prompt.length);
        assert.equal(r.usage.completion_tokens, 5);
        assert.equal(r.choices[0].finish_reason, "length");
        const t = await post(server, "/tokenize", JSON.stringify({ prompt: "The quick brown fox" }));
        assert.deepEqual(t.json.tokens, prompt);
    });

    test("greedy logprobs: each sampled token is the most likely one", async () => {
        const r = await openai.completions.create({ model: "tiny-chat", prompt: "Once upon", max_tokens: 6, temperature: 0, ignore_eos: true, logprobs: 3 });
        const lp = r.choices[0].logprobs;
        assert.equal(lp.tokens.length, 6);
        lp.token_logprobs.forEach((v, i) => {
            const top = Object.values(lp.top_logprobs[i]);
            assert.ok(top.length >= 1 && top.length <= 3);
            assert.ok(v <= 0);
            assert.ok(Math.abs(v - Math.max(...top)) < 1e-5, `token ${i}: ${v} vs top ${top}`);
        });
    });

    test("256 concurrent streams all finish", async () => {
        const one = async (i) => {
            const stream = await openai.chat.completions.create({
                model: "tiny-chat", messages: [{ role: "user", content: `Request ${i}` }], max_tokens: 4,
                ignore_eos: true, ...NO_HARMONY_STOP, stream: true, stream_options: { include_usage: true },
            });
            let finish = null, usage = null;
            for await (const c of stream) {
                finish = c.choices[0]?.finish_reason ?? finish;
                if (c.usage) usage = c.usage;
            }
            return { finish, completion: usage?.completion_tokens };
        };
        const t0 = Date.now();
        const results = await Promise.all(Array.from({ length: 256 }, (_, i) => one(i)));
        const s = (Date.now() - t0) / 1000;
        console.log(`256 streams of 4 tokens in ${s.toFixed(1)} s`);
        const odd = results.filter((r) => !(r.finish === "length" && r.completion === 4));
        assert.equal(odd.length, 0, `streams that did not end by length after 4 tokens: ${JSON.stringify(odd)}`);
        await waitForMetrics(server, idle, 10000);
    });

    test("a client that leaves mid-stream is aborted and its KV blocks freed (BUG-26)", async () => {
        const controller = new AbortController();
        const stream = await openai.chat.completions.create(
            { model: "tiny-chat", messages: [{ role: "user", content: "long" }], max_tokens: 1800, ignore_eos: true, ...NO_HARMONY_STOP, stream: true },
            { signal: controller.signal });
        let n = 0;
        try {
            for await (const c of stream) {
                if (++n === 5) {
                    const m = await metrics(server);
                    assert.ok(m['voltllm_kv_blocks_used{group="full"}'] > 0, "blocks in use while streaming");
                    controller.abort();
                }
            }
        } catch (e) {
            assert.ok(controller.signal.aborted, String(e));
        }
        const ms = await waitForMetrics(server, idle, 10000);
        console.log(`mid-stream disconnect: idle ${ms} ms after the abort`);
        const m = await metrics(server);
        assert.ok(m['vllm:request_success_total{model_name="tiny-chat",engine="0",finished_reason="abort"}'] >= 1);
    });

    test("a non-streaming client that leaves is aborted too", async () => {
        const controller = new AbortController();
        const p = fetch(server.url("/v1/chat/completions"), {
            method: "POST",
            signal: controller.signal,
            body: JSON.stringify({ model: "tiny-chat", messages: [{ role: "user", content: "x" }], max_tokens: 1800, ignore_eos: true, ...NO_HARMONY_STOP }),
        }).then((r) => r.text());
        await waitForMetrics(server, (m) => m['voltllm_kv_blocks_used{group="full"}'] > 0, 5000);
        controller.abort();
        await assert.rejects(p);
        const ms = await waitForMetrics(server, idle, 10000);
        console.log(`non-streaming disconnect: idle ${ms} ms after the abort`);
    });
});

describe("a full queue and SIGTERM", () => {
    let server, openai;
    before(async () => {
        server = await startServer([tinyChatDir(), "--served-model-name", "tiny-chat", "--max-model-len", "2048", "--max-num-seqs", "1", "--max-queued-requests", "0", "--kv-cache-memory-bytes", "256M",
            "--shutdown-timeout", "0.3"], { readyTimeoutMs: 300000 });
        openai = client(server);
    });
    after(async () => server.stop());

    test("503 with Retry-After when running + queued requests are at the limit; SIGTERM ends streams and exits 0", async () => {
        const stream = await openai.chat.completions.create({
            model: "tiny-chat", messages: [{ role: "user", content: "long" }], max_tokens: 1800, ignore_eos: true, ...NO_HARMONY_STOP, stream: true,
        });
        const it = stream[Symbol.asyncIterator]();
        await it.next();
        const e = await apiError(openai.chat.completions.create({ model: "tiny-chat", messages: [{ role: "user", content: "x" }] }), 503);
        assert.equal(e.type, "server_error");
        assert.equal(e.headers.get("retry-after"), "1");
        assert.equal((await fetch(server.url("/health"))).status, 200);

        // SIGTERM: the in-flight stream ends with a finish_reason and [DONE] (the client sees a clean end).
        const stopped = server.stop();
        let finish = null;
        for (let r = await it.next(); !r.done; r = await it.next()) finish = r.value.choices[0]?.finish_reason ?? finish;
        assert.ok(finish === "abort" || finish === "length", String(finish));
        assert.equal((await stopped).code, 0);
    });
});

describe("a request that leaves while queued", () => {
    let server, openai;
    before(async () => {
        server = await startServer([tinyChatDir(), "--served-model-name", "tiny-chat", "--max-model-len", "2048", "--max-num-seqs", "1", "--max-queued-requests", "1",
            "--kv-cache-memory-bytes", "256M"], { readyTimeoutMs: 300000 });
        openai = client(server);
    });
    after(async () => assert.equal((await server.stop()).code, 0));

    test("is dropped from the queue; the running one is unaffected (BUG-26)", async () => {
        const running = new AbortController();
        const stream = await openai.chat.completions.create(
            { model: "tiny-chat", messages: [{ role: "user", content: "long" }], max_tokens: 1800, ignore_eos: true, ...NO_HARMONY_STOP, stream: true },
            { signal: running.signal });
        const it = stream[Symbol.asyncIterator]();
        await it.next();
        const queued = new AbortController();
        const p = fetch(server.url("/v1/chat/completions"), {
            method: "POST", signal: queued.signal,
            body: JSON.stringify({ model: "tiny-chat", messages: [{ role: "user", content: "x" }], max_tokens: 5 }),
        }).then((r) => r.text());
        await waitForMetrics(server, (m) => m.voltllm_num_requests_waiting === 1);
        queued.abort();
        await assert.rejects(p);
        await waitForMetrics(server, (m) => m.voltllm_num_requests_waiting === 0 && m.voltllm_num_requests_running === 1);
        assert.equal((await it.next()).done, false, "the running stream still streams");
        running.abort();
        await waitForMetrics(server, idle, 10000);
    });
});
