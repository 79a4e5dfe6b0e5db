// rerank_sdk.mjs — the official `cohere-ai` npm SDK's rerank (its v1 client,
// POST {base}/v1/rerank) pointed at a real pagoda gateway + worker (started
// by rerank.sh). Prints "ok - …" / "not ok - …".
//
// env: URL  the gateway; KEY  a bearer secret; MODEL  a reranker; QUERY, DOCS
// (a JSON array of strings); SCORES  rerank.sh's /v1/rerank answer for them
// (the scores already checked against the NumPy reference)
// tests/js/node_modules holds the SDK (bash tests/js/ensure.sh installs it)
import { readFileSync } from "node:fs";
import { CohereClient, CohereError } from "../js/node_modules/cohere-ai/index.js";
import { ok, exitCode } from "./tap.mjs";

const { URL, KEY, MODEL, QUERY } = process.env;
const DOCS = JSON.parse(process.env.DOCS);
const want = new Map(JSON.parse(readFileSync(process.env.SCORES, "utf8")).results.map((r) => [r.index, r.relevance_score]));
const client = new CohereClient({ token: KEY, environment: URL });
const close = (a, b) => Math.abs(a - b) <= 1e-6;

const r = await client.rerank({ model: MODEL, query: QUERY, documents: DOCS });
ok(Array.isArray(r.results) && r.results.length === DOCS.length, `rerank: ${r.results?.length} results`);
ok(r.results.every((x) => close(x.relevanceScore, want.get(x.index))),
   "relevanceScore = the scores checked against the reference");
ok(r.results.every((x, i, a) => i === 0 || a[i - 1].relevanceScore >= x.relevanceScore), "sorted, highest first");

const t = await client.rerank({ model: MODEL, query: QUERY, documents: DOCS.map((text) => ({ text })), topN: 2,
                                returnDocuments: true });
ok(t.results.length === 2 && t.results[0].index === r.results[0].index && t.results[1].index === r.results[1].index,
   "topN 2: the two best");
ok(t.results.every((x) => x.document?.text === DOCS[x.index]), "returnDocuments: each result's document.text");

let err = null;
try {
  await client.rerank({ model: MODEL, query: QUERY, documents: [] });
} catch (e) {
  err = e;
}
ok(err instanceof CohereError && err.statusCode === 400 && /documents/.test(JSON.stringify(err.body)),
   `no documents → the SDK's 400 error naming 'documents' (${err?.statusCode})`);
const again = await client.rerank({ model: MODEL, query: QUERY, documents: [DOCS[0]] });
ok(again.results.length === 1 && close(again.results[0].relevanceScore, want.get(0)), "still serving after the error");
process.exit(exitCode());
