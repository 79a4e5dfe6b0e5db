/* detok.c — streaming detokenizer (see detok.h for the contract).
 *
 * Two stages per pushed token:
 *   bytes ──UTF-8 assembly──► hold (valid UTF-8, not yet emitted) ──stop scan──► delta
 * `pend` keeps the (at most 3) bytes of a character that may still complete;
 * `hold` keeps text that is valid but might be the start of a stop string.
 */
#include "common/text/detok.h"

#include <assert.h>
#include <string.h>
#include <stdlib.h>

#include "common/strbuf.h"
#include "common/utf8.h"
#include "common/xalloc.h"

struct detok {
    char **stops;          /* non-empty stop strings, copied */
    size_t *stop_len;      /* their byte lengths */
    int *stop_orig;        /* index of each in the caller's array */
    size_t n_stops;
    size_t max_stop;       /* longest stop, bytes */

    unsigned char pend[4]; /* incomplete UTF-8 character */
    size_t n_pend;         /* bytes in pend */
    size_t need;           /* total length announced by pend[0] */

    strbuf_t hold;         /* valid UTF-8 not yet emitted */
    strbuf_t out;          /* delta of the current call */

    detok_finish_t reason;
    int stop_index;        /* caller's index of the stop that fired, or -1 */
    size_t emitted;        /* total bytes emitted */
};

static void hold_append(detok_t *d, const void *src, size_t len)
{
    strbuf_append(&d->hold, src, len);
}

/* UTF-8 assembly of one byte; completed characters and U+FFFD go to hold. */
static void utf8_feed_byte(detok_t *d, unsigned char c)
{
    for (;;) {
        if (d->n_pend == 0) {
            size_t n = utf8_lead_len(c);
            if (n == 1) {
                hold_append(d, &c, 1);
            } else if (n == 0) {
                hold_append(d, UTF8_REPLACEMENT, UTF8_REPLACEMENT_LEN);
            } else {
                d->pend[0] = c;
                d->n_pend = 1;
                d->need = n;
            }
            return;
        }
        uint8_t lo = 0x80, hi = 0xBF;
        if (d->n_pend == 1)
            utf8_second_range(d->pend[0], &lo, &hi);
        if (c >= lo && c <= hi) {
            d->pend[d->n_pend++] = c;
            if (d->n_pend == d->need) {
                hold_append(d, d->pend, d->n_pend);
                d->n_pend = 0;
            }
            return;
        }
        /* The pending maximal subpart can never complete: one U+FFFD for it,
         * then look at c again as the start of something new. */
        hold_append(d, UTF8_REPLACEMENT, UTF8_REPLACEMENT_LEN);
        d->n_pend = 0;
    }
}

static void emit(detok_t *d, const char *src, size_t len)
{
    strbuf_append(&d->out, src, len);
    d->emitted += len;
}

/* Looks for a completed stop in hold; emits what is certainly not part of a
 * stop. Returns true when a stop fired. */
static bool stop_scan(detok_t *d)
{
    size_t best_end = (size_t)-1, best_start = 0;
    int best = -1;
    for (size_t i = 0; i < d->n_stops; i++) {
        const char *p = memmem(d->hold.s, d->hold.len, d->stops[i], d->stop_len[i]);
        if (!p)
            continue;
        size_t start = (size_t)(p - d->hold.s), end = start + d->stop_len[i];
        if (end < best_end || (end == best_end && start < best_start)) {
            best_end = end;
            best_start = start;
            best = (int)i;
        }
    }
    if (best >= 0) {
        emit(d, d->hold.s, best_start);
        strbuf_reset(&d->hold); /* the stop and everything after it is dropped */
        d->n_pend = 0;
        d->reason = DETOK_FINISH_STOP;
        d->stop_index = d->stop_orig[best];
        return true;
    }
    /* Longest suffix of hold that is a proper prefix of some stop. */
    size_t keep = 0;
    size_t kmax = d->max_stop ? d->max_stop - 1 : 0;
    if (kmax > d->hold.len)
        kmax = d->hold.len;
    for (size_t k = kmax; k > 0 && keep == 0; k--) {
        const char *suf = d->hold.s + d->hold.len - k;
        for (size_t i = 0; i < d->n_stops; i++) {
            if (d->stop_len[i] > k && memcmp(d->stops[i], suf, k) == 0) {
                keep = k;
                break;
            }
        }
    }
    size_t n_emit = d->hold.len - keep;
    emit(d, d->hold.s, n_emit);
    memmove(d->hold.s, d->hold.s + n_emit, keep);
    strbuf_setlen(&d->hold, keep);
    return false;
}

detok_t *detok_new(const char *const *stops, size_t n_stops)
{
    for (size_t i = 0; i < n_stops; i++) {
        if (!stops[i] || !utf8_valid((const uint8_t *)stops[i], strlen(stops[i])))
            return NULL;
    }
    detok_t *d = xcalloc(1, sizeof(*d));
    d->stop_index = -1;
    /* never NULL, so zero-length memcpy/memmem calls get valid pointers */
    strbuf_reserve(&d->hold, 64);
    strbuf_reserve(&d->out, 64);
    if (n_stops > 0) {
        d->stops = xcalloc(n_stops, sizeof(char *));
        d->stop_len = xcalloc(n_stops, sizeof(size_t));
        d->stop_orig = xcalloc(n_stops, sizeof(int));
    }
    for (size_t i = 0; i < n_stops; i++) {
        size_t len = strlen(stops[i]);
        if (len == 0)
            continue;
        d->stops[d->n_stops] = xstrdup(stops[i]);
        d->stop_len[d->n_stops] = len;
        d->stop_orig[d->n_stops] = (int)i;
        d->n_stops++;
        if (len > d->max_stop)
            d->max_stop = len;
    }
    return d;
}

void detok_free(detok_t **pd)
{
    if (!pd || !*pd)
        return;
    detok_t *d = *pd;
    for (size_t i = 0; i < d->n_stops; i++)
        free(d->stops[i]);
    free(d->stops);
    free(d->stop_len);
    free(d->stop_orig);
    strbuf_free(&d->hold);
    strbuf_free(&d->out);
    free(d);
    *pd = NULL;
}

int detok_push(detok_t *d, const char *bytes, size_t len, const char **delta, size_t *delta_len)
{
    strbuf_reset(&d->out);
    *delta = d->out.s;
    *delta_len = 0;
    if (d->reason != DETOK_FINISH_NONE)
        return DETOK_STOP;
    const unsigned char *b = (const unsigned char *)bytes;
    for (size_t i = 0; i < len; i++)
        utf8_feed_byte(d, b[i]);
    bool stopped = stop_scan(d);
    *delta = d->out.s;
    *delta_len = d->out.len;
    return stopped ? DETOK_STOP : DETOK_CONTINUE;
}

void detok_finish(detok_t *d, detok_finish_t reason, const char **delta, size_t *delta_len)
{
    strbuf_reset(&d->out);
    *delta = d->out.s;
    *delta_len = 0;
    if (d->reason != DETOK_FINISH_NONE)
        return;
    if (d->n_pend > 0) {
        hold_append(d, UTF8_REPLACEMENT, UTF8_REPLACEMENT_LEN);
        d->n_pend = 0;
    }
    if (!stop_scan(d)) {
        emit(d, d->hold.s, d->hold.len);
        strbuf_reset(&d->hold);
        d->reason = reason == DETOK_FINISH_EOS ? DETOK_FINISH_EOS : DETOK_FINISH_LENGTH;
    }
    *delta = d->out.s;
    *delta_len = d->out.len;
}

detok_finish_t detok_finish_reason(const detok_t *d) { return d->reason; }
int detok_stop_index(const detok_t *d) { return d->stop_index; }
size_t detok_emitted_bytes(const detok_t *d) { return d->emitted; }
size_t detok_held_bytes(const detok_t *d) { return d->n_pend + d->hold.len; }

const char *detok_finish_name(detok_finish_t r)
{
    switch (r) {
    case DETOK_FINISH_STOP: return "stop";
    case DETOK_FINISH_EOS: return "eos";
    case DETOK_FINISH_LENGTH: return "length";
    default: return "none";
    }
}
