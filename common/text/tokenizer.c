/* tokenizer.c — SentencePiece-style ("llama") and byte-level BPE ("gpt2")
 * tokenizers built from GGUF metadata. See tokenizer.h for the contract and
 * docs/TOKENIZERS.md for the behaviour in detail.
 *
 * Layout of the work:
 *   load     copy token texts into one blob, index them in an open-addressing
 *            hash (text -> id), precompute each token's output bytes ("piece"),
 *            build the (left id, right id) -> (rank, result id) merge table
 *            (gpt2), a byte trie of special-token texts, and compile the
 *            pre-tokenizer regexes with PCRE2 (JIT when available).
 *   encode   split the input at special-token texts (leftmost-longest), then
 *            tokenize every plain segment: SPM by score-driven merges over
 *            UTF-8 characters, BPE by rank-driven merges over bytes of each
 *            pre-tokenizer fragment. Both merge loops use a binary heap with
 *            lazy invalidation over a linked list of symbols: O(n log n) in the
 *            length of a word.
 */
#include "common/text/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errbuf.h"
#include "common/log.h"
#include "common/strbuf.h"
#include "common/utf8.h"
#include "common/xalloc.h"
#include "common/vec.h"

/* Hard limits on hostile metadata (far above any real vocabulary). */
#define MAX_VOCAB (1 << 24)
#define MAX_MERGES (1 << 25)
#define MAX_TOKEN_LEN (1 << 16) /* bytes of one token's text */

enum pre_kind { PRE_SPM, PRE_LLAMA3, PRE_QWEN2, PRE_GPT2, PRE_SMOLLM };

#define FLAG_EOG 1u

/* One node of the special-token trie: children are a sibling list. */
typedef struct trie_node {
    int32_t child;   /* first child node, -1 none */
    int32_t sibling; /* next sibling, -1 none */
    int32_t id;      /* token ending here, -1 none */
    uint8_t byte;    /* edge label from the parent */
} trie_node_t;

typedef struct merge_slot {
    int32_t left, right; /* key; left == -1 marks an empty slot */
    int32_t rank;        /* index in tokenizer.ggml.merges: lower merges first */
    int32_t result;      /* id of left+right */
} merge_slot_t;

struct tokenizer {
    enum tokenizer_model model;
    enum pre_kind pre;
    int32_t n_vocab;

    char *text;          /* every token's GGUF text back to back */
    uint32_t *text_off;  /* n_vocab + 1 offsets into text */
    char *piece;         /* every token's output bytes (see tokenizer_token_piece) */
    uint32_t *piece_off; /* n_vocab + 1 offsets into piece */
    float *score;        /* n_vocab; SPM merge priority (higher first) */
    uint8_t *type;       /* n_vocab; enum tokenizer_token_type (0 mapped to NORMAL) */
    uint8_t *flags;      /* n_vocab; FLAG_EOG */

    int32_t *map;        /* text -> id, open addressing, -1 empty; first id wins */
    uint32_t map_mask;
    int32_t *raw_map;    /* gpt2: piece bytes -> id of NORMAL tokens (ignore_merges) */
    uint32_t raw_mask;
    merge_slot_t *merges; /* gpt2 merge table */
    uint32_t merge_mask;

    /* SPM: id of <0xNN>; BPE: id of the byte-level character of byte b. -1 none. */
    int32_t byte_tok[256];

    trie_node_t *trie;   /* node 0 is the root; NULL when no special texts */
    int32_t n_trie;
    uint8_t trie_first[32]; /* bitmap of bytes that start a special text */

    int32_t bos, eos, eot, eom, unk;
    bool add_bos, add_eos, add_space_prefix, ignore_merges;
    bool has_user_space; /* SPM: some USER_DEFINED text holds ' ' (spm_lookup) */

    pcre2_code *re[2];   /* pre-tokenizer regexes, applied in order */
    int n_re;
};

/* ---------------------------------------------------------------- hashing */

static uint32_t hash_bytes(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a 64 */
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)p[i];
        h *= 1099511628211ull;
    }
    return (uint32_t)(h ^ (h >> 32));
}

static uint32_t hash_pair(int32_t a, int32_t b)
{
    uint64_t x = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return (uint32_t)x;
}

static uint32_t pow2_at_least(uint64_t n)
{
    uint32_t m = 16;
    while (m < n)
        m <<= 1;
    return m;
}

static const char *tok_text(const tokenizer_t *t, int32_t id, size_t *len)
{
    *len = t->text_off[id + 1] - t->text_off[id];
    return t->text + t->text_off[id];
}

/* Looks (p, n) up in a map whose entries are compared against either the
 * token texts (raw = false) or the pieces (raw = true). */
static int32_t map_find(const tokenizer_t *t, const int32_t *map, uint32_t mask, bool raw,
                        const char *p, size_t n)
{
    uint32_t h = hash_bytes(p, n) & mask;
    for (;;) {
        int32_t id = map[h];
        if (id < 0)
            return -1;
        const uint32_t *off = raw ? t->piece_off : t->text_off;
        const char *base = raw ? t->piece : t->text;
        if (off[id + 1] - off[id] == n && memcmp(base + off[id], p, n) == 0)
            return id;
        h = (h + 1) & mask;
    }
}

static void map_insert(const tokenizer_t *t, int32_t *map, uint32_t mask, bool raw, int32_t id)
{
    const uint32_t *off = raw ? t->piece_off : t->text_off;
    const char *base = raw ? t->piece : t->text;
    const char *p = base + off[id];
    size_t n = off[id + 1] - off[id];
    uint32_t h = hash_bytes(p, n) & mask;
    for (; map[h] >= 0; h = (h + 1) & mask) {
        int32_t o = map[h];
        if (off[o + 1] - off[o] == n && memcmp(base + off[o], p, n) == 0)
            return; /* duplicate text: the lowest id keeps it */
    }
    map[h] = id;
}

static const merge_slot_t *merge_find(const tokenizer_t *t, int32_t a, int32_t b)
{
    uint32_t h = hash_pair(a, b) & t->merge_mask;
    for (;;) {
        const merge_slot_t *s = &t->merges[h];
        if (s->left < 0)
            return NULL;
        if (s->left == a && s->right == b)
            return s;
        h = (h + 1) & t->merge_mask;
    }
}

/* GPT-2 byte-level alphabet: printable Latin-1 bytes stand for themselves,
 * the other 68 bytes are mapped in order to U+0100.. so every byte has a
 * visible, non-space character. */
static void bytelevel_tables(uint32_t cp_of_byte[256], int16_t byte_of_cp[324])
{
    for (int i = 0; i < 324; i++)
        byte_of_cp[i] = -1;
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) {
        bool self = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
        cp_of_byte[b] = self ? (uint32_t)b : next++;
        byte_of_cp[cp_of_byte[b]] = (int16_t)b;
    }
}

/* ---------------------------------------------------------------- load helpers */

/* Optional token id key: absent or "none" (-1, 0xFFFFFFFF) -> -1; present
 * and in range -> the id; anything else is an error. */
static int get_opt_id(const gguf_t *g, const char *key, int32_t n_vocab, int32_t *out, char *err,
                      size_t errlen)
{
    *out = -1;
    const gguf_kv_t *kv = gguf_find_kv(g, key);
    if (!kv)
        return 0;
    int64_t v;
    if (gguf_get_int(g, key, &v) != 0) {
        errbuf_set(err, errlen, "%s: not an integer", key);
        return -1;
    }
    if (v == -1 || v == 0xffffffffll)
        return 0;
    if (v < 0 || v >= n_vocab) {
        errbuf_set(err, errlen, "%s = %lld out of range (n_vocab %d)", key, (long long)v, n_vocab);
        return -1;
    }
    *out = (int32_t)v;
    return 0;
}

static int get_opt_bool(const gguf_t *g, const char *key, bool def, bool *out, char *err, size_t errlen)
{
    *out = def;
    if (!gguf_find_kv(g, key))
        return 0;
    if (gguf_get_bool(g, key, out) != 0) {
        errbuf_set(err, errlen, "%s: not a bool", key);
        return -1;
    }
    return 0;
}

static bool str_is(gguf_str_t s, const char *c) { return gguf_str_eq(s, c); }

/* "<0xNN>" -> NN, else -1 */
static int parse_byte_token(const char *p, size_t n)
{
    if (n != 6 || memcmp(p, "<0x", 3) != 0 || p[5] != '>')
        return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = p[i];
        int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'A' && c <= 'F') ? c - 'A' + 10
              : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

static const char *const k_pre_llama3[] = {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1",
                                           "pixtral", "midm-2.0", "lfm2", NULL};
static const char *const k_pre_qwen2[] = {"qwen2", "deepseek-r1-qwen", "megrez", "stablelm2", NULL};
static const char *const k_pre_gpt2[] = {"gpt-2", "gpt2", "phi-2", "mpt", "olmo", NULL};
static const char *const k_pre_smollm[] = {"smollm", "starcoder", "refact", "command-r", "codeshell",
                                           "exaone", "minerva-7b", NULL};

static bool in_list(gguf_str_t s, const char *const *list)
{
    for (; *list; list++)
        if (str_is(s, *list))
            return true;
    return false;
}

/* Pre-tokenizer regexes. The llama3/qwen2 ones are the tokenizer.json
 * patterns with the case-insensitive contraction group spelled out in ASCII
 * (as tokenizers do when their engine lacks inline flags); the gpt2 one is
 * OpenAI's GPT-2 pattern. */
static const char k_re_llama3[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char k_re_qwen2[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char k_re_gpt2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char k_re_digit[] = "\\p{N}";

static pcre2_code *compile_re(const char *pat, char *err, size_t errlen)
{
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &ec, &eo, NULL);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        errbuf_set(err, errlen, "pre-tokenizer regex: %s at %zu", (const char *)msg, (size_t)eo);
        return NULL;
    }
    /* JIT is an optimisation only: the interpreter gives the same matches. */
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    return re;
}

static void trie_add(tokenizer_t *t, int32_t *cap, int32_t id)
{
    size_t n;
    const uint8_t *p = (const uint8_t *)tok_text(t, id, &n);
    int32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t c = t->trie[node].child;
        while (c >= 0 && t->trie[c].byte != p[i])
            c = t->trie[c].sibling;
        if (c < 0) {
            vec_reserve(t->trie, *cap, (size_t)t->n_trie + 1);
            c = t->n_trie++;
            t->trie[c] = (trie_node_t){.child = -1, .sibling = t->trie[node].child, .id = -1, .byte = p[i]};
            t->trie[node].child = c;
        }
        node = c;
    }
    if (t->trie[node].id < 0)
        t->trie[node].id = id;
    t->trie_first[p[0] >> 3] |= (uint8_t)(1u << (p[0] & 7));
}

/* Token output bytes, appended to b. */
static void build_piece(tokenizer_t *t, int32_t id, const int16_t byte_of_cp[324], strbuf_t *b)
{
    size_t n;
    const char *p = tok_text(t, id, &n);
    strbuf_reserve(b, n + 8);
    char *o = b->s + b->len;
    size_t k = 0;
    int type = t->type[id];
    if (type == TOKENIZER_TOKEN_UNUSED) {
        /* nothing */
    } else if (type == TOKENIZER_TOKEN_BYTE && parse_byte_token(p, n) >= 0) {
        o[k++] = (char)parse_byte_token(p, n);
    } else if (type != TOKENIZER_TOKEN_NORMAL) {
        memcpy(o, p, n); /* CONTROL/UNKNOWN/USER_DEFINED: as stored */
        k = n;
    } else if (t->model == TOKENIZER_MODEL_SPM) {
        for (size_t i = 0; i < n;) {
            if (i + 3 <= n && (uint8_t)p[i] == 0xe2 && (uint8_t)p[i + 1] == 0x96 && (uint8_t)p[i + 2] == 0x81) {
                o[k++] = ' ';
                i += 3;
            } else {
                o[k++] = p[i++];
            }
        }
    } else {
        /* byte-level: each character of the text is one byte */
        for (size_t i = 0; i < n;) {
            size_t cl = utf8_char((const uint8_t *)p + i, n - i, NULL);
            if (cl == 0) {
                o[k++] = p[i++]; /* not UTF-8: copy the byte */
                continue;
            }
            uint32_t cp = 0;
            const uint8_t *q = (const uint8_t *)p + i;
            if (cl == 1) cp = q[0];
            else if (cl == 2) cp = ((q[0] & 0x1fu) << 6) | (q[1] & 0x3fu);
            else if (cl == 3) cp = ((q[0] & 0x0fu) << 12) | ((q[1] & 0x3fu) << 6) | (q[2] & 0x3fu);
            else cp = 0x110000;
            if (cp < 324 && byte_of_cp[cp] >= 0) {
                o[k++] = (char)byte_of_cp[cp];
            } else {
                memcpy(o + k, p + i, cl); /* outside the alphabet: as stored */
                k += cl;
            }
            i += cl;
        }
    }
    strbuf_setlen(b, b->len + k);
}

static const char *const k_eot_names[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
                                          "<|endoftext|>", "<EOT>", NULL};
static const char *const k_eog_names[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
                                          "<|endoftext|>", "<EOT>", "<|end_of_text|>", "<|eom_id|>",
                                          "</s>", NULL};

static bool is_marker_type(int type)
{
    return type == TOKENIZER_TOKEN_CONTROL || type == TOKENIZER_TOKEN_USER_DEFINED;
}

/* ---------------------------------------------------------------- load
 *
 * tokenizer_from_gguf runs the stages below in order; each reads what the
 * earlier ones filled in and returns 0, or -1 with err set (the caller
 * frees the half-built tokenizer). */

/* tokenizer.ggml.model → t->model (and SPM's pre-tokenizer) */
static int load_model(tokenizer_t *t, const gguf_t *g, char *err, size_t errlen)
{
    gguf_str_t model;
    if (gguf_get_str(g, "tokenizer.ggml.model", &model) != 0) {
        errbuf_set(err, errlen, "tokenizer.ggml.model missing or not a string");
        return -1;
    }
    if (str_is(model, "llama")) {
        t->model = TOKENIZER_MODEL_SPM;
        t->pre = PRE_SPM;
    } else if (str_is(model, "gpt2")) {
        t->model = TOKENIZER_MODEL_BPE;
    } else {
        errbuf_set(err, errlen, "tokenizer model '%.*s' not supported (supported: llama, gpt2)",
               (int)(model.len > 64 ? 64 : model.len), model.ptr);
        return -1;
    }
    return 0;
}

/* tokenizer.ggml.tokens → n_vocab, text, text_off */
static int load_tokens(tokenizer_t *t, const gguf_t *g, char *err, size_t errlen)
{
    const gguf_kv_t *tokens;
    if (gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &tokens) != 0) {
        errbuf_set(err, errlen, "tokenizer.ggml.tokens missing or not an array of strings");
        return -1;
    }
    if (tokens->arr_n == 0 || tokens->arr_n > MAX_VOCAB) {
        errbuf_set(err, errlen, "tokenizer.ggml.tokens: %llu tokens (1..%d allowed)",
               (unsigned long long)tokens->arr_n, MAX_VOCAB);
        return -1;
    }
    int32_t n = t->n_vocab = (int32_t)tokens->arr_n;
    uint64_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        if (tokens->arr_str[i].len > MAX_TOKEN_LEN) {
            errbuf_set(err, errlen, "token %d: text of %llu bytes (max %d)", i,
                   (unsigned long long)tokens->arr_str[i].len, MAX_TOKEN_LEN);
            return -1;
        }
        total += tokens->arr_str[i].len;
    }
    if (total > UINT32_MAX / 2) {
        errbuf_set(err, errlen, "tokenizer.ggml.tokens: %llu bytes of text", (unsigned long long)total);
        return -1;
    }
    t->text = xmalloc(total + 1);
    t->text_off = xmalloc(((size_t)n + 1) * sizeof *t->text_off);
    {
        uint32_t off = 0;
        for (int32_t i = 0; i < n; i++) {
            t->text_off[i] = off;
            memcpy(t->text + off, tokens->arr_str[i].ptr, tokens->arr_str[i].len);
            off += (uint32_t)tokens->arr_str[i].len;
        }
        t->text_off[n] = off;
    }
    return 0;
}

/* tokenizer.ggml.token_type → type (all NORMAL when absent); flags zeroed */
static int load_types(tokenizer_t *t, const gguf_t *g, char *err, size_t errlen)
{
    int32_t n = t->n_vocab;
    t->type = xmalloc((size_t)n);
    t->flags = xcalloc((size_t)n, 1);
    const gguf_kv_t *kv = gguf_find_kv(g, "tokenizer.ggml.token_type");
    if (kv) {
        if (kv->type != GGUF_TYPE_ARRAY || kv->arr_n != (uint64_t)n) {
            errbuf_set(err, errlen, "tokenizer.ggml.token_type: expected an array of %d integers", n);
            return -1;
        }
        for (int32_t i = 0; i < n; i++) {
            int64_t v;
            if (gguf_arr_get_int(kv, (uint64_t)i, &v) != 0 || v < 0 || v > 6) {
                errbuf_set(err, errlen, "tokenizer.ggml.token_type[%d]: not a type 0..6", i);
                return -1;
            }
            t->type[i] = v == 0 ? TOKENIZER_TOKEN_NORMAL : (uint8_t)v;
        }
    } else {
        memset(t->type, TOKENIZER_TOKEN_NORMAL, (size_t)n);
    }
    return 0;
}

/* tokenizer.ggml.scores → score (zeros when absent) */
static int load_scores(tokenizer_t *t, const gguf_t *g, char *err, size_t errlen)
{
    int32_t n = t->n_vocab;
    t->score = xcalloc((size_t)n, sizeof *t->score);
    const gguf_kv_t *kv = gguf_find_kv(g, "tokenizer.ggml.scores");
    if (kv) {
        if (kv->type != GGUF_TYPE_ARRAY || kv->arr_n != (uint64_t)n) {
            errbuf_set(err, errlen, "tokenizer.ggml.scores: expected an array of %d floats", n);
            return -1;
        }
        for (int32_t i = 0; i < n; i++) {
            double v;
            if (gguf_arr_get_float(kv, (uint64_t)i, &v) != 0 || v != v) {
                errbuf_set(err, errlen, "tokenizer.ggml.scores[%d]: not a number", i);
                return -1;
            }
            t->score[i] = (float)v;
        }
    }
    return 0;
}

/* text → id map */
static void build_map(tokenizer_t *t)
{
    int32_t n = t->n_vocab;
    t->map_mask = pow2_at_least(2ull * (uint64_t)n) - 1;
    t->map = xmalloc(((size_t)t->map_mask + 1) * sizeof *t->map);
    memset(t->map, 0xff, ((size_t)t->map_mask + 1) * sizeof *t->map);
    for (int32_t i = 0; i < n; i++)
        map_insert(t, t->map, t->map_mask, false, i);
}

/* special ids (bos, eos, eot, eom, unk), each optional */
static int load_ids(tokenizer_t *t, const gguf_t *g, char *err, size_t errlen)
{
    int32_t n = t->n_vocab;
    if (get_opt_id(g, "tokenizer.ggml.bos_token_id", n, &t->bos, err, errlen) ||
        get_opt_id(g, "tokenizer.ggml.eos_token_id", n, &t->eos, err, errlen) ||
        get_opt_id(g, "tokenizer.ggml.eot_token_id", n, &t->eot, err, errlen) ||
        get_opt_id(g, "tokenizer.ggml.eom_token_id", n, &t->eom, err, errlen) ||
        get_opt_id(g, "tokenizer.ggml.unknown_token_id", n, &t->unk, err, errlen))
        return -1;
    return 0;
}

/* tokenizer.ggml.pre → the BPE pre-tokenizer and its regexes */
static int load_pre(tokenizer_t *t, const gguf_t *g, char *err, size_t errlen)
{
    if (t->model == TOKENIZER_MODEL_BPE) {
        gguf_str_t pre = {0};
        bool has_pre = gguf_find_kv(g, "tokenizer.ggml.pre") != NULL;
        if (has_pre && gguf_get_str(g, "tokenizer.ggml.pre", &pre) != 0) {
            errbuf_set(err, errlen, "tokenizer.ggml.pre: not a string");
            return -1;
        }
        if (!has_pre || str_is(pre, "default")) {
            log_warn("tokenizer: no tokenizer.ggml.pre; using the GPT-2 pre-tokenizer");
            t->pre = PRE_GPT2;
        } else if (in_list(pre, k_pre_llama3)) {
            t->pre = PRE_LLAMA3;
        } else if (in_list(pre, k_pre_qwen2)) {
            t->pre = PRE_QWEN2;
        } else if (in_list(pre, k_pre_gpt2)) {
            t->pre = PRE_GPT2;
        } else if (in_list(pre, k_pre_smollm)) {
            t->pre = PRE_SMOLLM;
        } else {
            errbuf_set(err, errlen,
                   "pre-tokenizer '%.*s' not supported (supported: llama3/llama-bpe, qwen2, gpt2, smollm "
                   "and their aliases; see docs/TOKENIZERS.md)",
                   (int)(pre.len > 64 ? 64 : pre.len), pre.ptr);
            return -1;
        }
        t->ignore_merges = t->pre == PRE_LLAMA3;
        const char *p0 = t->pre == PRE_LLAMA3 ? k_re_llama3 : t->pre == PRE_QWEN2 ? k_re_qwen2
                       : t->pre == PRE_SMOLLM ? k_re_digit : k_re_gpt2;
        if (!(t->re[t->n_re++] = compile_re(p0, err, errlen)))
            return -1;
        if (t->pre == PRE_SMOLLM && !(t->re[t->n_re++] = compile_re(k_re_gpt2, err, errlen)))
            return -1;
    }
    return 0;
}

/* add_bos / add_eos / add_space_prefix, checked against the special ids */
static int load_add_flags(tokenizer_t *t, const gguf_t *g, char *err, size_t errlen)
{
    bool def_bos = t->model == TOKENIZER_MODEL_SPM || t->pre == PRE_LLAMA3;
    bool has_add_bos = gguf_find_kv(g, "tokenizer.ggml.add_bos_token") != NULL;
    if (get_opt_bool(g, "tokenizer.ggml.add_bos_token", def_bos, &t->add_bos, err, errlen) ||
        get_opt_bool(g, "tokenizer.ggml.add_eos_token", false, &t->add_eos, err, errlen) ||
        get_opt_bool(g, "tokenizer.ggml.add_space_prefix", t->model == TOKENIZER_MODEL_SPM,
                     &t->add_space_prefix, err, errlen))
        return -1;
    if (t->model == TOKENIZER_MODEL_BPE)
        t->add_space_prefix = false;
    if (t->add_bos && t->bos < 0) {
        if (has_add_bos) {
            errbuf_set(err, errlen, "tokenizer.ggml.add_bos_token is true but there is no BOS token");
            return -1;
        }
        t->add_bos = false;
    }
    if (t->add_eos && t->eos < 0) {
        errbuf_set(err, errlen, "tokenizer.ggml.add_eos_token is true but there is no EOS token");
        return -1;
    }
    return 0;
}

/* end of turn (by name when the file names none) and end-of-generation flags */
static void mark_eog(tokenizer_t *t)
{
    if (t->eot < 0)
        for (const char *const *nm = k_eot_names; *nm && t->eot < 0; nm++) {
            int32_t id = tokenizer_find(t, *nm, strlen(*nm));
            if (id >= 0 && is_marker_type(t->type[id]))
                t->eot = id;
        }
    if (t->eos >= 0) t->flags[t->eos] |= FLAG_EOG;
    if (t->eot >= 0) t->flags[t->eot] |= FLAG_EOG;
    if (t->eom >= 0) t->flags[t->eom] |= FLAG_EOG;
    for (const char *const *nm = k_eog_names; *nm; nm++) {
        int32_t id = tokenizer_find(t, *nm, strlen(*nm));
        if (id >= 0 && is_marker_type(t->type[id]))
            t->flags[id] |= FLAG_EOG;
    }
}

/* byte → token: SPM's <0xNN> tokens, or gpt2's byte-level alphabet */
static int load_byte_tokens(tokenizer_t *t, const uint32_t cp_of_byte[256], char *err, size_t errlen)
{
    int32_t n = t->n_vocab;
    for (int b = 0; b < 256; b++)
        t->byte_tok[b] = -1;
    if (t->model == TOKENIZER_MODEL_SPM) {
        for (int32_t i = 0; i < n; i++) {
            if (t->type[i] != TOKENIZER_TOKEN_BYTE)
                continue;
            size_t len;
            const char *p = tok_text(t, i, &len);
            int b = parse_byte_token(p, len);
            if (b < 0) {
                errbuf_set(err, errlen, "token %d is of type BYTE but its text is not <0xNN>", i);
                return -1;
            }
            if (t->byte_tok[b] < 0)
                t->byte_tok[b] = i;
        }
        if (t->unk < 0)
            for (int b = 0; b < 256; b++)
                if (t->byte_tok[b] < 0) {
                    errbuf_set(err, errlen, "llama vocabulary has no <0x%02X> byte token and no unknown token", b);
                    return -1;
                }
    } else {
        for (int b = 0; b < 256; b++) {
            char u[4];
            size_t k = utf8_put(cp_of_byte[b], u);
            int32_t id = tokenizer_find(t, u, k);
            if (id < 0 || t->type[id] != TOKENIZER_TOKEN_NORMAL) {
                errbuf_set(err, errlen, "gpt2 vocabulary lacks the byte-level token for byte 0x%02X", b);
                return -1;
            }
            t->byte_tok[b] = id;
        }
    }
    return 0;
}

/* each token's output bytes (piece, piece_off) */
static void build_pieces(tokenizer_t *t, const int16_t byte_of_cp[324])
{
    int32_t n = t->n_vocab;
    strbuf_t b = STRBUF_INIT;
    strbuf_reserve(&b, (size_t)t->text_off[n] + 64);
    t->piece_off = xmalloc(((size_t)n + 1) * sizeof *t->piece_off);
    for (int32_t i = 0; i < n; i++) {
        t->piece_off[i] = (uint32_t)b.len;
        build_piece(t, i, byte_of_cp, &b);
    }
    t->piece_off[n] = (uint32_t)b.len;
    t->piece = strbuf_take(&b);
}

/* gpt2: merges, and the piece map for whole-word lookups */
static int load_merges(tokenizer_t *t, const gguf_t *g, char *err, size_t errlen)
{
    int32_t n = t->n_vocab;
    if (t->model != TOKENIZER_MODEL_BPE)
        return 0;
    const gguf_kv_t *mg;
    if (gguf_get_arr(g, "tokenizer.ggml.merges", GGUF_TYPE_STRING, &mg) != 0) {
        errbuf_set(err, errlen, "gpt2 tokenizer: tokenizer.ggml.merges missing or not an array of strings");
        return -1;
    }
    if (mg->arr_n > MAX_MERGES) {
        errbuf_set(err, errlen, "tokenizer.ggml.merges: %llu entries (max %d)",
               (unsigned long long)mg->arr_n, MAX_MERGES);
        return -1;
    }
    t->merge_mask = pow2_at_least(2 * mg->arr_n) - 1;
    t->merges = xmalloc(((size_t)t->merge_mask + 1) * sizeof *t->merges);
    for (size_t i = 0; i <= t->merge_mask; i++)
        t->merges[i].left = -1;
    char *cat = xmalloc(2 * MAX_TOKEN_LEN + 1);
    uint64_t skipped = 0;
    for (uint64_t r = 0; r < mg->arr_n; r++) {
        gguf_str_t s = mg->arr_str[r];
        const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
        if (!sp) {
            free(cat);
            errbuf_set(err, errlen, "tokenizer.ggml.merges[%llu]: no space between the two parts",
                   (unsigned long long)r);
            return -1;
        }
        size_t ll = (size_t)(sp - s.ptr), rl = s.len - ll - 1;
        int32_t a = tokenizer_find(t, s.ptr, ll), b = tokenizer_find(t, sp + 1, rl);
        int32_t c = -1;
        if (a >= 0 && b >= 0 && ll + rl <= 2 * MAX_TOKEN_LEN) {
            memcpy(cat, s.ptr, ll);
            memcpy(cat + ll, sp + 1, rl);
            c = tokenizer_find(t, cat, ll + rl);
        }
        if (c < 0 || t->type[a] != TOKENIZER_TOKEN_NORMAL || t->type[b] != TOKENIZER_TOKEN_NORMAL ||
            t->type[c] != TOKENIZER_TOKEN_NORMAL) {
            skipped++;
            continue;
        }
        uint32_t h = hash_pair(a, b) & t->merge_mask;
        while (t->merges[h].left >= 0 && !(t->merges[h].left == a && t->merges[h].right == b))
            h = (h + 1) & t->merge_mask;
        if (t->merges[h].left < 0) /* a duplicate pair keeps its first (lowest) rank */
            t->merges[h] = (merge_slot_t){.left = a, .right = b, .rank = (int32_t)r, .result = c};
    }
    free(cat);
    if (skipped)
        log_warn("tokenizer: %llu merges name tokens that are not normal vocabulary entries; ignored",
                 (unsigned long long)skipped);
    if (t->ignore_merges) {
        t->raw_mask = pow2_at_least(2ull * (uint64_t)n) - 1;
        t->raw_map = xmalloc(((size_t)t->raw_mask + 1) * sizeof *t->raw_map);
        memset(t->raw_map, 0xff, ((size_t)t->raw_mask + 1) * sizeof *t->raw_map);
        for (int32_t i = 0; i < n; i++)
            if (t->type[i] == TOKENIZER_TOKEN_NORMAL)
                map_insert(t, t->raw_map, t->raw_mask, true, i);
    }
    return 0;
}

/* the trie of special tokens' texts (matched before pre-tokenizing) */
static void build_special_trie(tokenizer_t *t)
{
    int32_t n = t->n_vocab;
    int32_t cap = 64;
    for (int32_t i = 0; i < n; i++) {
        int ty = t->type[i];
        if ((ty != TOKENIZER_TOKEN_CONTROL && ty != TOKENIZER_TOKEN_UNKNOWN &&
             ty != TOKENIZER_TOKEN_USER_DEFINED) || t->text_off[i + 1] == t->text_off[i])
            continue;
        if (ty == TOKENIZER_TOKEN_USER_DEFINED &&
            memchr(t->text + t->text_off[i], ' ', t->text_off[i + 1] - t->text_off[i]))
            t->has_user_space = true;
        if (!t->trie) {
            t->trie = xmalloc((size_t)cap * sizeof *t->trie);
            t->trie[0] = (trie_node_t){.child = -1, .sibling = -1, .id = -1, .byte = 0};
            t->n_trie = 1;
        }
        trie_add(t, &cap, i);
    }
}

tokenizer_t *tokenizer_from_gguf(const gguf_t *g, char *err, size_t errlen)
{
    tokenizer_t *t = xcalloc(1, sizeof *t);
    int16_t byte_of_cp[324];
    uint32_t cp_of_byte[256];
    bytelevel_tables(cp_of_byte, byte_of_cp);
    if (load_model(t, g, err, errlen) || load_tokens(t, g, err, errlen) || load_types(t, g, err, errlen) ||
        load_scores(t, g, err, errlen))
        goto err;
    build_map(t);
    if (load_ids(t, g, err, errlen) || load_pre(t, g, err, errlen) || load_add_flags(t, g, err, errlen))
        goto err;
    mark_eog(t);
    if (load_byte_tokens(t, cp_of_byte, err, errlen))
        goto err;
    build_pieces(t, byte_of_cp);
    if (load_merges(t, g, err, errlen))
        goto err;
    build_special_trie(t);
    return t;

err:
    tokenizer_free(&t);
    return NULL;
}

void tokenizer_free(tokenizer_t **tp)
{
    tokenizer_t *t = *tp;
    if (!t)
        return;
    for (int i = 0; i < t->n_re; i++)
        pcre2_code_free(t->re[i]);
    free(t->text);
    free(t->text_off);
    free(t->piece);
    free(t->piece_off);
    free(t->score);
    free(t->type);
    free(t->flags);
    free(t->map);
    free(t->raw_map);
    free(t->merges);
    free(t->trie);
    free(t);
    *tp = NULL;
}

/* ---------------------------------------------------------------- encode */

/* A symbol is a span of the segment being merged; symbols form a list in
 * text order. len == 0 marks a symbol merged into its left neighbour. */
typedef struct sym {
    int32_t start, len;
    int32_t prev, next;
    int32_t id; /* BPE: current token id */
} sym_t;

/* Heap entry: a candidate merge of symbol `left` (low 32 bits of key) with
 * the symbol after it. The heap pops the smallest key: the high 32 bits
 * hold the priority (BPE: merge rank; SPM: the merged token's score mapped
 * to an order-reversing integer), so equal priorities pop leftmost first.
 * An entry is stale when either symbol changed after the push:
 *   SPM  x = combined byte length at push; the span [left.start, +x) is the
 *        merged text, so an equal length means the same candidate
 *   BPE  x, y = ids of the left and right symbol at push */
typedef struct cand {
    uint64_t key;
    int32_t x, y;
} cand_t;

typedef struct scratch {
    sym_t *sym;
    size_t sym_cap;
    cand_t *heap;
    size_t heap_n, heap_cap;
    strbuf_t norm;      /* SPM normalized segment */
    size_t *frag;       /* BPE fragments: (start, end) pairs */
    size_t frag_n, frag_cap;
    size_t *frag2;
    size_t frag2_cap;
    pcre2_match_data *md;
    /* output */
    int32_t *out;
    int max_out;
    int n;
} scratch_t;

static void emit(scratch_t *s, int32_t id)
{
    if (s->n < s->max_out)
        s->out[s->n] = id;
    s->n++;
}

static bool cand_before(const cand_t *a, const cand_t *b) { return a->key < b->key; }

static uint64_t cand_key(uint32_t prio, int32_t left) { return ((uint64_t)prio << 32) | (uint32_t)left; }

/* Higher score -> smaller priority value, preserving the order of floats. */
static uint32_t score_prio(float score)
{
    uint32_t u;
    memcpy(&u, &score, sizeof u);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u); /* ascending with the float */
    return ~u;
}

static void heap_push(scratch_t *s, cand_t c)
{
    if (s->heap_n == s->heap_cap) {
        s->heap_cap = s->heap_cap ? 2 * s->heap_cap : 64;
        s->heap = xrealloc(s->heap, s->heap_cap * sizeof *s->heap);
    }
    size_t i = s->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_before(&c, &s->heap[p]))
            break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = c;
}

static cand_t heap_pop(scratch_t *s)
{
    cand_t top = s->heap[0];
    cand_t last = s->heap[--s->heap_n];
    size_t i = 0, n = s->heap_n;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const cand_t *best = &last;
        if (l < n && cand_before(&s->heap[l], best)) { m = l; best = &s->heap[l]; }
        if (r < n && cand_before(&s->heap[r], best)) { m = r; }
        if (m == i)
            break;
        s->heap[i] = s->heap[m];
        i = m;
    }
    if (n > 0)
        s->heap[i] = last;
    return top;
}

static void grow_syms(scratch_t *s, size_t n)
{
    if (n > s->sym_cap) {
        s->sym_cap = n + n / 2 + 16;
        s->sym = xrealloc(s->sym, s->sym_cap * sizeof *s->sym);
    }
}

/* ---- SPM */

static bool spm_mergeable(int type)
{
    return type == TOKENIZER_TOKEN_NORMAL || type == TOKENIZER_TOKEN_USER_DEFINED;
}
static bool spm_final(int type)
{
    return type == TOKENIZER_TOKEN_NORMAL || type == TOKENIZER_TOKEN_USER_DEFINED;
}

/* The token a merge (or a final symbol) of normalized text p[0..n) may be:
 * a NORMAL token with that text, else a USER_DEFINED one whose text is p
 * with every "▁" turned back into ' ' — llama.cpp's converter stores
 * Gemma's whitespace-run pieces ("▁▁" ...) so, "pre-normalized", and the
 * special-text split only meets them in raw text; this catches the runs a
 * literal U+2581 in the input makes (SentencePiece and Hugging Face map
 * those to the same pieces). -1 when neither exists. */
static int32_t spm_lookup(const tokenizer_t *t, const char *p, size_t n)
{
    int32_t id = map_find(t, t->map, t->map_mask, false, p, n);
    if (id >= 0 || !t->has_user_space || n > 512 || !memmem(p, n, "\xe2\x96\x81", 3))
        return id;
    char buf[512];
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        if (i + 3 <= n && memcmp(p + i, "\xe2\x96\x81", 3) == 0) {
            buf[m++] = ' ';
            i += 3;
        } else {
            buf[m++] = p[i++];
        }
    }
    id = map_find(t, t->map, t->map_mask, false, buf, m);
    return id >= 0 && t->type[id] == TOKENIZER_TOKEN_USER_DEFINED ? id : -1;
}

static void spm_try_pair(const tokenizer_t *t, scratch_t *s, int32_t l, int32_t r)
{
    if (l < 0 || r < 0)
        return;
    const sym_t *a = &s->sym[l], *b = &s->sym[r];
    int32_t id = spm_lookup(t, s->norm.s + a->start, (size_t)(a->len + b->len));
    if (id < 0 || !spm_mergeable(t->type[id]))
        return;
    heap_push(s, (cand_t){.key = cand_key(score_prio(t->score[id]), l), .x = a->len + b->len});
}

static void spm_segment(const tokenizer_t *t, scratch_t *s, const char *text, size_t len, bool prefix)
{
    /* normalize: optional leading "▁", every ' ' -> "▁" */
    strbuf_reset(&s->norm);
    strbuf_reserve(&s->norm, 3 * (len + 1));
    size_t m = 0;
    if (prefix) {
        memcpy(s->norm.s, "\xe2\x96\x81", 3);
        m = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(s->norm.s + m, "\xe2\x96\x81", 3);
            m += 3;
        } else {
            s->norm.s[m++] = text[i];
        }
    }
    strbuf_setlen(&s->norm, m);
    if (m == 0)
        return;
    /* one symbol per UTF-8 character (an invalid byte is a symbol alone) */
    grow_syms(s, m);
    int32_t ns = 0;
    for (size_t i = 0; i < m;) {
        size_t cl = utf8_char((const uint8_t *)s->norm.s + i, m - i, NULL);
        if (cl == 0)
            cl = 1;
        s->sym[ns] = (sym_t){.start = (int32_t)i, .len = (int32_t)cl, .prev = ns - 1, .next = ns + 1};
        ns++;
        i += cl;
    }
    s->sym[ns - 1].next = -1;
    s->heap_n = 0;
    for (int32_t i = 0; i + 1 < ns; i++)
        spm_try_pair(t, s, i, i + 1);
    while (s->heap_n > 0) {
        cand_t c = heap_pop(s);
        int32_t l = (int32_t)(uint32_t)c.key;
        sym_t *a = &s->sym[l];
        if (a->len == 0 || a->next < 0 || a->len + s->sym[a->next].len != c.x)
            continue; /* stale: one side changed since the push */
        sym_t *b = &s->sym[a->next];
        a->len += b->len;
        b->len = 0;
        a->next = b->next;
        if (b->next >= 0)
            s->sym[b->next].prev = l;
        spm_try_pair(t, s, a->prev, l);
        spm_try_pair(t, s, l, a->next);
    }
    for (int32_t i = 0; i >= 0; i = s->sym[i].next) {
        const sym_t *y = &s->sym[i];
        const char *p = s->norm.s + y->start;
        int32_t id = spm_lookup(t, p, (size_t)y->len);
        if (id >= 0 && spm_final(t->type[id])) {
            emit(s, id);
            continue;
        }
        /* byte fallback: all bytes as <0xNN>, or one UNKNOWN if any is missing */
        bool all = true;
        for (int32_t k = 0; k < y->len; k++)
            all = all && t->byte_tok[(uint8_t)p[k]] >= 0;
        if (all) {
            for (int32_t k = 0; k < y->len; k++)
                emit(s, t->byte_tok[(uint8_t)p[k]]);
        } else {
            emit(s, t->unk);
        }
    }
}

/* ---- BPE */

static void bpe_try_pair(const tokenizer_t *t, scratch_t *s, int32_t l, int32_t r)
{
    if (l < 0 || r < 0)
        return;
    const merge_slot_t *m = merge_find(t, s->sym[l].id, s->sym[r].id);
    if (!m)
        return;
    heap_push(s, (cand_t){.key = cand_key((uint32_t)m->rank, l), .x = s->sym[l].id, .y = s->sym[r].id});
}

static void bpe_word(const tokenizer_t *t, scratch_t *s, const char *p, size_t len)
{
    if (len == 0)
        return;
    if (t->ignore_merges) {
        int32_t id = map_find(t, t->raw_map, t->raw_mask, true, p, len);
        if (id >= 0) {
            emit(s, id);
            return;
        }
    }
    if (len == 1) {
        emit(s, t->byte_tok[(uint8_t)p[0]]);
        return;
    }
    grow_syms(s, len);
    int32_t ns = (int32_t)len;
    for (int32_t i = 0; i < ns; i++)
        s->sym[i] = (sym_t){.start = i, .len = 1, .prev = i - 1, .next = i + 1,
                            .id = t->byte_tok[(uint8_t)p[i]]};
    s->sym[ns - 1].next = -1;
    s->heap_n = 0;
    for (int32_t i = 0; i + 1 < ns; i++)
        bpe_try_pair(t, s, i, i + 1);
    while (s->heap_n > 0) {
        cand_t c = heap_pop(s);
        int32_t l = (int32_t)(uint32_t)c.key;
        sym_t *a = &s->sym[l];
        if (a->len == 0 || a->id != c.x || a->next < 0 || s->sym[a->next].id != c.y)
            continue; /* stale: one side changed since the push */
        sym_t *b = &s->sym[a->next];
        a->id = merge_find(t, c.x, c.y)->result;
        a->len += b->len;
        b->len = 0;
        a->next = b->next;
        if (b->next >= 0)
            s->sym[b->next].prev = l;
        bpe_try_pair(t, s, a->prev, l);
        bpe_try_pair(t, s, l, a->next);
    }
    for (int32_t i = 0; i >= 0; i = s->sym[i].next)
        emit(s, s->sym[i].id);
}

static void frag_push(size_t **v, size_t *n, size_t *cap, size_t a, size_t b)
{
    if (*n + 2 > *cap) {
        *cap = *cap ? 2 * *cap : 64;
        *v = xrealloc(*v, *cap * sizeof **v);
    }
    (*v)[(*n)++] = a;
    (*v)[(*n)++] = b;
}

static void bpe_segment(const tokenizer_t *t, scratch_t *s, const char *text, size_t len)
{
    if (len == 0)
        return;
    s->frag_n = 0;
    frag_push(&s->frag, &s->frag_n, &s->frag_cap, 0, len);
    for (int r = 0; r < t->n_re; r++) {
        /* split every fragment into the regex's matches and the gaps between */
        size_t n2 = 0;
        for (size_t f = 0; f < s->frag_n; f += 2) {
            size_t fs = s->frag[f], fe = s->frag[f + 1];
            PCRE2_SPTR subj = (PCRE2_SPTR)(text + fs);
            size_t flen = fe - fs, pos = 0; /* pos: end of the last match */
            while (pos < flen) {
                int rc = pcre2_match(t->re[r], subj, flen, pos, 0, s->md, NULL);
                if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) /* JIT stack exhausted: use the interpreter */
                    rc = pcre2_match(t->re[r], subj, flen, pos, PCRE2_NO_JIT, s->md, NULL);
                if (rc < 0) {
                    if (rc != PCRE2_ERROR_NOMATCH)
                        log_warn("tokenizer: pre-tokenizer regex failed (%d); rest of a %zu-byte piece kept whole",
                                 rc, flen);
                    break; /* no further match: the rest is one gap */
                }
                PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
                size_t ms = ov[0], me = ov[1];
                /* An empty match cannot happen with the built-in patterns;
                 * stop rather than loop if it ever does. */
                if (ms < pos || me <= ms || me > flen)
                    break;
                if (ms > pos)
                    frag_push(&s->frag2, &n2, &s->frag2_cap, fs + pos, fs + ms);
                frag_push(&s->frag2, &n2, &s->frag2_cap, fs + ms, fs + me);
                pos = me;
            }
            if (pos < flen)
                frag_push(&s->frag2, &n2, &s->frag2_cap, fs + pos, fe);
        }
        size_t *tmp = s->frag;
        s->frag = s->frag2;
        s->frag2 = tmp;
        size_t tc = s->frag_cap;
        s->frag_cap = s->frag2_cap;
        s->frag2_cap = tc;
        s->frag_n = n2;
    }
    for (size_t f = 0; f < s->frag_n; f += 2)
        bpe_word(t, s, text + s->frag[f], s->frag[f + 1] - s->frag[f]);
}

/* Leftmost-longest special token starting at text[p]: its id (and *end),
 * or -1. */
static int32_t special_at(const tokenizer_t *t, const uint8_t *text, size_t len, size_t p,
                          bool parse_special, size_t *end)
{
    int32_t best = -1, node = 0;
    for (size_t q = p; q < len; q++) {
        int32_t c = t->trie[node].child;
        while (c >= 0 && t->trie[c].byte != text[q])
            c = t->trie[c].sibling;
        if (c < 0)
            break;
        node = c;
        int32_t id = t->trie[c].id;
        if (id >= 0 && (parse_special || t->type[id] == TOKENIZER_TOKEN_USER_DEFINED)) {
            best = id;
            *end = q + 1;
        }
    }
    return best;
}

static void encode_segment(const tokenizer_t *t, scratch_t *s, const char *text, size_t len,
                           bool after_special)
{
    if (len == 0)
        return;
    if (t->model == TOKENIZER_MODEL_SPM)
        spm_segment(t, s, text, len, t->add_space_prefix && after_special);
    else
        bpe_segment(t, s, text, len);
}

int tokenizer_encode(const tokenizer_t *t, const char *text, size_t len, bool add_special,
                     bool parse_special, int32_t *out, int max_out)
{
    if (len > TOKENIZER_MAX_TEXT)
        return -1;
    scratch_t s = {.out = out, .max_out = out ? max_out : 0};
    if (t->n_re > 0 && !(s.md = pcre2_match_data_create(1, NULL))) {
        log_error("tokenizer: out of memory for PCRE2 match data");
        abort();
    }
    if (add_special && t->add_bos)
        emit(&s, t->bos);
    const uint8_t *u = (const uint8_t *)text;
    size_t seg = 0;
    bool after_special = true; /* SPM: the first segment gets the space prefix */
    if (t->trie) {
        for (size_t p = 0; p < len;) {
            size_t end;
            int32_t id;
            if ((t->trie_first[u[p] >> 3] & (1u << (u[p] & 7))) &&
                (id = special_at(t, u, len, p, parse_special, &end)) >= 0) {
                if (p > seg) {
                    encode_segment(t, &s, text + seg, p - seg, after_special);
                    after_special = false;
                }
                emit(&s, id);
                after_special = true;
                p = seg = end;
                continue;
            }
            p++;
        }
    }
    if (len > seg)
        encode_segment(t, &s, text + seg, len - seg, after_special);
    if (add_special && t->add_eos)
        emit(&s, t->eos);
    free(s.sym);
    free(s.heap);
    strbuf_free(&s.norm);
    free(s.frag);
    free(s.frag2);
    if (s.md)
        pcre2_match_data_free(s.md);
    return s.n;
}

/* ---------------------------------------------------------------- decode and accessors */

const char *tokenizer_token_piece(const tokenizer_t *t, int32_t id, bool special, size_t *len)
{
    *len = 0;
    if (id < 0 || id >= t->n_vocab)
        return NULL;
    const char *p = t->piece + t->piece_off[id];
    int ty = t->type[id];
    if (!special && (ty == TOKENIZER_TOKEN_CONTROL || ty == TOKENIZER_TOKEN_UNKNOWN))
        return p;
    *len = t->piece_off[id + 1] - t->piece_off[id];
    return p;
}

size_t tokenizer_decode(const tokenizer_t *t, const int32_t *ids, int n, bool special, char *out, size_t cap)
{
    size_t used = 0;
    bool strip = t->model == TOKENIZER_MODEL_SPM && t->add_space_prefix;
    for (int i = 0; i < n; i++) {
        size_t k;
        const char *p = tokenizer_token_piece(t, ids[i], special, &k);
        if (k == 0)
            continue;
        if (strip && used == 0 && p[0] == ' ') {
            p++;
            k--;
        }
        strip = false;
        if (used < cap)
            memcpy(out + used, p, k <= cap - used ? k : cap - used);
        used += k;
    }
    return used;
}

int32_t tokenizer_find(const tokenizer_t *t, const char *text, size_t len)
{
    return map_find(t, t->map, t->map_mask, false, text, len);
}

const char *tokenizer_token_text(const tokenizer_t *t, int32_t id, size_t *len)
{
    *len = 0;
    if (id < 0 || id >= t->n_vocab)
        return NULL;
    return tok_text(t, id, len);
}

int tokenizer_token_type(const tokenizer_t *t, int32_t id)
{
    return id < 0 || id >= t->n_vocab ? 0 : t->type[id];
}

float tokenizer_token_score(const tokenizer_t *t, int32_t id)
{
    return id < 0 || id >= t->n_vocab ? 0.0f : t->score[id];
}

int32_t tokenizer_n_vocab(const tokenizer_t *t) { return t->n_vocab; }
enum tokenizer_model tokenizer_model(const tokenizer_t *t) { return t->model; }

const char *tokenizer_pre_name(const tokenizer_t *t)
{
    switch (t->pre) {
    case PRE_SPM: return "spm";
    case PRE_LLAMA3: return "llama3";
    case PRE_QWEN2: return "qwen2";
    case PRE_GPT2: return "gpt2";
    case PRE_SMOLLM: return "smollm";
    }
    return "?";
}

int32_t tokenizer_bos(const tokenizer_t *t) { return t->bos; }
int32_t tokenizer_eos(const tokenizer_t *t) { return t->eos; }
int32_t tokenizer_eot(const tokenizer_t *t) { return t->eot; }
int32_t tokenizer_unk(const tokenizer_t *t) { return t->unk; }
bool tokenizer_add_bos(const tokenizer_t *t) { return t->add_bos; }

bool tokenizer_is_eog(const tokenizer_t *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab && (t->flags[id] & FLAG_EOG);
}
