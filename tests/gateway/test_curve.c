/* Unit tests for CURVE on the worker link: proto/curve (Z85 keys, key files,
 * the authorized-keys list, key-pair files) and gateway/zap (the ZAP
 * allow-list) with a real gateway core and real worker_link connections:
 *   - Z85 decoding agrees with libzmq's zmq_z85_decode on fresh keys, and
 *     refuses bad characters, lengths and 32-bit overflow;
 *   - authorized-keys files: names, comments, CRLF; errors name the line;
 *   - --gen-curve-keypair files: modes, contents, refusal to overwrite;
 *   - an authorized worker key registers with the core;
 *   - an unknown key is refused by the ZAP handler and no REGISTER reaches
 *     the core (its worker table stays empty);
 *   - a worker without CURVE cannot connect to a CURVE gateway at all;
 *   - replacing the list (SIGHUP) lets the refused worker in.
 * Keys come from libzmq/libsodium (zmq_curve_keypair), never from the code
 * under test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "common/clock.h"
#include "common/log.h"
#include "gateway/gateway.h"
#include "gateway/snapshot.h"
#include "gateway/zap.h"
#include "proto/curve.h"
#include "worker/worker_link.h"

#define HB_MS 50

typedef struct keypair {
    char pub[41], sec[41];
} keypair_t;

static void fresh(keypair_t *k)
{
    assert_int_equal(zmq_curve_keypair(k->pub, k->sec), 0);
}

/* ---- keys and files ------------------------------------------------------ */

static void test_z85_decode(void **state)
{
    (void)state;
    for (int i = 0; i < 50; i++) {
        keypair_t k;
        fresh(&k);
        uint8_t ours[32], ref[32];
        assert_int_equal(curve_key_decode(k.pub, strlen(k.pub), ours), 0);
        assert_non_null(zmq_z85_decode(ref, k.pub));
        assert_memory_equal(ours, ref, 32);
    }
    keypair_t k;
    fresh(&k);
    char bad[41];
    memcpy(bad, k.pub, 41);
    bad[7] = '"'; /* not in the Z85 alphabet */
    assert_int_equal(curve_key_decode(bad, 40, NULL), -1);
    bad[7] = ' ';
    assert_int_equal(curve_key_decode(bad, 40, NULL), -1);
    assert_int_equal(curve_key_decode(k.pub, 39, NULL), -1);
    assert_int_equal(curve_key_decode(k.pub, 0, NULL), -1);
    /* "#####" = 85^5 - 1 > 2^32 - 1: no 32-bit word has this spelling */
    memcpy(bad, k.pub, 41);
    memcpy(bad + 10, "#####", 5);
    assert_int_equal(curve_key_decode(bad, 40, NULL), -1);
    /* the largest word, 0xffffffff, is "%nSc0" */
    memcpy(bad + 10, "%nSc0", 5);
    uint8_t out[32];
    assert_int_equal(curve_key_decode(bad, 40, out), 0);
    assert_int_equal(out[8] & out[9] & out[10] & out[11], 0xff);
}

static void test_keylist_parse(void **state)
{
    (void)state;
    keypair_t a, b, c;
    fresh(&a);
    fresh(&b);
    fresh(&c);
    char text[1024];
    snprintf(text, sizeof text,
             "# workers of cluster 1\r\n"
             "\n"
             "   %s   host-a.example:1  # rack 3\r\n"
             "%s\n"
             "\t%s node/b-2\n"
             "#%s\n", /* '#' + 40 chars is 41 characters: a comment */
             a.pub, b.pub, c.pub, a.pub);
    curve_keylist_t *l = NULL;
    char err[256];
    assert_int_equal(curve_keylist_parse((const uint8_t *)text, strlen(text), "w", &l, err,
                                         sizeof err), 0);
    assert_int_equal(l->n, 3);
    assert_string_equal(l->keys[0].z85, a.pub);
    assert_string_equal(l->keys[0].name, "host-a.example:1");
    assert_int_equal(l->keys[0].line, 3);
    assert_string_equal(l->keys[1].z85, b.pub);
    assert_string_equal(l->keys[1].name, "");
    assert_string_equal(l->keys[2].name, "node/b-2");
    assert_int_equal(l->keys[2].line, 5);
    uint8_t kb[32];
    assert_non_null(zmq_z85_decode(kb, b.pub));
    assert_ptr_equal(curve_keylist_find(l, kb), &l->keys[1]);
    keypair_t d;
    fresh(&d);
    assert_non_null(zmq_z85_decode(kb, d.pub));
    assert_null(curve_keylist_find(l, kb));
    /* copy, add (no duplicates) */
    curve_keylist_t *cp = curve_keylist_copy(l);
    assert_int_equal(curve_keylist_add(cp, d.pub, "local"), 0);
    assert_int_equal(curve_keylist_add(cp, a.pub, "again"), 0);
    assert_int_equal(cp->n, 4);
    assert_non_null(curve_keylist_find(cp, kb));
    assert_int_equal(curve_keylist_add(cp, "short", NULL), -1);
    curve_keylist_free(&cp);
    assert_null(cp);
    curve_keylist_free(&l);
    curve_keylist_free(&l); /* NULL-safe */

    /* an empty file is a valid, empty list */
    assert_int_equal(curve_keylist_parse((const uint8_t *)"", 0, "w", &l, err, sizeof err), 0);
    assert_int_equal(l->n, 0);
    curve_keylist_free(&l);

    char bad_char[41];
    memcpy(bad_char, a.pub, 41);
    bad_char[3] = '~';
    static char buf[8][200];
    snprintf(buf[0], sizeof buf[0], "%s\n%s x\n", a.pub, a.pub);
    snprintf(buf[1], sizeof buf[1], "%.39s\n", a.pub);
    snprintf(buf[2], sizeof buf[2], "\n%s\n", bad_char);
    snprintf(buf[3], sizeof buf[3], "%s name!\n", a.pub);
    snprintf(buf[4], sizeof buf[4], "%s name more\n", a.pub);
    snprintf(buf[5], sizeof buf[5], "%s n\xc3\xa9\n", a.pub);
    snprintf(buf[6], sizeof buf[6], "%s %s\n", a.pub,
             "a-name-that-is-longer-than-sixty-three-characters-is-refused-here");
    memcpy(buf[7], "ok\0x", 4);
    const struct {
        const char *text;
        size_t len;
        const char *want;
    } bad[] = {
        {buf[0], 0, "w:2: duplicate key (first at line 1)"},
        {buf[1], 0, "w:1: expected a 40-character Z85 public key, got a word of 39"},
        {buf[2], 0, "w:2: not a valid Z85 key"},
        {buf[3], 0, "w:1: bad character '!' in key name"},
        {buf[4], 0, "w:1: unexpected text after the key name"},
        {buf[5], 0, "w:1: non-printable or non-ASCII byte 0xc3"},
        {buf[6], 0, "w:1: key name longer than 63 characters"},
        {buf[7], 4, "w:1: non-printable or non-ASCII byte 0x00"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t len = bad[i].len ? bad[i].len : strlen(bad[i].text);
        err[0] = 0;
        assert_int_equal(curve_keylist_parse((const uint8_t *)bad[i].text, len, "w", &l, err,
                                             sizeof err), -1);
        assert_null(l);
        if (!strstr(err, bad[i].want))
            fail_msg("case %zu: got '%s', want '%s'", i, err, bad[i].want);
    }

    /* key files hold exactly one key */
    char z[41];
    snprintf(text, sizeof text, "# c\n%s\n", a.sec);
    assert_int_equal(curve_key_file_parse((const uint8_t *)text, strlen(text), "k", z, err,
                                          sizeof err), 0);
    assert_string_equal(z, a.sec);
    assert_int_equal(curve_key_file_parse((const uint8_t *)"# none\n", 7, "k", z, err, sizeof err),
                     -1);
    assert_non_null(strstr(err, "k: no key"));
    snprintf(text, sizeof text, "%s\n%s\n", a.pub, b.pub);
    assert_int_equal(curve_key_file_parse((const uint8_t *)text, strlen(text), "k", z, err,
                                          sizeof err), -1);
    assert_non_null(strstr(err, "k:2: a second key"));
}

static void test_keypair_files(void **state)
{
    (void)state;
    char dir[] = "/tmp/pagoda-test-curve-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char prefix[128], kpath[160], ppath[160], err[512];
    snprintf(prefix, sizeof prefix, "%s/worker-a", dir);
    snprintf(kpath, sizeof kpath, "%s.key", prefix);
    snprintf(ppath, sizeof ppath, "%s.pub", prefix);
    char pub[41];
    assert_int_equal(curve_keypair_write(prefix, pub, err, sizeof err), 0);
    struct stat st;
    assert_int_equal(stat(kpath, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(stat(ppath, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644);

    /* the secret's public key (derived by libsodium) is the one printed and
     * the one in PREFIX.pub, which also reads as an authorized-keys file */
    char sec[41], derived[41], ref[41], from_pub[41];
    assert_int_equal(curve_secret_load(kpath, sec, derived, err, sizeof err), 0);
    assert_int_equal(zmq_curve_public(ref, sec), 0);
    assert_string_equal(derived, ref);
    assert_string_equal(pub, ref);
    assert_int_equal(curve_public_load(ppath, from_pub, err, sizeof err), 0);
    assert_string_equal(from_pub, pub);
    curve_keylist_t *l = NULL;
    assert_int_equal(curve_keylist_load(ppath, &l, err, sizeof err), 0);
    assert_int_equal(l->n, 1);
    assert_string_equal(l->keys[0].name, "worker-a");
    curve_keylist_free(&l);
    /* a public key can also be given literally */
    assert_int_equal(curve_public_load(pub, from_pub, err, sizeof err), 0);
    assert_string_equal(from_pub, pub);
    assert_int_equal(curve_public_load("/nonexistent/x.pub", from_pub, err, sizeof err), -1);
    assert_non_null(strstr(err, "cannot open"));
    /* and a secret as text (the local workers' environment) */
    char sec2[41], pub2[41];
    assert_int_equal(curve_secret_from_text(sec, sec2, pub2, err, sizeof err), 0);
    assert_string_equal(pub2, pub);

    /* never overwrites */
    assert_int_equal(curve_keypair_write(prefix, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "exists already"));
    char again[41];
    assert_int_equal(curve_secret_load(kpath, again, NULL, err, sizeof err), 0);
    assert_string_equal(again, sec);

    unlink(kpath);
    unlink(ppath);
    assert_int_equal(rmdir(dir), 0);
}

/* ---- the allow-list against real connections -------------------------------- */

typedef struct fixture {
    struct gateway *gw;
    keypair_t server, good, bad;
    curve_keylist_t *allowed;
} fixture_t;

static int setup(void **state)
{
    log_init("test", LOG_ERROR);
    if (!curve_available()) {
        fprintf(stderr, "libzmq without CURVE\n");
        return -1;
    }
    fixture_t *f = calloc(1, sizeof *f);
    fresh(&f->server);
    fresh(&f->good);
    fresh(&f->bad);
    f->allowed = curve_keylist_new();
    assert_int_equal(curve_keylist_add(f->allowed, f->good.pub, "good-worker"), 0);
    const char *models[] = {"m"};
    gateway_config_t cfg = {.worker_endpoint = "tcp://127.0.0.1:0", .heartbeat_ms = HB_MS,
                            .models = models, .n_models = 1,
                            .curve_secret_key = f->server.sec, .curve_authorized = f->allowed};
    f->gw = gateway_new(&cfg);
    *state = f;
    return f->gw && f->gw->zap ? 0 : -1;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    gateway_free(&f->gw);
    curve_keylist_free(&f->allowed);
    free(f);
    return 0;
}

/* A worker link for model "m"; keys NULL = plain. */
static worker_link_t *link_new(fixture_t *f, const char *replica, const keypair_t *k)
{
    proto_register_t reg = {.model = "m", .replica = (char *)replica, .host = "h", .pid = 1,
                            .capacity = 2, .n_ctx = 64, .n_vocab = 10, .kv_blocks = 8,
                            .block_size = 32};
    worker_link_config_t cfg = {.endpoint = f->gw->worker_endpoint, .heartbeat_ms = HB_MS,
                                .reg = &reg};
    if (k) {
        cfg.curve_server_key = f->server.pub;
        cfg.curve_public_key = k->pub;
        cfg.curve_secret_key = k->sec;
    }
    worker_link_t *l = worker_link_new(&cfg);
    assert_non_null(l);
    return l;
}

/* Drives link l (and `other`, if any, so that it keeps heartbeating) for up
 * to ms; returns whether l got registered. */
static bool pump2(worker_link_t *l, worker_link_t *other, int ms)
{
    int64_t t_end = clock_now_us() + (int64_t)ms * 1000;
    while (clock_now_us() < t_end) {
        proto_msg_t m;
        if (worker_link_poll(l, 5, -1, &m) == WORKER_LINK_MSG)
            proto_msg_clear(&m);
        if (other && worker_link_poll(other, 5, -1, &m) == WORKER_LINK_MSG)
            proto_msg_clear(&m);
        if (worker_link_registered(l))
            return true;
    }
    return worker_link_registered(l);
}

static bool pump(worker_link_t *l, int ms)
{
    return pump2(l, NULL, ms);
}

/* Workers in the core's table, from /health. */
static size_t core_workers(fixture_t *f)
{
    json_t *h = gateway_health(f->gw, 2000000);
    assert_non_null(h);
    size_t n = json_array_size(json_object_get(h, "workers"));
    json_decref(h);
    return n;
}

static void test_authorized_registers(void **state)
{
    fixture_t *f = *state;
    worker_link_t *l = link_new(f, "good:1", &f->good);
    assert_true(pump(l, 5000));
    assert_int_equal(core_workers(f), 1);
    assert_true(zap_accepted(f->gw->zap) >= 1);
    assert_int_equal(zap_refused(f->gw->zap), 0);
    worker_link_free(&l);
}

static void test_unknown_key_refused(void **state)
{
    fixture_t *f = *state;
    worker_link_t *l = link_new(f, "bad:1", &f->bad);
    /* it keeps trying; give it many heartbeat intervals */
    assert_false(pump(l, 1000));
    assert_true(zap_refused(f->gw->zap) >= 1);
    assert_int_equal(core_workers(f), 0);
    assert_int_equal(f->gw->n_malformed, 0);
    /* an authorized worker next to it is unaffected */
    worker_link_t *g = link_new(f, "good:2", &f->good);
    assert_true(pump2(g, l, 5000));
    assert_int_equal(core_workers(f), 1);
    /* SIGHUP path: the new list lets the same process in on its next try */
    curve_keylist_t *more = curve_keylist_copy(f->allowed);
    assert_int_equal(curve_keylist_add(more, f->bad.pub, "late"), 0);
    zap_set_keys(f->gw->zap, more);
    curve_keylist_free(&more);
    assert_true(pump2(l, g, 10000));
    pump2(g, l, 100);
    assert_int_equal(core_workers(f), 2);
    worker_link_free(&g);
    worker_link_free(&l);
}

static void test_plain_worker_cannot_connect(void **state)
{
    fixture_t *f = *state;
    uint64_t refused0 = zap_refused(f->gw->zap), accepted0 = zap_accepted(f->gw->zap);
    worker_link_t *l = link_new(f, "plain:1", NULL);
    assert_false(pump(l, 1000));
    assert_int_equal(core_workers(f), 0);
    /* the mechanism mismatch ends the handshake before any ZAP request */
    assert_int_equal(zap_accepted(f->gw->zap), accepted0);
    assert_int_equal(zap_refused(f->gw->zap), refused0);
    worker_link_free(&l);
}

/* A CURVE worker with the wrong server key cannot connect either. */
static void test_wrong_server_key(void **state)
{
    fixture_t *f = *state;
    keypair_t other;
    fresh(&other);
    proto_register_t reg = {.model = "m", .replica = "w:1", .host = "h", .pid = 1, .capacity = 2,
                            .n_ctx = 64, .n_vocab = 10, .kv_blocks = 8, .block_size = 32};
    worker_link_config_t cfg = {.endpoint = f->gw->worker_endpoint, .heartbeat_ms = HB_MS,
                                .reg = &reg, .curve_server_key = other.pub,
                                .curve_public_key = f->good.pub, .curve_secret_key = f->good.sec};
    worker_link_t *l = worker_link_new(&cfg);
    assert_non_null(l);
    assert_false(pump(l, 1000));
    assert_int_equal(core_workers(f), 0);
    worker_link_free(&l);
    /* half a key set is refused up front */
    cfg.curve_secret_key = NULL;
    assert_null(worker_link_new(&cfg));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_z85_decode),
        cmocka_unit_test(test_keylist_parse),
        cmocka_unit_test(test_keypair_files),
        cmocka_unit_test_setup_teardown(test_authorized_registers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_key_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_plain_worker_cannot_connect, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wrong_server_key, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
