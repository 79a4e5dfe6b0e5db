// responses_e2e.mjs — the OpenAI Responses API with the official `openai` SDK
// (responses.create / .stream / .parse / .retrieve / .delete / inputItems)
// against a real pagoda gateway (started by surfaces_sdk.sh): "text" =
// stories260K, "tools" = a random-weight 110M llama (2048 context, Hermes
// tool calls). Prints "ok - …" / "not ok - …"; writes the ids of responses
// it leaves stored to $IDS_FILE (one "id key" per line) for the restart test.
//
// env: URL, KEY_A, KEY_B, IDS_FILE
import fs from "node:fs";
import OpenAI from "../js/node_modules/openai/index.mjs";
import { zodTextFormat, zodResponsesFunction } from "../js/node_modules/openai/helpers/zod.mjs";
import { z } from "../js/node_modules/zod/index.js";
import Ajv from "../js/node_modules/ajv/dist/ajv.js";

const { URL, KEY_A, KEY_B, IDS_FILE } = process.env;
let failed = 0;
const ok = (cond, what, detail) => {
  console.log(`${cond ? "ok" : "not ok"} - ${what}`);
  if (!cond) {
    failed++;
    if (detail !== undefined) console.log(`# ${JSON.stringify(detail).slice(0, 600)}`);
  }
  return cond;
};
const client = new OpenAI({ baseURL: `${URL}/v1`, apiKey: KEY_A, maxRetries: 0, timeout: 120000 });
const other = new OpenAI({ baseURL: `${URL}/v1`, apiKey: KEY_B, maxRetries: 0, timeout: 120000 });
const ajv = new (Ajv.default || Ajv)({ strict: false });
// ids of responses left stored, written as they are made (the restart test reads them)
const keep = (id) => { if (IDS_FILE) fs.appendFileSync(IDS_FILE, `${id} ${KEY_A}\n`); };
const strip = (r) => { const { output_text, output_parsed, ...rest } = r; return rest; };

async function expectError(what, cls, status, call) {
  try {
    await call();
    ok(false, what + ": expected an error");
  } catch (e) {
    ok(e instanceof cls && e.status === status, `${what}: ${cls.name} ${status}`, { name: e.constructor.name, status: e.status, error: e.error });
  }
}

const story = "Once upon a time there was a little girl named Lily. She liked to play in the park with her " +
  "friends. One day she saw a big red ball under a tree.";

// ---- text: create, stored, retrieve, input items, delete --------------------
let first;
{
  const r = await client.responses.create({ model: "text", input: story, instructions: "Tell a story.", max_output_tokens: 20,
    temperature: 0, metadata: { run: "e2e" } });
  first = r;
  ok(r.object === "response" && r.id.startsWith("resp_") && ["completed", "incomplete"].includes(r.status), "responses.create: a response (" + r.status + ")", r);
  ok(r.output_text.length > 0 && r.output[0].type === "message" && r.output[0].content[0].type === "output_text",
    "responses.create: a message item with output_text; SDK output_text", r.output);
  ok(r.status !== "incomplete" || (r.incomplete_details?.reason === "max_output_tokens" && r.usage.output_tokens === 20),
    "responses.create: incomplete only by max_output_tokens", r);
  ok(r.usage.input_tokens > 0 && r.usage.output_tokens > 0 && r.usage.total_tokens === r.usage.input_tokens + r.usage.output_tokens &&
     typeof r.usage.input_tokens_details.cached_tokens === "number", "responses.create: usage with input_tokens_details.cached_tokens", r.usage);
  ok(r.instructions === "Tell a story." && r.metadata.run === "e2e" && r.store === true && r.max_output_tokens === 20,
    "responses.create: request fields echoed, store defaults to true", r);

  const got = await client.responses.retrieve(r.id);
  ok(JSON.stringify(strip(got)) === JSON.stringify(strip(r)), "responses.retrieve: the stored response equals the created one");
  const items = await client.responses.inputItems.list(r.id);
  ok(items.data.length === 1 && items.data[0].type === "message" && items.data[0].role === "user" &&
     items.data[0].content[0].text === story, "responses.inputItems.list: the input message", items.data);
  await expectError("another key's response", OpenAI.NotFoundError, 404, () => other.responses.retrieve(r.id));
  await expectError("another key's delete", OpenAI.NotFoundError, 404, () => other.responses.delete(r.id));

  const again = await client.responses.create({ model: "text", input: story, instructions: "Tell a story.", max_output_tokens: 20, temperature: 0 });
  ok(again.usage.input_tokens_details.cached_tokens > 0 && again.output_text === r.output_text,
    "repeat: cached_tokens from the prefix cache (" + again.usage.input_tokens_details.cached_tokens + "), same greedy text", again.usage);
  const del = await client.responses.delete(again.id);
  ok(del === undefined || del === null || del.deleted === true || typeof del === "object", "responses.delete answers");
  await expectError("retrieve after delete", OpenAI.NotFoundError, 404, () => client.responses.retrieve(again.id));

  const nostore = await client.responses.create({ model: "text", input: "Hi", max_output_tokens: 4, store: false });
  ok(nostore.store === false, "store: false is echoed");
  await expectError("store: false keeps nothing", OpenAI.NotFoundError, 404, () => client.responses.retrieve(nostore.id));
  keep(r.id);

  // streaming: typed events with sequence numbers, the same greedy text
  const stream = client.responses.stream({ model: "text", input: story, instructions: "Tell a story.", max_output_tokens: 20, temperature: 0 });
  let text = "";
  const seqs = [], types = [];
  for await (const ev of stream) {
    seqs.push(ev.sequence_number);
    types.push(ev.type);
    if (ev.type === "response.output_text.delta") text += ev.delta;
  }
  const fin = await stream.finalResponse();
  ok(seqs.every((s, i) => s === i), "responses.stream: sequence_number 0, 1, 2, … (" + seqs.length + " events)");
  ok(types[0] === "response.created" && types[1] === "response.in_progress" && types.includes("response.output_item.added") &&
     types.includes("response.content_part.added") && types.includes("response.output_text.done") &&
     types.includes("response.output_item.done") && ["response.completed", "response.incomplete"].includes(types.at(-1)),
    "responses.stream: created, in_progress, item/part/text events, completed", types);
  ok(text === r.output_text && fin.output_text === r.output_text, "responses.stream: deltas and finalResponse equal the non-streamed text",
    { text, fin: fin.output_text, create: r.output_text });
  const stored = await client.responses.retrieve(fin.id);
  ok(stored.output_text === fin.output_text && stored.status === fin.status, "a streamed response is stored too");
  keep(fin.id);
}

// ---- previous_response_id: the conversation continues -----------------------
{
  // no instructions here: they are not carried over, so the continuation's
  // prompt starts with this one's and its blocks come from the prefix cache
  const r1 = await client.responses.create({ model: "text", input: story + " Then", max_output_tokens: 12 });
  const r2 = await client.responses.create({ model: "text", previous_response_id: r1.id, input: "What happened next?", max_output_tokens: 12 });
  ok(r2.previous_response_id === r1.id && r2.usage.input_tokens > r1.usage.input_tokens + r1.usage.output_tokens,
    "previous_response_id: the earlier input and output are in the prompt (" + r2.usage.input_tokens + " tokens)", r2.usage);
  ok(r2.usage.input_tokens_details.cached_tokens >= 32, "previous_response_id: the shared prefix comes from the cache (" +
    r2.usage.input_tokens_details.cached_tokens + ")");
  // instructions of the earlier response are not carried over (as OpenAI)
  const r3 = await client.responses.create({ model: "text", previous_response_id: first.id, input: "What happened next?", max_output_tokens: 4 });
  ok(r3.instructions === null && r3.usage.input_tokens > first.usage.output_tokens, "previous_response_id: its instructions are not carried over");
  const items = await client.responses.inputItems.list(r2.id);
  ok(items.data.length === 1 && items.data[0].content[0].text === "What happened next?", "inputItems of a continuation: only its own input");
  await expectError("previous_response_id of another key", OpenAI.NotFoundError, 404, () =>
    other.responses.create({ model: "text", previous_response_id: r1.id, input: "x", max_output_tokens: 2 }));
  keep(r2.id);
}

// ---- json_schema via zod 4 and the SDK's helpers ------------------------------
{
  const Pet = z.object({ name: z.string().max(10), legs: z.number().int().min(0).max(8), kind: z.enum(["cat", "dog", "bird"]) });
  const r = await client.responses.parse({ model: "text", input: "Describe a pet as JSON.", max_output_tokens: 300,
    text: { format: zodTextFormat(Pet, "pet") } });
  ok(r.status === "completed" && r.output_parsed && Pet.safeParse(r.output_parsed).success,
    "responses.parse with zodTextFormat: output_parsed matches the zod schema", r.output_text);
  ok(r.text.format.type === "json_schema" && r.text.format.name === "pet", "text.format echoed");
}

// ---- function tools (110M model): forced, required streamed, round trip -----
const weatherParams = { type: "object", properties: { city: { type: "string", maxLength: 12 },
  unit: { type: "string", enum: ["celsius", "fahrenheit"] } }, required: ["city", "unit"], additionalProperties: false };
const tools = [
  { type: "function", name: "get_weather", description: "Weather for a city", parameters: weatherParams, strict: true },
  { type: "function", name: "lookup", description: "Search", parameters: { type: "object", properties: { q: { type: "string", maxLength: 8 } }, required: ["q"], additionalProperties: false }, strict: true },
];
const validWeather = ajv.compile(weatherParams);
{
  const r = await client.responses.create({ model: "tools", input: "Weather in Paris?", tools,
    tool_choice: { type: "function", name: "get_weather" }, max_output_tokens: 300 });
  const calls = r.output.filter((o) => o.type === "function_call");
  ok(r.status === "completed" && calls.length >= 1 && calls[0].name === "get_weather" && calls[0].call_id.startsWith("call_") &&
     validWeather(JSON.parse(calls[0].arguments)), "forced function tool: a function_call with valid arguments", r.output);

  // the result goes back through previous_response_id
  const r2 = await client.responses.create({ model: "tools", previous_response_id: r.id, tools, max_output_tokens: 12,
    input: [{ type: "function_call_output", call_id: calls[0]?.call_id, output: "18C and sunny" }] });
  ok(["completed", "incomplete"].includes(r2.status) && r2.usage.input_tokens > r.usage.input_tokens,
    "round trip through previous_response_id: function_call_output answered (" + r2.status + ")", r2);
  const items = await client.responses.inputItems.list(r2.id);
  ok(items.data[0]?.type === "function_call_output" && items.data[0].call_id === calls[0]?.call_id, "its input item is the function_call_output");
  keep(r.id);

  // zod tools through responses.parse: parsed_arguments
  const Weather = z.object({ city: z.string().max(12), unit: z.enum(["celsius", "fahrenheit"]) });
  const p = await client.responses.parse({ model: "tools", input: "Weather in Rome?", max_output_tokens: 300,
    tools: [zodResponsesFunction({ name: "get_weather", parameters: Weather })], tool_choice: "required" });
  const pc = p.output.find((o) => o.type === "function_call");
  ok(pc && Weather.safeParse(pc.parsed_arguments).success, "responses.parse with zodResponsesFunction: parsed_arguments", p.output);

  // streamed: function_call_arguments.delta / .done
  const st = client.responses.stream({ model: "tools", input: "Weather in Oslo?", tools, tool_choice: "required",
    parallel_tool_calls: false, max_output_tokens: 300 });
  let args = "", nFrag = 0;
  const types = [];
  for await (const ev of st) {
    types.push(ev.type);
    if (ev.type === "response.function_call_arguments.delta") { args += ev.delta; nFrag++; }
  }
  const fin = await st.finalResponse();
  const fc = fin.output.filter((o) => o.type === "function_call");
  ok(fc.length === 1 && fc[0].arguments === args && nFrag >= 2 && types.includes("response.function_call_arguments.done"),
    `responses.stream, tool_choice required, parallel_tool_calls false: one call, argument deltas as generated (${nFrag}) add up`,
    { types, args, out: fin.output });
}

// ---- errors -------------------------------------------------------------------
await expectError("unknown model", OpenAI.NotFoundError, 404, () => client.responses.create({ model: "nope", input: "x" }));
await expectError("input_image", OpenAI.BadRequestError, 400, () => client.responses.create({ model: "text",
  input: [{ role: "user", content: [{ type: "input_image", image_url: "https://example.com/a.png" }] }] }));
await expectError("unknown previous_response_id", OpenAI.NotFoundError, 404, () =>
  client.responses.create({ model: "text", previous_response_id: "resp_doesnotexist", input: "x" }));
await expectError("retrieve unknown", OpenAI.NotFoundError, 404, () => client.responses.retrieve("resp_doesnotexist"));
{
  // a hosted tool is left out (named in X-Pagoda-Warning), not refused; naming it in tool_choice is
  const { data, response } = await client.responses.create({ model: "text", input: "x", max_output_tokens: 4,
    tools: [{ type: "web_search" }] }).withResponse();
  ok(data.status !== undefined && /web_search/.test(response.headers.get("x-pagoda-warning") ?? ""),
    "web_search tool left out with X-Pagoda-Warning", { warn: response.headers.get("x-pagoda-warning") });
}
await expectError("tool_choice naming web_search", OpenAI.BadRequestError, 400, () =>
  client.responses.create({ model: "text", input: "x", tools: [{ type: "web_search" }], tool_choice: { type: "web_search" } }));

process.exit(failed ? 1 : 0);
