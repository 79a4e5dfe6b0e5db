/* vocab_mask.c — token masks from a grammar and a vocabulary trie (see
 * vocab_mask.h). */
#include "worker/grammar/vocab_mask.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"

typedef struct tnode {
    int32_t first_child;  /* index of the first child; children are contiguous */
    int32_t n_child;
    int32_t tok_first;    /* index into gvocab.sorted of the tokens ending here */
    int32_t tok_n;
    uint8_t byte;         /* the edge byte from the parent */
} tnode_t;

struct gvocab {
    int32_t n_vocab;
    size_t words;         /* mask words */
    uint8_t **piece;      /* (n_vocab) token bytes */
    uint16_t *len;        /* (n_vocab) */
    int32_t *sorted;      /* (n_sorted) token ids in trie order */
    int32_t n_sorted;
    tnode_t *node;        /* (n_node) node 0 = root */
    int32_t n_node, cap_node;
    int32_t *eog;         /* (n_eog) end-of-generation ids */
    int32_t n_eog;
};

typedef struct centry {
    uint64_t hash;
    int32_t *key;         /* (n_key) the state's data */
    int32_t n_key, n_stacks;
    uint64_t *mask;       /* (words) */
    int32_t count;
    struct centry *next;  /* hash chain */
} centry_t;

struct gmask_grammar {
    grammar_t *g;             /* owned */
    const gvocab_t *v;        /* borrowed */
    int refs;                 /* owners (sched cache + sequences); main thread only */
    pthread_mutex_t mu;       /* guards the cache */
    centry_t **bucket;        /* (n_bucket) */
    uint32_t n_bucket;
    size_t cache_bytes;
    uint64_t hits, misses;
};

struct gmatch {
    gmask_grammar_t *gg;
    gr_state_t st;            /* current state */
    gr_state_t next;          /* state after the token of the last gmatch_fits */
    int32_t next_token;       /* -1 none */
    gr_arena_t a;             /* scratch */
};

/* ---- vocabulary -------------------------------------------------------------- */

static const gvocab_t *sort_v;
static int cmp_piece(const void *x, const void *y)
{
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    size_t la = sort_v->len[a], lb = sort_v->len[b];
    int c = memcmp(sort_v->piece[a], sort_v->piece[b], la < lb ? la : lb);
    if (c)
        return c;
    if (la != lb)
        return la < lb ? -1 : 1;
    return a < b ? -1 : a > b;
}

static int32_t node_alloc(gvocab_t *v, int32_t n)
{
    if (v->n_node + n > v->cap_node) {
        v->cap_node = (v->n_node + n) * 2;
        v->node = xrealloc(v->node, (size_t)v->cap_node * sizeof *v->node);
    }
    int32_t first = v->n_node;
    memset(&v->node[first], 0, (size_t)n * sizeof *v->node);
    v->n_node += n;
    return first;
}

/* Node ni covers sorted[lo..hi), all sharing their first d bytes. */
static void trie_build(gvocab_t *v, int32_t ni, int32_t lo, int32_t hi, int d)
{
    int32_t i = lo;
    while (i < hi && v->len[v->sorted[i]] == d)
        i++;
    v->node[ni].tok_first = lo;
    v->node[ni].tok_n = i - lo;
    int32_t groups = 0;
    for (int32_t k = i; k < hi; k++)
        if (k == i || v->piece[v->sorted[k]][d] != v->piece[v->sorted[k - 1]][d])
            groups++;
    if (!groups)
        return;
    int32_t first = node_alloc(v, groups);
    v->node[ni].first_child = first;
    v->node[ni].n_child = groups;
    int32_t gi = 0;
    for (int32_t k = i; k < hi;) {
        uint8_t b = v->piece[v->sorted[k]][d];
        int32_t e = k;
        while (e < hi && v->piece[v->sorted[e]][d] == b)
            e++;
        v->node[first + gi].byte = b;
        trie_build(v, first + gi, k, e, d + 1);
        gi++;
        k = e;
    }
}

gvocab_t *gvocab_new(const uint8_t *const *pieces, const size_t *lens, const bool *eog, int32_t n_vocab)
{
    gvocab_t *v = xcalloc(1, sizeof *v);
    v->n_vocab = n_vocab;
    v->words = ((size_t)n_vocab + 63) / 64;
    v->piece = xcalloc((size_t)n_vocab, sizeof *v->piece);
    v->len = xcalloc((size_t)n_vocab, sizeof *v->len);
    v->sorted = xmalloc(((size_t)n_vocab + 1) * sizeof *v->sorted);
    v->eog = xmalloc(((size_t)n_vocab + 1) * sizeof *v->eog);
    for (int32_t i = 0; i < n_vocab; i++) {
        if (eog && eog[i]) {
            v->eog[v->n_eog++] = i;
            continue;
        }
        if (!pieces[i] || lens[i] == 0 || lens[i] > GVOCAB_MAX_PIECE)
            continue;
        v->piece[i] = xmalloc(lens[i]);
        memcpy(v->piece[i], pieces[i], lens[i]);
        v->len[i] = (uint16_t)lens[i];
        v->sorted[v->n_sorted++] = i;
    }
    sort_v = v; /* qsort has no context argument; built once at start-up */
    qsort(v->sorted, (size_t)v->n_sorted, sizeof *v->sorted, cmp_piece);
    sort_v = NULL;
    node_alloc(v, 1);
    trie_build(v, 0, 0, v->n_sorted, 0);
    return v;
}

void gvocab_free(gvocab_t **pv)
{
    if (!pv || !*pv)
        return;
    gvocab_t *v = *pv;
    for (int32_t i = 0; i < v->n_vocab; i++)
        free(v->piece[i]);
    free(v->piece);
    free(v->len);
    free(v->sorted);
    free(v->node);
    free(v->eog);
    free(v);
    *pv = NULL;
}

int32_t gvocab_n_vocab(const gvocab_t *v) { return v->n_vocab; }
size_t gvocab_mask_words(const gvocab_t *v) { return v->words; }

/* ---- shared grammar + cache ------------------------------------------------------ */

gmask_grammar_t *gmask_grammar_new(grammar_t *g, const gvocab_t *v)
{
    gmask_grammar_t *gg = xcalloc(1, sizeof *gg);
    gg->g = g;
    gg->v = v;
    gg->refs = 1;
    pthread_mutex_init(&gg->mu, NULL);
    gg->n_bucket = 1024;
    gg->bucket = xcalloc(gg->n_bucket, sizeof *gg->bucket);
    return gg;
}

void gmask_grammar_ref(gmask_grammar_t *gg) { gg->refs++; }

void gmask_grammar_unref(gmask_grammar_t **pgg)
{
    if (!pgg || !*pgg)
        return;
    gmask_grammar_t *gg = *pgg;
    *pgg = NULL;
    if (--gg->refs > 0)
        return;
    for (uint32_t b = 0; b < gg->n_bucket; b++)
        for (centry_t *e = gg->bucket[b], *n; e; e = n) {
            n = e->next;
            free(e->key);
            free(e->mask);
            free(e);
        }
    free(gg->bucket);
    pthread_mutex_destroy(&gg->mu);
    gbnf_free(&gg->g);
    free(gg);
}

const grammar_t *gmask_grammar_grammar(const gmask_grammar_t *gg) { return gg->g; }

void gmask_grammar_stats(gmask_grammar_t *gg, uint64_t *hits, uint64_t *misses)
{
    pthread_mutex_lock(&gg->mu);
    *hits = gg->hits;
    *misses = gg->misses;
    pthread_mutex_unlock(&gg->mu);
}

static uint64_t state_hash(const gr_state_t *st)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)st->n_stacks;
    for (int32_t i = 0; i < st->n; i++)
        h = (h ^ (uint32_t)st->data[i]) * 1099511628211ull;
    return h;
}

/* ---- masks ---------------------------------------------------------------------- */

gmatch_t *gmatch_new(gmask_grammar_t *gg)
{
    gmatch_t *m = xcalloc(1, sizeof *m);
    gr_arena_init(&m->a);
    if (gr_state_start(gg->g, &m->a, &m->st) != 0) {
        gr_state_free(&m->st);
        gr_arena_free(&m->a);
        free(m);
        return NULL;
    }
    gmask_grammar_ref(gg);
    m->gg = gg;
    m->next_token = -1;
    return m;
}

void gmatch_free(gmatch_t **pm)
{
    if (!pm || !*pm)
        return;
    gmatch_t *m = *pm;
    gr_state_free(&m->st);
    gr_state_free(&m->next);
    gr_arena_free(&m->a);
    gmask_grammar_unref(&m->gg);
    free(m);
    *pm = NULL;
}

typedef struct walk {
    const grammar_t *g;
    const gvocab_t *v;
    gr_arena_t *a;
    uint64_t *mask;
    int64_t max_cost;     /* < 0: no budget filter */
    int32_t count;
    int64_t work;         /* stacks advanced so far; the walk stops at GMASK_MAX_WORK */
} walk_t;

static void set_tokens(walk_t *w, const tnode_t *n, const int32_t *st, int k)
{
    if (!n->tok_n)
        return;
    if (w->max_cost >= 0) {
        int64_t best = INT64_MAX;
        for (int i = 0; i < k; i++) {
            int64_t c = gr_cost(w->g, w->a, st[i]);
            if (c < best)
                best = c;
        }
        if (best > w->max_cost)
            return;
    }
    for (int32_t t = 0; t < n->tok_n; t++) {
        int32_t id = w->v->sorted[n->tok_first + t];
        uint64_t bit = 1ull << (id & 63);
        if (!(w->mask[id >> 6] & bit)) {
            w->mask[id >> 6] |= bit;
            w->count++;
        }
    }
}

static void walk(walk_t *w, int32_t ni, const int32_t *stacks, int n)
{
    const tnode_t *node = &w->v->node[ni];
    int32_t next[GBNF_MAX_STACKS];
    for (int32_t c = 0; c < node->n_child; c++) {
        int32_t ci = node->first_child + c;
        if ((w->work += n) > GMASK_MAX_WORK)
            return; /* a pathological grammar: keep the tokens found so far */
        int32_t mark = w->a->n;
        int k = gr_advance(w->g, w->a, stacks, n, w->v->node[ci].byte, next, GBNF_MAX_STACKS);
        if (k > 0) {
            set_tokens(w, &w->v->node[ci], next, k);
            if (w->v->node[ci].n_child)
                walk(w, ci, next, k);
        }
        w->a->n = mark;
    }
}

static int32_t compute(gmatch_t *m, uint64_t *mask, int64_t max_cost)
{
    const gvocab_t *v = m->gg->v;
    walk_t w = {.g = m->gg->g, .v = v, .a = &m->a, .mask = mask, .max_cost = max_cost};
    memset(mask, 0, v->words * sizeof *mask);
    int32_t ids[GBNF_MAX_STACKS];
    m->a.n = 0;
    int n = gr_state_load(&m->st, &m->a, ids);
    walk(&w, 0, ids, n);
    if (gr_state_accepting(&m->st))
        for (int32_t i = 0; i < v->n_eog; i++) {
            int32_t id = v->eog[i];
            if (!(mask[id >> 6] & (1ull << (id & 63)))) {
                mask[id >> 6] |= 1ull << (id & 63);
                w.count++;
            }
        }
    return w.count;
}

int32_t gmatch_mask(gmatch_t *m, uint64_t *mask)
{
    gmask_grammar_t *gg = m->gg;
    const size_t words = gg->v->words;
    uint64_t h = state_hash(&m->st);
    uint32_t b = (uint32_t)(h & (gg->n_bucket - 1));
    pthread_mutex_lock(&gg->mu);
    for (centry_t *e = gg->bucket[b]; e; e = e->next)
        if (e->hash == h && e->n_key == m->st.n && e->n_stacks == m->st.n_stacks &&
            memcmp(e->key, m->st.data, (size_t)e->n_key * sizeof *e->key) == 0) {
            memcpy(mask, e->mask, words * sizeof *mask);
            int32_t count = e->count;
            gg->hits++;
            pthread_mutex_unlock(&gg->mu);
            return count;
        }
    gg->misses++;
    pthread_mutex_unlock(&gg->mu);

    int32_t count = compute(m, mask, -1);

    size_t bytes = words * sizeof *mask + (size_t)m->st.n * sizeof(int32_t) + sizeof(centry_t);
    pthread_mutex_lock(&gg->mu);
    if (gg->cache_bytes + bytes <= GMASK_CACHE_BYTES) {
        centry_t *e = xcalloc(1, sizeof *e);
        e->hash = h;
        e->n_key = m->st.n;
        e->n_stacks = m->st.n_stacks;
        e->key = xmalloc((size_t)(e->n_key + 1) * sizeof *e->key);
        memcpy(e->key, m->st.data, (size_t)e->n_key * sizeof *e->key);
        e->mask = xmalloc(words * sizeof *mask);
        memcpy(e->mask, mask, words * sizeof *mask);
        e->count = count;
        e->next = gg->bucket[b];
        gg->bucket[b] = e; /* a duplicate from a racing thread is harmless */
        gg->cache_bytes += bytes;
    }
    pthread_mutex_unlock(&gg->mu);
    return count;
}

int32_t gmatch_mask_budget(gmatch_t *m, int64_t budget, uint64_t *mask)
{
    int64_t max_cost = budget - 2;
    if (max_cost < 0) {
        /* only the end fits */
        const gvocab_t *v = m->gg->v;
        memset(mask, 0, v->words * sizeof *mask);
        int32_t count = 0;
        if (gr_state_accepting(&m->st))
            for (int32_t i = 0; i < v->n_eog; i++, count++)
                mask[v->eog[i] >> 6] |= 1ull << (v->eog[i] & 63);
        return count;
    }
    return compute(m, mask, max_cost);
}

static bool is_eog(const gvocab_t *v, int32_t t)
{
    for (int32_t i = 0; i < v->n_eog; i++)
        if (v->eog[i] == t)
            return true;
    return false;
}

int gmatch_fits(gmatch_t *m, int32_t t, int64_t budget)
{
    const gvocab_t *v = m->gg->v;
    if (t < 0 || t >= v->n_vocab)
        return 0;
    if (is_eog(v, t))
        return gr_state_accepting(&m->st);
    if (!v->len[t])
        return 0;
    /* copy the state, advance it by the token */
    if (m->next.cap < m->st.n) {
        m->next.cap = m->st.n + 64;
        m->next.data = xrealloc(m->next.data, (size_t)m->next.cap * sizeof *m->next.data);
    }
    memcpy(m->next.data, m->st.data, (size_t)m->st.n * sizeof *m->st.data);
    m->next.n = m->st.n;
    m->next.n_stacks = m->st.n_stacks;
    m->next_token = -1;
    if (gr_state_advance(m->gg->g, &m->a, &m->next, v->piece[t], v->len[t]) != 0)
        return 0;
    m->next_token = t;
    return gr_state_cost(m->gg->g, &m->next) <= budget - 2;
}

int32_t gmatch_prefix_allowed(gmatch_t *m, const int32_t *toks, int32_t n)
{
    const gvocab_t *v = m->gg->v;
    gr_state_t st = {0};
    if (m->st.n > 0) {
        st.cap = m->st.n;
        st.data = xmalloc((size_t)st.cap * sizeof *st.data);
        memcpy(st.data, m->st.data, (size_t)m->st.n * sizeof *st.data);
    }
    st.n = m->st.n;
    st.n_stacks = m->st.n_stacks;
    int32_t k = 0;
    for (; k < n; k++) {
        int32_t t = toks[k];
        if (t < 0 || t >= v->n_vocab)
            break;
        if (is_eog(v, t)) {
            if (gr_state_accepting(&st))
                k++;
            break;
        }
        if (!v->len[t] || gr_state_advance(m->gg->g, &m->a, &st, v->piece[t], v->len[t]) != 0)
            break;
    }
    gr_state_free(&st);
    return k;
}

int gmatch_accept(gmatch_t *m, int32_t t)
{
    const gvocab_t *v = m->gg->v;
    if (t < 0 || t >= v->n_vocab)
        return -1;
    if (is_eog(v, t)) {
        if (!gr_state_accepting(&m->st))
            return -1;
        /* the document ends here: only the empty stack remains */
        m->st.n = 1;
        m->st.data[0] = 0;
        m->st.n_stacks = 1;
        m->next_token = -1;
        return 0;
    }
    if (m->next_token == t) {
        gr_state_t tmp = m->st;
        m->st = m->next;
        m->next = tmp;
        m->next_token = -1;
        return 0;
    }
    if (!v->len[t])
        return -1;
    m->next_token = -1;
    return gr_state_advance(m->gg->g, &m->a, &m->st, v->piece[t], v->len[t]);
}

bool gmatch_done(const gmatch_t *m) { return gr_state_done(&m->st); }

int64_t gmatch_cost(const gmatch_t *m) { return gr_state_cost(m->gg->g, &m->st); }
