/* oai_tools.c — tool calling in the OpenAI layer (see oai_tools.h). */
#include "gateway/oai_tools.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/random.h>

#include "common/clock.h"
#include "common/grammar/gbnf.h"
#include "common/grammar/json_schema.h"
#include "common/grammar/lark.h"
#include "common/utf8.h"
#include "common/xalloc.h"
#include "common/text/tool_format.h"
#include "common/text/tool_scan.h"

__attribute__((format(printf, 3, 4))) static int bad(oai_error_t *e, const char *param, const char *fmt, ...)
{
    char msg[sizeof e->message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    oai_error_set(e, 400, param, "%s", msg);
    return -1;
}

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER:
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

static bool name_ok(const char *s, size_t n)
{
    if (n == 0 || n > OAI_MAX_TOOL_NAME)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
              c == '-'))
            return false;
    }
    return true;
}

static bool present(const json_t *v) { return v && !json_is_null(v); }

/* ---- request ---------------------------------------------------------- */

/* A strict tool's parameters compile to a usable grammar, or a 400 naming
 * the refused keyword's JSON pointer. */
static int strict_schema_check(const json_t *params, const char *p, oai_error_t *e)
{
    char msg[300], path[200], param[96];
    snprintf(param, sizeof param, "%s.function.parameters", p);
    char *text = json_schema_to_gbnf(params, NULL, msg, sizeof msg, path, sizeof path);
    if (!text)
        return bad(e, param, "Unsupported schema in strict tool '%s'%s%s: %s", p, path[0] ? " at " : "", path, msg);
    grammar_t *g = NULL;
    int rc = gbnf_parse((const uint8_t *)text, strlen(text), &g, msg, sizeof msg, NULL, NULL);
    gbnf_free(&g);
    free(text);
    if (rc != 0)
        return bad(e, param, "The schema of strict tool '%s' is not usable: %s", p, msg);
    return 0;
}

/* A custom tool {"type":"custom","custom":{"name","description"?,"format"?}}
 * as the function tool the model is shown and the worker forces: one string
 * argument "input" whose text the format constrains (json_schema.h
 * "x-grammar": a Lark or regex grammar; "text" or no format: any text).
 * Returns the new tool (a new reference), or NULL with a 400 in *e. */
static json_t *custom_as_function(json_t *t, const char *p, oai_error_t *e)
{
    json_t *c = json_object_get(t, "custom");
    if (!json_is_object(c)) {
        bad(e, p, "'%s.custom' must be an object {\"name\", \"description\", \"format\"}.", p);
        return NULL;
    }
    json_t *name = json_object_get(c, "name"), *d = json_object_get(c, "description"),
           *fmt = json_object_get(c, "format");
    if (!json_is_string(name)) {
        bad(e, p, "'%s.custom.name' must be a string.", p);
        return NULL;
    }
    if (present(d) && !json_is_string(d)) {
        bad(e, p, "'%s.custom.description' must be a string.", p);
        return NULL;
    }
    json_t *input = json_pack("{s:s}", "type", "string");
    const char *how = "free-form text";
    if (present(fmt)) {
        const char *ft = json_string_value(json_object_get(fmt, "type"));
        if (!json_is_object(fmt) || !ft || (strcmp(ft, "text") != 0 && strcmp(ft, "grammar") != 0)) {
            json_decref(input);
            bad(e, p, "'%s.custom.format' must be {\"type\":\"text\"} or {\"type\":\"grammar\", \"grammar\": "
                      "{\"syntax\": \"lark\" | \"regex\", \"definition\"}}.", p);
            return NULL;
        }
        if (strcmp(ft, "grammar") == 0) {
            json_t *g = json_object_get(fmt, "grammar");
            const char *syn = json_string_value(json_object_get(g, "syntax"));
            json_t *def = json_object_get(g, "definition");
            if (!json_is_object(g) || !syn || (strcmp(syn, "lark") != 0 && strcmp(syn, "regex") != 0) ||
                !json_is_string(def)) {
                json_decref(input);
                bad(e, p, "'%s.custom.format.grammar' must be {\"syntax\": \"lark\" | \"regex\", \"definition\": "
                          "string}.", p);
                return NULL;
            }
            /* the grammar must compile (the worker compiles it again when
             * the call is forced, common/text/tool_grammar.h) */
            char gerr[256] = "";
            const uint8_t *dt = (const uint8_t *)json_string_value(def);
            size_t dn = json_string_length(def);
            char *gt = strcmp(syn, "lark") == 0 ? lark_to_gbnf(dt, dn, LARK_JSON_STRING, gerr, sizeof gerr)
                                                : lark_regex_to_gbnf(dt, dn, LARK_JSON_STRING, gerr, sizeof gerr);
            if (!gt) {
                json_decref(input);
                char gp[128];
                snprintf(gp, sizeof gp, "%s.custom.format.grammar.definition", p);
                bad(e, gp, "The %s grammar of custom tool '%.64s' is not supported: %s", syn, json_string_value(name),
                    gerr);
                return NULL;
            }
            free(gt);
            /* x-grammar: what the worker forces; shown to the model with the tool */
            json_object_set_new(input, "x-grammar", json_pack("{s:s, s:O}", "syntax", syn, "definition", def));
            how = strcmp(syn, "lark") == 0 ? "text in the Lark grammar of x-grammar (not JSON)"
                                           : "text matching the regex of x-grammar (not JSON)";
            char dtext[160];
            snprintf(dtext, sizeof dtext, "The tool's whole input, as %s.", how);
            json_object_set_new(input, "description", json_string(dtext));
        }
    }
    if (!json_object_get(input, "description"))
        json_object_set_new(input, "description", json_string("The tool's whole input, as free-form text."));
    /* not "strict": x-grammar is not JSON Schema; the grammar was checked above */
    json_t *fn = json_pack("{s:O, s:{s:s, s:{s:o}, s:[s], s:b}}", "name", name, "parameters", "type", "object",
                           "properties", "input", input, "required", "input", "additionalProperties", 0);
    if (present(d))
        json_object_set(fn, "description", d);
    return json_pack("{s:s, s:o}", "type", "function", "function", fn);
}

/* One entry of `tools`: {"type":"function","function":{"name","description"?,
 * "parameters"?,"strict"?}}, or a custom tool (custom_as_function; t is
 * replaced by its function form). Stores the name. */
static int parse_tool(json_t **tp, size_t i, request_t *r, oai_error_t *e)
{
    json_t *t = *tp;
    char p[64];
    snprintf(p, sizeof p, "tools[%zu]", i);
    if (!json_is_object(t))
        return bad(e, p, "'%s' must be an object, got %s.", p, type_name(t));
    json_t *type = json_object_get(t, "type");
    bool custom = json_is_string(type) && strcmp(json_string_value(type), "custom") == 0;
    if (custom) {
        json_t *fn = custom_as_function(t, p, e);
        if (!fn)
            return -1;
        json_decref(t); /* the caller's reference: it holds fn instead */
        *tp = t = fn;
    } else if (!json_is_string(type) || strcmp(json_string_value(type), "function") != 0) {
        return bad(e, p, "'%s.type' must be \"function\" or \"custom\".", p);
    }
    r->tool_custom[r->n_tools] = custom;
    json_t *f = json_object_get(t, "function");
    if (!json_is_object(f))
        return bad(e, p, "'%s.function' must be an object.", p);
    json_t *name = json_object_get(f, "name");
    if (!json_is_string(name) || !name_ok(json_string_value(name), json_string_length(name)))
        return bad(e, p, "'%s.function.name' must be 1..%d characters of a-z, A-Z, 0-9, _ and -.", p,
                   OAI_MAX_TOOL_NAME);
    for (size_t k = 0; k < r->n_tools; k++)
        if (strcmp(r->tool_names[k], json_string_value(name)) == 0)
            return bad(e, p, "Tool name '%s' is given twice in 'tools'.", json_string_value(name));
    json_t *d = json_object_get(f, "description");
    if (present(d) && !json_is_string(d))
        return bad(e, p, "'%s.function.description' must be a string.", p);
    json_t *params = json_object_get(f, "parameters");
    if (present(params) && !json_is_object(params))
        return bad(e, p, "'%s.function.parameters' must be a JSON Schema object, got %s.", p,
                   type_name(params));
    json_t *strict = json_object_get(f, "strict");
    if (present(strict) && !json_is_boolean(strict))
        return bad(e, p, "'%s.function.strict' must be a boolean.", p);
    /* strict: the schema must compile whole (non-strict schemas are
     * compiled relaxed by the worker when a call is forced, tool_grammar.h) */
    if (json_is_true(strict) && present(params) && strict_schema_check(params, p, e) != 0)
        return -1;
    r->tool_names[r->n_tools++] = xstrdup(json_string_value(name));
    return 0;
}

int oai_tools_parse_request(json_t *root, request_t *r, oai_error_t *e)
{
    r->parallel_tool_calls = true;
    r->tool_choice = REQUEST_TOOL_CHOICE_AUTO;
    if (present(json_object_get(root, "functions")) || present(json_object_get(root, "function_call")))
        return bad(e, present(json_object_get(root, "functions")) ? "functions" : "function_call",
                   "The deprecated 'functions'/'function_call' parameters are not supported; use 'tools' "
                   "and 'tool_choice'.");
    json_t *tools = json_object_get(root, "tools");
    if (present(tools)) {
        if (!json_is_array(tools))
            return bad(e, "tools", "'tools' must be an array, got %s.", type_name(tools));
        size_t n = json_array_size(tools);
        if (n > OAI_MAX_TOOLS)
            return bad(e, "tools", "'tools' has %zu entries; at most %d are accepted.", n, OAI_MAX_TOOLS);
        r->tool_names = xcalloc(n ? n : 1, sizeof *r->tool_names);
        r->tool_custom = xcalloc(n ? n : 1, sizeof *r->tool_custom);
        json_t *shown = json_array(); /* custom tools as their function form */
        for (size_t i = 0; i < n; i++) {
            json_t *t = json_array_get(tools, i);
            json_incref(t);
            int rc = parse_tool(&t, i, r, e);
            json_array_append_new(shown, t);
            if (rc != 0) {
                json_decref(shown);
                return -1;
            }
        }
        bool any_custom = false;
        for (size_t i = 0; i < r->n_tools; i++)
            any_custom |= r->tool_custom[i];
        if (!any_custom) {
            free(r->tool_custom);
            r->tool_custom = NULL;
        }
        if (n > 0)
            r->tools_json = json_dumps(shown, JSON_COMPACT);
        json_decref(shown);
    }
    json_t *par = json_object_get(root, "parallel_tool_calls");
    if (present(par)) {
        if (!json_is_boolean(par))
            return bad(e, "parallel_tool_calls", "'parallel_tool_calls' must be a boolean, got %s.",
                       type_name(par));
        r->parallel_tool_calls = json_is_true(par);
    }
    json_t *tc = json_object_get(root, "tool_choice");
    if (!present(tc))
        return 0;
    if (json_is_string(tc)) {
        const char *s = json_string_value(tc);
        if (strcmp(s, "auto") == 0)
            r->tool_choice = REQUEST_TOOL_CHOICE_AUTO;
        else if (strcmp(s, "none") == 0)
            r->tool_choice = REQUEST_TOOL_CHOICE_NONE;
        else if (strcmp(s, "required") == 0)
            r->tool_choice = REQUEST_TOOL_CHOICE_REQUIRED;
        else
            return bad(e, "tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                                         "{\"type\": \"function\", \"function\": {\"name\": ...}}; got "
                                         "'%.40s'.", s);
    } else if (json_is_object(tc)) {
        json_t *type = json_object_get(tc, "type");
        const char *ty = json_string_value(type);
        json_t *f = json_object_get(tc, ty && strcmp(ty, "custom") == 0 ? "custom" : "function");
        json_t *name = json_is_object(f) ? json_object_get(f, "name") : NULL;
        if (!ty || (strcmp(ty, "function") != 0 && strcmp(ty, "custom") != 0) || !json_is_string(name))
            return bad(e, "tool_choice", "'tool_choice' as an object must be {\"type\": \"function\", "
                                         "\"function\": {\"name\": ...}} or {\"type\": \"custom\", "
                                         "\"custom\": {\"name\": ...}}.");
        r->tool_choice = REQUEST_TOOL_CHOICE_NAMED;
        r->tool_choice_name = xstrdup(json_string_value(name));
    } else {
        return bad(e, "tool_choice", "'tool_choice' must be a string or an object, got %s.", type_name(tc));
    }
    if (r->tool_choice != REQUEST_TOOL_CHOICE_NONE && r->tool_choice != REQUEST_TOOL_CHOICE_AUTO && r->n_tools == 0)
        return bad(e, "tool_choice", "'tool_choice' is only allowed when 'tools' are specified.");
    if (r->tool_choice == REQUEST_TOOL_CHOICE_NAMED) {
        bool found = false;
        for (size_t k = 0; k < r->n_tools && !found; k++)
            found = strcmp(r->tool_names[k], r->tool_choice_name) == 0;
        if (!found)
            return bad(e, "tool_choice", "'tool_choice' names the function '%.64s', which is not in 'tools'.",
                       r->tool_choice_name);
    }
    return 0;
}

int oai_tools_parse_message(json_t *msg, size_t i, request_message_t *m, oai_error_t *e)
{
    char p[96];
    json_t *id = json_object_get(msg, "tool_call_id");
    if (present(id)) {
        snprintf(p, sizeof p, "messages[%zu].tool_call_id", i);
        if (!json_is_string(id) || json_string_length(id) > 256)
            return bad(e, p, "'%s' must be a string of at most 256 bytes.", p);
        if (m->role == REQUEST_ROLE_TOOL)
            m->tool_call_id = xstrdup(json_string_value(id));
    }
    json_t *tc = json_object_get(msg, "tool_calls");
    if (!present(tc) || (json_is_array(tc) && json_array_size(tc) == 0))
        return 0;
    snprintf(p, sizeof p, "messages[%zu].tool_calls", i);
    if (m->role != REQUEST_ROLE_ASSISTANT)
        return bad(e, p, "'%s': only assistant messages have tool calls.", p);
    if (!json_is_array(tc))
        return bad(e, p, "'%s' must be an array, got %s.", p, type_name(tc));
    size_t n = json_array_size(tc);
    if (n > OAI_MAX_TOOL_CALLS)
        return bad(e, p, "'%s' has more than %d calls.", p, OAI_MAX_TOOL_CALLS);
    json_t *out = json_array();
    for (size_t k = 0; k < n; k++) {
        json_t *c = json_array_get(tc, k);
        char cp[128];
        snprintf(cp, sizeof cp, "%s[%zu]", p, k);
        json_t *type = json_is_object(c) ? json_object_get(c, "type") : NULL;
        /* a custom tool's call {"type":"custom","custom":{"name","input"}} is
         * shown to the model as the function call it wrote: {"input": text} */
        bool custom = json_is_string(type) && strcmp(json_string_value(type), "custom") == 0;
        json_t *f = json_is_object(c) ? json_object_get(c, custom ? "custom" : "function") : NULL;
        json_t *name = json_is_object(f) ? json_object_get(f, "name") : NULL;
        json_t *args = json_is_object(f) ? json_object_get(f, custom ? "input" : "arguments") : NULL;
        json_t *cid = json_is_object(c) ? json_object_get(c, "id") : NULL;
        if (!json_is_object(c) || !json_is_object(f) || !json_is_string(name) ||
            json_string_length(name) == 0 || json_string_length(name) > 256 ||
            (present(type) && !(json_is_string(type) && (custom || strcmp(json_string_value(type), "function") == 0))) ||
            (present(cid) && !json_is_string(cid)) || (present(args) && !json_is_string(args))) {
            json_decref(out);
            return bad(e, cp, "'%s' must be {\"id\": string, \"type\": \"function\", \"function\": "
                              "{\"name\": string, \"arguments\": string}} or {\"id\", \"type\": \"custom\", "
                              "\"custom\": {\"name\", \"input\": string}}.", cp);
        }
        /* arguments: a JSON string in the API; templates want the value */
        json_t *val = NULL;
        if (custom) {
            val = json_pack("{s:o}", "input", present(args) ? json_incref(args) : json_string(""));
        } else if (present(args)) {
            json_error_t je;
            val = json_loadb(json_string_value(args), json_string_length(args),
                             JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
            if (!val)
                val = json_incref(args);
        } else {
            val = json_object();
        }
        json_t *fn = json_pack("{s:O, s:o}", "name", name, "arguments", val);
        json_t *call = json_pack("{s:s, s:s, s:o}", "id", present(cid) ? json_string_value(cid) : "",
                                 "type", "function", "function", fn);
        json_array_append_new(out, call);
    }
    m->tool_calls_json = json_dumps(out, JSON_COMPACT);
    json_decref(out);
    return 0;
}

/* ---- output ----------------------------------------------------------- */

/* The syntax of each family's calls, and reading them, is
 * common/text/tool_format.h's; here the calls get their OpenAI ids. */
_Static_assert(OAI_MAX_TOOL_CALLS == TOOL_FORMAT_MAX_CALLS, "one limit on calls per answer");

size_t oai_tools_extract(const char *text, size_t len, char *const *names, size_t n_names,
                         oai_tool_call_t **calls, size_t *content_len)
{
    tool_call_t *tc = NULL;
    size_t n = tool_format_extract(text, len, names, n_names, &tc, content_len);
    *calls = NULL;
    if (n == 0)
        return 0;
    *calls = xcalloc(n, sizeof **calls);
    for (size_t i = 0; i < n; i++) {
        (*calls)[i].name = tc[i].name;
        (*calls)[i].arguments = tc[i].arguments;
        oai_id_new("call_", (*calls)[i].id, sizeof (*calls)[i].id);
    }
    free(tc); /* its strings moved to *calls */
    return n;
}

void oai_tool_calls_free(oai_tool_call_t *calls, size_t n)
{
    for (size_t i = 0; calls && i < n; i++) {
        free(calls[i].name);
        free(calls[i].arguments);
    }
    free(calls);
}

size_t oai_tools_safe_prefix(const char *text, size_t len)
{
    return tool_format_safe_prefix(text, len);
}

/* The value of one hex digit, or -1. */
static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

char *oai_custom_input(const char *args, size_t len, size_t *out_len)
{
    /* {  "input"  :  "  — white space allowed between */
    size_t i = 0;
    const char *key = "\"input\"";
    while (i < len && tool_scan_is_ws(args[i]))
        i++;
    bool shape = i < len && args[i] == '{';
    if (shape) {
        i++;
        while (i < len && tool_scan_is_ws(args[i]))
            i++;
        for (size_t k = 0; key[k] && shape; k++, i++)
            shape = i >= len || args[i] == key[k]; /* a prefix of the key is still the shape */
        while (i < len && tool_scan_is_ws(args[i]))
            i++;
        if (shape && i < len)
            shape = args[i++] == ':';
        while (i < len && tool_scan_is_ws(args[i]))
            i++;
        if (shape && i < len)
            shape = args[i++] == '"';
    }
    if (!shape) {
        char *o = xmalloc(len + 1);
        memcpy(o, args, len);
        o[len] = '\0';
        *out_len = len;
        return o;
    }
    char *o = xmalloc(len + 1); /* decoding never grows the text */
    size_t n = 0;
    while (i < len && args[i] != '"') {
        char c = args[i];
        if (c != '\\') {
            o[n++] = c;
            i++;
            continue;
        }
        if (i + 1 >= len)
            break; /* an escape cut in the middle */
        char e = args[i + 1];
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            static const char map[] = "\"\\/\b\f\n\r\t";
            o[n++] = map[simple - "\"\\/bfnrt"];
            i += 2;
            continue;
        }
        if (e != 'u' || i + 6 > len)
            break;
        uint32_t cp = 0;
        bool okh = true;
        for (int k = 0; k < 4; k++) {
            int h = hexval(args[i + 2 + k]);
            okh = okh && h >= 0;
            cp = cp * 16 + (uint32_t)(h < 0 ? 0 : h);
        }
        if (!okh)
            break;
        size_t step = 6;
        if (cp >= 0xD800 && cp < 0xDC00) { /* a surrogate pair */
            if (i + 12 > len)
                break;
            uint32_t lo = 0;
            for (int k = 0; k < 4; k++) {
                int h = hexval(args[i + 8 + k]);
                okh = okh && h >= 0;
                lo = lo * 16 + (uint32_t)(h < 0 ? 0 : h);
            }
            if (!okh || args[i + 6] != '\\' || args[i + 7] != 'u' || lo < 0xDC00 || lo > 0xDFFF)
                cp = 0xFFFD;
            else {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                step = 12;
            }
        } else if (cp >= 0xDC00 && cp < 0xE000) {
            cp = 0xFFFD;
        }
        /* \uXXXX is 6 bytes and its UTF-8 at most 3 (4 for a 12-byte pair) */
        n += utf8_put(cp, o + n);
        i += step;
    }
    o[n] = '\0';
    *out_len = n;
    return o;
}

bool oai_tool_is_custom(const char *name, char *const *names, const bool *custom, size_t n_names)
{
    for (size_t k = 0; custom && name && k < n_names; k++)
        if (custom[k] && strcmp(names[k], name) == 0)
            return true;
    return false;
}

void oai_tools_mark_custom(oai_tool_call_t *calls, size_t n, char *const *names, const bool *custom,
                           size_t n_names)
{
    for (size_t i = 0; i < n; i++)
        calls[i].custom = oai_tool_is_custom(calls[i].name, names, custom, n_names);
}

char *oai_custom_acc_feed(oai_custom_acc_t *a, const char *frag, size_t n, size_t *out_len)
{
    strbuf_append(&a->raw, frag, n);
    size_t dl;
    char *d = oai_custom_input(a->raw.s, a->raw.len, &dl);
    size_t from = a->sent < dl ? a->sent : dl;
    memmove(d, d + from, dl - from);
    *out_len = dl - from;
    d[*out_len] = '\0';
    a->sent = dl > a->sent ? dl : a->sent;
    return d;
}

void oai_custom_acc_clear(oai_custom_acc_t *a)
{
    strbuf_free(&a->raw);
    a->sent = 0;
}

json_t *oai_tool_calls_json(const oai_tool_call_t *calls, size_t n, bool with_index)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *c;
        if (calls[i].custom) {
            size_t il;
            char *in = oai_custom_input(calls[i].arguments, strlen(calls[i].arguments), &il);
            c = json_pack("{s:s, s:s, s:{s:s, s:o}}", "id", calls[i].id, "type", "custom", "custom", "name",
                          calls[i].name, "input", oai_json_text(in, il));
            free(in);
        } else {
            c = json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", calls[i].id, "type", "function", "function",
                          "name", calls[i].name, "arguments", calls[i].arguments);
        }
        if (with_index) {
            /* "index" first, as OpenAI streams it */
            json_t *o = json_pack("{s:I}", "index", (json_int_t)i);
            json_object_update(o, c);
            json_decref(c);
            c = o;
        }
        json_array_append_new(a, c);
    }
    return a;
}

char *oai_tools_patch(char *body, size_t index, const char *content, size_t content_len,
                      const oai_tool_call_t *calls, size_t n, bool ends_in_calls, bool is_chunk)
{
    json_error_t je;
    json_t *root = json_loads(body, JSON_ALLOW_NUL, &je); /* content may hold \u0000 */
    json_t *choice = root ? json_array_get(json_object_get(root, "choices"), index) : NULL;
    json_t *msg = choice ? json_object_get(choice, is_chunk ? "delta" : "message") : NULL;
    if (!json_is_object(msg)) {
        json_decref(root);
        return body; /* not a body we built: leave it */
    }
    free(body);
    if (!is_chunk) {
        json_t *c = json_null();
        if (content_len) {
            size_t n;
            char *clean = utf8_sanitize(content, content_len, &n); /* model text */
            c = json_stringn(clean, n);
            free(clean);
        }
        json_object_set_new(msg, "content", c);
    }
    else
        json_object_del(msg, "content");
    json_object_set_new(msg, "tool_calls", oai_tool_calls_json(calls, n, is_chunk));
    if (ends_in_calls && present(json_object_get(choice, "finish_reason")))
        json_object_set_new(choice, "finish_reason", json_string("tool_calls"));
    char *out = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return out;
}

void oai_id_new(const char *prefix, char *out, size_t cap)
{
    uint8_t r[12];
    if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
        /* No entropy source: still unique enough per process for an id. */
        static uint64_t ctr;
        uint64_t x = (uint64_t)clock_now_us() ^ (++ctr * 0x9e3779b97f4a7c15ULL);
        for (size_t i = 0; i < sizeof(r); i++)
            r[i] = (uint8_t)(x >> (8 * (i % 8))) ^ (uint8_t)i;
    }
    static const char hex[] = "0123456789abcdef";
    char tail[25];
    for (size_t i = 0; i < sizeof(r); i++) {
        tail[2 * i] = hex[r[i] >> 4];
        tail[2 * i + 1] = hex[r[i] & 15];
    }
    tail[24] = '\0';
    snprintf(out, cap, "%s%s", prefix, tail);
}
