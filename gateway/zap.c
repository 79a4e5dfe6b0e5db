/* zap.c — ZAP 1.0 handler admitting listed CURVE keys (see zap.h). */
#include "gateway/zap.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <zmq.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/xalloc.h"

#define ZAP_MAX_FRAMES 8   /* version, id, domain, address, identity, mechanism, 1 credential */

struct zap {
    void *sock;                  /* REP on ZAP_ENDPOINT, used by the thread only */
    int stop_fd;                 /* eventfd: readable = leave the loop */
    pthread_t thread;
    bool started;
    pthread_mutex_t lock;        /* guards keys */
    curve_keylist_t *keys;       /* authorized worker public keys */
    atomic_uint_fast64_t n_accepted, n_refused;
    /* refusal log limiting (thread only) */
    uint8_t last_key[CURVE_KEY_BYTES];
    int64_t t_last_log_us;
    uint64_t n_suppressed;
};

/* A frame's bytes as a printable string for logs (at most cap-1 chars). */
static void frame_text(zmq_msg_t *m, char *out, size_t cap)
{
    const char *d = zmq_msg_data(m);
    size_t n = zmq_msg_size(m), k = 0;
    for (size_t i = 0; i < n && k + 1 < cap; i++)
        out[k++] = d[i] >= 0x20 && d[i] < 0x7f ? d[i] : '?';
    out[k] = 0;
}

static bool frame_is(zmq_msg_t *m, const char *s)
{
    size_t n = strlen(s);
    return zmq_msg_size(m) == n && !memcmp(zmq_msg_data(m), s, n);
}

static void send_frame(void *sock, const void *data, size_t n, bool more)
{
    if (zmq_send(sock, data, n, more ? ZMQ_SNDMORE : 0) < 0)
        log_warn("ZAP reply not sent: %s", zmq_strerror(errno));
}

static void reply(void *sock, zmq_msg_t *req_id, const char *status, const char *text,
                  const char *user)
{
    send_frame(sock, "1.0", 3, true);
    send_frame(sock, req_id ? zmq_msg_data(req_id) : "", req_id ? zmq_msg_size(req_id) : 0, true);
    send_frame(sock, status, strlen(status), true);
    send_frame(sock, text, strlen(text), true);
    send_frame(sock, user, strlen(user), true);
    send_frame(sock, "", 0, false); /* no metadata */
}

static void log_refusal(zap_t *z, const uint8_t *key, const char *key_text, const char *addr,
                        const char *why)
{
    int64_t now = clock_now_us();
    bool same = key && !memcmp(key, z->last_key, CURVE_KEY_BYTES);
    if (same && now - z->t_last_log_us < (int64_t)ZAP_LOG_EVERY_S * 1000000) {
        z->n_suppressed++;
        return;
    }
    if (z->n_suppressed)
        log_warn("CURVE: refused worker connection from %s, key %s: %s (%llu more since the last "
                 "such line)",
                 addr, key_text, why, (unsigned long long)z->n_suppressed);
    else
        log_warn("CURVE: refused worker connection from %s, key %s: %s", addr, key_text, why);
    z->n_suppressed = 0;
    z->t_last_log_us = now;
    if (key)
        memcpy(z->last_key, key, CURVE_KEY_BYTES);
    else
        memset(z->last_key, 0, CURVE_KEY_BYTES);
}

/* Receives one ZAP request and answers it. */
static void handle_one(zap_t *z)
{
    zmq_msg_t f[ZAP_MAX_FRAMES];
    int nf = 0, more = 1;
    bool too_many = false;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, z->sock, 0) < 0) {
            zmq_msg_close(&m);
            if (errno != ETERM && errno != EINTR)
                log_warn("ZAP recv: %s", zmq_strerror(errno));
            for (int i = 0; i < nf; i++)
                zmq_msg_close(&f[i]);
            return;
        }
        more = zmq_msg_more(&m);
        if (nf < ZAP_MAX_FRAMES) {
            f[nf++] = m;
        } else {
            too_many = true;
            zmq_msg_close(&m);
        }
    }
    char addr[64] = "?";
    if (nf >= 4)
        frame_text(&f[3], addr, sizeof addr);
    if (nf < 6 || too_many || !frame_is(&f[0], "1.0")) {
        log_warn("ZAP: malformed request (%d frames)", nf);
        reply(z->sock, nf >= 2 ? &f[1] : NULL, "500", "malformed ZAP request", "");
    } else if (!frame_is(&f[5], "CURVE") || nf != 7 || zmq_msg_size(&f[6]) != CURVE_KEY_BYTES) {
        char mech[32];
        frame_text(&f[5], mech, sizeof mech);
        atomic_fetch_add(&z->n_refused, 1);
        log_refusal(z, NULL, "(none)", addr, mech[0] ? mech : "no security mechanism");
        reply(z->sock, &f[1], "400", "CURVE required", "");
    } else {
        const uint8_t *key = zmq_msg_data(&f[6]);
        char z85[CURVE_Z85_LEN + 1] = "";
        zmq_z85_encode(z85, key, CURVE_KEY_BYTES);
        char user[CURVE_NAME_MAX + 1] = "";
        pthread_mutex_lock(&z->lock);
        const curve_key_entry_t *e = curve_keylist_find(z->keys, key);
        if (e)
            snprintf(user, sizeof user, "%s", e->name[0] ? e->name : e->z85);
        pthread_mutex_unlock(&z->lock);
        if (user[0]) {
            atomic_fetch_add(&z->n_accepted, 1);
            log_debug("CURVE: worker key %s (%s) from %s accepted", z85, user, addr);
            reply(z->sock, &f[1], "200", "OK", user);
        } else {
            atomic_fetch_add(&z->n_refused, 1);
            log_refusal(z, key, z85, addr, "public key not in the authorized worker keys");
            reply(z->sock, &f[1], "400", "key not authorized", "");
        }
    }
    for (int i = 0; i < nf; i++)
        zmq_msg_close(&f[i]);
}

static void *zap_main(void *arg)
{
    zap_t *z = arg;
    for (;;) {
        zmq_pollitem_t it[2] = {
            {.socket = z->sock, .events = ZMQ_POLLIN},
            {.socket = NULL, .fd = z->stop_fd, .events = ZMQ_POLLIN},
        };
        if (zmq_poll(it, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            if (errno != ETERM)
                log_error("ZAP poll: %s", zmq_strerror(errno));
            break;
        }
        if (it[1].revents & ZMQ_POLLIN)
            break;
        if (it[0].revents & ZMQ_POLLIN)
            handle_one(z);
    }
    return NULL;
}

zap_t *zap_new(void *zctx, void *router, const char *secret_z85, const curve_keylist_t *keys)
{
    if (zmq_has("curve") == 0) {
        log_error("CURVE requested but this libzmq has no CURVE support (built without "
                  "libsodium)");
        return NULL;
    }
    zap_t *z = xcalloc(1, sizeof *z);
    pthread_mutex_init(&z->lock, NULL);
    z->keys = curve_keylist_copy(keys);
    z->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    atomic_init(&z->n_accepted, 0);
    atomic_init(&z->n_refused, 0);
    if (z->stop_fd < 0) {
        log_error("ZAP eventfd: %s", strerror(errno));
        goto err;
    }
    z->sock = zmq_socket(zctx, ZMQ_REP);
    if (!z->sock) {
        log_error("ZAP socket: %s", zmq_strerror(errno));
        goto err;
    }
    int linger = 0;
    zmq_setsockopt(z->sock, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_bind(z->sock, ZAP_ENDPOINT) != 0) {
        log_error("ZAP handler: cannot bind %s: %s", ZAP_ENDPOINT, zmq_strerror(errno));
        goto err;
    }
    /* the handler exists before the ROUTER can accept anyone: libzmq lets
     * every CURVE client in when no handler is bound */
    int one = 1;
    char sk[CURVE_Z85_LEN + 1];
    snprintf(sk, sizeof sk, "%s", secret_z85);
    if (strlen(secret_z85) != CURVE_Z85_LEN ||
        zmq_setsockopt(router, ZMQ_ZAP_DOMAIN, ZAP_DOMAIN, strlen(ZAP_DOMAIN)) != 0 ||
        zmq_setsockopt(router, ZMQ_CURVE_SERVER, &one, sizeof one) != 0 ||
        zmq_setsockopt(router, ZMQ_CURVE_SECRETKEY, sk, sizeof sk) != 0) {
        explicit_bzero(sk, sizeof sk);
        log_error("cannot make the worker socket a CURVE server: %s", zmq_strerror(errno));
        goto err;
    }
    explicit_bzero(sk, sizeof sk);
    /* the socket moves to the thread; pthread_create is the memory barrier
     * ZeroMQ asks for when a socket changes threads */
    if (pthread_create(&z->thread, NULL, zap_main, z) != 0) {
        log_error("cannot start the ZAP thread");
        goto err;
    }
    z->started = true;
    log_info("CURVE on: %zu authorized worker key(s)", z->keys->n);
    return z;
err:
    zap_free(&z);
    return NULL;
}

void zap_set_keys(zap_t *z, const curve_keylist_t *keys)
{
    curve_keylist_t *fresh = curve_keylist_copy(keys);
    pthread_mutex_lock(&z->lock);
    curve_keylist_t *old = z->keys;
    z->keys = fresh;
    pthread_mutex_unlock(&z->lock);
    curve_keylist_free(&old);
    log_info("CURVE: %zu authorized worker key(s)", fresh->n);
}

uint64_t zap_accepted(zap_t *z)
{
    return atomic_load(&z->n_accepted);
}

uint64_t zap_refused(zap_t *z)
{
    return atomic_load(&z->n_refused);
}

void zap_free(zap_t **zp)
{
    zap_t *z = *zp;
    if (!z)
        return;
    *zp = NULL;
    if (z->started) {
        uint64_t one = 1;
        ssize_t w = write(z->stop_fd, &one, sizeof one);
        (void)w;
        pthread_join(z->thread, NULL);
    }
    if (z->sock)
        zmq_close(z->sock);
    if (z->stop_fd >= 0)
        close(z->stop_fd);
    curve_keylist_free(&z->keys);
    pthread_mutex_destroy(&z->lock);
    free(z);
}
