/* kv_budget.c — the KV pool's size from free memory (kv_budget.h). */
#include "worker/kv_budget.h"

#include <inttypes.h>
#include <stdio.h>

const char *kv_budget_bound_name(kv_budget_bound_t b)
{
    switch (b) {
    case KV_BUDGET_SHARE: return "share";
    case KV_BUDGET_FREE: return "free memory";
    case KV_BUDGET_CAP: return "context cap";
    case KV_BUDGET_FLOOR: return "floor";
    }
    return "?";
}

/* a MiB count as int64 (memory sizes fit by far; absurd inputs are clamped) */
static int64_t i64(uint64_t a)
{
    const uint64_t lim = (uint64_t)INT64_MAX / 4;
    return (int64_t)(a < lim ? a : lim);
}

void kv_budget_auto(const kv_budget_in_t *in, kv_budget_t *out)
{
    const int64_t n = in->n_workers ? (int64_t)in->n_workers : 1;
    const int64_t a = i64(in->avail_mib), w = i64(in->weights_mib), cap = i64(in->cap_mib);
    const int64_t pct = a / 100 * KV_BUDGET_RESERVE_PCT + a % 100 * KV_BUDGET_RESERVE_PCT / 100;
    const int64_t r = pct > KV_BUDGET_MIN_RESERVE_MIB ? pct : KV_BUDGET_MIN_RESERVE_MIB;
    out->reserve_mib = (uint64_t)r;
    out->share_mib = (a - r) / n - w;
    out->now_mib = i64(in->free_mib) - r / n - w;

    int64_t kv = out->share_mib;
    out->bound = KV_BUDGET_SHARE;
    if (out->now_mib < kv) {
        kv = out->now_mib;
        out->bound = KV_BUDGET_FREE;
    }
    if (cap && cap <= kv) {
        kv = cap;
        out->bound = KV_BUDGET_CAP;
    }
    const int64_t floor = cap && cap < KV_BUDGET_FLOOR_MIB ? cap : KV_BUDGET_FLOOR_MIB;
    if (kv < floor) {
        kv = floor;
        out->bound = KV_BUDGET_FLOOR;
    }
    out->mib = (uint64_t)kv;
}

void kv_budget_describe(const kv_budget_in_t *in, const kv_budget_t *b, char *buf, size_t len)
{
    const uint32_t n = in->n_workers ? in->n_workers : 1;
    char cap[48] = "no ctx cap";
    if (in->cap_mib)
        snprintf(cap, sizeof cap, "ctx cap %" PRIu64, in->cap_mib);
    snprintf(buf, len,
             "%" PRIu64 " MiB = min((avail %" PRIu64 " - reserve %" PRIu64 ") / %" PRIu32 " worker%s - weights %" PRIu64
             " = %" PRId64 ", free %" PRIu64 " - reserve/%" PRIu32 " %" PRIu64 " - weights %" PRIu64 " = %" PRId64
             ", %s), floor %d: %s",
             b->mib, in->avail_mib, b->reserve_mib, n, n == 1 ? "" : "s", in->weights_mib, b->share_mib, in->free_mib,
             n, b->reserve_mib / n, in->weights_mib, b->now_mib, cap,
             in->cap_mib && in->cap_mib < KV_BUDGET_FLOOR_MIB ? (int)in->cap_mib : KV_BUDGET_FLOOR_MIB,
             kv_budget_bound_name(b->bound));
}
