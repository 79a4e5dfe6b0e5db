/* tool_format.c — the family table, the call text, and reading calls out of
 * an answer in whichever family's syntax it is (see tool_format.h). */
#include "common/text/tool_format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/text/tool_scan.h"
#include "common/xalloc.h"

const tool_format_t *const tool_format_all[] = {&tool_format_hermes, &tool_format_mistral, &tool_format_llama3,
                                                NULL};

const tool_format_t *tool_format_find(const char *name)
{
    for (size_t i = 0; name && tool_format_all[i]; i++)
        if (strcmp(tool_format_all[i]->name, name) == 0)
            return tool_format_all[i];
    return NULL;
}

char *tool_format_call_text(const tool_format_t *f, const char *name, const char *args)
{
    size_t n = strlen(f->call_open) + strlen(name) + strlen(f->args_key) + strlen(args) +
               strlen(f->call_close) + 32;
    char *out = xmalloc(n);
    snprintf(out, n, "%s{\"name\": \"%s\", \"%s\": %s}%s", f->call_open, name, f->args_key, args,
             f->call_close);
    return out;
}

/* ---- reading ---------------------------------------------------------- */

int tool_format_bare_match(const tool_format_t *f, const char *s, size_t i, size_t n)
{
    for (const char *c = f->bare_open; *c; c++) {
        if (c != f->bare_open)
            i = tool_scan_skip_ws(s, i, n);
        if (i == n)
            return -1;
        if (s[i++] != *c)
            return 0;
    }
    return 1;
}

size_t tool_format_extract(const char *text, size_t len, char *const *names, size_t n_names,
                           tool_call_t **calls, size_t *content_len)
{
    *calls = NULL;
    *content_len = len;
    /* the earliest tag of any family */
    const tool_format_t *tagged = NULL;
    size_t start = len;
    for (size_t k = 0; tool_format_all[k]; k++) {
        const tool_format_t *f = tool_format_all[k];
        const char *p = f->tag ? memmem(text, len, f->tag, strlen(f->tag)) : NULL;
        if (p && (size_t)(p - text) < start) {
            start = (size_t)(p - text);
            tagged = f;
        }
    }
    size_t n = 0;
    if (tagged) {
        n = tagged->parse_tagged(text, start, len, calls);
    } else { /* untagged: the whole answer is the calls */
        size_t i = tool_scan_skip_ws(text, 0, len);
        for (size_t k = 0; tool_format_all[k]; k++) {
            const char *pre = tool_format_all[k]->bare_prefix;
            if (pre && tool_scan_at(text, i, len, pre))
                i = tool_scan_skip_ws(text, i + strlen(pre), len);
        }
        start = 0;
        for (size_t k = 0; tool_format_all[k] && n == 0; k++) {
            const tool_format_t *f = tool_format_all[k];
            if (f->bare_open && i < len && text[i] == f->bare_open[0])
                n = f->parse_bare(text, i, len, names, n_names, calls);
        }
    }
    if (n == 0)
        return 0;
    while (start > 0 && tool_scan_is_ws(text[start - 1]))
        start--;
    *content_len = start;
    return n;
}

size_t tool_format_safe_prefix(const char *text, size_t len)
{
    size_t i = tool_scan_skip_ws(text, 0, len);
    if (i == len)
        return 0; /* only white space so far: a call may still begin */
    for (size_t k = 0; tool_format_all[k]; k++) {
        const tool_format_t *f = tool_format_all[k];
        /* may be an untagged call: hold everything */
        if (f->bare_prefix && (tool_scan_at(text, i, len, f->bare_prefix) ||
                               tool_scan_partial_suffix(text + i, len - i, f->bare_prefix) == len - i))
            return 0;
        if (f->bare_open && tool_format_bare_match(f, text, i, len) != 0)
            return 0;
    }
    size_t cut = len, part = 0;
    for (size_t k = 0; tool_format_all[k]; k++) {
        const char *tag = tool_format_all[k]->tag;
        if (!tag)
            continue;
        const char *p = memmem(text, len, tag, strlen(tag));
        if (p && (size_t)(p - text) < cut)
            cut = (size_t)(p - text);
        size_t m = tool_scan_partial_suffix(text, len, tag);
        part = m > part ? m : part;
    }
    return cut < len ? cut : len - part;
}
