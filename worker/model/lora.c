/* lora.c — loads a GGUF LoRA adapter and checks it against its base model
 * (see lora.h). The file is hostile input: keys, names, shapes, types and
 * byte counts are checked before anything is read from it. */
#include "worker/model/lora.h"

#include <assert.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errbuf.h"
#include "common/prefix_key.h"
#include "common/xalloc.h"
#include "worker/kernels/quant.h"

/* The base tensors an adapter may name, by their per-layer suffix: a row
 * per file name, the projections it feeds (a fused attn_qkv feeds three,
 * split by B's rows). Adding an adaptable matrix is a row here. */
typedef struct lora_target {
    const char *suffix;        /* blk.L.<suffix>.weight */
    int n;                     /* projections fed */
    enum lora_proj proj[3];
} lora_target_t;

static const lora_target_t lora_targets[] = {
    {"attn_q", 1, {LORA_Q}},       {"attn_k", 1, {LORA_K}},       {"attn_v", 1, {LORA_V}},
    {"attn_output", 1, {LORA_O}},  {"ffn_gate", 1, {LORA_GATE}},  {"ffn_up", 1, {LORA_UP}},
    {"ffn_down", 1, {LORA_DOWN}},  {"attn_qkv", 3, {LORA_Q, LORA_K, LORA_V}},
};

typedef struct ld {
    const model_t *m;
    gguf_t *g;
    char *err;
    size_t errlen;
    int int8;           /* int8 pairs (PAGODA_LORA_PRECISION, lowrank_prepare) */
    size_t prep_bytes;  /* counting: the bytes of the pairs' prepared copies;
                         * filling: the bytes of prep used so far */
    uint8_t *prep;      /* NULL while counting, else the adapter's block of them */
} ld_t;

static int fail(ld_t *ld, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(ld_t *ld, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    errbuf_vset(ld->err, ld->errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* A string key must exist and equal want. */
static int want_str(ld_t *ld, const char *key, const char *want)
{
    gguf_str_t s;
    if (gguf_get_str(ld->g, key, &s) != 0)
        return fail(ld, "metadata %s missing or not a string (a LoRA adapter has %s = \"%s\")", key, key, want);
    if (!gguf_str_eq(s, want))
        return fail(ld, "metadata %s = \"%.*s\", expected \"%s\"", key, (int)(s.len > 64 ? 64 : s.len), s.ptr, want);
    return 0;
}

/* Matrix view of a 2-D adapter tensor: [cols, rows] with a supported type
 * and the byte count the shape implies. */
static int check_2d(ld_t *ld, const gguf_tensor_t *t, const char *name)
{
    uint32_t ty = t->type;
    if (ty != GGML_TYPE_F32 && ty != GGML_TYPE_F16 && ty != GGML_TYPE_BF16 && ty != GGML_TYPE_Q8_0)
        return fail(ld, "tensor %s has type %s; adapters are read in F32, F16, BF16 or Q8_0", name,
                    ggml_type_name(ty));
    for (uint32_t d = 2; d < t->n_dims; d++)
        if (t->ne[d] != 1)
            return fail(ld, "tensor %s has %u dimensions, expected 2", name, t->n_dims);
    if (t->ne[0] < 1 || t->ne[1] < 1 || t->ne[0] > (1u << 20) || t->ne[1] > (1u << 22))
        return fail(ld, "tensor %s has shape [%" PRIu64 ", %" PRIu64 "] out of range", name, t->ne[0], t->ne[1]);
    uint32_t be = ggml_type_block_elems(ty);
    size_t rb = quant_row_bytes(ty, (int64_t)t->ne[0]);
    if (be == 0 || t->ne[0] % be != 0 || rb == 0 || t->nbytes != rb * t->ne[1])
        return fail(ld, "tensor %s: %" PRIu64 " bytes do not hold [%" PRIu64 ", %" PRIu64 "] of %s", name, t->nbytes,
                    t->ne[0], t->ne[1], ggml_type_name(ty));
    return 0;
}

/* dst (ne[1], ne[0]) floats = the tensor, row by row. */
static void read_f32(const gguf_tensor_t *t, float *dst)
{
    const size_t rb = quant_row_bytes(t->type, (int64_t)t->ne[0]);
    for (uint64_t r = 0; r < t->ne[1]; r++) {
        float *row = dst + r * t->ne[0];
        int rc = quant_dequantize(t->type, t->data + r * rb, row, (int64_t)t->ne[0]);
        (void)rc; /* the type was checked by check_2d */
    }
}

/* Arena floats a factor takes: F16 as stored (two halves a float, rounded
 * up), anything else as F32. */
static size_t arena_floats(const gguf_tensor_t *t)
{
    const size_t n = (size_t)(t->ne[0] * t->ne[1]);
    return t->type == GGML_TYPE_F16 ? (n + 1) / 2 : n;
}

/* dst = the factor as the arena keeps it: F16 bits copied, else F32. */
static void read_factor(const gguf_tensor_t *t, float *dst)
{
    if (t->type == GGML_TYPE_F16)
        memcpy(dst, t->data, (size_t)(t->ne[0] * t->ne[1]) * 2);
    else
        read_f32(t, dst);
}

/* "blk.L.<suffix>.weight.lora_a" → layer L and its row of lora_targets;
 * *is_a says which factor. 0 ok, -1 not a name this loader adapts. */
static int parse_name(const gguf_str_t *n, int n_layer, int *layer, const lora_target_t **tg, int *is_a)
{
    char name[160];
    if (n->len >= sizeof name)
        return -1;
    memcpy(name, n->ptr, n->len);
    name[n->len] = '\0';
    size_t len = n->len;
    if (len > 7 && strcmp(name + len - 7, ".lora_a") == 0)
        *is_a = 1;
    else if (len > 7 && strcmp(name + len - 7, ".lora_b") == 0)
        *is_a = 0;
    else
        return -1;
    name[len - 7] = '\0';
    int l, off = 0;
    if (sscanf(name, "blk.%d.%n", &l, &off) != 1 || off == 0 || l < 0 || l >= n_layer)
        return -1;
    const char *rest = name + off;
    for (size_t i = 0; i < sizeof lora_targets / sizeof lora_targets[0]; i++) {
        size_t sl = strlen(lora_targets[i].suffix);
        if (strncmp(rest, lora_targets[i].suffix, sl) == 0 && strcmp(rest + sl, ".weight") == 0) {
            *layer = l;
            *tg = &lora_targets[i];
            return 0;
        }
    }
    return -1;
}

/* What lora_load allocates for a block of n bytes: below 1 MiB n (4 KiB
 * pages: few to miss in the TLB, and a huge page would double it at
 * least), else n rounded up to whole huge pages (2 MiB), which xhuge_alloc
 * maps with transparent huge pages where allowed. */
static size_t block_bytes(size_t n)
{
    const size_t hp = (size_t)2 << 20;
    return n < hp / 2 ? (n ? n : 1) : (n + hp - 1) / hp * hp;
}

/* The base matrix a projection multiplies with (model_layer_t's field). */
static const matmul_weight_t *base_matrix(const model_t *m, int l, enum lora_proj p)
{
    const model_layer_t *L = &m->layers[l];
    const matmul_weight_t *w[LORA_N_PROJ] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
    return w[p];
}

/* One adapted base tensor: checks its pair against the base and, when
 * arena is set, fills its pairs from it. *floats counts the floats used. */
static int load_pair(ld_t *ld, lora_t *a, const gguf_tensor_t *ta, int l, const lora_target_t *tg, float *arena,
                     size_t *floats)
{
    char bname[176], base[160];
    snprintf(base, sizeof base, "%.*s", (int)(ta->name.len - 7), ta->name.ptr);
    snprintf(bname, sizeof bname, "%s.lora_b", base);
    const gguf_tensor_t *tb = gguf_find_tensor(ld->g, bname);
    if (!tb)
        return fail(ld, "tensor %.*s has no %s", (int)ta->name.len, ta->name.ptr, bname);
    if (check_2d(ld, ta, base) != 0 || check_2d(ld, tb, bname) != 0)
        return -1;
    const gguf_tensor_t *tw = gguf_find_tensor(ld->m->gguf, base);
    if (!tw)
        return fail(ld, "the adapter changes %s, which the base model does not have (another base?)", base);
    if (ld->m->cfg.n_expert > 0 && strncmp(tg->suffix, "ffn_", 4) == 0)
        return fail(ld, "%s: adapters of MoE FFNs are not supported", base);
    if (strcmp(tg->suffix, "ffn_up") == 0 && !gguf_find_tensor(ld->m->gguf, "blk.0.ffn_gate.weight"))
        return fail(ld, "%s: adapters of a fused ffn_up (phi3) are not supported", base);
    /* A [in, r], B [r, out] against W [in, out] */
    const uint64_t in = tw->ne[0], out = tw->ne[1], r = ta->ne[1];
    if (ta->ne[0] != in || tb->ne[1] != out)
        return fail(ld,
                    "%s: lora_a [%" PRIu64 ", %" PRIu64 "] / lora_b [%" PRIu64 ", %" PRIu64
                    "] do not fit the base's [%" PRIu64 ", %" PRIu64 "] (another base?)",
                    base, ta->ne[0], ta->ne[1], tb->ne[0], tb->ne[1], in, out);
    if (tb->ne[0] != r)
        return fail(ld, "%s: lora_a has rank %" PRIu64 " but lora_b %" PRIu64 " (lora_a must be [in, r])", base, r,
                    tb->ne[0]);
    if (r > LORA_MAX_RANK)
        return fail(ld, "%s: rank %" PRIu64 " above the limit %d", base, r, LORA_MAX_RANK);
    /* F16 factors stay F16 (half the bytes a step reads; lowrank.h widens
     * them exactly), every other type becomes F32 */
    const size_t na = arena_floats(ta), nb = arena_floats(tb);
    *floats += na + nb;
    const uint32_t ty_a = ta->type == GGML_TYPE_F16 ? GGML_TYPE_F16 : GGML_TYPE_F32;
    const uint32_t ty_b = tb->type == GGML_TYPE_F16 ? GGML_TYPE_F16 : GGML_TYPE_F32;
    if (!arena) {
        for (int i = 0; i < tg->n; i++)
            ld->prep_bytes += lowrank_copy_bytes((int64_t)r, (int64_t)in, base_matrix(ld->m, l, tg->proj[i])->rows,
                                                 ty_b, ld->int8);
        return 0;
    }
    float *A = arena + *floats - na - nb, *B = A + na;
    read_factor(ta, A);
    read_factor(tb, B);
    const size_t ea = ty_a == GGML_TYPE_F16 ? 2 : 4, eb = ty_b == GGML_TYPE_F16 ? 2 : 4;
    int64_t row0 = 0;
    for (int i = 0; i < tg->n; i++) {
        const matmul_weight_t *w = base_matrix(ld->m, l, tg->proj[i]);
        lowrank_t *lr = &a->pairs[(size_t)l * LORA_N_PROJ + tg->proj[i]];
        if (lr->rank)
            return fail(ld, "%s: layer %d's matrix is adapted twice", base, l);
        if (w->cols != (int64_t)in || row0 + w->rows > (int64_t)out)
            return fail(ld, "%s: does not split into the base's projections", base);
        lr->rank = (int32_t)r;
        lr->factor = a->alpha != 0 ? a->alpha / (float)r : 1.0f;
        lr->a = (matmul_weight_t){.type = ty_a, .rows = (int64_t)r, .cols = (int64_t)in,
                                  .row_bytes = in * ea, .data = (const uint8_t *)A};
        lr->b = (matmul_weight_t){.type = ty_b, .rows = w->rows, .cols = (int64_t)r,
                                  .row_bytes = r * eb, .data = (const uint8_t *)B + (size_t)row0 * r * eb};
        /* B transposed, the layout lowrank_apply reads (int8 copies too),
         * in the adapter's block */
        const size_t nc = lowrank_copy_bytes(lr->rank, lr->a.cols, lr->b.rows, lr->b.type, ld->int8);
        assert(ld->prep_bytes + nc <= a->prep_bytes);
        int rc = lowrank_prepare_in(lr, ld->int8, ld->prep + ld->prep_bytes);
        ld->prep_bytes += nc;
        assert(rc == 0 && "the factor's type and shape were checked above");
        (void)rc;
        row0 += w->rows;
        a->n_pairs++;
        if ((int32_t)r > a->max_rank)
            a->max_rank = (int32_t)r;
    }
    return 0;
}

/* Every tensor of the file, once to check and count (arena NULL), once to fill. */
static int load_tensors(ld_t *ld, lora_t *a, float *arena, size_t *floats)
{
    *floats = 0;
    int n_a = 0, n_b = 0;
    for (uint64_t i = 0; i < ld->g->n_tensors; i++) {
        const gguf_tensor_t *t = &ld->g->tensors[i];
        int l, is_a;
        const lora_target_t *tg;
        if (parse_name(&t->name, ld->m->cfg.n_layer, &l, &tg, &is_a) != 0)
            return fail(ld, "tensor %.*s: not a LoRA factor of a layer projection this server adapts "
                        "(blk.L.{attn_q,attn_k,attn_v,attn_qkv,attn_output,ffn_gate,ffn_up,ffn_down}.weight.lora_{a,b})",
                        (int)(t->name.len > 96 ? 96 : t->name.len), t->name.ptr);
        if (!is_a) {
            n_b++;
            continue;
        }
        n_a++;
        if (load_pair(ld, a, t, l, tg, arena, floats) != 0)
            return -1;
    }
    if (n_a != n_b)
        return fail(ld, "%d lora_a tensors but %d lora_b: every lora_b needs its lora_a", n_a, n_b);
    if (n_a == 0)
        return fail(ld, "the adapter has no tensors");
    return 0;
}

int lora_load(const char *path, const model_t *m, lora_t **out, char *err, size_t errlen)
{
    ld_t ld = {.m = m, .err = err, .errlen = errlen};
    *out = NULL;
    const char *prec = getenv("PAGODA_LORA_PRECISION");
    if (prec && *prec && strcmp(prec, "int8") != 0 && strcmp(prec, "float") != 0) {
        errbuf_set(err, errlen, "PAGODA_LORA_PRECISION=%s: expected int8 or float", prec);
        return -1;
    }
    ld.int8 = prec && strcmp(prec, "int8") == 0; /* float by default (docs/FORWARD.md) */
    char gerr[200];
    if (gguf_open(path, &ld.g, gerr, sizeof gerr) != 0) {
        errbuf_set(err, errlen, "%s: %s", path, gerr);
        return -1;
    }
    lora_t *a = xcalloc(1, sizeof *a);
    a->refs = 1;
    a->n_layer = m->cfg.n_layer;
    a->pairs = xcalloc((size_t)a->n_layer * LORA_N_PROJ, sizeof *a->pairs);
    size_t floats = 0;
    if (want_str(&ld, "general.type", "adapter") != 0 || want_str(&ld, "adapter.type", "lora") != 0 ||
        want_str(&ld, "general.architecture", model_arch_name(m->cfg.arch)) != 0)
        goto err;
    double alpha = 0;
    if (gguf_get_float(ld.g, "adapter.lora.alpha", &alpha) != 0 && gguf_find_kv(ld.g, "adapter.lora.alpha")) {
        fail(&ld, "metadata adapter.lora.alpha is not a number");
        goto err;
    }
    if (!(alpha >= 0 && alpha <= 1e6)) {
        fail(&ld, "metadata adapter.lora.alpha = %g outside [0, 1e6]", alpha);
        goto err;
    }
    a->alpha = (float)alpha;
    if (load_tensors(&ld, a, NULL, &floats) != 0)
        goto err;
    /* the factors and their prepared copies on huge pages (block_bytes): a
     * step streams them, a few rows per adapter */
    a->arena = xhuge_alloc(block_bytes(floats * sizeof(float)));
    a->n_floats = floats;
    a->prep_bytes = ld.prep_bytes;
    a->prep = xhuge_alloc(block_bytes(ld.prep_bytes));
    ld.prep = a->prep;
    ld.prep_bytes = 0;
    if (load_tensors(&ld, a, a->arena, &floats) != 0)
        goto err;
    a->hash = prefix_key_bytes(ld.g->buf, ld.g->len);
    gguf_close(&ld.g);
    *out = a;
    return 0;
err:
    gguf_close(&ld.g);
    lora_free(&a);
    return -1;
}

size_t lora_bytes(const lora_t *a)
{
    return block_bytes(a->n_floats * sizeof(float)) + block_bytes(a->prep_bytes);
}

lora_t *lora_ref(lora_t *a)
{
    assert(a->refs > 0);
    a->refs++;
    return a;
}

void lora_free(lora_t **ap)
{
    if (!ap || !*ap)
        return;
    lora_t *a = *ap;
    *ap = NULL;
    assert(a->refs > 0);
    if (--a->refs > 0)
        return;
    for (size_t i = 0; a->pairs && i < (size_t)a->n_layer * LORA_N_PROJ; i++)
        lowrank_release(&a->pairs[i]);
    free(a->arena);
    free(a->prep);
    free(a->pairs);
    free(a);
}

lora_rows_t *lora_rows_new(int32_t max_rows, int32_t max_seqs)
{
    lora_rows_t *lr = xcalloc(1, sizeof *lr);
    lr->max_rows = max_rows > 0 ? max_rows : 1;
    lr->max_seqs = max_seqs > 0 ? max_seqs : 1;
    lr->row_set = xmalloc((size_t)lr->max_rows * sizeof(int32_t));
    lr->seq_set = xmalloc((size_t)lr->max_seqs * sizeof(int32_t));
    lr->sets = xcalloc((size_t)lr->max_seqs, sizeof *lr->sets);
    lr->by_seq = xcalloc((size_t)lr->max_seqs, sizeof *lr->by_seq);
    return lr;
}

void lora_rows_free(lora_rows_t **lrp)
{
    if (!lrp || !*lrp)
        return;
    lora_rows_t *lr = *lrp;
    free(lr->row_set);
    free(lr->seq_set);
    free(lr->sets);
    free(lr->by_seq);
    free(lr);
    *lrp = NULL;
}

static bool set_eq(const lora_set_t *a, const lora_set_t *b)
{
    if (a->n != b->n)
        return false;
    for (int32_t i = 0; i < a->n; i++)
        if (a->ad[i] != b->ad[i] || a->scale[i] != b->scale[i])
            return false;
    return true;
}

int32_t lora_rows_fill(lora_rows_t *lr, int32_t n_seq, int32_t n_rows, const int32_t *seq, const int32_t **row_set,
                       const lora_set_t **sets)
{
    *row_set = NULL;
    *sets = NULL;
    assert(n_seq <= lr->max_seqs && n_rows <= lr->max_rows);
    int32_t n_sets = 0;
    for (int32_t q = 0; q < n_seq; q++) {
        const lora_set_t *st = lr->by_seq[q];
        lr->seq_set[q] = -1;
        if (!st || st->n == 0)
            continue;
        int32_t k = 0;
        while (k < n_sets && !set_eq(&lr->sets[k], st))
            k++;
        if (k == n_sets)
            lr->sets[n_sets++] = *st;
        lr->seq_set[q] = k;
    }
    if (n_sets == 0)
        return 0;
    for (int32_t r = 0; r < n_rows; r++)
        lr->row_set[r] = lr->seq_set[seq[r]];
    *row_set = lr->row_set;
    *sets = lr->sets;
    return n_sets;
}
