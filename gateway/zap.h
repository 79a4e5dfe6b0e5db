/* zap.h — the gateway's ZAP handler: which workers may connect over CURVE.
 *
 * With CURVE on (--curve-secret-key + --curve-authorized-keys, or the
 * config's curve: section) the gateway's ROUTER is a CURVE server. libzmq
 * asks a ZAP handler (ZeroMQ RFC 27, ZAP 1.0) about every connection that
 * completes the CURVE handshake, passing the client's long-term public key;
 * this module is that handler. It runs one thread with a REP socket bound to
 * inproc://zeromq.zap.01 in the gateway's ZeroMQ context and answers
 *     200 "OK"             the key is in the authorized list; user id = the
 *                          key's name (or its Z85 text when it has none)
 *     400 "..."            any other key or mechanism: libzmq drops the
 *                          connection before a single message of it reaches
 *                          the gateway's core
 *     500 "..."            a request that is not ZAP 1.0 (never from libzmq)
 * Refusals are logged as warnings with the key and the peer address (the same
 * key at most once per ZAP_LOG_EVERY_S, with a count of repeats, because a
 * refused worker keeps reconnecting). A worker that does not speak CURVE at
 * all never gets this far: its handshake fails on the mechanism mismatch.
 *
 * Why a handler and not ZMQ_CURVE_SERVER alone: without a ZAP handler libzmq
 * accepts any client key, i.e. anyone who knows the gateway's public key
 * could register as a worker and read prompts.
 *
 * Threads: zap_new/zap_free from the thread that owns the ROUTER before it
 * binds / after it closed; zap_set_keys and the counters from any thread.
 */
#ifndef PAGODA_GATEWAY_ZAP_H
#define PAGODA_GATEWAY_ZAP_H

#include <stdint.h>

#include "proto/curve.h"

#define ZAP_ENDPOINT "inproc://zeromq.zap.01"  /* fixed by RFC 27 */
#define ZAP_DOMAIN "pagoda"                    /* ZMQ_ZAP_DOMAIN of the ROUTER */
#define ZAP_LOG_EVERY_S 10

typedef struct zap zap_t;

/* Starts the handler on zctx with a copy of `keys`, then makes `router` a
 * CURVE server with the Z85 secret key `secret_z85`. Call before `router`
 * binds. NULL (logged) when CURVE is unavailable or the handler endpoint is
 * taken. Free with zap_free before terminating zctx. */
zap_t *zap_new(void *zctx, void *router, const char *secret_z85, const curve_keylist_t *keys);

/* Replaces the authorized keys (copied); connections made from now on are
 * judged against the new list (established ones stay). */
void zap_set_keys(zap_t *z, const curve_keylist_t *keys);

/* Connections let in / refused so far. */
uint64_t zap_accepted(zap_t *z);
uint64_t zap_refused(zap_t *z);

/* Stops the thread, closes its socket, frees; NULLs *z. NULL-safe. */
void zap_free(zap_t **z);

#endif
