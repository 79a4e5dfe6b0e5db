// images_sdk.mjs — images through the real client libraries against a gateway
// serving a generated gemma3 text + mmproj pair (started by images.sh). Each
// client sends the same PNG before the prompt (the order images.sh's curl
// requests use) and must get pagoda-run --mmproj --image's greedy text for the
// same RGB (a PPM of those pixels; images.sh writes it to run-IMG.txt):
//   openai         chat.completions.create with an image_url data-URL part,
//                  the same streamed (chat.completions.stream), and
//                  responses.create with input_image;
//   anthropic      messages.create with an image block (base64), the same
//                  streamed (messages.stream);
//   AI SDK         generateText with an image part (@ai-sdk/openai-compatible);
//   LangChain JS   ChatOpenAI.invoke with a HumanMessage image_url part.
// Then a repeated image is a prefix-cache hit in each SDK's usage
// (prompt_tokens_details.cached_tokens, cache_read_input_tokens,
// input_tokens_details.cached_tokens) covering the image's run, and a
// truncated PNG is each SDK's typed 400 (BadRequestError) with the gateway's
// message. Prints "ok - …" / "not ok - …".
//
// env: URL the gateway; MODEL the vision model's name; DIR images.sh's $TMP
// (img/IMG.png, RUN-IMG.txt); RUN the expected texts' prefix (default "run",
// the gemma3 pair's; "irun" for the idefics3 pair's); PROMPT; N max tokens;
// CACHED_MIN the cached tokens a repeated image must report (default 40)
import fs from "node:fs";
import { createRequire } from "node:module";
import { ok, exitCode } from "./tap.mjs";
const require = createRequire(new URL("../js/package.json", import.meta.url));
const OpenAI = require("openai").default ?? require("openai");
const AnthropicMod = require("@anthropic-ai/sdk");
const Anthropic = AnthropicMod.default ?? AnthropicMod;
const ai = require("ai");
const { createOpenAICompatible } = require("@ai-sdk/openai-compatible");
const { ChatOpenAI } = require("@langchain/openai");
const { HumanMessage } = require("@langchain/core/messages");

const { URL: BASE, MODEL, DIR, PROMPT } = process.env;
const N = Number(process.env.N);
// the image's run (begin, 16 rows, end) follows the turn header (BOS,
// <start_of_turn>, "user" in at most 4 tokens, "\n"): it ends before position
// 26, so 40 cached tokens cover it (as images.sh checks with curl)
const CACHED_MIN = Number(process.env.CACHED_MIN ?? 40);
const RUN = process.env.RUN ?? "run";

async function kase(what, fn) {
  try {
    await fn();
  } catch (e) {
    ok(false, `${what}: threw ${e?.name ?? ""}: ${String(e?.message ?? e).slice(0, 400)}`);
  }
}
const png = (img) => fs.readFileSync(`${DIR}/img/${img}.png`);
const b64 = (img) => png(img).toString("base64");
const dataURL = (img) => `data:image/png;base64,${b64(img)}`;
const want = (img) => fs.readFileSync(`${DIR}/${RUN}-${img}.txt`).toString("utf8").trim();
const show = (got, exp) => `${JSON.stringify(got)} vs pagoda-run ${JSON.stringify(exp)}`;
// a PNG cut after its first 60 bytes: the header survives, the image data does not
const TRUNC = png("gradient").subarray(0, 60).toString("base64");

const openai = new OpenAI({ baseURL: `${BASE}/v1`, apiKey: "none", maxRetries: 0, timeout: 180000 });
const anthropic = new Anthropic({ baseURL: BASE, apiKey: "none", maxRetries: 0, timeout: 180000 });

// ============================== openai ==============================================
const chatBody = (url) => ({
  model: MODEL, max_tokens: N, temperature: 0,
  messages: [{ role: "user", content: [{ type: "image_url", image_url: { url } }, { type: "text", text: PROMPT }] }],
});
for (const img of ["gradient", "checker"]) {
  await kase(`openai chat ${img}`, async () => {
    const c = await openai.chat.completions.create(chatBody(dataURL(img)));
    const got = c.choices[0].message.content.trim();
    ok(got === want(img), `openai chat.completions.create, image_url data URL (${img}): pagoda-run's text ${show(got, want(img))}`);
  });
}
await kase("openai chat stream", async () => {
  const s = openai.chat.completions.stream({ ...chatBody(dataURL("gradient")), stream_options: { include_usage: true } });
  let text = "", n = 0;
  for await (const ev of s) {
    const d = ev.choices?.[0]?.delta?.content;
    if (d) { text += d; n++; }
  }
  const fin = await s.finalChatCompletion();
  const cached = fin.usage?.prompt_tokens_details?.cached_tokens ?? 0;
  ok(text.trim() === want("gradient") && n >= 1,
     `openai chat.completions.stream: ${n} deltas adding up to pagoda-run's text ${show(text.trim(), want("gradient"))}`);
  ok(cached >= CACHED_MIN, `openai stream, the repeated image: usage.prompt_tokens_details.cached_tokens ${cached} ≥ ${CACHED_MIN} of ${fin.usage?.prompt_tokens}`);
});
await kase("openai chat repeated", async () => {
  const c = await openai.chat.completions.create(chatBody(dataURL("checker")));
  const cached = c.usage?.prompt_tokens_details?.cached_tokens ?? 0;
  ok(cached >= CACHED_MIN && c.choices[0].message.content.trim() === want("checker"),
     `openai chat, the repeated image: same text, prompt_tokens_details.cached_tokens ${cached} ≥ ${CACHED_MIN} of ${c.usage?.prompt_tokens}`);
});
await kase("openai responses", async () => {
  const body = { model: MODEL, max_output_tokens: N, temperature: 0, input: [{ role: "user", content: [
    { type: "input_image", image_url: dataURL("gradient"), detail: "auto" }, { type: "input_text", text: PROMPT }] }] };
  const r = await openai.responses.create(body);
  ok(r.output_text.trim() === want("gradient"), `openai responses.create, input_image: pagoda-run's text ${show(r.output_text.trim(), want("gradient"))}`);
  const again = await openai.responses.create(body);
  const cached = again.usage?.input_tokens_details?.cached_tokens ?? 0;
  ok(cached >= CACHED_MIN, `openai responses, the repeated image: input_tokens_details.cached_tokens ${cached} ≥ ${CACHED_MIN}`);
});
await kase("openai bad image", async () => {
  let e = null;
  try {
    await openai.chat.completions.create(chatBody(`data:image/png;base64,${TRUNC}`));
  } catch (x) {
    e = x;
  }
  ok(e instanceof OpenAI.BadRequestError && e.status === 400 && /bad PNG/i.test(e.message),
     `openai, a truncated PNG → BadRequestError 400 with the gateway's message (${e?.constructor?.name}: ${e?.message?.slice(0, 120)})`);
});

// ============================== anthropic ===========================================
const anthBody = (data, media_type = "image/png") => ({
  model: MODEL, max_tokens: N, temperature: 0,
  messages: [{ role: "user", content: [{ type: "image", source: { type: "base64", media_type, data } },
                                       { type: "text", text: PROMPT }] }],
});
const anthText = (m) => m.content.filter((b) => b.type === "text").map((b) => b.text).join("").trim();
await kase("anthropic create", async () => {
  const m = await anthropic.messages.create(anthBody(b64("checker")));
  const cr = m.usage.cache_read_input_tokens ?? 0;
  ok(anthText(m) === want("checker"), `anthropic messages.create, image block (base64): pagoda-run's text ${show(anthText(m), want("checker"))}`);
  ok(cr >= CACHED_MIN, `anthropic, the repeated image: usage.cache_read_input_tokens ${cr} ≥ ${CACHED_MIN}`);
});
await kase("anthropic stream", async () => {
  const s = anthropic.messages.stream(anthBody(b64("gradient")));
  let text = "", n = 0;
  s.on("text", (t) => { text += t; n++; });
  const fin = await s.finalMessage();
  ok(text.trim() === want("gradient") && anthText(fin) === want("gradient"),
     `anthropic messages.stream: ${n} text deltas adding up to pagoda-run's text ${show(text.trim(), want("gradient"))}`);
  ok((fin.usage.cache_read_input_tokens ?? 0) >= CACHED_MIN,
     `anthropic stream, the repeated image: cache_read_input_tokens ${fin.usage.cache_read_input_tokens}`);
});
await kase("anthropic bad image", async () => {
  let e = null;
  try {
    await anthropic.messages.create(anthBody(TRUNC));
  } catch (x) {
    e = x;
  }
  ok(e instanceof Anthropic.BadRequestError && e.status === 400 && /bad PNG/i.test(e.message),
     `anthropic, a truncated PNG → BadRequestError 400 with the gateway's message (${e?.constructor?.name}: ${e?.message?.slice(0, 120)})`);
});

// ============================== AI SDK ==============================================
const provider = createOpenAICompatible({ name: "pagoda", baseURL: `${BASE}/v1`, apiKey: "none", includeUsage: true });
await kase("AI SDK generateText", async () => {
  const r = await ai.generateText({
    model: provider.chatModel(MODEL), maxOutputTokens: N, temperature: 0, maxRetries: 0,
    messages: [{ role: "user", content: [{ type: "image", image: new Uint8Array(png("checker")), mediaType: "image/png" },
                                         { type: "text", text: PROMPT }] }],
  });
  ok(r.text.trim() === want("checker"), `AI SDK generateText, an image part: pagoda-run's text ${show(r.text.trim(), want("checker"))}`);
  const cached = r.usage?.inputTokenDetails?.cacheReadTokens ?? r.usage?.cachedInputTokens ?? 0;
  ok(cached >= CACHED_MIN, `AI SDK, the repeated image: usage's cached input tokens ${cached} ≥ ${CACHED_MIN}`);
});

// ============================== LangChain ===========================================
await kase("LangChain invoke", async () => {
  const lc = new ChatOpenAI({ model: MODEL, apiKey: "none", configuration: { baseURL: `${BASE}/v1` }, maxRetries: 0,
                              timeout: 180000, temperature: 0, maxTokens: N });
  const m = await lc.invoke([new HumanMessage({ content: [{ type: "image_url", image_url: { url: dataURL("gradient") } },
                                                          { type: "text", text: PROMPT }] })]);
  const got = String(m.content).trim();
  ok(got === want("gradient"), `LangChain ChatOpenAI.invoke, a HumanMessage image_url part: pagoda-run's text ${show(got, want("gradient"))}`);
  const cached = m.usage_metadata?.input_token_details?.cache_read ?? 0;
  ok(cached >= CACHED_MIN, `LangChain, the repeated image: usage_metadata.input_token_details.cache_read ${cached} ≥ ${CACHED_MIN}`);
});
process.exitCode = exitCode();
