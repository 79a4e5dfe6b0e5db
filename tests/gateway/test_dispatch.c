/* Unit tests for the gateway core's request path, driven through the public
 * API (gateway_request_from_oai / gateway_submit / gateway_cancel) with a
 * test-side ZeroMQ DEALER speaking the wire protocol as a worker:
 *   - 404 for an unknown model, 429 past --max-queue;
 *   - credit: a capacity-2 worker gets exactly 2 SUBMITs, the next one only
 *     after a final EVENT; the SUBMIT carries the tier and the sampling;
 *   - priority: queued high goes before earlier-queued low;
 *   - EVENTs reach the request's reply channel in order;
 *   - cancel: a running request makes the core send CANCEL;
 *   - worker death: requests without output go to a new worker, one with
 *     output resumes there (SUBMIT resume = the ids already delivered, same
 *     seed), and no error reaches its client;
 *   - a lost request with no replica coming back ends with 504 at its
 *     deadline. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/clock.h"
#include "common/log.h"
#include "gateway/gateway.h"
#include "gateway/snapshot.h"
#include "gateway/oai.h"
#include "proto/msg.h"

#define HB_MS 50

typedef struct fixture {
    struct gateway *gw;
    void *ctx;
} fixture_t;

static int setup(void **state)
{
    log_init("test", LOG_WARN);
    fixture_t *f = calloc(1, sizeof *f);
    const char *models[] = {"m"};
    gateway_config_t cfg = {.worker_endpoint = "tcp://127.0.0.1:0", .heartbeat_ms = HB_MS,
                            .max_queue = 3, .aging_per_s = 0, .models = models, .n_models = 1};
    f->gw = gateway_new(&cfg);
    f->ctx = zmq_ctx_new();
    *state = f;
    return f->gw ? 0 : -1;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    gateway_free(&f->gw);
    zmq_ctx_term(f->ctx);
    free(f);
    return 0;
}

/* A worker: DEALER + REGISTER, waits for the acknowledging heartbeat. */
static void *worker(fixture_t *f, const char *replica, uint32_t cap)
{
    void *s = zmq_socket(f->ctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    assert_int_equal(zmq_connect(s, f->gw->worker_endpoint), 0);
    proto_msg_t m;
    proto_msg_init(&m, PROTO_REGISTER);
    m.reg = (proto_register_t){.version = PROTO_VERSION, .model = "m", .replica = (char *)replica,
                               .host = "h", .pid = 1, .capacity = cap, .n_ctx = 64, .n_vocab = 10,
                               .kv_blocks = 8, .block_size = 32, .heartbeat_ms = 5000};
    assert_int_equal(proto_send(s, NULL, &m, 0), PROTO_OK);
    return s;
}

/* Next non-heartbeat message within timeout_ms; type 0 when none came. */
static void recv_work(void *s, proto_msg_t *m, int timeout_ms)
{
    int64_t t_end = clock_now_us() + (int64_t)timeout_ms * 1000;
    for (;;) {
        zmq_pollitem_t it = {.socket = s, .events = ZMQ_POLLIN};
        int64_t left_ms = (t_end - clock_now_us()) / 1000;
        if (left_ms < 0 || zmq_poll(&it, 1, (long)left_ms) != 1) {
            memset(m, 0, sizeof *m);
            return;
        }
        char err[128];
        assert_int_equal(proto_recv(s, NULL, m, 0, err, sizeof err), PROTO_OK);
        if (m->type != PROTO_HEARTBEAT)
            return;
        proto_msg_clear(m);
    }
}

static void send_event(void *s, uint64_t id, const char *text, proto_finish_t fin)
{
    proto_msg_t m;
    proto_msg_init(&m, PROTO_EVENT);
    int32_t ids[1] = {5};
    m.event = (proto_event_t){.id = id, .text = (char *)text, .text_len = (uint32_t)strlen(text),
                              .ids = ids, .n_ids = 1, .n_tokens = 1, .finish = fin,
                              .has_usage = fin != PROTO_FINISH_NONE,
                              .usage = {.prompt_tokens = 3, .completion_tokens = 1}};
    assert_int_equal(proto_send(s, NULL, &m, 0), PROTO_OK);
}

static gateway_request_t *submit(fixture_t *f, const char *model, prio_tier_t tier)
{
    char body[256];
    snprintf(body, sizeof body,
             "{\"model\":\"%s\",\"prompt\":\"hi\",\"max_tokens\":7,\"temperature\":0.5}", model);
    request_t o;
    oai_error_t e;
    assert_int_equal(oai_parse_request((const uint8_t *)body, strlen(body), REQUEST_COMPLETION, &o, &e), 0);
    gateway_request_t *r = gateway_request_from_oai(f->gw, &o, tier, 0);
    request_free(&o);
    assert_int_equal(gateway_submit(f->gw, r), 0);
    return r;
}

static gateway_reply_t *reply(gateway_request_t *r, int64_t timeout_us)
{
    return chan_pop(r->replies, timeout_us);
}

static void expect_error_within(gateway_request_t *r, int status, const char *code, int64_t wait_us)
{
    gateway_reply_t *rep = reply(r, wait_us);
    assert_non_null(rep);
    assert_int_equal(rep->kind, GATEWAY_REPLY_ERROR);
    assert_int_equal(rep->error.status, status);
    if (code)
        assert_string_equal(rep->error.code, code);
    gateway_reply_free(&rep);
}

static void expect_error(gateway_request_t *r, int status, const char *code)
{
    expect_error_within(r, status, code, 2000000);
}

static void test_refusals(void **state)
{
    fixture_t *f = *state;
    gateway_request_t *r = submit(f, "unknown", PRIO_TIER_NORMAL);
    expect_error(r, 404, "model_not_found");
    gateway_request_unref(&r);
    /* no worker: "m" is configured, so requests wait (grace 30 s) — 3 fit */
    gateway_request_t *q[4];
    for (int i = 0; i < 4; i++)
        q[i] = submit(f, "m", PRIO_TIER_LOW);
    expect_error(q[3], 429, "rate_limit_exceeded");
    json_t *h = gateway_health(f->gw, 2000000);
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(json_object_get(h, "models"), "m"), "queued")), 3);
    json_decref(h);
    for (int i = 0; i < 4; i++) {
        if (i < 3)
            gateway_cancel(f->gw, q[i]->id);
        gateway_request_unref(&q[i]);
    }
    h = gateway_health(f->gw, 2000000);
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(json_object_get(h, "models"), "m"), "queued")), 0);
    json_decref(h);
}

static void test_credit_priority_events_cancel(void **state)
{
    fixture_t *f = *state;
    /* queue before any worker: low, low, then high */
    gateway_request_t *l1 = submit(f, "m", PRIO_TIER_LOW);
    gateway_request_t *l2 = submit(f, "m", PRIO_TIER_LOW);
    gateway_request_t *h1 = submit(f, "m", PRIO_TIER_HIGH);
    void *w = worker(f, "h:1:a", 2);
    proto_msg_t m1, m2, m3;
    recv_work(w, &m1, 2000);
    recv_work(w, &m2, 2000);
    assert_int_equal(m1.type, PROTO_SUBMIT);
    assert_int_equal(m2.type, PROTO_SUBMIT);
    /* high first, then the older low; the SUBMIT carries tier and sampling */
    assert_true(m1.submit.id == h1->id);
    assert_int_equal(m1.submit.priority, PROTO_PRIO_HIGH);
    assert_true(m2.submit.id == l1->id);
    assert_int_equal(m2.submit.priority, PROTO_PRIO_LOW);
    assert_int_equal(m1.submit.max_tokens, 7);
    assert_true(m1.submit.sampling.temperature == 0.5);
    assert_string_equal(m1.submit.prompt, "hi");
    assert_true(m1.submit.deadline_ms > 0);
    /* capacity 2: nothing more until one finishes */
    recv_work(w, &m3, 200);
    assert_int_equal(m3.type, 0);

    send_event(w, h1->id, "Hel", PROTO_FINISH_NONE);
    send_event(w, h1->id, "lo", PROTO_FINISH_STOP);
    gateway_reply_t *a = reply(h1, 2000000), *b = reply(h1, 2000000);
    assert_non_null(a);
    assert_non_null(b);
    assert_string_equal(a->event.text, "Hel");
    assert_int_equal(a->event.finish, PROTO_FINISH_NONE);
    assert_string_equal(b->event.text, "lo");
    assert_int_equal(b->event.finish, PROTO_FINISH_STOP);
    gateway_reply_free(&a);
    gateway_reply_free(&b);
    /* its slot goes to l2 */
    recv_work(w, &m3, 2000);
    assert_int_equal(m3.type, PROTO_SUBMIT);
    assert_true(m3.submit.id == l2->id);

    /* cancel a running request: CANCEL goes out */
    gateway_cancel(f->gw, l1->id);
    proto_msg_t c;
    recv_work(w, &c, 2000);
    assert_int_equal(c.type, PROTO_CANCEL);
    assert_true(c.cancel.id == l1->id);
    send_event(w, l1->id, "", PROTO_FINISH_CANCELLED);

    proto_msg_clear(&m1);
    proto_msg_clear(&m2);
    proto_msg_clear(&m3);
    proto_msg_clear(&c);
    send_event(w, l2->id, "x", PROTO_FINISH_LENGTH);
    gateway_reply_t *z = reply(l2, 2000000);
    assert_non_null(z);
    gateway_reply_free(&z);
    gateway_request_unref(&l1);
    gateway_request_unref(&l2);
    gateway_request_unref(&h1);
    zmq_close(w);
}

static void test_worker_death(void **state)
{
    fixture_t *f = *state;
    void *w1 = worker(f, "h:1:a", 2);
    gateway_request_t *r1 = submit(f, "m", PRIO_TIER_NORMAL);
    gateway_request_t *r2 = submit(f, "m", PRIO_TIER_NORMAL);
    proto_msg_t m1, m2;
    recv_work(w1, &m1, 2000);
    recv_work(w1, &m2, 2000);
    assert_int_equal(m1.type, PROTO_SUBMIT);
    assert_int_equal(m2.type, PROTO_SUBMIT);
    assert_int_equal(m1.submit.n_resume, 0);
    /* the gateway picks a seed for unseeded requests, so a resumed run
     * continues the same random stream */
    assert_true(m1.submit.sampling.has_seed);
    uint64_t seed1 = m1.submit.id == r1->id ? m1.submit.sampling.seed : m2.submit.sampling.seed;
    proto_msg_clear(&m1);
    proto_msg_clear(&m2);
    /* r1 produced output (token 5), r2 not */
    send_event(w1, r1->id, "a", PROTO_FINISH_NONE);
    gateway_reply_t *a = reply(r1, 2000000);
    assert_non_null(a);
    gateway_reply_free(&a);
    /* the worker process "dies": same replica id, new connection → the old
     * registration is dropped with its requests */
    zmq_close(w1);
    void *w2 = worker(f, "h:1:a", 2);
    /* both go to the new worker, in their original order; r1 resumes after
     * the token the client already has, with the same seed */
    proto_msg_t m3, m4;
    recv_work(w2, &m3, 2000);
    recv_work(w2, &m4, 2000);
    assert_int_equal(m3.type, PROTO_SUBMIT);
    assert_int_equal(m4.type, PROTO_SUBMIT);
    assert_true(m3.submit.id == r1->id);
    assert_int_equal(m3.submit.n_resume, 1);
    assert_int_equal(m3.submit.resume[0], 5);
    assert_true(m3.submit.sampling.seed == seed1);
    assert_true(m4.submit.id == r2->id);
    assert_int_equal(m4.submit.n_resume, 0);
    proto_msg_clear(&m3);
    proto_msg_clear(&m4);
    assert_null(reply(r1, 100000)); /* no error reached the client */
    send_event(w2, r1->id, "b", PROTO_FINISH_STOP);
    gateway_reply_t *b1 = reply(r1, 2000000);
    assert_non_null(b1);
    assert_int_equal(b1->kind, GATEWAY_REPLY_EVENT);
    assert_string_equal(b1->event.text, "b");
    gateway_reply_free(&b1);
    send_event(w2, r2->id, "ok", PROTO_FINISH_STOP);
    gateway_reply_t *b = reply(r2, 2000000);
    assert_non_null(b);
    assert_string_equal(b->event.text, "ok");
    gateway_reply_free(&b);
    gateway_request_unref(&r1);
    gateway_request_unref(&r2);
    zmq_close(w2);
}

/* A worker lost with no replica coming back: the resumed request ends with
 * 504 at its deadline, never hangs. */
static void test_lost_until_deadline(void **state)
{
    fixture_t *f = *state;
    gateway_free(&f->gw);
    const char *models[] = {"m"};
    gateway_config_t cfg = {.worker_endpoint = "tcp://127.0.0.1:0", .heartbeat_ms = HB_MS,
                            .max_queue = 3, .aging_per_s = 0, .models = models, .n_models = 1,
                            .request_timeout_us = 600000};
    f->gw = gateway_new(&cfg);
    assert_non_null(f->gw);
    void *w1 = worker(f, "h:1:a", 1);
    int64_t t_submit = clock_now_us();
    gateway_request_t *r1 = submit(f, "m", PRIO_TIER_NORMAL);
    proto_msg_t m1;
    recv_work(w1, &m1, 2000);
    assert_int_equal(m1.type, PROTO_SUBMIT);
    proto_msg_clear(&m1);
    send_event(w1, r1->id, "a", PROTO_FINISH_NONE);
    gateway_reply_t *a = reply(r1, 2000000);
    assert_non_null(a);
    gateway_reply_free(&a);
    zmq_close(w1);
    void *w2 = worker(f, "h:1:a", 1); /* replaces w1 ... */
    zmq_close(w2);                    /* ... and goes away too */
    /* its deadline (600 ms after submit) ends it, not before; how soon after
     * depends on the machine's load, so the wait is generous: what must not
     * happen is no answer at all */
    expect_error_within(r1, 504, "timeout", 30000000);
    assert_true(clock_now_us() - t_submit >= 600000);
    gateway_request_unref(&r1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_credit_priority_events_cancel, setup, teardown),
        cmocka_unit_test_setup_teardown(test_worker_death, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lost_until_deadline, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
