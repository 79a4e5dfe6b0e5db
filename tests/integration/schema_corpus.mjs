// The JSON Schemas real clients write, compiled and enforced by pagoda (see
// schema_corpus.sh). Nothing here is a hand-written schema: for each
// everyday zod 4 type T, the schema of z.object({ v: T }) is made by
//   zod         z.toJSONSchema (draft 2020-12) and z.toJSONSchema(.., {target: "draft-7"})
//   ai-sdk      the AI SDK's zodSchema(..).jsonSchema and asSchema(..).jsonSchema
//   openai      the openai SDK's zodResponseFormat(..).json_schema.schema (strict form)
//   langchain   @langchain/core's toJsonSchema (what withStructuredOutput sends)
// and the distinct schemas are sent as response_format json_schema to a real
// gateway + worker on a random-weight model, several seeds each, at
// temperature 1. Every output must finish "stop", parse, and validate with
// ajv + ajv-formats against the schema sent (and, for the zod/ai-sdk/
// langchain forms, with zod's own safeParse of T). Schemas pagoda refuses
// must be in REFUSED (the documented list in docs/API.md) and be refused
// with a 400 naming the keyword's JSON pointer; a refusal not listed, or a
// listed one that compiles, fails the test.
//
// Prints TAP-like lines and a summary "# corpus: ..." with the counts.
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
const require = createRequire(new URL("../js/package.json", import.meta.url));
const { z } = require("zod");
const { zodSchema, asSchema } = require("ai");
const { zodResponseFormat } = require("openai/helpers/zod");
const { toJsonSchema } = require("@langchain/core/utils/json_schema");
const Ajv = require("ajv").default;
const Ajv2020 = require("ajv/dist/2020").default;
const addFormats = require("ajv-formats").default;

const URL_ = process.env.URL_RAND;
const MODEL = process.env.MODEL || "rand";
const SEEDS = Number(process.env.SEEDS || 4);
const MAX_TOKENS = Number(process.env.MAX_TOKENS || 256);
const PARALLEL = Number(process.env.PARALLEL || 24);

let failed = 0;
const ok = (c, m) => { console.log(`${c ? "ok" : "not ok"} - ${m}`); if (!c) failed++; };

// Everyday zod types. Each becomes z.object({ v: T }).
const Tree = z.object({ name: z.string().max(6), get kids() { return z.array(Tree).max(2); } });
const TYPES = {
  int: z.number().int(),
  int_range: z.number().int().min(1).max(100),
  int_negative: z.number().int().negative(),
  positive: z.number().positive(),
  nonnegative: z.number().nonnegative(),
  min_max: z.number().min(-5.5).max(20),
  gt_lt: z.number().gt(0.5).lt(10.25),
  multiple_of: z.number().int().multipleOf(5),
  multiple_of_cents: z.number().multipleOf(0.01),
  email: z.string().email(),
  uuid: z.string().uuid(),
  url: z.string().url(),
  datetime: z.iso.datetime(),
  date: z.iso.date(),
  time: z.iso.time(),
  duration: z.iso.duration(),
  ipv4: z.ipv4(),
  ipv6: z.ipv6(),
  hostname: z.hostname(),
  cuid: z.cuid(),
  e164: z.e164(),
  string_min_max: z.string().min(2).max(8),
  string_length: z.string().length(4),
  regex: z.string().regex(/^[A-Z]{2}-\d{3}$/),
  regex_max: z.string().max(8).regex(/^[a-z]+$/),
  regex_min_max: z.string().min(1).max(12).regex(/^[a-z]+(-[a-z]+)*$/),
  regex_min: z.string().min(3).regex(/^[A-Za-z0-9_]*$/),
  starts_ends: z.string().startsWith("a").endsWith("z"),
  enum: z.enum(["red", "green", "blue"]),
  literal: z.literal("fixed"),
  literal_number: z.literal(42),
  boolean: z.boolean(),
  null: z.null(),
  optional: z.string().max(5).optional(),
  nullable: z.number().int().nullable(),
  nullish: z.string().max(5).nullish(),
  default: z.boolean().default(true),
  describe: z.string().max(10).describe("a short name"),
  array_min_max: z.array(z.string().max(5)).min(1).max(3),
  nonempty: z.array(z.number().int()).nonempty().max(4),
  tuple: z.tuple([z.string().max(4), z.number().int(), z.boolean()]),
  tuple_rest: z.tuple([z.string().max(4)]).rest(z.number().int()),
  record: z.record(z.string(), z.number()),
  record_enum_keys: z.record(z.enum(["a", "b"]), z.boolean()),
  partial_record: z.partialRecord(z.enum(["a", "b"]), z.number().int()),
  union: z.union([z.string().max(5), z.number()]),
  union_objects: z.union([z.object({ a: z.string().max(5) }), z.object({ b: z.number() })]),
  discriminated_union: z.discriminatedUnion("kind", [
    z.object({ kind: z.literal("circle"), r: z.number().positive() }),
    z.object({ kind: z.literal("square"), side: z.number().int().positive() }),
  ]),
  intersection: z.intersection(z.object({ a: z.string().max(5) }), z.object({ b: z.number().int() })),
  intersection_loose: z.intersection(z.object({ a: z.string().max(5) }), z.looseObject({ b: z.number() })),
  intersection_union: z.intersection(z.union([z.object({ a: z.string().max(4) }), z.object({ b: z.boolean() })]),
    z.object({ c: z.number().int() })),
  nested: z.object({
    user: z.object({ name: z.string().max(10), email: z.string().email().optional() }),
    address: z.object({ city: z.string().max(10), zip: z.string().regex(/^\d{5}$/) }),
    tags: z.array(z.enum(["a", "b"])).max(2),
  }),
  strict_object: z.strictObject({ a: z.number().int() }),
  loose_object: z.looseObject({ a: z.number().int() }),
  catchall: z.object({ a: z.string().max(3) }).catchall(z.number()),
  recursive: Tree,
};

// Refused by pagoda as documented (docs/API.md): type → JSON pointer of the
// refused keyword. Two patterns (startsWith + endsWith: allOf of patterns)
// cannot be intersected.
const REFUSED = {
  starts_ends: "/properties/v/allOf",
};

function variants(name, T) {
  const obj = z.object({ v: T });
  const out = [];
  const add = (client, make) => {
    try { out.push({ client, schema: make() }); }
    catch (e) { out.push({ client, unwritable: String(e.message || e).slice(0, 120) }); }
  };
  add("zod", () => z.toJSONSchema(obj));
  add("zod-draft7", () => z.toJSONSchema(obj, { target: "draft-7" }));
  add("ai-sdk", () => zodSchema(obj).jsonSchema);
  add("ai-sdk-asSchema", () => asSchema(obj).jsonSchema);
  add("openai", () => zodResponseFormat(obj, "v").json_schema.schema);
  add("langchain", () => toJsonSchema(obj));
  return out.map((v) => ({ ...v, name, zodType: obj }));
}

async function resolveAll(list) {
  for (const v of list) if (v.schema && typeof v.schema.then === "function") v.schema = await v.schema;
  return list;
}

const ajvOpts = { strict: false, allErrors: true, logger: false };
const ajv7 = addFormats(new Ajv(ajvOpts));
const ajv2020 = addFormats(new Ajv2020(ajvOpts));
function validator(schema, draft2020) {
  const is2020 = draft2020 || (typeof schema.$schema === "string" && schema.$schema.includes("2020-12"));
  return (is2020 ? ajv2020 : ajv7).compile(schema);
}

async function post(body) {
  const r = await fetch(`${URL_}/v1/chat/completions`, {
    method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body),
    signal: AbortSignal.timeout(120000),
  });
  return { status: r.status, json: await r.json().catch(() => null) };
}

// a small pool: at most PARALLEL requests in flight
async function pool(jobs, n) {
  const res = new Array(jobs.length);
  let next = 0;
  await Promise.all(Array.from({ length: n }, async () => {
    while (next < jobs.length) { const i = next++; res[i] = await jobs[i](); }
  }));
  return res;
}

const all = [];
for (const [name, T] of Object.entries(TYPES)) all.push(...await resolveAll(variants(name, T)));
// distinct schemas: one entry per (type, schema text), listing the clients that write it
const distinct = new Map();
let unwritable = 0;
for (const v of all) {
  if (!v.schema) {
    unwritable++;
    console.log(`# ${v.name}: ${v.client} cannot write it (${v.unwritable})`);
    continue;
  }
  const key = v.name + "\n" + JSON.stringify(v.schema);
  if (distinct.has(key)) distinct.get(key).clients.push(v.client);
  else distinct.set(key, { ...v, clients: [v.client] });
}
// pydantic v2 models' schemas (schema_corpus_pydantic.py, when pydantic is
// installed): 2020-12 schemas, outputs checked by ajv and by pydantic itself
if (process.env.PYDANTIC_SCHEMAS) {
  const models = JSON.parse(readFileSync(process.env.PYDANTIC_SCHEMAS, "utf8"));
  for (const [name, schema] of Object.entries(models))
    distinct.set("pydantic:" + name, { name: "pydantic:" + name, model: name, schema, clients: ["pydantic"], draft2020: true });
}
const entries = [...distinct.values()];
console.log(`# ${Object.keys(TYPES).length} zod types, ${all.length} client schemas, ${entries.length} distinct`);

// every distinct schema × SEEDS seeds, in parallel; a schema pagoda refuses
// comes back 400 (for every seed) naming the refused keyword's pointer
const jobs = [];
const pydanticDocs = []; // outputs for pydantic schemas, validated by pydantic below
for (const e of entries) {
  let validate = null;
  try { validate = validator(e.schema, e.draft2020); } catch (err) { console.log(`# ajv cannot compile ${e.name}: ${err.message}`); }
  for (let seed = 1; seed <= SEEDS; seed++) {
    jobs.push(async () => {
      const r = await post({
        model: MODEL, messages: [{ role: "user", content: `Write ${e.name} as JSON.` }], temperature: 1, seed,
        max_tokens: MAX_TOKENS,
        response_format: { type: "json_schema", json_schema: { name: "v", schema: e.schema, strict: true } },
      });
      const c = r.json?.choices?.[0];
      if (r.status !== 200 || !c)
        return { e, seed, status: r.status, msg: r.json?.error?.message ?? JSON.stringify(r.json), ok: false };
      let doc;
      try { doc = JSON.parse(c.message.content); } catch { return { e, seed, status: 200, ok: false, why: `not JSON: ${c.message.content.slice(0, 200)}` }; }
      const valid = validate ? validate(doc) : false;
      // zod's own check of T (the openai strict form turns optional into nullable, so not for it)
      if (e.model) pydanticDocs.push({ name: e.model, content: c.message.content });
      const zr = !e.zodType || e.clients.every((k) => k === "openai") ? { success: true } : e.zodType.safeParse(doc);
      const zodOk = zr.success;
      return {
        e, seed, status: 200, ok: valid && zodOk && c.finish_reason === "stop",
        why: `finish ${c.finish_reason}, ajv ${valid ? "valid" : ajv7.errorsText(validate?.errors)}, zod ${zodOk ? "valid" :
          JSON.stringify(zr.error.issues).slice(0, 300)}: ` + JSON.stringify(c.message.content).slice(0, 300),
      };
    });
  }
}
const t0 = Date.now();
const results = await pool(jobs, PARALLEL);
const bySchema = new Map();
for (const r of results) {
  if (!bySchema.has(r.e)) bySchema.set(r.e, []);
  bySchema.get(r.e).push(r);
}
let n_compiled = 0, n_refused = 0, n_outputs = 0, n_valid = 0;
for (const [e, rs] of bySchema) {
  const label = `${e.name} [${e.clients.join(", ")}]`;
  const want = REFUSED[e.name];
  if (rs.every((r) => r.status === 400)) {
    const msg = rs[0].msg;
    if (want && msg.includes(want)) {
      n_refused++;
      ok(true, `${label}: refused as documented: ${msg.slice(0, 160)}`);
    } else {
      ok(false, `${label}: refused: ${msg.slice(0, 300)}`);
    }
    continue;
  }
  n_compiled++;
  if (want) ok(false, `${label}: compiled, but docs/API.md lists it as refused at ${want}`);
  const good = rs.filter((r) => r.ok).length;
  n_outputs += rs.length;
  n_valid += good;
  for (const r of rs)
    if (!r.ok) console.log(`# ${label} seed ${r.seed}: ${r.why ?? `HTTP ${r.status} ${r.msg}`}`);
  const also = e.model ? ", pydantic below" : e.clients.every((c) => c === "openai") ? "" : ", zod";
  ok(good === rs.length, `${label}: ${good}/${rs.length} outputs finish "stop" and validate (ajv + ajv-formats${also})`);
}
// pydantic's own validator on the outputs for its schemas
if (pydanticDocs.length) {
  const f = process.env.PYDANTIC_SCHEMAS + ".out.json";
  writeFileSync(f, JSON.stringify(pydanticDocs));
  const lines = execFileSync(process.env.PYTHON || "python3", [process.env.PYDANTIC_SCRIPT, "validate", f], { encoding: "utf8" })
    .trim().split("\n");
  const bad = lines.filter((l) => !/ ok$/.test(l));
  for (const l of bad) console.log(`# pydantic: ${l}`);
  ok(bad.length === 0 && lines.length === pydanticDocs.length,
    `pydantic's model_validate_json accepts ${lines.length - bad.length}/${pydanticDocs.length} outputs for its schemas`);
}

// The refused schemas as tools (AI SDK / LangChain send no "strict"): with a
// forced call, a non-strict tool is compiled relaxed — only the refused
// keyword is dropped, the rest (an object with exactly the required "v", a
// string) still holds; the worker logs the pointer (checked by the .sh). A
// strict tool with the same schema is refused with 400 naming the pointer.
for (const e of entries.filter((x) => REFUSED[x.name])) {
  const label = `${e.name} [${e.clients.join(", ")}] as a tool`;
  const tool = (strict) => [{ type: "function", function: { name: "put", parameters: e.schema, ...(strict ? { strict } : {}) } }];
  const strictR = await post({ model: MODEL, messages: [{ role: "user", content: "call put" }], max_tokens: 64,
    tools: tool(true), tool_choice: "required" });
  ok(strictR.status === 400 && (strictR.json?.error?.message ?? "").includes(REFUSED[e.name]),
    `${label}: strict → 400 naming ${REFUSED[e.name]} (${strictR.status}: ${(strictR.json?.error?.message ?? "").slice(0, 120)})`);
  let good = 0;
  const N = SEEDS;
  for (let seed = 1; seed <= N; seed++) {
    const r = await post({ model: MODEL, messages: [{ role: "user", content: "call put" }], max_tokens: MAX_TOKENS, seed,
      temperature: 1, tools: tool(false), tool_choice: { type: "function", function: { name: "put" } } });
    const call = r.json?.choices?.[0]?.message?.tool_calls?.[0];
    let args;
    try { args = JSON.parse(call.function.arguments); } catch { args = undefined; }
    const fine = r.status === 200 && call?.function?.name === "put" && args && typeof args.v === "string" &&
      Object.keys(args).length === 1;
    if (fine) good++;
    else console.log(`# ${label} seed ${seed}: ${r.status} ${JSON.stringify(r.json).slice(0, 300)}`);
  }
  ok(good === N, `${label}: non-strict, forced call → ${good}/${N} calls whose arguments hold what was not relaxed ({"v": string})`);
}

console.log(`# corpus: ${Object.keys(TYPES).length} zod types and ${entries.filter((e) => e.model).length} pydantic models, ` +
  `${entries.length} distinct client schemas: ` +
  `${n_compiled} compiled (${n_valid}/${n_outputs} outputs valid over ${SEEDS} seeds), ${n_refused} refused as documented, ` +
  `${unwritable} client/type pairs the client itself cannot write; ${jobs.length} requests took ${((Date.now() - t0) / 1000).toFixed(1)} s`);
process.exit(failed ? 1 : 0);
