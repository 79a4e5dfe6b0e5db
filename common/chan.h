/* chan.h — a thread-safe FIFO of pointers between threads.
 *
 * Used where one thread owns a resource others may not touch (the gateway's
 * core thread owns the ZeroMQ ROUTER socket; ZeroMQ sockets are not
 * thread-safe): other threads push commands into the owner's channel, and the
 * owner answers through a per-request reply channel.
 *
 * - Unbounded: pushing never blocks. Bounding is the producer's policy (the
 *   gateway's queues answer 429 long before memory matters).
 * - Waiting: chan_pop() blocks on a condition variable with a timeout; a
 *   channel made with CHAN_FD also has an eventfd that is readable exactly
 *   while items are queued (or the channel is closed), so an event loop can
 *   poll() it next to sockets (zmq_poll accepts plain fds).
 * - Closing: chan_close() makes every later push fail and wakes all waiters;
 *   items already queued can still be popped.
 * - Lifetime: reference-counted so producer and consumer can let go in any
 *   order (e.g. an HTTP thread gives up waiting while the core thread is about
 *   to answer). The last chan_unref() frees items still queued with the
 *   channel's item_free (when not NULL) and the channel itself.
 *
 * Ownership: a successful chan_push() hands the item to the channel; a failed
 * push (closed) leaves it with the caller. chan_pop() hands it to the caller.
 */
#ifndef PAGODA_COMMON_CHAN_H
#define PAGODA_COMMON_CHAN_H

#include <stdbool.h>
#include <stdint.h>

typedef struct chan chan_t;

enum { CHAN_FD = 1 }; /* flags for chan_new */

/* A channel with one reference. item_free may be NULL. Aborts on OOM or when
 * the eventfd cannot be made (out of file descriptors is fatal here). */
chan_t *chan_new(void (*item_free)(void *item), int flags);
/* Adds a reference; returns c. */
chan_t *chan_ref(chan_t *c);
/* Drops a reference and NULLs *c; the last one frees (see above). */
void chan_unref(chan_t **c);

/* 0 queued; -1 the channel is closed (the caller still owns item). */
int chan_push(chan_t *c, void *item);
/* The oldest item, or NULL when none arrived within timeout_us (0 = do not
 * wait, <0 = wait until an item arrives or the channel is closed). */
void *chan_pop(chan_t *c, int64_t timeout_us);
void chan_close(chan_t *c);
bool chan_closed(chan_t *c);

/* The eventfd of a CHAN_FD channel (-1 otherwise); do not read or close it. */
int chan_fd(const chan_t *c);

#endif
