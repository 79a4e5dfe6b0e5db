/* Unit tests for proto/sampling.h, the table of sampling knobs: every row
 * crosses the wire byte-compatibly with peers built before the table (whose
 * keys, types and ranges are written out below as an old peer knew them),
 * both ways — the table's encoder read by a msgpack reader written here,
 * and bytes written here by hand decoded by the table's decoder — and the
 * key list in docs/ARCHITECTURE.md is the table's.
 *
 * `test_sampling --print` prints the doc block instead (make wire-doc). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/msg.h"
#include "proto/sampling.h"
#include "tests/support/support.h"

/* The knobs as peers before the table sent them: wire key, float (else
 * uint), default, the largest value the decoder took. Every one must still
 * be a row, with the same type and default, in the same order. */
static const struct {
    const char *key;
    bool is_float;
    double def, wire_hi;
} old_peer[] = {
    {"temp", true, 1.0, 100.0},     {"top_p", true, 1.0, 1.0},      {"top_k", false, 0, 1 << 20},
    {"min_p", true, 0.0, 1.0},      {"rep_pen", true, 1.0, 100.0},  {"pres_pen", true, 0.0, 2.0},
    {"freq_pen", true, 0.0, 2.0},
};
#define N_OLD (sizeof old_peer / sizeof old_peer[0])

/* ------------------------------------------------------------------------ */
/* a msgpack reader of our own (the subset a SUBMIT uses)                    */

typedef struct {
    const uint8_t *p, *end;
} rd_t;

static uint64_t be(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* Length of the next value's header and its payload (for skipping), or -1. */
static int rd_skip(rd_t *r);

static int rd_skip_n(rd_t *r, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        if (rd_skip(r) < 0)
            return -1;
    return 0;
}

static int rd_skip(rd_t *r)
{
    if (r->p >= r->end)
        return -1;
    uint8_t b = *r->p++;
    uint64_t n;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3)
        return 0;
    if ((b & 0xe0) == 0xa0) { r->p += b & 0x1f; return 0; }
    if ((b & 0xf0) == 0x90) return rd_skip_n(r, b & 0x0f);
    if ((b & 0xf0) == 0x80) return rd_skip_n(r, 2u * (b & 0x0f));
    switch (b) {
    case 0xcc: case 0xd0: r->p += 1; return 0;
    case 0xcd: case 0xd1: r->p += 2; return 0;
    case 0xce: case 0xd2: case 0xca: r->p += 4; return 0;
    case 0xcf: case 0xd3: case 0xcb: r->p += 8; return 0;
    case 0xd9: case 0xc4: n = be(r->p, 1); r->p += 1 + n; return 0;
    case 0xda: case 0xc5: n = be(r->p, 2); r->p += 2 + n; return 0;
    case 0xdb: case 0xc6: n = be(r->p, 4); r->p += 4 + n; return 0;
    case 0xdc: n = be(r->p, 2); r->p += 2; return rd_skip_n(r, n);
    case 0xdd: n = be(r->p, 4); r->p += 4; return rd_skip_n(r, n);
    case 0xde: n = be(r->p, 2); r->p += 2; return rd_skip_n(r, 2 * n);
    case 0xdf: n = be(r->p, 4); r->p += 4; return rd_skip_n(r, 2 * n);
    }
    return -1;
}

/* A string (fixstr/str8) into out. */
static int rd_str(rd_t *r, char *out, size_t cap)
{
    uint8_t b = *r->p++;
    size_t n;
    if ((b & 0xe0) == 0xa0)
        n = b & 0x1f;
    else if (b == 0xd9)
        n = *r->p++;
    else
        return -1;
    if (n >= cap)
        return -1;
    memcpy(out, r->p, n);
    out[n] = '\0';
    r->p += n;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* hand-written bytes                                                        */

typedef struct {
    uint8_t b[1024];
    size_t n;
} wr_t;

static void w8(wr_t *w, uint8_t v) { w->b[w->n++] = v; }
static void wbe(wr_t *w, uint64_t v, int n)
{
    for (int i = n - 1; i >= 0; i--)
        w8(w, (uint8_t)(v >> (8 * i)));
}
static void wstr(wr_t *w, const char *s)
{
    size_t n = strlen(s);
    assert_true(n < 32);
    w8(w, (uint8_t)(0xa0 | n));
    memcpy(w->b + w->n, s, n);
    w->n += n;
}
static void wf64(wr_t *w, double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    w8(w, 0xcb);
    wbe(w, u, 8);
}
static void wuint(wr_t *w, uint64_t v)
{
    if (v < 128) {
        w8(w, (uint8_t)v);
    } else if (v <= 0xffff) {
        w8(w, 0xcd);
        wbe(w, v, 2);
    } else {
        w8(w, 0xce);
        wbe(w, v, 4);
    }
}

/* A completion SUBMIT map's head: id, prio, kind, prompt, plus n_more keys. */
static void submit_head(wr_t *w, unsigned n_more)
{
    w8(w, 0xde);
    wbe(w, 4 + n_more, 2);
    wstr(w, "id");
    wuint(w, 7);
    wstr(w, "prio");
    wuint(w, 1);
    wstr(w, "kind");
    wstr(w, "completion");
    wstr(w, "prompt");
    wstr(w, "hi");
}

/* A value of row i other than its default, inside its request range. */
static double other_value(size_t i)
{
    return old_peer[i].is_float ? (old_peer[i].def == 0.0 ? 0.5 : 0.25) : 40;
}

/* ------------------------------------------------------------------------ */
/* tests                                                                     */

static void test_rows_are_the_old_peers(void **state)
{
    (void)state;
    assert_int_equal(PROTO_N_KNOBS, N_OLD);
    proto_knobs_t k;
    proto_knobs_default(&k);
    proto_msg_t m;
    proto_msg_init(&m, PROTO_SUBMIT);
    for (size_t i = 0; i < N_OLD; i++) {
        const proto_knob_row_t *row = &proto_knob_rows[i];
        assert_string_equal(row->key, old_peer[i].key);
        assert_int_equal(row->is_uint, !old_peer[i].is_float);
        assert_true(row->def == old_peer[i].def);
        assert_true(row->wire_hi == old_peer[i].wire_hi);
        assert_true(proto_knob_get(&k, row) == old_peer[i].def);
        assert_true(proto_knob_get(&m.submit.sampling.knobs, row) == old_peer[i].def);
        assert_true(row->lo <= row->hi && row->hi <= row->wire_hi);
        /* the default is a value a request may give, and the wire takes */
        assert_true(proto_knob_in_range(row, row->def, true));
        assert_true(proto_knob_in_range(row, row->def, false));
        assert_false(proto_knob_in_range(row, row->wire_hi * 2 + 1, false));
        assert_false(proto_knob_in_range(row, NAN, false));
    }
}

/* The table's encoder, read here: every row's key once, in table order, as
 * float 64 / the smallest uint, with the value set. */
static void test_encode_read_by_hand(void **state)
{
    (void)state;
    proto_msg_t m;
    proto_msg_init(&m, PROTO_SUBMIT);
    m.submit.id = 7;
    m.submit.kind = PROTO_KIND_COMPLETION;
    m.submit.prompt = "hi";
    for (size_t i = 0; i < N_OLD; i++)
        proto_knob_set(&m.submit.sampling.knobs, &proto_knob_rows[i], other_value(i));
    m.submit.sampling.top_k = 300; /* a uint16 on the wire */
    uint8_t *body;
    size_t len;
    assert_int_equal(proto_encode(&m, &body, &len), PROTO_OK);
    rd_t r = {body, body + len};
    assert_int_equal(*r.p, 0xdf);
    uint64_t n = be(r.p + 1, 4);
    r.p += 5;
    size_t next = 0;
    for (uint64_t i = 0; i < n; i++) {
        char key[64];
        assert_int_equal(rd_str(&r, key, sizeof key), 0);
        size_t j = 0;
        while (j < N_OLD && strcmp(old_peer[j].key, key) != 0)
            j++;
        if (j == N_OLD) {
            assert_int_equal(rd_skip(&r), 0);
            continue;
        }
        assert_int_equal(j, next); /* in order, once each */
        next++;
        double want = strcmp(key, "top_k") == 0 ? 300 : other_value(j);
        if (old_peer[j].is_float) {
            assert_int_equal(*r.p, 0xcb);
            uint64_t u = be(r.p + 1, 8);
            double d;
            memcpy(&d, &u, sizeof d);
            assert_true(d == want);
            r.p += 9;
        } else {
            assert_int_equal(*r.p, 0xcd); /* 300: uint16 */
            assert_int_equal(be(r.p + 1, 2), (uint64_t)want);
            r.p += 3;
        }
    }
    assert_int_equal(next, N_OLD);
    assert_ptr_equal(r.p, body + len);
    free(body);
}

/* Bytes an old peer wrote, decoded by the table: each row alone (the
 * others keep their defaults), and every row's out-of-range value refused. */
static void test_decode_hand_written(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_OLD; i++) {
        wr_t w = {.n = 0};
        submit_head(&w, 1);
        wstr(&w, old_peer[i].key);
        if (old_peer[i].is_float)
            wf64(&w, other_value(i));
        else
            wuint(&w, (uint64_t)other_value(i));
        proto_msg_t m;
        char err[160];
        assert_int_equal(proto_decode_body(PROTO_SUBMIT, w.b, w.n, &m, err, sizeof err), PROTO_OK);
        for (size_t j = 0; j < N_OLD; j++)
            assert_true(proto_knob_get(&m.submit.sampling.knobs, &proto_knob_rows[j]) ==
                        (j == i ? other_value(j) : old_peer[j].def));
        proto_msg_clear(&m);

        /* past the wire's bound */
        w.n = 0;
        submit_head(&w, 1);
        wstr(&w, old_peer[i].key);
        if (old_peer[i].is_float)
            wf64(&w, old_peer[i].wire_hi * 2 + 1);
        else
            wuint(&w, (uint64_t)old_peer[i].wire_hi + 1);
        assert_int_equal(proto_decode_body(PROTO_SUBMIT, w.b, w.n, &m, err, sizeof err), PROTO_ERANGE);
        assert_non_null(strstr(err, old_peer[i].key));
        proto_msg_clear(&m);
    }
    /* all rows at once, the way an old gateway sent them (always, in order) */
    wr_t w = {.n = 0};
    submit_head(&w, N_OLD);
    for (size_t i = 0; i < N_OLD; i++) {
        wstr(&w, old_peer[i].key);
        if (old_peer[i].is_float)
            wf64(&w, old_peer[i].def);
        else
            wuint(&w, (uint64_t)old_peer[i].def);
    }
    proto_msg_t m;
    char err[160];
    assert_int_equal(proto_decode_body(PROTO_SUBMIT, w.b, w.n, &m, err, sizeof err), PROTO_OK);
    proto_msg_t d;
    proto_msg_init(&d, PROTO_SUBMIT);
    assert_memory_equal(&m.submit.sampling.knobs, &d.submit.sampling.knobs, sizeof d.submit.sampling.knobs);
    proto_msg_clear(&m);
}

/* docs/ARCHITECTURE.md holds the table's key list between its markers. */
#define DOC_PATH "docs/ARCHITECTURE.md"
#define DOC_BEGIN "<!-- sampling-knobs begin: make wire-doc -->\n"
#define DOC_END "<!-- sampling-knobs end -->"

static void test_doc_matches(void **state)
{
    (void)state;
    FILE *f = fopen(DOC_PATH, "rb");
    assert_non_null(f);
    static char doc[1 << 20];
    size_t n = fread(doc, 1, sizeof doc - 1, f);
    fclose(f);
    doc[n] = '\0';
    char *a = strstr(doc, DOC_BEGIN);
    assert_non_null(a);
    a += strlen(DOC_BEGIN);
    char *b = strstr(a, DOC_END);
    assert_non_null(b);
    *b = '\0';
    char *want = proto_knobs_markdown();
    if (strcmp(a, want) != 0)
        print_message("docs/ARCHITECTURE.md's knob table is stale: run `make wire-doc`.\nwant:\n%s", want);
    assert_string_equal(a, want);
    free(want);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--print") == 0) {
        char *md = proto_knobs_markdown();
        fputs(md, stdout);
        free(md);
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows_are_the_old_peers),
        cmocka_unit_test(test_encode_read_by_hand),
        cmocka_unit_test(test_decode_hand_written),
        cmocka_unit_test(test_doc_matches),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
