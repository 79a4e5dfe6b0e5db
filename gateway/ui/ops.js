// ops.js — the operations view: every model, its replicas and queues, from
// GET /health polled once a second while this view is shown (?poll=MS on the
// page URL changes the period, 200 ms at least). docs/OPERATIONS.md "Web
// console" says why polling and not a stream.
//
// A replica is one row: a registered worker (ready, draining) joined with
// the gateway's local process slot that runs it (health.local_workers: the
// supervisor's children), or a slot with no registered worker right now —
// starting, restarting (after a crash, until the new process registers),
// failed, stopped, idle. Tokens/s is the change of the worker's
// tokens_generated between its last two heartbeats.
//
// Admin buttons exist only when GET /admin/workers answers 200 with the key
// entered (or on a gateway started with --admin-open): otherwise they are
// not in the page at all.

import { errorText, getJSON, getKey, onKeyChange, post } from "./api.js";

const $ = (id) => document.getElementById(id);
const TIERS = ["high", "normal", "low"];
const POLL_MS = Math.max(200, Number(new URLSearchParams(location.search).get("poll")) || 1000);

let timer = 0;
let active = false;
let admin = false;
let adminWhy = "";
let last = null; // the last /health body
const rates = new Map(); // worker id → {t, n, tps}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function badge(state) {
  const b = el("span", `badge s-${state}`, state);
  return b;
}

function pct(x) {
  return x == null || !Number.isFinite(x) ? "–" : `${(100 * x).toFixed(x < 0.1 && x > 0 ? 1 : 0)}%`;
}

function ms(x) {
  if (x == null) return "–";
  return x < 1000 ? `${Math.round(x)} ms` : `${(x / 1000).toFixed(1)} s`;
}

// ---- the model of the page: replicas per model --------------------------------

function replicasOf(h, model) {
  const workers = (h.workers || []).filter((w) => w.model === model);
  const slots = (h.local_workers || []).filter((c) => c.model === model);
  const used = new Set();
  const rows = [];
  const ours = (pid) => workers.find((w) => !used.has(w) && w.host === h.host && pid && w.pid === pid);
  for (const c of slots) {
    // the process this slot ran before may still be registered until the gateway
    // drops it (heartbeat silence): it is this row's past, not another replica
    const stale = ours(c.prev_pid);
    if (stale) used.add(stale);
    const w = c.state === "running" ? ours(c.pid) : null;
    if (w) {
      used.add(w);
      rows.push({ worker: w, slot: c, state: w.state });
      continue;
    }
    const state =
      c.state === "running" ? (c.prev_pid && c.restarts ? "restarting" : "starting") : c.state === "backoff" ? "restarting" : c.state;
    rows.push({ worker: null, slot: c, state });
  }
  for (const w of workers) if (!used.has(w)) rows.push({ worker: w, slot: null, state: w.state });
  return rows;
}

// Generated tokens per second between the worker's last two heartbeats that
// carried its counter: the count changes only with a heartbeat, so the time
// is the heartbeats' (now − last_heartbeat_ms_ago), not the polls'.
function tokensPerS(w, hbMs) {
  const n = w.load?.tokens_generated;
  if (n == null) return null;
  const t = Date.now() - w.last_heartbeat_ms_ago;
  const r = rates.get(w.id);
  if (!r) {
    rates.set(w.id, { t, n, tps: null });
    return null;
  }
  if (t - r.t >= hbMs / 2) {
    // a newer heartbeat than the last one counted
    r.tps = n >= r.n ? ((n - r.n) * 1000) / (t - r.t) : null;
    r.t = t;
    r.n = n;
  }
  return r.tps;
}

// ---- rendering -----------------------------------------------------------------

function cell(tr, label, content, cls) {
  const td = el("td", cls);
  td.dataset.label = label;
  if (content instanceof Node) td.append(content);
  else td.textContent = content;
  tr.append(td);
  return td;
}

function actionButton(label, path, cls = "small") {
  const b = el("button", `${cls} admin-action`, label);
  b.type = "button";
  b.dataset.action = path;
  b.addEventListener("click", () => act(label, path, b));
  return b;
}

function kvBar(used, total) {
  const box = el("span", "kv");
  if (!total) {
    box.textContent = "–";
    return box;
  }
  const bar = el("progress");
  bar.max = total;
  bar.value = used;
  box.append(bar, el("span", "", ` ${pct(used / total)}`));
  box.title = `${used} of ${total} KV blocks`;
  return box;
}

function renderReplicas(h, model) {
  const rows = replicasOf(h, model);
  const table = el("table", "replicas");
  const head = el("tr");
  for (const t of ["Replica", "State", "Host", "Load", "KV", "Prefix hits", "Tokens/s", "Restarts"]) head.append(el("th", "", t));
  if (admin) head.append(el("th", "", ""));
  table.append(el("thead"));
  table.tHead.append(head);
  const body = el("tbody");
  for (const r of rows) {
    const w = r.worker;
    const c = r.slot;
    const tr = el("tr");
    tr.dataset.state = r.state;
    tr.dataset.replica = w ? w.id : `slot:${c.pid || c.prev_pid || "?"}`;
    const name = el("span", "rid", w ? w.id : c.pid ? `pid ${c.pid}` : c.prev_pid ? `no process (was pid ${c.prev_pid})` : "no process");
    name.title = w ? `${w.id} (pid ${w.pid})` : c.last_exit || "";
    cell(tr, "Replica", name);
    const st = el("span", "");
    st.append(badge(r.state));
    if (!w && c.state === "backoff" && c.next_start_ms != null) st.append(el("small", "", ` in ${ms(c.next_start_ms)}`));
    if (w && w.liveness < 3) st.append(el("small", "warn", ` silent ${ms(w.last_heartbeat_ms_ago)}`));
    if (!w && c.last_exit && r.state !== "idle") st.title = `last exit: ${c.last_exit}`;
    // an idle on-demand slot's standby process: the model loaded, waiting for a request
    if (!w && c.state === "idle" && c.standby_pid) st.append(el("small", "", ` standby pid ${c.standby_pid}`));
    cell(tr, "State", st);
    cell(tr, "Host", w ? `${w.host}` : h.host || "local");
    const l = w?.load;
    // the gateway's own count of requests on it (fresh), then what the worker said it
    // holds waiting in its last heartbeat
    cell(tr, "Load", w ? `${w.assigned}/${w.capacity}${l?.waiting ? ` +${l.waiting} waiting` : ""}` : "–");
    cell(tr, "KV", w ? kvBar(l?.kv_blocks_used ?? 0, l?.kv_blocks_total ?? w.kv_blocks) : "–");
    cell(tr, "Prefix hits", l?.prefix_cache_queries ? pct(l.prefix_cache_hits / l.prefix_cache_queries) : "–");
    const tps = w ? tokensPerS(w, h.heartbeat_ms || 1000) : null;
    cell(tr, "Tokens/s", tps == null ? "–" : tps.toFixed(1), "num");
    cell(tr, "Restarts", c ? String(c.restarts ?? 0) : "–", "num");
    if (admin) {
      const btns = el("span", "btns");
      if (w && w.state === "ready") {
        const id = encodeURIComponent(w.id);
        btns.append(actionButton("Drain", `/admin/workers/${id}/drain`), actionButton("Restart", `/admin/workers/${id}/restart`));
      }
      cell(tr, "Actions", btns, "actions");
    }
    body.append(tr);
  }
  if (!rows.length) {
    const tr = el("tr");
    const td = el("td", "empty", "no replica");
    td.colSpan = admin ? 9 : 8;
    tr.append(td);
    body.append(tr);
  }
  table.append(body);
  const wrap = el("div", "table-wrap");
  wrap.append(table);
  return wrap;
}

function renderQueues(m) {
  const box = el("div", "queues");
  if (!m.queue) {
    box.append(el("span", "", `queued ${m.queued}`));
    return box;
  }
  for (const t of TIERS) {
    const q = m.queue[t] || { queued: 0 };
    const s = el("span", `q q-${t}`);
    s.dataset.tier = t;
    s.append(el("b", "", t), ` ${q.queued} queued`);
    if (q.queued) s.append(el("small", "", `, oldest ${ms(q.oldest_wait_ms)}`));
    box.append(s);
  }
  return box;
}

function renderModel(h, name, m) {
  const card = el("section", "model");
  card.dataset.model = name;
  card.dataset.state = m.state;
  const head = el("div", "model-head");
  head.append(el("h2", "", name), badge(m.state));
  if (m.on_demand) head.append(el("span", "tag", "on demand"));
  if (admin) {
    const a = el("span", "actions");
    const enc = encodeURIComponent(name);
    if (m.on_demand && (m.state === "idle" || m.state === "unavailable")) a.append(actionButton("Start", `/admin/models/${enc}/start`));
    if (m.on_demand && (m.state === "ready" || m.state === "starting")) a.append(actionButton("Stop", `/admin/models/${enc}/stop`));
    if (m.local_workers) a.append(actionButton("Restart model", `/admin/models/${enc}/restart`));
    head.append(a);
  }
  card.append(head);
  const facts = el("div", "facts");
  facts.append(
    el("span", "", `${m.replicas} registered`),
    el("span", "", `${m.running} running`),
    el("span", "", `${m.free_slots} free slots`),
  );
  if (m.failed_reason) facts.append(el("span", "error", `failed: ${m.failed_reason}`));
  card.append(facts, renderQueues(m), renderReplicas(h, name));
  return card;
}

function render(h, err) {
  const sum = $("ops-summary");
  if (err) {
    sum.replaceChildren(badge("failed"), ` ${err}`);
    sum.dataset.ok = "0";
    return;
  }
  last = h;
  sum.dataset.ok = "1";
  const n = (h.workers || []).length;
  sum.replaceChildren(
    badge(h.status === "ok" ? "ready" : "unavailable"),
    ` ${n} worker${n === 1 ? "" : "s"} registered · heartbeat ${h.heartbeat_ms} ms · updated ${new Date().toLocaleTimeString()}`,
  );
  const models = Object.entries(h.models || {}).sort(([a], [b]) => a.localeCompare(b));
  const list = $("ops-models");
  list.replaceChildren(...models.map(([name, m]) => renderModel(h, name, m)));
  if (!models.length) list.append(el("p", "empty", "No model is configured or registered."));
  for (const id of rates.keys()) if (!(h.workers || []).some((w) => w.id === id)) rates.delete(id);
}

function note(text, cls = "note") {
  const p = $("ops-admin-note");
  p.className = cls;
  p.textContent = text;
}

async function act(label, path, b) {
  b.disabled = true;
  const res = await post(path);
  const what = decodeURIComponent(path.split("/")[3] || "");
  note(res.ok ? `${label} ${what}: ${res.body?.state ?? "done"}` : `${label} ${what}: ${errorText(res)}`, res.ok ? "note ok" : "note error");
  if (res.status === 401 || res.status === 403) await probeAdmin();
  poll(true);
}

// Are the operations routes ours? Decides whether buttons exist.
async function probeAdmin() {
  const res = await getJSON("/admin/workers");
  admin = res.ok;
  if (admin) adminWhy = getKey() ? "Admin key accepted: drain, restart, start and stop are enabled." : "This gateway serves /admin/* without a key (--admin-open).";
  else if (res.status === 403 && !getKey()) adminWhy = "Operations actions are closed on this gateway (no --keys file with an admin key, no --admin-open).";
  else if (res.status === 401 || res.status === 403) adminWhy = getKey() ? "This key is not an admin key: actions are hidden." : "Enter an admin key above to drain or restart workers.";
  else adminWhy = `Operations routes: ${errorText(res)}`;
  note(adminWhy);
  if (last) render(last);
}

// One /health round trip, then the next is scheduled. `force` polls even
// when paused (after an action). At most one request is in flight: a poll
// asked for meanwhile runs right after it.
let inflight = false;
let again = false;
async function poll(force = false) {
  if (inflight) {
    again = true;
    return;
  }
  clearTimeout(timer);
  timer = 0;
  if (force === true || !$("ops-pause").checked) {
    inflight = true;
    try {
      const res = await getJSON("/health");
      if (res.body && (res.ok || res.status === 503) && res.body.models) render(res.body);
      else render(null, res.status ? errorText(res) : "the gateway is unreachable");
    } finally {
      inflight = false;
    }
    if (again) {
      again = false;
      return poll(true);
    }
  }
  schedule();
}

function schedule() {
  clearTimeout(timer);
  timer = 0;
  if (active && !document.hidden) timer = setTimeout(poll, POLL_MS);
}

export function startOps() {
  if (active) return;
  active = true;
  probeAdmin();
  poll();
}

export function stopOps() {
  active = false;
  clearTimeout(timer);
  timer = 0;
}

export function initOps() {
  onKeyChange(() => active && probeAdmin());
  $("ops-pause").addEventListener("change", () => !$("ops-pause").checked && active && poll());
  document.addEventListener("visibilitychange", () => {
    if (active && !document.hidden && !timer) poll();
  });
}
