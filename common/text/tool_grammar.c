/* tool_grammar.c — grammar for tool_choice required/named (see tool_grammar.h). */
#include "common/text/tool_grammar.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errbuf.h"
#include "common/grammar/json_schema.h"
#include "common/grammar/lark.h"
#include "common/log.h"
#include "common/text/tool_format.h"
#include "common/xalloc.h"

typedef struct {
    char *buf;
    size_t len, cap;
} buf_t;

static void put(buf_t *b, const char *s)
{
    size_t n = strlen(s);
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->buf = xrealloc(b->buf, b->cap);
    }
    memcpy(b->buf + b->len, s, n + 1);
    b->len += n;
}

/* s as a GBNF string literal (quotes, backslashes and control characters
 * escaped). */
static void put_lit(buf_t *b, const char *s)
{
    put(b, "\"");
    for (; *s; s++) {
        char c[3] = {*s, 0, 0};
        if (*s == '"' || *s == '\\')
            c[0] = '\\', c[1] = *s;
        else if (*s == '\n')
            c[0] = '\\', c[1] = 'n';
        else if (*s == '\r')
            c[0] = '\\', c[1] = 'r';
        else if (*s == '\t')
            c[0] = '\\', c[1] = 't';
        put(b, c);
    }
    put(b, "\"");
}

/* Names are [A-Za-z0-9_-] (the gateway checks), so they need no escaping
 * inside a GBNF literal; anything else is refused here as well. */
static bool plain_name(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' ||
              *s == '-'))
            return false;
    return true;
}

/* A custom tool's arguments: <prefix>root ::= "{\"input\": \"" <its grammar
 * over the JSON string's body> "\"}", from x-grammar {"syntax": "lark" |
 * "regex", "definition"} (common/grammar/lark.h). NULL + err when it does not
 * compile. */
static char *custom_rules(json_t *xg, const char *prefix, char *err, size_t errlen)
{
    const char *syn = json_string_value(json_object_get(xg, "syntax"));
    json_t *def = json_object_get(xg, "definition");
    if (!syn || !json_is_string(def)) {
        errbuf_set(err, errlen, "x-grammar needs a syntax and a definition");
        return NULL;
    }
    char inner[48];
    snprintf(inner, sizeof inner, "%sg-", prefix);
    const uint8_t *d = (const uint8_t *)json_string_value(def);
    size_t n = json_string_length(def);
    char *g = strcmp(syn, "lark") == 0    ? lark_to_gbnf_prefixed(d, n, LARK_JSON_STRING, inner, err, errlen)
              : strcmp(syn, "regex") == 0 ? lark_regex_to_gbnf_prefixed(d, n, LARK_JSON_STRING, inner, err, errlen)
                                          : NULL;
    if (!g) {
        if (strcmp(syn, "lark") != 0 && strcmp(syn, "regex") != 0)
            errbuf_set(err, errlen, "x-grammar syntax '%.20s' is not lark or regex", syn);
        return NULL;
    }
    buf_t b = {0};
    put(&b, prefix);
    put(&b, "root ::= \"{\\\"input\\\": \\\"\" ");
    put(&b, inner);
    put(&b, "root \"\\\"}\"\n");
    put(&b, g);
    free(g);
    return b.buf;
}

char *tool_grammar_build(const char *tools_json, const char *choice, bool parallel, const char *fmt,
                         char *err, size_t errlen)
{
    json_error_t je;
    json_t *tools = json_loads(tools_json ? tools_json : "", 0, &je);
    const char *only = strncmp(choice, "function:", 9) == 0 ? choice + 9 : NULL;
    const tool_format_t *tf = tool_format_find(fmt);
    if (!tf)
        tf = &tool_format_hermes;
    buf_t alts = {0}, rules = {0}, notes = {0}; /* notes: what was relaxed, logged once */
    char *out = NULL;
    size_t n_alts = 0;
    if (!json_is_array(tools)) {
        errbuf_set(err, errlen, "tools: not a JSON array");
        goto done;
    }
    size_t i;
    json_t *tool;
    json_array_foreach(tools, i, tool) {
        json_t *f = json_object_get(tool, "function");
        const char *name = json_string_value(json_object_get(f, "name"));
        if (!name || !plain_name(name)) {
            errbuf_set(err, errlen, "tools[%zu]: bad function name", i);
            goto done;
        }
        if (only && strcmp(only, name) != 0)
            continue;
        char prefix[32], line[256];
        snprintf(prefix, sizeof prefix, "t%zu-", i);
        json_t *params = json_object_get(f, "parameters");
        bool strict = json_is_true(json_object_get(f, "strict"));
        char *g = NULL, *relaxed = NULL, cerr[256] = "", path[256] = "";
        json_t *xg = json_object_get(json_object_get(json_object_get(params, "properties"), "input"), "x-grammar");
        if (xg) {
            /* a custom tool (gateway/oai_tools.h): {"input": "<text in its grammar>"} */
            g = custom_rules(xg, prefix, cerr, sizeof cerr);
            if (!g) {
                errbuf_set(err, errlen, "tools[%zu] (custom tool %s): %s", i, name, cerr);
                goto done;
            }
        } else if (params && strict)
            g = json_schema_to_gbnf(params, prefix, cerr, sizeof cerr, path, sizeof path);
        else if (params)
            g = json_schema_to_gbnf_relaxed(params, prefix, &relaxed, cerr, sizeof cerr);
        if (!g && params && strict) {
            errbuf_set(err, errlen, "tools[%zu].function.parameters%s: %s", i, path, cerr);
            goto done;
        }
        if (relaxed) {
            snprintf(line, sizeof line, "%stool %s: ", notes.len ? "; " : "", name);
            put(&notes, line);
            put(&notes, relaxed);
            free(relaxed);
        }
        if (!g) {
            if (params) {
                snprintf(line, sizeof line, "%stool %s: any JSON object (%.150s)", notes.len ? "; " : "", name, cerr);
                put(&notes, line);
            }
            g = json_schema_object_gbnf(prefix);
        }
        put(&rules, g);
        put(&rules, "\n");
        free(g);
        snprintf(line, sizeof line, "%s\"%s\\\", \\\"%s\\\": \" %sroot", n_alts ? " | " : "", name,
                 tf->args_key, prefix);
        put(&alts, line);
        n_alts++;
    }
    if (n_alts == 0) {
        errbuf_set(err, errlen, "tool_choice names the function '%.64s', which is not in tools", only ? only : "");
        goto done;
    }
    /* root ::= open call (sep call)* close   (one call without sep or parallel)
     * call ::= call_open {"name": " call-body } call_close */
    buf_t g = {0};
    put(&g, "root ::= ");
    if (tf->open[0]) {
        put_lit(&g, tf->open);
        put(&g, " ");
    }
    put(&g, "call");
    if (parallel && tf->sep) {
        put(&g, " (");
        put_lit(&g, tf->sep);
        put(&g, " call)*");
    }
    if (tf->close[0]) {
        put(&g, " ");
        put_lit(&g, tf->close);
    }
    put(&g, "\ncall ::= ");
    buf_t head = {0}, tail = {0};
    put(&head, tf->call_open);
    put(&head, "{\"name\": \"");
    put(&tail, "}");
    put(&tail, tf->call_close);
    put_lit(&g, head.buf);
    put(&g, " call-body ");
    put_lit(&g, tail.buf);
    put(&g, "\n");
    free(head.buf);
    free(tail.buf);
    put(&g, "call-body ::= ");
    put(&g, alts.buf);
    put(&g, "\n");
    put(&g, rules.buf);
    out = g.buf;
done:
    if (notes.len && out)
        log_warn("tool_choice %s: schema keywords relaxed (not enforced, the tools are not strict): %s", choice,
                 notes.buf);
    free(notes.buf);
    json_decref(tools);
    free(alts.buf);
    free(rules.buf);
    return out;
}
