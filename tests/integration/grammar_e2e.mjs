// Constrained decoding through the official openai SDK (see grammar.sh).
// Prints TAP-like lines; the summary line "# validated N/M" counts
// seeds × schemas × models whose output parsed, validated and ended "stop".
import { createRequire } from "node:module";
// the packages live in tests/js/node_modules (tests/js/ensure.sh installs them)
const require = createRequire(new URL("../js/package.json", import.meta.url));
const OpenAI = require("openai").default ?? require("openai");
const { zodResponseFormat } = require("openai/helpers/zod");
const { z } = require("zod");
const Ajv = require("ajv").default;

const SEEDS = Number(process.env.SEEDS || 12);
let failed = 0;
const ok = (c, m) => { console.log(`${c ? "ok" : "not ok"} - ${m}`); if (!c) failed++; };

const SCHEMAS = {
  person: {
    type: "object",
    properties: {
      name: { type: "string", maxLength: 12 },
      age: { type: "integer", minimum: 0, maximum: 130 },
      email: { type: ["string", "null"] },
      tags: { type: "array", items: { enum: ["a", "b", "c"] }, minItems: 1, maxItems: 3 },
    },
    required: ["name", "age", "tags"],
    additionalProperties: false,
  },
  nested: {
    $defs: {
      node: {
        type: "object",
        properties: {
          v: { type: "number", minimum: -5, maximum: 5 },
          ok: { type: "boolean" },
          next: { anyOf: [{ $ref: "#/$defs/node" }, { type: "null" }] },
        },
        required: ["v", "next"],
        additionalProperties: false,
      },
    },
    $ref: "#/$defs/node",
  },
  codes: {
    type: "object",
    properties: {
      code: { type: "string", pattern: "^[A-Z]{2}-\\d{3}$" },
      count: { type: "integer", exclusiveMinimum: 0, exclusiveMaximum: 1000 },
      list: { type: "array", items: { type: "string", minLength: 1, maxLength: 4 }, maxItems: 4 },
      map: { type: "object", additionalProperties: { type: "integer" } },
    },
    required: ["code", "count", "list"],
    additionalProperties: false,
  },
  constants: { anyOf: [{ const: "yes" }, { const: 42 }, { type: "null" }, { enum: [[1, 2], { k: "v" }] }] },
};

const ajv = new Ajv({ strict: false });
const validators = Object.fromEntries(Object.entries(SCHEMAS).map(([k, s]) => [k, ajv.compile(s)]));
const jsonObject = (x) => x !== null && typeof x === "object" && !Array.isArray(x);

async function runModel(label, url, model) {
  const client = new OpenAI({ baseURL: url + "/v1", apiKey: "none", maxRetries: 0, timeout: 120000 });
  let good = 0, total = 0;
  const jobs = [];
  for (const [name, schema] of Object.entries(SCHEMAS))
    for (let seed = 1; seed <= SEEDS; seed++)
      jobs.push({ name, schema, seed });
  for (let seed = 1; seed <= SEEDS; seed++) jobs.push({ name: "json_object", schema: null, seed });
  const results = await Promise.all(jobs.map(async (j) => {
    const rf = j.schema
      ? { type: "json_schema", json_schema: { name: j.name, schema: j.schema, strict: true } }
      : { type: "json_object" };
    try {
      const r = await client.chat.completions.create({
        model, messages: [{ role: "user", content: "Write JSON." }], temperature: 1, seed: j.seed,
        max_tokens: 300, response_format: rf,
      });
      const c = r.choices[0];
      let doc, valid = false;
      try { doc = JSON.parse(c.message.content); } catch { doc = undefined; }
      if (doc !== undefined) valid = j.schema ? validators[j.name](doc) : jsonObject(doc);
      return { j, ok: valid && c.finish_reason === "stop", why: `finish ${c.finish_reason}, ` +
        (doc === undefined ? "not JSON" : valid ? "valid" : ajv.errorsText(validators[j.name]?.errors)) +
        `: ${JSON.stringify(c.message.content).slice(0, 200)}` };
    } catch (e) {
      return { j, ok: false, why: String(e).slice(0, 200) };
    }
  }));
  for (const r of results) {
    total++;
    if (r.ok) good++;
    else console.log(`# ${label} ${r.j.name} seed ${r.j.seed}: ${r.why}`);
  }
  ok(good === total, `${label}: ${good}/${total} outputs (${Object.keys(SCHEMAS).length} schemas + json_object × ${SEEDS} seeds, T=1) parse, validate with ajv and finish "stop"`);
  return [good, total];
}

async function streamCheck(url, model) {
  const client = new OpenAI({ baseURL: url + "/v1", apiKey: "none", maxRetries: 0 });
  const stream = await client.chat.completions.create({
    model, messages: [{ role: "user", content: "JSON please" }], stream: true, seed: 5, max_tokens: 200,
    response_format: { type: "json_schema", json_schema: { name: "p", schema: SCHEMAS.person } },
  });
  let text = "", fin = null;
  for await (const ch of stream) {
    text += ch.choices[0]?.delta?.content ?? "";
    fin = ch.choices[0]?.finish_reason ?? fin;
  }
  let v = false;
  try { v = validators.person(JSON.parse(text)); } catch { v = false; }
  ok(v && fin === "stop", `streamed json_schema output validates and ends "stop" (${JSON.stringify(text).slice(0, 80)})`);
}

async function zodCheck(url, model) {
  const client = new OpenAI({ baseURL: url + "/v1", apiKey: "none", maxRetries: 0 });
  const Event = z.object({
    title: z.string().max(20),
    day: z.enum(["mon", "tue", "wed"]),
    guests: z.array(z.object({ name: z.string().max(10), vip: z.boolean() })).max(3),
    note: z.string().nullable(),
  });
  let parsedOk = 0;
  const N = 4;
  for (let seed = 1; seed <= N; seed++) {
    try {
      const r = await client.chat.completions.parse({
        model, messages: [{ role: "user", content: "An event." }], seed, temperature: 1, max_tokens: 300,
        response_format: zodResponseFormat(Event, "event"),
      });
      const p = r.choices[0].message.parsed;
      if (p && Event.safeParse(p).success && r.choices[0].finish_reason === "stop") parsedOk++;
      else console.log(`# zod seed ${seed}: ${JSON.stringify(r.choices[0].message.content).slice(0, 200)}`);
    } catch (e) {
      console.log(`# zod seed ${seed}: ${String(e).slice(0, 300)}`);
    }
  }
  ok(parsedOk === N, `openai SDK zodResponseFormat + chat.completions.parse: ${parsedOk}/${N} parsed by zod`);
}

async function hostile(url, model) {
  const post = async (body) => {
    const r = await fetch(url + "/v1/chat/completions", { method: "POST", headers: { "content-type": "application/json" },
      body: JSON.stringify({ model, messages: [{ role: "user", content: "x" }], max_tokens: 20, ...body }) });
    return [r.status, await r.json()];
  };
  const big = { type: "object", properties: {} };
  for (let i = 0; i < 20000; i++) big.properties["p" + i] = { type: "integer", minimum: -i, maximum: 99999 + i };
  const rows = [
    ["'not' refused, keyword named", { response_format: { type: "json_schema", json_schema: { name: "x", schema: { not: {} } } } }, /'not'/],
    ["unknown format refused at its path", { response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "object", properties: { e: { type: "string", format: "iri" } } } } } }, /properties\/e\/format/],
    ["unresolvable $ref", { response_format: { type: "json_schema", json_schema: { name: "x", schema: { $ref: "#/$defs/nope" } } } }, /\$ref/],
    ["schema that never finishes", { response_format: { type: "json_schema", json_schema: { name: "x", schema: { $defs: { a: { type: "array", items: { $ref: "#/$defs/a" }, minItems: 1 } }, $ref: "#/$defs/a" } } } }, /never finish/],
    ["missing json_schema", { response_format: { type: "json_schema" } }, /json_schema/],
    ["bad schema name", { response_format: { type: "json_schema", json_schema: { name: "a b", schema: {} } } }, /name/],
    ["unknown response_format type", { response_format: { type: "xml" } }, /xml/],
    ["grammar syntax error with line/column", { grammar: 'root ::= "a"\nx ::= [b-' }, /line 2, column 7/],
    ["grammar with undefined rule", { grammar: "root ::= thing" }, /undefined rule 'thing'/],
    ["grammar plus response_format", { grammar: 'root ::= "a"', response_format: { type: "json_object" } }, /cannot be combined/],
    ["grammar not a string", { grammar: 5 }, /must be a string/],
    ["huge schema refused (limit)", { response_format: { type: "json_schema", json_schema: { name: "big", schema: big } } }, /too large|longer than/],
  ];
  for (const [what, body, re] of rows) {
    const [st, js] = await post(body);
    ok(st === 400 && re.test(js?.error?.message ?? "") && js.error.type === "invalid_request_error",
      `400 for ${what} (${st}: ${String(js?.error?.message).slice(0, 120)})`);
  }
  {
    // a max_tokens below the shortest document is the caller's choice (as OpenAI): 200, cut short
    const [st, js] = await post({ max_tokens: 3, response_format: { type: "json_schema", json_schema: { name: "p", schema: SCHEMAS.person } } });
    const c = js?.choices?.[0];
    ok(st === 200 && c.finish_reason === "length" && js.usage.completion_tokens === 3 && c.message.content.startsWith("{"),
      `max_tokens too small for the schema: 200, cut short with length (${st}: ${JSON.stringify(c?.message?.content)})`);
  }
  const [st, js] = await post({ grammar: 'root ::= ("yes" | "no") "!"', temperature: 1, seed: 3 });
  ok(st === 200 && /^(yes|no)!$/.test(js.choices[0].message.content) && js.choices[0].finish_reason === "stop",
    `a GBNF grammar constrains the output (${JSON.stringify(js?.choices?.[0]?.message?.content)})`);
  const health = await fetch(url + "/health");
  ok(health.status === 200, "the server keeps serving after hostile requests");
}

const [g1, t1] = await runModel("random-weight model", process.env.URL_RAND, "rand");
const [g2, t2] = await runModel("stories260K", process.env.URL_REAL, "stories");
await streamCheck(process.env.URL_REAL, "stories");
await zodCheck(process.env.URL_RAND, "rand");
await zodCheck(process.env.URL_REAL, "stories");
await hostile(process.env.URL_REAL, "stories");
console.log(`# validated ${g1 + g2}/${t1 + t2} (seeds × schemas × models)`);
process.exit(failed ? 1 : 0);
