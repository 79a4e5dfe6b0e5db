/* The gateway (core + HTTP front end, in-process) against a test-side ZeroMQ
 * DEALER playing a worker whose replies are malformed, with real HTTP
 * requests over libcurl (#22 "every feature combination answers"):
 *   - an ERROR whose typed cause is an HTTP status (err 400, the worker bug
 *     behind the ten-minute hang) fails its request at once: 502 in OpenAI's
 *     error shape, code bad_worker_message, long before the request timeout;
 *     the worker's slot is free again (the next request reaches it);
 *   - a malformed EVENT in a started stream ends it with an SSE error event
 *     and [DONE] after the chunks already sent, and the worker gets a CANCEL;
 *   - a malformed message naming a request of another worker, or an unknown
 *     id, changes nothing: both requests finish normally.
 * The request timeout is 60 s and each HTTP call gives up after 30 s, so a
 * request left to its deadline fails the test; nothing here times work. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/clock.h"
#include "common/log.h"
#include "gateway/gateway.h"
#include "gateway/http.h"
#include "proto/msg.h"

#define HB_MS 50
#define CALL_TIMEOUT_S 30L

typedef struct fixture {
    struct gateway *gw;
    http_server_t *http;
    void *ctx;
    void *socks[4];  /* fake workers, closed by teardown (also after a failed
                        assertion, or zmq_ctx_term would wait for them) */
    int n_socks;
    char base[64];   /* http://127.0.0.1:PORT */
} fixture_t;

static int setup(void **state)
{
    log_init("test", LOG_ERROR);
    fixture_t *f = calloc(1, sizeof *f);
    const char *models[] = {"m"};
    gateway_config_t cfg = {.worker_endpoint = "tcp://127.0.0.1:0", .heartbeat_ms = HB_MS,
                            .request_timeout_us = 60 * 1000000LL, .models = models, .n_models = 1};
    f->gw = gateway_new(&cfg);
    if (!f->gw)
        return -1;
    http_config_t hc = {.listen = "127.0.0.1:0"};
    f->http = http_server_new(&hc, f->gw);
    if (!f->http)
        return -1;
    snprintf(f->base, sizeof f->base, "http://127.0.0.1:%u", http_server_port(f->http));
    f->ctx = zmq_ctx_new();
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    for (int i = 0; i < f->n_socks; i++)
        zmq_close(f->socks[i]);
    http_server_free(&f->http);
    gateway_free(&f->gw);
    zmq_ctx_term(f->ctx);
    free(f);
    return 0;
}

/* ---- the fake worker --------------------------------------------------- */

static void *worker(fixture_t *f, const char *replica)
{
    void *s = zmq_socket(f->ctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    assert_true(f->n_socks < 4);
    f->socks[f->n_socks++] = s;
    assert_int_equal(zmq_connect(s, f->gw->worker_endpoint), 0);
    proto_msg_t m;
    proto_msg_init(&m, PROTO_REGISTER);
    m.reg = (proto_register_t){.version = PROTO_VERSION, .model = "m", .replica = (char *)replica,
                               .host = "h", .pid = 1, .capacity = 1, .n_ctx = 256, .n_vocab = 10,
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

/* The id of the SUBMIT the worker receives next. */
static uint64_t expect_submit(void *s)
{
    proto_msg_t m;
    recv_work(s, &m, 20000);
    assert_int_equal(m.type, PROTO_SUBMIT);
    uint64_t id = m.submit.id;
    proto_msg_clear(&m);
    return id;
}

static void send_event(void *s, uint64_t id, const char *text, proto_finish_t fin, uint32_t err)
{
    proto_msg_t m;
    proto_msg_init(&m, PROTO_EVENT);
    int32_t ids[1] = {5};
    m.event = (proto_event_t){.id = id, .text = (char *)text, .text_len = (uint32_t)strlen(text),
                              .ids = ids, .n_ids = 1, .n_tokens = 1, .finish = fin, .err = err,
                              .has_usage = fin != PROTO_FINISH_NONE,
                              .usage = {.prompt_tokens = 3, .completion_tokens = 1}};
    /* the encoder does not check limits: err 400 goes out as the buggy
     * worker sent it, and the gateway's decoder refuses it */
    assert_int_equal(proto_send(s, NULL, &m, 0), PROTO_OK);
}

/* An ERROR whose err is an HTTP status: what worker_req_from_submit sent for
 * a forced tool call with a response_format before #22's fix. */
static void send_bad_error(void *s, uint64_t id)
{
    proto_msg_t m;
    proto_msg_init(&m, PROTO_ERROR);
    m.error = (proto_error_t){.id = id, .code = 400, .err = 400,
                              .message = "tool_choice 'required' cannot be combined with a grammar"};
    assert_int_equal(proto_send(s, NULL, &m, 0), PROTO_OK);
}

/* ---- HTTP calls on threads of their own -------------------------------- */

typedef struct call {
    pthread_t th;
    char url[128];
    char body[512];
    long status;     /* 0: no answer within CALL_TIMEOUT_S */
    char *resp;      /* body received, NUL-terminated */
    size_t len;
} call_t;

static size_t on_data(char *p, size_t sz, size_t n, void *ud)
{
    call_t *c = ud;
    c->resp = realloc(c->resp, c->len + sz * n + 1);
    memcpy(c->resp + c->len, p, sz * n);
    c->len += sz * n;
    c->resp[c->len] = 0;
    return sz * n;
}

static void *call_main(void *arg)
{
    call_t *c = arg;
    CURL *h = curl_easy_init();
    struct curl_slist *hd = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(h, CURLOPT_URL, c->url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, c->body);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, CALL_TIMEOUT_S);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    if (curl_easy_perform(h) == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &c->status);
    curl_slist_free_all(hd);
    curl_easy_cleanup(h);
    return NULL;
}

static call_t *chat(fixture_t *f, bool stream)
{
    call_t *c = calloc(1, sizeof *c);
    snprintf(c->url, sizeof c->url, "%s/v1/chat/completions", f->base);
    snprintf(c->body, sizeof c->body,
             "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
             "\"max_tokens\":5,\"stream\":%s}", stream ? "true" : "false");
    c->resp = calloc(1, 1);
    assert_int_equal(pthread_create(&c->th, NULL, call_main, c), 0);
    return c;
}

static void call_wait(call_t *c)
{
    pthread_join(c->th, NULL);
}

static void call_free(call_t **cp)
{
    free((*cp)->resp);
    free(*cp);
    *cp = NULL;
}

/* The body's OpenAI error object has exactly message/type/param/code, and
 * this code; returns its message (a jansson-owned string of root). */
static void assert_oai_error(json_t *err, const char *code)
{
    assert_non_null(err);
    assert_int_equal(json_object_size(err), 4);
    assert_true(json_is_string(json_object_get(err, "message")));
    assert_true(json_is_string(json_object_get(err, "type")));
    assert_non_null(json_object_get(err, "param"));
    assert_string_equal(json_string_value(json_object_get(err, "code")), code);
    assert_non_null(strstr(json_string_value(json_object_get(err, "message")), "malformed"));
}

/* ---- tests ------------------------------------------------------------- */

static void test_malformed_error_fails_at_once(void **state)
{
    fixture_t *f = *state;
    void *w = worker(f, "h:1:a");
    call_t *c = chat(f, false);
    uint64_t id = expect_submit(w);
    send_bad_error(w, id);
    call_wait(c);
    assert_int_equal(c->status, 502); /* not 504 after 60 s, not a curl timeout */
    json_t *j = json_loads(c->resp, 0, NULL);
    assert_non_null(j);
    assert_oai_error(json_object_get(j, "error"), "bad_worker_message");
    json_decref(j);
    call_free(&c);

    /* the slot is free again: the next request reaches the capacity-1 worker */
    c = chat(f, false);
    id = expect_submit(w);
    send_event(w, id, "Hello", PROTO_FINISH_STOP, 0);
    call_wait(c);
    assert_int_equal(c->status, 200);
    assert_non_null(strstr(c->resp, "\"content\":\"Hello\""));
    call_free(&c);
}

static void test_malformed_event_ends_stream(void **state)
{
    fixture_t *f = *state;
    void *w = worker(f, "h:1:a");
    call_t *c = chat(f, true);
    uint64_t id = expect_submit(w);
    send_event(w, id, "Hel", PROTO_FINISH_NONE, 0);
    send_event(w, id, "lo", PROTO_FINISH_NONE, 400); /* err out of range: malformed */
    /* the worker is told to stop generating it */
    proto_msg_t m;
    recv_work(w, &m, 20000);
    assert_int_equal(m.type, PROTO_CANCEL);
    assert_true(m.cancel.id == id);
    proto_msg_clear(&m);
    send_event(w, id, "", PROTO_FINISH_CANCELLED, 0);
    call_wait(c);
    assert_int_equal(c->status, 200); /* the stream had started */
    /* data: chunks with "Hel", then the error event, then [DONE], nothing after */
    const char *hel = strstr(c->resp, "\"content\":\"Hel\"");
    const char *errev = strstr(c->resp, "data: {\"error\"");
    const char *done = strstr(c->resp, "data: [DONE]\n\n");
    assert_non_null(hel);
    assert_non_null(errev);
    assert_non_null(done);
    assert_true(hel < errev && errev < done);
    assert_null(strstr(c->resp, "\"content\":\"lo\""));
    assert_string_equal(done + strlen("data: [DONE]\n\n"), "");
    json_t *j = json_loads(errev + strlen("data: "), JSON_DISABLE_EOF_CHECK, NULL);
    assert_non_null(j);
    assert_oai_error(json_object_get(j, "error"), "bad_worker_message");
    json_decref(j);
    call_free(&c);
}

static void test_malformed_for_others_ignored(void **state)
{
    fixture_t *f = *state;
    void *w1 = worker(f, "h:1:a");
    void *w2 = worker(f, "h:2:b");
    call_t *a = chat(f, false), *b = chat(f, false);
    /* capacity 1 each: one request on each worker, in either order */
    proto_msg_t m1, m2;
    recv_work(w1, &m1, 20000);
    recv_work(w2, &m2, 20000);
    assert_int_equal(m1.type, PROTO_SUBMIT);
    assert_int_equal(m2.type, PROTO_SUBMIT);
    uint64_t id1 = m1.submit.id, id2 = m2.submit.id;
    proto_msg_clear(&m1);
    proto_msg_clear(&m2);
    /* w1 sends malformed messages about w2's request and an unknown id, then
     * finishes its own: one socket, so the core has handled the malformed
     * ones before w1's final EVENT */
    send_bad_error(w1, id2);
    send_event(w1, id2, "x", PROTO_FINISH_NONE, 400);
    send_bad_error(w1, 999999);
    send_event(w1, id1, "one", PROTO_FINISH_STOP, 0);
    send_event(w2, id2, "two", PROTO_FINISH_STOP, 0);
    call_wait(a);
    call_wait(b);
    assert_int_equal(a->status, 200);
    assert_int_equal(b->status, 200);
    /* which call went to which worker is the dispatcher's choice */
    bool a_one = strstr(a->resp, "\"content\":\"one\"") != NULL;
    assert_non_null(strstr((a_one ? b : a)->resp, "\"content\":\"two\""));
    assert_non_null(strstr((a_one ? a : b)->resp, "\"content\":\"one\""));
    call_free(&a);
    call_free(&b);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_malformed_error_fails_at_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_malformed_event_ends_stream, setup, teardown),
        cmocka_unit_test_setup_teardown(test_malformed_for_others_ignored, setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
