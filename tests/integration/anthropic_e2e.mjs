// anthropic_e2e.mjs — the Anthropic Messages API with the official
// @anthropic-ai/sdk against a real pagoda gateway (started by surfaces_sdk.sh):
// "text" = stories260K, "tools" = a random-weight 110M llama (2048 context,
// Qwen2.5 template: Hermes tool calls), "qwen3" = a tiny model with the real
// Qwen3 template. Prints "ok - …" / "not ok - …".
//
// env: URL (the gateway), KEY_A, KEY_B (two API keys), BAD_KEY
import Anthropic from "../js/node_modules/@anthropic-ai/sdk/index.mjs";
import Ajv from "../js/node_modules/ajv/dist/ajv.js";

const { URL, KEY_A, KEY_B } = process.env;
let failed = 0;
const ok = (cond, what, detail) => {
  console.log(`${cond ? "ok" : "not ok"} - ${what}`);
  if (!cond) {
    failed++;
    if (detail !== undefined) console.log(`# ${JSON.stringify(detail).slice(0, 600)}`);
  }
  return cond;
};
const client = new Anthropic({ baseURL: URL, apiKey: KEY_A, maxRetries: 0, timeout: 120000 });
const ajv = new (Ajv.default || Ajv)({ strict: false });
const textOf = (m) => m.content.filter((b) => b.type === "text").map((b) => b.text).join("");

// ---- text: create, stream helpers, usage, prefix cache -------------------
const story = "Once upon a time there was a little girl named Lily. She liked to play in the park with her " +
  "friends. One day she saw a big red ball under a tree. She ran to get it";
{
  const m = await client.messages.create({
    model: "text", max_tokens: 24, temperature: 0, system: "You tell stories.",
    messages: [{ role: "user", content: story }],
  });
  ok(m.type === "message" && m.role === "assistant" && m.id.startsWith("msg_"), "messages.create: a message object", m);
  ok(m.content.length >= 1 && m.content[0].type === "text" && textOf(m).length > 0, "messages.create: a text block", m.content);
  ok(["end_turn", "max_tokens"].includes(m.stop_reason) && m.stop_sequence === null, "messages.create: stop_reason " + m.stop_reason);
  ok(m.usage.output_tokens >= 1 && m.usage.output_tokens <= 24 && (m.stop_reason !== "max_tokens" || m.usage.output_tokens === 24),
    "messages.create: usage.output_tokens within max_tokens (" + m.usage.output_tokens + ")", m.usage);
  const total1 = m.usage.input_tokens + m.usage.cache_read_input_tokens;
  ok(total1 > 32, "messages.create: input tokens counted (" + total1 + ")", m.usage);

  // the same prompt again: its full KV blocks come from the prefix cache
  const again = await client.messages.create({
    model: "text", max_tokens: 24, temperature: 0, system: "You tell stories.",
    messages: [{ role: "user", content: story }],
  });
  ok(again.usage.cache_read_input_tokens > 0 && again.usage.input_tokens + again.usage.cache_read_input_tokens === total1,
    "repeat: cache_read_input_tokens from the prefix cache (" + again.usage.cache_read_input_tokens + " of " + total1 + ")", again.usage);
  ok(textOf(again) === textOf(m), "repeat: greedy text is the same");

  // count_tokens counts the same prompt
  const count = await client.messages.countTokens({
    model: "text", system: "You tell stories.", messages: [{ role: "user", content: story }],
  });
  ok(count.input_tokens === total1, `messages.countTokens: ${count.input_tokens} = the prompt's ${total1}`, count);

  // messages.stream helpers: text events, finalMessage, same greedy text
  const stream = client.messages.stream({
    model: "text", max_tokens: 24, temperature: 0, system: "You tell stories.",
    messages: [{ role: "user", content: story }],
  });
  let streamed = "";
  const types = [];
  stream.on("text", (t) => { streamed += t; });
  stream.on("streamEvent", (e) => types.push(e.type));
  const fin = await stream.finalMessage();
  ok(streamed === textOf(m) && textOf(fin) === textOf(m), "messages.stream: text events and finalMessage equal the non-streamed text",
    { streamed, fin: textOf(fin), create: textOf(m) });
  // (the SDK does not pass `ping` on; surfaces_sdk.sh checks it in the raw stream)
  ok(types[0] === "message_start" && types[1] === "content_block_start" && types.at(-1) === "message_stop" &&
     types.at(-2) === "message_delta" && types.at(-3) === "content_block_stop",
    "messages.stream: message_start, content blocks, message_delta, message_stop", types);
  ok(fin.stop_reason === m.stop_reason && fin.usage.output_tokens === m.usage.output_tokens &&
     fin.usage.input_tokens + fin.usage.cache_read_input_tokens === total1,
    "messages.stream: finalMessage stop_reason and usage", fin.usage);

  // stop_sequences: generation stops before the sequence
  const words = textOf(m).trim().split(/\s+/);
  if (words.length >= 3) {
    const stopAt = words[2];
    const s = await client.messages.create({
      model: "text", max_tokens: 24, temperature: 0, system: "You tell stories.", stop_sequences: [stopAt],
      messages: [{ role: "user", content: story }],
    });
    ok(!textOf(s).includes(stopAt) && s.stop_reason === "stop_sequence" && s.stop_sequence === stopAt &&
       textOf(m).startsWith(textOf(s)), "stop_sequences: the answer ends before '" + stopAt + "', stop_reason stop_sequence",
      { text: textOf(s), stop_reason: s.stop_reason, stop_sequence: s.stop_sequence });
    const ss = client.messages.stream({
      model: "text", max_tokens: 24, temperature: 0, system: "You tell stories.", stop_sequences: ["zzz-never", stopAt],
      messages: [{ role: "user", content: story }],
    });
    const sf = await ss.finalMessage();
    ok(sf.stop_reason === "stop_sequence" && sf.stop_sequence === stopAt, "messages.stream: stop_sequence in message_delta", sf);
  }

  // Authorization: Bearer works as well as x-api-key
  const bearer = new Anthropic({ baseURL: URL, apiKey: null, authToken: KEY_B, maxRetries: 0 });
  const b = await bearer.messages.create({ model: "text", max_tokens: 4, messages: [{ role: "user", content: "Hi" }] });
  ok(b.type === "message", "Authorization: Bearer accepted with the same keys");
}

// ---- errors in Anthropic's shape --------------------------------------------
async function expectError(what, cls, status, type, call) {
  try {
    await call();
    ok(false, what + ": expected an error");
  } catch (e) {
    ok(e instanceof cls && e.status === status && e.error?.type === "error" && e.error?.error?.type === type,
      `${what}: ${cls.name} ${status} ${type}`, { name: e.constructor.name, status: e.status, body: e.error });
  }
}
await expectError("image block", Anthropic.BadRequestError, 400, "invalid_request_error", () =>
  client.messages.create({ model: "text", max_tokens: 4, messages: [{ role: "user", content: [
    { type: "image", source: { type: "base64", media_type: "image/png", data: "iVBORw0KGgo=" } }] }] }));
await expectError("missing max_tokens", Anthropic.BadRequestError, 400, "invalid_request_error", () =>
  client.messages.create({ model: "text", messages: [{ role: "user", content: "x" }] }));
await expectError("unknown model", Anthropic.NotFoundError, 404, "not_found_error", () =>
  client.messages.create({ model: "nope", max_tokens: 4, messages: [{ role: "user", content: "x" }] }));
await expectError("wrong key", Anthropic.AuthenticationError, 401, "authentication_error", () =>
  new Anthropic({ baseURL: URL, apiKey: "wrong", maxRetries: 0 }).messages.create(
    { model: "text", max_tokens: 4, messages: [{ role: "user", content: "x" }] }));

// ---- tools (110M model): forced call, round trip, stream with input_json_delta
const weather = {
  name: "get_weather",
  description: "Current weather for a city",
  input_schema: {
    type: "object",
    properties: { city: { type: "string", maxLength: 12 }, unit: { type: "string", enum: ["celsius", "fahrenheit"] } },
    required: ["city", "unit"],
    additionalProperties: false,
  },
};
const lookup = { name: "lookup", description: "Search", input_schema: { type: "object", properties: { q: { type: "string", maxLength: 10 } }, required: ["q"] } };
const validWeather = ajv.compile(weather.input_schema);
const ask = [{ role: "user", content: "What is the weather in Paris?" }];
{
  const m = await client.messages.create({
    model: "tools", max_tokens: 300, tools: [weather, lookup], tool_choice: { type: "tool", name: "get_weather" }, messages: ask,
  });
  const calls = m.content.filter((b) => b.type === "tool_use");
  ok(m.stop_reason === "tool_use" && calls.length >= 1, "tool_choice tool: stop_reason tool_use with tool_use blocks", m);
  const c = calls[0] || {};
  ok(c.id?.startsWith("toolu_") && c.name === "get_weather" && validWeather(c.input),
    "tool_use: toolu_ id, the named tool, input valid against input_schema", c);

  // round trip: the result goes back as a tool_result block
  const r = await client.messages.create({
    model: "tools", max_tokens: 16, tools: [weather, lookup],
    messages: [...ask, { role: "assistant", content: m.content },
      { role: "user", content: [{ type: "tool_result", tool_use_id: c.id, content: "18 degrees, sunny" }] }],
  });
  ok(r.type === "message" && ["end_turn", "max_tokens", "tool_use"].includes(r.stop_reason) && r.usage.input_tokens > 0,
    "tool round trip: tool_result accepted, the model answers (" + r.stop_reason + ")", r);

  // any + disable_parallel_tool_use: exactly one call of some tool
  const a = await client.messages.create({
    model: "tools", max_tokens: 300, tools: [weather, lookup],
    tool_choice: { type: "any", disable_parallel_tool_use: true }, messages: ask,
  });
  const ac = a.content.filter((b) => b.type === "tool_use");
  ok(a.stop_reason === "tool_use" && ac.length === 1 && ["get_weather", "lookup"].includes(ac[0].name),
    "tool_choice any + disable_parallel_tool_use: one tool_use", a.content);

  // none: no call
  const n = await client.messages.create({
    model: "tools", max_tokens: 8, tools: [weather], tool_choice: { type: "none" }, messages: ask,
  });
  ok(n.stop_reason !== "tool_use" && n.content.every((b) => b.type === "text"), "tool_choice none: text only", n.content);

  // streaming a forced call: content_block_start tool_use, input_json_delta, inputJson helper
  const st = client.messages.stream({
    model: "tools", max_tokens: 300, tools: [weather], tool_choice: { type: "tool", name: "get_weather" }, messages: ask,
  });
  const partial = {}; // block index → its input_json_delta fragments joined
  let nFrag = 0;
  st.on("streamEvent", (e) => {
    if (e.type === "content_block_delta" && e.delta.type === "input_json_delta") {
      partial[e.index] = (partial[e.index] || "") + e.delta.partial_json;
      nFrag++;
    }
  });
  const fin = await st.finalMessage();
  const uses = fin.content.map((b, i) => [b, i]).filter(([b]) => b.type === "tool_use");
  ok(fin.stop_reason === "tool_use" && uses.length >= 1 && uses.every(([b]) => b.id.startsWith("toolu_") && validWeather(b.input)),
    "messages.stream with a forced tool: finalMessage has valid tool_use blocks", fin.content);
  ok(nFrag >= 2 * uses.length && uses.every(([b, i]) => partial[i] !== undefined &&
       JSON.stringify(JSON.parse(partial[i])) === JSON.stringify(b.input)),
    `messages.stream: input_json_delta fragments as generated (${nFrag} for ${uses.length} calls) add up to each input`,
    { partial, content: fin.content });
}

// ---- thinking reaches the chat template (Qwen3): disabled inserts the empty think block
{
  const body = { model: "qwen3", messages: [{ role: "user", content: "Hi there" }] };
  const on = await client.messages.countTokens({ ...body, thinking: { type: "enabled", budget_tokens: 1024 } });
  const off = await client.messages.countTokens({ ...body, thinking: { type: "disabled" } });
  ok(off.input_tokens > on.input_tokens, `thinking: disabled renders the Qwen3 empty <think> block (${off.input_tokens} > ${on.input_tokens} tokens)`);
  // budget_tokens must be below max_tokens (as Anthropic checks); the tiny model runs to its limit
  const m = await client.messages.create({ ...body, max_tokens: 1025, thinking: { type: "enabled", budget_tokens: 1024 } });
  ok(m.type === "message" && m.usage.output_tokens >= 1 && m.usage.output_tokens <= 1025, "thinking enabled: the request is served", m.usage);
  // a budget at or above max_tokens is accepted (interleaved thinking; Claude Code sends it)
  const m2 = await client.messages.create({ ...body, max_tokens: 100, thinking: { type: "enabled", budget_tokens: 1024 } });
  ok(m2.type === "message" && m2.usage.output_tokens <= 100, "budget_tokens above max_tokens: served, max_tokens bounds it", m2.usage);
  // what Claude Code sends: adaptive thinking, output_config, context_management, a system
  // turn inside messages, an Anthropic-defined tool (left out, named in X-Pagoda-Warning)
  const { data: m3, response: r3 } = await client.messages.create({
    ...body, max_tokens: 8,
    messages: [{ role: "user", content: "Hi there" }, { role: "system", content: "Be brief." }],
    thinking: { type: "adaptive", display: "omitted" }, output_config: { effort: "high" },
    context_management: { edits: [{ type: "clear_thinking_20251015", keep: "all" }] },
    tools: [{ type: "web_search_20250305", name: "web_search", max_uses: 1 }],
  }).withResponse();
  ok(m3.type === "message" && /web_search_20250305/.test(r3.headers.get("x-pagoda-warning") ?? ""),
    "Claude Code's shapes (adaptive thinking, system turn, a server tool) are served; the left-out tool is named in X-Pagoda-Warning",
    { warn: r3.headers.get("x-pagoda-warning") });
  await expectError("tool_choice naming a server tool", Anthropic.BadRequestError, 400, "invalid_request_error", () =>
    client.messages.create({ ...body, max_tokens: 8, tools: [{ type: "web_search_20250305", name: "web_search" }],
      tool_choice: { type: "tool", name: "web_search" } }));
}

process.exit(failed ? 1 : 0);
