/* msg.c — init/clear and the validating decoder (mpread) of the message
 * bodies of the gateway⇄worker protocol; their encoder (msgpack-c) is
 * msg_encode.c's, the frames around them (tag, type) and ZeroMQ are
 * msg_frame.c's. The format is documented in msg.h; keep the three in
 * step. */
#include "proto/msg.h"

#include <math.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errbuf.h"
#include "common/strbuf.h"
#include "common/utf8.h"
#include "common/xalloc.h"
#include "proto/mpread.h"

/* ------------------------------------------------------------------------ */
/* init / clear                                                              */

void proto_msg_init(proto_msg_t *m, proto_type_t type)
{
    memset(m, 0, sizeof *m);
    m->type = type;
    if (type == PROTO_SUBMIT) {
        proto_knobs_default(&m->submit.sampling.knobs);
        m->submit.priority = PROTO_PRIO_NORMAL;
    }
    if (type == PROTO_LORA)
        m->lora.scale = 1.0;
}

void proto_msg_clear(proto_msg_t *m)
{
    switch (m->type) {
    case PROTO_REGISTER:
        free(m->reg.model);
        free(m->reg.replica);
        free(m->reg.host);
        for (uint32_t i = 0; m->reg.lora && i < m->reg.n_lora; i++)
            free(m->reg.lora[i].name);
        free(m->reg.lora);
        break;
    case PROTO_SUBMIT: {
        proto_submit_t *s = &m->submit;
        for (uint32_t i = 0; s->messages && i < s->n_messages; i++) {
            free(s->messages[i].role);
            free(s->messages[i].content);
            free(s->messages[i].tool_calls);
            free(s->messages[i].tool_call_id);
            for (uint32_t k = 0; s->messages[i].parts && k < s->messages[i].n_parts; k++)
                free(s->messages[i].parts[k].text);
            free(s->messages[i].parts);
        }
        free(s->messages);
        for (uint32_t i = 0; s->imgs && i < s->n_imgs; i++)
            free(s->imgs[i].rgb);
        free(s->imgs);
        free(s->tools);
        free(s->tool_choice);
        free(s->prompt);
        free(s->prompt_ids);
        free(s->grammar);
        free(s->sampling.logit_bias);
        for (uint32_t i = 0; s->stop && i < s->n_stop; i++)
            free(s->stop[i]);
        free(s->stop);
        free(s->resume);
        for (uint32_t i = 0; i < s->n_lora && i < PROTO_MAX_LORA; i++)
            free(s->lora[i].name);
        for (uint32_t i = 0; s->inputs && i < s->n_inputs; i++) {
            free(s->inputs[i].text);
            free(s->inputs[i].ids);
        }
        free(s->inputs);
        break;
    }
    case PROTO_EVENT: {
        proto_event_t *e = &m->event;
        free(e->text);
        free(e->ids);
        for (uint32_t i = 0; e->logprobs && i < e->n_logprobs; i++) {
            for (uint32_t j = 0; e->logprobs[i].top && j < e->logprobs[i].n_top; j++)
                free(e->logprobs[i].top[j].bytes);
            free(e->logprobs[i].top);
            free(e->logprobs[i].bytes);
        }
        free(e->logprobs);
        free(e->embedding);
        break;
    }
    case PROTO_KV:
        free(m->kv.add);
        free(m->kv.del);
        break;
    case PROTO_ERROR:
        free(m->error.message);
        break;
    case PROTO_LORA:
    case PROTO_LORA_ACK:
        free(m->lora.name);
        free(m->lora.path);
        free(m->lora.message);
        break;
    default:
        break;
    }
    memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------------------ */
/* decoder                                                                   */

typedef struct dec {
    mpread_t r;
    const char *field;   /* key being decoded, for error messages */
} dec_t;

/* One known key of a map; `bit` is its index in the table. */
typedef struct field {
    const char *key;
    bool required;
} field_t;

typedef int (*field_fn)(dec_t *d, void *obj, int idx);

static int fail(dec_t *d, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(dec_t *d, int status, const char *fmt, ...)
{
    char msg[80];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return mpread_fail(&d->r, status, "%s", msg);
}

/* Reads a map, calling fn for each known key; skips unknown keys; fails on
 * a non-string key, a duplicate key or a missing required key. */
static int read_map(dec_t *d, const field_t *fields, int n_fields, field_fn fn, void *obj)
{
    uint32_t n;
    if (mpread_map(&d->r, &n) < 0)
        return -1;
    uint64_t seen = 0;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *k;
        uint32_t kn;
        if (mpread_peek(&d->r) != MPREAD_STR && mpread_peek(&d->r) != MPREAD_NONE)
            return fail(d, PROTO_EFIELD, "map key is not a string");
        if (mpread_str(&d->r, &k, &kn) < 0)
            return -1;
        int idx = -1;
        for (int j = 0; j < n_fields; j++) {
            if (strlen(fields[j].key) == kn && memcmp(fields[j].key, k, kn) == 0) {
                idx = j;
                break;
            }
        }
        if (idx < 0) {
            if (mpread_skip(&d->r, PROTO_MAX_DEPTH) < 0)
                return -1;
            continue;
        }
        if (seen & (1ull << idx))
            return fail(d, PROTO_EFIELD, "duplicate key '%s'", fields[idx].key);
        seen |= 1ull << idx;
        const char *outer = d->field;
        d->field = fields[idx].key;
        if (fn(d, obj, idx) < 0)
            return -1;
        d->field = outer;
    }
    for (int j = 0; j < n_fields; j++)
        if (fields[j].required && !(seen & (1ull << j)))
            return fail(d, PROTO_EFIELD, "missing required key '%s'", fields[j].key);
    return 0;
}

static int get_uint(dec_t *d, uint64_t *v, uint64_t lo, uint64_t hi)
{
    if (mpread_uint(&d->r, v) < 0)
        return -1;
    if (*v < lo || *v > hi)
        return fail(d, PROTO_ERANGE, "%llu outside [%llu, %llu]", (unsigned long long)*v,
                    (unsigned long long)lo, (unsigned long long)hi);
    return 0;
}

static int get_u32(dec_t *d, uint32_t *v, uint32_t lo, uint32_t hi)
{
    uint64_t x;
    if (get_uint(d, &x, lo, hi) < 0)
        return -1;
    *v = (uint32_t)x;
    return 0;
}

/* Finite, within [lo, hi]; lo_open excludes lo itself. */
static int get_double(dec_t *d, double *v, double lo, double hi, bool lo_open)
{
    if (mpread_float(&d->r, v) < 0)
        return -1;
    if (!isfinite(*v))
        return fail(d, PROTO_ERANGE, "not a finite number");
    if (*v < lo || *v > hi || (lo_open && *v == lo))
        return fail(d, PROTO_ERANGE, "%g outside %c%g, %g]", *v, lo_open ? '(' : '[', lo, hi);
    return 0;
}

static int get_bool(dec_t *d, bool *v)
{
    return mpread_bool(&d->r, v);
}

/* A heap copy of a string of min..max bytes. */
static int get_str(dec_t *d, char **out, uint32_t *out_len, uint32_t min, uint32_t max)
{
    const uint8_t *s;
    uint32_t n;
    if (mpread_str(&d->r, &s, &n) < 0)
        return -1;
    if (n < min || n > max)
        return fail(d, PROTO_ERANGE, "string of %u bytes outside [%u, %u]", n, min, max);
    /* no NUL: the string is handed out as a C string */
    if (!utf8_valid(s, n) || memchr(s, 0, n))
        return fail(d, PROTO_ERANGE, "string is not valid UTF-8 or contains NUL");
    *out = xstrndup((const char *)s, n);
    if (out_len)
        *out_len = n;
    return 0;
}

static int get_bin(dec_t *d, uint8_t **out, uint32_t *out_len, uint32_t max)
{
    const uint8_t *s;
    uint32_t n;
    if (mpread_bin(&d->r, &s, &n) < 0)
        return -1;
    if (n > max)
        return fail(d, PROTO_ERANGE, "%u bytes, limit %u", n, max);
    *out = xmalloc(n);
    memcpy(*out, s, n);
    *out_len = n;
    return 0;
}

/* An array header with at most max elements. */
static int get_array(dec_t *d, uint32_t *n, uint32_t max)
{
    if (mpread_array(&d->r, n) < 0)
        return -1;
    if (*n > max)
        return fail(d, PROTO_ERANGE, "%u elements, limit %u", *n, max);
    return 0;
}

static int get_token(dec_t *d, int32_t *t)
{
    uint64_t v;
    if (get_uint(d, &v, 0, PROTO_MAX_TOKEN_ID) < 0)
        return -1;
    *t = (int32_t)v;
    return 0;
}

static int get_ids(dec_t *d, int32_t **ids, uint32_t *n_ids, uint32_t max)
{
    uint32_t n;
    if (get_array(d, &n, max) < 0)
        return -1;
    *ids = xmalloc((size_t)n * sizeof **ids);
    *n_ids = n;
    for (uint32_t i = 0; i < n; i++)
        if (get_token(d, &(*ids)[i]) < 0)
            return -1;
    return 0;
}

#define U31 0x7fffffffu
#define NFIELDS(t) ((int)(sizeof(t) / sizeof((t)[0])))

/* --- REGISTER --- */

static const field_t register_fields[] = {
    {"v", true},     {"model", true},   {"replica", true},   {"host", true},
    {"pid", true},   {"cap", true},     {"n_ctx", true},     {"n_vocab", true},
    {"kv_blocks", true}, {"block", true}, {"hb_ms", false}, {"vis", false},
    {"lora", false},
};

static const field_t reg_lora_fields[] = {{"name", true}, {"hash", true}, {"rank", true}, {"scale", true}};

static int reg_lora_field(dec_t *d, void *obj, int idx)
{
    proto_reg_lora_t *l = obj;
    switch (idx) {
    case 0: return get_str(d, &l->name, NULL, 1, PROTO_MAX_NAME);
    case 1: return get_uint(d, &l->hash, 0, UINT64_MAX);
    case 2: return get_u32(d, &l->rank, 1, PROTO_MAX_LORA_RANK);
    case 3: return get_double(d, &l->scale, -100, 100, false);
    }
    return -1;
}

static const field_t vis_fields[] = {{"size", true}, {"n_tok", true}, {"proj", true}, {"preproc", false}};

static int vis_field(dec_t *d, void *obj, int idx)
{
    proto_vis_t *v = obj;
    switch (idx) {
    case 0: return get_u32(d, &v->size, 1, PROTO_MAX_VIS_SIZE);
    case 1: return get_u32(d, &v->n_tok, 1, PROTO_MAX_VIS_TOKENS);
    case 2: {
        char *p = NULL;
        uint32_t n = 0;
        if (get_str(d, &p, &n, 1, PROTO_MAX_VIS_PROJ) < 0)
            return -1;
        memcpy(v->proj, p, n);
        v->proj[n] = 0;
        free(p);
        return 0;
    }
    case 3: return get_u32(d, &v->preproc, 0, PROTO_MAX_VIS_PREPROC);
    }
    return -1;
}

static int register_field(dec_t *d, void *obj, int idx)
{
    proto_register_t *r = obj;
    switch (idx) {
    case 0:
        if (get_u32(d, &r->version, 0, U31) < 0)
            return -1;
        if (r->version != PROTO_VERSION)
            return fail(d, PROTO_EVERSION, "protocol version %u, expected %d", r->version,
                        PROTO_VERSION);
        return 0;
    case 1: return get_str(d, &r->model, NULL, 1, PROTO_MAX_NAME);
    case 2: return get_str(d, &r->replica, NULL, 1, PROTO_MAX_NAME);
    case 3: return get_str(d, &r->host, NULL, 0, PROTO_MAX_NAME);
    case 4: return get_u32(d, &r->pid, 1, U31);
    case 5: return get_u32(d, &r->capacity, 1, PROTO_MAX_CAPACITY);
    case 6: return get_u32(d, &r->n_ctx, 1, PROTO_MAX_TOKENS);
    case 7: return get_u32(d, &r->n_vocab, 0, PROTO_MAX_TOKENS);
    case 8: return get_u32(d, &r->kv_blocks, 0, U31);
    case 9: return get_u32(d, &r->block_size, 1, PROTO_MAX_BLOCK);
    case 10: return get_u32(d, &r->heartbeat_ms, PROTO_MIN_HEARTBEAT_MS, PROTO_MAX_HEARTBEAT_MS);
    case 11:
        r->vis.has = true;
        return read_map(d, vis_fields, NFIELDS(vis_fields), vis_field, &r->vis);
    case 12: {
        uint32_t n;
        if (get_array(d, &n, PROTO_MAX_REG_LORA) < 0)
            return -1;
        if (n == 0)
            return fail(d, PROTO_ERANGE, "'lora' is empty");
        r->lora = xcalloc(n, sizeof *r->lora);
        for (uint32_t i = 0; i < n; i++) {
            r->n_lora = i + 1; /* freed from here on even when the map fails */
            if (read_map(d, reg_lora_fields, NFIELDS(reg_lora_fields), reg_lora_field, &r->lora[i]) < 0)
                return -1;
            for (uint32_t k = 0; k < i; k++)
                if (!strcmp(r->lora[k].name, r->lora[i].name))
                    return fail(d, PROTO_EFIELD, "'lora' names '%s' twice", r->lora[i].name);
        }
        return 0;
    }
    }
    return -1;
}

/* --- HEARTBEAT --- */

static const field_t load_fields[] = {
    {"run", true},  {"wait", true},    {"kv_used", true}, {"kv_total", true},
    {"pc_q", true}, {"pc_hit", true},  {"preempt", true}, {"gen_tok", true},
    {"prompt_tok", true}, {"free", true},
    {"pc_disk", false}, {"kv_evict", false}, {"kvd_state", false}, {"kvd_wb", false},
    {"kvd_rb", false}, {"kvd_evict", false}, {"kvd_rej", false}, {"kvd_used", false},
    {"sd_n", false}, {"sd_dt", false}, {"sd_acc", false}, {"stopped", false},
};

static int load_field(dec_t *d, void *obj, int idx)
{
    proto_load_t *l = obj;
    switch (idx) {
    case 0: return get_u32(d, &l->running, 0, U31);
    case 1: return get_u32(d, &l->waiting, 0, U31);
    case 2: return get_u32(d, &l->kv_blocks_used, 0, U31);
    case 3: return get_u32(d, &l->kv_blocks_total, 0, U31);
    case 4: return get_uint(d, &l->prefix_cache_queries, 0, UINT64_MAX);
    case 5: return get_uint(d, &l->prefix_cache_hits, 0, UINT64_MAX);
    case 6: return get_uint(d, &l->preemptions, 0, UINT64_MAX);
    case 7: return get_uint(d, &l->tokens_generated, 0, UINT64_MAX);
    case 8: return get_uint(d, &l->prompt_tokens, 0, UINT64_MAX);
    case 9: return get_u32(d, &l->free_slots, 0, U31);
    case 10: return get_uint(d, &l->prefix_cache_disk_hits, 0, UINT64_MAX);
    case 11: return get_uint(d, &l->kv_evictions, 0, UINT64_MAX);
    case 12: return get_u32(d, &l->kv_disk_state, 0, 2);
    case 13: return get_uint(d, &l->kv_disk_bytes_written, 0, UINT64_MAX);
    case 14: return get_uint(d, &l->kv_disk_bytes_read, 0, UINT64_MAX);
    case 15: return get_uint(d, &l->kv_disk_evictions, 0, UINT64_MAX);
    case 16: return get_uint(d, &l->kv_disk_rejected, 0, UINT64_MAX);
    case 17: return get_uint(d, &l->kv_disk_bytes_used, 0, UINT64_MAX);
    case 18: return get_uint(d, &l->spec_drafts, 0, UINT64_MAX);
    case 19: return get_uint(d, &l->spec_draft_tokens, 0, UINT64_MAX);
    case 20: return get_uint(d, &l->spec_accepted_tokens, 0, UINT64_MAX);
    case 21: return get_uint(d, &l->steps_stopped, 0, UINT64_MAX);
    }
    return -1;
}

static const field_t progress_fields[] = {
    {"steps", true}, {"busy", true}, {"stall_ms", true}, {"slow_ms", true},
};

static int progress_field(dec_t *d, void *obj, int idx)
{
    proto_progress_t *g = obj;
    switch (idx) {
    case 0: return get_uint(d, &g->steps, 0, UINT64_MAX);
    case 1: return get_bool(d, &g->busy);
    case 2: return get_u32(d, &g->stall_ms, 0, U31);
    case 3: return get_u32(d, &g->slow_ms, 0, U31);
    }
    return -1;
}

static const field_t heartbeat_fields[] = {
    {"seq", true}, {"hb_ms", false}, {"load", false}, {"prog", false},
};

static int heartbeat_field(dec_t *d, void *obj, int idx)
{
    proto_heartbeat_t *h = obj;
    switch (idx) {
    case 0: return get_uint(d, &h->seq, 0, UINT64_MAX);
    case 1:
        return get_u32(d, &h->heartbeat_ms, PROTO_MIN_HEARTBEAT_MS, PROTO_MAX_HEARTBEAT_MS);
    case 2:
        h->has_load = true;
        if (read_map(d, load_fields, NFIELDS(load_fields), load_field, &h->load) < 0)
            return -1;
        if (h->load.kv_blocks_used > h->load.kv_blocks_total)
            return fail(d, PROTO_ERANGE, "kv_used %u > kv_total %u", h->load.kv_blocks_used,
                        h->load.kv_blocks_total);
        if (h->load.prefix_cache_hits > h->load.prefix_cache_queries ||
            h->load.prefix_cache_disk_hits > h->load.prefix_cache_queries - h->load.prefix_cache_hits)
            return fail(d, PROTO_ERANGE, "pc_hit + pc_disk > pc_q");
        return 0;
    case 3:
        h->has_progress = true;
        if (read_map(d, progress_fields, NFIELDS(progress_fields), progress_field,
                     &h->progress) < 0)
            return -1;
        if (!h->progress.busy && h->progress.stall_ms)
            return fail(d, PROTO_ERANGE, "stall_ms %u while not busy", h->progress.stall_ms);
        return 0;
    }
    return -1;
}

/* --- SUBMIT --- */

static const field_t chat_fields[] = {
    {"role", true}, {"content", true}, {"tool_calls", false}, {"tool_call_id", false}, {"parts", false},
};

static int chat_field(dec_t *d, void *obj, int idx)
{
    proto_chat_msg_t *c = obj;
    switch (idx) {
    case 0: return get_str(d, &c->role, NULL, 1, PROTO_MAX_ROLE);
    case 1: return get_str(d, &c->content, NULL, 0, PROTO_MAX_PROMPT);
    case 2: return get_str(d, &c->tool_calls, NULL, 2, PROTO_MAX_PROMPT);
    case 3: return get_str(d, &c->tool_call_id, NULL, 0, PROTO_MAX_NAME);
    case 4: {
        uint32_t n;
        if (get_array(d, &n, PROTO_MAX_PARTS) < 0)
            return -1;
        c->parts = xcalloc(n ? n : 1, sizeof *c->parts);
        c->n_parts = n; /* an image index is checked against imgs in submit_check */
        for (uint32_t k = 0; k < n; k++)
            if (mpread_peek(&d->r) == MPREAD_STR ? get_str(d, &c->parts[k].text, NULL, 0, PROTO_MAX_PROMPT)
                                                 : get_u32(d, &c->parts[k].img, 0, PROTO_MAX_IMAGES - 1))
                return -1;
        return 0;
    }
    }
    return -1;
}

static const field_t img_fields[] = {{"w", true}, {"h", true}, {"rgb", true}, {"hash", true},
                                     {"nx", false}, {"ny", false}};

static int img_field(dec_t *d, void *obj, int idx)
{
    proto_img_t *im = obj;
    const uint8_t *b;
    uint32_t n = 0;
    if (idx < 2)
        return get_u32(d, idx ? &im->h : &im->w, 1, PROTO_MAX_VIS_SIZE);
    if (idx == 2) /* its size is checked against w, h after the map */
        return get_bin(d, &im->rgb, &im->n_rgb, PROTO_MAX_BODY);
    if (idx >= 4) /* the grid's product and extent are checked in submit_check */
        return get_u32(d, idx == 4 ? &im->nx : &im->ny, 1, PROTO_MAX_TILES);
    if (mpread_bin(&d->r, &b, &n) < 0 || n != sizeof im->hash)
        return d->r.status ? -1 : fail(d, PROTO_ERANGE, "hash of %u bytes, not %zu", n, sizeof im->hash);
    memcpy(im->hash, b, n);
    return 0;
}

/* The knobs come first (S_KNOB0 + their row), generated from the table;
 * then the hand-decoded keys. */
#define KNOB_ENUM(key, ...) S_KNOB_##key,
enum {
    PROTO_SAMPLING_KNOBS(KNOB_ENUM)
    S_ID, S_PRIO, S_KIND, S_MSGS, S_PROMPT, S_PROMPT_IDS, S_SEED, S_BIAS, S_LOGPROBS, S_TOP_LP, S_MAX_TOK, S_STOP,
    S_IGNORE_EOS, S_DEADLINE, S_STREAM, S_RESUME, S_TOOLS, S_TOOL_CHOICE, S_PAR_TOOLS, S_N_CHOICES,
    S_GRAMMAR, S_OP, S_ADD_SPECIAL, S_THINK, S_INPUTS, S_DIMS, S_NO_SPEC, S_PART, S_LORA,
    S_IMGS, S_N_FIELDS
};
_Static_assert(S_N_FIELDS <= 64, "read_map tracks seen keys in a 64-bit mask");

#define KNOB_FIELD(key, ...) [S_KNOB_##key] = {#key, false},
static const field_t submit_fields[] = {
    PROTO_SAMPLING_KNOBS(KNOB_FIELD)
    [S_ID] = {"id", true},           [S_PRIO] = {"prio", true},
    [S_KIND] = {"kind", true},       [S_MSGS] = {"msgs", false},
    [S_PROMPT] = {"prompt", false},  [S_PROMPT_IDS] = {"prompt_ids", false},
    [S_SEED] = {"seed", false},
    [S_BIAS] = {"bias", false},      [S_LOGPROBS] = {"logprobs", false},
    [S_TOP_LP] = {"top_lp", false},  [S_MAX_TOK] = {"max_tok", false},
    [S_STOP] = {"stop", false},      [S_IGNORE_EOS] = {"ignore_eos", false},
    [S_DEADLINE] = {"deadline_ms", false}, [S_STREAM] = {"stream", false},
    [S_RESUME] = {"resume", false},  [S_TOOLS] = {"tools", false},
    [S_TOOL_CHOICE] = {"tool_choice", false}, [S_PAR_TOOLS] = {"par_tools", false},
    [S_N_CHOICES] = {"n_choices", false},
    [S_GRAMMAR] = {"grammar", false},
    [S_OP] = {"op", false},          [S_ADD_SPECIAL] = {"add_special", false},
    [S_THINK] = {"think", false},
    [S_INPUTS] = {"inputs", false},  [S_DIMS] = {"dims", false},
    [S_NO_SPEC] = {"no_spec", false}, [S_PART] = {"part", false},
    [S_LORA] = {"lora", false},      [S_IMGS] = {"imgs", false},
};

static const field_t lora_fields[] = {{"name", true}, {"scale", false}};

static int lora_field(dec_t *d, void *obj, int idx)
{
    proto_lora_t *l = obj;
    if (idx == 0)
        return get_str(d, &l->name, NULL, 1, PROTO_MAX_NAME);
    l->has_scale = true;
    return get_double(d, &l->scale, -100, 100, false);
}

static const field_t input_fields[] = {{"t", false}, {"ids", false}};

static int input_field(dec_t *d, void *obj, int idx)
{
    proto_input_t *in = obj;
    if (in->text || in->ids)
        return fail(d, PROTO_EFIELD, "an input takes one of 't', 'ids'");
    if (idx == 0)
        return get_str(d, &in->text, NULL, 0, PROTO_MAX_PROMPT);
    if (get_ids(d, &in->ids, &in->n_ids, PROTO_MAX_TOKENS) < 0)
        return -1;
    if (in->n_ids == 0)
        return fail(d, PROTO_ERANGE, "an input's 'ids' is empty");
    return 0;
}

/* A knob of the table within its wire range. */
static int get_knob(dec_t *d, proto_knobs_t *k, const proto_knob_row_t *row)
{
    if (row->is_uint) {
        uint64_t v;
        if (get_uint(d, &v, (uint64_t)row->lo, (uint64_t)row->wire_hi) < 0)
            return -1;
        proto_knob_set(k, row, (double)v);
        return 0;
    }
    double v;
    if (get_double(d, &v, row->lo, row->wire_hi, row->lo_open) < 0)
        return -1;
    proto_knob_set(k, row, v);
    return 0;
}

static int submit_field(dec_t *d, void *obj, int idx)
{
    proto_submit_t *s = obj;
    proto_sampling_t *sp = &s->sampling;
    uint32_t n, u;
    if (idx < PROTO_N_KNOBS)
        return get_knob(d, &sp->knobs, &proto_knob_rows[idx]);
    switch (idx) {
    case S_ID: return get_uint(d, &s->id, 1, UINT64_MAX);
    case S_PRIO:
        if (get_u32(d, &u, PROTO_PRIO_HIGH, PROTO_PRIO_LOW) < 0)
            return -1;
        s->priority = (proto_priority_t)u;
        return 0;
    case S_KIND: {
        const uint8_t *k;
        if (mpread_str(&d->r, &k, &n) < 0)
            return -1;
        for (int i = 0; i < 2; i++) {
            const char *kn = proto_kind_name((proto_kind_t)i);
            if (strlen(kn) == n && memcmp(kn, k, n) == 0) {
                s->kind = (proto_kind_t)i;
                return 0;
            }
        }
        return fail(d, PROTO_ERANGE, "unknown kind");
    }
    case S_MSGS:
        if (get_array(d, &n, PROTO_MAX_MESSAGES) < 0)
            return -1;
        s->messages = xcalloc(n ? n : 1, sizeof *s->messages);
        s->n_messages = n;
        for (uint32_t i = 0; i < n; i++)
            if (read_map(d, chat_fields, NFIELDS(chat_fields), chat_field, &s->messages[i]) < 0)
                return -1;
        return 0;
    case S_PROMPT: return get_str(d, &s->prompt, NULL, 0, PROTO_MAX_PROMPT);
    case S_GRAMMAR: return get_str(d, &s->grammar, NULL, 0, PROTO_MAX_GRAMMAR);
    case S_PROMPT_IDS:
        s->has_prompt_ids = true;
        return get_ids(d, &s->prompt_ids, &s->n_prompt_ids, PROTO_MAX_TOKENS);
    case S_SEED:
        sp->has_seed = true;
        return get_uint(d, &sp->seed, 0, UINT64_MAX);
    case S_BIAS:
        if (mpread_map(&d->r, &n) < 0)
            return -1;
        if (n > PROTO_MAX_LOGIT_BIAS)
            return fail(d, PROTO_ERANGE, "%u entries, limit %d", n, PROTO_MAX_LOGIT_BIAS);
        sp->logit_bias = xcalloc(n ? n : 1, sizeof *sp->logit_bias);
        sp->n_logit_bias = n;
        for (uint32_t i = 0; i < n; i++) {
            if (get_token(d, &sp->logit_bias[i].token) < 0 ||
                get_double(d, &sp->logit_bias[i].bias, -100, 100, false) < 0)
                return -1;
            for (uint32_t j = 0; j < i; j++)
                if (sp->logit_bias[j].token == sp->logit_bias[i].token)
                    return fail(d, PROTO_EFIELD, "token %d given twice",
                                (int)sp->logit_bias[i].token);
        }
        return 0;
    case S_LOGPROBS: return get_bool(d, &sp->logprobs);
    case S_TOP_LP: return get_u32(d, &sp->top_logprobs, 0, PROTO_MAX_TOP_LOGPROBS);
    case S_MAX_TOK: return get_u32(d, &s->max_tokens, 0, U31);
    case S_STOP:
        if (get_array(d, &n, PROTO_MAX_STOP) < 0)
            return -1;
        s->stop = xcalloc(n ? n : 1, sizeof *s->stop);
        s->n_stop = n;
        for (uint32_t i = 0; i < n; i++)
            if (get_str(d, &s->stop[i], NULL, 1, PROTO_MAX_STOP_LEN) < 0)
                return -1;
        return 0;
    case S_IGNORE_EOS: return get_bool(d, &s->ignore_eos);
    case S_NO_SPEC: return get_bool(d, &s->no_spec);
    case S_DEADLINE: return get_u32(d, &s->deadline_ms, 0, U31);
    case S_STREAM: return get_bool(d, &s->stream);
    case S_RESUME: return get_ids(d, &s->resume, &s->n_resume, PROTO_MAX_TOKENS);
    case S_TOOLS: return get_str(d, &s->tools, NULL, 2, PROTO_MAX_PROMPT);
    case S_TOOL_CHOICE: return get_str(d, &s->tool_choice, NULL, 1, PROTO_MAX_NAME);
    case S_PAR_TOOLS: {
        bool par;
        if (get_bool(d, &par) < 0)
            return -1;
        s->no_par_tools = !par;
        return 0;
    }
    case S_N_CHOICES: return get_u32(d, &s->n_choices, 1, PROTO_MAX_CHOICES);
    case S_OP: {
        const uint8_t *k;
        if (mpread_str(&d->r, &k, &n) < 0)
            return -1;
        for (int op = PROTO_OP_TOKENIZE; op <= PROTO_OP_RANK; op++)
            if (strlen(proto_op_name((proto_op_t)op)) == n && memcmp(k, proto_op_name((proto_op_t)op), n) == 0) {
                s->op = (proto_op_t)op;
                return 0;
            }
        return fail(d, PROTO_ERANGE, "unknown op");
    }
    case S_INPUTS:
        if (get_array(d, &n, PROTO_MAX_CHOICES) < 0)
            return -1;
        if (n == 0)
            return fail(d, PROTO_ERANGE, "'inputs' is empty");
        s->inputs = xcalloc(n, sizeof *s->inputs);
        s->n_inputs = n;
        for (uint32_t i = 0; i < n; i++) {
            if (read_map(d, input_fields, NFIELDS(input_fields), input_field, &s->inputs[i]) < 0)
                return -1;
            if (!s->inputs[i].text && !s->inputs[i].ids)
                return fail(d, PROTO_EFIELD, "an input needs 't' or 'ids'");
        }
        return 0;
    case S_DIMS: return get_u32(d, &s->dimensions, 1, PROTO_MAX_EMBED_DIM);
    case S_PART: return get_uint(d, &s->partition, 0, UINT64_MAX);
    case S_LORA:
        if (get_array(d, &n, PROTO_MAX_LORA) < 0)
            return -1;
        if (n == 0)
            return fail(d, PROTO_ERANGE, "'lora' is empty");
        for (uint32_t i = 0; i < n; i++) {
            s->n_lora = i + 1; /* freed from here on even when the map fails */
            if (read_map(d, lora_fields, NFIELDS(lora_fields), lora_field, &s->lora[i]) < 0)
                return -1;
        }
        return 0;
    case S_IMGS:
        if (get_array(d, &n, PROTO_MAX_IMAGES) < 0)
            return -1;
        s->imgs = xcalloc(n ? n : 1, sizeof *s->imgs);
        s->n_imgs = n;
        for (uint32_t i = 0; i < n; i++) /* rgb's size is checked in submit_check */
            if (read_map(d, img_fields, NFIELDS(img_fields), img_field, &s->imgs[i]) < 0)
                return -1;
        return 0;
    case S_ADD_SPECIAL: {
        bool b;
        if (get_bool(d, &b) < 0)
            return -1;
        s->no_special = !b;
        return 0;
    }
    case S_THINK:
        s->has_think = true;
        return get_bool(d, &s->think);
    }
    return -1;
}

/* Rules that involve more than one key. */
static int submit_check(dec_t *d, proto_submit_t *s)
{
    d->field = NULL;
    for (uint32_t i = 0; i < s->n_imgs; i++)
        if ((uint64_t)s->imgs[i].n_rgb != (uint64_t)s->imgs[i].w * s->imgs[i].h * 3)
            return fail(d, PROTO_ERANGE, "imgs[%u]: rgb of %u bytes, not %ux%ux3", i, s->imgs[i].n_rgb,
                        s->imgs[i].w, s->imgs[i].h);
    for (uint32_t i = 0; i < s->n_imgs; i++) {
        uint64_t t = (uint64_t)s->imgs[i].nx * s->imgs[i].ny;
        if (!s->imgs[i].nx != !s->imgs[i].ny || t > PROTO_MAX_TILES || (t && i + t >= s->n_imgs))
            return fail(d, PROTO_ERANGE, "imgs[%u]: a grid of %u x %u tiles (%u images follow)", i,
                        s->imgs[i].nx, s->imgs[i].ny, s->n_imgs - i - 1);
    }
    for (uint32_t i = 0; i < s->n_messages; i++)
        for (uint32_t k = 0; k < s->messages[i].n_parts; k++)
            if (!s->messages[i].parts[k].text && s->messages[i].parts[k].img >= s->n_imgs)
                return fail(d, PROTO_EFIELD, "msgs[%u].parts[%u]: image %u of %u", i, k,
                            s->messages[i].parts[k].img, s->n_imgs);
    if (s->kind == PROTO_KIND_CHAT) {
        if (s->n_messages == 0)
            return fail(d, PROTO_EFIELD, "chat needs at least one message in 'msgs'");
        if (s->prompt || s->has_prompt_ids)
            return fail(d, PROTO_EFIELD, "chat takes 'msgs', not 'prompt'/'prompt_ids'");
    } else {
        if (s->messages || s->imgs)
            return fail(d, PROTO_EFIELD, "completion takes 'prompt' or 'prompt_ids', not 'msgs'/'imgs'");
        if (s->tools)
            return fail(d, PROTO_EFIELD, "completion takes no 'tools'");
        if (s->has_think)
            return fail(d, PROTO_EFIELD, "completion takes no 'think'");
        if (s->op == PROTO_OP_EMBED) {
            if (s->prompt || s->has_prompt_ids || !s->n_inputs)
                return fail(d, PROTO_EFIELD, "op embed takes 'inputs', not 'prompt'/'prompt_ids'");
        } else if (s->op == PROTO_OP_RANK) {
            if (!s->prompt || s->has_prompt_ids || !s->n_inputs)
                return fail(d, PROTO_EFIELD, "op rank takes 'prompt' (the query) and 'inputs', not 'prompt_ids'");
        } else if ((s->prompt != NULL) == s->has_prompt_ids) {
            return fail(d, PROTO_EFIELD, "completion needs exactly one of 'prompt', 'prompt_ids'");
        }
    }
    if (s->op != PROTO_OP_EMBED && s->op != PROTO_OP_RANK && s->n_inputs)
        return fail(d, PROTO_EFIELD, "'inputs' belong to ops embed and rank");
    if (s->op != PROTO_OP_EMBED && s->dimensions)
        return fail(d, PROTO_EFIELD, "'dims' belongs to op embed");
    if ((s->op == PROTO_OP_EMBED || s->op == PROTO_OP_RANK) && s->kind != PROTO_KIND_COMPLETION)
        return fail(d, PROTO_EFIELD, "op %s is of kind completion", proto_op_name(s->op));
    if (s->tool_choice && !s->tools)
        return fail(d, PROTO_EFIELD, "'tool_choice' requires 'tools'");
    if (s->tool_choice && strcmp(s->tool_choice, "required") != 0 && strcmp(s->tool_choice, "auto") != 0 &&
        strncmp(s->tool_choice, "function:", 9) != 0)
        return fail(d, PROTO_ERANGE, "'tool_choice' must be auto, required or function:NAME");
    if (s->sampling.top_logprobs > 0 && !s->sampling.logprobs)
        return fail(d, PROTO_EFIELD, "'top_lp' requires 'logprobs'");
    if (s->n_choices == 0)
        s->n_choices = 1;
    if (s->n_choices > 1 && s->n_resume)
        return fail(d, PROTO_EFIELD, "'n_choices' > 1 cannot 'resume'");
    if ((s->op == PROTO_OP_EMBED || s->op == PROTO_OP_RANK) && (s->n_choices != s->n_inputs || s->n_resume))
        return fail(d, PROTO_EFIELD, "op %s needs 'n_choices' = the number of inputs, no 'resume'",
                    proto_op_name(s->op));
    if ((s->op == PROTO_OP_TOKENIZE || s->op == PROTO_OP_DETOKENIZE) && (s->n_choices > 1 || s->n_resume))
        return fail(d, PROTO_EFIELD, "'op' %s takes neither 'n_choices' > 1 nor 'resume'",
                    proto_op_name(s->op));
    if (s->op == PROTO_OP_DETOKENIZE && !s->has_prompt_ids)
        return fail(d, PROTO_EFIELD, "'op' detokenize needs 'prompt_ids'");
    return 0;
}

/* --- EVENT --- */

static const field_t top_fields[] = {{"b", true}, {"lp", true}};

static int top_field(dec_t *d, void *obj, int idx)
{
    proto_top_logprob_t *t = obj;
    if (idx == 0)
        return get_bin(d, &t->bytes, &t->n_bytes, PROTO_MAX_TOKEN_BYTES);
    return get_double(d, &t->logprob, -INFINITY, 0, false);
}

static const field_t lp_fields[] = {{"b", true}, {"lp", true}, {"top", false}};

static int lp_field(dec_t *d, void *obj, int idx)
{
    proto_logprob_t *l = obj;
    uint32_t n;
    switch (idx) {
    case 0: return get_bin(d, &l->bytes, &l->n_bytes, PROTO_MAX_TOKEN_BYTES);
    case 1: return get_double(d, &l->logprob, -INFINITY, 0, false);
    case 2:
        if (get_array(d, &n, PROTO_MAX_TOP_LOGPROBS) < 0)
            return -1;
        l->top = xcalloc(n ? n : 1, sizeof *l->top);
        l->n_top = n;
        for (uint32_t i = 0; i < n; i++)
            if (read_map(d, top_fields, NFIELDS(top_fields), top_field, &l->top[i]) < 0)
                return -1;
        return 0;
    }
    return -1;
}

static const field_t usage_fields[] = {{"prompt", true}, {"cached", true}, {"completion", true}};

static int usage_field(dec_t *d, void *obj, int idx)
{
    proto_usage_t *u = obj;
    switch (idx) {
    case 0: return get_u32(d, &u->prompt_tokens, 0, U31);
    case 1: return get_u32(d, &u->cached_tokens, 0, U31);
    case 2: return get_u32(d, &u->completion_tokens, 0, U31);
    }
    return -1;
}

static const field_t event_fields[] = {
    {"id", true},     {"text", false},   {"ids", false},   {"n", true},
    {"n_resumed", false}, {"lp", false}, {"finish", false}, {"usage", false},
    {"choice", false},
    {"err", false},   {"emb", false},     {"stop", false},
};

static int event_field(dec_t *d, void *obj, int idx)
{
    proto_event_t *e = obj;
    uint32_t n;
    switch (idx) {
    case 0: return get_uint(d, &e->id, 1, UINT64_MAX);
    case 1: return get_str(d, &e->text, &e->text_len, 0, PROTO_MAX_TEXT);
    case 2: return get_ids(d, &e->ids, &e->n_ids, PROTO_MAX_EVENT_IDS);
    case 3: return get_u32(d, &e->n_tokens, 0, U31);
    case 4: return get_u32(d, &e->n_resumed, 0, PROTO_MAX_TOKENS);
    case 5:
        if (get_array(d, &n, PROTO_MAX_EVENT_IDS) < 0)
            return -1;
        e->logprobs = xcalloc(n ? n : 1, sizeof *e->logprobs);
        e->n_logprobs = n;
        for (uint32_t i = 0; i < n; i++)
            if (read_map(d, lp_fields, NFIELDS(lp_fields), lp_field, &e->logprobs[i]) < 0)
                return -1;
        return 0;
    case 6: {
        const uint8_t *f;
        if (mpread_str(&d->r, &f, &n) < 0)
            return -1;
        const char *fn;
        for (int i = 1; (fn = proto_finish_name((proto_finish_t)i)) != NULL; i++) {
            if (strlen(fn) == n && memcmp(fn, f, n) == 0) {
                e->finish = (proto_finish_t)i;
                return 0;
            }
        }
        return fail(d, PROTO_ERANGE, "unknown finish reason");
    }
    case 7:
        e->has_usage = true;
        return read_map(d, usage_fields, NFIELDS(usage_fields), usage_field, &e->usage);
    case 8: return get_u32(d, &e->choice, 0, PROTO_MAX_CHOICES - 1);
    case 9: return get_u32(d, &e->err, 0, PROTO_MAX_ERR);
    case 10: {
        const uint8_t *b;
        if (mpread_bin(&d->r, &b, &n) < 0)
            return -1;
        if (n == 0 || n % 4 || n / 4 > PROTO_MAX_EMBED_DIM)
            return fail(d, PROTO_ERANGE, "'emb' of %u bytes: want a multiple of 4 in [4, %u]", n,
                        4 * PROTO_MAX_EMBED_DIM);
        e->n_embedding = n / 4;
        e->embedding = xmalloc((size_t)n);
        for (uint32_t i = 0; i < n / 4; i++) {
            uint32_t u = (uint32_t)b[4 * i] | (uint32_t)b[4 * i + 1] << 8 |
                         (uint32_t)b[4 * i + 2] << 16 | (uint32_t)b[4 * i + 3] << 24;
            memcpy(&e->embedding[i], &u, 4);
        }
        return 0;
    }
    case 11: return get_u32(d, &e->stop, 1, PROTO_MAX_STOP);
    }
    return -1;
}

static int event_check(dec_t *d, proto_event_t *e)
{
    d->field = NULL;
    if (!e->text) {
        e->text = xstrdup("");
        e->text_len = 0;
    }
    if (e->n_logprobs && e->n_logprobs != e->n_ids)
        return fail(d, PROTO_EFIELD, "%u logprob entries for %u ids", e->n_logprobs, e->n_ids);
    if (e->n_tokens < e->n_ids)
        return fail(d, PROTO_ERANGE, "n %u < ids in this delta %u", e->n_tokens, e->n_ids);
    if (e->n_tokens < e->n_resumed)
        return fail(d, PROTO_ERANGE, "n %u < n_resumed %u", e->n_tokens, e->n_resumed);
    if (e->finish != PROTO_FINISH_NONE && !e->has_usage)
        return fail(d, PROTO_EFIELD, "finished EVENT without 'usage'");
    if (e->stop && e->finish != PROTO_FINISH_STOP)
        return fail(d, PROTO_EFIELD, "'stop' without finish \"stop\"");
    return 0;
}

/* --- ERROR, CANCEL, DRAIN, SHUTDOWN --- */

static const field_t error_fields[] = {{"id", true}, {"code", true}, {"msg", true}, {"err", false}};

static int error_field(dec_t *d, void *obj, int idx)
{
    proto_error_t *e = obj;
    switch (idx) {
    case 0: return get_uint(d, &e->id, 0, UINT64_MAX);
    case 1: return get_u32(d, &e->code, 100, 599);
    case 2: return get_str(d, &e->message, NULL, 0, PROTO_MAX_ERROR_MSG);
    case 3: return get_u32(d, &e->err, 0, PROTO_MAX_ERR);
    }
    return -1;
}

static const field_t cancel_fields[] = {{"id", true}};

static int cancel_field(dec_t *d, void *obj, int idx)
{
    proto_cancel_t *c = obj;
    return get_uint(d, &c->id, 1, UINT64_MAX);
}

/* --- LORA, LORA_ACK --- */

static const field_t lora_op_fields[] = {{"seq", true}, {"name", true}, {"path", false}, {"scale", false}};

static int lora_op_field(dec_t *d, void *obj, int idx)
{
    proto_lora_op_t *o = obj;
    switch (idx) {
    case 0: return get_uint(d, &o->seq, 1, UINT64_MAX);
    case 1: return get_str(d, &o->name, NULL, 1, PROTO_MAX_NAME);
    case 2: return get_str(d, &o->path, NULL, 1, PROTO_MAX_PATH);
    case 3: return get_double(d, &o->scale, -100, 100, false);
    }
    return -1;
}

static const field_t lora_ack_fields[] = {{"seq", true}, {"name", true}, {"msg", false}};

static int lora_ack_field(dec_t *d, void *obj, int idx)
{
    proto_lora_op_t *o = obj;
    switch (idx) {
    case 0: return get_uint(d, &o->seq, 1, UINT64_MAX);
    case 1: return get_str(d, &o->name, NULL, 1, PROTO_MAX_NAME);
    case 2: return get_str(d, &o->message, NULL, 0, PROTO_MAX_ERROR_MSG);
    }
    return -1;
}

/* --- KV --- */

static const field_t kv_fields[] = {{"reset", false}, {"add", false}, {"del", false}};

static int get_keys(dec_t *d, uint64_t **keys, uint32_t *n_keys)
{
    uint32_t n;
    if (get_array(d, &n, PROTO_MAX_KV_KEYS) < 0)
        return -1;
    *keys = xmalloc((size_t)n * sizeof **keys + 1);
    *n_keys = n;
    for (uint32_t i = 0; i < n; i++)
        if (get_uint(d, &(*keys)[i], 0, UINT64_MAX) < 0)
            return -1;
    return 0;
}

static int kv_field(dec_t *d, void *obj, int idx)
{
    proto_kv_t *kv = obj;
    switch (idx) {
    case 0: return get_bool(d, &kv->reset);
    case 1: return get_keys(d, &kv->add, &kv->n_add);
    case 2: return get_keys(d, &kv->del, &kv->n_del);
    }
    return -1;
}

static int no_field(dec_t *d, void *obj, int idx)
{
    return -1;
}

/* The request id of a body the decoder refused: the value of the first "id"
 * key of its top-level map when that is an unsigned integer ≥ 1, wherever
 * the key sits and whatever fails after it; 0 otherwise. */
static uint64_t salvage_id(const uint8_t *buf, size_t len)
{
    mpread_t r;
    mpread_init(&r, buf, len);
    uint32_t n;
    if (mpread_map(&r, &n) < 0)
        return 0;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *k;
        uint32_t kn;
        if (mpread_peek(&r) != MPREAD_STR || mpread_str(&r, &k, &kn) < 0)
            return 0;
        if (kn == 2 && memcmp(k, "id", 2) == 0) {
            uint64_t v;
            return mpread_peek(&r) == MPREAD_INT && mpread_uint(&r, &v) == 0 ? v : 0;
        }
        if (mpread_skip(&r, PROTO_MAX_DEPTH) < 0)
            return 0;
    }
    return 0;
}

int proto_decode_body(int type, const uint8_t *buf, size_t len, proto_msg_t *out,
                      char *err, size_t err_len)
{
    if (type < PROTO_TYPE_MIN || type > PROTO_TYPE_MAX) {
        memset(out, 0, sizeof *out);
        errbuf_set(err, err_len, "unknown message type %d", type);
        return PROTO_ETYPE;
    }
    proto_msg_init(out, (proto_type_t)type);
    if (len > PROTO_MAX_BODY) {
        memset(out, 0, sizeof *out);
        errbuf_set(err, err_len, "%s: body of %zu bytes exceeds %u", proto_type_name(type),
                   len, PROTO_MAX_BODY);
        return PROTO_ERANGE;
    }
    dec_t d = {.field = NULL};
    mpread_init(&d.r, buf, len);
    int rc = 0;
    switch (out->type) {
    case PROTO_REGISTER:
        rc = read_map(&d, register_fields, NFIELDS(register_fields), register_field, &out->reg);
        break;
    case PROTO_HEARTBEAT:
        rc = read_map(&d, heartbeat_fields, NFIELDS(heartbeat_fields), heartbeat_field,
                      &out->heartbeat);
        break;
    case PROTO_SUBMIT:
        rc = read_map(&d, submit_fields, NFIELDS(submit_fields), submit_field, &out->submit);
        if (rc == 0)
            rc = submit_check(&d, &out->submit);
        break;
    case PROTO_CANCEL:
        rc = read_map(&d, cancel_fields, NFIELDS(cancel_fields), cancel_field, &out->cancel);
        break;
    case PROTO_EVENT:
        rc = read_map(&d, event_fields, NFIELDS(event_fields), event_field, &out->event);
        if (rc == 0)
            rc = event_check(&d, &out->event);
        break;
    case PROTO_ERROR:
        rc = read_map(&d, error_fields, NFIELDS(error_fields), error_field, &out->error);
        break;
    case PROTO_KV:
        rc = read_map(&d, kv_fields, NFIELDS(kv_fields), kv_field, &out->kv);
        break;
    case PROTO_LORA:
        rc = read_map(&d, lora_op_fields, NFIELDS(lora_op_fields), lora_op_field, &out->lora);
        break;
    case PROTO_LORA_ACK:
        rc = read_map(&d, lora_ack_fields, NFIELDS(lora_ack_fields), lora_ack_field, &out->lora);
        break;
    case PROTO_DRAIN:
    case PROTO_SHUTDOWN:
        rc = read_map(&d, NULL, 0, no_field, NULL);
        break;
    }
    if (rc == 0 && mpread_remaining(&d.r) != 0)
        mpread_fail(&d.r, PROTO_EMSGPACK, "%zu trailing bytes after the body",
                    mpread_remaining(&d.r));
    if (d.r.status != 0) {
        if (err && err_len) {
            if (d.field)
                errbuf_set(err, err_len, "%s: '%s': %s", proto_type_name(type), d.field, d.r.err);
            else
                errbuf_set(err, err_len, "%s: %s", proto_type_name(type), d.r.err);
        }
        int status = d.r.status;
        /* a SUBMIT, EVENT or ERROR with a readable request id keeps its type
         * and id, so the receiver can end that request at once (the worker
         * answers ERROR(id), the gateway fails it) instead of leaving it to
         * its deadline */
        proto_type_t t = out->type;
        uint64_t id = t == PROTO_SUBMIT || t == PROTO_EVENT || t == PROTO_ERROR
                          ? salvage_id(buf, len) : 0;
        proto_msg_clear(out);
        if (id) {
            out->type = t;
            if (t == PROTO_SUBMIT)
                out->submit.id = id;
            else if (t == PROTO_EVENT)
                out->event.id = id;
            else
                out->error.id = id;
        }
        return status;
    }
    return PROTO_OK;
}
