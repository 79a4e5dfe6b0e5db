// api.js — how the console talks to its gateway: same-origin fetch(), the API
// key kept in sessionStorage (this tab only) and sent as
// "Authorization: Bearer KEY" — never in a URL, never in localStorage.

const KEY_ITEM = "pagoda.key";
const listeners = new Set();

export function getKey() {
  try {
    return sessionStorage.getItem(KEY_ITEM) || "";
  } catch {
    return "";
  }
}

export function setKey(key) {
  try {
    if (key) sessionStorage.setItem(KEY_ITEM, key);
    else sessionStorage.removeItem(KEY_ITEM);
  } catch {
    /* storage disabled: the key lives until the page reloads */
  }
  for (const fn of listeners) fn(key);
}

export function onKeyChange(fn) {
  listeners.add(fn);
}

export function headers(extra = {}) {
  const h = { ...extra };
  const key = getKey();
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

async function result(r) {
  let body = null;
  try {
    body = await r.json();
  } catch {
    /* not JSON (or empty): body stays null */
  }
  return { status: r.status, ok: r.ok, body };
}

// GET a JSON document. Never throws for HTTP errors: {status, ok, body};
// a network failure gives status 0.
export async function getJSON(path, { signal } = {}) {
  try {
    return await result(await fetch(path, { headers: headers(), cache: "no-store", signal }));
  } catch (e) {
    if (e.name === "AbortError") throw e;
    return { status: 0, ok: false, body: null, error: e };
  }
}

// POST (a JSON body when `obj` is given; the operations routes take none).
export async function post(path, obj, { signal } = {}) {
  const init = { method: "POST", headers: headers(), cache: "no-store", signal };
  if (obj !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(obj);
  }
  try {
    return await result(await fetch(path, init));
  } catch (e) {
    if (e.name === "AbortError") throw e;
    return { status: 0, ok: false, body: null, error: e };
  }
}

// One line for an error answer in the API's shape ({"error": {"message"}}).
export function errorText(res) {
  if (!res.status) return "the gateway is unreachable";
  const m = res.body?.error?.message;
  return m ? `${res.status}: ${m}` : `HTTP ${res.status}`;
}
