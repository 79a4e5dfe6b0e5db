/* reasoning.h — splitting a model's reasoning off its answer (the gateway's
 * --reasoning-parser, as vLLM's reasoning parsers do).
 *
 * Qwen3 / DeepSeek-R1 style models write their reasoning first, between
 * <think> and </think>, then the answer. With the parser on (REASONING_QWEN3),
 * a chat answer whose text starts (after optional white space) with <think>
 * is split:
 *   reasoning  the bytes between <think> and the first </think>
 *              (message.reasoning_content / delta.reasoning_content)
 *   content    everything after </think> (message.content / delta.content),
 *              unchanged — the "\n\n" the models write after </think> is
 *              kept, as vLLM keeps it; tool calls are parsed from this part
 * An answer cut off before </think> (max_tokens) is all reasoning (content
 * empty), the same whether streamed or not. An answer that does not start
 * with <think> is all content, byte for byte as without the parser.
 *
 * Streaming: reasoning_stream_feed() decides, for everything generated so
 * far, how much is reasoning and where content starts; it holds back only a
 * possible partial <think> at the very start and a possible partial
 * </think> at the end of the reasoning.
 */
#ifndef PAGODA_GATEWAY_REASONING_H
#define PAGODA_GATEWAY_REASONING_H

#include <stdbool.h>
#include <stddef.h>

typedef enum {
    REASONING_NONE = 0,  /* the default: answers are untouched */
    REASONING_QWEN3,     /* <think>...</think> at the start */
} reasoning_parser_t;

/* The split of text[0..len) (a whole answer, or everything so far). */
typedef struct {
    size_t r_start, r_len; /* reasoning = text[r_start, r_start + r_len) */
    size_t c_start;        /* content = text[c_start, len); c_start == len: none */
    bool has_reasoning;    /* the text starts with <think> */
    bool closed;           /* </think> was found */
    bool undecided;        /* streaming only: the text so far is white space and a
                              proper prefix of <think>: nothing can be released yet */
} reasoning_split_t;

/* Splits a whole answer (final). */
void reasoning_split(const char *text, size_t len, reasoning_split_t *out);

/* Streaming: the split of the text so far, where r_len covers only the
 * reasoning that is certain (a possible partial </think> at the end is not
 * counted) and c_start is meaningful only when closed or !has_reasoning.
 * Monotonic as text grows: r_start fixed once decided, r_len never shrinks. */
void reasoning_stream_feed(const char *text, size_t len, reasoning_split_t *out);

/* Rewrites a response body built by oai_chat_completion_json /
 * oai_chat_chunk_json for choice `index`: adds "reasoning_content"
 * (r[0..r_len), sanitized UTF-8) to the message (or delta). For a chunk with
 * move_content, the delta's "content" is removed (the chunk carries only
 * reasoning); a message whose content is empty gets content null. Takes body, returns the new malloc'd body (body unchanged if
 * it is not one of ours). */
char *reasoning_patch(char *body, size_t index, const char *r, size_t r_len, bool is_chunk, bool move_content);

#endif
