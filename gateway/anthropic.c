/* anthropic.c — the Anthropic Messages API: body → chat request, answer →
 * message object / event stream, errors in Anthropic's shape (anthropic.h). */
#include "gateway/anthropic.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/xalloc.h"
#include "common/clock.h"
#include "gateway/answer.h"
#include "gateway/request_image.h"
#include "gateway/volatile_block.h"

/* ====================================================================== */
/* errors                                                                  */
/* ====================================================================== */

const char *anthropic_error_type(int status)
{
    switch (status) {
    case 400: case 405: case 413: case 414: case 415: case 421: case 422:
        return status == 413 ? "request_too_large"
                                                                          : "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    case 503: case 529: return "overloaded_error";
    default: return "api_error";
    }
}

char *anthropic_error_json(const oai_error_t *e)
{
    json_t *j = json_pack("{s:s, s:{s:s, s:o}}", "type", "error", "error", "type",
                          anthropic_error_type(e->status), "message",
                          oai_json_text(e->message, strlen(e->message)));
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return s;
}

/* ====================================================================== */
/* request                                                                 */
/* ====================================================================== */

static int bad(oai_error_t *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(oai_error_t *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    oai_error_vset(e, 400, NULL, fmt, ap);
    va_end(ap);
    return -1;
}

static bool present(json_t *v)
{
    return v && !json_is_null(v);
}

/* Text of a string or of an array of {"type":"text","text"} blocks (joined
 * with "\n"); other blocks → 400 naming `where`. New reference. */
static json_t *text_of(json_t *v, const char *where, oai_error_t *e)
{
    if (json_is_string(v))
        return json_incref(v);
    if (!json_is_array(v)) {
        bad(e, "%s must be a string or an array of text blocks.", where);
        return NULL;
    }
    size_t total = 0, i;
    json_t *b;
    json_array_foreach(v, i, b) {
        json_t *t = json_object_get(b, "text");
        const char *ty = json_string_value(json_object_get(b, "type"));
        if (!json_is_object(b) || !ty || strcmp(ty, "text") != 0 || !json_is_string(t)) {
            bad(e, "%s[%zu] must be a text block {\"type\":\"text\",\"text\":...}%s%s.", where, i,
                ty ? "; got type " : "", ty ? ty : "");
            return NULL;
        }
        total += json_string_length(t) + 1;
        if (total > OAI_MAX_TEXT_BYTES) {
            bad(e, "%s is longer than %u bytes.", where, OAI_MAX_TEXT_BYTES);
            return NULL;
        }
    }
    char *buf = xmalloc(total + 1);
    size_t o = 0;
    json_array_foreach(v, i, b) {
        json_t *t = json_object_get(b, "text");
        if (i)
            buf[o++] = '\n';
        memcpy(buf + o, json_string_value(t), json_string_length(t));
        o += json_string_length(t);
    }
    json_t *s = json_stringn(buf, o);
    free(buf);
    if (!s)
        bad(e, "%s is not valid UTF-8.", where);
    return s;
}

static bool block_is_media(const char *ty)
{
    return strcmp(ty, "image") == 0 || strcmp(ty, "document") == 0 || strcmp(ty, "search_result") == 0 ||
           strcmp(ty, "container_upload") == 0;
}

/* An image source checked as the chat parser will read it (into a
 * throw-away request): base64 data with its media type mt, or a URL (mt
 * NULL). 0, or -1 with the 400. */
static int probe_source(const json_t *mt, const json_t *data, const char *where, oai_error_t *e)
{
    request_t probe;
    request_init(&probe, REQUEST_CHAT, REQUEST_OP_GENERATE);
    int rc = mt ? request_image_add_base64(&probe, json_string_value(mt), json_string_length(mt),
                                           json_string_value(data), json_string_length(data), where, e)
                : request_image_add_url(&probe, json_string_value(data), json_string_length(data), where, e);
    request_free(&probe);
    if (rc < 0)
        e->param[0] = 0; /* Anthropic's errors name the field in the message */
    return rc < 0 ? -1 : 0;
}

/* An image block {"type":"image","source":{"type":"base64","media_type","data"}}
 * as the chat request's image_url part (a data: URL; the media type must
 * be one the server decodes and agree with the bytes' magic), or
 * {"source":{"type":"url","url"}} as one with that URL (fetched later, only
 * from the operator's allow list). New reference, or NULL with a 400. */
static json_t *image_block(json_t *b, size_t i, size_t k, oai_error_t *e)
{
    json_t *src = json_object_get(b, "source");
    const char *st = json_string_value(json_object_get(src, "type"));
    if (!json_is_object(src) || !st) {
        bad(e, "messages.%zu.content.%zu.source: must be an object with a \"type\".", i, k);
        return NULL;
    }
    if (strcmp(st, "url") == 0) { /* fetched only from the operator's allow list (gateway/image_fetch.h) */
        json_t *url = json_object_get(src, "url");
        if (!json_is_string(url)) {
            bad(e, "messages.%zu.content.%zu.source.url: must be a string.", i, k);
            return NULL;
        }
        char where[96];
        snprintf(where, sizeof where, "messages.%zu.content.%zu.source.url", i, k);
        if (probe_source(NULL, url, where, e) < 0)
            return NULL;
        return json_pack("{s:s, s:{s:O}}", "type", "image_url", "image_url", "url", url);
    }
    if (strcmp(st, "base64") != 0) {
        bad(e, "messages.%zu.content.%zu.source.type: '%.20s' is not supported; send the image as "
               "{\"type\":\"base64\",\"media_type\",\"data\"} or {\"type\":\"url\",\"url\"}.", i, k, st);
        return NULL;
    }
    json_t *mt = json_object_get(src, "media_type"), *data = json_object_get(src, "data");
    if (!json_is_string(mt) || !json_is_string(data)) {
        bad(e, "messages.%zu.content.%zu.source: \"media_type\" and \"data\" must be strings.", i, k);
        return NULL;
    }
    /* The media type against the magic here (the chat parser trusts the
     * bytes alone, as data URLs are often mislabelled). */
    char where[96];
    snprintf(where, sizeof where, "messages.%zu.content.%zu.source", i, k);
    if (probe_source(mt, data, where, e) < 0)
        return NULL;
    size_t n_mt = json_string_length(mt), n_data = json_string_length(data);
    char *url = xmalloc(n_mt + n_data + 16);
    int o = snprintf(url, n_mt + 16, "data:%s;base64,", json_string_value(mt));
    memcpy(url + o, json_string_value(data), n_data);
    json_t *u = json_stringn(url, (size_t)o + n_data);
    free(url);
    if (!u) {
        bad(e, "%s: not valid UTF-8.", where);
        return NULL;
    }
    return json_pack("{s:s, s:{s:o}}", "type", "image_url", "image_url", "url", u);
}

/* One Anthropic message (index i) appended to `msgs` as chat messages. */
static int add_message(json_t *msgs, json_t *m, size_t i, oai_error_t *e)
{
    if (!json_is_object(m))
        return bad(e, "messages.%zu: each message must be an object.", i);
    const char *role = json_string_value(json_object_get(m, "role"));
    if (!role || (strcmp(role, "user") != 0 && strcmp(role, "assistant") != 0 && strcmp(role, "system") != 0))
        return bad(e, "messages.%zu.role: must be \"user\", \"assistant\" or \"system\".", i);
    json_t *content = json_object_get(m, "content");
    if (role[0] == 's') {
        /* a system turn inside the conversation (Claude Code sends one after
         * the first user turn): a chat "system" message where it stands; the
         * chat template renders it as a system turn or folds it into a user
         * turn (common/text/chat_template.h) */
        char where[64];
        snprintf(where, sizeof where, "messages.%zu.content", i);
        json_t *t = text_of(content, where, e);
        if (!t)
            return -1;
        json_array_append_new(msgs, json_pack("{s:s, s:o}", "role", "system", "content", t));
        return 0;
    }
    bool asst = role[0] == 'a';
    if (json_is_string(content)) {
        json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", role, "content", content));
        return 0;
    }
    if (!json_is_array(content))
        return bad(e, "messages.%zu.content: must be a string or an array of content blocks.", i);
    if (json_array_size(content) > OAI_MAX_CONTENT_PARTS)
        return bad(e, "messages.%zu.content: more than %d blocks.", i, OAI_MAX_CONTENT_PARTS);
    json_t *texts = json_array();   /* text blocks of this message */
    json_t *calls = json_array();   /* assistant: tool_use → tool_calls */
    json_t *results = json_array(); /* user: tool_result → tool messages */
    int rc = -1;
    size_t k;
    json_t *b;
    json_array_foreach(content, k, b) {
        const char *ty = json_string_value(json_object_get(b, "type"));
        if (!json_is_object(b) || !ty) {
            bad(e, "messages.%zu.content.%zu: a content block must be an object with a \"type\".", i, k);
            goto out;
        }
        if (strcmp(ty, "text") == 0) {
            json_t *t = json_object_get(b, "text");
            if (!json_is_string(t)) {
                bad(e, "messages.%zu.content.%zu.text: must be a string.", i, k);
                goto out;
            }
            json_array_append_new(texts, json_pack("{s:s, s:O}", "type", "text", "text", t));
        } else if (strcmp(ty, "image") == 0 && !asst) {
            json_t *part = image_block(b, i, k, e);
            if (!part)
                goto out;
            json_array_append_new(texts, part);
        } else if (block_is_media(ty)) {
            bad(e, "messages.%zu.content.%zu: '%s' blocks are not supported: the models served here "
                   "take text only.", i, k, ty);
            goto out;
        } else if (strcmp(ty, "tool_use") == 0) {
            json_t *id = json_object_get(b, "id"), *name = json_object_get(b, "name"),
                   *input = json_object_get(b, "input");
            if (!asst) {
                bad(e, "messages.%zu.content.%zu: tool_use blocks belong in assistant messages.", i, k);
                goto out;
            }
            if (!json_is_string(id) || !json_is_string(name) || !json_is_object(input)) {
                bad(e, "messages.%zu.content.%zu: a tool_use block needs string \"id\" and \"name\" "
                       "and an object \"input\".", i, k);
                goto out;
            }
            char *args = json_dumps(input, JSON_COMPACT);
            json_array_append_new(calls, json_pack("{s:O, s:s, s:{s:O, s:s}}", "id", id, "type", "function",
                                                   "function", "name", name, "arguments", args));
            free(args);
        } else if (strcmp(ty, "tool_result") == 0) {
            json_t *id = json_object_get(b, "tool_use_id");
            if (asst) {
                bad(e, "messages.%zu.content.%zu: tool_result blocks belong in user messages.", i, k);
                goto out;
            }
            if (!json_is_string(id)) {
                bad(e, "messages.%zu.content.%zu.tool_use_id: must be a string.", i, k);
                goto out;
            }
            char where[96];
            snprintf(where, sizeof where, "messages.%zu.content.%zu.content", i, k);
            json_t *rc_ = json_object_get(b, "content");
            json_t *text = present(rc_) ? text_of(rc_, where, e) : json_string("");
            if (!text)
                goto out;
            json_t *is_err = json_object_get(b, "is_error");
            if (present(is_err) && !json_is_boolean(is_err)) {
                json_decref(text);
                bad(e, "messages.%zu.content.%zu.is_error: must be a boolean.", i, k);
                goto out;
            }
            if (json_is_true(is_err)) {
                size_t n = json_string_length(text);
                char *buf = xmalloc(n + 8);
                memcpy(buf, "Error: ", 7);
                memcpy(buf + 7, json_string_value(text), n);
                json_decref(text);
                text = json_stringn(buf, n + 7);
                free(buf);
            }
            json_array_append_new(results, json_pack("{s:s, s:O, s:o}", "role", "tool", "tool_call_id", id,
                                                     "content", text));
        } else if (strcmp(ty, "thinking") == 0 || strcmp(ty, "redacted_thinking") == 0) {
            /* earlier reasoning is not sent back to the model (as Qwen3's
             * template drops it) */
        } else {
            bad(e, "messages.%zu.content.%zu: unknown content block type '%.40s'.", i, k, ty);
            goto out;
        }
    }
    json_array_extend(msgs, results);
    if (asst) {
        json_t *am = json_pack("{s:s, s:O}", "role", "assistant", "content", texts);
        if (json_array_size(calls))
            json_object_set(am, "tool_calls", calls);
        json_array_append_new(msgs, am);
    } else if (json_array_size(texts) || !json_array_size(results)) {
        json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "user", "content", texts));
    }
    rc = 0;
out:
    json_decref(texts);
    json_decref(calls);
    json_decref(results);
    return rc;
}

static int map_tool_choice(json_t *root, json_t *chat, json_t *dropped, oai_error_t *e);

/* Anthropic-defined tools (server tools such as web_search_20250305 and
 * code_execution_*, and the schema-less bash_* / text_editor_* / computer_*
 * / memory_* tools) have a versioned "type": this server cannot run the
 * former and does not know the latter's schemas, so they are left out of the
 * prompt with a warning (400 only when tool_choice names one). */
static int map_tools(json_t *root, json_t *chat, char *warn, size_t warnlen, oai_error_t *e)
{
    json_t *tools = json_object_get(root, "tools");
    json_t *dropped = json_array();
    if (present(tools)) {
        if (!json_is_array(tools)) {
            json_decref(dropped);
            return bad(e, "tools: must be an array.");
        }
        json_t *out = json_array();
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) {
            const char *ty = json_string_value(json_object_get(t, "type"));
            if (!json_is_object(t)) {
                json_decref(out);
                json_decref(dropped);
                return bad(e, "tools.%zu: must be an object.", i);
            }
            if (ty && strcmp(ty, "custom") != 0) {
                const char *nm = json_string_value(json_object_get(t, "name"));
                json_array_append_new(dropped, json_string(nm ? nm : ty));
                request_warning_add(warn, warnlen, "tools left out (Anthropic-defined tools this server does not run)",
                                ty);
                continue;
            }
            json_t *name = json_object_get(t, "name"), *schema = json_object_get(t, "input_schema");
            if (!json_is_string(name) || !json_is_object(schema)) {
                json_decref(out);
                json_decref(dropped);
                return bad(e, "tools.%zu: a tool needs a string \"name\" and an object \"input_schema\".", i);
            }
            json_t *fn = json_pack("{s:O, s:O}", "name", name, "parameters", schema);
            json_t *d = json_object_get(t, "description");
            if (present(d))
                json_object_set(fn, "description", d);
            json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", fn));
        }
        json_object_set_new(chat, "tools", out);
    }
    int rc = map_tool_choice(root, chat, dropped, e);
    json_decref(dropped);
    return rc;
}

/* tool_choice; naming a tool that was left out (dropped) is a 400. */
static int map_tool_choice(json_t *root, json_t *chat, json_t *dropped, oai_error_t *e)
{
    json_t *tc = json_object_get(root, "tool_choice");
    if (!present(tc))
        return 0;
    const char *ty = json_string_value(json_object_get(tc, "type"));
    if (!json_is_object(tc) || !ty)
        return bad(e, "tool_choice: must be an object with a \"type\".");
    if (strcmp(ty, "auto") == 0) {
        json_object_set_new(chat, "tool_choice", json_string("auto"));
    } else if (strcmp(ty, "any") == 0) {
        json_object_set_new(chat, "tool_choice", json_string("required"));
    } else if (strcmp(ty, "none") == 0) {
        json_object_set_new(chat, "tool_choice", json_string("none"));
    } else if (strcmp(ty, "tool") == 0) {
        json_t *name = json_object_get(tc, "name");
        if (!json_is_string(name))
            return bad(e, "tool_choice.name: required (a string) with type \"tool\".");
        size_t k;
        json_t *d;
        json_array_foreach(dropped, k, d)
            if (json_equal(d, name))
                return bad(e, "tool_choice.name: '%.64s' is an Anthropic-defined tool this server does not "
                              "run.", json_string_value(name));
        json_object_set_new(chat, "tool_choice",
                            json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name", name));
    } else {
        return bad(e, "tool_choice.type: must be \"auto\", \"any\", \"tool\" or \"none\", got '%.40s'.", ty);
    }
    json_t *dp = json_object_get(tc, "disable_parallel_tool_use");
    if (present(dp)) {
        if (!json_is_boolean(dp))
            return bad(e, "tool_choice.disable_parallel_tool_use: must be a boolean.");
        json_object_set_new(chat, "parallel_tool_calls", json_boolean(!json_is_true(dp)));
    }
    return 0;
}

/* thinking: "enabled" (budget_tokens >= 1024), "adaptive" (Claude 4.6+: on,
 * no fixed budget) or "disabled"; "display" ("summarized" | "omitted") is
 * accepted: the model's own thinking is what a local model has. A budget at
 * or above max_tokens is accepted (Anthropic allows it with interleaved
 * thinking, which Claude Code always asks for): max_tokens bounds thinking
 * and answer together either way. */
static int map_thinking(json_t *root, json_t *chat, oai_error_t *e)
{
    json_t *th = json_object_get(root, "thinking");
    bool on = false;
    if (present(th)) {
        const char *ty = json_string_value(json_object_get(th, "type"));
        if (!json_is_object(th) || !ty)
            return bad(e, "thinking: must be an object with a \"type\".");
        json_t *disp = json_object_get(th, "display");
        if (present(disp) && !json_is_string(disp))
            return bad(e, "thinking.display: must be a string.");
        if (strcmp(ty, "enabled") == 0) {
            json_t *bt = json_object_get(th, "budget_tokens");
            if (!json_is_integer(bt) || json_integer_value(bt) < 1024)
                return bad(e, "thinking.budget_tokens: must be an integer >= 1024.");
            on = true;
        } else if (strcmp(ty, "adaptive") == 0) {
            on = true;
        } else if (strcmp(ty, "disabled") != 0) {
            return bad(e, "thinking.type: must be \"enabled\", \"adaptive\" or \"disabled\", got '%.40s'.",
                       ty);
        }
    }
    json_object_set_new(chat, "chat_template_kwargs", json_pack("{s:b}", "enable_thinking", on));
    return 0;
}

/* output_config: {"effort": low|medium|high|max|xhigh (accepted: a local
 * model has one effort), "format": {"type":"json_schema","schema"}} (structured
 * output → response_format json_schema). */
static int map_output_config(json_t *root, json_t *chat, oai_error_t *e)
{
    json_t *oc = json_object_get(root, "output_config");
    if (!present(oc))
        return 0;
    if (!json_is_object(oc))
        return bad(e, "output_config: must be an object.");
    json_t *eff = json_object_get(oc, "effort");
    if (present(eff) && !json_is_string(eff))
        return bad(e, "output_config.effort: must be a string.");
    json_t *fmt = json_object_get(oc, "format");
    if (!present(fmt))
        return 0;
    const char *ty = json_string_value(json_object_get(fmt, "type"));
    json_t *schema = json_object_get(fmt, "schema");
    if (!json_is_object(fmt) || !ty || strcmp(ty, "json_schema") != 0 || !json_is_object(schema))
        return bad(e, "output_config.format: must be {\"type\":\"json_schema\",\"schema\":{...}}.");
    json_object_set_new(chat, "response_format",
                        json_pack("{s:s, s:{s:s, s:O}}", "type", "json_schema", "json_schema", "name", "output",
                                  "schema", schema));
    return 0;
}

/* Copies root[key] to chat[as] when present. */
static void copy(json_t *root, json_t *chat, const char *key, const char *as)
{
    json_t *v = json_object_get(root, key);
    if (present(v))
        json_object_set(chat, as, v);
}

/* sys (a string or an array of blocks) without its volatile blocks
 * (gateway/volatile_block.h) unless keep: a new reference. */
static json_t *volatile_filter(json_t *sys, bool keep)
{
    if (keep || !json_is_array(sys))
        return json_incref(sys);
    json_t *out = json_array();
    size_t i;
    json_t *b;
    json_array_foreach(sys, i, b) {
        json_t *t = json_object_get(b, "text");
        if (json_is_string(t) &&
            volatile_block_match("anthropic", "system", json_string_value(t), json_string_length(t)))
            continue;
        json_array_append(out, b);
    }
    return out;
}

/* The Messages body → a chat-completions body; what was left out of it is
 * described in warn (warnlen bytes, "" = nothing). */
static json_t *translate(json_t *root, unsigned flags, char *warn, size_t warnlen, oai_error_t *e)
{
    bool count_tokens = flags & ANTHROPIC_PARSE_COUNT;
    bool keep_volatile = flags & ANTHROPIC_PARSE_KEEP_VOLATILE;
    json_t *chat = json_object();
    json_t *msgs = json_array();
    json_object_set_new(chat, "messages", msgs);
    copy(root, chat, "model", "model");
    json_t *mt = json_object_get(root, "max_tokens");
    if (!count_tokens) {
        if (!present(mt)) {
            bad(e, "max_tokens: Field required");
            goto err;
        }
        if (!json_is_integer(mt) || json_integer_value(mt) < 1) {
            bad(e, "max_tokens: must be an integer >= 1.");
            goto err;
        }
        json_object_set(chat, "max_tokens", mt);
    }
    json_t *sys = json_object_get(root, "system");
    if (present(sys)) {
        json_t *kept = volatile_filter(sys, keep_volatile);
        json_t *t = text_of(kept, "system", e);
        json_decref(kept);
        if (!t)
            goto err;
        if (json_string_length(t) || !json_is_array(sys) || json_array_size(sys) == 0)
            json_array_append_new(msgs, json_pack("{s:s, s:o}", "role", "system", "content", t));
        else
            json_decref(t); /* every block was volatile: no system turn */
    }
    json_t *m = json_object_get(root, "messages");
    if (!json_is_array(m) || json_array_size(m) == 0) {
        bad(e, "messages: Field required (a non-empty array).");
        goto err;
    }
    if (json_array_size(m) > OAI_MAX_MESSAGES) {
        bad(e, "messages: at most %d messages are accepted.", OAI_MAX_MESSAGES);
        goto err;
    }
    size_t i;
    json_t *mi;
    json_array_foreach(m, i, mi)
        if (add_message(msgs, mi, i, e) < 0)
            goto err;
    json_t *temp = json_object_get(root, "temperature");
    if (present(temp) && (!json_is_number(temp) || json_number_value(temp) < 0 || json_number_value(temp) > 1)) {
        bad(e, "temperature: must be a number between 0 and 1.");
        goto err;
    }
    /* the types Anthropic's API has (the chat parser would accept more: a
     * string stop, a whole float top_k) */
    json_t *ss = json_object_get(root, "stop_sequences"), *tk = json_object_get(root, "top_k");
    if (present(ss)) {
        bool strs = json_is_array(ss);
        for (size_t k = 0; strs && k < json_array_size(ss); k++)
            strs = json_is_string(json_array_get(ss, k));
        if (!strs) {
            bad(e, "stop_sequences: must be an array of strings.");
            goto err;
        }
    }
    if (present(tk) && !json_is_integer(tk)) {
        bad(e, "top_k: must be an integer.");
        goto err;
    }
    json_t *tier = json_object_get(root, "service_tier"); /* accepted, not used */
    if (present(tier) && !json_is_string(tier)) {
        bad(e, "service_tier: must be a string.");
        goto err;
    }
    copy(root, chat, "temperature", "temperature");
    copy(root, chat, "top_p", "top_p");
    copy(root, chat, "top_k", "top_k");
    copy(root, chat, "cache_salt", "cache_salt"); /* vLLM's; narrows the prefix-cache partition */
    copy(root, chat, "stop_sequences", "stop");
    if (!count_tokens)
        copy(root, chat, "stream", "stream");
    json_t *md = json_object_get(root, "metadata");
    if (present(md)) {
        if (!json_is_object(md)) {
            bad(e, "metadata: must be an object.");
            goto err;
        }
        json_t *uid = json_object_get(md, "user_id");
        if (present(uid) && !json_is_string(uid)) {
            bad(e, "metadata.user_id: must be a string.");
            goto err;
        }
        copy(md, chat, "user_id", "user");
    }
    const char *refused[] = {"mcp_servers", "container"};
    for (size_t k = 0; k < 2; k++)
        if (present(json_object_get(root, refused[k]))) {
            bad(e, "%s: not supported by this server.", refused[k]);
            goto err;
        }
    if (map_tools(root, chat, warn, warnlen, e) < 0 || map_thinking(root, chat, e) < 0 ||
        map_output_config(root, chat, e) < 0)
        goto err;
    return chat;
err:
    json_decref(chat);
    return NULL;
}

/* Refusals after the chat parse (the URL allow list, a fetch) name the
 * Anthropic block: the request's images are its user messages' image blocks,
 * in order. */
static void name_images(json_t *root, request_t *r)
{
    char names[REQUEST_MAX_IMAGES][96];
    size_t n = 0, i, k;
    json_t *m, *b;
    json_array_foreach(json_object_get(root, "messages"), i, m)
        json_array_foreach(json_object_get(m, "content"), k, b)
            if (n < REQUEST_MAX_IMAGES && json_is_string(json_object_get(b, "type")) &&
                strcmp(json_string_value(json_object_get(b, "type")), "image") == 0)
                snprintf(names[n++], sizeof names[0], "messages.%zu.content.%zu.source%s", i, k,
                         json_is_string(json_object_get(json_object_get(b, "source"), "url")) ? ".url" : "");
    for (size_t j = 0; n == r->n_images && j < n; j++) {
        free(r->images[j].param);
        r->images[j].param = xstrdup(names[j]);
    }
}

int anthropic_parse_request(const uint8_t *body, size_t len, unsigned flags, request_t *out,
                            oai_error_t *err)
{
    memset(out, 0, sizeof *out);
    json_t *root = oai_load_body(body, len, err);
    if (!root)
        return -1;
    bool count_tokens = flags & ANTHROPIC_PARSE_COUNT;
    char warn[OAI_MAX_WARNING];
    warn[0] = '\0';
    json_t *chat = translate(root, flags, warn, sizeof warn, err);
    if (!chat) {
        json_decref(root);
        return -1;
    }
    int rc = oai_parse_chat_root(chat, out, err);
    json_decref(chat);
    if (rc == 0)
        name_images(root, out);
    json_decref(root);
    if (rc == 0 && warn[0])
        out->warning = xstrdup(warn);
    if (rc == 0 && count_tokens) {
        out->op = REQUEST_OP_TOKENIZE;
        out->add_special = true;
        free(out->grammar); /* nothing is generated */
        out->grammar = NULL;
    }
    return rc;
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

/* "call_<hex>" → "toolu_<hex>" (Anthropic's id form). */
static void tool_id(const char *call_id, char *out, size_t cap)
{
    const char *u = strchr(call_id, '_');
    snprintf(out, cap, "toolu_%s", u ? u + 1 : call_id);
}

/* A call's arguments as the "input" object (arguments that are not a JSON
 * object are wrapped as {}: "input" is always an object). */
static json_t *call_input(const char *args, size_t len)
{
    json_t *v = json_loadb(args, len, JSON_DECODE_ANY, NULL);
    if (json_is_object(v))
        return v;
    json_decref(v);
    return json_object();
}

/* stop_reason, and the stop_sequence it names (a new reference: a string
 * or null). stop = 1 + the index of the stop string that ended the answer
 * (the EVENT's), 0 = none. `calls`: the answer ends in tool calls (none cut
 * short: gateway/answer.h). */
static const char *stop_reason(const anthropic_meta_t *m, proto_finish_t f, bool calls, uint32_t stop,
                               json_t **seq)
{
    *seq = json_null();
    if (calls)
        return "tool_use";
    if (f == PROTO_FINISH_LENGTH)
        return "max_tokens";
    if (stop >= 1 && stop <= m->n_stop) {
        *seq = json_string(m->stop[stop - 1]);
        return "stop_sequence";
    }
    return "end_turn";
}

static json_t *usage_json(const oai_usage_t *u)
{
    int64_t cached = u->cached_tokens < u->prompt_tokens ? u->cached_tokens : u->prompt_tokens;
    return json_pack("{s:I, s:I, s:I, s:I}", "input_tokens", (json_int_t)(u->prompt_tokens - cached),
                     "cache_creation_input_tokens", (json_int_t)0, "cache_read_input_tokens",
                     (json_int_t)cached, "output_tokens", (json_int_t)u->completion_tokens);
}

char *anthropic_message_json(const anthropic_meta_t *m, const char *text, size_t len,
                             proto_finish_t finish, uint32_t stop, const oai_usage_t *usage)
{
    answer_whole_t w;
    answer_whole_split(text, len, m->tool_names, m->n_tools, m->reasoning, true, &w);
    json_t *content = json_array();
    if (w.has_reasoning)
        json_array_append_new(content, json_pack("{s:s, s:o, s:s}", "type", "thinking", "thinking",
                                                 oai_json_text(w.reasoning, w.reasoning_len), "signature", ""));
    if (w.content_len || (!w.n_calls && !w.has_reasoning))
        json_array_append_new(content, json_pack("{s:s, s:o}", "type", "text", "text",
                                                 oai_json_text(w.content, w.content_len)));
    for (size_t i = 0; i < w.n_calls; i++) {
        char id[48];
        tool_id(w.calls[i].id, id, sizeof id);
        json_array_append_new(content, json_pack("{s:s, s:s, s:s, s:o}", "type", "tool_use", "id", id, "name",
                                                 w.calls[i].name, "input",
                                                 call_input(w.calls[i].arguments, strlen(w.calls[i].arguments))));
    }
    json_t *seq;
    const char *reason = stop_reason(m, finish, answer_whole_ends_in_calls(&w), stop, &seq);
    json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:o, s:s, s:o, s:o}", "id", m->id, "type", "message", "role",
                          "assistant", "model", m->model, "content", content, "stop_reason", reason,
                          "stop_sequence", seq, "usage", usage_json(usage));
    answer_whole_clear(&w);
    return dump(j);
}

char *anthropic_count_json(int64_t n)
{
    return dump(json_pack("{s:I}", "input_tokens", (json_int_t)n));
}

/* ---- streaming --------------------------------------------------------- */

typedef enum { BLOCK_NONE, BLOCK_THINKING, BLOCK_TEXT, BLOCK_TOOL } block_t;

struct anthropic_stream {
    char *id, *model;
    char *const *stop;     /* (n_stop) the request's stop strings, borrowed */
    size_t n_stop;
    answer_t *ans;
    bool started;          /* message_start sent */
    block_t open;          /* the block being written */
    int index;             /* index of the open (or last) block */
    size_t n_calls;
    bool done;
    strbuf_t *out;        /* the caller's buffer during one call */
};

anthropic_stream_t *anthropic_stream_new(const anthropic_meta_t *m)
{
    anthropic_stream_t *st = xcalloc(1, sizeof *st);
    st->id = xstrdup(m->id);
    st->model = xstrdup(m->model);
    st->stop = m->stop;
    st->n_stop = m->n_stop;
    st->ans = answer_new(m->tool_names, m->n_tools, m->reasoning); /* names borrowed */
    st->index = -1;
    return st;
}

void anthropic_stream_free(anthropic_stream_t **sp)
{
    anthropic_stream_t *st = *sp;
    if (!st)
        return;
    *sp = NULL;
    answer_free(&st->ans);
    free(st->id);
    free(st->model);
    free(st);
}

static void ev(anthropic_stream_t *st, const char *name, json_t *data)
{
    api_sse(st->out, name, dump(data));
}

static void close_block(anthropic_stream_t *st)
{
    if (st->open == BLOCK_THINKING)
        ev(st, "content_block_delta", json_pack("{s:s, s:i, s:{s:s, s:s}}", "type", "content_block_delta",
                                                "index", st->index, "delta", "type", "signature_delta",
                                                "signature", ""));
    if (st->open != BLOCK_NONE)
        ev(st, "content_block_stop", json_pack("{s:s, s:i}", "type", "content_block_stop", "index", st->index));
    st->open = BLOCK_NONE;
}

static void open_block(anthropic_stream_t *st, block_t b, json_t *block)
{
    close_block(st);
    st->index++;
    st->open = b;
    ev(st, "content_block_start", json_pack("{s:s, s:i, s:o}", "type", "content_block_start", "index", st->index,
                                            "content_block", block));
}

static void delta(anthropic_stream_t *st, const char *type, const char *key, json_t *value)
{
    ev(st, "content_block_delta", json_pack("{s:s, s:i, s:{s:s, s:o}}", "type", "content_block_delta", "index",
                                            st->index, "delta", "type", type, key, value));
}

static void on_part(anthropic_stream_t *st, const answer_part_t *p)
{
    switch (p->kind) {
    case ANSWER_REASONING:
        if (st->open != BLOCK_THINKING)
            open_block(st, BLOCK_THINKING, json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", "",
                                                     "signature", ""));
        delta(st, "thinking_delta", "thinking", oai_json_text(p->text, p->len));
        break;
    case ANSWER_CONTENT:
        if (st->open != BLOCK_TEXT)
            open_block(st, BLOCK_TEXT, json_pack("{s:s, s:s}", "type", "text", "text", ""));
        delta(st, "text_delta", "text", oai_json_text(p->text, p->len));
        break;
    case ANSWER_TOOL_BEGIN: {
        char id[48];
        tool_id(p->id, id, sizeof id);
        open_block(st, BLOCK_TOOL, json_pack("{s:s, s:s, s:s, s:{}}", "type", "tool_use", "id", id, "name",
                                             p->name, "input"));
        st->n_calls++;
        break;
    }
    case ANSWER_TOOL_ARGS:
        delta(st, "input_json_delta", "partial_json", oai_json_text(p->text, p->len));
        break;
    case ANSWER_TOOL_END:
        close_block(st);
        break;
    }
}

static void start(anthropic_stream_t *st)
{
    if (st->started)
        return;
    st->started = true;
    oai_usage_t u = {0};
    ev(st, "message_start",
       json_pack("{s:s, s:{s:s, s:s, s:s, s:s, s:[], s:n, s:n, s:o}}", "type", "message_start", "message", "id",
                 st->id, "type", "message", "role", "assistant", "model", st->model, "content", "stop_reason",
                 "stop_sequence", "usage", usage_json(&u)));
    ev(st, "ping", json_pack("{s:s}", "type", "ping"));
}

bool anthropic_stream_event(anthropic_stream_t *st, const proto_event_t *e, strbuf_t *out)
{
    if (st->done)
        return true;
    st->out = out;
    start(st);
    if (api_finish_failed(e->finish)) {
        oai_error_t err;
        api_event_error(e, &err, -1);
        anthropic_stream_error(st, &err, out);
        return true;
    }
    bool final = e->finish != PROTO_FINISH_NONE;
    const answer_part_t *parts;
    size_t n = answer_feed(st->ans, e->text, e->text_len, final ? ANSWER_DONE : ANSWER_MORE, &parts);
    for (size_t i = 0; i < n; i++)
        on_part(st, &parts[i]);
    if (final) {
        close_block(st);
        oai_usage_t u;
        api_event_usage(e, &u);
        anthropic_meta_t m = {.stop = st->stop, .n_stop = st->n_stop};
        json_t *seq;
        const char *reason = stop_reason(&m, e->finish, answer_ends_in_calls(st->ans), e->stop, &seq);
        ev(st, "message_delta", json_pack("{s:s, s:{s:s, s:o}, s:o}", "type", "message_delta", "delta",
                                          "stop_reason", reason, "stop_sequence", seq, "usage", usage_json(&u)));
        ev(st, "message_stop", json_pack("{s:s}", "type", "message_stop"));
        st->done = true;
    }
    return st->done;
}

void anthropic_stream_error(anthropic_stream_t *st, const oai_error_t *e, strbuf_t *out)
{
    st->out = out;
    ev(st, "error", json_pack("{s:s, s:{s:s, s:o}}", "type", "error", "error", "type",
                              anthropic_error_type(e->status), "message",
                              oai_json_text(e->message, strlen(e->message))));
    st->done = true;
}

/* ---- the surfaces ------------------------------------------------------ */

/* call->state: the stream (streaming), or the message id (not). */
typedef struct {
    char id[48];
    char **stop;           /* (n_stop) copies of the request's stop strings */
    size_t n_stop;
    anthropic_stream_t *stream;
} surface_state_t;

static int surface_parse(api_call_t *call, const uint8_t *body, size_t len, request_t *o, oai_error_t *e)
{
    unsigned flags = (call->op == REQUEST_OP_TOKENIZE ? ANTHROPIC_PARSE_COUNT : 0) |
                     (call->keep_volatile ? ANTHROPIC_PARSE_KEEP_VOLATILE : 0);
    return anthropic_parse_request(body, len, flags, o, e);
}

static void surface_begin(api_call_t *call, request_t *o)
{
    surface_state_t *st = xcalloc(1, sizeof *st);
    oai_id_new("msg_", st->id, sizeof st->id);
    /* a copy of the stop strings (o still goes to the worker with them), to
     * name the one that ended the answer (stop_sequence) */
    st->n_stop = o->n_stop;
    st->stop = xcalloc(o->n_stop + 1, sizeof *st->stop);
    for (size_t i = 0; i < o->n_stop; i++)
        st->stop[i] = xstrdup(o->stop[i]);
    if (call->stream) {
        anthropic_meta_t m = {.id = st->id, .model = call->model, .reasoning = call->reasoning,
                              .tool_names = call->tool_names, .n_tools = call->n_tools,
                              .stop = st->stop, .n_stop = st->n_stop};
        st->stream = anthropic_stream_new(&m);
    }
    call->state = st;
}

static void surface_stream_event(api_call_t *call, gateway_reply_t *rep, strbuf_t *out)
{
    surface_state_t *st = call->state;
    if (rep->kind == GATEWAY_REPLY_ERROR) {
        anthropic_stream_error(st->stream, &rep->error, out);
        call->done = true;
    } else {
        call->done = anthropic_stream_event(st->stream, &rep->event, out);
    }
    gateway_reply_free(&rep);
}

static char *surface_complete(api_call_t *call, gateway_reply_t *const *events, size_t n, int *status)
{
    surface_state_t *st = call->state;
    const proto_event_t *last = &events[n - 1]->event;
    if (api_finish_failed(last->finish)) {
        oai_error_t e;
        api_event_error(last, &e, call->request_timeout_s);
        *status = e.status;
        return anthropic_error_json(&e);
    }
    *status = 200;
    if (call->op == REQUEST_OP_TOKENIZE) {
        int64_t count = 0;
        for (size_t i = 0; i < n; i++)
            count += events[i]->event.n_ids;
        return anthropic_count_json(count);
    }
    size_t len;
    char *text = api_events_text(events, n, &len);
    oai_usage_t u;
    api_event_usage(last, &u);
    anthropic_meta_t m = {.id = st->id, .model = call->model, .reasoning = call->reasoning,
                          .tool_names = call->tool_names, .n_tools = call->n_tools,
                          .stop = st->stop, .n_stop = st->n_stop};
    char *body = anthropic_message_json(&m, text, len, last->finish, last->stop, &u);
    free(text);
    return body;
}

static void surface_end(api_call_t *call)
{
    surface_state_t *st = call->state;
    if (!st)
        return;
    anthropic_stream_free(&st->stream);
    for (size_t i = 0; i < st->n_stop; i++)
        free(st->stop[i]);
    free(st->stop);
    free(st);
    call->state = NULL;
}

const api_surface_t anthropic_surface = {
    .name = "anthropic",
    .parse = surface_parse,
    .begin = surface_begin,
    .stream_event = surface_stream_event,
    .complete = surface_complete,
    .error_body = anthropic_error_json,
    .end = surface_end,
};
