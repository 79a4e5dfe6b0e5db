// app.js — the console's entry module: tabs (#chat, #ops), the API key box.
import { getKey, setKey } from "./api.js";
import { initChat } from "./chat.js";
import { initOps, startOps, stopOps } from "./ops.js";

const $ = (id) => document.getElementById(id);

function showKeyState() {
  const has = !!getKey();
  $("key-input").value = "";
  $("key-input").placeholder = has ? "key set for this tab" : "API key";
  $("key-forget").hidden = !has;
}

function route() {
  const ops = location.hash === "#ops";
  $("view-chat").hidden = ops;
  $("view-ops").hidden = !ops;
  $("tab-chat").classList.toggle("active", !ops);
  $("tab-ops").classList.toggle("active", ops);
  if (ops) startOps();
  else stopOps();
}

$("key-save").addEventListener("click", () => {
  const k = $("key-input").value.trim();
  if (!k) return;
  setKey(k);
  showKeyState();
});
$("key-input").addEventListener("keydown", (e) => {
  if (e.key === "Enter") $("key-save").click();
});
$("key-forget").addEventListener("click", () => {
  setKey("");
  showKeyState();
});

showKeyState();
initChat();
initOps();
window.addEventListener("hashchange", route);
route();
document.body.dataset.ready = "1";
