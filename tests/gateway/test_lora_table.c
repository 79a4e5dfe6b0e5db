/* Unit tests for gateway/lora_table.h: bodies parsed by the OpenAI surface
 * (oai_parse_request: the `lora` field) and resolved against a table of
 * adapters, as a table of cases — the base model and the adapters (name,
 * scale) the SUBMIT gets, or the 400 with param "lora"; a request without
 * adapters keeps its model and gets none. And replicas' adapters (REGISTER
 * lora): which replica may run a SUBMIT, and the routing keys' partition. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "common/prefix_key.h"
#include "gateway/lora_table.h"
#include "gateway/oai.h"

typedef struct lora_case {
    const char *body;      /* POST /v1/completions body */
    int status;            /* 0 = resolves; else the error's status (param "lora" when 400 from lora) */
    const char *param;     /* the error's param */
    const char *base;      /* resolved base, NULL = none (runs on `model`) */
    const char *names;     /* adapters, "name:scale,..." */
} lora_case_t;

static const lora_case_t cases[] = {
    {"{\"model\":\"llama\",\"prompt\":\"x\"}", 0, NULL, NULL, ""},
    {"{\"model\":\"llama\",\"prompt\":\"x\",\"lora\":[]}", 0, NULL, NULL, ""},
    {"{\"model\":\"llama\",\"prompt\":\"x\",\"lora\":null}", 0, NULL, NULL, ""},
    {"{\"model\":\"sql\",\"prompt\":\"x\"}", 0, NULL, "llama", "sql:0.5,"},
    {"{\"model\":\"llama\",\"prompt\":\"x\",\"lora\":[{\"id\":1}]}", 0, NULL, "llama", "style:1,"},
    {"{\"model\":\"llama\",\"prompt\":\"x\",\"lora\":[{\"id\":1,\"scale\":0.25},{\"id\":0,\"scale\":2}]}", 0, NULL,
     "llama", "style:0.25,sql:2,"},
    {"{\"model\":\"llama\",\"prompt\":\"x\",\"lora\":[{\"id\":0,\"scale\":0}]}", 0, NULL, NULL, ""},
    {"{\"model\":\"sql\",\"prompt\":\"x\",\"lora\":[{\"id\":1,\"scale\":3}]}", 0, NULL, "llama", "sql:0.5,style:3,"},
    {"{\"model\":\"other\",\"prompt\":\"x\"}", 0, NULL, NULL, ""},
    {"{\"model\":\"llama\",\"prompt\":\"x\",\"lora\":[{\"id\":2}]}", 400, "lora", NULL, NULL}, /* other's */
    {"{\"model\":\"llama\",\"prompt\":\"x\",\"lora\":[{\"id\":3}]}", 400, "lora", NULL, NULL}, /* no such id */
    {"{\"model\":\"llama\",\"prompt\":\"x\",\"lora\":[{\"id\":-1}]}", 400, "lora", NULL, NULL},
    {"{\"model\":\"llama\",\"prompt\":\"x\",\"lora\":[{\"id\":0},{\"id\":0}]}", 400, "lora", NULL, NULL},
    {"{\"model\":\"sql\",\"prompt\":\"x\",\"lora\":[{\"id\":0}]}", 400, "lora", NULL, NULL},
    {"{\"model\":\"llama\",\"prompt\":\"x\",\"lora\":{\"id\":0}}", 400, "lora", NULL, NULL},
    {"{\"model\":\"llama\",\"prompt\":\"x\",\"lora\":[{\"scale\":1}]}", 400, "lora", NULL, NULL},
    {"{\"model\":\"llama\",\"prompt\":\"x\",\"lora\":[{\"id\":0,\"scale\":\"1\"}]}", 400, "lora", NULL, NULL},
    {"{\"model\":\"llama\",\"prompt\":\"x\",\"lora\":[{\"id\":0,\"scale\":1000}]}", 400, "lora", NULL, NULL},
    {"{\"model\":\"llama\",\"prompt\":\"x\",\"lora\":[7]}", 400, "lora", NULL, NULL},
};

static void test_cases(void **state)
{
    (void)state;
    lora_table_t *t = lora_table_new();
    lora_table_add(t, "sql", "llama", 0.5);
    lora_table_add(t, "style", "llama", 1.0);
    lora_table_add(t, "poet", "other", 1.0);
    assert_ptr_equal(lora_table_find(t, "style"), &t->e[1]);
    assert_null(lora_table_find(t, "llama"));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const lora_case_t *c = &cases[i];
        request_t r;
        oai_error_t e = {0};
        int rc = oai_parse_request((const uint8_t *)c->body, strlen(c->body), REQUEST_COMPLETION, &r, &e);
        if (rc == 0)
            rc = lora_table_resolve(t, &r, &e);
        if (c->status) {
            if (rc == 0 || e.status != c->status || strcmp(e.param, c->param) != 0)
                fail_msg("case %zu %s: want %d param %s, got rc %d status %d param '%s'", i, c->body, c->status,
                         c->param, rc, e.status, e.param);
            request_free(&r);
            continue;
        }
        if (rc != 0)
            fail_msg("case %zu %s: refused: %s", i, c->body, e.message);
        char got[256] = "";
        for (size_t k = 0; k < r.n_adapters; k++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s:%g,", r.adapters[k].name, r.adapters[k].scale);
        if (strcmp(got, c->names) != 0 || (c->base ? !r.lora_base || strcmp(r.lora_base, c->base) : r.lora_base != NULL))
            fail_msg("case %zu %s: want base %s [%s], got %s [%s]", i, c->body, c->base ? c->base : "(none)", c->names,
                     r.lora_base ? r.lora_base : "(none)", got);
        request_free(&r);
    }
    lora_table_free(&t);
    assert_null(t);
    lora_table_free(&t); /* NULL-safe */
}

/* More adapters than a SUBMIT carries. */
static void test_too_many(void **state)
{
    (void)state;
    lora_table_t *t = lora_table_new();
    char name[16], body[512] = "{\"model\":\"m\",\"prompt\":\"x\",\"lora\":[";
    for (int i = 0; i <= REQUEST_MAX_LORA; i++) {
        snprintf(name, sizeof name, "a%d", i);
        lora_table_add(t, name, "m", 1.0);
        snprintf(body + strlen(body), sizeof body - strlen(body), "%s{\"id\":%d}", i ? "," : "", i);
    }
    strcat(body, "]}");
    request_t r;
    oai_error_t e = {0};
    assert_int_equal(oai_parse_request((const uint8_t *)body, strlen(body), REQUEST_COMPLETION, &r, &e), 0);
    assert_int_equal(lora_table_resolve(t, &r, &e), -1);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.param, "lora");
    assert_int_equal(r.n_adapters, 0);
    request_free(&r);
    lora_table_free(&t);
}

/* Replicas and their adapters (REGISTER lora): which replica may run a
 * SUBMIT, the hash the table learns (the first replica's), and the
 * partition routing keys are made in, as a table of SUBMITs × replicas. */
static void test_replicas(void **state)
{
    (void)state;
    lora_table_t *t = lora_table_new();
    lora_table_add(t, "sql", "llama", 0.5);
    lora_table_add(t, "style", "llama", 1.0);
    lora_table_add(t, "x", "other", 1.0);
    proto_reg_lora_t la[] = {{.name = "sql", .hash = 11, .rank = 8, .scale = 0.5},
                             {.name = "style", .hash = 22, .rank = 8, .scale = 1}};
    proto_reg_lora_t lb[] = {{.name = "sql", .hash = 11, .rank = 8, .scale = 0.5}};
    proto_reg_lora_t lc[] = {{.name = "sql", .hash = 99, .rank = 8, .scale = 0.5}};
    proto_register_t reg[] = {
        {.model = "llama", .replica = "a", .lora = la, .n_lora = 2}, /* both */
        {.model = "llama", .replica = "b", .lora = lb, .n_lora = 1}, /* sql only */
        {.model = "llama", .replica = "c", .lora = lc, .n_lora = 1}, /* sql from another file */
        {.model = "llama", .replica = "d"},                          /* none */
    };
    proto_submit_t s = {.partition = 7};
    uint64_t part = 0;
    /* before any replica registered: no hash, no routing keys */
    s.n_lora = 1;
    s.lora[0] = (proto_lora_t){.name = "sql", .has_scale = true, .scale = 0.5};
    assert_int_equal(lora_table_key_partition(t, &s, &part), -1);
    lora_table_note_worker(t, &reg[0], NULL, 0);
    const proto_register_t *peers[] = {&reg[0], &reg[3]};
    lora_table_note_worker(t, &reg[2], peers, 2); /* logged; a's hash stays: a holds it */
    assert_true(atomic_load(&lora_table_find(t, "sql")->hash) == 11);
    assert_true(atomic_load(&lora_table_find(t, "style")->hash) == 22);
    assert_true(atomic_load(&lora_table_find(t, "x")->hash) == 0);
    static const struct {
        const char *names[2];      /* the SUBMIT's adapters (NULL-ended) */
        bool serves[4];            /* by replica a, b, c, d */
    } rows[] = {
        {{NULL, NULL}, {true, true, true, true}},
        {{"sql", NULL}, {true, true, false, false}},
        {{"style", NULL}, {true, false, false, false}},
        {{"sql", "style"}, {true, false, false, false}},
        {{"x", NULL}, {false, false, false, false}},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        s.n_lora = 0;
        for (int k = 0; k < 2 && rows[i].names[k]; k++)
            s.lora[s.n_lora++] = (proto_lora_t){.name = (char *)rows[i].names[k], .has_scale = true, .scale = 1};
        for (int r = 0; r < 4; r++)
            if (lora_table_worker_serves(t, &reg[r], &s) != rows[i].serves[r])
                fail_msg("row %zu, replica %s: serves %d", i, reg[r].replica, !rows[i].serves[r]);
    }
    /* the partition: the SUBMIT's own without adapters; the worker's fold of
     * hashes and (float) scales with them, distinct per adapter set */
    s.n_lora = 0;
    assert_int_equal(lora_table_key_partition(t, &s, &part), 0);
    assert_true(part == 7);
    s.n_lora = 1;
    s.lora[0] = (proto_lora_t){.name = "sql", .has_scale = true, .scale = 0.1};
    assert_int_equal(lora_table_key_partition(t, &s, &part), 0);
    assert_true(part == prefix_key_adapters(7, (const uint64_t[]){11}, (const float[]){0.1f}, 1));
    uint64_t p_sql = part, p_style, p_both;
    s.lora[0].name = "style";
    assert_int_equal(lora_table_key_partition(t, &s, &p_style), 0);
    s.n_lora = 2;
    s.lora[1] = (proto_lora_t){.name = "sql", .has_scale = true, .scale = 0.1};
    assert_int_equal(lora_table_key_partition(t, &s, &p_both), 0);
    assert_true(p_sql != 7 && p_style != 7 && p_both != 7 && p_sql != p_style && p_both != p_sql &&
                p_both != p_style);
    s.lora[1].name = "x"; /* no replica of `other` has registered */
    assert_int_equal(lora_table_key_partition(t, &s, &part), -1);
    /* the file changed: c registers again with no peer holding 11 → 99 */
    lora_table_note_worker(t, &reg[2], peers + 1, 1);
    assert_true(atomic_load(&lora_table_find(t, "sql")->hash) == 99);
    s.n_lora = 1;
    s.lora[0].name = "sql";
    assert_true(lora_table_worker_serves(t, &reg[2], &s) && !lora_table_worker_serves(t, &reg[0], &s));
    lora_table_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_too_many),
        cmocka_unit_test(test_replicas),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
