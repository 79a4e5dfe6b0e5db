/* rerank.h — the reranking API surfaces: a query scored against documents
 * by a cross-encoder (a model whose file has a rank head, worker/model/
 * rank_head.h), as retrieval pipelines (LangChain, LlamaIndex, Open WebUI)
 * call it.
 *
 *   surface          routes                                   shape
 *   rerank_surface   POST /v1/rerank, /rerank, /v1/reranking,  Cohere / Jina (llama-server's)
 *                    /reranking
 *   score_surface    POST /v1/score, /score                   vLLM's score API
 *
 * Both translate the body onto the one internal request (request_t, op
 * REQUEST_OP_RANK: `prompt` = the query, `inputs` = the documents as text),
 * which gateway/submit.c sends as a SUBMIT of op "rank": the worker scores
 * each (query, document) pair as one prefill-only sequence in its
 * continuous batch, like an embedding, and answers one EVENT per document
 * whose emb[0] is the relevance score. The surfaces render those:
 *
 *   /v1/rerank  {"model", "query": str, "documents": [str | {"text": str}],
 *                "top_n"?: int ≥ 1, "return_documents"?: bool}
 *            → {"id", "model", "object": "list",
 *               "usage": {"prompt_tokens", "total_tokens"},
 *               "results": [{"index", "relevance_score", "document"?: {"text"}}]}
 *               sorted by relevance_score, highest first (ties: lower index
 *               first), cut to top_n; "document" only with return_documents.
 *   /v1/score   {"model", "text_1": str | [str], "text_2": str | [str]}
 *            → {"id", "object": "list", "created", "model",
 *               "data": [{"index", "object": "score", "score"}],
 *               "usage": {"prompt_tokens", "total_tokens", "completion_tokens": 0}}
 *               in text_2's order. text_1 is one query (a string or a list of
 *               one), scored against every text_2; N-to-N pairs are refused.
 *
 * Refusals (400, OpenAI error shape): a missing or non-string query, no
 * documents, more than RERANK_MAX_DOCUMENTS, a document that is not a
 * string or {"text": string}, texts over OAI_MAX_TEXT_BYTES in all, a bad
 * top_n; from the worker: a model without a rank head, a pair longer than
 * the context (context_length_exceeded). Streaming is not offered.
 */
#ifndef PAGODA_GATEWAY_RERANK_H
#define PAGODA_GATEWAY_RERANK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gateway/api_surface.h"
#include "gateway/oai.h"

#define RERANK_MAX_DOCUMENTS OAI_MAX_EMBED_INPUTS /* documents per request (= PROTO_MAX_CHOICES) */

/* What a rerank body asks beyond the internal request. */
typedef struct rerank_opts {
    int64_t top_n;               /* results returned, 1..n documents (default: all) */
    bool return_documents;       /* [false] each result carries {"text"} */
} rerank_opts_t;

/* body[0..len) (hostile, not NUL-terminated) → *o (op REQUEST_OP_RANK, kind
 * completion; free with request_free) and *opts. score selects the
 * /v1/score shape (text_1 / text_2), else the rerank shape. Returns 0, or
 * -1 with a 400 in *e (o then holds nothing to free). */
int rerank_parse(const uint8_t *body, size_t len, bool score, request_t *o, rerank_opts_t *opts,
                 oai_error_t *e);

extern const api_surface_t rerank_surface;
extern const api_surface_t score_surface;

#endif
