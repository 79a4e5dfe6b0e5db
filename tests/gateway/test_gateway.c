/* Unit tests for gateway/: the core thread driven through a real ZeroMQ
 * DEALER (registration, ERROR 409 for strangers, heartbeats, load, liveness
 * expiry, replacement by replica id, malformed input), the command channel
 * (gateway_health from another thread) and the HOST:PORT parser. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "common/clock.h"
#include "common/log.h"
#include "gateway/gateway.h"
#include "gateway/snapshot.h"
#include "gateway/http.h"
#include "proto/msg.h"

#define HB_MS 50

static void test_parse_hostport(void **state)
{
    static const struct {
        const char *in;
        int rc;
        const char *host;
        unsigned port;
    } cases[] = {
        {"127.0.0.1:8080", 0, "127.0.0.1", 8080},
        {"localhost:0", 0, "localhost", 0},
        {"[::1]:9000", 0, "::1", 9000},
        {"0.0.0.0:65535", 0, "0.0.0.0", 65535},
        {"127.0.0.1", -1, NULL, 0},
        {"127.0.0.1:", -1, NULL, 0},
        {":8080", -1, NULL, 0},
        {"host:65536", -1, NULL, 0},
        {"host:-1", -1, NULL, 0},
        {"host:80x", -1, NULL, 0},
        {"[::1]9000", -1, NULL, 0},
        {"[::1:9000", -1, NULL, 0},
        {"", -1, NULL, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char host[64];
        uint16_t port = 1;
        int rc = http_parse_hostport(cases[i].in, host, sizeof host, &port);
        if (rc != cases[i].rc)
            fail_msg("'%s': rc %d, want %d", cases[i].in, rc, cases[i].rc);
        if (rc == 0) {
            assert_string_equal(host, cases[i].host);
            assert_int_equal(port, cases[i].port);
        }
    }
    char tiny[4];
    uint16_t port;
    assert_int_equal(http_parse_hostport("longhost:1", tiny, sizeof tiny, &port), -1);
}

typedef struct fixture {
    struct gateway *gw;
    void *ctx;
} fixture_t;

static void *dealer(fixture_t *f)
{
    void *s = zmq_socket(f->ctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    assert_int_equal(zmq_connect(s, f->gw->worker_endpoint), 0);
    return s;
}

static int setup(void **state)
{
    log_init("test", LOG_WARN);
    fixture_t *f = calloc(1, sizeof *f);
    gateway_config_t cfg = {.worker_endpoint = "tcp://127.0.0.1:0", .heartbeat_ms = HB_MS};
    f->gw = gateway_new(&cfg);
    if (!f->gw)
        return -1;
    f->ctx = zmq_ctx_new();
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    gateway_free(&f->gw);
    assert_null(f->gw);
    zmq_ctx_term(f->ctx);
    free(f);
    return 0;
}

/* Receives one message within timeout_ms; fails the test otherwise. */
static void recv_msg(void *s, proto_msg_t *m, int timeout_ms)
{
    zmq_pollitem_t it = {.socket = s, .events = ZMQ_POLLIN};
    if (zmq_poll(&it, 1, timeout_ms) != 1)
        fail_msg("no message from the gateway within %d ms", timeout_ms);
    char err[200];
    int rc = proto_recv(s, NULL, m, 0, err, sizeof err);
    if (rc != PROTO_OK)
        fail_msg("bad message from the gateway: %s", err);
}

static void send_register(void *s, const char *replica, const char *model)
{
    proto_msg_t m;
    proto_msg_init(&m, PROTO_REGISTER);
    m.reg = (proto_register_t){.version = PROTO_VERSION, .model = (char *)model,
                               .replica = (char *)replica, .host = "h", .pid = 7,
                               .capacity = 3, .n_ctx = 128, .n_vocab = 50, .kv_blocks = 12,
                               .block_size = 32, .heartbeat_ms = HB_MS};
    assert_int_equal(proto_send(s, NULL, &m, 0), PROTO_OK);
}

static void send_heartbeat(void *s, uint64_t seq, uint32_t running)
{
    proto_msg_t m;
    proto_msg_init(&m, PROTO_HEARTBEAT);
    m.heartbeat.seq = seq;
    m.heartbeat.heartbeat_ms = HB_MS;
    m.heartbeat.has_load = true;
    m.heartbeat.load.running = running;
    m.heartbeat.load.kv_blocks_total = 12;
    m.heartbeat.load.free_slots = 3 - running;
    assert_int_equal(proto_send(s, NULL, &m, 0), PROTO_OK);
}

/* The worker entry with this replica id in /health, or NULL; *h is the
 * whole document (caller json_decref's it). */
static json_t *health_worker(fixture_t *f, const char *replica, json_t **h)
{
    *h = gateway_health(f->gw, 2000000);
    assert_non_null(*h);
    size_t i;
    json_t *w;
    json_array_foreach(json_object_get(*h, "workers"), i, w)
        if (strcmp(json_string_value(json_object_get(w, "id")), replica) == 0)
            return w;
    return NULL;
}

static void test_register_heartbeat_expire(void **state)
{
    fixture_t *f = *state;
    void *s = dealer(f);

    /* a stranger's heartbeat is answered with ERROR 409, id 0 */
    send_heartbeat(s, 0, 0);
    proto_msg_t m;
    recv_msg(s, &m, 2000);
    assert_int_equal(m.type, PROTO_ERROR);
    assert_int_equal(m.error.code, PROTO_CODE_NOT_REGISTERED);
    assert_true(m.error.id == 0);
    proto_msg_clear(&m);

    /* garbage does not hurt: wrong tag, too few frames, bad body */
    zmq_send(s, "GARBAGE", 7, 0);
    zmq_send(s, "PGDA01", 6, ZMQ_SNDMORE);
    zmq_send(s, "\x02", 1, ZMQ_SNDMORE);
    zmq_send(s, "\xdf\xff\xff\xff\xff", 5, 0);

    /* REGISTER is acknowledged with a heartbeat carrying the gateway's interval */
    send_register(s, "h:7:aa", "m1");
    recv_msg(s, &m, 2000);
    assert_int_equal(m.type, PROTO_HEARTBEAT);
    assert_int_equal(m.heartbeat.heartbeat_ms, HB_MS);
    proto_msg_clear(&m);

    json_t *h;
    json_t *w = health_worker(f, "h:7:aa", &h);
    assert_non_null(w);
    assert_string_equal(json_string_value(json_object_get(h, "status")), "ok");
    assert_string_equal(json_string_value(json_object_get(w, "model")), "m1");
    assert_int_equal(json_integer_value(json_object_get(w, "capacity")), 3);
    assert_int_equal(json_integer_value(json_object_get(w, "liveness")), PROTO_LIVENESS);
    assert_true(json_is_null(json_object_get(w, "load"))); /* no heartbeat yet */
    json_decref(h);

    /* keep heartbeating (five times an interval, so only a stall of a few
     * intervals could make us look silent) until the gateway has heartbeated
     * us twice: it stays, and its load shows. No bound on how fast: the
     * deadline only catches a gateway that never heartbeats. */
    uint64_t n_gateway_hb = 0, seq = 0;
    int64_t t_first_sent = clock_now_us(), t_last_sent = 0;
    while (n_gateway_hb < 2 || seq < 10) {
        assert_true(clock_now_us() - t_first_sent < 60 * 1000000ll);
        send_heartbeat(s, seq++, 2);
        t_last_sent = clock_now_us();
        clock_sleep_us(HB_MS * 1000 / 5);
        while (zmq_poll(&(zmq_pollitem_t){.socket = s, .events = ZMQ_POLLIN}, 1, 0) == 1) {
            recv_msg(s, &m, 0);
            n_gateway_hb += m.type == PROTO_HEARTBEAT;
            proto_msg_clear(&m);
        }
    }
    w = health_worker(f, "h:7:aa", &h);
    int64_t since_first_ms = (clock_now_us() - t_first_sent) / 1000;
    assert_non_null(w);
    json_t *load = json_object_get(w, "load");
    assert_int_equal(json_integer_value(json_object_get(load, "running")), 2);
    assert_int_equal(json_integer_value(json_object_get(load, "free_slots")), 1);
    /* a load shows, so a heartbeat of ours arrived, and every one was sent
     * after t_first_sent (causality, not speed) */
    int64_t ago = json_integer_value(json_object_get(w, "last_heartbeat_ms_ago"));
    assert_true(ago >= 0 && ago <= since_first_ms + 1);
    json_decref(h);

    /* fall silent: gone PROTO_LIVENESS intervals after our last message —
     * not before (it arrived after we sent it); the deadline after that only
     * catches a gateway that never expires a worker */
    int64_t gone_us = -1;
    while (clock_now_us() - t_last_sent < 60 * 1000000ll) {
        w = health_worker(f, "h:7:aa", &h);
        json_decref(h);
        if (!w) {
            gone_us = clock_now_us() - t_last_sent;
            break;
        }
        clock_sleep_us(2000);
    }
    print_message("    silent worker dropped %lld ms after its last message (interval %d ms)\n",
                  (long long)(gone_us / 1000), HB_MS);
    assert_true(gone_us >= 0);
    assert_true(gone_us >= PROTO_LIVENESS * HB_MS * 1000 - 2000);
    zmq_close(s);
}

static void test_replace_by_replica(void **state)
{
    fixture_t *f = *state;
    void *a = dealer(f), *b = dealer(f);
    proto_msg_t m;
    send_register(a, "h:9:bb", "old");
    recv_msg(a, &m, 2000);
    proto_msg_clear(&m);
    /* the same process on a new connection (as after a reconnect) */
    send_register(b, "h:9:bb", "new");
    recv_msg(b, &m, 2000);
    proto_msg_clear(&m);
    json_t *h;
    json_t *w = health_worker(f, "h:9:bb", &h);
    assert_non_null(w);
    assert_string_equal(json_string_value(json_object_get(w, "model")), "new");
    assert_int_equal(json_array_size(json_object_get(h, "workers")), 1);
    json_decref(h);
    /* the old connection is a stranger now */
    send_heartbeat(a, 1, 0);
    recv_msg(a, &m, 2000);
    while (m.type == PROTO_HEARTBEAT) { /* one may have been in flight */
        proto_msg_clear(&m);
        recv_msg(a, &m, 2000);
    }
    assert_int_equal(m.type, PROTO_ERROR);
    assert_int_equal(m.error.code, PROTO_CODE_NOT_REGISTERED);
    proto_msg_clear(&m);
    zmq_close(a);
    zmq_close(b);
}

static void send_counters(void *s, uint64_t seq, uint64_t pc_q, uint64_t pc_hit)
{
    proto_msg_t m;
    proto_msg_init(&m, PROTO_HEARTBEAT);
    m.heartbeat.seq = seq;
    m.heartbeat.heartbeat_ms = HB_MS;
    m.heartbeat.has_load = true;
    m.heartbeat.load.kv_blocks_total = 12;
    m.heartbeat.load.free_slots = 3;
    m.heartbeat.load.prefix_cache_queries = pc_q;
    m.heartbeat.load.prefix_cache_hits = pc_hit;
    assert_int_equal(proto_send(s, NULL, &m, 0), PROTO_OK);
}

/* vllm:prefix_cache_hits_total{model_name="m"}, -1 = absent */
static double hits_metric(fixture_t *f)
{
    char *t = gateway_metrics_text(f->gw, 2000000);
    assert_non_null(t);
    const char *key = "vllm:prefix_cache_hits_total{model_name=\"m\"} ";
    const char *p = strstr(t, key);
    double v = p ? strtod(p + strlen(key), NULL) : -1;
    free(t);
    return v;
}

/* Workers report prefix-cache counters in tokens, cumulative: the gateway
 * adds them as they are (no block-size factor), counts the first heartbeat,
 * and a process that registers again on a new connection continues from
 * what was counted, not from 0. */
static void test_prefix_counters(void **state)
{
    fixture_t *f = *state;
    void *a = dealer(f), *b = dealer(f);
    proto_msg_t m;
    send_register(a, "h:5:cc", "m");
    recv_msg(a, &m, 2000);
    proto_msg_clear(&m);
    send_counters(a, 1, 100, 40);
    double v = -1;
    for (int i = 0; i < 200 && v != 40; i++, usleep(10000))
        v = hits_metric(f);
    assert_true(v == 40); /* the first heartbeat, in tokens */
    send_counters(a, 2, 130, 50);
    for (int i = 0; i < 200 && v != 50; i++, usleep(10000))
        v = hits_metric(f);
    assert_true(v == 50);
    /* reconnect: same replica id, new connection, counters go on */
    send_register(b, "h:5:cc", "m");
    recv_msg(b, &m, 2000);
    proto_msg_clear(&m);
    send_counters(b, 3, 160, 70);
    for (int i = 0; i < 200 && v != 70; i++, usleep(10000))
        v = hits_metric(f);
    assert_true(v == 70); /* not 50 + 70 */
    usleep(100000);
    assert_true(hits_metric(f) == 70);
    zmq_close(a);
    zmq_close(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_hostport),
        cmocka_unit_test_setup_teardown(test_register_heartbeat_expire, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replace_by_replica, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prefix_counters, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
