/* chat_template.c — chat template families rendered in C (see chat_template.h).
 *
 * Each render_* function is the C transcription of one family's Jinja
 * template, with the variant switches documented in the header. The tests
 * compare every one of them with @huggingface/jinja running the real
 * template strings, so any change here must keep those byte-exact.
 */
#include "common/text/chat_template.h"

#include <jansson.h>
#include <assert.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "common/errbuf.h"
#include "common/strbuf.h"
#include "common/log.h"
#include "common/text/tojson.h"
#include "common/text/tool_format.h"
#include "common/xalloc.h"

/* Variant switches, set from markers in the template text. */
enum {
    V_BOS = 1 << 0,               /* template mentions bos_token */
    V_QWEN_TOOLS = 1 << 1,        /* chatml: group "tool" messages as <tool_response> in a user turn */
    V_QWEN3_THINK = 1 << 2,       /* chatml: Qwen3 <think> handling of assistant turns */
    V_GEN_ALWAYS = 1 << 3,        /* llama3: assistant header even without add_generation_prompt */
    V_MISTRAL_SYS = 1 << 4,       /* mistral v1: system merged into first user turn */
    V_GEMMA3 = 1 << 5,            /* gemma 3: system merged into first user turn */
    V_SKIP_EMPTY_SYS = 1 << 6,    /* phi3: system with empty content is left out */
    V_EOS_IF_NO_GEN = 1 << 7,     /* phi3: EOS text when add_generation_prompt is false */
    V_FALLBACK = 1 << 8,          /* unrecognised template rendered as ChatML */
    V_LLAMA31 = 1 << 9,           /* llama3.1+: knowledge-date system header, tool -> ipython */
    V_DATE_NOW = 1 << 10,         /* llama3.2: date_string = strftime_now("%d %b %Y") */
    V_MISTRAL_TOOLS = 1 << 11,    /* mistral nemo: [AVAILABLE_TOOLS]/[TOOL_CALLS]/[TOOL_RESULTS], system in the last user turn */
    V_THINK_SWITCH = 1 << 12,     /* chatml (Qwen3): enable_thinking=false closes an empty <think> block */
};

struct chat_template {
    chat_family_t family; /* never CHAT_FAMILY_UNKNOWN */
    unsigned flags;       /* V_* */
    char *variant;        /* short name for logs */
    char *default_system; /* chatml default system prompt, or NULL */
    char *date;           /* llama3.1+ "Today Date" override or template default, or NULL */
    char *bos, *eos;      /* token texts, never NULL */
    char *stops[3];       /* end-of-turn texts (owned) */
    size_t n_stops;
};

/* ---- whitespace handling, Python str semantics ---- */

/* Length of the whitespace character at s (0 if none), per Python's
 * str.isspace(): ASCII \t \n \v \f \r, 0x1C-0x1F and space, U+0085, U+00A0,
 * U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000. Jinja's
 * `trim` filter and str.strip() both use this set. */
static size_t ws_at(const unsigned char *s, size_t n)
{
    if (n == 0)
        return 0;
    unsigned char c = s[0];
    if (c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F))
        return 1;
    if (n >= 2 && c == 0xC2 && (s[1] == 0x85 || s[1] == 0xA0))
        return 2;
    if (n >= 3 && c == 0xE1 && s[1] == 0x9A && s[2] == 0x80)
        return 3;
    if (n >= 3 && c == 0xE2 && s[1] == 0x80 &&
        ((s[2] >= 0x80 && s[2] <= 0x8A) || s[2] == 0xA8 || s[2] == 0xA9 || s[2] == 0xAF))
        return 3;
    if (n >= 3 && c == 0xE2 && s[1] == 0x81 && s[2] == 0x9F)
        return 3;
    if (n >= 3 && c == 0xE3 && s[1] == 0x80 && s[2] == 0x80)
        return 3;
    return 0;
}

/* Length of a whitespace character ending at s[n-1] (0 if none). Only
 * checks sequences that are whole characters of the set above. */
static size_t ws_before(const unsigned char *s, size_t n)
{
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        size_t w = ws_at(s + n - k, k);
        if (w == k)
            return k;
    }
    return 0;
}

/* Python str.strip() with no argument: [*start, *start + *len) is narrowed. */
static void py_strip(const char *s, size_t *start, size_t *len)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t a = *start, b = *start + *len;
    for (size_t w; a < b && (w = ws_at(u + a, b - a)) > 0;)
        a += w;
    for (size_t w; b > a && (w = ws_before(u + a, b - a)) > 0;)
        b -= w;
    *start = a;
    *len = b - a;
}

static void sb_put_trimmed(strbuf_t *sb, const char *s)
{
    size_t a = 0, n = strlen(s);
    py_strip(s, &a, &n);
    strbuf_append(sb, s + a, n);
}

/* ---- template inspection ---- */

static bool has(const char *t, size_t n, const char *marker)
{
    return t && n && memmem(t, n, marker, strlen(marker)) != NULL;
}

chat_family_t chat_template_detect(const char *t, size_t n)
{
    if (!t || n == 0)
        return CHAT_FAMILY_CHATML;
    /* SmolVLM writes <|im_start|> once, as its BOS; its turns are not ChatML */
    if (has(t, n, "<end_of_utterance>"))
        return CHAT_FAMILY_SMOLVLM;
    if (has(t, n, "<|im_start|>"))
        return CHAT_FAMILY_CHATML;
    if (has(t, n, "<|start_header_id|>"))
        return CHAT_FAMILY_LLAMA3;
    if (has(t, n, "<start_of_turn>"))
        return CHAT_FAMILY_GEMMA;
    if (has(t, n, "[INST]"))
        return has(t, n, "<<SYS>>") ? CHAT_FAMILY_LLAMA2 : CHAT_FAMILY_MISTRAL;
    bool turn = has(t, n, "<|user|>") || has(t, n, "<|assistant|>");
    if (has(t, n, "<|end|>") && turn)
        return CHAT_FAMILY_PHI3;
    if (turn)
        return CHAT_FAMILY_ZEPHYR;
    return CHAT_FAMILY_UNKNOWN;
}

const char *chat_family_name(chat_family_t f)
{
    switch (f) {
    case CHAT_FAMILY_CHATML: return "chatml";
    case CHAT_FAMILY_LLAMA3: return "llama3";
    case CHAT_FAMILY_LLAMA2: return "llama2";
    case CHAT_FAMILY_MISTRAL: return "mistral";
    case CHAT_FAMILY_ZEPHYR: return "zephyr";
    case CHAT_FAMILY_GEMMA: return "gemma";
    case CHAT_FAMILY_PHI3: return "phi3";
    case CHAT_FAMILY_SMOLVLM: return "smolvlm";
    default: return "unknown";
    }
}

/* The ChatML default system prompt, written in the template as a string
 * literal "<|im_start|>system\n<TEXT><|im_end|>" (the newline either real or
 * the escape \n). TEXT must not contain the literal's closing quote — that
 * rules out '<|im_start|>system\n' + messages[0]['content'] + ... Jinja
 * escapes in TEXT are decoded. Returns a malloc'd string or NULL. */
static char *find_default_system(const char *t, size_t n)
{
    static const char head[] = "<|im_start|>system";
    static const char tail[] = "<|im_end|>";
    const size_t hl = sizeof(head) - 1, tl = sizeof(tail) - 1;
    size_t pos = 0;
    while (pos < n) {
        const char *h = memmem(t + pos, n - pos, head, hl);
        if (!h)
            return NULL;
        size_t i = (size_t)(h - t) + hl;
        pos = i;
        /* the quote that opened the literal */
        char quote = 0;
        for (size_t k = (size_t)(h - t); k > 0; k--) {
            char c = t[k - 1];
            if (c == '\'' || c == '"') {
                quote = c;
                break;
            }
            if (c == '{' || c == '}' || c == '+')
                break;
        }
        if (!quote)
            continue;
        if (i < n && t[i] == '\n')
            i++;
        else if (i + 1 < n && t[i] == '\\' && t[i + 1] == 'n')
            i += 2;
        else
            continue;
        strbuf_t sb = {0};
        bool ok = false;
        while (i < n) {
            if (i + tl <= n && memcmp(t + i, tail, tl) == 0) {
                ok = true;
                break;
            }
            char c = t[i];
            if (c == quote)
                break;
            if (c == '\\' && i + 1 < n) {
                char e = t[i + 1];
                char d = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
                strbuf_append(&sb, &d, 1);
                i += 2;
                continue;
            }
            strbuf_append(&sb, &c, 1);
            i++;
        }
        if (ok && sb.len > 0)
            return sb.s;
        free(sb.s);
    }
    return NULL;
}

/* The literal in `set date_string = "26 Jul 2024"`, or NULL. */
static char *find_default_date(const char *t, size_t n)
{
    static const char key[] = "date_string = \"";
    const char *p = memmem(t, n, key, sizeof(key) - 1);
    if (!p)
        return NULL;
    size_t a = (size_t)(p - t) + sizeof(key) - 1, b = a;
    while (b < n && b - a < 64 && t[b] != '"' && t[b] != '\\')
        b++;
    if (b >= n || t[b] != '"')
        return NULL;
    return xstrndup(t + a, b - a);
}

chat_template_t *chat_template_new(const char *tmpl, size_t len, const char *bos, const char *eos)
{
    chat_template_t *t = xcalloc(1, sizeof(*t));
    if (!tmpl)
        len = 0;
    t->bos = xstrdup(bos ? bos : "");
    t->eos = xstrdup(eos ? eos : "");
    chat_family_t f = chat_template_detect(tmpl, len);
    const char *variant = chat_family_name(f);
    if (len == 0) {
        variant = "chatml-default";
    } else if (f == CHAT_FAMILY_UNKNOWN) {
        log_warn("chat template: no known family marker in the model's template (%zu bytes); "
                 "rendering as ChatML",
                 len);
        f = CHAT_FAMILY_CHATML;
        t->flags |= V_FALLBACK;
        variant = "chatml-fallback";
    }
    t->family = f;
    if (has(tmpl, len, "bos_token"))
        t->flags |= V_BOS;
    const char *eot = NULL;
    switch (f) {
    case CHAT_FAMILY_CHATML:
        eot = "<|im_end|>";
        if (len && !(t->flags & V_FALLBACK)) {
            t->default_system = find_default_system(tmpl, len);
            if (has(tmpl, len, "<tool_response>")) {
                t->flags |= V_QWEN_TOOLS;
                variant = "qwen2.5";
            }
            if (has(tmpl, len, "</think>") && has(tmpl, len, "last_query_index")) {
                t->flags |= V_QWEN3_THINK | V_QWEN_TOOLS;
                variant = "qwen3";
            }
            if (has(tmpl, len, "enable_thinking is false"))
                t->flags |= V_THINK_SWITCH;
            if (t->default_system && !(t->flags & V_QWEN_TOOLS))
                variant = "chatml-default-system";
        }
        break;
    case CHAT_FAMILY_LLAMA3:
        eot = "<|eot_id|>";
        if (has(tmpl, len, "Cutting Knowledge Date")) {
            t->flags |= V_LLAMA31;
            variant = "llama3.1";
            if (has(tmpl, len, "strftime_now"))
                t->flags |= V_DATE_NOW;
            t->date = find_default_date(tmpl, len);
        }
        if (!has(tmpl, len, "add_generation_prompt")) {
            t->flags |= V_GEN_ALWAYS;
            variant = "llama3-always-gen";
        }
        break;
    case CHAT_FAMILY_MISTRAL:
        if (has(tmpl, len, "[AVAILABLE_TOOLS][")) {
            t->flags |= V_MISTRAL_TOOLS;
            variant = "mistral-nemo";
        } else if (has(tmpl, len, "system_message")) {
            t->flags |= V_MISTRAL_SYS;
            variant = "mistral-v1";
        } else {
            variant = "mistral-v0.2";
        }
        break;
    case CHAT_FAMILY_GEMMA:
        eot = "<end_of_turn>";
        if (has(tmpl, len, "first_user_prefix")) {
            t->flags |= V_GEMMA3;
            variant = "gemma3";
        } else {
            variant = "gemma2";
        }
        break;
    case CHAT_FAMILY_PHI3:
        eot = "<|end|>";
        if (has(tmpl, len, "and message['content']") || has(tmpl, len, "and message.content"))
            t->flags |= V_SKIP_EMPTY_SYS;
        if (has(tmpl, len, "eos_token"))
            t->flags |= V_EOS_IF_NO_GEN;
        break;
    case CHAT_FAMILY_SMOLVLM:
        eot = "<end_of_utterance>";
        break;
    default:
        break;
    }
    t->variant = xstrdup(variant);
    if (eot)
        t->stops[t->n_stops++] = xstrdup(eot);
    if (t->eos[0] && !(eot && strcmp(eot, t->eos) == 0))
        t->stops[t->n_stops++] = xstrdup(t->eos);
    return t;
}

void chat_template_free(chat_template_t **pt)
{
    if (!pt || !*pt)
        return;
    chat_template_t *t = *pt;
    free(t->variant);
    free(t->default_system);
    free(t->date);
    free(t->bos);
    free(t->eos);
    for (size_t i = 0; i < t->n_stops; i++)
        free(t->stops[i]);
    free(t);
    *pt = NULL;
}

chat_family_t chat_template_family(const chat_template_t *t) { return t->family; }
const char *chat_template_variant(const chat_template_t *t) { return t->variant; }
const char *chat_template_default_system(const chat_template_t *t) { return t->default_system; }

void chat_template_set_date(chat_template_t *t, const char *date)
{
    free(t->date);
    t->date = date ? xstrdup(date) : NULL;
    if (date)
        t->flags &= ~(unsigned)V_DATE_NOW;
}

size_t chat_template_stops(const chat_template_t *t, const char *const **stops)
{
    *stops = (const char *const *)t->stops;
    return t->n_stops;
}

/* ---- rendering ---- */

typedef enum { R_SYSTEM, R_USER, R_ASSISTANT, R_TOOL } role_t;

typedef struct {
    const chat_template_t *t;
    const chat_msg_t *m;
    const role_t *r;
    size_t n;
    bool gen;
    int think;            /* enable_thinking: -1 not given, 0 false, 1 true */
    json_t *tools;        /* array of tool objects, or NULL: no tools announced */
    json_t **calls;       /* (n) per message: its tool_calls array, or NULL */
    strbuf_t sb;
    char *err;
    size_t errlen;
} render_t;

__attribute__((format(printf, 2, 3))) static int fail(render_t *R, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    errbuf_vset(R->err, R->errlen, fmt, ap);
    va_end(ap);
    return CHAT_TEMPLATE_EINVAL;
}

/* user/assistant alternation as the strict templates check it:
 * messages[first..n) must be user, assistant, user, ... */
static int check_alternation(render_t *R, size_t first)
{
    for (size_t i = first; i < R->n; i++) {
        bool want_user = (i - first) % 2 == 0;
        if (R->r[i] == R_SYSTEM)
            return fail(R, "messages[%zu]: a system message is only allowed first with the %s template",
                        i, R->t->variant);
        if ((R->r[i] == R_USER) != want_user)
            return fail(R,
                        "messages[%zu]: conversation roles must alternate "
                        "user/assistant/user/assistant/... (%s template)",
                        i, R->t->variant);
    }
    return 0;
}

static int refuse_tool(render_t *R)
{
    for (size_t i = 0; i < R->n; i++)
        if (R->r[i] == R_TOOL)
            return fail(R, "messages[%zu]: role 'tool' is not supported by the %s template", i,
                        R->t->variant);
    return 0;
}

static void put_bos(render_t *R)
{
    if (R->t->flags & V_BOS)
        strbuf_puts(&R->sb, R->t->bos);
}

static void chatml_turn(render_t *R, const char *role, const char *content)
{
    strbuf_puts(&R->sb, "<|im_start|>");
    strbuf_puts(&R->sb, role);
    strbuf_puts(&R->sb, "\n");
    strbuf_puts(&R->sb, content);
    strbuf_puts(&R->sb, "<|im_end|>\n");
}

static bool starts_with(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

static bool ends_with(const char *s, const char *p)
{
    size_t a = strlen(s), b = strlen(p);
    return a >= b && memcmp(s + a - b, p, b) == 0;
}

/* Python str.lstrip('\n') / rstrip('\n') on [a, a+n). */
static void lstrip_nl(const char *s, size_t *a, size_t *n)
{
    while (*n > 0 && s[*a] == '\n') {
        (*a)++;
        (*n)--;
    }
}
static void rstrip_nl(const char *s, size_t *a, size_t *n)
{
    while (*n > 0 && s[*a + *n - 1] == '\n')
        (*n)--;
}

/* Last occurrence of needle in [s, s+n), or NULL. */
static const char *memrmem(const char *s, size_t n, const char *needle)
{
    size_t k = strlen(needle);
    if (k > n)
        return NULL;
    for (size_t i = n - k + 1; i > 0; i--)
        if (memcmp(s + i - 1, needle, k) == 0)
            return s + i - 1;
    return NULL;
}

static void put_hermes_call(strbuf_t *sb, const json_t *call, bool raw_string);

/* Qwen3 assistant turn: reasoning between <think> and </think> is split off
 * the content; it is shown (in a <think> block) only for assistant turns
 * after the last real user query. */
static void qwen3_assistant(render_t *R, size_t i, size_t last_query)
{
    const char *c = R->m[i].content;
    size_t cl = strlen(c);
    size_t ca = 0, cn = cl; /* content = c[ca, ca+cn) */
    size_t ra = 0, rn = 0;  /* reasoning = c[ra, ra+rn) */
    const char *end_tag = memmem(c, cl, "</think>", 8);
    if (end_tag) {
        const char *last_end = memrmem(c, cl, "</think>");
        ca = (size_t)(last_end - c) + 8;
        cn = cl - ca;
        lstrip_nl(c, &ca, &cn);
        ra = 0;
        rn = (size_t)(end_tag - c);
        rstrip_nl(c, &ra, &rn);
        const char *open = memrmem(c, rn, "<think>");
        if (open) {
            size_t o = (size_t)(open - c) + 7;
            rn = ra + rn - o;
            ra = o;
        }
        lstrip_nl(c, &ra, &rn);
    }
    strbuf_puts(&R->sb, "<|im_start|>assistant\n");
    if (i > last_query && (i == R->n - 1 || rn > 0)) {
        strbuf_puts(&R->sb, "<think>\n");
        size_t a = ra, k = rn;
        lstrip_nl(c, &a, &k);
        rstrip_nl(c, &a, &k);
        strbuf_append(&R->sb, c + a, k);
        strbuf_puts(&R->sb, "\n</think>\n\n");
        lstrip_nl(c, &ca, &cn);
    }
    strbuf_append(&R->sb, c + ca, cn);
    if (R->calls[i]) {
        size_t k;
        json_t *call;
        json_array_foreach(R->calls[i], k, call) {
            if (k > 0 || cn > 0)
                strbuf_puts(&R->sb, "\n");
            put_hermes_call(&R->sb, call, true);
        }
    }
    strbuf_puts(&R->sb, "<|im_end|>\n");
}

/* ---- tools ---- */

/* The function object of a tool call ({"function": {...}} or the bare
 * function object), its name and its arguments (any JSON value). */
static const json_t *call_function(const json_t *call)
{
    const json_t *f = json_object_get(call, "function");
    return f ? f : call;
}
static const char *call_name(const json_t *call)
{
    const char *n = json_string_value(json_object_get(call_function(call), "name"));
    return n ? n : "";
}
static const json_t *call_args(const json_t *call)
{
    static json_t *empty;
    const json_t *a = json_object_get(call_function(call), "arguments");
    if (!a) {
        if (!empty)
            empty = json_object();
        a = empty;
    }
    return a;
}

/* One call in f's syntax (common/text/tool_format.h), its arguments written
 * as the template's tojson does. raw_string: a string argument is written as
 * is (Qwen3), not JSON-encoded. */
static void put_call(strbuf_t *sb, const tool_format_t *f, const json_t *call, bool raw_string)
{
    const json_t *a = call_args(call);
    strbuf_t args = {0};
    if (raw_string && json_is_string(a))
        strbuf_puts(&args, json_string_value(a));
    else
        tojson_put(&args, a, 0);
    char *text = tool_format_call_text(f, call_name(call), args.s ? args.s : "");
    strbuf_puts(sb, text);
    free(text);
    free(args.s);
}

/* The Hermes/Qwen tool preamble: "# Tools ... <tools>\n{tool}...\n</tools> ...". */
static void put_hermes_tools(render_t *R, strbuf_t *sb)
{
    strbuf_puts(sb, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
    size_t i;
    json_t *tool;
    json_array_foreach(R->tools, i, tool) {
        strbuf_puts(sb, "\n");
        tojson_put(sb, tool, 0);
    }
    strbuf_puts(sb, "\n</tools>\n\nFor each function call, return a json object with function name and "
                "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
                "<function-name>, \"arguments\": <args-json-object>}\n</tool_call>");
}

/* One Hermes call: <tool_call>\n{"name": "N", "arguments": A}\n</tool_call>.
 * raw_string: a string argument is written as is (Qwen3), not JSON-encoded. */
static void put_hermes_call(strbuf_t *sb, const json_t *call, bool raw_string)
{
    put_call(sb, &tool_format_hermes, call, raw_string);
}

static int render_chatml(render_t *R)
{
    const chat_template_t *t = R->t;
    bool qwen3 = t->flags & V_QWEN3_THINK;
    put_bos(R);
    size_t from = 0; /* first message of the loop below */
    if (R->tools) {
        /* Qwen2.5: system text (or the default) + "\n\n# Tools..."; Qwen3:
         * the system text + "\n\n" only when there is one */
        strbuf_puts(&R->sb, "<|im_start|>system\n");
        if (R->r[0] == R_SYSTEM) {
            strbuf_puts(&R->sb, R->m[0].content);
            strbuf_puts(&R->sb, "\n\n");
            from = 1;
        } else if (!qwen3 && t->default_system) {
            strbuf_puts(&R->sb, t->default_system);
            strbuf_puts(&R->sb, "\n\n");
        }
        put_hermes_tools(R, &R->sb);
        strbuf_puts(&R->sb, "<|im_end|>\n");
    } else if (t->default_system && R->r[0] != R_SYSTEM) {
        chatml_turn(R, "system", t->default_system);
    }
    size_t last_query = R->n - 1;
    if (t->flags & V_QWEN3_THINK) {
        for (size_t k = R->n; k > 0; k--) {
            const char *c = R->m[k - 1].content;
            if (R->r[k - 1] == R_USER &&
                !(starts_with(c, "<tool_response>") && ends_with(c, "</tool_response>"))) {
                last_query = k - 1;
                break;
            }
        }
    }
    for (size_t i = from; i < R->n; i++) {
        if (R->r[i] == R_ASSISTANT && R->calls[i] && !qwen3) {
            /* Qwen2.5: "assistant" + ("\n" content) + ("\n" call)... */
            strbuf_puts(&R->sb, "<|im_start|>assistant");
            if (R->m[i].content[0]) {
                strbuf_puts(&R->sb, "\n");
                strbuf_puts(&R->sb, R->m[i].content);
            }
            size_t k;
            json_t *call;
            json_array_foreach(R->calls[i], k, call) {
                strbuf_puts(&R->sb, "\n");
                put_hermes_call(&R->sb, call, false);
            }
            strbuf_puts(&R->sb, "<|im_end|>\n");
        } else if (R->r[i] == R_TOOL && (t->flags & V_QWEN_TOOLS)) {
            if (i == 0 || R->r[i - 1] != R_TOOL)
                strbuf_puts(&R->sb, "<|im_start|>user");
            strbuf_puts(&R->sb, "\n<tool_response>\n");
            strbuf_puts(&R->sb, R->m[i].content);
            strbuf_puts(&R->sb, "\n</tool_response>");
            if (i == R->n - 1 || R->r[i + 1] != R_TOOL)
                strbuf_puts(&R->sb, "<|im_end|>\n");
        } else if (R->r[i] == R_ASSISTANT && (t->flags & V_QWEN3_THINK)) {
            qwen3_assistant(R, i, last_query);
        } else {
            chatml_turn(R, R->m[i].role, R->m[i].content);
        }
    }
    if (R->gen) {
        strbuf_puts(&R->sb, "<|im_start|>assistant\n");
        if (R->think == 0 && (t->flags & V_THINK_SWITCH))
            strbuf_puts(&R->sb, "<think>\n\n</think>\n\n");
    }
    return 0;
}

/* Llama 3.1+: a system turn always opens with the knowledge/today dates, the
 * first system message (trimmed) follows them; tool results are "ipython"
 * turns whose content is JSON-encoded (a string is "iterable" in Jinja). */
static int render_llama31(render_t *R)
{
    const chat_template_t *t = R->t;
    char today[32];
    const char *date = t->date ? t->date : "26 Jul 2024";
    if (t->flags & V_DATE_NOW) {
        time_t now = time(NULL);
        struct tm tm;
        if (localtime_r(&now, &tm) && strftime(today, sizeof(today), "%d %b %Y", &tm) > 0)
            date = today;
    }
    put_bos(R);
    strbuf_puts(&R->sb, "<|start_header_id|>system<|end_header_id|>\n\n");
    if (R->tools)
        strbuf_puts(&R->sb, "Environment: ipython\n");
    strbuf_puts(&R->sb, "Cutting Knowledge Date: December 2023\nToday Date: ");
    strbuf_puts(&R->sb, date);
    strbuf_puts(&R->sb, "\n\n");
    size_t first = 0;
    if (R->r[0] == R_SYSTEM) {
        sb_put_trimmed(&R->sb, R->m[0].content);
        first = 1;
    }
    strbuf_puts(&R->sb, "<|eot_id|>");
    if (R->tools) {
        /* tools_in_user_message (the template's default): the tool list goes
         * in front of the first message after the system one, whatever its role */
        if (first >= R->n)
            return fail(R, "tools need a user message after the system message (%s template)",
                        R->t->variant);
        strbuf_puts(&R->sb, "<|start_header_id|>user<|end_header_id|>\n\n"
                        "Given the following functions, please respond with a JSON for a function call "
                        "with its proper arguments that best answers the given prompt.\n\n"
                        "Respond in the format {\"name\": function name, \"parameters\": dictionary of "
                        "argument name and its value}.Do not use variables.\n\n");
        size_t k;
        json_t *tool;
        json_array_foreach(R->tools, k, tool) {
            tojson_put(&R->sb, tool, 4);
            strbuf_puts(&R->sb, "\n\n");
        }
        sb_put_trimmed(&R->sb, R->m[first].content);
        strbuf_puts(&R->sb, "<|eot_id|>");
        first++;
    }
    for (size_t i = first; i < R->n; i++) {
        if (R->r[i] == R_ASSISTANT && R->calls[i]) {
            if (json_array_size(R->calls[i]) != 1)
                return fail(R, "messages[%zu]: the %s template takes exactly one tool call per "
                               "assistant message", i, R->t->variant);
            const json_t *call = json_array_get(R->calls[i], 0);
            strbuf_puts(&R->sb, "<|start_header_id|>assistant<|end_header_id|>\n\n");
            put_call(&R->sb, &tool_format_llama3, call, false);
        } else if (R->r[i] == R_TOOL) {
            strbuf_puts(&R->sb, "<|start_header_id|>ipython<|end_header_id|>\n\n");
            tojson_put_string(&R->sb, R->m[i].content);
        } else {
            strbuf_puts(&R->sb, "<|start_header_id|>");
            strbuf_puts(&R->sb, R->m[i].role);
            strbuf_puts(&R->sb, "<|end_header_id|>\n\n");
            sb_put_trimmed(&R->sb, R->m[i].content);
        }
        strbuf_puts(&R->sb, "<|eot_id|>");
    }
    if (R->gen)
        strbuf_puts(&R->sb, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return 0;
}

static int render_llama3(render_t *R)
{
    if (R->t->flags & V_LLAMA31)
        return render_llama31(R);
    for (size_t i = 0; i < R->n; i++) {
        if (i == 0)
            put_bos(R);
        strbuf_puts(&R->sb, "<|start_header_id|>");
        strbuf_puts(&R->sb, R->m[i].role);
        strbuf_puts(&R->sb, "<|end_header_id|>\n\n");
        sb_put_trimmed(&R->sb, R->m[i].content);
        strbuf_puts(&R->sb, "<|eot_id|>");
    }
    if (R->gen || (R->t->flags & V_GEN_ALWAYS))
        strbuf_puts(&R->sb, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return 0;
}

/* Llama-2-chat: every user turn is "<s>[INST] ... [/INST]" (content
 * stripped), the system prompt goes inside the first one between <<SYS>>
 * markers, assistant turns are " answer </s>". There is no generation
 * prompt: the text always ends where the model continues. */
static int render_llama2(render_t *R)
{
    int rc;
    if ((rc = refuse_tool(R)))
        return rc;
    size_t first = R->r[0] == R_SYSTEM ? 1 : 0;
    if ((rc = check_alternation(R, first)))
        return rc;
    for (size_t i = first; i < R->n; i++) {
        strbuf_t content = {0};
        if (i == first && first == 1) {
            strbuf_puts(&content, "<<SYS>>\n");
            strbuf_puts(&content, R->m[0].content);
            strbuf_puts(&content, "\n<</SYS>>\n\n");
        }
        strbuf_puts(&content, R->m[i].content);
        size_t a = 0, k = content.len;
        py_strip(content.s, &a, &k);
        if (R->r[i] == R_USER) {
            put_bos(R);
            strbuf_puts(&R->sb, "[INST] ");
            strbuf_append(&R->sb, content.s + a, k);
            strbuf_puts(&R->sb, " [/INST]");
        } else {
            strbuf_puts(&R->sb, " ");
            strbuf_append(&R->sb, content.s + a, k);
            strbuf_puts(&R->sb, " ");
            strbuf_puts(&R->sb, R->t->eos);
        }
        free(content.s);
    }
    return 0;
}

static int render_mistral_nemo(render_t *R);

/* Mistral Instruct: "<s>[INST] user [/INST]answer</s>[INST] ..." (v0.2) or
 * "<s> [INST] system\n\nuser [/INST] answer</s> [INST] ..." (v1 with a
 * system prompt). No stripping, no generation prompt. */
static int render_mistral(render_t *R)
{
    int rc;
    bool v1 = R->t->flags & V_MISTRAL_SYS;
    if (R->t->flags & V_MISTRAL_TOOLS)
        return render_mistral_nemo(R);
    if ((rc = refuse_tool(R)))
        return rc;
    if (!v1 && R->r[0] == R_SYSTEM)
        return fail(R, "messages[0]: the %s template supports only user and assistant roles",
                    R->t->variant);
    size_t first = R->r[0] == R_SYSTEM ? 1 : 0;
    if ((rc = check_alternation(R, first)))
        return rc;
    put_bos(R);
    for (size_t i = first; i < R->n; i++) {
        if (R->r[i] == R_USER) {
            strbuf_puts(&R->sb, v1 ? " [INST] " : "[INST] ");
            if (i == first && first == 1) {
                strbuf_puts(&R->sb, R->m[0].content);
                strbuf_puts(&R->sb, "\n\n");
            }
            strbuf_puts(&R->sb, R->m[i].content);
            strbuf_puts(&R->sb, " [/INST]");
        } else {
            if (v1)
                strbuf_puts(&R->sb, " ");
            strbuf_puts(&R->sb, R->m[i].content);
            strbuf_puts(&R->sb, R->t->eos);
        }
    }
    return 0;
}

/* The 9-character alphanumeric tool-call id Mistral's templates require
 * (they raise on any other length). An id that already is 9 characters of
 * [A-Za-z0-9] is kept; any other is replaced by 9 base-62 digits of its
 * 64-bit FNV-1a hash (least significant digit first), so an OpenAI id like
 * "call_<24 hex>" maps to the same short id in the assistant's call and in
 * the tool result that answers it. out: 10 bytes. */
static void mistral_id(const char *id, char out[10])
{
    static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    size_t n = strlen(id);
    bool keep = n == 9;
    for (size_t i = 0; keep && i < n; i++) {
        char c = id[i];
        keep = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    }
    if (keep) {
        memcpy(out, id, 10);
        return;
    }
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)id[i];
        h *= 0x100000001b3ull;
    }
    for (int i = 0; i < 9; i++) {
        out[i] = digits[h % 62];
        h /= 62;
    }
    out[9] = '\0';
}

/* Mistral Nemo (tokenizer v3 "tekken"): "<s>[INST]user[/INST]answer</s>",
 * no spaces; the system prompt goes in front of the last message when that
 * is a user message (and is dropped otherwise, as the real template does);
 * the tool list "[AVAILABLE_TOOLS][...][/AVAILABLE_TOOLS]" goes in front of
 * the last user message; an assistant turn with calls is only
 * "[TOOL_CALLS][{"name": .., "arguments": .., "id": ".."}, ...]</s>" (its
 * content is not shown), a tool result is
 * "[TOOL_RESULTS]{"content": <text>, "call_id": ".."}[/TOOL_RESULTS]".
 * Alternation is checked on user/plain-assistant turns only. Ids are mapped
 * by mistral_id(); a call or result without an id is refused, as the
 * template raises. (Python Jinja compares messages by value, so with two
 * identical last-user texts it would list the tools twice; @huggingface/jinja
 * and this code list them once, before the last user message.) */
static int render_mistral_nemo(render_t *R)
{
    size_t first = R->r[0] == R_SYSTEM ? 1 : 0;
    size_t k = 0, last_user = R->n;
    for (size_t i = first; i < R->n; i++) {
        if (R->r[i] == R_SYSTEM)
            return fail(R, "messages[%zu]: a system message is only allowed first with the %s template",
                        i, R->t->variant);
        if (R->r[i] == R_USER)
            last_user = i;
        if (R->r[i] == R_TOOL || R->calls[i])
            continue;
        if ((R->r[i] == R_USER) != (k % 2 == 0))
            return fail(R,
                        "messages[%zu]: after the optional system message, roles must alternate "
                        "user/assistant/user/assistant/... (tool calls and results aside; %s template)",
                        i, R->t->variant);
        k++;
    }
    put_bos(R);
    char id[10];
    for (size_t i = first; i < R->n; i++) {
        if (R->r[i] == R_USER) {
            if (R->tools && i == last_user) {
                strbuf_puts(&R->sb, "[AVAILABLE_TOOLS][");
                size_t j;
                json_t *tool;
                json_array_foreach(R->tools, j, tool) {
                    const json_t *f = json_object_get(tool, "function");
                    strbuf_puts(&R->sb, "{\"type\": \"function\", \"function\": {");
                    const char *key;
                    const json_t *val;
                    bool sep = false;
                    json_object_foreach((json_t *)f, key, val) {
                        if (strcmp(key, "return") == 0)
                            continue;
                        if (sep)
                            strbuf_puts(&R->sb, ", ");
                        sep = true;
                        strbuf_puts(&R->sb, "\"");
                        strbuf_puts(&R->sb, key);
                        strbuf_puts(&R->sb, "\": ");
                        if (json_is_string(val)) { /* not escaped: the template concatenates */
                            strbuf_puts(&R->sb, "\"");
                            strbuf_puts(&R->sb, json_string_value(val));
                            strbuf_puts(&R->sb, "\"");
                        } else {
                            tojson_put(&R->sb, val, 0);
                        }
                    }
                    strbuf_puts(&R->sb, "}}");
                    strbuf_puts(&R->sb, j + 1 < json_array_size(R->tools) ? ", " : "]");
                }
                strbuf_puts(&R->sb, "[/AVAILABLE_TOOLS]");
            }
            strbuf_puts(&R->sb, "[INST]");
            if (first && i == R->n - 1) {
                strbuf_puts(&R->sb, R->m[0].content);
                strbuf_puts(&R->sb, "\n\n");
            }
            strbuf_puts(&R->sb, R->m[i].content);
            strbuf_puts(&R->sb, "[/INST]");
        } else if (R->calls[i]) {
            strbuf_puts(&R->sb, tool_format_mistral.open);
            size_t j;
            json_t *call;
            json_array_foreach(R->calls[i], j, call) {
                const char *cid = json_string_value(json_object_get(call, "id"));
                if (!cid || !cid[0])
                    return fail(R, "messages[%zu].tool_calls[%zu]: the %s template needs the call's id",
                                i, j, R->t->variant);
                strbuf_t f = {0};
                tojson_put(&f, call_function(call), 0);
                strbuf_append(&R->sb, f.s, f.len - 1); /* without the closing brace */
                free(f.s);
                mistral_id(cid, id);
                strbuf_puts(&R->sb, ", \"id\": \"");
                strbuf_puts(&R->sb, id);
                strbuf_puts(&R->sb, "\"}");
                if (j + 1 < json_array_size(R->calls[i])) {
                    strbuf_puts(&R->sb, tool_format_mistral.sep);
                } else {
                    strbuf_puts(&R->sb, tool_format_mistral.close);
                    strbuf_puts(&R->sb, R->t->eos);
                }
            }
        } else if (R->r[i] == R_ASSISTANT) {
            strbuf_puts(&R->sb, R->m[i].content);
            strbuf_puts(&R->sb, R->t->eos);
        } else { /* R_TOOL */
            if (!R->m[i].tool_call_id || !R->m[i].tool_call_id[0])
                return fail(R, "messages[%zu]: the %s template needs tool_call_id on tool messages", i,
                            R->t->variant);
            mistral_id(R->m[i].tool_call_id, id);
            strbuf_puts(&R->sb, "[TOOL_RESULTS]{\"content\": ");
            strbuf_puts(&R->sb, R->m[i].content);
            strbuf_puts(&R->sb, ", \"call_id\": \"");
            strbuf_puts(&R->sb, id);
            strbuf_puts(&R->sb, "\"}[/TOOL_RESULTS]");
        }
    }
    return 0;
}

static int render_zephyr(render_t *R)
{
    int rc;
    if ((rc = refuse_tool(R)))
        return rc;
    put_bos(R);
    for (size_t i = 0; i < R->n; i++) {
        strbuf_puts(&R->sb, "<|");
        strbuf_puts(&R->sb, R->m[i].role);
        strbuf_puts(&R->sb, "|>\n");
        strbuf_puts(&R->sb, R->m[i].content);
        strbuf_puts(&R->sb, R->t->eos);
        strbuf_puts(&R->sb, "\n");
    }
    if (R->gen)
        strbuf_puts(&R->sb, "<|assistant|>\n");
    return 0;
}

/* SmolVLM (Idefics3): "<|im_start|>" once, then "Role: content<end_of_utterance>\n"
 * per message, the role capitalized ("System", "User", "Assistant"), and
 * "Assistant:" to generate. The real template writes "Role:" without the
 * space when the message's first part is an image; pagoda's content is one
 * text with the image's marker in it, so the space is always written, as
 * llama.cpp does (its built-in smolvlm and its Jinja path, where the image
 * is a text marker). */
static int render_smolvlm(render_t *R)
{
    int rc;
    if ((rc = refuse_tool(R)))
        return rc;
    strbuf_puts(&R->sb, "<|im_start|>");
    for (size_t i = 0; i < R->n; i++) {
        static const char *const names[] = {[R_SYSTEM] = "System", [R_USER] = "User", [R_ASSISTANT] = "Assistant"};
        strbuf_puts(&R->sb, names[R->r[i]]);
        strbuf_puts(&R->sb, ": ");
        strbuf_puts(&R->sb, R->m[i].content);
        strbuf_puts(&R->sb, "<end_of_utterance>\n");
    }
    if (R->gen)
        strbuf_puts(&R->sb, "Assistant:");
    return 0;
}

/* Gemma: "<start_of_turn>user\n...<end_of_turn>\n<start_of_turn>model\n...",
 * content trimmed. Gemma 3 puts the system prompt (untrimmed) plus "\n\n"
 * in front of the first turn; Gemma 1/2 refuse a system message. */
static int render_gemma(render_t *R)
{
    int rc;
    bool g3 = R->t->flags & V_GEMMA3;
    if ((rc = refuse_tool(R)))
        return rc;
    if (!g3 && R->r[0] == R_SYSTEM)
        return fail(R, "messages[0]: system role not supported by the %s template", R->t->variant);
    size_t first = R->r[0] == R_SYSTEM ? 1 : 0;
    if ((rc = check_alternation(R, first)))
        return rc;
    put_bos(R);
    for (size_t i = first; i < R->n; i++) {
        strbuf_puts(&R->sb, "<start_of_turn>");
        strbuf_puts(&R->sb, R->r[i] == R_ASSISTANT ? "model" : R->m[i].role);
        strbuf_puts(&R->sb, "\n");
        if (i == first && first == 1) {
            strbuf_puts(&R->sb, R->m[0].content);
            strbuf_puts(&R->sb, "\n\n");
        }
        sb_put_trimmed(&R->sb, R->m[i].content);
        strbuf_puts(&R->sb, "<end_of_turn>\n");
    }
    if (R->gen)
        strbuf_puts(&R->sb, "<start_of_turn>model\n");
    return 0;
}

static int render_phi3(render_t *R)
{
    int rc;
    if ((rc = refuse_tool(R)))
        return rc;
    put_bos(R);
    for (size_t i = 0; i < R->n; i++) {
        if (R->r[i] == R_SYSTEM && R->m[i].content[0] == '\0' && (R->t->flags & V_SKIP_EMPTY_SYS))
            continue;
        strbuf_puts(&R->sb, "<|");
        strbuf_puts(&R->sb, R->m[i].role);
        strbuf_puts(&R->sb, "|>\n");
        strbuf_puts(&R->sb, R->m[i].content);
        strbuf_puts(&R->sb, "<|end|>\n");
    }
    if (R->gen)
        strbuf_puts(&R->sb, "<|assistant|>\n");
    else if (R->t->flags & V_EOS_IF_NO_GEN)
        strbuf_puts(&R->sb, R->t->eos);
    return 0;
}

/* Families whose real templates know tools: Qwen2.5/Qwen3 ChatML and
 * Llama 3.1+. The others get the generic rewrite below. */
static bool native_tools(const chat_template_t *t)
{
    return (t->family == CHAT_FAMILY_CHATML && (t->flags & V_QWEN_TOOLS)) ||
           (t->family == CHAT_FAMILY_LLAMA3 && (t->flags & V_LLAMA31)) ||
           (t->family == CHAT_FAMILY_MISTRAL && (t->flags & V_MISTRAL_TOOLS));
}

const char *chat_template_tool_format(const chat_template_t *t)
{
    if (t->family == CHAT_FAMILY_LLAMA3 && (t->flags & V_LLAMA31))
        return tool_format_llama3.name;
    if (t->family == CHAT_FAMILY_MISTRAL && (t->flags & V_MISTRAL_TOOLS))
        return tool_format_mistral.name;
    return tool_format_hermes.name;
}

/* Families without tools in their template: the conversation is rewritten
 * into plain system/user/assistant turns the template accepts, in the Hermes
 * convention (the most widely trained one):
 *   - the tool preamble (as Qwen's) is appended to the system message after
 *     "\n\n", or becomes the system message; templates that refuse a system
 *     message get it in front of the first user message instead;
 *   - an assistant turn's calls follow its content as <tool_call> blocks;
 *   - a run of tool results becomes one user turn of <tool_response> blocks.
 * Returns the new messages (strings in *owned, freed by the caller). */
static chat_msg_t *generic_rewrite(render_t *R, size_t *n_out, char ***owned, size_t *n_owned)
{
    const chat_template_t *t = R->t;
    chat_msg_t *m = xcalloc(R->n + 1, sizeof *m);
    *owned = xcalloc(R->n + 1, sizeof **owned);
    size_t k = 0, o = 0;
    bool no_system = (t->family == CHAT_FAMILY_MISTRAL && !(t->flags & V_MISTRAL_SYS)) ||
                     (t->family == CHAT_FAMILY_GEMMA && !(t->flags & V_GEMMA3));
    strbuf_t pre = {0};
    if (R->tools)
        put_hermes_tools(R, &pre);
    size_t i = 0;
    if (pre.len && R->r[0] == R_SYSTEM) {
        strbuf_t c = {0};
        strbuf_puts(&c, R->m[0].content);
        strbuf_puts(&c, "\n\n");
        strbuf_append(&c, pre.s, pre.len);
        m[k++] = (chat_msg_t){.role = "system", .content = (*owned)[o++] = c.s};
        i = 1;
    } else if (pre.len && !no_system) {
        m[k++] = (chat_msg_t){.role = "system", .content = (*owned)[o++] = xstrdup(pre.s)};
    }
    bool pre_pending = pre.len && no_system && R->r[0] != R_SYSTEM;
    for (; i < R->n; i++) {
        if (R->r[i] == R_TOOL) {
            strbuf_t c = {0};
            for (; i < R->n && R->r[i] == R_TOOL; i++) {
                if (c.len)
                    strbuf_puts(&c, "\n");
                strbuf_puts(&c, "<tool_response>\n");
                strbuf_puts(&c, R->m[i].content);
                strbuf_puts(&c, "\n</tool_response>");
            }
            i--;
            m[k++] = (chat_msg_t){.role = "user", .content = (*owned)[o++] = c.s};
        } else if (R->r[i] == R_ASSISTANT && R->calls[i]) {
            strbuf_t c = {0};
            strbuf_puts(&c, R->m[i].content);
            size_t j;
            json_t *call;
            json_array_foreach(R->calls[i], j, call) {
                if (c.len)
                    strbuf_puts(&c, "\n");
                put_hermes_call(&c, call, false);
            }
            m[k++] = (chat_msg_t){.role = "assistant", .content = (*owned)[o++] = c.s};
        } else if (pre_pending && R->r[i] == R_USER) {
            strbuf_t c = {0};
            strbuf_append(&c, pre.s, pre.len);
            strbuf_puts(&c, "\n\n");
            strbuf_puts(&c, R->m[i].content);
            m[k++] = (chat_msg_t){.role = "user", .content = (*owned)[o++] = c.s};
            pre_pending = false;
        } else {
            m[k++] = (chat_msg_t){.role = R->m[i].role, .content = R->m[i].content};
        }
    }
    free(pre.s);
    *n_out = k;
    *n_owned = o;
    return m;
}

/* Parses the tools and every message's tool_calls into R (JSON arrays).
 * Returns 0 or a failure with a message naming the input. */
static int parse_tool_json(render_t *R, const char *tools_json)
{
    json_error_t je;
    if (tools_json) {
        R->tools = json_loads(tools_json, JSON_REJECT_DUPLICATES, &je);
        if (!json_is_array(R->tools))
            return fail(R, "tools: not a JSON array");
        if (json_array_size(R->tools) == 0) {
            json_decref(R->tools);
            R->tools = NULL;
        }
    }
    R->calls = xcalloc(R->n ? R->n : 1, sizeof *R->calls);
    for (size_t i = 0; i < R->n; i++) {
        if (!R->m[i].tool_calls)
            continue;
        if (R->r[i] != R_ASSISTANT)
            return fail(R, "messages[%zu]: only assistant messages carry tool_calls", i);
        json_t *c = json_loads(R->m[i].tool_calls, JSON_REJECT_DUPLICATES, &je);
        if (!json_is_array(c)) {
            json_decref(c);
            return fail(R, "messages[%zu].tool_calls: not a JSON array", i);
        }
        size_t k;
        json_t *call;
        json_array_foreach(c, k, call) {
            if (!json_is_object(call) || !json_is_object(call_function(call)) ||
                !json_is_string(json_object_get(call_function(call), "name"))) {
                json_decref(c);
                return fail(R, "messages[%zu].tool_calls[%zu]: needs function.name", i, k);
            }
        }
        if (json_array_size(c) == 0)
            json_decref(c);
        else
            R->calls[i] = c;
    }
    return 0;
}

static void free_tool_json(render_t *R)
{
    json_decref(R->tools);
    for (size_t i = 0; R->calls && i < R->n; i++)
        json_decref(R->calls[i]);
    free(R->calls);
}

int chat_template_render(const chat_template_t *t, const chat_msg_t *msgs, size_t n,
                         bool add_generation_prompt, char **out, size_t *out_len, char *err,
                         size_t errlen)
{
    return chat_template_render_tools(t, msgs, n, NULL, add_generation_prompt, out, out_len, err, errlen);
}

int chat_template_render_tools(const chat_template_t *t, const chat_msg_t *msgs, size_t n,
                               const char *tools_json, bool add_generation_prompt, char **out,
                               size_t *out_len, char *err, size_t errlen)
{
    chat_render_opts_t o = {.tools_json = tools_json, .add_generation_prompt = add_generation_prompt,
                            .enable_thinking = -1};
    return chat_template_render_opts(t, msgs, n, &o, out, out_len, err, errlen);
}

/* Templates that raise on a system message after the first (llama2, mistral,
 * gemma): does msgs hold one? (NULL roles or contents are left to the render
 * to refuse.) */
static bool needs_fold(const chat_template_t *t, const chat_msg_t *msgs, size_t n)
{
    if (t->family != CHAT_FAMILY_LLAMA2 && t->family != CHAT_FAMILY_MISTRAL && t->family != CHAT_FAMILY_GEMMA)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content)
            return false;
    bool lead = true; /* still in the leading run of system messages */
    for (size_t i = 0; i < n; i++) {
        bool sys = strcmp(msgs[i].role, "system") == 0;
        if (sys && (!lead || i > 0))
            return true;
        lead = lead && sys;
    }
    return false;
}

/* Folds every system message but a leading one into the conversation, the
 * way these templates treat a leading system message (merged into a user
 * turn): a run of leading system messages becomes one ("\n\n" between);
 * a later one is put in front of the next message when that is a user turn,
 * else after the previous message when that is a user turn, else it becomes
 * a user turn of its own. Returns the new count; *out and the strings in
 * *owned (n_owned) are malloc'd. */
static size_t fold_system(const chat_msg_t *msgs, size_t n, chat_msg_t **out, char ***owned, size_t *n_owned)
{
    chat_msg_t *m = xcalloc(n, sizeof *m);
    char **own = xcalloc(n, sizeof *own);
    size_t k = 0, o = 0;
    char *pending = NULL; /* a system text waiting for the next user turn */
    bool all_sys = true;  /* msgs[0..i) are all system messages */
    for (size_t i = 0; i < n; i++) {
        bool sys = strcmp(msgs[i].role, "system") == 0;
        bool user = strcmp(msgs[i].role, "user") == 0;
        bool lead = all_sys;
        all_sys = all_sys && sys;
        if (sys && lead && k == 1) {
            /* the leading run of system messages: one */
            strbuf_t c = {0};
            strbuf_puts(&c, m[0].content);
            strbuf_puts(&c, "\n\n");
            strbuf_puts(&c, msgs[i].content);
            m[0].content = own[o++] = c.s;
            continue;
        }
        if (sys && k > 0) {
            bool next_user = i + 1 < n && strcmp(msgs[i + 1].role, "user") == 0;
            if (next_user) {
                strbuf_t c = {0};
                if (pending) {
                    strbuf_puts(&c, pending);
                    strbuf_puts(&c, "\n\n");
                }
                strbuf_puts(&c, msgs[i].content);
                free(pending);
                pending = c.s;
            } else if (strcmp(m[k - 1].role, "user") == 0) {
                strbuf_t c = {0};
                strbuf_puts(&c, m[k - 1].content);
                strbuf_puts(&c, "\n\n");
                strbuf_puts(&c, msgs[i].content);
                m[k - 1].content = own[o++] = c.s;
            } else {
                m[k++] = (chat_msg_t){.role = "user", .content = msgs[i].content};
            }
            continue;
        }
        m[k] = msgs[i];
        if (user && pending) {
            strbuf_t c = {0};
            strbuf_puts(&c, pending);
            strbuf_puts(&c, "\n\n");
            strbuf_puts(&c, msgs[i].content);
            m[k].content = own[o++] = c.s;
            free(pending);
            pending = NULL;
        }
        k++;
    }
    assert(!pending); /* a pending text always meets the user turn after it */
    *out = m;
    *owned = own;
    *n_owned = o;
    return k;
}

static int render_opts(const chat_template_t *t, const chat_msg_t *msgs, size_t n, const chat_render_opts_t *o,
                       char **out, size_t *out_len, char *err, size_t errlen);

int chat_template_render_opts(const chat_template_t *t, const chat_msg_t *msgs, size_t n,
                              const chat_render_opts_t *o, char **out, size_t *out_len, char *err,
                              size_t errlen)
{
    if (!msgs || !needs_fold(t, msgs, n))
        return render_opts(t, msgs, n, o, out, out_len, err, errlen);
    chat_msg_t *f;
    char **owned;
    size_t n_owned;
    size_t n2 = fold_system(msgs, n, &f, &owned, &n_owned);
    int rc = render_opts(t, f, n2, o, out, out_len, err, errlen);
    for (size_t i = 0; i < n_owned; i++)
        free(owned[i]);
    free(owned);
    free(f);
    return rc;
}

static int render_opts(const chat_template_t *t, const chat_msg_t *msgs, size_t n, const chat_render_opts_t *o,
                       char **out, size_t *out_len, char *err, size_t errlen)
{
    const char *tools_json = o->tools_json;
    render_t R = {.t = t, .m = msgs, .n = n, .gen = o->add_generation_prompt, .think = o->enable_thinking,
                  .err = err, .errlen = errlen};
    *out = NULL;
    if (out_len)
        *out_len = 0;
    if (err && errlen)
        err[0] = '\0';
    if (n == 0 || !msgs)
        return fail(&R, "messages must contain at least one message");
    role_t *roles = xcalloc(n, sizeof(role_t));
    R.r = roles;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        const char *role = msgs[i].role;
        if (!role)
            rc = fail(&R, "messages[%zu]: missing role", i);
        else if (!msgs[i].content)
            rc = fail(&R, "messages[%zu]: missing content", i);
        else if (strcmp(role, "system") == 0)
            roles[i] = R_SYSTEM;
        else if (strcmp(role, "user") == 0)
            roles[i] = R_USER;
        else if (strcmp(role, "assistant") == 0)
            roles[i] = R_ASSISTANT;
        else if (strcmp(role, "tool") == 0)
            roles[i] = R_TOOL;
        else
            rc = fail(&R, "messages[%zu]: unknown role '%.32s' (expected system, user, assistant or tool)",
                      i, role);
    }
    if (rc == 0)
        rc = parse_tool_json(&R, tools_json);
    bool any_calls = false;
    for (size_t i = 0; rc == 0 && i < n; i++)
        any_calls |= R.calls[i] != NULL;
    chat_msg_t *rewritten = NULL;
    char **owned = NULL;
    size_t n_owned = 0;
    if (rc == 0 && !native_tools(t) && (R.tools || any_calls)) {
        /* re-run the role table on the rewritten conversation */
        size_t n2;
        rewritten = generic_rewrite(&R, &n2, &owned, &n_owned);
        free_tool_json(&R);
        R.tools = NULL;
        R.calls = xcalloc(n2 ? n2 : 1, sizeof *R.calls);
        R.m = rewritten;
        R.n = n2;
        /* the rewrite may add a message (the tool list as a system turn) */
        roles = xrealloc(roles, (n2 ? n2 : 1) * sizeof *roles);
        R.r = roles;
        for (size_t i = 0; i < n2; i++)
            roles[i] = strcmp(rewritten[i].role, "system") == 0 ? R_SYSTEM
                       : strcmp(rewritten[i].role, "user") == 0 ? R_USER
                                                                 : R_ASSISTANT;
    }
    if (rc == 0) {
        strbuf_puts(&R.sb, ""); /* an empty prompt is still a valid string */
        switch (t->family) {
        case CHAT_FAMILY_LLAMA3: rc = render_llama3(&R); break;
        case CHAT_FAMILY_LLAMA2: rc = render_llama2(&R); break;
        case CHAT_FAMILY_MISTRAL: rc = render_mistral(&R); break;
        case CHAT_FAMILY_ZEPHYR: rc = render_zephyr(&R); break;
        case CHAT_FAMILY_GEMMA: rc = render_gemma(&R); break;
        case CHAT_FAMILY_PHI3: rc = render_phi3(&R); break;
        case CHAT_FAMILY_SMOLVLM: rc = render_smolvlm(&R); break;
        default: rc = render_chatml(&R); break;
        }
    }
    free(roles);
    free_tool_json(&R);
    for (size_t i = 0; i < n_owned; i++)
        free(owned[i]);
    free(owned);
    free(rewritten);
    if (rc != 0) {
        free(R.sb.s);
        return rc;
    }
    *out = R.sb.s;
    if (out_len)
        *out_len = R.sb.len;
    return CHAT_TEMPLATE_OK;
}
