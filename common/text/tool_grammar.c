/* tool_grammar.c — grammar for tool_choice required/named (see tool_grammar.h). */
#include "common/text/tool_grammar.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errbuf.h"
#include "common/grammar/json_schema.h"
#include "common/log.h"
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

char *tool_grammar_build(const char *tools_json, const char *choice, bool parallel, const char *fmt,
                         char *err, size_t errlen)
{
    json_error_t je;
    json_t *tools = json_loads(tools_json ? tools_json : "", 0, &je);
    const char *only = strncmp(choice, "function:", 9) == 0 ? choice + 9 : NULL;
    bool llama3 = strcmp(fmt, "llama3") == 0;
    bool mistral = strcmp(fmt, "mistral") == 0;
    buf_t alts = {0}, rules = {0};
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
        char *g = NULL, cerr[256] = "", path[256] = "";
        if (params)
            g = json_schema_to_gbnf(params, prefix, cerr, sizeof cerr, path, sizeof path);
        if (!g) {
            if (params && json_is_true(json_object_get(f, "strict"))) {
                errbuf_set(err, errlen, "tools[%zu].function.parameters%s: %s", i, path, cerr);
                goto done;
            }
            if (params)
                log_info("tool %s: parameters schema not compiled (%s at %s): any JSON object", name, cerr,
                         path[0] ? path : "/");
            g = json_schema_object_gbnf(prefix);
        }
        put(&rules, g);
        put(&rules, "\n");
        free(g);
        snprintf(line, sizeof line, "%s\"%s\\\", \\\"%s\\\": \" %sroot", n_alts ? " | " : "", name,
                 llama3 ? "parameters" : "arguments", prefix);
        put(&alts, line);
        n_alts++;
    }
    if (n_alts == 0) {
        errbuf_set(err, errlen, "tool_choice names the function '%.64s', which is not in tools", only ? only : "");
        goto done;
    }
    buf_t g = {0};
    if (llama3) {
        put(&g, "root ::= \"{\\\"name\\\": \\\"\" call-body \"}\"\n");
    } else if (mistral) {
        put(&g, parallel ? "root ::= \"[TOOL_CALLS][\" call (\", \" call)* \"]\"\n"
                         : "root ::= \"[TOOL_CALLS][\" call \"]\"\n");
        put(&g, "call ::= \"{\\\"name\\\": \\\"\" call-body \"}\"\n");
    } else {
        put(&g, parallel ? "root ::= call (\"\\n\" call)*\n" : "root ::= call\n");
        put(&g, "call ::= \"<tool_call>\\n{\\\"name\\\": \\\"\" call-body \"}\\n</tool_call>\"\n");
    }
    put(&g, "call-body ::= ");
    put(&g, alts.buf);
    put(&g, "\n");
    put(&g, rules.buf);
    out = g.buf;
done:
    json_decref(tools);
    free(alts.buf);
    free(rules.buf);
    return out;
}
