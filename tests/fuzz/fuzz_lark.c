/* libFuzzer target for common/grammar/lark: arbitrary bytes as a Lark
 * grammar and as a regex (OpenAI custom tools), in both modes, with and
 * without a rule prefix. A refusal must come with a message that is not an
 * internal error (lark.c names a GBNF refusal it did not expect that way);
 * every text returned must be accepted by gbnf_parse (trap otherwise). The
 * regex compiler it reuses (regex_to_gbnf) is fed the same
 * bytes directly too. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/grammar/gbnf.h"
#include "common/grammar/json_schema.h"
#include "common/grammar/lark.h"
#include "common/grammar/regex.h"

static void must_parse(const char *text, const char *prefix)
{
    char *w = prefix ? json_schema_gbnf_wrap(text, prefix, NULL, NULL) : NULL;
    const char *t = w ? w : text;
    grammar_t *g = NULL;
    char err[300];
    if (gbnf_parse((const uint8_t *)t, strlen(t), &g, err, sizeof err, NULL, NULL) != 0)
        __builtin_trap();
    gbnf_free(&g);
    free(w);
}

static void check(char *text, const char *err, const char *prefix)
{
    if (!text) {
        if (err[0] == 0 || strstr(err, "internal error"))
            __builtin_trap();
        return;
    }
    must_parse(text, prefix);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[600];
    for (int mode = LARK_RAW; mode <= LARK_JSON_STRING; mode++) {
        err[0] = 0;
        check(lark_to_gbnf(data, size, mode, err, sizeof err), err, NULL);
        err[0] = 0;
        check(lark_regex_to_gbnf(data, size, mode, err, sizeof err), err, NULL);
    }
    /* prefixed: the same checks through a wrapper root (one mode is enough) */
    err[0] = 0;
    check(lark_to_gbnf_prefixed(data, size, LARK_JSON_STRING, "t0-", err, sizeof err), err, "t0-");
    err[0] = 0;
    check(lark_regex_to_gbnf_prefixed(data, size, LARK_RAW, "t1-", err, sizeof err), err, "t1-");
    /* the regex compiler alone: an expression that parses as a rule body */
    size_t off = 0;
    char *expr = regex_to_gbnf(data, size, REGEX_PYRUST | REGEX_RAW, err, sizeof err, &off);
    if (expr) {
        size_t n = strlen(expr);
        char *rule = malloc(n + 16);
        memcpy(rule, "root ::= ", 9);
        memcpy(rule + 9, expr, n + 1);
        grammar_t *g = NULL;
        /* may be refused (e.g. an empty repetition is left-recursive), but
         * never for syntax */
        if (gbnf_parse((const uint8_t *)rule, strlen(rule), &g, err, sizeof err, NULL, NULL) != 0 &&
            !strstr(err, "left-recursive") && !strstr(err, "too large") && !strstr(err, "too many"))
            __builtin_trap();
        gbnf_free(&g);
        free(rule);
        free(expr);
    } else if (off > size) {
        __builtin_trap();
    }
    return 0;
}
