// markdown.js — a small Markdown subset rendered to DOM nodes.
//
// Model output is never parsed as HTML: every piece of text goes into the
// page through document.createTextNode / textContent, and the only elements
// made are the ones below. So "<script>" or "<img onerror=...>" in an answer
// shows as those characters. Links keep only http:, https: and mailto: URLs.
//
// Blocks: ``` / ~~~ fenced code (an unclosed fence, as while streaming, runs
// to the end), # headings, > quotes, - * + and 1. lists (nested by indent),
// --- rules, paragraphs (a single newline is a line break, as chat answers
// mean it). Inline: `code`, **strong**, __strong__, *em*, _em_, ~~del~~,
// [text](url), bare http(s) URLs.

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^\s`]*)[^`]*$/;
const HEADING = /^ {0,3}(#{1,6})(?:\s+(.*?))?\s*#*\s*$/;
const RULE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
const QUOTE = /^ {0,3}> ?(.*)$/;
const ITEM = /^( {0,12})([-*+]|\d{1,9}[.)])(?:\s+(.*)|$)/;
const SAFE_URL = /^(https?:\/\/|mailto:)/i;

function el(tag, cls) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  return e;
}

// A fenced code block: a header with the language and a copy button (the
// console's click handler copies the <code> text), then <pre><code>.
export function codeBlock(text, lang) {
  const box = el("div", "code");
  const head = el("div", "code-head");
  const name = el("span", "code-lang");
  name.textContent = lang || "code";
  const copy = el("button", "copy-code ghost");
  copy.type = "button";
  copy.textContent = "copy";
  head.append(name, copy);
  const pre = el("pre");
  const code = el("code");
  code.textContent = text;
  pre.append(code);
  box.append(head, pre);
  return box;
}

function isBlockStart(line) {
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) || ITEM.test(line);
}

function renderBlocks(lines, parent) {
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if (/^\s*$/.test(line)) {
      i++;
    } else if ((m = FENCE.exec(line))) {
      const mark = m[1];
      const close = new RegExp(`^ {0,3}${mark[0] === "`" ? "`" : "~"}{${mark.length},}\\s*$`);
      const body = [];
      for (i++; i < lines.length && !close.test(lines[i]); i++) body.push(lines[i]);
      i++; // the closing fence (or past the end)
      parent.append(codeBlock(body.join("\n"), m[2]));
    } else if ((m = HEADING.exec(line))) {
      const h = el(`h${m[1].length}`);
      inline(m[2] || "", h);
      parent.append(h);
      i++;
    } else if (RULE.test(line)) {
      parent.append(el("hr"));
      i++;
    } else if (QUOTE.test(line)) {
      const body = [];
      while (i < lines.length && (m = QUOTE.exec(lines[i]))) {
        body.push(m[1]);
        i++;
      }
      const q = el("blockquote");
      renderBlocks(body, q);
      parent.append(q);
    } else if ((m = ITEM.exec(line))) {
      i = renderList(lines, i, parent);
    } else {
      const p = el("p");
      const body = [line];
      for (i++; i < lines.length && !/^\s*$/.test(lines[i]) && !isBlockStart(lines[i]); i++) body.push(lines[i]);
      body.forEach((l, k) => {
        if (k) p.append(el("br"));
        inline(l.trim(), p);
      });
      parent.append(p);
    }
  }
}

// A list starting at lines[i]; returns the index after it. Items of the same
// kind (bullet or number) at the first item's indent make up the list; lines
// indented deeper belong to the current item (nested lists, continuations).
function renderList(lines, i, parent) {
  const first = ITEM.exec(lines[i]);
  const indent = first[1].length;
  const ordered = /\d/.test(first[2]);
  const list = el(ordered ? "ol" : "ul");
  if (ordered && parseInt(first[2], 10) !== 1) list.start = parseInt(first[2], 10);
  let item = null;
  while (i < lines.length) {
    const line = lines[i];
    const m = ITEM.exec(line);
    if (m && m[1].length === indent && /\d/.test(m[2]) === ordered) {
      item = { body: [m[3] || ""] };
      list.append((item.li = el("li")));
      item.pad = m[1].length + m[2].length + 1;
      (list.items ||= []).push(item);
      i++;
    } else if (/^\s*$/.test(line)) {
      // a blank line ends the list unless the next line continues it
      const next = lines[i + 1];
      if (next === undefined || !(ITEM.test(next) || /^\s+\S/.test(next))) break;
      item.body.push("");
      i++;
    } else if (/^\s/.test(line) && line.search(/\S/) > indent) {
      item.body.push(line.slice(Math.min(item.pad, line.search(/\S/))));
      i++;
    } else if (!isBlockStart(line) && item.body[item.body.length - 1] !== "") {
      item.body.push(line); // lazy continuation of the item's paragraph
      i++;
    } else {
      break;
    }
  }
  for (const it of list.items || []) {
    renderBlocks(it.body, it.li);
    // a tight item (no blank line in it) shows its text without paragraphs
    if (!it.body.includes(""))
      for (const p of [...it.li.children]) if (p.tagName === "P") p.replaceWith(...p.childNodes);
  }
  delete list.items;
  parent.append(list);
  return i;
}

const INLINE = new RegExp(
  [
    "(`+)([^`]|[^`][\\s\\S]*?[^`])\\1(?!`)", // 1,2 code
    "\\*\\*(?=\\S)([\\s\\S]*?\\S)\\*\\*", // 3 strong
    "(?<![\\w_])__(?=\\S)([\\s\\S]*?\\S)__(?![\\w_])", // 4 strong
    "\\*(?=[^\\s*])([\\s\\S]*?[^\\s*])\\*", // 5 em
    "(?<![\\w_])_(?=[^\\s_])([\\s\\S]*?[^\\s_])_(?![\\w_])", // 6 em
    "~~(?=\\S)([\\s\\S]*?\\S)~~", // 7 del
    "\\[([^\\]\\n]+)\\]\\(\\s*([^\\s()]+)\\s*\\)", // 8,9 link
    "(https?:\\/\\/[^\\s<>()\"']*[^\\s<>()\"'.,;:!?])", // 10 bare URL
  ].join("|"),
  "g",
);

function link(url, label, parent) {
  if (!SAFE_URL.test(url)) {
    parent.append(document.createTextNode(label === url ? url : `${label} (${url})`));
    return;
  }
  const a = el("a");
  a.href = url;
  a.rel = "noopener noreferrer nofollow";
  a.target = "_blank";
  if (label === url) a.textContent = label;
  else inline(label, a);
  parent.append(a);
}

// Inline spans of `text` appended to `parent` as nodes.
export function inline(text, parent) {
  const re = new RegExp(INLINE); // own lastIndex: spans nest through recursion
  let last = 0;
  for (let m; (m = re.exec(text)); ) {
    if (m.index > last) parent.append(document.createTextNode(text.slice(last, m.index)));
    last = re.lastIndex;
    const wrap = (tag, inner) => {
      const e = el(tag);
      inline(inner, e);
      parent.append(e);
    };
    if (m[1] !== undefined) {
      const c = el("code");
      c.textContent = m[2].length > 2 && m[2][0] === " " && m[2].endsWith(" ") ? m[2].slice(1, -1) : m[2];
      parent.append(c);
    } else if (m[3] !== undefined) wrap("strong", m[3]);
    else if (m[4] !== undefined) wrap("strong", m[4]);
    else if (m[5] !== undefined) wrap("em", m[5]);
    else if (m[6] !== undefined) wrap("em", m[6]);
    else if (m[7] !== undefined) wrap("del", m[7]);
    else if (m[8] !== undefined) link(m[9], m[8], parent);
    else link(m[10], m[10], parent);
  }
  if (last < text.length) parent.append(document.createTextNode(text.slice(last)));
}

// The whole of `src` as a DocumentFragment.
export function renderMarkdown(src) {
  const frag = document.createDocumentFragment();
  renderBlocks(String(src).replace(/\r\n?/g, "\n").split("\n"), frag);
  return frag;
}
