/* msg_encode.c — the encoder (msgpack-c) of the message bodies of the
 * gateway⇄worker protocol; the validating decoder is msg.c's, the frames
 * around the bodies msg_frame.c's. The format is documented in msg.h; keep
 * the three in step. */
#include "proto/msg.h"

#include <math.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/strbuf.h"
#include "common/xalloc.h"

/* ------------------------------------------------------------------------ */
/* encoder                                                                   */

/* msgpack-c's write callback into a strbuf (out of memory is fatal there,
 * so the callback never fails). */
static int outbuf_write(void *data, const char *p, size_t n)
{
    strbuf_append(data, p, n);
    return 0;
}

typedef struct enc {
    msgpack_packer pk;
    strbuf_t out;
    size_t map_at;     /* offset of the top-level map32 header */
    uint32_t n_keys;   /* keys written into the top-level map so far */
} enc_t;

/* The top-level map is written as map32 with its count patched at the end,
 * so optional keys need not be counted twice. */
static void enc_begin(enc_t *e)
{
    memset(e, 0, sizeof *e);
    msgpack_packer_init(&e->pk, &e->out, outbuf_write);
    static const uint8_t hdr[5] = {0xdf, 0, 0, 0, 0};
    e->map_at = e->out.len;
    outbuf_write(&e->out, (const char *)hdr, sizeof hdr);
}

static void enc_end(enc_t *e)
{
    uint8_t *p = (uint8_t *)e->out.s + e->map_at + 1;
    p[0] = (uint8_t)(e->n_keys >> 24);
    p[1] = (uint8_t)(e->n_keys >> 16);
    p[2] = (uint8_t)(e->n_keys >> 8);
    p[3] = (uint8_t)e->n_keys;
}

static void pack_cstr(msgpack_packer *pk, const char *s)
{
    size_t n = s ? strlen(s) : 0;
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s ? s : "", n);
}

/* A key of the top-level map. */
static void key(enc_t *e, const char *k)
{
    e->n_keys++;
    pack_cstr(&e->pk, k);
}

static void kv_uint(enc_t *e, const char *k, uint64_t v)
{
    key(e, k);
    msgpack_pack_uint64(&e->pk, v);
}

static void kv_double(enc_t *e, const char *k, double v)
{
    key(e, k);
    msgpack_pack_double(&e->pk, v);
}

static void kv_bool(enc_t *e, const char *k, bool v)
{
    key(e, k);
    if (v)
        msgpack_pack_true(&e->pk);
    else
        msgpack_pack_false(&e->pk);
}

static void kv_str(enc_t *e, const char *k, const char *s)
{
    key(e, k);
    pack_cstr(&e->pk, s);
}

static void pack_ids(msgpack_packer *pk, const int32_t *ids, uint32_t n)
{
    msgpack_pack_array(pk, n);
    for (uint32_t i = 0; i < n; i++)
        msgpack_pack_int32(pk, ids[i]);
}

/* Nested maps have a fixed key count, so they use the ordinary header. */
static void sub_uint(msgpack_packer *pk, const char *k, uint64_t v)
{
    pack_cstr(pk, k);
    msgpack_pack_uint64(pk, v);
}

static void sub_bytes(msgpack_packer *pk, const char *k, const uint8_t *b, uint32_t n)
{
    pack_cstr(pk, k);
    msgpack_pack_bin(pk, n);
    msgpack_pack_bin_body(pk, n ? (const char *)b : "", n);
}

static void encode_register(enc_t *e, const proto_register_t *r)
{
    kv_uint(e, "v", r->version);
    kv_str(e, "model", r->model);
    kv_str(e, "replica", r->replica);
    kv_str(e, "host", r->host);
    kv_uint(e, "pid", r->pid);
    kv_uint(e, "cap", r->capacity);
    kv_uint(e, "n_ctx", r->n_ctx);
    kv_uint(e, "n_vocab", r->n_vocab);
    kv_uint(e, "kv_blocks", r->kv_blocks);
    kv_uint(e, "block", r->block_size);
    if (r->heartbeat_ms)
        kv_uint(e, "hb_ms", r->heartbeat_ms);
    if (r->vis.has) {
        key(e, "vis");
        msgpack_pack_map(&e->pk, r->vis.preproc ? 4 : 3);
        sub_uint(&e->pk, "size", r->vis.size);
        sub_uint(&e->pk, "n_tok", r->vis.n_tok);
        pack_cstr(&e->pk, "proj");
        pack_cstr(&e->pk, r->vis.proj);
        if (r->vis.preproc)
            sub_uint(&e->pk, "preproc", r->vis.preproc);
    }
    if (r->n_lora) {
        key(e, "lora");
        msgpack_pack_array(&e->pk, r->n_lora);
        for (uint32_t i = 0; i < r->n_lora; i++) {
            msgpack_pack_map(&e->pk, 4);
            pack_cstr(&e->pk, "name");
            pack_cstr(&e->pk, r->lora[i].name);
            sub_uint(&e->pk, "hash", r->lora[i].hash);
            sub_uint(&e->pk, "rank", r->lora[i].rank);
            pack_cstr(&e->pk, "scale");
            msgpack_pack_double(&e->pk, r->lora[i].scale);
        }
    }
}

static void encode_heartbeat(enc_t *e, const proto_heartbeat_t *h)
{
    kv_uint(e, "seq", h->seq);
    if (h->heartbeat_ms)
        kv_uint(e, "hb_ms", h->heartbeat_ms);
    if (h->has_load) {
        const proto_load_t *l = &h->load;
        key(e, "load");
        const bool tiers = l->kv_disk_state || l->kv_evictions || l->prefix_cache_disk_hits;
        const bool spec = l->spec_drafts || l->spec_draft_tokens || l->spec_accepted_tokens;
        msgpack_pack_map(&e->pk, 10 + (tiers ? 8 : 0) + (spec ? 3 : 0) + (l->steps_stopped ? 1 : 0));
        sub_uint(&e->pk, "run", l->running);
        sub_uint(&e->pk, "wait", l->waiting);
        sub_uint(&e->pk, "kv_used", l->kv_blocks_used);
        sub_uint(&e->pk, "kv_total", l->kv_blocks_total);
        sub_uint(&e->pk, "pc_q", l->prefix_cache_queries);
        sub_uint(&e->pk, "pc_hit", l->prefix_cache_hits);
        sub_uint(&e->pk, "preempt", l->preemptions);
        sub_uint(&e->pk, "gen_tok", l->tokens_generated);
        sub_uint(&e->pk, "prompt_tok", l->prompt_tokens);
        sub_uint(&e->pk, "free", l->free_slots);
        if (tiers) {
            sub_uint(&e->pk, "pc_disk", l->prefix_cache_disk_hits);
            sub_uint(&e->pk, "kv_evict", l->kv_evictions);
            sub_uint(&e->pk, "kvd_state", l->kv_disk_state);
            sub_uint(&e->pk, "kvd_wb", l->kv_disk_bytes_written);
            sub_uint(&e->pk, "kvd_rb", l->kv_disk_bytes_read);
            sub_uint(&e->pk, "kvd_evict", l->kv_disk_evictions);
            sub_uint(&e->pk, "kvd_rej", l->kv_disk_rejected);
            sub_uint(&e->pk, "kvd_used", l->kv_disk_bytes_used);
        }
        if (spec) {
            sub_uint(&e->pk, "sd_n", l->spec_drafts);
            sub_uint(&e->pk, "sd_dt", l->spec_draft_tokens);
            sub_uint(&e->pk, "sd_acc", l->spec_accepted_tokens);
        }
        if (l->steps_stopped)
            sub_uint(&e->pk, "stopped", l->steps_stopped);
    }
    if (h->has_progress) {
        const proto_progress_t *g = &h->progress;
        key(e, "prog");
        msgpack_pack_map(&e->pk, 4);
        sub_uint(&e->pk, "steps", g->steps);
        pack_cstr(&e->pk, "busy");
        if (g->busy)
            msgpack_pack_true(&e->pk);
        else
            msgpack_pack_false(&e->pk);
        sub_uint(&e->pk, "stall_ms", g->stall_ms);
        sub_uint(&e->pk, "slow_ms", g->slow_ms);
    }
}

static void encode_submit(enc_t *e, const proto_submit_t *s)
{
    const proto_sampling_t *sp = &s->sampling;
    kv_uint(e, "id", s->id);
    kv_uint(e, "prio", (uint64_t)s->priority);
    kv_str(e, "kind", proto_kind_name(s->kind));
    if (s->n_messages) {
        key(e, "msgs");
        msgpack_pack_array(&e->pk, s->n_messages);
        for (uint32_t i = 0; i < s->n_messages; i++) {
            const proto_chat_msg_t *c = &s->messages[i];
            msgpack_pack_map(&e->pk, 2 + (c->tool_calls != NULL) + (c->tool_call_id != NULL) + (c->n_parts > 0));
            pack_cstr(&e->pk, "role");
            pack_cstr(&e->pk, c->role);
            pack_cstr(&e->pk, "content");
            pack_cstr(&e->pk, c->content);
            if (c->tool_calls) {
                pack_cstr(&e->pk, "tool_calls");
                pack_cstr(&e->pk, c->tool_calls);
            }
            if (c->tool_call_id) {
                pack_cstr(&e->pk, "tool_call_id");
                pack_cstr(&e->pk, c->tool_call_id);
            }
            if (c->n_parts) {
                pack_cstr(&e->pk, "parts");
                msgpack_pack_array(&e->pk, c->n_parts);
                for (uint32_t k = 0; k < c->n_parts; k++)
                    if (c->parts[k].text)
                        pack_cstr(&e->pk, c->parts[k].text);
                    else
                        msgpack_pack_uint32(&e->pk, c->parts[k].img);
            }
        }
    }
    if (s->n_imgs) {
        key(e, "imgs");
        msgpack_pack_array(&e->pk, s->n_imgs);
        for (uint32_t i = 0; i < s->n_imgs; i++) {
            const proto_img_t *im = &s->imgs[i];
            bool grid = im->nx && im->ny;
            msgpack_pack_map(&e->pk, grid ? 6 : 4);
            sub_uint(&e->pk, "w", im->w);
            sub_uint(&e->pk, "h", im->h);
            sub_bytes(&e->pk, "rgb", im->rgb, im->w * im->h * 3);
            sub_bytes(&e->pk, "hash", im->hash, sizeof im->hash);
            if (grid) {
                sub_uint(&e->pk, "nx", im->nx);
                sub_uint(&e->pk, "ny", im->ny);
            }
        }
    }
    if (s->tools)
        kv_str(e, "tools", s->tools);
    if (s->tool_choice)
        kv_str(e, "tool_choice", s->tool_choice);
    if (s->no_par_tools)
        kv_bool(e, "par_tools", false);
    if (s->has_think)
        kv_bool(e, "think", s->think);
    if (s->prompt)
        kv_str(e, "prompt", s->prompt);
    if (s->grammar)
        kv_str(e, "grammar", s->grammar);
    if (s->has_prompt_ids || s->n_prompt_ids) {
        key(e, "prompt_ids");
        pack_ids(&e->pk, s->prompt_ids, s->n_prompt_ids);
    }
    /* the knobs, every row in table order (proto/sampling.h) */
    for (int i = 0; i < PROTO_N_KNOBS; i++) {
        const proto_knob_row_t *row = &proto_knob_rows[i];
        double v = proto_knob_get(&sp->knobs, row);
        if (row->is_uint)
            kv_uint(e, row->key, (uint64_t)v);
        else
            kv_double(e, row->key, v);
    }
    if (sp->has_seed)
        kv_uint(e, "seed", sp->seed);
    if (sp->n_logit_bias) {
        key(e, "bias");
        msgpack_pack_map(&e->pk, sp->n_logit_bias);
        for (uint32_t i = 0; i < sp->n_logit_bias; i++) {
            msgpack_pack_int32(&e->pk, sp->logit_bias[i].token);
            msgpack_pack_double(&e->pk, sp->logit_bias[i].bias);
        }
    }
    if (sp->logprobs)
        kv_bool(e, "logprobs", true);
    if (sp->top_logprobs)
        kv_uint(e, "top_lp", sp->top_logprobs);
    if (s->max_tokens)
        kv_uint(e, "max_tok", s->max_tokens);
    if (s->n_stop) {
        key(e, "stop");
        msgpack_pack_array(&e->pk, s->n_stop);
        for (uint32_t i = 0; i < s->n_stop; i++)
            pack_cstr(&e->pk, s->stop[i]);
    }
    if (s->ignore_eos)
        kv_bool(e, "ignore_eos", true);
    if (s->no_spec)
        kv_bool(e, "no_spec", true);
    if (s->deadline_ms)
        kv_uint(e, "deadline_ms", s->deadline_ms);
    if (s->stream)
        kv_bool(e, "stream", true);
    if (s->n_resume) {
        key(e, "resume");
        pack_ids(&e->pk, s->resume, s->n_resume);
    }
    if (s->n_choices > 1)
        kv_uint(e, "n_choices", s->n_choices);
    if (s->op != PROTO_OP_GENERATE) {
        key(e, "op");
        pack_cstr(&e->pk, proto_op_name(s->op));
    }
    if (s->n_inputs) {
        key(e, "inputs");
        msgpack_pack_array(&e->pk, s->n_inputs);
        for (uint32_t i = 0; i < s->n_inputs; i++) {
            msgpack_pack_map(&e->pk, 1);
            if (s->inputs[i].text) {
                pack_cstr(&e->pk, "t");
                pack_cstr(&e->pk, s->inputs[i].text);
            } else {
                pack_cstr(&e->pk, "ids");
                pack_ids(&e->pk, s->inputs[i].ids, s->inputs[i].n_ids);
            }
        }
    }
    if (s->dimensions)
        kv_uint(e, "dims", s->dimensions);
    if (s->no_special)
        kv_bool(e, "add_special", false);
    if (s->partition)
        kv_uint(e, "part", s->partition);
    if (s->n_lora) {
        key(e, "lora");
        msgpack_pack_array(&e->pk, s->n_lora);
        for (uint32_t i = 0; i < s->n_lora; i++) {
            msgpack_pack_map(&e->pk, 1 + s->lora[i].has_scale);
            pack_cstr(&e->pk, "name");
            pack_cstr(&e->pk, s->lora[i].name);
            if (s->lora[i].has_scale) {
                pack_cstr(&e->pk, "scale");
                msgpack_pack_double(&e->pk, s->lora[i].scale);
            }
        }
    }
}

static void encode_event(enc_t *e, const proto_event_t *ev)
{
    kv_uint(e, "id", ev->id);
    key(e, "text");
    uint32_t tl = ev->text ? (ev->text_len ? ev->text_len : (uint32_t)strlen(ev->text)) : 0;
    msgpack_pack_str(&e->pk, tl);
    msgpack_pack_str_body(&e->pk, ev->text ? ev->text : "", tl);
    if (ev->n_ids) {
        key(e, "ids");
        pack_ids(&e->pk, ev->ids, ev->n_ids);
    }
    kv_uint(e, "n", ev->n_tokens);
    if (ev->n_resumed)
        kv_uint(e, "n_resumed", ev->n_resumed);
    if (ev->choice)
        kv_uint(e, "choice", ev->choice);
    if (ev->n_logprobs) {
        key(e, "lp");
        msgpack_pack_array(&e->pk, ev->n_logprobs);
        for (uint32_t i = 0; i < ev->n_logprobs; i++) {
            const proto_logprob_t *lp = &ev->logprobs[i];
            msgpack_pack_map(&e->pk, lp->n_top ? 3 : 2);
            sub_bytes(&e->pk, "b", lp->bytes, lp->n_bytes);
            pack_cstr(&e->pk, "lp");
            msgpack_pack_double(&e->pk, lp->logprob);
            if (lp->n_top) {
                pack_cstr(&e->pk, "top");
                msgpack_pack_array(&e->pk, lp->n_top);
                for (uint32_t j = 0; j < lp->n_top; j++) {
                    msgpack_pack_map(&e->pk, 2);
                    sub_bytes(&e->pk, "b", lp->top[j].bytes, lp->top[j].n_bytes);
                    pack_cstr(&e->pk, "lp");
                    msgpack_pack_double(&e->pk, lp->top[j].logprob);
                }
            }
        }
    }
    const char *fin = proto_finish_name(ev->finish);
    if (fin)
        kv_str(e, "finish", fin);
    if (ev->stop)
        kv_uint(e, "stop", ev->stop);
    if (ev->has_usage) {
        key(e, "usage");
        msgpack_pack_map(&e->pk, 3);
        sub_uint(&e->pk, "prompt", ev->usage.prompt_tokens);
        sub_uint(&e->pk, "cached", ev->usage.cached_tokens);
        sub_uint(&e->pk, "completion", ev->usage.completion_tokens);
    }
    if (ev->err)
        kv_uint(e, "err", ev->err);
    if (ev->n_embedding) {
        /* little-endian float32, whatever the host order */
        uint8_t *b = xmalloc((size_t)ev->n_embedding * 4);
        for (uint32_t i = 0; i < ev->n_embedding; i++) {
            uint32_t u;
            memcpy(&u, &ev->embedding[i], 4);
            b[4 * i] = (uint8_t)u;
            b[4 * i + 1] = (uint8_t)(u >> 8);
            b[4 * i + 2] = (uint8_t)(u >> 16);
            b[4 * i + 3] = (uint8_t)(u >> 24);
        }
        key(e, "emb");
        msgpack_pack_bin(&e->pk, ev->n_embedding * 4);
        msgpack_pack_bin_body(&e->pk, b, ev->n_embedding * 4);
        free(b);
    }
}

static void kv_keys(enc_t *e, const char *k, const uint64_t *keys, uint32_t n)
{
    key(e, k);
    msgpack_pack_array(&e->pk, n);
    for (uint32_t i = 0; i < n; i++)
        msgpack_pack_uint64(&e->pk, keys[i]);
}

static void encode_kv(enc_t *e, const proto_kv_t *kv)
{
    if (kv->reset)
        kv_bool(e, "reset", true);
    if (kv->n_add)
        kv_keys(e, "add", kv->add, kv->n_add);
    if (kv->n_del)
        kv_keys(e, "del", kv->del, kv->n_del);
}

int proto_encode(const proto_msg_t *m, uint8_t **body, size_t *body_len)
{
    enc_t e;
    enc_begin(&e);
    switch (m->type) {
    case PROTO_REGISTER: encode_register(&e, &m->reg); break;
    case PROTO_HEARTBEAT: encode_heartbeat(&e, &m->heartbeat); break;
    case PROTO_SUBMIT: encode_submit(&e, &m->submit); break;
    case PROTO_CANCEL: kv_uint(&e, "id", m->cancel.id); break;
    case PROTO_EVENT: encode_event(&e, &m->event); break;
    case PROTO_KV: encode_kv(&e, &m->kv); break;
    case PROTO_ERROR:
        kv_uint(&e, "id", m->error.id);
        kv_uint(&e, "code", m->error.code);
        kv_str(&e, "msg", m->error.message);
        if (m->error.err)
            kv_uint(&e, "err", m->error.err);
        break;
    case PROTO_LORA:
    case PROTO_LORA_ACK:
        kv_uint(&e, "seq", m->lora.seq);
        kv_str(&e, "name", m->lora.name);
        if (m->type == PROTO_LORA && m->lora.path) {
            kv_str(&e, "path", m->lora.path);
            kv_double(&e, "scale", m->lora.scale);
        }
        if (m->type == PROTO_LORA_ACK && m->lora.message)
            kv_str(&e, "msg", m->lora.message);
        break;
    case PROTO_DRAIN:
    case PROTO_SHUTDOWN:
        break;
    }
    enc_end(&e);
    if (e.out.len > PROTO_MAX_BODY) {
        strbuf_free(&e.out);
        *body = NULL;
        *body_len = 0;
        return PROTO_ERANGE;
    }
    *body_len = e.out.len;
    *body = (uint8_t *)strbuf_take(&e.out);
    return PROTO_OK;
}
