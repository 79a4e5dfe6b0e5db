/* tool_grammar.c — grammar for tool_choice required/named (see tool_grammar.h). */
#include "common/text/tool_grammar.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errbuf.h"
#include "common/grammar/gbnf.h"
#include "common/grammar/json_schema.h"
#include "common/grammar/lark.h"
#include "common/log.h"
#include "common/strbuf.h"
#include "common/text/tool_format.h"

/* s as one GBNF string literal (gbnf.h's escaper). */
static void put_lit(strbuf_t *b, const char *s) { gbnf_escape_literal(b, s, strlen(s)); }

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
    strbuf_t b = {0};
    strbuf_puts(&b, prefix);
    strbuf_puts(&b, "root ::= \"{\\\"input\\\": \\\"\" ");
    strbuf_puts(&b, inner);
    strbuf_puts(&b, "root \"\\\"}\"\n");
    strbuf_puts(&b, g);
    free(g);
    return strbuf_take(&b);
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
    strbuf_t alts = {0}, rules = {0}, notes = {0}; /* notes: what was relaxed, logged once */
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
            strbuf_puts(&notes, line);
            strbuf_puts(&notes, relaxed);
            free(relaxed);
        }
        if (!g) {
            if (params) {
                snprintf(line, sizeof line, "%stool %s: any JSON object (%.150s)", notes.len ? "; " : "", name, cerr);
                strbuf_puts(&notes, line);
            }
            g = json_schema_object_gbnf(prefix);
        }
        strbuf_puts(&rules, g);
        strbuf_puts(&rules, "\n");
        free(g);
        snprintf(line, sizeof line, "%s\"%s\\\", \\\"%s\\\": \" %sroot", n_alts ? " | " : "", name,
                 tf->args_key, prefix);
        strbuf_puts(&alts, line);
        n_alts++;
    }
    if (n_alts == 0) {
        errbuf_set(err, errlen, "tool_choice names the function '%.64s', which is not in tools", only ? only : "");
        goto done;
    }
    /* root ::= open call (sep call)* close   (one call without sep or parallel)
     * call ::= call_open {"name": " call-body } call_close */
    strbuf_t g = {0};
    strbuf_puts(&g, "root ::= ");
    if (tf->open[0]) {
        put_lit(&g, tf->open);
        strbuf_puts(&g, " ");
    }
    strbuf_puts(&g, "call");
    if (parallel && tf->sep) {
        strbuf_puts(&g, " (");
        put_lit(&g, tf->sep);
        strbuf_puts(&g, " call)*");
    }
    if (tf->close[0]) {
        strbuf_puts(&g, " ");
        put_lit(&g, tf->close);
    }
    strbuf_puts(&g, "\ncall ::= ");
    strbuf_t head = {0}, tail = {0};
    strbuf_puts(&head, tf->call_open);
    strbuf_puts(&head, "{\"name\": \"");
    strbuf_puts(&tail, "}");
    strbuf_puts(&tail, tf->call_close);
    put_lit(&g, head.s);
    strbuf_puts(&g, " call-body ");
    put_lit(&g, tail.s);
    strbuf_puts(&g, "\n");
    free(head.s);
    free(tail.s);
    strbuf_puts(&g, "call-body ::= ");
    strbuf_puts(&g, alts.s);
    strbuf_puts(&g, "\n");
    strbuf_puts(&g, rules.s ? rules.s : "");
    out = strbuf_take(&g);
done:
    if (notes.len && out)
        log_warn("tool_choice %s: schema keywords relaxed (not enforced, the tools are not strict): %s", choice,
                 notes.s);
    free(notes.s);
    json_decref(tools);
    free(alts.s);
    free(rules.s);
    return out;
}
