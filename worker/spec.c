/* spec.c — speculative decoding (see spec.h): the modes, the n-gram
 * drafter and the per-sequence draft length. The scheduler's two
 * speculative stages of a step — planning (who drafts how many tokens, the
 * draft model's batched rounds) and verification — are worker/sched_spec.c. */
#include "worker/spec.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "common/errbuf.h"
#include "common/log.h"

int spec_mode_parse(const char *s, spec_mode_t *out)
{
    if (!s)
        return -1;
    if (!strcmp(s, "off"))
        *out = SPEC_OFF;
    else if (!strcmp(s, "ngram"))
        *out = SPEC_NGRAM;
    else if (!strcmp(s, "draft"))
        *out = SPEC_DRAFT;
    else
        return -1;
    return 0;
}

const char *spec_mode_name(spec_mode_t m)
{
    switch (m) {
    case SPEC_NGRAM: return "ngram";
    case SPEC_DRAFT: return "draft";
    default: return "off";
    }
}

int32_t spec_ngram_draft(const int32_t *tokens, int32_t n, int32_t max_draft, int32_t *out)
{
    if (max_draft > SPEC_MAX_DRAFT)
        max_draft = SPEC_MAX_DRAFT;
    if (max_draft <= 0)
        return 0;
    for (int32_t g = SPEC_NGRAM_MAX; g >= SPEC_NGRAM_MIN; g--) {
        if (n < g + 1)
            continue;
        const int32_t *key = tokens + n - g;
        /* latest earlier occurrence: start i = n - g - 1 (the key itself excluded) */
        for (int32_t i = n - g - 1; i >= 0; i--) {
            if (tokens[i] != key[0] || memcmp(tokens + i, key, (size_t)g * sizeof *key) != 0)
                continue;
            int32_t k = 0;
            for (int32_t j = i + g; j < n && k < max_draft; j++)
                out[k++] = tokens[j];
            assert(k > 0); /* i + g <= n - 1 */
            return k;
        }
    }
    return 0;
}

double spec_seq_rate(const spec_seq_t *q)
{
    /* prior worth two tries at 0.75: a sequence with no history drafts */
    return (q->acc + 1.5) / (q->tries + 2.0);
}

int32_t spec_seq_len(spec_seq_t *q, int32_t max_draft)
{
    if (max_draft > SPEC_MAX_DRAFT)
        max_draft = SPEC_MAX_DRAFT;
    double a = spec_seq_rate(q);
    int32_t k = 0;
    for (double use = a; k < max_draft && use >= SPEC_MIN_USE; use *= a)
        k++;
    if (k == 0 && max_draft > 0 && ++q->idle >= SPEC_PROBE_EVERY) {
        q->idle = 0;
        k = 1; /* probe: the text may have turned repetitive */
    }
    return k;
}

void spec_seq_update(spec_seq_t *q, int32_t n_drafted, int32_t n_accepted)
{
    assert(n_accepted >= 0 && n_accepted <= n_drafted);
    if (n_drafted <= 0)
        return;
    /* decay: the last few verifies decide (text changes character) */
    q->acc *= 0.9;
    q->tries *= 0.9;
    q->acc += n_accepted;
    q->tries += n_accepted + (n_accepted < n_drafted ? 1 : 0);
}
