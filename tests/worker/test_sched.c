/* Invariant tests for worker/sched: the continuous-batching scheduler on real
 * models (stories260K, and the random-weight zoo model).
 *
 * The reference for every request is the same request run alone (a fresh
 * scheduler with max_seqs = 1, no prefix cache content, no preemption). The
 * scheduler claims that batching, chunked prefill, prefix-cache hits,
 * preemption + recompute and resumption change nothing in what a request
 * generates; each test below breaks one of those claims if it is false:
 *
 *   batched == solo          many concurrent requests (prompts of 1..150
 *                            tokens crossing 32-token blocks, various
 *                            max_tokens) under several batch budgets;
 *   prefix hit == miss       same prompt / shared prefix after a finished run;
 *   preempted == solo        a KV pool barely larger than one sequence, mixed
 *                            priorities; victims are the lowest priority;
 *   seeded sampling          same text whatever the batch and preemptions;
 *   no leak                  after every run sched_check() == 0, no block used;
 *   cancellation             waiting / mid-prefill / decoding: blocks back in
 *                            one step, final "cancelled", others unaffected;
 *   admission order          priority then FIFO; a high-priority arrival
 *                            preempts the newest low-priority sequence;
 *   stop / EOS / length      finish reasons and text truncation;
 *   resume                   resuming from a solo run's first k tokens yields
 *                            that run's remainder;
 *   invalid submissions      -1 with a message;
 *   sliding window           a model windowed on every layer releases the
 *                            blocks behind its window: three 440-position
 *                            generations in a 10-block pool, == solo; the
 *                            same model without the window cannot;
 *   step time budget         with a synthetic step cost (sched_set_step_hook):
 *                            while streams decode, each prefill chunk is the
 *                            largest within the target (2x their decode-only
 *                            step) or the floor; alone, a prompt takes the
 *                            whole token budget; outputs == solo with the
 *                            budget on (synthetic or measured) and off;
 *   prefill priority         a high-tier prompt arriving while a low-tier one
 *                            prefills takes the next step's prefill rows; the
 *                            low one pauses (no recompute) and resumes; with
 *                            aging it waits at most 2 x prefill_age_steps.
 *
 * Observing the scheduler from outside: with a budget >= max_seqs every
 * running decoding sequence gets a row (and so an event) in every step, so a
 * sequence that emitted in step t-1, emits nothing in step t and has not
 * finished was preempted in step t. The harness records these "gaps".
 *
 * Models come from ../shared/models (skipped with a message when absent). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "tests/support/support.h"
#include "worker/engine.h"
#include "worker/kv_pool.h"
#include "worker/model/forward.h"
#include "worker/wait_policy.h"
#include "common/text/gguf.h"
#include "worker/sched.h"
#include "worker/step_cost.h"

#define MAX_REQ 40
#define MAX_GEN 512
#define MAX_TEXT 16384
#define MAX_STEPS 20000

/* ---- harness ---------------------------------------------------------------- */

/* What one request produced, as seen through the event callback. */
typedef struct rec {
    uint64_t id;
    int32_t prio;
    int32_t tok[MAX_GEN];      /* generated ids, in event order */
    int32_t n_tok;
    size_t cum[MAX_GEN];       /* text bytes delivered up to and including token i's event */
    char text[MAX_TEXT];
    size_t text_len;
    size_t last_delta;         /* bytes of the final event's text */
    enum sched_finish finish;
    int32_t stop;              /* the final event's: 1 + the stop string's index, 0 = none */
    int n_final;               /* final events (must end at 1) */
    int n_after_final;         /* events after the final one (must stay 0) */
    int n_twice;               /* steps with two events for this request (must stay 0) */
    int n_bad;                 /* events with n_tokens other than 0/1, or no text ptr */
    char error[128];
    sched_rc_t error_code;     /* the final event's, SCHED_OK unless it failed */
    int32_t n_prompt, n_cached, n_completion;
    int64_t first_step, last_step; /* step of the first / last token event (0 none) */
    int64_t final_step;
    int64_t last_event_step;
    bool emitting;             /* emitted a token in the previous step */
    int32_t gaps;              /* emitted, then a step without a token, unfinished */
    int64_t resume_step;       /* first token event after the first gap (0 none) */
} rec_t;

typedef struct run {
    sched_t *s;
    rec_t r[MAX_REQ];
    int n;
    int64_t step;              /* number of the step being run (1-based) */
    int unknown_events;        /* events for ids we never submitted */
    int victim_violations;     /* a victim of better priority than a survivor */
} run_t;

static engine_t *g_stories;    /* loaded once for the group */
static bool g_exact_matmul;    /* sched_config_t.exact_matmul of every scheduler made */
static kv_type_t g_kv_type = KV_TYPE_F16; /* sched_config_t.kv_type (the default) */

static rec_t *rec_find(run_t *R, uint64_t id)
{
    for (int i = 0; i < R->n; i++)
        if (R->r[i].id == id)
            return &R->r[i];
    return NULL;
}

/* Choice i > 0 of request id is recorded as id + i * CHOICE_ID_STRIDE. */
#define CHOICE_ID_STRIDE 1000000u

static void on_event(void *ud, const sched_event_t *ev)
{
    run_t *R = ud;
    rec_t *r = rec_find(R, ev->id + (uint64_t)ev->index * CHOICE_ID_STRIDE);
    if (!r) {
        R->unknown_events++;
        return;
    }
    if (r->n_final)
        r->n_after_final++;
    if (r->last_event_step == R->step)
        r->n_twice++;
    r->last_event_step = R->step;
    if (ev->n_tokens < 0 || ev->n_tokens > 1 || !ev->text)
        r->n_bad++;
    if (ev->text_len) {
        if (r->text_len + ev->text_len < MAX_TEXT) {
            memcpy(r->text + r->text_len, ev->text, ev->text_len);
            r->text_len += ev->text_len;
        } else {
            r->n_bad++;
        }
    }
    for (int32_t i = 0; i < ev->n_tokens && r->n_tok < MAX_GEN; i++) {
        r->tok[r->n_tok] = ev->tokens[i];
        r->cum[r->n_tok] = r->text_len;
        r->n_tok++;
    }
    if (ev->n_tokens > 0) {
        if (r->gaps > 0 && !r->resume_step)
            r->resume_step = R->step;
        if (!r->first_step)
            r->first_step = R->step;
        r->last_step = R->step;
    }
    if (ev->finish != SCHED_FINISH_NONE) {
        r->n_final++;
        r->finish = ev->finish;
        r->stop = ev->stop;
        r->final_step = R->step;
        r->last_delta = ev->text_len;
        r->n_prompt = ev->n_prompt;
        r->n_cached = ev->n_cached;
        r->n_completion = ev->n_completion;
        if (ev->error)
            snprintf(r->error, sizeof r->error, "%s", ev->error);
        r->error_code = ev->error_code;
    }
}

static sched_config_t cfg_make(int32_t max_seqs, int32_t budget, int32_t kv_blocks, int32_t threads)
{
    sched_config_t c;
    sched_config_default(&c);
    c.max_seqs = max_seqs;
    c.max_batch_tokens = budget;
    c.kv_blocks = kv_blocks;
    c.n_threads = threads;
    c.exact_matmul = g_exact_matmul;
    c.kv_type = g_kv_type;
    /* today's token budget only: with the time budget on, chunk sizes follow
     * the machine's measured step times, and these tests count steps. The
     * budget's own tests below drive it with a synthetic step cost. */
    c.step_budget_ms = 0;
    return c;
}

static run_t *run_new(const engine_t *e, const sched_config_t *c)
{
    run_t *R = calloc(1, sizeof *R);
    assert_non_null(R);
    char err[256] = "";
    R->s = sched_new(e->model, e->tok, c, on_event, R, err, sizeof err);
    if (!R->s)
        fail_msg("sched_new: %s", err);
    return R;
}

static void run_free(run_t **pR)
{
    run_t *R = *pR;
    sched_free(&R->s);
    free(R);
    *pR = NULL;
}

static sched_req_t req_greedy(uint64_t id, int32_t prio, const int32_t *p, int32_t n,
                              int32_t max_tokens, bool ignore_eos)
{
    sched_req_t q = {.id = id, .priority = prio, .prompt = p, .n_prompt = n,
                     .max_tokens = max_tokens, .ignore_eos = ignore_eos, .top_logprobs = -1};
    sampler_params_default(&q.sampling);
    q.sampling.temperature = 0;
    return q;
}

static void req_seeded(sched_req_t *q, uint64_t seed)
{
    q->sampling.temperature = 0.8f;
    q->sampling.top_p = 0.9f;
    q->sampling.has_seed = true;
    q->sampling.seed = seed;
}

/* Submits q and registers its record; asserts acceptance. */
static rec_t *submit(run_t *R, const sched_req_t *q)
{
    assert_true(R->n < MAX_REQ);
    rec_t *r = &R->r[R->n++];
    memset(r, 0, sizeof *r);
    r->id = q->id;
    r->prio = q->priority;
    char err[256] = "";
    if (sched_submit(R->s, q, err, sizeof err) != 0)
        fail_msg("submit %llu: %s", (unsigned long long)q->id, err);
    return r;
}

/* Submits q with q->n_choices choices, one record per choice (id + i * stride). */
static void submit_n(run_t *R, const sched_req_t *q)
{
    for (int32_t i = 0; i < q->n_choices; i++) {
        assert_true(R->n < MAX_REQ);
        rec_t *r = &R->r[R->n++];
        memset(r, 0, sizeof *r);
        r->id = q->id + (uint64_t)i * CHOICE_ID_STRIDE;
        r->prio = q->priority;
    }
    char err[256] = "";
    if (sched_submit(R->s, q, err, sizeof err) != 0)
        fail_msg("submit %llu (n %d): %s", (unsigned long long)q->id, q->n_choices, err);
}

/* One step, then the gap / victim bookkeeping (see the file comment). */
static int step(run_t *R)
{
    R->step++;
    int rc = sched_step(R->s);
    assert_true(rc >= 0);
    int vmin = INT_MAX, smax = -1;
    for (int i = 0; i < R->n; i++) {
        rec_t *r = &R->r[i];
        if (r->n_final) {
            r->emitting = false;
            continue;
        }
        bool now = r->last_step == R->step;
        if (r->emitting && !now) {
            r->gaps++;
            if (r->prio < vmin)
                vmin = r->prio;
        } else if (r->emitting && now && r->prio > smax) {
            smax = r->prio;
        }
        r->emitting = now;
    }
    if (vmin != INT_MAX && smax > vmin)
        R->victim_violations++;
    return rc;
}

static sched_stats_t stats(const run_t *R)
{
    sched_stats_t st;
    sched_stats(R->s, &st);
    return st;
}

/* The pool is consistent and no block is referenced (every block is free or
 * cached), nothing is running or waiting. */
static void check_clean(const run_t *R)
{
    assert_int_equal(sched_check(R->s), 0);
    sched_stats_t st = stats(R);
    assert_int_equal(st.kv_blocks_used, 0);
    assert_int_equal(st.n_running, 0);
    assert_int_equal(st.n_waiting, 0);
    assert_false(sched_busy(R->s));
}

/* Event-stream invariants of every finished request. */
static void check_records(const run_t *R)
{
    assert_int_equal(R->unknown_events, 0);
    uint64_t total = 0;
    for (int i = 0; i < R->n; i++) {
        const rec_t *r = &R->r[i];
        assert_int_equal(r->n_final, 1);
        assert_int_equal(r->n_after_final, 0);
        assert_int_equal(r->n_twice, 0);
        assert_int_equal(r->n_bad, 0);
        total += (uint64_t)r->n_tok;
    }
    (void)total;
}

static void drive(run_t *R)
{
    while (sched_busy(R->s)) {
        step(R);
        if (R->step > MAX_STEPS)
            fail_msg("no progress after %d steps", MAX_STEPS);
        assert_int_equal(sched_check(R->s), 0);
    }
    check_records(R);
    check_clean(R);
}

/* Runs q alone in a fresh scheduler (max_seqs 1, roomy pool) into *out. */
static void run_solo(const engine_t *e, const sched_req_t *q, rec_t *out)
{
    sched_config_t c = cfg_make(1, 512, 0, 1);
    run_t *R = run_new(e, &c);
    submit(R, q);
    drive(R);
    sched_stats_t st = stats(R);
    assert_int_equal(st.preemptions, 0);
    *out = R->r[0];
    run_free(&R);
}

/* a and b generated the same thing: ids, text, finish reason, usage. On a
 * mismatch the first differing position is printed. */
static void assert_same_output(const rec_t *a, const rec_t *b, const char *what)
{
    int32_t n = a->n_tok < b->n_tok ? a->n_tok : b->n_tok;
    int32_t i = 0;
    while (i < n && a->tok[i] == b->tok[i])
        i++;
    if (i < n || a->n_tok != b->n_tok) {
        fail_msg("%s: request %llu diverges at token %d (%d vs %d tokens; %d vs %d)", what,
                 (unsigned long long)a->id, i, a->n_tok, b->n_tok,
                 i < a->n_tok ? a->tok[i] : -1, i < b->n_tok ? b->tok[i] : -1);
    }
    assert_int_equal(a->text_len, b->text_len);
    assert_memory_equal(a->text, b->text, a->text_len);
    assert_int_equal(a->finish, b->finish);
    assert_int_equal(a->n_completion, b->n_completion);
    assert_int_equal(a->n_prompt, b->n_prompt);
}

/* ---- prompts ------------------------------------------------------------- */

/* Original text in the style of the model's training data; tokenized once and
 * cut into prompts at different offsets and lengths. */
static const char *STORY =
    "Once upon a time, in a small town near the sea, there lived a boy named Tom. "
    "Tom had a red kite and a little dog called Max. Every morning Tom and Max ran to the "
    "hill behind the school to fly the kite. One windy day the kite flew very high, over "
    "the trees and over the big blue lake. Tom pulled the string, but the string broke! "
    "The kite went away with the wind. Tom was sad and he sat down on the grass. Max "
    "licked his hand and barked. Then an old woman came by with a basket of apples. She "
    "said, \"Why are you sad, little boy?\" Tom told her about the kite. The woman smiled "
    "and gave him an apple. \"Let us look for it together,\" she said. They walked and "
    "walked until they saw something red in a tall tree. It was the kite! The woman was "
    "too old to climb, and Tom was too small. Max barked at the tree again and again. A "
    "bird heard him and flew down. The bird took the string in its beak and pulled the "
    "kite down to Tom. Tom said thank you to the bird, to the woman and to Max. From "
    "that day on, Tom always tied his kite with a strong new string, and he shared his "
    "apples with every bird that came to the hill. The end.";

static int32_t g_text[1024]; /* STORY tokens without BOS */
static int32_t g_n_text;
static int32_t g_bos;

/* prompt = BOS + n-1 story tokens starting at offset off. */
static void make_prompt(int32_t *out, int32_t n, int32_t off)
{
    out[0] = tokenizer_bos(g_stories->tok);
    for (int32_t i = 1; i < n; i++)
        out[i] = g_text[(off + i - 1) % g_n_text];
}

static size_t blocks_for(int32_t positions)
{
    return (size_t)((positions + 31) / 32);
}

/* ---- group setup --------------------------------------------------------- */

static int group_setup(void **state)
{
    (void)state;
    log_init("test_sched", LOG_WARN);
    const char *p = support_shared_model("stories260K.gguf");
    if (!p)
        return 0;
    char err[256];
    g_stories = engine_load(p, err, sizeof err);
    if (!g_stories) {
        fprintf(stderr, "engine_load: %s\n", err);
        return -1;
    }
    int32_t *ids = NULL;
    int32_t n = engine_prompt_text(g_stories, STORY, strlen(STORY), &ids, err, sizeof err);
    if (n < 300) {
        fprintf(stderr, "story tokenized to %d tokens\n", n);
        free(ids);
        return -1;
    }
    /* drop the BOS the tokenizer added */
    int32_t skip = ids[0] == tokenizer_bos(g_stories->tok) ? 1 : 0;
    g_bos = tokenizer_bos(g_stories->tok);
    g_n_text = n - skip < 1024 ? n - skip : 1024;
    memcpy(g_text, ids + skip, (size_t)g_n_text * sizeof *g_text);
    free(ids);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    engine_free(&g_stories);
    return 0;
}

#define NEED_STORIES()                                                          \
    do {                                                                        \
        if (!g_stories) {                                                       \
            fprintf(stderr, "skip: stories260K.gguf absent\n");                 \
            skip();                                                             \
        }                                                                       \
    } while (0)

/* ---- batched == solo ----------------------------------------------------- */

/* A request mix: prompt lengths around block boundaries, some sharing the
 * story's beginning (so prefix-cache hits happen inside batches), others at
 * their own offsets; max_tokens from 1 to 90; some stop at EOS. */
typedef struct job {
    int32_t prompt[256];
    int32_t n_prompt;
    sched_req_t req;
    rec_t solo;
} job_t;

static const int32_t MIX_LEN[] = {1, 2, 7, 31, 32, 33, 45, 63, 64, 65, 96, 97, 128, 150};
static const int32_t MIX_MAX[] = {40, 17, 64, 1, 33, 80, 5, 50, 31, 70, 2, 45, 60, 90};
#define N_MIX ((int)(sizeof MIX_LEN / sizeof MIX_LEN[0]))
static const char *const MIX_STOPS[] = {".", "!"};

static job_t *make_mix(const engine_t *e, int n, bool seeded)
{
    job_t *jobs = calloc((size_t)n, sizeof *jobs);
    assert_non_null(jobs);
    for (int i = 0; i < n; i++) {
        job_t *j = &jobs[i];
        j->n_prompt = MIX_LEN[i % N_MIX];
        make_prompt(j->prompt, j->n_prompt, (i % 2) ? 37 * i : 0);
        j->req = req_greedy((uint64_t)(100 + i), i % 3, j->prompt, j->n_prompt,
                            MIX_MAX[i % N_MIX], (i % 4) != 1);
        if (i % 4 == 1) { /* sentence ends */
            j->req.stop = MIX_STOPS;
            j->req.n_stop = 2;
        } else if (i % 4 == 3) { /* story ends */
            j->req.stop_ids = &g_bos;
            j->req.n_stop_ids = 1;
            j->req.ignore_eos = false;
        }
        if (seeded)
            req_seeded(&j->req, 4242 + (uint64_t)i);
        run_solo(e, &j->req, &j->solo);
    }
    return jobs;
}

/* Runs every job concurrently under c; each output must equal its solo run.
 * Returns the scheduler's preemption count. */
static uint64_t run_mix(const engine_t *e, job_t *jobs, int n, const sched_config_t *c,
                        const char *what)
{
    run_t *R = run_new(e, c);
    for (int i = 0; i < n; i++)
        submit(R, &jobs[i].req);
    drive(R);
    for (int i = 0; i < n; i++)
        assert_same_output(&R->r[i], &jobs[i].solo, what);
    sched_stats_t st = stats(R);
    uint64_t gen = 0;
    for (int i = 0; i < n; i++)
        gen += (uint64_t)R->r[i].n_tok;
    assert_int_equal(st.generated_tokens, gen);
    assert_int_equal(R->victim_violations, 0);
    uint64_t pre = st.preemptions;
    run_free(&R);
    return pre;
}

static void test_batched_equals_solo(void **state)
{
    (void)state;
    NEED_STORIES();
    job_t *jobs = make_mix(g_stories, N_MIX, false);
    /* the mix must exercise both finish reasons */
    int n_stop = 0, n_len = 0;
    for (int i = 0; i < N_MIX; i++) {
        n_stop += jobs[i].solo.finish == SCHED_FINISH_STOP;
        n_len += jobs[i].solo.finish == SCHED_FINISH_LENGTH;
    }
    assert_true(n_len > 0);
    assert_true(n_stop > 0);
    fprintf(stderr, "mix: %d stop, %d length\n", n_stop, n_len);
    static const int32_t budgets[][2] = {{N_MIX, N_MIX}, {5, 7}, {N_MIX, 64}, {N_MIX, 512}, {3, 512}};
    for (size_t k = 0; k < sizeof budgets / sizeof budgets[0]; k++) {
        sched_config_t c = cfg_make(budgets[k][0], budgets[k][1], 0, 2);
        char what[64];
        snprintf(what, sizeof what, "max_seqs %d budget %d", budgets[k][0], budgets[k][1]);
        assert_int_equal(run_mix(g_stories, jobs, N_MIX, &c, what), 0);
    }
    free(jobs);
}

/* ---- prefix cache --------------------------------------------------------- */

static void test_prefix_hit_equals_miss(void **state)
{
    (void)state;
    NEED_STORIES();
    int32_t p[256];
    sched_config_t c = cfg_make(4, 512, 0, 1);
    static const int32_t LENS[] = {70, 90, 100, 129};
    for (size_t k = 0; k < sizeof LENS / sizeof LENS[0]; k++) {
        int32_t n = LENS[k];
        make_prompt(p, n, 11);
        sched_req_t q = req_greedy(1, 1, p, n, 20, true);
        rec_t solo;
        run_solo(g_stories, &q, &solo);
        assert_int_equal(solo.n_cached, 0);

        run_t *R = run_new(g_stories, &c);
        submit(R, &q);
        drive(R);
        uint64_t prompt_before = stats(R).prompt_tokens;
        q.id = 2;
        submit(R, &q);
        drive(R);
        rec_t *second = &R->r[1];
        /* whole blocks, never the last prompt token */
        assert_int_equal(second->n_cached, (n - 1) / 32 * 32);
        assert_true(second->n_cached > 0);
        assert_int_equal(stats(R).prompt_tokens - prompt_before, (uint64_t)(n - second->n_cached));
        assert_same_output(&R->r[0], &solo, "first run");
        assert_same_output(second, &solo, "prefix hit");

        /* A continuation (prompt + the 20 generated tokens): its hit reaches
         * into blocks that hold generated tokens. */
        int32_t cont[300];
        memcpy(cont, p, (size_t)n * sizeof *p);
        memcpy(cont + n, solo.tok, 20 * sizeof *p);
        sched_req_t qc = req_greedy(3, 1, cont, n + 20, 15, true);
        rec_t csolo;
        run_solo(g_stories, &qc, &csolo);
        submit(R, &qc);
        drive(R);
        /* the first run computed n + 19 positions; full blocks of those are cached */
        int32_t expect = (n + 19) / 32 * 32;
        if (expect > (n + 20 - 1) / 32 * 32)
            expect = (n + 20 - 1) / 32 * 32;
        assert_int_equal(R->r[2].n_cached, expect);
        assert_same_output(&R->r[2], &csolo, "continuation hit");
        run_free(&R);
    }

    /* Two requests sharing a 100-token prefix with different suffixes: one
     * after the other finished, and one submitted while the other decodes. */
    int32_t a[160], b[160];
    make_prompt(a, 120, 5);
    memcpy(b, a, 100 * sizeof *a);
    for (int i = 100; i < 115; i++)
        b[i] = g_text[(200 + i) % g_n_text];
    sched_req_t qa = req_greedy(10, 1, a, 120, 25, true);
    sched_req_t qb = req_greedy(11, 1, b, 115, 25, true);
    rec_t sa, sb;
    run_solo(g_stories, &qa, &sa);
    run_solo(g_stories, &qb, &sb);
    for (int concurrent = 0; concurrent < 2; concurrent++) {
        run_t *R = run_new(g_stories, &c);
        submit(R, &qa);
        if (concurrent) {
            step(R); /* a's whole prompt is computed and committed in this step */
            step(R);
        } else {
            drive(R);
        }
        submit(R, &qb);
        drive(R);
        assert_int_equal(R->r[1].n_cached, 96);
        assert_same_output(&R->r[0], &sa, "shared prefix a");
        assert_same_output(&R->r[1], &sb, "shared prefix b");
        run_free(&R);
    }
}

/* ---- preemption --------------------------------------------------------- */

/* Requests of 120..160 positions (4..5 blocks) on a pool of 6 blocks: at most
 * one fits comfortably, so concurrent requests preempt each other. */
static job_t *make_tight(const engine_t *e, int n, bool seeded)
{
    job_t *jobs = calloc((size_t)n, sizeof *jobs);
    assert_non_null(jobs);
    for (int i = 0; i < n; i++) {
        job_t *j = &jobs[i];
        j->n_prompt = 20 + 9 * i;
        make_prompt(j->prompt, j->n_prompt, 13 * i + 3);
        j->req = req_greedy((uint64_t)(200 + i), (int32_t[]){2, 1, 0, 2, 1, 0}[i % 6], j->prompt,
                            j->n_prompt, 100 - 5 * i, true);
        if (seeded)
            req_seeded(&j->req, 777 + (uint64_t)i);
        run_solo(e, &j->req, &j->solo);
    }
    return jobs;
}

static void test_preempted_equals_solo(void **state)
{
    (void)state;
    NEED_STORIES();
    enum { N = 6 };
    job_t *jobs = make_tight(g_stories, N, false);
    static const int32_t budgets[] = {512, 16};
    for (size_t k = 0; k < 2; k++) {
        sched_config_t c = cfg_make(N, budgets[k], 6, 2);
        run_t *R = run_new(g_stories, &c);
        for (int i = 0; i < N; i++)
            submit(R, &jobs[i].req);
        drive(R);
        sched_stats_t st = stats(R);
        fprintf(stderr, "tight pool, budget %d: %llu preemptions in %llu steps\n", budgets[k],
                (unsigned long long)st.preemptions, (unsigned long long)st.steps);
        assert_true(st.preemptions > 0);
        int gaps_by_prio[3] = {0, 0, 0};
        for (int i = 0; i < N; i++) {
            assert_same_output(&R->r[i], &jobs[i].solo, "preempted");
            gaps_by_prio[R->r[i].prio] += R->r[i].gaps;
        }
        /* every observed preemption victim was the worst priority running */
        assert_int_equal(R->victim_violations, 0);
        fprintf(stderr, "  observed preemptions by priority: high %d normal %d low %d\n",
                gaps_by_prio[0], gaps_by_prio[1], gaps_by_prio[2]);
        assert_true(gaps_by_prio[2] > 0);
        assert_true(gaps_by_prio[2] >= gaps_by_prio[0]);
        run_free(&R);
    }
    free(jobs);
}

/* ---- seeded sampling --------------------------------------------------------- */

static void test_seeded_sampling_stable(void **state)
{
    (void)state;
    NEED_STORIES();
    job_t *jobs = make_mix(g_stories, 8, true);
    sched_config_t c = cfg_make(8, 64, 0, 2);
    assert_int_equal(run_mix(g_stories, jobs, 8, &c, "seeded batched"), 0);
    c = cfg_make(3, 7, 0, 1);
    assert_int_equal(run_mix(g_stories, jobs, 8, &c, "seeded small budget"), 0);
    free(jobs);

    /* the same under preemption */
    jobs = make_tight(g_stories, 6, true);
    c = cfg_make(6, 512, 6, 2);
    assert_true(run_mix(g_stories, jobs, 6, &c, "seeded preempted") > 0);
    free(jobs);
}

/* ---- cancellation ------------------------------------------------------------- */

/* KV blocks a decoding request holds after `g` tokens: positions computed are
 * prompt + g - 1 (the last sampled token is not in the cache yet). */
static size_t decode_blocks(const rec_t *r, int32_t n_prompt)
{
    return blocks_for(n_prompt + r->n_tok - 1);
}

static void test_cancel_phases(void **state)
{
    (void)state;
    NEED_STORIES();
    int32_t pa[64], pb[160];
    make_prompt(pa, 40, 0);
    make_prompt(pb, 150, 300);
    sched_req_t qa = req_greedy(1, 1, pa, 40, 40, true);
    sched_req_t qb = req_greedy(2, 1, pb, 150, 30, true);
    rec_t sa, sb;
    run_solo(g_stories, &qa, &sa);
    run_solo(g_stories, &qb, &sb);

    /* 1. waiting: one slot, b queued behind a */
    {
        sched_config_t c = cfg_make(1, 512, 0, 1);
        run_t *R = run_new(g_stories, &c);
        submit(R, &qa);
        rec_t *rb = submit(R, &qb);
        step(R);
        assert_int_equal(stats(R).n_waiting, 1);
        assert_int_equal(sched_cancel(R->s, 2), 0);
        step(R);
        assert_int_equal(rb->n_final, 1);
        assert_int_equal(rb->finish, SCHED_FINISH_CANCELLED);
        assert_int_equal(rb->n_tok, 0);
        assert_int_equal(rb->final_step, R->step);
        assert_int_equal(stats(R).n_waiting, 0);
        assert_int_equal(stats(R).kv_blocks_used, decode_blocks(&R->r[0], 40));
        assert_int_equal(sched_cancel(R->s, 2), -1); /* gone */
        drive(R);
        assert_same_output(&R->r[0], &sa, "cancel waiting: other");
        run_free(&R);
    }
    /* 2. mid-prefill: a budget of 7 rows, b's 150-token prompt takes many steps */
    {
        sched_config_t c = cfg_make(2, 7, 0, 1);
        run_t *R = run_new(g_stories, &c);
        submit(R, &qa);
        while (R->r[0].n_tok < 2)
            step(R);
        rec_t *rb = submit(R, &qb);
        step(R);
        step(R);
        assert_int_equal(rb->n_tok, 0);
        assert_int_equal(stats(R).n_running, 2);
        /* admission reserved b's whole prompt */
        assert_int_equal(stats(R).kv_blocks_used, decode_blocks(&R->r[0], 40) + blocks_for(150));
        assert_int_equal(sched_cancel(R->s, 2), 0);
        step(R);
        assert_int_equal(rb->finish, SCHED_FINISH_CANCELLED);
        assert_int_equal(rb->final_step, R->step);
        assert_int_equal(rb->n_tok, 0);
        assert_int_equal(stats(R).kv_blocks_used, decode_blocks(&R->r[0], 40));
        assert_int_equal(sched_check(R->s), 0);
        drive(R);
        assert_same_output(&R->r[0], &sa, "cancel prefill: other");
        run_free(&R);
    }
    /* 3. decoding: both decode, b is cancelled after 5 tokens */
    {
        sched_config_t c = cfg_make(2, 512, 0, 2);
        run_t *R = run_new(g_stories, &c);
        submit(R, &qa);
        rec_t *rb = submit(R, &qb);
        while (rb->n_tok < 5)
            step(R);
        assert_int_equal(stats(R).kv_blocks_used,
                         decode_blocks(&R->r[0], 40) + decode_blocks(rb, 150));
        assert_int_equal(sched_cancel(R->s, 2), 0);
        step(R);
        assert_int_equal(rb->finish, SCHED_FINISH_CANCELLED);
        assert_int_equal(rb->final_step, R->step);
        assert_int_equal(rb->n_tok, 5);
        assert_int_equal(rb->n_completion, 5);
        assert_memory_equal(rb->tok, sb.tok, 5 * sizeof(int32_t)); /* what it got was right */
        assert_int_equal(stats(R).kv_blocks_used, decode_blocks(&R->r[0], 40));
        drive(R);
        assert_same_output(&R->r[0], &sa, "cancel decode: other");
        run_free(&R);
    }
    /* 4. cancelled before any step, and unknown ids */
    {
        sched_config_t c = cfg_make(2, 512, 0, 1);
        run_t *R = run_new(g_stories, &c);
        submit(R, &qa);
        assert_int_equal(sched_cancel(R->s, 1), 0);
        assert_int_equal(sched_cancel(R->s, 99), -1);
        step(R);
        assert_int_equal(R->r[0].finish, SCHED_FINISH_CANCELLED);
        assert_int_equal(R->r[0].n_tok, 0);
        drive(R);
        run_free(&R);
    }
}

/* ---- n choices ------------------------------------------------------------------ */

/* One request with n choices == n independent requests seeded seed + i; the
 * prompt's full blocks are prefilled once (choices 1..n-1 compute only the
 * partial last block), and no block is left referenced afterwards. Also with
 * fewer slots than choices, and greedy (all n equal). */
static void test_n_choices(void **state)
{
    (void)state;
    NEED_STORIES();
    enum { N = 3, LEN = 75 };
    int32_t p[LEN];
    make_prompt(p, LEN, 40);
    sched_req_t q = req_greedy(7, 1, p, LEN, 24, true);
    req_seeded(&q, 1234);
    rec_t solo[N];
    for (int i = 0; i < N; i++) {
        sched_req_t qi = q;
        qi.sampling.seed = 1234 + (uint64_t)i;
        run_solo(g_stories, &qi, &solo[i]);
    }
    assert_true(solo[0].n_tok != solo[1].n_tok ||
                memcmp(solo[0].tok, solo[1].tok, (size_t)solo[0].n_tok * sizeof(int32_t)) != 0);
    const int32_t bs = 32, partial = LEN % bs;
    for (int32_t slots = N + 1; slots >= 2; slots -= N - 1) { /* 4 slots, then 2 (< N) */
        sched_config_t c = cfg_make(slots, 512, 0, 2);
        run_t *R = run_new(g_stories, &c);
        q.n_choices = N;
        submit_n(R, &q);
        drive(R); /* one final event per choice, every block free or cached */
        for (int i = 0; i < N; i++)
            assert_same_output(&R->r[i], &solo[i], slots > N ? "n choices" : "n choices, 2 slots");
        sched_stats_t st = stats(R);
        assert_int_equal(st.prompt_tokens, (uint64_t)(LEN + (N - 1) * partial));
        assert_int_equal(R->r[0].n_cached, 0);
        for (int i = 1; i < N; i++)
            assert_int_equal(R->r[i].n_cached, LEN - partial);
        run_free(&R);
    }
    /* greedy: n identical texts */
    {
        sched_req_t g = req_greedy(8, 1, p, LEN, 16, true);
        g.n_choices = N;
        sched_config_t c = cfg_make(4, 512, 0, 1);
        run_t *R = run_new(g_stories, &c);
        submit_n(R, &g);
        drive(R);
        for (int i = 1; i < N; i++)
            assert_same_output(&R->r[i], &R->r[0], "greedy choices");
        run_free(&R);
    }
    /* invalid: too many choices, several choices with resumed tokens */
    {
        sched_config_t c = cfg_make(4, 512, 0, 1);
        run_t *R = run_new(g_stories, &c);
        char err[256] = "";
        sched_req_t b = q;
        b.n_choices = SCHED_MAX_CHOICES + 1;
        assert_int_equal(sched_submit(R->s, &b, err, sizeof err), -1);
        int32_t res[2] = {p[0], p[1]};
        b.n_choices = 2;
        b.resume = res;
        b.n_resume = 2;
        assert_int_equal(sched_submit(R->s, &b, err, sizeof err), -1);
        assert_false(sched_busy(R->s));
        run_free(&R);
    }
}

/* Cancelling an n-choice request ends every choice — the ones waiting for
 * choice 0's prefill and the decoding ones — and frees all their blocks. */
static void test_n_choices_cancel(void **state)
{
    (void)state;
    NEED_STORIES();
    int32_t p[80];
    make_prompt(p, 80, 100);
    sched_req_t q = req_greedy(9, 1, p, 80, 200, true);
    req_seeded(&q, 99);
    q.n_choices = 4;
    for (int phase = 0; phase < 2; phase++) {
        sched_config_t c = cfg_make(4, 16, 0, 1); /* 16 rows: an 80-token prefill takes 5 steps */
        run_t *R = run_new(g_stories, &c);
        submit_n(R, &q);
        step(R);
        if (phase == 0) {
            /* choice 0 prefilling, the others held back */
            assert_int_equal(stats(R).n_running, 1);
            assert_int_equal(stats(R).n_waiting, 3);
        } else {
            while (R->r[3].n_tok < 3)
                step(R);
            assert_int_equal(stats(R).n_running, 4);
        }
        assert_int_equal(sched_cancel(R->s, 9), 0);
        step(R);
        for (int i = 0; i < 4; i++) {
            assert_int_equal(R->r[i].n_final, 1);
            assert_int_equal(R->r[i].finish, SCHED_FINISH_CANCELLED);
        }
        check_clean(R);
        assert_int_equal(sched_cancel(R->s, 9), -1);
        run_free(&R);
    }
}

/* A request past its deadline ends with an error naming the deadline (the
 * worker reports it as "timeout") and frees its blocks; others go on.
 * c's deadline is over before its first step; b's passes while it decodes
 * (30 ms for 400 tokens: stories260K makes ~2000 tokens/s alone here). */
static void test_deadline(void **state)
{
    (void)state;
    NEED_STORIES();
    int32_t pa[64], pb[64];
    make_prompt(pa, 40, 0);
    make_prompt(pb, 50, 90);
    sched_req_t qa = req_greedy(1, 1, pa, 40, 30, true);
    rec_t sa;
    run_solo(g_stories, &qa, &sa);
    sched_config_t c = cfg_make(3, 512, 0, 1);
    run_t *R = run_new(g_stories, &c);
    submit(R, &qa);
    /* b's deadline passes after its first step, however fast the machine:
     * the test waits it out below rather than betting that 400 tokens take
     * longer than some milliseconds (they do not, on a fast machine) */
    sched_req_t qb = req_greedy(2, 1, pb, 50, 400, true);
    qb.deadline_us = clock_now_us() + 20000;
    rec_t *rb = submit(R, &qb);
    sched_req_t qc = req_greedy(3, 1, pb, 50, 400, true);
    qc.deadline_us = clock_now_us() - 1;
    rec_t *rc = submit(R, &qc);
    step(R);
    assert_int_equal(rc->finish, SCHED_FINISH_ERROR);
    assert_non_null(strstr(rc->error, "deadline"));
    assert_int_equal(rc->error_code, SCHED_EDEADLINE);
    assert_int_equal(rc->n_tok, 0);
    while (clock_now_us() <= qb.deadline_us)
        clock_sleep_us(1000);
    drive(R); /* the next step reaps b before it decodes */
    assert_int_equal(rb->finish, SCHED_FINISH_ERROR);
    assert_non_null(strstr(rb->error, "deadline"));
    assert_int_equal(rb->error_code, SCHED_EDEADLINE);
    assert_true(rb->n_tok <= 1); /* at most the token of the one step it ran */
    assert_int_equal(R->r[0].error_code, SCHED_OK);
    assert_same_output(&R->r[0], &sa, "next to expired requests");
    run_free(&R);
}

/* ---- admission order and priority preemption -------------------------------- */

static void test_admission_order(void **state)
{
    (void)state;
    NEED_STORIES();
    int32_t p[5][40];
    for (int i = 0; i < 5; i++)
        make_prompt(p[i], 10 + i, 50 * i);
    /* X (high) is admitted first; then low, normal, high, normal arrive while
     * the single slot is taken. Nobody waiting is strictly better than the
     * running request, so nothing is preempted and they are served in
     * (priority, arrival) order: X, H, N1, N2, L. */
    sched_config_t c = cfg_make(1, 512, 0, 1);
    run_t *R = run_new(g_stories, &c);
    sched_req_t qx = req_greedy(1, 0, p[0], 10, 8, true);
    rec_t *x = submit(R, &qx);
    step(R);
    assert_int_equal(x->n_tok, 1);
    sched_req_t ql = req_greedy(2, 2, p[1], 11, 6, true);
    sched_req_t qn1 = req_greedy(3, 1, p[2], 12, 6, true);
    sched_req_t qh = req_greedy(4, 0, p[3], 13, 6, true);
    sched_req_t qn2 = req_greedy(5, 1, p[4], 14, 6, true);
    rec_t *l = submit(R, &ql), *n1 = submit(R, &qn1), *h = submit(R, &qh), *n2 = submit(R, &qn2);
    drive(R);
    assert_int_equal(stats(R).preemptions, 0);
    const rec_t *order[] = {x, h, n1, n2, l};
    for (int i = 0; i + 1 < 5; i++)
        assert_true(order[i]->last_step < order[i + 1]->first_step);
    const sched_req_t *reqs[] = {&qx, &ql, &qn1, &qh, &qn2};
    for (int i = 0; i < 5; i++) {
        rec_t solo;
        run_solo(g_stories, reqs[i], &solo);
        assert_same_output(&R->r[i], &solo, "admission order");
    }
    run_free(&R);
}

static void test_priority_preemption(void **state)
{
    (void)state;
    NEED_STORIES();
    int32_t p[4][64];
    for (int i = 0; i < 4; i++)
        make_prompt(p[i], 30 + 5 * i, 40 * i);
    sched_req_t ql1 = req_greedy(1, 2, p[0], 30, 40, true);
    sched_req_t ql2 = req_greedy(2, 2, p[1], 35, 40, true);
    sched_req_t qn = req_greedy(3, 2, p[2], 40, 10, true);
    sched_req_t qh = req_greedy(4, 0, p[3], 45, 20, true);

    /* two low-priority requests fill both slots; another low one arrives
     * (no preemption: not strictly better), then a high one: it takes the
     * slot of the most recently admitted low request (l2). */
    sched_config_t c = cfg_make(2, 512, 0, 1);
    run_t *R = run_new(g_stories, &c);
    rec_t *l1 = submit(R, &ql1), *l2 = submit(R, &ql2);
    for (int i = 0; i < 3; i++)
        step(R);
    rec_t *n = submit(R, &qn);
    step(R);
    assert_int_equal(stats(R).preemptions, 0);
    assert_int_equal(n->n_tok, 0);
    rec_t *h = submit(R, &qh);
    step(R);
    assert_int_equal(stats(R).preemptions, 1);
    assert_int_equal(h->first_step, R->step);
    assert_int_equal(l1->last_step, R->step);  /* l1 keeps decoding */
    assert_true(l2->last_step < R->step);      /* l2 was preempted */
    assert_int_equal(l2->gaps, 1);
    int64_t t_pre = R->step;
    drive(R);
    assert_int_equal(stats(R).preemptions, 1);
    assert_int_equal(l1->gaps, 0);
    assert_int_equal(h->gaps, 0);
    /* l2 resumed when h's slot came back, before the later equal-priority n */
    assert_true(l2->resume_step > t_pre);
    assert_true(l2->resume_step > h->final_step);
    assert_true(l2->resume_step < n->first_step);
    const sched_req_t *reqs[] = {&ql1, &ql2, &qn, &qh};
    for (int i = 0; i < 4; i++) {
        rec_t solo;
        run_solo(g_stories, reqs[i], &solo);
        assert_same_output(&R->r[i], &solo, "priority preemption");
    }
    run_free(&R);
}

/* ---- stop strings, EOS, length ----------------------------------------------- */

/* The text of a solo run, decoded independently of the detokenizer: decode
 * (prompt + generated) minus decode(prompt), EOS excluded. */
static size_t ref_text(const int32_t *prompt, int32_t n_prompt, const rec_t *r, char *out,
                       size_t cap)
{
    int32_t all[1024];
    memcpy(all, prompt, (size_t)n_prompt * sizeof *all);
    int32_t n = n_prompt;
    for (int32_t i = 0; i < r->n_tok; i++)
        if (!tokenizer_is_eog(g_stories->tok, r->tok[i]))
            all[n++] = r->tok[i];
    char pre[4096];
    size_t lp = tokenizer_decode(g_stories->tok, all, n_prompt, false, pre, sizeof pre);
    size_t la = tokenizer_decode(g_stories->tok, all, n, false, out, cap);
    assert_true(la < cap && lp < sizeof pre && lp <= la);
    assert_memory_equal(out, pre, lp);
    memmove(out, out + lp, la - lp);
    return la - lp;
}

static void test_stop_eos_length(void **state)
{
    (void)state;
    NEED_STORIES();
    int32_t p[8];
    int32_t *ids = NULL;
    char err[128];
    int32_t n_p = engine_prompt_text(g_stories, "Once upon a time", 16, &ids, err, sizeof err);
    assert_true(n_p > 1 && n_p < 8);
    memcpy(p, ids, (size_t)n_p * sizeof *p);
    free(ids);
    const int32_t bos = tokenizer_bos(g_stories->tok), eos_id = tokenizer_eos(g_stories->tok);
    assert_true(bos >= 0 && eos_id >= 0);

    /* The reference: 400 greedy tokens. stories260K never ends a story with
     * EOS: like llama2.c's training data it starts the next one with BOS. */
    sched_req_t q = req_greedy(1, 1, p, n_p, 400, false);
    rec_t base;
    run_solo(g_stories, &q, &base);
    assert_int_equal(base.finish, SCHED_FINISH_LENGTH);
    assert_int_equal(base.n_tok, 400);
    static char ref[MAX_TEXT];
    size_t lr = ref_text(p, n_p, &base, ref, sizeof ref);
    assert_int_equal(base.text_len, lr);
    assert_memory_equal(base.text, ref, lr);

    /* EOS: a logit bias on EOS makes the model produce it somewhere in the
     * middle (the smallest bias from a fixed ladder that does). Before it the
     * tokens are the unbiased ones; the EOS ends the request with "stop" and
     * adds no text. */
    rec_t eos;
    int32_t n_eos = 0;
    for (float b = 2; b <= 40 && !n_eos; b += 1) {
        sampler_bias_t bias = {.token = eos_id, .bias = b};
        q = req_greedy(2, 1, p, n_p, 400, false);
        q.sampling.logit_bias = &bias;
        q.sampling.n_logit_bias = 1;
        run_solo(g_stories, &q, &eos);
        if (eos.finish == SCHED_FINISH_STOP && eos.n_tok >= 10)
            n_eos = eos.n_tok;
        else if (eos.finish == SCHED_FINISH_STOP)
            fail_msg("EOS bias %.0f: stopped after %d tokens", b, eos.n_tok);
        if (n_eos) {
            fprintf(stderr, "EOS bias %.0f: EOS is token %d\n", b, n_eos);
            assert_int_equal(eos.stop, 0); /* EOS, not a stop string */
            /* same bias, EOS ignored: exactly max_tokens, through the EOS */
            sched_req_t qi = q;
            qi.id = 3;
            qi.ignore_eos = true;
            qi.max_tokens = n_eos + 20;
            rec_t ign;
            run_solo(g_stories, &qi, &ign);
            assert_int_equal(ign.finish, SCHED_FINISH_LENGTH);
            assert_int_equal(ign.n_tok, n_eos + 20);
            assert_int_equal(ign.n_completion, n_eos + 20);
            assert_memory_equal(ign.tok, eos.tok, (size_t)n_eos * sizeof(int32_t));
        }
    }
    assert_true(n_eos > 0);
    assert_int_equal(eos.tok[n_eos - 1], eos_id);
    assert_int_equal(eos.n_completion, n_eos);
    assert_memory_equal(eos.tok, base.tok, (size_t)(n_eos - 1) * sizeof(int32_t));
    assert_int_equal(eos.text_len, base.cum[n_eos - 2]);
    assert_memory_equal(eos.text, base.text, eos.text_len);

    /* stop_ids: a stop id ends the request at its first occurrence, its
     * text excluded. The id: BOS when the model starts a new story inside
     * 400 tokens (stories260K does), else the first token of the base
     * output whose first occurrence is past token 10 (a generated model). */
    {
        int32_t k = 0, stop_id = bos;
        while (k < base.n_tok && base.tok[k] != bos)
            k++;
        if (k <= 10 || k >= base.n_tok) {
            for (k = 11; k < base.n_tok; k++) {
                int32_t j = 0;
                while (j < k && base.tok[j] != base.tok[k])
                    j++;
                if (j == k)
                    break;
            }
            stop_id = k < base.n_tok ? base.tok[k] : -1;
        }
        assert_true(k > 10 && k < base.n_tok && stop_id >= 0);
        q = req_greedy(4, 1, p, n_p, 400, false);
        q.stop_ids = &stop_id;
        q.n_stop_ids = 1;
        rec_t st;
        run_solo(g_stories, &q, &st);
        assert_int_equal(st.finish, SCHED_FINISH_STOP);
        assert_int_equal(st.stop, 0); /* a stop id, not a stop string */
        assert_int_equal(st.n_tok, k + 1);
        assert_int_equal(st.text_len, base.cum[k - 1]);
        assert_memory_equal(st.text, base.text, st.text_len);
    }

    /* max_tokens: "length" with the first 10 tokens */
    q = req_greedy(5, 1, p, n_p, 10, false);
    rec_t len;
    run_solo(g_stories, &q, &len);
    assert_int_equal(len.finish, SCHED_FINISH_LENGTH);
    assert_int_equal(len.n_tok, 10);
    assert_memory_equal(len.tok, base.tok, 10 * sizeof(int32_t));
    assert_int_equal(len.text_len, base.cum[9]);
    assert_memory_equal(len.text, base.text, len.text_len);

    /* Stop strings cut at their first occurrence; generation ends on the
     * token that completes them. Picks: one starting at a token boundary,
     * one starting on the last byte of a token (spans two tokens). */
    for (int kind = 0; kind < 2; kind++) {
        int32_t j = 60;
        size_t start = kind == 0 ? base.cum[j] : base.cum[j + 1] - 1;
        assert_true(base.cum[j + 1] > base.cum[j]);
        char stop[8] = {0};
        memcpy(stop, base.text + start, 5);
        const char *first = memmem(base.text, base.text_len, stop, 5);
        assert_non_null(first);
        size_t f = (size_t)(first - base.text);
        int32_t k = 0; /* the token that completes the stop */
        while (base.cum[k] < f + 5)
            k++;
        const char *stops[] = {"never ever", stop};
        q = req_greedy(10 + (uint64_t)kind, 1, p, n_p, 400, false);
        q.stop = stops;
        q.n_stop = 2;
        rec_t st;
        run_solo(g_stories, &q, &st);
        assert_int_equal(st.finish, SCHED_FINISH_STOP);
        assert_int_equal(st.stop, 2); /* the second stop string, reported as 1 + its index */
        assert_int_equal(st.n_tok, k + 1);
        assert_memory_equal(st.tok, base.tok, (size_t)(k + 1) * sizeof(int32_t));
        assert_int_equal(st.text_len, f);
        assert_memory_equal(st.text, base.text, f);
    }

    /* A stop string that begins with the text's last bytes at max_tokens but
     * never completes: held back while it might, released at "length". */
    {
        int32_t m = 30;
        size_t end = base.cum[m - 1];
        char stop[16];
        memcpy(stop, base.text + end - 3, 3);
        memcpy(stop + 3, "@@@", 4);
        const char *stops[] = {stop};
        q = req_greedy(20, 1, p, n_p, m, false);
        q.stop = stops;
        q.n_stop = 1;
        rec_t st;
        run_solo(g_stories, &q, &st);
        assert_int_equal(st.finish, SCHED_FINISH_LENGTH);
        assert_int_equal(st.stop, 0);
        assert_int_equal(st.n_tok, m);
        assert_int_equal(st.text_len, end);
        assert_memory_equal(st.text, base.text, end);
        assert_true(st.last_delta >= 3);
    }

    /* The context limit ends a request with "length": a prompt of ctx - 3
     * tokens generates 3. */
    {
        int32_t ctx = g_stories->model->cfg.ctx;
        int32_t *big = malloc((size_t)ctx * sizeof *big);
        make_prompt(big, ctx - 3, 0);
        q = req_greedy(40, 1, big, ctx - 3, 0, true);
        rec_t st;
        run_solo(g_stories, &q, &st);
        assert_int_equal(st.finish, SCHED_FINISH_LENGTH);
        assert_int_equal(st.n_tok, 3);
        free(big);
    }
}

/* ---- resume -------------------------------------------------------------------- */

static void test_resume(void **state)
{
    (void)state;
    NEED_STORIES();
    int32_t p[80];
    make_prompt(p, 41, 60);
    sched_req_t q = req_greedy(1, 1, p, 41, 60, true);
    rec_t full;
    run_solo(g_stories, &q, &full);
    assert_int_equal(full.n_tok, 60);

    static const int32_t KS[] = {1, 7, 23, 31, 59};
    enum { NK = sizeof KS / sizeof KS[0] };
    sched_config_t c = cfg_make(NK, 64, 0, 2);
    run_t *R = run_new(g_stories, &c);
    for (int i = 0; i < NK; i++) {
        sched_req_t qr = q;
        qr.id = 10 + (uint64_t)i;
        qr.resume = full.tok;
        qr.n_resume = KS[i];
        submit(R, &qr);
    }
    drive(R);
    for (int i = 0; i < NK; i++) {
        const rec_t *r = &R->r[i];
        int32_t k = KS[i];
        assert_int_equal(r->finish, SCHED_FINISH_LENGTH);
        assert_int_equal(r->n_completion, 60);
        assert_int_equal(r->n_tok, 60 - k);
        assert_memory_equal(r->tok, full.tok + k, (size_t)(60 - k) * sizeof(int32_t));
        size_t seen = full.cum[k - 1];
        assert_int_equal(r->text_len, full.text_len - seen);
        assert_memory_equal(r->text, full.text + seen, r->text_len);
        /* usage: a cache hit never counts more than the prompt */
        assert_true(r->n_cached <= r->n_prompt);
    }
    run_free(&R);

    /* Resumed after the original ran in the same scheduler: the prefix cache
     * covers prompt and resumed tokens; output and usage still right. */
    R = run_new(g_stories, &c);
    submit(R, &q);
    drive(R);
    sched_req_t qr = q;
    qr.id = 2;
    qr.resume = full.tok;
    qr.n_resume = 50;
    submit(R, &qr);
    drive(R);
    assert_int_equal(R->r[1].n_tok, 10);
    assert_memory_equal(R->r[1].tok, full.tok + 50, 10 * sizeof(int32_t));
    assert_true(R->r[1].n_cached > 0);
    assert_true(R->r[1].n_cached <= R->r[1].n_prompt);
    run_free(&R);
}

/* A seeded (temperature 0.8, top-p 0.9) request resumed after k delivered
 * tokens continues with exactly the tokens and text of the uninterrupted
 * run: the sampler's PRNG skips one draw per resumed token. */
static void test_resume_seeded(void **state)
{
    (void)state;
    NEED_STORIES();
    int32_t p[40];
    make_prompt(p, 21, 3);
    sched_req_t q = req_greedy(1, 1, p, 21, 80, true);
    req_seeded(&q, 987654321);
    rec_t full;
    run_solo(g_stories, &q, &full);
    assert_int_equal(full.n_tok, 80);
    static const int32_t KS[] = {1, 17, 64};
    for (size_t i = 0; i < sizeof KS / sizeof KS[0]; i++) {
        int32_t k = KS[i];
        sched_req_t qr = q;
        qr.resume = full.tok;
        qr.n_resume = k;
        rec_t r;
        run_solo(g_stories, &qr, &r);
        assert_int_equal(r.n_tok, 80 - k);
        assert_memory_equal(r.tok, full.tok + k, (size_t)(80 - k) * sizeof(int32_t));
        size_t seen = full.cum[k - 1];
        assert_int_equal(r.text_len, full.text_len - seen);
        assert_memory_equal(r.text, full.text + seen, r.text_len);
    }
    /* and another seed does diverge (the check can fail) */
    sched_req_t qo = q;
    req_seeded(&qo, 11);
    rec_t other;
    run_solo(g_stories, &qo, &other);
    assert_true(memcmp(other.tok, full.tok, 80 * sizeof(int32_t)) != 0);
}

/* sched_abort_all drops everything at once, without events, and every KV
 * block comes back (free or cached); the same ids can be submitted again. */
static void test_abort_all(void **state)
{
    (void)state;
    NEED_STORIES();
    int32_t p[40];
    make_prompt(p, 33, 5);
    sched_config_t c = cfg_make(4, 64, 0, 1);
    run_t *R = run_new(g_stories, &c);
    for (uint64_t id = 1; id <= 3; id++) {
        sched_req_t q = req_greedy(id, 1, p, 33, 50, true);
        submit(R, &q);
    }
    for (int i = 0; i < 3; i++)
        step(R);
    int n_events = 0;
    for (int i = 0; i < R->n; i++)
        n_events += R->r[i].n_tok + R->r[i].n_final;
    assert_true(n_events > 0);
    assert_int_equal(sched_abort_all(R->s), 3);
    assert_false(sched_busy(R->s));
    sched_stats_t st;
    sched_stats(R->s, &st);
    assert_int_equal(st.kv_blocks_used, 0);
    assert_int_equal(sched_check(R->s), 0);
    int n_after = 0;
    for (int i = 0; i < R->n; i++)
        n_after += R->r[i].n_tok + R->r[i].n_final;
    assert_int_equal(n_after, n_events); /* no events */
    sched_req_t again = req_greedy(2, 1, p, 33, 5, true);
    char err[128];
    assert_int_equal(sched_submit(R->s, &again, err, sizeof err), 0);
    run_free(&R);
}

/* ---- invalid submissions ---------------------------------------------------- */

static void test_invalid_submissions(void **state)
{
    (void)state;
    NEED_STORIES();
    sched_config_t c = cfg_make(2, 64, 0, 1);
    run_t *R = run_new(g_stories, &c);
    int32_t ctx = sched_context_length(R->s);
    assert_int_equal(ctx, g_stories->model->cfg.ctx);
    int32_t *p = malloc((size_t)(ctx + 1) * sizeof *p);
    make_prompt(p, ctx + 1, 0);
    char err[256];
    struct {
        const char *what;
        sched_req_t q;
        sched_rc_t want;
    } bad[] = {
        {"empty prompt", req_greedy(1, 1, p, 0, 5, false), SCHED_EINVAL},
        {"negative length", req_greedy(1, 1, p, -3, 5, false), SCHED_EINVAL},
        {"prompt + 1 > context", req_greedy(1, 1, p, ctx, 5, false), SCHED_ETOO_LONG},
        {"prompt > context", req_greedy(1, 1, p, ctx + 1, 5, false), SCHED_ETOO_LONG},
        {"prompt + resume > context", req_greedy(1, 1, p, ctx - 10, 5, false), SCHED_ETOO_LONG},
    };
    bad[4].q.resume = p;
    bad[4].q.n_resume = 10;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        int rc = sched_submit(R->s, &bad[i].q, err, sizeof err);
        if (rc != (int)bad[i].want)
            fail_msg("%s: got %d, want %d", bad[i].what, rc, (int)bad[i].want);
        assert_true(strlen(err) > 0);
    }
    int32_t oov[3] = {1, 512, 5};
    int32_t neg[3] = {1, -1, 5};
    sched_req_t q = req_greedy(1, 1, oov, 3, 5, false);
    assert_int_equal(sched_submit(R->s, &q, err, sizeof err), SCHED_EINVAL);
    q.prompt = neg;
    assert_int_equal(sched_submit(R->s, &q, err, sizeof err), SCHED_EINVAL);
    q.prompt = p;
    q.resume = oov + 1;
    q.n_resume = 1;
    assert_int_equal(sched_submit(R->s, &q, err, sizeof err), SCHED_EINVAL);
    /* invalid sampling parameters and stop strings */
    q = req_greedy(1, 1, p, 5, 5, false);
    q.sampling.top_p = 0;
    assert_int_equal(sched_submit(R->s, &q, err, sizeof err), SCHED_EINVAL);
    q = req_greedy(1, 1, p, 5, 5, false);
    const char *badstop[] = {"\xff\xfe"};
    q.stop = badstop;
    q.n_stop = 1;
    assert_int_equal(sched_submit(R->s, &q, err, sizeof err), SCHED_EINVAL);
    assert_false(sched_busy(R->s));

    /* duplicate id while live; the id may be reused once it has finished */
    q = req_greedy(7, 1, p, 20, 5, true);
    rec_t *r = submit(R, &q);
    err[0] = 0;
    assert_int_equal(sched_submit(R->s, &q, err, sizeof err), SCHED_EDUPLICATE);
    assert_true(strlen(err) > 0);
    drive(R);
    assert_int_equal(r->n_tok, 5);
    memset(r, 0, sizeof *r);
    r->id = 7;
    assert_int_equal(sched_submit(R->s, &q, err, sizeof err), 0);
    drive(R);
    assert_int_equal(r->n_tok, 5);
    free(p);
    run_free(&R);
}

/* ---- zoo model ------------------------------------------------------------------ */

/* One zoo pass; solo references and batched runs use the same matmul path
 * (int8 kernels or dequantize + sgemm), whose numbers differ slightly. */
static void zoo_pass(engine_t *e)
{
    enum { N = 5 };
    /* decodes that cross block boundaries: 33+40, 60+30, 97+35, 150+14 */
    static const int32_t LEN[N] = {1, 33, 60, 97, 150};
    static const int32_t MAX[N] = {12, 40, 30, 35, 14};
    job_t *jobs = calloc(N, sizeof *jobs);
    for (int i = 0; i < N; i++) {
        job_t *j = &jobs[i];
        j->n_prompt = LEN[i];
        make_prompt(j->prompt, LEN[i], 29 * i);
        j->req = req_greedy((uint64_t)(300 + i), i % 3, j->prompt, LEN[i], MAX[i], true);
        if (i == 3)
            req_seeded(&j->req, 99);
        run_solo(e, &j->req, &j->solo);
    }
    sched_config_t c = cfg_make(N, 7, 0, 2);
    assert_int_equal(run_mix(e, jobs, N, &c, "zoo budget 7"), 0);
    c = cfg_make(N, 512, 0, 2);
    assert_int_equal(run_mix(e, jobs, N, &c, "zoo budget 512"), 0);
    free(jobs);

    /* Preemption: requests of 20..29 prompt tokens fit one block each; the
     * admission watermark (a free block per running sequence) lets three of
     * them in on a pool of 5, then all three need a second block at
     * position 32 while two are left. */
    enum { NT = 4 };
    jobs = calloc(NT, sizeof *jobs);
    for (int i = 0; i < NT; i++) {
        job_t *j = &jobs[i];
        j->n_prompt = 20 + 3 * i;
        make_prompt(j->prompt, j->n_prompt, 31 * i + 7);
        j->req = req_greedy((uint64_t)(400 + i), 1, j->prompt, j->n_prompt, 40, true);
        run_solo(e, &j->req, &j->solo);
    }
    c = cfg_make(NT, 512, 5, 2);
    uint64_t pre = run_mix(e, jobs, NT, &c, "zoo preempted");
    fprintf(stderr, "zoo tight pool: %llu preemptions\n", (unsigned long long)pre);
    assert_true(pre > 0);
    free(jobs);
}

/* The zoo Q8_0 model from ../shared (skips the test when absent). */
static engine_t *load_zoo_q8_or_skip(void)
{
    const char *path = support_shared_model("zoo/zoo-Q8_0.gguf");
    if (!path)
        skip();
    char err[256];
    engine_t *e = engine_load(path, err, sizeof err);
    if (!e)
        fail_msg("engine_load: %s", err);
    return e;
}

/* KV_TYPE_AUTO: f16 only where the K/V projections run on the int8 kernels
 * (batch-invariant bits), f32 for float weights or --exact-matmul; an
 * explicit type always wins. */
static kv_type_t kv_type_of(const engine_t *e, kv_type_t want, bool exact)
{
    sched_config_t c;
    sched_config_default(&c);
    assert_int_equal(c.kv_type, KV_TYPE_AUTO);
    c.kv_type = want;
    c.kv_blocks = 8;
    c.max_seqs = 2;
    c.exact_matmul = exact;
    char err[256] = "";
    sched_t *s = sched_new(e->model, e->tok, &c, on_event, NULL, err, sizeof err);
    if (!s)
        fail_msg("sched_new: %s", err);
    kv_type_t t = sched_kv_type(s);
    sched_free(&s);
    return t;
}

static void test_kv_type_auto(void **state)
{
    (void)state;
    NEED_STORIES();
    /* stories260K has F32 weights: sgemm / float kernel, no int8 */
    assert_int_equal(g_stories->model->layers[0].wk.type, GGML_TYPE_F32);
    assert_int_equal(kv_type_of(g_stories, KV_TYPE_AUTO, false), KV_TYPE_F32);
    assert_int_equal(kv_type_of(g_stories, KV_TYPE_F16, false), KV_TYPE_F16);
    engine_t *e = load_zoo_q8_or_skip();
    assert_int_equal(e->model->layers[0].wk.type, GGML_TYPE_Q8_0);
    assert_int_equal(kv_type_of(e, KV_TYPE_AUTO, false), KV_TYPE_F16);
    assert_int_equal(kv_type_of(e, KV_TYPE_AUTO, true), KV_TYPE_F32);
    assert_int_equal(kv_type_of(e, KV_TYPE_F32, false), KV_TYPE_F32);
    engine_free(&e);
}

static void test_zoo_batched_preempted(void **state)
{
    (void)state;
    NEED_STORIES(); /* for the prompts */
    engine_t *e = load_zoo_q8_or_skip();
    /* The int8 pass keeps the default f16 KV cache: int8 kernels give every
     * row the same bits whatever the batch, so f16 rounding sees identical
     * K/V. The sgemm pass pins f32: sgemm's rounding depends on the batch
     * shape (~1e-7), an f16 cache turns that into a half-ulp flip now and
     * then, and on this random-weight model that moved a seeded sample (the
     * f16 cache's batch invariance is to a tolerance there, see
     * tests/worker/model/test_forward.c). */
    for (int exact = 0; exact < 2; exact++) {
        g_exact_matmul = exact;
        g_kv_type = exact ? KV_TYPE_F32 : KV_TYPE_F16;
        zoo_pass(e);
    }
    g_exact_matmul = false;
    g_kv_type = KV_TYPE_F16;
    engine_free(&e);
}

/* ---- sliding window: blocks behind the window released ------------------- */

/* pagoda-mkmodel ($PAGODA_BUILD) writes a random Q8_0 llama with the
 * stories260K tokenizer into dir/name; extra = e.g. "--window 40". */
static engine_t *mkmodel_engine(const char *dir, const char *name, const char *extra)
{
    const char *b = getenv("PAGODA_BUILD");
    char bin[512], path[512], cmd[2048], err[256];
    snprintf(bin, sizeof bin, "%s/pagoda-mkmodel", b ? b : "build");
    if (access(bin, X_OK) != 0)
        fail_msg("%s missing (build first)", bin);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(cmd, sizeof cmd,
             "%s -o %s --tokenizer-from %s --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 96 --ctx 1024 "
             "--type Q8_0 %s > %s/%s.log 2>&1",
             bin, path, support_shared_model("stories260K.gguf"), extra, dir, name);
    if (system(cmd) != 0)
        fail_msg("%s failed", cmd);
    engine_t *e = engine_load(path, err, sizeof err);
    if (!e)
        fail_msg("engine_load %s: %s", path, err);
    return e;
}

#define WIN_SEQS 3
#define WIN_GEN 400

/* Three greedy requests (40-token prompts, 400 tokens each) on e with a
 * 10-block pool (320 positions), batch budget 64. *max_decode_used: the most
 * blocks in use in a step where all three were decoding. */
static run_t *window_run(engine_t *e, const sched_req_t *reqs, int32_t *max_decode_used)
{
    sched_config_t c = cfg_make(WIN_SEQS, 64, 10, 2);
    run_t *R = run_new(e, &c);
    for (int i = 0; i < WIN_SEQS; i++)
        submit(R, &reqs[i]);
    *max_decode_used = 0;
    while (sched_busy(R->s)) {
        step(R);
        if (R->step > MAX_STEPS)
            fail_msg("no progress after %d steps", MAX_STEPS);
        assert_int_equal(sched_check(R->s), 0);
        bool all_decoding = true;
        for (int i = 0; i < WIN_SEQS; i++)
            all_decoding &= R->r[i].n_tok > 0 && !R->r[i].n_final;
        if (all_decoding && (int32_t)stats(R).kv_blocks_used > *max_decode_used)
            *max_decode_used = (int32_t)stats(R).kv_blocks_used;
    }
    check_records(R);
    check_clean(R);
    return R;
}

static void test_window_long_generation(void **state)
{
    (void)state;
    NEED_STORIES();
    char dir[] = "/tmp/pagoda-sched-swa.XXXXXX";
    assert_non_null(mkdtemp(dir));
    engine_t *swa = mkmodel_engine(dir, "swa.gguf", "--window 40");
    engine_t *dense = mkmodel_engine(dir, "dense.gguf", "");
    assert_int_equal(model_kv_window(&swa->model->cfg), 40);
    assert_int_equal(model_kv_window(&dense->model->cfg), 0);

    static int32_t prompts[WIN_SEQS][40];
    sched_req_t reqs[WIN_SEQS];
    for (int i = 0; i < WIN_SEQS; i++) {
        make_prompt(prompts[i], 40, 50 * i + 3);
        reqs[i] = req_greedy((uint64_t)(700 + i), 1, prompts[i], 40, WIN_GEN, true);
    }

    /* windowed: the whole context is usable although the pool holds 320
     * positions, and three 440-position sequences run side by side, each in
     * at most ceil(40 / 32) + 1 = 3 blocks while decoding */
    sched_config_t c = cfg_make(WIN_SEQS, 64, 10, 2);
    run_t *R = run_new(swa, &c);
    assert_int_equal(sched_context_length(R->s), 1024);
    run_free(&R);
    int32_t max_used = 0;
    R = window_run(swa, reqs, &max_used);
    sched_stats_t st = stats(R);
    fprintf(stderr, "windowed: %llu preemptions, at most %d blocks used while all decode\n",
            (unsigned long long)st.preemptions, max_used);
    assert_true(max_used > 0 && max_used <= WIN_SEQS * 3);
    for (int i = 0; i < WIN_SEQS; i++) {
        assert_int_equal(R->r[i].n_tok, WIN_GEN);
        assert_int_equal(R->r[i].finish, SCHED_FINISH_LENGTH);
        rec_t solo;
        run_solo(swa, &reqs[i], &solo);
        assert_same_output(&solo, &R->r[i], "windowed, tight pool vs solo");
    }
    run_free(&R);

    /* the same model without the window: a sequence is limited to the pool
     * (320 positions), and three of them only fit by preempting each other */
    R = window_run(dense, reqs, &max_used);
    st = stats(R);
    fprintf(stderr, "dense: %llu preemptions, context %d\n", (unsigned long long)st.preemptions,
            sched_context_length(R->s));
    assert_int_equal(sched_context_length(R->s), 320);
    assert_true(st.preemptions > 0);
    for (int i = 0; i < WIN_SEQS; i++) {
        assert_int_equal(R->r[i].n_tok, 320 - 40);
        assert_int_equal(R->r[i].finish, SCHED_FINISH_LENGTH);
    }
    run_free(&R);

    /* a pool smaller than a full chunk's window (3 blocks < ceil((40 - 1 +
     * 64) / 32) + 1 = 5): the pool bounds the sequence, the prompt is
     * reserved whole, and a lone long prompt still completes */
    c = cfg_make(1, 64, 3, 2);
    R = run_new(swa, &c);
    assert_int_equal(sched_context_length(R->s), 96);
    static int32_t long_prompt[90];
    make_prompt(long_prompt, 90, 11);
    sched_req_t lq = req_greedy(790, 1, long_prompt, 90, 50, true);
    submit(R, &lq);
    drive(R);
    assert_int_equal(R->r[0].n_tok, 6);
    assert_int_equal(R->r[0].finish, SCHED_FINISH_LENGTH);
    run_free(&R);
    engine_free(&swa);
    engine_free(&dense);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}


/* ---- step time budget and prefill priority -------------------------------- */

/* A synthetic step cost for sched_set_step_hook (µs): the scheduler's cost
 * model learns exactly these coefficients, so the chunk sizes below follow
 * from them and not from the machine. */
static const double BK[4] = {10000.0, 500.0, 1000.0, 0.01};

static double bk_cost(const step_cost_rows_t *r)
{
    return BK[0] + BK[1] * r->n_decode + BK[2] * r->n_prefill + BK[3] * (double)r->n_attn;
}

#define BLOG_STEPS 2048
#define BLOG_SEQS 16

/* What each step held, as the hook saw it. */
typedef struct blog {
    int32_t n;
    struct {
        step_cost_rows_t rows;
        double target_us;
        int32_t n_seq;
        uint64_t ids[BLOG_SEQS];
        int32_t prefill[BLOG_SEQS];
    } st[BLOG_STEPS];
} blog_t;

static double blog_hook(void *ud, const sched_step_info_t *in)
{
    blog_t *L = ud;
    if (L->n < BLOG_STEPS) {
        L->st[L->n].rows = (step_cost_rows_t){in->n_decode, in->n_prefill, in->n_attn};
        L->st[L->n].target_us = in->target_us;
        L->st[L->n].n_seq = in->n_seq < BLOG_SEQS ? in->n_seq : BLOG_SEQS;
        for (int32_t i = 0; i < L->st[L->n].n_seq; i++) {
            L->st[L->n].ids[i] = in->ids[i];
            L->st[L->n].prefill[i] = in->n_rows[i];
        }
    }
    L->n++;
    step_cost_rows_t r = {in->n_decode, in->n_prefill, in->n_attn};
    return bk_cost(&r);
}

/* Prefill rows request id got in logged step i (0 when it had none). */
static int32_t blog_rows(const blog_t *L, int32_t i, uint64_t id)
{
    for (int32_t k = 0; k < L->st[i].n_seq; k++)
        if (L->st[i].ids[k] == id)
            return L->st[i].prefill[k];
    return 0;
}

static void close_to(double got, double want, const char *what, int32_t step_i)
{
    if (fabs(got - want) > 1e-3 * fabs(want))
        fail_msg("step %d: %s %.1f, want %.1f", step_i, what, got, want);
}

static void test_step_budget_chunks(void **state)
{
    (void)state;
    NEED_STORIES();
    enum { N_STREAMS = 4, N_LONG = 400, MBT = 256, FLOOR = 16 };
    sched_config_t c = cfg_make(8, MBT, 0, 1);
    c.step_budget_ms = SCHED_STEP_BUDGET_AUTO;
    c.step_min_chunk = FLOOR;
    run_t *R = run_new(g_stories, &c);
    blog_t *L = calloc(1, sizeof *L);
    assert_non_null(L);
    sched_set_step_hook(R->s, blog_hook, L);

    /* alone, a long prompt prefills at the whole token budget */
    int32_t lp[N_LONG], lp2[N_LONG], sp[N_STREAMS][8];
    make_prompt(lp, N_LONG, 5);
    sched_req_t q0 = req_greedy(1, 1, lp, N_LONG, 1, true);
    submit(R, &q0);
    drive(R);
    assert_int_equal(L->n, 2);
    assert_int_equal(L->st[0].rows.n_prefill, MBT);
    assert_int_equal(L->st[1].rows.n_prefill, N_LONG - MBT);
    assert_true(L->st[0].target_us == 0 && L->st[1].target_us == 0);

    /* streams decode; then a long prompt (not cached: another offset) arrives */
    L->n = 0;
    sched_req_t qs[N_STREAMS];
    for (int i = 0; i < N_STREAMS; i++) {
        make_prompt(sp[i], 8, 100 + 9 * i);
        qs[i] = req_greedy((uint64_t)(10 + i), 1, sp[i], 8, 150, true);
        submit(R, &qs[i]);
    }
    for (int i = 0; i < 20; i++)
        step(R);
    make_prompt(lp2, N_LONG, 200);
    sched_req_t ql = req_greedy(20, 1, lp2, N_LONG, 4, true);
    rec_t *rl = submit(R, &ql);
    drive(R);

    int32_t got_rows = 0, n_sized = 0, n_floor = 0;
    for (int32_t i = 0; i < L->n; i++) {
        const step_cost_rows_t *r = &L->st[i].rows;
        int32_t lrows = blog_rows(L, i, 20);
        int32_t at = got_rows; /* the chunk's first position */
        got_rows += lrows;
        if (r->n_decode == 0 || lrows == 0)
            continue;
        assert_int_equal(r->n_prefill, lrows);
        if (L->st[i].target_us <= 1.0) { /* the model not ready yet: the floor */
            assert_int_equal(lrows, FLOOR);
            n_floor++;
            continue;
        }
        /* the target: 2 x the step without its prefill rows */
        step_cost_rows_t dec = {r->n_decode, 0, r->n_attn - step_cost_chunk_attn(at, lrows)};
        close_to(L->st[i].target_us, 2 * bk_cost(&dec), "target", i);
        /* the largest chunk within the target, or the floor */
        step_cost_rows_t more = *r;
        more.n_prefill++;
        more.n_attn += at + lrows + 1;
        bool last = at + lrows == N_LONG || lrows == MBT - r->n_decode;
        if (lrows > FLOOR)
            assert_true(bk_cost(r) <= L->st[i].target_us * (1 + 1e-3));
        if (!last)
            assert_true(bk_cost(&more) > L->st[i].target_us * (1 - 1e-3));
        n_sized++;
    }
    assert_int_equal(got_rows, N_LONG);
    assert_true(n_sized >= 3);
    assert_true(n_floor <= 4);
    /* output unchanged by the chunking */
    rec_t solo;
    run_solo(g_stories, &ql, &solo);
    assert_same_output(rl, &solo, "step budget");
    for (int i = 0; i < N_STREAMS; i++) {
        run_solo(g_stories, &qs[i], &solo);
        assert_same_output(&R->r[1 + i], &solo, "step budget streams");
    }
    free(L);
    run_free(&R);
}

/* The interference case of issue #38 at test scale: IF_STREAMS streams
 * decode under the default auto budget with the step cost `hook`; after 20
 * steps an IF_LONG-token prompt (id 30) arrives; run until its first token.
 * seed varies the prompts (no prefix-cache hit between tests). */
enum { IF_STREAMS = 8, IF_LONG = 420 };
typedef struct interference {
    run_t *R;
    blog_t *L;                 /* the steps, through hook */
    int32_t sp[IF_STREAMS][8], lp[IF_LONG];
    sched_req_t qs[IF_STREAMS], ql;
    rec_t *rl;                 /* the long prompt's record */
    int32_t first;             /* L's index of the first step after it arrived */
} interference_t;

static interference_t *interference_run(sched_step_fn hook, int seed)
{
    interference_t *F = calloc(1, sizeof *F);
    assert_non_null(F);
    sched_config_t c = cfg_make(16, 512, 0, 1);
    sched_config_t d;
    sched_config_default(&d);
    c.step_budget_ms = SCHED_STEP_BUDGET_AUTO;
    assert_true(c.step_min_chunk == d.step_min_chunk && c.step_budget_factor == d.step_budget_factor);
    F->R = run_new(g_stories, &c);
    F->L = calloc(1, sizeof *F->L);
    assert_non_null(F->L);
    sched_set_step_hook(F->R->s, hook, F->L);
    for (int i = 0; i < IF_STREAMS; i++) {
        make_prompt(F->sp[i], 8, seed + 9 * i);
        F->qs[i] = req_greedy((uint64_t)(10 + i), 1, F->sp[i], 8, 100, true);
        submit(F->R, &F->qs[i]);
    }
    for (int i = 0; i < 20; i++)
        step(F->R);
    make_prompt(F->lp, IF_LONG, seed + 400);
    F->ql = req_greedy(30, 1, F->lp, IF_LONG, 2, true);
    F->rl = submit(F->R, &F->ql);
    F->first = F->L->n;
    while (F->rl->n_tok == 0 && F->L->n < BLOG_STEPS)
        step(F->R);
    return F;
}

/* Runs the rest and frees. */
static void interference_free(interference_t *F)
{
    drive(F->R);
    free(F->L);
    run_free(&F->R);
    free(F);
}

/* The 1.1B Q4_K_M shape on 2 Zen 5 cores (docs/BATCHING.md, "Can both
 * halves of the interference bar hold at once?"): every row, decode or
 * prefill, ~2.4 ms of compute on a ~3 ms base, so 8 decode rows take
 * ~22 ms alone and a 16-row chunk beside them makes a step 2.7x that. */
#define W1B_COST(d, p, a) (3000.0 + 2400.0 * ((d) + (p)) + 0.001 * (double)(a))
static double w1b_hook(void *ud, const sched_step_info_t *in)
{
    (void)blog_hook(ud, in); /* logs the step (its bk_cost is not used) */
    return W1B_COST(in->n_decode, in->n_prefill, in->n_attn);
}

/* The defaults (auto, step_budget_factor, step_min_chunk) hold the
 * interference bar of issue #38 under that cost: once the model is ready,
 * every step that carries a prefill chunk beside 8 decoding streams stays
 * within 2.5x their decode-only step; chunks are never below the default
 * floor, the prompt keeps progressing every step, and its output is solo's. */
static void test_step_budget_default_bar(void **state)
{
    (void)state;
    NEED_STORIES();
    enum { N_STREAMS = IF_STREAMS, N_LONG = IF_LONG };
    sched_config_t d;
    sched_config_default(&d);
    interference_t *F = interference_run(w1b_hook, 300);
    blog_t *L = F->L;
    rec_t *rl = F->rl;
    const int32_t first = F->first;
    const double dec_only = W1B_COST(N_STREAMS, 0, 0); /* µs, attention aside */
    int32_t got = 0, n_ready = 0;
    for (int32_t i = first; i < L->n && got < N_LONG; i++) {
        const step_cost_rows_t *r = &L->st[i].rows;
        int32_t lrows = blog_rows(L, i, 30);
        assert_int_equal(r->n_decode, N_STREAMS); /* the streams decode in every step */
        assert_true(lrows > 0);                   /* and the prompt progresses in every step */
        got += lrows;
        if (got < N_LONG)
            assert_true(lrows >= d.step_min_chunk);
        if (L->st[i].target_us <= 1.0)
            continue; /* the model not ready yet: the floor */
        n_ready++;
        double t = W1B_COST(r->n_decode, r->n_prefill, r->n_attn);
        if (t > 2.5 * dec_only)
            fail_msg("step %d: %d prefill rows beside %d decode rows take %.1f ms, %.2fx the decode-only step",
                     i, r->n_prefill, r->n_decode, t / 1000.0, t / dec_only);
    }
    assert_int_equal(got, N_LONG);
    assert_true(n_ready >= 10);
    drive(F->R);
    rec_t solo;
    run_solo(g_stories, &F->ql, &solo);
    assert_same_output(rl, &solo, "default step budget");
    interference_free(F);
}

/* Decode rows that cost less beside a prefill chunk than alone (they share
 * the weight read with it): 5 ms each alone, 2 ms in a mixed step. */
static double cheap_dec_cost(const step_cost_rows_t *r)
{
    return 10000.0 + (r->n_prefill > 0 ? 2000.0 : 5000.0) * r->n_decode + 3700.0 * r->n_prefill;
}

static double cheap_dec_hook(void *ud, const sched_step_info_t *in)
{
    (void)blog_hook(ud, in);
    step_cost_rows_t r = {in->n_decode, in->n_prefill, in->n_attn};
    return cheap_dec_cost(&r);
}

/* The auto target stays step_budget_factor x the decode-only step the
 * streams saw before the prompt (not the decode rows' cheaper share of a
 * mixed step, which the whole-step fit drifts to during a long prefill),
 * and the chunks grow into the room the cheaper decode rows leave. */
static void test_step_budget_decode_target(void **state)
{
    (void)state;
    NEED_STORIES();
    sched_config_t d;
    sched_config_default(&d);
    interference_t *F = interference_run(cheap_dec_hook, 500);
    blog_t *L = F->L;
    const int32_t first = F->first;
    const step_cost_rows_t dec = {IF_STREAMS, 0, 0};
    const double want = d.step_budget_factor * cheap_dec_cost(&dec);
    int32_t n_ready = 0, max_rows = 0;
    for (int32_t i = first; i < L->n; i++) {
        int32_t lrows = blog_rows(L, i, 30);
        if (lrows == 0 || L->st[i].target_us <= 1.0)
            continue;
        n_ready++;
        max_rows = lrows > max_rows ? lrows : max_rows;
        if (fabs(L->st[i].target_us - want) > 0.01 * want)
            fail_msg("step %d: target %.1f ms, want %.1f (%.1fx the decode-only step)", i,
                     L->st[i].target_us / 1000.0, want / 1000.0, d.step_budget_factor);
        assert_true(cheap_dec_cost(&L->st[i].rows) <= want * 1.01);
    }
    assert_true(n_ready >= 10);
    assert_true(max_rows > d.step_min_chunk);
    interference_free(F);
}

/* The request mix of test_batched_equals_solo with 4 slots (so requests are
 * admitted while others decode) under the time budget: synthetic costs with
 * a 1-token floor and a target that fits few rows, synthetic auto, and the
 * measured times with the defaults: every output == solo. */
static void test_step_budget_outputs(void **state)
{
    (void)state;
    NEED_STORIES();
    const int n = 12;
    job_t *jobs = make_mix(g_stories, n, false);
    for (int v = 0; v < 3; v++) {
        sched_config_t c = cfg_make(4, 128, 0, 1);
        c.step_budget_ms = v == 0 ? 11 : SCHED_STEP_BUDGET_AUTO;
        c.step_min_chunk = v == 0 ? 1 : v == 1 ? 8 : 64;
        run_t *R = run_new(g_stories, &c);
        blog_t *L = calloc(1, sizeof *L);
        assert_non_null(L);
        if (v < 2)
            sched_set_step_hook(R->s, blog_hook, L);
        for (int i = 0; i < n; i++)
            submit(R, &jobs[i].req);
        drive(R);
        for (int i = 0; i < n; i++)
            assert_same_output(&R->r[i], &jobs[i].solo, v == 2 ? "measured budget" : "synthetic budget");
        if (v == 0) { /* 11 ms: the decode rows and at most a few prefill rows */
            int32_t small = 0;
            for (int32_t i = 0; i < L->n && i < BLOG_STEPS; i++)
                small += L->st[i].rows.n_decode > 0 && L->st[i].rows.n_prefill > 0 &&
                         L->st[i].rows.n_prefill <= 2;
            assert_true(small > 0);
        }
        free(L);
        run_free(&R);
    }
    free(jobs);
}

/* One decoding stream keeps the time budget on; a 1 ms target lets each
 * step carry only the floor chunk (16 rows) of the best prefill. */
static void test_prefill_priority(void **state)
{
    (void)state;
    NEED_STORIES();
    enum { FLOOR = 16, NL = 300, NH = 100 };
    for (int aging = 0; aging < 2; aging++) {
        sched_config_t c = cfg_make(8, 128, 0, 1);
        c.step_budget_ms = 1;
        c.step_min_chunk = FLOOR;
        c.prefill_age_steps = aging ? 3 : 1000;
        run_t *R = run_new(g_stories, &c);
        blog_t *L = calloc(1, sizeof *L);
        assert_non_null(L);
        sched_set_step_hook(R->s, blog_hook, L);
        int32_t ps[8], pl[NL], ph[NH + NL];
        const int32_t nh = aging ? NH + NL : NH;
        make_prompt(ps, 8, 3);
        make_prompt(pl, NL, 40);
        make_prompt(ph, nh, 90);
        sched_req_t qs = req_greedy(1, 1, ps, 8, 120, true);
        sched_req_t ql = req_greedy(2, 2, pl, NL, 3, true);
        sched_req_t qh = req_greedy(3, 0, ph, nh, 3, true);
        submit(R, &qs);
        step(R); /* the stream's prompt */
        submit(R, &ql);
        for (int i = 0; i < 3; i++)
            step(R); /* the low tier's prefill is under way */
        int32_t before = L->n;
        assert_int_equal(blog_rows(L, before - 1, 2), FLOOR);
        submit(R, &qh);
        drive(R);
        /* the next step's prefill rows are the high tier's; the low one pauses */
        assert_int_equal(blog_rows(L, before, 3), FLOOR);
        assert_int_equal(blog_rows(L, before, 2), 0);
        int32_t n_low = 3 * FLOOR, n_high = 0, pause = 0, max_pause = 0;
        bool low_during_high = false;
        for (int32_t i = before; i < L->n; i++) {
            int32_t lr = blog_rows(L, i, 2), hr = blog_rows(L, i, 3);
            bool high_pending = n_high < nh;
            n_low += lr;
            n_high += hr;
            if (lr == 0 && n_low < NL && hr > 0)
                pause++;
            else
                pause = 0;
            max_pause = pause > max_pause ? pause : max_pause;
            if (lr > 0 && high_pending)
                low_during_high = true;
        }
        /* the paused prefill kept its KV: every prompt row computed once */
        assert_int_equal(n_low, NL);
        assert_int_equal(n_high, nh);
        assert_int_equal(stats(R).preemptions, 0);
        if (aging) {
            /* two tiers to climb, 3 steps each */
            assert_true(max_pause <= 2 * 3);
            assert_true(low_during_high);
        } else {
            assert_false(low_during_high); /* paused until the high tier's prompt was done */
            assert_int_equal(max_pause, (NH + FLOOR - 1) / FLOOR);
        }
        rec_t solo;
        run_solo(g_stories, &ql, &solo);
        assert_same_output(&R->r[1], &solo, "paused low tier");
        run_solo(g_stories, &qh, &solo);
        assert_same_output(&R->r[2], &solo, "high tier");
        free(L);
        run_free(&R);
    }
}

/* A low-tier and a high-tier request of one run (ql → rl, qh → rh) each
 * generated what they generate alone (`what`: the low one's situation). */
static void assert_both_solo(const sched_req_t *ql, const rec_t *rl, const sched_req_t *qh, const rec_t *rh,
                             const char *what)
{
    rec_t solo;
    run_solo(g_stories, ql, &solo);
    assert_same_output(rl, &solo, what);
    run_solo(g_stories, qh, &solo);
    assert_same_output(rh, &solo, "high tier");
}

/* Preemption of a prefill by a higher tier at chunk granularity: with no
 * stream decoding, a low-tier prompt prefills at the whole token budget (MBT
 * rows a step). A high-tier prompt submitted between two of its steps takes
 * the very next step alone (the low tier's rows pause there, their K/V kept)
 * and draws its first token in it, while the low prompt is still
 * prefilling; the low prompt resumes afterwards. Counted in steps, with the
 * token budget only and with the time budget (auto). */
static void test_priority_first_token(void **state)
{
    (void)state;
    NEED_STORIES();
    enum { MBT = 64, NL = 400, NH = 16 };
    for (int budget = 0; budget < 2; budget++) {
        sched_config_t c = cfg_make(8, MBT, 0, 1);
        c.step_budget_ms = budget ? SCHED_STEP_BUDGET_AUTO : 0;
        run_t *R = run_new(g_stories, &c);
        blog_t *L = calloc(1, sizeof *L);
        assert_non_null(L);
        sched_set_step_hook(R->s, blog_hook, L);
        int32_t pl[NL], ph[NH];
        make_prompt(pl, NL, 40);
        make_prompt(ph, NH, 90);
        sched_req_t ql = req_greedy(2, 2, pl, NL, 3, true);
        sched_req_t qh = req_greedy(3, 0, ph, NH, 3, true);
        rec_t *rl = submit(R, &ql);
        step(R);
        step(R);
        assert_int_equal(blog_rows(L, 1, 2), MBT); /* alone: full steps */
        const int64_t at = R->step;                /* steps done before the arrival */
        const int32_t before = L->n;
        rec_t *rh = submit(R, &qh);
        drive(R);
        /* the next step holds the high tier's prompt alone and gives its first token */
        assert_int_equal(blog_rows(L, before, 3), NH);
        assert_int_equal(blog_rows(L, before, 2), 0);
        assert_int_equal(rh->first_step, at + 1);
        /* the low prompt was still prefilling then and went on afterwards */
        assert_true(rl->first_step > at + 1);
        int32_t n_low = 0, low_after = 0;
        for (int32_t i = 0; i < L->n && i < BLOG_STEPS; i++) {
            n_low += blog_rows(L, i, 2);
            low_after += i > before ? blog_rows(L, i, 2) : 0;
        }
        assert_int_equal(n_low, NL); /* every prompt row computed once: its K/V was kept */
        assert_true(low_after > 0);
        assert_int_equal(stats(R).preemptions, 0);
        assert_both_solo(&ql, rl, &qh, rh, "paused low tier");
        free(L);
        run_free(&R);
    }
}

/* ---- preemption at a layer boundary (sched_preempt_offer) ----------------- */

/* The armed hook's log: it plays a better tier's SUBMIT arriving while the
 * step runs, at arming number fire_at (every arming when fire_at < 0). */
typedef struct armlog {
    run_t *R;
    int32_t fire_at;
    int32_t n_armed;           /* armings seen */
    int32_t n_fired;           /* offers that stopped the step */
    int64_t armed_step[64];    /* R->step of each arming */
} armlog_t;

static void arm_hook(void *ud, sched_t *s)
{
    armlog_t *A = ud;
    if (A->n_armed < 64)
        A->armed_step[A->n_armed] = A->R->step;
    if (A->fire_at < 0 || A->n_armed == A->fire_at) {
        bool stopped = sched_preempt_offer(sched_preempt_word(s), 0);
        assert_true(stopped);
        /* a second offer for the same step changes nothing */
        assert_false(sched_preempt_offer(sched_preempt_word(s), 0));
        A->n_fired++;
    }
    A->n_armed++;
}

/* With nothing decoding, a low-tier 400-token prompt prefills 64 rows a
 * step. In its third step a high-tier request "arrives" (the armed hook
 * offers priority 0): the forward pass stops at its first check, inside
 * the first layer (the progress counter did not move), nothing of the step
 * counts, and no block is published. The high-tier prompt submitted then
 * (as the worker's loop does once the step returns) is the whole next step
 * and draws its first token there. The low prompt's rows are each computed
 * once in completed steps, its output equals running alone, and the pool
 * ends holding exactly the cached blocks of the same run with preemption
 * off. A priority that does not beat the bar never stops a step; neither
 * does anything once the step has decode rows. */
static void test_priority_stop_step(void **state)
{
    (void)state;
    NEED_STORIES();
    enum { MBT = 64, NL = 400, NH = 16 };
    int32_t pl[NL], ph[NH];
    make_prompt(pl, NL, 40);
    make_prompt(ph, NH, 90);
    sched_req_t ql = req_greedy(2, 2, pl, NL, 3, true);
    sched_req_t qh = req_greedy(3, 0, ph, NH, 3, true);
    const int32_t n_layer = g_stories->model->cfg.n_layer;
    assert_true(n_layer >= 2);
    int32_t cached_end[2];
    for (int on = 0; on < 2; on++) {
        sched_config_t c = cfg_make(8, MBT, 0, 1);
        c.prefill_max_stops = on ? 2 : 0;
        run_t *R = run_new(g_stories, &c);
        blog_t *L = calloc(1, sizeof *L);
        assert_non_null(L);
        sched_set_step_hook(R->s, blog_hook, L);
        armlog_t A = {.R = R, .fire_at = 2};
        sched_set_armed_hook(R->s, arm_hook, &A);
        _Atomic uint64_t layers = 0;
        sched_set_progress(R->s, &layers);
        rec_t *rl = submit(R, &ql);
        step(R);
        step(R);
        assert_int_equal(blog_rows(L, 1, 2), MBT);
        /* a low-tier offer between steps does not beat the next step's bar (2)... */
        assert_false(sched_preempt_offer(sched_preempt_word(R->s), 2));
        sched_stats_t st0 = stats(R);
        kv_pool_stats_t ps0, ps1;
        kv_pool_stats(sched_kv_pool(R->s), &ps0);
        uint64_t l0 = atomic_load(&layers);
        int rc = step(R); /* ...the hook's priority 0 does (when on) */
        assert_true(rc > 0);
        sched_stats_t st1 = stats(R);
        kv_pool_stats(sched_kv_pool(R->s), &ps1);
        if (on) {
            assert_int_equal(A.n_fired, 1);
            assert_int_equal(st1.steps_stopped, 1);
            assert_int_equal(st1.steps, st0.steps);
            assert_int_equal(atomic_load(&layers) - l0, 0); /* stopped inside the first layer */
            assert_int_equal(L->n, 2);                      /* the step hook saw no step */
            /* no block published; the blocks reserved for the low prompt
             * (at admission) stay with it, to be written when its rows run
             * again: none taken, none leaked */
            assert_int_equal(ps1.n_registered, ps0.n_registered);
            assert_int_equal(ps1.n_cached_total, ps0.n_cached_total);
            assert_int_equal(ps1.n_free, ps0.n_free);
            assert_int_equal(st1.kv_blocks_used, st0.kv_blocks_used);
            assert_int_equal(st1.prompt_tokens, st0.prompt_tokens);
            assert_int_equal(sched_check(R->s), 0);
        } else {
            assert_int_equal(A.n_armed, 0); /* prefill_max_stops 0: never armed */
            assert_int_equal(st1.steps_stopped, 0);
            assert_int_equal(atomic_load(&layers) - l0, (uint64_t)n_layer);
        }
        const int64_t at = R->step;
        const int32_t before = L->n;
        rec_t *rh = submit(R, &qh);
        drive(R);
        assert_int_equal(blog_rows(L, before, 3), NH); /* the high prompt alone, next step */
        assert_int_equal(blog_rows(L, before, 2), 0);
        assert_int_equal(rh->first_step, at + 1);
        int32_t n_low = 0;
        for (int32_t i = 0; i < L->n && i < BLOG_STEPS; i++)
            n_low += blog_rows(L, i, 2);
        assert_int_equal(n_low, NL); /* every prompt row computed once in a completed step */
        assert_int_equal(stats(R).steps_stopped, on ? 1u : 0u);
        assert_int_equal(stats(R).preemptions, 0);
        /* armed only at the low prompt's prefill-only steps: not at the
         * high one's (tier 0: nothing beats it), nor while its stream
         * decodes beside the low prompt's chunks (decode rows) */
        assert_true(rh->final_step > at + 1);
        for (int32_t i = 0; i < A.n_armed && i < 64; i++)
            assert_true(A.armed_step[i] <= at || A.armed_step[i] > rh->final_step);
        assert_true(A.n_armed >= (on ? 3 : 0));
        cached_end[on] = stats(R).kv_blocks_cached;
        assert_both_solo(&ql, rl, &qh, rh, "stopped low tier");
        free(L);
        run_free(&R);
    }
    assert_int_equal(cached_end[1], cached_end[0]);
}

/* The anti-starvation bound: with a better tier "arriving" during every
 * armed step, a low-tier prefill is stopped at most prefill_max_stops (K)
 * times in a row; then a step of it is not armed and completes, so the
 * prompt finishes with at most K stopped steps per completed one. An offer
 * made between steps is remembered and stops the next armed step before its
 * forward pass starts (no layer runs). The output equals running alone. */
static void test_priority_stop_bound(void **state)
{
    (void)state;
    NEED_STORIES();
    enum { MBT = 64, NL = 300, K = 2 };
    int32_t pl[NL];
    make_prompt(pl, NL, 10);
    sched_req_t ql = req_greedy(5, 1, pl, NL, 4, true); /* normal tier: priority 0 beats it */
    sched_config_t c = cfg_make(4, MBT, 0, 1);
    c.prefill_max_stops = K;
    run_t *R = run_new(g_stories, &c);
    armlog_t A = {.R = R, .fire_at = -1};
    sched_set_armed_hook(R->s, arm_hook, &A);
    _Atomic uint64_t layers = 0;
    sched_set_progress(R->s, &layers);
    rec_t *rl = submit(R, &ql);
    int32_t run = 0, max_run = 0, n_done = 0;
    while (sched_busy(R->s)) {
        uint64_t stopped0 = stats(R).steps_stopped;
        step(R);
        assert_true(R->step < MAX_STEPS);
        assert_int_equal(sched_check(R->s), 0);
        if (stats(R).steps_stopped != stopped0) {
            run++;
            max_run = run > max_run ? run : max_run;
        } else {
            run = 0;
            n_done++;
        }
    }
    const int32_t n_prefill = (NL + MBT - 1) / MBT; /* its prefill-only steps (the last one samples) */
    assert_int_equal(max_run, K);
    assert_int_equal((int32_t)stats(R).steps_stopped, K * n_prefill);
    assert_int_equal(A.n_fired, K * n_prefill);
    check_records(R);
    check_clean(R);
    rec_t solo;
    run_solo(g_stories, &ql, &solo);
    assert_same_output(rl, &solo, "low tier stopped K times per step");
    run_free(&R);

    /* an offer between steps stops the next armed step before any layer */
    c.prefill_max_stops = 1;
    R = run_new(g_stories, &c);
    sched_set_progress(R->s, &layers);
    rl = submit(R, &ql);
    step(R);
    uint64_t l0 = atomic_load(&layers);
    assert_false(sched_preempt_offer(sched_preempt_word(R->s), 1)); /* not armed: remembered, not better */
    assert_false(sched_preempt_offer(sched_preempt_word(R->s), 0)); /* remembered: better than the bar (1) */
    step(R);
    assert_int_equal(stats(R).steps_stopped, 1);
    assert_int_equal(atomic_load(&layers), l0);
    step(R); /* nothing remembered now: the step runs */
    assert_int_equal(stats(R).steps_stopped, 1);
    assert_int_equal(atomic_load(&layers) - l0, (uint64_t)g_stories->model->cfg.n_layer);
    drive(R);
    assert_same_output(rl, &solo, "low tier after a remembered offer");
    run_free(&R);
}

int main(int argc, char **argv)
{
    (void)argc;
    /* PAGODA_TEST_FILTER=test_window* runs a subset while iterating */
    if (getenv("PAGODA_TEST_FILTER"))
        cmocka_set_test_filter(getenv("PAGODA_TEST_FILTER"));
    /* passive OpenMP waits, as pagoda-worker: spinning barriers make the
     * 2-thread runs 5-10x slower on a shared machine (forward.h) */
    wait_policy_reexec(argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batched_equals_solo),
        cmocka_unit_test(test_prefix_hit_equals_miss),
        cmocka_unit_test(test_preempted_equals_solo),
        cmocka_unit_test(test_seeded_sampling_stable),
        cmocka_unit_test(test_cancel_phases),
        cmocka_unit_test(test_deadline),
        cmocka_unit_test(test_admission_order),
        cmocka_unit_test(test_priority_preemption),
        cmocka_unit_test(test_stop_eos_length),
        cmocka_unit_test(test_resume),
        cmocka_unit_test(test_resume_seeded),
        cmocka_unit_test(test_abort_all),
        cmocka_unit_test(test_n_choices),
        cmocka_unit_test(test_n_choices_cancel),
        cmocka_unit_test(test_invalid_submissions),
        cmocka_unit_test(test_zoo_batched_preempted),
        cmocka_unit_test(test_kv_type_auto),
        cmocka_unit_test(test_window_long_generation),
        cmocka_unit_test(test_step_budget_chunks),
        cmocka_unit_test(test_step_budget_outputs),
        cmocka_unit_test(test_step_budget_default_bar),
        cmocka_unit_test(test_step_budget_decode_target),
        cmocka_unit_test(test_prefill_priority),
        cmocka_unit_test(test_priority_first_token),
        cmocka_unit_test(test_priority_stop_step),
        cmocka_unit_test(test_priority_stop_bound),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
