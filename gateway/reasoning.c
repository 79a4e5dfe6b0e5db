/* reasoning.c — reasoning split for --reasoning-parser (see reasoning.h). */
#include "gateway/reasoning.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"

static const char OPEN[] = "<think>";
static const char CLOSE[] = "</think>";
#define OPEN_LEN (sizeof OPEN - 1)
#define CLOSE_LEN (sizeof CLOSE - 1)

static bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

/* Longest suffix of s[0..n) that is a proper prefix of lit (k bytes). */
static size_t partial_suffix(const char *s, size_t n, const char *lit, size_t k)
{
    for (size_t m = k - 1 < n ? k - 1 : n; m > 0; m--)
        if (memcmp(s + n - m, lit, m) == 0)
            return m;
    return 0;
}

/* Common part: where <think> is, or why not. */
static void split(const char *text, size_t len, reasoning_split_t *o, bool final)
{
    *o = (reasoning_split_t){.c_start = 0};
    size_t i = 0;
    while (i < len && is_ws(text[i]))
        i++;
    size_t rest = len - i;
    if (rest < OPEN_LEN) {
        if (!final && memcmp(text + i, OPEN, rest) == 0) {
            o->undecided = true; /* white space and a proper prefix of <think> */
            o->c_start = len;
        }
        return; /* final: too short for <think>: all content */
    }
    if (memcmp(text + i, OPEN, OPEN_LEN) != 0)
        return;
    o->has_reasoning = true;
    o->r_start = i + OPEN_LEN;
    const char *e = memmem(text + o->r_start, len - o->r_start, CLOSE, CLOSE_LEN);
    if (e) {
        o->closed = true;
        o->r_len = (size_t)(e - text) - o->r_start;
        o->c_start = (size_t)(e - text) + CLOSE_LEN;
    } else {
        o->r_len = len - o->r_start;
        if (!final)
            o->r_len -= partial_suffix(text + o->r_start, o->r_len, CLOSE, CLOSE_LEN);
        o->c_start = len;
    }
}

void reasoning_split(const char *text, size_t len, reasoning_split_t *out)
{
    split(text, len, out, true);
}

void reasoning_stream_feed(const char *text, size_t len, reasoning_split_t *out)
{
    split(text, len, out, false);
}

char *reasoning_patch(char *body, size_t index, const char *r, size_t r_len, bool is_chunk, bool move_content)
{
    json_error_t je;
    json_t *root = json_loads(body, JSON_ALLOW_NUL, &je);
    json_t *choice = root ? json_array_get(json_object_get(root, "choices"), index) : NULL;
    json_t *msg = choice ? json_object_get(choice, is_chunk ? "delta" : "message") : NULL;
    if (!json_is_object(msg)) {
        json_decref(root);
        return body;
    }
    free(body);
    size_t n;
    char *clean = utf8_sanitize(r, r_len, &n); /* model text */
    json_object_set_new(msg, "reasoning_content", json_stringn(clean, n));
    free(clean);
    if (is_chunk && move_content)
        json_object_del(msg, "content");
    json_t *c = json_object_get(msg, "content");
    if (!is_chunk && json_is_string(c) && json_string_length(c) == 0)
        json_object_set_new(msg, "content", json_null()); /* only reasoning: content null, as vLLM */
    char *out = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return out;
}
