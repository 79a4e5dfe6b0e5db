/* image_run.c — an image's run of tokens (see image_run.h). */
#include "common/text/image_run.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/errbuf.h"
#include "common/xalloc.h"

#define IMAGE_RUN_ROW_(e, name, begin, end, soft, lead, tile, row_end, nc) \
    {name, begin, end, soft, lead, tile, row_end, nc},
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

int32_t image_run_piece(const tokenizer_t *tok, const char *text)
{
    size_t len = strlen(text);
    char buf[64];
    if (len >= sizeof buf)
        return -1;
    int32_t nv = tokenizer_n_vocab(tok);
    for (int32_t id = 0; id < nv; id++) {
        /* tokenizer_decode drops the space a SentencePiece word starts with
         * (decoding from the start): such a token's piece starts with ' ',
         * never equal to a text that does not */
        size_t sl = 0;
        const char *s = tokenizer_token_text(tok, id, &sl);
        if (!s || (text[0] != ' ' && ((sl >= 3 && memcmp(s, "\xe2\x96\x81", 3) == 0) ||
                                      (sl >= 2 && memcmp(s, "\xc4\xa0", 2) == 0))))
            continue;
        size_t k = tokenizer_decode(tok, &id, 1, true, buf, sizeof buf);
        if (k == len && memcmp(buf, text, len) == 0)
            return id;
    }
    return -1;
}

int image_run_grid(int32_t w, int32_t h, int32_t tile, int32_t longest, int32_t *nx, int32_t *ny, int32_t *rw,
                   int32_t *rh)
{
    *nx = *ny = *rw = *rh = 0;
    if (w < 1 || h < 1 || tile < 1)
        return -1;
    if (longest <= 0)
        return 0;
    /* in float, as llama.cpp computes it (a different rounding could move a
     * side across a multiple of the tile) */
    float sx = (float)longest / (float)w, sy = (float)longest / (float)h;
    float s = sx < sy ? sx : sy;
    float fw = (float)w * s, fh = (float)h * s;
    int32_t cw = (int32_t)ceilf(fw / (float)tile), ch = (int32_t)ceilf(fh / (float)tile);
    if (cw < 1 || ch < 1 || (int64_t)cw * ch > IMAGE_RUN_MAX_TILES)
        return -1;
    *nx = cw, *ny = ch, *rw = cw * tile, *rh = ch * tile;
    return 0;
}

/* n_tok × soft */
static void append_soft(int32_t soft, int32_t n_tok, int32_t **ids, int32_t *n, int32_t *cap)
{
    reserve(ids, *n, cap, n_tok);
    for (int32_t i = 0; i < n_tok; i++)
        (*ids)[(*n)++] = soft;
}

int image_run_append_grid(const tokenizer_t *tok, const image_run_info_t *ri, int32_t n_tok, int32_t nx,
                          int32_t ny, int32_t **ids, int32_t *n, int32_t *cap, int32_t *pos, char *err,
                          size_t errlen)
{
    int32_t soft[4];
    if (tokenizer_encode(tok, ri->tok_soft, strlen(ri->tok_soft), false, true, soft, 4) != 1)
        return errbuf_set(err, errlen, "the model's vocabulary has no %s token: not a %s text model",
                          ri->tok_soft, ri->name);
    if ((nx || ny) && (!ri->tile_fmt || nx < 1 || ny < 1 || (int64_t)nx * ny > IMAGE_RUN_MAX_TILES))
        return errbuf_set(err, errlen, "a %d x %d grid of tiles for a %s image", nx, ny, ri->name);
    int32_t lead = -1, row_end = -1;
    if (ri->lead && (lead = image_run_piece(tok, ri->lead)) < 0)
        return errbuf_set(err, errlen, "the model's vocabulary has no token %s before a %s image",
                          ri->lead[0] == '\n' ? "\"\\n\\n\"" : ri->lead, ri->name);
    if (ny > 1 && (row_end = image_run_piece(tok, ri->row_end)) < 0)
        return errbuf_set(err, errlen, "the model's vocabulary has no token for the end of a row of %s tiles",
                          ri->name);
    int k = 0;
    for (int32_t r = 1; r <= ny; r++) {
        for (int32_t c = 1; c <= nx; c++) {
            char t[96];
            int tl = snprintf(t, sizeof t, ri->tile_fmt, (int)r, (int)c);
            image_run_append_text(tok, t, (size_t)tl, ids, n, cap);
            pos[k++] = *n;
            append_soft(soft[0], n_tok, ids, n, cap);
        }
        if (r < ny)
            append_soft(row_end, 1, ids, n, cap);
    }
    if (lead >= 0)
        append_soft(lead, 1, ids, n, cap);
    image_run_append_text(tok, ri->tok_begin, strlen(ri->tok_begin), ids, n, cap);
    pos[k++] = *n;
    append_soft(soft[0], n_tok, ids, n, cap);
    image_run_append_text(tok, ri->tok_end, strlen(ri->tok_end), ids, n, cap);
    return k;
}
