/* Unit tests for proto/msg: round trips of every message type with every
 * field, and the decoder's answer to malformed input (wrong tag/version/type,
 * truncation at every byte, wrong types, missing/duplicate keys, oversized
 * strings and arrays, out-of-range numbers, NaN, bad UTF-8), and the ZeroMQ
 * framing over a real inproc ROUTER/DEALER pair.
 *
 * Bodies for malformed cases are built with msgpack-c's packer directly, so
 * the decoder is checked against an independent encoder. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "proto/msg.h"
#include "tests/support/support.h"

/* ------------------------------------------------------------------------ */
/* helpers                                                                   */

static int decode_body(int type, const msgpack_sbuffer *sb, proto_msg_t *m)
{
    char err[256];
    int rc = proto_decode_body(type, (const uint8_t *)sb->data, sb->size, m, err, sizeof err);
    if (rc != PROTO_OK)
        print_message("    decode: %s (%s)\n", proto_status_name(rc), err);
    return rc;
}

static void pk_str(msgpack_packer *pk, const char *s)
{
    msgpack_pack_str(pk, strlen(s));
    msgpack_pack_str_body(pk, s, strlen(s));
}

/* A key/value of a hand-built map: value kinds for table-driven cases. */
enum vkind { V_UINT, V_INT, V_DOUBLE, V_STR, V_BOOL, V_NIL, V_RAW, V_FLOAT32 };
typedef struct kv {
    const char *key;
    enum vkind kind;
    uint64_t u;
    int64_t i;
    double d;
    const char *s;   /* V_STR: string; V_RAW: bytes (n in u) */
} kv_t;

#define KU(k, v) {(k), V_UINT, (v), 0, 0, NULL}
#define KI(k, v) {(k), V_INT, 0, (v), 0, NULL}
#define KD(k, v) {(k), V_DOUBLE, 0, 0, (v), NULL}
#define KS(k, v) {(k), V_STR, 0, 0, 0, (v)}
#define KB(k, v) {(k), V_BOOL, (v), 0, 0, NULL}
#define KN(k) {(k), V_NIL, 0, 0, 0, NULL}

static void pk_value(msgpack_packer *pk, const kv_t *v)
{
    switch (v->kind) {
    case V_UINT: msgpack_pack_uint64(pk, v->u); break;
    case V_INT: msgpack_pack_int64(pk, v->i); break;
    case V_DOUBLE: msgpack_pack_double(pk, v->d); break;
    case V_FLOAT32: msgpack_pack_float(pk, (float)v->d); break;
    case V_STR: pk_str(pk, v->s); break;
    case V_BOOL: if (v->u) msgpack_pack_true(pk); else msgpack_pack_false(pk); break;
    case V_NIL: msgpack_pack_nil(pk); break;
    case V_RAW: msgpack_sbuffer_write(pk->data, v->s, v->u); break;
    }
}

/* Packs `base` as a map; `omit` (may be NULL) drops that key; `set` (may be
 * NULL) replaces the value of its key, or is appended when base lacks it. */
static void build_map(msgpack_sbuffer *sb, const kv_t *base, size_t n, const char *omit,
                      const kv_t *set)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    size_t count = 0;
    bool replaced = false;
    for (size_t i = 0; i < n; i++) {
        if (omit && strcmp(base[i].key, omit) == 0)
            continue;
        count++;
        if (set && strcmp(base[i].key, set->key) == 0)
            replaced = true;
    }
    if (set && !replaced)
        count++;
    msgpack_pack_map(&pk, count);
    for (size_t i = 0; i < n; i++) {
        if (omit && strcmp(base[i].key, omit) == 0)
            continue;
        pk_str(&pk, base[i].key);
        pk_value(&pk, set && strcmp(base[i].key, set->key) == 0 ? set : &base[i]);
    }
    if (set && !replaced) {
        pk_str(&pk, set->key);
        pk_value(&pk, set);
    }
}

static uint8_t *encode(const proto_msg_t *m, size_t *len)
{
    uint8_t *body;
    assert_int_equal(proto_encode(m, &body, len), PROTO_OK);
    return body;
}

/* encode → decode, and check that re-encoding the result gives the same bytes. */
static void roundtrip(const proto_msg_t *in, proto_msg_t *out)
{
    size_t len, len2;
    uint8_t *body = encode(in, &len);
    char err[256] = "";
    int rc = proto_decode_body(in->type, body, len, out, err, sizeof err);
    if (rc != PROTO_OK)
        fail_msg("decode of %s failed: %s", proto_type_name(in->type), err);
    assert_int_equal(out->type, in->type);
    uint8_t *body2 = encode(out, &len2);
    assert_int_equal(len, len2);
    assert_memory_equal(body, body2, len);
    free(body);
    free(body2);
}

/* ------------------------------------------------------------------------ */
/* round trips                                                               */

static void fill_register(proto_msg_t *m)
{
    proto_msg_init(m, PROTO_REGISTER);
    m->reg.version = PROTO_VERSION;
    m->reg.model = "tinyllama-1.1b";
    m->reg.replica = "box:4242:9f1c2d3e";
    m->reg.host = "box";
    m->reg.pid = 4242;
    m->reg.capacity = 16;
    m->reg.n_ctx = 2048;
    m->reg.n_vocab = 32000;
    m->reg.kv_blocks = 1024;
    m->reg.block_size = 32;
    m->reg.heartbeat_ms = 250;
    m->reg.vis = (proto_vis_t){.has = true, .size = 896, .n_tok = 256, .proj = "gemma3"};
    static proto_reg_lora_t lora[2] = {
        {.name = "sql", .hash = 0xfedcba9876543210ull, .rank = 8, .scale = 1.0},
        {.name = "style", .hash = 1, .rank = 512, .scale = -0.25},
    };
    m->reg.lora = lora;
    m->reg.n_lora = 2;
}

static void test_roundtrip_register(void **state)
{
    proto_msg_t in, out;
    fill_register(&in);
    roundtrip(&in, &out);
    assert_int_equal(out.reg.version, PROTO_VERSION);
    assert_string_equal(out.reg.model, "tinyllama-1.1b");
    assert_string_equal(out.reg.replica, "box:4242:9f1c2d3e");
    assert_string_equal(out.reg.host, "box");
    assert_int_equal(out.reg.pid, 4242);
    assert_int_equal(out.reg.capacity, 16);
    assert_int_equal(out.reg.n_ctx, 2048);
    assert_true(out.reg.vis.has);
    assert_int_equal(out.reg.vis.size, 896);
    assert_int_equal(out.reg.vis.n_tok, 256);
    assert_string_equal(out.reg.vis.proj, "gemma3");
    assert_int_equal(out.reg.vis.preproc, 0); /* a projector without tiles sends none */
    assert_int_equal(out.reg.n_vocab, 32000);
    assert_int_equal(out.reg.kv_blocks, 1024);
    assert_int_equal(out.reg.block_size, 32);
    assert_int_equal(out.reg.heartbeat_ms, 250);
    assert_int_equal(out.reg.n_lora, 2);
    assert_string_equal(out.reg.lora[0].name, "sql");
    assert_true(out.reg.lora[0].hash == 0xfedcba9876543210ull);
    assert_int_equal(out.reg.lora[0].rank, 8);
    assert_true(out.reg.lora[0].scale == 1.0);
    assert_string_equal(out.reg.lora[1].name, "style");
    assert_true(out.reg.lora[1].hash == 1);
    assert_int_equal(out.reg.lora[1].rank, 512);
    assert_true(out.reg.lora[1].scale == -0.25);
    proto_msg_clear(&out);
    proto_msg_clear(&out); /* twice is safe */
}

/* REGISTER lora: absent when the worker has none; bounds on the count, the
 * rank, the scale; every key required; a name listed twice. */
static void test_register_lora_bounds(void **state)
{
    (void)state;
    proto_msg_t in, out;
    fill_register(&in);
    in.reg.n_lora = 0;
    size_t len;
    uint8_t *body = encode(&in, &len);
    assert_null(memmem(body, len, "lora", 4));
    assert_int_equal(proto_decode_body(PROTO_REGISTER, body, len, &out, NULL, 0), PROTO_OK);
    assert_null(out.reg.lora);
    proto_msg_clear(&out);
    free(body);
    proto_reg_lora_t l[PROTO_MAX_REG_LORA + 1];
    char names[PROTO_MAX_REG_LORA + 1][8];
    for (int i = 0; i <= PROTO_MAX_REG_LORA; i++) {
        snprintf(names[i], sizeof names[i], "a%d", i);
        l[i] = (proto_reg_lora_t){.name = names[i], .hash = (uint64_t)i, .rank = 4, .scale = 1};
    }
    in.reg.lora = l;
    static const struct {
        uint32_t n;
        int i;                  /* the adapter changed, -1 none */
        uint32_t rank;
        double scale;
        const char *name;
        int want;
    } cases[] = {
        {PROTO_MAX_REG_LORA, -1, 4, 1, NULL, PROTO_OK},
        {PROTO_MAX_REG_LORA + 1, -1, 4, 1, NULL, PROTO_ERANGE},
        {2, 1, 0, 1, NULL, PROTO_ERANGE},                          /* rank 0 */
        {2, 1, PROTO_MAX_LORA_RANK + 1, 1, NULL, PROTO_ERANGE},
        {2, 0, 4, 100.5, NULL, PROTO_ERANGE},
        {2, 0, 4, NAN, NULL, PROTO_ERANGE},
        {2, 0, 4, 1, "", PROTO_ERANGE},                            /* empty name */
        {2, 1, 4, 1, "a0", PROTO_EFIELD},                          /* twice */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        in.reg.n_lora = cases[c].n;
        proto_reg_lora_t keep = cases[c].i >= 0 ? l[cases[c].i] : l[0];
        if (cases[c].i >= 0) {
            l[cases[c].i].rank = cases[c].rank;
            l[cases[c].i].scale = cases[c].scale;
            if (cases[c].name)
                l[cases[c].i].name = (char *)cases[c].name;
        }
        body = encode(&in, &len);
        int rc = proto_decode_body(PROTO_REGISTER, body, len, &out, NULL, 0);
        if (rc != cases[c].want)
            print_message("case %zu: got %d, want %d\n", c, rc, cases[c].want);
        assert_int_equal(rc, cases[c].want);
        if (rc == PROTO_OK) {
            assert_int_equal(out.reg.n_lora, cases[c].n);
            proto_msg_clear(&out);
        }
        free(body);
        if (cases[c].i >= 0)
            l[cases[c].i] = keep;
    }
}

static void test_roundtrip_heartbeat(void **state)
{
    proto_msg_t in, out;
    proto_msg_init(&in, PROTO_HEARTBEAT);
    in.heartbeat.seq = UINT64_MAX - 1; /* u64 range survives */
    in.heartbeat.heartbeat_ms = 1000;
    in.heartbeat.has_load = true;
    in.heartbeat.load = (proto_load_t){
        .running = 3, .waiting = 2, .kv_blocks_used = 100, .kv_blocks_total = 1024,
        .prefix_cache_queries = 5000000000ull, .prefix_cache_hits = 4000000000ull,
        .preemptions = 7, .tokens_generated = 123456789012ull, .prompt_tokens = 99,
        .free_slots = 11,
    };
    roundtrip(&in, &out);
    assert_true(out.heartbeat.seq == UINT64_MAX - 1);
    assert_int_equal(out.heartbeat.heartbeat_ms, 1000);
    assert_true(out.heartbeat.has_load);
    assert_memory_equal(&out.heartbeat.load, &in.heartbeat.load, sizeof(proto_load_t));
    proto_msg_clear(&out);

    /* the optional steps-stopped counter (absent when 0, above) */
    in.heartbeat.load.steps_stopped = 5000000001ull;
    roundtrip(&in, &out);
    assert_true(out.heartbeat.load.steps_stopped == 5000000001ull);
    assert_memory_equal(&out.heartbeat.load, &in.heartbeat.load, sizeof(proto_load_t));
    proto_msg_clear(&out);
    in.heartbeat.load.steps_stopped = 0;

    /* with step progress (busy, stalled for a while) */
    in.heartbeat.has_progress = true;
    in.heartbeat.progress = (proto_progress_t){
        .steps = 5000000000ull, .busy = true, .stall_ms = 12345, .slow_ms = 0x7fffffff,
    };
    roundtrip(&in, &out);
    assert_true(out.heartbeat.has_progress);
    assert_true(out.heartbeat.progress.steps == 5000000000ull);
    assert_true(out.heartbeat.progress.busy);
    assert_int_equal(out.heartbeat.progress.stall_ms, 12345);
    assert_int_equal(out.heartbeat.progress.slow_ms, 0x7fffffff);
    assert_memory_equal(&out.heartbeat.load, &in.heartbeat.load, sizeof(proto_load_t));
    proto_msg_clear(&out);
    in.heartbeat.progress = (proto_progress_t){.steps = 0, .busy = false};
    roundtrip(&in, &out);
    assert_true(out.heartbeat.has_progress);
    assert_false(out.heartbeat.progress.busy);
    proto_msg_clear(&out);

    /* the gateway's heartbeat: no load, no progress */
    proto_msg_init(&in, PROTO_HEARTBEAT);
    in.heartbeat.seq = 0;
    roundtrip(&in, &out);
    assert_false(out.heartbeat.has_load);
    assert_false(out.heartbeat.has_progress);
    assert_int_equal(out.heartbeat.heartbeat_ms, 0);
    proto_msg_clear(&out);
}

/* HEARTBEAT "prog": every key required, types and ranges checked, and
 * "stall" without "busy" refused. Bodies are {seq: 1, prog: {...}}. */
static void test_heartbeat_progress_rules(void **state)
{
    static const struct {
        const char *what;
        int n_keys;            /* keys of prog written, in the order below */
        bool busy_as_int;      /* "busy": 1 instead of true */
        bool busy;
        uint64_t stall_ms, slow_ms;
        int want;
    } cases[] = {
        {"all keys", 4, false, true, 10, 20, PROTO_OK},
        {"idle, no stall", 4, false, false, 0, 20, PROTO_OK},
        {"stall while idle", 4, false, false, 5, 20, PROTO_ERANGE},
        {"busy as int", 4, true, true, 0, 0, PROTO_EFIELD},
        {"stall_ms 2^31", 4, false, true, 1ull << 31, 0, PROTO_ERANGE},
        {"slow_ms 2^32", 4, false, true, 0, 1ull << 32, PROTO_ERANGE},
        {"no slow_ms", 3, false, true, 0, 0, PROTO_EFIELD},
        {"no stall_ms", 2, false, true, 0, 0, PROTO_EFIELD},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        msgpack_sbuffer sb;
        msgpack_sbuffer_init(&sb);
        msgpack_packer pk;
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_map(&pk, 2);
        msgpack_pack_str(&pk, 3);
        msgpack_pack_str_body(&pk, "seq", 3);
        msgpack_pack_uint64(&pk, 1);
        msgpack_pack_str(&pk, 4);
        msgpack_pack_str_body(&pk, "prog", 4);
        msgpack_pack_map(&pk, (size_t)cases[i].n_keys);
        static const char *const keys[] = {"steps", "busy", "stall_ms", "slow_ms"};
        for (int k = 0; k < cases[i].n_keys; k++) {
            msgpack_pack_str(&pk, strlen(keys[k]));
            msgpack_pack_str_body(&pk, keys[k], strlen(keys[k]));
            if (k == 0)
                msgpack_pack_uint64(&pk, 7);
            else if (k == 1 && cases[i].busy_as_int)
                msgpack_pack_uint64(&pk, 1);
            else if (k == 1 && cases[i].busy)
                msgpack_pack_true(&pk);
            else if (k == 1)
                msgpack_pack_false(&pk);
            else
                msgpack_pack_uint64(&pk, k == 2 ? cases[i].stall_ms : cases[i].slow_ms);
        }
        proto_msg_t m;
        char err[256] = "";
        int rc = proto_decode_body(PROTO_HEARTBEAT, (const uint8_t *)sb.data, sb.size, &m, err,
                                   sizeof err);
        if (rc != cases[i].want)
            fail_msg("case '%s': got %s (%s), want %s", cases[i].what, proto_status_name(rc), err,
                     proto_status_name(cases[i].want));
        if (rc == PROTO_OK) {
            assert_true(m.heartbeat.has_progress);
            assert_true(m.heartbeat.progress.steps == 7);
            assert_int_equal(m.heartbeat.progress.stall_ms, cases[i].stall_ms);
        } else {
            assert_true(strlen(err) > 0);
        }
        proto_msg_clear(&m);
        msgpack_sbuffer_destroy(&sb);
    }
}

/* KV: u64 keys survive, lists round-trip in order; limits and types enforced. */
static void test_kv(void **state)
{
    uint64_t add[3] = {0, UINT64_MAX, 0x8000000000000001ull}, del[1] = {42};
    proto_msg_t in, out;
    proto_msg_init(&in, PROTO_KV);
    in.kv = (proto_kv_t){.reset = true, .add = add, .n_add = 3, .del = del, .n_del = 1};
    roundtrip(&in, &out);
    assert_true(out.kv.reset);
    assert_int_equal(out.kv.n_add, 3);
    assert_memory_equal(out.kv.add, add, sizeof add);
    assert_int_equal(out.kv.n_del, 1);
    assert_true(out.kv.del[0] == 42);
    proto_msg_clear(&out);
    /* an empty body is a valid no-op */
    proto_msg_init(&in, PROTO_KV);
    roundtrip(&in, &out);
    assert_false(out.kv.reset);
    assert_int_equal(out.kv.n_add + out.kv.n_del, 0);
    proto_msg_clear(&out);

    /* counts: PROTO_MAX_KV_KEYS ok, one more refused before allocation */
    for (uint32_t n = PROTO_MAX_KV_KEYS; n <= PROTO_MAX_KV_KEYS + 1; n++) {
        msgpack_sbuffer sb;
        msgpack_sbuffer_init(&sb);
        msgpack_packer pk;
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_map(&pk, 1);
        msgpack_pack_str(&pk, 3);
        msgpack_pack_str_body(&pk, "add", 3);
        msgpack_pack_array(&pk, n);
        for (uint32_t i = 0; i < n; i++)
            msgpack_pack_uint64(&pk, i);
        proto_msg_t m;
        int rc = decode_body(PROTO_KV, &sb, &m);
        assert_int_equal(rc, n == PROTO_MAX_KV_KEYS ? PROTO_OK : PROTO_ERANGE);
        if (rc == PROTO_OK)
            assert_true(m.kv.add[n - 1] == n - 1);
        proto_msg_clear(&m);
        msgpack_sbuffer_destroy(&sb);
    }
    /* wrong types: a negative key, a string key, reset as int, del as map;
     * a lying array count */
    static const uint8_t bad[][12] = {
        {0x81, 0xa3, 'a', 'd', 'd', 0x91, 0xff},                 /* -1 */
        {0x81, 0xa3, 'd', 'e', 'l', 0x91, 0xa1, 'x'},            /* "x" */
        {0x81, 0xa5, 'r', 'e', 's', 'e', 't', 0x01},             /* reset: 1 */
        {0x81, 0xa3, 'd', 'e', 'l', 0x80},                       /* del: {} */
        {0x81, 0xa3, 'a', 'd', 'd', 0xdd, 0, 0, 0x20, 0, 1, 2},  /* 8192 claimed, 2 there */
    };
    static const size_t bad_len[] = {7, 8, 8, 6, 12};
    static const int bad_want[] = {PROTO_ERANGE, PROTO_EFIELD, PROTO_EFIELD, PROTO_EFIELD,
                                   PROTO_EMSGPACK};
    for (size_t i = 0; i < sizeof bad_len / sizeof bad_len[0]; i++) {
        proto_msg_t m;
        char err[256] = "";
        int rc = proto_decode_body(PROTO_KV, bad[i], bad_len[i], &m, err, sizeof err);
        if (rc != bad_want[i])
            fail_msg("bad KV %zu: got %s (%s), want %s", i, proto_status_name(rc), err,
                     proto_status_name(bad_want[i]));
        assert_true(strlen(err) > 0);
        proto_msg_clear(&m);
    }
    assert_string_equal(proto_type_name(PROTO_KV), "KV");
}

static void test_roundtrip_submit_chat(void **state)
{
    proto_chat_msg_t msgs[3] = {{.role = "system", .content = "Be brief."}, {.role = "user", .content = "h\xc3\xa9llo \xe2\x9c\x93"},
                                {.role = "assistant", .content = ""}};
    proto_logit_bias_t bias[2] = {{15043, -100.0}, {0, 2.5}};
    char *stop[2] = {"\n\n", "User:"};
    int32_t resume[3] = {1, 2, 0x7fffffff};
    proto_msg_t in, out;
    proto_msg_init(&in, PROTO_SUBMIT);
    proto_submit_t *s = &in.submit;
    s->id = 0x123456789abcull;
    s->priority = PROTO_PRIO_LOW;
    s->kind = PROTO_KIND_CHAT;
    s->messages = msgs;
    s->n_messages = 3;
    s->sampling = (proto_sampling_t){
        .temperature = 0.7, .top_p = 0.9, .top_k = 40, .min_p = 0.05,
        .repetition_penalty = 1.1, .presence_penalty = -0.5, .frequency_penalty = 1.25,
        .has_seed = true, .seed = 18446744073709551615ull, .logit_bias = bias,
        .n_logit_bias = 2, .logprobs = true, .top_logprobs = 20,
    };
    s->max_tokens = 256;
    s->stop = stop;
    s->n_stop = 2;
    s->ignore_eos = true;
    s->deadline_ms = 30000;
    s->stream = true;
    s->resume = resume;
    s->n_resume = 3;
    char grammar[] = "root ::= \"yes\" | \"no\"";
    s->grammar = grammar;
    s->has_think = true; /* enable_thinking false */
    roundtrip(&in, &out);
    proto_submit_t *o = &out.submit;
    assert_true(o->has_think);
    assert_false(o->think);
    assert_true(o->id == 0x123456789abcull);
    assert_int_equal(o->priority, PROTO_PRIO_LOW);
    assert_int_equal(o->kind, PROTO_KIND_CHAT);
    assert_int_equal(o->n_messages, 3);
    for (int i = 0; i < 3; i++) {
        assert_string_equal(o->messages[i].role, msgs[i].role);
        assert_string_equal(o->messages[i].content, msgs[i].content);
    }
    assert_null(o->prompt);
    assert_false(o->has_prompt_ids);
    assert_true(o->sampling.temperature == 0.7);
    assert_true(o->sampling.top_p == 0.9);
    assert_int_equal(o->sampling.top_k, 40);
    assert_true(o->sampling.min_p == 0.05);
    assert_true(o->sampling.repetition_penalty == 1.1);
    assert_true(o->sampling.presence_penalty == -0.5);
    assert_true(o->sampling.frequency_penalty == 1.25);
    assert_true(o->sampling.has_seed);
    assert_true(o->sampling.seed == 18446744073709551615ull);
    assert_int_equal(o->sampling.n_logit_bias, 2);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(o->sampling.logit_bias[i].token, bias[i].token);
        assert_true(o->sampling.logit_bias[i].bias == bias[i].bias);
    }
    assert_true(o->sampling.logprobs);
    assert_int_equal(o->sampling.top_logprobs, 20);
    assert_int_equal(o->max_tokens, 256);
    assert_int_equal(o->n_stop, 2);
    assert_string_equal(o->stop[0], "\n\n");
    assert_string_equal(o->stop[1], "User:");
    assert_true(o->ignore_eos);
    assert_int_equal(o->deadline_ms, 30000);
    assert_true(o->stream);
    assert_int_equal(o->n_resume, 3);
    assert_memory_equal(o->resume, resume, sizeof resume);
    assert_string_equal(o->grammar, grammar);
    proto_msg_clear(&out);
}

static void test_roundtrip_submit_completion(void **state)
{
    proto_msg_t in, out;
    /* defaults survive: a SUBMIT with only required keys decodes to them */
    proto_msg_init(&in, PROTO_SUBMIT);
    in.submit.id = 1;
    in.submit.kind = PROTO_KIND_COMPLETION;
    in.submit.prompt = "Once upon a time";
    roundtrip(&in, &out);
    assert_string_equal(out.submit.prompt, "Once upon a time");
    assert_int_equal(out.submit.priority, PROTO_PRIO_NORMAL);
    assert_true(out.submit.sampling.temperature == 1.0);
    assert_true(out.submit.sampling.top_p == 1.0);
    assert_true(out.submit.sampling.repetition_penalty == 1.0);
    assert_false(out.submit.sampling.has_seed);
    assert_int_equal(out.submit.n_stop, 0);
    assert_int_equal(out.submit.n_choices, 1); /* absent = one choice */
    assert_false(out.submit.has_think);            /* absent = not given */
    assert_int_equal(out.submit.partition, 0);     /* absent = the public partition */
    proto_msg_clear(&out);

    /* the partition travels as given; 0 is not even encoded (an old peer's body) */
    proto_msg_init(&in, PROTO_SUBMIT);
    in.submit.id = 5;
    in.submit.kind = PROTO_KIND_COMPLETION;
    in.submit.prompt = "x";
    in.submit.partition = 0xfedcba9876543210ULL;
    roundtrip(&in, &out);
    assert_true(out.submit.partition == 0xfedcba9876543210ULL);
    proto_msg_clear(&out);
    {
        size_t n0, n1;
        proto_msg_init(&in, PROTO_SUBMIT);
        in.submit.id = 5;
        in.submit.kind = PROTO_KIND_COMPLETION;
        in.submit.prompt = "x";
        uint8_t *b0 = encode(&in, &n0);
        in.submit.partition = 1;
        uint8_t *b1 = encode(&in, &n1);
        assert_true(n1 > n0);
        assert_null(memmem(b0, n0, "part", 4));
        free(b0);
        free(b1);
    }

    /* n choices */
    proto_msg_init(&in, PROTO_SUBMIT);
    in.submit.id = 3;
    in.submit.kind = PROTO_KIND_COMPLETION;
    in.submit.prompt = "x";
    in.submit.n_choices = PROTO_MAX_CHOICES;
    roundtrip(&in, &out);
    assert_int_equal(out.submit.n_choices, PROTO_MAX_CHOICES);
    proto_msg_clear(&out);

    /* n choices cannot resume: the decoder refuses the pair */
    int32_t one = 5;
    proto_msg_init(&in, PROTO_SUBMIT);
    in.submit.id = 4;
    in.submit.kind = PROTO_KIND_COMPLETION;
    in.submit.prompt = "x";
    in.submit.n_choices = 2;
    in.submit.resume = &one;
    in.submit.n_resume = 1;
    size_t len;
    uint8_t *body = encode(&in, &len);
    char err[256] = "";
    assert_int_equal(proto_decode_body(PROTO_SUBMIT, body, len, &out, err, sizeof err), PROTO_EFIELD);
    assert_non_null(strstr(err, "n_choices"));
    free(body);

    int32_t ids[4] = {1, 15043, 3186, 29991};
    proto_msg_init(&in, PROTO_SUBMIT);
    in.submit.id = 2;
    in.submit.kind = PROTO_KIND_COMPLETION;
    in.submit.prompt_ids = ids;
    in.submit.n_prompt_ids = 4;
    in.submit.has_prompt_ids = true;
    in.submit.sampling.temperature = 0; /* greedy */
    roundtrip(&in, &out);
    assert_null(out.submit.prompt);
    assert_true(out.submit.has_prompt_ids);
    assert_int_equal(out.submit.n_prompt_ids, 4);
    assert_memory_equal(out.submit.prompt_ids, ids, sizeof ids);
    assert_true(out.submit.sampling.temperature == 0.0);
    proto_msg_clear(&out);
}

static void test_roundtrip_event(void **state)
{
    uint8_t b0[] = {0xe2, 0x96}; /* partial UTF-8 is legal in token bytes */
    uint8_t b1[] = {'!'};
    proto_top_logprob_t top[2] = {{b1, 1, -0.25}, {b0, 2, -3.5}};
    proto_logprob_t lps[2] = {{b0, 2, -0.5, top, 2}, {b1, 1, 0.0, NULL, 0}};
    int32_t ids[2] = {31000, 29991};
    proto_msg_t in, out;
    proto_msg_init(&in, PROTO_EVENT);
    proto_event_t *e = &in.event;
    e->id = 77;
    e->text = "\xe2\x96\x81!";
    e->text_len = 4;
    e->ids = ids;
    e->n_ids = 2;
    e->n_tokens = 12;
    e->n_resumed = 5;
    e->choice = 7;
    e->logprobs = lps;
    e->n_logprobs = 2;
    e->finish = PROTO_FINISH_LENGTH;
    e->has_usage = true;
    e->usage = (proto_usage_t){.prompt_tokens = 40, .cached_tokens = 32, .completion_tokens = 12};
    roundtrip(&in, &out);
    proto_event_t *o = &out.event;
    assert_true(o->id == 77);
    assert_int_equal(o->text_len, 4);
    assert_string_equal(o->text, "\xe2\x96\x81!");
    assert_int_equal(o->n_ids, 2);
    assert_memory_equal(o->ids, ids, sizeof ids);
    assert_int_equal(o->n_tokens, 12);
    assert_int_equal(o->n_resumed, 5);
    assert_int_equal(o->choice, 7);
    assert_int_equal(o->n_logprobs, 2);
    assert_int_equal(o->logprobs[0].n_bytes, 2);
    assert_memory_equal(o->logprobs[0].bytes, b0, 2);
    assert_true(o->logprobs[0].logprob == -0.5);
    assert_int_equal(o->logprobs[0].n_top, 2);
    assert_int_equal(o->logprobs[0].top[1].n_bytes, 2);
    assert_memory_equal(o->logprobs[0].top[1].bytes, b0, 2);
    assert_true(o->logprobs[0].top[0].logprob == -0.25);
    assert_true(o->logprobs[0].top[1].logprob == -3.5);
    assert_int_equal(o->logprobs[1].n_top, 0);
    assert_true(o->logprobs[1].logprob == 0.0);
    assert_int_equal(o->finish, PROTO_FINISH_LENGTH);
    assert_true(o->has_usage);
    assert_int_equal(o->usage.prompt_tokens, 40);
    assert_int_equal(o->usage.cached_tokens, 32);
    assert_int_equal(o->usage.completion_tokens, 12);
    proto_msg_clear(&out);

    /* a bare delta: empty text decodes to "" (never NULL), not finished */
    proto_msg_init(&in, PROTO_EVENT);
    in.event.id = 1;
    roundtrip(&in, &out);
    assert_non_null(out.event.text);
    assert_string_equal(out.event.text, "");
    assert_int_equal(out.event.choice, 0);
    assert_int_equal(out.event.finish, PROTO_FINISH_NONE);
    assert_false(out.event.has_usage);
    proto_msg_clear(&out);

    /* every finish reason survives */
    for (int f = PROTO_FINISH_STOP; f <= PROTO_FINISH_TIMEOUT; f++) {
        proto_msg_init(&in, PROTO_EVENT);
        in.event.id = 3;
        in.event.finish = (proto_finish_t)f;
        in.event.has_usage = true;
        roundtrip(&in, &out);
        assert_int_equal(out.event.finish, f);
        proto_msg_clear(&out);
    }
}

static void test_roundtrip_small(void **state)
{
    proto_msg_t in, out;
    proto_msg_init(&in, PROTO_CANCEL);
    in.cancel.id = 99;
    roundtrip(&in, &out);
    assert_true(out.cancel.id == 99);
    proto_msg_clear(&out);

    proto_msg_init(&in, PROTO_ERROR);
    in.error.id = 0;
    in.error.code = 503;
    in.error.message = "draining";
    roundtrip(&in, &out);
    assert_true(out.error.id == 0);
    assert_int_equal(out.error.code, 503);
    assert_string_equal(out.error.message, "draining");
    assert_int_equal(out.error.err, PROTO_ERR_NONE); /* absent: unspecified */
    assert_int_equal(proto_error_cause(&out.error), PROTO_ERR_UNAVAILABLE);
    proto_msg_clear(&out);

    /* a typed cause travels with its code */
    proto_msg_init(&in, PROTO_ERROR);
    in.error.id = 12;
    in.error.err = PROTO_ERR_CONTEXT_LENGTH;
    in.error.code = proto_err_code(PROTO_ERR_CONTEXT_LENGTH);
    in.error.message = "too long";
    roundtrip(&in, &out);
    assert_int_equal(out.error.err, PROTO_ERR_CONTEXT_LENGTH);
    assert_int_equal(out.error.code, 413);
    assert_int_equal(proto_error_cause(&out.error), PROTO_ERR_CONTEXT_LENGTH);
    proto_msg_clear(&out);

    /* and with a failed EVENT */
    proto_msg_init(&in, PROTO_EVENT);
    in.event.id = 4;
    in.event.finish = PROTO_FINISH_ERROR;
    in.event.has_usage = true;
    in.event.err = PROTO_ERR_ENGINE;
    roundtrip(&in, &out);
    assert_int_equal(out.event.err, PROTO_ERR_ENGINE);
    assert_int_equal(proto_event_cause(&out.event), PROTO_ERR_ENGINE);
    proto_msg_clear(&out);

    /* which stop string ended a choice: 1 + its index, with finish stop only */
    proto_msg_init(&in, PROTO_EVENT);
    in.event.id = 5;
    in.event.finish = PROTO_FINISH_STOP;
    in.event.has_usage = true;
    in.event.stop = PROTO_MAX_STOP;
    roundtrip(&in, &out);
    assert_int_equal(out.event.stop, PROTO_MAX_STOP);
    proto_msg_clear(&out);

    int types[] = {PROTO_DRAIN, PROTO_SHUTDOWN};
    for (int i = 0; i < 2; i++) {
        proto_msg_init(&in, (proto_type_t)types[i]);
        roundtrip(&in, &out);
        assert_int_equal(out.type, types[i]);
        proto_msg_clear(&out);
    }
}

/* ------------------------------------------------------------------------ */
/* framing                                                                   */

static void test_frames(void **state)
{
    proto_msg_t m, out;
    proto_msg_init(&m, PROTO_CANCEL);
    m.cancel.id = 5;
    size_t len;
    uint8_t *body = encode(&m, &len);
    uint8_t type = PROTO_CANCEL;
    struct {
        const char *tag;
        size_t tag_len;
        uint8_t type;
        size_t type_len;
        size_t n_frames;
        int want;
    } cases[] = {
        {"PGDA01", 6, PROTO_CANCEL, 1, 3, PROTO_OK},
        {"PGDA02", 6, PROTO_CANCEL, 1, 3, PROTO_EVERSION},
        {"PGDA00", 6, PROTO_CANCEL, 1, 3, PROTO_EVERSION},
        {"PGDAx1", 6, PROTO_CANCEL, 1, 3, PROTO_ETAG},
        {"MDPW01", 6, PROTO_CANCEL, 1, 3, PROTO_ETAG},
        {"PGDA01", 5, PROTO_CANCEL, 1, 3, PROTO_ETAG},
        {"PGDA011", 7, PROTO_CANCEL, 1, 3, PROTO_ETAG},
        {"", 0, PROTO_CANCEL, 1, 3, PROTO_ETAG},
        {"PGDA01", 6, 0, 1, 3, PROTO_ETYPE},
        {"PGDA01", 6, PROTO_TYPE_MAX + 1, 1, 3, PROTO_ETYPE},
        {"PGDA01", 6, 255, 1, 3, PROTO_ETYPE},
        {"PGDA01", 6, PROTO_CANCEL, 0, 3, PROTO_EFRAMES},
        {"PGDA01", 6, PROTO_CANCEL, 2, 3, PROTO_EFRAMES},
        {"PGDA01", 6, PROTO_CANCEL, 1, 2, PROTO_EFRAMES},
        {"PGDA01", 6, PROTO_CANCEL, 1, 4, PROTO_EFRAMES},
        {"PGDA01", 6, PROTO_CANCEL, 1, 0, PROTO_EFRAMES},
        /* the right body under another type's label is caught by its fields */
        {"PGDA01", 6, PROTO_REGISTER, 1, 3, PROTO_EFIELD},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t t2[2] = {cases[i].type, cases[i].type};
        proto_frame_t f[4] = {{(const uint8_t *)cases[i].tag, cases[i].tag_len},
                              {t2, cases[i].type_len},
                              {body, len},
                              {&type, 1}};
        int rc = proto_decode(f, cases[i].n_frames, &out, NULL, 0);
        if (rc != cases[i].want)
            fail_msg("frames case %zu: got %s, want %s", i, proto_status_name(rc),
                     proto_status_name(cases[i].want));
        proto_msg_clear(&out);
    }
    free(body);
}

/* One message of every type with most fields set (static storage: do not
 * proto_msg_clear these). */
#define N_SAMPLES 9
static void sample_messages(proto_msg_t ms[N_SAMPLES])
{
    static proto_chat_msg_t msgs[2] = {{.role = "system", .content = "Be brief."}, {.role = "user", .content = "hi there"}};
    static proto_logit_bias_t bias[1] = {{7, 1.5}};
    static char *stop[1] = {"###"};
    static uint8_t b[] = {'a', 'b'};
    static proto_top_logprob_t top[1] = {{b, 2, -1.0}};
    static proto_logprob_t lp[1] = {{b, 2, -0.5, top, 1}};
    static int32_t ids[1] = {42};
    fill_register(&ms[0]);
    proto_msg_init(&ms[1], PROTO_HEARTBEAT);
    ms[1].heartbeat.seq = 1000;
    ms[1].heartbeat.heartbeat_ms = 1000;
    ms[1].heartbeat.has_load = true;
    ms[1].heartbeat.load.kv_blocks_total = 10;
    ms[1].heartbeat.load.free_slots = 4;
    proto_msg_init(&ms[2], PROTO_SUBMIT);
    ms[2].submit.id = 300;
    ms[2].submit.messages = msgs;
    ms[2].submit.n_messages = 2;
    ms[2].submit.sampling.logit_bias = bias;
    ms[2].submit.sampling.n_logit_bias = 1;
    ms[2].submit.sampling.has_seed = true;
    ms[2].submit.sampling.seed = 1234;
    ms[2].submit.sampling.logprobs = true;
    ms[2].submit.sampling.top_logprobs = 3;
    ms[2].submit.stop = stop;
    ms[2].submit.n_stop = 1;
    ms[2].submit.resume = ids;
    ms[2].submit.n_resume = 1;
    ms[2].submit.max_tokens = 16;
    ms[2].submit.stream = true;
    ms[2].submit.deadline_ms = 5000;
    proto_msg_init(&ms[3], PROTO_SUBMIT);
    ms[3].submit.id = 301;
    ms[3].submit.kind = PROTO_KIND_COMPLETION;
    ms[3].submit.prompt_ids = ids;
    ms[3].submit.n_prompt_ids = 1;
    ms[3].submit.has_prompt_ids = true;
    proto_msg_init(&ms[4], PROTO_CANCEL);
    ms[4].cancel.id = 70000;
    proto_msg_init(&ms[5], PROTO_EVENT);
    ms[5].event.id = 1;
    ms[5].event.text = "ab";
    ms[5].event.ids = ids;
    ms[5].event.n_ids = 1;
    ms[5].event.n_tokens = 1;
    ms[5].event.logprobs = lp;
    ms[5].event.n_logprobs = 1;
    ms[5].event.finish = PROTO_FINISH_STOP;
    ms[5].event.has_usage = true;
    proto_msg_init(&ms[6], PROTO_ERROR);
    ms[6].error.err = PROTO_ERR_ENGINE;
    ms[6].error.code = proto_err_code(PROTO_ERR_ENGINE);
    ms[6].error.message = "boom";
    proto_msg_init(&ms[7], PROTO_DRAIN);
    proto_msg_init(&ms[8], PROTO_SHUTDOWN);
}

/* Every proper prefix of every valid body is rejected as truncated. */
/* The request id of a SUBMIT, EVENT or ERROR; 0 for other types. */
static uint64_t msg_id(const proto_msg_t *m)
{
    switch (m->type) {
    case PROTO_SUBMIT: return m->submit.id;
    case PROTO_EVENT: return m->event.id;
    case PROTO_ERROR: return m->error.id;
    default: return 0;
    }
}

/* What a refused body with a readable id decodes to: type and id, nothing else. */
static const proto_msg_t *only_id(int type, uint64_t id)
{
    static proto_msg_t m;
    memset(&m, 0, sizeof m);
    m.type = (proto_type_t)type;
    if (type == PROTO_SUBMIT)
        m.submit.id = id;
    else if (type == PROTO_EVENT)
        m.event.id = id;
    else if (type == PROTO_ERROR)
        m.error.id = id;
    return &m;
}

/* A malformed EVENT or ERROR keeps its request id wherever the id sits in the
 * map (the gateway fails that request at once instead of at its deadline);
 * an id that is not a uint >= 1 at the top level, or another type, keeps
 * nothing. Bodies from msgpack-c's packer. */
static void test_malformed_keeps_id(void **state)
{
    static const struct {
        const char *what;
        int type;
        kv_t kv[5];
        size_t n;
        int want_rc;
        uint64_t want_id; /* 0: out cleared */
    } cases[] = {
        {"ERROR with an HTTP status as its err (the #22 hang)", PROTO_ERROR,
         {KU("id", 42), KU("code", 400), KS("msg", "bad"), KU("err", 400)}, 4, PROTO_ERANGE, 42},
        {"EVENT with a bad finish, id after it", PROTO_EVENT,
         {KU("n", 1), KS("finish", "bogus"), KU("id", 43)}, 3, PROTO_ERANGE, 43},
        {"EVENT missing its required n", PROTO_EVENT, {KU("id", 44), KS("text", "x")}, 2,
         PROTO_EFIELD, 44},
        {"EVENT whose id is a string", PROTO_EVENT, {KS("id", "45"), KU("n", 1)}, 2, PROTO_EFIELD, 0},
        {"EVENT whose id is negative", PROTO_EVENT, {KI("id", -3), KU("n", 1)}, 2, PROTO_ERANGE, 0},
        {"ERROR about no request (id 0)", PROTO_ERROR,
         {KU("id", 0), KU("code", 99), KS("msg", "x")}, 3, PROTO_ERANGE, 0},
        {"CANCEL is not kept", PROTO_CANCEL, {KU("id", 5), KS("id2", "x"), KU("id", 6)}, 3,
         PROTO_EFIELD, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        msgpack_sbuffer sb;
        msgpack_sbuffer_init(&sb);
        build_map(&sb, cases[i].kv, cases[i].n, NULL, NULL);
        proto_msg_t out;
        char err[256] = "";
        int rc = proto_decode_body(cases[i].type, (const uint8_t *)sb.data, sb.size, &out, err, sizeof err);
        if (rc != cases[i].want_rc)
            fail_msg("%s: got %s (%s)", cases[i].what, proto_status_name(rc), err);
        if (cases[i].want_id)
            assert_memory_equal(&out, only_id(cases[i].type, cases[i].want_id), sizeof out);
        else
            assert_int_equal(out.type, 0);
        msgpack_sbuffer_destroy(&sb);
    }
    /* an "id" inside a nested map is not the request's */
    static const uint8_t nested[] = {0x82, 0xa4, 'm', 'e', 't', 'a', 0x81, 0xa2, 'i', 'd', 0x07,
                                     0xa1, 'n', 0xa1, 'x'};
    proto_msg_t out;
    assert_int_equal(proto_decode_body(PROTO_EVENT, nested, sizeof nested, &out, NULL, 0), PROTO_EFIELD);
    assert_int_equal(out.type, 0);
}

static void test_truncated_everywhere(void **state)
{
    proto_msg_t ms[N_SAMPLES];
    sample_messages(ms);
    size_t n_checked = 0, n_with_id = 0;
    for (int i = 0; i < N_SAMPLES; i++) {
        size_t len;
        uint8_t *body = encode(&ms[i], &len);
        proto_msg_t out;
        assert_int_equal(proto_decode_body(ms[i].type, body, len, &out, NULL, 0), PROTO_OK);
        proto_msg_clear(&out);
        for (size_t cut = 0; cut < len; cut++) {
            /* a fresh copy of exactly `cut` bytes, so ASan catches any overread */
            uint8_t *copy = malloc(cut ? cut : 1);
            memcpy(copy, body, cut);
            char err[200];
            int rc = proto_decode_body(ms[i].type, copy, cut, &out, err, sizeof err);
            if (rc != PROTO_EMSGPACK)
                fail_msg("%s cut at %zu/%zu: got %s (%s)", proto_type_name(ms[i].type), cut, len,
                         proto_status_name(rc), err);
            /* on error the output is cleared: nothing to free — except that a
             * SUBMIT, EVENT or ERROR cut after its id keeps type and id (the
             * receiver ends that request at once), and only those */
            if (out.type != 0) {
                assert_int_equal(out.type, ms[i].type);
                assert_true(msg_id(&ms[i]) != 0);
                assert_true(msg_id(&out) == msg_id(&ms[i]));
                assert_memory_equal(&out, only_id(ms[i].type, msg_id(&ms[i])), sizeof out);
                n_with_id++;
            }
            free(copy);
            n_checked++;
        }
        /* trailing bytes are malformed too */
        uint8_t *longer = malloc(len + 1);
        memcpy(longer, body, len);
        longer[len] = 0xc0;
        assert_int_equal(proto_decode_body(ms[i].type, longer, len + 1, &out, NULL, 0),
                         PROTO_EMSGPACK);
        free(longer);
        free(body);
    }
    print_message("    %zu truncated bodies rejected (%zu kept their request id)\n", n_checked, n_with_id);
    assert_true(n_with_id > 0);
    assert_true(n_checked > 300);
}

/* ------------------------------------------------------------------------ */
/* table-driven field cases                                                  */

static const kv_t register_base[] = {
    KU("v", 1),      KS("model", "m"), KS("replica", "h:1:ab"), KS("host", "h"),
    KU("pid", 1),    KU("cap", 4),     KU("n_ctx", 512),        KU("n_vocab", 100),
    KU("kv_blocks", 64), KU("block", 32),
};
static const kv_t submit_base[] = {
    KU("id", 9), KU("prio", 1), KS("kind", "completion"), KS("prompt", "hello"),
};
static const kv_t event_base[] = {KU("id", 3), KS("text", "x"), KU("n", 1)};
static const kv_t error_base[] = {KU("id", 0), KU("code", 500), KS("msg", "m")};
static const kv_t heartbeat_base[] = {KU("seq", 1)};
static const kv_t cancel_base[] = {KU("id", 1)};

typedef struct field_case {
    const char *what;
    int type;
    const char *omit;
    kv_t set;
    int want;
} field_case_t;

#define NOSET {NULL, V_NIL, 0, 0, 0, NULL}

static const field_case_t field_cases[] = {
    /* the bases themselves are valid */
    {"register base", PROTO_REGISTER, NULL, NOSET, PROTO_OK},
    {"submit base", PROTO_SUBMIT, NULL, NOSET, PROTO_OK},
    {"event base", PROTO_EVENT, NULL, NOSET, PROTO_OK},
    {"error base", PROTO_ERROR, NULL, NOSET, PROTO_OK},
    {"heartbeat base", PROTO_HEARTBEAT, NULL, NOSET, PROTO_OK},
    {"cancel base", PROTO_CANCEL, NULL, NOSET, PROTO_OK},
    /* unknown keys are skipped, whatever their value */
    {"unknown key", PROTO_SUBMIT, NULL, KS("future_field", "x"), PROTO_OK},
    {"unknown nil key", PROTO_EVENT, NULL, KN("zz"), PROTO_OK},
    /* missing required keys */
    {"no v", PROTO_REGISTER, "v", NOSET, PROTO_EFIELD},
    {"no model", PROTO_REGISTER, "model", NOSET, PROTO_EFIELD},
    {"no replica", PROTO_REGISTER, "replica", NOSET, PROTO_EFIELD},
    {"no host", PROTO_REGISTER, "host", NOSET, PROTO_EFIELD},
    {"no pid", PROTO_REGISTER, "pid", NOSET, PROTO_EFIELD},
    {"no cap", PROTO_REGISTER, "cap", NOSET, PROTO_EFIELD},
    {"no n_ctx", PROTO_REGISTER, "n_ctx", NOSET, PROTO_EFIELD},
    {"no n_vocab", PROTO_REGISTER, "n_vocab", NOSET, PROTO_EFIELD},
    {"no kv_blocks", PROTO_REGISTER, "kv_blocks", NOSET, PROTO_EFIELD},
    {"no block", PROTO_REGISTER, "block", NOSET, PROTO_EFIELD},
    {"no id", PROTO_SUBMIT, "id", NOSET, PROTO_EFIELD},
    {"no prio", PROTO_SUBMIT, "prio", NOSET, PROTO_EFIELD},
    {"no kind", PROTO_SUBMIT, "kind", NOSET, PROTO_EFIELD},
    {"completion without prompt", PROTO_SUBMIT, "prompt", NOSET, PROTO_EFIELD},
    {"no event id", PROTO_EVENT, "id", NOSET, PROTO_EFIELD},
    {"no event n", PROTO_EVENT, "n", NOSET, PROTO_EFIELD},
    {"no error code", PROTO_ERROR, "code", NOSET, PROTO_EFIELD},
    {"no error msg", PROTO_ERROR, "msg", NOSET, PROTO_EFIELD},
    {"no seq", PROTO_HEARTBEAT, "seq", NOSET, PROTO_EFIELD},
    {"no cancel id", PROTO_CANCEL, "id", NOSET, PROTO_EFIELD},
    /* wrong value types */
    {"id as string", PROTO_SUBMIT, NULL, KS("id", "9"), PROTO_EFIELD},
    {"prompt as int", PROTO_SUBMIT, NULL, KU("prompt", 5), PROTO_EFIELD},
    {"model as nil", PROTO_REGISTER, NULL, KN("model"), PROTO_EFIELD},
    {"stream as int", PROTO_SUBMIT, NULL, KU("stream", 1), PROTO_EFIELD},
    {"temp as string", PROTO_SUBMIT, NULL, KS("temp", "0.5"), PROTO_EFIELD},
    {"seq as double", PROTO_HEARTBEAT, NULL, KD("seq", 1.0), PROTO_EFIELD},
    {"msgs as string", PROTO_SUBMIT, NULL, KS("msgs", "hi"), PROTO_EFIELD},
    {"load as int", PROTO_HEARTBEAT, NULL, KU("load", 3), PROTO_EFIELD},
    {"vis as int", PROTO_REGISTER, NULL, KU("vis", 3), PROTO_EFIELD},
    {"finish as int", PROTO_EVENT, NULL, KU("finish", 1), PROTO_EFIELD},
    {"err as string", PROTO_ERROR, NULL, KS("err", "engine"), PROTO_EFIELD},
    /* negative or huge where unsigned expected */
    {"negative id", PROTO_SUBMIT, NULL, KI("id", -1), PROTO_ERANGE},
    {"zero id", PROTO_SUBMIT, NULL, KU("id", 0), PROTO_ERANGE},
    {"negative cap", PROTO_REGISTER, NULL, KI("cap", -4), PROTO_ERANGE},
    {"huge cap", PROTO_REGISTER, NULL, KU("cap", 1ull << 40), PROTO_ERANGE},
    {"zero cap", PROTO_REGISTER, NULL, KU("cap", 0), PROTO_ERANGE},
    {"zero pid", PROTO_REGISTER, NULL, KU("pid", 0), PROTO_ERANGE},
    {"pid past int", PROTO_REGISTER, NULL, KU("pid", 1ull << 31), PROTO_ERANGE},
    {"zero block", PROTO_REGISTER, NULL, KU("block", 0), PROTO_ERANGE},
    {"huge n_ctx", PROTO_REGISTER, NULL, KU("n_ctx", UINT64_MAX), PROTO_ERANGE},
    {"prio 3", PROTO_SUBMIT, NULL, KU("prio", 3), PROTO_ERANGE},
    {"prio -1", PROTO_SUBMIT, NULL, KI("prio", -1), PROTO_ERANGE},
    {"max_tok 2^32", PROTO_SUBMIT, NULL, KU("max_tok", 1ull << 32), PROTO_ERANGE},
    {"top_lp 21", PROTO_SUBMIT, NULL, KU("top_lp", 21), PROTO_ERANGE},
    {"code 99", PROTO_ERROR, NULL, KU("code", 99), PROTO_ERANGE},
    {"code 600", PROTO_ERROR, NULL, KU("code", 600), PROTO_ERANGE},
    {"error err 2", PROTO_ERROR, NULL, KU("err", 2), PROTO_OK},
    {"error err unknown to us", PROTO_ERROR, NULL, KU("err", 200), PROTO_OK},
    {"error err 256", PROTO_ERROR, NULL, KU("err", 256), PROTO_ERANGE},
    {"error err -1", PROTO_ERROR, NULL, KI("err", -1), PROTO_ERANGE},
    {"event err 5", PROTO_EVENT, NULL, KU("err", 5), PROTO_OK},
    {"event err 256", PROTO_EVENT, NULL, KU("err", 256), PROTO_ERANGE},
    {"hb_ms 0", PROTO_HEARTBEAT, NULL, KU("hb_ms", 0), PROTO_ERANGE},
    {"hb_ms huge", PROTO_REGISTER, NULL, KU("hb_ms", 1u << 30), PROTO_ERANGE},
    {"unsigned negative n", PROTO_EVENT, NULL, KI("n", -5), PROTO_ERANGE},
    {"n below n_resumed", PROTO_EVENT, NULL, KU("n_resumed", 2), PROTO_ERANGE},
    {"n_choices 0", PROTO_SUBMIT, NULL, KU("n_choices", 0), PROTO_ERANGE},
    {"n_choices 129", PROTO_SUBMIT, NULL, KU("n_choices", PROTO_MAX_CHOICES + 1), PROTO_ERANGE},
    {"n_choices 128", PROTO_SUBMIT, NULL, KU("n_choices", PROTO_MAX_CHOICES), PROTO_OK},
    {"n_choices as string", PROTO_SUBMIT, NULL, KS("n_choices", "2"), PROTO_EFIELD},
    {"choice 127", PROTO_EVENT, NULL, KU("choice", PROTO_MAX_CHOICES - 1), PROTO_OK},
    {"choice 128", PROTO_EVENT, NULL, KU("choice", PROTO_MAX_CHOICES), PROTO_ERANGE},
    {"negative choice", PROTO_EVENT, NULL, KI("choice", -1), PROTO_ERANGE},
    {"op tokenize", PROTO_SUBMIT, NULL, KS("op", "tokenize"), PROTO_OK},
    {"op unknown", PROTO_SUBMIT, NULL, KS("op", "summarize"), PROTO_ERANGE},
    {"op as int", PROTO_SUBMIT, NULL, KU("op", 1), PROTO_EFIELD},
    {"detokenize without prompt_ids", PROTO_SUBMIT, NULL, KS("op", "detokenize"), PROTO_EFIELD},
    {"add_special false", PROTO_SUBMIT, NULL, KB("add_special", false), PROTO_OK},
    /* part: the prefix-cache partition, any u64 (0 = the public one) */
    {"part 0", PROTO_SUBMIT, NULL, KU("part", 0), PROTO_OK},
    {"part 2^64-1", PROTO_SUBMIT, NULL, KU("part", UINT64_MAX), PROTO_OK},
    {"part negative", PROTO_SUBMIT, NULL, KI("part", -1), PROTO_ERANGE},
    {"part as string", PROTO_SUBMIT, NULL, KS("part", "7"), PROTO_EFIELD},
    {"part as float", PROTO_SUBMIT, NULL, KD("part", 1.5), PROTO_EFIELD},
    /* protocol version inside REGISTER */
    {"register v2", PROTO_REGISTER, NULL, KU("v", 2), PROTO_EVERSION},
    /* floats: NaN, infinities, out of range; integers accepted as floats */
    {"NaN temperature", PROTO_SUBMIT, NULL, KD("temp", NAN), PROTO_ERANGE},
    {"inf temperature", PROTO_SUBMIT, NULL, KD("temp", INFINITY), PROTO_ERANGE},
    {"negative temperature", PROTO_SUBMIT, NULL, KD("temp", -0.1), PROTO_ERANGE},
    {"temperature 101", PROTO_SUBMIT, NULL, KD("temp", 101), PROTO_ERANGE},
    {"integer temperature", PROTO_SUBMIT, NULL, KU("temp", 0), PROTO_OK},
    {"float32 temperature", PROTO_SUBMIT, NULL, {"temp", V_FLOAT32, 0, 0, 0.5, NULL}, PROTO_OK},
    {"float32 NaN top_p", PROTO_SUBMIT, NULL, {"top_p", V_FLOAT32, 0, 0, NAN, NULL}, PROTO_ERANGE},
    {"top_p 0", PROTO_SUBMIT, NULL, KD("top_p", 0), PROTO_ERANGE},
    {"top_p 1.5", PROTO_SUBMIT, NULL, KD("top_p", 1.5), PROTO_ERANGE},
    {"min_p -inf", PROTO_SUBMIT, NULL, KD("min_p", -INFINITY), PROTO_ERANGE},
    {"rep_pen 0", PROTO_SUBMIT, NULL, KD("rep_pen", 0), PROTO_ERANGE},
    {"pres_pen 3", PROTO_SUBMIT, NULL, KD("pres_pen", 3), PROTO_ERANGE},
    {"freq_pen -3", PROTO_SUBMIT, NULL, KI("freq_pen", -3), PROTO_ERANGE},
    /* strings: limits, UTF-8, NUL */
    {"empty model", PROTO_REGISTER, NULL, KS("model", ""), PROTO_ERANGE},
    {"bad UTF-8 prompt", PROTO_SUBMIT, NULL, KS("prompt", "a\xff" "b"), PROTO_ERANGE},
    {"overlong UTF-8", PROTO_SUBMIT, NULL, KS("prompt", "\xc0\xaf"), PROTO_ERANGE},
    {"surrogate UTF-8", PROTO_SUBMIT, NULL, KS("prompt", "\xed\xa0\x80"), PROTO_ERANGE},
    {"past U+10FFFF", PROTO_SUBMIT, NULL, KS("prompt", "\xf4\x90\x80\x80"), PROTO_ERANGE},
    {"cut UTF-8 text", PROTO_EVENT, NULL, KS("text", "\xe2\x96"), PROTO_ERANGE},
    {"valid 4-byte UTF-8", PROTO_SUBMIT, NULL, KS("prompt", "\xf0\x9f\x98\x80"), PROTO_OK},
    {"unknown kind", PROTO_SUBMIT, NULL, KS("kind", "embedding"), PROTO_ERANGE},
    {"unknown finish", PROTO_EVENT, NULL, KS("finish", "done"), PROTO_ERANGE},
    /* cross-field rules */
    {"chat without msgs", PROTO_SUBMIT, NULL, KS("kind", "chat"), PROTO_EFIELD},
    {"top_lp without logprobs", PROTO_SUBMIT, NULL, KU("top_lp", 2), PROTO_EFIELD},
    {"finish without usage", PROTO_EVENT, NULL, KS("finish", "stop"), PROTO_EFIELD},
};

/* The error-cause table of msg.h, and how an ERROR without "err" (an older
 * peer) is read from its code. */
static void test_error_causes(void **state)
{
    static const struct {
        proto_err_t err;
        const char *name;
        uint32_t code;
    } rows[] = {
        {PROTO_ERR_BAD_REQUEST, "bad_request", 400},
        {PROTO_ERR_CONTEXT_LENGTH, "context_length", 413},
        {PROTO_ERR_DUPLICATE_ID, "duplicate_id", 400},
        {PROTO_ERR_UNAVAILABLE, "unavailable", 503},
        {PROTO_ERR_DEADLINE, "deadline", 504},
        {PROTO_ERR_ENGINE, "engine", 500},
        {PROTO_ERR_NOT_REGISTERED, "not_registered", 409},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        assert_string_equal(proto_err_name(rows[i].err), rows[i].name);
        assert_int_equal(proto_err_code(rows[i].err), rows[i].code);
        proto_error_t e = {.code = 400, .err = rows[i].err};
        assert_int_equal(proto_error_cause(&e), rows[i].err); /* err wins over code */
    }
    assert_string_equal(proto_err_name(PROTO_ERR_NONE), "unspecified");
    assert_string_equal(proto_err_name(PROTO_ERR_LAST + 1), "unspecified");
    assert_int_equal(proto_err_code(PROTO_ERR_LAST + 1), 500);
    static const struct {
        uint32_t code, err;
        proto_err_t want;
    } old[] = {
        {400, 0, PROTO_ERR_BAD_REQUEST}, {404, 0, PROTO_ERR_BAD_REQUEST},
        {409, 0, PROTO_ERR_NOT_REGISTERED}, {413, 0, PROTO_ERR_CONTEXT_LENGTH},
        {500, 0, PROTO_ERR_ENGINE}, {503, 0, PROTO_ERR_UNAVAILABLE},
        {413, 200, PROTO_ERR_CONTEXT_LENGTH}, /* an err from a newer peer: by code */
    };
    for (size_t i = 0; i < sizeof old / sizeof old[0]; i++) {
        proto_error_t e = {.code = old[i].code, .err = old[i].err};
        assert_int_equal(proto_error_cause(&e), old[i].want);
    }
    proto_event_t ev = {.finish = PROTO_FINISH_TIMEOUT};
    assert_int_equal(proto_event_cause(&ev), PROTO_ERR_DEADLINE);
    ev.finish = PROTO_FINISH_ERROR;
    assert_int_equal(proto_event_cause(&ev), PROTO_ERR_ENGINE);
    ev.err = PROTO_ERR_DEADLINE;
    assert_int_equal(proto_event_cause(&ev), PROTO_ERR_DEADLINE);
}

static void test_field_cases(void **state)
{
    for (size_t i = 0; i < sizeof field_cases / sizeof field_cases[0]; i++) {
        const field_case_t *c = &field_cases[i];
        const kv_t *base;
        size_t n;
        switch (c->type) {
        case PROTO_REGISTER: base = register_base; n = 10; break;
        case PROTO_SUBMIT: base = submit_base; n = 4; break;
        case PROTO_EVENT: base = event_base; n = 3; break;
        case PROTO_ERROR: base = error_base; n = 3; break;
        case PROTO_HEARTBEAT: base = heartbeat_base; n = 1; break;
        default: base = cancel_base; n = 1; break;
        }
        msgpack_sbuffer sb;
        msgpack_sbuffer_init(&sb);
        build_map(&sb, base, n, c->omit, c->set.key ? &c->set : NULL);
        proto_msg_t m;
        char err[256] = "";
        int rc = proto_decode_body(c->type, (const uint8_t *)sb.data, sb.size, &m, err,
                                   sizeof err);
        if (rc != c->want)
            fail_msg("case '%s': got %s (%s), want %s", c->what, proto_status_name(rc), err,
                     proto_status_name(c->want));
        if (rc != PROTO_OK)
            assert_true(strlen(err) > 0); /* every rejection says why */
        proto_msg_clear(&m);
        msgpack_sbuffer_destroy(&sb);
    }
}

/* Duplicate and non-string keys, bad bytes, nesting, lying counts. */
static void test_structure(void **state)
{
    proto_msg_t m;
    /* duplicate key */
    static const uint8_t dup[] = {0x82, 0xa2, 'i', 'd', 0x01, 0xa2, 'i', 'd', 0x02};
    assert_int_equal(proto_decode_body(PROTO_CANCEL, dup, sizeof dup, &m, NULL, 0), PROTO_EFIELD);
    /* integer key */
    static const uint8_t intkey[] = {0x81, 0x01, 0x01};
    assert_int_equal(proto_decode_body(PROTO_CANCEL, intkey, sizeof intkey, &m, NULL, 0),
                     PROTO_EFIELD);
    /* body is an array, not a map */
    static const uint8_t arr[] = {0x91, 0x01};
    assert_int_equal(proto_decode_body(PROTO_DRAIN, arr, sizeof arr, &m, NULL, 0), PROTO_EFIELD);
    /* the never-used byte 0xc1 */
    static const uint8_t c1[] = {0x81, 0xa2, 'i', 'd', 0xc1};
    assert_int_equal(proto_decode_body(PROTO_CANCEL, c1, sizeof c1, &m, NULL, 0), PROTO_EMSGPACK);
    /* empty body */
    assert_int_equal(proto_decode_body(PROTO_SHUTDOWN, NULL, 0, &m, NULL, 0), PROTO_EMSGPACK);
    /* a map32 that claims 4 billion pairs in 5 bytes: no allocation, rejected */
    static const uint8_t liar[] = {0xdf, 0xff, 0xff, 0xff, 0xff};
    assert_int_equal(proto_decode_body(PROTO_SUBMIT, liar, sizeof liar, &m, NULL, 0),
                     PROTO_EMSGPACK);
    /* "resume": array32 of 2^32-1 ids with 2 bytes behind it */
    static const uint8_t ids_liar[] = {0x84, 0xa2, 'i', 'd', 0x01, 0xa4, 'p', 'r', 'i', 'o', 0x01,
                                       0xa4, 'k', 'i', 'n', 'd', 0xa4, 'c', 'h', 'a', 't',
                                       0xa4, 'm', 's', 'g', 's', 0xdd, 0xff, 0xff, 0xff, 0xff,
                                       0x80, 0x80};
    assert_int_equal(proto_decode_body(PROTO_SUBMIT, ids_liar, sizeof ids_liar, &m, NULL, 0),
                     PROTO_EMSGPACK);
    /* unknown keys with ext, bin and nested values are skipped */
    static const uint8_t exts[] = {0x84, 0xa2, 'i', 'd', 0x07, 0xa1, 'x', 0xd6, 0x05, 1, 2, 3, 4,
                                   0xa1, 'y', 0xc4, 0x02, 0xff, 0x00, 0xa1, 'z', 0x91, 0x81,
                                   0xa1, 'q', 0xc7, 0x01, 0x09, 0xaa};
    assert_int_equal(proto_decode_body(PROTO_CANCEL, exts, sizeof exts, &m, NULL, 0), PROTO_OK);
    assert_true(m.cancel.id == 7);
    proto_msg_clear(&m);
    /* unknown value nested deeper than PROTO_MAX_DEPTH */
    uint8_t deep[64];
    size_t n = 0;
    deep[n++] = 0x82;
    deep[n++] = 0xa2, deep[n++] = 'i', deep[n++] = 'd', deep[n++] = 0x01;
    deep[n++] = 0xa1, deep[n++] = 'x';
    for (int i = 0; i < PROTO_MAX_DEPTH + 2; i++)
        deep[n++] = 0x91;
    deep[n++] = 0xc0;
    assert_int_equal(proto_decode_body(PROTO_CANCEL, deep, n, &m, NULL, 0), PROTO_ERANGE);
    /* ...and exactly at the limit it is fine */
    n = 7;
    for (int i = 0; i < PROTO_MAX_DEPTH; i++)
        deep[n++] = 0x91;
    deep[n++] = 0xc0;
    assert_int_equal(proto_decode_body(PROTO_CANCEL, deep, n, &m, NULL, 0), PROTO_OK);
    proto_msg_clear(&m);
    /* a NUL inside a string */
    static const uint8_t nul[] = {0x83, 0xa2, 'i', 'd', 0x00, 0xa4, 'c', 'o', 'd', 'e', 0xcd, 0x01,
                                  0xf4, 0xa3, 'm', 's', 'g', 0xa3, 'a', 0x00, 'b'};
    assert_int_equal(proto_decode_body(PROTO_ERROR, nul, sizeof nul, &m, NULL, 0), PROTO_ERANGE);
    /* oversized body */
    assert_int_equal(proto_decode_body(PROTO_CANCEL, dup, (size_t)PROTO_MAX_BODY + 1, &m, NULL, 0),
                     PROTO_ERANGE);
}

/* Limits on strings and arrays: at the limit is accepted, one past is not. */
static void pack_submit_with(msgpack_sbuffer *sb, const char *kind, uint32_t n_msgs,
                             size_t prompt_len, uint32_t n_stop, uint32_t n_bias, uint32_t n_ids)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 4 + (n_stop > 0) + (n_bias > 0));
    pk_str(&pk, "id"), msgpack_pack_uint64(&pk, 1);
    pk_str(&pk, "prio"), msgpack_pack_uint64(&pk, 0);
    pk_str(&pk, "kind"), pk_str(&pk, kind);
    if (strcmp(kind, "chat") == 0) {
        pk_str(&pk, "msgs");
        msgpack_pack_array(&pk, n_msgs);
        for (uint32_t i = 0; i < n_msgs; i++) {
            msgpack_pack_map(&pk, 2);
            pk_str(&pk, "role"), pk_str(&pk, "user");
            pk_str(&pk, "content"), pk_str(&pk, "c");
        }
    } else if (n_ids) {
        pk_str(&pk, "prompt_ids");
        msgpack_pack_array(&pk, n_ids);
        for (uint32_t i = 0; i < n_ids; i++)
            msgpack_pack_uint32(&pk, i);
    } else {
        char *p = malloc(prompt_len + 1);
        memset(p, 'a', prompt_len);
        pk_str(&pk, "prompt");
        msgpack_pack_str(&pk, prompt_len);
        msgpack_pack_str_body(&pk, p, prompt_len);
        free(p);
    }
    if (n_stop) {
        pk_str(&pk, "stop");
        msgpack_pack_array(&pk, n_stop);
        for (uint32_t i = 0; i < n_stop; i++)
            pk_str(&pk, "s");
    }
    if (n_bias) {
        pk_str(&pk, "bias");
        msgpack_pack_map(&pk, n_bias);
        for (uint32_t i = 0; i < n_bias; i++) {
            msgpack_pack_uint32(&pk, i);
            msgpack_pack_double(&pk, -1);
        }
    }
}

static void test_limits(void **state)
{
    struct {
        const char *kind;
        uint32_t n_msgs;
        size_t prompt_len;
        uint32_t n_stop, n_bias, n_ids;
        int want;
    } cases[] = {
        {"chat", PROTO_MAX_MESSAGES, 0, 0, 0, 0, PROTO_OK},
        {"chat", PROTO_MAX_MESSAGES + 1, 0, 0, 0, 0, PROTO_ERANGE},
        {"completion", 0, PROTO_MAX_PROMPT, 0, 0, 0, PROTO_OK},
        {"completion", 0, PROTO_MAX_PROMPT + 1, 0, 0, 0, PROTO_ERANGE},
        {"completion", 0, 1, PROTO_MAX_STOP, 0, 0, PROTO_OK},
        {"completion", 0, 1, PROTO_MAX_STOP + 1, 0, 0, PROTO_ERANGE},
        {"completion", 0, 1, 0, PROTO_MAX_LOGIT_BIAS, 0, PROTO_OK},
        {"completion", 0, 1, 0, PROTO_MAX_LOGIT_BIAS + 1, 0, PROTO_ERANGE},
        {"completion", 0, 0, 0, 0, PROTO_MAX_TOKENS, PROTO_OK},
        {"completion", 0, 0, 0, 0, PROTO_MAX_TOKENS + 1, PROTO_ERANGE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        msgpack_sbuffer sb;
        msgpack_sbuffer_init(&sb);
        pack_submit_with(&sb, cases[i].kind, cases[i].n_msgs, cases[i].prompt_len,
                         cases[i].n_stop, cases[i].n_bias, cases[i].n_ids);
        proto_msg_t m;
        int rc = decode_body(PROTO_SUBMIT, &sb, &m);
        if (rc != cases[i].want)
            fail_msg("limit case %zu: got %s want %s", i, proto_status_name(rc),
                     proto_status_name(cases[i].want));
        if (rc == PROTO_OK && cases[i].prompt_len == PROTO_MAX_PROMPT)
            assert_int_equal(strlen(m.submit.prompt), PROTO_MAX_PROMPT);
        proto_msg_clear(&m);
        msgpack_sbuffer_destroy(&sb);
    }

    /* a name one byte past the limit */
    char name[PROTO_MAX_NAME + 2];
    memset(name, 'n', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    kv_t set = KS("model", name);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    build_map(&sb, register_base, 10, NULL, &set);
    proto_msg_t m;
    assert_int_equal(decode_body(PROTO_REGISTER, &sb, &m), PROTO_ERANGE);
    msgpack_sbuffer_destroy(&sb);
    name[PROTO_MAX_NAME] = '\0';
    msgpack_sbuffer_init(&sb);
    build_map(&sb, register_base, 10, NULL, &set);
    assert_int_equal(decode_body(PROTO_REGISTER, &sb, &m), PROTO_OK);
    assert_int_equal(strlen(m.reg.model), PROTO_MAX_NAME);
    proto_msg_clear(&m);
    msgpack_sbuffer_destroy(&sb);

    /* the encoder refuses a body the decoder would refuse for size */
    proto_msg_init(&m, PROTO_SUBMIT);
    m.submit.id = 1;
    m.submit.kind = PROTO_KIND_COMPLETION;
    char *big = malloc((size_t)PROTO_MAX_BODY + 2);
    memset(big, 'b', (size_t)PROTO_MAX_BODY + 1);
    big[PROTO_MAX_BODY + 1] = '\0';
    m.submit.prompt = big;
    uint8_t *body = (uint8_t *)"x";
    size_t len = 1;
    assert_int_equal(proto_encode(&m, &body, &len), PROTO_ERANGE);
    assert_null(body);
    free(big);
}

/* op rank: the query in prompt, the documents in inputs; without a prompt,
 * with dims, or with n_choices other than the inputs it is refused. */
static void test_roundtrip_rank(void **state)
{
    (void)state;
    proto_msg_t in, out;
    proto_input_t inputs[2] = {{.text = "doc a"}, {.text = "doc b"}};
    proto_msg_init(&in, PROTO_SUBMIT);
    in.submit.id = 10;
    in.submit.kind = PROTO_KIND_COMPLETION;
    in.submit.op = PROTO_OP_RANK;
    in.submit.prompt = "the query";
    in.submit.inputs = inputs;
    in.submit.n_inputs = 2;
    in.submit.n_choices = 2;
    roundtrip(&in, &out);
    assert_int_equal(out.submit.op, PROTO_OP_RANK);
    assert_string_equal(out.submit.prompt, "the query");
    assert_int_equal(out.submit.n_inputs, 2);
    assert_string_equal(out.submit.inputs[1].text, "doc b");
    proto_msg_clear(&out);
    size_t len;
    uint8_t *body;
    in.submit.prompt = NULL; /* no query */
    body = encode(&in, &len);
    assert_int_equal(proto_decode_body(PROTO_SUBMIT, body, len, &out, NULL, 0), PROTO_EFIELD);
    free(body);
    in.submit.prompt = "q";
    in.submit.dimensions = 64; /* dims belong to op embed */
    body = encode(&in, &len);
    assert_int_equal(proto_decode_body(PROTO_SUBMIT, body, len, &out, NULL, 0), PROTO_EFIELD);
    free(body);
    in.submit.dimensions = 0;
    in.submit.n_choices = 1;
    body = encode(&in, &len);
    assert_int_equal(proto_decode_body(PROTO_SUBMIT, body, len, &out, NULL, 0), PROTO_EFIELD);
    free(body);
}

/* sb, pk set up, then a SUBMIT map of n keys, its first three: id 1, prio
 * 1, kind. */
static void pack_submit_head(msgpack_sbuffer *sb, msgpack_packer *pk, uint32_t n, proto_kind_t kind)
{
    msgpack_sbuffer_init(sb);
    msgpack_packer_init(pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(pk, n);
    msgpack_pack_str_with_body(pk, "id", 2);
    msgpack_pack_uint64(pk, 1);
    msgpack_pack_str_with_body(pk, "prio", 4);
    msgpack_pack_uint64(pk, 1);
    msgpack_pack_str_with_body(pk, "kind", 4);
    msgpack_pack_str_with_body(pk, proto_kind_name(kind), strlen(proto_kind_name(kind)));
}

/* lora: adapters by name, scale optional (absent = the worker's); not
 * encoded when empty; bounds on the scale, the name and the count. */
static void test_roundtrip_lora(void **state)
{
    (void)state;
    proto_msg_t in, out;
    proto_msg_init(&in, PROTO_SUBMIT);
    in.submit.id = 11;
    in.submit.kind = PROTO_KIND_COMPLETION;
    in.submit.prompt = "x";
    size_t len;
    uint8_t *body = encode(&in, &len);
    assert_null(memmem(body, len, "lora", 4));
    free(body);
    in.submit.n_lora = 2;
    in.submit.lora[0] = (proto_lora_t){.name = "sql", .has_scale = true, .scale = 0.5};
    in.submit.lora[1] = (proto_lora_t){.name = "style"};
    roundtrip(&in, &out);
    assert_int_equal(out.submit.n_lora, 2);
    assert_string_equal(out.submit.lora[0].name, "sql");
    assert_true(out.submit.lora[0].has_scale && out.submit.lora[0].scale == 0.5);
    assert_string_equal(out.submit.lora[1].name, "style");
    assert_false(out.submit.lora[1].has_scale);
    proto_msg_clear(&out);
    in.submit.lora[0].scale = 101; /* outside [-100, 100] */
    body = encode(&in, &len);
    assert_int_equal(proto_decode_body(PROTO_SUBMIT, body, len, &out, NULL, 0), PROTO_ERANGE);
    free(body);
    in.submit.lora[0] = (proto_lora_t){.name = ""}; /* empty name */
    body = encode(&in, &len);
    assert_int_equal(proto_decode_body(PROTO_SUBMIT, body, len, &out, NULL, 0), PROTO_ERANGE);
    free(body);
    /* more adapters than PROTO_MAX_LORA, an empty list, a map without name */
    for (int c = 0; c < 3; c++) {
        msgpack_sbuffer sb;
        msgpack_packer pk;
        pack_submit_head(&sb, &pk, 4, PROTO_KIND_COMPLETION);
        msgpack_pack_str_with_body(&pk, "lora", 4);
        uint32_t n = c == 0 ? PROTO_MAX_LORA + 1 : c == 1 ? 0 : 1;
        msgpack_pack_array(&pk, n);
        for (uint32_t i = 0; i < n; i++) {
            msgpack_pack_map(&pk, 1);
            if (c == 2) {
                msgpack_pack_str_with_body(&pk, "scale", 5);
                msgpack_pack_double(&pk, 1.0);
            } else {
                msgpack_pack_str_with_body(&pk, "name", 4);
                msgpack_pack_str_with_body(&pk, "a", 1);
            }
        }
        assert_int_equal(decode_body(PROTO_SUBMIT, &sb, &out), c == 2 ? PROTO_EFIELD : PROTO_ERANGE);
        msgpack_sbuffer_destroy(&sb);
    }
}

#define CORPUS_DIR "tests/fuzz/corpus/proto"

/* A fuzz seed: the tag, the type byte, m's body. */
static void write_seed(const char *path, const proto_msg_t *m)
{
    size_t len;
    uint8_t *body = encode(m, &len);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint8_t type = (uint8_t)m->type;
    fwrite(PROTO_TAG, 1, PROTO_TAG_LEN, f);
    fwrite(&type, 1, 1, f);
    fwrite(body, 1, len, f);
    fclose(f);
    free(body);
}

/* LORA and LORA_ACK (run-time adapters): load (path, scale) and unload (no
 * path) round-trip; seq 0, an empty name, a scale outside [-100, 100], a
 * path over PROTO_MAX_PATH are refused; ACK's msg is optional. Seeds
 * tests/fuzz/corpus/proto/12_LORA and 13_LORA_ACK are these messages
 * (written with PAGODA_WRITE_CORPUS=1). */
static void test_roundtrip_lora_op(void **state)
{
    (void)state;
    proto_msg_t in, out;
    proto_msg_init(&in, PROTO_LORA);
    assert_true(in.lora.scale == 1.0); /* the default */
    in.lora = (proto_lora_op_t){.seq = 7, .name = "sql", .path = "/srv/sql.gguf", .scale = -2.5};
    roundtrip(&in, &out);
    assert_true(out.lora.seq == 7);
    assert_string_equal(out.lora.name, "sql");
    assert_string_equal(out.lora.path, "/srv/sql.gguf");
    assert_true(out.lora.scale == -2.5);
    proto_msg_clear(&out);
    if (getenv("PAGODA_WRITE_CORPUS"))
        write_seed(CORPUS_DIR "/12_LORA", &in);
    in.lora.path = NULL; /* unload */
    roundtrip(&in, &out);
    assert_null(out.lora.path);
    assert_true(out.lora.scale == 1.0);
    proto_msg_clear(&out);
    size_t len;
    uint8_t *body;
    proto_msg_t bad[4];
    for (int i = 0; i < 4; i++)
        bad[i] = in;
    bad[0].lora.seq = 0;
    bad[1].lora.name = "";
    bad[2].lora.path = "/x";
    bad[2].lora.scale = 100.5;
    char *long_path = malloc(PROTO_MAX_PATH + 2);
    memset(long_path, 'a', PROTO_MAX_PATH + 1);
    long_path[PROTO_MAX_PATH + 1] = '\0';
    bad[3].lora.path = long_path;
    for (int i = 0; i < 4; i++) {
        body = encode(&bad[i], &len);
        assert_int_equal(proto_decode_body(PROTO_LORA, body, len, &out, NULL, 0), PROTO_ERANGE);
        free(body);
    }
    free(long_path);

    proto_msg_init(&in, PROTO_LORA_ACK);
    in.lora = (proto_lora_op_t){.seq = 7, .name = "sql"};
    roundtrip(&in, &out);
    assert_true(out.lora.seq == 7);
    assert_null(out.lora.message);
    proto_msg_clear(&out);
    in.lora.message = "general.type is 'model', not 'adapter'";
    roundtrip(&in, &out);
    assert_string_equal(out.lora.message, in.lora.message);
    proto_msg_clear(&out);
    if (getenv("PAGODA_WRITE_CORPUS"))
        write_seed(CORPUS_DIR "/13_LORA_ACK", &in);
    assert_string_equal(proto_type_name(PROTO_LORA), "LORA");
    assert_string_equal(proto_type_name(PROTO_LORA_ACK), "LORA_ACK");
    const char *seeds[] = {CORPUS_DIR "/12_LORA", CORPUS_DIR "/13_LORA_ACK"};
    for (int i = 0; i < 2; i++) {
        size_t n;
        unsigned char *seed = support_read_file(seeds[i], &n);
        if (!seed)
            fail_msg("missing seed %s (run with PAGODA_WRITE_CORPUS=1 from the repo root)", seeds[i]);
        proto_frame_t fr[3] = {{seed, 6}, {seed + 6, 1}, {seed + 7, n - 7}};
        assert_int_equal(proto_decode(fr, 3, &out, NULL, 0), PROTO_OK);
        assert_int_equal(out.type, i ? PROTO_LORA_ACK : PROTO_LORA);
        proto_msg_clear(&out);
        free(seed);
    }
}

/* imgs and msgs[].parts: decoded images with their hash, parts as str or
 * image index; neither key is encoded without images; the bounds (size,
 * rgb length, hash length, count, index, chat only). The seed
 * tests/fuzz/corpus/proto/10_SUBMIT_IMGS is this message (written with
 * PAGODA_WRITE_CORPUS=1). */
static void test_roundtrip_images(void **state)
{
    (void)state;
    proto_msg_t in, out;
    proto_msg_init(&in, PROTO_SUBMIT);
    proto_chat_msg_t msgs[2] = {{.role = "system", .content = "be brief"}, {.role = "user", .content = "what?\nand"}};
    in.submit.id = 12;
    in.submit.kind = PROTO_KIND_CHAT;
    in.submit.messages = msgs;
    in.submit.n_messages = 2;
    size_t len;
    uint8_t *body = encode(&in, &len);
    assert_null(memmem(body, len, "imgs", 4));
    assert_null(memmem(body, len, "parts", 5));
    free(body);
    uint8_t rgb0[2 * 3 * 3], rgb1[1 * 1 * 3] = {7, 8, 9};
    for (size_t i = 0; i < sizeof rgb0; i++)
        rgb0[i] = (uint8_t)(i * 13);
    proto_img_t imgs[2] = {{.w = 3, .h = 2, .rgb = rgb0}, {.w = 1, .h = 1, .rgb = rgb1}};
    for (int i = 0; i < 32; i++) {
        imgs[0].hash[i] = (uint8_t)i;
        imgs[1].hash[i] = (uint8_t)(255 - i);
    }
    proto_part_t parts[4] = {{.img = 1}, {.text = "what?"}, {.img = 0}, {.text = "and"}};
    msgs[1].parts = parts;
    msgs[1].n_parts = 4;
    in.submit.imgs = imgs;
    in.submit.n_imgs = 2;
    roundtrip(&in, &out);
    assert_int_equal(out.submit.n_imgs, 2);
    assert_int_equal(out.submit.imgs[0].w, 3);
    assert_int_equal(out.submit.imgs[0].h, 2);
    assert_memory_equal(out.submit.imgs[0].rgb, rgb0, sizeof rgb0);
    assert_memory_equal(out.submit.imgs[1].rgb, rgb1, sizeof rgb1);
    assert_memory_equal(out.submit.imgs[1].hash, imgs[1].hash, 32);
    assert_int_equal(out.submit.messages[0].n_parts, 0);
    assert_null(out.submit.messages[0].parts);
    assert_int_equal(out.submit.messages[1].n_parts, 4);
    assert_null(out.submit.messages[1].parts[0].text);
    assert_int_equal(out.submit.messages[1].parts[0].img, 1);
    assert_string_equal(out.submit.messages[1].parts[1].text, "what?");
    assert_int_equal(out.submit.messages[1].parts[2].img, 0);
    assert_string_equal(out.submit.messages[1].parts[3].text, "and");
    proto_msg_clear(&out);
    if (getenv("PAGODA_WRITE_CORPUS")) {
        write_seed(CORPUS_DIR "/10_SUBMIT_IMGS", &in);
    }
    size_t n;
    unsigned char *seed = support_read_file(CORPUS_DIR "/10_SUBMIT_IMGS", &n);
    assert_non_null(seed);
    proto_frame_t fr[3] = {{seed, 6}, {seed + 6, 1}, {seed + 7, n - 7}};
    assert_int_equal(proto_decode(fr, 3, &out, NULL, 0), PROTO_OK);
    assert_int_equal(out.submit.n_imgs, 2);
    proto_msg_clear(&out);
    free(seed);
    /* each refusal: encode a broken variant, the decoder names the range */
    struct { int what; int status; } bad[] = {
        {0, PROTO_EFIELD}, /* a part names image 2 of 2 */
        {1, PROTO_ERANGE}, /* rgb one byte short of w·h·3 */
        {2, PROTO_ERANGE}, /* w 0 */
        {3, PROTO_ERANGE}, /* w over PROTO_MAX_VIS_SIZE */
        {4, PROTO_EFIELD}, /* imgs on a completion */
    };
    for (size_t c = 0; c < sizeof bad / sizeof bad[0]; c++) {
        proto_msg_t v = in;
        proto_img_t vi[2] = {imgs[0], imgs[1]};
        proto_part_t vp[4] = {parts[0], parts[1], parts[2], parts[3]};
        proto_chat_msg_t vm[2] = {msgs[0], msgs[1]};
        vm[1].parts = vp;
        v.submit.messages = vm;
        v.submit.imgs = vi;
        if (bad[c].what == 0)
            vp[2].img = 2;
        if (bad[c].what == 2)
            vi[1].w = 0;
        static uint8_t wide[(PROTO_MAX_VIS_SIZE + 1) * 3]; /* the encoder packs w·h·3 bytes */
        if (bad[c].what == 3)
            vi[1] = (proto_img_t){.w = PROTO_MAX_VIS_SIZE + 1, .h = 1, .rgb = wide};
        if (bad[c].what == 4) {
            v.submit.kind = PROTO_KIND_COMPLETION;
            v.submit.messages = NULL;
            v.submit.n_messages = 0;
            v.submit.prompt = "x";
        }
        uint8_t short_rgb[5];
        if (bad[c].what == 1) { /* 1x2 claims 6 bytes, the encoder packs w·h·3 of rgb: lie about h */
            vi[1] = (proto_img_t){.w = 1, .h = 1, .rgb = short_rgb};
            memset(short_rgb, 1, sizeof short_rgb);
        }
        body = encode(&v, &len);
        if (bad[c].what == 1) { /* patch the packed h from 1 to 2 after the encoder wrote 3 bytes */
            uint8_t *hk = memmem(body, len, "\xa1h\x01\xa3rgb\xc4\x03", 9);
            assert_non_null(hk);
            hk[2] = 2;
        }
        assert_int_equal(proto_decode_body(PROTO_SUBMIT, body, len, &out, NULL, 0), bad[c].status);
        free(body);
    }
    /* more than PROTO_MAX_IMAGES; a hash of 31 bytes (the encoder's 32 with
     * the bin header patched: the decoder stops at it) */
    proto_img_t many[PROTO_MAX_IMAGES + 1];
    for (int i = 0; i <= PROTO_MAX_IMAGES; i++)
        many[i] = imgs[1];
    in.submit.imgs = many;
    in.submit.n_imgs = PROTO_MAX_IMAGES + 1;
    body = encode(&in, &len);
    assert_int_equal(proto_decode_body(PROTO_SUBMIT, body, len, &out, NULL, 0), PROTO_ERANGE);
    free(body);
    in.submit.n_imgs = 2;
    body = encode(&in, &len);
    uint8_t *hk = memmem(body, len, "\xa4hash\xc4\x20", 7);
    assert_non_null(hk);
    hk[6] = 31;
    assert_int_equal(proto_decode_body(PROTO_SUBMIT, body, len, &out, NULL, 0), PROTO_ERANGE);
    free(body);
}

/* The fuzz seed CORPUS_DIR/name is in's encoding (written when
 * PAGODA_WRITE_CORPUS is set) and decodes. */
static void check_seed(const char *name, const proto_msg_t *in)
{
    char path[256];
    snprintf(path, sizeof path, CORPUS_DIR "/%s", name);
    if (getenv("PAGODA_WRITE_CORPUS"))
        write_seed(path, in);
    size_t n;
    unsigned char *seed = support_read_file(path, &n);
    assert_non_null(seed);
    proto_frame_t fr[3] = {{seed, 6}, {seed + 6, 1}, {seed + 7, n - 7}};
    proto_msg_t out;
    assert_int_equal(proto_decode(fr, 3, &out, NULL, 0), PROTO_OK);
    assert_int_equal(out.type, in->type);
    proto_msg_clear(&out);
    free(seed);
}

/* REGISTER vis.preproc (a tiled projector's longest side): round trip,
 * absent without tiles (what an older worker sends, still parsed), bounds. */
static void test_register_vis_preproc(void **state)
{
    (void)state;
    proto_msg_t in, out;
    fill_register(&in);
    size_t len;
    uint8_t *body = encode(&in, &len);
    assert_null(memmem(body, len, "preproc", 7));
    free(body);
    in.reg.vis = (proto_vis_t){.has = true, .size = 512, .n_tok = 64, .proj = "idefics3", .preproc = 2048};
    roundtrip(&in, &out);
    assert_string_equal(out.reg.vis.proj, "idefics3");
    assert_int_equal(out.reg.vis.size, 512);
    assert_int_equal(out.reg.vis.preproc, 2048);
    proto_msg_clear(&out);
    check_seed("14_REGISTER_VIS_PREPROC", &in);
    in.reg.vis.preproc = PROTO_MAX_VIS_PREPROC + 1;
    body = encode(&in, &len);
    assert_int_equal(proto_decode_body(PROTO_REGISTER, body, len, &out, NULL, 0), PROTO_ERANGE);
    free(body);
}

/* imgs' nx, ny: a picture cut into tiles (its first tile carries the grid,
 * the other tiles and the global image follow): round trip, absent on an
 * image without, and each broken grid refused. */
static void test_roundtrip_image_grid(void **state)
{
    (void)state;
    proto_msg_t in, out;
    proto_msg_init(&in, PROTO_SUBMIT);
    uint8_t px[4][3] = {{1, 2, 3}, {4, 5, 6}, {7, 8, 9}, {10, 11, 12}};
    proto_img_t imgs[4];
    for (int i = 0; i < 4; i++)
        imgs[i] = (proto_img_t){.w = 1, .h = 1, .rgb = px[i], .hash = {(uint8_t)i}};
    imgs[0].nx = 3; /* 3 x 1 tiles + the global image */
    imgs[0].ny = 1;
    proto_part_t parts[2] = {{.img = 0}, {.text = "what?"}};
    proto_chat_msg_t msg = {.role = "user", .content = "what?", .parts = parts, .n_parts = 2};
    in.submit.id = 3;
    in.submit.kind = PROTO_KIND_CHAT;
    in.submit.messages = &msg;
    in.submit.n_messages = 1;
    in.submit.imgs = imgs;
    in.submit.n_imgs = 4;
    roundtrip(&in, &out);
    assert_int_equal(out.submit.n_imgs, 4);
    assert_int_equal(out.submit.imgs[0].nx, 3);
    assert_int_equal(out.submit.imgs[0].ny, 1);
    for (int i = 1; i < 4; i++) {
        assert_int_equal(out.submit.imgs[i].nx, 0);
        assert_memory_equal(out.submit.imgs[i].rgb, px[i], 3);
    }
    proto_msg_clear(&out);
    check_seed("14_SUBMIT_IMG_GRID", &in);
    struct { uint32_t nx, ny; } bad[] = {
        {4, 1},                   /* 4 tiles + global: one image past the end */
        {2, 2},                   /* the same as a square */
        {9, 8},                   /* 72 tiles > PROTO_MAX_TILES */
        {PROTO_MAX_TILES + 1, 1}, /* a side over it */
        {2, 0},                   /* nx without ny (the encoder writes both only when both are set: patched) */
    };
    for (size_t c = 0; c < sizeof bad / sizeof bad[0]; c++) {
        proto_img_t v[4] = {imgs[0], imgs[1], imgs[2], imgs[3]};
        v[0].nx = bad[c].nx;
        v[0].ny = bad[c].ny ? bad[c].ny : 1;
        in.submit.imgs = v;
        size_t len;
        uint8_t *body = encode(&in, &len);
        if (!bad[c].ny) { /* rename "ny" to "nz": an unknown key the decoder skips */
            uint8_t *k = memmem(body, len, "\xa2ny", 3);
            assert_non_null(k);
            k[2] = 'z';
        }
        assert_int_equal(proto_decode_body(PROTO_SUBMIT, body, len, &out, NULL, 0), PROTO_ERANGE);
        free(body);
    }
}

/* Event-specific shape rules. */
/* op embed: inputs (text and ids) and dims in the SUBMIT, the vector as
 * little-endian float32 bytes in the EVENT; the cross-key rules. */
static void test_roundtrip_embed(void **state)
{
    (void)state;
    proto_msg_t in, out;
    int32_t ids[3] = {1, 42, 7};
    proto_input_t inputs[2] = {{.text = "hello"}, {.ids = ids, .n_ids = 3}};
    proto_msg_init(&in, PROTO_SUBMIT);
    in.submit.id = 9;
    in.submit.kind = PROTO_KIND_COMPLETION;
    in.submit.op = PROTO_OP_EMBED;
    in.submit.inputs = inputs;
    in.submit.n_inputs = 2;
    in.submit.n_choices = 2;
    in.submit.dimensions = 64;
    roundtrip(&in, &out);
    assert_int_equal(out.submit.op, PROTO_OP_EMBED);
    assert_int_equal(out.submit.n_inputs, 2);
    assert_string_equal(out.submit.inputs[0].text, "hello");
    assert_null(out.submit.inputs[1].text);
    assert_int_equal(out.submit.inputs[1].n_ids, 3);
    assert_memory_equal(out.submit.inputs[1].ids, ids, sizeof ids);
    assert_int_equal(out.submit.dimensions, 64);
    proto_msg_clear(&out);

    /* n_choices must match the inputs; inputs need op embed; prompt is not allowed */
    size_t len;
    uint8_t *body;
    in.submit.n_choices = 1;
    body = encode(&in, &len);
    assert_int_equal(proto_decode_body(PROTO_SUBMIT, body, len, &out, NULL, 0), PROTO_EFIELD);
    free(body);
    in.submit.n_choices = 2;
    in.submit.prompt = "x";
    body = encode(&in, &len);
    assert_int_equal(proto_decode_body(PROTO_SUBMIT, body, len, &out, NULL, 0), PROTO_EFIELD);
    free(body);
    in.submit.prompt = "x";
    in.submit.op = PROTO_OP_GENERATE;
    in.submit.n_choices = 1;
    body = encode(&in, &len);
    assert_int_equal(proto_decode_body(PROTO_SUBMIT, body, len, &out, NULL, 0), PROTO_EFIELD);
    free(body);

    float v[4] = {0.5f, -0.25f, 1e-30f, -0.0f};
    proto_msg_init(&in, PROTO_EVENT);
    in.event.id = 9;
    in.event.choice = 1;
    in.event.finish = PROTO_FINISH_STOP;
    in.event.has_usage = true;
    in.event.usage.prompt_tokens = 3;
    in.event.embedding = v;
    in.event.n_embedding = 4;
    body = encode(&in, &len);
    /* the bytes on the wire are little-endian float32: 0.5f = 00 00 00 3f */
    static const uint8_t half_le[4] = {0x00, 0x00, 0x00, 0x3f};
    bool found = false;
    for (size_t i = 0; i + 16 <= len && !found; i++)
        found = memcmp(body + i, half_le, 4) == 0 && body[i + 7] == 0xbe; /* -0.25f = 00 00 80 be */
    assert_true(found);
    free(body);
    roundtrip(&in, &out);
    assert_int_equal(out.event.n_embedding, 4);
    assert_memory_equal(out.event.embedding, v, sizeof v);
    proto_msg_clear(&out);
}

static void test_event_rules(void **state)
{
    uint8_t b[] = {'a'};
    proto_logprob_t lp[1] = {{b, 1, -0.1, NULL, 0}};
    int32_t ids[2] = {5, 6};
    proto_msg_t in, out;
    proto_msg_init(&in, PROTO_EVENT);
    in.event.id = 1;
    in.event.ids = ids;
    in.event.n_ids = 2;
    in.event.n_tokens = 2;
    in.event.logprobs = lp;
    in.event.n_logprobs = 1; /* one logprob for two ids */
    size_t len;
    uint8_t *body = encode(&in, &len);
    assert_int_equal(proto_decode_body(PROTO_EVENT, body, len, &out, NULL, 0), PROTO_EFIELD);
    free(body);

    lp[0].logprob = 0.5; /* a positive log-probability */
    in.event.n_ids = 1;
    in.event.n_tokens = 1;
    body = encode(&in, &len);
    assert_int_equal(proto_decode_body(PROTO_EVENT, body, len, &out, NULL, 0), PROTO_ERANGE);
    free(body);

    in.event.n_logprobs = 0;
    in.event.n_tokens = 0; /* fewer tokens so far than in this delta */
    body = encode(&in, &len);
    assert_int_equal(proto_decode_body(PROTO_EVENT, body, len, &out, NULL, 0), PROTO_ERANGE);
    free(body);

    in.event.n_tokens = 1;
    in.event.stop = 1; /* a stop string without finish "stop" */
    body = encode(&in, &len);
    assert_int_equal(proto_decode_body(PROTO_EVENT, body, len, &out, NULL, 0), PROTO_EFIELD);
    free(body);
    in.event.finish = PROTO_FINISH_STOP;
    in.event.has_usage = true;
    in.event.stop = PROTO_MAX_STOP + 1; /* past the SUBMIT's limit */
    body = encode(&in, &len);
    assert_int_equal(proto_decode_body(PROTO_EVENT, body, len, &out, NULL, 0), PROTO_ERANGE);
    free(body);
}


/* The fuzz seed corpus (tests/fuzz/corpus/proto/, layout in fuzz_proto.c)
 * holds one valid message per sample; each seed must decode. With
 * PAGODA_WRITE_CORPUS=1 the seeds are (re)written from sample_messages(). */
static void test_fuzz_corpus(void **state)
{
    proto_msg_t ms[N_SAMPLES];
    sample_messages(ms);
    for (int i = 0; i < N_SAMPLES; i++) {
        char path[256];
        snprintf(path, sizeof path, CORPUS_DIR "/%02d_%s", i, proto_type_name(ms[i].type));
        if (getenv("PAGODA_WRITE_CORPUS")) {
            write_seed(path, &ms[i]);
        }
        size_t n;
        unsigned char *seed = support_read_file(path, &n);
        if (!seed)
            fail_msg("missing seed %s (run with PAGODA_WRITE_CORPUS=1 from the repo root)", path);
        assert_true(n >= 7);
        proto_frame_t f[3] = {{seed, 6}, {seed + 6, 1}, {seed + 7, n - 7}};
        proto_msg_t m;
        char err[200] = "";
        if (proto_decode(f, 3, &m, err, sizeof err) != PROTO_OK)
            fail_msg("seed %s does not decode: %s", path, err);
        assert_int_equal(m.type, ms[i].type);
        proto_msg_clear(&m);
        free(seed);
    }
}

/* ------------------------------------------------------------------------ */
/* ZeroMQ framing over a real socket pair                                    */

static void test_zmq_roundtrip(void **state)
{
    void *ctx = zmq_ctx_new();
    void *router = zmq_socket(ctx, ZMQ_ROUTER);
    void *dealer = zmq_socket(ctx, ZMQ_DEALER);
    int linger = 0, mandatory = 1;
    zmq_setsockopt(router, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(dealer, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(router, ZMQ_ROUTER_MANDATORY, &mandatory, sizeof mandatory);
    zmq_setsockopt(dealer, ZMQ_ROUTING_ID, "w1", 2);
    assert_int_equal(zmq_bind(router, "inproc://test-proto"), 0);
    assert_int_equal(zmq_connect(dealer, "inproc://test-proto"), 0);

    /* worker → gateway */
    proto_msg_t reg, got;
    fill_register(&reg);
    assert_int_equal(proto_send(dealer, NULL, &reg, 0), PROTO_OK);
    proto_peer_t from;
    char err[200];
    assert_int_equal(proto_recv(router, &from, &got, 0, err, sizeof err), PROTO_OK);
    assert_int_equal(got.type, PROTO_REGISTER);
    assert_string_equal(got.reg.replica, "box:4242:9f1c2d3e");
    assert_int_equal(from.len, 2);
    assert_memory_equal(from.id, "w1", 2);
    proto_msg_clear(&got);

    /* gateway → worker, addressed by identity */
    proto_msg_t hb;
    proto_msg_init(&hb, PROTO_HEARTBEAT);
    hb.heartbeat.seq = 42;
    assert_int_equal(proto_send(router, &from, &hb, ZMQ_DONTWAIT), PROTO_OK);
    assert_int_equal(proto_recv(dealer, NULL, &got, 0, err, sizeof err), PROTO_OK);
    assert_int_equal(got.type, PROTO_HEARTBEAT);
    assert_true(got.heartbeat.seq == 42);
    proto_msg_clear(&got);

    /* an unknown identity is reported, not silently dropped */
    proto_peer_t nobody = {.id = "zz", .len = 2};
    assert_int_equal(proto_send(router, &nobody, &hb, ZMQ_DONTWAIT), PROTO_ESYS);
    assert_int_equal(errno, EHOSTUNREACH);

    /* garbage: 5 frames, then 1 frame, then a wrong tag — each is consumed
     * whole, and the valid message behind them still arrives intact */
    for (int i = 0; i < 5; i++)
        zmq_send(dealer, "x", 1, i < 4 ? ZMQ_SNDMORE : 0);
    zmq_send(dealer, "only", 4, 0);
    zmq_send(dealer, "HTTP/1", 6, ZMQ_SNDMORE);
    zmq_send(dealer, "\x03", 1, ZMQ_SNDMORE);
    zmq_send(dealer, "\x80", 1, 0);
    proto_msg_t cancel;
    proto_msg_init(&cancel, PROTO_CANCEL);
    cancel.cancel.id = 8;
    assert_int_equal(proto_send(dealer, NULL, &cancel, 0), PROTO_OK);
    assert_int_equal(proto_recv(router, &from, &got, 0, err, sizeof err), PROTO_EFRAMES);
    assert_int_equal(from.len, 2); /* sender still known for the log */
    assert_int_equal(proto_recv(router, &from, &got, 0, err, sizeof err), PROTO_EFRAMES);
    assert_int_equal(proto_recv(router, &from, &got, 0, err, sizeof err), PROTO_ETAG);
    assert_int_equal(proto_recv(router, &from, &got, 0, err, sizeof err), PROTO_OK);
    assert_int_equal(got.type, PROTO_CANCEL);
    assert_true(got.cancel.id == 8);
    proto_msg_clear(&got);

    /* nothing left: EAGAIN with DONTWAIT */
    assert_int_equal(proto_recv(router, &from, &got, ZMQ_DONTWAIT, NULL, 0), PROTO_ESYS);
    assert_int_equal(errno, EAGAIN);

    zmq_close(dealer);
    zmq_close(router);
    zmq_ctx_term(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_register),
        cmocka_unit_test(test_roundtrip_heartbeat),
        cmocka_unit_test(test_heartbeat_progress_rules),
        cmocka_unit_test(test_kv),
        cmocka_unit_test(test_roundtrip_submit_chat),
        cmocka_unit_test(test_roundtrip_submit_completion),
        cmocka_unit_test(test_roundtrip_event),
        cmocka_unit_test(test_roundtrip_small),
        cmocka_unit_test(test_frames),
        cmocka_unit_test(test_truncated_everywhere),
        cmocka_unit_test(test_malformed_keeps_id),
        cmocka_unit_test(test_error_causes),
        cmocka_unit_test(test_field_cases),
        cmocka_unit_test(test_structure),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_event_rules),
        cmocka_unit_test(test_roundtrip_embed),
        cmocka_unit_test(test_roundtrip_rank),
        cmocka_unit_test(test_roundtrip_lora),
        cmocka_unit_test(test_roundtrip_lora_op),
        cmocka_unit_test(test_register_lora_bounds),
        cmocka_unit_test(test_roundtrip_images),
        cmocka_unit_test(test_roundtrip_image_grid),
        cmocka_unit_test(test_register_vis_preproc),
        cmocka_unit_test(test_fuzz_corpus),
        cmocka_unit_test(test_zmq_roundtrip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
