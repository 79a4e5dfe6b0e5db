// rerank_langchain.mjs — LangChain JS's reranker, `@langchain/cohere`'s
// CohereRerank (a document compressor for retrievers), unchanged, pointed at
// a real pagoda gateway + worker (started by rerank.sh). CohereRerank has no
// base-URL option of its own: it takes a `client`, the `cohere-ai` CohereClient
// it depends on (its own copy, 7.x, which posts to {environment}/v1/rerank),
// made here with `environment` = the gateway. Prints "ok - …" / "not ok - …".
//
// env: URL  the gateway; KEY  a bearer secret; MODEL  a reranker; QUERY, DOCS
// (a JSON array of strings); SCORES  rerank.sh's /v1/rerank answer for them
// (the scores already checked against the NumPy reference)
// tests/js/node_modules holds the packages (bash tests/js/ensure.sh installs them)
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { CohereRerank } from "../js/node_modules/@langchain/cohere/dist/index.js";
import { Document } from "../js/node_modules/@langchain/core/dist/documents/index.js";
import { ok, exitCode } from "./tap.mjs";

// the cohere-ai that @langchain/cohere itself resolves (its nested copy, or the hoisted one)
const requireFromLangchain = createRequire(new URL("../js/node_modules/@langchain/cohere/dist/", import.meta.url));
const { CohereClient } = requireFromLangchain("cohere-ai");

const { URL: BASE, KEY, MODEL, QUERY } = process.env;
const DOCS = JSON.parse(process.env.DOCS);
const want = JSON.parse(readFileSync(process.env.SCORES, "utf8")).results; // sorted, best first
const close = (a, b) => Math.abs(a - b) <= 1e-6;

const client = new CohereClient({ token: KEY, environment: BASE });
const rr = new CohereRerank({ client, model: MODEL, topN: DOCS.length });

// rerank(): [{index, relevanceScore}], best first
const r = await rr.rerank(DOCS, QUERY);
ok(r.length === DOCS.length, `rerank(): ${r.length} results`);
ok(r.every((x, i) => x.index === want[i].index), `rerank(): pagoda's order ${JSON.stringify(r.map((x) => x.index))}`);
ok(r.every((x, i) => close(x.relevanceScore, want[i].relevance_score)),
   "rerank(): relevanceScore = pagoda's scores (checked against the reference)");

// compressDocuments(): a retriever's Documents, cut to topN, each with its score in metadata
const top2 = new CohereRerank({ client, model: MODEL, topN: 2 });
const docs = DOCS.map((text, i) => new Document({ pageContent: text, metadata: { id: i } }));
const c = await top2.compressDocuments(docs, QUERY);
ok(c.length === 2 && c[0].metadata.id === want[0].index && c[1].metadata.id === want[1].index,
   `compressDocuments(topN 2): the two best Documents (${c.map((d) => d.metadata.id)})`);
ok(c.every((d, i) => d.pageContent === DOCS[want[i].index] && close(d.metadata.relevanceScore, want[i].relevance_score)),
   "compressDocuments: each Document's text and metadata.relevanceScore");

// an error comes back as the client's error, not a crash
let err = null;
try {
  await new CohereRerank({ client, model: "no-such-model", topN: 1 }).rerank(DOCS, QUERY);
} catch (e) {
  err = e;
}
ok(err !== null && err.statusCode === 404, `an unknown model → the client's 404 error (${err?.statusCode})`);
process.exit(exitCode());
