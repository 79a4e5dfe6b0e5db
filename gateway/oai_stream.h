/* oai_stream.h — the OpenAI API surface (gateway/api_surface.h): request
 * bodies of /v1/chat/completions, /v1/completions, /v1/embeddings,
 * /tokenize and /detokenize parsed into the internal request (oai.c), and the
 * core's replies rendered back as OpenAI SSE streams or complete bodies.
 *
 * A stream, per choice (n choices interleave, each chunk names its index):
 *   chat:  {delta.role} first, then for every EVENT the parts answer.h
 *          splits it into, in order — reasoning as delta.reasoning_content,
 *          content as delta.content (the EVENT's logprobs ride on its first
 *          such chunk, or on an empty content chunk), tool calls as
 *          delta.tool_calls[{index, id, type, function{name, arguments}}]
 *          (id, type and name with the call's first chunk) —, then a chunk
 *          with its finish_reason ("tool_calls" when it ended in calls, not when
 *          a call was cut short: gateway/answer.h).
 *   after the last choice: the usage chunk (stream_options.include_usage),
 *   then "data: [DONE]". A failure ends the stream with an error event
 *   ({"error":{...}}) and [DONE]: every stream ends with [DONE].
 * Complete bodies: chat.completion / text_completion with n choices
 * (message.reasoning_content, message.tool_calls), embeddings lists,
 * vLLM's tokenize / detokenize shapes; failures as OpenAI error objects.
 */
#ifndef PAGODA_GATEWAY_OAI_STREAM_H
#define PAGODA_GATEWAY_OAI_STREAM_H

#include "gateway/api_surface.h"

extern const api_surface_t oai_surface;

#endif
