/* idxlist.h — a doubly linked list threaded through an array by index: the
 * LRU of the KV pool's evictable blocks (worker/kv_pool.c) and of the
 * gateway's prefix index (gateway/prefix_index.c), the one copy.
 *
 * Elements live in the caller's array; each embeds an idxlist_link_t
 * (prev, next: array indices, -1 = none). The list itself is head, tail
 * and a count. Functions take the address of element 0's link and the
 * array's stride, so one list serves any element struct:
 *
 *     typedef struct { ...; idxlist_link_t lru; ... } blk_t;
 *     blk_t *blk; idxlist_t lru;
 *     idxlist_push_tail(&lru, &blk[0].lru, sizeof *blk, id);   // most recent
 *     int32_t oldest = lru.head;                                 // evict this
 *     idxlist_remove(&lru, &blk[0].lru, sizeof *blk, oldest);
 *
 * Used as an LRU: push_tail on use, remove + push_tail to touch, head is
 * the least recently used. An element must be on at most one list through
 * a given link; removing one that is not on the list corrupts it (the
 * caller knows: kv_pool_check walks it). Nothing allocates; header only
 * (inline: these run per block release and per index lookup).
 */
#ifndef PAGODA_COMMON_IDXLIST_H
#define PAGODA_COMMON_IDXLIST_H

#include <stddef.h>
#include <stdint.h>

typedef struct idxlist_link {
    int32_t prev, next; /* neighbours' indices, -1 = none */
} idxlist_link_t;

typedef struct idxlist {
    int32_t head, tail; /* first / last element, -1 = empty */
    int32_t n;          /* elements on the list */
} idxlist_t;

#define IDXLIST_EMPTY ((idxlist_t){.head = -1, .tail = -1, .n = 0})

/* The link of element i, given element 0's link and the array stride. */
static inline idxlist_link_t *idxlist_at(idxlist_link_t *link0, size_t stride, int32_t i)
{
    return (idxlist_link_t *)(void *)((char *)link0 + (size_t)i * stride);
}

/* Appends element i (not on the list) at the tail. */
static inline void idxlist_push_tail(idxlist_t *l, idxlist_link_t *link0, size_t stride, int32_t i)
{
    idxlist_link_t *e = idxlist_at(link0, stride, i);
    e->prev = l->tail;
    e->next = -1;
    if (l->tail >= 0)
        idxlist_at(link0, stride, l->tail)->next = i;
    else
        l->head = i;
    l->tail = i;
    l->n++;
}

/* Prepends element i (not on the list) at the head. */
static inline void idxlist_push_head(idxlist_t *l, idxlist_link_t *link0, size_t stride, int32_t i)
{
    idxlist_link_t *e = idxlist_at(link0, stride, i);
    e->next = l->head;
    e->prev = -1;
    if (l->head >= 0)
        idxlist_at(link0, stride, l->head)->prev = i;
    else
        l->tail = i;
    l->head = i;
    l->n++;
}

/* Unlinks element i (on the list); its links become -1. */
static inline void idxlist_remove(idxlist_t *l, idxlist_link_t *link0, size_t stride, int32_t i)
{
    idxlist_link_t *e = idxlist_at(link0, stride, i);
    if (e->prev >= 0)
        idxlist_at(link0, stride, e->prev)->next = e->next;
    else
        l->head = e->next;
    if (e->next >= 0)
        idxlist_at(link0, stride, e->next)->prev = e->prev;
    else
        l->tail = e->prev;
    e->prev = e->next = -1;
    l->n--;
}

#endif
