/* Unit tests for gbnf.h's literal escaper (gbnf_escape_literal,
 * gbnf_escape_cp): text escaped into a literal, parsed back by gbnf_parse,
 * must match exactly the original bytes — for every single byte 0..127,
 * every code point U+0000..U+00FF as UTF-8, multi-byte UTF-8 at each
 * encoding length's edges, and one literal holding all of them at once.
 * The escaped text must be printable ASCII plus the UTF-8 it was given (no
 * raw control byte, no newline that would end the rule). A lone byte
 * 0x80..0xFF is not UTF-8: no GBNF literal matches it, and gbnf_parse
 * refuses the literal that holds it (gbnf.h says so). The matcher is the
 * independent side: it compiles the literal byte by byte from the parsed
 * code points. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grammar/gbnf.h"
#include "common/strbuf.h"
#include "common/utf8.h"

/* "root ::= <literal of s>"; parses it; NULL when gbnf_parse refuses it */
static grammar_t *literal_grammar(const char *s, size_t n, strbuf_t *text)
{
    strbuf_reset(text);
    strbuf_puts(text, "root ::= ");
    size_t at = text->len;
    gbnf_escape_literal(text, s, n);
    /* the literal itself: printable ASCII, or bytes of the UTF-8 given */
    for (size_t i = at; i < text->len; i++) {
        unsigned char c = (unsigned char)text->s[i];
        assert_true((c >= 0x20 && c < 0x7f) || c >= 0x80);
    }
    grammar_t *g = NULL;
    char err[200];
    if (gbnf_parse((const uint8_t *)text->s, text->len, &g, err, sizeof err, NULL, NULL) != 0)
        return NULL;
    return g;
}

/* s round-trips: the literal matches s, and neither s cut short nor s with
 * its last byte changed */
static void round_trip(const char *s, size_t n)
{
    strbuf_t text = STRBUF_INIT;
    grammar_t *g = literal_grammar(s, n, &text);
    if (!g)
        fail_msg("gbnf_parse refused the escaped literal %s", text.s);
    assert_int_equal(gbnf_match(g, (const uint8_t *)s, n), 1);
    if (n > 0) {
        assert_int_equal(gbnf_match(g, (const uint8_t *)s, n - 1), 0);
        char *t = malloc(n);
        memcpy(t, s, n);
        t[n - 1] ^= 0x01;
        assert_int_equal(gbnf_match(g, (const uint8_t *)t, n), 0);
        free(t);
    }
    gbnf_free(&g);
    strbuf_free(&text);
}

static void test_every_ascii_byte(void **state)
{
    (void)state;
    for (int b = 0; b < 0x80; b++) {
        char c = (char)b;
        round_trip(&c, 1);
    }
    /* all of them in one literal */
    char all[0x80];
    for (int b = 0; b < 0x80; b++)
        all[b] = (char)b;
    round_trip(all, sizeof all);
}

static void test_high_bytes_alone_refused(void **state)
{
    (void)state;
    strbuf_t text = STRBUF_INIT;
    for (int b = 0x80; b < 0x100; b++) {
        char c = (char)b;
        grammar_t *g = literal_grammar(&c, 1, &text);
        assert_null(g);
    }
    strbuf_free(&text);
}

static void test_code_points_to_ff(void **state)
{
    (void)state;
    char all[0x100 * 2];
    size_t n_all = 0;
    for (uint32_t cp = 0; cp < 0x100; cp++) {
        char u[4];
        size_t k = utf8_put(cp, u);
        round_trip(u, k);
        /* the same through gbnf_escape_cp, between quotes written here */
        strbuf_t text = STRBUF_INIT;
        strbuf_puts(&text, "root ::= \"");
        gbnf_escape_cp(&text, cp);
        strbuf_puts(&text, "\"");
        grammar_t *g = NULL;
        assert_int_equal(gbnf_parse((const uint8_t *)text.s, text.len, &g, NULL, 0, NULL, NULL), 0);
        assert_int_equal(gbnf_match(g, (const uint8_t *)u, k), 1);
        gbnf_free(&g);
        strbuf_free(&text);
        memcpy(all + n_all, u, k);
        n_all += k;
    }
    round_trip(all, n_all);
}

static void test_multibyte_edges(void **state)
{
    (void)state;
    static const uint32_t CPS[] = {0x7F,   0x80,   0x7FF,  0x800,   0xD7FF,  0xE000,  0xFFFD,
                                   0xFFFF, 0x10000, 0x1F600, 0x10FFFF, 0x2028, 0x2029, 0xFEFF};
    char all[4 * sizeof CPS / sizeof CPS[0]];
    size_t n_all = 0;
    for (size_t i = 0; i < sizeof CPS / sizeof CPS[0]; i++) {
        char u[4];
        size_t k = utf8_put(CPS[i], u);
        round_trip(u, k);
        memcpy(all + n_all, u, k);
        n_all += k;
    }
    round_trip(all, n_all);
    /* quotes, backslashes and controls between multi-byte characters */
    const char mix[] = "\"\xc3\xa9\\\n\xf0\x9f\x98\x80\r\t\x7f\x01\"";
    round_trip(mix, sizeof mix - 1);
    round_trip("", 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_ascii_byte),
        cmocka_unit_test(test_high_bytes_alone_refused),
        cmocka_unit_test(test_code_points_to_ff),
        cmocka_unit_test(test_multibyte_edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
