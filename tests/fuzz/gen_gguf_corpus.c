/* gen_gguf_corpus.c — writes the seed corpus of fuzz_gguf with gguf_write.
 * Not part of the build; regenerate with:
 *
 *   make && gcc -std=c11 -D_GNU_SOURCE -I. tests/fuzz/gen_gguf_corpus.c \
 *       build/libpagoda_worker.a build/libpagoda_common.a -lm -o /tmp/gen && \
 *   /tmp/gen tests/fuzz/corpus/gguf
 *
 * Three files, each < 20 KB:
 *   meta.gguf   every metadata value type, string and numeric arrays, no tensors
 *   llama.gguf  a 1-layer llama-shaped model (dim 32, vocab 8) in F32/F16/Q8_0/Q4_0
 *   kquant.gguf 256-wide tensors in Q4_K, Q5_K, Q6_K and BF16
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/text/gguf_write.h"
#include "worker/kernels/quant.h"

static float frand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static void add(gguf_writer_t *w, const char *name, uint32_t type, uint32_t n_dims, uint64_t ne0,
                uint64_t ne1, unsigned *seed)
{
    uint64_t ne[2] = {ne0, ne1};
    int64_t n = (int64_t)(ne0 * (n_dims > 1 ? ne1 : 1));
    float *x = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        x[i] = frand(seed) * 0.1f;
    size_t nb = quant_row_bytes(type, n);
    uint8_t *q = malloc(nb);
    if (quant_quantize(type, x, q, n) != 0 || gguf_writer_add_tensor(w, name, type, n_dims, ne, q, nb) != 0)
        exit(1);
    free(x);
    free(q);
}

static void save(gguf_writer_t *w, const char *dir, const char *name)
{
    char path[4096], err[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (gguf_writer_write_file(w, path, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : ".";
    unsigned seed = 1;

    gguf_writer_t *w = gguf_writer_new();
    gguf_writer_set_u8(w, "m.u8", 7);
    gguf_writer_set_i8(w, "m.i8", -7);
    gguf_writer_set_u16(w, "m.u16", 700);
    gguf_writer_set_i16(w, "m.i16", -700);
    gguf_writer_set_u32(w, "m.u32", 70000);
    gguf_writer_set_i32(w, "m.i32", -70000);
    gguf_writer_set_u64(w, "m.u64", 7000000000ull);
    gguf_writer_set_i64(w, "m.i64", -7000000000ll);
    gguf_writer_set_f32(w, "m.f32", 0.25f);
    gguf_writer_set_f64(w, "m.f64", -0.125);
    gguf_writer_set_bool(w, "m.bool", true);
    gguf_writer_set_str(w, "m.str", "text");
    const char *strs[] = {"<unk>", "<s>", "</s>", "\xe2\x96\x81the", "<0x0A>"};
    gguf_writer_set_arr_str(w, "m.arr_str", strs, 5);
    int32_t ia[5] = {2, 3, 1, 1, 6};
    gguf_writer_set_arr(w, "m.arr_i32", GGUF_TYPE_INT32, ia, 5);
    float fa[5] = {0, 0, 0, -1.5f, -2};
    gguf_writer_set_arr(w, "m.arr_f32", GGUF_TYPE_FLOAT32, fa, 5);
    uint8_t ba[3] = {1, 0, 1};
    gguf_writer_set_arr(w, "m.arr_bool", GGUF_TYPE_BOOL, ba, 3);
    save(w, dir, "meta.gguf");
    gguf_writer_free(&w);

    w = gguf_writer_new();
    gguf_writer_set_str(w, "general.architecture", "llama");
    gguf_writer_set_u32(w, "llama.block_count", 1);
    gguf_writer_set_u32(w, "llama.embedding_length", 32);
    gguf_writer_set_u32(w, "llama.feed_forward_length", 64);
    gguf_writer_set_u32(w, "llama.attention.head_count", 2);
    gguf_writer_set_u32(w, "llama.attention.head_count_kv", 1);
    gguf_writer_set_u32(w, "llama.context_length", 64);
    gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    const char *toks[] = {"<unk>", "<s>", "</s>", "\xe2\x96\x81\x61", "b", "c", "\xe2\x96\x81", "<0x0A>"};
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 8);
    float sc[8] = {0, 0, 0, -1, -2, -3, -4, 0};
    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, sc, 8);
    int32_t tt[8] = {2, 3, 3, 1, 1, 1, 1, 6};
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, tt, 8);
    add(w, "token_embd.weight", GGML_TYPE_Q8_0, 2, 32, 8, &seed);
    add(w, "blk.0.attn_norm.weight", GGML_TYPE_F32, 1, 32, 1, &seed);
    add(w, "blk.0.attn_q.weight", GGML_TYPE_Q4_0, 2, 32, 32, &seed);
    add(w, "blk.0.attn_k.weight", GGML_TYPE_Q8_0, 2, 32, 16, &seed);
    add(w, "blk.0.attn_v.weight", GGML_TYPE_F16, 2, 32, 16, &seed);
    add(w, "blk.0.attn_output.weight", GGML_TYPE_Q4_0, 2, 32, 32, &seed);
    add(w, "blk.0.ffn_norm.weight", GGML_TYPE_F32, 1, 32, 1, &seed);
    add(w, "blk.0.ffn_gate.weight", GGML_TYPE_Q4_0, 2, 32, 64, &seed);
    add(w, "blk.0.ffn_up.weight", GGML_TYPE_Q4_0, 2, 32, 64, &seed);
    add(w, "blk.0.ffn_down.weight", GGML_TYPE_Q8_0, 2, 64, 32, &seed);
    add(w, "output_norm.weight", GGML_TYPE_F32, 1, 32, 1, &seed);
    add(w, "output.weight", GGML_TYPE_F16, 2, 32, 8, &seed);
    save(w, dir, "llama.gguf");
    gguf_writer_free(&w);

    w = gguf_writer_new();
    gguf_writer_set_str(w, "general.architecture", "test");
    add(w, "q4k", GGML_TYPE_Q4_K, 2, 256, 4, &seed);
    add(w, "q5k", GGML_TYPE_Q5_K, 2, 256, 4, &seed);
    add(w, "q6k", GGML_TYPE_Q6_K, 2, 256, 4, &seed);
    add(w, "bf16", GGML_TYPE_BF16, 1, 256, 1, &seed);
    save(w, dir, "kquant.gguf");
    gguf_writer_free(&w);
    return 0;
}
