/* bench_stream.c — interpretation of one streamed OpenAI-style response
 * (see bench_stream.h for what is recorded and why). */
#include "tests/bench/bench_stream.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "common/xalloc.h"

enum {
    MAX_EVENT_BYTES = 1 << 20, /* one SSE event; a token chunk is ~200 bytes */
    MAX_ERR_BODY = 4096,       /* bytes of a non-2xx body kept for the message */
    MAX_MSG = 200,             /* bytes of an error message kept */
};

bench_stream_t *bench_stream_new(int64_t t_start_us)
{
    bench_stream_t *s = xcalloc(1, sizeof *s);
    sse_reader_init(&s->sse, MAX_EVENT_BYTES);
    s->t_start_us = t_start_us;
    s->prompt_tokens = -1;
    s->completion_tokens = -1;
    s->cached_tokens = -1;
    return s;
}

void bench_stream_free(bench_stream_t **sp)
{
    bench_stream_t *s = *sp;
    if (!s)
        return;
    sse_reader_fini(&s->sse);
    free(s->itl_us);
    free(s->error);
    free(s->err_body);
    free(s);
    *sp = NULL;
}

void bench_stream_set_status(bench_stream_t *s, long status)
{
    s->http_status = status;
}

static bool status_ok(long status)
{
    return status >= 200 && status < 300;
}

/* Keeps the first error only: "<prefix><msg>" with msg cut to MAX_MSG bytes
 * and control characters replaced, so one line prints cleanly. */
static void set_error(bench_stream_t *s, const char *prefix, const char *msg, size_t msg_len)
{
    if (s->error)
        return;
    if (msg_len > MAX_MSG)
        msg_len = MAX_MSG;
    size_t pl = strlen(prefix);
    char *e = xmalloc(pl + msg_len + 1);
    memcpy(e, prefix, pl);
    for (size_t i = 0; i < msg_len; i++) {
        unsigned char c = (unsigned char)msg[i];
        e[pl + i] = (c < 0x20 || c == 0x7f) ? ' ' : (char)c;
    }
    e[pl + msg_len] = '\0';
    s->error = e;
}

static void set_error_str(bench_stream_t *s, const char *prefix, const char *msg)
{
    set_error(s, prefix, msg, strlen(msg));
}

/* Message of an OpenAI error value: {"message": "..."} or a bare string. */
static const char *error_message(json_t *err)
{
    if (json_is_string(err))
        return json_string_value(err);
    if (json_is_object(err)) {
        json_t *m = json_object_get(err, "message");
        if (json_is_string(m))
            return json_string_value(m);
    }
    return NULL;
}

static void note_content(bench_stream_t *s, int64_t now_us)
{
    if (s->n_content == 0) {
        s->t_first_us = now_us;
    } else {
        if (s->n_itl == s->cap_itl) {
            s->cap_itl = s->cap_itl ? 2 * s->cap_itl : 64;
            s->itl_us = xrealloc(s->itl_us, s->cap_itl * sizeof *s->itl_us);
        }
        s->itl_us[s->n_itl++] = now_us - s->t_last_us;
    }
    s->t_last_us = now_us;
    s->n_content++;
}

/* Whether one element of "choices" carries generated text. */
static bool choice_has_content(json_t *choice)
{
    if (!json_is_object(choice))
        return false;
    json_t *text = json_object_get(choice, "text"); /* /v1/completions */
    if (json_is_string(text) && json_string_length(text) > 0)
        return true;
    json_t *delta = json_object_get(choice, "delta"); /* /v1/chat/completions */
    if (json_is_object(delta)) {
        json_t *c = json_object_get(delta, "content");
        if (json_is_string(c) && json_string_length(c) > 0)
            return true;
    }
    return false;
}

struct event_ctx {
    bench_stream_t *s;
    int64_t now_us;
};

static void on_event(void *ud, const char *event, const char *data, size_t data_len)
{
    struct event_ctx *ctx = ud;
    bench_stream_t *s = ctx->s;
    if (s->error || s->done)
        return; /* the first error decides; nothing counts after [DONE] */
    if (strcmp(event, "error") == 0) {
        json_t *j = json_loadb(data, data_len, 0, NULL);
        const char *m = NULL;
        if (json_is_object(j))
            m = error_message(json_object_get(j, "error"));
        if (m)
            set_error_str(s, "SSE error: ", m);
        else
            set_error(s, "SSE error: ", data, data_len);
        json_decref(j);
        return;
    }
    if (data_len == 6 && memcmp(data, "[DONE]", 6) == 0) {
        s->done = true;
        return;
    }
    json_error_t jerr;
    json_t *j = json_loadb(data, data_len, 0, &jerr);
    if (!json_is_object(j)) {
        set_error(s, "bad chunk: ", data, data_len);
        json_decref(j);
        return;
    }
    json_t *err = json_object_get(j, "error");
    if (err && !json_is_null(err)) {
        const char *m = error_message(err);
        set_error_str(s, "SSE error: ", m ? m : "(no message)");
        json_decref(j);
        return;
    }
    json_t *choices = json_object_get(j, "choices");
    if (json_is_array(choices)) {
        size_t i;
        json_t *c;
        bool content = false;
        json_array_foreach(choices, i, c) content = content || choice_has_content(c);
        if (content)
            note_content(s, ctx->now_us);
    }
    json_t *usage = json_object_get(j, "usage");
    if (json_is_object(usage)) {
        json_t *pt = json_object_get(usage, "prompt_tokens");
        json_t *ct = json_object_get(usage, "completion_tokens");
        if (json_is_integer(pt) && json_integer_value(pt) >= 0)
            s->prompt_tokens = json_integer_value(pt);
        if (json_is_integer(ct) && json_integer_value(ct) >= 0)
            s->completion_tokens = json_integer_value(ct);
        json_t *det = json_object_get(usage, "prompt_tokens_details");
        json_t *cached = json_is_object(det) ? json_object_get(det, "cached_tokens") : NULL;
        if (json_is_integer(cached) && json_integer_value(cached) >= 0)
            s->cached_tokens = json_integer_value(cached);
    }
    json_decref(j);
}

void bench_stream_feed(bench_stream_t *s, const uint8_t *buf, size_t len, int64_t now_us)
{
    if (s->http_status != 0 && !status_ok(s->http_status)) {
        size_t room = MAX_ERR_BODY - s->err_len;
        size_t n = len < room ? len : room;
        if (!s->err_body)
            s->err_body = xmalloc(MAX_ERR_BODY + 1);
        memcpy(s->err_body + s->err_len, buf, n);
        s->err_len += n;
        s->err_body[s->err_len] = '\0';
        return;
    }
    if (s->error && s->sse.max_bytes == 0)
        return; /* the SSE reader already failed */
    struct event_ctx ctx = { s, now_us };
    if (sse_reader_feed(&s->sse, buf, len, on_event, &ctx) != 0) {
        set_error_str(s, "bad stream: ", "SSE line or event larger than 1 MiB");
        s->sse.max_bytes = 0; /* marks the reader as failed */
    }
}

bool bench_stream_finish(bench_stream_t *s, const char *transport_error, int64_t now_us)
{
    s->t_end_us = now_us;
    if (s->http_status != 0 && !status_ok(s->http_status)) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "HTTP %ld: ", s->http_status);
        const char *m = NULL;
        json_t *j = s->err_body ? json_loadb(s->err_body, s->err_len, 0, NULL) : NULL;
        if (json_is_object(j))
            m = error_message(json_object_get(j, "error"));
        free(s->error); /* the status explains more than anything parsed */
        s->error = NULL;
        if (m)
            set_error_str(s, prefix, m);
        else if (s->err_len > 0)
            set_error(s, prefix, s->err_body, s->err_len);
        else
            set_error_str(s, prefix, "(empty body)");
        json_decref(j);
        return false;
    }
    if (s->error)
        return false;
    if (transport_error) {
        set_error_str(s, "transport: ", transport_error);
        return false;
    }
    if (!s->done) {
        set_error_str(s, "", "stream ended without data: [DONE]");
        return false;
    }
    return true;
}

int64_t bench_stream_output_tokens(const bench_stream_t *s)
{
    return s->completion_tokens >= 0 ? s->completion_tokens : (int64_t)s->n_content;
}
