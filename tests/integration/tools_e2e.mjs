// tools_e2e.mjs — tool calling with the official `openai` npm SDK against a
// real pagoda gateway (started by tools_sdk.sh) serving "qwen" (Qwen2.5
// template: Hermes calls), "llama" (Llama 3.2 template: JSON calls),
// "mistral" (Mistral Nemo template: [TOOL_CALLS] arrays) and "qwen3" (Qwen3
// template, for chat_template_kwargs), all tiny random-weight models; streamed
// tool calls also through the AI SDK (ai + @ai-sdk/openai-compatible, zod 4
// schemas) and LangChain JS (@langchain/openai). Prints "ok - …" / "not ok - …".
//
// env: URL  the gateway; SEEDS  seeds per (model, tool_choice) for the
//      schema-validation sweep
import OpenAI from "../js/node_modules/openai/index.mjs";
import Ajv from "../js/node_modules/ajv/dist/ajv.js";
import { streamText, tool as aiTool } from "../js/node_modules/ai/dist/index.mjs";
import { createOpenAICompatible } from "../js/node_modules/@ai-sdk/openai-compatible/dist/index.mjs";
import { z } from "../js/node_modules/zod/index.js";
import { ChatOpenAI } from "../js/node_modules/@langchain/openai/dist/index.js";

const { URL, SEEDS } = process.env;
const nSeeds = Number(SEEDS || 12);
let failed = 0;
const ok = (cond, what) => {
  console.log(`${cond ? "ok" : "not ok"} - ${what}`);
  if (!cond) failed++;
  return cond;
};
const client = new OpenAI({ baseURL: `${URL}/v1`, apiKey: "none", maxRetries: 0, timeout: 120000 });
const ajv = new (Ajv.default || Ajv)({ strict: false });

const tools = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "Current weather for a city",
      parameters: {
        type: "object",
        properties: {
          location: { type: "string", maxLength: 12 },
          unit: { type: "string", enum: ["celsius", "fahrenheit"] },
          days: { type: "integer", minimum: 1, maximum: 7 },
        },
        required: ["location", "unit"],
        additionalProperties: false,
      },
    },
  },
  {
    type: "function",
    function: {
      name: "lookup",
      description: "Search the knowledge base",
      parameters: {
        type: "object",
        properties: { query: { type: "string", maxLength: 16 }, exact: { type: "boolean" } },
        required: ["query"],
      },
    },
  },
];
const validators = Object.fromEntries(tools.map((t) => [t.function.name, ajv.compile(t.function.parameters)]));
const messages = [
  { role: "system", content: "You can call tools." },
  { role: "user", content: "What is the weather in Paris?" },
];

// Checks one choice whose tool_choice forced a call; returns a description of the problem or "".
function checkCalls(choice, { only, single }) {
  const m = choice.message;
  if (choice.finish_reason !== "tool_calls") return `finish_reason ${choice.finish_reason}`;
  if (!Array.isArray(m.tool_calls) || m.tool_calls.length === 0) return "no tool_calls";
  if (single && m.tool_calls.length !== 1) return `${m.tool_calls.length} calls with parallel_tool_calls false`;
  for (const c of m.tool_calls) {
    if (c.type !== "function" || !/^call_[0-9a-f]{24}$/.test(c.id)) return `bad call envelope ${JSON.stringify(c)}`;
    const v = validators[c.function.name];
    if (!v) return `unknown function ${c.function.name}`;
    if (only && c.function.name !== only) return `called ${c.function.name}, not ${only}`;
    let args;
    try {
      args = JSON.parse(c.function.arguments);
    } catch {
      return `arguments are not JSON: ${c.function.arguments}`;
    }
    if (!v(args)) return `arguments ${c.function.arguments} fail the schema: ${ajv.errorsText(v.errors)}`;
  }
  return "";
}

for (const model of ["qwen", "llama", "mistral"]) {
  // --- forced calls over many seeds: always valid ---------------------------------------
  const variants = [
    { name: "required", tool_choice: "required", check: {} },
    { name: "named lookup", tool_choice: { type: "function", function: { name: "lookup" } }, check: { only: "lookup" } },
    { name: "required, no parallel", tool_choice: "required", parallel_tool_calls: false, check: { single: true } },
  ];
  for (const v of variants) {
    let good = 0;
    const problems = [];
    for (let seed = 0; seed < nSeeds; seed++) {
      const r = await client.chat.completions.create({
        model, messages, tools, tool_choice: v.tool_choice, temperature: 1, seed, max_tokens: 300,
        ...(v.parallel_tool_calls === false ? { parallel_tool_calls: false } : {}),
      });
      const p = checkCalls(r.choices[0], v.check);
      if (p) problems.push(`seed ${seed}: ${p}`);
      else good++;
    }
    ok(good === nSeeds, `${model}: tool_choice ${v.name}: ${good}/${nSeeds} seeds gave schema-valid calls` +
       (problems.length ? ` (${problems[0]})` : ""));
  }

  // --- streaming: the SDK reassembles the same calls as the non-streamed answer ----------
  {
    const body = { model, messages, tools, tool_choice: "required", temperature: 1, seed: 7, max_tokens: 300 };
    const whole = await client.chat.completions.create(body);
    const stream = client.chat.completions.stream(body);
    const final = await stream.finalChatCompletion();
    const a = whole.choices[0].message.tool_calls.map((c) => [c.function.name, c.function.arguments]);
    const b = final.choices[0].message.tool_calls.map((c) => [c.function.name, c.function.arguments]);
    ok(JSON.stringify(a) === JSON.stringify(b) && final.choices[0].finish_reason === "tool_calls",
       `${model}: streamed tool calls reassembled by the SDK equal the non-streamed ones (${JSON.stringify(b)})`);
  }

  // --- streamed arguments arrive in fragments as the model writes them: the call's
  // first chunk has id, type and name, later ones only argument fragments, and the
  // fragments add up to the non-streamed arguments ---------------------------------------
  {
    const body = { model, messages, tools, tool_choice: "required", temperature: 1, seed: 7, max_tokens: 300 };
    const stream = await client.chat.completions.create({ ...body, stream: true });
    const calls = [];
    let shape = "", finish = null;
    for await (const chunk of stream) {
      const ch = chunk.choices[0];
      if (!ch) continue;
      if (ch.finish_reason) finish = ch.finish_reason;
      for (const tc of ch.delta.tool_calls || []) {
        let c = calls[tc.index];
        if (!c) {
          c = calls[tc.index] = { name: tc.function?.name, args: "", frags: 0 };
          if (!(/^call_[0-9a-f]{24}$/.test(tc.id) && tc.type === "function" && tc.function?.name))
            shape ||= `first chunk of call ${tc.index} lacks id/type/name: ${JSON.stringify(tc)}`;
        } else if (tc.id !== undefined || tc.function?.name !== undefined) {
          shape ||= `a later chunk of call ${tc.index} repeats id/name: ${JSON.stringify(tc)}`;
        }
        if (tc.function?.arguments) {
          c.args += tc.function.arguments;
          c.frags++;
        }
      }
    }
    const whole = await client.chat.completions.create(body);
    const a = whole.choices[0].message.tool_calls.map((c) => [c.function.name, c.function.arguments]);
    const b = calls.map((c) => [c.name, c.args]);
    const frags = calls.map((c) => c.frags);
    ok(!shape && JSON.stringify(a) === JSON.stringify(b) && finish === "tool_calls" && Math.max(...frags) > 1,
       `${model}: streamed arguments come in fragments (${frags.join(", ")} per call) that add up to the ` +
       `non-streamed ones${shape ? ` — ${shape}` : ""} (${JSON.stringify(b)})`);
  }

  // --- the AI SDK's streamText shows the call's input growing: tool-input-start, several
  // tool-input-delta parts, tool-input-end, then the tool-call with the same input -------
  {
    const provider = createOpenAICompatible({ name: "pagoda", baseURL: `${URL}/v1`, apiKey: "none" });
    const weather = aiTool({
      description: "Current weather for a city",
      inputSchema: z.object({ location: z.string().max(12), unit: z.enum(["celsius", "fahrenheit"]) }),
    });
    const r = streamText({
      model: provider.chatModel(model), system: messages[0].content, messages: messages.slice(1),
      tools: { get_weather: weather }, toolChoice: "required", temperature: 1, seed: 7,
      maxOutputTokens: 300, maxRetries: 0,
    });
    // per call (parallel calls interleave nothing, but each has its own id)
    const seen = [], deltas = {}, texts = {}, inputs = {};
    let err = null;
    for await (const part of r.fullStream) {
      seen.push(part.type);
      if (part.type === "tool-input-delta") {
        deltas[part.id] = (deltas[part.id] || 0) + 1;
        texts[part.id] = (texts[part.id] || "") + part.delta;
      } else if (part.type === "tool-call") {
        inputs[part.toolCallId] = part.input;
      } else if (part.type === "error") {
        err = part.error;
      }
    }
    const ids = Object.keys(inputs);
    const order = seen.indexOf("tool-input-start") >= 0 && seen.indexOf("tool-input-start") < seen.indexOf("tool-input-delta") &&
      seen.indexOf("tool-input-delta") < seen.indexOf("tool-call");
    const same = ids.length > 0 && ids.every((id) => {
      try {
        return JSON.stringify(JSON.parse(texts[id])) === JSON.stringify(inputs[id]) && validators.get_weather(inputs[id]);
      } catch {
        return false;
      }
    });
    const counts = ids.map((id) => deltas[id] || 0);
    ok(!err && order && same && Math.max(...counts) > 1,
       `${model}: AI SDK streamText: tool-input-delta parts (${counts.join(", ")} per call) build each ` +
       `tool-call's input ${JSON.stringify(Object.values(inputs))}` + (err ? ` (error ${err})` : ""));
  }

  // --- LangChain JS: streamed AIMessageChunks carry tool_call_chunks with the
  // arguments growing; the concatenated message has the same calls -------------------
  {
    const llm = new ChatOpenAI({ model, apiKey: "none", configuration: { baseURL: `${URL}/v1` },
                                 temperature: 1, maxTokens: 300, maxRetries: 0, modelKwargs: { seed: 7 } });
    const bound = llm.bindTools([tools[0]], { tool_choice: "required" });
    let full = null, withArgs = 0, err = null;
    try {
      for await (const chunk of await bound.stream(messages)) {
        withArgs += (chunk.tool_call_chunks || []).filter((c) => c.args).length;
        full = full ? full.concat(chunk) : chunk;
      }
    } catch (e) {
      err = e;
    }
    const calls = full?.tool_calls || [];
    ok(!err && calls.length > 0 && withArgs > 1 && calls.every((c) => c.name === "get_weather" && validators.get_weather(c.args)),
       `${model}: LangChain stream: ${withArgs} tool_call_chunks with argument fragments, calls ` +
       `${JSON.stringify(calls.map((c) => c.args))}` + (err ? ` (error ${err.message})` : ""));
  }

  // --- auto and none: a well-formed answer either way -----------------------------------
  for (const tool_choice of ["auto", "none"]) {
    const r = await client.chat.completions.create({ model, messages, tools, tool_choice, temperature: 1, seed: 3, max_tokens: 24 });
    const c = r.choices[0];
    const valid = tool_choice === "none"
      ? c.finish_reason !== "tool_calls" && typeof c.message.content === "string" && !c.message.tool_calls
      : (c.finish_reason === "tool_calls" ? checkCalls(c, {}) === "" : typeof c.message.content === "string");
    ok(valid, `${model}: tool_choice ${tool_choice}: well-formed answer (finish ${c.finish_reason})`);
  }

  // --- a multi-turn tool conversation: call, result, answer -----------------------------
  {
    const first = await client.chat.completions.create({
      model, messages, tools, tool_choice: { type: "function", function: { name: "get_weather" } },
      temperature: 1, seed: 5, max_tokens: 300, parallel_tool_calls: false,
    });
    const call = first.choices[0].message;
    const history = [
      ...messages,
      call,
      { role: "tool", tool_call_id: call.tool_calls[0].id, content: JSON.stringify({ temperature: 21 }) },
    ];
    const second = await client.chat.completions.create({ model, messages: history, tools, temperature: 1, seed: 5, max_tokens: 16 });
    ok(second.choices.length === 1 && ["stop", "length", "tool_calls"].includes(second.choices[0].finish_reason),
       `${model}: multi-turn — the assistant's call and the tool result are accepted back (finish ${second.choices[0].finish_reason})`);
  }

  // --- the SDK's runTools helper runs our function with the parsed arguments -----------
  {
    let invoked = 0, lastArgs = null;
    const runner = client.chat.completions.runTools(
      {
        model, messages, temperature: 1, seed: 9, max_tokens: 300,
        tool_choice: { type: "function", function: { name: "lookup" } },
        tools: [{ type: "function", function: { name: "lookup", parameters: tools[1].function.parameters,
                  parse: JSON.parse, function: (a) => { invoked++; lastArgs = a; return { hits: 0 }; } } }],
      },
      { maxChatCompletions: 1 },
    );
    try {
      await runner.done();
    } catch (e) {
      /* maxChatCompletions reached with a pending call is fine */
    }
    ok(invoked >= 1 && validators.lookup(lastArgs), `${model}: runTools invoked the function with valid arguments ${JSON.stringify(lastArgs)}`);
  }
}

// --- refusals ------------------------------------------------------------------------
{
  const twoCalls = {
    role: "assistant", content: null,
    tool_calls: [
      { id: "a", type: "function", function: { name: "lookup", arguments: "{\"query\":\"x\"}" } },
      { id: "b", type: "function", function: { name: "lookup", arguments: "{\"query\":\"y\"}" } },
    ],
  };
  let status = 0;
  try {
    await client.chat.completions.create({ model: "llama", messages: [messages[1], twoCalls], tools, max_tokens: 4 });
  } catch (e) {
    status = e.status;
  }
  ok(status === 400, `llama: two calls in one assistant turn are refused as the Llama 3 template does (${status})`);
  status = 0;
  try {
    await client.chat.completions.create({ model: "qwen", messages, tools, tool_choice: { type: "function", function: { name: "nope" } } });
  } catch (e) {
    status = e.status;
  }
  ok(status === 400, `tool_choice naming an unknown function → 400 (${status})`);
}
// --- chat_template_kwargs.enable_thinking: the prompt grows by the closed think
// block for Qwen3 only; other templates ignore it; a non-boolean is a 400 -----------
{
  const ask = async (model, kw) =>
    (await client.chat.completions.create({
      model, messages: [messages[1]], max_tokens: 1, temperature: 0,
      ...(kw === undefined ? {} : { chat_template_kwargs: kw }),
    })).usage.prompt_tokens;
  const q = [await ask("qwen3"), await ask("qwen3", { enable_thinking: true }), await ask("qwen3", { enable_thinking: false, other: [1] })];
  ok(q[0] === q[1] && q[2] > q[0], `qwen3: enable_thinking false adds the empty think block to the prompt (prompt tokens ${q.join(", ")})`);
  const l = [await ask("llama"), await ask("llama", { enable_thinking: false })];
  ok(l[0] === l[1], `llama: enable_thinking is ignored by a template that does not read it (prompt tokens ${l.join(", ")})`);
  let status = 0, param = null;
  try {
    await ask("qwen3", { enable_thinking: "no" });
  } catch (e) {
    status = e.status;
    param = e.param;
  }
  ok(status === 400 && param === "chat_template_kwargs.enable_thinking", `enable_thinking "no" → 400 naming the field (${status}, ${param})`);
}

// --- Mistral ids: a call id the client invents (not 9 characters) is mapped, and a
// tool message without tool_call_id is refused as the template raises -----------------
{
  const call = { role: "assistant", content: null,
    tool_calls: [{ id: "my-own-id-1", type: "function", function: { name: "lookup", arguments: "{\"query\":\"x\"}" } }] };
  const r = await client.chat.completions.create({
    model: "mistral", tools, max_tokens: 4,
    messages: [messages[1], call, { role: "tool", tool_call_id: "my-own-id-1", content: "{\"hits\": 0}" }],
  });
  ok(r.choices.length === 1, "mistral: a history with a client-chosen call id is rendered (mapped to 9 characters)");
  let status = 0;
  try {
    await client.chat.completions.create({
      model: "mistral", tools, max_tokens: 4, messages: [messages[1], call, { role: "tool", content: "x" }],
    });
  } catch (e) {
    status = e.status;
  }
  ok(status === 400, `mistral: a tool message without tool_call_id → 400 (${status})`);
}
process.exit(failed ? 1 : 0);
