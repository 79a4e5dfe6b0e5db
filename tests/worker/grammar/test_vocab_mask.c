/* Unit tests for worker/grammar/vocab_mask: token masks on a small
 * vocabulary with multi-character tokens, a character split over two byte
 * tokens (partial UTF-8), an end-of-generation token, and the length
 * budget. Expected masks are worked out by hand from the grammar. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "common/grammar/gbnf.h"
#include "worker/grammar/vocab_mask.h"

enum { T_C3, T_A9, T_EACUTE, T_EACUTE_BANG, T_BANG, T_E, T_BANGBANG, T_CTRL, T_EOG, V };
static const char *const PIECES[V] = {"\xc3", "\xa9", "\xc3\xa9", "\xc3\xa9!", "!", "e", "!!", "", NULL};

static gvocab_t *vocab(void)
{
    const uint8_t *p[V];
    size_t l[V];
    bool eog[V] = {0};
    for (int i = 0; i < V; i++) {
        p[i] = (const uint8_t *)PIECES[i];
        l[i] = PIECES[i] ? strlen(PIECES[i]) : 0;
    }
    eog[T_EOG] = true;
    return gvocab_new(p, l, eog, V);
}

static uint64_t bits(int n, ...)
{
    va_list ap;
    va_start(ap, n);
    uint64_t m = 0;
    for (int i = 0; i < n; i++)
        m |= 1ull << va_arg(ap, int);
    va_end(ap);
    return m;
}

static gmatch_t *start(gvocab_t *v, const char *text, gmask_grammar_t **gg)
{
    grammar_t *g = NULL;
    assert_int_equal(gbnf_parse((const uint8_t *)text, strlen(text), &g, NULL, 0, NULL, NULL), 0);
    *gg = gmask_grammar_new(g, v);
    gmatch_t *m = gmatch_new(*gg);
    assert_non_null(m);
    return m;
}

/* root ::= "é"+ "!": é may come whole or as its two bytes. */
static void test_partial_utf8(void **state)
{
    (void)state;
    gvocab_t *v = vocab();
    gmask_grammar_t *gg;
    gmatch_t *m = start(v, "root ::= \"\xc3\xa9\"+ \"!\"", &gg);
    uint64_t mask[1];
    assert_int_equal(gmatch_mask(m, mask), 3);
    assert_int_equal(mask[0], bits(3, T_C3, T_EACUTE, T_EACUTE_BANG));
    assert_int_equal(gmatch_accept(m, T_C3), 0); /* half a character */
    gmatch_mask(m, mask);
    assert_int_equal(mask[0], bits(1, T_A9));
    assert_int_equal(gmatch_accept(m, T_E), -1);
    assert_int_equal(gmatch_accept(m, T_A9), 0);
    gmatch_mask(m, mask);
    assert_int_equal(mask[0], bits(4, T_C3, T_EACUTE, T_EACUTE_BANG, T_BANG));
    assert_false(gmatch_done(m));
    assert_int_equal(gmatch_accept(m, T_BANG), 0);
    gmatch_mask(m, mask);
    assert_int_equal(mask[0], bits(1, T_EOG)); /* complete: only the end */
    assert_true(gmatch_done(m));
    /* the same state again is served from the cache */
    gmatch_t *m2 = gmatch_new(gg);
    gmatch_mask(m2, mask);
    uint64_t hits, misses;
    gmask_grammar_stats(gg, &hits, &misses);
    assert_int_equal(hits, 1);
    assert_int_equal(mask[0], bits(3, T_C3, T_EACUTE, T_EACUTE_BANG));
    gmatch_free(&m2);
    gmatch_free(&m);
    gmask_grammar_unref(&gg);
    gvocab_free(&v);
}

/* root ::= "e"* "!": EOG only once accepting; the budget forces the end. */
static void test_budget(void **state)
{
    (void)state;
    gvocab_t *v = vocab();
    gmask_grammar_t *gg;
    gmatch_t *m = start(v, "root ::= \"e\"* \"!\" \"!\"?", &gg);
    uint64_t mask[1];
    gmatch_mask(m, mask);
    assert_int_equal(mask[0], bits(3, T_E, T_BANG, T_BANGBANG));
    assert_int_equal(gmatch_cost(m), 1);
    /* 3 tokens left: "e" then "!" then EOG still fits; with 2 left, "e" does not */
    assert_int_equal(gmatch_fits(m, T_E, 3), 1);
    assert_int_equal(gmatch_fits(m, T_E, 2), 0);
    gmatch_mask_budget(m, 2, mask);
    assert_int_equal(mask[0], bits(2, T_BANG, T_BANGBANG));
    assert_int_equal(gmatch_fits(m, T_BANG, 2), 1);
    assert_int_equal(gmatch_accept(m, T_BANG), 0);
    gmatch_mask(m, mask);
    assert_int_equal(mask[0], bits(2, T_BANG, T_EOG));
    gmatch_mask_budget(m, 1, mask);
    assert_int_equal(mask[0], bits(1, T_EOG));
    assert_int_equal(gmatch_fits(m, T_EOG, 1), 1);
    assert_int_equal(gmatch_accept(m, T_EOG), 0);
    assert_true(gmatch_done(m));
    gmatch_free(&m);
    gmask_grammar_unref(&gg);
    gvocab_free(&v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_partial_utf8),
        cmocka_unit_test(test_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
