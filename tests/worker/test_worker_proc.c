/* A real pagoda-worker process driven over real ZeroMQ, as a black box.
 *
 * The test plays the gateway: it binds a ROUTER socket on a free port,
 * spawns $PAGODA_BUILD/pagoda-worker against it with stories260K, answers
 * heartbeats and talks the protocol of proto/msg.h:
 *   - REGISTER carries the model name, capacity, context, vocabulary, KV
 *     geometry and the process id;
 *   - a greedy completion streams exactly the text pagoda-run prints for the
 *     same prompt (same engine, same scheduler, one process vs the other);
 *     so do a chat request (pagoda-run --chat) and a prompt given as ids;
 *   - CANCEL mid-generation ends the request with "cancelled";
 *   - a prompt longer than the context gets ERROR 413 for that request only;
 *     a request running next to it is unaffected and the worker keeps serving;
 *   - HEARTBEAT load: running > 0 while busy, back to 0 (all credit free, no
 *     KV block used) when idle, counters move;
 * The worker runs with PAGODA_TEST_STEP_SLEEP_MS (every step lasts ≥ 3 ms),
 * so "busy across heartbeats" and "cancelled before its end" hold on a
 * machine of any speed, not only on one where 400 tokens take long enough.
 *   - SHUTDOWN and SIGTERM both make it exit 0.
 * The worker's log goes to a temporary file, printed when a check fails. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "common/clock.h"
#include "proto/msg.h"
#include "tests/support/support.h"
#include "worker/engine.h"

#define MAX_WREQ 32
#define TEXT_CAP 16384
#define HB_MS 100            /* the worker's heartbeat interval (--heartbeat-ms) */
#define OUR_HB_MS 1000       /* ours: the worker declares us dead after 3 s of silence */
#define WAIT_MS 30000        /* generous: sanitizer builds on a shared 2-core box */
#define STEP_SLEEP_MS "3"    /* the worker's test-only floor on a step's length */

/* One request as seen by the fake gateway. */
typedef struct wreq {
    uint64_t id;
    char text[TEXT_CAP];
    size_t text_len;
    int32_t ids[1024];
    uint32_t n_ids;
    uint32_t n_last;              /* EVENT.n of the latest event */
    int n_events;
    proto_finish_t finish;
    bool final;
    int n_after_final;
    bool has_usage;
    proto_usage_t usage;
    uint32_t err_code;            /* ERROR for this id, 0 none */
    char err_msg[256];
} wreq_t;

typedef struct gw {
    void *zctx, *router;
    char endpoint[128];
    proto_peer_t peer;            /* the worker's routing id */
    bool have_peer;
    pid_t pid;
    char log_path[64];
    int n_register;
    proto_msg_t reg;              /* the first REGISTER (decoded: cleared at the end) */
    int n_hb;                     /* heartbeats received */
    proto_load_t load;            /* latest load */
    uint32_t max_running;         /* max load.running since reset */
    uint64_t hb_seq;
    int64_t t_next_hb_us;
    wreq_t req[MAX_WREQ];
    int n_req;
    int n_unknown;                /* events/errors for ids we never sent */
    int n_bad;                    /* malformed or unexpected messages */
    int n_kv;                     /* KV messages */
    bool kv_first_reset;          /* the first KV message had reset (full set) */
    uint64_t kv_keys[4096];       /* the worker's cached blocks as its KV messages say */
    int n_kv_keys;
} gw_t;

static const char *g_model;       /* stories260K path, NULL = skip */
static char g_build[512];
static char g_run_text[TEXT_CAP];     /* pagoda-run -p "Once upon a time" -n 60 --temp 0 */
static size_t g_run_len;
static char g_run_long[TEXT_CAP];     /* ... -n 400 --ignore-eos: crosses a story's end (BOS) */
static size_t g_run_long_len;
static char g_run_chat[TEXT_CAP];     /* pagoda-run --chat -p "Tell me a story." -n 40 --temp 0 */
static size_t g_run_chat_len;
static gw_t *g_gw;                /* the shared worker for most tests */

static const char *PROMPT = "Once upon a time";
static const char *CHAT = "Tell me a story.";

/* ---- processes ------------------------------------------------------------ */

static void show_log(const gw_t *g)
{
    size_t n = 0;
    unsigned char *b = support_read_file(g->log_path, &n);
    if (!b)
        return;
    const char *start = (const char *)b;
    if (n > 4000)
        start += n - 4000;
    fprintf(stderr, "----- worker log (%s, tail) -----\n%s\n-----\n", g->log_path, start);
    free(b);
}

/* Runs argv, returns its stdout (up to cap bytes) and exit status. */
static int run_capture(char *const argv[], char *out, size_t cap, size_t *len)
{
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fd[1], 1);
        int dn = open("/dev/null", O_WRONLY);
        if (dn >= 0)
            dup2(dn, 2);
        close(fd[0]);
        close(fd[1]);
        execv(argv[0], argv);
        _exit(127);
    }
    close(fd[1]);
    size_t n = 0;
    for (;;) {
        ssize_t r = read(fd[0], out + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
        if (n == cap)
            break;
    }
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    *len = n;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* Waits up to ms for pid to exit; returns its status as from waitpid, or -1. */
static int wait_exit(pid_t pid, int ms)
{
    int64_t deadline = clock_now_us() + (int64_t)ms * 1000;
    while (clock_now_us() < deadline) {
        int st = 0;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return st;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return -1;
}

/* ---- the fake gateway ------------------------------------------------------- */

static wreq_t *req_find(gw_t *g, uint64_t id)
{
    for (int i = 0; i < g->n_req; i++)
        if (g->req[i].id == id)
            return &g->req[i];
    return NULL;
}

static void send_to_worker(gw_t *g, const proto_msg_t *m)
{
    assert_true(g->have_peer);
    if (proto_send(g->router, &g->peer, m, 0) != PROTO_OK) {
        show_log(g);
        fail_msg("proto_send %s: %s", proto_type_name(m->type), zmq_strerror(errno));
    }
}

static void on_msg(gw_t *g, const proto_peer_t *from, proto_msg_t *m)
{
    switch (m->type) {
    case PROTO_REGISTER:
        g->n_register++;
        g->peer = *from;
        g->have_peer = true;
        if (g->n_register == 1) {
            g->reg = *m; /* keep the heap strings: cleared in gw_free */
            memset(m, 0, sizeof *m);
            m->type = PROTO_REGISTER;
            return;
        }
        break;
    case PROTO_HEARTBEAT:
        g->n_hb++;
        if (m->heartbeat.has_load) {
            g->load = m->heartbeat.load;
            if (g->load.running > g->max_running)
                g->max_running = g->load.running;
        } else {
            g->n_bad++;
        }
        break;
    case PROTO_EVENT: {
        const proto_event_t *e = &m->event;
        wreq_t *r = req_find(g, e->id);
        if (!r) {
            g->n_unknown++;
            break;
        }
        if (r->final)
            r->n_after_final++;
        r->n_events++;
        if (r->text_len + e->text_len < TEXT_CAP) {
            memcpy(r->text + r->text_len, e->text, e->text_len);
            r->text_len += e->text_len;
        }
        for (uint32_t i = 0; i < e->n_ids && r->n_ids < 1024; i++)
            r->ids[r->n_ids++] = e->ids[i];
        r->n_last = e->n_tokens;
        if (e->finish != PROTO_FINISH_NONE) {
            r->final = true;
            r->finish = e->finish;
            r->has_usage = e->has_usage;
            r->usage = e->usage;
        }
        break;
    }
    case PROTO_ERROR: {
        wreq_t *r = req_find(g, m->error.id);
        if (!r) {
            g->n_unknown++;
            break;
        }
        r->err_code = m->error.code;
        snprintf(r->err_msg, sizeof r->err_msg, "%s", m->error.message);
        break;
    }
    case PROTO_KV: {
        /* reset, then del, then add (proto/msg.h) */
        const proto_kv_t *kv = &m->kv;
        if (g->n_kv++ == 0)
            g->kv_first_reset = kv->reset;
        if (kv->reset)
            g->n_kv_keys = 0;
        for (uint32_t i = 0; i < kv->n_del; i++)
            for (int j = 0; j < g->n_kv_keys; j++)
                if (g->kv_keys[j] == kv->del[i]) {
                    g->kv_keys[j] = g->kv_keys[--g->n_kv_keys];
                    break;
                }
        for (uint32_t i = 0; i < kv->n_add; i++) {
            int j = 0;
            while (j < g->n_kv_keys && g->kv_keys[j] != kv->add[i])
                j++;
            if (j == g->n_kv_keys && g->n_kv_keys < 4096)
                g->kv_keys[g->n_kv_keys++] = kv->add[i];
        }
        break;
    }
    default:
        g->n_bad++;
        break;
    }
}

/* Receives and handles messages for up to ms, heartbeating as a gateway. */
static void pump(gw_t *g, int ms)
{
    int64_t deadline = clock_now_us() + (int64_t)ms * 1000;
    for (;;) {
        int64_t now = clock_now_us();
        if (g->have_peer && now >= g->t_next_hb_us) {
            proto_msg_t hb;
            proto_msg_init(&hb, PROTO_HEARTBEAT);
            hb.heartbeat.seq = g->hb_seq++;
            hb.heartbeat.heartbeat_ms = OUR_HB_MS;
            send_to_worker(g, &hb);
            g->t_next_hb_us = now + HB_MS * 1000;
        }
        proto_peer_t from;
        proto_msg_t m;
        char err[256];
        int rc = proto_recv(g->router, &from, &m, ZMQ_DONTWAIT, err, sizeof err);
        if (rc == PROTO_OK) {
            on_msg(g, &from, &m);
            proto_msg_clear(&m);
            continue;
        }
        if (rc != PROTO_ESYS) {
            fprintf(stderr, "malformed message from the worker: %s (%s)\n", proto_status_name(rc), err);
            g->n_bad++;
            continue;
        }
        now = clock_now_us();
        if (now >= deadline)
            return;
        int64_t until = deadline;
        if (g->have_peer && g->t_next_hb_us < until)
            until = g->t_next_hb_us;
        long wait_ms = until > now ? (long)((until - now + 999) / 1000) : 0;
        zmq_pollitem_t it = {.socket = g->router, .events = ZMQ_POLLIN};
        zmq_poll(&it, 1, wait_ms);
    }
}

/* Pumps until cond holds or WAIT_MS pass; fails (with the worker log) then. */
#define PUMP_UNTIL(g, cond, what)                                               \
    do {                                                                        \
        int64_t t_end_ = clock_now_us() + (int64_t)WAIT_MS * 1000;              \
        while (!(cond) && clock_now_us() < t_end_)                              \
            pump((g), 10);                                                      \
        if (!(cond)) {                                                          \
            show_log(g);                                                        \
            fail_msg("timed out waiting for %s", what);                         \
        }                                                                       \
    } while (0)

/* Binds the ROUTER, spawns the worker, waits for its REGISTER. */
static gw_t *gw_start(void)
{
    gw_t *g = calloc(1, sizeof *g);
    assert_non_null(g);
    g->zctx = zmq_ctx_new();
    g->router = support_router_bind(g->zctx, g->endpoint, sizeof g->endpoint);
    assert_non_null(g->router);

    snprintf(g->log_path, sizeof g->log_path, "/tmp/pagoda-worker-test.XXXXXX");
    int lfd = mkstemp(g->log_path);
    assert_true(lfd >= 0);
    char worker[600], model[600], hb[16];
    snprintf(worker, sizeof worker, "%s/pagoda-worker", g_build);
    snprintf(model, sizeof model, "stories=%s", g_model);
    snprintf(hb, sizeof hb, "%d", HB_MS);
    if (access(worker, X_OK) != 0)
        fail_msg("%s is not built", worker);
    char *const argv[] = {worker, "--gateway", g->endpoint, "--model", model, "--max-seqs", "4",
                          "--heartbeat-ms", hb, "--threads", "1", "--log-level", "debug", NULL};
    /* every step takes at least STEP_SLEEP_MS, however fast the machine:
     * a 400-token request then outlasts several heartbeats and a CANCEL
     * sent after 5 tokens arrives long before the 500th (worker.h). Set
     * here, not in the child: between fork and exec only async-signal-safe
     * calls are safe while ZeroMQ's threads run. */
    setenv("PAGODA_TEST_STEP_SLEEP_MS", STEP_SLEEP_MS, 1);
    g->pid = fork();
    assert_true(g->pid >= 0);
    if (g->pid == 0) {
        dup2(lfd, 1);
        dup2(lfd, 2);
        close(lfd);
        execv(worker, argv);
        _exit(127);
    }
    unsetenv("PAGODA_TEST_STEP_SLEEP_MS");
    close(lfd);
    PUMP_UNTIL(g, g->n_register > 0, "REGISTER");
    return g;
}

static void gw_free(gw_t **pg)
{
    gw_t *g = *pg;
    if (!g)
        return;
    if (g->pid > 0 && waitpid(g->pid, NULL, WNOHANG) == 0) {
        kill(g->pid, SIGKILL);
        waitpid(g->pid, NULL, 0);
    }
    proto_msg_clear(&g->reg);
    zmq_close(g->router);
    zmq_ctx_term(g->zctx);
    unlink(g->log_path);
    free(g);
    *pg = NULL;
}

static wreq_t *new_req(gw_t *g, uint64_t id)
{
    assert_true(g->n_req < MAX_WREQ);
    wreq_t *r = &g->req[g->n_req++];
    memset(r, 0, sizeof *r);
    r->id = id;
    return r;
}

/* A greedy completion SUBMIT of prompt text (or ids when ids != NULL). */
static wreq_t *submit_completion(gw_t *g, uint64_t id, const char *prompt, const int32_t *ids,
                                 uint32_t n_ids, uint32_t max_tok, bool ignore_eos)
{
    wreq_t *r = new_req(g, id);
    proto_msg_t m;
    proto_msg_init(&m, PROTO_SUBMIT);
    m.submit.id = id;
    m.submit.priority = PROTO_PRIO_NORMAL;
    m.submit.kind = PROTO_KIND_COMPLETION;
    if (ids) {
        m.submit.prompt_ids = (int32_t *)ids;
        m.submit.n_prompt_ids = n_ids;
        m.submit.has_prompt_ids = true;
    } else {
        m.submit.prompt = (char *)prompt;
    }
    m.submit.sampling.temperature = 0;
    m.submit.max_tokens = max_tok;
    m.submit.ignore_eos = ignore_eos;
    m.submit.stream = true;
    send_to_worker(g, &m);
    return r;
}

static void send_cancel(gw_t *g, uint64_t id)
{
    proto_msg_t m;
    proto_msg_init(&m, PROTO_CANCEL);
    m.cancel.id = id;
    send_to_worker(g, &m);
}

/* The request ended once, nothing came after, usage present and consistent. */
static void check_final(gw_t *g, const wreq_t *r, proto_finish_t want)
{
    pump(g, 20); /* anything late would show up as an event after the final one */
    if (r->finish != want) {
        show_log(g);
        fail_msg("request %llu finished %s, expected %s", (unsigned long long)r->id,
                 proto_finish_name(r->finish) ? proto_finish_name(r->finish) : "-",
                 proto_finish_name(want));
    }
    assert_int_equal(r->n_after_final, 0);
    assert_true(r->has_usage);
    assert_int_equal(r->usage.completion_tokens, r->n_ids);
    assert_int_equal(r->n_last, r->n_ids);
    assert_true(r->usage.cached_tokens <= r->usage.prompt_tokens);
    assert_int_equal(r->err_code, 0);
}

/* ---- setup ---------------------------------------------------------------- */

static int group_setup(void **state)
{
    (void)state;
    const char *b = getenv("PAGODA_BUILD");
    snprintf(g_build, sizeof g_build, "%s", b && *b ? b : "build");
    const char *p = support_shared_model("stories260K.gguf");
    if (!p)
        return 0;
    static char model[4096];
    snprintf(model, sizeof model, "%s", p);
    g_model = model;

    /* What pagoda-run prints for the same requests (before any worker runs,
     * so the fake gateway never goes silent while we wait). */
    char run[600];
    snprintf(run, sizeof run, "%s/pagoda-run", g_build);
    char *const a1[] = {run, "-m", model, "-p", (char *)PROMPT, "-n", "60", "--temp", "0", NULL};
    if (run_capture(a1, g_run_text, sizeof g_run_text, &g_run_len) != 0) {
        fprintf(stderr, "%s failed\n", run);
        return -1;
    }
    char *const a3[] = {run, "-m", model, "-p", (char *)PROMPT, "-n", "400", "--temp", "0",
                        "--ignore-eos", NULL};
    if (run_capture(a3, g_run_long, sizeof g_run_long, &g_run_long_len) != 0) {
        fprintf(stderr, "%s --ignore-eos failed\n", run);
        return -1;
    }
    char *const a2[] = {run, "-m", model, "--chat", "-p", (char *)CHAT, "-n", "40", "--temp", "0", NULL};
    if (run_capture(a2, g_run_chat, sizeof g_run_chat, &g_run_chat_len) != 0) {
        fprintf(stderr, "%s --chat failed\n", run);
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    gw_free(&g_gw);
    return 0;
}

#define NEED_WORKER()                                                           \
    do {                                                                        \
        if (!g_model) {                                                         \
            fprintf(stderr, "skip: stories260K.gguf absent\n");                 \
            skip();                                                             \
        }                                                                       \
        if (!g_gw)                                                              \
            g_gw = gw_start();                                                  \
    } while (0)

/* ---- tests ------------------------------------------------------------------ */

static void test_register(void **state)
{
    (void)state;
    NEED_WORKER();
    gw_t *g = g_gw;
    const proto_register_t *r = &g->reg.reg;
    assert_int_equal(r->version, PROTO_VERSION);
    assert_string_equal(r->model, "stories");
    assert_int_equal(r->capacity, 4);
    assert_int_equal(r->n_ctx, 512);   /* stories260K's context */
    assert_int_equal(r->n_vocab, 512);
    assert_int_equal(r->block_size, 32);
    assert_true(r->kv_blocks >= 4 * 512 / 32); /* 4 full contexts fit the default budget */
    assert_int_equal(r->pid, (uint32_t)g->pid);
    assert_int_equal(r->heartbeat_ms, HB_MS);
    char pid[32];
    snprintf(pid, sizeof pid, ":%d:", (int)g->pid);
    assert_non_null(strstr(r->replica, pid));
    /* heartbeats flow and carry an idle load */
    int n0 = g->n_hb;
    PUMP_UNTIL(g, g->n_hb >= n0 + 3, "three heartbeats");
    assert_int_equal(g->load.running, 0);
    assert_int_equal(g->load.free_slots, 4);
    assert_int_equal(g->load.kv_blocks_total, r->kv_blocks);
    assert_int_equal(g->n_bad, 0);
}

static void test_greedy_completion_matches_run(void **state)
{
    (void)state;
    NEED_WORKER();
    gw_t *g = g_gw;
    wreq_t *r = submit_completion(g, 1, PROMPT, NULL, 0, 60, false);
    PUMP_UNTIL(g, r->final || r->err_code, "request 1");
    check_final(g, r, PROTO_FINISH_LENGTH);
    assert_int_equal(r->n_ids, 60);
    assert_true(r->n_events >= 2); /* streamed, not one lump */
    assert_int_equal(r->usage.prompt_tokens, 5); /* BOS + 4 */
    assert_true(g_run_len > 100);
    assert_int_equal(r->text_len, g_run_len);
    assert_memory_equal(r->text, g_run_text, g_run_len);
}

static void test_chat_matches_run(void **state)
{
    (void)state;
    NEED_WORKER();
    gw_t *g = g_gw;
    wreq_t *r = new_req(g, 2);
    proto_msg_t m;
    proto_msg_init(&m, PROTO_SUBMIT);
    proto_chat_msg_t msg = {.role = (char *)"user", .content = (char *)CHAT};
    m.submit.id = 2;
    m.submit.priority = PROTO_PRIO_HIGH;
    m.submit.kind = PROTO_KIND_CHAT;
    m.submit.messages = &msg;
    m.submit.n_messages = 1;
    m.submit.sampling.temperature = 0;
    m.submit.max_tokens = 40;
    m.submit.stream = true;
    send_to_worker(g, &m);
    PUMP_UNTIL(g, r->final || r->err_code, "chat request");
    assert_int_equal(r->err_code, 0);
    assert_true(r->finish == PROTO_FINISH_LENGTH || r->finish == PROTO_FINISH_STOP);
    check_final(g, r, r->finish);
    assert_true(r->usage.prompt_tokens > 5); /* the template added its markup */
    assert_true(g_run_chat_len > 20);
    assert_int_equal(r->text_len, g_run_chat_len);
    assert_memory_equal(r->text, g_run_chat, g_run_chat_len);
}

static void test_prompt_ids(void **state)
{
    (void)state;
    NEED_WORKER();
    gw_t *g = g_gw;
    /* the ids of the same prompt, tokenized here by the library */
    char err[256];
    engine_t *e = engine_load(g_model, err, sizeof err);
    assert_non_null(e);
    int32_t *ids = NULL;
    int32_t n = engine_prompt_text(e, PROMPT, strlen(PROMPT), &ids, err, sizeof err);
    engine_free(&e);
    assert_int_equal(n, 5);
    wreq_t *r = submit_completion(g, 3, NULL, ids, (uint32_t)n, 60, false);
    free(ids);
    PUMP_UNTIL(g, r->final || r->err_code, "prompt_ids request");
    check_final(g, r, PROTO_FINISH_LENGTH);
    /* the prompt is in the prefix cache by now: only whole blocks count, and
     * a 5-token prompt has none */
    assert_int_equal(r->usage.cached_tokens, 0);
    assert_int_equal(r->text_len, g_run_len);
    assert_memory_equal(r->text, g_run_text, g_run_len);
    /* same ids as request 1 */
    wreq_t *r1 = req_find(g, 1);
    assert_memory_equal(r->ids, r1->ids, 60 * sizeof(int32_t));
}

static void test_cancel_mid_generation(void **state)
{
    (void)state;
    NEED_WORKER();
    gw_t *g = g_gw;
    wreq_t *r = submit_completion(g, 4, PROMPT, NULL, 0, 500, true);
    PUMP_UNTIL(g, r->n_ids >= 5 || r->final, "5 tokens of request 4");
    assert_false(r->final);
    send_cancel(g, 4);
    PUMP_UNTIL(g, r->final, "the cancelled request's final event");
    check_final(g, r, PROTO_FINISH_CANCELLED);
    assert_true(r->n_ids < 500);
    /* what it streamed before the cancel is the greedy text */
    size_t n = r->text_len < g_run_len ? r->text_len : g_run_len;
    assert_memory_equal(r->text, g_run_text, n);
    /* cancelling a finished request is harmless: no event */
    send_cancel(g, 4);
    pump(g, 100);
    assert_int_equal(r->n_after_final, 0);
}

static void test_too_long_only_that_request(void **state)
{
    (void)state;
    NEED_WORKER();
    gw_t *g = g_gw;
    /* a good request runs; a too-long one (ids, then text) arrives next to it */
    wreq_t *ok = submit_completion(g, 5, PROMPT, NULL, 0, 60, false);
    int32_t *ids = malloc(600 * sizeof *ids);
    ids[0] = 1;
    for (int i = 1; i < 600; i++)
        ids[i] = 3 + i % 500;
    wreq_t *bad = submit_completion(g, 6, NULL, ids, 600, 10, false);
    free(ids);
    static char text[8192];
    text[0] = 0;
    while (strlen(text) + 20 < sizeof text)
        strcat(text, "Once upon a time, ");
    wreq_t *bad2 = submit_completion(g, 7, text, NULL, 0, 10, false);
    PUMP_UNTIL(g, bad->err_code && bad2->err_code && ok->final, "413s and request 5");
    assert_int_equal(bad->err_code, 413);
    assert_int_equal(bad2->err_code, 413);
    assert_true(strlen(bad->err_msg) > 0);
    assert_int_equal(bad->n_events, 0);
    assert_int_equal(bad2->n_events, 0);
    check_final(g, ok, PROTO_FINISH_LENGTH);
    assert_int_equal(ok->text_len, g_run_len);
    assert_memory_equal(ok->text, g_run_text, g_run_len);
    /* token id out of the vocabulary: 400 */
    int32_t oov[3] = {1, 100000, 5};
    wreq_t *bad3 = submit_completion(g, 8, NULL, oov, 3, 10, false);
    PUMP_UNTIL(g, bad3->err_code || bad3->final, "request 8");
    assert_int_equal(bad3->err_code, 400);
    /* and it keeps serving */
    wreq_t *after = submit_completion(g, 9, PROMPT, NULL, 0, 60, false);
    PUMP_UNTIL(g, after->final || after->err_code, "request 9");
    check_final(g, after, PROTO_FINISH_LENGTH);
    assert_memory_equal(after->text, g_run_text, g_run_len);
}

static void test_load_in_heartbeats(void **state)
{
    (void)state;
    NEED_WORKER();
    gw_t *g = g_gw;
    /* idle first */
    int n0 = g->n_hb;
    PUMP_UNTIL(g, g->n_hb >= n0 + 2, "heartbeats");
    assert_int_equal(g->load.running, 0);
    uint64_t gen0 = g->load.tokens_generated, prompt0 = g->load.prompt_tokens;
    g->max_running = 0;
    /* four long requests keep it busy for many heartbeat intervals */
    wreq_t *r[4];
    for (int i = 0; i < 4; i++)
        r[i] = submit_completion(g, 20 + (uint64_t)i, PROMPT, NULL, 0, 400, true);
    PUMP_UNTIL(g, r[0]->final && r[1]->final && r[2]->final && r[3]->final, "four requests");
    for (int i = 0; i < 4; i++) {
        check_final(g, r[i], PROTO_FINISH_LENGTH);
        assert_int_equal(r[i]->n_ids, 400);
        /* all four are the same greedy text, token-less deltas included
         * (the story ends with BOS, which has no text) */
        assert_int_equal(r[i]->text_len, g_run_long_len);
        assert_memory_equal(r[i]->text, g_run_long, g_run_long_len);
        assert_memory_equal(r[i]->ids, r[0]->ids, 400 * sizeof(int32_t));
    }
    fprintf(stderr, "max running seen in heartbeats: %u\n", g->max_running);
    assert_true(g->max_running > 0);
    assert_true(g->max_running <= 4);
    /* back to idle: nothing running or waiting, no block used, full credit */
    PUMP_UNTIL(g, g->load.running == 0 && g->load.tokens_generated >= gen0 + 1600,
               "an idle heartbeat after the requests");
    assert_int_equal(g->load.waiting, 0);
    assert_int_equal(g->load.kv_blocks_used, 0);
    assert_int_equal(g->load.free_slots, 4);
    assert_int_equal(g->load.tokens_generated, gen0 + 1600);
    assert_true(g->load.prompt_tokens > prompt0);
    assert_int_equal(g->n_unknown, 0);
    assert_int_equal(g->n_bad, 0);
    assert_int_equal(g->n_register, 1); /* never lost us */
    /* the prefix cache as KV messages told it: a full set first, then changes;
     * the blocks of the 4 finished requests stay cached, within the pool */
    assert_true(g->n_kv >= 2);
    assert_true(g->kv_first_reset);
    fprintf(stderr, "KV messages: %d, cached blocks: %d of %u\n", g->n_kv, g->n_kv_keys,
            g->reg.reg.kv_blocks);
    assert_true(g->n_kv_keys >= 400 / 32);
    assert_true(g->n_kv_keys <= (int)g->reg.reg.kv_blocks);
}

static void test_shutdown_exits_0(void **state)
{
    (void)state;
    NEED_WORKER();
    gw_t *g = g_gw;
    proto_msg_t m;
    proto_msg_init(&m, PROTO_SHUTDOWN);
    send_to_worker(g, &m);
    int st = wait_exit(g->pid, WAIT_MS);
    if (st == -1) {
        show_log(g);
        fail_msg("worker still running after SHUTDOWN");
    }
    g->pid = 0;
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    gw_free(&g_gw);
}

static void test_sigterm_exits_0(void **state)
{
    (void)state;
    NEED_WORKER();
    gw_t *g = g_gw;
    g_gw = NULL;
    /* busy when the signal arrives */
    wreq_t *r = submit_completion(g, 1, PROMPT, NULL, 0, 500, true);
    PUMP_UNTIL(g, r->n_ids >= 3, "tokens before SIGTERM");
    kill(g->pid, SIGTERM);
    int st = wait_exit(g->pid, WAIT_MS);
    if (st == -1) {
        show_log(g);
        fail_msg("worker still running after SIGTERM");
    }
    g->pid = 0;
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    gw_free(&g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_register),
        cmocka_unit_test(test_greedy_completion_matches_run),
        cmocka_unit_test(test_chat_matches_run),
        cmocka_unit_test(test_prompt_ids),
        cmocka_unit_test(test_cancel_mid_generation),
        cmocka_unit_test(test_too_long_only_that_request),
        cmocka_unit_test(test_load_in_heartbeats),
        cmocka_unit_test(test_shutdown_exits_0),
        cmocka_unit_test(test_sigterm_exits_0),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
