/* submit.c — the internal request (request_t, gateway/request.h) → SUBMIT translation
 * (see submit.h), the gateway's twin of worker_req_from_submit. */
#include "gateway/submit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "common/clock.h"
#include "common/grammar/gbnf.h"
#include "common/text/image_run.h"
#include "common/xalloc.h"
#include "gateway/oai.h"

/* What oai.c accepts must fit in a SUBMIT (proto/msg.h), or the worker
 * cannot decode it. */
_Static_assert(OAI_MAX_MESSAGES <= PROTO_MAX_MESSAGES, "oai messages > proto messages");
_Static_assert(OAI_MAX_TEXT_BYTES <= PROTO_MAX_PROMPT, "oai text > proto prompt/content");
_Static_assert(OAI_MAX_PROMPT_TOKENS <= PROTO_MAX_TOKENS, "oai prompt tokens > proto tokens");
_Static_assert(OAI_MAX_GRAMMAR_BYTES <= PROTO_MAX_GRAMMAR && GBNF_MAX_TEXT <= PROTO_MAX_GRAMMAR, "grammar text > proto grammar");
_Static_assert(OAI_MAX_STOP <= PROTO_MAX_STOP, "oai stop count > proto stop count");
_Static_assert(OAI_MAX_STOP_BYTES <= PROTO_MAX_STOP_LEN, "oai stop length > proto stop length");
_Static_assert(OAI_MAX_LOGIT_BIAS <= PROTO_MAX_LOGIT_BIAS, "oai logit_bias > proto logit_bias");
_Static_assert(OAI_MAX_TOP_LOGPROBS <= PROTO_MAX_TOP_LOGPROBS, "oai top_logprobs > proto");
_Static_assert(OAI_MAX_MODEL_BYTES <= PROTO_MAX_NAME, "oai model name > proto name");
_Static_assert(OAI_MAX_MAX_TOKENS <= 0x7fffffff, "oai max_tokens > proto max_tok (u31)");
/* the largest SUBMIT: all text (or 5 msgpack bytes per token id), the stop
 * strings, logit_bias (≤ 14 bytes an entry) and 1 MiB for roles and fields */
_Static_assert((uint64_t)(OAI_MAX_TEXT_BYTES > 5ull * OAI_MAX_PROMPT_TOKENS ? OAI_MAX_TEXT_BYTES
                                                                              : 5ull * OAI_MAX_PROMPT_TOKENS) +
                       (uint64_t)OAI_MAX_STOP * OAI_MAX_STOP_BYTES + 14ull * OAI_MAX_LOGIT_BIAS + (1ull << 20) <=
                   PROTO_MAX_BODY,
               "the largest request the gateway accepts does not fit in a SUBMIT body");

_Static_assert(REQUEST_MAX_IMAGES == PROTO_MAX_PICTURES && IMAGE_RUN_MAX_TILES == PROTO_MAX_TILES,
               "request images and their tiles = SUBMIT imgs");
_Static_assert(OAI_MAX_CONTENT_PARTS <= PROTO_MAX_PARTS, "oai content parts > SUBMIT parts");

static char *dup_or_null(const char *s)
{
    return s ? xstrdup(s) : NULL;
}

/* The index in the SUBMIT's imgs of picture i's first image: each picture
 * before it is its tiles and its global image (submit_images). */
static uint32_t first_img(const request_t *o, size_t i)
{
    uint32_t k = 0;
    for (size_t j = 0; j < i; j++)
        k += o->images[j].nx * o->images[j].ny + 1;
    return k;
}

/* A message with images: its text and image parts, in order (absent for
 * one without). */
static void submit_parts(const request_t *o, const request_message_t *m, proto_chat_msg_t *c)
{
    if (!m->n_parts)
        return;
    c->n_parts = (uint32_t)m->n_parts;
    c->parts = xcalloc(m->n_parts, sizeof *c->parts);
    for (size_t k = 0; k < m->n_parts; k++)
        if (m->parts[k].i_image < 0)
            c->parts[k].text = xstrdup(m->parts[k].text);
        else
            c->parts[k].img = first_img(o, (size_t)m->parts[k].i_image);
}

/* img = a copy of rgb (w × h) with its hash */
static void put_img(proto_img_t *img, uint32_t w, uint32_t h, const uint8_t *rgb, const uint8_t *hash)
{
    size_t n = (size_t)w * h * 3;
    *img = (proto_img_t){.w = w, .h = h, .rgb = xmalloc(n ? n : 1), .n_rgb = (uint32_t)n};
    memcpy(img->rgb, rgb, n);
    memcpy(img->hash, hash, sizeof img->hash);
}

/* The request's images as request_images_prepare fitted them (RGB8 at the
 * encoder's side, hashed); copies, which the SUBMIT owns. A picture cut
 * into tiles is its tiles row-major then its global image, the first
 * carrying the grid (proto/msg.h imgs). */
static void submit_images(const request_t *o, proto_submit_t *s)
{
    if (!o->n_images)
        return;
    s->n_imgs = first_img(o, o->n_images);
    s->imgs = xcalloc(s->n_imgs, sizeof *s->imgs);
    uint32_t k = 0;
    for (size_t i = 0; i < o->n_images; i++) {
        const request_image_t *im = &o->images[i];
        uint32_t nt = im->nx * im->ny;
        for (uint32_t t = 0; t < nt; t++)
            put_img(&s->imgs[k + t], im->w, im->h, im->tiles[t].rgb, im->tiles[t].hash);
        put_img(&s->imgs[k + nt], im->w, im->h, im->rgb, im->hash);
        s->imgs[k].nx = nt ? im->nx : 0;
        s->imgs[k].ny = nt ? im->ny : 0;
        k += nt + 1;
    }
}

void submit_from_request(const request_t *o, uint64_t id, prio_tier_t tier, proto_submit_t *s)
{
    s->id = id;
    s->priority = (proto_priority_t)tier;
    if (o->kind == REQUEST_CHAT) {
        s->kind = PROTO_KIND_CHAT;
        s->n_messages = (uint32_t)o->n_messages;
        s->messages = xcalloc(o->n_messages, sizeof *s->messages);
        for (size_t i = 0; i < o->n_messages; i++) {
            s->messages[i].role = xstrdup(request_role_name(o->messages[i].role));
            s->messages[i].content = xstrdup(o->messages[i].content);
            s->messages[i].tool_calls = dup_or_null(o->messages[i].tool_calls_json);
            s->messages[i].tool_call_id = dup_or_null(o->messages[i].tool_call_id);
            submit_parts(o, &o->messages[i], &s->messages[i]);
        }
        submit_images(o, s);
        s->has_think = o->has_enable_thinking;
        s->think = o->enable_thinking;
        /* tool_choice none: the tools are not announced, so no call can come */
        if (o->tools_json && o->tool_choice != REQUEST_TOOL_CHOICE_NONE) {
            s->tools = xstrdup(o->tools_json);
            if (o->tool_choice == REQUEST_TOOL_CHOICE_REQUIRED) {
                s->tool_choice = xstrdup("required");
            } else if (o->tool_choice == REQUEST_TOOL_CHOICE_NAMED) {
                size_t n = strlen(o->tool_choice_name) + 10;
                s->tool_choice = xmalloc(n);
                snprintf(s->tool_choice, n, "function:%s", o->tool_choice_name);
            }
            s->no_par_tools = !o->parallel_tool_calls;
        }
    } else {
        s->kind = PROTO_KIND_COMPLETION;
        if (o->op == REQUEST_OP_EMBED || o->op == REQUEST_OP_RANK) {
            /* one SUBMIT for all inputs: each a sequence of its own, its
             * EVENT's choice = the input's index */
            s->n_inputs = (uint32_t)o->n_inputs;
            s->inputs = xcalloc(o->n_inputs ? o->n_inputs : 1, sizeof *s->inputs);
            for (size_t i = 0; i < o->n_inputs; i++) {
                const request_embed_input_t *in = &o->inputs[i];
                if (in->text) {
                    s->inputs[i].text = xstrdup(in->text);
                } else {
                    s->inputs[i].n_ids = (uint32_t)in->n_ids;
                    s->inputs[i].ids = xmalloc(in->n_ids * sizeof(int32_t));
                    memcpy(s->inputs[i].ids, in->ids, in->n_ids * sizeof(int32_t));
                }
            }
            s->dimensions = (uint32_t)o->dimensions;
            if (o->op == REQUEST_OP_RANK) /* the query every document is scored against */
                s->prompt = xstrdup(o->prompt);
        } else if (o->prompt) {
            s->prompt = xstrdup(o->prompt);
        } else {
            s->has_prompt_ids = true;
            s->n_prompt_ids = (uint32_t)o->n_prompt_tokens;
            s->prompt_ids = xcalloc(o->n_prompt_tokens ? o->n_prompt_tokens : 1, sizeof(int32_t));
            memcpy(s->prompt_ids, o->prompt_tokens, o->n_prompt_tokens * sizeof(int32_t));
        }
    }
    proto_sampling_t *sp = &s->sampling;
    sp->knobs = o->knobs; /* the table's knobs, checked by request_check_knobs */
    sp->has_seed = o->has_seed;
    sp->seed = (uint64_t)o->seed;
    if (!sp->has_seed) {
        /* pick the seed here rather than on the worker: a request resumed on
         * another replica after a crash then continues the same random
         * stream (the worker skips one draw per resumed token) */
        uint64_t seed;
        if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) != sizeof seed)
            seed = (uint64_t)clock_now_us() * 0x9E3779B97F4A7C15ull ^ id;
        sp->has_seed = true;
        sp->seed = seed;
    }
    if (o->n_logit_bias) {
        sp->n_logit_bias = (uint32_t)o->n_logit_bias;
        sp->logit_bias = xcalloc(o->n_logit_bias, sizeof *sp->logit_bias);
        for (size_t i = 0; i < o->n_logit_bias; i++)
            sp->logit_bias[i] = (proto_logit_bias_t){o->logit_bias[i].token, o->logit_bias[i].bias};
    }
    sp->logprobs = o->logprobs;
    sp->top_logprobs = o->top_logprobs > 0 ? (uint32_t)o->top_logprobs : 0;
    if (o->max_tokens >= 0)
        s->max_tokens = (uint32_t)o->max_tokens;
    else
        s->max_tokens = o->kind == REQUEST_COMPLETION ? GATEWAY_COMPLETION_MAX_TOKENS : 0;
    if (o->n_stop) {
        s->n_stop = (uint32_t)o->n_stop;
        s->stop = xcalloc(o->n_stop, sizeof *s->stop);
        for (size_t i = 0; i < o->n_stop; i++)
            s->stop[i] = dup_or_null(o->stop[i]);
    }
    s->ignore_eos = o->ignore_eos;
    s->no_spec = o->no_spec;
    s->stream = o->stream;
    if (o->grammar)
        s->grammar = xstrdup(o->grammar);
    s->n_choices = o->n > 1 ? (uint32_t)o->n : 1;
    s->op = o->op == REQUEST_OP_TOKENIZE ? PROTO_OP_TOKENIZE
          : o->op == REQUEST_OP_DETOKENIZE ? PROTO_OP_DETOKENIZE
          : o->op == REQUEST_OP_EMBED ? PROTO_OP_EMBED
          : o->op == REQUEST_OP_RANK ? PROTO_OP_RANK : PROTO_OP_GENERATE;
    s->no_special = o->op == REQUEST_OP_TOKENIZE && !o->add_special;
    if (o->op == REQUEST_OP_EMBED || o->op == REQUEST_OP_RANK)
        s->n_choices = s->n_inputs;
}
