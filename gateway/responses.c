/* responses.c — the OpenAI Responses API: body (+ stored conversation) →
 * chat request, answer → response object / typed event stream, stored
 * responses (responses.h, resp_store.h). */
#include "gateway/responses.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/xalloc.h"
#include "gateway/answer.h"
#include "gateway/request_image.h"

/* ====================================================================== */
/* request                                                                 */
/* ====================================================================== */

static int bad(oai_error_t *e, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(oai_error_t *e, const char *param, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    oai_error_vset(e, 400, NULL, fmt, ap);
    va_end(ap);
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    return -1;
}

static bool present(json_t *v)
{
    return v && !json_is_null(v);
}

static json_t *new_id(const char *prefix)
{
    char id[48];
    oai_id_new(prefix, id, sizeof id);
    return json_string(id);
}

/* Text of a string or of an array of text parts of the given types
 * (joined with "\n"); NULL with a 400 otherwise. New reference. */
static json_t *parts_text(json_t *v, const char *param, oai_error_t *e)
{
    if (json_is_string(v))
        return json_incref(v);
    if (!json_is_array(v)) {
        bad(e, param, "'%s' must be a string or an array of text parts.", param);
        return NULL;
    }
    size_t total = 0, i;
    json_t *p;
    json_array_foreach(v, i, p) {
        const char *ty = json_string_value(json_object_get(p, "type"));
        json_t *t = json_object_get(p, "text");
        if (ty && (strcmp(ty, "input_image") == 0 || strcmp(ty, "input_file") == 0 ||
                   strcmp(ty, "input_audio") == 0)) {
            bad(e, param, "'%s[%zu]': content of type '%s' is not supported here%s.", param, i, ty,
                strcmp(ty, "input_image") == 0 ? " (images are accepted in user messages)" : "");
            return NULL;
        }
        if (!ty || (strcmp(ty, "input_text") != 0 && strcmp(ty, "output_text") != 0 && strcmp(ty, "text") != 0) ||
            !json_is_string(t)) {
            bad(e, param, "'%s[%zu]' must be an input_text or output_text part with a string 'text'.", param, i);
            return NULL;
        }
        total += json_string_length(t) + 1;
        if (total > OAI_MAX_TEXT_BYTES) {
            bad(e, param, "'%s' is longer than %u bytes.", param, OAI_MAX_TEXT_BYTES);
            return NULL;
        }
    }
    char *buf = xmalloc(total + 1);
    size_t o = 0;
    json_array_foreach(v, i, p) {
        json_t *t = json_object_get(p, "text");
        if (i)
            buf[o++] = '\n';
        memcpy(buf + o, json_string_value(t), json_string_length(t));
        o += json_string_length(t);
    }
    json_t *s = json_stringn(buf, o);
    free(buf);
    return s;
}

static bool has_image(json_t *v)
{
    size_t i;
    json_t *p;
    json_array_foreach(v, i, p) {
        const char *ty = json_string_value(json_object_get(p, "type"));
        if (ty && strcmp(ty, "input_image") == 0)
            return true;
    }
    return false;
}

/* A user message's content holding input_image parts, normalized part by
 * part: {"type":"input_text","text"} and {"type":"input_image","image_url"}
 * (a data: URL, checked by the chat parser); `file_id` is refused (there is
 * no file store). New reference, or NULL + 400. */
static json_t *parts_with_images(json_t *v, const char *param, oai_error_t *e)
{
    json_t *out = json_array();
    size_t i;
    json_t *p;
    json_array_foreach(v, i, p) {
        const char *ty = json_string_value(json_object_get(p, "type"));
        json_t *t = json_object_get(p, "text");
        if (ty && strcmp(ty, "input_image") == 0) {
            json_t *u = json_object_get(p, "image_url");
            if (!present(u) && present(json_object_get(p, "file_id"))) {
                bad(e, param, "'%s[%zu].file_id': file inputs are not supported; send the image as "
                              "'image_url' with a data:image/...;base64, URL.", param, i);
                goto fail;
            }
            if (!json_is_string(u)) {
                bad(e, param, "'%s[%zu].image_url' must be a string (a data:image/...;base64, URL).", param, i);
                goto fail;
            }
            /* checked here too, so a refusal names this surface's field */
            char up[112];
            snprintf(up, sizeof up, "%s[%zu].image_url", param, i);
            request_t probe;
            request_init(&probe, REQUEST_CHAT, REQUEST_OP_GENERATE);
            int rc = request_image_add_url(&probe, json_string_value(u), json_string_length(u), up, e);
            request_free(&probe);
            if (rc < 0)
                goto fail;
            json_array_append_new(out, json_pack("{s:s, s:O}", "type", "input_image", "image_url", u));
        } else if (ty && (strcmp(ty, "input_text") == 0 || strcmp(ty, "text") == 0) && json_is_string(t)) {
            json_array_append_new(out, json_pack("{s:s, s:O}", "type", "input_text", "text", t));
        } else {
            bad(e, param, "'%s[%zu]' must be an input_text part with a string 'text' or an input_image part.",
                param, i);
            goto fail;
        }
    }
    return out;
fail:
    json_decref(out);
    return NULL;
}

/* One input item → its normalized form (new reference), or NULL + 400. */
static json_t *norm_item(json_t *it, size_t i, oai_error_t *e)
{
    char param[64];
    snprintf(param, sizeof param, "input[%zu]", i);
    if (!json_is_object(it)) {
        bad(e, param, "'%s' must be an object.", param);
        return NULL;
    }
    const char *ty = json_string_value(json_object_get(it, "type"));
    json_t *id = json_object_get(it, "id");
    if (present(id) && (!json_is_string(id) || json_string_length(id) > 128)) {
        bad(e, param, "'%s.id' must be a string of at most 128 bytes.", param);
        return NULL;
    }
    if (!ty || strcmp(ty, "message") == 0) {
        const char *role = json_string_value(json_object_get(it, "role"));
        if (!role || (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system") &&
                      strcmp(role, "developer"))) {
            bad(e, param, "'%s.role' must be 'user', 'assistant', 'system' or 'developer'.", param);
            return NULL;
        }
        char cp[80];
        snprintf(cp, sizeof cp, "%s.content", param);
        json_t *content = json_object_get(it, "content");
        if (strcmp(role, "user") == 0 && json_is_array(content) && has_image(content)) {
            json_t *parts = parts_with_images(content, cp, e);
            if (!parts)
                return NULL;
            json_t *m = json_pack("{s:s, s:o, s:s, s:o, s:s}", "type", "message", "id",
                                  present(id) ? json_incref(id) : new_id("msg_"), "role", role, "content", parts,
                                  "status", "completed");
            return m;
        }
        json_t *text = parts_text(content, cp, e);
        if (!text)
            return NULL;
        bool asst = strcmp(role, "assistant") == 0;
        json_t *part = json_pack("{s:s, s:o}", "type", asst ? "output_text" : "input_text", "text", text);
        if (asst)
            json_object_set_new(part, "annotations", json_array());
        json_t *m = json_pack("{s:s, s:o, s:s, s:[o]}", "type", "message", "id",
                              present(id) ? json_incref(id) : new_id("msg_"), "role", role, "content", part);
        json_object_set_new(m, "status", json_string("completed"));
        return m;
    }
    if (strcmp(ty, "function_call") == 0 || strcmp(ty, "custom_tool_call") == 0) {
        bool custom = ty[0] == 'c';
        const char *akey = custom ? "input" : "arguments";
        json_t *call_id = json_object_get(it, "call_id"), *name = json_object_get(it, "name"),
               *args = json_object_get(it, akey), *ns = json_object_get(it, "namespace");
        if (!json_is_string(call_id) || !json_is_string(name) || !json_is_string(args) ||
            (present(ns) && !json_is_string(ns))) {
            bad(e, param, "'%s': a %s needs string 'call_id', 'name' and '%s'.", param, ty, akey);
            return NULL;
        }
        json_t *n = json_pack("{s:s, s:o, s:O, s:O, s:O, s:s}", "type", ty, "id",
                              present(id) ? json_incref(id) : new_id(custom ? "ctc_" : "fc_"), "call_id", call_id,
                              "name", name, akey, args, "status", "completed");
        if (present(ns))
            json_object_set(n, "namespace", ns);
        return n;
    }
    if (strcmp(ty, "additional_tools") == 0) {
        /* tools announced inside the input (Codex with a catalog model):
         * kept in the record, merged into `tools` (map_tools) */
        if (!json_is_array(json_object_get(it, "tools"))) {
            bad(e, param, "'%s.tools' must be an array.", param);
            return NULL;
        }
        return json_incref(it);
    }
    if (strcmp(ty, "function_call_output") == 0 || strcmp(ty, "custom_tool_call_output") == 0) {
        json_t *call_id = json_object_get(it, "call_id");
        if (!json_is_string(call_id)) {
            bad(e, param, "'%s.call_id' must be a string.", param);
            return NULL;
        }
        char op[80];
        snprintf(op, sizeof op, "%s.output", param);
        json_t *out = parts_text(json_object_get(it, "output"), op, e);
        if (!out)
            return NULL;
        return json_pack("{s:s, s:o, s:O, s:o, s:s}", "type", ty, "id",
                         present(id) ? json_incref(id) : new_id(ty[0] == 'c' ? "ctco_" : "fco_"), "call_id",
                         call_id, "output", out, "status", "completed");
    }
    if (strcmp(ty, "reasoning") == 0) /* never sent to the model: only its id is kept (docs/API.md) */
        return json_pack("{s:s, s:o, s:[]}", "type", "reasoning", "id", present(id) ? json_incref(id) : new_id("rs_"),
                         "summary");
    bad(e, param, "Input items of type '%.40s' are not supported; use message, function_call, "
                  "function_call_output, custom_tool_call or custom_tool_call_output.", ty);
    return NULL;
}

static json_t *norm_input(json_t *input, oai_error_t *e)
{
    if (!present(input)) {
        bad(e, "input", "Missing required parameter: 'input'.");
        return NULL;
    }
    if (json_is_string(input)) {
        json_t *part = json_pack("{s:s, s:O}", "type", "input_text", "text", input);
        return json_pack("[{s:s, s:o, s:s, s:[o], s:s}]", "type", "message", "id", new_id("msg_"), "role", "user",
                         "content", part, "status", "completed");
    }
    if (!json_is_array(input)) {
        bad(e, "input", "'input' must be a string or an array of input items.");
        return NULL;
    }
    if (json_array_size(input) > RESPONSES_MAX_ITEMS) {
        bad(e, "input", "'input' has more than %d items.", RESPONSES_MAX_ITEMS);
        return NULL;
    }
    json_t *items = json_array();
    size_t i;
    json_t *it;
    json_array_foreach(input, i, it) {
        json_t *n = norm_item(it, i, e);
        if (!n) {
            json_decref(items);
            return NULL;
        }
        json_array_append_new(items, n);
    }
    return items;
}

/* The name the model knows a call's tool by: its own, or for a tool of a
 * namespace the name map_tools gave it (tool_map). */
static json_t *model_name(json_t *tool_map, json_t *ns, json_t *name)
{
    if (!json_is_string(ns))
        return name;
    const char *k;
    json_t *v;
    json_object_foreach(tool_map, k, v)
        if (json_equal(json_object_get(v, "namespace"), ns) && json_equal(json_object_get(v, "name"), name))
            return json_object_get(v, "model_name");
    return name;
}

/* Conversation items (normalized) → chat messages appended to msgs. */
static void items_to_messages(json_t *items, json_t *msgs, json_t *tool_map)
{
    size_t i;
    json_t *it;
    json_array_foreach(items, i, it) {
        const char *ty = json_string_value(json_object_get(it, "type"));
        if (!ty)
            continue;
        if (strcmp(ty, "message") == 0) {
            json_t *parts = json_array();
            size_t k;
            json_t *p;
            json_array_foreach(json_object_get(it, "content"), k, p) {
                json_t *t = json_object_get(p, "text");
                const char *pty = json_string_value(json_object_get(p, "type"));
                if (json_is_string(t))
                    json_array_append_new(parts, json_pack("{s:s, s:O}", "type", "text", "text", t));
                else if (pty && strcmp(pty, "input_image") == 0)
                    json_array_append_new(parts, json_pack("{s:s, s:{s:O}}", "type", "image_url", "image_url",
                                                           "url", json_object_get(p, "image_url")));
            }
            json_array_append_new(msgs, json_pack("{s:O, s:o}", "role", json_object_get(it, "role"), "content",
                                                  parts));
        } else if (strcmp(ty, "function_call") == 0 || strcmp(ty, "custom_tool_call") == 0) {
            size_t n = json_array_size(msgs);
            json_t *last = n ? json_array_get(msgs, n - 1) : NULL;
            const char *lr = last ? json_string_value(json_object_get(last, "role")) : NULL;
            if (!lr || strcmp(lr, "assistant") != 0) {
                last = json_pack("{s:s, s:s}", "role", "assistant", "content", "");
                json_array_append_new(msgs, last);
            }
            json_t *calls = json_object_get(last, "tool_calls");
            if (!calls) {
                calls = json_array();
                json_object_set_new(last, "tool_calls", calls);
            }
            bool custom = ty[0] == 'c';
            json_array_append_new(calls, json_pack("{s:O, s:s, s:{s:O, s:O}}", "id", json_object_get(it, "call_id"),
                                                   "type", custom ? "custom" : "function",
                                                   custom ? "custom" : "function", "name",
                                                   model_name(tool_map, json_object_get(it, "namespace"), json_object_get(it, "name")),
                                                   custom ? "input" : "arguments",
                                                   json_object_get(it, custom ? "input" : "arguments")));
        } else if (strcmp(ty, "function_call_output") == 0 || strcmp(ty, "custom_tool_call_output") == 0) {
            json_array_append_new(msgs, json_pack("{s:s, s:O, s:O}", "role", "tool", "tool_call_id",
                                                  json_object_get(it, "call_id"), "content",
                                                  json_object_get(it, "output")));
        }
    }
}

static json_t *or_null(json_t *v)
{
    return present(v) ? v : json_null();
}

/* Hosted tools: run by OpenAI's servers, not by the client, so a local
 * server cannot offer them. Left out of the prompt with a warning; a
 * tool_choice that names one is a 400. Any other type is refused. */
static bool hosted_tool(const char *ty)
{
    static const char *const hosted[] = {
        "web_search", "web_search_preview", "web_search_preview_2025_03_11", "web_search_2025_08_26",
        "file_search", "code_interpreter", "image_generation", "computer_use", "computer_use_preview",
        "computer", "mcp", "local_shell", "shell", "apply_patch", "tool_search", NULL};
    for (size_t i = 0; hosted[i]; i++)
        if (strcmp(ty, hosted[i]) == 0)
            return true;
    return false;
}

/* One function or custom tool t (of namespace ns, NULL = none) → the chat
 * tool appended to out and its echo to etools; tool_map gets an entry for a
 * custom or namespaced tool (model_name → {namespace?, name, custom}). */
static int add_tool(json_t *t, const char *param, json_t *ns, json_t *out, json_t *etools, json_t *tool_map,
                    oai_error_t *e)
{
    const char *ty = json_string_value(json_object_get(t, "type"));
    bool custom = ty && strcmp(ty, "custom") == 0;
    json_t *name = json_object_get(t, "name");
    if (!json_is_string(name))
        return bad(e, param, "'%s.name' must be a string.", param);
    /* a namespaced tool keeps its own name when no other tool has it, else
     * NAMESPACE__NAME (tool names are [A-Za-z0-9_-]) */
    char mname[160];
    snprintf(mname, sizeof mname, "%s", json_string_value(name));
    if (ns) {
        bool taken = json_object_get(tool_map, mname) != NULL;
        size_t i;
        json_t *o;
        json_array_foreach(out, i, o) {
            json_t *f = json_object_get(o, json_string_value(json_object_get(o, "type")));
            taken = taken || json_equal(json_object_get(f, "name"), name);
        }
        if (taken)
            snprintf(mname, sizeof mname, "%.64s__%.64s", json_string_value(ns), json_string_value(name));
    }
    json_t *d = json_object_get(t, "description");
    if (custom) {
        json_t *fmt = json_object_get(t, "format"), *cfmt = NULL;
        if (present(fmt)) {
            const char *ft = json_string_value(json_object_get(fmt, "type"));
            if (!json_is_object(fmt) || !ft)
                return bad(e, param, "'%s.format' must be an object with a 'type'.", param);
            if (strcmp(ft, "grammar") == 0)
                cfmt = json_pack("{s:s, s:{s:O, s:O}}", "type", "grammar", "grammar", "syntax",
                                 or_null(json_object_get(fmt, "syntax")), "definition",
                                 or_null(json_object_get(fmt, "definition")));
            else
                cfmt = json_deep_copy(fmt);
        }
        json_t *c = json_pack("{s:s}", "name", mname);
        if (present(d))
            json_object_set(c, "description", d);
        if (cfmt)
            json_object_set_new(c, "format", cfmt);
        json_array_append_new(out, json_pack("{s:s, s:o}", "type", "custom", "custom", c));
        json_t *et = json_pack("{s:s, s:O, s:O, s:O}", "type", "custom", "name", name, "description", or_null(d),
                               "format", present(fmt) ? fmt : json_null());
        json_array_append_new(etools, et);
    } else {
        /* strict defaults to true in the Responses API (false in chat) */
        json_t *strict = json_object_get(t, "strict");
        json_t *fn = json_pack("{s:s, s:O}", "name", mname, "strict", present(strict) ? strict : json_true());
        const char *keys[] = {"description", "parameters"};
        for (int k = 0; k < 2; k++)
            if (present(json_object_get(t, keys[k])))
                json_object_set(fn, keys[k], json_object_get(t, keys[k]));
        json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", fn));
        json_t *et = json_pack("{s:s, s:O, s:O, s:O, s:O}", "type", "function", "name", name, "description",
                               or_null(d), "parameters", or_null(json_object_get(t, "parameters")), "strict",
                               json_is_boolean(strict) ? strict : json_true());
        json_array_append_new(etools, et);
    }
    if (ns)
        json_object_set(json_array_get(etools, json_array_size(etools) - 1), "namespace", ns);
    if (custom || ns) {
        json_t *m = json_pack("{s:O, s:s, s:b}", "name", name, "model_name", mname, "custom", custom);
        if (ns)
            json_object_set(m, "namespace", ns);
        json_object_set_new(tool_map, mname, m);
    }
    return 0;
}

/* The tools of one array (the request's, or an additional_tools item's). */
static int add_tools(json_t *tools, const char *where, json_t *out, json_t *etools, json_t *tool_map, char *warn,
                     size_t warnlen, oai_error_t *e)
{
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        char param[64];
        snprintf(param, sizeof param, "%s[%zu]", where, i);
        const char *ty = json_string_value(json_object_get(t, "type"));
        if (!json_is_object(t) || !ty)
            return bad(e, param, "'%s' must be an object with a 'type'.", param);
        if (strcmp(ty, "function") == 0 || strcmp(ty, "custom") == 0) {
            if (add_tool(t, param, NULL, out, etools, tool_map, e) < 0)
                return -1;
        } else if (strcmp(ty, "namespace") == 0) {
            json_t *ns = json_object_get(t, "name"), *inner = json_object_get(t, "tools");
            if (!json_is_string(ns) || !json_is_array(inner))
                return bad(e, param, "'%s': a namespace needs a string 'name' and an array 'tools'.", param);
            size_t k;
            json_t *it;
            json_array_foreach(inner, k, it) {
                char ip[96];
                snprintf(ip, sizeof ip, "%s.tools[%zu]", param, k);
                const char *ity = json_string_value(json_object_get(it, "type"));
                if (!json_is_object(it) || !ity || (strcmp(ity, "function") != 0 && strcmp(ity, "custom") != 0))
                    return bad(e, ip, "'%s': a namespace holds function and custom tools only.", ip);
                if (add_tool(it, ip, ns, out, etools, tool_map, e) < 0)
                    return -1;
            }
        } else if (hosted_tool(ty)) {
            request_warning_add(warn, warnlen, "tools left out (hosted tools this server does not run)", ty);
        } else {
            return bad(e, param, "Tools of type '%.40s' are not supported; use function, custom or namespace "
                                 "tools.", ty);
        }
    }
    return 0;
}

static int map_tools(json_t *root, json_t *items, json_t *chat, json_t *echo, json_t *tool_map, char *warn,
                     size_t warnlen, oai_error_t *e)
{
    json_t *tools = json_object_get(root, "tools");
    json_t *etools = json_array();
    json_object_set_new(echo, "tools", etools);
    json_t *out = json_array();
    json_object_set_new(chat, "tools", out);
    if (present(tools)) {
        if (!json_is_array(tools))
            return bad(e, "tools", "'tools' must be an array.");
        if (add_tools(tools, "tools", out, etools, tool_map, warn, warnlen, e) < 0)
            return -1;
    }
    size_t i;
    json_t *it;
    json_array_foreach(items, i, it)
        if (json_is_string(json_object_get(it, "type")) &&
            strcmp(json_string_value(json_object_get(it, "type")), "additional_tools") == 0) {
            char where[48];
            snprintf(where, sizeof where, "input[%zu].tools", i);
            if (add_tools(json_object_get(it, "tools"), where, out, etools, tool_map, warn, warnlen, e) < 0)
                return -1;
        }
    if (json_array_size(out) == 0)
        json_object_del(chat, "tools");
    json_t *tc = json_object_get(root, "tool_choice");
    if (!present(tc)) {
        json_object_set_new(echo, "tool_choice", json_string("auto"));
        return 0;
    }
    json_object_set(echo, "tool_choice", tc);
    if (json_is_string(tc)) {
        json_object_set(chat, "tool_choice", tc); /* auto / none / required, checked there */
        return 0;
    }
    const char *ty = json_string_value(json_object_get(tc, "type"));
    json_t *name = json_object_get(tc, "name");
    if (json_is_object(tc) && ty && hosted_tool(ty))
        return bad(e, "tool_choice", "'tool_choice' names the hosted tool '%.40s', which this server does not run.",
                   ty);
    if (!json_is_object(tc) || !ty || (strcmp(ty, "function") != 0 && strcmp(ty, "custom") != 0) ||
        !json_is_string(name))
        return bad(e, "tool_choice", "'tool_choice' must be 'auto', 'none', 'required', "
                                     "{\"type\":\"function\",\"name\":...} or {\"type\":\"custom\",\"name\":...}.");
    /* the model's name of the tool (a namespaced one may have been renamed) */
    json_t *mn = model_name(tool_map, json_object_get(tc, "namespace"), name);
    json_object_set_new(chat, "tool_choice",
                        json_pack("{s:s, s:{s:O}}", "type", ty, ty, "name", mn));
    return 0;
}

static int map_text(json_t *root, json_t *chat, json_t *echo, oai_error_t *e)
{
    json_t *text = json_object_get(root, "text");
    json_t *fmt = present(text) ? json_object_get(text, "format") : NULL;
    if (present(text) && !json_is_object(text))
        return bad(e, "text", "'text' must be an object.");
    if (!present(fmt)) {
        json_object_set_new(echo, "text", json_pack("{s:{s:s}}", "format", "type", "text"));
        return 0;
    }
    const char *ty = json_string_value(json_object_get(fmt, "type"));
    if (!json_is_object(fmt) || !ty)
        return bad(e, "text.format", "'text.format' must be an object with a 'type'.");
    json_object_set_new(echo, "text", json_pack("{s:O}", "format", fmt));
    if (strcmp(ty, "text") == 0 || strcmp(ty, "json_object") == 0) {
        json_object_set_new(chat, "response_format", json_pack("{s:s}", "type", ty));
        return 0;
    }
    if (strcmp(ty, "json_schema") != 0)
        return bad(e, "text.format.type", "'text.format.type' must be 'text', 'json_object' or 'json_schema'.");
    json_t *js = json_object();
    const char *keys[] = {"name", "schema", "strict", "description"};
    for (int k = 0; k < 4; k++)
        if (present(json_object_get(fmt, keys[k])))
            json_object_set(js, keys[k], json_object_get(fmt, keys[k]));
    if (!json_object_get(js, "name")) {
        json_decref(js);
        return bad(e, "text.format.name", "'text.format.name' is required for json_schema.");
    }
    json_object_set_new(chat, "response_format", json_pack("{s:s, s:o}", "type", "json_schema", "json_schema", js));
    return 0;
}

static int map_reasoning(json_t *root, json_t *chat, json_t *echo, oai_error_t *e)
{
    json_t *r = json_object_get(root, "reasoning");
    if (!present(r)) {
        json_object_set_new(echo, "reasoning", json_pack("{s:n, s:n}", "effort", "summary"));
        return 0;
    }
    if (!json_is_object(r))
        return bad(e, "reasoning", "'reasoning' must be an object.");
    json_object_set_new(echo, "reasoning", json_pack("{s:O, s:O}", "effort",
                                                     present(json_object_get(r, "effort")) ? json_object_get(r, "effort") : json_null(),
                                                     "summary",
                                                     present(json_object_get(r, "summary")) ? json_object_get(r, "summary") : json_null()));
    json_t *sum = json_object_get(r, "summary");
    if (present(sum) && !json_is_string(sum))
        return bad(e, "reasoning.summary", "'reasoning.summary' must be a string.");
    json_t *eff = json_object_get(r, "effort");
    if (!present(eff))
        return 0;
    const char *s = json_string_value(eff);
    if (!s || (strcmp(s, "none") && strcmp(s, "minimal") && strcmp(s, "low") && strcmp(s, "medium") &&
               strcmp(s, "high") && strcmp(s, "xhigh")))
        return bad(e, "reasoning.effort", "'reasoning.effort' must be none, minimal, low, medium or high.");
    bool on = strcmp(s, "none") != 0 && strcmp(s, "minimal") != 0;
    json_object_set_new(chat, "chat_template_kwargs", json_pack("{s:b}", "enable_thinking", on));
    return 0;
}

static int check_metadata(json_t *md, oai_error_t *e)
{
    if (!json_is_object(md))
        return bad(e, "metadata", "'metadata' must be an object of strings.");
    if (json_object_size(md) > RESPONSES_MAX_METADATA)
        return bad(e, "metadata", "'metadata' has more than %d keys.", RESPONSES_MAX_METADATA);
    const char *k;
    json_t *v;
    json_object_foreach(md, k, v)
        if (strlen(k) > 64 || !json_is_string(v) || json_string_length(v) > 512)
            return bad(e, "metadata", "'metadata' keys are at most 64 characters and values strings of at "
                                      "most 512.");
    return 0;
}

static void copy(json_t *from, const char *key, json_t *to, const char *as)
{
    json_t *v = json_object_get(from, key);
    if (present(v))
        json_object_set(to, as, v);
}


/* The whole translation; fills out (but not out->chat) and returns the chat body. */
static json_t *translate(json_t *root, responses_load_fn load, void *load_ctx, responses_request_t *out,
                         char *warn, size_t warnlen, oai_error_t *e)
{
    json_t *chat = json_object();
    json_t *msgs = json_array();
    json_object_set_new(chat, "messages", msgs);
    json_t *echo = out->echo = json_object();
    copy(root, "model", chat, "model");
    const char *refused[] = {"conversation", "prompt"};
    for (int k = 0; k < 2; k++)
        if (present(json_object_get(root, refused[k]))) {
            bad(e, refused[k], "'%s' is not supported by this server.", refused[k]);
            goto err;
        }
    json_t *bg = json_object_get(root, "background");
    if (present(bg) && !json_is_boolean(bg)) {
        bad(e, "background", "'background' must be a boolean.");
        goto err;
    }
    if (json_is_true(bg)) {
        bad(e, "background", "'background': true is not supported by this server.");
        goto err;
    }
    /* accepted and not used, but of their API's type */
    const char *strings[] = {"service_tier", "safety_identifier"};
    for (int k = 0; k < 2; k++) {
        json_t *v = json_object_get(root, strings[k]);
        if (present(v) && !json_is_string(v)) {
            bad(e, strings[k], "'%s' must be a string.", strings[k]);
            goto err;
        }
    }
    const char *ints[] = {"max_tool_calls", "top_logprobs"};
    for (int k = 0; k < 2; k++) {
        json_t *v = json_object_get(root, ints[k]);
        if (present(v) && !json_is_integer(v)) {
            bad(e, ints[k], "'%s' must be an integer.", ints[k]);
            goto err;
        }
    }
    json_t *tr = json_object_get(root, "truncation");
    if (present(tr) && (!json_is_string(tr) || strcmp(json_string_value(tr), "disabled") != 0)) {
        bad(e, "truncation", "Only 'truncation': 'disabled' is supported.");
        goto err;
    }
    out->store = true;
    json_t *st = json_object_get(root, "store");
    if (present(st)) {
        if (!json_is_boolean(st)) {
            bad(e, "store", "'store' must be a boolean.");
            goto err;
        }
        out->store = json_is_true(st);
    }
    json_t *ins = json_object_get(root, "instructions");
    if (present(ins)) {
        if (!json_is_string(ins)) {
            bad(e, "instructions", "'instructions' must be a string.");
            goto err;
        }
        json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "system", "content", ins));
    }
    json_object_set(echo, "instructions", or_null(ins));
    out->context = json_array();
    json_t *prev = json_object_get(root, "previous_response_id");
    if (present(prev)) {
        if (!json_is_string(prev) || json_string_length(prev) == 0 || json_string_length(prev) > 128) {
            bad(e, "previous_response_id", "'previous_response_id' must be a response id.");
            goto err;
        }
        json_t *ctx = NULL;
        int rc = load ? load(load_ctx, json_string_value(prev), &ctx) : 1;
        if (rc == 1) {
            oai_error_set(e, 404, "previous_response_id", "Previous response with id '%.128s' not found.",
                          json_string_value(prev));
            goto err;
        }
        if (rc < 0 || !json_is_array(ctx)) {
            json_decref(ctx);
            oai_error_set(e, 500, "previous_response_id", "The stored responses could not be read.");
            goto err;
        }
        json_array_extend(out->context, ctx);
        json_decref(ctx);
        out->previous_id = xstrdup(json_string_value(prev));
        out->n_previous = json_array_size(out->context);
    }
    json_object_set(echo, "previous_response_id", or_null(prev));
    out->input = norm_input(json_object_get(root, "input"), e);
    if (!out->input)
        goto err;
    json_array_extend(out->context, out->input);
    if (json_array_size(out->context) > RESPONSES_MAX_ITEMS) {
        bad(e, "input", "The conversation has more than %d items.", RESPONSES_MAX_ITEMS);
        goto err;
    }
    out->tool_map = json_object();
    if (map_tools(root, out->input, chat, echo, out->tool_map, warn, warnlen, e) < 0)
        goto err;
    items_to_messages(out->context, msgs, out->tool_map);
    if (json_array_size(msgs) == 0) {
        bad(e, "input", "'input' must contain at least one message.");
        goto err;
    }
    json_t *mot = json_object_get(root, "max_output_tokens");
    if (present(mot) && (!json_is_integer(mot) || json_integer_value(mot) < 1)) {
        bad(e, "max_output_tokens", "'max_output_tokens' must be an integer >= 1.");
        goto err;
    }
    copy(root, "max_output_tokens", chat, "max_tokens");
    json_object_set(echo, "max_output_tokens", or_null(mot));
    const char *same[] = {"temperature", "top_p", "seed", "parallel_tool_calls", "stream", "user", "cache_salt"};
    for (int k = 0; k < 7; k++)
        copy(root, same[k], chat, same[k]);
    json_t *md = json_object_get(root, "metadata");
    if (present(md) && check_metadata(md, e) < 0)
        goto err;
    json_object_set_new(echo, "metadata", present(md) ? json_incref(md) : json_object());
    if (map_text(root, chat, echo, e) < 0 || map_reasoning(root, chat, echo, e) < 0)
        goto err;
    /* accepted and not needed here: include (reasoning.encrypted_content: the
     * reasoning items are plain), client_metadata, service_tier,
     * safety_identifier; prompt_cache_key is a routing affinity */
    json_t *pck = json_object_get(root, "prompt_cache_key");
    if (present(pck) && (!json_is_string(pck) || json_string_length(pck) > 256)) {
        bad(e, "prompt_cache_key", "'prompt_cache_key' must be a string of at most 256 bytes.");
        goto err;
    }
    json_t *inc = json_object_get(root, "include");
    bool strs = json_is_array(inc);
    for (size_t k = 0; strs && k < json_array_size(inc); k++)
        strs = json_is_string(json_array_get(inc, k));
    if (present(inc) && !strs) {
        bad(e, "include", "'include' must be an array of strings.");
        goto err;
    }
    return chat;
err:
    json_decref(chat);
    return NULL;
}

/* Refusals after the chat parse (allow list, fetch) name the Responses
 * field: the input's images are the request's last ones, in order; earlier
 * turns' images are named by previous_response_id. */
static void name_input_images(responses_request_t *out)
{
    char names[REQUEST_MAX_IMAGES][112];
    size_t n = 0, i, k;
    json_t *it, *p;
    json_array_foreach(out->input, i, it)
        json_array_foreach(json_object_get(it, "content"), k, p)
            if (n < REQUEST_MAX_IMAGES && json_is_string(json_object_get(p, "type")) &&
                strcmp(json_string_value(json_object_get(p, "type")), "input_image") == 0)
                snprintf(names[n++], sizeof names[0], "input[%zu].content[%zu].image_url", i, k);
    request_t *r = &out->chat;
    for (size_t j = 0; n <= r->n_images && j < r->n_images; j++) {
        free(r->images[j].param);
        r->images[j].param = xstrdup(j < r->n_images - n ? "previous_response_id" : names[j - (r->n_images - n)]);
    }
}

int responses_parse_request(const uint8_t *body, size_t len, responses_load_fn load, void *load_ctx,
                            responses_request_t *out, oai_error_t *err)
{
    memset(out, 0, sizeof *out);
    json_t *root = oai_load_body(body, len, err);
    if (!root)
        return -1;
    char warn[OAI_MAX_WARNING];
    warn[0] = '\0';
    json_t *chat = translate(root, load, load_ctx, out, warn, sizeof warn, err);
    if (!chat) {
        json_decref(root);
        responses_request_free(out);
        return -1;
    }
    int rc = oai_parse_chat_root(chat, &out->chat, err);
    json_decref(chat);
    if (rc == 0) {
        name_input_images(out);
        /* what the response repeats, with the parser's defaults */
        json_object_set_new(out->echo, "temperature", json_real(out->chat.temperature));
        json_object_set_new(out->echo, "top_p", json_real(out->chat.top_p));
        json_object_set_new(out->echo, "parallel_tool_calls", json_boolean(out->chat.parallel_tool_calls ||
                                                                          !out->chat.tools_json));
        json_object_set_new(out->echo, "store", json_boolean(out->store));
        json_object_set_new(out->echo, "truncation", json_string("disabled"));
        json_object_set(out->echo, "user", or_null(json_object_get(root, "user")));
        if (warn[0])
            out->chat.warning = xstrdup(warn);
        json_t *pck = json_object_get(root, "prompt_cache_key");
        if (json_is_string(pck) && json_string_length(pck))
            out->chat.affinity_key = xstrdup(json_string_value(pck));
    }
    json_decref(root);
    if (rc != 0)
        responses_request_free(out);
    return rc;
}

void responses_request_free(responses_request_t *r)
{
    if (!r)
        return;
    request_free(&r->chat);
    json_decref(r->input);
    json_decref(r->context);
    json_decref(r->echo);
    json_decref(r->tool_map);
    free(r->previous_id);
    memset(r, 0, sizeof *r);
}

/* ====================================================================== */
/* responses                                                               */
/* ====================================================================== */

static char *dump(json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!s)
        abort(); /* jansson fails only on OOM here */
    return s;
}

static json_t *usage_json(const oai_usage_t *u)
{
    return json_pack("{s:I, s:{s:I}, s:I, s:{s:I}, s:I}", "input_tokens", (json_int_t)u->prompt_tokens,
                     "input_tokens_details", "cached_tokens", (json_int_t)u->cached_tokens, "output_tokens",
                     (json_int_t)u->completion_tokens, "output_tokens_details", "reasoning_tokens", (json_int_t)0,
                     "total_tokens", (json_int_t)(u->prompt_tokens + u->completion_tokens));
}

/* The response object; takes output, usage, error, incomplete (NULL → null
 * / [] for output). */
static json_t *response_object(const char *id, const char *model, int64_t created, json_t *echo,
                               const char *status, json_t *output, json_t *usage, json_t *error,
                               json_t *incomplete)
{
    json_t *r = json_pack("{s:s, s:s, s:I, s:s, s:s}", "id", id, "object", "response", "created_at",
                          (json_int_t)created, "status", status, "model", model);
    json_object_set_new(r, "error", error ? error : json_null());
    json_object_set_new(r, "incomplete_details", incomplete ? incomplete : json_null());
    json_object_update(r, echo);
    json_object_set_new(r, "output", output ? output : json_array());
    json_object_set_new(r, "usage", usage ? usage : json_null());
    return r;
}

static json_t *text_part(const char *type, json_t *text)
{
    json_t *p = json_pack("{s:s, s:o}", "type", type, "text", text);
    if (strcmp(type, "output_text") == 0) {
        json_object_set_new(p, "annotations", json_array());
        json_object_set_new(p, "logprobs", json_array());
    }
    return p;
}

static json_t *reasoning_item(json_t *text)
{
    return json_pack("{s:s, s:o, s:[], s:[o]}", "type", "reasoning", "id", new_id("rs_"), "summary", "content",
                     text_part("reasoning_text", text));
}

static json_t *message_item(const char *status, json_t *text)
{
    return json_pack("{s:s, s:o, s:s, s:s, s:[o]}", "type", "message", "id", new_id("msg_"), "status", status,
                     "role", "assistant", "content", text_part("output_text", text));
}

/* A call's output item: function_call {call_id, name, arguments}, or for a
 * custom tool custom_tool_call {call_id, name, input} (the text decoded from
 * the model's {"input": ...}); a namespaced tool's carries its namespace
 * and own name (tool_map). args: the arguments written so far. */
static json_t *call_item(json_t *tool_map, const char *call_id, const char *name, const char *args, size_t len,
                         const char *status)
{
    json_t *m = json_object_get(tool_map, name);
    bool custom = json_is_true(json_object_get(m, "custom"));
    json_t *own = m ? json_object_get(m, "name") : NULL;
    json_t *it;
    if (custom) {
        size_t il;
        char *in = oai_custom_input(args, len, &il);
        it = json_pack("{s:s, s:o, s:s, s:s, s:o, s:s}", "type", "custom_tool_call", "id", new_id("ctc_"),
                       "call_id", call_id, "name", own ? json_string_value(own) : name, "input",
                       oai_json_text(in, il), "status", status);
        free(in);
    } else {
        it = json_pack("{s:s, s:o, s:s, s:s, s:o, s:s}", "type", "function_call", "id", new_id("fc_"), "call_id",
                       call_id, "name", own ? json_string_value(own) : name, "arguments",
                       oai_json_text(args, len), "status", status);
    }
    json_t *ns = json_object_get(m, "namespace");
    if (ns)
        json_object_set(it, "namespace", ns);
    return it;
}

/* status and incomplete_details for a finish. */
static const char *finish_status(proto_finish_t f, json_t **incomplete)
{
    *incomplete = NULL;
    if (f == PROTO_FINISH_LENGTH) {
        *incomplete = json_pack("{s:s}", "reason", "max_output_tokens");
        return "incomplete";
    }
    return "completed";
}

/* Queues a finished response for the store (resp_store.h): its object,
 * its input items, and what it continues (the parent's id; the parent's
 * conversation for when the parent is gone by then). done(ctx) when it is
 * written; done NULL: waits here. */
static resp_store_job_t *store_submit(resp_store_t *store, const char *owner, const char *id, int64_t created,
                                      json_t *resp, const responses_request_t *req, void (*done)(void *), void *ctx)
{
    json_t *prev = json_array();
    for (size_t i = 0; req->previous_id && i < req->n_previous; i++)
        json_array_append(prev, json_array_get(req->context, i));
    char *r = json_dumps(resp, JSON_COMPACT), *in = json_dumps(req->input, JSON_COMPACT), *c = dump(prev);
    resp_store_put_t p = {.id = id, .owner = owner, .now_s = created, .response = r, .input = in,
                          .parent = req->previous_id, .context = c};
    resp_store_job_t *job = resp_store_submit(store, &p, done, ctx);
    free(r);
    free(in);
    free(c);
    return job;
}

/* What the client is told about a store that did not happen ("store"
 * false and a warning, docs/API.md "Stored responses"); RESP_STORE_OK
 * leaves resp as it is. */
static void store_outcome(json_t *resp, int rc, const char *err)
{
    if (rc == RESP_STORE_OK)
        return;
    const char *code = rc == RESP_STORE_TOO_LARGE ? "store_quota"
                       : rc == RESP_STORE_FULL    ? "store_full"
                       : rc == RESP_STORE_BUSY    ? "store_busy"
                                                  : "store_error";
    json_object_set_new(resp, "store", json_false());
    json_object_set_new(resp, "warning",
                        json_pack("{s:s, s:s++}", "code", code, "message", "The response was not stored: ",
                                  err && *err ? err : "the store failed", "."));
}

/* The store's result for resp (waits for job; releases it). */
static void store_finish(json_t *resp, resp_store_job_t **job)
{
    char err[256] = "";
    int rc = resp_store_job_poll(*job, err, sizeof err);
    store_outcome(resp, rc, err);
    resp_store_job_release(job);
}

/* Stores resp now, waiting for the writer. */
static void store_now(resp_store_t *store, const char *owner, const char *id, int64_t created, json_t *resp,
                      const responses_request_t *req)
{
    char *r = json_dumps(resp, JSON_COMPACT), *in = json_dumps(req->input, JSON_COMPACT);
    json_t *prev = json_array();
    for (size_t i = 0; req->previous_id && i < req->n_previous; i++)
        json_array_append(prev, json_array_get(req->context, i));
    char *c = dump(prev), err[256] = "";
    resp_store_put_t p = {.id = id, .owner = owner, .now_s = created, .response = r, .input = in,
                          .parent = req->previous_id, .context = c};
    int rc = resp_store_put(store, &p, err, sizeof err);
    store_outcome(resp, rc, err);
    free(r);
    free(in);
    free(c);
}

/* The response object for a whole answer. */
static json_t *complete_object(const responses_meta_t *m, const responses_request_t *req, const char *text,
                               size_t len, proto_finish_t finish, const oai_usage_t *usage)
{
    answer_whole_t w;
    answer_whole_split(text, len, m->tool_names, m->n_tools, m->reasoning, true, &w);
    json_t *incomplete;
    const char *status = finish_status(finish, &incomplete);
    json_t *output = json_array();
    if (w.has_reasoning)
        json_array_append_new(output, reasoning_item(oai_json_text(w.reasoning, w.reasoning_len)));
    if (w.content_len || (!w.n_calls && !w.has_reasoning))
        json_array_append_new(output, message_item(status, oai_json_text(w.content, w.content_len)));
    for (size_t i = 0; i < w.n_calls; i++)
        json_array_append_new(output, call_item(req->tool_map, w.calls[i].id, w.calls[i].name, w.calls[i].arguments,
                                                strlen(w.calls[i].arguments), "completed"));
    answer_whole_clear(&w);
    return response_object(m->id, m->model, m->created, req->echo, status, output, usage_json(usage), NULL,
                           incomplete);
}

char *responses_complete_json(const responses_meta_t *m, const responses_request_t *req, const char *text,
                              size_t len, proto_finish_t finish, const oai_usage_t *usage)
{
    json_t *r = complete_object(m, req, text, len, finish, usage);
    if (req->store && m->store)
        store_now(m->store, m->owner ? m->owner : RESP_STORE_ANON, m->id, m->created, r, req);
    return dump(r);
}

/* ---- streaming --------------------------------------------------------- */

typedef enum { ITEM_NONE, ITEM_REASONING, ITEM_MESSAGE, ITEM_CALL, ITEM_CUSTOM } item_t;

struct responses_stream {
    char *id, *model, *owner;
    int64_t created;
    json_t *echo, *input, *context; /* references */
    char *previous_id;   /* previous_response_id, NULL */
    size_t n_previous;   /* items of context that came from it */
    void (*wake)(void *); /* the store's callback (responses_meta_t), NULL = wait */
    void *wake_ctx;
    resp_store_job_t *job; /* the store in flight at the end of the answer */
    json_t *final;       /* the response object waiting for it */
    json_t *tool_map;    /* reference: responses_request_t.tool_map */
    oai_custom_acc_t cacc; /* the open custom call's input so far */
    bool store;
    resp_store_t *rs;
    answer_t *ans;
    int64_t seq;         /* next sequence_number */
    bool started, done;
    json_t *output;      /* items so far (the open one included) */
    json_t *cur;         /* the open item, borrowed from output */
    item_t cur_kind;
    strbuf_t *out;
};

responses_stream_t *responses_stream_new(const responses_meta_t *m, const responses_request_t *req)
{
    responses_stream_t *st = xcalloc(1, sizeof *st);
    st->id = xstrdup(m->id);
    st->model = xstrdup(m->model);
    st->owner = xstrdup(m->owner ? m->owner : RESP_STORE_ANON);
    st->created = m->created;
    st->echo = json_incref(req->echo);
    st->tool_map = json_incref(req->tool_map);
    st->input = json_incref(req->input);
    st->context = json_incref(req->context);
    st->previous_id = req->previous_id ? xstrdup(req->previous_id) : NULL;
    st->n_previous = req->n_previous;
    st->wake = m->wake;
    st->wake_ctx = m->wake_ctx;
    st->store = req->store && m->store;
    st->rs = m->store;
    st->ans = answer_new(m->tool_names, m->n_tools, m->reasoning); /* names borrowed */
    st->output = json_array();
    return st;
}

void responses_stream_free(responses_stream_t **sp)
{
    responses_stream_t *st = *sp;
    if (!st)
        return;
    *sp = NULL;
    answer_free(&st->ans);
    resp_store_job_release(&st->job);
    json_decref(st->final);
    free(st->previous_id);
    oai_custom_acc_clear(&st->cacc);
    json_decref(st->tool_map);
    json_decref(st->echo);
    json_decref(st->input);
    json_decref(st->context);
    json_decref(st->output);
    free(st->id);
    free(st->model);
    free(st->owner);
    free(st);
}

/* One event: `type` and sequence_number added to data (taken). */
static void emit(responses_stream_t *st, const char *type, json_t *data)
{
    json_object_set_new(data, "type", json_string(type));
    json_object_set_new(data, "sequence_number", json_integer(st->seq++));
    api_sse(st->out, type, dump(data));
}

static json_t *snapshot(responses_stream_t *st, const char *status, json_t *usage, json_t *error,
                        json_t *incomplete)
{
    return response_object(st->id, st->model, st->created, st->echo, status, json_deep_copy(st->output), usage,
                           error, incomplete);
}

static json_int_t out_index(responses_stream_t *st)
{
    return (json_int_t)json_array_size(st->output) - 1;
}

/* Appends (p, n) to a JSON string member. */
static void append_to(json_t *obj, const char *key, const char *p, size_t n)
{
    json_t *old = json_object_get(obj, key);
    json_t *add = oai_json_text(p, n);
    size_t ol = json_string_length(old), al = json_string_length(add);
    char *buf = xmalloc(ol + al + 1);
    memcpy(buf, json_string_value(old), ol);
    memcpy(buf + ol, json_string_value(add), al);
    json_object_set_new(obj, key, json_stringn(buf, ol + al));
    free(buf);
    json_decref(add);
}

static void close_item(responses_stream_t *st, const char *status)
{
    json_t *item = st->cur;
    if (!item)
        return;
    json_int_t oi = out_index(st);
    json_t *iid = json_object_get(item, "id");
    if (st->cur_kind == ITEM_CALL) {
        emit(st, "response.function_call_arguments.done",
             json_pack("{s:O, s:I, s:O, s:O}", "item_id", iid, "output_index", oi, "name",
                       json_object_get(item, "name"), "arguments", json_object_get(item, "arguments")));
    } else if (st->cur_kind == ITEM_CUSTOM) {
        emit(st, "response.custom_tool_call_input.done",
             json_pack("{s:O, s:I, s:O}", "item_id", iid, "output_index", oi, "input", json_object_get(item, "input")));
    } else {
        json_t *part = json_array_get(json_object_get(item, "content"), 0);
        if (st->cur_kind == ITEM_MESSAGE)
            emit(st, "response.output_text.done",
                 json_pack("{s:O, s:I, s:i, s:O, s:[]}", "item_id", iid, "output_index", oi, "content_index", 0,
                           "text", json_object_get(part, "text"), "logprobs"));
        else
            emit(st, "response.reasoning_text.done",
                 json_pack("{s:O, s:I, s:i, s:O}", "item_id", iid, "output_index", oi, "content_index", 0,
                           "text", json_object_get(part, "text")));
        emit(st, "response.content_part.done",
             json_pack("{s:O, s:I, s:i, s:o}", "item_id", iid, "output_index", oi, "content_index", 0, "part",
                       json_deep_copy(part)));
    }
    if (st->cur_kind != ITEM_REASONING)
        json_object_set_new(item, "status", json_string(status));
    emit(st, "response.output_item.done", json_pack("{s:I, s:o}", "output_index", oi, "item", json_deep_copy(item)));
    st->cur = NULL;
    st->cur_kind = ITEM_NONE;
}

/* Opens an item (taken) and announces it; a reasoning or message item
 * also gets its (empty) content part. */
static void open_item(responses_stream_t *st, item_t kind, json_t *item)
{
    close_item(st, "completed");
    json_t *part = json_array_get(json_object_get(item, "content"), 0);
    json_incref(part);
    if (part)
        json_array_clear(json_object_get(item, "content"));
    json_array_append_new(st->output, item);
    st->cur = item;
    st->cur_kind = kind;
    json_int_t oi = out_index(st);
    emit(st, "response.output_item.added", json_pack("{s:I, s:o}", "output_index", oi, "item", json_deep_copy(item)));
    if (part) {
        emit(st, "response.content_part.added",
             json_pack("{s:O, s:I, s:i, s:o}", "item_id", json_object_get(item, "id"), "output_index", oi,
                       "content_index", 0, "part", json_deep_copy(part)));
        json_array_append_new(json_object_get(item, "content"), part);
    }
}

static void on_part(responses_stream_t *st, const answer_part_t *p)
{
    switch (p->kind) {
    case ANSWER_REASONING:
    case ANSWER_CONTENT: {
        bool r = p->kind == ANSWER_REASONING;
        item_t want = r ? ITEM_REASONING : ITEM_MESSAGE;
        if (st->cur_kind != want)
            open_item(st, want, r ? reasoning_item(json_string("")) : message_item("in_progress", json_string("")));
        append_to(json_array_get(json_object_get(st->cur, "content"), 0), "text", p->text, p->len);
        emit(st, r ? "response.reasoning_text.delta" : "response.output_text.delta",
             json_pack("{s:O, s:I, s:i, s:o}", "item_id", json_object_get(st->cur, "id"), "output_index",
                       out_index(st), "content_index", 0, "delta", oai_json_text(p->text, p->len)));
        break;
    }
    case ANSWER_TOOL_BEGIN: {
        json_t *it = call_item(st->tool_map, p->id, p->name, "", 0, "in_progress");
        bool custom = strcmp(json_string_value(json_object_get(it, "type")), "custom_tool_call") == 0;
        oai_custom_acc_clear(&st->cacc);
        open_item(st, custom ? ITEM_CUSTOM : ITEM_CALL, it);
        break;
    }
    case ANSWER_TOOL_ARGS:
        if (st->cur_kind == ITEM_CUSTOM) {
            size_t dl;
            char *d = oai_custom_acc_feed(&st->cacc, p->text, p->len, &dl);
            if (dl) {
                append_to(st->cur, "input", d, dl);
                emit(st, "response.custom_tool_call_input.delta",
                     json_pack("{s:O, s:I, s:o}", "item_id", json_object_get(st->cur, "id"), "output_index",
                               out_index(st), "delta", oai_json_text(d, dl)));
            }
            free(d);
            break;
        }
        append_to(st->cur, "arguments", p->text, p->len);
        emit(st, "response.function_call_arguments.delta",
             json_pack("{s:O, s:I, s:o}", "item_id", json_object_get(st->cur, "id"), "output_index", out_index(st),
                       "delta", oai_json_text(p->text, p->len)));
        break;
    case ANSWER_TOOL_END:
        close_item(st, "completed");
        break;
    }
}

static void begin(responses_stream_t *st, strbuf_t *out)
{
    st->out = out;
    if (st->started)
        return;
    st->started = true;
    emit(st, "response.created", json_pack("{s:o}", "response", snapshot(st, "in_progress", NULL, NULL, NULL)));
    emit(st, "response.in_progress", json_pack("{s:o}", "response", snapshot(st, "in_progress", NULL, NULL, NULL)));
}

bool responses_stream_event(responses_stream_t *st, const proto_event_t *e, strbuf_t *out)
{
    if (st->done)
        return true;
    begin(st, out);
    if (api_finish_failed(e->finish)) {
        oai_error_t err;
        api_event_error(e, &err, -1);
        responses_stream_error(st, &err, out);
        return true;
    }
    bool final = e->finish != PROTO_FINISH_NONE;
    const answer_part_t *parts;
    size_t n = answer_feed(st->ans, e->text, e->text_len, final ? ANSWER_DONE : ANSWER_MORE, &parts);
    for (size_t i = 0; i < n; i++)
        on_part(st, &parts[i]);
    if (!final)
        return false;
    json_t *incomplete;
    const char *status = finish_status(e->finish, &incomplete);
    close_item(st, status);
    oai_usage_t u;
    api_event_usage(e, &u);
    json_t *resp = snapshot(st, status, usage_json(&u), NULL, incomplete);
    /* the request the store needs, as the stream keeps it */
    responses_request_t req = {.input = st->input, .context = st->context, .previous_id = st->previous_id,
                               .n_previous = st->n_previous};
    if (st->store && st->wake) { /* committed before the last event: responses_stream_resume */
        st->final = resp;
        st->job = store_submit(st->rs, st->owner, st->id, st->created, resp, &req, st->wake, st->wake_ctx);
        return responses_stream_resume(st, out);
    }
    if (st->store)
        store_now(st->rs, st->owner, st->id, st->created, resp, &req);
    emit(st, strcmp(status, "incomplete") == 0 ? "response.incomplete" : "response.completed",
         json_pack("{s:o}", "response", resp));
    st->done = true;
    return true;
}

bool responses_stream_resume(responses_stream_t *st, strbuf_t *out)
{
    if (st->done)
        return true;
    st->out = out;
    if (!st->job || resp_store_job_poll(st->job, NULL, 0) == RESP_STORE_PENDING)
        return false;
    json_t *resp = st->final;
    st->final = NULL;
    store_finish(resp, &st->job);
    const char *status = json_string_value(json_object_get(resp, "status"));
    emit(st, status && strcmp(status, "incomplete") == 0 ? "response.incomplete" : "response.completed",
         json_pack("{s:o}", "response", resp));
    st->done = true;
    return true;
}

bool responses_stream_waiting(const responses_stream_t *st) { return st->job && !st->done; }

void responses_stream_error(responses_stream_t *st, const oai_error_t *e, strbuf_t *out)
{
    begin(st, out);
    close_item(st, "incomplete");
    json_t *err = json_pack("{s:s, s:o}", "code",
                            e->code ? e->code : (e->status >= 500 ? "server_error" : "invalid_request"),
                            "message", oai_json_text(e->message, strlen(e->message)));
    emit(st, "response.failed", json_pack("{s:o}", "response", snapshot(st, "failed", NULL, err, NULL)));
    st->done = true;
}

/* ---- the surface ------------------------------------------------------ */

typedef struct {
    responses_request_t req;     /* the extras (req.chat moved out to the internal request) */
    char id[48];
    responses_stream_t *stream;
    resp_store_job_t *job;       /* not streaming: the store in flight */
    json_t *final;               /* the response object waiting for it */
} surface_state_t;

typedef struct {
    resp_store_t *store;
    const char *owner;
} load_ctx_t;

static int load_context(void *ctx, const char *id, json_t **context)
{
    load_ctx_t *l = ctx;
    if (!l->store)
        return 1;
    return resp_store_context(l->store, id, l->owner, clock_wall_s(), context);
}

static int surface_parse(api_call_t *call, const uint8_t *body, size_t len, request_t *o, oai_error_t *e)
{
    load_ctx_t l = {call->store, call->owner ? call->owner : RESP_STORE_ANON};
    responses_request_t r;
    if (responses_parse_request(body, len, load_context, &l, &r, e) < 0)
        return -1;
    surface_state_t *st = xcalloc(1, sizeof *st);
    *o = r.chat;
    memset(&r.chat, 0, sizeof r.chat);
    st->req = r;
    call->state = st;
    return 0;
}

static responses_meta_t meta_of(const api_call_t *call, const surface_state_t *st)
{
    return (responses_meta_t){.id = st->id, .model = call->model, .created = call->created,
                              .reasoning = call->reasoning, .tool_names = call->tool_names,
                              .n_tools = call->n_tools, .store = call->store,
                              .owner = call->owner ? call->owner : RESP_STORE_ANON, .wake = call->wake,
                              .wake_ctx = call->wake_ctx};
}

static void surface_begin(api_call_t *call, request_t *o)
{
    surface_state_t *st = call->state;
    oai_id_new("resp_", st->id, sizeof st->id);
    if (call->stream) {
        responses_meta_t m = meta_of(call, st);
        st->stream = responses_stream_new(&m, &st->req);
    }
}

static void surface_stream_event(api_call_t *call, gateway_reply_t *rep, strbuf_t *out)
{
    surface_state_t *st = call->state;
    if (!rep) { /* woken: the store answered (api_surface.h, "Waiting") */
        call->done = responses_stream_resume(st->stream, out);
    } else if (rep->kind == GATEWAY_REPLY_ERROR) {
        responses_stream_error(st->stream, &rep->error, out);
        call->done = true;
    } else {
        call->done = responses_stream_event(st->stream, &rep->event, out);
    }
    call->waiting = !call->done && responses_stream_waiting(st->stream);
    gateway_reply_free(&rep);
}

static char *surface_complete(api_call_t *call, gateway_reply_t *const *events, size_t n, int *status)
{
    surface_state_t *st = call->state;
    const proto_event_t *last = &events[n - 1]->event;
    if (st->final) { /* called again once the store answered (api_surface.h, "Waiting") */
        if (resp_store_job_poll(st->job, NULL, 0) == RESP_STORE_PENDING)
            return NULL;
        call->waiting = false;
        store_finish(st->final, &st->job);
        *status = 200;
        char *body = dump(st->final);
        st->final = NULL;
        return body;
    }
    if (api_finish_failed(last->finish)) {
        oai_error_t e;
        api_event_error(last, &e, call->request_timeout_s);
        *status = e.status;
        return oai_error_json(&e);
    }
    size_t len;
    char *text = api_events_text(events, n, &len);
    oai_usage_t u;
    api_event_usage(last, &u);
    responses_meta_t m = meta_of(call, st);
    *status = 200;
    if (st->req.store && m.store && call->wake) {
        /* committed before the answer: the answer waits for the store,
         * the HTTP thread does not */
        st->final = complete_object(&m, &st->req, text, len, last->finish, &u);
        free(text);
        st->job = store_submit(m.store, m.owner, m.id, m.created, st->final, &st->req, call->wake, call->wake_ctx);
        call->waiting = true;
        return surface_complete(call, events, n, status);
    }
    char *body = responses_complete_json(&m, &st->req, text, len, last->finish, &u);
    free(text);
    return body;
}

static void surface_end(api_call_t *call)
{
    surface_state_t *st = call->state;
    if (!st)
        return;
    responses_stream_free(&st->stream);
    resp_store_job_release(&st->job); /* before anything it would wake is freed */
    json_decref(st->final);
    responses_request_free(&st->req);
    free(st);
    call->state = NULL;
}

const api_surface_t responses_surface = {
    .name = "responses",
    .parse = surface_parse,
    .begin = surface_begin,
    .stream_event = surface_stream_event,
    .complete = surface_complete,
    .error_body = oai_error_json,
    .end = surface_end,
};

/* ---- stored responses -------------------------------------------------- */

static char *input_items_json(const char *input, bool asc)
{
    json_t *items = json_loads(input, 0, NULL);
    if (!json_is_array(items)) {
        json_decref(items);
        items = json_array();
    }
    json_t *data = json_array();
    size_t n = json_array_size(items);
    for (size_t i = 0; i < n; i++)
        json_array_append(data, json_array_get(items, asc ? i : n - 1 - i));
    json_t *first = n ? json_object_get(json_array_get(data, 0), "id") : NULL;
    json_t *last = n ? json_object_get(json_array_get(data, n - 1), "id") : NULL;
    json_t *j = json_pack("{s:s, s:o, s:O, s:O, s:b}", "object", "list", "data", data, "first_id",
                          first ? first : json_null(), "last_id", last ? last : json_null(), "has_more", 0);
    json_decref(items);
    return dump(j);
}

char *responses_stored(resp_store_t *store, const char *owner, const char *id, responses_op_t op, bool asc,
                       int *status)
{
    oai_error_t e;
    if (!store) {
        oai_error_set(&e, 503, NULL, "This gateway keeps no responses (no state directory).");
        *status = e.status;
        return oai_error_json(&e);
    }
    owner = owner ? owner : RESP_STORE_ANON;
    int rc;
    char *body = NULL;
    if (op == RESPONSES_DELETE) {
        rc = resp_store_delete(store, id, owner);
        if (rc == 0)
            body = dump(json_pack("{s:s, s:s, s:b}", "id", id, "object", "response", "deleted", 1));
    } else {
        resp_store_row_t row;
        rc = resp_store_get(store, id, owner, clock_wall_s(), &row);
        if (rc == 0) {
            body = op == RESPONSES_GET ? xstrdup(row.response) : input_items_json(row.input, asc);
            resp_store_row_free(&row);
        }
    }
    if (rc == 0) {
        *status = 200;
        return body;
    }
    if (rc == 1)
        oai_error_set(&e, 404, NULL, "No response found with id '%.128s'.", id);
    else
        oai_error_set(&e, 500, NULL, "The stored responses could not be read.");
    *status = e.status;
    return oai_error_json(&e);
}
