/* run_logits.c — pagoda-run --logits (run_logits.h). */
#include "worker/tools/run_logits.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"
#include "worker/kernels/kv_store.h"
#include "worker/model/forward.h"

#define RUN_LOGITS_BLOCK 32 /* KV positions per block */

int32_t run_logits_parse_ids(const char *s, int32_t vocab, int32_t max_ids, int32_t **ids, char *err, size_t errlen)
{
    *ids = NULL;
    int32_t cap = 1, n = 0;
    for (const char *q = s; *q; q++)
        cap += *q == ',';
    if (cap > max_ids) {
        snprintf(err, errlen, "--tokens: more than %d ids", (int)max_ids);
        return -1;
    }
    int32_t *v = xmalloc((size_t)cap * sizeof *v);
    for (const char *p = s;;) {
        char *end;
        errno = 0;
        long t = strtol(p, &end, 10);
        if (end == p || errno || (*end && *end != ',') || t < 0 || t >= vocab) {
            snprintf(err, errlen, "--tokens: '%.20s' is not a token id in [0, %d)", p, (int)vocab);
            free(v);
            return -1;
        }
        v[n++] = (int32_t)t;
        if (!*end)
            break;
        p = end + 1; /* past the comma: another id must follow */
    }
    *ids = v;
    return n;
}

int run_logits_write(const engine_t *e, const int32_t *ids, int32_t n, int n_threads, bool int8, const char *path,
                     char *err, size_t errlen)
{
    const model_config_t *c = &e->model->cfg;
    const int32_t nb = (n + RUN_LOGITS_BLOCK - 1) / RUN_LOGITS_BLOCK;
    kv_store_t kv = {.n_layer = c->n_layer, .n_blocks = nb, .block_size = RUN_LOGITS_BLOCK, .kv_dim = c->kv_dim,
                     .type = KV_TYPE_F32};
    size_t kvn = (size_t)kv.n_layer * kv.n_blocks * RUN_LOGITS_BLOCK; /* K (or V) vectors */
    kv.k = xcalloc(kvn, kv_store_row_bytes(&kv));
    kv.v = xcalloc(kvn, kv_store_row_bytes(&kv));
    int32_t *table = xmalloc((size_t)nb * sizeof *table);
    for (int32_t i = 0; i < nb; i++)
        table[i] = i;
    const int32_t *tables[1] = {table};
    int32_t *pos = xmalloc((size_t)n * sizeof *pos), *seq = xcalloc((size_t)n, sizeof *seq);
    int32_t *set = xmalloc((size_t)n * sizeof *set);
    uint8_t *want = xmalloc((size_t)n);
    /* the adapters pagoda-run --lora gives its prompt: every one, at its scale */
    lora_set_t ls = {0};
    for (int32_t i = 0; i < e->n_lora && i < LORA_SET_MAX; i++) {
        ls.ad[ls.n] = e->lora[i].ad;
        ls.scale[ls.n++] = e->lora[i].scale;
    }
    for (int32_t i = 0; i < n; i++) {
        pos[i] = i;
        set[i] = ls.n ? 0 : -1;
        want[i] = 1;
    }
    float *logits = xmalloc((size_t)n * c->vocab * sizeof(float)); /* (n, vocab) */
    int rc = -1;
    forward_t *f = forward_new(e->model, n, n_threads);
    if (forward_set_int8(f, int8) != 0) {
        snprintf(err, errlen, "could not allocate the int8 scratch");
        goto out;
    }
    fwd_batch_t b = {.n_rows = n, .token = ids, .pos = pos, .seq = seq, .want_logits = want, .n_seq = 1,
                     .block_tables = tables, .n_blocks = &nb, .lora_set = set, .n_lora_sets = 1, .lora_sets = &ls};
    if (forward_run(f, &b, &kv, logits) != 0) {
        snprintf(err, errlen, "forward: %s", forward_error(f));
        goto out;
    }
    FILE *fp = fopen(path, "wb");
    if (!fp) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        goto out;
    }
    size_t cnt = (size_t)n * c->vocab;
    if (fwrite(logits, sizeof(float), cnt, fp) != cnt) {
        snprintf(err, errlen, "%s: write failed", path);
        fclose(fp);
        goto out;
    }
    if (fclose(fp) != 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        goto out;
    }
    rc = 0;
out:
    forward_free(&f);
    free(logits);
    free(want);
    free(set);
    free(seq);
    free(pos);
    free(table);
    free(kv.k);
    free(kv.v);
    return rc;
}
