/* text_model.c — tokenizer, chat template and end-of-turn ids from GGUF
 * metadata (see text_model.h). */
#include "common/text/text_model.h"

#include <stdlib.h>
#include <string.h>

#include "common/errbuf.h"
#include "common/xalloc.h"

/* The token text of id as a NUL-terminated malloc'd string ("" for none). */
static char *token_text_dup(const tokenizer_t *t, int32_t id)
{
    size_t n = 0;
    const char *p = id >= 0 ? tokenizer_token_text(t, id, &n) : NULL;
    return xstrndup(p ? p : "", p ? n : 0);
}

text_model_t *text_model_from_gguf(const gguf_t *g, int32_t n_vocab, const char *path, char *err,
                                   size_t errlen)
{
    text_model_t *t = xcalloc(1, sizeof *t);
    t->tok = tokenizer_from_gguf(g, err, errlen);
    if (!t->tok)
        goto err;
    if (n_vocab >= 0 && tokenizer_n_vocab(t->tok) > n_vocab) {
        errbuf_set(err, errlen, "%s: the tokenizer has %d tokens but the model only %d", path,
                   tokenizer_n_vocab(t->tok), n_vocab);
        goto err;
    }
    gguf_str_t tmpl = {0};
    (void)gguf_get_str(g, "tokenizer.chat_template", &tmpl);
    char *bos = token_text_dup(t->tok, tokenizer_bos(t->tok));
    char *eos = token_text_dup(t->tok, tokenizer_eos(t->tok));
    t->tmpl = chat_template_new(tmpl.ptr, (size_t)tmpl.len, bos, eos);
    free(bos);
    free(eos);
    const char *const *stops = NULL;
    size_t n_stops = chat_template_stops(t->tmpl, &stops);
    t->turn_end_ids = xcalloc(n_stops + 1, sizeof(int32_t));
    for (size_t i = 0; i < n_stops; i++) {
        int32_t id = tokenizer_find(t->tok, stops[i], strlen(stops[i]));
        if (id >= 0)
            t->turn_end_ids[t->n_turn_end++] = id;
    }
    return t;
err:
    text_model_free(&t);
    return NULL;
}

text_model_t *text_model_load(const char *path, char *err, size_t errlen)
{
    gguf_t *g = NULL;
    if (gguf_open(path, &g, err, errlen) != 0)
        return NULL;
    text_model_t *t = text_model_from_gguf(g, -1, path, err, errlen);
    gguf_close(&g);
    return t;
}

void text_model_free(text_model_t **pt)
{
    text_model_t *t = *pt;
    if (!t)
        return;
    chat_template_free(&t->tmpl);
    tokenizer_free(&t->tok);
    free(t->turn_end_ids);
    free(t);
    *pt = NULL;
}
