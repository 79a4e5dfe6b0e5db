/* sampler.c — per-request token sampling (see sampler.h for the pipeline).
 *
 * Candidates are (value, token id) pairs in a scratch array of n_vocab
 * entries. Orderings compare value first and token id second, so selection
 * and sorting are deterministic whatever algorithm runs them. */
#include "worker/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "common/clock.h"
#include "common/splitmix.h"
#include "common/xalloc.h"
#include "common/vec.h"

#define SAMPLER_HEAP_TOP_K 512     /* top_k up to this uses the heap scan */
#define SAMPLER_BUCKET_SHIFT 17    /* 2^17 float ulps = 1/64 octave per bucket */
#define SAMPLER_N_BUCKETS ((0x3F800000u >> SAMPLER_BUCKET_SHIFT) + 1)

typedef struct cand {
    float v;     /* logit, later unnormalized probability */
    int32_t id;  /* token id */
} cand_t;

/* History of one distinct token (or a token with a logit bias). */
typedef struct hist_entry {
    int32_t token;
    int32_t n_window;  /* occurrences in the repetition window (prompt + generated) */
    int32_t n_gen;     /* occurrences among generated tokens */
    float bias;        /* summed logit_bias */
} hist_entry_t;

struct sampler {
    sampler_params_t p;      /* copy; p.logit_bias is not used after new */
    int32_t n_vocab;
    int32_t n_top;           /* top logprobs reported, min(n_top_logprobs, n_vocab) */
    uint64_t seed;
    uint64_t rng[4];         /* xoshiro256** state */
    cand_t *cand;            /* (n_vocab) scratch */
    cand_t heap[SAMPLER_HEAP_TOP_K]; /* top-k heap scratch */
    double *bucket_mass;     /* (SAMPLER_N_BUCKETS) top-p histogram scratch */
    hist_entry_t *ent;       /* (cap_ent) distinct tokens, n_ent used */
    int32_t n_ent, cap_ent;
    int32_t *table;          /* (mask + 1) open-addressing index into ent, -1 empty */
    uint32_t mask;
    int32_t *hist;           /* (cap_hist) accepted tokens, only with a finite window */
    int32_t n_hist, cap_hist;
    uint64_t last_draw;      /* raw bits of the last uniform: redraws derive theirs from it */
};

/* ---- PRNG: xoshiro256** seeded through splitmix64 ------------------------ */

static inline uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(uint64_t s[4])
{
    uint64_t result = rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

/* Uniform in [0, 1) from raw bits. */
static double bits_uniform(uint64_t x) { return (double)(x >> 11) * 0x1.0p-53; }

static uint64_t global_seed(void)
{
    static _Atomic uint64_t counter;
    uint64_t seed;
    if (getrandom(&seed, sizeof seed, 0) == (ssize_t)sizeof seed)
        return seed;
    uint64_t x = (uint64_t)clock_now_us() ^ (++counter * 0x9E3779B97F4A7C15ULL);
    return splitmix64_next(&x);
}

/* ---- history table ------------------------------------------------------ */

static inline uint32_t tok_hash(int32_t t)
{
    uint32_t x = (uint32_t)t * 0x9E3779B1u;
    return x ^ (x >> 15);
}

static int32_t hist_find(const sampler_t *s, int32_t token)
{
    for (uint32_t h = tok_hash(token) & s->mask;; h = (h + 1) & s->mask) {
        int32_t e = s->table[h];
        if (e < 0)
            return -1;
        if (s->ent[e].token == token)
            return e;
    }
}

static void hist_rehash(sampler_t *s, uint32_t n_slots)
{
    free(s->table);
    s->table = xmalloc((size_t)n_slots * sizeof(int32_t));
    memset(s->table, 0xff, (size_t)n_slots * sizeof(int32_t)); /* -1 */
    s->mask = n_slots - 1;
    for (int32_t e = 0; e < s->n_ent; e++) {
        uint32_t h = tok_hash(s->ent[e].token) & s->mask;
        while (s->table[h] >= 0)
            h = (h + 1) & s->mask;
        s->table[h] = e;
    }
}

static hist_entry_t *hist_get(sampler_t *s, int32_t token)
{
    int32_t e = hist_find(s, token);
    if (e >= 0)
        return &s->ent[e];
    /* keep the table at most half full; entries never exceed n_vocab */
    if ((uint32_t)(s->n_ent + 1) * 2 > s->mask + 1)
        hist_rehash(s, (s->mask + 1) * 2);
    vec_reserve(s->ent, s->cap_ent, (size_t)s->n_ent + 1);
    e = s->n_ent++;
    s->ent[e] = (hist_entry_t){.token = token};
    uint32_t h = tok_hash(token) & s->mask;
    while (s->table[h] >= 0)
        h = (h + 1) & s->mask;
    s->table[h] = e;
    return &s->ent[e];
}

/* Adds token to the repetition window, dropping the one that falls out. */
static void window_push(sampler_t *s, hist_entry_t *e, int32_t token)
{
    e->n_window++;
    int32_t last_n = s->p.repetition_last_n;
    if (last_n <= 0)
        return; /* whole history: nothing ever leaves */
    vec_push(s->hist, s->n_hist, s->cap_hist, token);
    if (s->n_hist > last_n) {
        int32_t old = hist_find(s, s->hist[s->n_hist - 1 - last_n]);
        s->ent[old].n_window--;
    }
}

/* ---- params ------------------------------------------------------------- */

void sampler_params_default(sampler_params_t *p)
{
    memset(p, 0, sizeof *p);
    proto_knobs_t k;
    proto_knobs_default(&k);
    sampler_params_set_knobs(p, &k);
}

void sampler_params_set_knobs(sampler_params_t *p, const proto_knobs_t *k)
{
#define SET_KNOB(key, api, wtype, stype, member, ...) p->member = (stype)k->member;
    PROTO_SAMPLING_KNOBS(SET_KNOB)
#undef SET_KNOB
}

int sampler_params_validate(const sampler_params_t *p, int32_t n_vocab, const char **why)
{
    const char *w = NULL;
    if (n_vocab <= 0)
        w = "n_vocab must be > 0";
    else if (!isfinite(p->temperature) || p->temperature < 0)
        w = "temperature must be finite and >= 0";
    else if (!(p->top_p > 0 && p->top_p <= 1))
        w = "top_p must be in (0, 1]";
    else if (!(p->min_p >= 0 && p->min_p <= 1))
        w = "min_p must be in [0, 1]";
    else if (!isfinite(p->repetition_penalty) || !(p->repetition_penalty > 0))
        w = "repetition_penalty must be finite and > 0";
    else if (p->repetition_last_n < 0)
        w = "repetition_last_n must be >= 0";
    else if (!isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty))
        w = "presence_penalty and frequency_penalty must be finite";
    else if (p->n_logit_bias < 0 || (p->n_logit_bias > 0 && !p->logit_bias))
        w = "bad logit_bias array";
    else if (p->n_top_logprobs < 0 || p->n_top_logprobs > SAMPLER_MAX_TOP_LOGPROBS)
        w = "n_top_logprobs must be in [0, 20]";
    for (int32_t i = 0; !w && i < p->n_logit_bias; i++) {
        if (p->logit_bias[i].token < 0 || p->logit_bias[i].token >= n_vocab)
            w = "logit_bias token out of range";
        else if (!isfinite(p->logit_bias[i].bias))
            w = "logit_bias value must be finite";
    }
    if (why)
        *why = w;
    return w ? -1 : 0;
}

sampler_t *sampler_new(const sampler_params_t *p, int32_t n_vocab)
{
    if (sampler_params_validate(p, n_vocab, NULL) != 0)
        return NULL;
    sampler_t *s = xcalloc(1, sizeof *s);
    s->p = *p;
    s->p.logit_bias = NULL;
    s->n_vocab = n_vocab;
    s->n_top = p->n_top_logprobs < n_vocab ? p->n_top_logprobs : n_vocab;
    s->seed = p->has_seed ? p->seed : global_seed();
    uint64_t x = s->seed;
    for (int i = 0; i < 4; i++)
        s->rng[i] = splitmix64_next(&x);
    s->cand = xmalloc((size_t)n_vocab * sizeof *s->cand);
    s->bucket_mass = xmalloc(SAMPLER_N_BUCKETS * sizeof *s->bucket_mass);
    s->cap_ent = 64;
    s->ent = xmalloc((size_t)s->cap_ent * sizeof *s->ent);
    hist_rehash(s, 128);
    for (int32_t i = 0; i < p->n_logit_bias; i++)
        hist_get(s, p->logit_bias[i].token)->bias += p->logit_bias[i].bias;
    return s;
}

void sampler_free(sampler_t **sp)
{
    if (!sp || !*sp)
        return;
    sampler_t *s = *sp;
    free(s->cand);
    free(s->bucket_mass);
    free(s->ent);
    free(s->table);
    free(s->hist);
    free(s);
    *sp = NULL;
}

uint64_t sampler_seed(const sampler_t *s) { return s->seed; }

void sampler_skip(sampler_t *s, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        (void)rng_next(s->rng);
}

int sampler_accept_prompt(sampler_t *s, const int32_t *tokens, int32_t n)
{
    for (int32_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= s->n_vocab)
            return -1;
        window_push(s, hist_get(s, tokens[i]), tokens[i]);
    }
    return 0;
}

int sampler_accept(sampler_t *s, int32_t token)
{
    if (token < 0 || token >= s->n_vocab)
        return -1;
    hist_entry_t *e = hist_get(s, token);
    e->n_gen++;
    window_push(s, e, token);
    return 0;
}

/* ---- vector kernels ------------------------------------------------------ */

/* The compares in these kernels must be if-converted to vector selects, which
 * GCC only does when float compares may not trap (they don't here: no FP
 * exceptions are enabled in pagoda). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math")
#endif

/* exp(x) to ~2 ulp, written so loops over it vectorize (no libm call): range
 * reduction x = n ln2 + r, |r| <= ln2/2, a degree-6 minimax polynomial for
 * e^r, and 2^n built in the exponent bits. Exactly 0 below -87 (and for
 * -inf), so banned tokens get probability 0. */
static inline float exp_fast(float x)
{
    float xc = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    union { uint32_t u; float f; } sc = {.u = (uint32_t)((int32_t)n + 127) << 23};
    return x < -87.0f ? 0.0f : p * sc.f;
}

/* The loops that touch every candidate, as one set of kernels compiled twice:
 * for the baseline ISA and for AVX2+FMA (picked at run time). */
#define KERNELS(SUF, ATTR)                                                        \
    ATTR static float k_max##SUF(const cand_t *a, int32_t n)                     \
    {                                                                             \
        float m = -INFINITY;                                                      \
        _Pragma("omp simd reduction(max:m)")                                      \
        for (int32_t i = 0; i < n; i++)                                           \
            m = a[i].v > m ? a[i].v : m;                                          \
        return m;                                                                 \
    }                                                                             \
    /* sum of exp(a[i].v - m), accumulated in double */                          \
    ATTR static double k_sum_exp##SUF(const cand_t *a, int32_t n, float m)       \
    {                                                                             \
        double sum = 0;                                                           \
        _Pragma("omp simd reduction(+:sum)")                                      \
        for (int32_t i = 0; i < n; i++)                                           \
            sum += (double)exp_fast(a[i].v - m);                                  \
        return sum;                                                               \
    }                                                                             \
    /* a[i].v = exp((a[i].v - m) * inv_t); returns their sum (double) */         \
    ATTR static double k_exp##SUF(cand_t *a, int32_t n, float m, float inv_t)    \
    {                                                                             \
        double sum = 0;                                                           \
        _Pragma("omp simd reduction(+:sum)")                                      \
        for (int32_t i = 0; i < n; i++) {                                         \
            float e = exp_fast((a[i].v - m) * inv_t);                             \
            a[i].v = e;                                                           \
            sum += (double)e;                                                     \
        }                                                                         \
        return sum;                                                               \
    }

KERNELS(_base, )
#if defined(__x86_64__) || defined(__i386__)
KERNELS(_avx2, __attribute__((target("avx2,fma"))))
/* No cached flag: sequences are sampled from several threads at once
 * (sched.c), and __builtin_cpu_supports only reads a table filled at start. */
static int have_avx2(void)
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#define DISPATCH(fn, ...) (have_avx2() ? fn##_avx2(__VA_ARGS__) : fn##_base(__VA_ARGS__))
#else
#define DISPATCH(fn, ...) fn##_base(__VA_ARGS__)
#endif

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

/* ---- selection ---------------------------------------------------------- */

/* a ranks before b: larger value, then smaller id. */
static inline int better(cand_t a, cand_t b) { return a.v > b.v || (a.v == b.v && a.id < b.id); }

static int cmp_desc(const void *x, const void *y)
{
    cand_t a = *(const cand_t *)x, b = *(const cand_t *)y;
    return better(a, b) ? -1 : better(b, a) ? 1 : 0;
}

/* Rearranges a[0..n) so a[0..k) are the k best (in no order); 0 < k < n.
 * Quickselect with a median-of-three pivot (Hoare partition). */
static void select_top(cand_t *a, int32_t n, int32_t k)
{
    int32_t lo = 0, hi = n - 1, t = k - 1;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        cand_t x = a[lo], y = a[mid], z = a[hi], piv;
        if (better(x, y))
            piv = better(y, z) ? y : (better(x, z) ? z : x);
        else
            piv = better(x, z) ? x : (better(y, z) ? z : y);
        int32_t i = lo, j = hi;
        while (i <= j) {
            while (better(a[i], piv))
                i++;
            while (better(piv, a[j]))
                j--;
            if (i <= j) {
                cand_t tmp = a[i];
                a[i] = a[j];
                a[j] = tmp;
                i++;
                j--;
            }
        }
        if (j < t)
            lo = i;
        if (t < i)
            hi = j;
    }
}

/* Keeps the top k of cand[0..n) in cand[0..k) (any order) with a min-heap
 * of the k best seen: one cheap compare per candidate for small k. */
static void heap_top(sampler_t *s, int32_t n, int32_t k)
{
    cand_t *a = s->cand, *h = s->heap; /* h[0] = worst of the kept */
    for (int32_t i = 0; i < k; i++) {
        int32_t j = i; /* sift up */
        while (j > 0 && better(h[(j - 1) / 2], a[i])) {
            h[j] = h[(j - 1) / 2];
            j = (j - 1) / 2;
        }
        h[j] = a[i];
    }
    for (int32_t i = k; i < n; i++) {
        if (!better(a[i], h[0]))
            continue;
        cand_t x = a[i];
        int32_t j = 0; /* sift down from the root */
        for (;;) {
            int32_t l = 2 * j + 1, m = l;
            if (l >= k)
                break;
            if (l + 1 < k && better(h[l], h[l + 1]))
                m = l + 1;
            if (!better(x, h[m]))
                break;
            h[j] = h[m];
            j = m;
        }
        h[j] = x;
    }
    memcpy(a, h, (size_t)k * sizeof *a);
}

/* Bucket of a probability p in [0, 1]: the float's bit pattern is monotone in
 * p, so bucket(p) < bucket(q) implies p > q. 1/64 octave per bucket. */
static inline uint32_t p_bucket(float p)
{
    uint32_t bits;
    memcpy(&bits, &p, sizeof bits);
    uint32_t b = (0x3F800000u - bits) >> SAMPLER_BUCKET_SHIFT;
    return b < SAMPLER_N_BUCKETS ? b : SAMPLER_N_BUCKETS - 1;
}

/* Top-p on cand[0..n) (unnormalized probabilities, max 1): keeps the
 * smallest set of highest-probability tokens whose mass reaches top_p of
 * the total, ties broken by id; returns its size (the set is compacted to
 * the front, in no particular order). A histogram of mass by probability
 * bucket finds the boundary bucket; only that bucket is sorted. */
static int32_t nucleus(sampler_t *s, int32_t n, float top_p, double total)
{
    cand_t *a = s->cand;
    double *mass = s->bucket_mass;
    memset(mass, 0, SAMPLER_N_BUCKETS * sizeof *mass);
    for (int32_t i = 0; i < n; i++)
        mass[p_bucket(a[i].v)] += a[i].v;
    double target = (double)top_p * total, acc = 0;
    uint32_t edge = 0;
    for (; edge < SAMPLER_N_BUCKETS - 1; edge++) {
        if (acc + mass[edge] >= target)
            break;
        acc += mass[edge];
    }
    /* keep buckets before edge whole; gather edge's members behind them */
    int32_t j = 0;
    for (int32_t i = 0; i < n; i++)
        if (p_bucket(a[i].v) <= edge)
            a[j++] = a[i];
    int32_t lo = 0, hi = j;
    while (lo < hi) {
        if (p_bucket(a[lo].v) < edge) {
            lo++;
        } else {
            cand_t t = a[lo];
            a[lo] = a[--hi];
            a[hi] = t;
        }
    }
    int32_t n_edge = j - lo;
    j = lo;
    qsort(a + j, (size_t)n_edge, sizeof *a, cmp_desc);
    for (int32_t e = 0; e < n_edge; e++) {
        acc += a[j + e].v;
        if (acc >= target)
            return j + e + 1;
    }
    return j + n_edge;
}

/* log_softmax statistics of a[0..n) (token order): writes logZ and the top
 * n_top entries into lp. */
static double raw_logprobs(const sampler_t *s, const cand_t *a, int32_t n, sampler_logprobs_t *lp)
{
    float m = DISPATCH(k_max, a, n);
    double sum = DISPATCH(k_sum_exp, a, n, m);
    double log_z = (double)m + log(sum);

    /* top n_top by insertion into a sorted array of at most 20 */
    int32_t k = 0;
    cand_t top[SAMPLER_MAX_TOP_LOGPROBS];
    for (int32_t i = 0; i < n && s->n_top > 0; i++) {
        if (k == s->n_top && !better(a[i], top[k - 1]))
            continue;
        int32_t j = k < s->n_top ? k++ : k - 1;
        while (j > 0 && better(a[i], top[j - 1])) {
            top[j] = top[j - 1];
            j--;
        }
        top[j] = a[i];
    }
    lp->n_top = k;
    for (int32_t j = 0; j < k; j++) {
        lp->top_token[j] = top[j].id;
        lp->top_logprob[j] = fmaxf((float)((double)top[j].v - log_z), SAMPLER_LOGPROB_FLOOR);
    }
    return log_z;
}

/* Step 1: c[i] = (logits[i] + bias[i], i) in token order; tokens outside
 * allow (a bitset, NULL = all) get -inf. */
static void load_biased(sampler_t *s, const float *logits, const uint64_t *allow)
{
    cand_t *c = s->cand;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        c[i].v = logits[i];
        c[i].id = i;
    }
    for (int32_t e = 0; e < s->n_ent; e++)
        if (s->ent[e].bias != 0.0f)
            c[s->ent[e].token].v += s->ent[e].bias;
    if (allow)
        for (int32_t i = 0; i < s->n_vocab; i++)
            if (!((allow[i >> 6] >> (i & 63)) & 1))
                c[i].v = -INFINITY;
}

/* Steps 3-4 on c (still in token order). */
static void apply_penalties(sampler_t *s)
{
    const sampler_params_t *p = &s->p;
    float rep = p->repetition_penalty;
    for (int32_t e = 0; e < s->n_ent; e++) {
        const hist_entry_t *h = &s->ent[e];
        float *v = &s->cand[h->token].v;
        if (rep != 1.0f && h->n_window > 0)
            *v = *v > 0 ? *v / rep : *v * rep;
        if (h->n_gen > 0)
            *v -= p->presence_penalty + p->frequency_penalty * (float)h->n_gen;
    }
}

void sampler_processed_logits(sampler_t *s, const float *logits, float *out)
{
    load_biased(s, logits, NULL);
    apply_penalties(s);
    for (int32_t i = 0; i < s->n_vocab; i++)
        out[i] = s->cand[i].v;
}

static int32_t sample_with(sampler_t *s, const float *logits, const uint64_t *allow,
                           sampler_logprobs_t *lp, double u)
{
    const sampler_params_t *p = &s->p;
    int32_t V = s->n_vocab;
    cand_t *c = s->cand;

    /* 1. copy + logit bias (+ mask) */
    load_biased(s, logits, allow);

    /* 2. the model's distribution (after bias) for logprobs */
    double log_z = 0;
    if (lp)
        log_z = raw_logprobs(s, c, V, lp);

    /* 3-4. penalties over the history */
    apply_penalties(s);

    int32_t tok = -1;
    float inv_t = p->temperature > 0 ? 1.0f / p->temperature : INFINITY;
    if (!isfinite(inv_t)) {
        /* 5. greedy: first maximum in id order */
        int32_t best = 0;
        float best_v = c[0].v;
        for (int32_t i = 1; i < V; i++)
            if (c[i].v > best_v) {
                best_v = c[i].v;
                best = i;
            }
        tok = best;
    } else {
        /* 6. top-k */
        int32_t n = V;
        if (p->top_k > 0 && p->top_k < V) {
            if (p->top_k <= SAMPLER_HEAP_TOP_K)
                heap_top(s, V, p->top_k);
            else
                select_top(c, V, p->top_k);
            n = p->top_k;
        }
        /* 7. probabilities relative to the maximum (max p = 1) */
        float m = DISPATCH(k_max, c, n);
        double p_total = DISPATCH(k_exp, c, n, m, inv_t);
        /* 8. top-p */
        int32_t n_exp = n;
        if (p->top_p < 1.0f)
            n = nucleus(s, n, p->top_p, p_total);
        /* 9. min-p: the maximum has p = 1, so the threshold is min_p itself */
        if (p->min_p > 0) {
            float thr = p->min_p;
            int32_t j = 0;
            for (int32_t i = 0; i < n; i++)
                if (c[i].v >= thr)
                    c[j++] = c[i];
            n = j;
        }
        /* 10. invert the CDF. Zero-probability candidates are skipped, and
         * when rounding leaves acc <= target at the end the last positive
         * candidate is taken, so a banned token is never chosen. */
        double total = p_total;
        if (n != n_exp) {
            total = 0;
            for (int32_t i = 0; i < n; i++)
                total += c[i].v;
        }
        double target = u * total, acc = 0;
        for (int32_t i = 0; i < n; i++) {
            if (c[i].v <= 0)
                continue;
            tok = c[i].id;
            acc += c[i].v;
            if (acc > target)
                break;
        }
        if (tok < 0) /* unreachable with a finite logit; stay in range */
            tok = c[0].id;
    }

    if (lp) {
        /* recompute the biased logit exactly as step 1 did */
        float z = logits[tok];
        int32_t e = hist_find(s, tok);
        if (e >= 0 && s->ent[e].bias != 0.0f)
            z += s->ent[e].bias;
        lp->token = tok;
        lp->logprob = fmaxf((float)((double)z - log_z), SAMPLER_LOGPROB_FLOOR);
    }
    return tok;
}

int32_t sampler_sample(sampler_t *s, const float *logits, sampler_logprobs_t *lp)
{
    s->last_draw = rng_next(s->rng); /* always exactly one draw per call */
    return sample_with(s, logits, NULL, lp, bits_uniform(s->last_draw));
}

int32_t sampler_sample_masked(sampler_t *s, const float *logits, const uint64_t *allow,
                              sampler_logprobs_t *lp)
{
    s->last_draw = rng_next(s->rng);
    return sample_with(s, logits, allow, lp, bits_uniform(s->last_draw));
}

int32_t sampler_redraw_masked(sampler_t *s, const float *logits, const uint64_t *allow,
                              sampler_logprobs_t *lp, int attempt)
{
    uint64_t x = s->last_draw + (uint64_t)attempt * 0x9E3779B97F4A7C15ULL;
    return sample_with(s, logits, allow, lp, bits_uniform(splitmix64_next(&x)));
}
