/* submit.h — the internal request (request_t, what every API surface
 * parses into) translated into the SUBMIT a worker decodes: the gateway's
 * twin of the worker's worker_req_from_submit (worker/worker.h). A new
 * SUBMIT field is set here on the gateway side and read there on the worker
 * side, and nowhere else.
 *
 * Runs on HTTP threads; touches no gateway state, so an API surface
 * (gateway/api_surface.h) never needs to know the wire format.
 */
#ifndef PAGODA_GATEWAY_SUBMIT_H
#define PAGODA_GATEWAY_SUBMIT_H

#include <stdint.h>

#include "gateway/request.h"
#include "gateway/prio_queue.h"
#include "proto/msg.h"

#define GATEWAY_COMPLETION_MAX_TOKENS 16  /* /v1/completions default max_tokens, as OpenAI */

/* Fills `s` (zeroed or proto_msg_init'ed, PROTO_SUBMIT) from `o` for request
 * `id` at `tier`:
 *   - chat: messages (role, content, tool_calls, tool_call_id), thinking
 *     switch, tools + tool_choice ("required" / "function:NAME") unless
 *     tool_choice is none (then the tools are not announced at all);
 *   - completion: prompt text or prompt ids; embeddings: one input per
 *     sequence (n_choices = inputs), dimensions; tokenize / detokenize ops;
 *   - sampling, logit_bias, logprobs, stop strings, grammar, n;
 *   - max_tokens not given → 0 (until the context is full) for chat,
 *     GATEWAY_COMPLETION_MAX_TOKENS (16) for completions;
 *   - a seed is always set: an unseeded request gets a random one here, so a
 *     request resumed on another replica continues the same random stream.
 * Every string and array in `s` is a heap copy owned by the SUBMIT (freed by
 * proto_msg_clear); `o` is not kept. */
void submit_from_request(const request_t *o, uint64_t id, prio_tier_t tier, proto_submit_t *s);

#endif
