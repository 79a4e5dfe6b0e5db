/* The worker module (worker/worker.h) in-process, against a real ZeroMQ
 * ROUTER socket that plays the gateway, with stories260K.
 *
 * The test drives both sides on one thread: it sends protocol messages on its
 * ROUTER, calls worker_run_once() to let the worker take them and step, and
 * reads the EVENTs/ERRORs back. Checked:
 *   - SUBMIT → scheduler translation (worker_req_from_submit), field by
 *     field: prompt tokens (text, chat, ids; none yet with images), limits, stop strings, sampling
 *     parameters, logit bias, logprobs, deadline; invalid sampling, a forced
 *     tool call with a grammar and an uncompilable strict tool → BAD_REQUEST
 *     (the typed cause, not the HTTP status);
 *   - a greedy completion streamed as EVENTs has exactly the tokens and text
 *     of the same request run on a scheduler of its own (the reference: the
 *     worker adds nothing between SUBMIT and sched, nor between sched and EVENT);
 *   - logprobs arrive with the requested number of alternatives;
 *   - a prompt longer than the context → ERROR 413 for that request only;
 *     CANCEL → finish "cancelled"; deadline_ms → finish "timeout";
 *   - DRAIN: new SUBMITs get ERROR 503, the worker stops once idle;
 *     SHUTDOWN stops it at once;
 *   - the start-up warm-up (sched_warm_up): a worker registers with every KV
 *     block free and nothing in the prefix cache, streams the same greedy
 *     tokens and text as one started with no_warm_up, and a warm-up on a
 *     scheduler holding a cached prefix leaves its block counts and cached
 *     keys as they were, and the next request's output unchanged.
 * The out-of-process view (flags, signals, exit codes) is test_worker_proc.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/clock.h"
#include "proto/msg.h"
#include "tests/support/support.h"
#include "worker/kv_pool.h"
#include "worker/worker.h"

#define TEXT_CAP 8192
#define MAX_IDS 1024
#define HB_MS 200            /* worker heartbeat = its idle poll timeout; it calls us
                              * dead after 3 of its intervals until our first
                              * HEARTBEAT says ours: room for a stalled test thread */
#define OUR_HB_MS 1000       /* the fake gateway's heartbeat interval */
#define WAIT_US 60000000LL   /* generous: sanitizer builds on a shared 2-core box */

static const char *g_model;
static const char *const *g_loras; /* --lora specs of the next fx_new, (g_n_loras) */
static int32_t g_n_loras;
static int32_t g_max_seqs = 4;      /* max_seqs of the next fx_new */
static bool g_no_warm_up;           /* no_warm_up of the next fx_new */
static const char *PROMPT = "Once upon a time";

/* What the fake gateway saw of one request. */
typedef struct seen {
    char text[TEXT_CAP];
    size_t text_len;
    int32_t ids[MAX_IDS];
    uint32_t n_ids;
    int n_events;
    int n_logprobs;          /* EVENTs with one lp entry */
    uint32_t max_top;        /* largest lp top count seen */
    bool lp_ok;              /* every lp entry well-formed: logprob <= 0, top sorted */
    proto_finish_t finish;
    bool final;
    proto_usage_t usage;
    uint32_t err_code;       /* ERROR code for this id, 0 none */
    uint32_t err;            /* its typed cause (ERROR err), or the failed EVENT's err */
} seen_t;

typedef struct fx {
    void *zctx, *router;
    char endpoint[128];
    proto_peer_t peer;
    bool have_peer;
    proto_register_t reg;    /* copy of the REGISTER's numbers (strings not kept) */
    char reg_model[64];
    worker_t *w;
    int64_t t_next_hb_us;    /* our next HEARTBEAT to the worker */
    uint64_t hb_seq;
    bool stopped;            /* worker_run_once returned false */
    seen_t seen[40];         /* by request id 1..39 */
} fx_t;

static void send_msg(fx_t *f, const proto_msg_t *m)
{
    assert_true(f->have_peer);
    assert_int_equal(proto_send(f->router, &f->peer, m, 0), PROTO_OK);
}

/* Sends our HEARTBEAT when one is due (a 1 s interval, sent 4 times as
 * often: the worker calls us dead after 3 s of silence). */
static void heartbeat(fx_t *f)
{
    int64_t now = clock_now_us();
    if (f->have_peer && now >= f->t_next_hb_us) {
        proto_msg_t hb;
        proto_msg_init(&hb, PROTO_HEARTBEAT);
        hb.heartbeat.seq = f->hb_seq++;
        hb.heartbeat.heartbeat_ms = OUR_HB_MS;
        send_msg(f, &hb);
        f->t_next_hb_us = now + OUR_HB_MS * 1000 / 4;
    }
}

/* Reads everything the worker sent so far, heartbeating as a gateway (the
 * first HEARTBEAT right after REGISTER, as the gateway acknowledges it). */
static void drain_router(fx_t *f)
{
    heartbeat(f);
    for (;;) {
        proto_peer_t from;
        proto_msg_t m;
        char err[256];
        int rc = proto_recv(f->router, &from, &m, ZMQ_DONTWAIT, err, sizeof err);
        if (rc == PROTO_ESYS) {
            heartbeat(f);
            return;
        }
        assert_int_equal(rc, PROTO_OK);
        if (m.type == PROTO_REGISTER) {
            f->peer = from;
            f->have_peer = true;
            f->reg = m.reg;
            snprintf(f->reg_model, sizeof f->reg_model, "%s", m.reg.model);
        } else if (m.type == PROTO_EVENT) {
            assert_true(m.event.id >= 1 && m.event.id < 40);
            seen_t *s = &f->seen[m.event.id];
            assert_false(s->final); /* nothing after the final event */
            s->n_events++;
            assert_true(s->text_len + m.event.text_len < TEXT_CAP);
            memcpy(s->text + s->text_len, m.event.text, m.event.text_len);
            s->text_len += m.event.text_len;
            for (uint32_t i = 0; i < m.event.n_ids; i++) {
                assert_true(s->n_ids < MAX_IDS);
                s->ids[s->n_ids++] = m.event.ids[i];
            }
            if (m.event.n_logprobs) {
                assert_int_equal(m.event.n_logprobs, m.event.n_ids);
                const proto_logprob_t *lp = &m.event.logprobs[0];
                s->n_logprobs++;
                if (lp->n_top > s->max_top)
                    s->max_top = lp->n_top;
                if (lp->logprob > 0)
                    s->lp_ok = false;
                for (uint32_t k = 1; k < lp->n_top; k++)
                    if (lp->top[k].logprob > lp->top[k - 1].logprob)
                        s->lp_ok = false;
            }
            if (m.event.finish != PROTO_FINISH_NONE) {
                s->final = true;
                s->finish = m.event.finish;
                assert_true(m.event.has_usage);
                s->usage = m.event.usage;
                assert_int_equal(m.event.n_tokens, s->n_ids);
                s->err = m.event.err;
            }
        } else if (m.type == PROTO_ERROR) {
            assert_true(m.error.id >= 1 && m.error.id < 40);
            f->seen[m.error.id].err_code = m.error.code;
            f->seen[m.error.id].err = m.error.err;
            /* the code is the one that goes with the cause, for older gateways */
            assert_int_equal(m.error.code, proto_err_code(m.error.err));
        }
        /* the worker's HEARTBEATs and KV messages: nothing to check here */
        proto_msg_clear(&m);
    }
}

/* Output still on its way from an idle worker (the last EVENT of a request
 * crosses the link thread and TCP): wait for it here, since an idle worker's
 * turn sleeps a heartbeat interval when no message comes. */
static void wait_output_if_idle(fx_t *f)
{
    if (sched_busy(worker_sched(f->w)))
        return;
    zmq_pollitem_t it = {.socket = f->router, .events = ZMQ_POLLIN};
    zmq_poll(&it, 1, 50);
    drain_router(f);
}

/* Turns the worker and reads its output until cond holds (or fails). */
#define RUN_UNTIL(f, cond, what)                                                \
    do {                                                                        \
        int64_t t_end_ = clock_now_us() + WAIT_US;                              \
        drain_router(f);                                                        \
        while (!(cond) && !(f)->stopped && clock_now_us() < t_end_) {           \
            if (!worker_run_once((f)->w, -1))                                   \
                (f)->stopped = true;                                            \
            drain_router(f);                                                    \
            if (!(cond) && !(f)->stopped)                                       \
                wait_output_if_idle(f);                                         \
        }                                                                       \
        if (!(cond))                                                            \
            fail_msg("timed out (or stopped) waiting for %s", what);            \
    } while (0)

/* Reads the worker's output (without turning it: it has stopped) until cond
 * holds: what it sent last may still be on its way over TCP. */
#define READ_UNTIL(f, cond, what)                                               \
    do {                                                                        \
        int64_t t_end_ = clock_now_us() + WAIT_US;                              \
        drain_router(f);                                                        \
        while (!(cond) && clock_now_us() < t_end_) {                            \
            zmq_pollitem_t it_ = {.socket = (f)->router, .events = ZMQ_POLLIN}; \
            zmq_poll(&it_, 1, 10);                                              \
            drain_router(f);                                                    \
        }                                                                       \
        if (!(cond))                                                            \
            fail_msg("timed out waiting for %s", what);                         \
    } while (0)

/* step_sleep_ms: PAGODA_TEST_STEP_SLEEP_MS for this worker (worker.h, read
 * by worker_new), a floor on each step's length so that "still running when
 * the next message arrives over TCP" holds however fast the machine; NULL =
 * full speed. */
static fx_t *fx_new_slowed(const char *step_sleep_ms)
{
    fx_t *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->zctx = zmq_ctx_new();
    f->router = support_router_bind(f->zctx, f->endpoint, sizeof f->endpoint);
    assert_non_null(f->router);
    worker_config_t c;
    worker_config_default(&c);
    c.endpoint = f->endpoint;
    c.model_name = "stories";
    c.model_path = g_model;
    c.heartbeat_ms = HB_MS;
    c.sched.max_seqs = g_max_seqs;
    c.sched.n_threads = 1;
    c.loras = g_loras;
    c.n_loras = g_n_loras;
    c.no_warm_up = g_no_warm_up;
    char err[256];
    if (step_sleep_ms)
        setenv("PAGODA_TEST_STEP_SLEEP_MS", step_sleep_ms, 1);
    f->w = worker_new(&c, err, sizeof err);
    unsetenv("PAGODA_TEST_STEP_SLEEP_MS");
    if (!f->w)
        fail_msg("worker_new: %s", err);
    RUN_UNTIL(f, f->have_peer, "REGISTER");
    for (int i = 0; i < 40; i++)
        f->seen[i].lp_ok = true;
    return f;
}

static fx_t *fx_new(void)
{
    return fx_new_slowed(NULL);
}

static void fx_free(fx_t **pf)
{
    fx_t *f = *pf;
    worker_free(&f->w);
    assert_null(f->w);
    zmq_close(f->router);
    zmq_ctx_term(f->zctx);
    free(f);
    *pf = NULL;
}

static void submit_init(proto_msg_t *m, uint64_t id, const char *prompt, uint32_t max_tok)
{
    proto_msg_init(m, PROTO_SUBMIT);
    m->submit.id = id;
    m->submit.priority = PROTO_PRIO_NORMAL;
    m->submit.kind = PROTO_KIND_COMPLETION;
    m->submit.prompt = (char *)prompt;
    m->submit.sampling.temperature = 0;
    m->submit.max_tokens = max_tok;
}

/* Collects a reference run's tokens and text. */
typedef struct ref_run {
    int32_t *ids;
    int cap, n;
    char *text;
    size_t len;
} ref_run_t;

static void on_ref_event(void *ud, const sched_event_t *ev)
{
    ref_run_t *ref = ud;
    for (int32_t i = 0; i < ev->n_tokens && ref->n < ref->cap; i++)
        ref->ids[ref->n++] = ev->tokens[i];
    if (ev->text_len && ref->len + ev->text_len < TEXT_CAP) {
        memcpy(ref->text + ref->len, ev->text, ev->text_len);
        ref->len += ev->text_len;
    }
}

/* Runs r alone on a scheduler of its own over the same model: the tokens
 * the worker must stream for it. Returns the count. */
static int32_t reference_run(const engine_t *e, const sched_req_t *r, int32_t *out, int cap,
                             char *text, size_t *text_len)
{
    ref_run_t ref = {out, cap, 0, text, 0};
    sched_config_t c;
    sched_config_default(&c);
    c.max_seqs = 1;
    c.n_threads = 1;
    char err[256];
    sched_t *s = sched_new(e->model, e->tok, &c, on_ref_event, &ref, err, sizeof err);
    assert_non_null(s);
    assert_int_equal(sched_submit(s, r, err, sizeof err), 0);
    while (sched_busy(s))
        assert_true(sched_step(s) >= 0);
    sched_free(&s);
    *text_len = ref.len;
    return ref.n;
}

/* ---- tests ------------------------------------------------------------------ */

#define NEED_MODEL()                                                            \
    do {                                                                        \
        if (!g_model)                                                           \
            skip();                                                             \
    } while (0)

/* The test model's engine, or the test is skipped. */
static engine_t *load_engine(void)
{
    NEED_MODEL();
    char err[256];
    engine_t *e = engine_load(g_model, err, sizeof err);
    assert_non_null(e);
    return e;
}

static void test_req_from_submit(void **state)
{
    (void)state;
    char err[256];
    engine_t *e = load_engine();

    /* completion text: the prompt is the engine's tokenization */
    int32_t *want = NULL;
    int32_t n_want = engine_prompt_text(e, PROMPT, strlen(PROMPT), &want, err, sizeof err);
    assert_int_equal(n_want, 5); /* BOS + 4 */
    proto_msg_t m;
    submit_init(&m, 9, PROMPT, 33);
    proto_submit_t *sm = &m.submit;
    char *stops[] = {(char *)"The end", (char *)"."};
    int32_t resume[] = {10, 11, 12};
    proto_logit_bias_t bias[] = {{.token = 7, .bias = -100}, {.token = 8, .bias = 2.5}};
    sm->priority = PROTO_PRIO_LOW;
    sm->stop = stops;
    sm->n_stop = 2;
    sm->resume = resume;
    sm->n_resume = 3;
    sm->ignore_eos = true;
    sm->deadline_ms = 1500;
    sm->sampling = (proto_sampling_t){
        .temperature = 0.7, .top_p = 0.9, .top_k = 40, .min_p = 0.05,
        .repetition_penalty = 1.1, .presence_penalty = 0.5, .frequency_penalty = -0.5,
        .has_seed = true, .seed = 1234567890123ULL, .logit_bias = bias, .n_logit_bias = 2,
        .logprobs = true, .top_logprobs = 3,
    };
    worker_req_t r;
    assert_int_equal(worker_req_from_submit(e, sm, 1000000, &r, err, sizeof err), PROTO_ERR_NONE);
    assert_int_equal(r.req.id, 9);
    assert_int_equal(r.req.priority, 2);
    assert_int_equal(r.req.n_prompt, n_want);
    assert_memory_equal(r.req.prompt, want, (size_t)n_want * sizeof *want);
    assert_ptr_equal(r.req.prompt, r.prompt);
    assert_int_equal(r.req.n_resume, 3);
    assert_memory_equal(r.req.resume, resume, sizeof resume);
    assert_int_equal(r.req.max_tokens, 33);
    assert_true(r.req.ignore_eos);
    assert_int_equal(r.req.n_stop, 2);
    assert_string_equal(r.req.stop[0], "The end");
    assert_string_equal(r.req.stop[1], ".");
    assert_int_equal(r.req.n_stop_ids, 0); /* completions: no end-of-turn ids */
    assert_int_equal(r.req.top_logprobs, 3);
    assert_int_equal(r.req.deadline_us, 1000000 + 1500 * 1000);
    assert_int_equal(r.req.n_choices, 1); /* n absent: one choice */
    const sampler_params_t *sp = &r.req.sampling;
    assert_true(fabsf(sp->temperature - 0.7f) < 1e-6f);
    assert_true(fabsf(sp->top_p - 0.9f) < 1e-6f);
    assert_int_equal(sp->top_k, 40);
    assert_true(fabsf(sp->min_p - 0.05f) < 1e-6f);
    assert_true(fabsf(sp->repetition_penalty - 1.1f) < 1e-6f);
    assert_true(fabsf(sp->presence_penalty - 0.5f) < 1e-6f);
    assert_true(fabsf(sp->frequency_penalty + 0.5f) < 1e-6f);
    assert_true(sp->has_seed);
    assert_true(sp->seed == 1234567890123ULL);
    assert_int_equal(sp->n_logit_bias, 2);
    assert_int_equal(sp->logit_bias[0].token, 7);
    assert_true(sp->logit_bias[0].bias == -100.0f);
    assert_int_equal(sp->logit_bias[1].token, 8);
    assert_true(sp->logit_bias[1].bias == 2.5f);
    worker_req_clear(&r);
    worker_req_clear(&r); /* safe twice */
    assert_null(r.prompt);

    /* no logprobs, no deadline; n = 3 choices */
    submit_init(&m, 10, PROMPT, 0);
    sm->n_choices = 3;
    assert_int_equal(worker_req_from_submit(e, sm, 5, &r, err, sizeof err), PROTO_ERR_NONE);
    assert_int_equal(r.req.top_logprobs, -1);
    assert_int_equal(r.req.deadline_us, 0);
    assert_int_equal(r.req.max_tokens, 0);
    assert_null(r.bias);
    assert_int_equal(r.req.n_choices, 3);
    worker_req_clear(&r);

    /* prompt ids are taken as given (no BOS added) */
    submit_init(&m, 11, NULL, 4);
    int32_t ids[] = {1, 2, 3};
    sm->prompt_ids = ids;
    sm->n_prompt_ids = 3;
    sm->has_prompt_ids = true;
    assert_int_equal(worker_req_from_submit(e, sm, 0, &r, err, sizeof err), PROTO_ERR_NONE);
    assert_int_equal(r.req.n_prompt, 3);
    assert_memory_equal(r.req.prompt, ids, sizeof ids);
    worker_req_clear(&r);

    /* with images: no text-only prompt (worker_req_submit_images makes the
     * one with the images' runs) */
    submit_init(&m, 12, PROMPT, 4);
    proto_img_t img = {0};
    sm->imgs = &img;
    sm->n_imgs = 1;
    assert_int_equal(worker_req_from_submit(e, sm, 0, &r, err, sizeof err), PROTO_ERR_NONE);
    assert_null(r.prompt);
    assert_int_equal(r.req.n_prompt, 0);
    worker_req_clear(&r);

    free(want);
    engine_free(&e);
}

/* Chat SUBMITs: rendered by the template; refused roles, sampling and tool
 * choices come back as the typed cause. */
static void test_req_from_submit_chat(void **state)
{
    (void)state;
    char err[256];
    engine_t *e = load_engine();
    proto_msg_t m;
    proto_submit_t *sm = &m.submit;
    worker_req_t r;

    /* chat: rendered by the template, ends at its end-of-turn ids too */
    submit_init(&m, 12, NULL, 4);
    proto_chat_msg_t msg = {.role = (char *)"user", .content = (char *)"Tell me a story."};
    sm->kind = PROTO_KIND_CHAT;
    sm->prompt = NULL;
    sm->messages = &msg;
    sm->n_messages = 1;
    chat_msg_t cm = {.role = "user", .content = "Tell me a story."};
    int32_t *chat_ids = NULL;
    int32_t n_chat = engine_prompt_chat(e, &cm, 1, NULL, &chat_ids, err, sizeof err);
    assert_true(n_chat > 5);
    assert_int_equal(worker_req_from_submit(e, sm, 0, &r, err, sizeof err), PROTO_ERR_NONE);
    assert_int_equal(r.req.n_prompt, n_chat);
    assert_memory_equal(r.req.prompt, chat_ids, (size_t)n_chat * sizeof *chat_ids);
    assert_int_equal(r.req.n_stop_ids, e->n_turn_end);
    assert_ptr_equal(r.req.stop_ids, e->turn_end_ids);
    worker_req_clear(&r);
    free(chat_ids);

    /* a chat role the template rejects, and sampling the sampler rejects */
    msg.role = (char *)"no such role";
    assert_int_equal(worker_req_from_submit(e, sm, 0, &r, err, sizeof err), PROTO_ERR_BAD_REQUEST);
    assert_null(r.prompt);
    submit_init(&m, 13, PROMPT, 4);
    proto_logit_bias_t bad = {.token = 100000, .bias = 1}; /* outside the 512-token vocab */
    sm->sampling.logit_bias = &bad;
    sm->sampling.n_logit_bias = 1;
    err[0] = 0;
    assert_int_equal(worker_req_from_submit(e, sm, 0, &r, err, sizeof err), PROTO_ERR_BAD_REQUEST);
    assert_non_null(strstr(err, "invalid sampling parameters"));
    assert_null(r.prompt);
    assert_null(r.bias);

    /* a forced tool call cannot also follow a grammar, and a strict tool
     * whose schema does not compile cannot be forced: both are the typed
     * cause BAD_REQUEST (1), never the HTTP status 400 — an ERROR carrying
     * err 400 is malformed and was dropped by the gateway (#22's hang) */
    submit_init(&m, 14, NULL, 80);
    msg.role = (char *)"user";
    sm->kind = PROTO_KIND_CHAT;
    sm->prompt = NULL;
    sm->messages = &msg;
    sm->n_messages = 1;
    sm->tools = (char *)"[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
                        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}}}]";
    sm->tool_choice = (char *)"required";
    assert_int_equal(worker_req_from_submit(e, sm, 0, &r, err, sizeof err), PROTO_ERR_NONE);
    assert_non_null(r.tool_grammar);
    worker_req_clear(&r);
    sm->grammar = (char *)"root ::= \"x\"";
    assert_int_equal(worker_req_from_submit(e, sm, 0, &r, err, sizeof err), PROTO_ERR_BAD_REQUEST);
    assert_non_null(strstr(err, "cannot be combined"));
    assert_null(r.tool_grammar);
    sm->grammar = NULL;
    sm->tools = (char *)"[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"strict\":true,"
                        "\"parameters\":{\"not\":{}}}}]";
    assert_int_equal(worker_req_from_submit(e, sm, 0, &r, err, sizeof err), PROTO_ERR_BAD_REQUEST);
    assert_null(r.tool_grammar);

    engine_free(&e);
}

static void test_register_and_greedy_stream(void **state)
{
    (void)state;
    NEED_MODEL();
    fx_t *f = fx_new();
    assert_string_equal(f->reg_model, "stories");
    assert_int_equal(f->reg.capacity, 4);
    assert_int_equal(f->reg.n_ctx, 512);
    assert_int_equal(f->reg.n_vocab, 512);
    assert_int_equal(f->reg.heartbeat_ms, HB_MS);
    assert_non_null(strstr(worker_replica(f->w), ":"));

    proto_msg_t m;
    submit_init(&m, 1, PROMPT, 60);
    m.submit.stream = true;
    send_msg(f, &m);
    submit_init(&m, 2, PROMPT, 8); /* a second one in the same batch, with logprobs */
    m.submit.sampling.logprobs = true;
    m.submit.sampling.top_logprobs = 5;
    send_msg(f, &m);
    RUN_UNTIL(f, f->seen[1].final && f->seen[2].final, "requests 1 and 2");

    /* the reference: request 1 alone on its own scheduler */
    char err[256];
    worker_req_t r;
    submit_init(&m, 1, PROMPT, 60);
    assert_int_equal(worker_req_from_submit(worker_engine(f->w), &m.submit, 0, &r, err, sizeof err), PROTO_ERR_NONE);
    int32_t ref[MAX_IDS];
    char ref_text[TEXT_CAP];
    size_t ref_len = 0;
    int32_t n_ref = reference_run(worker_engine(f->w), &r.req, ref, MAX_IDS, ref_text, &ref_len);
    worker_req_clear(&r);

    const seen_t *s = &f->seen[1];
    assert_int_equal(s->err_code, 0);
    assert_int_equal(s->finish, PROTO_FINISH_LENGTH);
    assert_int_equal(n_ref, 60);
    assert_int_equal(s->n_ids, 60);
    assert_memory_equal(s->ids, ref, 60 * sizeof *ref);
    assert_true(ref_len > 100);
    assert_int_equal(s->text_len, ref_len);
    assert_memory_equal(s->text, ref_text, ref_len);
    assert_true(s->n_events >= 2);
    assert_int_equal(s->usage.prompt_tokens, 5);
    assert_int_equal(s->usage.completion_tokens, 60);

    const seen_t *s2 = &f->seen[2];
    assert_int_equal(s2->finish, PROTO_FINISH_LENGTH);
    assert_int_equal(s2->n_ids, 8);
    assert_memory_equal(s2->ids, ref, 8 * sizeof *ref); /* greedy: same start */
    assert_int_equal(s2->n_logprobs, 8);
    assert_int_equal(s2->max_top, 5);
    assert_true(s2->lp_ok);
    assert_true(worker_sched(f->w) != NULL);
    fx_free(&f);
}

static void test_errors_cancel_timeout(void **state)
{
    (void)state;
    NEED_MODEL();
    /* steps of ≥ 3 ms: request 1 (400 tokens) is still running when its
     * CANCEL arrives, request 3 outlives its 1 ms deadline */
    fx_t *f = fx_new_slowed("3");
    proto_msg_t m;
    /* 1: runs long; 2: prompt longer than the 512-token context */
    submit_init(&m, 1, PROMPT, 400);
    m.submit.ignore_eos = true;
    send_msg(f, &m);
    static int32_t long_ids[600];
    for (int i = 0; i < 600; i++)
        long_ids[i] = 1 + i % 500;
    submit_init(&m, 2, NULL, 4);
    m.submit.prompt_ids = long_ids;
    m.submit.n_prompt_ids = 600;
    m.submit.has_prompt_ids = true;
    send_msg(f, &m);
    RUN_UNTIL(f, f->seen[2].err_code && f->seen[1].n_ids >= 3, "ERROR for request 2");
    assert_int_equal(f->seen[2].err_code, PROTO_CODE_TOO_LONG);
    assert_int_equal(f->seen[2].err, PROTO_ERR_CONTEXT_LENGTH);
    assert_false(f->seen[2].final);
    /* request 1 goes on; cancel it */
    proto_msg_init(&m, PROTO_CANCEL);
    m.cancel.id = 1;
    send_msg(f, &m);
    RUN_UNTIL(f, f->seen[1].final, "cancelled request 1");
    assert_int_equal(f->seen[1].finish, PROTO_FINISH_CANCELLED);
    assert_int_equal(f->seen[1].err_code, 0);
    assert_int_equal(f->seen[1].err, PROTO_ERR_NONE);
    assert_true(f->seen[1].n_ids < 400);

    /* 3: a 1 ms deadline on a long request ends it with "timeout" */
    submit_init(&m, 3, PROMPT, 400);
    m.submit.ignore_eos = true;
    m.submit.deadline_ms = 1;
    send_msg(f, &m);
    RUN_UNTIL(f, f->seen[3].final || f->seen[3].err_code, "request 3");
    assert_int_equal(f->seen[3].finish, PROTO_FINISH_TIMEOUT);
    assert_int_equal(f->seen[3].err, PROTO_ERR_DEADLINE);
    assert_true(f->seen[3].n_ids < 400);

    /* 4: invalid sampling → 400 for that request */
    submit_init(&m, 4, PROMPT, 4);
    proto_logit_bias_t bad = {.token = 100000, .bias = 1};
    m.submit.sampling.logit_bias = &bad;
    m.submit.sampling.n_logit_bias = 1;
    send_msg(f, &m);
    RUN_UNTIL(f, f->seen[4].err_code, "ERROR for request 4");
    assert_int_equal(f->seen[4].err_code, PROTO_CODE_BAD_REQUEST);
    assert_int_equal(f->seen[4].err, PROTO_ERR_BAD_REQUEST);

    /* 6: a forced tool call with a grammar → ERROR with the typed cause
     * (drain_router asserts every message decodes: err 400 would not) */
    submit_init(&m, 6, NULL, 80);
    proto_chat_msg_t cm = {.role = (char *)"user", .content = (char *)"hi"};
    m.submit.kind = PROTO_KIND_CHAT;
    m.submit.prompt = NULL;
    m.submit.messages = &cm;
    m.submit.n_messages = 1;
    m.submit.tools = (char *)"[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]";
    m.submit.tool_choice = (char *)"function:f";
    m.submit.grammar = (char *)"root ::= \"x\"";
    send_msg(f, &m);
    RUN_UNTIL(f, f->seen[6].err_code, "ERROR for request 6");
    assert_int_equal(f->seen[6].err, PROTO_ERR_BAD_REQUEST);
    assert_int_equal(f->seen[6].err_code, PROTO_CODE_BAD_REQUEST);

    /* 7: text with a NUL (the byte token <0x00>, id 3 in stories260K's
     * SentencePiece vocabulary) goes out as U+FFFD: the wire's strings are
     * NUL-free and drain_router asserts every EVENT decodes */
    submit_init(&m, 7, NULL, 0);
    int32_t nul_ids[] = {3};
    m.submit.op = PROTO_OP_DETOKENIZE;
    m.submit.prompt_ids = nul_ids;
    m.submit.n_prompt_ids = 1;
    m.submit.has_prompt_ids = true;
    send_msg(f, &m);
    RUN_UNTIL(f, f->seen[7].final || f->seen[7].err_code, "request 7");
    assert_int_equal(f->seen[7].err_code, 0);
    assert_int_equal(f->seen[7].text_len, 3);
    assert_memory_equal(f->seen[7].text, "\xEF\xBF\xBD", 3);

    /* the worker keeps serving: 5 runs to its end */
    submit_init(&m, 5, PROMPT, 6);
    send_msg(f, &m);
    RUN_UNTIL(f, f->seen[5].final, "request 5");
    assert_int_equal(f->seen[5].finish, PROTO_FINISH_LENGTH);
    assert_int_equal(f->seen[5].n_ids, 6);
    assert_false(f->stopped);
    fx_free(&f);
}

static void test_drain_and_shutdown(void **state)
{
    (void)state;
    NEED_MODEL();
    /* request 1 must still run when DRAIN and SUBMIT 2 arrive over TCP: its
     * 60 steps last ≥ 20 ms each (test-only hook, read by worker_new), not
     * "long enough" by the machine's speed */
    fx_t *f = fx_new_slowed("20");
    proto_msg_t m;
    submit_init(&m, 1, PROMPT, 60);
    m.submit.ignore_eos = true;
    send_msg(f, &m);
    RUN_UNTIL(f, f->seen[1].n_ids >= 1, "request 1 started");
    proto_msg_init(&m, PROTO_DRAIN);
    send_msg(f, &m);
    submit_init(&m, 2, PROMPT, 4);
    send_msg(f, &m);
    /* 2 is refused while 1 runs; 1 finishes, then the worker stops by itself */
    RUN_UNTIL(f, f->seen[2].err_code, "request 2's ERROR");
    assert_false(f->seen[1].final);
    RUN_UNTIL(f, f->stopped, "the drained worker to stop");
    READ_UNTIL(f, f->seen[1].final, "request 1's end");
    assert_int_equal(f->seen[1].finish, PROTO_FINISH_LENGTH);
    assert_int_equal(f->seen[1].n_ids, 60);
    assert_int_equal(f->seen[2].err_code, PROTO_CODE_UNAVAILABLE);
    assert_int_equal(f->seen[2].err, PROTO_ERR_UNAVAILABLE);
    assert_false(worker_run_once(f->w, -1)); /* stays stopped */
    fx_free(&f);

    f = fx_new();
    proto_msg_init(&m, PROTO_SHUTDOWN);
    send_msg(f, &m);
    RUN_UNTIL(f, f->stopped, "SHUTDOWN");
    fx_free(&f);
}

static void test_new_rejects_bad_config(void **state)
{
    (void)state;
    worker_config_t c;
    worker_config_default(&c);
    char err[256] = "";
    c.model_name = "m";
    c.model_path = "/nonexistent/model.gguf";
    assert_null(worker_new(&c, err, sizeof err));
    assert_true(strlen(err) > 0);
    c.model_name = "";
    err[0] = 0;
    assert_null(worker_new(&c, err, sizeof err));
    assert_true(strlen(err) > 0);
}

static bool all_final(const fx_t *f, int n)
{
    for (int i = 1; i <= n; i++)
        if (!f->seen[i].final)
            return false;
    return true;
}

/* LoRA: 32 greedy streams spread over 8 adapters (one request with two of
 * them, one at another scale) and the base, in one worker with 32 slots —
 * so steps mix every adapter set — each equal, token for token and byte
 * for byte, to the same request alone on a scheduler of its own; the
 * adapters change the text; a name the worker has not loaded → ERROR
 * bad_request. Adapters: pagoda-mkmodel --lora-for of ranks 4..32. */
static void test_lora_streams(void **state)
{
    (void)state;
    NEED_MODEL();
    char dir[] = "/tmp/pagoda-wlora-XXXXXX", specs[8][160], args[512], name[32];
    assert_non_null(mkdtemp(dir));
    const char *sp[8];
    for (int i = 0; i < 8; i++) {
        snprintf(name, sizeof name, "a%d.gguf", i);
        snprintf(args, sizeof args, "--lora-for %s --lora-rank %d --seed %d%s", g_model, 4 << (i % 4), 40 + i,
                 i % 2 ? " --type F16" : "");
        assert_int_equal(support_mkmodel(dir, name, args), 0);
        snprintf(specs[i], sizeof specs[i], "ad%d=%s/%s%s", i, dir, name, i == 3 ? ":0.5" : "");
        sp[i] = specs[i];
    }
    g_loras = sp;
    g_n_loras = 8;
    g_max_seqs = 32;
    fx_t *f = fx_new();
    g_loras = NULL;
    g_n_loras = 0;
    g_max_seqs = 4;
    static const char *const prompts[4] = {"Once upon a time", "The cat", "Lily and Ben", "One day"};
    char names[33][8];
    proto_msg_t m;
    for (uint64_t id = 1; id <= 33; id++) {
        submit_init(&m, id, prompts[id % 4], 24);
        int a = (int)(id % 9) - 1; /* -1 = the base */
        snprintf(names[id - 1], sizeof names[id - 1], id == 33 ? "nope" : "ad%d", a < 0 ? 0 : a);
        if (a >= 0 || id == 33) {
            m.submit.n_lora = 1;
            m.submit.lora[0].name = names[id - 1];
            if (id == 10) { /* ad0 at 0.25 plus ad5 */
                m.submit.lora[0].has_scale = true;
                m.submit.lora[0].scale = 0.25;
                m.submit.n_lora = 2;
                m.submit.lora[1].name = (char *)"ad5";
            }
        }
        send_msg(f, &m);
    }
    RUN_UNTIL(f, all_final(f, 32) && f->seen[33].err_code != 0, "32 streams and the refusal");
    assert_int_equal(f->seen[33].err, PROTO_ERR_BAD_REQUEST);
    int differ = 0;
    for (uint64_t id = 1; id <= 32; id++) {
        submit_init(&m, id, prompts[id % 4], 24);
        int a = (int)(id % 9) - 1;
        if (a >= 0) {
            m.submit.n_lora = 1;
            m.submit.lora[0].name = names[id - 1];
            if (id == 10) {
                m.submit.lora[0].has_scale = true;
                m.submit.lora[0].scale = 0.25;
                m.submit.n_lora = 2;
                m.submit.lora[1].name = (char *)"ad5";
            }
        }
        char err[256];
        worker_req_t r;
        assert_int_equal(worker_req_from_submit(worker_engine(f->w), &m.submit, 0, &r, err, sizeof err),
                         PROTO_ERR_NONE);
        assert_int_equal(r.req.lora.n, (int32_t)m.submit.n_lora);
        assert_true(a < 0 ? r.req.partition == 0 : r.req.partition != 0); /* adapters key their own blocks */
        int32_t ref[MAX_IDS];
        char ref_text[TEXT_CAP];
        size_t ref_len = 0;
        int32_t n_ref = reference_run(worker_engine(f->w), &r.req, ref, MAX_IDS, ref_text, &ref_len);
        worker_req_clear(&r);
        const seen_t *s = &f->seen[id];
        if (s->n_ids != (uint32_t)n_ref || memcmp(s->ids, ref, (size_t)n_ref * sizeof *ref) != 0)
            fail_msg("request %d (adapter %d): batched tokens differ from the request alone", (int)id, a);
        assert_int_equal(s->text_len, ref_len);
        assert_memory_equal(s->text, ref_text, ref_len);
        /* against the base's stream of the same prompt (ids 9, 18, 27) */
        if (a >= 0) {
            for (uint64_t j = 9; j <= 27; j += 9)
                if (j % 4 == id % 4 && (f->seen[j].n_ids != s->n_ids ||
                                        memcmp(f->seen[j].ids, s->ids, s->n_ids * sizeof *s->ids) != 0))
                    differ++;
        }
    }
    assert_true(differ > 0); /* adapters change the text */
    fx_free(&f);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The prefix cache's keys, sorted, into out (cap); returns the count. */
static int32_t cached_keys(const kv_pool_t *p, uint64_t *out, int32_t cap)
{
    int32_t n = kv_pool_cached_keys(p, out, cap);
    assert_true(n >= 0 && n <= cap);
    qsort(out, (size_t)n, sizeof *out, cmp_u64);
    return n;
}

static void test_warm_up(void **state)
{
    (void)state;
    NEED_MODEL();
    /* the start-up path: warm (the default) and not, the same request */
    fx_t *f[2];
    for (int i = 0; i < 2; i++) {
        g_no_warm_up = i == 1;
        f[i] = fx_new();
        g_no_warm_up = false;
        kv_pool_stats_t ps;
        kv_pool_stats(sched_kv_pool((sched_t *)worker_sched(f[i]->w)), &ps);
        assert_int_equal(ps.n_free, ps.n_blocks); /* the warm-up's block went back */
        assert_int_equal(ps.n_used, 0);
        assert_int_equal(ps.n_cached_total, 0);
        assert_int_equal(ps.n_registered, 0);
        assert_int_equal(ps.n_seqs, 0);
        proto_msg_t m;
        submit_init(&m, 1, PROMPT, 40);
        send_msg(f[i], &m);
        RUN_UNTIL(f[i], f[i]->seen[1].final, "request 1");
        assert_int_equal(f[i]->seen[1].finish, PROTO_FINISH_LENGTH);
    }
    assert_int_equal(f[0]->seen[1].n_ids, 40);
    assert_int_equal(f[1]->seen[1].n_ids, 40);
    assert_memory_equal(f[0]->seen[1].ids, f[1]->seen[1].ids, 40 * sizeof(int32_t));
    assert_int_equal(f[0]->seen[1].text_len, f[1]->seen[1].text_len);
    assert_memory_equal(f[0]->seen[1].text, f[1]->seen[1].text, f[0]->seen[1].text_len);
    fx_free(&f[0]);
    fx_free(&f[1]);

    /* sched_warm_up on a scheduler whose prefix cache holds a prompt */
    engine_t *e = load_engine();
    char err[256];
    char long_prompt[1024] = "";
    for (int i = 0; i < 16; i++) /* several full blocks of 32 positions */
        strcat(long_prompt, "Once upon a time there was a little cat. ");
    proto_submit_t sub;
    proto_msg_t m;
    submit_init(&m, 1, long_prompt, 24);
    sub = m.submit;
    worker_req_t r;
    assert_int_equal(worker_req_from_submit(e, &sub, 0, &r, err, sizeof err), PROTO_ERR_NONE);
    int32_t ids[2][MAX_IDS];
    char text[2][TEXT_CAP];
    size_t text_len[2];
    int32_t n_ids[2];
    ref_run_t ref = {ids[0], MAX_IDS, 0, text[0], 0};
    sched_config_t c;
    sched_config_default(&c);
    c.max_seqs = 1;
    c.n_threads = 1;
    sched_t *s = sched_new(e->model, e->tok, &c, on_ref_event, &ref, err, sizeof err);
    assert_non_null(s);
    assert_int_equal(sched_submit(s, &r.req, err, sizeof err), 0);
    while (sched_busy(s))
        assert_true(sched_step(s) >= 0);
    n_ids[0] = ref.n;
    text_len[0] = ref.len;
    kv_pool_t *pool = sched_kv_pool(s);
    kv_pool_stats_t before, after;
    kv_pool_stats(pool, &before);
    assert_true(before.n_cached_total >= 3); /* the prompt's full blocks */
    uint64_t keys[2][256];
    int32_t n_keys = cached_keys(pool, keys[0], 256);
    assert_int_equal(sched_warm_up(s), 0);
    kv_pool_stats(pool, &after);
    assert_int_equal(after.n_free, before.n_free);
    assert_int_equal(after.n_cached, before.n_cached);
    assert_int_equal(after.n_used, before.n_used);
    assert_int_equal(after.n_cached_total, before.n_cached_total);
    assert_int_equal(after.n_registered, before.n_registered);
    assert_int_equal(after.n_evictions, before.n_evictions);
    assert_int_equal(after.n_seqs, before.n_seqs);
    assert_int_equal(cached_keys(pool, keys[1], 256), n_keys);
    assert_memory_equal(keys[0], keys[1], (size_t)n_keys * sizeof keys[0][0]);
    assert_int_equal(kv_pool_check(pool), 0);
    /* the same request again on that scheduler: the cache hit, and the
     * output as before */
    ref = (ref_run_t){ids[1], MAX_IDS, 0, text[1], 0};
    worker_req_clear(&r);
    submit_init(&m, 2, long_prompt, 24);
    sub = m.submit;
    assert_int_equal(worker_req_from_submit(e, &sub, 0, &r, err, sizeof err), PROTO_ERR_NONE);
    assert_int_equal(sched_submit(s, &r.req, err, sizeof err), 0);
    while (sched_busy(s))
        assert_true(sched_step(s) >= 0);
    n_ids[1] = ref.n;
    text_len[1] = ref.len;
    kv_pool_stats(pool, &after);
    assert_true(after.n_prefix_hit_tokens - before.n_prefix_hit_tokens >= 3 * (uint64_t)before.block_size);
    assert_int_equal(n_ids[0], 24);
    assert_int_equal(n_ids[1], 24);
    assert_memory_equal(ids[0], ids[1], 24 * sizeof ids[0][0]);
    assert_int_equal(text_len[0], text_len[1]);
    assert_memory_equal(text[0], text[1], text_len[0]);
    sched_free(&s);
    worker_req_clear(&r);
    engine_free(&e);
}

static int group_setup(void **state)
{
    (void)state;
    static char model[4096];
    const char *p = support_shared_model("stories260K.gguf");
    if (p) {
        snprintf(model, sizeof model, "%s", p);
        g_model = model;
    }
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_new_rejects_bad_config),
        cmocka_unit_test(test_req_from_submit),
        cmocka_unit_test(test_req_from_submit_chat),
        cmocka_unit_test(test_register_and_greedy_stream),
        cmocka_unit_test(test_errors_cancel_timeout),
        cmocka_unit_test(test_drain_and_shutdown),
        cmocka_unit_test(test_lora_streams),
        cmocka_unit_test(test_warm_up),
    };
    return cmocka_run_group_tests(tests, group_setup, NULL);
}
