// embeddings_sdk.mjs — the official `openai` npm SDK's embeddings.create
// against a real pagoda gateway + worker (started by embeddings_sdk.sh).
// Prints "ok - …" / "not ok - …".
//
// env: URL  the gateway; KEY  a bearer secret; MODEL  the model name; DIM  its embedding size
// tests/js/node_modules holds the SDK (bash tests/js/ensure.sh installs it)
import OpenAI from "../js/node_modules/openai/index.mjs";
import { ok, exitCode } from "./tap.mjs";

const { URL, KEY, MODEL } = process.env;
const DIM = Number(process.env.DIM);
const client = new OpenAI({ baseURL: `${URL}/v1`, apiKey: KEY, maxRetries: 0, timeout: 60000 });
const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));
const maxDiff = (a, b) => a.reduce((m, x, i) => Math.max(m, Math.abs(x - b[i])), 0);
async function caught(fn) {
  try {
    await fn();
    return null;
  } catch (e) {
    return e;
  }
}
const text = "Once upon a time, there was a little girl named Lily.";

// float, one string
const f = await client.embeddings.create({ model: MODEL, input: text, encoding_format: "float" });
ok(f.object === "list" && f.model === MODEL && f.data.length === 1 && f.data[0].object === "embedding" &&
   f.data[0].index === 0, "float, string input: OpenAI shape");
const v = f.data[0].embedding;
ok(Array.isArray(v) && v.length === DIM && v.every(Number.isFinite), `float: ${DIM} finite numbers`);
ok(Math.abs(norm(v) - 1) < 1e-5, `float: L2-normalised (|v| = ${norm(v).toFixed(7)})`);
ok(f.usage.prompt_tokens > 0 && f.usage.total_tokens === f.usage.prompt_tokens, `usage ${JSON.stringify(f.usage)}`);

// the SDK's default asks for base64 and decodes it: the same vector
const d = await client.embeddings.create({ model: MODEL, input: text });
ok(d.data[0].embedding.length === DIM && maxDiff(d.data[0].embedding, v) <= 1e-6,
   "SDK default (base64 on the wire, decoded by the SDK) = the float answer");

// base64 asked explicitly: a string of little-endian float32 bytes
const b = await client.embeddings.create({ model: MODEL, input: [text, "The end."], encoding_format: "base64" });
const raw = Buffer.from(b.data[0].embedding, "base64");
const fromB64 = Array.from({ length: raw.length / 4 }, (_, i) => raw.readFloatLE(4 * i));
ok(typeof b.data[0].embedding === "string" && fromB64.length === DIM && maxDiff(fromB64, v) <= 1e-6,
   "base64: a string holding the same float32 values, little-endian");

// array input: one vector per input, in order; usage sums them
const inputs = [text, "The end.", "Tom had a red ball."];
const a = await client.embeddings.create({ model: MODEL, input: inputs, encoding_format: "float" });
ok(a.data.length === 3 && a.data.every((x, i) => x.index === i), "array of strings: 3 vectors, indices 0..2");
ok(maxDiff(a.data[0].embedding, v) <= 1e-5, "array of strings: input 0 = the same text alone");
const singles = await Promise.all(inputs.map((t) => client.embeddings.create({ model: MODEL, input: t, encoding_format: "float" })));
ok(a.usage.prompt_tokens === singles.reduce((s, r) => s + r.usage.prompt_tokens, 0),
   `array usage.prompt_tokens = Σ of single requests (${a.usage.prompt_tokens})`);
ok(singles.every((r, i) => maxDiff(r.data[0].embedding, a.data[i].embedding) <= 1e-5),
   "each input alone (concurrent requests) = its vector in the batch");
const cosDiff = a.data[0].embedding.reduce((s, x, i) => s + x * a.data[2].embedding[i], 0);
ok(cosDiff < 0.99999, `different texts give different vectors (cosine ${cosDiff.toFixed(5)})`);

// token-id input
const t = await client.embeddings.create({ model: MODEL, input: [[1, 15, 30, 7], [1, 2]], encoding_format: "float" });
ok(t.data.length === 2 && t.usage.prompt_tokens === 6, "token-id arrays: 2 vectors, prompt_tokens 6");

// hostile rows → BadRequestError, server keeps serving
const bad = [
  ["empty string", { input: "" }],
  ["empty array", { input: [] }],
  ["129 inputs", { input: Array(129).fill("x") }],
  ["token id outside the vocabulary", { input: [[1, 2], [99999999]] }],
  ["negative token id", { input: [[1, -2]] }],
  ["wrong type", { input: 42 }],
  ["mixed array", { input: ["a", [1]] }],
  ["dimensions mismatch", { input: "a", dimensions: DIM + 1 }],
  ["encoding_format int8", { input: "a", encoding_format: "int8" }],
];
for (const [what, body] of bad) {
  const e = await caught(() => client.embeddings.create({ model: MODEL, encoding_format: "float", ...body }));
  ok(e instanceof OpenAI.BadRequestError && e.status === 400 && typeof e.message === "string",
     `${what} → BadRequestError 400 (${e?.status} ${String(e?.message).slice(0, 60)})`);
}
const e404 = await caught(() => client.embeddings.create({ model: "no-such-model", input: "a" }));
ok(e404 instanceof OpenAI.NotFoundError, "unknown model → NotFoundError");
const after = await client.embeddings.create({ model: MODEL, input: text, encoding_format: "float" });
ok(maxDiff(after.data[0].embedding, v) <= 1e-5, "after the hostile rows: same vector, still serving");

process.exit(exitCode());
