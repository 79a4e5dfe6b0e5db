/* test_prefix_index.c — the gateway's routing index (gateway/prefix_index.h)
 * and the replica choice (route_pick, gateway/route.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "common/prefix_key.h"
#include "gateway/prefix_index.h"
#include "gateway/route.h"
#include "tests/support/support.h"
#include "worker/engine.h"

#include <stdio.h>
#include <string.h>

/* A chain of n keys for "conversation" c (as a prompt's blocks would be). */
static void chain(uint64_t *k, int n, int c)
{
    int32_t t[4];
    uint64_t parent = PREFIX_KEY_PUBLIC_ROOT;
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < 4; j++)
            t[j] = c * 1000 + i * 4 + j;
        k[i] = parent = prefix_key_next(parent, t, 4);
    }
}

static void test_match_depths(void **state)
{
    prefix_index_t *x = prefix_index_new(1024);
    uint64_t k[8];
    chain(k, 8, 1);
    int32_t d[PREFIX_INDEX_MAX_SLOTS];
    assert_true(prefix_index_match(x, k, 8, d) == 0);
    /* slot 0 holds 5 leading blocks, slot 3 all 8, slot 63 blocks 1.. but not 0 */
    for (int i = 0; i < 5; i++)
        prefix_index_add(x, k[i], 0);
    for (int i = 0; i < 8; i++)
        prefix_index_add(x, k[i], 3);
    for (int i = 1; i < 8; i++)
        prefix_index_add(x, k[i], 63);
    prefix_index_add(x, k[0], 64);  /* out of range: ignored */
    prefix_index_add(x, k[0], -1);
    assert_int_equal(prefix_index_size(x), 8);
    assert_int_equal(prefix_index_slot_size(x, 0), 5);
    assert_int_equal(prefix_index_slot_size(x, 3), 8);
    assert_int_equal(prefix_index_slot_size(x, 63), 7);
    uint64_t set = prefix_index_match(x, k, 8, d);
    assert_true(set == ((1ull << 0) | (1ull << 3)));
    assert_int_equal(d[0], 5);
    assert_int_equal(d[3], 8);
    assert_int_equal(d[63], 0); /* a chain: missing block 0 means no usable prefix */
    assert_int_equal(d[1], 0);
    /* a shorter request: depth capped by its length */
    prefix_index_match(x, k, 3, d);
    assert_int_equal(d[0], 3);
    assert_int_equal(d[3], 3);

    /* eviction on the worker: the key goes for that slot only */
    prefix_index_del(x, k[2], 3);
    prefix_index_match(x, k, 8, d);
    assert_int_equal(d[3], 2);
    assert_int_equal(d[0], 5);
    prefix_index_del(x, k[2], 3); /* twice: no-op */
    prefix_index_del(x, 12345, 3); /* unknown: no-op */
    assert_int_equal(prefix_index_slot_size(x, 3), 7);
    /* a key no slot holds is removed from the index */
    prefix_index_del(x, k[0], 0);
    prefix_index_del(x, k[0], 3);
    assert_int_equal(prefix_index_size(x), 7);

    /* a dead worker: everything of its slot vanishes, others stay */
    prefix_index_drop_slot(x, 63);
    assert_int_equal(prefix_index_slot_size(x, 63), 0);
    assert_int_equal(prefix_index_slot_size(x, 0), 4);
    prefix_index_drop_slot(x, 0);
    prefix_index_drop_slot(x, 3);
    assert_int_equal(prefix_index_size(x), 0);
    assert_true(prefix_index_match(x, k, 8, d) == 0);
    prefix_index_free(&x);
    assert_null(x);
}

/* Bounded: past max_entries the least recently used key goes, and a match
 * counts as use. */
static void test_lru_bound(void **state)
{
    prefix_index_t *x = prefix_index_new(6);
    uint64_t a[3], b[3], c[3];
    chain(a, 3, 1);
    chain(b, 3, 2);
    chain(c, 3, 3);
    int32_t d[PREFIX_INDEX_MAX_SLOTS];
    for (int i = 0; i < 3; i++)
        prefix_index_add(x, a[i], 0);
    for (int i = 0; i < 3; i++)
        prefix_index_add(x, b[i], 1);
    prefix_index_match(x, a, 3, d); /* a is now more recent than b */
    assert_int_equal(d[0], 3);
    for (int i = 0; i < 3; i++)
        prefix_index_add(x, c[i], 1);
    assert_int_equal(prefix_index_size(x), 6);
    assert_int_equal(prefix_index_evictions(x), 3);
    prefix_index_match(x, a, 3, d);
    assert_int_equal(d[0], 3);
    prefix_index_match(x, b, 3, d);
    assert_int_equal(d[1], 0);
    prefix_index_match(x, c, 3, d);
    assert_int_equal(d[1], 3);
    assert_int_equal(prefix_index_slot_size(x, 1), 3);
    prefix_index_free(&x);

    /* many keys through a small index: sizes stay consistent */
    x = prefix_index_new(100);
    uint64_t k[64];
    for (int c2 = 0; c2 < 50; c2++) {
        chain(k, 64, c2);
        for (int i = 0; i < 64; i++)
            prefix_index_add(x, k[i], c2 % 4);
        if (c2 % 7 == 0)
            prefix_index_drop_slot(x, (c2 / 7) % 4);
    }
    size_t sum = 0;
    for (int s = 0; s < 4; s++)
        sum += prefix_index_slot_size(x, s);
    assert_true(prefix_index_size(x) <= 100);
    assert_int_equal(sum, prefix_index_size(x)); /* each key held by one slot here */
    prefix_index_free(&x);
}

/* Policy table: candidates → chosen index and reason. */
static void test_route_pick(void **state)
{
    static const struct {
        const char *what;
        route_mode_t mode;
        route_cand_t c[3];
        uint32_t gap;
        int want;
        route_reason_t why;
    } cases[] = {
        {"no credit anywhere", ROUTE_CACHE_AWARE, {{0, 4, 9}, {0, 4, 0}, {-1, 5, 0}}, 4, -1, ROUTE_BY_LOAD},
        {"no hits: most credit", ROUTE_CACHE_AWARE, {{2, 2, 0}, {3, 1, 0}, {1, 3, 0}}, 4, 1, ROUTE_BY_LOAD},
        {"no hits, credit tie: fewest assigned", ROUTE_CACHE_AWARE, {{2, 2, 0}, {2, 1, 0}, {0, 0, 0}}, 4, 1,
         ROUTE_BY_LOAD},
        {"hit on a busier replica within the gap", ROUTE_CACHE_AWARE, {{4, 0, 0}, {1, 3, 5}, {4, 0, 2}}, 4, 1,
         ROUTE_BY_CACHE},
        {"longest prefix wins", ROUTE_CACHE_AWARE, {{3, 1, 2}, {3, 1, 7}, {3, 1, 5}}, 4, 1, ROUTE_BY_CACHE},
        {"hit, but overloaded: least loaded", ROUTE_CACHE_AWARE, {{8, 0, 0}, {1, 7, 9}, {0, 0, 0}}, 4, 0,
         ROUTE_BY_OVERLOAD},
        {"gap exactly at the threshold still goes by cache", ROUTE_CACHE_AWARE,
         {{8, 0, 0}, {4, 4, 9}, {0, 0, 0}}, 4, 1, ROUTE_BY_CACHE},
        {"overloaded holder, second-best holder less loaded: least", ROUTE_CACHE_AWARE,
         {{8, 0, 3}, {1, 7, 9}, {0, 0, 0}}, 4, 0, ROUTE_BY_OVERLOAD},
        {"the holder has no credit", ROUTE_CACHE_AWARE, {{2, 0, 0}, {0, 4, 9}, {0, 0, 0}}, 4, 0, ROUTE_BY_LOAD},
        {"least loaded holds it too", ROUTE_CACHE_AWARE, {{3, 1, 4}, {2, 2, 4}, {0, 0, 0}}, 4, 0,
         ROUTE_BY_CACHE},
        {"least-loaded mode ignores hits", ROUTE_LEAST_LOADED, {{4, 0, 0}, {1, 3, 5}, {0, 0, 0}}, 4, 0,
         ROUTE_BY_LOAD},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        route_reason_t why = (route_reason_t)-1;
        int got = route_pick(cases[i].mode, cases[i].c, 3, cases[i].gap, &why);
        if (got != cases[i].want || (got >= 0 && why != cases[i].why))
            fail_msg("case '%s': got %d (%s), want %d (%s)", cases[i].what, got, route_reason_name(why),
                     cases[i].want, route_reason_name(cases[i].why));
    }
    route_mode_t m;
    assert_int_equal(route_mode_parse("least-loaded", &m), 0);
    assert_int_equal(m, ROUTE_LEAST_LOADED);
    assert_int_equal(route_mode_parse("cache-aware", &m), 0);
    assert_int_equal(m, ROUTE_CACHE_AWARE);
    assert_int_equal(route_mode_parse("random", &m), -1);
}

/* The gateway's keys for a prompt are the worker's: route_text_keys (text-only
 * engine) == prefix_key_chain over what the worker's engine tokenizes, for a
 * completion and a chat; a prompt past ROUTE_MAX_TEXT_BYTES is keyed on its
 * start, and those keys still equal the whole prompt's. */
static void test_route_text_keys(void **state)
{
    const char *path = support_shared_model("stories260K.gguf");
    if (!path) {
        print_message("skip: stories260K.gguf absent\n");
        return;
    }
    const char *names[] = {"m"};
    route_text_t *rt = route_text_new(names, &path, 1);
    char err[256];
    engine_t *e = engine_load(path, err, sizeof err); /* the worker's engine */
    assert_non_null(e);
    /* a long text prompt, longer than the cap */
    size_t len = ROUTE_MAX_TEXT_BYTES + 5000;
    char *text = malloc(len + 1);
    static const char *const w[] = {"Once", "upon", "a", "time", "there", "was", "a", "little", "cat"};
    size_t o = 0;
    for (int i = 0; o < len; i++)
        o += (size_t)snprintf(text + o, len + 1 - o, "%s ", w[(i * 7) % 9]);
    text[len] = '\0';
    for (int pass = 0; pass < 2; pass++) {
        size_t plen = pass == 0 ? 3000 : len; /* short, then cut */
        char save = text[plen];
        text[plen] = '\0';
        proto_submit_t sm = {.kind = PROTO_KIND_COMPLETION, .prompt = text};
        uint64_t *k = NULL;
        int32_t n = route_text_keys(rt, "m", &sm, NULL, 32, &k);
        int32_t *ids = NULL;
        int32_t n_ids = engine_prompt_text(e, text, plen, &ids, err, sizeof err);
        uint64_t *ref = malloc(((size_t)n_ids / 32 + 1) * sizeof *ref);
        int32_t n_ref = prefix_key_chain(0, ids, n_ids, 32, ref, n_ids);
        print_message("%zu bytes: %d tokens, %d keys (worker %d)\n", plen, n_ids, n, n_ref);
        if (pass == 0)
            assert_int_equal(n, n_ref);
        else
            assert_true(n > 1000 && n < n_ref); /* cut: keys of the start only */
        assert_memory_equal(k, ref, (size_t)n * sizeof *k);
        free(k);
        free(ids);
        free(ref);
        text[plen] = save;
    }
    /* chat: rendered by the same template on both sides */
    proto_chat_msg_t msgs[2] = {{.role = "system", .content = text}, {.role = "user", .content = "hello"}};
    text[2000] = '\0';
    proto_submit_t sm = {.kind = PROTO_KIND_CHAT, .messages = msgs, .n_messages = 2};
    uint64_t *k = NULL;
    int32_t n = route_text_keys(rt, "m", &sm, NULL, 32, &k);
    chat_msg_t cm[2] = {{.role = "system", .content = text}, {.role = "user", .content = "hello"}};
    int32_t *ids = NULL;
    int32_t n_ids = engine_prompt_chat(e, cm, 2, NULL, &ids, err, sizeof err);
    uint64_t ref[256];
    assert_int_equal(n, prefix_key_chain(0, ids, n_ids, 32, ref, 256));
    assert_true(n > 10);
    assert_memory_equal(k, ref, (size_t)n * sizeof *k);
    free(k);
    free(ids);
    /* another model name, or no engine: no keys */
    assert_int_equal(route_text_keys(rt, "other", &sm, NULL, 32, &k), 0);
    assert_null(k);
    free(text);
    engine_free(&e);
    route_text_free(&rt);
    assert_null(rt);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_match_depths),
        cmocka_unit_test(test_lru_bound),
        cmocka_unit_test(test_route_pick),
        cmocka_unit_test(test_route_text_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
