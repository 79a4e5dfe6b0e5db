/* Unit tests for worker/detok: UTF-8 assembly, U+FFFD replacement, stop
 * strings spanning tokens, finishing.
 *
 * Expected outputs in the tables are worked out by hand from the Unicode
 * standard (Table 3-7, "maximal subpart" replacement) and from the stop-string
 * contract in detok.h. The property tests compare the streaming detokenizer
 * with a brute-force reference written here (whole text at once, no
 * streaming) over every way of splitting the text into tokens. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"
#include "common/text/detok.h"

#define FFFD "\xEF\xBF\xBD"
#define MAX_TOK 8
#define MAX_STOPS 4

/* One scenario: tokens pushed in order; if no stop fires, finish with
 * `finish`. `deltas` (when given) are the expected per-push deltas. */
struct tcase {
    const char *name;
    const char *stops[MAX_STOPS];
    size_t n_stops;
    const char *tok[MAX_TOK];        /* token bytes, NUL-terminated (no NULs inside) */
    const char *deltas[MAX_TOK];     /* expected delta per push, NULL = don't check */
    detok_finish_t finish;           /* reason passed to detok_finish if still running */
    const char *finish_delta;        /* expected finish delta, NULL = don't check */
    const char *text;                /* expected concatenation of all deltas */
    detok_finish_t reason;           /* expected final reason */
    int stop_index;                  /* expected stop index or -1 */
};

static const struct tcase CASES[] = {
    /* --- UTF-8 split across tokens --- */
    {"2-byte split", {0}, 0, {"\xC3", "\xA9"}, {"", "\xC3\xA9"}, DETOK_FINISH_LENGTH, "",
     "\xC3\xA9", DETOK_FINISH_LENGTH, -1},
    {"3-byte split 1+2", {0}, 0, {"\xE2", "\x82\xAC"}, {"", "\xE2\x82\xAC"}, DETOK_FINISH_EOS, "",
     "\xE2\x82\xAC", DETOK_FINISH_EOS, -1},
    {"3-byte split 2+1", {0}, 0, {"x\xE2\x82", "\xACy"}, {"x", "\xE2\x82\xACy"}, DETOK_FINISH_EOS, "",
     "x\xE2\x82\xACy", DETOK_FINISH_EOS, -1},
    {"emoji 1+1+1+1", {0}, 0, {"\xF0", "\x9F", "\x98", "\x80"}, {"", "", "", "\xF0\x9F\x98\x80"},
     DETOK_FINISH_EOS, "", "\xF0\x9F\x98\x80", DETOK_FINISH_EOS, -1},
    {"emoji 3+1 then ascii", {0}, 0, {"\xF0\x9F\x98", "\x80!"}, {"", "\xF0\x9F\x98\x80!"},
     DETOK_FINISH_EOS, "", "\xF0\x9F\x98\x80!", DETOK_FINISH_EOS, -1},
    /* --- invalid sequences --- */
    {"lone FF", {0}, 0, {"a\xFF" "b"}, {"a" FFFD "b"}, DETOK_FINISH_EOS, "", "a" FFFD "b",
     DETOK_FINISH_EOS, -1},
    {"lone continuation", {0}, 0, {"\x80"}, {FFFD}, DETOK_FINISH_EOS, "", FFFD, DETOK_FINISH_EOS, -1},
    {"lead then ascii", {0}, 0, {"\xC3", "A"}, {"", FFFD "A"}, DETOK_FINISH_EOS, "", FFFD "A",
     DETOK_FINISH_EOS, -1},
    {"truncated 3-byte is one FFFD", {0}, 0, {"\xE2\x82" "A"}, {FFFD "A"}, DETOK_FINISH_EOS, "",
     FFFD "A", DETOK_FINISH_EOS, -1},
    {"overlong C0 80", {0}, 0, {"\xC0\x80"}, {FFFD FFFD}, DETOK_FINISH_EOS, "", FFFD FFFD,
     DETOK_FINISH_EOS, -1},
    {"overlong E0 80 80", {0}, 0, {"\xE0\x80\x80"}, {FFFD FFFD FFFD}, DETOK_FINISH_EOS, "",
     FFFD FFFD FFFD, DETOK_FINISH_EOS, -1},
    {"surrogate ED A0 80", {0}, 0, {"\xED\xA0\x80"}, {FFFD FFFD FFFD}, DETOK_FINISH_EOS, "",
     FFFD FFFD FFFD, DETOK_FINISH_EOS, -1},
    {"above U+10FFFF", {0}, 0, {"\xF4\x90\x80\x80"}, {FFFD FFFD FFFD FFFD}, DETOK_FINISH_EOS, "",
     FFFD FFFD FFFD FFFD, DETOK_FINISH_EOS, -1},
    {"held 3 of 4 then invalid", {0}, 0, {"\xF0\x9F\x98", "A"}, {"", FFFD "A"}, DETOK_FINISH_EOS, "",
     FFFD "A", DETOK_FINISH_EOS, -1},
    {"incomplete at finish", {0}, 0, {"a\xE2\x82"}, {"a"}, DETOK_FINISH_EOS, FFFD, "a" FFFD,
     DETOK_FINISH_EOS, -1},
    {"lead then new lead", {0}, 0, {"\xC3\xC3\xA9"}, {FFFD "\xC3\xA9"}, DETOK_FINISH_EOS, "",
     FFFD "\xC3\xA9", DETOK_FINISH_EOS, -1},
    /* --- stop strings --- */
    {"stop in one token", {"STOP"}, 1, {"abcSTOPdef"}, {"abc"}, DETOK_FINISH_NONE, NULL, "abc",
     DETOK_FINISH_STOP, 0},
    {"stop spans 2 tokens", {"STOP"}, 1, {"abc ST", "OP more"}, {"abc ", ""}, DETOK_FINISH_NONE, NULL,
     "abc ", DETOK_FINISH_STOP, 0},
    {"stop spans 3 tokens", {"STOP"}, 1, {"Hello S", "TO", "P world"}, {"Hello ", "", ""},
     DETOK_FINISH_NONE, NULL, "Hello ", DETOK_FINISH_STOP, 0},
    {"stop spans 4 tokens", {"STOP"}, 1, {"x S", "T", "O", "P"}, {"x ", "", "", ""}, DETOK_FINISH_NONE,
     NULL, "x ", DETOK_FINISH_STOP, 0},
    {"stop at the very start", {"<|end|>"}, 1, {"<|e", "nd|>", "ignored"}, {"", "", ""},
     DETOK_FINISH_NONE, NULL, "", DETOK_FINISH_STOP, 0},
    {"stop is the whole first token", {"\n\n"}, 1, {"\n\n"}, {""}, DETOK_FINISH_NONE, NULL, "",
     DETOK_FINISH_STOP, 0},
    {"held prefix released", {"STOP"}, 1, {"ST", "ONE"}, {"", "STONE"}, DETOK_FINISH_EOS, "", "STONE",
     DETOK_FINISH_EOS, -1},
    {"held prefix partly released", {"STOP"}, 1, {"aST", "OST"}, {"a", "STO"}, DETOK_FINISH_LENGTH,
     "ST", "aSTOST", DETOK_FINISH_LENGTH, -1},
    {"ab fires before abc", {"abc", "ab"}, 2, {"xa", "bc"}, {"x", ""}, DETOK_FINISH_NONE, NULL, "x",
     DETOK_FINISH_STOP, 1},
    {"abc wins same end over bc", {"bc", "abc"}, 2, {"zab", "c"}, {"z", ""}, DETOK_FINISH_NONE, NULL,
     "z", DETOK_FINISH_STOP, 1},
    {"earliest end wins over earliest start", {"abcd", "bc"}, 2, {"abcd"}, {"a"}, DETOK_FINISH_NONE,
     NULL, "a", DETOK_FINISH_STOP, 1},
    {"self-overlapping aab", {"aab"}, 1, {"a", "a", "a", "b"}, {"", "", "a", ""}, DETOK_FINISH_NONE,
     NULL, "a", DETOK_FINISH_STOP, 0},
    {"self-overlap not a stop", {"aab"}, 1, {"aa", "ac"}, {"", "aaac"}, DETOK_FINISH_EOS, "", "aaac",
     DETOK_FINISH_EOS, -1},
    {"multiple stops, second fires", {"\n\n", "END"}, 2, {"line\nE", "ND"}, {"line\n", ""},
     DETOK_FINISH_NONE, NULL, "line\n", DETOK_FINISH_STOP, 1},
    {"multi-byte stop split mid-char", {"\xC3\xA9t\xC3\xA9"}, 1, {"l'\xC3", "\xA9t\xC3", "\xA9!"},
     {"l'", "", ""}, DETOK_FINISH_NONE, NULL, "l'", DETOK_FINISH_STOP, 0},
    {"multi-byte stop prefix released", {"\xC3\xA9t\xC3\xA9"}, 1, {"\xC3\xA9t", "e"}, {"", "\xC3\xA9te"},
     DETOK_FINISH_EOS, "", "\xC3\xA9te", DETOK_FINISH_EOS, -1},
    {"emoji stop", {"\xF0\x9F\x9B\x91"}, 1, {"go\xF0\x9F", "\x9B\x91"}, {"go", ""}, DETOK_FINISH_NONE,
     NULL, "go", DETOK_FINISH_STOP, 0},
    {"length emits held stop prefix", {"STOP"}, 1, {"abc ST"}, {"abc "}, DETOK_FINISH_LENGTH, "ST",
     "abc ST", DETOK_FINISH_LENGTH, -1},
    {"eos emits held stop prefix", {"</answer>"}, 1, {"42</ans"}, {"42"}, DETOK_FINISH_EOS, "</ans",
     "42</ans", DETOK_FINISH_EOS, -1},
    {"empty stop ignored", {"", "x"}, 2, {"abx"}, {"ab"}, DETOK_FINISH_NONE, NULL, "ab",
     DETOK_FINISH_STOP, 1},
    {"stop after U+FFFD", {"!"}, 1, {"\xFF!"}, {FFFD}, DETOK_FINISH_NONE, NULL, FFFD, DETOK_FINISH_STOP,
     0},
    {"incomplete bytes after a stop are dropped", {"x"}, 1, {"ax\xC3"}, {"a"}, DETOK_FINISH_NONE, NULL,
     "a", DETOK_FINISH_STOP, 0},
    {"stop spanning empty tokens", {"ab"}, 1, {"a", "", "b"}, {"", "", ""}, DETOK_FINISH_NONE, NULL, "",
     DETOK_FINISH_STOP, 0},
};

static void run_case(const struct tcase *c)
{
    detok_t *d = detok_new(c->stops, c->n_stops);
    assert_non_null(d);
    char text[512];
    size_t n_text = 0;
    int rc = DETOK_CONTINUE;
    for (size_t i = 0; i < MAX_TOK && c->tok[i]; i++) {
        const char *delta;
        size_t dl;
        rc = detok_push(d, c->tok[i], strlen(c->tok[i]), &delta, &dl);
        assert_true(utf8_valid((const uint8_t *)delta, dl));
        if (c->deltas[i]) {
            if (dl != strlen(c->deltas[i]) || memcmp(delta, c->deltas[i], dl) != 0)
                fail_msg("%s: push %zu: delta '%.*s', expected '%s'", c->name, i, (int)dl, delta,
                         c->deltas[i]);
        }
        assert_true(n_text + dl < sizeof(text));
        memcpy(text + n_text, delta, dl);
        n_text += dl;
        if (rc == DETOK_STOP) {
            /* everything after the stop is ignored */
            rc = detok_push(d, "zz", 2, &delta, &dl);
            assert_int_equal(rc, DETOK_STOP);
            assert_int_equal(dl, 0);
            break;
        }
    }
    if (rc != DETOK_STOP && c->finish != DETOK_FINISH_NONE) {
        const char *delta;
        size_t dl;
        detok_finish(d, c->finish, &delta, &dl);
        assert_true(utf8_valid((const uint8_t *)delta, dl));
        if (c->finish_delta &&
            (dl != strlen(c->finish_delta) || memcmp(delta, c->finish_delta, dl) != 0))
            fail_msg("%s: finish delta '%.*s', expected '%s'", c->name, (int)dl, delta, c->finish_delta);
        memcpy(text + n_text, delta, dl);
        n_text += dl;
    }
    if (n_text != strlen(c->text) || memcmp(text, c->text, n_text) != 0)
        fail_msg("%s: text '%.*s', expected '%s'", c->name, (int)n_text, text, c->text);
    if (detok_finish_reason(d) != c->reason)
        fail_msg("%s: reason %s, expected %s", c->name, detok_finish_name(detok_finish_reason(d)),
                 detok_finish_name(c->reason));
    assert_int_equal(detok_stop_index(d), c->stop_index);
    assert_int_equal(detok_emitted_bytes(d), n_text);
    assert_int_equal(detok_held_bytes(d), 0);
    detok_free(&d);
    assert_null(d);
}

static void test_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(CASES) / sizeof(CASES[0]); i++)
        run_case(&CASES[i]);
}

static void test_invalid_stop_rejected(void **state)
{
    (void)state;
    const char *bad[] = {"ok", "\xC3"};
    assert_null(detok_new(bad, 2));
    const char *bad2[] = {"\xED\xA0\x80"}; /* surrogate */
    assert_null(detok_new(bad2, 1));
    detok_t *d = detok_new(NULL, 0);
    assert_non_null(d);
    detok_free(&d);
    detok_free(&d); /* NULL-safe */
}

static void test_finish_twice(void **state)
{
    (void)state;
    const char *stops[] = {"xyz"};
    detok_t *d = detok_new(stops, 1);
    const char *delta;
    size_t dl;
    detok_push(d, "ax", 2, &delta, &dl);
    assert_int_equal(dl, 1);
    assert_int_equal(detok_held_bytes(d), 1);
    detok_finish(d, DETOK_FINISH_LENGTH, &delta, &dl);
    assert_int_equal(dl, 1);
    assert_memory_equal(delta, "x", 1);
    detok_finish(d, DETOK_FINISH_EOS, &delta, &dl);
    assert_int_equal(dl, 0);
    assert_int_equal(detok_finish_reason(d), DETOK_FINISH_LENGTH);
    assert_int_equal(detok_push(d, "q", 1, &delta, &dl), DETOK_STOP);
    assert_int_equal(dl, 0);
    assert_int_equal(detok_emitted_bytes(d), 2);
    detok_free(&d);
}

/* ---- property tests against a brute-force reference ---- */

/* Reference UTF-8 sanitizer: decode the whole buffer at once with the
 * maximal-subpart rule, written independently of detok.c (explicit ranges
 * per lead byte). */
static size_t ref_sanitize(const unsigned char *s, size_t n, char *out)
{
    size_t o = 0, i = 0;
    while (i < n) {
        unsigned char c = s[i];
        size_t len;
        unsigned char lo = 0x80, hi = 0xBF;
        if (c <= 0x7F) { out[o++] = (char)c; i++; continue; }
        else if (c >= 0xC2 && c <= 0xDF) len = 2;
        else if (c == 0xE0) { len = 3; lo = 0xA0; }
        else if (c >= 0xE1 && c <= 0xEC) len = 3;
        else if (c == 0xED) { len = 3; hi = 0x9F; }
        else if (c >= 0xEE && c <= 0xEF) len = 3;
        else if (c == 0xF0) { len = 4; lo = 0x90; }
        else if (c >= 0xF1 && c <= 0xF3) len = 4;
        else if (c == 0xF4) { len = 4; hi = 0x8F; }
        else { memcpy(out + o, FFFD, 3); o += 3; i++; continue; }
        size_t k = 1;
        while (k < len && i + k < n) {
            unsigned char lo_k = k == 1 ? lo : 0x80, hi_k = k == 1 ? hi : 0xBF;
            if (s[i + k] < lo_k || s[i + k] > hi_k)
                break;
            k++;
        }
        if (k == len) {
            memcpy(out + o, s + i, len);
            o += len;
        } else {
            memcpy(out + o, FFFD, 3);
            o += 3;
        }
        i += k;
    }
    return o;
}

/* Reference stop search over the whole sanitized text: the occurrence that
 * ends first, ties to the one that starts first. Returns the cut position or
 * n when no stop occurs; *idx gets the stop index. */
static size_t ref_stop(const char *t, size_t n, const char *const *stops, size_t n_stops, int *idx)
{
    *idx = -1;
    for (size_t end = 1; end <= n; end++) {
        size_t best_start = n + 1;
        for (size_t s = 0; s < n_stops; s++) {
            size_t l = strlen(stops[s]);
            if (l == 0 || l > end)
                continue;
            if (memcmp(t + end - l, stops[s], l) == 0 && end - l < best_start) {
                best_start = end - l;
                *idx = (int)s;
            }
        }
        if (*idx >= 0)
            return best_start;
    }
    return n;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static uint32_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

/* Streams `s` cut at the given boundaries and returns the concatenated text. */
static size_t stream(const unsigned char *s, size_t n, const size_t *cuts, size_t n_cuts,
                     const char *const *stops, size_t n_stops, detok_finish_t fin, char *out,
                     int *stop_idx, detok_finish_t *reason)
{
    detok_t *d = detok_new(stops, n_stops);
    assert_non_null(d);
    size_t o = 0, prev = 0;
    int rc = DETOK_CONTINUE;
    for (size_t c = 0; c <= n_cuts && rc == DETOK_CONTINUE; c++) {
        size_t end = c < n_cuts ? cuts[c] : n;
        const char *delta;
        size_t dl;
        rc = detok_push(d, (const char *)s + prev, end - prev, &delta, &dl);
        assert_true(utf8_valid((const uint8_t *)delta, dl));
        memcpy(out + o, delta, dl);
        o += dl;
        prev = end;
    }
    if (rc == DETOK_CONTINUE) {
        const char *delta;
        size_t dl;
        detok_finish(d, fin, &delta, &dl);
        assert_true(utf8_valid((const uint8_t *)delta, dl));
        memcpy(out + o, delta, dl);
        o += dl;
    }
    assert_int_equal(detok_emitted_bytes(d), o);
    *stop_idx = detok_stop_index(d);
    *reason = detok_finish_reason(d);
    detok_free(&d);
    return o;
}

/* Every split point of valid multi-byte text (2, 3 and 4-byte characters)
 * gives back exactly the text. */
static void test_valid_text_every_split(void **state)
{
    (void)state;
    const char *texts[] = {
        "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD",
        "\xF0\x9F\x98\x80\xF0\x9F\x98\x80",
        "\xC2\x80\xDF\xBF\xE0\xA0\x80\xEF\xBF\xBF\xF0\x90\x80\x80\xF4\x8F\xBF\xBF", /* range edges */
    };
    char out[256];
    for (size_t t = 0; t < sizeof(texts) / sizeof(texts[0]); t++) {
        const unsigned char *s = (const unsigned char *)texts[t];
        size_t n = strlen(texts[t]);
        for (size_t a = 0; a <= n; a++) {
            for (size_t b = a; b <= n; b++) {
                size_t cuts[2] = {a, b};
                int idx;
                detok_finish_t r;
                size_t o = stream(s, n, cuts, 2, NULL, 0, DETOK_FINISH_EOS, out, &idx, &r);
                assert_int_equal(o, n);
                assert_memory_equal(out, s, n);
            }
        }
        /* byte by byte */
        size_t cuts[64];
        for (size_t i = 0; i < n; i++)
            cuts[i] = i + 1;
        int idx;
        detok_finish_t r;
        size_t o = stream(s, n, cuts, n, NULL, 0, DETOK_FINISH_EOS, out, &idx, &r);
        assert_int_equal(o, n);
        assert_memory_equal(out, s, n);
    }
}

/* Random bytes and random stops from a small alphabet (so stops do occur):
 * any split gives the reference result. */
static void test_random_against_reference(void **state)
{
    (void)state;
    static const unsigned char alphabet[] = {'a', 'b', 'c', 0xC3, 0xA9, 0xE2, 0x82, 0xAC, 0xF0, 0x9F,
                                             0x98, 0x80, 0xFF, 0xED, 0xA0, '\n'};
    const char *stop_pool[] = {"ab", "abc", "aab", "\xC3\xA9", "\n\n", "c\xE2\x82\xAC", "ba", "bca"};
    unsigned char s[48];
    char ref[48 * 3 + 8], out[48 * 3 + 8];
    size_t n_checked = 0, n_stopped = 0;
    for (int iter = 0; iter < 3000; iter++) {
        size_t n = rng() % 40;
        for (size_t i = 0; i < n; i++)
            s[i] = rng() % 5 < 3 ? (unsigned char)"abc"[rng() % 3] : alphabet[rng() % sizeof(alphabet)];
        const char *stops[3];
        size_t n_stops = rng() % 4;
        for (size_t i = 0; i < n_stops; i++)
            stops[i] = stop_pool[rng() % (sizeof(stop_pool) / sizeof(stop_pool[0]))];
        size_t rn = ref_sanitize(s, n, ref);
        int ref_idx;
        size_t cut = ref_stop(ref, rn, stops, n_stops, &ref_idx);
        /* three splittings: whole, byte by byte, random */
        size_t cuts[48], n_cuts;
        for (int mode = 0; mode < 3; mode++) {
            n_cuts = 0;
            if (mode == 1) {
                for (size_t i = 1; i < n; i++)
                    cuts[n_cuts++] = i;
            } else if (mode == 2) {
                for (size_t i = 1; i < n; i++)
                    if (rng() % 3 == 0)
                        cuts[n_cuts++] = i;
            }
            int idx;
            detok_finish_t r;
            size_t o = stream(s, n, cuts, n_cuts, stops, n_stops, DETOK_FINISH_LENGTH, out, &idx, &r);
            if (o != cut || memcmp(out, ref, cut) != 0 || idx != ref_idx)
                fail_msg("iter %d mode %d: got %zu bytes idx %d, reference %zu bytes idx %d", iter, mode,
                         o, idx, cut, ref_idx);
            assert_int_equal(r, ref_idx >= 0 ? DETOK_FINISH_STOP : DETOK_FINISH_LENGTH);
            n_checked++;
        }
        if (ref_idx >= 0)
            n_stopped++;
    }
    /* the generator must actually exercise stops */
    printf("random: %zu of 3000 texts stopped\n", n_stopped);
    assert_true(n_stopped > 600);
    assert_true(n_checked == 9000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_invalid_stop_rejected),
        cmocka_unit_test(test_finish_twice),
        cmocka_unit_test(test_valid_text_every_split),
        cmocka_unit_test(test_random_against_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
