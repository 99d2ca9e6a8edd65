// API tests of what a hostile client can send (issue 11): deeply nested JSON on every route that takes
// JSON (400 naming the limit and the field, and the server keeps serving), error messages that never echo
// a huge value whole, chunked bodies over --max-request-body-bytes (413 with the server's memory bounded),
// the API key checked before any body byte is read (401 while the body is held back), type mismatches
// (400 with param, never 500) and max_tokens near 2^63 (400 showing the value sent; no UB: under the
// sanitizer build, `runtime error:` would appear on the server's stderr).
import { test, before, after, describe } from "node:test";
import assert from "node:assert/strict";
import net from "node:net";
import { readFileSync } from "node:fs";
import { startServer, writeScript, ids, post } from "./helpers.mjs";

const DEEP = 200000;  // far past any stack: the crash of issue 11 needed ~75,000 levels
const deepArray = (n) => "[".repeat(n) + "]".repeat(n);
const deepObject = (n) => '{"a":'.repeat(n) + "1" + "}".repeat(n);
const USER = [{ role: "user", content: "x" }];

async function health(server) {
    return (await fetch(server.url("/health"))).status;
}

// The server's peak resident memory in KiB (VmHWM: a body buffered then freed still shows).
function peakRssKiB(pid) {
    const m = readFileSync(`/proc/${pid}/status`, "utf8").match(/VmHWM:\s+(\d+) kB/);
    return Number(m[1]);
}

// Raw HTTP/1.1 over a socket, for what fetch will not do (hold a body back, a chunked body past a limit).
// Sends `head` (request line and headers, without the blank line), then calls `body(socket)` once the head
// is sent. Resolves with { status, text, sent } once a whole response has arrived, or rejects after
// `timeoutMs`. Write errors after the answer (the server closed the connection) are expected.
function rawRequest(port, head, body, timeoutMs = 10000) {
    return new Promise((resolve, reject) => {
        const socket = net.connect(port, "127.0.0.1");
        let data = "";
        let done = false;
        const state = { answered: false, sent: 0 };
        const finish = (fn, v) => {
            if (done) return;
            done = true;
            clearTimeout(timer);
            state.answered = true;
            socket.destroy();
            fn(v);
        };
        const timer = setTimeout(() => finish(reject, new Error(`no answer in ${timeoutMs} ms; got ${JSON.stringify(data.slice(0, 300))}`)), timeoutMs);
        socket.on("data", (d) => {
            data += d.toString("latin1");
            const end = data.indexOf("\r\n\r\n");
            if (end < 0) return;
            const len = Number((data.slice(0, end).match(/content-length:\s*(\d+)/i) || [])[1] ?? -1);
            if (len >= 0 && data.length >= end + 4 + len) {
                const status = Number(data.slice(9, 12));
                finish(resolve, { status, text: data.slice(end + 4, end + 4 + len), head: data.slice(0, end), sent: state.sent });
            }
        });
        socket.on("error", () => {});  // a reset after the answer, or while we still write
        socket.on("close", () => finish(reject, new Error(`closed without a whole answer: ${JSON.stringify(data.slice(0, 300))}`)));
        socket.write(head + "\r\n\r\n", () => body(socket, state));
    });
}

describe("deep nesting, long values, types and overflow (no API key)", () => {
    let server;
    before(async () => {
        server = await startServer([
            "--executor", "scripted", "--script", writeScript([ids("ok")]), "--served-model-name", "m",
            "--max-model-len", "4096",
        ]);
    });
    after(async () => {
        assert.ok(!server.stderr().includes("runtime error:"), server.stderr());
        assert.equal((await server.stop()).code, 0);
    });

    // Each route that takes JSON, with the nesting where the issue found the crash.
    const cases = [
        ["/detokenize", `{"tokens":${deepArray(DEEP)}}`, "tokens"],
        ["/v1/completions", `{"model":"m","prompt":${deepArray(DEEP)}}`, "prompt"],
        ["/v1/chat/completions",
         `{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":${deepObject(DEEP)}}}]}]}`,
         "messages"],
        ["/v1/chat/completions",
         `{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":${deepObject(DEEP)}}}]}`,
         "tools"],
        ["/tokenize",
         `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":${deepObject(DEEP)}}}]}`,
         "tools"],
        ["/tokenize", `{"prompt":${deepArray(DEEP)}}`, "prompt"],
    ];
    for (const [route, body, param] of cases) {
        test(`${route}: ${DEEP} nested levels in '${param}' answer 400 and the server keeps serving`, async () => {
            const r = await post(server, route, body);
            assert.equal(r.status, 400, r.text.slice(0, 300));
            assert.equal(r.json.error.type, "invalid_request_error");
            assert.equal(r.json.error.param, param);
            assert.equal(r.json.error.code, "json_too_deep");
            assert.match(r.json.error.message, /64/);
            assert.ok(r.text.length < 1000, "the error quotes no user input whole");
            assert.equal(await health(server), 200);
        });
    }

    test("nesting just under the limit is served (tool parameters 50 levels deep)", async () => {
        const body = JSON.stringify({
            messages: USER,
            tools: [{ type: "function", function: { name: "f", parameters: JSON.parse(deepObject(50)) } }],
        });
        const r = await post(server, "/tokenize", body);
        assert.equal(r.status, 200, r.text.slice(0, 300));
        assert.ok(r.json.count > 0);
    });

    test("error messages quote at most a short prefix of a bad value", async () => {
        const long = "y".repeat(1 << 20);
        const bodies = [
            ["/detokenize", JSON.stringify({ tokens: [{ a: long }] }), "tokens"],
            ["/detokenize", JSON.stringify({ tokens: [long] }), "tokens"],
            ["/v1/completions", JSON.stringify({ model: "m", prompt: [1, [long]] }), "prompt"],
            ["/v1/chat/completions", JSON.stringify({ model: "m", messages: [{ role: long, content: "x" }] }), "messages[0].role"],
            ["/v1/chat/completions", JSON.stringify({ model: "m", messages: USER, reasoning_effort: long }), "reasoning_effort"],
            ["/v1/chat/completions", JSON.stringify({ model: "m", messages: USER, tool_choice: long }), "tool_choice"],
            ["/v1/chat/completions", JSON.stringify({ model: "m", messages: USER, tools: [{ type: "function", function: { name: long } }] }), "tools[0].function.name"],
            ["/v1/chat/completions", JSON.stringify({ model: "m", messages: USER, logit_bias: { [long]: 1 } }), "logit_bias"],
            // Invalid JSON in a long string: the JSON parser's message quotes the token it stopped in.
            ["/tokenize", `{"prompt":"${long}\u0001"}`, null],
        ];
        for (const [route, body, param] of bodies) {
            const r = await post(server, route, body);
            assert.equal(r.status, 400, r.text.slice(0, 300));
            assert.equal(r.json.error.param, param);
            assert.ok(r.text.length < 1000, `${route} ${param}: ${r.text.length} bytes of error`);
        }
        const model = await post(server, "/v1/chat/completions", JSON.stringify({ model: long, messages: USER }));
        assert.equal(model.status, 404);
        assert.equal(model.json.error.param, "model");
        assert.ok(model.text.length < 1000, `${model.text.length} bytes of error`);
        assert.equal(await health(server), 200);
    });

    test("a non-string type in response_format or tools is 400 with param, not 500", async () => {
        const cases = [
            [{ response_format: { type: 5 } }, "response_format.type"],
            [{ response_format: { type: ["text"] } }, "response_format.type"],
            [{ tools: [{ type: 7, function: { name: "f" } }] }, "tools[0].type"],
            [{ tools: [{ type: null, function: { name: "f" } }] }, "tools[0].type"],
        ];
        for (const [extra, param] of cases) {
            const body = JSON.stringify({ model: "m", messages: USER, ...extra });
            for (const route of ["/v1/chat/completions", ...(extra.tools ? ["/tokenize"] : [])]) {
                const r = await post(server, route, body);
                assert.equal(r.status, 400, `${route} ${body}: ${r.text}`);
                assert.equal(r.json.error.type, "invalid_request_error");
                assert.equal(r.json.error.param, param, body);
            }
        }
        const r = await post(server, "/v1/completions", JSON.stringify({ model: "m", prompt: "x", response_format: { type: 5 } }));
        assert.equal(r.status, 400, r.text);
        assert.equal(r.json.error.param, "response_format.type");
    });

    test("max_tokens near 2^63: 400 whose message shows the value sent", async () => {
        // Raw bodies: JavaScript numbers cannot hold these integers exactly.
        for (const v of ["9223372036854775807", "9223372036854775806", "9223372036854775000"]) {
            const chat = await post(server, "/v1/chat/completions",
                `{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":${v}}`);
            assert.equal(chat.status, 400, chat.text);
            assert.equal(chat.json.error.param, "messages");
            assert.equal(chat.json.error.code, "context_length_exceeded");
            assert.ok(chat.json.error.message.includes(v), chat.json.error.message);
            const cmpl = await post(server, "/v1/completions", `{"model":"m","prompt":"x","max_tokens":${v}}`);
            assert.equal(cmpl.status, 400, cmpl.text);
            assert.equal(cmpl.json.error.param, "prompt");
            assert.ok(cmpl.json.error.message.includes(v), cmpl.json.error.message);
            const comp = await post(server, "/v1/chat/completions",
                `{"model":"m","messages":[{"role":"user","content":"x"}],"max_completion_tokens":${v}}`);
            assert.equal(comp.status, 400, comp.text);
            assert.ok(comp.json.error.message.includes(v), comp.json.error.message);
        }
        // Past int64: the range check names the value.
        const over = await post(server, "/v1/chat/completions",
            `{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":9223372036854775808}`);
        assert.equal(over.status, 400, over.text);
        assert.equal(over.json.error.param, "max_tokens");
        assert.ok(over.json.error.message.includes("9223372036854775808"), over.json.error.message);
        assert.equal(await health(server), 200);
    });

});

describe("body limit and API key on chunked uploads (--max-request-body-bytes 1M, --api-key)", () => {
    let server, port;
    const KEY = "sekret";
    before(async () => {
        server = await startServer([
            "--executor", "scripted", "--script", writeScript([ids("ok")]), "--served-model-name", "m",
            "--api-key", KEY, "--max-request-body-bytes", "1M",
        ]);
        port = Number(new URL(server.baseURL).port);
    });
    after(async () => assert.equal((await server.stop()).code, 0));

    // Writes up to `total` bytes of `piece` as HTTP chunks, stopping once the answer is in.
    const sendChunks = (total, piece) => (socket, state) => {
        const chunk = `${piece.length.toString(16)}\r\n${piece}\r\n`;
        const more = () => {
            while (!state.answered && state.sent < total) {
                state.sent += piece.length;
                if (!socket.write(chunk)) return socket.once("drain", more);
            }
            if (!state.answered) socket.write("0\r\n\r\n");
        };
        const start = '{"prompt":"';
        socket.write(`${start.length.toString(16)}\r\n${start}\r\n`);
        more();
    };

    test("a chunked body past the limit: 413, and the server never holds it (peak RSS)", async () => {
        const before = peakRssKiB(server.proc.pid);
        const total = 256 << 20;
        const r = await rawRequest(port,
            `POST /tokenize HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked`,
            sendChunks(total, "x".repeat(1 << 16)));
        assert.equal(r.status, 413, r.text.slice(0, 300));
        assert.equal(JSON.parse(r.text).error.code, "request_too_large");
        assert.ok(r.sent < total, "answered before the whole body was sent");
        const grown = peakRssKiB(server.proc.pid) - before;
        assert.ok(grown < 64 * 1024, `peak RSS grew by ${grown} KiB for a 1M limit`);
        assert.equal(await health(server), 200);
    });

    test("Content-Length past the limit: 413 before the body is read (the client is still sending)", async () => {
        const total = 256 << 20;
        const piece = "x".repeat(1 << 16);
        const r = await rawRequest(port,
            `POST /tokenize HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\nContent-Type: application/json\r\nContent-Length: ${total}`,
            (socket, state) => {
                const more = () => {
                    while (!state.answered && state.sent < total) {
                        state.sent += piece.length;
                        if (!socket.write(piece)) return socket.once("drain", more);
                    }
                };
                more();
            });
        assert.equal(r.status, 413, r.text);
        assert.equal(JSON.parse(r.text).error.code, "request_too_large");
        assert.ok(r.sent < total, "answered before the whole body was sent");
        assert.equal(await health(server), 200);
    });

    test("a chunked body under the limit is served", async () => {
        const r = await rawRequest(port,
            `POST /tokenize HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked`,
            (socket) => {
                for (const part of ['{"prom', 'pt":"hello', ' world"}']) socket.write(`${part.length.toString(16)}\r\n${part}\r\n`);
                socket.write("0\r\n\r\n");
            });
        assert.equal(r.status, 200, r.text);
        assert.deepEqual(JSON.parse(r.text).tokens, ids("hello world"));
    });

    for (const framing of ["Transfer-Encoding: chunked", "Content-Length: 500000"]) {
        test(`no API key, ${framing}, body held back: 401 arrives before any body byte is sent`, async () => {
            const r = await rawRequest(port,
                `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${framing}`,
                () => {});  // the body never comes
            assert.equal(r.status, 401, r.text);
            assert.equal(JSON.parse(r.text).error.code, "invalid_api_key");
            assert.equal(await health(server), 200);
        });
    }

    test("no API key with a chunked body being sent: 401 long before the body is all sent", async () => {
        const total = 256 << 20;
        const r = await rawRequest(port,
            "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked",
            sendChunks(total, "x".repeat(1 << 16)));
        assert.equal(r.status, 401, r.text);
        assert.ok(r.sent < total);
    });
});
