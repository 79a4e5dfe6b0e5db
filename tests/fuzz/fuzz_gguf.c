/* libFuzzer target for the GGUF reader (common/text/gguf.c).
 *
 * Parses the input; when it parses, exercises the getters, dequantizes the
 * start of the first row of every tensor of a supported type (up to 1024
 * elements, which is a whole number of blocks for every type), and checks
 * that the metadata survives a writer round trip (copy every key/value into
 * gguf_write, write to memory, parse again: must succeed with the same n_kv).
 *
 * Seed corpus: tests/fuzz/corpus/gguf/, made by tests/fuzz/gen_gguf_corpus.c.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/text/gguf.h"
#include "common/text/gguf_write.h"
#include "worker/kernels/quant.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gguf_t *g = NULL;
    char err[256];
    if (gguf_parse(data, size, &g, err, sizeof err) != 0) {
        if (g || err[0] == 0)
            abort(); /* a refusal must leave *out NULL and say why */
        return 0;
    }
    int64_t iv;
    double fv;
    bool bv;
    gguf_str_t sv;
    const gguf_kv_t *kv;
    gguf_get_int(g, "llama.block_count", &iv);
    gguf_get_float(g, "llama.attention.layer_norm_rms_epsilon", &fv);
    gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &bv);
    gguf_get_str(g, "general.architecture", &sv);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const gguf_kv_t *e = &g->kv[i];
        if (e->type != GGUF_TYPE_ARRAY)
            continue;
        for (uint64_t k = 0; k < e->arr_n && k < 64; k++) {
            gguf_arr_get_int(e, k, &iv);
            gguf_arr_get_float(e, k, &fv);
        }
        if (e->arr_type == GGUF_TYPE_STRING && e->arr_n && !e->arr_str)
            abort();
    }
    gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &kv);

    float out[1024];
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor_t *t = &g->tensors[i];
        if (!quant_can_dequantize(t->type))
            continue;
        int64_t n = t->ne[0] < 1024 ? (int64_t)t->ne[0] : 1024;
        if (quant_row_bytes(t->type, n) > t->nbytes)
            abort();
        if (quant_dequantize(t->type, t->data, out, n) != 0)
            abort();
    }

    gguf_writer_t *w = gguf_writer_new();
    int copied = gguf_writer_copy_prefix(w, g, "");
    uint8_t *buf = NULL;
    size_t len = 0;
    if (gguf_writer_write_mem(w, &buf, &len, err, sizeof err) != 0)
        abort();
    gguf_t *g2 = NULL;
    if (gguf_parse(buf, len, &g2, err, sizeof err) != 0 || g2->n_kv != (uint64_t)copied)
        abort();
    gguf_close(&g2);
    free(buf);
    gguf_writer_free(&w);
    gguf_close(&g);
    return 0;
}
