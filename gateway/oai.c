/* oai.c — OpenAI-compatible request validation and response JSON (see oai.h).
 * Built on jansson; every JSON value from the client is type-checked before
 * use, and every builder sanitizes text to UTF-8 before handing it over. */
#include "gateway/oai.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <jansson.h>
#include <sodium.h>

#include "common/clock.h"
#include "common/grammar/gbnf.h"
#include "common/grammar/json_schema.h"
#include "common/utf8.h"
#include "common/xalloc.h"
#include "gateway/oai_tools.h"
#include "gateway/partition.h"
#include "gateway/request_image.h"

/* ====================================================================== */
/* UTF-8                                                                   */
/* ====================================================================== */

/* A JSON string from untrusted bytes. */
static json_t *jstr(const char *s, size_t len)
{
    return oai_json_text(s, len);
}

static json_t *jcstr(const char *s)
{
    return jstr(s, s ? strlen(s) : 0);
}

static json_t *jstr_or_null(const char *s)
{
    return s ? jcstr(s) : json_null();
}

/* ====================================================================== */
/* request parsing                                                         */
/* ====================================================================== */

static int bad(oai_error_t *e, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(oai_error_t *e, const char *param, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    oai_error_vset_param(e, 400, param, fmt, ap);
    va_end(ap);
    return -1;
}

static const char *json_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

/* Rejects bodies nested deeper than OAI_MAX_DEPTH before jansson recurses
 * into them. Only brackets outside strings count; malformed JSON is left for
 * jansson to report. */
static int depth_ok(const uint8_t *b, size_t n)
{
    int depth = 0, in_str = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = b[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '[' || c == '{') {
            if (++depth > OAI_MAX_DEPTH)
                return 0;
        } else if (c == ']' || c == '}') {
            depth--;
        }
    }
    return 1;
}

/* Field getters: absent or null → leave *out (the default), return 0. */

static int get_bool(json_t *obj, const char *key, bool *out, oai_error_t *e)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return bad(e, key, "'%s' must be a boolean, got %s.", key, json_type_name(v));
    *out = json_is_true(v);
    return 0;
}

/* An integer value (integral reals like 5.0 accepted) in [lo, hi]. */
static int int_value(json_t *v, const char *param, int64_t lo, int64_t hi, int64_t *out, oai_error_t *e)
{
    int64_t x;
    if (json_is_integer(v)) {
        x = json_integer_value(v);
    } else if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d != floor(d) || !(d >= -9.2e18 && d <= 9.2e18))
            return bad(e, param, "'%s' must be an integer, got %g.", param, d);
        x = (int64_t)d;
    } else {
        return bad(e, param, "'%s' must be an integer, got %s.", param, json_type_name(v));
    }
    if (x < lo || x > hi)
        return bad(e, param, "'%s' must be between %" PRId64 " and %" PRId64 ", got %" PRId64 ".", param, lo,
                   hi, x);
    *out = x;
    return 0;
}

static int get_int(json_t *obj, const char *key, int64_t lo, int64_t hi, int64_t *out, int *present,
                   oai_error_t *e)
{
    json_t *v = json_object_get(obj, key);
    if (present)
        *present = 0;
    if (!v || json_is_null(v))
        return 0;
    if (int_value(v, key, lo, hi, out, e) != 0)
        return -1;
    if (present)
        *present = 1;
    return 0;
}

/* A string of ≤ max bytes (copied); *out stays NULL when absent/null. */
static int get_str(json_t *obj, const char *key, size_t max, int nonempty, char **out, oai_error_t *e)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return bad(e, key, "'%s' must be a string, got %s.", key, json_type_name(v));
    size_t n = json_string_length(v);
    if (n > max)
        return bad(e, key, "'%s' is longer than %zu bytes.", key, max);
    if (nonempty && n == 0)
        return bad(e, key, "'%s' must not be empty.", key);
    *out = xstrndup(json_string_value(v), n);
    return 0;
}

/* llama.cpp's per-request `lora`: [{"id": N, "scale": S}, ...] (scale [1]);
 * absent or null = none. The ids are checked against the adapters later
 * (gateway/lora_table.h). */
static int parse_lora(json_t *root, request_t *r, oai_error_t *e)
{
    json_t *v = json_object_get(root, "lora"), *it;
    size_t i;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_array(v) || json_array_size(v) > REQUEST_MAX_LORA_IDS)
        return bad(e, "lora", "'lora' must be an array of at most %d {\"id\", \"scale\"} objects.",
                   REQUEST_MAX_LORA_IDS);
    json_array_foreach(v, i, it) {
        json_t *scale = json_object_get(it, "scale");
        request_lora_id_t *l = &r->lora_ids[r->n_lora_ids];
        *l = (request_lora_id_t){.scale = 1.0};
        int has_id = 0;
        if (!json_is_object(it) || get_int(it, "id", 0, INT32_MAX, &l->id, &has_id, e) || !has_id)
            return bad(e, "lora", "'lora[%zu]' must be an object with an integer 'id' (GET /lora-adapters).", i);
        if (scale && !json_is_null(scale)) {
            if (!json_is_number(scale) || !isfinite(json_number_value(scale)) ||
                fabs(json_number_value(scale)) > 100.0)
                return bad(e, "lora", "'lora[%zu].scale' must be a number in -100..100.", i);
            l->scale = json_number_value(scale);
        }
        r->n_lora_ids++;
    }
    return 0;
}

static int parse_role(json_t *v, const char *param, request_role_t *out, oai_error_t *e)
{
    if (!v)
        return bad(e, param, "Missing required parameter '%s'.", param);
    if (!json_is_string(v))
        return bad(e, param, "'%s' must be a string, got %s.", param, json_type_name(v));
    const char *s = json_string_value(v);
    if (strcmp(s, "system") == 0 || strcmp(s, "developer") == 0)
        *out = REQUEST_ROLE_SYSTEM;
    else if (strcmp(s, "user") == 0)
        *out = REQUEST_ROLE_USER;
    else if (strcmp(s, "assistant") == 0)
        *out = REQUEST_ROLE_ASSISTANT;
    else if (strcmp(s, "tool") == 0)
        *out = REQUEST_ROLE_TOOL;
    else
        return bad(e, param, "Unknown role '%.64s' in '%s'; expected 'system', 'developer', 'user', "
                             "'assistant' or 'tool'.", s, param);
    return 0;
}

/* An image_url part's URL: a string, or {"url": str, "detail": "auto"|"low"|"high"}
 * (detail is accepted and ignored: the encoder has one input size). */
static int image_part(json_t *p, const char *pp, request_t *r, request_message_t *m, oai_error_t *e)
{
    char up[160];
    snprintf(up, sizeof(up), "%s.image_url", pp);
    json_t *iu = json_object_get(p, "image_url");
    json_t *url = iu;
    if (json_is_object(iu)) {
        url = json_object_get(iu, "url");
        json_t *d = json_object_get(iu, "detail");
        if (d && !json_is_null(d) &&
            (!json_is_string(d) || (strcmp(json_string_value(d), "auto") && strcmp(json_string_value(d), "low") &&
                                    strcmp(json_string_value(d), "high"))))
            return bad(e, up, "'%s.detail' must be 'auto', 'low' or 'high'.", up);
        snprintf(up, sizeof(up), "%s.image_url.url", pp);
    }
    if (!json_is_string(url))
        return bad(e, up, "'%s' must be a string (a data:image/...;base64, URL) or an object with 'url'.", up);
    int i = request_image_add_url(r, json_string_value(url), json_string_length(url), up, e);
    if (i < 0)
        return -1;
    request_message_add_image(m, i);
    return 0;
}

/* Content: a string, or an array of {"type":"text","text":…} parts joined
 * with "\n" (as vLLM does for text-only chat templates). With image_url
 * parts the message also gets its parts in order (request_message_t.parts). */
static int parse_content(json_t *v, request_role_t role, size_t i_msg, request_t *r, request_message_t *m,
                         oai_error_t *e)
{
    char param[96];
    snprintf(param, sizeof(param), "messages[%zu].content", i_msg);
    if (!v || json_is_null(v)) {
        if (role == REQUEST_ROLE_ASSISTANT) {
            m->content = xstrdup("");
            return 0;
        }
        return bad(e, param, "Missing required parameter '%s'.", param);
    }
    if (json_is_string(v)) {
        size_t n = json_string_length(v);
        if (n > OAI_MAX_TEXT_BYTES)
            return bad(e, param, "'%s' is longer than %u bytes.", param, OAI_MAX_TEXT_BYTES);
        m->content = xstrndup(json_string_value(v), n);
        m->content_len = n;
        return 0;
    }
    if (!json_is_array(v))
        return bad(e, param, "'%s' must be a string or an array of content parts, got %s.", param,
                   json_type_name(v));
    size_t n_parts = json_array_size(v);
    if (n_parts > OAI_MAX_CONTENT_PARTS)
        return bad(e, param, "'%s' has more than %d parts.", param, OAI_MAX_CONTENT_PARTS);
    size_t total = 0, n_text = 0;
    bool images = false;
    for (size_t k = 0; k < n_parts; k++) {
        json_t *p = json_array_get(v, k);
        char pp[128];
        snprintf(pp, sizeof(pp), "%s[%zu]", param, k);
        if (!json_is_object(p))
            return bad(e, pp, "'%s' must be an object, got %s.", pp, json_type_name(p));
        json_t *type = json_object_get(p, "type");
        char tp[140];
        snprintf(tp, sizeof(tp), "%s.type", pp);
        if (!json_is_string(type))
            return bad(e, tp, "'%s' must be a string.", tp);
        const char *ts = json_string_value(type);
        if (strcmp(ts, "image_url") == 0 && role == REQUEST_ROLE_USER) {
            images = true;
            continue;
        }
        if (strcmp(ts, "text") != 0) {
            if (strcmp(ts, "image_url") == 0)
                return bad(e, tp, "Images are accepted in user messages only.");
            if (strcmp(ts, "input_image") == 0 || strcmp(ts, "input_audio") == 0 ||
                strcmp(ts, "audio_url") == 0 || strcmp(ts, "video_url") == 0 || strcmp(ts, "file") == 0)
                return bad(e, tp, "Content part type '%s' is not supported: the models served here take "
                                  "text and images (image_url).", ts);
            return bad(e, tp, "Unknown content part type '%.64s'; only 'text' and 'image_url' are supported.",
                       ts);
        }
        json_t *text = json_object_get(p, "text");
        char xp[140];
        snprintf(xp, sizeof(xp), "%s.text", pp);
        if (!json_is_string(text))
            return bad(e, xp, "'%s' must be a string.", xp);
        total += json_string_length(text) + (n_text++ > 0);
        if (total > OAI_MAX_TEXT_BYTES)
            return bad(e, param, "'%s' is longer than %u bytes.", param, OAI_MAX_TEXT_BYTES);
    }
    m->content = xmalloc(total + 1);
    size_t o = 0;
    n_text = 0;
    for (size_t k = 0; k < n_parts; k++) {
        json_t *p = json_array_get(v, k);
        if (strcmp(json_string_value(json_object_get(p, "type")), "image_url") == 0) {
            char pp[128];
            snprintf(pp, sizeof(pp), "%s[%zu]", param, k);
            if (image_part(p, pp, r, m, e) < 0)
                return -1;
            continue;
        }
        json_t *text = json_object_get(p, "text");
        if (n_text++ > 0)
            m->content[o++] = '\n';
        memcpy(m->content + o, json_string_value(text), json_string_length(text));
        o += json_string_length(text);
        if (images)
            request_message_add_text(m, json_string_value(text), json_string_length(text));
    }
    m->content[o] = '\0';
    m->content_len = o;
    return 0;
}

static int parse_messages(json_t *root, request_t *r, oai_error_t *e)
{
    json_t *msgs = json_object_get(root, "messages");
    if (!msgs || json_is_null(msgs))
        return bad(e, "messages", "Missing required parameter 'messages'.");
    if (!json_is_array(msgs))
        return bad(e, "messages", "'messages' must be an array, got %s.", json_type_name(msgs));
    size_t n = json_array_size(msgs);
    if (n == 0)
        return bad(e, "messages", "'messages' must contain at least one message.");
    if (n > OAI_MAX_MESSAGES)
        return bad(e, "messages", "'messages' has %zu messages; at most %d are accepted.", n, OAI_MAX_MESSAGES);
    r->messages = xcalloc(n, sizeof(request_message_t));
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(msgs, i);
        char param[96];
        snprintf(param, sizeof(param), "messages[%zu]", i);
        if (!json_is_object(m))
            return bad(e, param, "'%s' must be an object, got %s.", param, json_type_name(m));
        request_message_t *out = &r->messages[i];
        r->n_messages = i + 1; /* so request_free releases what is filled */
        char rp[112];
        snprintf(rp, sizeof(rp), "%s.role", param);
        if (parse_role(json_object_get(m, "role"), rp, &out->role, e) != 0)
            return -1;
        if (oai_tools_parse_message(m, i, out, e) != 0)
            return -1;
        if (parse_content(json_object_get(m, "content"), out->role, i, r, out, e) != 0)
            return -1;
        total += out->content_len;
        if (total > OAI_MAX_TEXT_BYTES)
            return bad(e, "messages", "The messages are longer than %u bytes in total.", OAI_MAX_TEXT_BYTES);
        json_t *name = json_object_get(m, "name");
        if (name && !json_is_null(name)) {
            snprintf(rp, sizeof(rp), "%s.name", param);
            if (!json_is_string(name) || json_string_length(name) > OAI_MAX_NAME_BYTES)
                return bad(e, rp, "'%s' must be a string of at most %d bytes.", rp, OAI_MAX_NAME_BYTES);
            out->name = xstrndup(json_string_value(name), json_string_length(name));
        }
    }
    return 0;
}

static int parse_token_array(json_t *arr, const char *param, request_t *r, oai_error_t *e)
{
    size_t n = json_array_size(arr);
    if (n == 0)
        return bad(e, param, "'%s' must not be empty.", param);
    if (n > OAI_MAX_PROMPT_TOKENS)
        return bad(e, param, "'%s' has more than %u tokens.", param, OAI_MAX_PROMPT_TOKENS);
    r->prompt_tokens = xmalloc(n * sizeof(int32_t));
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(arr, i);
        char tp[96];
        snprintf(tp, sizeof(tp), "%s[%zu]", param, i);
        if (!json_is_integer(t))
            return bad(e, tp, "'%s' must be a token id (integer), got %s; mixed prompt arrays are not "
                              "supported.", tp, json_type_name(t));
        json_int_t v = json_integer_value(t);
        if (v < 0 || v > INT32_MAX)
            return bad(e, tp, "'%s' is not a valid token id: %lld.", tp, (long long)v);
        r->prompt_tokens[i] = (int32_t)v;
        r->n_prompt_tokens = i + 1;
    }
    return 0;
}

static int parse_prompt(json_t *root, request_t *r, oai_error_t *e)
{
    json_t *p = json_object_get(root, "prompt");
    if (!p || json_is_null(p))
        return bad(e, "prompt", "Missing required parameter 'prompt'.");
    if (json_is_array(p) && json_array_size(p) > 0) {
        json_t *first = json_array_get(p, 0);
        size_t n = json_array_size(p);
        if (json_is_integer(first))
            return parse_token_array(p, "prompt", r, e);
        if (n > 1 && (json_is_string(first) || json_is_array(first)))
            return bad(e, "prompt", "Multiple prompts in one request (%zu given) are not supported; send "
                                    "one request per prompt.", n);
        if (json_is_array(first))
            return parse_token_array(first, "prompt[0]", r, e);
        if (!json_is_string(first))
            return bad(e, "prompt[0]", "'prompt[0]' must be a string or a token id, got %s.",
                       json_type_name(first));
        p = first;
    } else if (json_is_array(p)) {
        return bad(e, "prompt", "'prompt' must not be empty.");
    }
    if (!json_is_string(p))
        return bad(e, "prompt", "'prompt' must be a string, an array of token ids, or an array with one "
                                "string; got %s.", json_type_name(p));
    size_t n = json_string_length(p);
    if (n == 0)
        return bad(e, "prompt", "'prompt' must not be empty.");
    if (n > OAI_MAX_TEXT_BYTES)
        return bad(e, "prompt", "'prompt' is longer than %u bytes.", OAI_MAX_TEXT_BYTES);
    r->prompt = xstrndup(json_string_value(p), n);
    r->prompt_len = n;
    return 0;
}

static int parse_stop(json_t *root, request_t *r, oai_error_t *e)
{
    json_t *v = json_object_get(root, "stop");
    if (!v || json_is_null(v))
        return 0;
    if (json_is_string(v)) {
        size_t n = json_string_length(v);
        if (n == 0 || n > OAI_MAX_STOP_BYTES)
            return bad(e, "stop", "'stop' strings must be 1..%d bytes long.", OAI_MAX_STOP_BYTES);
        r->stop = xcalloc(1, sizeof(char *));
        r->stop[0] = xstrndup(json_string_value(v), n);
        r->n_stop = 1;
        return 0;
    }
    if (!json_is_array(v))
        return bad(e, "stop", "'stop' must be a string or an array of strings, got %s.", json_type_name(v));
    size_t n = json_array_size(v);
    if (n > OAI_MAX_STOP)
        return bad(e, "stop", "'stop' has %zu entries; at most %d are accepted.", n, OAI_MAX_STOP);
    if (n == 0)
        return 0;
    r->stop = xcalloc(n, sizeof(char *));
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_array_get(v, i);
        char sp[32];
        snprintf(sp, sizeof(sp), "stop[%zu]", i);
        if (!json_is_string(s))
            return bad(e, sp, "'%s' must be a string, got %s.", sp, json_type_name(s));
        size_t len = json_string_length(s);
        if (len == 0 || len > OAI_MAX_STOP_BYTES)
            return bad(e, sp, "'%s' must be 1..%d bytes long.", sp, OAI_MAX_STOP_BYTES);
        r->stop[i] = xstrndup(json_string_value(s), len);
        r->n_stop = i + 1;
    }
    return 0;
}

static int parse_logit_bias(json_t *root, request_t *r, oai_error_t *e)
{
    json_t *v = json_object_get(root, "logit_bias");
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_object(v))
        return bad(e, "logit_bias", "'logit_bias' must be an object mapping token ids to biases, got %s.",
                   json_type_name(v));
    size_t n = json_object_size(v);
    if (n > OAI_MAX_LOGIT_BIAS)
        return bad(e, "logit_bias", "'logit_bias' has %zu entries; at most %d are accepted.", n,
                   OAI_MAX_LOGIT_BIAS);
    if (n == 0)
        return 0;
    r->logit_bias = xcalloc(n, sizeof(request_logit_bias_t));
    const char *key;
    json_t *val;
    json_object_foreach(v, key, val) {
        char kp[64];
        snprintf(kp, sizeof(kp), "logit_bias.%.40s", key);
        size_t kl = strlen(key);
        int64_t id = 0;
        int ok = kl >= 1 && kl <= 10;
        for (size_t i = 0; ok && i < kl; i++) {
            ok = key[i] >= '0' && key[i] <= '9';
            id = id * 10 + (key[i] - '0');
        }
        if (!ok || id > INT32_MAX)
            return bad(e, kp, "'logit_bias' keys must be token ids written as decimal strings; got '%.40s'.",
                       key);
        if (!json_is_number(val))
            return bad(e, kp, "'%s' must be a number, got %s.", kp, json_type_name(val));
        double b = json_number_value(val);
        if (!(b >= -100.0 && b <= 100.0))
            return bad(e, kp, "'%s' must be between -100 and 100, got %g.", kp, b);
        r->logit_bias[r->n_logit_bias++] = (request_logit_bias_t){(int32_t)id, (float)b};
    }
    return 0;
}

/* Fields we know but cannot honour: refuse rather than ignore. */
static int refuse_unsupported(json_t *root, request_kind_t kind, int64_t n, oai_error_t *e)
{
    if (kind == REQUEST_COMPLETION) {
        /* best_of generates best_of completions and returns the n with the
         * highest mean logprob: not done here. best_of == n (or 1 with n 1)
         * asks for no ranking and is accepted. */
        int64_t best_of = 1;
        int has_best_of = 0;
        if (get_int(root, "best_of", INT64_MIN, INT64_MAX, &best_of, &has_best_of, e) != 0)
            return -1;
        if (has_best_of && best_of != 1 && best_of != n)
            return bad(e, "best_of", "'best_of' (%" PRId64 ") is not supported: pagoda does not rank "
                                     "candidates. Use 'n' to get several completions.", best_of);
        bool echo = false;
        if (get_bool(root, "echo", &echo, e) != 0)
            return -1;
        if (echo)
            return bad(e, "echo", "'echo': true is not supported yet.");
        json_t *suffix = json_object_get(root, "suffix");
        if (suffix && !json_is_null(suffix)) {
            if (!json_is_string(suffix))
                return bad(e, "suffix", "'suffix' must be a string, got %s.", json_type_name(suffix));
            if (json_string_length(suffix) > 0)
                return bad(e, "suffix", "'suffix' (fill-in-the-middle) is not supported.");
        }
    }
    return 0;
}

/* Checks GBNF text by compiling it; 0 ok, else a 400 naming param. */
static int check_grammar(const char *text, const char *param, const char *what, oai_error_t *e)
{
    grammar_t *g = NULL;
    char msg[400];
    if (gbnf_parse((const uint8_t *)text, strlen(text), &g, msg, sizeof msg, NULL, NULL) != 0)
        return bad(e, param, "%s: %s", what, msg);
    gbnf_free(&g);
    return 0;
}

/* response_format and grammar (constrained decoding) → r->grammar. */
static int parse_constraint(json_t *root, request_t *r, oai_error_t *e)
{
    json_t *gr = json_object_get(root, "grammar");
    json_t *rf = json_object_get(root, "response_format");
    const char *type = "text";
    if (rf && !json_is_null(rf)) {
        if (!json_is_object(rf))
            return bad(e, "response_format", "'response_format' must be an object, got %s.", json_type_name(rf));
        json_t *t = json_object_get(rf, "type");
        if (!json_is_string(t))
            return bad(e, "response_format.type", "'response_format.type' must be a string.");
        type = json_string_value(t);
        if (strcmp(type, "text") && strcmp(type, "json_object") && strcmp(type, "json_schema"))
            return bad(e, "response_format.type",
                       "response_format type '%.40s' is not supported; use 'text', 'json_object' or "
                       "'json_schema'.", type);
    }
    if (gr && !json_is_null(gr)) {
        if (!json_is_string(gr))
            return bad(e, "grammar", "'grammar' must be a string (GBNF), got %s.", json_type_name(gr));
        if (strcmp(type, "text") != 0)
            return bad(e, "grammar", "'grammar' and a response_format of type '%s' cannot be combined.", type);
        if (json_string_length(gr) > OAI_MAX_GRAMMAR_BYTES)
            return bad(e, "grammar", "'grammar' is longer than %u bytes.", OAI_MAX_GRAMMAR_BYTES);
        if (check_grammar(json_string_value(gr), "grammar", "Invalid grammar", e) != 0)
            return -1;
        r->grammar = xstrdup(json_string_value(gr));
        return 0;
    }
    if (strcmp(type, "json_object") == 0) {
        r->grammar = json_schema_object_gbnf(NULL);
        return 0;
    }
    if (strcmp(type, "json_schema") != 0)
        return 0;
    json_t *js = json_object_get(rf, "json_schema");
    if (!json_is_object(js))
        return bad(e, "response_format.json_schema",
                   "'response_format.json_schema' must be an object with 'name' and 'schema'.");
    json_t *name = json_object_get(js, "name");
    if (!json_is_string(name) || json_string_length(name) < 1 || json_string_length(name) > 64)
        return bad(e, "response_format.json_schema.name",
                   "'response_format.json_schema.name' must be a string of 1 to 64 characters.");
    for (const char *c = json_string_value(name); *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '_' ||
              *c == '-'))
            return bad(e, "response_format.json_schema.name",
                       "'response_format.json_schema.name' may contain only a-z, A-Z, 0-9, '_' and '-'.");
    json_t *strict = json_object_get(js, "strict");
    if (strict && !json_is_null(strict) && !json_is_boolean(strict))
        return bad(e, "response_format.json_schema.strict", "'response_format.json_schema.strict' must be a boolean.");
    json_t *schema = json_object_get(js, "schema");
    if (!schema || json_is_null(schema)) {
        r->grammar = json_schema_object_gbnf(NULL);
        return 0;
    }
    if (!json_is_object(schema) && !json_is_boolean(schema))
        return bad(e, "response_format.json_schema.schema",
                   "'response_format.json_schema.schema' must be a JSON Schema object.");
    char msg[300], path[200];
    char *text = json_schema_to_gbnf(schema, NULL, msg, sizeof msg, path, sizeof path);
    if (!text)
        return bad(e, "response_format.json_schema.schema", "Unsupported schema%s%s: %s",
                   path[0] ? " at " : "", path, msg);
    if (check_grammar(text, "response_format.json_schema.schema", "The schema's grammar is not usable", e) != 0) {
        free(text);
        return -1;
    }
    r->grammar = text;
    return 0;
}

/* A forced tool call (tool_choice "required" or a named function) is
 * generated under a grammar of its own: the template's call syntax around
 * the tools' argument schemas (the worker builds it). A response_format
 * json_object / json_schema then has nothing to shape, since the turn has no
 * text answer: it has been validated above and is dropped, as OpenAI accepts
 * the pair and vLLM lets the tool's schema replace the response format. A
 * `grammar` is a constraint on the whole output that cannot hold beside the
 * call's: 400, as llama.cpp and vLLM refuse two constraints. */
static int forced_call_constraint(json_t *root, request_t *r, oai_error_t *e)
{
    if (r->tool_choice != REQUEST_TOOL_CHOICE_REQUIRED && r->tool_choice != REQUEST_TOOL_CHOICE_NAMED)
        return 0;
    json_t *gr = json_object_get(root, "grammar");
    if (gr && !json_is_null(gr))
        return bad(e, "grammar",
                   "'grammar' cannot be combined with tool_choice '%s': a forced tool call is "
                   "generated under its own grammar. Use tool_choice 'auto' or 'none' with a grammar.",
                   r->tool_choice == REQUEST_TOOL_CHOICE_REQUIRED ? "required" : "function");
    free(r->grammar);
    r->grammar = NULL;
    return 0;
}

/* chat_template_kwargs (vLLM): an object of extra variables for the chat
 * template. Known keys are type-checked and forwarded: enable_thinking
 * (boolean). Other keys are ignored (no template pagoda renders reads them). */
static int parse_template_kwargs(json_t *root, request_t *r, oai_error_t *e)
{
    json_t *kw = json_object_get(root, "chat_template_kwargs");
    if (!kw || json_is_null(kw))
        return 0;
    if (!json_is_object(kw))
        return bad(e, "chat_template_kwargs", "'chat_template_kwargs' must be an object, got %s.",
                   json_type_name(kw));
    json_t *think = json_object_get(kw, "enable_thinking");
    if (think && !json_is_null(think)) {
        if (!json_is_boolean(think))
            return bad(e, "chat_template_kwargs.enable_thinking",
                       "'chat_template_kwargs.enable_thinking' must be a boolean, got %s.", json_type_name(think));
        r->has_enable_thinking = true;
        r->enable_thinking = json_is_true(think);
    }
    return 0;
}

/* The required "model" string of a request body into r->model. */
static int get_model(json_t *root, request_t *r, oai_error_t *e)
{
    json_t *model = json_object_get(root, "model");
    if (!model || json_is_null(model))
        return bad(e, "model", "Missing required parameter 'model'.");
    return get_str(root, "model", OAI_MAX_MODEL_BYTES, 1, &r->model, e);
}

/* The sampling knobs, a row each of proto/sampling.h: the row's `api` key,
 * a number (an integer for an unsigned row, where -1 means 0, off), within
 * the row's request range (request_check_knobs). */
static int parse_knobs(json_t *root, request_t *r, oai_error_t *e)
{
    for (int i = 0; i < PROTO_N_KNOBS; i++) {
        const proto_knob_row_t *row = &proto_knob_rows[i];
        json_t *v = json_object_get(root, row->api);
        if (!v || json_is_null(v))
            continue;
        double x;
        if (row->is_uint) {
            int64_t n;
            if (int_value(v, row->api, -1, (int64_t)row->hi, &n, e) != 0)
                return -1;
            x = n < 0 ? 0 : (double)n;
        } else {
            if (!json_is_number(v))
                return bad(e, row->api, "'%s' must be a number, got %s.", row->api, json_type_name(v));
            x = json_number_value(v);
        }
        proto_knob_set(&r->knobs, row, x);
    }
    const proto_knob_row_t *row = request_check_knobs(r);
    if (row)
        return bad(e, row->api, "'%s' must be %s %g and <= %g, got %g.", row->api, row->lo_open ? ">" : ">=",
                   row->lo, row->hi, proto_knob_get(&r->knobs, row));
    return 0;
}

static int parse_fields(json_t *root, request_kind_t kind, request_t *r, oai_error_t *e)
{
    if (get_model(root, r, e) != 0)
        return -1;

    if (kind == REQUEST_CHAT ? parse_messages(root, r, e) : parse_prompt(root, r, e))
        return -1;
    /* n: choices from one prompt (prefilled once on the worker) */
    r->n = 1;
    if (get_int(root, "n", 1, OAI_MAX_N, &r->n, NULL, e) != 0)
        return -1;
    if (refuse_unsupported(root, kind, r->n, e) != 0)
        return -1;
    if (kind == REQUEST_CHAT && oai_tools_parse_request(root, r, e) != 0)
        return -1;
    if (kind == REQUEST_CHAT && parse_template_kwargs(root, r, e) != 0)
        return -1;

    /* max_tokens / max_completion_tokens: positive; the newer name wins. */
    int present = 0;
    if (get_int(root, "max_tokens", 1, OAI_MAX_MAX_TOKENS, &r->max_tokens, &present, e) != 0)
        return -1;
    if (kind == REQUEST_CHAT &&
        get_int(root, "max_completion_tokens", 1, OAI_MAX_MAX_TOKENS, &r->max_tokens, &present, e) != 0)
        return -1;

    if (parse_knobs(root, r, e) != 0)
        return -1;

    int has_seed = 0;
    if (get_int(root, "seed", INT64_MIN, INT64_MAX, &r->seed, &has_seed, e) != 0)
        return -1;
    r->has_seed = has_seed;

    if (parse_stop(root, r, e) || parse_logit_bias(root, r, e))
        return -1;

    if (kind == REQUEST_CHAT) {
        if (get_bool(root, "logprobs", &r->logprobs, e) != 0)
            return -1;
        int64_t top = 0;
        if (get_int(root, "top_logprobs", 0, OAI_MAX_TOP_LOGPROBS, &top, NULL, e) != 0)
            return -1;
        if (top > 0 && !r->logprobs)
            return bad(e, "top_logprobs", "'top_logprobs' requires 'logprobs': true.");
        r->top_logprobs = (int32_t)top;
    } else {
        /* Legacy completions: logprobs is an integer N = alternatives per token. */
        int64_t lp = 0;
        int has_lp = 0;
        if (get_int(root, "logprobs", 0, OAI_MAX_TOP_LOGPROBS, &lp, &has_lp, e) != 0)
            return -1;
        r->logprobs = has_lp;
        r->top_logprobs = (int32_t)lp;
    }

    if (get_bool(root, "stream", &r->stream, e) || get_bool(root, "ignore_eos", &r->ignore_eos, e))
        return -1;
    bool speculative = true;
    if (get_bool(root, "speculative", &speculative, e))
        return -1;
    r->no_spec = !speculative;
    json_t *so = json_object_get(root, "stream_options");
    if (so && !json_is_null(so)) {
        if (!r->stream)
            return bad(e, "stream_options", "'stream_options' is only allowed when 'stream' is true.");
        if (!json_is_object(so))
            return bad(e, "stream_options", "'stream_options' must be an object, got %s.", json_type_name(so));
        json_t *iu = json_object_get(so, "include_usage");
        if (iu && !json_is_null(iu)) {
            if (!json_is_boolean(iu))
                return bad(e, "stream_options.include_usage",
                           "'stream_options.include_usage' must be a boolean, got %s.", json_type_name(iu));
            r->include_usage = json_is_true(iu);
        }
    }
    if (get_str(root, "user", OAI_MAX_USER_BYTES, 0, &r->user, e) != 0)
        return -1;
    if (get_str(root, "cache_salt", PARTITION_SALT_MAX, 1, &r->cache_salt, e) != 0)
        return -1;
    if (parse_lora(root, r, e) != 0)
        return -1;
    if (parse_constraint(root, r, e) != 0)
        return -1;
    return forced_call_constraint(root, r, e);
}

/* The request body as a JSON document (owned by the caller), or NULL with
 * *err set: empty body, nesting deeper than OAI_MAX_DEPTH, invalid JSON or
 * duplicate keys, or a document that is not an object. The one entry of
 * every body parser below. */
static json_t *load_body(const uint8_t *body, size_t len, oai_error_t *err)
{
    if (!body || len == 0) {
        bad(err, NULL, "The request body is empty; expected a JSON object.");
        return NULL;
    }
    if (!depth_ok(body, len)) {
        bad(err, NULL, "The JSON body is nested deeper than %d levels.", OAI_MAX_DEPTH);
        return NULL;
    }
    json_error_t jerr;
    json_t *root = json_loadb((const char *)body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        bad(err, NULL, "We could not parse the JSON body of your request: %s (line %d, column %d).", jerr.text,
            jerr.line, jerr.column);
        return NULL;
    }
    if (!json_is_object(root)) {
        bad(err, NULL, "The request body must be a JSON object, got %s.", json_type_name(root));
        json_decref(root);
        return NULL;
    }
    return root;
}

json_t *oai_load_body(const uint8_t *body, size_t len, oai_error_t *err)
{
    memset(err, 0, sizeof(*err));
    return load_body(body, len, err);
}

int oai_parse_chat_root(json_t *root, request_t *out, oai_error_t *err)
{
    memset(err, 0, sizeof(*err));
    request_init(out, REQUEST_CHAT, REQUEST_OP_GENERATE);
    int rc = parse_fields(root, REQUEST_CHAT, out, err);
    if (rc != 0) {
        request_free(out);
        out->kind = REQUEST_CHAT;
    }
    return rc;
}

int oai_parse_request(const uint8_t *body, size_t len, request_kind_t kind, request_t *out, oai_error_t *err)
{
    memset(err, 0, sizeof(*err));
    request_init(out, kind, REQUEST_OP_GENERATE);
    json_t *root = load_body(body, len, err);
    if (!root)
        return -1;
    int rc = parse_fields(root, kind, out, err);
    json_decref(root);
    if (rc != 0) {
        request_free(out);
        out->kind = kind;
    }
    return rc;
}

static int parse_tokenizer_fields(json_t *root, request_op_t op, request_t *r, oai_error_t *e)
{
    if (get_model(root, r, e) != 0)
        return -1;
    if (op == REQUEST_OP_DETOKENIZE) {
        json_t *t = json_object_get(root, "tokens");
        if (!t || json_is_null(t))
            return bad(e, "tokens", "Missing required parameter 'tokens'.");
        if (!json_is_array(t))
            return bad(e, "tokens", "'tokens' must be an array of token ids, got %s.", json_type_name(t));
        return parse_token_array(t, "tokens", r, e);
    }
    json_t *msgs = json_object_get(root, "messages");
    if (msgs && !json_is_null(msgs)) {
        if (json_object_get(root, "prompt") && !json_is_null(json_object_get(root, "prompt")))
            return bad(e, "prompt", "Give either 'prompt' or 'messages', not both.");
        r->kind = REQUEST_CHAT;
        if (parse_messages(root, r, e) != 0)
            return -1;
    } else if (parse_prompt(root, r, e) != 0) {
        return -1;
    }
    /* vLLM names it add_special_tokens, llama.cpp add_special */
    const char *names[] = {"add_special_tokens", "add_special"};
    for (int i = 0; i < 2; i++)
        if (get_bool(root, names[i], &r->add_special, e) != 0)
            return -1;
    return 0;
}

int oai_parse_tokenizer(const uint8_t *body, size_t len, request_op_t op, request_t *out,
                        oai_error_t *err)
{
    memset(err, 0, sizeof(*err));
    assert(op == REQUEST_OP_TOKENIZE || op == REQUEST_OP_DETOKENIZE);
    request_init(out, REQUEST_COMPLETION, op);
    json_t *root = load_body(body, len, err);
    if (!root)
        return -1;
    int rc = parse_tokenizer_fields(root, op, out, err);
    json_decref(root);
    if (rc != 0) {
        request_free(out);
        out->kind = REQUEST_COMPLETION;
        out->op = op;
    }
    return rc;
}

/* ---- /v1/embeddings ------------------------------------------------------ */

static int embed_ids(json_t *arr, const char *param, request_embed_input_t *in, size_t *total,
                     oai_error_t *e)
{
    size_t n = json_array_size(arr);
    if (n == 0)
        return bad(e, param, "'%s' must not be an empty array of token ids.", param);
    if (n > OAI_MAX_PROMPT_TOKENS - *total)
        return bad(e, param, "'input' has more than %u tokens in all.", OAI_MAX_PROMPT_TOKENS);
    *total += n;
    in->ids = xmalloc(n * sizeof *in->ids);
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(arr, i);
        char tp[96];
        snprintf(tp, sizeof tp, "%s[%zu]", param, i);
        if (!json_is_integer(t))
            return bad(e, tp, "'%s' must be a token id (integer), got %s.", tp, json_type_name(t));
        json_int_t v = json_integer_value(t);
        if (v < 0 || v > INT32_MAX)
            return bad(e, tp, "'%s' is not a valid token id: %lld.", tp, (long long)v);
        in->ids[i] = (int32_t)v;
        in->n_ids = i + 1;
    }
    return 0;
}

static int embed_text(json_t *v, const char *param, request_embed_input_t *in, size_t *total,
                      oai_error_t *e)
{
    size_t n = json_string_length(v);
    if (n == 0)
        return bad(e, param, "'%s' must not be an empty string.", param);
    if (n > OAI_MAX_TEXT_BYTES - *total)
        return bad(e, param, "'input' is longer than %u bytes in all.", OAI_MAX_TEXT_BYTES);
    if (memchr(json_string_value(v), 0, n))
        return bad(e, param, "'%s' contains a NUL character.", param);
    *total += n;
    in->text = xstrndup(json_string_value(v), n);
    in->text_len = n;
    return 0;
}

static int parse_embeddings_fields(json_t *root, request_t *r, oai_error_t *e)
{
    if (get_model(root, r, e) != 0)
        return -1;
    if (get_str(root, "user", OAI_MAX_USER_BYTES, 0, &r->user, e) != 0)
        return -1;
    json_t *fmt = json_object_get(root, "encoding_format");
    if (fmt && !json_is_null(fmt)) {
        const char *f = json_is_string(fmt) ? json_string_value(fmt) : NULL;
        if (f && strcmp(f, "base64") == 0)
            r->base64 = true;
        else if (!f || strcmp(f, "float") != 0)
            return bad(e, "encoding_format", "'encoding_format' must be \"float\" or \"base64\".");
    }
    json_t *dims = json_object_get(root, "dimensions");
    if (dims && !json_is_null(dims)) {
        if (!json_is_integer(dims) || json_integer_value(dims) < 1 ||
            json_integer_value(dims) > OAI_MAX_EMBED_DIM)
            return bad(e, "dimensions", "'dimensions' must be an integer in [1, %d].", OAI_MAX_EMBED_DIM);
        r->dimensions = json_integer_value(dims);
    }
    json_t *in = json_object_get(root, "input");
    if (!in || json_is_null(in))
        return bad(e, "input", "Missing required parameter 'input'.");
    size_t total_bytes = 0, total_ids = 0;
    if (json_is_string(in)) {
        r->inputs = xcalloc(1, sizeof *r->inputs);
        r->n_inputs = 1;
        return embed_text(in, "input", &r->inputs[0], &total_bytes, e);
    }
    if (!json_is_array(in))
        return bad(e, "input", "'input' must be a string, an array of strings, an array of token ids or an "
                               "array of token-id arrays, got %s.", json_type_name(in));
    size_t n = json_array_size(in);
    if (n == 0)
        return bad(e, "input", "'input' must not be an empty array.");
    json_t *first = json_array_get(in, 0);
    if (json_is_integer(first)) { /* one input given as token ids */
        r->inputs = xcalloc(1, sizeof *r->inputs);
        r->n_inputs = 1;
        return embed_ids(in, "input", &r->inputs[0], &total_ids, e);
    }
    if (n > OAI_MAX_EMBED_INPUTS)
        return bad(e, "input", "'input' has %zu inputs; this server embeds at most %d per request.", n,
                   OAI_MAX_EMBED_INPUTS);
    bool text = json_is_string(first);
    if (!text && !json_is_array(first))
        return bad(e, "input[0]", "'input[0]' must be a string, a token id or an array of token ids, got %s.",
                   json_type_name(first));
    r->inputs = xcalloc(n, sizeof *r->inputs);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(in, i);
        char tp[64];
        snprintf(tp, sizeof tp, "input[%zu]", i);
        r->n_inputs = i + 1; /* what request_free must release */
        if (text ? !json_is_string(v) : !json_is_array(v))
            return bad(e, tp, "'%s' must be %s like input[0], got %s; mixed input arrays are not supported.",
                       tp, text ? "a string" : "an array of token ids", json_type_name(v));
        if ((text ? embed_text(v, tp, &r->inputs[i], &total_bytes, e)
                  : embed_ids(v, tp, &r->inputs[i], &total_ids, e)) != 0)
            return -1;
    }
    return 0;
}

int oai_parse_embeddings(const uint8_t *body, size_t len, request_t *out, oai_error_t *err)
{
    memset(err, 0, sizeof(*err));
    request_init(out, REQUEST_COMPLETION, REQUEST_OP_EMBED);
    json_t *root = load_body(body, len, err);
    if (!root)
        return -1;
    int rc = parse_embeddings_fields(root, out, err);
    json_decref(root);
    if (rc != 0) {
        request_free(out);
        out->kind = REQUEST_COMPLETION;
        out->op = REQUEST_OP_EMBED;
    }
    return rc;
}

/* ====================================================================== */
/* responses                                                               */
/* ====================================================================== */

/* Logprobs are float32 on the worker: 9 significant digits keep them exact. */
#define DUMP_FLAGS (JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(9))

static char *dump(json_t *root)
{
    char *s = json_dumps(root, DUMP_FLAGS);
    json_decref(root);
    if (!s)
        abort(); /* only OOM makes json_dumps fail on a tree we built */
    return s;
}

static json_t *jlogprob(double lp)
{
    return json_real(isfinite(lp) ? lp : -9999.0);
}

static json_t *jbytes(const char *s, size_t len)
{
    json_t *a = json_array();
    for (size_t i = 0; i < len; i++)
        json_array_append_new(a, json_integer((uint8_t)s[i]));
    return a;
}

static json_t *logprobs_chat(const oai_logprobs_t *lp)
{
    if (!lp || !lp->present)
        return json_null();
    json_t *content = json_array();
    for (size_t i = 0; i < lp->n_tokens; i++) {
        const oai_token_logprob_t *t = &lp->tokens[i];
        json_t *top = json_array();
        for (size_t k = 0; k < t->n_top; k++) {
            const oai_top_logprob_t *a = &t->top[k];
            json_array_append_new(top, json_pack("{s:o, s:o, s:o}", "token", jstr(a->token, a->token_len),
                                                 "logprob", jlogprob(a->logprob), "bytes",
                                                 jbytes(a->token, a->token_len)));
        }
        json_array_append_new(content, json_pack("{s:o, s:o, s:o, s:o}", "token", jstr(t->token, t->token_len),
                                                 "logprob", jlogprob(t->logprob), "bytes",
                                                 jbytes(t->token, t->token_len), "top_logprobs", top));
    }
    return json_pack("{s:o, s:n}", "content", content, "refusal");
}

static json_t *logprobs_completion(const oai_logprobs_t *lp)
{
    if (!lp || !lp->present)
        return json_null();
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    int64_t off = lp->text_offset0;
    for (size_t i = 0; i < lp->n_tokens; i++) {
        const oai_token_logprob_t *t = &lp->tokens[i];
        json_t *tok = jstr(t->token, t->token_len);
        int64_t n_cp = (int64_t)utf8_count(json_string_value(tok), json_string_length(tok));
        json_array_append_new(tokens, tok);
        json_array_append_new(lps, jlogprob(t->logprob));
        json_t *top = json_object();
        for (size_t k = 0; k < t->n_top; k++) {
            size_t n;
            char *key = utf8_sanitize(t->top[k].token, t->top[k].token_len, &n);
            /* Keys are C strings: an embedded NUL would truncate, so use setn. */
            json_object_setn_new_nocheck(top, key, n, jlogprob(t->top[k].logprob));
            free(key);
        }
        json_array_append_new(tops, top);
        json_array_append_new(offs, json_integer(off));
        off += n_cp;
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", lps, "top_logprobs", tops,
                     "text_offset", offs);
}

char *oai_logprobs_chat_json(const oai_logprobs_t *lp)
{
    return dump(logprobs_chat(lp));
}

char *oai_logprobs_completion_json(const oai_logprobs_t *lp)
{
    return dump(logprobs_completion(lp));
}

static json_t *usage_json(const oai_usage_t *u)
{
    return json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", (json_int_t)u->prompt_tokens,
                     "completion_tokens", (json_int_t)u->completion_tokens, "total_tokens",
                     (json_int_t)(u->prompt_tokens + u->completion_tokens), "prompt_tokens_details",
                     "cached_tokens", (json_int_t)u->cached_tokens);
}

static json_t *envelope(const oai_meta_t *meta, const char *object)
{
    return json_pack("{s:o, s:s, s:I, s:o, s:o}", "id", jcstr(meta->id), "object", object, "created",
                     (json_int_t)meta->created, "model", jcstr(meta->model), "system_fingerprint",
                     jstr_or_null(meta->system_fingerprint));
}

char *oai_chat_completion_n_json(const oai_meta_t *meta, const oai_choice_t *choices, size_t n,
                                 const oai_usage_t *usage)
{
    json_t *root = envelope(meta, "chat.completion");
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        const oai_choice_t *c = &choices[i];
        json_array_append_new(arr, json_pack("{s:I, s:{s:s, s:o}, s:o, s:o}", "index", (json_int_t)i,
                                             "message", "role", "assistant", "content",
                                             jstr(c->text, c->text_len), "logprobs",
                                             logprobs_chat(c->logprobs), "finish_reason",
                                             jstr_or_null(c->finish_reason)));
    }
    json_object_set_new(root, "choices", arr);
    static const oai_usage_t zero;
    json_object_set_new(root, "usage", usage_json(usage ? usage : &zero));
    return dump(root);
}

char *oai_completion_n_json(const oai_meta_t *meta, const oai_choice_t *choices, size_t n,
                            const oai_usage_t *usage)
{
    json_t *root = envelope(meta, "text_completion");
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        const oai_choice_t *c = &choices[i];
        json_array_append_new(arr, json_pack("{s:o, s:I, s:o, s:o}", "text", jstr(c->text, c->text_len),
                                             "index", (json_int_t)i, "logprobs",
                                             logprobs_completion(c->logprobs), "finish_reason",
                                             jstr_or_null(c->finish_reason)));
    }
    json_object_set_new(root, "choices", arr);
    static const oai_usage_t zero;
    json_object_set_new(root, "usage", usage_json(usage ? usage : &zero));
    return dump(root);
}

char *oai_chat_completion_json(const oai_meta_t *meta, const char *content, size_t content_len,
                               const char *finish_reason, const oai_logprobs_t *lp,
                               const oai_usage_t *usage)
{
    oai_choice_t c = {content, content_len, finish_reason, lp};
    return oai_chat_completion_n_json(meta, &c, 1, usage);
}

char *oai_completion_json(const oai_meta_t *meta, const char *text, size_t text_len,
                          const char *finish_reason, const oai_logprobs_t *lp, const oai_usage_t *usage)
{
    oai_choice_t c = {text, text_len, finish_reason, lp};
    return oai_completion_n_json(meta, &c, 1, usage);
}

static void chunk_usage(json_t *root, const oai_chunk_t *c)
{
    if (c->usage)
        json_object_set_new(root, "usage", usage_json(c->usage));
    else if (c->include_usage)
        json_object_set_new(root, "usage", json_null());
}

char *oai_chat_chunk_json(const oai_meta_t *meta, const oai_chunk_t *c)
{
    json_t *root = envelope(meta, "chat.completion.chunk");
    json_t *choices = json_array();
    if (!c->usage) {
        json_t *delta = json_object();
        if (c->role)
            json_object_set_new(delta, "role", json_string("assistant"));
        if (c->text)
            json_object_set_new(delta, "content", jstr(c->text, c->text_len));
        json_array_append_new(choices, json_pack("{s:i, s:o, s:o, s:o}", "index", (int)c->index, "delta", delta, "logprobs",
                                                 logprobs_chat(c->logprobs), "finish_reason",
                                                 jstr_or_null(c->finish_reason)));
    }
    json_object_set_new(root, "choices", choices);
    chunk_usage(root, c);
    return dump(root);
}

char *oai_completion_chunk_json(const oai_meta_t *meta, const oai_chunk_t *c)
{
    json_t *root = envelope(meta, "text_completion");
    json_t *choices = json_array();
    if (!c->usage) {
        json_array_append_new(choices, json_pack("{s:o, s:i, s:o, s:o}", "text",
                                                 jstr(c->text ? c->text : "", c->text ? c->text_len : 0),
                                                 "index", (int)c->index, "logprobs", logprobs_completion(c->logprobs),
                                                 "finish_reason", jstr_or_null(c->finish_reason)));
    }
    json_object_set_new(root, "choices", choices);
    chunk_usage(root, c);
    return dump(root);
}

char *oai_models_json(const oai_model_info_t *models, size_t n)
{
    json_t *data = json_array();
    for (size_t i = 0; i < n; i++) {
        const oai_model_info_t *m = &models[i];
        json_t *o = json_pack("{s:o, s:s, s:I, s:o}", "id", jcstr(m->id), "object", "model", "created",
                              (json_int_t)m->created, "owned_by", jcstr(m->owned_by ? m->owned_by : "pagoda"));
        if (m->max_model_len > 0)
            json_object_set_new(o, "max_model_len", json_integer(m->max_model_len));
        json_array_append_new(data, o);
    }
    return dump(json_pack("{s:s, s:o}", "object", "list", "data", data));
}

char *oai_embeddings_json(const char *model, const oai_embedding_t *emb, size_t n, bool base64,
                          uint64_t prompt_tokens)
{
    json_t *data = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *v;
        for (size_t k = 0; k < emb[i].dim; k++)
            if (!isfinite(emb[i].v[k])) {
                json_decref(data);
                return NULL;
            }
        if (base64) {
            /* OpenAI's base64: the float32 array's little-endian bytes */
            size_t nb = emb[i].dim * 4;
            uint8_t *b = xmalloc(nb ? nb : 1);
            for (size_t k = 0; k < emb[i].dim; k++) {
                uint32_t u;
                memcpy(&u, &emb[i].v[k], 4);
                b[4 * k] = (uint8_t)u;
                b[4 * k + 1] = (uint8_t)(u >> 8);
                b[4 * k + 2] = (uint8_t)(u >> 16);
                b[4 * k + 3] = (uint8_t)(u >> 24);
            }
            size_t cap = sodium_base64_ENCODED_LEN(nb, sodium_base64_VARIANT_ORIGINAL);
            char *t = xmalloc(cap);
            sodium_bin2base64(t, cap, b, nb, sodium_base64_VARIANT_ORIGINAL);
            v = json_string(t);
            free(t);
            free(b);
        } else {
            v = json_array();
            for (size_t k = 0; k < emb[i].dim; k++)
                json_array_append_new(v, json_real((double)emb[i].v[k]));
        }
        json_array_append_new(data, json_pack("{s:s, s:I, s:o}", "object", "embedding", "index",
                                              (json_int_t)i, "embedding", v));
    }
    json_t *j = json_pack("{s:s, s:o, s:s, s:{s:I, s:I}}", "object", "list", "data", data, "model",
                          model ? model : "", "usage", "prompt_tokens", (json_int_t)prompt_tokens,
                          "total_tokens", (json_int_t)prompt_tokens);
    char *out = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(j);
    if (!out)
        abort();
    return out;
}

json_t *oai_error_object(const oai_error_t *e)
{
    json_t *inner = json_pack("{s:o, s:s, s:o, s:o}", "message", jcstr(e->message), "type",
                              e->type ? e->type : "server_error", "param",
                              e->param[0] ? jcstr(e->param) : json_null(), "code", jstr_or_null(e->code));
    return json_pack("{s:o}", "error", inner);
}

char *oai_error_json(const oai_error_t *e)
{
    return dump(oai_error_object(e));
}

