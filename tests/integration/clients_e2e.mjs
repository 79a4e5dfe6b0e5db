// clients_e2e.mjs — the Vercel AI SDK (ai 6 + @ai-sdk/openai-compatible 2) and
// LangChain JS (@langchain/openai 1.5) with zod 4 schemas, against a real
// pagoda gateway and real workers (started by clients_sdk.sh). Every schema
// is the one the library writes from zod by default; nothing is simplified.
// Prints "ok - …" / "not ok - …" (one line per case).
//
// env: URL    the gateway
//      TEXT   model for text, structured output and embeddings (stories260K)
//      TOOLS  model for tool calls (a random-weight 110M llama, 2048 context,
//             the Qwen2.5 chat template)
//      DIM    TEXT's embedding size
//
// What is checked, per library:
//   AI SDK    generateText and streamText (greedy: the stream's text equals the
//             non-streamed text); generateObject and streamObject with a zod
//             schema using .int(), .positive(), .email(), z.discriminatedUnion,
//             z.record (the SDK validates the object with zod; so do we);
//             tools: toolChoice required and a named tool (the SDK validates
//             the input against the tool's zod schema and runs execute),
//             streamText with a forced tool (tool-input-delta parts, then the
//             tool-call), a round trip (call, tool result, answer: 2 steps);
//             embed / embedMany.
//   LangChain invoke and stream (same greedy text); withStructuredOutput with
//             method jsonSchema (TEXT) and functionCalling (TOOLS), the result
//             checked with zod; bindTools with a forced tool (tool_calls with
//             args; streamed tool_call_chunks that add up to them); a tool
//             round trip with a ToolMessage; OpenAIEmbeddings, equal to the AI
//             SDK's vectors.
import { createRequire } from "node:module";
import { ok, exitCode } from "./tap.mjs";
const require = createRequire(new URL("../js/package.json", import.meta.url));
const { z } = require("zod");
const ai = require("ai");
const { createOpenAICompatible } = require("@ai-sdk/openai-compatible");
const { ChatOpenAI, OpenAIEmbeddings } = require("@langchain/openai");
const { HumanMessage, AIMessage, ToolMessage } = require("@langchain/core/messages");
const { tool: lcTool } = require("@langchain/core/tools");

const { URL: BASE, TEXT, TOOLS } = process.env;
const DIM = Number(process.env.DIM);
// runs one case; an exception is that case's failure (with the error), not the script's end
async function kase(what, fn) {
  try {
    await fn();
  } catch (e) {
    ok(false, `${what}: threw ${e?.name ?? ""}: ${String(e?.message ?? e).slice(0, 400)}` +
      (e?.cause ? ` (cause: ${String(e.cause?.message ?? e.cause).slice(0, 200)})` : "") +
      (e?.text ? ` (model text: ${String(e.text).slice(0, 200)})` : ""));
  }
}
const timeout = () => AbortSignal.timeout(180000);
const short = (x) => JSON.stringify(x).slice(0, 160);
const maxDiff = (a, b) => a.reduce((m, x, i) => Math.max(m, Math.abs(x - b[i])), 0);

// ---- the schemas: what zod 4 and the libraries write by default ------------------
const Pet = z.discriminatedUnion("kind", [
  z.object({ kind: z.literal("cat"), lives: z.number().int().min(0).max(9) }),
  z.object({ kind: z.literal("dog"), good: z.boolean() }),
]);
const Person = z.object({
  name: z.string().max(12).describe("first name"),
  age: z.number().int().positive().max(120),
  email: z.string().email(),
  pet: Pet,
  scores: z.record(z.string().max(6), z.number().int()),
});
const Weather = z.object({ city: z.string().max(16), days: z.number().int().positive().max(7) });

// the keywords these schemas are here for are really in what the SDKs send
{
  const sent = JSON.stringify(ai.zodSchema(Person).jsonSchema);
  const want = ['"type":"integer"', '"exclusiveMinimum":0', '"format":"email"', '"propertyNames"'];
  ok(want.every((k) => sent.includes(k)) && /"(oneOf|anyOf)":\[/.test(sent),
     `the AI SDK's JSON Schema of the zod object has integer, exclusiveMinimum, format email, ` +
     `oneOf/anyOf (discriminatedUnion) and propertyNames (record)`);
}

const provider = createOpenAICompatible({
  name: "pagoda", baseURL: `${BASE}/v1`, apiKey: "none", supportsStructuredOutputs: true, includeUsage: true,
});
const text = provider.chatModel(TEXT);
const tools = provider.chatModel(TOOLS);
const PROMPT = "Once upon a time";

// ============================== AI SDK =============================================
let greedy = null;
await kase("AI SDK generateText", async () => {
  const r = await ai.generateText({ model: text, prompt: PROMPT, maxOutputTokens: 24, temperature: 0,
                                    maxRetries: 0, abortSignal: timeout() });
  greedy = r.text;
  ok(r.text.length > 0 && ["length", "stop"].includes(r.finishReason) && r.usage.inputTokens > 0 &&
     r.usage.outputTokens > 0 && r.usage.outputTokens <= 24,
     `AI SDK generateText: ${r.usage.outputTokens} tokens, finish ${r.finishReason} (${short(r.text)})`);
});
await kase("AI SDK streamText", async () => {
  const r = ai.streamText({ model: text, prompt: PROMPT, maxOutputTokens: 24, temperature: 0, maxRetries: 0,
                            abortSignal: timeout() });
  let s = "", n = 0;
  for await (const t of r.textStream) {
    s += t;
    n++;
  }
  const usage = await r.usage;
  ok(n > 1 && s === greedy && usage.outputTokens > 0,
     `AI SDK streamText: ${n} text parts whose sum is the greedy generateText text, usage ${usage.outputTokens} tokens`);
});
await kase("AI SDK generateObject", async () => {
  const r = await ai.generateObject({ model: text, schema: Person, schemaName: "person", prompt: "Describe a person.",
                                      maxOutputTokens: 300, temperature: 1, seed: 3, maxRetries: 0,
                                      abortSignal: timeout() });
  ok(Person.safeParse(r.object).success && r.finishReason === "stop",
     `AI SDK generateObject (int, positive, email, discriminatedUnion, record): ${short(r.object)}`);
});
await kase("AI SDK streamObject", async () => {
  const r = ai.streamObject({ model: text, schema: Person, prompt: "Describe a person.", maxOutputTokens: 300,
                              temperature: 1, seed: 11, maxRetries: 0, abortSignal: timeout() });
  let n = 0;
  for await (const _ of r.partialObjectStream)
    n++;
  const o = await r.object;
  ok(n > 1 && Person.safeParse(o).success, `AI SDK streamObject: ${n} partial objects, then ${short(o)}`);
});
await kase("AI SDK Output.object", async () => {
  const r = await ai.generateText({ model: text, output: ai.Output.object({ schema: Person }), prompt: "A person.",
                                    maxOutputTokens: 300, temperature: 1, seed: 5, maxRetries: 0,
                                    abortSignal: timeout() });
  ok(Person.safeParse(r.output).success, `AI SDK generateText with Output.object: ${short(r.output)}`);
});

// ---- tools on the 110M model ----
const ran = [];
const weatherTool = ai.tool({
  description: "The weather forecast for a city",
  inputSchema: Weather,
  execute: async (input) => {
    ran.push(input);
    return { forecast: "sunny", city: input.city };
  },
});
const flightTool = ai.tool({
  description: "Book a flight",
  inputSchema: z.object({ to: z.string().max(10), seats: z.number().int().min(1).max(4) }),
});
await kase("AI SDK tools required", async () => {
  ran.length = 0;
  const r = await ai.generateText({ model: tools, tools: { get_weather: weatherTool, book_flight: flightTool },
                                    toolChoice: "required", prompt: "Weather in Paris?", temperature: 1, seed: 1,
                                    maxOutputTokens: 200, maxRetries: 0, abortSignal: timeout() });
  const c = r.toolCalls;
  ok(c.length >= 1 && c.every((x) => ["get_weather", "book_flight"].includes(x.toolName) && !x.invalid) &&
     r.finishReason === "tool-calls",
     `AI SDK generateText, toolChoice required: ${c.length} valid call(s) ${short(c.map((x) => [x.toolName, x.input]))}`);
});
await kase("AI SDK tools named", async () => {
  ran.length = 0;
  const r = await ai.generateText({ model: tools, tools: { get_weather: weatherTool, book_flight: flightTool },
                                    toolChoice: { type: "tool", toolName: "get_weather" }, prompt: "Paris?",
                                    temperature: 1, seed: 2, maxOutputTokens: 200, maxRetries: 0,
                                    abortSignal: timeout() });
  ok(r.toolCalls.length >= 1 && r.toolCalls.every((x) => x.toolName === "get_weather" && !x.invalid) &&
     ran.length === r.toolCalls.length && Weather.safeParse(ran[0]).success && r.toolResults.length === ran.length,
     `AI SDK named tool: validated input ${short(ran[0])}, execute ran, result ${short(r.toolResults[0]?.output)}`);
});
await kase("AI SDK streamText tool", async () => {
  const r = ai.streamText({ model: tools, tools: { get_weather: weatherTool }, toolChoice: "required",
                            prompt: "Weather in Rome?", temperature: 1, seed: 4, maxOutputTokens: 200, maxRetries: 0,
                            abortSignal: timeout() });
  let deltas = 0, call = null, err = null;
  for await (const p of r.fullStream) {
    if (p.type === "tool-input-delta")
      deltas++;
    else if (p.type === "tool-call")
      call = p;
    else if (p.type === "error")
      err = p.error;
  }
  ok(!err && call && !call.invalid && Weather.safeParse(call.input).success && deltas > 1,
     `AI SDK streamText, forced tool: ${deltas} tool-input-delta parts, then tool-call ${short(call?.input)}` +
     (err ? ` (error ${err})` : ""));
});
await kase("AI SDK tool round trip", async () => {
  ran.length = 0;
  const r = await ai.generateText({
    model: tools, tools: { get_weather: weatherTool }, prompt: "Weather in Oslo?", temperature: 1, seed: 6,
    maxOutputTokens: 100, maxRetries: 0, abortSignal: timeout(), stopWhen: ai.stepCountIs(2),
    prepareStep: ({ stepNumber }) => ({ toolChoice: stepNumber === 0 ? "required" : "none" }),
  });
  const s = r.steps;
  const sent = s[1]?.request?.body;
  const msgs = (typeof sent === "string" ? JSON.parse(sent) : sent)?.messages ?? [];
  const back = msgs.find((m) => m.role === "tool");
  ok(s.length === 2 && s[0].toolCalls.length >= 1 && ran.length === s[0].toolCalls.length &&
     back && back.tool_call_id === s[0].toolCalls[0].toolCallId &&
     s[1].toolCalls.length === 0 && ["stop", "length"].includes(s[1].finishReason) && s[1].text.length > 0,
     `AI SDK round trip: call ${short(ran[0])}, its result sent back, then an answer (${short(s[1]?.text)})`);
});

// ---- embeddings ----
let sdkVecs = null;
await kase("AI SDK embed", async () => {
  const em = provider.textEmbeddingModel(TEXT);
  const one = await ai.embed({ model: em, value: PROMPT, maxRetries: 0 });
  const many = await ai.embedMany({ model: em, values: [PROMPT, "The end.", "Tom had a red ball."], maxRetries: 0 });
  sdkVecs = many.embeddings;
  ok(one.embedding.length === DIM && one.embedding.every(Number.isFinite) && many.embeddings.length === 3 &&
     maxDiff(one.embedding, many.embeddings[0]) <= 1e-5 && one.usage.tokens > 0,
     `AI SDK embed / embedMany: ${DIM} dimensions, embed(x) = embedMany([x, ...])[0]`);
});

// ============================== LangChain ===========================================
const lc = (model, extra = {}) => new ChatOpenAI({ model, apiKey: "none", configuration: { baseURL: `${BASE}/v1` },
                                                  maxRetries: 0, timeout: 180000, ...extra });
let lcGreedy = null;
await kase("LangChain invoke", async () => {
  const m = await lc(TEXT, { temperature: 0, maxTokens: 24 }).invoke(PROMPT);
  lcGreedy = m.content;
  ok(typeof m.content === "string" && m.content.length > 0 && m.content === greedy &&
     m.usage_metadata?.output_tokens > 0,
     `LangChain invoke: the same greedy text as the AI SDK, usage ${m.usage_metadata?.output_tokens} tokens`);
});
await kase("LangChain stream", async () => {
  let s = "", n = 0;
  for await (const c of await lc(TEXT, { temperature: 0, maxTokens: 24 }).stream(PROMPT)) {
    s += c.content;
    n++;
  }
  ok(n > 1 && s === lcGreedy, `LangChain stream: ${n} chunks adding up to the invoke text`);
});
await kase("LangChain withStructuredOutput jsonSchema", async () => {
  const o = await lc(TEXT, { temperature: 1, maxTokens: 300, modelKwargs: { seed: 8 } })
    .withStructuredOutput(Person, { method: "jsonSchema", name: "person" }).invoke("Describe a person.");
  ok(Person.safeParse(o).success, `LangChain withStructuredOutput (jsonSchema): ${short(o)}`);
});
await kase("LangChain withStructuredOutput functionCalling", async () => {
  const o = await lc(TOOLS, { temperature: 1, maxTokens: 200, modelKwargs: { seed: 9 } })
    .withStructuredOutput(Weather, { method: "functionCalling", name: "weather" }).invoke("Weather in Paris?");
  ok(Weather.safeParse(o).success, `LangChain withStructuredOutput (functionCalling, forced tool): ${short(o)}`);
});
const lcWeather = lcTool(async (input) => JSON.stringify({ forecast: "rain", city: input.city }), {
  name: "get_weather", description: "The weather forecast for a city", schema: Weather,
});
let lcCall = null;
await kase("LangChain bindTools", async () => {
  const m = await lc(TOOLS, { temperature: 1, maxTokens: 200, modelKwargs: { seed: 10 } })
    .bindTools([lcWeather], { tool_choice: "get_weather" }).invoke("Weather in Lima?");
  lcCall = m.tool_calls?.[0];
  ok(m.tool_calls?.length >= 1 && m.tool_calls.every((c) => c.name === "get_weather" && Weather.safeParse(c.args).success) &&
     (m.invalid_tool_calls ?? []).length === 0,
     `LangChain bindTools, forced: tool_calls ${short(m.tool_calls?.map((c) => c.args))}`);
});
await kase("LangChain bindTools stream", async () => {
  const model = lc(TOOLS, { temperature: 1, maxTokens: 200, modelKwargs: { seed: 12 } })
    .bindTools([lcWeather], { tool_choice: "any" });
  let acc = null, n = 0;
  for await (const c of await model.stream("Weather in Kyiv?")) {
    if ((c.tool_call_chunks ?? []).some((t) => t.args))
      n++;
    acc = acc ? acc.concat(c) : c;
  }
  const calls = acc?.tool_calls ?? [];
  ok(n > 1 && calls.length >= 1 && calls.every((c) => c.name === "get_weather" && Weather.safeParse(c.args).success),
     `LangChain stream with a forced tool: ${n} tool_call_chunks with argument text, adding up to ${short(calls.map((c) => c.args))}`);
});
await kase("LangChain tool round trip", async () => {
  if (!lcCall)
    throw new Error("no call from the bindTools case to answer");
  const result = await lcWeather.invoke(lcCall);
  const m = await lc(TOOLS, { temperature: 1, maxTokens: 40, modelKwargs: { seed: 13 } }).bindTools([lcWeather]).invoke([
    new HumanMessage("Weather in Lima?"),
    new AIMessage({ content: "", tool_calls: [lcCall] }),
    result,
  ]);
  ok(result instanceof ToolMessage && typeof m.content === "string" && (m.content.length > 0 || m.tool_calls?.length > 0),
     `LangChain round trip: ToolMessage ${short(result.content)} sent back, answer ${short(m.content || m.tool_calls)}`);
});
await kase("LangChain embeddings", async () => {
  const e = new OpenAIEmbeddings({ model: TEXT, apiKey: "none", configuration: { baseURL: `${BASE}/v1` }, maxRetries: 0 });
  const q = await e.embedQuery(PROMPT);
  const d = await e.embedDocuments([PROMPT, "The end.", "Tom had a red ball."]);
  ok(q.length === DIM && d.length === 3 && maxDiff(q, d[0]) <= 1e-5 &&
     (!sdkVecs || d.every((v, i) => maxDiff(v, sdkVecs[i]) <= 1e-5)),
     "LangChain OpenAIEmbeddings: embedQuery = embedDocuments[0], and the same vectors as the AI SDK's");
});

process.exit(exitCode());
