/* mkmodel_main.c — pagoda-mkmodel: writes a synthetic GGUF of any
 * architecture pagoda loads (a row of MODEL_ARCH_TABLE, worker/model/arch.h:
 * llama qwen2 qwen3 qwen2moe qwen3moe gemma2 gemma3 phi3) of any tensor
 * type of quant.h's traits table, with seeded random weights, for benchmarks and tests at real model
 * shapes without downloading a model.
 *
 *   pagoda-mkmodel -o OUT.gguf [--tokenizer-from FILE.gguf|builtin] [--dim 768] [--layers 12]
 *       [--heads 12] [--kv-heads N] [--ffn 2048] [--vocab N] [--ctx 2048]
 *       [--type F32|F16|BF16|Q8_0|Q4_0|Q4_K|Q5_K|Q6_K|Q4_K_M] [--seed S] [--arch ARCH]
 *       [--rope-base B] [--eps E] [--experts N] [--experts-used K] [--expert-ffn F] [--window W]
 *       [--pooling N] ({arch}.pooling_type for embeddings: 1 mean, 3 last; absent by default)
 *       [--chat-template FILE] [--mute-special] [--logit-scale S] [--untied]
 *       [--rank 1] [--rerank-template FILE]
 *       [--mmproj OUT-MMPROJ.gguf [--vis-size 112] [--vis-patch 7] [--vis-dim 64]
 *        [--vis-layers 2] [--vis-heads 4] [--vis-ffn 128] [--vis-merge 4] [--vis-preproc N]]
 *   pagoda-mkmodel --lora-for BASE.gguf -o OUT.gguf ...  (a LoRA adapter: worker/tools/mklora.h)
 *
 * --mmproj (with --arch gemma3) also writes a random-weight Gemma 3 image
 * projector in llama.cpp's mmproj layout (worker/model/vision.h: SigLIP ViT
 * of --vis-layers blocks, width --vis-dim, on --vis-size px images cut in
 * --vis-patch px patches, pooled --vis-merge x --vis-merge, projected to
 * --dim): patch_embd F16 and position_embd F32 as the converter forces,
 * mm.input_projection F16, the ViT matrices in --type, vectors F32;
 * matrices N(0, 1/in), biases N(0, 0.02^2), norm weights 1 + N(0, 0.1^2),
 * position embeddings N(0, 0.1^2). The builtin tokenizer then gains
 * Gemma 3's image tokens "<start_of_image>", "<end_of_image>" and
 * "<image_soft_token>" (CONTROL, ids 3, 4, 5 after <unk> <s> </s>); a
 * --tokenizer-from file must already have them.
 * --projector idefics3 (any --arch) writes an Idefics3/SmolVLM projector
 * instead (worker/model/vision_idefics3.h: pixel shuffle --vis-merge,
 * mm.model.fc.weight in --type) with clip.vision.preproc_image_size =
 * --vis-preproc (default 2 x --vis-size, so a --vis-preproc px square image
 * is 2 x 2 tiles plus the global image; 0 leaves the key out: no tiles);
 * the builtin tokenizer gains "<fake_token_around_image>", "<global-img>",
 * "<image>", <row_R_col_C> for R, C up to 4 (CONTROL) and a "\n\n" piece.
 *
 * --rank 1 writes a reranker (worker/model/rank_head.h): pooling_type 4 and
 * the family's rank head, F32 — for a family with rank_last_softmax
 * (qwen3) the Qwen3-Reranker layout, cls.output.weight [dim, 2] (what the
 * converter takes from the lm_head rows of "yes" and "no") and, as the
 * converter writes it, {arch}.classifier.output_labels ["yes", "no"]
 * (llama.cpp sizes cls.output by it and cannot load the file without it);
 * for the others
 * a classification head, cls.weight [dim, dim] N(0, 1/dim), cls.bias [dim]
 * N(0, 0.02^2), cls.output.weight [dim, 1] N(0, 1/dim), cls.output.bias [1].
 * --rerank-template FILE writes tokenizer.chat_template.rerank (the text
 * with {query} and {document} placeholders llama-server fills).
 *
 * Family tensors and defaults come from the family's row of arch.h's table
 * (qk_norm: attn_q_norm/attn_k_norm; post_norms: post_attention_norm/
 * post_ffw_norm; tied_output: no output.weight; qkv_bias: q/k/v biases;
 * fused_qkv / fused_up: attn_qkv and phi3's ffn_up; swa: --window, default
 * synth_window, on the default layer pattern; moe: --experts (8) experts of
 * --expert-ffn (ffn / K) with --experts-used (2) active, a router (F32) and,
 * with moe_shared_expert, a shared expert of --ffn; --rope-base and --eps
 * default to synth_rope_base / synth_eps). Today: qwen3/qwen3moe/gemma3 get
 * q/k norms; gemma2/3 post norms, tied output and windows (4096, 512);
 * phi3 the fused tensors; qwen2moe the shared expert.
 *
 * --type Q4_K_M is a mix like llama.cpp's file type of that name: Q4_K for
 * every matrix except output.weight and, in the layers use_more_bits() picks
 * (the first and last eighth and every third one between), attn_v and
 * ffn_down, which are Q6_K.
 *
 * Tensors and metadata follow llama.cpp's names. A weight with GGUF dims
 * ne = [in, out] is a row-major (out x in) matrix whose rows are quantized in
 * blocks. Matrix weights are N(0, 1/in) in --type (activations keep unit
 * scale through every projection); the token embedding is N(0, 1); norm
 * weights are F32 1 + N(0, 0.1^2); qwen2's q/k/v biases are F32 N(0, 0.02^2).
 * Every row has its own random stream seeded from (seed, tensor name, row),
 * so the file is identical whatever the thread count.
 *
 * Stand-ins for a trained model in tests (the Makefile's test models):
 * --mute-special writes output.weight's rows of EOS and of every UNKNOWN
 * and BYTE (fallback) token as zeros, so their logits are exactly 0
 * while the others are about N(0, S^2); --logit-scale S (default 1) makes
 * output.weight's std S/sqrt(dim). With S of a few, like a trained model the
 * next token is usually clear, greedy (and low-temperature) text is whole
 * pieces of valid UTF-8, and it ends on EOS only if every other logit is
 * negative at once: in practice it runs to max_tokens or the context's end.
 * --untied writes an output.weight for a family whose files tie it to the
 * embedding (gemma2/3: llama.cpp and pagoda both read one when present), so
 * those two options apply to it too: a random tied model's next token is
 * mostly its last input token again, whatever came before.
 * Other control tokens (BOS) keep their rows: like stories260K, whose
 * stories end by starting the next with BOS, the model may emit one.
 *
 * Tokenizer: every tokenizer.* key is copied from --tokenizer-from. --vocab
 * defaults to that tokenizer's size; a smaller one cuts the builtin tokenizer
 * (only that one) to its first --vocab pieces; a larger --vocab pads the token, score
 * and token_type arrays with unused NORMAL pieces "▁w<N>" scored -1e6.
 */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/clock.h"
#include "common/splitmix.h"
#include "common/log.h"
#include "common/xalloc.h"
#include "common/text/gguf.h"
#include "common/text/gguf_write.h"
#include "worker/kernels/quant.h"
#include "worker/tools/mklora.h"
#include "worker/model/arch.h"
#include "worker/model/vision.h"

enum init_kind { INIT_NORMAL, INIT_NORM_WEIGHT };

/* How to generate one tensor: `rows` rows of `cols` elements, stored as `type`. */
typedef struct gen_tensor {
    char name[96];
    uint32_t type;
    uint64_t cols, rows;
    enum init_kind kind;
    float std;
    uint64_t seed;
    uint64_t n_expert;  /* > 1: a 3-D expert tensor [cols, rows / n_expert, n_expert] */
    const uint8_t *zero_rows;  /* rows[] flags: written as zeros (--mute-special), or NULL */
} gen_tensor_t;


static uint64_t hash_str(const char *s, uint64_t h)
{
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

/* n standard normals (Box-Muller on pairs). */
static void fill_normal(float *x, uint64_t n, uint64_t seed)
{
    uint64_t st = seed;
    for (uint64_t i = 0; i < n; i += 2) {
        double u1 = ((double)(splitmix64_next(&st) >> 11) + 1.0) * 0x1p-53;
        double u2 = (double)(splitmix64_next(&st) >> 11) * 0x1p-53;
        double r = sqrt(-2.0 * log(u1)), a = 6.283185307179586 * u2;
        x[i] = (float)(r * cos(a));
        if (i + 1 < n)
            x[i + 1] = (float)(r * sin(a));
    }
}

static int gen_fill(void *ctx, uint8_t *buf, size_t nbytes)
{
    const gen_tensor_t *t = ctx;
    size_t row_bytes = quant_row_bytes(t->type, (int64_t)t->cols);
    if (row_bytes * t->rows != nbytes)
        return -1;
    int failed = 0;
#pragma omp parallel
    {
        float *row = xmalloc(t->cols * sizeof(float));
#pragma omp for schedule(static)
        for (int64_t r = 0; r < (int64_t)t->rows; r++) {
            fill_normal(row, t->cols, t->seed ^ ((uint64_t)r * 0xd1b54a32d192ed03ull));
            for (uint64_t i = 0; i < t->cols; i++)
                row[i] = t->zero_rows && t->zero_rows[r] ? 0.0f
                         : t->kind == INIT_NORM_WEIGHT ? 1.0f + t->std * row[i] : t->std * row[i];
            if (quant_quantize(t->type, row, buf + (size_t)r * row_bytes, (int64_t)t->cols) != 0)
                failed = 1;
        }
        free(row);
    }
    return failed ? -1 : 0;
}

/* Metadata `key` = the text of the file at path (at most 1 MiB, no NUL).
 * Returns 0, or -1 with a message on stderr. */
static int set_str_from_file(gguf_writer_t *w, const char *key, const char *path)
{
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    size_t len = 0;
    if (f) {
        text = xmalloc(1 << 20);
        len = fread(text, 1, (1 << 20) - 1, f);
        text[len] = '\0';
        fclose(f);
    }
    if (!f || len == 0 || strlen(text) != len) {
        fprintf(stderr, "pagoda-mkmodel: cannot read %s from %s\n", key, path);
        free(text);
        return -1;
    }
    gguf_writer_set_str(w, key, text);
    free(text);
    return 0;
}

typedef struct opts {
    const char *out, *tok_from, *arch;
    const model_arch_info_t *fam;   /* arch's row of the architecture table (set by the checks) */
    const char *chat_template;  /* --chat-template FILE: tokenizer.chat_template, or NULL */
    const char *rerank_template; /* --rerank-template FILE: tokenizer.chat_template.rerank, or NULL */
    int64_t rank;      /* --rank 1: a rank head and pooling_type 4 */
    int64_t dim, layers, heads, kv_heads, ffn, vocab, ctx;
    int64_t experts, experts_used, expert_ffn, window;  /* MoE and sliding-window families */
    int64_t pooling;   /* --pooling: {arch}.pooling_type written when >= 0 */
    uint32_t type;                  /* matrices' type; with mix_q4_k_m the base one (Q4_K) */
    bool mix_q4_k_m;                /* --type Q4_K_M: some matrices Q6_K (see the top) */
    bool untied;                    /* --untied: output.weight even for a tied family */
    bool mute_special;              /* --mute-special: output.weight's rows of EOS, unknown
                                     * and byte tokens are zero (see the top) */
    double logit_scale;             /* --logit-scale: output.weight's std times this */
    uint64_t seed;
    double rope_base, eps;
    const char *mmproj;  /* --mmproj OUT: also write an image projector (see the top) */
    enum vision_proj proj; /* --projector: its type (gemma3 unless told) */
    int64_t vis_size, vis_patch, vis_dim, vis_layers, vis_heads, vis_ffn, vis_merge, vis_preproc;
} opts_t;

static void usage(FILE *f)
{
    /* the --type and --arch choices: the traits and architecture tables */
    char types[256] = "", archs[256];
    for (size_t i = 0; quant_traits_at(i); i++)
        snprintf(types + strlen(types), sizeof types - strlen(types), "%s|", quant_traits_at(i)->name);
    model_arch_list(archs, sizeof archs, "|");
    fprintf(f,
            "usage: pagoda-mkmodel -o OUT.gguf [--tokenizer-from FILE.gguf|builtin] [--dim 768] [--layers 12]\n"
            "         [--heads 12] [--kv-heads N] [--ffn 2048] [--vocab N] [--ctx 2048]\n"
            "         [--type %sQ4_K_M] [--seed S]\n"
            "         [--arch %s]\n"
            "         [--rope-base B] [--eps E] [--experts 8] [--experts-used 2] [--expert-ffn F]\n"
            "         [--mute-special] [--logit-scale S] [--untied]\n"
            "         [--window W] [--chat-template FILE] [--pooling N] [--rank 1] [--rerank-template FILE]\n"
            "         [--mmproj OUT.gguf [--vis-size 112] [--vis-patch 7] [--vis-dim 64] [--vis-layers 2]\n"
            "          [--vis-heads 4] [--vis-ffn 128] [--vis-merge 4] [--vis-preproc N]]\n"
            "Writes a GGUF with seeded random weights; tokenizer.* keys are copied from\n"
            "--tokenizer-from, and --vocab (default: that tokenizer's size) may pad it.\n",
            types, archs);
}

/* A --type name: any row of the traits table (quant.h). */
static int parse_type(const char *s, uint32_t *out)
{
    uint32_t t;
    if (ggml_type_from_name(s, &t) != 0 || !quant_traits(t))
        return -1;
    *out = t;
    return 0;
}

/* Q4_K_M's rule for which layers get more bits in attn_v / ffn_down: the
 * first and last eighth of the layers, and every third layer in between. */
static bool use_more_bits(int64_t i_layer, int64_t n_layers)
{
    return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 ||
           (i_layer - n_layers / 8) % 3 == 2;
}

/* The type of a matrix: o->type, except for the Q4_K_M mix. `role` is
 * "output", "attn_v", "ffn_down" or anything else; layer -1 = none. */
static uint32_t matrix_type(const opts_t *o, const char *role, int64_t layer)
{
    if (!o->mix_q4_k_m)
        return o->type;
    if (strcmp(role, "output") == 0)
        return GGML_TYPE_Q6_K;
    if ((strcmp(role, "attn_v") == 0 || strcmp(role, "ffn_down") == 0) &&
        use_more_bits(layer, o->layers))
        return GGML_TYPE_Q6_K;
    return GGML_TYPE_Q4_K;
}

/* llama.cpp's llama_ftype for a single-type file (the traits row's
 * file_type) or the Q4_K_M mix. */
static uint32_t file_type_of(const opts_t *o)
{
    if (o->mix_q4_k_m)
        return 15; /* MOSTLY_Q4_K_M */
    return (uint32_t)quant_traits(o->type)->file_type;
}

static int parse_int(const char *name, const char *v, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    long long x = strtoll(v, &end, 10);
    if (*v == 0 || *end != 0 || x < lo || x > hi) {
        fprintf(stderr, "pagoda-mkmodel: %s must be an integer in %lld..%lld (got '%s')\n", name,
                (long long)lo, (long long)hi, v);
        return -1;
    }
    *out = x;
    return 0;
}

/* After the flags: the defaults that come from the family (--arch) and
 * the other flags, then the rules between flags. 0, or -1 with the reason
 * written. */
static int finish_opts(opts_t *o)
{
    if (!o->out) {
        fprintf(stderr, "pagoda-mkmodel: -o OUT.gguf is required\n");
        return -1;
    }
    if (!o->tok_from)
        o->tok_from = "builtin";
    o->fam = model_arch_find(o->arch, strlen(o->arch));
    if (!o->fam) {
        char names[256];
        model_arch_list(names, sizeof names, " ");
        fprintf(stderr, "pagoda-mkmodel: --arch must be one of %s\n", names);
        return -1;
    }
    if ((o->mute_special || o->logit_scale != 1) && o->fam->tied_output && !o->untied) {
        fprintf(stderr, "pagoda-mkmodel: --mute-special and --logit-scale need an output.weight; --arch %s ties "
                        "it to the embedding (add --untied)\n", o->arch);
        return -1;
    }
    if (o->mmproj && o->proj == VISION_PROJ_GEMMA3 && o->fam->arch != MODEL_ARCH_GEMMA3) {
        fprintf(stderr, "pagoda-mkmodel: --mmproj writes a Gemma 3 projector: it needs --arch gemma3\n");
        return -1;
    }
    if (o->mmproj && (o->vis_size % o->vis_patch != 0 || (o->vis_size / o->vis_patch) % o->vis_merge != 0 ||
                      o->vis_dim % o->vis_heads != 0 || o->vis_dim % ggml_type_block_elems(o->type) != 0 ||
                      o->vis_ffn % ggml_type_block_elems(o->type) != 0)) {
        fprintf(stderr, "pagoda-mkmodel: --vis-size must be a multiple of --vis-patch times --vis-merge, --vis-dim "
                        "of --vis-heads, and --vis-dim and --vis-ffn of the --type block\n");
        return -1;
    }
    if (o->experts_used > o->experts) {
        fprintf(stderr, "pagoda-mkmodel: --experts-used must be <= --experts\n");
        return -1;
    }
    if (o->expert_ffn < 0)
        o->expert_ffn = o->ffn / o->experts_used;
    if (o->window < 0)
        o->window = o->fam->synth_window;
    if (o->kv_heads < 0)
        o->kv_heads = o->heads;
    if (o->rope_base < 0)
        o->rope_base = o->fam->synth_rope_base;
    if (o->eps < 0)
        o->eps = o->fam->synth_eps;
    if (o->dim % o->heads != 0 || (o->dim / o->heads) % 2 != 0) {
        fprintf(stderr, "pagoda-mkmodel: --dim %lld must be --heads %lld times an even head size\n",
                (long long)o->dim, (long long)o->heads);
        return -1;
    }
    if (o->heads % o->kv_heads != 0) {
        fprintf(stderr, "pagoda-mkmodel: --heads %lld must be a multiple of --kv-heads %lld\n",
                (long long)o->heads, (long long)o->kv_heads);
        return -1;
    }
    uint32_t be = ggml_type_block_elems(o->type);
    if (o->dim % be != 0 || o->ffn % be != 0 || (o->fam->moe && o->expert_ffn % be != 0)) {
        fprintf(stderr, "pagoda-mkmodel: %s rows come in blocks of %u: --dim %lld and --ffn %lld "
                        "must be multiples of %u\n", ggml_type_name(o->type), be,
                (long long)o->dim, (long long)o->ffn, be);
        return -1;
    }
    return 0;
}

/* --projector NAME: a VISION_PROJ_TABLE row. 0, or -1 after printing why. */
static int parse_projector(const char *v, opts_t *o)
{
    for (int p = 0; v && p < VISION_PROJ_COUNT; p++)
        if (strcmp(v, vision_proj_info((enum vision_proj)p)->name) == 0) {
            o->proj = (enum vision_proj)p;
            return 0;
        }
    fprintf(stderr, "pagoda-mkmodel: --projector must be gemma3 or idefics3\n");
    return -1;
}

/* One --vis-* option of the --mmproj projector: 0, or -1 after printing why. */
static int parse_vis_opt(const char *name, const char *v, opts_t *o)
{
    const struct {
        const char *name;
        int64_t lo, hi;
        int64_t *dst;
    } vis[] = {
        {"--vis-size", 1, 4096, &o->vis_size},     {"--vis-patch", 1, 64, &o->vis_patch},
        {"--vis-dim", 1, 1 << 14, &o->vis_dim},    {"--vis-layers", 1, 256, &o->vis_layers},
        {"--vis-heads", 1, 1024, &o->vis_heads},   {"--vis-ffn", 1, 1 << 16, &o->vis_ffn},
        {"--vis-merge", 1, 64, &o->vis_merge},     {"--vis-preproc", 0, 1 << 16, &o->vis_preproc},
    };
    for (size_t i = 0; i < sizeof vis / sizeof vis[0]; i++)
        if (strcmp(name, vis[i].name) == 0)
            return parse_int(name, v, vis[i].lo, vis[i].hi, vis[i].dst);
    fprintf(stderr, "pagoda-mkmodel: unknown option '%s'\n", name);
    return -1;
}

static int parse_args(int argc, char **argv, opts_t *o)
{
    *o = (opts_t){.arch = "llama", .dim = 768, .layers = 12, .heads = 12, .kv_heads = -1,
                  .ffn = 2048, .vocab = -1, .ctx = 2048, .type = GGML_TYPE_F32, .seed = 1,
                  .rope_base = -1, .eps = -1, .experts = 8, .experts_used = 2, .expert_ffn = -1,
                  .window = -1, .pooling = -1, .logit_scale = 1,
                  .vis_size = 112, .vis_patch = 7, .vis_dim = 64, .vis_layers = 2, .vis_heads = 4,
                  .vis_ffn = 128, .vis_merge = 4, .vis_preproc = -1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        char name[64];
        const char *eq = strchr(a, '=');
        if (strncmp(a, "--", 2) == 0 && eq) {
            snprintf(name, sizeof name, "%.*s", (int)(eq - a), a);
            v = eq + 1;
        } else {
            snprintf(name, sizeof name, "%s", a);
        }
        if (strcmp(name, "-h") == 0 || strcmp(name, "--help") == 0) {
            usage(stdout);
            exit(0);
        }
        if (strcmp(name, "--mute-special") == 0 && !v) {
            o->mute_special = true;
            continue;
        }
        if (strcmp(name, "--untied") == 0 && !v) {
            o->untied = true;
            continue;
        }
        if (!v) {
            if (i + 1 >= argc) {
                fprintf(stderr, "pagoda-mkmodel: %s needs a value\n", name);
                return -1;
            }
            v = argv[++i];
        }
        int64_t x;
        int rc = 0;
        if (strcmp(name, "-o") == 0 || strcmp(name, "--out") == 0)
            o->out = v;
        else if (strcmp(name, "--tokenizer-from") == 0)
            o->tok_from = v;
        else if (strcmp(name, "--chat-template") == 0)
            o->chat_template = v;
        else if (strcmp(name, "--rerank-template") == 0)
            o->rerank_template = v;
        else if (strcmp(name, "--mmproj") == 0)
            o->mmproj = v;
        else if (strcmp(name, "--projector") == 0)
            rc = parse_projector(v, o);
        else if (strncmp(name, "--vis-", 6) == 0)
            rc = parse_vis_opt(name, v, o);
        else if (strcmp(name, "--rank") == 0)
            rc = parse_int(name, v, 0, 1, &o->rank);
        else if (strcmp(name, "--arch") == 0)
            o->arch = v;
        else if (strcmp(name, "--dim") == 0)
            rc = parse_int(name, v, 1, 1 << 16, &o->dim);
        else if (strcmp(name, "--layers") == 0)
            rc = parse_int(name, v, 1, 1024, &o->layers);
        else if (strcmp(name, "--heads") == 0)
            rc = parse_int(name, v, 1, 1024, &o->heads);
        else if (strcmp(name, "--kv-heads") == 0)
            rc = parse_int(name, v, 1, 1024, &o->kv_heads);
        else if (strcmp(name, "--ffn") == 0)
            rc = parse_int(name, v, 1, 1 << 18, &o->ffn);
        else if (strcmp(name, "--vocab") == 0)
            rc = parse_int(name, v, 1, 1 << 22, &o->vocab);
        else if (strcmp(name, "--experts") == 0)
            rc = parse_int(name, v, 1, 1024, &o->experts);
        else if (strcmp(name, "--experts-used") == 0)
            rc = parse_int(name, v, 1, 1024, &o->experts_used);
        else if (strcmp(name, "--expert-ffn") == 0)
            rc = parse_int(name, v, 1, 1 << 18, &o->expert_ffn);
        else if (strcmp(name, "--window") == 0)
            rc = parse_int(name, v, 0, 1 << 22, &o->window);
        else if (strcmp(name, "--pooling") == 0)
            rc = parse_int(name, v, 0, 4, &o->pooling);
        else if (strcmp(name, "--ctx") == 0)
            rc = parse_int(name, v, 1, 1 << 22, &o->ctx);
        else if (strcmp(name, "--seed") == 0) {
            rc = parse_int(name, v, 0, INT64_MAX, &x);
            o->seed = (uint64_t)x;
        } else if (strcmp(name, "--type") == 0) {
            o->mix_q4_k_m = strcasecmp(v, "Q4_K_M") == 0;
            if (o->mix_q4_k_m)
                o->type = GGML_TYPE_Q4_K;
            else if (parse_type(v, &o->type) != 0) {
                fprintf(stderr, "pagoda-mkmodel: unknown --type '%s' (", v);
                for (size_t i = 0; quant_traits_at(i); i++)
                    fprintf(stderr, "%s ", quant_traits_at(i)->name);
                fprintf(stderr, "Q4_K_M)\n");
                return -1;
            }
        } else if (strcmp(name, "--rope-base") == 0 || strcmp(name, "--eps") == 0 ||
                   strcmp(name, "--logit-scale") == 0) {
            char *end;
            double d = strtod(v, &end);
            if (*v == 0 || *end != 0 || !(d > 0)) {
                fprintf(stderr, "pagoda-mkmodel: %s must be a positive number\n", name);
                return -1;
            }
            *(strcmp(name, "--eps") == 0 ? &o->eps : strcmp(name, "--logit-scale") == 0 ? &o->logit_scale : &o->rope_base) = d;
        } else {
            fprintf(stderr, "pagoda-mkmodel: unknown option '%s'\n", name);
            usage(stderr);
            return -1;
        }
        if (rc)
            return -1;
    }
    return finish_opts(o);
}

static int cmp_gstr(const void *a, const void *b)
{
    const gguf_str_t *x = a, *y = b;
    size_t n = x->len < y->len ? (size_t)x->len : (size_t)y->len;
    int r = memcmp(x->ptr, y->ptr, n);
    return r ? r : (x->len > y->len) - (x->len < y->len);
}

/* Copies tokenizer.* and pads the per-token arrays to `vocab`. Returns the
 * final vocab size, or -1. */
static int64_t copy_tokenizer(gguf_writer_t *w, const gguf_t *tok, int64_t vocab)
{
    const gguf_kv_t *tokens;
    if (gguf_get_arr(tok, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &tokens) != 0) {
        fprintf(stderr, "pagoda-mkmodel: tokenizer file has no tokenizer.ggml.tokens\n");
        return -1;
    }
    int64_t n0 = (int64_t)tokens->arr_n;
    if (vocab < 0)
        vocab = n0;
    if (vocab < n0) {
        fprintf(stderr, "pagoda-mkmodel: --vocab %lld is smaller than the tokenizer's %lld tokens\n",
                (long long)vocab, (long long)n0);
        return -1;
    }
    gguf_writer_copy_prefix(w, tok, "tokenizer.");
    if (vocab == n0)
        return vocab;

    /* tokens: the original pieces, then "▁w<N>" fillers not already present */
    gguf_str_t *sorted = xmalloc((size_t)n0 * sizeof *sorted);
    memcpy(sorted, tokens->arr_str, (size_t)n0 * sizeof *sorted);
    qsort(sorted, (size_t)n0, sizeof *sorted, cmp_gstr);
    gguf_str_t *all = xmalloc((size_t)vocab * sizeof *all);
    memcpy(all, tokens->arr_str, (size_t)n0 * sizeof *all);
    char *pool = xmalloc((size_t)(vocab - n0) * 32);
    uint64_t serial = (uint64_t)n0;
    for (int64_t i = n0; i < vocab; i++) {
        char *p = pool + (size_t)(i - n0) * 32;
        for (;;) {
            int len = snprintf(p, 32, "\xe2\x96\x81w%llu", (unsigned long long)serial++);
            gguf_str_t s = {p, (uint64_t)len};
            if (!bsearch(&s, sorted, (size_t)n0, sizeof *sorted, cmp_gstr)) {
                all[i] = s;
                break;
            }
        }
    }
    gguf_writer_set_arr_gstr(w, "tokenizer.ggml.tokens", all, (uint64_t)vocab);
    free(pool);
    free(all);
    free(sorted);

    const gguf_kv_t *scores, *types;
    if (gguf_get_arr(tok, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, &scores) == 0 &&
        (int64_t)scores->arr_n == n0) {
        float *s = xmalloc((size_t)vocab * sizeof(float));
        memcpy(s, scores->arr_data, (size_t)n0 * sizeof(float));
        for (int64_t i = n0; i < vocab; i++)
            s[i] = -1e6f;
        gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, s, (uint64_t)vocab);
        free(s);
    }
    if (gguf_get_arr(tok, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, &types) == 0 &&
        (int64_t)types->arr_n == n0) {
        int32_t *t = xmalloc((size_t)vocab * sizeof(int32_t));
        memcpy(t, types->arr_data, (size_t)n0 * sizeof(int32_t));
        for (int64_t i = n0; i < vocab; i++)
            t[i] = 1; /* NORMAL */
        gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, t, (uint64_t)vocab);
        free(t);
    }
    return vocab;
}

/* The builtin tokenizer (--tokenizer-from builtin, the default): a small
 * SentencePiece-style vocabulary made here, so a model can be made on a
 * machine with no other GGUF. <unk> <s> </s>, the 256 byte-fallback tokens,
 * then "\xe2\x96\x81" (the space marker) alone, printable ASCII characters with and
 * without it, and common English words with it; scores favour longer pieces.
 * Written into memory as a GGUF and parsed back, so it goes through the same
 * copy as a tokenizer read from a file. The ChatML template comes with it.
 * max_n > 0 keeps only the first max_n pieces (at least every byte and ASCII
 * character piece): word pieces are made prefix by prefix, so a cut keeps
 * every kept piece reachable by merges (stories260K's 512 for its stand-in). */
static int builtin_tokenizer(int64_t max_n, const char *const *img_toks, size_t n_img, uint8_t **buf, size_t *len,
                             char *err, size_t errlen)
{
    /* story words first: a cut to stories260K's 512 pieces keeps them */
    static const char *const words[] = {
        "Once", "upon", "time", "little", "happy", "play", "friend", "sun", "tree", "big", "story",
        "hello", "world", "model", "server", "token",
        "the", "and", "to", "of", "a", "in", "is", "it", "you", "that", "was", "for", "on",
        "are", "with", "as", "I", "his", "they", "be", "at", "one", "have", "this", "from",
        "or", "had", "by", "not", "word", "but", "what", "some", "we", "can", "out", "other",
        "were", "all", "there", "when", "up", "use", "your", "how", "said", "an", "each", "she",
        "which", "do", "their", "if", "will", "way", "about", "many", "then", "them",
        "write", "would", "like", "so", "these", "her", "long", "make", "thing", "see", "him",
        "two", "has", "look", "more", "day", "could", "go", "come", "did", "number", "sound",
        "no", "most", "people", "my", "over", "know", "water", "than", "call", "first", "who",
        "may", "down", "side", "been", "now", "find",
    };
    size_t n_words = sizeof words / sizeof words[0];
    size_t cap = 3 + n_img + 256 + 1 + 2 * 95 + n_words;
    char **toks = xcalloc(cap, sizeof *toks);
    float *scores = xcalloc(cap, sizeof *scores);
    int32_t *types = xcalloc(cap, sizeof *types);
    size_t n = 0;
    const char *sp = "\xe2\x96\x81";
    toks[n] = xstrdup("<unk>"), types[n++] = 2;  /* UNKNOWN */
    toks[n] = xstrdup("<s>"), types[n++] = 3;    /* CONTROL */
    toks[n] = xstrdup("</s>"), types[n++] = 3;
    /* the projector's image tokens (--mmproj): CONTROL, like the other
     * markers; "\n\n" (idefics3's run) a normal piece, as in SmolLM2's */
    for (size_t i = 0; i < n_img; i++)
        toks[n] = xstrdup(img_toks[i]), types[n++] = strcmp(img_toks[i], "\n\n") == 0 ? 1 : 3;
    for (int b = 0; b < 256; b++) {
        char t[8];
        snprintf(t, sizeof t, "<0x%02X>", b);
        toks[n] = xstrdup(t), types[n++] = 6;      /* BYTE */
    }
    toks[n] = xstrdup(sp), scores[n] = -1.0f, types[n++] = 1;
    for (int c = 33; c < 127; c++) {
        char t[8];
        snprintf(t, sizeof t, "%c", c);
        toks[n] = xstrdup(t), scores[n] = -2.0f, types[n++] = 1;
        snprintf(t, sizeof t, "%s%c", sp, c);
        toks[n] = xstrdup(t), scores[n] = -1.5f, types[n++] = 1;
    }
    /* SentencePiece merges pairs of existing pieces, so every prefix of a
     * word must be a piece for the whole word to become one token. */
    for (size_t i = 0; i < n_words; i++) {
        size_t wl = strlen(words[i]);
        for (size_t k = 2; k <= wl; k++) {
            char t[64];
            snprintf(t, sizeof t, "%s%.*s", sp, (int)k, words[i]);
            bool dup = false;
            for (size_t j = 0; j < n && !dup; j++)
                dup = strcmp(toks[j], t) == 0;
            if (dup)
                continue;
            if (n == cap) {
                cap *= 2;
                toks = xrealloc(toks, cap * sizeof *toks);
                scores = xrealloc(scores, cap * sizeof *scores);
                types = xrealloc(types, cap * sizeof *types);
            }
            toks[n] = xstrdup(t), scores[n] = (float)k, types[n++] = 1;
        }
    }
    size_t n_min = 3 + n_img + 256 + 1 + 2 * 95;
    if (max_n > 0 && (size_t)max_n < n_min) {
        snprintf(err, errlen, "--vocab %lld: the builtin tokenizer needs at least %zu pieces", (long long)max_n,
                 n_min);
        for (size_t i = 0; i < n; i++)
            free(toks[i]);
        free(toks);
        free(scores);
        free(types);
        return -1;
    }
    while (max_n > 0 && n > (size_t)max_n)
        free(toks[--n]);
    gguf_writer_t *w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)toks, n);
    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, n);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, n);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    int rc = gguf_writer_write_mem(w, buf, len, err, errlen);
    gguf_writer_free(&w);
    for (size_t i = 0; i < n; i++)
        free(toks[i]);
    free(toks);
    free(scores);
    free(types);
    return rc;
}

/* The metadata: general.*, the architecture's hyperparameters (from
 * A = o->arch) and the tokenizer copied from tok (cut to o->vocab), and the
 * chat template from o->chat_template. Returns the vocabulary size, or -1
 * after printing why. */
static int64_t write_metadata(gguf_writer_t *w, const opts_t *o, const gguf_t *tok)
{
    const char *A = o->arch;
    char key[128];
#define K(suffix) (snprintf(key, sizeof key, "%s.%s", A, suffix), key)
    int64_t head_dim = o->dim / o->heads;
    gguf_writer_set_str(w, "general.architecture", A);
    gguf_writer_set_str(w, "general.name", "pagoda-mkmodel synthetic");
    gguf_writer_set_u32(w, "general.file_type", file_type_of(o));
    if (ggml_type_block_elems(o->type) > 1)
        gguf_writer_set_u32(w, "general.quantization_version", 2);
    gguf_writer_set_u32(w, K("context_length"), (uint32_t)o->ctx);
    if (o->rank)
        gguf_writer_set_u32(w, K("pooling_type"), 4); /* rank */
    else if (o->pooling >= 0)
        gguf_writer_set_u32(w, K("pooling_type"), (uint32_t)o->pooling);
    if (o->rank && o->fam->rank_last_softmax) {
        /* the converter's labels of cls.output's rows: llama.cpp sizes
         * cls.output by their count (default 1) and refuses the file without */
        static const gguf_str_t labels[2] = {{"yes", 3}, {"no", 2}};
        gguf_writer_set_arr_gstr(w, K("classifier.output_labels"), labels, 2);
    }
    gguf_writer_set_u32(w, K("embedding_length"), (uint32_t)o->dim);
    gguf_writer_set_u32(w, K("block_count"), (uint32_t)o->layers);
    gguf_writer_set_u32(w, K("feed_forward_length"), (uint32_t)o->ffn);
    gguf_writer_set_u32(w, K("attention.head_count"), (uint32_t)o->heads);
    gguf_writer_set_u32(w, K("attention.head_count_kv"), (uint32_t)o->kv_heads);
    gguf_writer_set_f32(w, K("attention.layer_norm_rms_epsilon"), (float)o->eps);
    gguf_writer_set_f32(w, K("rope.freq_base"), (float)o->rope_base);
    gguf_writer_set_u32(w, K("rope.dimension_count"), (uint32_t)head_dim);
    const model_arch_info_t *fam = o->fam;
    if (fam->moe) {
        gguf_writer_set_u32(w, K("expert_count"), (uint32_t)o->experts);
        gguf_writer_set_u32(w, K("expert_used_count"), (uint32_t)o->experts_used);
        gguf_writer_set_u32(w, K("expert_feed_forward_length"), (uint32_t)o->expert_ffn);
        if (fam->moe_shared_expert)
            gguf_writer_set_u32(w, K("expert_shared_feed_forward_length"), (uint32_t)o->ffn);
    }
    if (o->window > 0 && fam->swa)
        gguf_writer_set_u32(w, K("attention.sliding_window"), (uint32_t)o->window);
    int64_t vocab = copy_tokenizer(w, tok, o->vocab);
    if (vocab < 0)
        return -1;
    /* a Jinja chat template from a file (replaces a copied one); a rerank template */
    if ((o->chat_template && set_str_from_file(w, "tokenizer.chat_template", o->chat_template) < 0) ||
        (o->rerank_template && set_str_from_file(w, "tokenizer.chat_template.rerank", o->rerank_template) < 0))
        return -1;
    gguf_writer_set_u32(w, K("vocab_size"), (uint32_t)vocab);
#undef K
    return vocab;
}

/* One tensor of the plan: its random stream seeded from its name. */
static gen_tensor_t gen_tensor(const char *name, uint32_t type, uint64_t cols, uint64_t rows, enum init_kind kind,
                               double std, uint64_t base_seed)
{
    gen_tensor_t t = {.type = type, .cols = cols, .rows = rows, .kind = kind, .std = (float)std, .n_expert = 1};
    snprintf(t.name, sizeof t.name, "%s", name);
    t.seed = hash_str(t.name, base_seed);
    return t;
}

/* The tensor plan, in llama.cpp's order: *n_out entries (malloc'd). */
static gen_tensor_t *plan_tensors(const opts_t *o, int64_t vocab, size_t *n_out)
{
    size_t n_plan = 3 + 4 + (size_t)o->layers * 24, n = 0;
    uint64_t base_seed = o->seed;
    base_seed = splitmix64_next(&base_seed) ^ 0xcbf29ce484222325ull;
    gen_tensor_t *plan = xcalloc(n_plan, sizeof *plan);
#define ADD(nm, ty, c, r, kind_, std_) (plan[n++] = gen_tensor(nm, ty, (uint64_t)(c), (uint64_t)(r), kind_, std_, base_seed))
    const model_arch_info_t *fam = o->fam;
    int64_t head_dim = o->dim / o->heads, kv_dim = head_dim * o->kv_heads;
    const float s_dim = 1.0f / sqrtf((float)o->dim), s_ffn = 1.0f / sqrtf((float)o->ffn);
    char nm[96];
    ADD("token_embd.weight", o->type, o->dim, vocab, INIT_NORMAL, 1.0);
    for (int64_t l = 0; l < o->layers; l++) {
#define L(s) (snprintf(nm, sizeof nm, "blk.%lld.%s", (long long)l, s), nm)
        ADD(L("attn_norm.weight"), GGML_TYPE_F32, o->dim, 1, INIT_NORM_WEIGHT, 0.1);
        if (fam->fused_qkv) {
            ADD(L("attn_qkv.weight"), o->type, o->dim, o->dim + 2 * kv_dim, INIT_NORMAL, s_dim);
        } else {
            ADD(L("attn_q.weight"), o->type, o->dim, o->dim, INIT_NORMAL, s_dim);
            ADD(L("attn_k.weight"), o->type, o->dim, kv_dim, INIT_NORMAL, s_dim);
            ADD(L("attn_v.weight"), matrix_type(o, "attn_v", l), o->dim, kv_dim, INIT_NORMAL, s_dim);
        }
        if (fam->qk_norm) {
            ADD(L("attn_q_norm.weight"), GGML_TYPE_F32, head_dim, 1, INIT_NORM_WEIGHT, 0.1);
            ADD(L("attn_k_norm.weight"), GGML_TYPE_F32, head_dim, 1, INIT_NORM_WEIGHT, 0.1);
        }
        if (fam->qkv_bias) {
            ADD(L("attn_q.bias"), GGML_TYPE_F32, o->dim, 1, INIT_NORMAL, 0.02);
            ADD(L("attn_k.bias"), GGML_TYPE_F32, kv_dim, 1, INIT_NORMAL, 0.02);
            ADD(L("attn_v.bias"), GGML_TYPE_F32, kv_dim, 1, INIT_NORMAL, 0.02);
        }
        ADD(L("attn_output.weight"), o->type, o->dim, o->dim, INIT_NORMAL, s_dim);
        ADD(L("ffn_norm.weight"), GGML_TYPE_F32, o->dim, 1, INIT_NORM_WEIGHT, 0.1);
        if (fam->post_norms) {
            ADD(L("post_attention_norm.weight"), GGML_TYPE_F32, o->dim, 1, INIT_NORM_WEIGHT, 0.1);
            ADD(L("post_ffw_norm.weight"), GGML_TYPE_F32, o->dim, 1, INIT_NORM_WEIGHT, 0.1);
        }
        if (fam->moe) {
            const float s_fe = 1.0f / sqrtf((float)o->expert_ffn);
            ADD(L("ffn_gate_inp.weight"), GGML_TYPE_F32, o->dim, o->experts, INIT_NORMAL, s_dim);
            ADD(L("ffn_gate_exps.weight"), o->type, o->dim, o->expert_ffn * o->experts, INIT_NORMAL, s_dim);
            plan[n - 1].n_expert = (uint64_t)o->experts;
            ADD(L("ffn_up_exps.weight"), o->type, o->dim, o->expert_ffn * o->experts, INIT_NORMAL, s_dim);
            plan[n - 1].n_expert = (uint64_t)o->experts;
            ADD(L("ffn_down_exps.weight"), o->type, o->expert_ffn, o->dim * o->experts, INIT_NORMAL, s_fe);
            plan[n - 1].n_expert = (uint64_t)o->experts;
            if (fam->moe_shared_expert) {
                ADD(L("ffn_gate_inp_shexp.weight"), GGML_TYPE_F32, o->dim, 1, INIT_NORMAL, s_dim);
                ADD(L("ffn_gate_shexp.weight"), o->type, o->dim, o->ffn, INIT_NORMAL, s_dim);
                ADD(L("ffn_up_shexp.weight"), o->type, o->dim, o->ffn, INIT_NORMAL, s_dim);
                ADD(L("ffn_down_shexp.weight"), o->type, o->ffn, o->dim, INIT_NORMAL, s_ffn);
            }
        } else if (fam->fused_up) {
            ADD(L("ffn_up.weight"), o->type, o->dim, 2 * o->ffn, INIT_NORMAL, s_dim);
            ADD(L("ffn_down.weight"), o->type, o->ffn, o->dim, INIT_NORMAL, s_ffn);
        } else {
            ADD(L("ffn_gate.weight"), o->type, o->dim, o->ffn, INIT_NORMAL, s_dim);
            ADD(L("ffn_up.weight"), o->type, o->dim, o->ffn, INIT_NORMAL, s_dim);
            ADD(L("ffn_down.weight"), matrix_type(o, "ffn_down", l), o->ffn, o->dim, INIT_NORMAL, s_ffn);
        }
#undef L
    }
    ADD("output_norm.weight", GGML_TYPE_F32, o->dim, 1, INIT_NORM_WEIGHT, 0.1);
    if (!fam->tied_output || o->untied)
        ADD("output.weight", matrix_type(o, "output", -1), o->dim, vocab, INIT_NORMAL, s_dim * o->logit_scale);
    if (o->rank && fam->rank_last_softmax) {
        ADD("cls.output.weight", GGML_TYPE_F32, o->dim, 2, INIT_NORMAL, s_dim); /* "yes", "no" */
    } else if (o->rank) {
        ADD("cls.weight", GGML_TYPE_F32, o->dim, o->dim, INIT_NORMAL, s_dim);
        ADD("cls.bias", GGML_TYPE_F32, o->dim, 1, INIT_NORMAL, 0.02);
        ADD("cls.output.weight", GGML_TYPE_F32, o->dim, 1, INIT_NORMAL, s_dim);
        ADD("cls.output.bias", GGML_TYPE_F32, 1, 1, INIT_NORMAL, 0.02);
    }
#undef ADD
    assert(n <= n_plan);
    *n_out = n;
    return plan;
}

/* The --mmproj file: a Gemma 3 projector (see the top) whose output width
 * is the text model's --dim. 0 ok, -1 after printing why. */
static int write_mmproj(const opts_t *o)
{
    const int64_t D = o->vis_dim, F = o->vis_ffn, P = o->vis_patch, T = o->dim;
    const int64_t n_patch = (o->vis_size / P) * (o->vis_size / P);
    gguf_writer_t *w = gguf_writer_new();
    gguf_writer_set_str(w, "general.architecture", "clip");
    gguf_writer_set_str(w, "general.name", "pagoda-mkmodel synthetic projector");
    gguf_writer_set_u32(w, "general.file_type", file_type_of(o));
    gguf_writer_set_bool(w, "clip.has_vision_encoder", true);
    const bool idf = o->proj == VISION_PROJ_IDEFICS3;
    gguf_writer_set_str(w, "clip.projector_type", vision_proj_info(o->proj)->name);
    gguf_writer_set_bool(w, "clip.use_gelu", true);
    gguf_writer_set_u32(w, "clip.vision.image_size", (uint32_t)o->vis_size);
    gguf_writer_set_u32(w, "clip.vision.patch_size", (uint32_t)P);
    gguf_writer_set_u32(w, "clip.vision.embedding_length", (uint32_t)D);
    gguf_writer_set_u32(w, "clip.vision.feed_forward_length", (uint32_t)F);
    gguf_writer_set_u32(w, "clip.vision.block_count", (uint32_t)o->vis_layers);
    gguf_writer_set_u32(w, "clip.vision.attention.head_count", (uint32_t)o->vis_heads);
    gguf_writer_set_f32(w, "clip.vision.attention.layer_norm_epsilon", 1e-6f);
    gguf_writer_set_u32(w, "clip.vision.projection_dim", (uint32_t)T);
    const float half[3] = {0.5f, 0.5f, 0.5f}; /* SigLIP's mean and std */
    gguf_writer_set_arr(w, "clip.vision.image_mean", GGUF_TYPE_FLOAT32, half, 3);
    gguf_writer_set_arr(w, "clip.vision.image_std", GGUF_TYPE_FLOAT32, half, 3);
    /* gemma3's converter writes scale_factor only when not the default 4;
     * SmolVLM's always, and the longest edge it scales images to */
    if (o->vis_merge != 4 || idf)
        gguf_writer_set_u32(w, "clip.vision.projector.scale_factor", (uint32_t)o->vis_merge);
    if (idf && o->vis_preproc != 0) /* default 2 x --vis-size: a square image of that side is 2 x 2 tiles */
        gguf_writer_set_u32(w, "clip.vision.preproc_image_size",
                            (uint32_t)(o->vis_preproc > 0 ? o->vis_preproc : 2 * o->vis_size));

    size_t cap = 8 + (size_t)o->vis_layers * 16, n = 0;
    gen_tensor_t *plan = xcalloc(cap, sizeof *plan);
    uint32_t *nd = xcalloc(cap, sizeof *nd); /* each tensor's n_dims */
    uint64_t base_seed = o->seed ^ 0x5eedf00dull;
    base_seed = splitmix64_next(&base_seed);
    /* V(name, type, ne0, ne1, std, kind): ne1 = 1 for vectors */
#define V(nm_, ty, c, r, kind_, std_)                                                              \
    do {                                                                                            \
        plan[n] = gen_tensor(nm_, ty, (uint64_t)(c), (uint64_t)(r), kind_, std_, base_seed);       \
        nd[n++] = (r) > 1 ? 2 : 1;                                                                  \
    } while (0)
    const uint32_t mt = o->type;
    const double s_d = 1.0 / sqrt((double)D), s_f = 1.0 / sqrt((double)F);
    /* the conv kernel [P, P, 3, D]: rows of P, 3·P·D of them */
    /* SmolVLM's converter keeps ".embeddings." in F32 */
    V("v.patch_embd.weight", idf ? GGML_TYPE_F32 : GGML_TYPE_F16, P, P * 3 * D, INIT_NORMAL, 1.0 / sqrt(3.0 * P * P));
    nd[n - 1] = 4;
    V("v.patch_embd.bias", GGML_TYPE_F32, D, 1, INIT_NORMAL, 0.02);
    V("v.position_embd.weight", GGML_TYPE_F32, D, n_patch, INIT_NORMAL, 0.1);
    char nm[96];
    for (int64_t l = 0; l < o->vis_layers; l++) {
#define B(s) (snprintf(nm, sizeof nm, "v.blk.%lld.%s", (long long)l, s), nm)
        V(B("ln1.weight"), GGML_TYPE_F32, D, 1, INIT_NORM_WEIGHT, 0.1);
        V(B("ln1.bias"), GGML_TYPE_F32, D, 1, INIT_NORMAL, 0.02);
        static const char *const qkvo[4] = {"attn_q", "attn_k", "attn_v", "attn_out"};
        for (int i = 0; i < 4; i++) {
            char w8[32], b8[32];
            snprintf(w8, sizeof w8, "%s.weight", qkvo[i]);
            snprintf(b8, sizeof b8, "%s.bias", qkvo[i]);
            V(B(w8), mt, D, D, INIT_NORMAL, s_d);
            V(B(b8), GGML_TYPE_F32, D, 1, INIT_NORMAL, 0.02);
        }
        V(B("ln2.weight"), GGML_TYPE_F32, D, 1, INIT_NORM_WEIGHT, 0.1);
        V(B("ln2.bias"), GGML_TYPE_F32, D, 1, INIT_NORMAL, 0.02);
        V(B("ffn_up.weight"), mt, D, F, INIT_NORMAL, s_d);
        V(B("ffn_up.bias"), GGML_TYPE_F32, F, 1, INIT_NORMAL, 0.02);
        V(B("ffn_down.weight"), mt, F, D, INIT_NORMAL, s_f);
        V(B("ffn_down.bias"), GGML_TYPE_F32, D, 1, INIT_NORMAL, 0.02);
#undef B
    }
    V("v.post_ln.weight", GGML_TYPE_F32, D, 1, INIT_NORM_WEIGHT, 0.1);
    V("v.post_ln.bias", GGML_TYPE_F32, D, 1, INIT_NORMAL, 0.02);
    if (idf) {
        /* [D·k², T]: T rows of the pixel-shuffled D·k² inputs, in --type */
        const int64_t Dk = D * o->vis_merge * o->vis_merge;
        V("mm.model.fc.weight", mt, Dk, T, INIT_NORMAL, 1.0 / sqrt((double)Dk));
    } else {
        V("mm.soft_emb_norm.weight", GGML_TYPE_F32, D, 1, INIT_NORM_WEIGHT, 0.1);
        /* [T, D]: input d's row of T weights (x · W), F16 as the converter forces */
        V("mm.input_projection.weight", GGML_TYPE_F16, T, D, INIT_NORMAL, s_d);
    }
#undef V
    assert(n <= cap);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        const gen_tensor_t *t = &plan[i];
        uint64_t shape[4] = {t->cols, t->rows, 1, 1};
        if (nd[i] == 4)
            shape[1] = (uint64_t)P, shape[2] = 3, shape[3] = (uint64_t)D;
        rc = gguf_writer_add_tensor_fn(w, t->name, t->type, nd[i], shape, gen_fill, (void *)t);
    }
    char err[512] = "";
    if (rc == 0 && gguf_writer_write_file(w, o->mmproj, err, sizeof err) != 0)
        rc = -1;
    if (rc != 0)
        fprintf(stderr, "pagoda-mkmodel: %s: %s\n", o->mmproj, err[0] ? err : "cannot add a tensor");
    else
        log_info("wrote %s: %s projector, %lld px images, %lld px patches, width %lld, %lld layers, "
                 "%lld tokens per image into width %lld",
                 o->mmproj, vision_proj_info(o->proj)->name, (long long)o->vis_size, (long long)P, (long long)D, (long long)o->vis_layers,
                 (long long)(n_patch / (o->vis_merge * o->vis_merge)), (long long)T);
    free(plan);
    free(nd);
    gguf_writer_free(&w);
    return rc;
}

int main(int argc, char **argv)
{
    log_init("mkmodel", LOG_INFO);
    if (mklora_wanted(argc, argv)) /* an adapter for a base: worker/tools/mklora.h */
        return mklora_main(argc, argv);
    opts_t o;
    if (parse_args(argc, argv, &o) != 0)
        return 2;
    int64_t t0 = clock_now_us();
    char err[512];
    gguf_t *tok = NULL;
    uint8_t *builtin = NULL;
    size_t builtin_len = 0;
    if (strcmp(o.tok_from, "builtin") == 0) {
        /* the image tokens of the projector's run (docs/VISION.md) */
        static const char *const g3_toks[] = {"<start_of_image>", "<end_of_image>", "<image_soft_token>"};
        static const char *const idf_toks[] = {
            "<fake_token_around_image>", "<global-img>", "<image>", "\n\n", "<row_1_col_1>", "<row_1_col_2>",
            "<row_1_col_3>", "<row_1_col_4>", "<row_2_col_1>", "<row_2_col_2>", "<row_2_col_3>", "<row_2_col_4>",
            "<row_3_col_1>", "<row_3_col_2>", "<row_3_col_3>", "<row_3_col_4>", "<row_4_col_1>", "<row_4_col_2>",
            "<row_4_col_3>", "<row_4_col_4>"}; /* up to 4 x 4 tiles, as SmolVLM's 2048 px over 512 */
        const char *const *img = !o.mmproj ? NULL : o.proj == VISION_PROJ_IDEFICS3 ? idf_toks : g3_toks;
        size_t n_img = !o.mmproj ? 0 : o.proj == VISION_PROJ_IDEFICS3 ? sizeof idf_toks / sizeof *idf_toks : 3;
        if (builtin_tokenizer(o.vocab, img, n_img, &builtin, &builtin_len, err, sizeof err) != 0 ||
            gguf_parse(builtin, builtin_len, &tok, err, sizeof err) != 0) {
            fprintf(stderr, "pagoda-mkmodel: builtin tokenizer: %s\n", err);
            free(builtin);
            return 1;
        }
    } else if (gguf_open(o.tok_from, &tok, err, sizeof err) != 0) {
        fprintf(stderr, "pagoda-mkmodel: %s\n", err);
        return 1;
    }
    gguf_writer_t *w = gguf_writer_new();
    int64_t vocab = write_metadata(w, &o, tok);
    if (vocab < 0)
        goto err;
    size_t n;
    gen_tensor_t *plan = plan_tensors(&o, vocab, &n);
    uint8_t *muted = NULL;
    if (o.mute_special) {
        /* output.weight (a tied family needs --untied, parse_args) */
        int64_t eos;
        const gguf_kv_t *types = NULL;
        if (gguf_get_int(tok, "tokenizer.ggml.eos_token_id", &eos) != 0 || eos < 0 || eos >= vocab) {
            fprintf(stderr, "pagoda-mkmodel: --mute-special: the tokenizer has no EOS id inside its vocabulary\n");
            free(plan);
            goto err;
        }
        muted = xcalloc((size_t)vocab, 1);
        muted[eos] = 1;
        if (gguf_get_arr(tok, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, &types) == 0)
            for (uint64_t i = 0; i < types->arr_n && (int64_t)i < vocab; i++) {
                int32_t ty; /* GGUF arrays need not be 4-byte aligned */
                memcpy(&ty, (const uint8_t *)types->arr_data + i * sizeof ty, sizeof ty);
                muted[i] = muted[i] || ty == 2 || ty == 6; /* UNKNOWN, BYTE */
            }
        for (size_t i = 0; i < n; i++) /* output.weight (a rank head may follow it) */
            if (strcmp(plan[i].name, "output.weight") == 0)
                plan[i].zero_rows = muted;
    }
    uint64_t n_params = 0;
    for (size_t i = 0; i < n; i++) {
        gen_tensor_t *t = &plan[i];
        uint64_t ne[3] = {t->cols, t->rows / t->n_expert, t->n_expert};
        n_params += t->cols * t->rows;
        if (gguf_writer_add_tensor_fn(w, t->name, t->type, t->n_expert > 1 ? 3 : t->rows > 1 ? 2 : 1, ne,
                                      gen_fill, t)) {
            free(plan);
            free(muted);
            goto err;
        }
    }
    if (gguf_writer_write_file(w, o.out, err, sizeof err) != 0) {
        fprintf(stderr, "pagoda-mkmodel: %s: %s\n", o.out, err);
        free(plan);
        free(muted);
        goto err;
    }
    free(plan);
    free(muted);
    log_info("wrote %s: %s %s, %.1fM params, dim %lld, %lld layers, %lld/%lld heads, ffn %lld, "
             "vocab %lld, in %.2f s",
             o.out, o.arch, o.mix_q4_k_m ? "Q4_K_M" : ggml_type_name(o.type), (double)n_params / 1e6, (long long)o.dim,
             (long long)o.layers, (long long)o.heads, (long long)o.kv_heads, (long long)o.ffn,
             (long long)vocab, (double)(clock_now_us() - t0) / 1e6);
    gguf_writer_free(&w);
    gguf_close(&tok);
    free(builtin);
    return o.mmproj && write_mmproj(&o) != 0 ? 1 : 0;
err:
    gguf_writer_free(&w);
    gguf_close(&tok);
    free(builtin);
    return 1;
}
