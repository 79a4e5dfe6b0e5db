// sdk_e2e.mjs — the official `openai` npm SDK against a real pagoda gateway
// and real worker (started by api_sdk.sh). Prints "ok - …" / "not ok - …".
//
// env: URL_A  gateway A (worker --max-seqs 8), keys file with HIGH/LOW/ADMIN keys
//      URL_B  gateway B (worker --max-seqs 1, --max-queue 7): priority, 429, queued cancel
//      KEY_HIGH KEY_LOW KEY_ADMIN  bearer secrets; MODEL  model name
// tests/js/node_modules holds the SDK (bash tests/js/ensure.sh installs it)
import OpenAI from "../js/node_modules/openai/index.mjs";

const { URL_A, URL_B, KEY_HIGH, KEY_LOW, KEY_ADMIN, MODEL } = process.env;
let failed = 0;
const ok = (cond, what) => {
  console.log(`${cond ? "ok" : "not ok"} - ${what}`);
  if (!cond) failed++;
  return cond;
};
const client = (url, key) => new OpenAI({ baseURL: `${url}/v1`, apiKey: key, maxRetries: 0, timeout: 60000 });
const A = client(URL_A, KEY_HIGH);
const B_high = client(URL_B, KEY_HIGH);
const B_low = client(URL_B, KEY_LOW);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const health = async (url) => (await fetch(`${url}/health`)).json();
const metric = async (url, line) => {
  // with keys on, /metrics needs an admin (or metrics) key (docs/SECURITY.md)
  const text = await (await fetch(`${url}/metrics`, { headers: { Authorization: `Bearer ${KEY_ADMIN}` } })).text();
  const m = text.split("\n").find((l) => l.startsWith(line + " "));
  return m ? Number(m.slice(line.length + 1)) : 0;
};
const chatMsg = [{ role: "user", content: "Once upon a time" }];
// The health of url once pred holds on it (polled), or the last one after ms:
// the gateway's state, not a sleep, says when a step has happened.
const healthWhen = async (url, pred, ms = 20000) => {
  const end = Date.now() + ms;
  let h = await health(url);
  while (!pred(h) && Date.now() < end) {
    await sleep(20);
    h = await health(url);
  }
  return h;
};

async function errorClass(fn) {
  try {
    await fn();
    return null;
  } catch (e) {
    return e;
  }
}

// --- non-streaming chat and completions -------------------------------------
const chat = await A.chat.completions.create({ model: MODEL, messages: chatMsg, max_tokens: 24, temperature: 0 });
ok(chat.object === "chat.completion" && chat.id.startsWith("chatcmpl-"), "chat: object and id");
ok(chat.choices.length === 1 && chat.choices[0].message.role === "assistant" &&
   chat.choices[0].message.content.length > 0, `chat: assistant content (${JSON.stringify(chat.choices[0].message.content)})`);
const u = chat.usage;
ok(u.prompt_tokens > 0 && u.completion_tokens > 0 && u.completion_tokens <= 24 &&
   u.total_tokens === u.prompt_tokens + u.completion_tokens, `chat: usage ${JSON.stringify(u)}`);
ok(["stop", "length"].includes(chat.choices[0].finish_reason) &&
   (chat.choices[0].finish_reason !== "length" || u.completion_tokens === 24), "chat: finish_reason agrees with usage");

const cmpl = await A.completions.create({ model: MODEL, prompt: "Once upon a time", max_tokens: 40, temperature: 0 });
const ref = cmpl.choices[0].text;
ok(cmpl.object === "text_completion" && ref.length > 0, `completion: text ${JSON.stringify(ref)}`);
ok(cmpl.usage.completion_tokens === 40 ? cmpl.choices[0].finish_reason === "length" : cmpl.choices[0].finish_reason === "stop",
   `completion: finish_reason ${cmpl.choices[0].finish_reason} with ${cmpl.usage.completion_tokens} tokens`);
const dflt = await A.completions.create({ model: MODEL, prompt: "Once upon a time", temperature: 0, ignore_eos: true });
ok(dflt.usage.completion_tokens === 16, `completion without max_tokens stops at 16 tokens (got ${dflt.usage.completion_tokens})`);

// --- streaming == non-streaming (greedy) -------------------------------------
{
  const stream = await A.completions.create({ model: MODEL, prompt: "Once upon a time", max_tokens: 40, temperature: 0,
                                              stream: true, stream_options: { include_usage: true } });
  let text = "", finish = null, usage = null, n = 0, ids = new Set();
  for await (const ch of stream) {
    n++;
    ids.add(ch.id);
    if (ch.choices.length) {
      text += ch.choices[0].text;
      if (ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason;
    } else usage = ch.usage;
  }
  ok(text === ref, `completion stream text equals the non-streamed text (${n} chunks)`);
  ok(finish === cmpl.choices[0].finish_reason && usage && usage.completion_tokens === cmpl.usage.completion_tokens,
     "completion stream: finish_reason and include_usage chunk");
  ok(ids.size === 1, "completion stream: one id across chunks");
}
{
  const stream = await A.chat.completions.create({ model: MODEL, messages: chatMsg, max_tokens: 24, temperature: 0, stream: true });
  const chunks = [];
  for await (const ch of stream) chunks.push(ch);
  const text = chunks.map((c) => c.choices[0]?.delta?.content ?? "").join("");
  ok(chunks[0].choices[0].delta.role === "assistant", "chat stream: first chunk carries the role");
  ok(chunks.at(-1).choices[0].finish_reason === chat.choices[0].finish_reason &&
     chunks.slice(0, -1).every((c) => c.choices[0].finish_reason === null), "chat stream: only the last chunk has finish_reason");
  ok(text === chat.choices[0].message.content, "chat stream text equals the non-streamed content");
  ok(chunks.every((c) => c.object === "chat.completion.chunk" && c.usage === undefined), "chat stream: no usage without include_usage");
}
{ // stream helper of the SDK (accumulates the message itself)
  const runner = A.chat.completions.stream({ model: MODEL, messages: chatMsg, max_tokens: 24, temperature: 0 });
  const final = await runner.finalChatCompletion();
  ok(final.choices[0].message.content === chat.choices[0].message.content, "SDK stream helper: finalChatCompletion matches");
}

// --- stop strings --------------------------------------------------------------
{
  const words = ref.trim().split(/\s+/);
  const word = words.slice(2).find((w) => w.length >= 4) ?? words.at(-1);
  const cut = ref.indexOf(word, 1);
  const r = await A.completions.create({ model: MODEL, prompt: "Once upon a time", max_tokens: 40, temperature: 0, stop: [word] });
  ok(r.choices[0].text === ref.slice(0, cut) && r.choices[0].finish_reason === "stop",
     `stop "${word}": text ends before it (${JSON.stringify(r.choices[0].text)})`);
}

// --- seeds -----------------------------------------------------------------------
{
  const p = { model: MODEL, prompt: "The little dog", max_tokens: 30, temperature: 1.0, ignore_eos: true };
  const [a, b, c] = await Promise.all([A.completions.create({ ...p, seed: 42 }), A.completions.create({ ...p, seed: 42 }),
                                       A.completions.create({ ...p, seed: 7 })]);
  ok(a.choices[0].text === b.choices[0].text, "same seed → same text (concurrently batched)");
  ok(a.choices[0].text !== c.choices[0].text, "another seed → another text");
}

// --- n: 3 choices from one prompt -----------------------------------------------------
{
  const p = { model: MODEL, prompt: "The little dog", max_tokens: 20, temperature: 1.0, ignore_eos: true };
  const many = await A.completions.create({ ...p, n: 3, seed: 100 });
  const singles = await Promise.all([100, 101, 102].map((seed) => A.completions.create({ ...p, seed })));
  ok(many.choices.length === 3 && many.choices.every((c, i) => c.index === i && c.finish_reason === "length"),
     `n: 3 → choices indexed 0..2 (${JSON.stringify(many.choices.map((c) => c.index))})`);
  ok(many.choices.every((c, i) => c.text === singles[i].choices[0].text),
     "n: 3 with seed s → choice i equals a single request with seed s + i");
  ok(new Set(many.choices.map((c) => c.text)).size > 1, "n: 3 sampled → the choices differ");
  ok(many.usage.completion_tokens === 60 && many.usage.prompt_tokens === singles[0].usage.prompt_tokens,
     `n: 3 usage sums completion tokens, prompt counted once (${JSON.stringify(many.usage)})`);
  const chat3 = await A.chat.completions.create({ model: MODEL, messages: chatMsg, max_tokens: 8, n: 3, temperature: 0 });
  ok(chat3.choices.length === 3 && chat3.choices.every((c) => c.message.content === chat3.choices[0].message.content),
     "chat n: 3 greedy → three equal messages");
  const stream = await A.chat.completions.create({ model: MODEL, messages: chatMsg, max_tokens: 8, n: 3, seed: 5,
                                                    temperature: 1.0, ignore_eos: true, stream: true, stream_options: { include_usage: true } });
  const texts = ["", "", ""], finishes = [null, null, null];
  let usage = null, bad = 0;
  for await (const ch of stream) {
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) {
      if (c.index < 0 || c.index > 2) bad++;
      else {
        texts[c.index] += c.delta.content ?? "";
        if (c.finish_reason) finishes[c.index] = c.finish_reason;
      }
    }
  }
  const single = await A.chat.completions.create({ model: MODEL, messages: chatMsg, max_tokens: 8, seed: 7, temperature: 1.0,
                                                     ignore_eos: true });
  ok(bad === 0 && finishes.every((f) => f !== null), `chat stream n: 3 → each choice has its own finish_reason (${finishes})`);
  ok(texts[2] === single.choices[0].message.content, "chat stream n: 3, choice 2 == single request with seed + 2");
  // every choice ended by length: 8 tokens each
  ok(finishes.every((f) => f === "length") && usage && usage.completion_tokens === 24,
     `chat stream n: 3 usage chunk sums completion tokens (${JSON.stringify(usage)})`);
}

// --- logprobs ----------------------------------------------------------------------
{
  const r = await A.chat.completions.create({ model: MODEL, messages: chatMsg, max_tokens: 12, temperature: 0,
                                             logprobs: true, top_logprobs: 3, ignore_eos: true });
  const lp = r.choices[0].logprobs?.content ?? [];
  ok(lp.length === r.usage.completion_tokens, `chat logprobs: one entry per token (${lp.length})`);
  ok(lp.every((t) => t.logprob <= 0 && t.top_logprobs.length === 3 && Array.isArray(t.bytes)), "chat logprobs: 3 alternatives, logprob ≤ 0, bytes");
  ok(lp.every((t) => Math.abs(t.top_logprobs[0].logprob - t.logprob) < 1e-5 && t.top_logprobs[0].token === t.token),
     "greedy: the chosen token is the top alternative");
  ok(lp.map((t) => Buffer.from(t.bytes).toString("utf8")).join("") === r.choices[0].message.content,
     "chat logprobs: token bytes spell the content");
  const c = await A.completions.create({ model: MODEL, prompt: "Once upon a time", max_tokens: 8, temperature: 0, logprobs: 2 });
  const l = c.choices[0].logprobs;
  ok(l && l.tokens.length === 8 && l.token_logprobs.length === 8 && l.top_logprobs.every((t) => Object.keys(t).length >= 1) &&
     l.text_offset[0] === 0, "completion logprobs: tokens, token_logprobs, top_logprobs, text_offset");
}

// --- errors as SDK classes ------------------------------------------------------------
{
  let e = await errorClass(() => A.chat.completions.create({ model: MODEL, messages: chatMsg, temperature: 5 }));
  ok(e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === "temperature", `400 → BadRequestError (param ${e?.param})`);
  e = await errorClass(() => A.chat.completions.create({ model: MODEL, messages: chatMsg, n: 129 }));
  ok(e instanceof OpenAI.BadRequestError && e.param === "n", "n=129 → BadRequestError naming n");
  e = await errorClass(() => A.completions.create({ model: MODEL, prompt: "x", n: 2, best_of: 4 }));
  ok(e instanceof OpenAI.BadRequestError && e.param === "best_of", "best_of 4 with n 2 → BadRequestError naming best_of");
  e = await errorClass(() => client(URL_A, "not-a-key").chat.completions.create({ model: MODEL, messages: chatMsg }));
  ok(e instanceof OpenAI.AuthenticationError && e.status === 401, "bad key → AuthenticationError");
  e = await errorClass(() => A.chat.completions.create({ model: "no-such-model", messages: chatMsg }));
  ok(e instanceof OpenAI.NotFoundError && e.code === "model_not_found", "unknown model → NotFoundError model_not_found");
  e = await errorClass(() => A.completions.create({ model: MODEL, prompt: "x ".repeat(2000), max_tokens: 4 }));
  ok(e instanceof OpenAI.BadRequestError, `prompt longer than the context → BadRequestError (${e?.status} ${e?.message?.slice(0, 60)})`);
  const models = await A.models.list();
  ok(models.data.some((m) => m.id === MODEL), "models.list() shows the model");
}

// --- 24 concurrent streams -------------------------------------------------------------
{
  const t0 = Date.now();
  const one = async () => {
    const s = await A.completions.create({ model: MODEL, prompt: "Once upon a time", max_tokens: 40, temperature: 0, stream: true });
    let t = "";
    for await (const ch of s) t += ch.choices[0]?.text ?? "";
    return t;
  };
  const texts = await Promise.all(Array.from({ length: 24 }, one));
  ok(texts.every((t) => t === ref), `24 concurrent streams all complete with the greedy text (${Date.now() - t0} ms)`);
}

// --- cancellation by aborting the SDK call (running) -----------------------------------------
{
  const aborted0 = await metric(URL_A, `vllm:request_success_total{model_name="${MODEL}",finished_reason="abort"}`);
  const ac = new AbortController();
  const s = await A.completions.create({ model: MODEL, prompt: "Once upon a time", max_tokens: 100000, ignore_eos: true,
                                         stream: true }, { signal: ac.signal });
  let n = 0;
  const e = await errorClass(async () => { for await (const ch of s) if (++n === 3) ac.abort(); });
  ok(n === 3 && (e === null || e.name === "AbortError" || e instanceof OpenAI.APIUserAbortError),
     `aborting the stream ends the SDK iteration (${n} chunks, ${e?.name ?? "no error"})`);
  let aborted = aborted0, h;
  for (let i = 0; i < 50 && aborted === aborted0; i++) {
    await sleep(100);
    aborted = await metric(URL_A, `vllm:request_success_total{model_name="${MODEL}",finished_reason="abort"}`);
  }
  ok(aborted === aborted0 + 1, `the worker finished it as cancelled (abort count ${aborted0} → ${aborted})`);
  for (let i = 0; i < 30; i++) {
    h = await health(URL_A);
    if (h.models[MODEL].running === 0 && h.workers.every((w) => w.load?.running === 0)) break;
    await sleep(100);
  }
  ok(h.models[MODEL].running === 0 && h.workers.every((w) => w.load?.running === 0),
     "after the abort nothing runs (gateway and worker load)");
}

// --- gateway B: one slot, --max-queue 7. Priority, 429, queued cancel ----------------------------
// The worker is saturated deterministically: SIGSTOP it (its one slot then
// holds the first request), queue the rest, SIGCONT it well within the
// liveness window (3 heartbeats of 1 s). Each step waits for /health to show
// the previous one happened, not for a fixed time.
{
  const wpid = (await health(URL_B)).workers[0].pid;
  const order = [];
  const req = (cl, tag) => cl.completions.create({ model: MODEL, prompt: "Once upon a time", max_tokens: 4, temperature: 0 })
    .then(() => order.push(tag));
  process.kill(wpid, "SIGSTOP");
  const lows = [req(B_low, "L0")];
  await healthWhen(URL_B, (h) => h.models[MODEL].running === 1); // L0 takes the one slot
  lows.push(...[1, 2, 3].map((i) => req(B_low, `L${i}`)));
  await healthWhen(URL_B, (h) => h.models[MODEL].queued === 3);
  const highs = [0, 1, 2, 3].map((i) => req(B_high, `H${i}`));
  let h = await healthWhen(URL_B, (h) => h.models[MODEL].queued === 7);
  ok(h.models[MODEL].queued === 7 && h.models[MODEL].running === 1,
     `worker busy: 1 running, 7 queued (${h.models[MODEL].running}, ${h.models[MODEL].queued})`);
  const e = await errorClass(() => B_low.completions.create({ model: MODEL, prompt: "x", max_tokens: 2 }));
  ok(e instanceof OpenAI.RateLimitError && e.status === 429 && e.headers?.get?.("retry-after") === "1",
     "queue full → RateLimitError with Retry-After");
  process.kill(wpid, "SIGCONT");
  await Promise.all([...lows, ...highs]);
  // L0 took the slot before anything else was queued
  const rest = order.filter((t) => t !== "L0");
  const firstLow = rest.findIndex((t) => t.startsWith("L"));
  const lastHigh = Math.max(...rest.map((t, i) => (t.startsWith("H") ? i : -1)));
  ok(order.length === 8 && order[0] === "L0" && lastHigh < firstLow, `high-tier requests queued after low ones are served first (order ${order.join(" ")})`);
  ok(order.filter((t) => t.startsWith("L")).length === 4, "all low-tier requests still complete");
}
{
  // cancel while queued: it leaves the queue, the running one is untouched
  const wpid = (await health(URL_B)).workers[0].pid;
  process.kill(wpid, "SIGSTOP");
  const first = B_high.completions.create({ model: MODEL, prompt: "Once upon a time", max_tokens: 4, temperature: 0 });
  await healthWhen(URL_B, (h) => h.models[MODEL].running === 1); // it holds the slot
  const ac = new AbortController();
  const p = B_low.completions.create({ model: MODEL, prompt: "Once upon a time", max_tokens: 4 }, { signal: ac.signal }).catch((x) => x);
  let h = await healthWhen(URL_B, (h) => h.models[MODEL].queued === 1);
  ok(h.models[MODEL].queued === 1, "a request waits in the queue");
  ac.abort();
  await p;
  h = await healthWhen(URL_B, (h) => h.models[MODEL].queued === 0);
  ok(h.models[MODEL].queued === 0 && h.models[MODEL].running === 1, "aborting it removes it from the queue (the running one stays)");
  process.kill(wpid, "SIGCONT");
  const r = await first;
  ok(r.choices[0].text.length > 0, "the running request completes after that");
}

process.exit(failed ? 1 : 0);
