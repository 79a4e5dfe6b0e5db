/* kv_report.h — tells the gateway which prefix-cache blocks this worker holds
 * (KV messages, proto/msg.h), so it can route requests to the replica that
 * has their prefix cached (gateway/prefix_index.h, docs/BATCHING.md).
 *
 * It reads the KV pool's event log (kv_pool_events_take) and sends the net
 * change since the last flush: keys added and keys evicted, at most
 * PROTO_MAX_KV_KEYS per list and message. After each new registration with
 * the gateway (worker_link_registrations changed), after the pool's event log
 * overflowed, or after a send failed, it sends the full set instead: one
 * message with reset, then adds.
 *
 * Ownership: kv_report_new borrows pool (it must outlive the report) and
 * turns on the pool's event log; kv_report_free NULLs the pointer.
 * Single-threaded: the worker's step-loop thread, like the pool.
 */
#ifndef PAGODA_WORKER_KV_REPORT_H
#define PAGODA_WORKER_KV_REPORT_H

#include "worker/kv_pool.h"
#include "worker/worker_link.h"

typedef struct kv_report kv_report_t;

kv_report_t *kv_report_new(kv_pool_t *pool);
void kv_report_free(kv_report_t **r);

/* Sends what changed since the last call (nothing while not registered).
 * Cheap when nothing changed. Call between scheduler steps. */
void kv_report_flush(kv_report_t *r, worker_link_t *link);

/* KV messages sent, keys sent (adds + dels), full resyncs: for logs/tests. */
void kv_report_counts(const kv_report_t *r, uint64_t *n_msgs, uint64_t *n_keys, uint64_t *n_full);

#endif
