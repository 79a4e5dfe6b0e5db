// chat.js — the chat playground: a conversation with one model through
// POST /v1/chat/completions (stream: true), kept in localStorage.
//
// Per answer it shows TTFT (request sent → first delta) and tokens/s
// ((completion_tokens − 1) / (last delta − first delta): the decode rate,
// which the first token's prefill would distort). Stop aborts the fetch;
// the gateway notices the closed connection and sends CANCEL to the worker.
//
// Images: the Image button (a file picker), Ctrl+V of an image and a drop on
// the message box attach PNG/JPEG/WebP/GIF files to the next message; each
// goes as an image_url part holding a base64 data: URL, before the text
// (docs/API.md "Images"). The gateway's limits are checked here first (20 MiB
// per image, 8 per request) so an oversized file is refused before anything is
// sent; a model that takes no images answers 400, shown like other errors.
// Thumbnails are canvases drawn from createImageBitmap: the page's CSP
// (img-src 'self') admits no data: or blob: image URLs.

import { errorText, getJSON, headers, onKeyChange } from "./api.js";
import { codeBlock, renderMarkdown } from "./markdown.js";
import { sseData } from "./sse.js";

const STORE = "pagoda.chat.v1";
const $ = (id) => document.getElementById(id);
const FIELDS = ["model", "system", "temperature", "top_p", "max_tokens", "seed", "format", "schema", "tools", "tool_choice", "extra"];

let state = { messages: [], settings: {} };
let running = null; // {controller, msg} while an answer streams
let pending = []; // images attached to the next message: {name, blob (the File), url (its data: URL)}
const thumbs = new WeakMap(); // message → its images' canvases, drawn once, kept over re-renders

// the gateway's limits (docs/API.md "Images")
const MAX_IMAGE_BYTES = 20 << 20;
const MAX_IMAGES = 8;
const IMAGE_TYPES = ["image/png", "image/jpeg", "image/webp", "image/gif"];
const THUMB = 96; // px, the longer side of a thumbnail

function load() {
  try {
    const s = JSON.parse(localStorage.getItem(STORE) || "null");
    if (s && Array.isArray(s.messages)) state = { messages: s.messages, settings: s.settings || {} };
  } catch {
    /* a damaged entry starts a new conversation */
  }
}

function save() {
  try {
    localStorage.setItem(STORE, JSON.stringify(state));
  } catch {
    /* storage full or disabled: the conversation stays in memory */
  }
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function button(label, cls, onClick, title) {
  const b = el("button", cls, label);
  b.type = "button";
  if (title) b.title = title;
  b.addEventListener("click", onClick);
  return b;
}

async function copyText(text, btn) {
  try {
    await navigator.clipboard.writeText(text);
    const old = btn.textContent;
    btn.textContent = "copied";
    setTimeout(() => (btn.textContent = old), 1200);
  } catch {
    btn.textContent = "copy failed";
  }
}

// ---- settings ------------------------------------------------------------

function readSettings() {
  const s = {};
  for (const f of FIELDS) s[f] = $(f).value;
  return s;
}

function applySettings(s) {
  for (const f of FIELDS) if (s[f] !== undefined && f !== "model") $(f).value = s[f];
  $("schema-field").hidden = $("format").value !== "json_schema";
}

function parseJSONField(id, what, want) {
  const text = $(id).value.trim();
  if (!text) return undefined;
  let v;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new Error(`${what}: not valid JSON (${e.message})`);
  }
  if (want === "array" ? !Array.isArray(v) : v === null || typeof v !== "object" || Array.isArray(v))
    throw new Error(`${what}: expected a JSON ${want}`);
  return v;
}

function num(id) {
  const v = $(id).value.trim();
  return v === "" ? undefined : Number(v);
}

// The request body for the conversation so far (throws on a bad field).
function buildRequest() {
  const s = readSettings();
  if (!s.model) throw new Error("no model: the gateway lists none (or needs an API key)");
  const messages = [];
  if (s.system.trim()) messages.push({ role: "system", content: s.system });
  for (const m of state.messages) {
    if (m.error && !m.content && !m.tool_calls) continue;
    const out = { role: m.role, content: m.content ?? "" };
    if (m.images?.length) {
      out.content = m.images.map((url) => ({ type: "image_url", image_url: { url } }));
      if (m.content) out.content.push({ type: "text", text: m.content });
    }
    if (m.role === "assistant" && m.tool_calls?.length && !m.content) out.content = null;
    if (m.tool_calls?.length) out.tool_calls = m.tool_calls;
    if (m.role === "tool") out.tool_call_id = m.tool_call_id;
    messages.push(out);
  }
  const body = { model: s.model, messages, stream: true, stream_options: { include_usage: true } };
  for (const k of ["temperature", "top_p", "max_tokens", "seed"]) {
    const v = num(k);
    if (v !== undefined) {
      if (!Number.isFinite(v)) throw new Error(`${k}: not a number`);
      body[k] = v;
    }
  }
  if (s.format === "json_object") body.response_format = { type: "json_object" };
  if (s.format === "json_schema") {
    const schema = parseJSONField("schema", "JSON schema", "object");
    if (!schema) throw new Error("JSON schema: empty");
    body.response_format = { type: "json_schema", json_schema: { name: "console", schema } };
  }
  const tools = parseJSONField("tools", "Tools", "array");
  if (tools?.length) {
    body.tools = tools;
    body.tool_choice = s.tool_choice;
  }
  Object.assign(body, parseJSONField("extra", "Extra request fields", "object") || {});
  return body;
}

// ---- models --------------------------------------------------------------

async function loadModels() {
  const sel = $("model");
  const want = sel.value || state.settings.model;
  const res = await getJSON("/v1/models");
  sel.replaceChildren();
  if (!res.ok) {
    const o = el("option", "", res.status === 401 ? "(enter an API key above)" : `(models: ${errorText(res)})`);
    o.value = "";
    sel.append(o);
    return;
  }
  for (const m of res.body?.data || []) {
    const o = el("option", "", m.id);
    o.value = m.id;
    sel.append(o);
  }
  if (want && [...sel.options].some((o) => o.value === want)) sel.value = want;
}

// ---- rendering -----------------------------------------------------------

function statsText(st) {
  const parts = [];
  if (st.ttft_ms != null) parts.push(`TTFT ${Math.round(st.ttft_ms)} ms`);
  if (st.tps != null) parts.push(`${st.tps.toFixed(1)} tok/s`);
  if (st.tokens != null) parts.push(`${st.tokens} tokens`);
  if (st.finish) parts.push(st.finish);
  return parts.join(" · ");
}

// `open`: the model waits for these calls' results (nothing but tool results
// follows the message), so each unanswered call gets an input.
function renderToolCalls(m, box, open) {
  for (const call of m.tool_calls || []) {
    const t = el("div", "toolcall");
    t.append(el("div", "toolcall-name", `tool call: ${call.function?.name ?? "?"}`));
    let args = call.function?.arguments ?? "";
    try {
      args = JSON.stringify(JSON.parse(args), null, 2);
    } catch {
      /* shown as sent */
    }
    t.append(codeBlock(args, "json"));
    const answered = state.messages.some((x) => x.role === "tool" && x.tool_call_id === call.id);
    if (open && !answered) {
      const input = el("textarea", "mono tool-result");
      input.rows = 2;
      input.placeholder = `result of ${call.function?.name ?? "the call"} (sent as a tool message)`;
      t.append(
        input,
        button("Send result", "primary small", () => {
          state.messages.push({ role: "tool", tool_call_id: call.id, content: input.value });
          save();
          // every call answered: the model goes on with the results
          const done = (c) => state.messages.some((x) => x.role === "tool" && x.tool_call_id === c.id);
          if (m.tool_calls.every(done)) generate();
          else render();
        }),
      );
    }
    box.append(t);
  }
}

// ---- images ----------------------------------------------------------------

const mib = (n) => `${(n / (1 << 20)).toFixed(1)} MiB`;

function showAttachError(text) {
  $("attach-error").textContent = text;
  $("attach-error").hidden = !text;
}

// The bytes of a base64 data: URL as a Blob (fetch() of a data: URL is not
// allowed by the CSP's connect-src 'self').
function dataUrlBlob(url) {
  const comma = url.indexOf(",");
  const type = url.slice(5, url.indexOf(";"));
  const bin = atob(url.slice(comma + 1));
  const bytes = new Uint8Array(bin.length);
  for (let k = 0; k < bin.length; k++) bytes[k] = bin.charCodeAt(k);
  return new Blob([bytes], { type });
}

// A canvas showing the image scaled to THUMB px, drawn when the browser has
// decoded it; one it cannot decode stays an empty frame (the gateway names
// what is wrong with it when it is sent).
function thumbnail(blob, title) {
  const c = el("canvas", "thumb");
  c.width = c.height = THUMB;
  c.title = title;
  c.setAttribute("role", "img");
  c.setAttribute("aria-label", title);
  createImageBitmap(blob)
    .then((bmp) => {
      const k = THUMB / Math.max(bmp.width, bmp.height, 1);
      c.width = Math.max(1, Math.round(bmp.width * k));
      c.height = Math.max(1, Math.round(bmp.height * k));
      c.getContext("2d").drawImage(bmp, 0, 0, c.width, c.height);
      c.dataset.drawn = "1";
      bmp.close();
    })
    .catch(() => (c.dataset.drawn = "0"));
  return c;
}

function renderPending() {
  const box = $("attachments");
  box.replaceChildren(
    ...pending.map((p, k) => {
      const a = el("div", "attachment");
      a.append(
        thumbnail(p.blob, p.name),
        button("×", "small remove", () => {
          pending.splice(k, 1);
          showAttachError("");
          renderPending();
        }, `Remove ${p.name}`),
      );
      return a;
    }),
  );
  box.hidden = !pending.length;
}

const readDataUrl = (file) =>
  new Promise((resolve, reject) => {
    const r = new FileReader();
    r.onload = () => resolve(r.result);
    r.onerror = () => reject(r.error);
    r.readAsDataURL(file);
  });

// Attaches files (from the picker, a paste or a drop) after checking them
// against the gateway's limits; a refused file is named in the error line and
// nothing of it is kept.
async function attachFiles(files) {
  const problems = [];
  for (const f of files) {
    const name = f.name || "pasted image";
    if (!IMAGE_TYPES.includes(f.type)) problems.push(`${name}: not a PNG, JPEG, WebP or GIF image`);
    else if (f.size > MAX_IMAGE_BYTES)
      problems.push(`${name} is ${mib(f.size)}: images may be at most ${mib(MAX_IMAGE_BYTES)} each`);
    else if (pending.length >= MAX_IMAGES) problems.push(`${name}: at most ${MAX_IMAGES} images per message`);
    else {
      try {
        pending.push({ name, blob: f, url: await readDataUrl(f) });
      } catch (e) {
        problems.push(`${name}: could not be read (${e?.message ?? e})`);
      }
    }
  }
  showAttachError(problems.join("; "));
  renderPending();
}

function renderMessage(m, i) {
  const box = el("div", `msg ${m.role}${m.error ? " failed" : ""}`);
  box.dataset.index = i;
  const head = el("div", "msg-head");
  head.append(el("span", "role", m.role === "tool" ? "tool result" : m.role));
  const actions = el("span", "actions");
  const isLast = i === state.messages.length - 1;
  const open = !running && state.messages.slice(i + 1).every((x) => x.role === "tool");
  if (m.content) actions.append(button("copy", "ghost small copy-msg", (e) => copyText(m.content, e.target), "Copy this message"));
  if (m.role === "assistant" && isLast && !running)
    actions.append(button("regenerate", "ghost small regenerate", () => regenerate(), "Ask again for this answer"));
  head.append(actions);
  box.append(head);
  if (m.reasoning) {
    const d = el("details", "reasoning");
    d.append(el("summary", "", "reasoning"));
    const body = el("div", "reasoning-body");
    body.append(renderMarkdown(m.reasoning));
    d.append(body);
    box.append(d);
  }
  if (m.images?.length) {
    if (!thumbs.has(m))
      thumbs.set(m, m.images.flatMap((url, k) => {
        try {
          return [thumbnail(dataUrlBlob(url), `image ${k + 1}`)];
        } catch {
          return []; // a damaged stored URL: no thumbnail
        }
      }));
    const imgs = el("div", "images");
    imgs.append(...thumbs.get(m));
    box.append(imgs);
  }
  const body = el("div", "body");
  // a JSON-mode answer shows as JSON, not as Markdown
  if (m.role === "assistant" && m.json && m.content) body.append(codeBlock(m.content, "json"));
  else if (m.role === "assistant") body.append(renderMarkdown(m.content || ""));
  else body.textContent = m.content || "";
  box.append(body);
  renderToolCalls(m, box, open);
  if (m.error) box.append(el("div", "error", m.error));
  if (m.stats) box.append(el("div", "stats", statsText(m.stats)));
  return box;
}

function render() {
  const list = $("messages");
  list.replaceChildren(...state.messages.map(renderMessage));
  if (!state.messages.length) list.append(el("p", "empty", "Pick a model and say something."));
  list.scrollTop = list.scrollHeight;
}

// Re-renders only the streaming message, at most once per frame.
let frame = 0;
function renderLive() {
  if (frame) return;
  frame = requestAnimationFrame(() => {
    frame = 0;
    if (!running) return;
    const list = $("messages");
    const i = state.messages.indexOf(running.msg);
    const old = list.querySelector(`.msg[data-index="${i}"]`);
    const stick = list.scrollHeight - list.scrollTop - list.clientHeight < 40;
    const fresh = renderMessage(running.msg, i);
    fresh.classList.add("streaming");
    if (old) old.replaceWith(fresh);
    else list.append(fresh);
    if (stick) list.scrollTop = list.scrollHeight;
  });
}

function setRunning(on) {
  $("send").hidden = on;
  $("stop").hidden = !on;
  $("clear").disabled = on;
}

// ---- one answer ------------------------------------------------------------

async function generate() {
  $("settings-error").hidden = true;
  let body;
  try {
    body = buildRequest();
  } catch (e) {
    $("settings-error").textContent = e.message;
    $("settings-error").hidden = false;
    $("settings").open = true;
    return;
  }
  const msg = { role: "assistant", content: "" }; // stats come when it ends
  if (body.response_format) msg.json = true;
  state.messages.push(msg);
  const controller = new AbortController();
  running = { controller, msg };
  setRunning(true);
  render();
  const t0 = performance.now();
  let tFirst = 0,
    tLast = 0,
    chunks = 0,
    usage = null,
    finish = null;
  const calls = [];
  try {
    const r = await fetch("/v1/chat/completions", {
      method: "POST",
      headers: headers({ "Content-Type": "application/json" }),
      body: JSON.stringify(body),
      signal: controller.signal,
      cache: "no-store",
    });
    if (!r.ok) {
      let b = null;
      try {
        b = await r.json();
      } catch {
        /* not JSON */
      }
      throw new Error(errorText({ status: r.status, body: b }));
    }
    for await (const data of sseData(r)) {
      if (data === "[DONE]") break;
      let ev;
      try {
        ev = JSON.parse(data);
      } catch {
        continue;
      }
      if (ev.error) throw new Error(ev.error.message || "error event");
      if (ev.usage) usage = ev.usage;
      const ch = ev.choices?.[0];
      if (!ch) continue;
      const d = ch.delta || {};
      const got = d.content || d.reasoning_content || d.tool_calls?.length;
      if (got) {
        const now = performance.now();
        if (!tFirst) tFirst = now;
        tLast = now;
        chunks++;
      }
      if (d.content) msg.content += d.content;
      if (d.reasoning_content) msg.reasoning = (msg.reasoning || "") + d.reasoning_content;
      for (const tc of d.tool_calls || []) {
        const c = (calls[tc.index ?? 0] ||= { id: "", type: "function", function: { name: "", arguments: "" } });
        if (tc.id) c.id = tc.id;
        if (tc.function?.name) c.function.name += tc.function.name;
        if (tc.function?.arguments) c.function.arguments += tc.function.arguments;
        msg.tool_calls = calls.filter(Boolean);
      }
      if (ch.finish_reason) finish = ch.finish_reason;
      renderLive();
    }
  } catch (e) {
    if (e.name === "AbortError") finish = "stopped";
    else msg.error = e.message === "Failed to fetch" ? "the gateway is unreachable" : e.message;
  }
  const tokens = usage?.completion_tokens ?? (chunks || null);
  msg.stats = {
    ttft_ms: tFirst ? tFirst - t0 : null,
    tps: tokens > 1 && tLast > tFirst ? (tokens - 1) / ((tLast - tFirst) / 1000) : null,
    tokens,
    finish,
  };
  running = null;
  setRunning(false);
  save();
  render();
}

function send() {
  if (running) return;
  const text = $("prompt").value;
  if (!text.trim() && !pending.length) return;
  const m = { role: "user", content: text };
  if (pending.length) m.images = pending.map((p) => p.url);
  state.messages.push(m);
  $("prompt").value = "";
  pending = [];
  showAttachError("");
  renderPending();
  save();
  generate();
}

function regenerate() {
  if (running) return;
  while (state.messages.length && state.messages[state.messages.length - 1].role === "assistant") state.messages.pop();
  generate();
}

function stop() {
  running?.controller.abort();
}

export function initChat() {
  load();
  applySettings(state.settings);
  for (const f of FIELDS)
    $(f).addEventListener("change", () => {
      state.settings = readSettings();
      $("schema-field").hidden = $("format").value !== "json_schema";
      save();
    });
  $("send").addEventListener("click", send);
  $("stop").addEventListener("click", stop);
  $("clear").addEventListener("click", () => {
    state.messages = [];
    save();
    render();
  });
  $("models-refresh").addEventListener("click", loadModels);
  $("attach").addEventListener("click", () => $("image-input").click());
  $("image-input").addEventListener("change", (e) => {
    attachFiles([...e.target.files]);
    e.target.value = ""; // the same file may be picked again
  });
  // Ctrl+V of an image (the clipboard's files) or a drop of files on the
  // message box attaches them; text pastes and drops as before
  const takeFiles = (transfer) => (e) => {
    const files = [...(transfer(e)?.files || [])];
    if (!files.length) return;
    e.preventDefault();
    attachFiles(files);
  };
  $("prompt").addEventListener("paste", takeFiles((e) => e.clipboardData));
  $("prompt").addEventListener("drop", takeFiles((e) => e.dataTransfer));
  $("prompt").addEventListener("dragover", (e) => {
    if (e.dataTransfer?.types.includes("Files")) e.preventDefault();
  });
  $("prompt").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      send();
    }
  });
  // copy buttons of code blocks (made by markdown.js)
  $("messages").addEventListener("click", (e) => {
    const b = e.target.closest(".copy-code");
    if (b) copyText(b.closest(".code").querySelector("code").textContent, b);
  });
  if (matchMedia("(max-width: 760px)").matches) $("settings").open = false;
  onKeyChange(loadModels);
  render();
  loadModels();
}
