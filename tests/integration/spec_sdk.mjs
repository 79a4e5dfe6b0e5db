// spec_sdk.mjs — speculative decoding through the official `openai` npm SDK
// (started by spec_sdk.sh): model "spec" runs with --spec ngram, model
// "plain" on the same file without; every answer must be the same text.
// Prints "ok - …" / "not ok - …".
//
// env: URL  the gateway
import { createRequire } from "node:module";
import { ok, exitCode } from "./tap.mjs";
const require = createRequire(new URL("../js/package.json", import.meta.url));
const OpenAI = require("openai").default ?? require("openai");
const { zodResponseFormat } = require("openai/helpers/zod");
const { z } = require("zod");

const client = new OpenAI({ baseURL: `${process.env.URL}/v1`, apiKey: "none", maxRetries: 0, timeout: 60000 });
// story openings: tiny stories repeat themselves, so prompt lookup drafts hit
const PROMPTS = [
  "Once upon a time, there was a little girl named Lily. She loved to play outside",
  "One day, a boy named Tom went to the park with his mom. He saw a big red ball",
  "There was a cat who lived in a small house. The cat liked to sleep in the sun",
];

async function both(params) {
  const [a, b] = await Promise.all(
    ["spec", "plain"].map((model) => client.completions.create({ model, ...params })));
  return [a.choices[0].text, b.choices[0].text, a, b];
}

for (const [i, prompt] of PROMPTS.entries()) {
  const [s, p] = await both({ prompt, max_tokens: 96, temperature: 0, ignore_eos: true });
  ok(s === p && s.length > 100, `greedy prompt ${i}: same ${s.length} bytes with and without speculation`);
  const [ss, ps] = await both({ prompt, max_tokens: 64, temperature: 0.9, top_p: 0.95, seed: 40 + i });
  ok(ss === ps && ss.length > 0, `seeded sampling prompt ${i} (T 0.9, top_p 0.95): same text`);
}

// a draft model (the file itself): greedy and seeded answers equal the plain ones
for (const [i, prompt] of PROMPTS.entries()) {
  const params = { prompt, max_tokens: 64, temperature: i ? 0.9 : 0, seed: 70 + i };
  const [d, p] = await Promise.all(["drafted", "plain"].map((model) =>
    client.completions.create({ model, ...params }).then((r) => r.choices[0].text)));
  ok(d === p && d.length > 0, `draft model, prompt ${i} (${i ? "seeded" : "greedy"}): same text`);
}

// streamed: a step may now deliver several tokens; the chunks add up to the same text
{
  const stream = await client.completions.create({
    model: "spec", prompt: PROMPTS[0], max_tokens: 96, temperature: 0, ignore_eos: true, stream: true });
  let text = "", chunks = 0, fin = null;
  for await (const c of stream) {
    text += c.choices[0]?.text ?? "";
    chunks++;
    fin = c.choices[0]?.finish_reason ?? fin;
  }
  const [p] = await both({ prompt: PROMPTS[0], max_tokens: 96, temperature: 0, ignore_eos: true });
  ok(text === p && fin === "length", `streamed with speculation (${chunks} chunks) = the plain answer`);
}

// per-request opt-out: accepted, same text
{
  const [s, p] = await both({ prompt: PROMPTS[1], max_tokens: 48, temperature: 0, speculative: false });
  ok(s === p, `"speculative": false accepted, same text`);
  let err = null;
  try {
    await client.completions.create({ model: "spec", prompt: "x", max_tokens: 4, speculative: "no" });
  } catch (e) {
    err = e;
  }
  ok(err && err.status === 400 && /speculative/.test(String(err.message)),
     `"speculative": "no" → 400 naming the field (${err && err.status})`);
}

// logprobs: such requests decode a token per step; every token keeps its logprobs
{
  const r = await client.completions.create({
    model: "spec", prompt: PROMPTS[0], max_tokens: 96, temperature: 0, ignore_eos: true, logprobs: 2 });
  const [p] = await both({ prompt: PROMPTS[0], max_tokens: 96, temperature: 0, ignore_eos: true });
  const lp = r.choices[0].logprobs;
  ok(r.choices[0].text === p && lp.tokens.length === 96 && lp.top_logprobs.every((t) => Object.keys(t).length >= 1),
     `logprobs with speculation on: 96 tokens, each with its logprobs (${lp.tokens.length})`);
}

// a json_schema response (zod 4 through the SDK's helper): drafts stay inside the grammar
{
  const Pet = z.object({ name: z.string().max(12), kind: z.enum(["cat", "dog"]), age: z.number().int() });
  const out = [];
  for (const model of ["spec", "plain"]) {
    const r = await client.chat.completions.parse({
      model, messages: [{ role: "user", content: "A pet." }], temperature: 0.8, seed: 7, max_tokens: 120,
      response_format: zodResponseFormat(Pet, "pet") });
    out.push(r.choices[0]);
  }
  ok(out[0].message.content === out[1].message.content && out[0].finish_reason === "stop" &&
     Pet.safeParse(out[0].message.parsed).success,
     `zod json_schema, seeded: same parsed document (${JSON.stringify(out[0].message.content).slice(0, 60)})`);
}
process.exit(exitCode());
