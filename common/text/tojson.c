/* tojson.c — Jinja's tojson filter as chat templates expect it (see
 * tojson.h). */
#include "common/text/tojson.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* JSON string literal of s as Python's json.dumps(ensure_ascii=False) writes
 * it (what transformers' tojson filter does). */
void tojson_put_string(strbuf_t *sb, const char *s)
{
    strbuf_puts(sb, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        switch (*p) {
        case '"': strbuf_puts(sb, "\\\""); break;
        case '\\': strbuf_puts(sb, "\\\\"); break;
        case '\n': strbuf_puts(sb, "\\n"); break;
        case '\r': strbuf_puts(sb, "\\r"); break;
        case '\t': strbuf_puts(sb, "\\t"); break;
        case '\b': strbuf_puts(sb, "\\b"); break;
        case '\f': strbuf_puts(sb, "\\f"); break;
        default:
            if (*p < 0x20) {
                snprintf(esc, sizeof(esc), "\\u%04x", *p);
                strbuf_puts(sb, esc);
            } else {
                strbuf_append(sb, (const char *)p, 1);
            }
        }
    }
    strbuf_puts(sb, "\"");
}

/* A double as JavaScript's Number#toString writes it (what @huggingface/jinja's
 * tojson does): integral values without a fraction, otherwise the shortest
 * digits that read back to the same double. */
static void put_js_number(strbuf_t *sb, double v)
{
    char b[40];
    if (!isfinite(v)) {
        strbuf_puts(sb, "null");
        return;
    }
    if (v == floor(v) && fabs(v) < 1e21) {
        snprintf(b, sizeof b, "%.0f", v);
        strbuf_puts(sb, b);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(b, sizeof b, "%.*g", prec, v);
        if (strtod(b, NULL) == v)
            break;
    }
    /* C writes 1e-07 / 1e+21; JavaScript 1e-7 / 1e+21 */
    char *e = strchr(b, 'e');
    if (e) {
        char *d = e + 2;
        while (d[0] == '0' && d[1])
            memmove(d, d + 1, strlen(d));
    }
    strbuf_puts(sb, b);
}

static void put_value(strbuf_t *sb, const json_t *v, int indent, int depth)
{
    switch (json_typeof(v)) {
    case JSON_NULL: strbuf_puts(sb, "null"); return;
    case JSON_TRUE: strbuf_puts(sb, "true"); return;
    case JSON_FALSE: strbuf_puts(sb, "false"); return;
    case JSON_INTEGER: {
        char b[32];
        snprintf(b, sizeof b, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        strbuf_puts(sb, b);
        return;
    }
    case JSON_REAL: put_js_number(sb, json_real_value(v)); return;
    case JSON_STRING: tojson_put_string(sb, json_string_value(v)); return;
    default: break;
    }
    bool arr = json_is_array(v);
    size_t n = arr ? json_array_size(v) : json_object_size(v);
    strbuf_puts(sb, arr ? "[" : "{");
    if (n == 0) {
        strbuf_puts(sb, arr ? "]" : "}");
        return;
    }
    size_t i = 0;
    const char *key;
    const json_t *val;
    void *it = arr ? NULL : json_object_iter((json_t *)v);
    for (i = 0; i < n; i++) {
        if (i > 0)
            strbuf_puts(sb, indent > 0 ? "," : ", ");
        if (indent > 0) {
            strbuf_puts(sb, "\n");
            for (int k = 0; k < indent * (depth + 1); k++)
                strbuf_puts(sb, " ");
        }
        if (arr) {
            val = json_array_get(v, i);
        } else {
            key = json_object_iter_key(it);
            val = json_object_iter_value(it);
            it = json_object_iter_next((json_t *)v, it);
            tojson_put_string(sb, key);
            strbuf_puts(sb, ": ");
        }
        put_value(sb, val, indent, depth + 1);
    }
    if (indent > 0) {
        strbuf_puts(sb, "\n");
        for (int k = 0; k < indent * depth; k++)
            strbuf_puts(sb, " ");
    }
    strbuf_puts(sb, arr ? "]" : "}");
}

void tojson_put(strbuf_t *sb, const json_t *v, int indent) { put_value(sb, v, indent, 0); }
