/* worker_main.c — pagoda-worker: serves one model to a gateway.
 *
 *   pagoda-worker --gateway ENDPOINT --model NAME=FILE.gguf [--max-seqs N]
 *                 [--max-batch-tokens N] [--kv-blocks N | --kv-budget-mb N]
 *                 [--threads N] [--ctx N] [--heartbeat-ms N]
 *                 [--curve-server-key KEY_OR_FILE --curve-secret-key FILE]
 *   pagoda-worker --gen-curve-keypair PREFIX
 *
 * Loads the model (weights, tokenizer, chat template), connects to the
 * gateway (worker_link: REGISTER, heartbeats, reconnect), and runs the step
 * loop: poll the gateway without blocking while sequences run, turn SUBMITs
 * into scheduler requests (templating and tokenizing here), run one scheduler
 * step, and send each step's output as EVENTs. Idle, it blocks for up to one
 * heartbeat interval.
 *
 * Credit: HEARTBEAT's free slots = max_seqs - requests held (running or
 * waiting), so the gateway keeps the rest in its priority queue, where
 * priority and aging are decided. Per-request failures (prompt too long, bad
 * messages) go back as ERROR for that request only.
 *
 * SIGINT/SIGTERM make an eventfd readable (common/sigwake.h) that the link
 * polls next to its socket, so a signal ends the loop cleanly (exit 0).
 * Exit 1: start-up failed (model unreadable...); 2: bad options. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/sigwake.h"
#include "common/xalloc.h"
#include "proto/curve.h"
#include "proto/msg.h"
#include "worker/engine.h"
#include "worker/model/forward.h"
#include "worker/wait_policy.h"
#include "worker/sched.h"
#include "worker/text/detok.h"
#include "worker/kv_report.h"
#include "worker/worker_link.h"

/* The worker process state. */
struct worker {
    char model_name[PROTO_MAX_NAME + 1];  /* --model NAME=... */
    const char *model_path;               /* --model ...=FILE (argv) */
    char replica[PROTO_MAX_NAME + 1];     /* "host:pid:random", unique per process */
    char host[PROTO_MAX_NAME + 1];
    worker_link_t *link;                  /* to the gateway */
    kv_report_t *kv_report;               /* prefix-cache changes → KV messages */
    int heartbeat_ms;
    uint32_t capacity;                    /* max concurrent sequences */
    uint32_t n_ctx;                       /* tokens per sequence */
    uint32_t kv_blocks;                   /* KV pool size in blocks */
    uint32_t block_size;                  /* KV block size in tokens */
    bool draining;                        /* DRAIN received: admit nothing new */
    bool stop;                            /* leave the loop */
    engine_t *engine;                     /* model, tokenizer, chat template */
    sched_t *sched;                       /* continuous-batching scheduler */
    sched_config_t scfg;                  /* its limits (from the flags) */
    proto_top_logprob_t lp_top[PROTO_MAX_TOP_LOGPROBS];
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: pagoda-worker --model NAME=FILE.gguf [options]\n"
            "       pagoda-worker --gen-curve-keypair PREFIX   (writes PREFIX.key, PREFIX.pub)\n"
            "  --gateway ENDPOINT   gateway ZeroMQ endpoint (default tcp://127.0.0.1:5557)\n"
            "  --model NAME=FILE    model name served and its GGUF file\n"
            "  --heartbeat-ms N     heartbeat interval (default %d)\n"
            "  --max-seqs N         concurrent sequences, 1 = batching off (default 32)\n"
            "  --max-batch-tokens N rows per forward step (default 512)\n"
            "  --kv-blocks N        KV pool size in blocks (default: from --kv-budget-mb)\n"
            "  --kv-budget-mb N     KV pool memory budget (default 1024)\n"
            "  --block-size N       tokens per KV block (default 32)\n"
            "  --kv-type T          K/V element type: auto (default: f16 when the K/V\n"
            "                       weights are quantized, f32 otherwise), f16 or f32\n"
            "  --threads N          threads for the forward pass (default 2)\n"
            "  --ctx N              cap the context length below the model's\n"
            "  --exact-matmul       quantized weights via dequantize+sgemm, not int8 kernels\n"
            "  --log-level LEVEL    debug|info|warn|error (default info; env PAGODA_LOG)\n"
            "  --curve-server-key KEY_OR_FILE  the gateway's CURVE public key (Z85 or a file);\n"
            "                       turns on CURVE (docs/OPERATIONS.md)\n"
            "  --curve-secret-key FILE  this worker's CURVE secret key (its public key must be\n"
            "                       in the gateway's authorized keys; env %s\n"
            "                       may hold the key itself instead)\n",
            PROTO_HEARTBEAT_MS, CURVE_ENV_SECRET);
}

/* The CURVE keys of --curve-server-key / --curve-secret-key (or the
 * environment). 0 = plain link, 1 = keys set, -1 = error (printed). */
static int load_curve(const char *server, const char *secret_path, char srv[CURVE_Z85_LEN + 1],
                      char pub[CURVE_Z85_LEN + 1], char sec[CURVE_Z85_LEN + 1])
{
    const char *env = getenv(CURVE_ENV_SECRET);
    if (!server && !secret_path)
        return 0;
    char err[512];
    if (!server || (!secret_path && !env)) {
        fprintf(stderr, "pagoda-worker: CURVE needs both --curve-server-key and "
                        "--curve-secret-key (or %s)\n", CURVE_ENV_SECRET);
        return -1;
    }
    if (!curve_available()) {
        fprintf(stderr, "pagoda-worker: this libzmq has no CURVE support\n");
        return -1;
    }
    if (curve_public_load(server, srv, err, sizeof err) < 0 ||
        (secret_path ? curve_secret_load(secret_path, sec, pub, err, sizeof err)
                     : curve_secret_from_text(env, sec, pub, err, sizeof err)) < 0) {
        fprintf(stderr, "pagoda-worker: %s\n", err);
        return -1;
    }
    return 1;
}

static int parse_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

static void make_replica_id(struct worker *w)
{
    if (gethostname(w->host, sizeof w->host - 1) != 0)
        snprintf(w->host, sizeof w->host, "localhost");
    uint32_t r = 0;
    if (getrandom(&r, sizeof r, 0) != sizeof r)
        r = (uint32_t)getpid() * 2654435761u;
    snprintf(w->replica, sizeof w->replica, "%.200s:%d:%08x", w->host, (int)getpid(), r);
}

static void reply_error(struct worker *w, uint64_t id, uint32_t code, const char *msg)
{
    proto_msg_t e;
    proto_msg_init(&e, PROTO_ERROR);
    e.error.id = id;
    e.error.code = code;
    e.error.message = (char *)msg;
    worker_link_send(w->link, &e);
}

/* Sends one scheduler event as an EVENT. Logprobs carry each token's bytes
 * (possibly a partial UTF-8 sequence; the gateway renders them). */
static void on_sched_event(void *ud, const sched_event_t *ev)
{
    struct worker *w = ud;
    const tokenizer_t *tok = w->engine->tok;
    proto_msg_t m;
    proto_msg_init(&m, PROTO_EVENT);
    proto_event_t *e = &m.event;
    e->id = ev->id;
    /* ev->text is not NUL-terminated and the encoder takes text_len 0 as
     * "use strlen": a token with no text yet (BOS, held UTF-8 or stop
     * prefix) must pass "" or stale bytes past the delta would be sent */
    e->text = (char *)(ev->text && ev->text_len ? ev->text : "");
    e->text_len = (uint32_t)ev->text_len;
    e->ids = (int32_t *)ev->tokens;
    e->n_ids = (uint32_t)ev->n_tokens;
    e->n_tokens = (uint32_t)ev->n_completion;
    e->n_resumed = (uint32_t)ev->n_resumed;
    e->choice = (uint32_t)ev->index;
    proto_logprob_t lp[1];
    if (ev->logprobs && ev->n_tokens == 1) {
        const sched_token_logprob_t *l = &ev->logprobs[0];
        size_t n = 0;
        const char *b = tokenizer_token_piece(tok, l->token, true, &n);
        lp[0].bytes = (uint8_t *)b;
        lp[0].n_bytes = (uint32_t)n;
        lp[0].logprob = l->logprob;
        lp[0].n_top = (uint32_t)l->n_top;
        lp[0].top = w->lp_top;
        for (int32_t i = 0; i < l->n_top; i++) {
            size_t tn = 0;
            const char *tb = tokenizer_token_piece(tok, l->top[i].token, true, &tn);
            w->lp_top[i].bytes = (uint8_t *)tb;
            w->lp_top[i].n_bytes = (uint32_t)tn;
            w->lp_top[i].logprob = l->top[i].logprob;
        }
        e->logprobs = lp;
        e->n_logprobs = 1;
    }
    switch (ev->finish) {
    case SCHED_FINISH_NONE: e->finish = PROTO_FINISH_NONE; break;
    case SCHED_FINISH_STOP: e->finish = PROTO_FINISH_STOP; break;
    case SCHED_FINISH_LENGTH: e->finish = PROTO_FINISH_LENGTH; break;
    case SCHED_FINISH_CANCELLED: e->finish = PROTO_FINISH_CANCELLED; break;
    case SCHED_FINISH_ERROR:
        e->finish = ev->error && strstr(ev->error, "deadline") ? PROTO_FINISH_TIMEOUT
                                                                : PROTO_FINISH_ERROR;
        break;
    }
    if (e->finish != PROTO_FINISH_NONE) {
        e->has_usage = true;
        e->usage.prompt_tokens = (uint32_t)ev->n_prompt;
        e->usage.cached_tokens = (uint32_t)ev->n_cached;
        e->usage.completion_tokens = (uint32_t)ev->n_completion;
        if (ev->finish == SCHED_FINISH_ERROR)
            log_warn("request %llu failed: %s", (unsigned long long)ev->id,
                     ev->error ? ev->error : "error");
    }
    if (worker_link_send(w->link, &m) != 0)
        log_warn("EVENT for request %llu dropped: no gateway connection",
                 (unsigned long long)ev->id);
}

/* Sends one EVENT of a tokenizer op (no generation): ids and/or text, and
 * with `last` the finish "stop" and usage (prompt = n_prompt). */
static void send_op_event(struct worker *w, uint64_t id, const int32_t *ids, uint32_t n_ids,
                          uint32_t n_so_far, const char *text, size_t text_len, bool last,
                          uint32_t n_prompt)
{
    proto_msg_t m;
    proto_msg_init(&m, PROTO_EVENT);
    proto_event_t *e = &m.event;
    e->id = id;
    e->text = (char *)(text && text_len ? text : "");
    e->text_len = (uint32_t)text_len;
    e->ids = (int32_t *)ids;
    e->n_ids = n_ids;
    e->n_tokens = n_so_far;
    if (last) {
        e->finish = PROTO_FINISH_STOP;
        e->has_usage = true;
        e->usage.prompt_tokens = n_prompt;
    }
    if (worker_link_send(w->link, &m) != 0)
        log_warn("EVENT for request %llu dropped: no gateway connection", (unsigned long long)id);
}

/* op "tokenize": the prompt's ids, PROTO_MAX_EVENT_IDS per EVENT. */
static void op_tokenize(struct worker *w, uint64_t id, const int32_t *ids, uint32_t n)
{
    uint32_t off = 0;
    do {
        uint32_t k = n - off < PROTO_MAX_EVENT_IDS ? n - off : PROTO_MAX_EVENT_IDS;
        send_op_event(w, id, ids + off, k, off + k, NULL, 0, off + k == n, n);
        off += k;
    } while (off < n);
}

/* op "detokenize": the ids' text through the streaming detokenizer (valid
 * UTF-8; broken sequences become U+FFFD), in EVENTs of ≤ ~PROTO_MAX_TEXT/2
 * bytes cut between tokens. Returns 0, or 400 for an id out of the vocabulary. */
static uint32_t op_detokenize(struct worker *w, uint64_t id, const int32_t *ids, uint32_t n,
                              char *err, size_t errlen)
{
    const tokenizer_t *tok = w->engine->tok;
    const int32_t vocab = w->engine->model->cfg.vocab;
    for (uint32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab) {
            snprintf(err, errlen, "token %d (tokens[%u]) is out of the vocabulary (%d)", ids[i], i,
                     vocab);
            return PROTO_CODE_BAD_REQUEST;
        }
    detok_t *d = detok_new(NULL, 0);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (uint32_t i = 0; i <= n; i++) {
        const char *delta;
        size_t dl;
        if (i < n) {
            size_t plen = 0;
            const char *piece = tokenizer_token_piece(tok, ids[i], false, &plen);
            detok_push(d, piece, plen, &delta, &dl);
        } else {
            detok_finish(d, DETOK_FINISH_LENGTH, &delta, &dl);
        }
        if (len + dl > cap) {
            cap = (len + dl) * 2 + 256;
            buf = xrealloc(buf, cap);
        }
        memcpy(buf + len, delta, dl);
        len += dl;
        if (len >= PROTO_MAX_TEXT / 2 && i < n) {
            send_op_event(w, id, NULL, 0, 0, buf, len, false, n);
            len = 0;
        }
    }
    send_op_event(w, id, NULL, 0, 0, buf, len, true, n);
    free(buf);
    detok_free(&d);
    return 0;
}

/* Turns a SUBMIT into a scheduler request. Returns 0, or an HTTP-like code
 * with a message for an ERROR reply. */
static uint32_t submit(struct worker *w, const proto_submit_t *sm, char *err, size_t errlen)
{
    const engine_t *e = w->engine;
    int32_t *ids = NULL;
    int32_t n_ids = -1;
    chat_msg_t *msgs = NULL;
    uint32_t code = 0;
    if (sm->kind == PROTO_KIND_CHAT) {
        msgs = xcalloc(sm->n_messages ? sm->n_messages : 1, sizeof *msgs);
        for (uint32_t i = 0; i < sm->n_messages; i++) {
            msgs[i].role = sm->messages[i].role;
            msgs[i].content = sm->messages[i].content;
        }
        n_ids = engine_prompt_chat(e, msgs, sm->n_messages, &ids, err, errlen);
    } else if (sm->has_prompt_ids) {
        n_ids = (int32_t)sm->n_prompt_ids;
        ids = xmalloc((sm->n_prompt_ids ? sm->n_prompt_ids : 1) * sizeof *ids);
        if (sm->n_prompt_ids)
            memcpy(ids, sm->prompt_ids, sm->n_prompt_ids * sizeof *ids);
    } else {
        const char *p = sm->prompt ? sm->prompt : "";
        n_ids = engine_prompt_text(e, p, strlen(p), &ids, err, errlen);
    }
    if (n_ids < 0) {
        code = PROTO_CODE_BAD_REQUEST;
        goto out;
    }
    if (sm->op == PROTO_OP_DETOKENIZE) {
        code = op_detokenize(w, sm->id, ids, (uint32_t)n_ids, err, errlen);
        goto out;
    }
    if (sm->op == PROTO_OP_TOKENIZE) {
        int32_t skip = 0;
        /* add_special false: a text prompt without the BOS the rule added */
        if (sm->no_special && sm->kind == PROTO_KIND_COMPLETION && !sm->has_prompt_ids &&
            n_ids > 0 && tokenizer_add_bos(e->tok) && ids[0] == tokenizer_bos(e->tok))
            skip = 1;
        op_tokenize(w, sm->id, ids + skip, (uint32_t)(n_ids - skip));
        goto out;
    }
    sched_req_t r = {
        .id = sm->id,
        .priority = (int32_t)sm->priority,
        .prompt = ids,
        .n_prompt = n_ids,
        .resume = sm->resume,
        .n_resume = (int32_t)sm->n_resume,
        .max_tokens = (int32_t)sm->max_tokens,
        .ignore_eos = sm->ignore_eos,
        .stop = (const char *const *)sm->stop,
        .n_stop = (int32_t)sm->n_stop,
        /* a chat turn also ends at the template's end-of-turn token */
        .stop_ids = sm->kind == PROTO_KIND_CHAT ? e->turn_end_ids : NULL,
        .n_stop_ids = sm->kind == PROTO_KIND_CHAT ? e->n_turn_end : 0,
        .top_logprobs = sm->sampling.logprobs ? (int32_t)sm->sampling.top_logprobs : -1,
        .deadline_us = sm->deadline_ms ? clock_now_us() + (int64_t)sm->deadline_ms * 1000 : 0,
        .n_choices = sm->n_choices ? (int32_t)sm->n_choices : 1,
    };
    sampler_params_t *sp = &r.sampling;
    sampler_params_default(sp);
    sp->temperature = (float)sm->sampling.temperature;
    sp->top_p = (float)sm->sampling.top_p;
    sp->top_k = (int32_t)sm->sampling.top_k;
    sp->min_p = (float)sm->sampling.min_p;
    sp->repetition_penalty = (float)sm->sampling.repetition_penalty;
    sp->presence_penalty = (float)sm->sampling.presence_penalty;
    sp->frequency_penalty = (float)sm->sampling.frequency_penalty;
    sp->has_seed = sm->sampling.has_seed;
    sp->seed = sm->sampling.seed;
    sampler_bias_t *bias = NULL;
    if (sm->sampling.n_logit_bias) {
        bias = xcalloc(sm->sampling.n_logit_bias, sizeof *bias);
        for (uint32_t i = 0; i < sm->sampling.n_logit_bias; i++) {
            bias[i].token = sm->sampling.logit_bias[i].token;
            bias[i].bias = (float)sm->sampling.logit_bias[i].bias;
        }
        sp->logit_bias = bias;
        sp->n_logit_bias = (int32_t)sm->sampling.n_logit_bias;
    }
    const char *why = NULL;
    if (sampler_params_validate(sp, e->model->cfg.vocab, &why) != 0) {
        snprintf(err, errlen, "invalid sampling parameters: %s", why ? why : "?");
        code = PROTO_CODE_BAD_REQUEST;
    } else if (sched_submit(w->sched, &r, err, errlen) != 0) {
        code = strstr(err, "context") ? PROTO_CODE_TOO_LONG : PROTO_CODE_BAD_REQUEST;
    }
    free(bias);
out:
    free(msgs);
    free(ids);
    return code;
}

static void on_gateway_message(struct worker *w, const proto_msg_t *m)
{
    char err[512];
    switch (m->type) {
    case PROTO_SUBMIT: {
        if (w->draining) {
            reply_error(w, m->submit.id, PROTO_CODE_UNAVAILABLE, "worker is draining");
            break;
        }
        uint32_t code = submit(w, &m->submit, err, sizeof err);
        if (code) {
            log_info("request %llu refused (%u): %s", (unsigned long long)m->submit.id, code, err);
            reply_error(w, m->submit.id, code, err);
        }
        break;
    }
    case PROTO_CANCEL:
        if (sched_cancel(w->sched, m->cancel.id) != 0)
            log_debug("CANCEL %llu: no such request", (unsigned long long)m->cancel.id);
        break;
    case PROTO_DRAIN: {
        sched_stats_t st;
        sched_stats(w->sched, &st);
        log_info("DRAIN: admitting nothing new, exiting once %d requests finish",
                 st.n_running + st.n_waiting);
        w->draining = true;
        break;
    }
    case PROTO_SHUTDOWN:
        log_info("SHUTDOWN: exiting");
        w->stop = true;
        break;
    case PROTO_ERROR:
        log_warn("gateway error %u: %s", m->error.code, m->error.message);
        break;
    default:
        log_warn("gateway sent %s, which only workers send: dropped", proto_type_name(m->type));
        break;
    }
}

/* The gateway that sent our requests is gone (silent, or it no longer knows
 * us): their output cannot be delivered and that gateway's successor
 * re-dispatches them, so stop computing them now. */
static void drop_orphans(struct worker *w)
{
    if (!worker_link_take_lost(w->link))
        return;
    int32_t n = sched_abort_all(w->sched);
    if (n)
        log_warn("gateway lost: dropped %d requests whose results cannot be delivered", n);
}

static void publish_load(struct worker *w)
{
    sched_stats_t st;
    sched_stats(w->sched, &st);
    uint32_t held = (uint32_t)(st.n_running + st.n_waiting);
    proto_load_t load = {
        .running = (uint32_t)st.n_running,
        .waiting = (uint32_t)st.n_waiting,
        .kv_blocks_used = (uint32_t)st.kv_blocks_used,
        .kv_blocks_total = (uint32_t)st.kv_blocks_total,
        .prefix_cache_queries = st.prefix_query_tokens,
        .prefix_cache_hits = st.prefix_hit_tokens,
        .preemptions = st.preemptions,
        .tokens_generated = st.generated_tokens,
        .prompt_tokens = st.prompt_tokens,
        .free_slots = w->draining || held >= w->capacity ? 0 : w->capacity - held,
    };
    worker_link_set_load(w->link, &load);
}

static int parse_i32_opt(const char *name, const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
    if (parse_u32(s, lo, hi, out) < 0) {
        fprintf(stderr, "pagoda-worker: --%s must be %u..%u\n", name, lo, hi);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct worker w = {.heartbeat_ms = PROTO_HEARTBEAT_MS};
    sched_config_default(&w.scfg);
    const char *endpoint = "tcp://127.0.0.1:5557";
    const char *model = NULL;
    int level = LOG_INFO;
    uint32_t ctx_cap = 0, u;
    const char *curve_server = NULL, *curve_secret = NULL, *gen_prefix = NULL;
    enum { O_MBT = 256, O_KVB, O_KVMB, O_THREADS, O_BLOCK, O_EXACT, O_CSRV, O_CSEC, O_GEN, O_KVTYPE };
    static const struct option opts[] = {
        {"gateway", required_argument, NULL, 'g'},
        {"model", required_argument, NULL, 'm'},
        {"heartbeat-ms", required_argument, NULL, 'b'},
        {"max-seqs", required_argument, NULL, 'c'},
        {"capacity", required_argument, NULL, 'c'}, /* old name of --max-seqs */
        {"max-batch-tokens", required_argument, NULL, O_MBT},
        {"kv-blocks", required_argument, NULL, O_KVB},
        {"kv-budget-mb", required_argument, NULL, O_KVMB},
        {"block-size", required_argument, NULL, O_BLOCK},
        {"kv-type", required_argument, NULL, O_KVTYPE},
        {"threads", required_argument, NULL, O_THREADS},
        {"ctx", required_argument, NULL, 'x'},
        {"exact-matmul", no_argument, NULL, O_EXACT},
        {"log-level", required_argument, NULL, 'v'},
        {"curve-server-key", required_argument, NULL, O_CSRV},
        {"curve-secret-key", required_argument, NULL, O_CSEC},
        {"gen-curve-keypair", required_argument, NULL, O_GEN},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    /* OpenMP threads that spin while idle steal the core the gateway and
     * other workers need: re-exec once with a passive wait policy unless the
     * environment already chose one (see forward.h). */
    wait_policy_reexec(argv);
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'g': endpoint = optarg; break;
        case 'm': model = optarg; break;
        case 'b':
            if (parse_i32_opt("heartbeat-ms", optarg, PROTO_MIN_HEARTBEAT_MS, PROTO_MAX_HEARTBEAT_MS, &u))
                return 2;
            w.heartbeat_ms = (int)u;
            break;
        case 'c':
            if (parse_i32_opt("max-seqs", optarg, 1, PROTO_MAX_CAPACITY < 4096 ? PROTO_MAX_CAPACITY : 4096, &u))
                return 2;
            w.scfg.max_seqs = (int32_t)u;
            break;
        case O_MBT:
            if (parse_i32_opt("max-batch-tokens", optarg, 1, 65536, &u))
                return 2;
            w.scfg.max_batch_tokens = (int32_t)u;
            break;
        case O_KVB:
            if (parse_i32_opt("kv-blocks", optarg, 1, 1u << 24, &u))
                return 2;
            w.scfg.kv_blocks = (int32_t)u;
            break;
        case O_KVMB:
            if (parse_i32_opt("kv-budget-mb", optarg, 1, 1u << 20, &u))
                return 2;
            w.scfg.kv_budget_bytes = (size_t)u << 20;
            break;
        case O_BLOCK:
            if (parse_i32_opt("block-size", optarg, 1, 4096, &u))
                return 2;
            w.scfg.block_size = (int32_t)u;
            break;
        case O_THREADS:
            if (parse_i32_opt("threads", optarg, 1, 256, &u))
                return 2;
            w.scfg.n_threads = (int32_t)u;
            break;
        case O_KVTYPE:
            if (kv_type_parse(optarg, &w.scfg.kv_type) != 0) {
                fprintf(stderr, "pagoda-worker: --kv-type must be auto, f16 or f32\n");
                return 2;
            }
            break;
        case O_EXACT: w.scfg.exact_matmul = true; break;
        case O_CSRV: curve_server = optarg; break;
        case O_CSEC: curve_secret = optarg; break;
        case O_GEN: gen_prefix = optarg; break;
        case 'x':
            if (parse_i32_opt("ctx", optarg, 2, PROTO_MAX_TOKENS, &ctx_cap))
                return 2;
            break;
        case 'v':
            level = log_level_parse(optarg);
            if (level < 0) {
                fprintf(stderr, "pagoda-worker: bad --log-level '%s'\n", optarg);
                return 2;
            }
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (gen_prefix) {
        char err[512], pub[CURVE_Z85_LEN + 1];
        if (curve_keypair_write(gen_prefix, pub, err, sizeof err) < 0) {
            fprintf(stderr, "pagoda-worker: %s\n", err);
            return 1;
        }
        printf("wrote %s.key (secret, mode 0600) and %s.pub\npublic key: %s\n", gen_prefix,
               gen_prefix, pub);
        return 0;
    }
    char c_srv[CURVE_Z85_LEN + 1], c_pub[CURVE_Z85_LEN + 1], c_sec[CURVE_Z85_LEN + 1];
    int curve = load_curve(curve_server, curve_secret, c_srv, c_pub, c_sec);
    if (curve < 0)
        return 2;
    const char *eq = model ? strchr(model, '=') : NULL;
    if (optind < argc || !eq || eq == model || !eq[1] || (size_t)(eq - model) > PROTO_MAX_NAME) {
        fprintf(stderr, "pagoda-worker: --model NAME=FILE.gguf is required\n");
        usage(stderr);
        return 2;
    }
    memcpy(w.model_name, model, (size_t)(eq - model));
    w.model_path = eq + 1;
    log_init("worker", (enum log_level)level);

    int rc = 1;
    char err[512];
    w.engine = engine_load(w.model_path, err, sizeof err);
    if (!w.engine) {
        log_error("%s", err);
        return 1;
    }
    if (!w.scfg.exact_matmul)
        engine_pack_int8(w.engine, w.scfg.n_threads);
    if (ctx_cap && (int32_t)ctx_cap < w.engine->model->cfg.ctx)
        w.engine->model->cfg.ctx = (int32_t)ctx_cap;
    w.sched = sched_new(w.engine->model, w.engine->tok, &w.scfg, on_sched_event, &w, err, sizeof err);
    if (!w.sched) {
        log_error("%s", err);
        goto out;
    }
    sched_stats_t st0;
    sched_stats(w.sched, &st0);
    w.capacity = (uint32_t)sched_capacity(w.sched);
    w.n_ctx = (uint32_t)sched_context_length(w.sched);
    w.kv_blocks = (uint32_t)st0.kv_blocks_total;
    w.block_size = (uint32_t)w.scfg.block_size;

    int sfd = sigwake_install();
    if (sfd < 0) {
        log_error("cannot install signal handlers: %s", strerror(errno));
        goto out;
    }
    make_replica_id(&w);
    proto_register_t reg = {
        .model = w.model_name, .replica = w.replica, .host = w.host, .pid = (uint32_t)getpid(),
        .capacity = w.capacity, .n_ctx = w.n_ctx, .n_vocab = (uint32_t)w.engine->model->cfg.vocab,
        .kv_blocks = w.kv_blocks, .block_size = w.block_size,
    };
    worker_link_config_t lcfg = {.endpoint = endpoint, .heartbeat_ms = w.heartbeat_ms, .reg = &reg};
    if (curve) {
        lcfg.curve_server_key = c_srv;
        lcfg.curve_public_key = c_pub;
        lcfg.curve_secret_key = c_sec;
        log_info("CURVE on: our public key %s (must be in the gateway's authorized keys)", c_pub);
    }
    w.link = worker_link_new(&lcfg);
    explicit_bzero(c_sec, sizeof c_sec);
    if (!w.link)
        goto out;
    log_info("serving model %s (%s) as %s: %u seqs, context %u, %u KV blocks", w.model_name,
             w.model_path, w.replica, w.capacity, w.n_ctx, w.kv_blocks);

    rc = 0;
    w.kv_report = kv_report_new(sched_kv_pool(w.sched));
    while (!w.stop) {
        publish_load(&w);
        kv_report_flush(w.kv_report, w.link);
        bool busy = sched_busy(w.sched);
        proto_msg_t m;
        /* drain every queued message before the next step so CANCELs and
         * new SUBMITs join this step's batch */
        int prc = worker_link_poll(w.link, busy ? 0 : w.heartbeat_ms, sfd, &m);
        drop_orphans(&w);
        while (prc == WORKER_LINK_MSG) {
            on_gateway_message(&w, &m);
            proto_msg_clear(&m);
            if (w.stop)
                break;
            prc = worker_link_poll(w.link, 0, sfd, &m);
            drop_orphans(&w);
        }
        if (prc == WORKER_LINK_WAKE) {
            log_info("%s: exiting", strsignal(sigwake_signal()));
            w.stop = true;
        }
        if (w.stop)
            break;
        if (sched_busy(w.sched) && sched_step(w.sched) < 0)
            log_error("scheduler step failed; its requests were ended with an error");
        if (w.draining && !sched_busy(w.sched)) {
            log_info("drained: exiting");
            w.stop = true;
        }
    }
out:
    kv_report_free(&w.kv_report);
    worker_link_free(&w.link);
    sched_free(&w.sched);
    engine_free(&w.engine);
    return rc;
}
