/* request.c — the internal request: its one initializer, the knob ranges,
 * warnings, limits and release (see request.h). */
#include "gateway/request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/oai_error.h"

void request_init(request_t *r, request_kind_t kind, request_op_t op)
{
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->op = op;
    r->max_tokens = -1;
    proto_knobs_default(&r->knobs);
    r->n = 1;
    r->parallel_tool_calls = true;
    r->add_special = true;
}

const proto_knob_row_t *request_check_knobs(const request_t *r)
{
    for (int i = 0; i < PROTO_N_KNOBS; i++)
        if (!proto_knob_in_range(&proto_knob_rows[i], proto_knob_get(&r->knobs, &proto_knob_rows[i]), true))
            return &proto_knob_rows[i];
    return NULL;
}

void request_warning_add(char *warn, size_t cap, const char *heading, const char *what)
{
    size_t n = strnlen(warn, cap);
    if (n + 1 >= cap)
        return;
    /* the heading is new when it is not the one the text ends under */
    const char *last = NULL;
    for (const char *p = warn; (p = strstr(p, heading)) != NULL; p++)
        last = p;
    bool same = last && !strchr(last, ';');
    snprintf(warn + n, cap - n, "%s%s%s%s", same ? ", " : n ? "; " : "", same ? "" : heading,
             same ? "" : ": ", what);
}

void request_free(request_t *r)
{
    if (!r)
        return;
    for (size_t i = 0; r->inputs && i < r->n_inputs; i++) {
        free(r->inputs[i].text);
        free(r->inputs[i].ids);
    }
    free(r->inputs);
    free(r->model);
    for (size_t i = 0; i < r->n_messages; i++) {
        free(r->messages[i].content);
        free(r->messages[i].name);
        free(r->messages[i].tool_calls_json);
        free(r->messages[i].tool_call_id);
        for (size_t k = 0; k < r->messages[i].n_parts; k++)
            free(r->messages[i].parts[k].text);
        free(r->messages[i].parts);
    }
    for (size_t i = 0; i < r->n_images; i++) {
        free(r->images[i].bytes);
        free(r->images[i].url);
        free(r->images[i].param);
        free(r->images[i].rgb);
        for (size_t t = 0; r->images[i].tiles && t < (size_t)r->images[i].nx * r->images[i].ny; t++)
            free(r->images[i].tiles[t].rgb);
        free(r->images[i].tiles);
    }
    free(r->images);
    free(r->tools_json);
    for (size_t i = 0; i < r->n_tools; i++)
        free(r->tool_names[i]);
    free(r->tool_names);
    free(r->tool_custom);
    free(r->tool_choice_name);
    free(r->messages);
    free(r->prompt);
    free(r->prompt_tokens);
    for (size_t i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    free(r->stop);
    free(r->logit_bias);
    free(r->user);
    free(r->grammar);
    free(r->warning);
    free(r->affinity_key);
    free(r->cache_salt);
    free(r->lora_base);
    for (size_t i = 0; i < r->n_adapters; i++)
        free(r->adapters[i].name);
    memset(r, 0, sizeof(*r));
}

const char *request_role_name(request_role_t r)
{
    switch (r) {
    case REQUEST_ROLE_SYSTEM: return "system";
    case REQUEST_ROLE_USER: return "user";
    case REQUEST_ROLE_ASSISTANT: return "assistant";
    case REQUEST_ROLE_TOOL: return "tool";
    }
    return "?";
}

/* A 400 naming param; returns -1. */
static int refuse(oai_error_t *e, const char *param, const char *what, size_t n)
{
    oai_error_set(e, 400, param, what, n);
    return -1;
}

int request_check_limits(const request_t *r, size_t max_messages, size_t max_text_bytes, oai_error_t *e)
{
    if (r->kind == REQUEST_CHAT) {
        if (max_messages && r->n_messages > max_messages) {
            oai_error_set(e, 400, "messages", "'messages' has %zu messages; this server accepts at most %zu.",
                          r->n_messages, max_messages);
            return -1;
        }
        size_t total = 0;
        for (size_t i = 0; i < r->n_messages; i++)
            total += r->messages[i].content_len;
        if (max_text_bytes && total > max_text_bytes)
            return refuse(e, "messages", "The messages are longer than %zu bytes in total.", max_text_bytes);
    } else if (r->prompt && max_text_bytes && r->prompt_len > max_text_bytes) {
        return refuse(e, "prompt", "'prompt' is longer than %zu bytes.", max_text_bytes);
    } else if (r->op == REQUEST_OP_EMBED && max_text_bytes) {
        size_t total = 0;
        for (size_t i = 0; i < r->n_inputs; i++)
            total += r->inputs[i].text_len;
        if (total > max_text_bytes)
            return refuse(e, "input", "'input' is longer than %zu bytes in all.", max_text_bytes);
    }
    return 0;
}
