/* Tests for speculative decoding (worker/spec.c, the verify path in
 * worker/sched.c), on real models: stories260K and a random-weight model of
 * every architecture pagoda-mkmodel writes.
 *
 *   n-gram drafter          prompt lookup proposes what followed the latest
 *                           earlier occurrence (table);
 *   draft length            adapts to acceptance: long when drafts hit,
 *                           off (with rare probes) when they never do;
 *   greedy on == off        every architecture, 1 and 32 streams, a pool
 *                           small enough to preempt, every prompt submitted
 *                           twice (prefix-cache hits): the n-gram drafter,
 *                           an oracle (the known greedy continuation: every
 *                           draft accepted) and a drafter that is always
 *                           wrong give the tokens of speculation off, and
 *                           leave no block referenced;
 *   seeded sampling         on == off token for token (every draw is the
 *                           one the sequence makes without speculation);
 *   distribution            chi-square: next-token counts of speculative
 *                           sampling (seeds 1..N) against non-speculative
 *                           sampling (other seeds);
 *   grammar                 drafts stop at the first token the grammar
 *                           refuses; the output is unchanged;
 *   opt-out, compute-bound  a no_spec request gets no drafts; a step of more
 *                           than spec_max_rows rows gets none.
 *
 * Nothing here depends on the machine's speed. */
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
#include <unistd.h>

#include "common/log.h"
#include "tests/support/support.h"
#include "worker/engine.h"
#include "worker/sched.h"
#include "worker/spec.h"

#define MAX_REQ 64
#define MAX_GEN 128
#define MAX_PROMPT 96

/* ---- harness ---------------------------------------------------------------- */

typedef struct out {
    int32_t tok[MAX_GEN];
    int32_t n_tok;
    char text[4096];
    size_t text_len;
    enum sched_finish finish;
    int n_final;
} out_t;

typedef struct run {
    out_t o[2 * MAX_REQ];      /* request id i + 1 → o[i] */
    int bad;                   /* events for unknown ids, or after a final one */
} run_t;

static void on_event(void *ud, const sched_event_t *ev)
{
    run_t *R = ud;
    if (ev->id < 1 || ev->id > 2 * MAX_REQ) {
        R->bad++;
        return;
    }
    out_t *o = &R->o[ev->id - 1];
    if (o->n_final)
        R->bad++;
    for (int32_t i = 0; i < ev->n_tokens && o->n_tok < MAX_GEN; i++)
        o->tok[o->n_tok++] = ev->tokens[i];
    if (ev->text_len && o->text_len + ev->text_len < sizeof o->text) {
        memcpy(o->text + o->text_len, ev->text, ev->text_len);
        o->text_len += ev->text_len;
    }
    if (ev->finish != SCHED_FINISH_NONE) {
        o->finish = ev->finish;
        o->n_final++;
    }
}

/* The greedy continuations a run without speculation gave: the oracle. */
typedef struct oracle {
    const int32_t *const *prompt; /* (n) per request */
    const int32_t *n_prompt;
    const out_t *ref;             /* (n) */
    int n;
    int32_t vocab;
    bool wrong;                   /* propose a token that is never the right one */
    int32_t junk;                 /* >= 0: propose this token, always */
} oracle_t;

static int32_t oracle_draft(void *ud, uint64_t id, int32_t index, const int32_t *tokens, int32_t n_tokens,
                            int32_t max_draft, int32_t *out)
{
    const oracle_t *o = ud;
    int i = (int)((id - 1) % (uint64_t)o->n);
    int32_t k = 0;
    if (o->junk >= 0) {
        for (; k < max_draft; k++)
            out[k] = o->junk;
        return k;
    }
    for (int32_t p = n_tokens; k < max_draft; p++) {
        int32_t g = p - o->n_prompt[i];
        if (g < 0 || g >= o->ref[i].n_tok)
            break;
        out[k++] = o->wrong ? (o->ref[i].tok[g] + 1) % o->vocab : o->ref[i].tok[g];
    }
    return k;
}

static int64_t g_big_steps; /* steps of more than spec_max_rows rows (no drafts) */

/* Runs reqs[0..n) on a new scheduler (drafter: NULL = the configured mode),
 * then, with twice, the same prompts again (ids n+1..2n: prefix-cache hits).
 * Checks the pool is clean at the end; returns the stats. */
static sched_stats_t run_reqs(const engine_t *e, const sched_config_t *c, const sched_req_t *reqs, int n,
                              oracle_t *drafter, bool twice, run_t *R)
{
    memset(R, 0, sizeof *R);
    char err[256] = "";
    sched_t *s = sched_new(e->model, e->tok, c, on_event, R, err, sizeof err);
    if (!s)
        fail_msg("sched_new: %s", err);
    if (drafter)
        sched_set_drafter(s, oracle_draft, drafter);
    for (int round = 0; round < (twice ? 2 : 1); round++) {
        for (int i = 0; i < n; i++) {
            sched_req_t q = reqs[i];
            q.id = (uint64_t)(round * n + i + 1);
            if (sched_submit(s, &q, err, sizeof err) != 0)
                fail_msg("submit: %s", err);
        }
        sched_stats_t before;
        sched_stats(s, &before);
        for (int steps = 0; sched_busy(s); steps++) {
            int rows = sched_step(s);
            assert_true(rows >= 0);
            assert_true(steps < 100000);
            sched_stats_t now;
            sched_stats(s, &now);
            /* drafts only in steps within the row limit */
            if (now.spec_draft_tokens > before.spec_draft_tokens)
                assert_true(rows <= c->spec_max_rows);
            else if (rows > c->spec_max_rows)
                g_big_steps++;
            before = now;
        }
    }
    assert_int_equal(sched_check(s), 0);
    sched_stats_t st;
    sched_stats(s, &st);
    assert_int_equal(st.kv_blocks_used, 0);
    assert_int_equal(R->bad, 0);
    for (int i = 0; i < (twice ? 2 : 1) * n; i++)
        assert_int_equal(R->o[i].n_final, 1);
    sched_free(&s);
    return st;
}

static void assert_same(const out_t *a, const out_t *b, const char *what, int i)
{
    if (a->n_tok != b->n_tok || memcmp(a->tok, b->tok, (size_t)a->n_tok * sizeof *a->tok) != 0 ||
        a->text_len != b->text_len || memcmp(a->text, b->text, a->text_len) != 0 || a->finish != b->finish)
        fail_msg("%s: request %d differs (%d vs %d tokens, finish %d vs %d)", what, i, a->n_tok, b->n_tok,
                 (int)a->finish, (int)b->finish);
}

static const char *STORY =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun. "
    "One day, she saw a big red ball in the park. She wanted to play with the ball, so she ran to it. "
    "Lily and her mom went to the park every day. They played with the ball and had fun. "
    "The sun was warm and the birds sang. Lily was happy, and her mom was happy too.";

static engine_t *g_stories;
static int32_t *g_text;
static int32_t g_n_text;

static int group_setup(void **state)
{
    (void)state;
    log_init("test_spec", LOG_WARN);
    const char *p = support_shared_model("stories260K.gguf");
    if (!p)
        return 0;
    char err[256];
    g_stories = engine_load(p, err, sizeof err);
    if (!g_stories)
        return -1;
    g_n_text = engine_prompt_text(g_stories, STORY, strlen(STORY), &g_text, err, sizeof err);
    return g_n_text > 40 ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    free(g_text);
    engine_free(&g_stories);
    return 0;
}

#define NEED_STORIES()                                                          \
    do {                                                                        \
        if (!g_stories)                                                         \
            skip();                                                             \
    } while (0)

/* Requests 0..n-1: prompts of 8..50 tokens cut from the story at different
 * offsets (the n-gram drafter finds the story's repetitions), vocab-clamped
 * for models with a smaller vocabulary. */
static int32_t g_prompts[MAX_REQ][MAX_PROMPT];
static int32_t g_np[MAX_REQ];

static void make_reqs(sched_req_t *reqs, int n, int32_t vocab, int32_t max_tokens, bool ignore_eos)
{
    for (int i = 0; i < n; i++) {
        g_np[i] = 8 + (i * 7) % 43;
        for (int32_t k = 0; k < g_np[i]; k++)
            g_prompts[i][k] = g_text[(i * 5 + k) % g_n_text] % vocab;
        g_prompts[i][0] = g_text[0] % vocab; /* BOS */
        reqs[i] = (sched_req_t){.id = (uint64_t)i + 1, .priority = i % 3, .prompt = g_prompts[i],
                                .n_prompt = g_np[i], .max_tokens = max_tokens - (i % 5) * 3,
                                .ignore_eos = ignore_eos, .top_logprobs = -1};
        sampler_params_default(&reqs[i].sampling);
        reqs[i].sampling.temperature = 0;
    }
}

static sched_config_t cfg_make(int32_t max_seqs, int32_t kv_blocks, spec_mode_t mode)
{
    sched_config_t c;
    sched_config_default(&c);
    c.max_seqs = max_seqs;
    c.max_batch_tokens = 64;
    c.kv_blocks = kv_blocks;
    c.block_size = 16;
    c.n_threads = 2;
    c.spec = mode;
    c.spec_max_rows = 512; /* drafts beside 32 decode rows too (the default turns them off) */
    c.step_budget_ms = 0;  /* step counts here compare modes: chunks must not follow measured times */
    return c;
}

/* ---- unit: drafter and draft length --------------------------------------------- */

static void test_ngram_draft(void **state)
{
    (void)state;
    static const struct {
        int32_t toks[16];
        int32_t n, max;
        int32_t want[8];
        int32_t n_want;
    } T[] = {
        /* last 4 (3 4 5 6) seen before: propose what followed (7 8 ...) */
        {{1, 3, 4, 5, 6, 7, 8, 9, 2, 3, 4, 5, 6}, 13, 3, {7, 8, 9}, 3},
        /* latest occurrence wins: "1 2" → 9 (not 5) */
        {{1, 2, 5, 0, 1, 2, 9, 7, 1, 2}, 10, 2, {9, 7}, 2},
        /* the continuation may run into the key itself */
        {{4, 4, 4, 4}, 4, 4, {4}, 1},
        /* only a 1-token match: below SPEC_NGRAM_MIN, nothing */
        {{1, 2, 3, 9, 3}, 5, 4, {0}, 0},
        /* too short */
        {{7}, 1, 4, {0}, 0},
        /* max_draft 0 */
        {{1, 2, 1, 2}, 4, 0, {0}, 0},
    };
    for (size_t t = 0; t < sizeof T / sizeof T[0]; t++) {
        int32_t out[SPEC_MAX_DRAFT];
        int32_t n = spec_ngram_draft(T[t].toks, T[t].n, T[t].max, out);
        assert_int_equal(n, T[t].n_want);
        for (int32_t i = 0; i < n; i++)
            assert_int_equal(out[i], T[t].want[i]);
    }
    spec_mode_t m;
    assert_int_equal(spec_mode_parse("ngram", &m), 0);
    assert_int_equal(m, SPEC_NGRAM);
    assert_int_equal(spec_mode_parse("Ngram", &m), -1);
    assert_string_equal(spec_mode_name(SPEC_OFF), "off");
}

static void test_draft_length_adapts(void **state)
{
    (void)state;
    spec_seq_t q = {0};
    int32_t k0 = spec_seq_len(&q, 8);
    assert_true(k0 >= 2); /* optimistic start */
    for (int i = 0; i < 30; i++)
        spec_seq_update(&q, 8, 8);
    assert_int_equal(spec_seq_len(&q, 8), 8); /* always accepted: the longest */
    spec_seq_t w = {0};
    for (int i = 0; i < 30; i++)
        spec_seq_update(&w, spec_seq_len(&w, 8) > 0 ? 1 : 0, 0);
    /* never accepted: off, with a one-token probe every SPEC_PROBE_EVERY steps */
    int n_draft_steps = 0;
    for (int i = 0; i < 4 * SPEC_PROBE_EVERY; i++) {
        int32_t k = spec_seq_len(&w, 8);
        assert_true(k <= 1);
        n_draft_steps += k;
    }
    assert_int_equal(n_draft_steps, 4);
    assert_true(spec_seq_rate(&w) < SPEC_MIN_USE);
}

/* ---- greedy: every architecture, on == off ------------------------------------ */

/* Speculation off, n-gram, oracle and always-wrong drafts on e: 1 stream
 * (n_solo requests in turn, each prompt twice: prefix-cache hits), 32 streams in
 * a pool that preempts, and 32 streams each prompt twice. */
static void greedy_all_modes(const engine_t *e, const char *name, int32_t max_tokens, int n_solo)
{
    static sched_req_t reqs[32];
    static run_t ref, R;
    const int32_t vocab = e->model->cfg.vocab;
    static const struct {
        int streams, blocks;
        bool twice;
    } CFG[] = {{1, 256, true}, {32, 16, false}, {32, 512, true}};
    /* the random-weight models: 1 stream with hits and 32 preempting streams (their
     * 32-stream prefix hits add nothing stories260K's do not check) */
    size_t n_cfg = n_solo == 8 ? 3 : 2;
    for (size_t k = 0; k < n_cfg; k++) {
        const int streams = CFG[k].streams;
        const bool twice = CFG[k].twice;
        int n = streams == 1 ? n_solo : 32;
        make_reqs(reqs, n, vocab, twice ? max_tokens : 40, true);
        /* tight: 16 blocks of 16 positions for 32 sequences of up to 90 */
        sched_config_t c = cfg_make(streams, CFG[k].blocks, SPEC_OFF);
        sched_stats_t st0 = run_reqs(e, &c, reqs, n, NULL, twice, &ref);
        if (!twice && model_kv_window(&e->model->cfg) == 0) /* a window releases blocks */
            assert_true(st0.preemptions > 0);
        const int32_t *pp[32];
        for (int i = 0; i < n; i++)
            pp[i] = g_prompts[i];
        oracle_t o = {.prompt = pp, .n_prompt = g_np, .ref = ref.o, .n = n, .vocab = vocab, .junk = -1};
        for (int mode = 0; mode < 3; mode++) {
            sched_config_t cs = cfg_make(streams, CFG[k].blocks, SPEC_NGRAM);
            o.wrong = mode == 2;
            sched_stats_t st = run_reqs(e, &cs, reqs, n, mode ? &o : NULL, twice, &R);
            char what[128];
            snprintf(what, sizeof what, "%s, %d streams, %s", name, streams,
                     (const char *[]){"ngram", "oracle", "always wrong"}[mode]);
            for (int i = 0; i < (twice ? 2 : 1) * n; i++)
                assert_same(&R.o[i], &ref.o[i], what, i);
            fprintf(stderr, "%s: %llu drafts, %llu/%llu accepted, %llu steps (off: %llu), %llu preemptions\n",
                    what, (unsigned long long)st.spec_drafts, (unsigned long long)st.spec_accepted_tokens,
                    (unsigned long long)st.spec_draft_tokens, (unsigned long long)st.steps,
                    (unsigned long long)st0.steps, (unsigned long long)st.preemptions);
            if (twice)
                assert_true(st.prefix_hit_tokens > 0);
            if (mode == 1) { /* the oracle is always right: fewer steps */
                assert_true(st.spec_draft_tokens > 0);
                /* every draft accepted: a sequence preempted mid-run recomputes, but
                 * its drafts still come from the greedy continuation */
                assert_int_equal(st.spec_accepted_tokens, st.spec_draft_tokens);
                assert_true(st.steps < st0.steps);
            }
            if (mode == 2) {
                assert_true(st.spec_draft_tokens > 0);
                assert_int_equal(st.spec_accepted_tokens, 0);
            }
        }
    }
}

static void test_greedy_stories(void **state)
{
    (void)state;
    NEED_STORIES();
    greedy_all_modes(g_stories, "stories260K", 40, 8);
}

static void test_greedy_architectures(void **state)
{
    (void)state;
    NEED_STORIES(); /* its tokenizer */
    const char *b = getenv("PAGODA_BUILD");
    char bin[512], dir[] = "/tmp/pagoda-spec-XXXXXX";
    snprintf(bin, sizeof bin, "%s/pagoda-mkmodel", b ? b : "build");
    if (access(bin, X_OK) != 0)
        fail_msg("%s missing (build first)", bin);
    assert_non_null(mkdtemp(dir));
    static const char *const ARCH[][2] = {
        {"llama", ""}, {"llama", "--window 8"}, {"qwen2", ""}, {"qwen3", ""}, {"qwen2moe", ""},
        {"qwen3moe", ""}, {"gemma2", "--window 8"}, {"gemma3", "--window 8"}, {"phi3", ""},
    };
    for (size_t a = 0; a < sizeof ARCH / sizeof ARCH[0]; a++) {
        char path[600], cmd[2048], err[256];
        snprintf(path, sizeof path, "%s/m%zu.gguf", dir, a);
        snprintf(cmd, sizeof cmd,
                 "%s -o %s --arch %s %s --tokenizer-from %s --dim 64 --layers 2 --heads 4 --kv-heads 2 "
                 "--ffn 96 --expert-ffn 32 --experts 4 --ctx 256 --type Q8_0 --seed %zu > %s.log 2>&1",
                 bin, path, ARCH[a][0], ARCH[a][1], support_shared_model("stories260K.gguf"), a + 1, path);
        if (system(cmd) != 0)
            fail_msg("%s failed", cmd);
        engine_t *e = engine_load(path, err, sizeof err);
        if (!e)
            fail_msg("engine_load %s: %s", path, err);
        char name[64];
        snprintf(name, sizeof name, "%s %s", ARCH[a][0], ARCH[a][1]);
        greedy_all_modes(e, name, 24, 4);
        engine_free(&e);
        unlink(path);
        snprintf(cmd, sizeof cmd, "%s.log", path);
        unlink(cmd);
    }
    rmdir(dir);
}

/* ---- draft model -------------------------------------------------------------- */

/* The draft model dm (greedy drafts, its own KV) against speculation off, on
 * stories260K: 1 stream with prefix-cache hits, 32 streams in a pool that
 * preempts, greedy and seeded. Returns the accepted and drafted counts. */
static uint64_t g_draft_preemptions; /* in the tight-pool runs with a draft model */

static void draft_vs_off(const engine_t *dm, const char *name, bool all_accepted)
{
    static sched_req_t reqs[32];
    static run_t ref, R;
    const int32_t vocab = g_stories->model->cfg.vocab;
    static const struct {
        int streams, blocks;
        bool twice, seeded;
    } CFG[] = {{1, 256, true, false}, {32, 16, false, false}, {8, 0, false, true}};
    for (size_t k = 0; k < sizeof CFG / sizeof CFG[0]; k++) {
        int n = CFG[k].streams == 1 ? 6 : CFG[k].streams;
        make_reqs(reqs, n, vocab, 40, true);
        for (int i = 0; CFG[k].seeded && i < n; i++) {
            reqs[i].sampling.temperature = 0.8f;
            reqs[i].sampling.has_seed = true;
            reqs[i].sampling.seed = 9 + (uint64_t)i;
        }
        sched_config_t c = cfg_make(CFG[k].streams, CFG[k].blocks, SPEC_OFF);
        sched_stats_t st0 = run_reqs(g_stories, &c, reqs, n, NULL, CFG[k].twice, &ref);
        sched_config_t cd = cfg_make(CFG[k].streams, CFG[k].blocks, SPEC_DRAFT);
        cd.draft_model = dm->model;
        sched_stats_t st = run_reqs(g_stories, &cd, reqs, n, NULL, CFG[k].twice, &R);
        char what[128];
        snprintf(what, sizeof what, "draft %s, %d streams%s", name, CFG[k].streams,
                 CFG[k].seeded ? ", seeded" : "");
        for (int i = 0; i < (CFG[k].twice ? 2 : 1) * n; i++)
            assert_same(&R.o[i], &ref.o[i], what, i);
        fprintf(stderr, "%s: %llu/%llu accepted, %llu steps (off: %llu), %llu preemptions (off: %llu)\n", what,
                (unsigned long long)st.spec_accepted_tokens, (unsigned long long)st.spec_draft_tokens,
                (unsigned long long)st.steps, (unsigned long long)st0.steps, (unsigned long long)st.preemptions,
                (unsigned long long)st0.preemptions);
        assert_true(st.spec_draft_tokens > 0);
        if (CFG[k].blocks == 16) {
            assert_true(st0.preemptions > 0);
            g_draft_preemptions += st.preemptions;
        }
        if (all_accepted && !CFG[k].seeded) /* the model drafting for itself, greedy */
            assert_int_equal(st.spec_accepted_tokens, st.spec_draft_tokens);
    }
}

static void test_draft_model(void **state)
{
    (void)state;
    NEED_STORIES();
    /* the model as its own draft: every greedy draft is right */
    draft_vs_off(g_stories, "stories260K (itself)", true);
    /* a random-weight llama with stories260K's tokenizer: mostly wrong drafts */
    const char *b = getenv("PAGODA_BUILD");
    char bin[512], dir[] = "/tmp/pagoda-draft-XXXXXX", path[600], other[600], cmd[8192], err[256];
    snprintf(bin, sizeof bin, "%s/pagoda-mkmodel", b ? b : "build");
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/d.gguf", dir);
    snprintf(other, sizeof other, "%s/o.gguf", dir);
    snprintf(cmd, sizeof cmd,
             "%s -o %s --tokenizer-from %s --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 96 --ctx 512 "
             "--type Q8_0 > %s.log 2>&1 && %s -o %s --dim 64 --layers 1 --heads 4 --ffn 96 --ctx 256 --type Q8_0 "
             ">> %s.log 2>&1",
             bin, path, support_shared_model("stories260K.gguf"), path, bin, other, path);
    if (system(cmd) != 0)
        fail_msg("%s failed", cmd);
    engine_t *dm = engine_load(path, err, sizeof err);
    engine_t *om = engine_load(other, err, sizeof err);
    assert_non_null(dm);
    assert_non_null(om);
    assert_int_equal(sched_draft_check(g_stories->model, g_stories->tok, dm->model, dm->tok, err, sizeof err), 0);
    draft_vs_off(dm, "random llama", false);
    assert_true(g_draft_preemptions > 0); /* drafting sequences were preempted and resumed */
    /* another vocabulary is refused, with a message; so is SPEC_DRAFT without a model */
    err[0] = 0;
    assert_int_equal(sched_draft_check(g_stories->model, g_stories->tok, om->model, om->tok, err, sizeof err), -1);
    assert_non_null(strstr(err, "vocabulary"));
    sched_config_t c = cfg_make(4, 0, SPEC_DRAFT);
    assert_null(sched_new(g_stories->model, g_stories->tok, &c, on_event, NULL, err, sizeof err));
    assert_non_null(strstr(err, "draft model"));
    engine_free(&dm);
    engine_free(&om);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* ---- sampling --------------------------------------------------------------------- */

static void test_seeded_sampling_same(void **state)
{
    (void)state;
    NEED_STORIES();
    static sched_req_t reqs[16];
    static run_t ref, R;
    make_reqs(reqs, 16, g_stories->model->cfg.vocab, 60, false);
    for (int i = 0; i < 16; i++) {
        reqs[i].sampling.temperature = 0.9f;
        reqs[i].sampling.top_p = i % 2 ? 0.95f : 1.0f;
        reqs[i].sampling.has_seed = true;
        reqs[i].sampling.seed = 100 + (uint64_t)i;
        reqs[i].top_logprobs = i % 3 == 0 ? 2 : -1;
    }
    sched_config_t c = cfg_make(16, 0, SPEC_OFF);
    run_reqs(g_stories, &c, reqs, 16, NULL, false, &ref);
    /* oracle = the greedy continuations: drafts that a sampled run often takes */
    static run_t greedy;
    static sched_req_t g[16];
    memcpy(g, reqs, sizeof g);
    for (int i = 0; i < 16; i++)
        g[i].sampling.temperature = 0;
    run_reqs(g_stories, &c, g, 16, NULL, false, &greedy);
    const int32_t *pp[16];
    for (int i = 0; i < 16; i++)
        pp[i] = g_prompts[i];
    oracle_t o = {.prompt = pp, .n_prompt = g_np, .ref = greedy.o, .n = 16,
                  .vocab = g_stories->model->cfg.vocab, .junk = -1};
    for (int mode = 0; mode < 2; mode++) {
        sched_config_t cs = cfg_make(16, 0, SPEC_NGRAM);
        sched_stats_t st = run_reqs(g_stories, &cs, reqs, 16, mode ? &o : NULL, false, &R);
        for (int i = 0; i < 16; i++)
            assert_same(&R.o[i], &ref.o[i], mode ? "seeded, oracle" : "seeded, ngram", i);
        fprintf(stderr, "seeded %s: %llu/%llu draft tokens accepted\n", mode ? "oracle" : "ngram",
                (unsigned long long)st.spec_accepted_tokens, (unsigned long long)st.spec_draft_tokens);
        assert_true(st.spec_accepted_tokens > 0);
    }
}

/* Upper critical value of chi-square with df degrees of freedom at
 * significance 0.001 (Wilson-Hilferty; z = 3.0902). */
static double chi2_crit_001(int df)
{
    double k = df, z = 3.0902;
    double t = 1.0 - 2.0 / (9.0 * k) + z * sqrt(2.0 / (9.0 * k));
    return k * t * t * t;
}

/* Next-token counts at the 2nd..4th generated positions (where drafts are
 * verified) of N runs with speculation (oracle drafts = the greedy
 * continuation, so some are accepted and some rejected) and seeds 1..N,
 * against N runs without speculation and seeds N+1..2N: the two samples
 * come from one distribution (chi-square test of homogeneity, bins with an
 * expected count below 5 pooled, p = 0.001). */
static void test_sampling_distribution(void **state)
{
    (void)state;
    NEED_STORIES();
    enum { N = 1024, BATCH = 64, POS = 3 };
    const int32_t V = g_stories->model->cfg.vocab;
    static sched_req_t reqs[BATCH];
    static run_t R;
    make_reqs(reqs, 1, V, 8, true);
    sched_req_t base = reqs[0];
    base.n_prompt = 20;
    base.max_tokens = 1 + POS;
    base.sampling.temperature = 1.0f;
    base.sampling.has_seed = true;
    /* the greedy continuation of the prompt: the oracle */
    sched_config_t c0 = cfg_make(1, 0, SPEC_OFF);
    static run_t greedy;
    run_reqs(g_stories, &c0, &base, 1, NULL, false, &greedy);
    base.sampling.temperature = 1.0f;
    long *cnt[2];
    for (int a = 0; a < 2; a++)
        cnt[a] = calloc((size_t)POS * (size_t)V, sizeof(long));
    uint64_t drafted = 0, accepted = 0;
    for (int arm = 0; arm < 2; arm++) {
        for (int b0 = 0; b0 < N; b0 += BATCH) {
            for (int i = 0; i < BATCH; i++) {
                reqs[i] = base;
                reqs[i].sampling.seed = (uint64_t)(arm * N + b0 + i + 1);
            }
            const int32_t *pp[BATCH];
            int32_t np[BATCH];
            static out_t refs[BATCH];
            for (int i = 0; i < BATCH; i++) {
                pp[i] = base.prompt;
                np[i] = base.n_prompt;
                refs[i] = greedy.o[0];
            }
            oracle_t o = {.prompt = pp, .n_prompt = np, .ref = refs, .n = BATCH, .vocab = V, .junk = -1};
            sched_config_t c = cfg_make(BATCH, 0, arm == 0 ? SPEC_NGRAM : SPEC_OFF);
            sched_stats_t st = run_reqs(g_stories, &c, reqs, BATCH, arm == 0 ? &o : NULL, false, &R);
            drafted += st.spec_draft_tokens;
            accepted += st.spec_accepted_tokens;
            for (int i = 0; i < BATCH; i++) {
                assert_int_equal(R.o[i].n_tok, 1 + POS);
                for (int p = 0; p < POS; p++)
                    cnt[arm][(size_t)p * V + R.o[i].tok[1 + p]]++;
            }
        }
    }
    fprintf(stderr, "speculative arm: %llu of %llu draft tokens accepted\n", (unsigned long long)accepted,
            (unsigned long long)drafted);
    assert_true(accepted > 0 && accepted < drafted); /* both branches of the rule ran */
    for (int p = 0; p < POS; p++) {
        /* pool bins whose expected count (half the total) is below 5 */
        double chi = 0, pool[2] = {0, 0};
        int df = -1;
        for (int32_t t = 0; t < V; t++) {
            double x = (double)cnt[0][(size_t)p * V + t], y = (double)cnt[1][(size_t)p * V + t];
            if ((x + y) / 2 < 5) {
                pool[0] += x;
                pool[1] += y;
                continue;
            }
            double e = (x + y) / 2;
            chi += (x - e) * (x - e) / e + (y - e) * (y - e) / e;
            df++;
        }
        if ((pool[0] + pool[1]) / 2 >= 5) {
            double e = (pool[0] + pool[1]) / 2;
            chi += (pool[0] - e) * (pool[0] - e) / e + (pool[1] - e) * (pool[1] - e) / e;
            df++;
        }
        assert_true(df >= 3);
        double crit = chi2_crit_001(df);
        fprintf(stderr, "position %d: chi-square %.1f, df %d, critical (p = 0.001) %.1f\n", p + 2, chi, df, crit);
        assert_true(chi < crit);
    }
    free(cnt[0]);
    free(cnt[1]);
}

/* ---- grammar, opt-out, compute-bound --------------------------------------------- */

static void test_grammar_drafts(void **state)
{
    (void)state;
    NEED_STORIES();
    static const char G[] = "root ::= [a-z ]+ \".\"";
    const tokenizer_t *tok = g_stories->tok;
    /* a token the grammar never allows: one with a capital letter */
    int32_t junk = -1;
    for (int32_t t = 0; t < tokenizer_n_vocab(tok) && junk < 0; t++) {
        size_t len = 0;
        const char *p = tokenizer_token_piece(tok, t, false, &len);
        for (size_t i = 0; i < len; i++)
            if (p[i] >= 'A' && p[i] <= 'Z') {
                junk = t;
                break;
            }
    }
    assert_true(junk >= 0);
    static sched_req_t reqs[4];
    static run_t ref, R, greedy;
    make_reqs(reqs, 4, g_stories->model->cfg.vocab, 40, false);
    for (int i = 0; i < 4; i++) {
        reqs[i].grammar = G;
        reqs[i].grammar_len = strlen(G);
    }
    sched_config_t c = cfg_make(4, 0, SPEC_OFF);
    run_reqs(g_stories, &c, reqs, 4, NULL, false, &ref);
    memcpy(&greedy, &ref, sizeof ref);
    const int32_t *pp[4];
    for (int i = 0; i < 4; i++)
        pp[i] = g_prompts[i];
    oracle_t o = {.prompt = pp, .n_prompt = g_np, .ref = greedy.o, .n = 4,
                  .vocab = g_stories->model->cfg.vocab, .junk = junk};
    sched_config_t cs = cfg_make(4, 0, SPEC_NGRAM);
    sched_stats_t st = run_reqs(g_stories, &cs, reqs, 4, &o, false, &R);
    for (int i = 0; i < 4; i++)
        assert_same(&R.o[i], &ref.o[i], "grammar, junk drafts", i);
    assert_int_equal(st.spec_draft_tokens, 0); /* every junk draft cut by the grammar */
    o.junk = -1;                               /* the oracle: grammatical drafts pass */
    st = run_reqs(g_stories, &cs, reqs, 4, &o, false, &R);
    for (int i = 0; i < 4; i++)
        assert_same(&R.o[i], &ref.o[i], "grammar, oracle", i);
    assert_true(st.spec_accepted_tokens > 0);
}

static void test_opt_out_and_compute_bound(void **state)
{
    (void)state;
    NEED_STORIES();
    static sched_req_t reqs[32];
    static run_t R;
    make_reqs(reqs, 32, g_stories->model->cfg.vocab, 30, true);
    const int32_t *pp[32];
    for (int i = 0; i < 32; i++)
        pp[i] = g_prompts[i];
    static run_t ref;
    sched_config_t c = cfg_make(32, 0, SPEC_OFF);
    run_reqs(g_stories, &c, reqs, 32, NULL, false, &ref);
    oracle_t o = {.prompt = pp, .n_prompt = g_np, .ref = ref.o, .n = 32,
                  .vocab = g_stories->model->cfg.vocab, .junk = -1};
    /* every request opted out */
    for (int i = 0; i < 32; i++)
        reqs[i].no_spec = true;
    sched_config_t cs = cfg_make(32, 0, SPEC_NGRAM);
    sched_stats_t st = run_reqs(g_stories, &cs, reqs, 32, &o, false, &R);
    assert_int_equal(st.spec_draft_tokens, 0);
    /* default row limit (16): 32 decoding sequences get no drafts; the
     * oracle's drafts only come once fewer than 16 rows are left */
    for (int i = 0; i < 32; i++)
        reqs[i].no_spec = false;
    sched_config_default(&c);
    cs.spec_max_rows = c.spec_max_rows;
    g_big_steps = 0;
    st = run_reqs(g_stories, &cs, reqs, 32, &o, false, &R); /* checks: drafts only in small steps */
    for (int i = 0; i < 32; i++)
        assert_same(&R.o[i], &ref.o[i], "row limit", i);
    fprintf(stderr, "row limit %d: %llu drafts in %llu steps, %lld steps above the limit\n", cs.spec_max_rows,
            (unsigned long long)st.spec_drafts, (unsigned long long)st.steps, (long long)g_big_steps);
    assert_true(g_big_steps > 10);      /* 32 streams: compute-bound steps, without drafts */
    assert_true(st.spec_draft_tokens > 0); /* the tail (fewer streams) drafts again */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ngram_draft),
        cmocka_unit_test(test_draft_length_adapts),
        cmocka_unit_test(test_greedy_stories),
        cmocka_unit_test(test_greedy_architectures),
        cmocka_unit_test(test_draft_model),
        cmocka_unit_test(test_seeded_sampling_same),
        cmocka_unit_test(test_sampling_distribution),
        cmocka_unit_test(test_grammar_drafts),
        cmocka_unit_test(test_opt_out_and_compute_bound),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
