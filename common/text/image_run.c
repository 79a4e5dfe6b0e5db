/* image_run.c — an image's run of tokens (see image_run.h). */
#include "common/text/image_run.h"

#include <string.h>

#include "common/errbuf.h"
#include "common/xalloc.h"

#define IMAGE_RUN_ROW_(e, name, begin, end, soft) {name, begin, end, soft},
static const image_run_info_t image_runs[] = {IMAGE_RUN_TABLE(IMAGE_RUN_ROW_)};
#undef IMAGE_RUN_ROW_

const image_run_info_t *image_run_find(const char *proj)
{
    for (size_t i = 0; proj && i < sizeof image_runs / sizeof image_runs[0]; i++)
        if (strcmp(image_runs[i].name, proj) == 0)
            return &image_runs[i];
    return NULL;
}

/* room for k more ids */
static void reserve(int32_t **ids, int32_t n, int32_t *cap, int32_t k)
{
    if (n + k > *cap) {
        *cap = n + k;
        *ids = xrealloc(*ids, (size_t)*cap * sizeof **ids);
    }
}

void image_run_append_text(const tokenizer_t *tok, const char *text, size_t len, int32_t **ids, int32_t *n,
                           int32_t *cap)
{
    int need = (int)(4 * len + 4);
    reserve(ids, *n, cap, need);
    int k = tokenizer_encode(tok, text, len, false, true, *ids + *n, need);
    if (k > 0)
        *n += k;
}

int32_t image_run_append(const tokenizer_t *tok, const image_run_info_t *ri, int32_t n_tok, int32_t **ids,
                         int32_t *n, int32_t *cap, char *err, size_t errlen)
{
    if (!ri->tok_begin || !ri->tok_end)
        return errbuf_set(err, errlen, "the prompt layout of %s images is not supported yet (the encoder is)",
                          ri->name);
    int32_t soft[4];
    if (tokenizer_encode(tok, ri->tok_soft, strlen(ri->tok_soft), false, true, soft, 4) != 1)
        return errbuf_set(err, errlen, "the model's vocabulary has no %s token: not a %s text model",
                          ri->tok_soft, ri->name);
    image_run_append_text(tok, ri->tok_begin, strlen(ri->tok_begin), ids, n, cap);
    int32_t pos = *n;
    reserve(ids, *n, cap, n_tok);
    for (int32_t i = 0; i < n_tok; i++)
        (*ids)[(*n)++] = soft[0];
    image_run_append_text(tok, ri->tok_end, strlen(ri->tok_end), ids, n, cap);
    return pos;
}
