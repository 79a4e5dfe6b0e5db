/* worker.c — the pagoda-worker process: one model, its scheduler and the link
 * to the gateway, and the translation between the wire protocol
 * (proto/msg.h) and the scheduler (sched.h). See worker.h for the loop. */
#include "worker/worker.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/errbuf.h"
#include "common/prefix_key.h"
#include "common/file_mac.h"
#include "common/log.h"
#include "common/memavail.h"
#include "common/private_dir.h"
#include "common/sigwake.h"
#include "common/strbuf.h"
#include "common/xalloc.h"
#include "worker/kv_disk.h"
#include "worker/model/vision.h"
#include "worker/worker_image.h"
#include "worker/pack_cache.h"
#include "worker/kv_pool.h"
#include "worker/kv_report.h"
#include "common/text/detok.h"
#include "common/text/tool_grammar.h"
#include "worker/worker_link.h"
#include "worker/worker_lora.h"

/* The warm start's time before REGISTER (warm_before_register), µs, and its
 * blocks per pass there (kv_pool_warm_step takes up to its load run). */
#define WORKER_WARM_BEFORE_REGISTER_US 30000000
#define WORKER_WARM_BATCH_BEFORE_REGISTER 32

/* The scheduler's per-token alternatives fit an EVENT's lp top array. */
_Static_assert(SAMPLER_MAX_TOP_LOGPROBS == PROTO_MAX_TOP_LOGPROBS,
               "sched/sampler and the wire must agree on the top-logprobs limit");

/* The worker process state. */
/* SUBMITs with images held per turn (their images encoded in one batch) */
#define WORKER_HELD_SUBMITS 8

struct worker {
    char model_name[PROTO_MAX_NAME + 1];  /* the name served (REGISTER model) */
    char *model_path;                     /* its GGUF file (owned copy) */
    char replica[PROTO_MAX_NAME + 1];     /* "host:pid:random", unique per process */
    char host[PROTO_MAX_NAME + 1];        /* gethostname(), or "localhost" */
    worker_link_t *link;                  /* to the gateway (owned) */
    kv_disk_t *disk;                      /* disk tier under the prefix cache (owned), NULL = none */
    pack_cache_write_t *pack_write;       /* the pack file written after registering (owned), or NULL */
    pack_cache_write_t *draft_pack_write; /* the same for the draft model */
    kv_report_t *kv_report;               /* prefix-cache changes → KV messages (owned) */
    bool prefault_left;                   /* KV pool pages not mapped yet (sched_prefault_step) */
    bool warm_left;                       /* warm start not finished (kv_pool_warm_step) */
    int64_t t_warm_us;                    /* when it began (clock_now_us), for its log line */
    int32_t warm_batch;                   /* blocks per idle pass: one per thread */
    int heartbeat_ms;                     /* --heartbeat-ms (the link may adopt the gateway's) */
    int64_t test_step_sleep_us;           /* TEST ONLY, env PAGODA_TEST_STEP_SLEEP_MS */
    char *test_step_wedge;                /* TEST ONLY, env PAGODA_TEST_STEP_WEDGE (owned) */
    char *test_step_hold;                 /* TEST ONLY, env PAGODA_TEST_STEP_HOLD (owned) */
    char *test_armed_hold;                /* TEST ONLY, env PAGODA_TEST_ARMED_HOLD (owned) */
    int64_t test_load_sleep_us;           /* TEST ONLY, env PAGODA_TEST_LOAD_SLEEP_MS */
    _Atomic uint64_t layers_done;         /* forward layers computed: progress inside a step */
    uint32_t capacity;                    /* max concurrent sequences (sched_capacity) */
    uint32_t n_ctx;                       /* tokens per sequence (sched_context_length) */
    uint32_t kv_blocks;                   /* KV pool size in blocks */
    uint32_t block_size;                  /* KV block size in tokens */
    bool draining;                        /* DRAIN received: admit nothing new */
    bool stop;                            /* leave the loop */
    engine_t *engine;                     /* model, tokenizer, chat template (owned) */
    engine_t *draft;                      /* --draft-model (owned), NULL = none */
    vision_t *vis;                        /* --mmproj (owned), NULL = the model takes no images;
                                           * REGISTER's vis map is worker_vis_info(vis) */
    /* SUBMITs with images drained in this turn, held until the drain ends
     * (or another message comes) so their images are encoded as one batch */
    proto_msg_t held[WORKER_HELD_SUBMITS];
    int n_held;
    sched_t *sched;                       /* continuous-batching scheduler (owned) */
    sched_config_t scfg;                  /* its limits, as configured */
    /* scratch of on_sched_event: one EVENT's top alternatives */
    proto_top_logprob_t lp_top[PROTO_MAX_TOP_LOGPROBS];
    strbuf_t wire_text;                   /* scratch of wire_text(), owned */
    worker_lora_holds_t lora_holds;       /* adapters held by running requests (worker_lora.h) */
};

void worker_config_default(worker_config_t *c)
{
    memset(c, 0, sizeof *c);
    c->endpoint = "tcp://127.0.0.1:5557";
    c->heartbeat_ms = PROTO_HEARTBEAT_MS;
    c->kv_cache_bytes = (uint64_t)4096 << 20;
    c->kv_warm_percent = 50;
    c->standby_fd = -1;
    sched_config_default(&c->sched);
    c->sched.kv_budget_bytes = 0; /* kv_budget.h */
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

/* The wire cause of each scheduler result code (sched.h ↔ proto/msg.h). */
static proto_err_t err_from_sched(sched_rc_t rc)
{
    switch (rc) {
    case SCHED_OK: return PROTO_ERR_NONE;
    case SCHED_EINVAL: return PROTO_ERR_BAD_REQUEST;
    case SCHED_ETOO_LONG: return PROTO_ERR_CONTEXT_LENGTH;
    case SCHED_EDUPLICATE: return PROTO_ERR_DUPLICATE_ID;
    case SCHED_EDEADLINE: return PROTO_ERR_DEADLINE;
    case SCHED_EENGINE: return PROTO_ERR_ENGINE;
    }
    return PROTO_ERR_ENGINE;
}

/* ERROR for one request: the typed cause and the code that goes with it. */
static void reply_error(struct worker *w, uint64_t id, proto_err_t err, const char *msg)
{
    /* a typed cause, never an HTTP status (the gateway drops an ERROR whose
     * err it cannot read) */
    assert(err > PROTO_ERR_NONE && err <= PROTO_ERR_LAST);
    proto_msg_t e;
    proto_msg_init(&e, PROTO_ERROR);
    e.error.id = id;
    e.error.err = err;
    e.error.code = proto_err_code(err);
    e.error.message = (char *)msg;
    worker_link_send(w->link, &e);
}

/* The wire's form of generated text: NUL-free UTF-8 (proto/msg.h strings are
 * C strings), so a U+0000 the model writes (a random or broken model's byte
 * token) goes out as U+FFFD, the character invalid bytes already become; the
 * EVENT carrying it would otherwise be refused by the gateway and end the
 * request with 502 (found by #22's property test). Returns text itself when
 * it has no NUL, else the worker's scratch copy; *n_out its length. */
static const char *wire_text(struct worker *w, const char *text, size_t n, size_t *n_out)
{
    *n_out = n;
    if (!text || !memchr(text, 0, n))
        return text;
    size_t n_nul = 0;
    for (size_t i = 0; i < n; i++)
        n_nul += text[i] == 0;
    size_t need = n + 2 * n_nul; /* 1 byte → EF BF BD */
    strbuf_reset(&w->wire_text);
    strbuf_reserve(&w->wire_text, need);
    char *o = w->wire_text.s;
    for (size_t i = 0; i < n; i++) {
        if (text[i])
            *o++ = text[i];
        else
            *o++ = (char)0xEF, *o++ = (char)0xBF, *o++ = (char)0xBD;
    }
    strbuf_setlen(&w->wire_text, need);
    *n_out = need;
    return w->wire_text.s;
}

static void publish_load(struct worker *w);

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
    size_t text_len;
    const char *text = wire_text(w, ev->text, ev->text_len, &text_len);
    e->text = (char *)(text && text_len ? text : "");
    e->text_len = (uint32_t)text_len;
    e->ids = (int32_t *)ev->tokens;
    e->n_ids = (uint32_t)ev->n_tokens;
    e->n_tokens = (uint32_t)ev->n_completion;
    e->n_resumed = (uint32_t)ev->n_resumed;
    e->choice = (uint32_t)ev->index;
    e->embedding = (float *)ev->embedding;
    e->n_embedding = ev->embedding ? (uint32_t)ev->n_embedding : 0;
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
    case SCHED_FINISH_STOP:
        e->finish = PROTO_FINISH_STOP;
        e->stop = ev->stop > 0 ? (uint32_t)ev->stop : 0;
        break;
    case SCHED_FINISH_LENGTH: e->finish = PROTO_FINISH_LENGTH; break;
    case SCHED_FINISH_CANCELLED: e->finish = PROTO_FINISH_CANCELLED; break;
    case SCHED_FINISH_ERROR:
        e->finish = ev->error_code == SCHED_EDEADLINE ? PROTO_FINISH_TIMEOUT : PROTO_FINISH_ERROR;
        e->err = err_from_sched(ev->error_code);
        break;
    }
    if (e->finish != PROTO_FINISH_NONE) {
        worker_lora_finished(&w->lora_holds, ev->id); /* its adapters, with its last choice */
        e->has_usage = true;
        e->usage.prompt_tokens = (uint32_t)ev->n_prompt;
        e->usage.cached_tokens = (uint32_t)ev->n_cached;
        e->usage.completion_tokens = (uint32_t)ev->n_completion;
        if (ev->finish == SCHED_FINISH_ERROR)
            log_warn("request %llu failed: %s", (unsigned long long)ev->id,
                     ev->error ? ev->error : "error");
        /* the load the link's next HEARTBEAT carries (its thread sends them
         * while a step runs, after this EVENT on the same socket) must
         * already count this request's work (its prompt tokens were counted
         * when its chunk was computed), so a heartbeat that reaches the
         * gateway after the request's answer has it (tenant_cache.sh reads
         * the counters that way) */
        publish_load(w);
    }
    if (worker_link_send(w->link, &m) != 0)
        log_warn("EVENT for request %llu dropped: no gateway connection",
                 (unsigned long long)ev->id);
}

void worker_req_clear(worker_req_t *r)
{
    free(r->prompt);
    free(r->bias);
    free(r->tool_grammar);
    free(r->images);
    free(r->img_embd);
    memset(r, 0, sizeof *r);
}

proto_err_t worker_req_from_submit(const engine_t *e, const proto_submit_t *sm, int64_t now_us,
                                worker_req_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    /* a SUBMIT with images is templated and tokenized once, with the
     * images' runs, by worker_req_submit_images: no text-only pass here */
    int32_t n_ids = sm->n_imgs ? 0 : engine_prompt_submit(e, sm, &out->prompt, err, errlen);
    if (n_ids < 0) {
        worker_req_clear(out);
        return PROTO_ERR_BAD_REQUEST;
    }
    bool chat = sm->kind == PROTO_KIND_CHAT;
    const char *grammar = sm->grammar;
    if (sm->tool_choice && strcmp(sm->tool_choice, "auto") != 0) {
        /* a forced call: the output is exactly the template's call syntax */
        if (sm->grammar) {
            errbuf_set(err, errlen, "tool_choice '%s' cannot be combined with a grammar or response_format",
                       sm->tool_choice);
            worker_req_clear(out);
            return PROTO_ERR_BAD_REQUEST;
        }
        out->tool_grammar = tool_grammar_build(sm->tools, sm->tool_choice, !sm->no_par_tools,
                                               chat_template_tool_format(e->tmpl), err, errlen);
        if (!out->tool_grammar) {
            worker_req_clear(out);
            return PROTO_ERR_BAD_REQUEST;
        }
        grammar = out->tool_grammar;
    }
    /* the adapters, by name; their content and scales key the prefix cache */
    _Static_assert(PROTO_MAX_LORA <= LORA_SET_MAX, "a SUBMIT's adapters fit one lora_set_t");
    lora_set_t lora = {0};
    uint64_t lhash[PROTO_MAX_LORA];
    for (uint32_t i = 0; i < sm->n_lora; i++) {
        const engine_lora_t *el = engine_find_lora(e, sm->lora[i].name);
        if (!el) {
            errbuf_set(err, errlen, "adapter '%s' is not loaded on this worker", sm->lora[i].name);
            worker_req_clear(out);
            return PROTO_ERR_BAD_REQUEST;
        }
        lora.ad[i] = el->ad;
        lora.scale[i] = sm->lora[i].has_scale ? (float)sm->lora[i].scale : el->scale;
        lhash[i] = el->ad->hash;
        lora.n++;
    }
    out->req = (sched_req_t){
        .id = sm->id,
        .priority = (int32_t)sm->priority,
        .prompt = out->prompt,
        .n_prompt = n_ids,
        .resume = sm->resume,
        .n_resume = (int32_t)sm->n_resume,
        .max_tokens = (int32_t)sm->max_tokens,
        .ignore_eos = sm->ignore_eos,
        .no_spec = sm->no_spec,
        .partition = prefix_key_adapters(sm->partition, lhash, lora.scale, lora.n),
        .lora = lora,
        .stop = (const char *const *)sm->stop,
        .n_stop = (int32_t)sm->n_stop,
        /* a chat turn also ends at the template's end-of-turn token */
        .stop_ids = chat ? e->turn_end_ids : NULL,
        .n_stop_ids = chat ? e->n_turn_end : 0,
        .top_logprobs = sm->sampling.logprobs ? (int32_t)sm->sampling.top_logprobs : -1,
        .deadline_us = sm->deadline_ms ? now_us + (int64_t)sm->deadline_ms * 1000 : 0,
        .idle_us = (int64_t)sm->deadline_ms * 1000, /* proto/msg.h: a no-progress deadline */
        .n_choices = sm->n_choices ? (int32_t)sm->n_choices : 1,
        .grammar = grammar,
        .grammar_len = grammar ? strlen(grammar) : 0,
    };
    sampler_params_t *sp = &out->req.sampling;
    sampler_params_default(sp);
    sampler_params_set_knobs(sp, &sm->sampling.knobs);
    sp->has_seed = sm->sampling.has_seed;
    sp->seed = sm->sampling.seed;
    if (sm->sampling.n_logit_bias) {
        out->bias = xcalloc(sm->sampling.n_logit_bias, sizeof *out->bias);
        for (uint32_t i = 0; i < sm->sampling.n_logit_bias; i++) {
            out->bias[i].token = sm->sampling.logit_bias[i].token;
            out->bias[i].bias = (float)sm->sampling.logit_bias[i].bias;
        }
        sp->logit_bias = out->bias;
        sp->n_logit_bias = (int32_t)sm->sampling.n_logit_bias;
    }
    const char *why = NULL;
    if (sampler_params_validate(sp, e->model->cfg.vocab, &why) != 0) {
        errbuf_set(err, errlen, "invalid sampling parameters: %s", why ? why : "?");
        worker_req_clear(out);
        return PROTO_ERR_BAD_REQUEST;
    }
    return PROTO_ERR_NONE;
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
    text = wire_text(w, text, text_len, &text_len);
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
 * bytes cut between tokens. Returns PROTO_ERR_NONE, or BAD_REQUEST for an id
 * out of the vocabulary. */
static proto_err_t op_detokenize(struct worker *w, uint64_t id, const int32_t *ids, uint32_t n,
                                 char *err, size_t errlen)
{
    const tokenizer_t *tok = w->engine->tok;
    const int32_t vocab = w->engine->model->cfg.vocab;
    for (uint32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab) {
            errbuf_set(err, errlen, "token %d (tokens[%u]) is out of the vocabulary (%d)", ids[i], i,
                       vocab);
            return PROTO_ERR_BAD_REQUEST;
        }
    detok_t *d = detok_new(NULL, 0);
    strbuf_t buf = STRBUF_INIT;
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
        strbuf_append(&buf, delta, dl);
        if (buf.len >= PROTO_MAX_TEXT / 2 && i < n) {
            send_op_event(w, id, NULL, 0, 0, buf.s, buf.len, false, n);
            strbuf_reset(&buf);
        }
    }
    send_op_event(w, id, NULL, 0, 0, buf.s, buf.len, true, n);
    strbuf_free(&buf);
    detok_free(&d);
    return PROTO_ERR_NONE;
}

/* A tokenize/detokenize SUBMIT: answered by the tokenizer alone, at once,
 * without the scheduler. */
static proto_err_t submit_tokenizer_op(struct worker *w, const proto_submit_t *sm, char *err,
                                       size_t errlen)
{
    const engine_t *e = w->engine;
    int32_t *ids = NULL;
    int32_t n_ids = engine_prompt_submit(e, sm, &ids, err, errlen);
    proto_err_t cause = PROTO_ERR_NONE;
    if (n_ids < 0) {
        cause = PROTO_ERR_BAD_REQUEST;
    } else if (sm->op == PROTO_OP_DETOKENIZE) {
        cause = op_detokenize(w, sm->id, ids, (uint32_t)n_ids, err, errlen);
    } else {
        int32_t skip = 0;
        /* add_special false: a text prompt without the BOS the rule added */
        if (sm->no_special && sm->kind == PROTO_KIND_COMPLETION && !sm->has_prompt_ids &&
            n_ids > 0 && tokenizer_add_bos(e->tok) && ids[0] == tokenizer_bos(e->tok))
            skip = 1;
        op_tokenize(w, sm->id, ids + skip, (uint32_t)(n_ids - skip));
    }
    free(ids);
    return cause;
}

/* An op "embed" SUBMIT: each input tokenized (text with the BOS rule, as a
 * completion prompt) and handed to the scheduler as one prefill-only
 * sequence, pooled as the model's {arch}.pooling_type says. An op "rank"
 * SUBMIT: each input (a document) paired with the prompt (the query) by
 * engine_prompt_rerank, one sequence each, scored by the model's rank head. */
static proto_err_t submit_embed(struct worker *w, const proto_submit_t *sm, char *err, size_t errlen)
{
    const engine_t *e = w->engine;
    const uint32_t n = sm->n_inputs;
    const bool rank = sm->op == PROTO_OP_RANK;
    if (rank && !e->model->rank) {
        errbuf_set(err, errlen, "this model cannot rank: its file has no rank head (pooling_type 4 with cls tensors)");
        return PROTO_ERR_BAD_REQUEST;
    }
    if (sm->dimensions && sm->dimensions != (uint32_t)e->model->cfg.dim) {
        errbuf_set(err, errlen, "dimensions %u is not supported: this model's embeddings have %d",
                   sm->dimensions, e->model->cfg.dim);
        return PROTO_ERR_BAD_REQUEST;
    }
    int32_t **prompts = xcalloc(n ? n : 1, sizeof *prompts);
    int32_t *lens = xcalloc(n ? n : 1, sizeof *lens);
    proto_err_t cause = PROTO_ERR_NONE;
    for (uint32_t i = 0; i < n && cause == PROTO_ERR_NONE; i++) {
        const proto_input_t *in = &sm->inputs[i];
        if (rank && !in->text) {
            errbuf_set(err, errlen, "op rank: document %u is not text", i);
            cause = PROTO_ERR_BAD_REQUEST;
        } else if (rank) {
            lens[i] = engine_prompt_rerank(e, sm->prompt, strlen(sm->prompt), in->text, strlen(in->text),
                                           &prompts[i], err, errlen);
            if (lens[i] < 0)
                cause = PROTO_ERR_BAD_REQUEST;
        } else if (in->text) {
            lens[i] = engine_prompt_text(e, in->text, strlen(in->text), &prompts[i], err, errlen);
            if (lens[i] < 0)
                cause = PROTO_ERR_BAD_REQUEST;
        } else {
            prompts[i] = xmalloc((in->n_ids ? in->n_ids : 1) * sizeof **prompts);
            memcpy(prompts[i], in->ids, in->n_ids * sizeof **prompts);
            lens[i] = (int32_t)in->n_ids;
        }
    }
    if (cause == PROTO_ERR_NONE) {
        sched_embed_req_t r = {
            .id = sm->id,
            .priority = (int32_t)sm->priority,
            .deadline_us = sm->deadline_ms ? clock_now_us() + (int64_t)sm->deadline_ms * 1000 : 0,
            .idle_us = (int64_t)sm->deadline_ms * 1000,
            .pooling = rank ? MODEL_POOL_RANK : e->model->cfg.pooling,
            .prompts = (const int32_t *const *)prompts,
            .n_prompts = lens,
            .n_inputs = (int32_t)n,
            .partition = sm->partition,
        };
        cause = err_from_sched(sched_submit_embed(w->sched, &r, err, errlen));
    }
    for (uint32_t i = 0; i < n; i++)
        free(prompts[i]);
    free(prompts);
    free(lens);
    return cause;
}

/* Hands a SUBMIT to the scheduler. Returns PROTO_ERR_NONE, or the cause
 * with a message for an ERROR reply. */
static proto_err_t submit(struct worker *w, const proto_submit_t *sm, char *err, size_t errlen)
{
    if (sm->op == PROTO_OP_EMBED || sm->op == PROTO_OP_RANK)
        return submit_embed(w, sm, err, errlen);
    if (sm->op == PROTO_OP_TOKENIZE || sm->op == PROTO_OP_DETOKENIZE)
        return submit_tokenizer_op(w, sm, err, errlen);
    worker_req_t r;
    proto_err_t cause = worker_req_from_submit(w->engine, sm, clock_now_us(), &r, err, errlen);
    if (cause != PROTO_ERR_NONE)
        return cause;
    cause = worker_req_submit_images(&r, w->vis, w->engine, sm, NULL, err, errlen);
    if (cause != PROTO_ERR_NONE) {
        worker_req_clear(&r);
        return cause;
    }
    cause = err_from_sched(sched_submit(w->sched, &r.req, err, errlen));
    if (cause == PROTO_ERR_NONE)
        worker_lora_hold(&w->lora_holds, &r.req);
    worker_req_clear(&r);
    return cause;
}

static void on_gateway_message(struct worker *w, const proto_msg_t *m);
static void on_lora(struct worker *w, const proto_lora_op_t *op);

/* The held SUBMITs (all with images, w->vis set): each request built and
 * its images added to one batch, the batch encoded (vision_encode_batch:
 * the requests' images stacked), then each handed to the scheduler in the
 * order they came. A refusal is an ERROR reply, as submit's. */
static void submit_held(struct worker *w)
{
    if (w->n_held == 0)
        return;
    worker_req_t r[WORKER_HELD_SUBMITS];
    proto_err_t cause[WORKER_HELD_SUBMITS];
    char err[WORKER_HELD_SUBMITS][512];
    worker_img_batch_t b;
    worker_img_batch_init(&b, w->vis);
    for (int i = 0; i < w->n_held; i++) {
        const proto_submit_t *sm = &w->held[i].submit;
        cause[i] = worker_req_from_submit(w->engine, sm, clock_now_us(), &r[i], err[i], sizeof err[i]);
        if (cause[i] != PROTO_ERR_NONE)
            continue;
        cause[i] = worker_req_submit_images(&r[i], w->vis, w->engine, sm, &b, err[i], sizeof err[i]);
        if (cause[i] != PROTO_ERR_NONE)
            worker_req_clear(&r[i]);
    }
    worker_img_batch_run(&b);
    worker_img_batch_free(&b);
    for (int i = 0; i < w->n_held; i++) {
        const proto_submit_t *sm = &w->held[i].submit;
        if (cause[i] == PROTO_ERR_NONE) {
            cause[i] = err_from_sched(sched_submit(w->sched, &r[i].req, err[i], sizeof err[i]));
            if (cause[i] == PROTO_ERR_NONE)
                worker_lora_hold(&w->lora_holds, &r[i].req);
            worker_req_clear(&r[i]);
        }
        if (cause[i] != PROTO_ERR_NONE) {
            log_info("request %llu refused (%s): %s", (unsigned long long)sm->id, proto_err_name(cause[i]),
                     err[i]);
            reply_error(w, sm->id, cause[i], err[i]);
        }
        proto_msg_clear(&w->held[i]);
    }
    w->n_held = 0;
}

/* A message of the drain: a SUBMIT with images is held (the caller must
 * then not clear *m: the worker owns it until submit_held); anything else
 * first submits the held ones, keeping the order, then is handled. */
static bool hold_or_handle(struct worker *w, proto_msg_t *m)
{
    if (m->type == PROTO_SUBMIT && m->submit.n_imgs && w->vis && !w->draining && m->submit.op != PROTO_OP_EMBED &&
        m->submit.op != PROTO_OP_RANK && m->submit.op != PROTO_OP_TOKENIZE &&
        m->submit.op != PROTO_OP_DETOKENIZE) {
        if (w->n_held == WORKER_HELD_SUBMITS)
            submit_held(w);
        w->held[w->n_held++] = *m;
        return true;
    }
    submit_held(w);
    on_gateway_message(w, m);
    return false;
}

static void on_gateway_message(struct worker *w, const proto_msg_t *m)
{
    char err[512];
    switch (m->type) {
    case PROTO_SUBMIT: {
        if (w->draining) {
            reply_error(w, m->submit.id, PROTO_ERR_UNAVAILABLE, "worker is draining");
            break;
        }
        proto_err_t cause = submit(w, &m->submit, err, sizeof err);
        if (cause != PROTO_ERR_NONE) {
            log_info("request %llu refused (%s): %s", (unsigned long long)m->submit.id,
                     proto_err_name(cause), err);
            reply_error(w, m->submit.id, cause, err);
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
    case PROTO_LORA:
        on_lora(w, &m->lora);
        break;
    case PROTO_ERROR:
        log_warn("gateway error %u (%s): %s", m->error.code,
                 proto_err_name(proto_error_cause(&m->error)), m->error.message);
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
    worker_lora_release_all(&w->lora_holds);
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
        .prefix_cache_disk_hits = st.prefix_disk_hit_tokens,
        .kv_evictions = st.kv_evictions,
        .spec_drafts = st.spec_drafts,
        .spec_draft_tokens = st.spec_draft_tokens,
        .spec_accepted_tokens = st.spec_accepted_tokens,
        .steps_stopped = st.steps_stopped,
    };
    if (w->disk) {
        kv_disk_stats_t ds;
        kv_disk_stats(w->disk, &ds);
        load.kv_disk_state = ds.enabled ? 1 : 2;
        load.kv_disk_bytes_written = ds.bytes_written;
        load.kv_disk_bytes_read = ds.bytes_read;
        load.kv_disk_evictions = ds.n_evicted;
        load.kv_disk_rejected = ds.n_rejected;
        load.kv_disk_bytes_used = ds.bytes_used;
    }
    worker_link_set_load(w->link, &load);
}

/* TEST ONLY: a PAGODA_TEST_*_MS variable in 1..3600000, else 0. */
static int64_t test_env_ms(const char *name)
{
    const char *s = getenv(name);
    char *end;
    unsigned long ms = s ? strtoul(s, &end, 10) : 0;
    return s && *s && !*end && ms > 0 && ms <= 3600000 ? (int64_t)ms : 0;
}

/* TEST ONLY (worker.h): slow or wedged steps and a slow model load for the
 * liveness and restart tests, without a big model. Read once; never set in
 * production. */
static void test_step_env(struct worker *w)
{
    int64_t ms = test_env_ms("PAGODA_TEST_STEP_SLEEP_MS");
    if (ms) {
        w->test_step_sleep_us = ms * 1000;
        log_warn("TEST ONLY: PAGODA_TEST_STEP_SLEEP_MS=%lld: every step sleeps first", (long long)ms);
    }
    ms = test_env_ms("PAGODA_TEST_LOAD_SLEEP_MS");
    if (ms) {
        w->test_load_sleep_us = ms * 1000;
        log_warn("TEST ONLY: PAGODA_TEST_LOAD_SLEEP_MS=%lld: the model load sleeps first", (long long)ms);
    }
    const char *s = getenv("PAGODA_TEST_STEP_WEDGE");
    if (s && *s) {
        w->test_step_wedge = xstrdup(s);
        log_warn("TEST ONLY: PAGODA_TEST_STEP_WEDGE=%s: a step wedges when that file exists", s);
    }
    s = getenv("PAGODA_TEST_STEP_HOLD");
    if (s && *s) {
        w->test_step_hold = xstrdup(s);
        log_warn("TEST ONLY: PAGODA_TEST_STEP_HOLD=%s: no step runs while that file exists (messages are "
                 "still handled)", s);
    }
    s = getenv("PAGODA_TEST_ARMED_HOLD");
    if (s && *s) {
        w->test_armed_hold = xstrdup(s);
        log_warn("TEST ONLY: PAGODA_TEST_ARMED_HOLD=%s: a step that a better tier may stop waits before its "
                 "forward pass while that file exists", s);
    }
}

/* TEST ONLY (PAGODA_TEST_ARMED_HOLD, sched_set_armed_hook): a step whose
 * preemption word is armed waits, before its forward pass, while the file
 * exists, so a test can send a better tier's request that arrives while
 * the step is in flight (tests/integration/preempt.sh). The link thread
 * still takes messages and makes its offers meanwhile. */
static void armed_hold_hook(void *ud, sched_t *s)
{
    (void)s;
    const struct worker *w = ud;
    if (access(w->test_armed_hold, F_OK) != 0)
        return;
    log_warn("TEST ONLY: armed step held (%s exists)", w->test_armed_hold);
    while (access(w->test_armed_hold, F_OK) == 0)
        clock_sleep_us(2000);
    log_warn("TEST ONLY: armed step released");
}

/* TEST ONLY: PAGODA_TEST_STEP_HOLD's file exists: requests are admitted
 * and messages handled, but no step runs (e.g. an adapter unloaded while
 * its request is running, tests/integration/lora_admin.sh). */
static bool test_step_held(const struct worker *w)
{
    return w->test_step_hold && access(w->test_step_hold, F_OK) == 0;
}

static void test_step_delay(struct worker *w)
{
    if (w->test_step_sleep_us)
        clock_sleep_us(w->test_step_sleep_us);
    if (w->test_step_wedge && unlink(w->test_step_wedge) == 0) {
        log_warn("TEST ONLY: step wedged (%s found)", w->test_step_wedge);
        for (;;)
            clock_sleep_us(3600 * 1000000LL);
    }
}

/* e's int8 packings: through the pack cache in cache_dir (keyed by the
 * weights hash; *job = the deferred write of a new file) when there is a
 * cache_dir, packed in memory otherwise. */
static void pack_weights(engine_t *e, int n_threads, const char *cache_dir, const file_mac_key_t *key,
                         uint64_t weights_hash, pack_cache_write_t **job)
{
    if (cache_dir)
        pack_cache_pack(e->model, n_threads, cache_dir, key, weights_hash, NULL, job);
    else
        engine_pack_int8(e, n_threads);
}

/* kv_budget.h's inputs but the cap into w->scfg.kv_mem (sched_new applies
 * the rule): mem is this worker's measurement (F, and A when the gateway
 * gave none), the weights are what the worker holds now that it has packed. */
static void kv_mem_inputs(struct worker *w, const worker_config_t *cfg, const memavail_t *mem)
{
    const uint64_t mib = 1u << 20;
    uint64_t f = mem->avail_bytes == MEMAVAIL_UNLIMITED ? 0 : mem->avail_bytes / mib;
    kv_budget_in_t *in = &w->scfg.kv_mem;
    in->free_mib = f;
    in->avail_mib = cfg->mem_avail_bytes ? cfg->mem_avail_bytes / mib : f;
    in->n_workers = cfg->mem_workers ? cfg->mem_workers : 1;
    size_t held = model_held_bytes(w->engine->model) + (w->draft ? model_held_bytes(w->draft->model) : 0);
    in->weights_mib = (held + mib - 1) / mib;
    w->scfg.kv_auto = true;
    if (mem->avail_bytes == MEMAVAIL_UNLIMITED)
        log_warn("kv pool: cannot read /proc/meminfo: the pool gets the floor (set --kv-budget-mb)");
    else if (mem->cgroup_bytes < mem->meminfo_bytes)
        log_info("memory free at start: %llu MiB, the headroom under cgroup %s's memory.max (MemAvailable %llu MiB)",
                 (unsigned long long)f, mem->cgroup_path, (unsigned long long)(mem->meminfo_bytes / mib));
    else
        log_info("memory free at start: MemAvailable %llu MiB", (unsigned long long)f);
}

/* The cache directory (private, or an error) and its MAC key into *key;
 * *have_hash when the weights' hash (remembered there by the file's
 * identity, *hash_cached) is in *hash. 0 ok, -1 err set. */
static int open_cache_dir(const worker_config_t *cfg, const char *cache_dir, const char *model_path,
                          file_mac_key_t *key, uint64_t *hash, bool *have_hash, bool *hash_cached,
                          char *err, size_t errlen)
{
    /* the folder holds users' token ids and bytes we run: ours alone,
     * or we do not start (common/private_dir.h); its MAC key beside it */
    char kpath[4200], herr[256];
    if (private_dir_make(cache_dir, "--kv-cache-dir", err, errlen) != 0)
        return -1;
    if (cfg->kv_disk_key)
        snprintf(kpath, sizeof kpath, "%s", cfg->kv_disk_key);
    else if (file_mac_key_default_path(cache_dir, kpath, sizeof kpath) != 0) {
        errbuf_set(err, errlen, "--kv-cache-dir %s: path too long", cache_dir);
        return -1;
    }
    if (file_mac_key_load(kpath, key, err, errlen) != 0)
        return -1;
    if (kv_disk_hash_file_cached(model_path, cache_dir, key, hash, hash_cached, herr, sizeof herr) != 0)
        log_warn("kv disk tier and pack cache off: cannot hash the weights: %s", herr);
    else
        *have_hash = true;
    return 0;
}

/* A standby: the costs of a start that need no memory (exec, the weights
 * hash, the GGUF and tokenizer) are paid; waits for the gateway's byte on
 * fd. 0 started, -1 released before it was needed. */
static int wait_standby(int fd, const char *model_path, int64_t t_loaded_us)
{
    log_info("standby: %s loaded in %.0f ms, waiting to be started", model_path, (double)t_loaded_us / 1e3);
    char go;
    ssize_t r;
    do
        r = read(fd, &go, 1);
    while (r < 0 && errno == EINTR);
    close(fd);
    if (r != 1) {
        log_info("standby: released by the gateway before it was needed");
        return -1;
    }
    return 0;
}

/* --spec draft: the draft model, packed (its packings cached under its own
 * hash) and checked against the target. 0 ok, -1 err set. */
static int load_draft(struct worker *w, const worker_config_t *cfg, const char *cache_dir,
                      const file_mac_key_t *key, char *err, size_t errlen)
{
    if (!cfg->draft_path) {
        errbuf_set(err, errlen, "--spec draft needs --draft-model FILE.gguf");
        return -1;
    }
    w->draft = engine_load(cfg->draft_path, err, errlen);
    if (!w->draft)
        return -1;
    if (!w->scfg.exact_matmul) {
        char herr[256];
        uint64_t draft_hash = 0;
        bool draft_hashed = cache_dir && kv_disk_hash_file_cached(cfg->draft_path, cache_dir, key, &draft_hash, NULL,
                                                                  herr, sizeof herr) == 0;
        pack_weights(w->draft, w->scfg.n_threads, draft_hashed ? cache_dir : NULL, key, draft_hash,
                     &w->draft_pack_write);
    }
    if (sched_draft_check(w->engine->model, w->engine->tok, w->draft->model, w->draft->tok, err,
                          errlen) != 0)
        return -1;
    w->scfg.draft_model = w->draft->model;
    return 0;
}

/* The disk tier (its folder keyed by the weights' hash and the KV format)
 * attached to the pool, and the warm start planned: the most recent blocks
 * into free RAM blocks, first before registering (warm_before_register),
 * what is left in idle passes of the loop after it (worker_run_once). */
static void open_disk_tier(struct worker *w, const worker_config_t *cfg, const char *cache_dir,
                           const file_mac_key_t *key, uint64_t weights_hash)
{
    /* the disk tier: its folder is keyed by the weights' hash and the KV format */
    const kv_store_t *kst = kv_pool_store(sched_kv_pool(w->sched));
    kv_disk_shape_t shape = {.kv_type = kst->type, .qblock = kst->qblock, .block_size = kst->block_size,
                             .n_layer = kst->n_layer, .kv_dim = kst->kv_dim, .weights_hash = weights_hash};
    w->disk = kv_disk_open(cache_dir, cfg->kv_cache_bytes ? cfg->kv_cache_bytes : (uint64_t)4096 << 20, &shape,
                           key);
    kv_disk_attach(w->disk, sched_kv_pool(w->sched));
    kv_disk_set_threads(w->disk, w->scfg.n_threads);
    kv_pool_t *pool = sched_kv_pool(w->sched);
    kv_pool_stats_t ps;
    kv_pool_stats(pool, &ps);
    kv_pool_warm_begin(pool, (int32_t)((int64_t)ps.n_free * cfg->kv_warm_percent / 100));
    kv_pool_stats(pool, &ps);
    w->warm_left = ps.n_warm_planned > 0;
    w->warm_batch = w->scfg.n_threads > 0 ? w->scfg.n_threads : 1;
    if (w->warm_left)
        log_info("kv warm start: %d blocks of the disk tier to load (budget %d%% of %d blocks)",
                 ps.n_warm_planned, cfg->kv_warm_percent, ps.n_blocks);
}

static void warm_step(struct worker *w);

/* The warm start before REGISTER, up to WORKER_WARM_BEFORE_REGISTER_US:
 * a restarted worker's first request (a coding agent's next conversation,
 * the same ~20k-token system prompt) then finds its prefix in RAM. Loaded
 * after registering instead, it raced that request: the request's own blocks
 * came from disk one file (and one keyed MAC) at a time in its first step,
 * and the warm start's reads took the cores. The most recent blocks come
 * first, so the budget covers the latest prefixes; the supervisor has no
 * start-up timeout to meet (a real-size model loads for longer). */
static void warm_before_register(struct worker *w)
{
    int64_t t_end = clock_now_us() + WORKER_WARM_BEFORE_REGISTER_US;
    int32_t batch = w->warm_batch;
    w->warm_batch = WORKER_WARM_BATCH_BEFORE_REGISTER; /* no request to interleave with yet */
    while (w->warm_left && clock_now_us() < t_end)
        warm_step(w);
    w->warm_batch = batch;
    if (w->warm_left)
        log_info("kv warm start: the rest loads while serving (%.0f s before registering)",
                 WORKER_WARM_BEFORE_REGISTER_US / 1e6);
}

/* Before REGISTER: the weights made resident (model_advise_resident: after
 * a restart the packed weights are in the page cache but not mapped, and a
 * new process maps them on first touch) and one throwaway forward pass
 * (sched_warm_up: the forward pass's scratch and OpenMP threads). Without
 * it the first request after a kill -9 and restart paid for both inside
 * its first step (issue #35's TTFT after a restart). */
static void warm_up(struct worker *w)
{
    int64_t t0 = clock_now_us();
    size_t n = model_advise_resident(w->engine->model);
    if (w->draft)
        n += model_advise_resident(w->draft->model);
    int64_t t1 = clock_now_us();
    int rc = sched_warm_up(w->sched);
    log_info("warm-up: %.0f MiB of weights made resident in %.0f ms, a 1-token forward pass in %.0f ms%s",
             (double)n / 1048576.0, (double)(t1 - t0) / 1e3, (double)(clock_now_us() - t1) / 1e3,
             rc == 0 ? "" : " (not run: no free KV block, or it failed)");
}

/* What w serves, for REGISTER: borrows w's strings; the adapters go in
 * lora[LORA_MAX_ADAPTERS]. */
static void fill_register(struct worker *w, proto_register_t *reg, proto_reg_lora_t *lora)
{
    *reg = (proto_register_t){
        .model = w->model_name, .replica = w->replica, .host = w->host, .pid = (uint32_t)getpid(),
        .capacity = w->capacity, .n_ctx = w->n_ctx,
        .n_vocab = (uint32_t)w->engine->model->cfg.vocab,
        .kv_blocks = w->kv_blocks, .block_size = w->block_size,
    };
    if (w->vis) { /* the gateway accepts images for this model */
        worker_vis_info_t vi;
        worker_vis_info(w->vis, &vi);
        reg->vis = (proto_vis_t){.has = true, .size = vi.size, .n_tok = vi.n_tok, .preproc = vi.preproc};
        snprintf(reg->vis.proj, sizeof reg->vis.proj, "%s", vi.proj);
    }
    /* the adapters, so the gateway routes their requests here and keys them as we do */
    _Static_assert(LORA_MAX_ADAPTERS <= PROTO_MAX_REG_LORA && LORA_MAX_RANK <= PROTO_MAX_LORA_RANK,
                   "a worker's adapters fit one REGISTER");
    for (int32_t i = 0; i < w->engine->n_lora; i++) {
        const engine_lora_t *el = &w->engine->lora[i];
        lora[i] = (proto_reg_lora_t){.name = (char *)el->name, .hash = el->ad->hash,
                                     .rank = (uint32_t)el->ad->max_rank, .scale = el->scale};
    }
    reg->lora = w->engine->n_lora ? lora : NULL;
    reg->n_lora = (uint32_t)w->engine->n_lora;
}

/* LORA: load or unload an adapter at run time (the gateway's /admin). On
 * success the new set goes out as a REGISTER before the LORA_ACK, so the
 * gateway knows it when the answer comes. A request running with an
 * unloaded adapter keeps it (worker_lora.h). */
static void on_lora(struct worker *w, const proto_lora_op_t *op)
{
    char err[512] = "";
    int rc;
    if (op->path) {
        rc = engine_load_lora(w->engine, op->name, op->path, (float)op->scale, err, sizeof err);
    } else {
        rc = engine_unload_lora(w->engine, op->name);
        if (rc != 0)
            snprintf(err, sizeof err, "adapter '%s' is not loaded on this worker", op->name);
    }
    if (rc == 0) {
        proto_register_t reg;
        proto_reg_lora_t lora[LORA_MAX_ADAPTERS];
        fill_register(w, &reg, lora);
        reg.heartbeat_ms = (uint32_t)worker_link_heartbeat_ms(w->link);
        worker_link_register(w->link, &reg);
    } else {
        log_warn("LORA %s %s: %s", op->path ? "load" : "unload", op->name, err);
    }
    proto_msg_t ack;
    proto_msg_init(&ack, PROTO_LORA_ACK);
    ack.lora = (proto_lora_op_t){.seq = op->seq, .name = op->name, .message = rc == 0 ? NULL : err};
    worker_link_send(w->link, &ack);
}

/* The link to the gateway, registering what w serves. 0 ok, -1 err set. */
static int connect_link(struct worker *w, const worker_config_t *cfg, char *err, size_t errlen)
{
    proto_register_t reg;
    proto_reg_lora_t lora[LORA_MAX_ADAPTERS];
    fill_register(w, &reg, lora);
    worker_link_config_t lcfg = {
        .endpoint = cfg->endpoint,
        .heartbeat_ms = w->heartbeat_ms,
        .heartbeat_explicit = cfg->heartbeat_explicit,
        .work_done = &w->layers_done,
        .preempt = sched_preempt_word(w->sched), /* a better tier's SUBMIT stops a worse prefill step */
        .reg = &reg,
        .curve_server_key = cfg->curve_server_key,
        .curve_public_key = cfg->curve_public_key,
        .curve_secret_key = cfg->curve_secret_key,
    };
    if (cfg->curve_server_key)
        log_info("CURVE on: our public key %s (must be in the gateway's authorized keys)",
                 cfg->curve_public_key ? cfg->curve_public_key : "?");
    sched_set_progress(w->sched, &w->layers_done);
    w->link = worker_link_new(&lcfg);
    if (!w->link) {
        errbuf_set(err, errlen, "cannot connect to gateway endpoint '%s'", cfg->endpoint);
        return -1;
    }
    return 0;
}

worker_t *worker_new(const worker_config_t *cfg, char *err, size_t errlen)
{
    size_t name_len = cfg->model_name ? strlen(cfg->model_name) : 0;
    if (!name_len || name_len > PROTO_MAX_NAME || !cfg->model_path || !cfg->endpoint) {
        errbuf_set(err, errlen, "worker: a model name (1..%d bytes), a model file and a gateway "
                   "endpoint are required", PROTO_MAX_NAME);
        return NULL;
    }
    if (errlen)
        err[0] = '\0';
    struct worker *w = xcalloc(1, sizeof *w);
    memcpy(w->model_name, cfg->model_name, name_len);
    w->model_path = xstrdup(cfg->model_path);
    w->heartbeat_ms = cfg->heartbeat_ms ? cfg->heartbeat_ms : PROTO_HEARTBEAT_MS;
    w->scfg = cfg->sched;
    test_step_env(w);

    if (w->test_load_sleep_us)
        clock_sleep_us(w->test_load_sleep_us);
    int64_t t_start = clock_now_us(), t_hash, t_load, t_pack, t_sched, t_disk;
    /* with a cache directory: the weights' hash (remembered there by the
     * file's identity) keys both the packed-weight cache and the disk tier */
    const char *cache_dir = cfg->kv_cache_dir && *cfg->kv_cache_dir ? cfg->kv_cache_dir : NULL;
    uint64_t weights_hash = 0;
    bool have_hash = false, hash_cached = false;
    file_mac_key_t key;
    if (cache_dir && open_cache_dir(cfg, cache_dir, w->model_path, &key, &weights_hash, &have_hash,
                                    &hash_cached, err, errlen) != 0)
        goto err;
    t_hash = clock_now_us();
    w->engine = engine_load(w->model_path, err, errlen);
    if (!w->engine)
        goto err;
    for (int32_t i = 0; i < cfg->n_loras; i++)
        if (engine_add_lora(w->engine, cfg->loras[i], err, errlen) != 0)
            goto err;
    if (cfg->mmproj_path) { /* the image projector: its rows must be the model's width */
        if (vision_load(cfg->mmproj_path, w->scfg.n_threads, &w->vis, err, errlen) != 0)
            goto err;
        if (vision_config(w->vis)->out_dim != w->engine->model->cfg.dim) {
            errbuf_set(err, errlen, "%s writes rows of %d, the model's width is %d", cfg->mmproj_path,
                       vision_config(w->vis)->out_dim, w->engine->model->cfg.dim);
            goto err;
        }
        /* int8 / bf16 matmuls as the text model's, unless exact; scratch
         * for the held SUBMITs' images in one pass where it takes at most
         * 256 MiB (an image of the 896 px / 27-block encoder takes ~210) */
        vision_set_fast(w->vis, !w->scfg.exact_matmul);
        vision_set_max_batch(w->vis, vision_batch_for_bytes(w->vis, (size_t)256 << 20, WORKER_HELD_SUBMITS));
    }
    t_load = clock_now_us();
    bool from_standby = false;
    if (cfg->standby_fd >= 0) {
        if (wait_standby(cfg->standby_fd, w->model_path, t_load - t_start) != 0)
            goto err_quiet; /* err is still "" */
        t_start = t_hash = t_load = clock_now_us();
        from_standby = true;
    }
    /* F of kv_budget.h: after the GGUF is mapped (and a standby woken),
     * before the packings and the pool take memory */
    memavail_t mem = {0};
    if (w->scfg.kv_blocks <= 0 && w->scfg.kv_budget_bytes == 0)
        memavail_read(NULL, &mem);
    if (!w->scfg.exact_matmul)
        pack_weights(w->engine, w->scfg.n_threads, have_hash ? cache_dir : NULL, &key, weights_hash, &w->pack_write);
    t_pack = clock_now_us();
    if (cfg->ctx_cap && (int32_t)cfg->ctx_cap < w->engine->model->cfg.ctx)
        w->engine->model->cfg.ctx = (int32_t)cfg->ctx_cap;
    if (w->scfg.spec == SPEC_DRAFT && load_draft(w, cfg, cache_dir, &key, err, errlen) != 0)
        goto err;
    if (w->scfg.kv_blocks <= 0 && w->scfg.kv_budget_bytes == 0)
        kv_mem_inputs(w, cfg, &mem);
    w->sched = sched_new(w->engine->model, w->engine->tok, &w->scfg, on_sched_event, w, err,
                         errlen);
    if (!w->sched)
        goto err;
    if (w->test_armed_hold)
        sched_set_armed_hook(w->sched, armed_hold_hook, w);
    t_sched = clock_now_us();
    sched_stats_t st0;
    sched_stats(w->sched, &st0);
    w->capacity = (uint32_t)sched_capacity(w->sched);
    w->n_ctx = (uint32_t)sched_context_length(w->sched);
    w->kv_blocks = (uint32_t)st0.kv_blocks_total;
    w->block_size = (uint32_t)w->scfg.block_size;
    if (have_hash) {
        log_info("kv disk tier: weights hash %016llx (%s, %.0f ms)", (unsigned long long)weights_hash,
                 hash_cached ? "remembered" : "hashed", (double)(t_hash - t_start) / 1000.0);
        open_disk_tier(w, cfg, cache_dir, &key, weights_hash);
        warm_before_register(w);
    }
    t_disk = clock_now_us();
    if (!cfg->no_warm_up)
        warm_up(w);
    int64_t t_warm = clock_now_us();
    make_replica_id(w);
    if (connect_link(w, cfg, err, errlen) != 0)
        goto err;
    log_info("serving model %s (%s) as %s: %u seqs, context %u, %u KV blocks", w->model_name,
             w->model_path, w->replica, w->capacity, w->n_ctx, w->kv_blocks);
    /* the pack files, if due, are written while we serve: registering
     * does not wait for 0.6 GB to reach the disk */
    pack_cache_write_begin(w->pack_write);
    pack_cache_write_begin(w->draft_pack_write);
    log_info("start-up %.0f ms%s: weights hash %.0f, load %.0f, pack %.0f, scheduler %.0f, disk tier %.0f, "
             "warm-up %.0f, link %.0f",
             (double)(clock_now_us() - t_start) / 1e3, from_standby ? " from standby" : "", (double)(t_hash - t_start) / 1e3, (double)(t_load - t_hash) / 1e3,
             (double)(t_pack - t_load) / 1e3, (double)(t_sched - t_pack) / 1e3, (double)(t_disk - t_sched) / 1e3,
             (double)(t_warm - t_disk) / 1e3, (double)(clock_now_us() - t_warm) / 1e3);
    w->kv_report = kv_report_new(sched_kv_pool(w->sched));
    w->prefault_left = true;
    return w;
err:
    if (errlen && !err[0])
        errbuf_set(err, errlen, "worker start-up failed");
err_quiet:
    worker_free(&w);
    return NULL;
}

void worker_free(worker_t **wp)
{
    struct worker *w = *wp;
    if (!w)
        return;
    kv_report_free(&w->kv_report);
    worker_link_free(&w->link);
    if (w->disk && w->sched) {
        /* a clean stop keeps the hot set: a restart (or the next on-demand
         * start) finds it on disk */
        int32_t n = kv_pool_tier_flush(sched_kv_pool(w->sched));
        log_info("kv disk tier: %d cached blocks on disk at stop", n);
        kv_pool_set_tier(sched_kv_pool(w->sched), NULL);
    }
    sched_free(&w->sched);
    kv_disk_close(&w->disk);
    pack_cache_write_end(&w->pack_write); /* waits for a write in progress: it reads the arena */
    pack_cache_write_end(&w->draft_pack_write);
    worker_lora_holds_free(&w->lora_holds); /* before the engine drops its references */
    engine_free(&w->engine);
    engine_free(&w->draft);
    for (int i = 0; i < w->n_held; i++)
        proto_msg_clear(&w->held[i]);
    vision_free(&w->vis);
    free(w->test_step_wedge);
    free(w->test_step_hold);
    free(w->test_armed_hold);
    strbuf_free(&w->wire_text);
    free(w->model_path);
    free(w);
    *wp = NULL;
}

/* One idle pass of the warm start; its log line when it ends. */
static void warm_step(struct worker *w)
{
    kv_pool_t *pool = sched_kv_pool(w->sched);
    if (w->t_warm_us == 0)
        w->t_warm_us = clock_now_us();
    w->warm_left = kv_pool_warm_step(pool, w->warm_batch);
    if (w->warm_left)
        return;
    kv_pool_stats_t ps;
    kv_pool_stats(pool, &ps);
    log_info("kv warm start: %llu blocks (%.1f MiB of K/V) loaded from the disk tier in %.1f ms; %d free",
             (unsigned long long)ps.n_warm_loaded,
             (double)ps.n_warm_loaded * (double)kv_pool_block_bytes_q(kv_pool_store(pool)->n_layer,
                 kv_pool_store(pool)->kv_dim, ps.block_size, kv_pool_store(pool)->type, kv_pool_store(pool)->qblock) /
                 1048576.0,
             (double)(clock_now_us() - w->t_warm_us) / 1000.0, ps.n_free);
}

bool worker_run_once(worker_t *w, int wake_fd)
{
    if (w->stop)
        return false;
    publish_load(w);
    kv_report_flush(w->kv_report, w->link);
    bool busy = sched_busy(w->sched);
    /* idle: first the warm start, one block per thread per pass (~1-3 ms:
     * a request that comes waits at most that), then map the KV pool's
     * pages a few MiB at a time (~1 ms each), so a start never waits for
     * them and a request waits at most one piece */
    if (!busy && w->warm_left)
        warm_step(w);
    else if (!busy && w->prefault_left)
        w->prefault_left = sched_prefault_step(w->sched, (size_t)8 << 20);
    proto_msg_t m;
    /* drain every queued message before the next step so CANCELs and new
     * SUBMITs join this step's batch */
    bool held = busy && test_step_held(w);
    int prc = worker_link_poll(w->link, held ? 10 : busy || w->prefault_left || w->warm_left ? 0 : worker_link_heartbeat_ms(w->link),
                               wake_fd, &m);
    drop_orphans(w);
    while (prc == WORKER_LINK_MSG) {
        if (!hold_or_handle(w, &m))
            proto_msg_clear(&m);
        if (w->stop)
            break;
        prc = worker_link_poll(w->link, 0, wake_fd, &m);
        drop_orphans(w);
    }
    submit_held(w); /* the drain's SUBMITs with images: one encode batch */
    if (prc == WORKER_LINK_WAKE) {
        int sig = sigwake_signal();
        log_info("%s: exiting", sig > 0 ? strsignal(sig) : "woken");
        w->stop = true;
    }
    if (w->stop)
        return false;
    if (sched_busy(w->sched) && !test_step_held(w)) {
        publish_load(w); /* with this turn's SUBMITs: the link reports us busy */
        worker_link_step_begin(w->link);
        test_step_delay(w);
        if (sched_step(w->sched) < 0)
            log_error("scheduler step failed; its requests were ended with an error");
        worker_link_step_end(w->link);
    }
    if (w->draining && !sched_busy(w->sched)) {
        log_info("drained: exiting");
        w->stop = true;
    }
    return !w->stop;
}

int worker_run(worker_t *w, int wake_fd)
{
    while (worker_run_once(w, wake_fd))
        ;
    return 0;
}

const char *worker_replica(const worker_t *w) { return w->replica; }
const sched_t *worker_sched(const worker_t *w) { return w->sched; }
const engine_t *worker_engine(const worker_t *w) { return w->engine; }
