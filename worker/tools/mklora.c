/* mklora.c — pagoda-mkmodel --lora-for: random LoRA adapters (see mklora.h). */
#include "worker/tools/mklora.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/splitmix.h"
#include "common/text/ggml_type.h"
#include "common/text/gguf.h"
#include "common/text/gguf_write.h"
#include "common/xalloc.h"
#include "worker/kernels/quant.h"

#define MKLORA_DEFAULT_TARGETS "attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down"

typedef struct mklora_opts {
    const char *base, *out, *targets;
    long rank;
    double alpha;        /* < 0: the rank */
    double std;
    uint32_t type;
    uint64_t seed;
} mklora_opts_t;

int mklora_wanted(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strncmp(argv[i], "--lora-for", 10) == 0)
            return 1;
    return 0;
}

static int parse(int argc, char **argv, mklora_opts_t *o)
{
    *o = (mklora_opts_t){.targets = MKLORA_DEFAULT_TARGETS, .rank = 8, .alpha = -1, .std = 0.5,
                         .type = GGML_TYPE_F32, .seed = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL, *eq = strchr(a, '=');
        char name[64];
        if (strncmp(a, "--", 2) == 0 && eq) {
            snprintf(name, sizeof name, "%.*s", (int)(eq - a), a);
            v = eq + 1;
        } else {
            snprintf(name, sizeof name, "%s", a);
            if (i + 1 >= argc) {
                fprintf(stderr, "pagoda-mkmodel: %s needs a value\n", name);
                return -1;
            }
            v = argv[++i];
        }
        char *end = NULL;
        if (strcmp(name, "--lora-for") == 0)
            o->base = v;
        else if (strcmp(name, "-o") == 0 || strcmp(name, "--out") == 0)
            o->out = v;
        else if (strcmp(name, "--lora-targets") == 0)
            o->targets = v;
        else if (strcmp(name, "--lora-rank") == 0)
            o->rank = strtol(v, &end, 10);
        else if (strcmp(name, "--lora-alpha") == 0)
            o->alpha = strtod(v, &end);
        else if (strcmp(name, "--lora-std") == 0)
            o->std = strtod(v, &end);
        else if (strcmp(name, "--seed") == 0)
            o->seed = strtoull(v, &end, 10);
        else if (strcmp(name, "--type") == 0) {
            if (ggml_type_from_name(v, &o->type) != 0 ||
                (o->type != GGML_TYPE_F32 && o->type != GGML_TYPE_F16 && o->type != GGML_TYPE_BF16 &&
                 o->type != GGML_TYPE_Q8_0)) {
                fprintf(stderr, "pagoda-mkmodel: adapter --type %s: one of F32, F16, BF16, Q8_0\n", v);
                return -1;
            }
        } else {
            fprintf(stderr, "pagoda-mkmodel: %s is not an adapter option (see worker/tools/mklora.h)\n", name);
            return -1;
        }
        if (end && *end) {
            fprintf(stderr, "pagoda-mkmodel: %s: bad number %s\n", name, v);
            return -1;
        }
    }
    if (!o->base || !o->out || o->rank < 1 || o->rank > 4096 || !(o->std > 0) || !(o->alpha == -1 || o->alpha >= 0)) {
        fprintf(stderr, "pagoda-mkmodel: --lora-for BASE -o OUT needed; rank in [1, 4096], std > 0, alpha >= 0\n");
        return -1;
    }
    if (o->alpha < 0)
        o->alpha = (double)o->rank;
    return 0;
}

/* One factor to write: rows of cols values uniform in ±sqrt(3)·sd. */
typedef struct factor {
    uint32_t type;
    uint64_t cols, rows, seed;
    double sd;
} factor_t;

static int factor_fill(void *ctx, uint8_t *buf, size_t nbytes)
{
    const factor_t *fc = ctx;
    const size_t rb = quant_row_bytes(fc->type, (int64_t)fc->cols);
    if (rb * fc->rows != nbytes)
        return -1;
    float *row = xmalloc(fc->cols * sizeof(float));
    uint64_t st = fc->seed;
    const double half = sqrt(3.0) * fc->sd;
    int rc = 0;
    for (uint64_t r = 0; r < fc->rows && rc == 0; r++) {
        for (uint64_t i = 0; i < fc->cols; i++)
            row[i] = (float)(((double)(splitmix64_next(&st) >> 11) * 0x1p-53 * 2.0 - 1.0) * half);
        rc = quant_quantize(fc->type, row, buf + r * rb, (int64_t)fc->cols);
    }
    free(row);
    return rc;
}

/* The factor's type: the requested one, F32 when its rows do not fill whole blocks. */
static uint32_t factor_type(uint32_t want, uint64_t cols)
{
    return cols % ggml_type_block_elems(want) == 0 ? want : GGML_TYPE_F32;
}

int mklora_main(int argc, char **argv)
{
    mklora_opts_t o;
    if (parse(argc, argv, &o) != 0)
        return 2;
    char err[256];
    gguf_t *g = NULL;
    if (gguf_open(o.base, &g, err, sizeof err) != 0) {
        fprintf(stderr, "pagoda-mkmodel: %s\n", err);
        return 1;
    }
    gguf_str_t arch;
    int64_t n_layer = 0;
    char key[96];
    if (gguf_get_str(g, "general.architecture", &arch) != 0) {
        fprintf(stderr, "pagoda-mkmodel: %s has no general.architecture\n", o.base);
        gguf_close(&g);
        return 1;
    }
    snprintf(key, sizeof key, "%.*s.block_count", (int)arch.len, arch.ptr);
    if (gguf_get_int(g, key, &n_layer) != 0 || n_layer < 1 || n_layer > 4096) {
        fprintf(stderr, "pagoda-mkmodel: %s: no usable %s\n", o.base, key);
        gguf_close(&g);
        return 1;
    }
    gguf_writer_t *w = gguf_writer_new();
    gguf_writer_set_strn(w, "general.architecture", arch.ptr, arch.len);
    gguf_writer_set_str(w, "general.type", "adapter");
    gguf_writer_set_str(w, "general.name", "pagoda-mkmodel random LoRA");
    gguf_writer_set_str(w, "adapter.type", "lora");
    gguf_writer_set_f32(w, "adapter.lora.alpha", (float)o.alpha);
    /* factors live until the write: two per target per layer */
    size_t n_targets = 1;
    for (const char *p = o.targets; *p; p++)
        n_targets += *p == ',';
    factor_t *fs = xcalloc((size_t)n_layer * n_targets * 2, sizeof *fs);
    size_t nf = 0;
    int rc = 1;
    for (int64_t l = 0; l < n_layer; l++) {
        const char *p = o.targets;
        for (size_t ti = 0; ti < n_targets; ti++) {
            size_t len = strcspn(p, ",");
            char base[128], name[160];
            snprintf(base, sizeof base, "blk.%lld.%.*s.weight", (long long)l, (int)len, p);
            p += len + (p[len] == ',');
            const gguf_tensor_t *t = gguf_find_tensor(g, base);
            if (!t || t->n_dims != 2) {
                fprintf(stderr, "pagoda-mkmodel: the base has no matrix %s (--lora-targets)\n", base);
                goto out;
            }
            const uint64_t in = t->ne[0], outd = t->ne[1], r = (uint64_t)o.rank;
            factor_t *fa = &fs[nf++], *fb = &fs[nf++];
            *fa = (factor_t){.type = factor_type(o.type, in), .cols = in, .rows = r,
                             .seed = splitmix64_mix(o.seed ^ (nf * 0x9E3779B97F4A7C15ULL)), .sd = 1.0 / sqrt((double)in)};
            *fb = (factor_t){.type = factor_type(o.type, r), .cols = r, .rows = outd,
                             .seed = splitmix64_mix(o.seed ^ ((nf + 1) * 0x9E3779B97F4A7C15ULL) ^ 0x5a5a),
                             .sd = o.std / sqrt((double)r)};
            uint64_t ne_a[2] = {in, r}, ne_b[2] = {r, outd};
            snprintf(name, sizeof name, "%s.lora_a", base);
            if (gguf_writer_add_tensor_fn(w, name, fa->type, 2, ne_a, factor_fill, fa) != 0)
                goto out;
            snprintf(name, sizeof name, "%s.lora_b", base);
            if (gguf_writer_add_tensor_fn(w, name, fb->type, 2, ne_b, factor_fill, fb) != 0)
                goto out;
        }
    }
    if (gguf_writer_write_file(w, o.out, err, sizeof err) != 0) {
        fprintf(stderr, "pagoda-mkmodel: %s: %s\n", o.out, err);
        goto out;
    }
    rc = 0;
out:
    gguf_writer_free(&w);
    free(fs);
    gguf_close(&g);
    return rc;
}
