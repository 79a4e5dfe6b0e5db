/* prompt.c — text and chat messages into prompt token ids (see prompt.h). */
#include "common/text/prompt.h"

#include <stdlib.h>
#include <string.h>

#include "common/errbuf.h"
#include "common/xalloc.h"

/* Tokenizes text into a malloc'd *out, growing the buffer until it fits.
 * add_special: the tokenizer's BOS rule; parse_special: control-token texts. */
static int32_t encode(const text_model_t *t, const char *text, size_t len, bool add_special,
                      bool parse_special, int32_t **out, char *err, size_t errlen)
{
    int cap = (int)(len < 1024 ? 64 + 2 * len : len / 2 + 64);
    int32_t *ids = xmalloc((size_t)cap * sizeof *ids);
    for (;;) {
        int n = tokenizer_encode(t->tok, text, len, add_special, parse_special, ids, cap);
        if (n < 0) {
            errbuf_set(err, errlen, "the prompt is too long (%zu bytes)", len);
            free(ids);
            return -1;
        }
        if (n <= cap) {
            *out = ids;
            return n;
        }
        cap = n;
        ids = xrealloc(ids, (size_t)cap * sizeof *ids);
    }
}

int32_t prompt_text(const text_model_t *t, const char *text, size_t len, size_t max_bytes,
                    int32_t **out, bool *truncated, char *err, size_t errlen)
{
    if (truncated)
        *truncated = len > max_bytes;
    if (len > max_bytes)
        len = max_bytes;
    return encode(t, text, len, true, false, out, err, errlen);
}

int32_t prompt_chat(const text_model_t *t, const chat_msg_t *msgs, size_t n, const chat_render_opts_t *o,
                    size_t max_bytes, int32_t **out, bool *truncated, char *err, size_t errlen)
{
    char *prompt = NULL;
    size_t plen = 0;
    if (chat_template_render_opts(t->tmpl, msgs, n, o, &prompt, &plen, err, errlen) != 0)
        return -1;
    if (truncated)
        *truncated = plen > max_bytes;
    if (plen > max_bytes)
        plen = max_bytes;
    /* The template writes BOS itself when the family wants it; the
     * tokenizer's add_bos must not add a second one. */
    size_t bl = 0;
    int32_t bos = tokenizer_bos(t->tok);
    const char *bt = bos >= 0 ? tokenizer_token_text(t->tok, bos, &bl) : NULL;
    bool has_bos = bt && bl && plen >= bl && memcmp(prompt, bt, bl) == 0;
    int32_t r = encode(t, prompt, plen, !has_bos, true, out, err, errlen);
    free(prompt);
    return r;
}
