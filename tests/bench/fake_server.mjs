// fake_server.mjs — a tiny OpenAI-compatible streaming server with known
// timing, used only to test pagoda-bench (the client). It is not a model of
// pagoda: it generates placeholder tokens on a fixed schedule so the test can
// check the client's measurements against delays it knows.
//
//   node tests/bench/fake_server.mjs [options]
//     --port N            listen on 127.0.0.1:N (0 = any; the port is printed
//                         as "listening N" on stdout)
//     --ttft-ms MS        delay before the first content chunk (default 50)
//     --itl-ms MS         delay between content chunks (default 10)
//     --eos-after N       without "ignore_eos": true, stop after N tokens
//                         (finish_reason "stop"); default: never
//     --fail-500-every K  every K-th request (1-based arrival order) gets
//                         HTTP 500 with an OpenAI error body
//     --fail-429-every K  every K-th request gets HTTP 429 (checked after 500)
//     --sse-error-every K every K-th request streams 2 tokens then an SSE
//                         "event: error" and closes without [DONE]
//     --fragment          write every SSE event in small random pieces, with
//                         CRLF line ends on odd requests, to exercise the
//                         client's handling of chunk boundaries
//     --api-key KEY       require "Authorization: Bearer KEY" (else 401)
//
// Endpoints: POST /v1/completions, POST /v1/chat/completions (stream only),
// GET /v1/models (one model, "fake-model"),
// GET /stats -> {"requests", "ok_started", "max_in_flight", "distinct_prompts",
// "distinct_prefixes" (first 16 words), "bad_requests", "ignore_eos",
// "max_tokens_seen", "include_usage"}.
// usage.prompt_tokens is the prompt's number of space-separated words;
// usage.prompt_tokens_details.cached_tokens is the number of leading words the
// prompt shares with the previous prompt (a stand-in for prefix-cache hits).
import http from "node:http";

const opt = { port: 0, ttftMs: 50, itlMs: 10, eosAfter: 0, fail500: 0, fail429: 0,
              sseError: 0, fragment: false, apiKey: null };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const a = argv[i], v = () => argv[++i];
  if (a === "--port") opt.port = +v();
  else if (a === "--ttft-ms") opt.ttftMs = +v();
  else if (a === "--itl-ms") opt.itlMs = +v();
  else if (a === "--eos-after") opt.eosAfter = +v();
  else if (a === "--fail-500-every") opt.fail500 = +v();
  else if (a === "--fail-429-every") opt.fail429 = +v();
  else if (a === "--sse-error-every") opt.sseError = +v();
  else if (a === "--fragment") opt.fragment = true;
  else if (a === "--api-key") opt.apiKey = v();
  else { console.error(`fake_server: unknown option ${a}`); process.exit(2); }
}

const stats = { requests: 0, ok_started: 0, in_flight: 0, max_in_flight: 0, bad_requests: 0,
                ignore_eos: 0, include_usage: 0, max_tokens_seen: [] };
const prompts = new Set(), prefixes = new Set();
let lastWords = [];

function sendError(res, status, message, type) {
  res.writeHead(status, { "Content-Type": "application/json" });
  res.end(JSON.stringify({ error: { message, type, param: null, code: null } }));
}

function promptText(body, chat) {
  if (chat) {
    if (!Array.isArray(body.messages)) return null;
    return body.messages.map((m) => (typeof m?.content === "string" ? m.content : "")).join(" ");
  }
  return typeof body.prompt === "string" ? body.prompt : null;
}

// Writes SSE events; in fragment mode as several pieces on later ticks.
// end() closes the response after everything queued has been written.
function makeWriter(res, fragment, crlf) {
  let queue = Promise.resolve();
  const write = (text) => {
    const ev = crlf ? text.replace(/\n/g, "\r\n") : text;
    if (!fragment) { res.write(ev); return; }
    queue = queue.then(async () => {
      let i = 0;
      while (i < ev.length) {
        const n = 1 + Math.floor(Math.random() * 7);
        if (!res.writableEnded && !res.destroyed) res.write(ev.slice(i, i + n));
        i += n;
        await new Promise((r) => setImmediate(r));
      }
    });
  };
  write.end = (then) => { queue = queue.then(() => { res.end(); then(); }); };
  return write;
}

function handleCompletion(req, res, raw, chat) {
  const n = ++stats.requests;
  let body;
  try { body = JSON.parse(raw); } catch { stats.bad_requests++; return sendError(res, 400, "bad JSON", "invalid_request_error"); }
  const prompt = body && promptText(body, chat);
  if (!body || typeof body.model !== "string" || prompt === null || body.stream !== true ||
      !Number.isInteger(body.max_tokens) || body.max_tokens < 1) {
    stats.bad_requests++;
    return sendError(res, 400, "need model, prompt/messages, stream:true, max_tokens", "invalid_request_error");
  }
  if (opt.apiKey && req.headers.authorization !== `Bearer ${opt.apiKey}`)
    return sendError(res, 401, "bad api key", "authentication_error");
  if (opt.fail500 && n % opt.fail500 === 0) return sendError(res, 500, "fake internal failure", "server_error");
  if (opt.fail429 && n % opt.fail429 === 0) return sendError(res, 429, "fake queue full", "rate_limit_error");

  const words = prompt.split(/\s+/).filter((w) => w.length > 0);
  prompts.add(prompt);
  prefixes.add(words.slice(0, 16).join(" "));
  let cached = 0;
  while (cached < words.length && cached < lastWords.length && words[cached] === lastWords[cached]) cached++;
  lastWords = words;
  if (body.ignore_eos === true) stats.ignore_eos++;
  if (body.stream_options?.include_usage === true) stats.include_usage++;
  stats.max_tokens_seen.push(body.max_tokens);
  stats.ok_started++;
  stats.in_flight++;
  stats.max_in_flight = Math.max(stats.max_in_flight, stats.in_flight);

  res.writeHead(200, { "Content-Type": "text/event-stream", "Cache-Control": "no-cache" });
  res.socket?.setNoDelay(true);
  const write = makeWriter(res, opt.fragment, n % 2 === 1);
  const id = `fake-${n}`, created = Math.floor(Date.now() / 1000);
  const object = chat ? "chat.completion.chunk" : "text_completion";
  const chunk = (choices, extra = {}) =>
    write(`data: ${JSON.stringify({ id, object, created, model: body.model, choices, ...extra })}\n\n`);
  const choice = (text, finish) => chat
    ? { index: 0, delta: text === null ? { role: "assistant", content: "" } : { content: text }, finish_reason: finish }
    : { index: 0, text: text ?? "", finish_reason: finish };

  let total = body.max_tokens;
  let finish = "length";
  if (body.ignore_eos !== true && opt.eosAfter > 0 && opt.eosAfter < total) { total = opt.eosAfter; finish = "stop"; }
  const sseError = opt.sseError && n % opt.sseError === 0;
  let sent = 0, timer = null, closed = false;
  const done = () => { if (!closed) { closed = true; stats.in_flight--; } };
  res.on("close", () => { clearTimeout(timer); done(); });
  if (chat) chunk([choice(null, null)]);            // role-only chunk: no content yet
  write(": keep-alive comment\n\n");                // comments must be ignored
  const step = () => {
    if (res.destroyed) return done();
    if (sseError && sent === 2) {
      write(`event: error\ndata: ${JSON.stringify({ error: { message: "fake worker crashed", type: "server_error" } })}\n\n`);
      write.end(done);
      return;
    }
    sent++;
    chunk([choice(` tok${sent}`, null)]);
    if (sent < total) { timer = setTimeout(step, opt.itlMs); return; }
    chunk([choice("", finish)]);
    const usage = { prompt_tokens: words.length, completion_tokens: sent, total_tokens: words.length + sent,
                    prompt_tokens_details: { cached_tokens: cached } };
    if (body.stream_options?.include_usage === true) chunk([], { usage });
    write("data: [DONE]\n\n");
    write.end(done);
  };
  timer = setTimeout(step, opt.ttftMs);
}

const server = http.createServer((req, res) => {
  if (req.method === "GET" && req.url === "/v1/models") {
    res.writeHead(200, { "Content-Type": "application/json" });
    res.end(JSON.stringify({ object: "list", data: [{ id: "fake-model", object: "model", owned_by: "test" }] }));
    return;
  }
  if (req.method === "GET" && req.url === "/stats") {
    res.writeHead(200, { "Content-Type": "application/json" });
    res.end(JSON.stringify({ ...stats, distinct_prompts: prompts.size, distinct_prefixes: prefixes.size }));
    return;
  }
  const chat = req.url === "/v1/chat/completions";
  if (req.method !== "POST" || !(chat || req.url === "/v1/completions"))
    return sendError(res, 404, `no route ${req.method} ${req.url}`, "invalid_request_error");
  const parts = [];
  req.on("data", (d) => parts.push(d));
  req.on("end", () => handleCompletion(req, res, Buffer.concat(parts).toString("utf8"), chat));
});
server.keepAliveTimeout = 60000;
server.listen(opt.port, "127.0.0.1", () => console.log(`listening ${server.address().port}`));
process.on("SIGTERM", () => process.exit(0));
