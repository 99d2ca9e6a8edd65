// Issue 19 through the official openai client and raw HTTP: admission counted in sequences
// (--max-seqs-per-request: a request that could never be admitted is 400 naming the limit, not
// 503 + Retry-After), and the chat contract's edge cases: a commentary preamble separated from the final
// text by a blank line, include_stop_str_in_output, no header text in content when max_tokens cuts a
// header, content null on a tool-call reply, vllm:iteration_tokens_total fed, the API key from
// VLLM_API_KEY. Runs against the scripted executor: every model output is the text of a script.
import { test, before, after, describe } from "node:test";
import assert from "node:assert/strict";
import net from "node:net";
import { startServer, client, writeScript, ids, post, apiError, metrics } from "./helpers.mjs";

const user = [{ role: "user", content: "x" }];
const weatherTool = {
    type: "function",
    function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } },
};

describe("admission in sequences", () => {
    let server, openai;
    before(async () => {
        server = await startServer([
            "--executor", "scripted", "--script", writeScript([ids("<|channel|>final<|message|>ok")]),
            "--served-model-name", "m", "--max-num-seqs", "4", "--max-queued-requests", "4",
        ]);
        openai = client(server);
    });
    after(async () => assert.equal((await server.stop()).code, 0));

    test("a request wider than --max-seqs-per-request gets 400 naming the limit", async () => {
        // 8 = --max-num-seqs + --max-queued-requests is the default limit: 3 prompts x n 3 = 9 is over it.
        // Before: admission counted HTTP requests, so this was admitted (or, past the engine's n check,
        // answered 503 + Retry-After, which retrying never cures).
        const e = await apiError(openai.completions.create({ model: "m", prompt: ["a", "b", "c"], n: 3, max_tokens: 2 }), 400);
        assert.equal(e.error?.code ?? e.code, "too_many_sequences");
        assert.match(e.message, /--max-seqs-per-request/);
        assert.match(e.message, /9 sequences/);
        const chat = await apiError(openai.chat.completions.create({ model: "m", messages: user, n: 9 }), 400);
        assert.equal(chat.param, "n");
        // At the limit: served.
        const ok = await openai.completions.create({ model: "m", prompt: ["a", "b"], n: 4, max_tokens: 2 });
        assert.equal(ok.choices.length, 8);
    });
});

describe("the chat contract's edge cases", () => {
    let server, openai;
    const PREAMBLE = "<|channel|>commentary<|message|>Let me explain.<|end|><|start|>assistant<|channel|>final<|message|>The answer is 4.";
    const CUT = "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary to";
    const STOPS = "<|channel|>final<|message|>one two STOP three";
    const CALL = '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}<|call|>';
    before(async () => {
        // Request i replays script i: the order of the tests below.
        server = await startServer([
            "--executor", "scripted", "--script", writeScript([ids(PREAMBLE), ids(PREAMBLE), ids(CUT), ids(STOPS), ids(STOPS), ids(CALL)]),
            "--served-model-name", "m",
        ], {});
        openai = client(server);
    });
    after(async () => assert.equal((await server.stop()).code, 0));

    test("a commentary preamble is separated from the final text by a blank line (streamed too)", async () => {
        const r = await openai.chat.completions.create({ model: "m", messages: user });
        assert.equal(r.choices[0].message.content, "Let me explain.\n\nThe answer is 4.");
        let streamed = "";
        for await (const c of await openai.chat.completions.create({ model: "m", messages: user, stream: true })) {
            streamed += c.choices[0]?.delta?.content ?? "";
        }
        assert.equal(streamed, "Let me explain.\n\nThe answer is 4.");
    });

    test("max_tokens right after '<|channel|>commentary to' leaks nothing into content", async () => {
        const n = ids(CUT).length;
        const r = await openai.chat.completions.create({ model: "m", messages: user, max_tokens: n });
        assert.equal(r.choices[0].finish_reason, "length");
        assert.equal(r.choices[0].message.content, "");
        assert.equal(r.choices[0].message.reasoning_content, "Need the weather.");
    });

    test("include_stop_str_in_output keeps the matched stop string", async () => {
        const with_ = await openai.chat.completions.create({ model: "m", messages: user, stop: ["STOP"], include_stop_str_in_output: true });
        assert.equal(with_.choices[0].message.content, "one two STOP");
        const without = await openai.chat.completions.create({ model: "m", messages: user, stop: ["STOP"] });
        assert.equal(without.choices[0].message.content, "one two ");
    });

    test("a tool-call reply has content null", async () => {
        const r = await openai.chat.completions.create({ model: "m", messages: user, tools: [weatherTool] });
        assert.equal(r.choices[0].finish_reason, "tool_calls");
        assert.equal(r.choices[0].message.content, null);
        assert.equal(r.choices[0].message.tool_calls[0].function.name, "get_weather");
    });

    test("vllm:iteration_tokens_total is fed (one observation per engine step)", async () => {
        const m = await metrics(server);
        const count = Object.entries(m).find(([k]) => k.startsWith("vllm:iteration_tokens_total_count"));
        assert.ok(count, "no vllm:iteration_tokens_total_count line");
        assert.ok(count[1] > 0, `vllm:iteration_tokens_total_count is ${count[1]}`);
        const sum = Object.entries(m).find(([k]) => k.startsWith("vllm:iteration_tokens_total_sum"));
        assert.ok(sum[1] >= count[1]);
    });
});

describe("the API key from VLLM_API_KEY", () => {
    let server;
    before(async () => {
        process.env.VLLM_API_KEY = "from-env";
        try {
            server = await startServer(["--executor", "scripted", "--script", writeScript([ids("ok")]), "--served-model-name", "m"]);
        } finally {
            delete process.env.VLLM_API_KEY;
        }
    });
    after(async () => assert.equal((await server.stop()).code, 0));

    test("requests need the key from the environment (before: only --api-key was read)", async () => {
        const none = await fetch(server.url("/v1/models"));
        assert.equal(none.status, 401);
        const wrong = await fetch(server.url("/v1/models"), { headers: { Authorization: "Bearer from-en" } });
        assert.equal(wrong.status, 401);
        const right = await fetch(server.url("/v1/models"), { headers: { Authorization: "Bearer from-env" } });
        assert.equal(right.status, 200);
        assert.equal((await fetch(server.url("/health"))).status, 200);
    });
});

describe("a half-closed client", () => {
    let server;
    before(async () => {
        server = await startServer(["--executor", "scripted", "--script", writeScript([ids("<|channel|>final<|message|>four")]), "--served-model-name", "m"]);
    });
    after(async () => assert.equal((await server.stop()).code, 0));

    test("gets its whole chat completion after shutdown(SHUT_WR) (before: the headers, then nothing)", async () => {
        const port = Number(new URL(server.baseURL).port);
        const body = JSON.stringify({ model: "m", messages: user, max_tokens: 20 });
        const text = await new Promise((resolve, reject) => {
            const s = net.connect(port, "127.0.0.1", () => {
                s.end(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
            });
            let data = "";
            const timer = setTimeout(() => {
                s.destroy();
                reject(new Error(`no whole answer in 10 s: ${JSON.stringify(data)}`));
            }, 10000);
            s.on("data", (d) => {
                data += d;
                if (data.includes('"usage"')) {
                    clearTimeout(timer);
                    s.destroy();
                    resolve(data);
                }
            });
            s.on("error", () => {});
        });
        assert.match(text, /^HTTP\/1\.1 200/);
        assert.match(text, /"content":"four"/);
    });
});
