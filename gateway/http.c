/* http.c — libmicrohttpd daemon, connections (header and body deadlines,
 * upload slots) and the transport side of generation requests: an API surface (api_surface.h;
 * OpenAI's is oai_stream.c) parses the body and renders the core's replies,
 * while this file owns the connection — suspend/resume instead of blocked
 * threads, SSE bytes handed to libmicrohttpd, the hang-up watcher for
 * suspended connections (see http.h). The route table and the simple
 * handlers are in http_routes.c, what the headers decide in http_guard.c,
 * how answers go out in http_respond.c; the state they share in
 * http_impl.h. */
#include "gateway/http.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include "common/clock.h"
#include "common/errbuf.h"
#include "common/log.h"
#include "common/utf8.h"
#include "common/vec.h"
#include "common/xalloc.h"
#include "gateway/api_surface.h"
#include "gateway/gateway.h"
#include "gateway/http_guard.h"
#include "gateway/http_impl.h"
#include "gateway/http_respond.h"
#include "gateway/http_routes.h"
#include "gateway/keys.h"
#include "gateway/oai.h"
#include "gateway/partition.h"
#include "gateway/reasoning.h"
#include "gateway/request_image.h"
#include "gateway/snapshot.h"

#define HTTP_IMAGE_ASK_US 1000000    /* the core tells whether a model reads images */
#define WATCH_MAX 8192              /* connections the watcher polls at once */
/* descriptors kept out of the HTTP connection limit: ZeroMQ sockets and its
 * internal pipes, worker pipes, log and keys files */
#define FD_HEADROOM 256

/* ------------------------------------------------------------------------ */
/* generation: flow                                                          */

/* The core's notify hook: runs on the core thread with greq->lock held. */
static void on_reply(void *ctx)
{
    http_req_t *q = ctx;
    if (q->suspended) {
        q->suspended = false;
        MHD_resume_connection(q->conn);
    }
}

/* Takes the next reply, or suspends the connection (returns NULL, *gone
 * false) — or reports the client gone (NULL, *gone true). */
static gateway_reply_t *next_reply(http_req_t *q, bool *gone)
{
    pthread_mutex_lock(&q->greq->lock);
    *gone = q->gone;
    gateway_reply_t *rep = NULL;
    if (!q->gone) {
        rep = chan_pop(q->greq->replies, 0);
        if (!rep) {
            q->suspended = true;
            MHD_suspend_connection(q->conn);
        }
    }
    pthread_mutex_unlock(&q->greq->lock);
    return rep;
}

/* The surface's wake (api_surface.h "Waiting"), from any thread. */
static void on_surface_wake(void *ctx)
{
    http_req_t *q = ctx;
    pthread_mutex_lock(&q->greq->lock);
    q->woken = true;
    if (q->suspended) {
        q->suspended = false;
        MHD_resume_connection(q->conn);
    }
    pthread_mutex_unlock(&q->greq->lock);
}

/* While the surface waits: true when it was woken (call it again now);
 * false when the connection is now suspended, or the client is gone
 * (*gone). */
static bool surface_woken(http_req_t *q, bool *gone)
{
    pthread_mutex_lock(&q->greq->lock);
    *gone = q->gone;
    bool woken = !q->gone && q->woken;
    q->woken = false;
    if (!q->gone && !woken) {
        q->suspended = true;
        MHD_suspend_connection(q->conn);
    }
    pthread_mutex_unlock(&q->greq->lock);
    return woken;
}

/* One reply through the surface into q->out; the stream's last bytes mark
 * the request finished. */
static void stream_render(http_req_t *q, gateway_reply_t *rep)
{
    q->surface->stream_event(&q->call, rep, &q->out);
    if (q->call.done)
        q->finished = true;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    http_req_t *q = cls;
    while (q->out_off == q->out.len) {
        q->out_off = 0;
        strbuf_reset(&q->out);
        if (q->call.done)
            return MHD_CONTENT_READER_END_OF_STREAM;
        bool gone;
        if (q->call.waiting) { /* api_surface.h "Waiting" */
            if (!surface_woken(q, &gone))
                return gone ? MHD_CONTENT_READER_END_WITH_ERROR : 0;
            stream_render(q, NULL);
            continue;
        }
        gateway_reply_t *rep = next_reply(q, &gone);
        if (gone)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (!rep)
            return 0; /* suspended: on_reply resumes us */
        stream_render(q, rep);
    }
    size_t n = q->out.len - q->out_off;
    if (n > max)
        n = max;
    memcpy(buf, q->out.s + q->out_off, n);
    q->out_off += n;
    return (ssize_t)n;
}

/* Not streaming: the surface's body for every event collected. */
static enum MHD_Result respond_complete(http_server_t *s, struct MHD_Connection *c, http_req_t *q)
{
    for (;;) {
        int status = 500;
        char *body = q->surface->complete(&q->call, q->events, q->n_events, &status);
        if (!q->call.waiting)
            return http_respond_text_warn(s, c, (unsigned)status, http_with_newline(body), "application/json", NULL,
                                     status == 429 ? "1" : NULL,
                                     q->call.warning);
        free(body); /* api_surface.h "Waiting": again once woken */
        bool gone;
        if (!surface_woken(q, &gone))
            return gone ? MHD_NO : MHD_YES;
    }
}

/* Called on every resume until a response is queued. */
static enum MHD_Result gen_continue(http_server_t *s, struct MHD_Connection *c, http_req_t *q)
{
    if (q->finished && !q->call.stream) /* resumed while the surface waits */
        return respond_complete(s, c, q);
    for (;;) {
        bool gone;
        gateway_reply_t *rep = next_reply(q, &gone);
        if (gone)
            return MHD_NO; /* close: request_completed cancels */
        if (!rep)
            return MHD_YES;
        if (rep->kind == GATEWAY_REPLY_ERROR) {
            q->finished = true;
            enum MHD_Result ret = http_respond_api_error(s, c, q->surface, &rep->error, NULL);
            gateway_reply_free(&rep);
            return ret;
        }
        if (q->call.stream) {
            /* the first event: headers go out now, errors from here on are
             * the surface's stream error events */
            stream_render(q, rep);
            struct MHD_Response *r =
                MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, q, NULL);
            if (!r)
                return MHD_NO;
            MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
            MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
            MHD_add_response_header(r, "X-Accel-Buffering", "no");
            if (q->call.warning)
                MHD_add_response_header(r, "X-Pagoda-Warning", q->call.warning);
            return http_queue(s, c, 200, r);
        }
        vec_reserve(q->events, q->cap_events, q->n_events + 1);
        q->events[q->n_events++] = rep;
        proto_finish_t fin = rep->event.finish;
        if (fin != PROTO_FINISH_NONE &&
            (fin == PROTO_FINISH_ERROR || fin == PROTO_FINISH_TIMEOUT ||
             ++q->n_finished >= q->call.n_choices)) {
            q->finished = true;
            return respond_complete(s, c, q);
        }
    }
}

static void live_remove(http_server_t *s, http_req_t *q)
{
    if (q->prev)
        q->prev->next = q->next;
    else if (s->live == q)
        s->live = q->next;
    if (q->next)
        q->next->prev = q->prev;
    q->prev = q->next = NULL;
}

static enum MHD_Result fetch_begin(http_server_t *s, struct MHD_Connection *c, http_req_t *q, request_t *o,
                                   size_t n_remote);
static enum MHD_Result fetch_continue(http_server_t *s, struct MHD_Connection *c, http_req_t *q);
static enum MHD_Result generate_run(http_server_t *s, struct MHD_Connection *c, http_req_t *q, request_t *o);

/* A generation route: the surface parses the body into the internal
 * request, the core runs it, the surface renders the replies. */
static enum MHD_Result handle_generate(http_server_t *s, struct MHD_Connection *c, http_req_t *q,
                                       const route_t *rt)
{
    const api_surface_t *api = rt->surface;
    q->surface = api;
    q->call.kind = rt->kind;
    q->call.op = rt->op;
    q->call.owner = q->owner;
    q->call.store = s->responses;
    q->call.keep_volatile = s->keep_volatile;
    q->call.wake = on_surface_wake;
    q->call.wake_ctx = q;
    request_t o;
    oai_error_t e;
    const uint8_t *body = (const uint8_t *)(q->body ? q->body : "");
    if (api->parse(&q->call, body, q->body_len, &o, &e) < 0)
        return http_respond_api_error(s, c, api, &e, NULL);
    q->began = true; /* parse may have set call.state: end() frees it from here on */
    if (o.warning) {
        log_warn("%s: %s", rt->path, o.warning);
        q->call.warning = o.warning;
        o.warning = NULL;
    }
    if (request_check_limits(&o, s->max_messages, s->max_prompt_bytes, &e) < 0 ||
        lora_table_resolve(s->gw->loras, &o, &e) < 0) {
        request_free(&o);
        return http_respond_api_error(s, c, api, &e, NULL);
    }
    size_t n_remote = request_images_remote(&o);
    if (n_remote) /* fetched on image_fetch's threads while this connection waits */
        return fetch_begin(s, c, q, &o, n_remote);
    return generate_run(s, c, q, &o);
}

/* The fetch thread's wake hook (image_fetch_job_park's pair). */
static void on_fetched(void *ctx)
{
    http_req_t *q = ctx;
    MHD_resume_connection(q->conn);
}

static void fetch_park(void *ctx)
{
    http_req_t *q = ctx;
    MHD_suspend_connection(q->conn);
}

/* o's remote images: the allow list now (400 without connecting), then a
 * fetch job; o moves to q->pending. */
static enum MHD_Result fetch_begin(http_server_t *s, struct MHD_Connection *c, http_req_t *q, request_t *o,
                                   size_t n_remote)
{
    oai_error_t e;
    if (request_images_check_urls(o, image_fetch_allow(s->fetch), &e) < 0) {
        image_fetch_note_refused(s->fetch);
        request_free(o);
        return http_respond_api_error(s, c, q->surface, &e, NULL);
    }
    const char **urls = xcalloc(n_remote, sizeof *urls);
    size_t *lens = xcalloc(n_remote, sizeof *lens);
    for (size_t i = 0, k = 0; i < o->n_images; i++)
        if (o->images[i].url) {
            urls[k] = o->images[i].url;
            lens[k++] = strlen(o->images[i].url);
        }
    q->conn = c;
    q->fetch = image_fetch_submit(s->fetch, urls, lens, n_remote, on_fetched, q);
    free(urls);
    free(lens);
    if (!q->fetch) {
        request_free(o);
        oai_error_set(&e, 503, NULL, "Too many image URLs are being fetched; try again shortly");
        return http_respond_api_error(s, c, q->surface, &e, "1");
    }
    q->pending = xmalloc(sizeof *q->pending);
    *q->pending = *o;
    return fetch_continue(s, c, q);
}

/* Called until the fetch is done (then on_fetched resumes us): the bodies
 * into the pending request, then on as for inline images. */
static enum MHD_Result fetch_continue(http_server_t *s, struct MHD_Connection *c, http_req_t *q)
{
    if (!image_fetch_job_park(q->fetch, fetch_park, q))
        return MHD_YES; /* suspended */
    request_t o = *q->pending;
    free(q->pending);
    q->pending = NULL;
    oai_error_t e;
    int rc = 0;
    for (size_t i = 0, k = 0; i < o.n_images; i++) {
        if (!o.images[i].url)
            continue;
        size_t n;
        const char *why;
        uint8_t *b = image_fetch_job_take(q->fetch, k++, &n, &why);
        if (rc < 0)
            free(b);
        else
            rc = request_image_fetched(&o, i, b, n, why, &e);
    }
    image_fetch_job_release(&q->fetch);
    if (rc < 0) {
        request_free(&o);
        return http_respond_api_error(s, c, q->surface, &e, NULL);
    }
    return generate_run(s, c, q, &o);
}

/* The parsed request o (taken) with every image's bytes at hand: decoded,
 * submitted to the core, answered. */
static enum MHD_Result generate_run(http_server_t *s, struct MHD_Connection *c, http_req_t *q, request_t *o_in)
{
    const api_surface_t *api = q->surface;
    const route_t *rt = q->route;
    request_t o = *o_in;
    oai_error_t e;
    if (o.n_images) { /* decoded here, on this thread (gateway/request_image.h) */
        proto_vis_t vis;
        gateway_model_vis(s->gw, o.lora_base ? o.lora_base : o.model, &vis, HTTP_IMAGE_ASK_US);
        if (request_images_prepare(&o, &vis, &s->image_limits, &e) < 0) {
            request_free(&o);
            return http_respond_api_error(s, c, api, &e, NULL);
        }
    }
    prio_tier_t tier = rt->batch ? PRIO_TIER_LOW : q->tier;
    api_call_t *call = &q->call;
    call->kind = o.kind;
    call->stream = o.stream;
    call->n_choices = rt->op == REQUEST_OP_EMBED || rt->op == REQUEST_OP_RANK ? (uint32_t)o.n_inputs : o.n > 1 ? (uint32_t)o.n : 1;
    call->model = xstrdup(o.model);
    call->created = clock_wall_s();
    call->want_logprobs = o.logprobs;
    call->request_timeout_s = s->gw->request_timeout_us / 1000000;
    if (o.tools_json && o.tool_choice != REQUEST_TOOL_CHOICE_NONE) {
        /* the answer is parsed for calls: keep the names (o is freed below) */
        call->tool_names = o.tool_names;
        call->tool_custom = o.tool_custom;
        call->n_tools = o.n_tools;
        o.tool_names = NULL;
        o.tool_custom = NULL;
        o.n_tools = 0;
    }
    call->reasoning = rt->kind == REQUEST_CHAT && rt->op == REQUEST_OP_GENERATE && s->reasoning != REASONING_NONE;
    api->begin(call, &o);
    /* the partition is the key's, narrowed by the body's cache_salt: a body
     * alone can never name another tenant's partition */
    uint64_t part = partition_salted(q->partition, o.cache_salt, o.cache_salt ? strlen(o.cache_salt) : 0);
    q->greq = gateway_request_from_oai(s->gw, &o, tier, part);
    request_free(&o);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    q->fd = ci ? ci->connect_fd : -1;
    q->conn = c;
    gateway_request_set_notify(q->greq, on_reply, q);

    pthread_mutex_lock(&s->live_lock);
    bool stopping = s->stopping;
    if (!stopping) {
        q->next = s->live;
        if (s->live)
            s->live->prev = q;
        s->live = q;
    }
    pthread_mutex_unlock(&s->live_lock);
    if (stopping || gateway_submit(s->gw, q->greq) < 0) {
        q->finished = true;
        oai_error_set(&e, 503, NULL, "The gateway is shutting down");
        return http_respond_api_error(s, c, api, &e, NULL);
    }
    log_debug("%s request %" PRIu64 " for %s (tier %s%s)", rt->path, q->greq->id, call->model,
              prio_tier_name(tier), call->stream ? ", stream" : "");
    return gen_continue(s, c, q);
}

/* ------------------------------------------------------------------------ */
/* the hang-up watcher                                                       */

static void upload_unlink(http_server_t *s, http_conn_t *k);

/* The header deadline, then the body deadline and rate (http_conn_t). */
static void enforce_deadlines(http_server_t *s)
{
    int64_t now = clock_now_us();
    pthread_mutex_lock(&s->conn_lock);
    for (http_conn_t *k = s->conns; k; k = k->next) {
        if (k->headers_done || k->shut || now - k->t_open_us < s->header_timeout_us)
            continue;
        /* libmicrohttpd sees the end of the stream and closes it; the fd
         * stays valid until the CLOSED notification, which takes conn_lock */
        k->shut = true;
        log_debug("http: connection without complete request headers after %.1f s: closed",
                  (double)(now - k->t_open_us) / 1e6);
        shutdown(k->fd, SHUT_RDWR);
    }
    for (http_conn_t *k = s->uploads, *next; k; k = next) {
        next = k->up_next;
        const char *why = NULL;
        if (now - k->t_body_us >= s->body_timeout_us) {
            why = "not complete within the body deadline";
        } else if (now - k->t_window_us >= s->body_window_us) {
            /* bytes of this window against the floor, then a new window */
            double want = (double)s->body_min_rate * (double)(now - k->t_window_us) / 1e6;
            if ((double)(k->n_body - k->n_window) < want)
                why = "below the minimum rate";
            k->t_window_us = now;
            k->n_window = k->n_body;
        }
        if (!why)
            continue;
        log_debug("http: request body %s (%" PRIu64 " bytes in %.1f s): connection closed", why,
                  k->n_body, (double)(now - k->t_body_us) / 1e6);
        /* the slot is free now; the request ends when libmicrohttpd sees
         * the shut-down socket */
        upload_unlink(s, k);
        k->shut = true;
        shutdown(k->fd, SHUT_RDWR);
    }
    pthread_mutex_unlock(&s->conn_lock);
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    http_server_t *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!ci)
            return;
        http_conn_t *k = xcalloc(1, sizeof *k);
        k->fd = ci->connect_fd;
        k->t_open_us = clock_now_us();
        const union MHD_ConnectionInfo *ai = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        const struct sockaddr *sa = ai ? ai->client_addr : NULL;
        if (sa && sa->sa_family == AF_INET) {
            memcpy(k->addr, &((const struct sockaddr_in *)sa)->sin_addr, 4);
            k->addr_len = 4;
        } else if (sa && sa->sa_family == AF_INET6) {
            const struct in6_addr *a6 = &((const struct sockaddr_in6 *)sa)->sin6_addr;
            if (IN6_IS_ADDR_V4MAPPED(a6)) { /* a v4 client of a dual-stack socket */
                memcpy(k->addr, a6->s6_addr + 12, 4);
                k->addr_len = 4;
            } else { /* one client holds a whole /64 */
                memcpy(k->addr, a6->s6_addr, 8);
                k->addr_len = 8;
            }
        }
        pthread_mutex_lock(&s->conn_lock);
        k->next = s->conns;
        if (s->conns)
            s->conns->prev = k;
        s->conns = k;
        pthread_mutex_unlock(&s->conn_lock);
        *socket_context = k;
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        http_conn_t *k = *socket_context;
        if (!k)
            return;
        *socket_context = NULL;
        pthread_mutex_lock(&s->conn_lock);
        upload_unlink(s, k);
        if (k->prev)
            k->prev->next = k->next;
        else
            s->conns = k->next;
        if (k->next)
            k->next->prev = k->prev;
        pthread_mutex_unlock(&s->conn_lock);
        free(k);
    }
}

/* The request headers on k are complete: its header deadline is met. */
static void connection_headers_done(http_server_t *s, http_conn_t *k)
{
    if (!k)
        return;
    pthread_mutex_lock(&s->conn_lock);
    k->headers_done = true;
    pthread_mutex_unlock(&s->conn_lock);
}

static void *watcher_main(void *arg)
{
    http_server_t *s = arg;
    struct pollfd *pfd = xcalloc(WATCH_MAX, sizeof *pfd);
    uint64_t *ids = xcalloc(WATCH_MAX, sizeof *ids);
    for (;;) {
        size_t n = 0;
        pthread_mutex_lock(&s->live_lock);
        if (s->stopping) {
            pthread_mutex_unlock(&s->live_lock);
            break;
        }
        for (http_req_t *q = s->live; q && n < WATCH_MAX; q = q->next) {
            pthread_mutex_lock(&q->greq->lock);
            bool gone = q->gone;
            pthread_mutex_unlock(&q->greq->lock);
            if (q->fd < 0 || gone)
                continue;
            pfd[n] = (struct pollfd){.fd = q->fd, .events = POLLRDHUP};
            ids[n++] = q->greq->id;
        }
        pthread_mutex_unlock(&s->live_lock);
        enforce_deadlines(s);
        int k = poll(pfd, n, HTTP_WATCH_MS);
        if (k <= 0)
            continue;
        pthread_mutex_lock(&s->live_lock);
        for (size_t i = 0; i < n; i++) {
            if (!(pfd[i].revents & (POLLRDHUP | POLLHUP | POLLERR)))
                continue;
            /* match by request id: the fd may have been closed and reused */
            for (http_req_t *q = s->live; q; q = q->next) {
                if (q->greq->id != ids[i])
                    continue;
                pthread_mutex_lock(&q->greq->lock);
                if (!q->gone)
                    log_debug("request %" PRIu64 ": client hung up", ids[i]);
                q->gone = true;
                if (q->suspended) {
                    q->suspended = false;
                    MHD_resume_connection(q->conn);
                }
                pthread_mutex_unlock(&q->greq->lock);
                break;
            }
        }
        pthread_mutex_unlock(&s->live_lock);
    }
    free(pfd);
    free(ids);
    return NULL;
}


/* libmicrohttpd's URI log callback: the request target as the client sent
 * it, before decoding (a %00 would cut the decoded path short). Makes the
 * request's state; its return value becomes *con_cls. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
    http_req_t *q = xcalloc(1, sizeof *q);
    q->s = cls;
    q->fd = -1;
    size_t n = strlen(uri), path_n = strcspn(uri, "?");
    q->path_long = n > HTTP_MAX_URL;
    for (size_t i = 0; i < path_n && !q->path_ctl; i++) {
        unsigned char ch = (unsigned char)uri[i];
        if (ch < 0x20 || ch == 0x7f) {
            q->path_ctl = true;
        } else if (ch == '%' && i + 2 < path_n && isxdigit((unsigned char)uri[i + 1]) &&
                   isxdigit((unsigned char)uri[i + 2])) {
            char hex[3] = {uri[i + 1], uri[i + 2], 0};
            long v = strtol(hex, NULL, 16);
            q->path_ctl = v < 0x20 || v == 0x7f;
        }
    }
    return q;
}
/* The connection's record (on_connection), or NULL. */
static http_conn_t *conn_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static void upload_unlink(http_server_t *s, http_conn_t *k)
{
    if (!k->uploading)
        return;
    if (k->up_prev)
        k->up_prev->up_next = k->up_next;
    else
        s->uploads = k->up_next;
    if (k->up_next)
        k->up_next->up_prev = k->up_prev;
    k->up_prev = k->up_next = NULL;
    k->uploading = false;
    s->n_uploads--;
}

/* Takes an upload slot for q's body on k. Returns 0, or -1 with q refused
 * (503 all slots taken, 429 this address's). */
static int upload_begin(http_server_t *s, http_req_t *q, http_conn_t *k)
{
    unsigned mine = 0;
    pthread_mutex_lock(&s->conn_lock);
    for (http_conn_t *u = s->uploads; u && k->addr_len; u = u->up_next)
        mine += u->addr_len == k->addr_len && memcmp(u->addr, k->addr, k->addr_len) == 0;
    bool full = s->n_uploads >= s->max_uploads, over = mine >= s->max_uploads_per_ip;
    if (!full && !over) {
        int64_t now = clock_now_us();
        k->uploading = true;
        k->t_body_us = k->t_window_us = now;
        k->n_body = k->n_window = 0;
        k->up_prev = NULL;
        k->up_next = s->uploads;
        if (s->uploads)
            s->uploads->up_prev = k;
        s->uploads = k;
        s->n_uploads++;
        q->upload = k;
    }
    unsigned n_all = s->n_uploads;
    pthread_mutex_unlock(&s->conn_lock);
    if (!full && !over)
        return 0;
    oai_error_t *e = http_refuse(q, q->route);
    q->route = NULL;
    if (full)
        oai_error_set(e, 503, NULL, "The gateway is receiving %u request bodies, its limit "
                                    "(--max-uploads); try again shortly.", n_all);
    else
        oai_error_set(e, 429, NULL, "Your address is sending %u request bodies at once, the limit "
                                    "(--max-uploads-per-ip); try again shortly.", mine);
    log_debug("upload slot refused (%s: %u of all, %u of this address)", full ? "all" : "address",
              n_all, mine);
    return -1;
}

/* q's body is complete (or the request ends): its slot is free again. */
static void upload_end(http_server_t *s, http_req_t *q)
{
    if (!q->upload)
        return;
    pthread_mutex_lock(&s->conn_lock);
    upload_unlink(s, q->upload);
    pthread_mutex_unlock(&s->conn_lock);
    q->upload = NULL;
}

/* Once the body is complete: what needed it, then the route's handler. */
static enum MHD_Result dispatch(http_server_t *s, struct MHD_Connection *c, http_req_t *req)
{
    if (req->preflight)
        return http_respond_preflight(s, c, req->allow);
    if (req->refused)
        return http_respond_api_error(s, c, req->err_surface, &req->refusal,
                                 req->refusal.status == 405 ? req->allow : NULL);
    const route_t *rt = req->route;
    oai_error_t e;
    if (req->too_large) { /* chunked: no length was declared */
        oai_error_set(&e, 413, NULL, "Request body exceeds %zu bytes",
                      rt->surface ? s->max_body : (size_t)HTTP_SMALL_BODY);
        return http_respond_api_error(s, c, rt->surface, &e, NULL);
    }
    return rt->fn ? rt->fn(s, c, req) : handle_generate(s, c, req, rt);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    http_server_t *s = cls;
    http_req_t *req = *con_cls;
    if (!req) /* on_uri made it; libmicrohttpd always calls that first */
        return MHD_NO;
    if (!req->headers_seen) {
        /* first call: the headers, no body byte read yet */
        req->headers_seen = true;
        http_conn_t *k = conn_of(c);
        connection_headers_done(s, k);
        log_debug("%s %s", method, url);
        bool chunked;
        bool body = http_declared_body(c, &chunked) > 0 || chunked;
        bool path_known;
        const route_t *rt = http_route_find(s, method, url, req, &path_known);
        if (http_admit(s, c, url, method, rt, path_known, req) == 0 && body && req->route && k)
            upload_begin(s, req, k);
        /* a refusal of a request with a body is answered now: the body is
         * never read, and libmicrohttpd closes the connection after it */
        if ((req->refused || req->preflight) && body)
            return dispatch(s, c, req);
        return MHD_YES;
    }
    if (req->fetch) /* resumed: its image URLs are fetched */
        return fetch_continue(s, c, req);
    if (req->greq) /* resumed */
        return gen_continue(s, c, req);
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (req->upload) {
            pthread_mutex_lock(&s->conn_lock);
            req->upload->n_body += n;
            pthread_mutex_unlock(&s->conn_lock);
        }
        size_t limit = req->route && req->route->surface ? s->max_body : HTTP_SMALL_BODY;
        if (!req->route || req->too_large || req->body_len + n > limit) {
            /* keep reading (and discarding) so we can answer 413 cleanly;
             * the body deadline bounds how long */
            req->too_large = req->route != NULL;
            return MHD_YES;
        }
        if (req->body_len + n + 1 > req->body_cap) {
            size_t cap = req->body_cap ? req->body_cap : 4096;
            while (cap < req->body_len + n + 1)
                cap *= 2;
            if (cap > limit + 1)
                cap = limit + 1;
            req->body = xrealloc(req->body, cap);
            req->body_cap = cap;
        }
        memcpy(req->body + req->body_len, upload_data, n);
        req->body_len += n;
        req->body[req->body_len] = '\0';
        return MHD_YES;
    }
    upload_end(s, req);
    return dispatch(s, c, req);
}

static void request_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                              enum MHD_RequestTerminationCode toe)
{
    http_server_t *s = cls;
    http_req_t *q = *con_cls;
    if (!q)
        return;
    *con_cls = NULL;
    upload_end(s, q);
    if (q->began) /* first: a surface's wake (which takes greq->lock) stops here */
        q->surface->end(&q->call);
    image_fetch_job_release(&q->fetch); /* its wake stops here */
    if (q->pending) {
        request_free(q->pending);
        free(q->pending);
    }
    if (q->greq) {
        gateway_request_set_notify(q->greq, NULL, NULL);
        pthread_mutex_lock(&s->live_lock);
        live_remove(s, q);
        pthread_mutex_unlock(&s->live_lock);
        if (!q->finished) {
            log_info("request %" PRIu64 ": client gone (%s), cancelling", q->greq->id,
                     toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "closed" : "aborted");
            gateway_cancel(s->gw, q->greq->id);
        }
        chan_close(q->greq->replies);
        gateway_request_unref(&q->greq);
    }
    for (size_t i = 0; i < q->n_events; i++)
        gateway_reply_free(&q->events[i]);
    free(q->events);
    for (size_t i = 0; i < q->call.n_tools; i++)
        free(q->call.tool_names[i]);
    free(q->call.tool_names);
    free(q->call.tool_custom);
    free(q->call.warning);
    strbuf_free(&q->out);
    free(q->call.model);
    free(q->body);
    free(q);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && line[n - 1] == '\n')
        line[--n] = '\0';
    /* a client that went away (or one the header deadline shut down) is
     * routine, not a warning */
    if (strstr(line, "connection closure") || strstr(line, "Connection reset"))
        log_debug("http: %s", line);
    else
        log_warn("http: %s", line);
}

/* ------------------------------------------------------------------------ */
/* lifetime                                                                  */

int http_parse_hostport(const char *s, char *host, size_t host_len, uint16_t *port)
{
    const char *colon, *h = s;
    size_t hn;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':')
            return -1;
        h = s + 1;
        hn = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon)
            return -1;
        hn = (size_t)(colon - s);
    }
    if (hn == 0 || hn >= host_len)
        return -1;
    char *end;
    errno = 0;
    long p = strtol(colon + 1, &end, 10);
    if (errno || end == colon + 1 || *end || p < 0 || p > 65535)
        return -1;
    memcpy(host, h, hn);
    host[hn] = '\0';
    *port = (uint16_t)p;
    return 0;
}

http_server_t *http_server_new(const http_config_t *cfg, struct gateway *gw)
{
    char host[256];
    uint16_t port;
    if (http_parse_hostport(cfg->listen, host, sizeof host, &port) < 0) {
        log_error("bad listen address '%s' (want HOST:PORT)", cfg->listen);
        return NULL;
    }
    http_server_t *s = xcalloc(1, sizeof *s);
    s->gw = gw;
    s->max_body = cfg->max_body ? cfg->max_body : HTTP_DEFAULT_MAX_BODY;
    s->max_messages = cfg->max_messages;
    s->max_prompt_bytes = cfg->max_prompt_bytes;
    s->image_limits = cfg->image_limits;
    char why[256];
    s->fetch = image_fetch_new(&(image_fetch_config_t){.allow = cfg->image_url_allow,
                                                       .timeout_ms = cfg->image_url_timeout_ms,
                                                       .max_bytes = cfg->image_limits.max_bytes
                                                                        ? cfg->image_limits.max_bytes
                                                                        : IMAGE_MAX_BYTES_DEFAULT,
                                                       .metrics = gw ? gw->metrics : NULL},
                               why, sizeof why);
    if (!s->fetch) {
        log_error("images.url_allow (--image-url-allow): %s", why);
        goto err;
    }
    if (image_url_allow_count(image_fetch_allow(s->fetch)))
        log_warn("remote image URLs are fetched from %zu allowed host entr%s (images.url_allow)",
                 image_url_allow_count(image_fetch_allow(s->fetch)),
                 image_url_allow_count(image_fetch_allow(s->fetch)) == 1 ? "y" : "ies");
    pthread_rwlock_init(&s->keys_lock, NULL);
    pthread_mutex_init(&s->live_lock, NULL);
    pthread_mutex_init(&s->conn_lock, NULL);
    pthread_mutex_init(&s->rate_lock, NULL);
    s->rate_per_key = cfg->rate_per_key > 0 ? cfg->rate_per_key : 0;
    http_cors_parse(s, cfg->cors_origins);
    s->admin_open = cfg->admin_open;
    s->reasoning = (reasoning_parser_t)cfg->reasoning_parser;
    s->keep_volatile = cfg->keep_volatile_blocks;
    s->responses = cfg->responses;
    s->ui = !cfg->no_ui;
    s->header_timeout_us = (cfg->header_timeout_ms > 0 ? cfg->header_timeout_ms
                                                        : HTTP_DEFAULT_HEADER_TIMEOUT_S * 1000) * 1000;
    s->body_timeout_us = (cfg->body_timeout_ms > 0 ? cfg->body_timeout_ms
                                                    : HTTP_DEFAULT_BODY_TIMEOUT_S * 1000) * 1000;
    s->body_window_us = (cfg->body_rate_window_ms > 0 ? cfg->body_rate_window_ms
                                                       : HTTP_DEFAULT_BODY_RATE_WINDOW_S * 1000) * 1000;
    s->body_min_rate = cfg->body_min_rate;
    s->max_uploads = cfg->max_uploads ? cfg->max_uploads : HTTP_DEFAULT_MAX_UPLOADS;
    s->max_uploads_per_ip = cfg->max_uploads_per_ip ? cfg->max_uploads_per_ip
                                                    : HTTP_DEFAULT_MAX_UPLOADS_PER_IP;
    s->listen_host = xstrdup(host);
    s->allowed_hosts = cfg->allowed_hosts ? xstrdup(cfg->allowed_hosts) : NULL;
    unsigned idle_s = cfg->idle_timeout_s ? cfg->idle_timeout_s : HTTP_DEFAULT_IDLE_TIMEOUT_S;
    /* connection limit from the descriptor limit (raised to the hard limit):
     * libmicrohttpd's default (FD_SETSIZE − 4) lets ~1000 idle sockets lock
     * everyone else out */
    struct rlimit rl;
    unsigned conn_limit = 1000;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        if (rl.rlim_cur < rl.rlim_max) {
            struct rlimit want = {.rlim_cur = rl.rlim_max, .rlim_max = rl.rlim_max};
            if (want.rlim_cur == RLIM_INFINITY || want.rlim_cur > 1u << 20)
                want.rlim_cur = 1u << 20;
            if (want.rlim_cur > rl.rlim_cur && setrlimit(RLIMIT_NOFILE, &want) == 0)
                rl.rlim_cur = want.rlim_cur;
        }
        rlim_t cur = rl.rlim_cur == RLIM_INFINITY ? 1u << 20 : rl.rlim_cur;
        conn_limit = cur > 2 * FD_HEADROOM ? (unsigned)(cur - FD_HEADROOM) : (unsigned)(cur / 2);
    }
    if (cfg->keys_path) {
        s->keys_path = xstrdup(cfg->keys_path);
        if (http_server_reload_keys(s, NULL, 0) < 0)
            goto err;
    } else {
        log_warn("no --keys file: the API is open to anyone who can reach it (every request "
                 "is tier normal)");
        if (s->admin_open)
            log_warn("*** --admin-open: /admin/* (drain, restart workers) is open to ANYONE who "
                     "can reach this port, without a key ***");
    }
    if (cfg->keys_path && s->admin_open)
        log_warn("--admin-open is ignored: with a keys file /admin/* need an admin key");
    /* the Host check: a client that names this server by a DNS name gets
     * 421 unless the name is allowed; say so where that is likely */
    bool wildcard = strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0;
    if (s->allowed_hosts && http_host_allowed("any.name.invalid", NULL, s->allowed_hosts))
        log_warn("--allowed-host '*': any Host header is accepted (no DNS rebinding protection)");
    else if (wildcard && !s->allowed_hosts)
        log_warn("listening on %s without --allowed-host: requests that name this server by a DNS "
                 "name (a Service name, a proxy's Host) get 421; only IP addresses and localhost "
                 "are accepted as Host. Add --allowed-host NAME (repeatable, *.SUFFIX allowed).", host);
    if (s->cors_any)
        log_warn("CORS: every browser origin may call the API (cors_origins '*')");
    else if (s->n_cors)
        log_info("CORS: %zu browser origin(s) allowed (%s%s)", s->n_cors, s->cors[0],
                 s->n_cors > 1 ? ", ..." : "");

    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    char portstr[8];
    snprintf(portstr, sizeof portstr, "%u", port);
    int gai = getaddrinfo(host, portstr, &hints, &ai);
    if (gai != 0) {
        log_error("cannot resolve listen host '%s': %s", host, gai_strerror(gai));
        goto err;
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ERROR_LOG |
                     MHD_ALLOW_SUSPEND_RESUME;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    s->daemon = MHD_start_daemon(
        flags, port, NULL, NULL, on_request, s,
        MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s, /* first, so it covers the rest */
        MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_THREAD_POOL_SIZE, cfg->n_threads ? cfg->n_threads : 2u,
        MHD_OPTION_NOTIFY_COMPLETED, request_completed, s,
        MHD_OPTION_LISTENING_ADDRESS_REUSE, 1u,
        MHD_OPTION_CONNECTION_TIMEOUT, idle_s,
        MHD_OPTION_CONNECTION_LIMIT, conn_limit,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
        MHD_OPTION_URI_LOG_CALLBACK, on_uri, s,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HTTP_CONN_MEMORY,
        MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->daemon) {
        log_error("cannot listen on %s: %s", cfg->listen, strerror(errno));
        goto err;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : port;
    if (pthread_create(&s->watcher, NULL, watcher_main, s) != 0) {
        log_error("cannot start the hang-up watcher");
        goto err;
    }
    s->watcher_started = true;
    log_info("listening on http://%s%s%s:%u (up to %u connections, idle timeout %u s, "
             "header deadline %.1f s, body deadline %.1f s, body rate >= %" PRIu64 " B/s per %.1f s, "
             "uploads <= %u, <= %u per address)", strchr(host, ':') ? "[" : "", host,
             strchr(host, ':') ? "]" : "", s->port, conn_limit, idle_s,
             (double)s->header_timeout_us / 1e6, (double)s->body_timeout_us / 1e6, s->body_min_rate,
             (double)s->body_window_us / 1e6, s->max_uploads, s->max_uploads_per_ip);
    return s;
err:
    http_server_free(&s);
    return NULL;
}

void http_server_free(http_server_t **sp)
{
    http_server_t *s = *sp;
    if (!s)
        return;
    *sp = NULL;
    /* libmicrohttpd must not be stopped with suspended connections: mark
     * every request gone and resume it, so its handler closes it */
    pthread_mutex_lock(&s->live_lock);
    s->stopping = true;
    for (http_req_t *q = s->live; q; q = q->next) {
        pthread_mutex_lock(&q->greq->lock);
        q->gone = true;
        if (q->suspended) {
            q->suspended = false;
            MHD_resume_connection(q->conn);
        }
        pthread_mutex_unlock(&q->greq->lock);
    }
    pthread_mutex_unlock(&s->live_lock);
    if (s->watcher_started)
        pthread_join(s->watcher, NULL);
    /* fetches end now (stopping), each waking its parked connection */
    image_fetch_free(&s->fetch);
    if (s->daemon)
        MHD_stop_daemon(s->daemon);
    keys_free(&s->keys);
    free(s->keys_path);
    pthread_rwlock_destroy(&s->keys_lock);
    pthread_mutex_destroy(&s->live_lock);
    pthread_mutex_destroy(&s->conn_lock);
    pthread_mutex_destroy(&s->rate_lock);
    free(s->buckets);
    free(s->listen_host);
    free(s->allowed_hosts);
    for (size_t i = 0; i < s->n_cors; i++)
        free(s->cors[i]);
    free(s->cors);
    free(s);
}

size_t http_server_active(http_server_t *s)
{
    size_t n = 0;
    pthread_mutex_lock(&s->live_lock);
    for (http_req_t *q = s->live; q; q = q->next)
        n++;
    pthread_mutex_unlock(&s->live_lock);
    return n;
}

uint16_t http_server_port(const http_server_t *s)
{
    return s->port;
}
