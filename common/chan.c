/* chan.c — thread-safe FIFO of pointers with an optional eventfd (see chan.h).
 *
 * The eventfd is kept level-triggered under the mutex: written when the queue
 * goes from empty to non-empty (or on close), read back to zero when a pop
 * empties it. So "fd readable" ⇔ "items queued or closed", with no lost or
 * stale wakeups. */
#include "common/chan.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "common/xalloc.h"

typedef struct chan_node {
    void *item;
    struct chan_node *next;
} chan_node_t;

struct chan {
    pthread_mutex_t mu;
    pthread_cond_t cond;         /* signalled on push and close */
    chan_node_t *head, *tail;    /* FIFO: pop at head, push at tail */
    bool closed;
    bool fd_set;                 /* the eventfd counter is non-zero */
    int fd;                      /* eventfd, -1 without CHAN_FD */
    atomic_int refs;
    void (*item_free)(void *item);
};

chan_t *chan_new(void (*item_free)(void *item), int flags)
{
    chan_t *c = xcalloc(1, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cond, &ca);
    pthread_condattr_destroy(&ca);
    c->fd = -1;
    if (flags & CHAN_FD) {
        c->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (c->fd < 0) {
            perror("pagoda: eventfd");
            abort();
        }
    }
    atomic_init(&c->refs, 1);
    c->item_free = item_free;
    return c;
}

chan_t *chan_ref(chan_t *c)
{
    atomic_fetch_add(&c->refs, 1);
    return c;
}

void chan_unref(chan_t **cp)
{
    chan_t *c = *cp;
    *cp = NULL;
    if (!c || atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    for (chan_node_t *n = c->head, *next; n; n = next) {
        next = n->next;
        if (c->item_free)
            c->item_free(n->item);
        free(n);
    }
    if (c->fd >= 0)
        close(c->fd);
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* Caller holds the mutex. */
static void fd_raise(chan_t *c)
{
    if (c->fd < 0 || c->fd_set)
        return;
    uint64_t one = 1;
    ssize_t w = write(c->fd, &one, sizeof one);
    (void)w; /* cannot fail: the counter is 0 here */
    c->fd_set = true;
}

static void fd_lower(chan_t *c)
{
    if (c->fd < 0 || !c->fd_set || c->closed)
        return;
    uint64_t v;
    ssize_t r = read(c->fd, &v, sizeof v);
    (void)r;
    c->fd_set = false;
}

int chan_push(chan_t *c, void *item)
{
    chan_node_t *n = xmalloc(sizeof *n);
    n->item = item;
    n->next = NULL;
    pthread_mutex_lock(&c->mu);
    if (c->closed) {
        pthread_mutex_unlock(&c->mu);
        free(n);
        return -1;
    }
    if (c->tail)
        c->tail->next = n;
    else
        c->head = n;
    c->tail = n;
    fd_raise(c);
    pthread_cond_signal(&c->cond);
    pthread_mutex_unlock(&c->mu);
    return 0;
}

void *chan_pop(chan_t *c, int64_t timeout_us)
{
    struct timespec deadline;
    if (timeout_us > 0) {
        clock_gettime(CLOCK_MONOTONIC, &deadline);
        int64_t ns = deadline.tv_nsec + (timeout_us % 1000000) * 1000;
        deadline.tv_sec += timeout_us / 1000000 + ns / 1000000000;
        deadline.tv_nsec = ns % 1000000000;
    }
    pthread_mutex_lock(&c->mu);
    while (!c->head && !c->closed && timeout_us != 0) {
        if (timeout_us < 0) {
            pthread_cond_wait(&c->cond, &c->mu);
        } else if (pthread_cond_timedwait(&c->cond, &c->mu, &deadline) == ETIMEDOUT) {
            break;
        }
    }
    void *item = NULL;
    chan_node_t *n = c->head;
    if (n) {
        c->head = n->next;
        if (!c->head) {
            c->tail = NULL;
            fd_lower(c);
        }
        item = n->item;
    }
    pthread_mutex_unlock(&c->mu);
    free(n);
    return item;
}

void chan_close(chan_t *c)
{
    pthread_mutex_lock(&c->mu);
    c->closed = true;
    fd_raise(c);
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->mu);
}

bool chan_closed(chan_t *c)
{
    pthread_mutex_lock(&c->mu);
    bool closed = c->closed;
    pthread_mutex_unlock(&c->mu);
    return closed;
}

int chan_fd(const chan_t *c)
{
    return c->fd;
}
