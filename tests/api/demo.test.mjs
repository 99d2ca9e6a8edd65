// The embedded default model (assets/demo-model, issue 8) behind `voltllm serve` with no model given,
// through the official openai client: a greedy chat request comes back as well-formed harmony, i.e.
// non-empty final content, separate non-empty reasoning, finish_reason "stop", no markup; and streaming
// gives the same text. (Token-exact agreement of this model with transformers is tests/unit/demo/.)
import { test, before, after, describe } from "node:test";
import assert from "node:assert/strict";
import { startServer, client } from "./helpers.mjs";

const CONTROL = ["<|channel|>", "<|message|>", "<|start|>", "<|end|>", "<|return|>", "<|call|>", "assistantfinal"];

describe("the demo model as the default", () => {
    let server, openai;
    before(async () => {
        server = await startServer(["--kv-cache-memory-bytes", "256M"], { readyTimeoutMs: 300000 });
        openai = client(server);
    });
    after(async () => assert.equal((await server.stop()).code, 0));

    test("the default model is listed", async () => {
        const models = await openai.models.list();
        assert.equal(models.data.length, 1);
        assert.match(models.data[0].id, /demo/);
    });

    test("greedy chat: reasoning and content separated, finish_reason stop", async () => {
        const model = (await openai.models.list()).data[0].id;
        const req = {
            model,
            messages: [{ role: "user", content: "Tell me a short story about a lighthouse keeper." }],
            max_tokens: 200,
            temperature: 0,
        };
        const r = await openai.chat.completions.create(req);
        const c = r.choices[0];
        assert.equal(c.finish_reason, "stop");
        assert.ok((c.message.content ?? "").trim().length > 0, "content is empty");
        const reasoning = c.message.reasoning_content ?? c.message.reasoning ?? "";
        assert.ok(reasoning.trim().length > 0, "reasoning is empty");
        assert.notEqual(reasoning, c.message.content);
        for (const m of CONTROL) {
            assert.ok(!c.message.content.includes(m), `content holds ${m}`);
            assert.ok(!reasoning.includes(m), `reasoning holds ${m}`);
        }
        // English words, not byte noise.
        assert.match(c.message.content, /^[A-Za-z"' ,.;:!?()-]+$/);
        assert.equal(r.usage.completion_tokens > 0, true);

        const stream = await openai.chat.completions.create({ ...req, stream: true });
        let content = "", streamedReasoning = "", finish = null;
        for await (const chunk of stream) {
            const ch = chunk.choices[0];
            content += ch?.delta?.content ?? "";
            streamedReasoning += ch?.delta?.reasoning_content ?? "";
            if (ch?.finish_reason) finish = ch.finish_reason;
        }
        assert.equal(content, c.message.content);
        assert.equal(streamedReasoning, reasoning);
        assert.equal(finish, "stop");
    });
});
