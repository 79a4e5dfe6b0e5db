// console_browser.mjs — the web console in a real browser: Debian's
// /usr/bin/chromium, headless, driven by playwright-core (no browser
// download), against the gateways console.sh started. Prints "ok - …" /
// "not ok - …"; screenshots go to $SHOTS.
//
// env: URL_A   no keys, model MODEL with 2 local replicas, PAGODA_TEST_STEP_SLEEP_MS
//              and PAGODA_TEST_LOAD_SLEEP_MS set on its workers
//      URL_B   keys file (KEY_USER, KEY_ADMIN), MODEL plus the on-demand model "lazy" and
//              "tools" (random weights, a tool-calling chat template, 4096 context)
//      URL_D   no keys, "vis" (a gemma3 text + mmproj pair: takes images) and MODEL (text only)
//      IMG_DIR ok.png, ok.webp, animated.gif (test_image --write-hostile)
//      SHOTS   screenshot folder
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { chromium } from "../js/node_modules/playwright-core/index.mjs";

const { URL_A, URL_B, URL_D, IMG_DIR, KEY_USER, KEY_ADMIN, SHOTS, MODEL } = process.env;
let failed = 0;
const ok = (cond, what) => {
  console.log(`${cond ? "ok" : "not ok"} - ${what}`);
  if (!cond) failed++;
  return cond;
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const health = async (url) => (await fetch(`${url}/health`)).json();
const metric = async (url, line) => {
  const text = await (await fetch(`${url}/metrics`)).text();
  const m = text.split("\n").find((l) => l.startsWith(line + " "));
  return m ? Number(m.slice(line.length + 1)) : 0;
};
// waits for fn() to be truthy (polled), up to ms; returns its last value
async function until(fn, ms, every = 100) {
  const end = Date.now() + ms;
  let v;
  while (!(v = await fn()) && Date.now() < end) await sleep(every);
  return v;
}
async function attempt(what, fn) {
  try {
    return await fn();
  } catch (e) {
    ok(false, `${what}: ${e.message.split("\n")[0]}`);
    return undefined;
  }
}

const profile = mkdtempSync(path.join(os.tmpdir(), "pagoda-chromium-"));
const ctx = await chromium.launchPersistentContext(profile, {
  executablePath: "/usr/bin/chromium",
  headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  viewport: { width: 1280, height: 800 },
});
const problems = []; // page errors and CSP violations, from every page
function watch(page) {
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("console", (m) => {
    if (m.type() === "error" && /Content Security Policy|Refused to/i.test(m.text())) problems.push(`CSP: ${m.text()}`);
  });
  return page;
}
const shot = async (page, name, full = false) => {
  const file = path.join(SHOTS, name);
  await page.screenshot({ path: file, fullPage: full });
  console.log(`# screenshot ${file}`);
};
const lastAnswer = (page) => page.locator("#messages .msg.assistant").last();

try {
  // ---- load time --------------------------------------------------------------------
  const page = watch(ctx.pages()[0] || (await ctx.newPage()));
  await page.goto(`${URL_A}/ui/`);
  await page.waitForSelector("body[data-ready='1']");
  const nav = () => page.evaluate(() => {
    const n = performance.getEntriesByType("navigation")[0];
    return { dcl: n.domContentLoadedEventEnd, load: n.loadEventEnd, n: performance.getEntriesByType("resource").length,
             bytes: n.transferSize };
  });
  await page.waitForFunction(() => performance.getEntriesByType("navigation")[0].loadEventEnd > 0);
  const cold = await nav();
  await page.reload();
  await page.waitForFunction(() => performance.getEntriesByType("navigation")[0].loadEventEnd > 0);
  const warm = await nav();
  console.log(`# page load (machine shared, not asserted): first ${cold.dcl.toFixed(0)} ms to DOMContentLoaded, ` +
              `${cold.load.toFixed(0)} ms to load (${cold.n} resources); reload ${warm.dcl.toFixed(0)} / ${warm.load.toFixed(0)} ms`);
  await page.waitForFunction((m) => [...document.querySelectorAll("#model option")].some((o) => o.value === m), MODEL);
  ok(true, `the model picker lists ${MODEL} (from /v1/models)`);
  await page.evaluate(() => localStorage.clear());

  // ---- a streamed answer appears token by token ------------------------------------
  await page.fill("#temperature", "0");
  await page.fill("#max_tokens", "12");
  await page.fill("#extra", '{"ignore_eos": true}');
  await page.evaluate(() => {
    window.__lens = [];
    new MutationObserver(() => {
      const all = document.querySelectorAll("#messages .msg.assistant .body");
      const b = all[all.length - 1];
      if (b && b.textContent.length !== window.__lens[window.__lens.length - 1]) window.__lens.push(b.textContent.length);
    }).observe(document.getElementById("messages"), { childList: true, subtree: true, characterData: true });
  });
  await page.fill("#prompt", "Once upon a time");
  await page.press("#prompt", "Enter");
  await attempt("a streamed answer", async () => {
    await lastAnswer(page).locator(".stats").waitFor({ timeout: 30000 });
    const lens = await page.evaluate(() => window.__lens);
    const grows = lens.every((n, i) => i === 0 || n > lens[i - 1]);
    const steps = lens.filter((n) => n > 0).length;
    // more than one step: the answer was not shown whole at the end (how many chunks the
    // browser renders separately depends on the machine's speed, so no more is asked)
    ok(grows && steps >= 2, `the answer grew in ${steps} steps as tokens arrived (lengths ${lens.join(",")})`);
    const stats = await lastAnswer(page).locator(".stats").textContent();
    ok(/^TTFT \d+ ms · [\d.]+ tok\/s · 12 tokens · length$/.test(stats), `TTFT, tokens/s, tokens, finish shown: "${stats}"`);
  });

  // ---- the Markdown renderer, as the served page has it -----------------------------
  await attempt("markdown", async () => {
    const cases = [
      ["# Title\ntext", 'h1("Title") p("text")'],
      ["- a\n- b\n  - c", 'ul(li("a") li("b" ul(li("c"))))'],
      ["1. x\n2. y", 'ol(li("x") li("y"))'],
      ["> q\n> r", 'blockquote(p("q" br "r"))'],
      ["a\nb\n\nc", 'p("a" br "b") p("c")'],
      ["`<i>` and ``a`b``", 'p(code("<i>") " and " code("a`b"))'],
      ["**b** _i_ *e* ~~d~~", 'p(strong("b") " " em("i") " " em("e") " " del("d"))'],
      ["```js\nx<y\n```", 'div(div(span("js") button("copy")) pre(code("x<y")))'],
      ["```\nunclosed", 'div(div(span("code") button("copy")) pre(code("unclosed")))'],
      ["see https://x.example/p.", 'p("see " a[https://x.example/p]("https://x.example/p") ".")'],
      ["[t](https://x.example)", 'p(a[https://x.example]("t"))'],
      ["[t](data:text/html,x)", 'p("t (data:text/html,x)")'],
      ["<b onclick=\"x()\">hi</b><script>y()</script>", 'p("<b onclick=\\"x()\\">hi</b><script>y()</script>")'],
      ["---", "hr"],
      ["snake_case_name", 'p("snake_case_name")'],
    ];
    const got = await page.evaluate(async (cases) => {
      const { renderMarkdown } = await import("/ui/markdown.js");
      const ser = (n) => n.nodeType === 3 ? JSON.stringify(n.data)
        : n.tagName.toLowerCase() + (n.tagName === "A" ? `[${n.getAttribute("href")}]` : "") +
          (n.childNodes.length ? `(${[...n.childNodes].map(ser).join(" ")})` : "");
      return cases.map(([src]) => [...renderMarkdown(src).childNodes].map(ser).join(" "));
    }, cases);
    const bad = cases.filter(([, want], i) => got[i] !== want).map(([src], i) => `${JSON.stringify(src)} → ${got[cases.findIndex((c) => c[0] === src)]}`);
    ok(bad.length === 0, `markdown.js renders ${cases.length} cases as DOM nodes${bad.length ? `; wrong: ${bad.join(" | ")}` : ""}`);
  });

  // ---- stop cancels it on the worker --------------------------------------------------
  const abortLine = `vllm:request_success_total{model_name="${MODEL}",finished_reason="abort"}`;
  const abort0 = await metric(URL_A, abortLine);
  await page.fill("#max_tokens", "400");
  await page.evaluate(() => (window.__lens = []));
  await page.fill("#prompt", "Tell me a long story");
  await page.click("#send");
  await attempt("stop", async () => {
    await page.waitForFunction(() => window.__lens.length >= 6, null, { timeout: 30000 });
    ok(await page.isVisible("#stop"), "while streaming the Stop button shows");
    await page.click("#stop");
    await lastAnswer(page).locator(".stats").waitFor({ timeout: 10000 });
    const stats = await lastAnswer(page).locator(".stats").textContent();
    ok(/stopped$/.test(stats), `the answer is marked stopped: "${stats}"`);
    const abort = await until(async () => (await metric(URL_A, abortLine)) > abort0 && (await metric(URL_A, abortLine)), 10000);
    ok(abort === abort0 + 1, `the worker ended the request as cancelled (abort count ${abort0} → ${abort || abort0})`);
    const idle = await until(async () => (await health(URL_A)).workers.every((w) => w.load?.running === 0), 5000);
    ok(idle, "no sequence runs on the workers after the stop");
    const len = (await lastAnswer(page).locator(".body").textContent()).length;
    await sleep(500);
    ok(len > 0 && (await lastAnswer(page).locator(".body").textContent()).length === len, `the partial answer stays (${len} chars) and grows no more`);
  });

  // ---- model text with HTML renders as text -------------------------------------------
  const HOSTILE = '<script>window.__xss=1</script> <img src=x onerror="window.__xss=2"> **ok** ' +
                  "[click](javascript:window.__xss=3)\n\n```html\n<b>x</b>\n```";
  const gbnf = (s) => `root ::= "${s.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n")}"`;
  await page.fill("#max_tokens", "300");
  await page.fill("#extra", JSON.stringify({ grammar: gbnf(HOSTILE) }));
  await page.fill("#prompt", "Say something");
  await page.click("#send");
  await attempt("hostile text", async () => {
    await lastAnswer(page).locator(".stats").waitFor({ timeout: 60000 });
    const r = await lastAnswer(page).locator(".body").evaluate((b) => ({
      text: b.textContent,
      elements: [...b.querySelectorAll("*")].map((e) => e.tagName.toLowerCase()),
      strong: b.querySelector("strong")?.textContent,
      code: b.querySelector("pre code")?.textContent,
      links: [...b.querySelectorAll("a")].map((a) => a.getAttribute("href")),
      xss: window.__xss,
    }));
    ok(r.text.includes("<script>window.__xss=1</script>") && r.text.includes('<img src=x onerror="window.__xss=2">'),
       "the model's <script> and <img onerror> show as text");
    ok(!r.elements.some((t) => ["script", "img", "iframe", "object", "embed", "b"].includes(t)),
       `no element from the model's markup reaches the DOM (elements: ${[...new Set(r.elements)].join(" ")})`);
    ok(r.xss === undefined, "nothing the model wrote ran");
    ok(r.strong === "ok" && r.code === "<b>x</b>", "Markdown still renders: **ok** as <strong>, the fence as a code block");
    ok(r.links.length === 0 && r.text.includes("click (javascript:window.__xss=3)"), "a javascript: link stays text");
    await shot(page, "chat-desktop.png");
  });

  // ---- regenerate, copy, the conversation survives a reload -------------------------
  await attempt("regenerate", async () => {
    const before = await page.locator("#messages .msg").count();
    const text = await lastAnswer(page).locator(".body").textContent();
    await lastAnswer(page).locator(".regenerate").click();
    await lastAnswer(page).locator(".stats").waitFor({ timeout: 60000 });
    ok((await page.locator("#messages .msg").count()) === before &&
       (await lastAnswer(page).locator(".body").textContent()) === text,
       "regenerate replaces the last answer (the grammar makes it the same text)");
  });
  await attempt("copy", async () => {
    await ctx.grantPermissions(["clipboard-read", "clipboard-write"], { origin: URL_A });
    await lastAnswer(page).locator(".copy-msg").click();
    const clip = await page.evaluate(() => navigator.clipboard.readText());
    ok(clip === HOSTILE, "copy puts the answer's Markdown source on the clipboard");
  });
  await attempt("reload", async () => {
    const n = await page.locator("#messages .msg").count();
    await page.reload();
    await page.waitForSelector("body[data-ready='1']");
    ok((await page.locator("#messages .msg").count()) === n && n >= 6 &&
       (await page.locator("#extra").inputValue()).includes("grammar"),
       `the conversation (${n} messages) and settings come back from localStorage after a reload`);
  });
  await page.setViewportSize({ width: 390, height: 844 });
  await page.reload();
  await page.waitForSelector("body[data-ready='1']");
  await shot(page, "chat-phone.png");
  await page.setViewportSize({ width: 1280, height: 800 });

  // ---- operations view: two replicas; kill -9 one --------------------------------------
  await page.goto(`${URL_A}/ui/?poll=250#ops`);
  const rows = (state) => page.locator(`section.model[data-model="${MODEL}"] tbody tr[data-state="${state}"]`);
  await attempt("ops view", async () => {
    await page.waitForFunction((m) => document.querySelectorAll(`section.model[data-model="${m}"] tbody tr[data-state="ready"]`).length === 2,
                               MODEL, { timeout: 20000 });
    ok(true, "the operations view shows two ready replicas");
    const cells = await rows("ready").first().locator("td").allTextContents();
    ok(cells.length === 8, `a replica row: ${cells.join(" | ")}`);
    await page.waitForFunction(() => document.getElementById("ops-admin-note").textContent.length > 0);
    ok((await page.locator(".admin-action").count()) === 0 &&
       /closed/.test(await page.locator("#ops-admin-note").textContent()),
       "no admin buttons on a gateway without --keys and --admin-open");
    const refused = await page.evaluate(async () => (await fetch("/admin/workers/1/drain", { method: "POST" })).status);
    ok(refused === 403, `and the page's own POST to /admin is refused (${refused})`);
    await shot(page, "ops-desktop.png");
  });
  await attempt("queues", async () => {
    // fill all 8 slots (2 replicas × --max-seqs 4) with long requests (every step sleeps
    // 30 ms: 300 tokens take 9 s or more), then 2 normal and 1 low (/v1/batch) must wait
    const ac = new AbortController();
    const body = (extra) => JSON.stringify({ model: MODEL, prompt: "Once upon a time", max_tokens: 300, ignore_eos: true, ...extra });
    const send = (path) => fetch(`${URL_A}${path}`, { method: "POST", headers: { "Content-Type": "application/json" },
                                                       body: body({}), signal: ac.signal }).then((r) => r.text()).catch(() => null);
    const long = Array.from({ length: 8 }, () => send("/v1/completions"));
    const full = await until(async () => (await health(URL_A)).models[MODEL].running === 8, 20000);
    ok(!!full, "8 long requests hold every slot");
    const waiting = [send("/v1/completions"), send("/v1/completions"), send("/v1/batch/completions")];
    const q = (t) => page.locator(`section.model[data-model="${MODEL}"] .q-${t}`).textContent();
    await page.waitForFunction((m) => {
      const t = (x) => document.querySelector(`section.model[data-model="${m}"] .q-${x}`)?.textContent || "";
      return /^normal 2 queued, oldest \d/.test(t("normal")) && /^low 1 queued, oldest \d/.test(t("low")) && /^high 0 queued$/.test(t("high"));
    }, MODEL, { timeout: 10000 });
    ok(true, `per-priority queues: "${await q("high")}", "${await q("normal")}", "${await q("low")}"`);
    const loads = await page.locator(`section.model[data-model="${MODEL}"] td[data-label="Load"]`).allTextContents();
    ok(loads.every((l) => l.startsWith("4/4")), `both replicas full: ${loads.join(", ")}`);
    // tokens/s and KV come from the workers' heartbeats (one a second): wait for two
    const sel = `section.model[data-model="${MODEL}"] td[data-label="Tokens/s"]`;
    const rated = await page.waitForFunction((s) => [...document.querySelectorAll(s)].every((td) => Number(td.textContent) > 0),
                                             sel, { timeout: 15000 }).then(() => true, () => false);
    const tps = await page.locator(sel).allTextContents();
    const kv = await page.locator(`section.model[data-model="${MODEL}"] td[data-label="KV"]`).allTextContents();
    ok(rated && kv.every((k) => /[1-9]\d*%/.test(k)), `tokens/s (${tps.join(", ")}) and KV use (${kv.map((k) => k.trim()).join(", ")}) while they run`);
    // every step sleeps 30 ms first, so a replica running 4 sequences makes at most
    // 4 tokens per 30 ms: 133 tok/s (+15% for the heartbeats' millisecond timing)
    ok(tps.every((x) => Number(x) <= (4 * 1000 / 30) * 1.15), `tokens/s stays under the hook's ceiling of 133/s per replica`);
    await shot(page, "ops-queues.png");
    ac.abort();
    await Promise.all([...long, ...waiting]);
    const drained = await until(async () => {
      const x = await health(URL_A);
      return x.models[MODEL].running === 0 && x.models[MODEL].queued === 0;
    }, 15000);
    ok(!!drained, "after the clients abort, nothing runs or waits");
  });
  await attempt("kill -9", async () => {
    const h = await health(URL_A);
    const [victim, other] = h.workers.filter((w) => w.model === MODEL);
    const restartsOf = (id) => page.locator(`section.model[data-model="${MODEL}"] tbody tr[data-replica="${id}"] td[data-label="Restarts"]`).textContent();
    const r0 = Number(await restartsOf(victim.id));
    const rOther = Number(await restartsOf(other.id));
    process.kill(victim.pid, "SIGKILL");
    await rows("restarting").first().waitFor({ timeout: 20000 });
    ok(true, `after kill -9 of pid ${victim.pid} its replica shows restarting`);
    ok((await rows("ready").count()) === 1, "the other replica stays ready meanwhile");
    await shot(page, "ops-restarting.png");
    await page.waitForFunction((m) => document.querySelectorAll(`section.model[data-model="${m}"] tbody tr[data-state="ready"]`).length === 2 &&
                                      !document.querySelector(`section.model[data-model="${m}"] tbody tr:not([data-state="ready"])`),
                               MODEL, { timeout: 30000 });
    // the gateway drops the dead process's registration after 3 heartbeats of silence
    // (the page already folded it into its slot's row)
    const h2 = await until(async () => {
      const x = await health(URL_A);
      return x.workers.length === 2 && !x.workers.some((w) => w.pid === victim.pid) && x;
    }, 15000);
    ok(!!h2, "then both are ready again, one of them a new process");
    const fresh = h2.workers.find((w) => w.id !== other.id);
    const r1 = Number(await restartsOf(fresh.id));
    ok(r1 === r0 + 1 && Number(await restartsOf(other.id)) === rOther,
       `the restarts column counts the crash on that replica only (${r0} → ${r1}; the other stays ${rOther})`);
  });
  await page.setViewportSize({ width: 390, height: 844 });
  await shot(page, "ops-phone.png", true);
  await page.setViewportSize({ width: 1280, height: 800 });

  // ---- admin buttons: gateway B has keys ---------------------------------------------
  const pb = watch(await ctx.newPage());
  await pb.goto(`${URL_B}/ui/#ops`);
  await pb.waitForSelector(`section.model[data-model="lazy"]`);
  const adminButtons = () => pb.locator(".admin-action").count();
  await attempt("keys", async () => {
    await pb.waitForFunction(() => document.getElementById("ops-admin-note").textContent.length > 0);
    ok((await adminButtons()) === 0 && /admin key/.test(await pb.locator("#ops-admin-note").textContent()),
       "keys file, no key entered: no admin buttons");
    await pb.fill("#key-input", KEY_USER);
    await pb.click("#key-save");
    await pb.waitForFunction(() => /not an admin key/.test(document.getElementById("ops-admin-note").textContent));
    ok((await adminButtons()) === 0, "a user (non-admin) key: still no admin buttons");
    await pb.fill("#key-input", KEY_ADMIN);
    await pb.click("#key-save");
    await pb.locator(`section.model[data-model="lazy"] .admin-action`, { hasText: /^Start$/ }).waitFor({ timeout: 10000 });
    ok((await adminButtons()) > 0, "the admin key: buttons appear");
    const where = await pb.evaluate(() => ({ s: sessionStorage.getItem("pagoda.key"), l: JSON.stringify(localStorage), u: location.href }));
    ok(where.s === KEY_ADMIN && !where.l.includes(KEY_ADMIN) && !where.u.includes(KEY_ADMIN),
       "the key is in sessionStorage only (not localStorage, not the URL)");
  });
  const card = (m) => pb.locator(`section.model[data-model="${m}"]`);
  await attempt("on-demand start", async () => {
    ok((await card("lazy").getAttribute("data-state")) === "idle", "the on-demand model is idle");
    await card("lazy").locator(".admin-action", { hasText: /^Start$/ }).click();
    await pb.waitForSelector(`section.model[data-model="lazy"][data-state="ready"]`, { timeout: 30000 });
    ok(true, "Start: the on-demand model becomes ready");
    await shot(pb, "ops-admin.png");
    await card("lazy").locator(".admin-action", { hasText: /^Stop$/ }).click();
    await pb.waitForSelector(`section.model[data-model="lazy"][data-state="idle"]`, { timeout: 30000 });
    ok(true, "Stop: it is idle again");
  });
  await attempt("drain and restart", async () => {
    await card(MODEL).locator("tbody tr[data-state='ready'] .admin-action", { hasText: /^Drain$/ }).click();
    await pb.waitForSelector(`section.model[data-model="${MODEL}"] tbody tr[data-state="stopped"]`, { timeout: 30000 });
    ok(true, "Drain: the replica drains and stays stopped");
    await card(MODEL).locator(".admin-action", { hasText: /^Restart model$/ }).click();
    await pb.waitForSelector(`section.model[data-model="${MODEL}"] tbody tr[data-state="ready"]`, { timeout: 30000 });
    ok(true, "Restart model: it is ready again");
  });
  await attempt("forget", async () => {
    await pb.click("#key-forget");
    await until(async () => (await adminButtons()) === 0, 5000);
    ok((await adminButtons()) === 0, "Forget key: the buttons are gone");
  });

  // ---- tools and JSON schema from the page (gateway B, model "tools") ------------------
  await attempt("tools", async () => {
    await pb.fill("#key-input", KEY_USER);
    await pb.click("#key-save");
    await pb.evaluate(() => (location.hash = "#chat"));
    await pb.waitForFunction(() => [...document.querySelectorAll("#model option")].some((o) => o.value === "tools"));
    await pb.selectOption("#model", "tools");
    await pb.fill("#temperature", "0");
    await pb.fill("#max_tokens", "200");
    await pb.fill("#tools", JSON.stringify([{ type: "function", function: { name: "get_weather", parameters: {
      type: "object", properties: { city: { type: "string", maxLength: 12 } }, required: ["city"] } } }]));
    await pb.selectOption("#tool_choice", "required");
    await pb.fill("#prompt", "What is the weather in Paris?");
    await pb.click("#send");
    await lastAnswer(pb).locator(".stats").waitFor({ timeout: 60000 });
    const calls = await lastAnswer(pb).locator(".toolcall").evaluateAll((els) =>
      els.map((e) => ({ name: e.querySelector(".toolcall-name").textContent, args: e.querySelector("pre code").textContent })));
    const argsOk = calls.every((c) => { try { return typeof JSON.parse(c.args).city === "string"; } catch { return false; } });
    ok(calls.length >= 1 && calls.every((c) => c.name === "tool call: get_weather") && argsOk &&
       /tool_calls$/.test(await lastAnswer(pb).locator(".stats").textContent()),
       `tool_choice required: ${calls.length} get_weather call(s) shown with JSON arguments`);
    await shot(pb, "chat-tools.png");
    for (let k = 0; k < calls.length; k++) {
      await pb.locator(".tool-result").first().fill('{"temp_c": 21}');
      await pb.locator(".toolcall button", { hasText: "Send result" }).first().click();
    }
    await pb.waitForFunction((n) => {
      const s = JSON.parse(localStorage.getItem("pagoda.chat.v1") || "{}");
      const m = s.messages || [];
      return m.filter((x) => x.role === "tool").length === n && m[m.length - 1].role === "assistant" && m[m.length - 1].stats;
    }, calls.length, { timeout: 60000 });
    ok((await lastAnswer(pb).locator(".error").count()) === 0,
       "the results go back as tool messages and the model answers again");
  });
  await attempt("json schema", async () => {
    await pb.fill("#tools", "");
    await pb.selectOption("#format", "json_schema");
    await pb.fill("#schema", JSON.stringify({ type: "object", properties: { name: { type: "string", maxLength: 10 },
      age: { type: "integer", minimum: 0, maximum: 99 } }, required: ["name", "age"], additionalProperties: false }));
    await pb.fill("#prompt", "A person, please");
    await pb.click("#send");
    await lastAnswer(pb).locator(".stats").waitFor({ timeout: 60000 });
    const text = await lastAnswer(pb).locator(".body code").textContent();
    let v = null;
    try { v = JSON.parse(text); } catch { /* v stays null */ }
    ok(v && typeof v.name === "string" && v.name.length <= 10 && Number.isInteger(v.age) && v.age >= 0 && v.age <= 99 &&
       Object.keys(v).length === 2, `json_schema: the answer is JSON of the schema, shown as a code block: ${JSON.stringify(v)}`);
  });

  // ---- images (gateway D) -------------------------------------------------------------
  const pd = watch(await ctx.newPage());
  const chatPosts = [];
  pd.on("request", (r) => {
    if (r.method() === "POST" && r.url().endsWith("/v1/chat/completions")) chatPosts.push(r.postData() || "");
  });
  const file = (name, mimeType) => ({ name, mimeType, buffer: readFileSync(path.join(IMG_DIR, name)) });
  const png = file("ok.png", "image/png");
  const gif = file("animated.gif", "image/gif");
  const N = 12;
  // the API's greedy answer for one image part and the console's prompt, the
  // request the console makes (image before text) sent directly
  const direct = async (f, text) => {
    const r = await fetch(`${URL_D}/v1/chat/completions`, {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ model: "vis", max_tokens: N, temperature: 0, top_p: 1, messages: [{ role: "user", content: [
        { type: "image_url", image_url: { url: `data:${f.mimeType};base64,${f.buffer.toString("base64")}` } },
        { type: "text", text }] }] }),
    });
    return (await r.json()).choices[0].message.content;
  };
  const drawn = (loc) => loc.evaluateAll((cs) => cs.filter((c) => c.dataset.drawn === "1" && c.width > 0).length);
  const PROMPT_IMG = "What is in this picture?";
  await attempt("image picker", async () => {
    await pd.goto(`${URL_D}/ui/`);
    await pd.waitForSelector("body[data-ready='1']");
    await pd.waitForFunction(() => [...document.querySelectorAll("#model option")].some((o) => o.value === "vis"));
    await pd.selectOption("#model", "vis");
    await pd.fill("#temperature", "0");
    await pd.fill("#max_tokens", String(N));
    await pd.setInputFiles("#image-input", png);
    await pd.locator("#attachments canvas.thumb[data-drawn='1']").waitFor({ timeout: 10000 });
    ok((await pd.locator("#attachments .attachment").count()) === 1 && !(await pd.locator("#attachments").isHidden()),
       "the file picker attaches ok.png: a thumbnail in the pending message");
    await shot(pd, "chat-image-pending.png");
    await pd.fill("#prompt", PROMPT_IMG);
    await pd.click("#send");
    await lastAnswer(pd).locator(".stats").waitFor({ timeout: 60000 });
    const got = await lastAnswer(pd).locator(".body").textContent();
    const want = await direct(png, PROMPT_IMG);
    const sent = JSON.parse(chatPosts[chatPosts.length - 1]);
    const parts = sent.messages[sent.messages.length - 1].content;
    ok(Array.isArray(parts) && parts[0].type === "image_url" &&
       parts[0].image_url.url === `data:image/png;base64,${png.buffer.toString("base64")}` &&
       parts[1].type === "text" && parts[1].text === PROMPT_IMG,
       "the request carries the PNG as an image_url data-URL part before the text");
    ok(got.trim() === want.trim() && (await lastAnswer(pd).locator(".error").count()) === 0,
       `the answer equals the API's greedy answer for the same image part (${JSON.stringify(got)})`);
    const user = pd.locator("#messages .msg.user").last();
    ok((await until(async () => (await drawn(user.locator("canvas.thumb"))) === 1, 10000)) &&
       (await user.locator(".body").textContent()) === PROMPT_IMG,
       "the conversation shows the image's thumbnail above the text");
    ok((await pd.locator("#attachments").isHidden()) && (await pd.locator("#attachments .attachment").count()) === 0,
       "sending empties the pending attachments");
    await shot(pd, "chat-image.png");
  });
  await attempt("image paste", async () => {
    await pd.click("#clear");
    const paste = (name, type, b64) => pd.evaluate(({ name, type, b64 }) => {
      const bin = atob(b64);
      const bytes = Uint8Array.from(bin, (ch) => ch.charCodeAt(0));
      const dt = new DataTransfer();
      dt.items.add(new File([bytes], name, { type }));
      const ev = new ClipboardEvent("paste", { clipboardData: dt, bubbles: true, cancelable: true });
      document.getElementById("prompt").dispatchEvent(ev);
      return ev.defaultPrevented;
    }, { name, type, b64 });
    ok(await paste("ok.png", "image/png", png.buffer.toString("base64")), "pasting an image: the paste is taken by the console");
    await pd.locator("#attachments canvas.thumb[data-drawn='1']").waitFor({ timeout: 10000 });
    await pd.locator("#attachments .remove").first().click();
    ok((await pd.locator("#attachments .attachment").count()) === 0 && (await pd.locator("#attachments").isHidden()),
       "the remove button takes the pasted image off");
    await paste("screenshot.gif", "image/gif", gif.buffer.toString("base64"));
    await until(async () => (await drawn(pd.locator("#attachments canvas.thumb"))) === 1, 10000);
    ok((await pd.locator("#attachments .attachment").count()) === 1, "pasting a GIF (a ClipboardEvent with a File): its thumbnail");
    await pd.fill("#prompt", PROMPT_IMG);
    await pd.press("#prompt", "Enter");
    await lastAnswer(pd).locator(".stats").waitFor({ timeout: 60000 });
    const got = await lastAnswer(pd).locator(".body").textContent();
    const [wantGif, wantPng] = [await direct(gif, PROMPT_IMG), await direct(png, PROMPT_IMG)];
    ok(got.trim() === wantGif.trim(), `the pasted image's answer equals the API's for that GIF (${JSON.stringify(got)})`);
    ok(wantGif !== wantPng, "and the two images give different answers (so the image, not only the text, decided them)");
  });
  await attempt("image too large", async () => {
    const before = chatPosts.length;
    // a file on disk (a buffer this large is too slow through the protocol); its
    // bytes are never read: the size alone refuses it
    const big = path.join(IMG_DIR, "huge.png");
    writeFileSync(big, Buffer.alloc(21 << 20, 7));
    await pd.setInputFiles("#image-input", big);
    await pd.waitForFunction(() => !document.getElementById("attach-error").hidden);
    const msg = await pd.locator("#attach-error").textContent();
    ok(/huge\.png is 21\.0 MiB: images may be at most 20\.0 MiB each/.test(msg) &&
       (await pd.locator("#attachments .attachment").count()) === 0,
       `a 21 MiB file: the console's message ("${msg}"), not attached`);
    const n = await pd.locator("#messages .msg").count();
    await pd.fill("#prompt", "");
    await pd.click("#send");
    ok(chatPosts.length === before && (await pd.locator("#messages .msg").count()) === n, "and nothing is sent");
    await shot(pd, "chat-image-too-large.png");
  });
  await attempt("image to a text model", async () => {
    await pd.click("#clear");
    await pd.selectOption("#model", MODEL);
    await pd.setInputFiles("#image-input", png);
    await pd.locator("#attachments canvas.thumb").waitFor({ timeout: 10000 });
    ok((await pd.locator("#attach-error").isHidden()), "a good file clears the error line");
    await pd.fill("#prompt", "What is this?");
    await pd.click("#send");
    await lastAnswer(pd).locator(".error").waitFor({ timeout: 30000 });
    const err = await lastAnswer(pd).locator(".error").textContent();
    ok(/^400: .*does not accept images/.test(err), `a text model: the gateway's 400 shown as the answer's error ("${err}")`);
    await pd.click("#clear");
  });

  ok(problems.length === 0, `no page errors and no CSP violations${problems.length ? `: ${problems.join(" / ")}` : ""}`);
} catch (e) {
  ok(false, `browser scenario aborted: ${e.stack}`);
} finally {
  await ctx.close();
  rmSync(profile, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
