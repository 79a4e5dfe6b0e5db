/* worker_link.c — DEALER connection to the gateway with REGISTER, heartbeats
 * both ways and reconnect-with-backoff (see worker_link.h). */
#include "worker/worker_link.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/xalloc.h"

struct worker_link {
    char *endpoint;                 /* gateway ROUTER endpoint */
    int64_t interval_us;            /* our heartbeat interval */
    proto_register_t reg;           /* what we announce; owns its strings */
    proto_load_t load;              /* carried by our heartbeats */

    void *zctx;                     /* ZeroMQ context */
    void *sock;                     /* DEALER; NULL while waiting to reconnect */

    uint64_t seq;                   /* next HEARTBEAT seq */
    int64_t t_next_heartbeat_us;    /* monotonic */
    int64_t t_last_seen_us;         /* last valid message from the gateway, or connect time */
    int64_t gateway_interval_us;    /* the gateway's heartbeat interval (its hb_ms) */
    bool registered;                /* the gateway answered our last REGISTER */
    uint64_t n_registrations;       /* REGISTERs the gateway answered, ever */

    bool curve;                     /* the keys below are set */
    char curve_server[41], curve_public[41], curve_secret[41]; /* Z85 */

    int64_t backoff_us;             /* next reconnect delay */
    int64_t t_reconnect_us;         /* when sock == NULL: when to connect again */
    uint64_t n_reconnects;
    bool lost;                      /* gateway lost since worker_link_take_lost */
};

static void send_register(worker_link_t *l)
{
    proto_msg_t m = {.type = PROTO_REGISTER, .reg = l->reg};
    if (proto_send(l->sock, NULL, &m, ZMQ_DONTWAIT) != PROTO_OK)
        log_warn("REGISTER not sent: %s", zmq_strerror(errno));
    l->registered = false;
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
    l->t_next_heartbeat_us = now + l->interval_us;
    send_register(l);
    log_info("connecting to gateway %s as %s", l->endpoint, l->reg.replica);
    return 0;
}

static void link_disconnect(worker_link_t *l)
{
    if (l->sock)
        zmq_close(l->sock);
    l->sock = NULL;
    l->registered = false;
}

worker_link_t *worker_link_new(const worker_link_config_t *cfg)
{
    worker_link_t *l = xcalloc(1, sizeof *l);
    l->endpoint = xstrdup(cfg->endpoint);
    int hb = cfg->heartbeat_ms > 0 ? cfg->heartbeat_ms : PROTO_HEARTBEAT_MS;
    l->interval_us = (int64_t)hb * 1000;
    l->reg = *cfg->reg;
    l->reg.version = PROTO_VERSION;
    l->reg.heartbeat_ms = (uint32_t)hb;
    l->reg.model = xstrdup(cfg->reg->model);
    l->reg.replica = xstrdup(cfg->reg->replica);
    l->reg.host = xstrdup(cfg->reg->host ? cfg->reg->host : "");
    l->gateway_interval_us = l->interval_us; /* until its first heartbeat says otherwise */
    l->backoff_us = l->interval_us;
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
    if (!l->zctx || link_connect(l, clock_now_us()) < 0)
        goto err;
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
    link_disconnect(l);
    if (l->zctx)
        zmq_ctx_term(l->zctx);
    proto_msg_t m = {.type = PROTO_REGISTER, .reg = l->reg};
    proto_msg_clear(&m);
    explicit_bzero(l->curve_secret, sizeof l->curve_secret);
    free(l->endpoint);
    free(l);
}

void worker_link_set_load(worker_link_t *l, const proto_load_t *load)
{
    l->load = *load;
}

bool worker_link_registered(const worker_link_t *l)
{
    return l->registered;
}

uint64_t worker_link_registrations(const worker_link_t *l)
{
    return l->n_registrations;
}

bool worker_link_take_lost(worker_link_t *l)
{
    bool was = l->lost;
    l->lost = false;
    return was;
}

uint64_t worker_link_reconnects(const worker_link_t *l)
{
    return l->n_reconnects;
}

int worker_link_send(worker_link_t *l, const proto_msg_t *m)
{
    if (!l->sock) {
        errno = ENOTCONN;
        return -1;
    }
    if (proto_send(l->sock, NULL, m, ZMQ_DONTWAIT) != PROTO_OK) {
        log_warn("%s not sent: %s", proto_type_name(m->type), zmq_strerror(errno));
        return -1;
    }
    return 0;
}

/* Heartbeats, the gateway's liveness, reconnects. Returns the time of the
 * next thing to do here. */
static int64_t housekeeping(worker_link_t *l, int64_t now)
{
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
        l->n_reconnects++;
        l->lost = true;
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
        hb.heartbeat.heartbeat_ms = (uint32_t)(l->interval_us / 1000);
        hb.heartbeat.has_load = true;
        hb.heartbeat.load = l->load;
        if (proto_send(l->sock, NULL, &hb, ZMQ_DONTWAIT) != PROTO_OK)
            log_debug("HEARTBEAT not sent: %s", zmq_strerror(errno));
        l->t_next_heartbeat_us += l->interval_us;
        if (l->t_next_heartbeat_us <= now) /* we were stalled: do not burst */
            l->t_next_heartbeat_us = now + l->interval_us;
    }
    return l->t_next_heartbeat_us < t_dead ? l->t_next_heartbeat_us : t_dead;
}

/* Handles what the link handles itself; returns true when `m` is for the caller. */
static bool on_message(worker_link_t *l, proto_msg_t *m, int64_t now)
{
    l->t_last_seen_us = now;
    if (!l->registered && m->type != PROTO_ERROR) {
        l->registered = true;
        l->n_registrations++;
        l->backoff_us = l->interval_us;
        log_info("registered with gateway %s", l->endpoint);
    }
    if (m->type == PROTO_HEARTBEAT) {
        if (m->heartbeat.heartbeat_ms)
            l->gateway_interval_us = (int64_t)m->heartbeat.heartbeat_ms * 1000;
        return false;
    }
    if (m->type == PROTO_ERROR && m->error.id == 0 &&
        m->error.code == PROTO_CODE_NOT_REGISTERED) {
        log_info("gateway does not know us (%s): registering again", m->error.message);
        send_register(l);
        l->lost = true;
        return false;
    }
    return true;
}

/* Takes one queued message without waiting: 1 = for the caller (in *out),
 * 0 = handled here or dropped as malformed, -1 = nothing queued. */
static int recv_one(worker_link_t *l, proto_msg_t *out)
{
    char err[256];
    int st = proto_recv(l->sock, NULL, out, ZMQ_DONTWAIT, err, sizeof err);
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
            memset(out, 0, sizeof *out);
        }
        return 0;
    }
    if (on_message(l, out, clock_now_us()))
        return 1;
    proto_msg_clear(out);
    return 0;
}

int worker_link_poll(worker_link_t *l, int timeout_ms, int wake_fd, proto_msg_t *out)
{
    int64_t deadline = clock_now_us() + (int64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000;
    memset(out, 0, sizeof *out);
    for (;;) {
        /* Read what is queued before judging the gateway's liveness: after a
         * long step of ours, its heartbeats may be waiting in the socket. */
        if (l->sock) {
            int r = recv_one(l, out);
            if (r == 1)
                return WORKER_LINK_MSG;
            if (r == 0)
                continue;
        }
        int64_t now = clock_now_us();
        int64_t next = housekeeping(l, now);
        int64_t until = next < deadline ? next : deadline;
        long wait_ms = until <= now ? 0 : (long)((until - now + 999) / 1000);
        zmq_pollitem_t items[2];
        int n = 0, i_sock = -1, i_wake = -1;
        if (l->sock) {
            items[n] = (zmq_pollitem_t){.socket = l->sock, .events = ZMQ_POLLIN};
            i_sock = n++;
        }
        if (wake_fd >= 0) {
            items[n] = (zmq_pollitem_t){.socket = NULL, .fd = wake_fd, .events = ZMQ_POLLIN};
            i_wake = n++;
        }
        int rc = zmq_poll(n ? items : NULL, n, wait_ms);
        if (rc < 0 && errno != EINTR) {
            log_error("zmq_poll: %s", zmq_strerror(errno));
            return WORKER_LINK_IDLE;
        }
        if (rc > 0 && i_wake >= 0 && (items[i_wake].revents & ZMQ_POLLIN))
            return WORKER_LINK_WAKE;
        bool readable = rc > 0 && i_sock >= 0 && (items[i_sock].revents & ZMQ_POLLIN);
        if (!readable && clock_now_us() >= deadline)
            return WORKER_LINK_IDLE;
    }
}
