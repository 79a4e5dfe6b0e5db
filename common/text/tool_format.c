/* tool_format.c — the family table and the call text (see tool_format.h). */
#include "common/text/tool_format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
