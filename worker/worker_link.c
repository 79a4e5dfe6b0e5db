/* worker_link.c — DEALER connection to the gateway with REGISTER, heartbeats
 * both ways and reconnect-with-backoff, run on a thread of its own so that
 * heartbeats keep flowing while a forward step runs (see worker_link.h).
 *
 * Two threads, two sides of one inproc PAIR pipe:
 *
 *   caller (step loop)                    link thread
 *   ------------------                    -----------
 *   pipe_main ◄──── SUBMIT/CANCEL/... ──── pipe_link ◄──┐
 *             ──── EVENT/ERROR ─────────►            ──┴► DEALER ⇄ gateway
 *                                          HEARTBEAT, REGISTER, reconnects
 *
 * Pipe messages are protocol messages as they go on the wire (tag, type,
 * body frames), plus two one-frame controls: PIPE_STOP (caller → link:
 * leave the thread) and the synthesized ERROR 409 id 0 (link → caller: the
 * gateway was lost), which travels in order with the messages so that the
 * caller drops its orphaned requests before it sees a SUBMIT of the next
 * registration. State both threads read (load, step progress, counters)
 * is under `mu` or atomic. */
#include "worker/worker_link.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/xalloc.h"
#include "worker/sched.h"

#define PIPE_STOP "STOP"         /* caller → link thread: exit */
#define MAX_PARTS 4              /* frames we accept per message (protocol: 3) */

struct worker_link {
    /* read-only after worker_link_new */
    char *endpoint;                 /* gateway ROUTER endpoint */
    bool interval_explicit;         /* keep our interval, do not adopt the gateway's */
    bool curve;                     /* the keys below are set */
    char curve_server[41], curve_public[41], curve_secret[41]; /* Z85 */
    void *zctx;                     /* ZeroMQ context */
    pthread_t thread;               /* the link thread */
    bool thread_started;

    /* caller's thread only */
    void *pipe_main;                /* PAIR, bound */
    bool lost;                      /* gateway lost since worker_link_take_lost */

    /* link thread only (after start) */
    void *pipe_link;                /* PAIR, connected to pipe_main */
    void *sock;                     /* DEALER; NULL while waiting to reconnect */
    proto_register_t reg;           /* what we announce; owns its strings */
    uint64_t seq;                   /* next HEARTBEAT seq */
    int64_t t_next_heartbeat_us;    /* monotonic */
    int64_t t_last_seen_us;         /* last valid message from the gateway, or connect time */
    int64_t gateway_interval_us;    /* the gateway's heartbeat interval (its hb_ms) */
    int64_t backoff_us;             /* next reconnect delay */
    int64_t t_reconnect_us;         /* when sock == NULL: when to connect again */
    const _Atomic uint64_t *work_done; /* cfg.work_done, NULL = none */
    _Atomic uint32_t *preempt;      /* cfg.preempt, NULL = none */
    uint64_t work_seen;             /* its value at the last heartbeat */
    int64_t t_work_us;              /* when it was last seen to advance, 0 = never */

    /* shared */
    atomic_llong interval_us;       /* our heartbeat interval (adopted from the gateway) */
    atomic_bool registered;         /* the gateway answered our last REGISTER */
    atomic_ullong n_registrations;  /* REGISTERs the gateway answered, ever */
    atomic_bool connected;          /* sock != NULL */
    atomic_ullong n_reconnects;
    pthread_mutex_t mu;             /* guards the fields below */
    proto_load_t load;              /* carried by our heartbeats */
    bool busy;                      /* load says running + waiting > 0 */
    int64_t t_busy_since_us;        /* when busy last became true */
    uint64_t n_steps;               /* steps completed */
    int64_t t_step_start_us;        /* the running step's start, 0 = none */
    int64_t t_last_step_end_us;     /* 0 = none yet */
    uint32_t step_ms[PROTO_PROGRESS_WINDOW]; /* ring: durations of the last steps */
};

/* ------------------------------------------------------------------------ */
/* link thread                                                               */

static void send_register(worker_link_t *l)
{
    l->reg.heartbeat_ms = (uint32_t)(atomic_load(&l->interval_us) / 1000);
    proto_msg_t m = {.type = PROTO_REGISTER, .reg = l->reg};
    if (proto_send(l->sock, NULL, &m, ZMQ_DONTWAIT) != PROTO_OK)
        log_warn("REGISTER not sent: %s", zmq_strerror(errno));
    atomic_store(&l->registered, false);
}

static int link_connect(worker_link_t *l, int64_t now)
{
    l->sock = zmq_socket(l->zctx, ZMQ_DEALER);
    if (!l->sock) {
        log_error("zmq_socket: %s", zmq_strerror(errno));
        return -1;
    }
    int linger = 0;
    int64_t maxmsg = (int64_t)PROTO_MAX_BODY + 1024;
    zmq_setsockopt(l->sock, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(l->sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    /* no send high-water mark: EVENTs are the answers the gateway waits for,
     * and a send that would block is dropped (ZMQ_DONTWAIT), so a gateway
     * slower than the step loop for a moment (1000 queued messages, the
     * default) must not cost a stream its text; they queue instead, bounded
     * by what the running requests produce */
    int unlimited = 0;
    zmq_setsockopt(l->sock, ZMQ_SNDHWM, &unlimited, sizeof unlimited);
    if (l->curve && (zmq_setsockopt(l->sock, ZMQ_CURVE_SERVERKEY, l->curve_server, 41) != 0 ||
                     zmq_setsockopt(l->sock, ZMQ_CURVE_PUBLICKEY, l->curve_public, 41) != 0 ||
                     zmq_setsockopt(l->sock, ZMQ_CURVE_SECRETKEY, l->curve_secret, 41) != 0)) {
        log_error("cannot set CURVE keys: %s", zmq_strerror(errno));
        zmq_close(l->sock);
        l->sock = NULL;
        return -1;
    }
    if (zmq_connect(l->sock, l->endpoint) != 0) {
        log_error("cannot connect to %s: %s", l->endpoint, zmq_strerror(errno));
        zmq_close(l->sock);
        l->sock = NULL;
        return -1;
    }
    l->t_last_seen_us = now;
    l->t_next_heartbeat_us = now + atomic_load(&l->interval_us);
    atomic_store(&l->connected, true);
    send_register(l);
    log_info("connecting to gateway %s as %s", l->endpoint, l->reg.replica);
    return 0;
}

static void link_disconnect(worker_link_t *l)
{
    if (l->sock)
        zmq_close(l->sock);
    l->sock = NULL;
    atomic_store(&l->connected, false);
    atomic_store(&l->registered, false);
}

/* Tells the caller, in order with the messages, that the gateway is lost. */
static void pipe_send_lost(worker_link_t *l, const char *why)
{
    proto_msg_t e;
    proto_msg_init(&e, PROTO_ERROR);
    e.error.code = PROTO_CODE_NOT_REGISTERED;
    e.error.message = (char *)why;
    if (proto_send(l->pipe_link, NULL, &e, 0) != PROTO_OK)
        log_error("link pipe: %s", zmq_strerror(errno));
}

/* The HEARTBEAT's progress, from the shared state. */
static void progress_now(worker_link_t *l, int64_t now, proto_load_t *load, proto_progress_t *p)
{
    pthread_mutex_lock(&l->mu);
    *load = l->load;
    p->steps = l->n_steps;
    p->busy = l->busy;
    p->stall_ms = 0;
    if (l->work_done) {
        uint64_t w = atomic_load_explicit(l->work_done, memory_order_relaxed);
        if (w != l->work_seen) {
            l->work_seen = w;
            l->t_work_us = now;
        }
    }
    if (l->busy) {
        int64_t since = l->t_last_step_end_us > l->t_busy_since_us ? l->t_last_step_end_us
                                                                   : l->t_busy_since_us;
        if (l->t_work_us > since)
            since = l->t_work_us; /* inside a long step, its layers advance */
        int64_t ms = (now - since) / 1000;
        p->stall_ms = ms < 0 ? 0 : ms > 0x7fffffff ? 0x7fffffff : (uint32_t)ms;
    }
    p->slow_ms = 0;
    for (int i = 0; i < PROTO_PROGRESS_WINDOW; i++)
        if (l->step_ms[i] > p->slow_ms)
            p->slow_ms = l->step_ms[i];
    pthread_mutex_unlock(&l->mu);
}

/* Heartbeats, the gateway's liveness, reconnects. Returns the time of the
 * next thing to do here. */
static int64_t housekeeping(worker_link_t *l, int64_t now)
{
    int64_t interval = atomic_load(&l->interval_us);
    if (!l->sock) {
        if (now < l->t_reconnect_us)
            return l->t_reconnect_us;
        if (link_connect(l, now) < 0) {
            l->t_reconnect_us = now + l->backoff_us;
            return l->t_reconnect_us;
        }
    }
    int64_t t_dead = l->t_last_seen_us + PROTO_LIVENESS * l->gateway_interval_us;
    if (now >= t_dead) {
        log_warn("gateway silent for %lld ms: reconnecting in %lld ms",
                 (long long)((now - l->t_last_seen_us) / 1000), (long long)(l->backoff_us / 1000));
        link_disconnect(l);
        atomic_fetch_add(&l->n_reconnects, 1);
        pipe_send_lost(l, "gateway silent: reconnecting");
        l->t_reconnect_us = now + l->backoff_us;
        l->backoff_us *= 2;
        if (l->backoff_us > (int64_t)PROTO_RECONNECT_MAX_MS * 1000)
            l->backoff_us = (int64_t)PROTO_RECONNECT_MAX_MS * 1000;
        return l->t_reconnect_us;
    }
    if (now >= l->t_next_heartbeat_us) {
        proto_msg_t hb;
        proto_msg_init(&hb, PROTO_HEARTBEAT);
        hb.heartbeat.seq = l->seq++;
        hb.heartbeat.heartbeat_ms = (uint32_t)(interval / 1000);
        hb.heartbeat.has_load = true;
        hb.heartbeat.has_progress = true;
        progress_now(l, now, &hb.heartbeat.load, &hb.heartbeat.progress);
        if (proto_send(l->sock, NULL, &hb, ZMQ_DONTWAIT) != PROTO_OK)
            log_debug("HEARTBEAT not sent: %s", zmq_strerror(errno));
        l->t_next_heartbeat_us += interval;
        if (l->t_next_heartbeat_us <= now) /* we were stalled: do not burst */
            l->t_next_heartbeat_us = now + interval;
    }
    return l->t_next_heartbeat_us < t_dead ? l->t_next_heartbeat_us : t_dead;
}

/* The gateway's HEARTBEAT: its interval (adopted unless ours is explicit). */
static void on_gateway_heartbeat(worker_link_t *l, const proto_heartbeat_t *h, int64_t now)
{
    if (!h->heartbeat_ms)
        return;
    int64_t gw_us = (int64_t)h->heartbeat_ms * 1000;
    l->gateway_interval_us = gw_us;
    if (l->interval_explicit || gw_us == atomic_load(&l->interval_us))
        return;
    log_info("heartbeat interval %lld ms: the gateway's (was %lld ms)", (long long)(gw_us / 1000),
             (long long)(atomic_load(&l->interval_us) / 1000));
    atomic_store(&l->interval_us, gw_us);
    l->reg.heartbeat_ms = h->heartbeat_ms;
    l->t_next_heartbeat_us = now; /* announce the new interval at once */
}

/* Receives the frames of one message (up to MAX_PARTS kept, the rest
 * dropped). Returns the number kept, 0 when nothing is queued, -1 when the
 * message had too many frames (all closed). */
static int recv_parts(void *sock, zmq_msg_t parts[MAX_PARTS])
{
    int n = 0, more = 1;
    bool too_many = false;
    while (more) {
        zmq_msg_t part;
        zmq_msg_init(&part);
        if (zmq_msg_recv(&part, sock, n == 0 && !too_many ? ZMQ_DONTWAIT : 0) < 0) {
            zmq_msg_close(&part);
            if (n == 0 && !too_many)
                return 0;
            break; /* ETERM mid-message */
        }
        more = zmq_msg_more(&part);
        if (n < MAX_PARTS)
            parts[n++] = part;
        else {
            zmq_msg_close(&part);
            too_many = true;
        }
    }
    if (too_many) {
        for (int i = 0; i < n; i++)
            zmq_msg_close(&parts[i]);
        return -1;
    }
    return n;
}

/* Sends parts[0..n) as one message on `to` and closes them. */
static int send_parts(void *to, zmq_msg_t *parts, int n, int flags)
{
    int rc = 0;
    for (int i = 0; i < n; i++) {
        if (rc == 0 && zmq_msg_send(&parts[i], to, flags | (i + 1 < n ? ZMQ_SNDMORE : 0)) < 0)
            rc = -1;
        zmq_msg_close(&parts[i]); /* a no-op after a successful send */
    }
    return rc;
}

/* The priority of a SUBMIT's three frames when it is a request the
 * scheduler runs (generation, embedding, ranking), else -1 (tokenizer
 * operations, malformed messages: the caller's decoder answers those). */
static int submit_priority(zmq_msg_t *parts)
{
    proto_frame_t f[3];
    for (int i = 0; i < 3; i++)
        f[i] = (proto_frame_t){zmq_msg_data(&parts[i]), zmq_msg_size(&parts[i])};
    proto_msg_t m;
    if (proto_decode(f, 3, &m, NULL, 0) != PROTO_OK) {
        proto_msg_clear(&m);
        return -1;
    }
    int prio = m.submit.op == PROTO_OP_TOKENIZE || m.submit.op == PROTO_OP_DETOKENIZE ? -1 : (int)m.submit.priority;
    proto_msg_clear(&m);
    return prio;
}

/* proto_decode of a three-frame message. */
static int decode_parts(zmq_msg_t *parts, proto_msg_t *m, char *err, size_t errlen)
{
    proto_frame_t f[3];
    for (int i = 0; i < 3; i++)
        f[i] = (proto_frame_t){zmq_msg_data(&parts[i]), zmq_msg_size(&parts[i])};
    return proto_decode(f, 3, m, err, errlen);
}

/* One message from the gateway: HEARTBEATs and ERROR 409 handled here (a 409
 * also goes on to the caller, as "lost"), the rest forwarded. */
static void on_gateway_frames(worker_link_t *l, zmq_msg_t *parts, int n, int64_t now)
{
    int type = n == 3 && zmq_msg_size(&parts[1]) == 1 ? *(uint8_t *)zmq_msg_data(&parts[1]) : 0;
    if (type == PROTO_HEARTBEAT || type == PROTO_ERROR) {
        proto_msg_t m;
        char err[256];
        int st = decode_parts(parts, &m, err, sizeof err);
        if (st != PROTO_OK) {
            log_warn("dropped malformed %s from the gateway: %s (%s)", proto_type_name(type),
                     proto_status_name(st), err);
            for (int i = 0; i < n; i++)
                zmq_msg_close(&parts[i]);
            return;
        }
        l->t_last_seen_us = now;
        bool not_registered = type == PROTO_ERROR && m.error.id == 0 &&
                              m.error.code == PROTO_CODE_NOT_REGISTERED;
        if (!atomic_load(&l->registered) && type != PROTO_ERROR) {
            atomic_store(&l->registered, true);
            atomic_fetch_add(&l->n_registrations, 1);
            l->backoff_us = atomic_load(&l->interval_us);
            log_info("registered with gateway %s", l->endpoint);
        }
        if (type == PROTO_HEARTBEAT)
            on_gateway_heartbeat(l, &m.heartbeat, now);
        else if (not_registered) {
            log_info("gateway does not know us (%s): registering again", m.error.message);
            send_register(l);
        }
        proto_msg_clear(&m);
        if (type == PROTO_HEARTBEAT) {
            for (int i = 0; i < n; i++)
                zmq_msg_close(&parts[i]);
            return;
        }
    } else {
        /* the caller's decoder judges the rest; it came on the gateway's
         * connection, so it shows the gateway is there */
        l->t_last_seen_us = now;
        if (!atomic_load(&l->registered)) {
            atomic_store(&l->registered, true);
            atomic_fetch_add(&l->n_registrations, 1);
            l->backoff_us = atomic_load(&l->interval_us);
            log_info("registered with gateway %s", l->endpoint);
        }
    }
    int prio = type == PROTO_SUBMIT && l->preempt ? submit_priority(parts) : -1;
    if (send_parts(l->pipe_link, parts, n, 0) != 0)
        log_error("link pipe: %s", zmq_strerror(errno));
    /* after the send: a step the offer stops must find the SUBMIT in the
     * pipe when the step loop next looks */
    if (prio >= 0 && sched_preempt_offer(l->preempt, prio))
        log_debug("SUBMIT of priority %d stops the running step", prio);
}

/* The caller's new REGISTER (worker_link_register): replaces l->reg (kept
 * for reconnects) and goes out now when connected. Closes parts. */
static void on_caller_register(worker_link_t *l, zmq_msg_t *parts)
{
    proto_msg_t m;
    char err[256];
    int st = decode_parts(parts, &m, err, sizeof err);
    for (int i = 0; i < 3; i++)
        zmq_msg_close(&parts[i]);
    if (st != PROTO_OK) {
        log_error("our own REGISTER does not decode: %s (%s)", proto_status_name(st), err);
        return;
    }
    proto_msg_t old = {.type = PROTO_REGISTER, .reg = l->reg};
    proto_msg_clear(&old);
    l->reg = m.reg; /* owned now */
    if (l->sock)
        send_register(l);
}

static void *link_main(void *arg)
{
    worker_link_t *l = arg;
    for (;;) {
        int64_t now = clock_now_us();
        int64_t next = housekeeping(l, now);
        long wait_ms = next <= now ? 0 : (long)((next - now + 999) / 1000);
        zmq_pollitem_t items[2] = {{.socket = l->pipe_link, .events = ZMQ_POLLIN}};
        int n = 1;
        if (l->sock)
            items[n++] = (zmq_pollitem_t){.socket = l->sock, .events = ZMQ_POLLIN};
        int rc = zmq_poll(items, n, wait_ms);
        if (rc < 0) {
            if (errno == EINTR)
                continue;
            log_error("link zmq_poll: %s: the link thread stops", zmq_strerror(errno));
            break;
        }
        zmq_msg_t parts[MAX_PARTS];
        if (items[0].revents & ZMQ_POLLIN) {
            int k;
            while ((k = recv_parts(l->pipe_link, parts)) != 0) {
                if (k < 0)
                    continue;
                if (k == 1 && zmq_msg_size(&parts[0]) == strlen(PIPE_STOP) &&
                    memcmp(zmq_msg_data(&parts[0]), PIPE_STOP, strlen(PIPE_STOP)) == 0) {
                    zmq_msg_close(&parts[0]);
                    return NULL;
                }
                if (k == 3 && zmq_msg_size(&parts[1]) == 1 &&
                    *(uint8_t *)zmq_msg_data(&parts[1]) == PROTO_REGISTER) {
                    on_caller_register(l, parts); /* what we announce from now on */
                    continue;
                }
                if (!l->sock) {
                    log_warn("message to the gateway dropped: not connected");
                    for (int i = 0; i < k; i++)
                        zmq_msg_close(&parts[i]);
                } else if (send_parts(l->sock, parts, k, ZMQ_DONTWAIT) != 0) {
                    log_warn("message to the gateway dropped: %s", zmq_strerror(errno));
                }
            }
        }
        /* a bounded batch, so the caller's messages and our heartbeats are
         * not starved by a burst from the gateway */
        for (int i = 0; i < 256 && l->sock && n > 1 && (items[1].revents & ZMQ_POLLIN); i++) {
            int k = recv_parts(l->sock, parts);
            if (k == 0)
                break;
            if (k < 0) {
                log_warn("dropped a message of more than %d frames from the gateway", MAX_PARTS);
                continue;
            }
            on_gateway_frames(l, parts, k, clock_now_us());
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* caller's side                                                             */

worker_link_t *worker_link_new(const worker_link_config_t *cfg)
{
    worker_link_t *l = xcalloc(1, sizeof *l);
    pthread_mutex_init(&l->mu, NULL);
    l->endpoint = xstrdup(cfg->endpoint);
    int hb = cfg->heartbeat_ms > 0 ? cfg->heartbeat_ms : PROTO_HEARTBEAT_MS;
    atomic_init(&l->interval_us, (long long)hb * 1000);
    atomic_init(&l->registered, false);
    atomic_init(&l->n_registrations, 0);
    atomic_init(&l->connected, false);
    atomic_init(&l->n_reconnects, 0);
    l->interval_explicit = cfg->heartbeat_explicit;
    l->work_done = cfg->work_done;
    l->preempt = cfg->preempt;
    l->reg = *cfg->reg;
    l->reg.version = PROTO_VERSION;
    l->reg.heartbeat_ms = (uint32_t)hb;
    l->reg.model = xstrdup(cfg->reg->model);
    l->reg.replica = xstrdup(cfg->reg->replica);
    l->reg.host = xstrdup(cfg->reg->host ? cfg->reg->host : "");
    l->reg.lora = cfg->reg->n_lora ? xcalloc(cfg->reg->n_lora, sizeof *l->reg.lora) : NULL;
    for (uint32_t i = 0; i < cfg->reg->n_lora; i++) {
        l->reg.lora[i] = cfg->reg->lora[i];
        l->reg.lora[i].name = xstrdup(cfg->reg->lora[i].name);
    }
    l->gateway_interval_us = (int64_t)hb * 1000; /* until its first heartbeat says otherwise */
    l->backoff_us = (int64_t)hb * 1000;
    if (cfg->curve_server_key || cfg->curve_public_key || cfg->curve_secret_key) {
        const char *k[3] = {cfg->curve_server_key, cfg->curve_public_key, cfg->curve_secret_key};
        char *dst[3] = {l->curve_server, l->curve_public, l->curve_secret};
        for (int i = 0; i < 3; i++) {
            if (!k[i] || strlen(k[i]) != 40) {
                log_error("CURVE needs the gateway's public key and our key pair (40 Z85 chars each)");
                goto err;
            }
            memcpy(dst[i], k[i], 41);
        }
        l->curve = true;
    }
    l->zctx = zmq_ctx_new();
    if (!l->zctx)
        goto err;
    char pipe_ep[64];
    snprintf(pipe_ep, sizeof pipe_ep, "inproc://worker-link-%p", (void *)l);
    l->pipe_main = zmq_socket(l->zctx, ZMQ_PAIR);
    l->pipe_link = zmq_socket(l->zctx, ZMQ_PAIR);
    if (!l->pipe_main || !l->pipe_link) {
        log_error("zmq_socket: %s", zmq_strerror(errno));
        goto err;
    }
    /* no high-water mark: the caller's EVENTs never block or drop here */
    int zero = 0;
    zmq_setsockopt(l->pipe_main, ZMQ_SNDHWM, &zero, sizeof zero);
    zmq_setsockopt(l->pipe_main, ZMQ_RCVHWM, &zero, sizeof zero);
    zmq_setsockopt(l->pipe_link, ZMQ_SNDHWM, &zero, sizeof zero);
    zmq_setsockopt(l->pipe_link, ZMQ_RCVHWM, &zero, sizeof zero);
    zmq_setsockopt(l->pipe_main, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(l->pipe_link, ZMQ_LINGER, &zero, sizeof zero);
    if (zmq_bind(l->pipe_main, pipe_ep) != 0 || zmq_connect(l->pipe_link, pipe_ep) != 0) {
        log_error("link pipe %s: %s", pipe_ep, zmq_strerror(errno));
        goto err;
    }
    if (link_connect(l, clock_now_us()) < 0)
        goto err;
    /* the link thread owns sock and pipe_link from here (pthread_create is
     * the full memory barrier ZeroMQ asks for when a socket changes thread) */
    if (pthread_create(&l->thread, NULL, link_main, l) != 0) {
        log_error("cannot start the link thread");
        goto err;
    }
    l->thread_started = true;
    return l;
err:
    worker_link_free(&l);
    return NULL;
}

void worker_link_free(worker_link_t **lp)
{
    worker_link_t *l = *lp;
    if (!l)
        return;
    *lp = NULL;
    if (l->thread_started) {
        if (zmq_send(l->pipe_main, PIPE_STOP, strlen(PIPE_STOP), 0) < 0)
            log_error("link pipe: %s", zmq_strerror(errno));
        pthread_join(l->thread, NULL);
    }
    link_disconnect(l);
    if (l->pipe_link)
        zmq_close(l->pipe_link);
    if (l->pipe_main)
        zmq_close(l->pipe_main);
    if (l->zctx)
        zmq_ctx_term(l->zctx);
    proto_msg_t m = {.type = PROTO_REGISTER, .reg = l->reg};
    proto_msg_clear(&m);
    explicit_bzero(l->curve_secret, sizeof l->curve_secret);
    pthread_mutex_destroy(&l->mu);
    free(l->endpoint);
    free(l);
}

void worker_link_set_load(worker_link_t *l, const proto_load_t *load)
{
    bool busy = load->running + load->waiting > 0;
    pthread_mutex_lock(&l->mu);
    if (busy && !l->busy)
        l->t_busy_since_us = clock_now_us();
    l->busy = busy;
    l->load = *load;
    pthread_mutex_unlock(&l->mu);
}

void worker_link_step_begin(worker_link_t *l)
{
    pthread_mutex_lock(&l->mu);
    l->t_step_start_us = clock_now_us();
    if (!l->busy) { /* a step is work owed, whatever the last load said */
        l->busy = true;
        l->t_busy_since_us = l->t_step_start_us;
    }
    pthread_mutex_unlock(&l->mu);
}

void worker_link_step_end(worker_link_t *l)
{
    int64_t now = clock_now_us();
    pthread_mutex_lock(&l->mu);
    assert(l->t_step_start_us > 0); /* step_begin came first */
    int64_t ms = (now - l->t_step_start_us) / 1000;
    l->step_ms[l->n_steps % PROTO_PROGRESS_WINDOW] =
        ms < 0 ? 0 : ms > 0x7fffffff ? 0x7fffffff : (uint32_t)ms;
    l->n_steps++;
    l->t_last_step_end_us = now;
    l->t_step_start_us = 0;
    pthread_mutex_unlock(&l->mu);
}

int worker_link_heartbeat_ms(const worker_link_t *l)
{
    return (int)(atomic_load(&((worker_link_t *)l)->interval_us) / 1000);
}

bool worker_link_registered(const worker_link_t *l)
{
    return atomic_load(&((worker_link_t *)l)->registered);
}

uint64_t worker_link_registrations(const worker_link_t *l)
{
    return atomic_load(&((worker_link_t *)l)->n_registrations);
}

bool worker_link_take_lost(worker_link_t *l)
{
    bool was = l->lost;
    l->lost = false;
    return was;
}

uint64_t worker_link_reconnects(const worker_link_t *l)
{
    return atomic_load(&((worker_link_t *)l)->n_reconnects);
}

int worker_link_send(worker_link_t *l, const proto_msg_t *m)
{
    if (!atomic_load(&l->connected)) {
        errno = ENOTCONN;
        return -1;
    }
    if (proto_send(l->pipe_main, NULL, m, ZMQ_DONTWAIT) != PROTO_OK) {
        log_warn("%s not sent: %s", proto_type_name(m->type), zmq_strerror(errno));
        return -1;
    }
    return 0;
}

void worker_link_register(worker_link_t *l, const proto_register_t *reg)
{
    proto_msg_t m = {.type = PROTO_REGISTER, .reg = *reg};
    m.reg.version = PROTO_VERSION;
    if (proto_send(l->pipe_main, NULL, &m, 0) != PROTO_OK)
        log_error("link pipe: REGISTER not queued: %s", zmq_strerror(errno));
}

/* Takes one message from the pipe without waiting: 1 = for the caller (in
 * *out), 0 = handled here or dropped as malformed, -1 = nothing queued. */
static int recv_one(worker_link_t *l, proto_msg_t *out)
{
    char err[256];
    int st = proto_recv(l->pipe_main, NULL, out, ZMQ_DONTWAIT, err, sizeof err);
    if (st == PROTO_ESYS)
        return -1;
    if (st != PROTO_OK) {
        log_warn("dropped malformed message from the gateway: %s (%s)", proto_status_name(st),
                 err);
        if (out->type == PROTO_SUBMIT && out->submit.id) {
            /* the gateway waits for this request: tell it why it never ran */
            proto_msg_t e;
            proto_msg_init(&e, PROTO_ERROR);
            e.error.id = out->submit.id;
            e.error.code = PROTO_CODE_BAD_REQUEST;
            e.error.message = err;
            worker_link_send(l, &e);
        }
        memset(out, 0, sizeof *out); /* a kept type and id own nothing */
        return 0;
    }
    if (out->type == PROTO_ERROR && out->error.id == 0 &&
        out->error.code == PROTO_CODE_NOT_REGISTERED) {
        l->lost = true; /* the link thread has already registered again */
        proto_msg_clear(out);
        return 0;
    }
    return 1;
}

int worker_link_poll(worker_link_t *l, int timeout_ms, int wake_fd, proto_msg_t *out)
{
    int64_t deadline = clock_now_us() + (int64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000;
    memset(out, 0, sizeof *out);
    for (;;) {
        int r = recv_one(l, out);
        if (r == 1)
            return WORKER_LINK_MSG;
        if (r == 0)
            continue;
        int64_t now = clock_now_us();
        long wait_ms = deadline <= now ? 0 : (long)((deadline - now + 999) / 1000);
        zmq_pollitem_t items[2] = {{.socket = l->pipe_main, .events = ZMQ_POLLIN}};
        int n = 1;
        if (wake_fd >= 0)
            items[n++] = (zmq_pollitem_t){.socket = NULL, .fd = wake_fd, .events = ZMQ_POLLIN};
        int rc = zmq_poll(items, n, wait_ms);
        if (rc < 0 && errno != EINTR) {
            log_error("zmq_poll: %s", zmq_strerror(errno));
            return WORKER_LINK_IDLE;
        }
        if (rc > 0 && n > 1 && (items[1].revents & ZMQ_POLLIN))
            return WORKER_LINK_WAKE;
        bool readable = rc > 0 && (items[0].revents & ZMQ_POLLIN);
        if (!readable && clock_now_us() >= deadline)
            return WORKER_LINK_IDLE;
    }
}
