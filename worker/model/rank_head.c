/* rank_head.c — a reranker's scoring head (see rank_head.h): loading the
 * cls tensors from a GGUF and applying them to a pooled hidden state. */
#include "worker/model/rank_head.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>

#include "common/errbuf.h"
#include "common/text/ggml_type.h"
#include "common/xalloc.h"
#include "worker/kernels/quant.h"

/* Tensor `name` as floats (rows, cols) into *out (malloc'd). Returns 1, 0
 * when absent, -1 with err for a wrong shape, type or value. rows 0 = a
 * vector of cols. */
static int load_f32(const gguf_t *g, const char *name, int64_t cols, int64_t rows, float **out, char *err,
                    size_t errlen)
{
    *out = NULL;
    const gguf_tensor_t *t = gguf_find_tensor(g, name);
    if (!t)
        return 0;
    const int64_t want_rows = rows ? rows : 1;
    if ((int64_t)t->ne[0] != cols || (int64_t)t->ne[1] != want_rows || t->ne[2] != 1 || t->ne[3] != 1) {
        errbuf_set(err, errlen, "tensor %s has shape [%" PRIu64 ", %" PRIu64 "], expected [%" PRId64 ", %" PRId64 "]",
                   name, t->ne[0], t->ne[1], cols, want_rows);
        return -1;
    }
    uint32_t be = ggml_type_block_elems(t->type);
    size_t rb = be && cols % be == 0 ? quant_row_bytes(t->type, cols) : 0;
    if (!ggml_type_supported(t->type) || rb == 0 || t->nbytes != rb * (uint64_t)want_rows) {
        errbuf_set(err, errlen, "tensor %s: type %s or size %" PRIu64 " is not loadable", name,
                   ggml_type_name(t->type), t->nbytes);
        return -1;
    }
    const int64_t n = cols * want_rows;
    float *dst = xmalloc((size_t)n * sizeof *dst);
    if (quant_dequantize(t->type, t->data, dst, n) != 0) {
        errbuf_set(err, errlen, "tensor %s: cannot convert type %s", name, ggml_type_name(t->type));
        free(dst);
        return -1;
    }
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(dst[i])) {
            errbuf_set(err, errlen, "tensor %s: non-finite value at %" PRId64, name, i);
            free(dst);
            return -1;
        }
    *out = dst;
    return 1;
}

/* Rows of a matrix tensor (its ne[1]; a 1-D tensor is one row), 0 when
 * absent or of more than 2 dimensions. */
static int64_t tensor_rows(const gguf_t *g, const char *name)
{
    const gguf_tensor_t *t = gguf_find_tensor(g, name);
    return t && t->n_dims <= 2 ? (int64_t)t->ne[1] : 0;
}

int rank_head_load(const gguf_t *g, const model_arch_info_t *fam, int32_t dim, int32_t pooling_raw,
                   rank_head_t **out, char *err, size_t errlen)
{
    *out = NULL;
    if (pooling_raw != RANK_POOLING_TYPE)
        return 0;
    const int64_t n_hidden = tensor_rows(g, "cls.weight"), n_out = tensor_rows(g, "cls.output.weight");
    if (!gguf_find_tensor(g, "cls.weight") && !gguf_find_tensor(g, "cls.output.weight"))
        return 0;
    rank_head_t *h = xcalloc(1, sizeof *h);
    h->dim = dim;
    h->softmax = fam->rank_last_softmax;
    if (gguf_find_tensor(g, "cls.weight")) {
        if (n_hidden < 1 || n_hidden > (int64_t)1 << 20) {
            errbuf_set(err, errlen, "tensor cls.weight: want 2 dimensions [%d, n] with n in [1, 2^20]", dim);
            goto err;
        }
        h->n_hidden = (int32_t)n_hidden;
        if (load_f32(g, "cls.weight", dim, n_hidden, &h->cls_w, err, errlen) < 0 ||
            load_f32(g, "cls.bias", n_hidden, 0, &h->cls_b, err, errlen) < 0)
            goto err;
    }
    if (gguf_find_tensor(g, "cls.output.weight")) {
        const int64_t in = h->n_hidden ? h->n_hidden : dim;
        if (n_out < 1 || n_out > RANK_HEAD_MAX_OUT) {
            errbuf_set(err, errlen, "tensor cls.output.weight: want 2 dimensions [%" PRId64 ", n] with n in [1, %d]",
                       in, RANK_HEAD_MAX_OUT);
            goto err;
        }
        h->n_out = (int32_t)n_out;
        if (load_f32(g, "cls.output.weight", in, n_out, &h->out_w, err, errlen) < 0 ||
            load_f32(g, "cls.output.bias", n_out, 0, &h->out_b, err, errlen) < 0)
            goto err;
    }
    h->n_scores = h->n_out ? h->n_out : h->n_hidden;
    if (h->n_scores > RANK_HEAD_MAX_OUT) {
        errbuf_set(err, errlen, "the rank head has %d outputs: at most %d are served (add cls.output)",
                   h->n_scores, RANK_HEAD_MAX_OUT);
        goto err;
    }
    *out = h;
    return 1;
err:
    rank_head_free(&h);
    return -1;
}

void rank_head_free(rank_head_t **hp)
{
    rank_head_t *h = *hp;
    if (!h)
        return;
    free(h->cls_w);
    free(h->cls_b);
    free(h->out_w);
    free(h->out_b);
    free(h);
    *hp = NULL;
}

/* y[i] = W[i] · x + b[i] for (rows, cols) W, in double. */
static void affine(const float *w, const float *b, const double *x, int64_t rows, int64_t cols, double *y)
{
    for (int64_t i = 0; i < rows; i++) {
        const float *wi = w + (size_t)i * (size_t)cols;
        double acc = b ? b[i] : 0.0;
        for (int64_t j = 0; j < cols; j++)
            acc += (double)wi[j] * x[j];
        y[i] = acc;
    }
}

void rank_head_apply(const rank_head_t *h, const float *x, float *out)
{
    const int64_t wide = h->n_hidden > h->dim ? h->n_hidden : h->dim;
    double *a = xmalloc((size_t)wide * sizeof *a);  /* the layer's input */
    double *b = xmalloc((size_t)wide * sizeof *b);  /* its output */
    int64_t n = h->dim;
    for (int64_t i = 0; i < n; i++)
        a[i] = x[i];
    if (h->cls_w) {
        /* h = tanh(cls.weight · x + cls.bias) */
        affine(h->cls_w, h->cls_b, a, h->n_hidden, n, b);
        n = h->n_hidden;
        for (int64_t i = 0; i < n; i++)
            a[i] = tanh(b[i]);
    }
    if (h->out_w) {
        /* y = cls.output.weight · h + cls.output.bias */
        affine(h->out_w, h->out_b, a, h->n_out, n, b);
        n = h->n_out;
        for (int64_t i = 0; i < n; i++)
            a[i] = b[i];
    }
    if (h->softmax) {
        double mx = a[0], sum = 0;
        for (int64_t i = 1; i < n; i++)
            mx = a[i] > mx ? a[i] : mx;
        for (int64_t i = 0; i < n; i++)
            sum += (a[i] = exp(a[i] - mx));
        for (int64_t i = 0; i < n; i++)
            a[i] /= sum;
    }
    for (int64_t i = 0; i < n; i++)
        out[i] = (float)a[i];
    free(a);
    free(b);
}
