/* tool_format_kit.c — the helpers the family modules (tool_format_<family>.c)
 * build their parsers from, declared in tool_format.h's "for the family
 * modules" part: apart from tool_format.c, which holds the table of the
 * families, so no file both lists a family and is called by it. */
#include "common/text/tool_format.h"

#include <stdlib.h>
#include <string.h>

#include "common/text/tool_scan.h"
#include "common/xalloc.h"

json_t *tool_format_json_at(const char *s, size_t i, size_t n, size_t *end)
{
    json_error_t je;
    json_t *v = json_loadb(s + i, n - i, JSON_DISABLE_EOF_CHECK | JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
    if (v)
        *end = i + (size_t)je.position;
    return v;
}

bool tool_format_add_call(const json_t *obj, const char *s, size_t i, size_t n, char *const *names,
                          size_t n_names, tool_call_t **calls, size_t *k)
{
    if (!json_is_object(obj) || *k >= TOOL_FORMAT_MAX_CALLS)
        return false;
    json_t *name = json_object_get(obj, "name");
    if (!json_is_string(name) || json_string_length(name) == 0)
        return false;
    if (names) {
        bool found = false;
        for (size_t j = 0; j < n_names && !found; j++)
            found = strcmp(names[j], json_string_value(name)) == 0;
        if (!found)
            return false;
    }
    tool_call_t c = {.name = xstrdup(json_string_value(name)),
                     .arguments = tool_scan_args_of(s + i, n - i, NULL)};
    *calls = xrealloc(*calls, (*k + 1) * sizeof **calls);
    (*calls)[(*k)++] = c;
    return true;
}

void tool_calls_free(tool_call_t *calls, size_t n)
{
    for (size_t i = 0; calls && i < n; i++) {
        free(calls[i].name);
        free(calls[i].arguments);
    }
    free(calls);
}

size_t tool_format_fail(tool_call_t **calls, size_t k)
{
    tool_calls_free(*calls, k);
    *calls = NULL;
    return 0;
}
