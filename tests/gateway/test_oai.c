/* Unit tests for gateway/oai: a table of request bodies (valid variants and
 * every class of invalid input) with the expected status and `param`; parsed
 * values of valid requests; response builders parsed back with jansson and
 * checked field by field (exact key sets); UTF-8 sanitizing against Python's
 * decoder as an independent reference. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <sodium.h>

#include "common/utf8.h"
#include "gateway/oai.h"

/* ---- generated bodies --------------------------------------------------- */

enum gen {
    GEN_NONE,
    GEN_BIG_CONTENT,   /* 10 MB message content */
    GEN_BIG_PROMPT,    /* 10 MB prompt */
    GEN_OPEN_BRACKETS, /* 100000 '[' */
    GEN_DEPTH_32,      /* nesting exactly at the limit (valid) */
    GEN_DEPTH_33,      /* one past */
    GEN_MANY_MESSAGES, /* OAI_MAX_MESSAGES + 1 */
    GEN_MAX_MESSAGES,  /* exactly OAI_MAX_MESSAGES (valid) */
    GEN_BIG_TOKENS,    /* prompt of 100000 token ids (valid) */
};

static char *gen_body(enum gen g)
{
    size_t big = 10u << 20;
    char *s = NULL;
    switch (g) {
    case GEN_BIG_CONTENT:
    case GEN_BIG_PROMPT: {
        s = malloc(big + 200);
        int n = sprintf(s, g == GEN_BIG_CONTENT ? "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\""
                                                : "{\"model\":\"m\",\"prompt\":\"");
        memset(s + n, 'x', big);
        strcpy(s + n + big, g == GEN_BIG_CONTENT ? "\"}]}" : "\"}");
        return s;
    }
    case GEN_OPEN_BRACKETS:
        s = malloc(100001);
        memset(s, '[', 100000);
        s[100000] = '\0';
        return s;
    case GEN_DEPTH_32:
    case GEN_DEPTH_33: {
        int inner = g == GEN_DEPTH_32 ? 31 : 32; /* + the top-level object */
        s = malloc(200 + 2 * (size_t)inner);
        int n = sprintf(s, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]");
        /* The messages array already nests 3 deep; hang the deep part off an
         * unknown field so only the depth matters. */
        n += sprintf(s + n, ",\"x\":");
        for (int i = 0; i < inner; i++)
            s[n++] = '[';
        for (int i = 0; i < inner; i++)
            s[n++] = ']';
        strcpy(s + n, "}");
        return s;
    }
    case GEN_MANY_MESSAGES:
    case GEN_MAX_MESSAGES: {
        size_t count = OAI_MAX_MESSAGES + (g == GEN_MANY_MESSAGES);
        s = malloc(64 + count * 40);
        int n = sprintf(s, "{\"model\":\"m\",\"messages\":[");
        for (size_t i = 0; i < count; i++)
            n += sprintf(s + n, "%s{\"role\":\"user\",\"content\":\"m%zu\"}", i ? "," : "", i);
        strcpy(s + n, "]}");
        return s;
    }
    case GEN_BIG_TOKENS: {
        s = malloc(64 + 100000 * 8);
        int n = sprintf(s, "{\"model\":\"m\",\"prompt\":[");
        for (int i = 0; i < 100000; i++)
            n += sprintf(s + n, "%s%d", i ? "," : "", (i * 7919) % 150000);
        strcpy(s + n, "]}");
        return s;
    }
    case GEN_NONE:
        break;
    }
    return NULL;
}

/* ---- the table ---------------------------------------------------------- */

typedef struct {
    request_kind_t kind;
    const char *body;   /* NULL → gen */
    enum gen gen;
    int status;         /* 0 = must parse */
    const char *param;  /* expected param ("" = null); NULL = don't care */
    const char *msg;    /* substring expected in the message, or NULL */
} req_case_t;

#define C REQUEST_CHAT
#define P REQUEST_COMPLETION
#define MSG "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"
#define CHAT(extra) "{\"model\":\"m\"," MSG extra "}"
#define CMPL(extra) "{\"model\":\"m\",\"prompt\":\"hi\"" extra "}"

static const req_case_t CASES[] = {
    /* ---- valid chat ---- */
    {C, CHAT(""), 0, 0, NULL, NULL},
    {C, "{\"model\":\"m\",\"messages\":[{\"role\":\"developer\",\"content\":\"be brief\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]},"
        "{\"role\":\"assistant\",\"content\":null},{\"role\":\"tool\",\"content\":\"42\"},"
        "{\"role\":\"assistant\",\"content\":\"x\",\"tool_calls\":[]}]}", 0, 0, NULL, NULL},
    {C, CHAT(",\"max_tokens\":null,\"temperature\":null,\"top_p\":null,\"stop\":null,\"seed\":null,"
             "\"logit_bias\":null,\"logprobs\":null,\"top_logprobs\":null,\"stream\":null,\"n\":null,"
             "\"user\":null,\"stream_options\":null,\"tools\":null,\"response_format\":null"), 0, 0, NULL, NULL},
    {C, CHAT(",\"foo\":{\"bar\":[1,2,{\"baz\":null}]},\"metadata\":{},\"store\":false"), 0, 0, NULL, NULL},
    {C, CHAT(",\"stop\":\"\\n\\n\""), 0, 0, NULL, NULL},
    {C, CHAT(",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\",\"k\",\"l\",\"m\",\"n\",\"o\",\"p\"]"),
     0, 0, NULL, NULL},
    {C, CHAT(",\"stop\":[]"), 0, 0, NULL, NULL},
    {C, CHAT(",\"max_tokens\":5.0,\"top_k\":-1,\"n\":1,\"tools\":[],\"response_format\":{\"type\":\"text\"}"), 0, 0,
     NULL, NULL},
    {C, CHAT(",\"seed\":-9223372036854775808,\"temperature\":0,\"top_p\":1,\"min_p\":0,\"repetition_penalty\":10"),
     0, 0, NULL, NULL},
    {C, CHAT(",\"stream\":true,\"stream_options\":{\"include_usage\":true}"), 0, 0, NULL, NULL},
    {C, CHAT(",\"logprobs\":true,\"top_logprobs\":20"), 0, 0, NULL, NULL},
    {C, CHAT(",\"logprobs\":false,\"top_logprobs\":0"), 0, 0, NULL, NULL},
    {C, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"\\u00e9\\ud83d\\ude00 caf\xc3\xa9\"}]}", 0, 0,
     NULL, NULL},
    {C, NULL, GEN_DEPTH_32, 0, NULL, NULL},
    {C, NULL, GEN_MAX_MESSAGES, 0, NULL, NULL},
    /* ---- valid completions ---- */
    {P, CMPL(""), 0, 0, NULL, NULL},
    {P, "{\"model\":\"m\",\"prompt\":[\"one\"]}", 0, 0, NULL, NULL},
    {P, "{\"model\":\"m\",\"prompt\":[1,2,3]}", 0, 0, NULL, NULL},
    {P, "{\"model\":\"m\",\"prompt\":[[1,2,3]]}", 0, 0, NULL, NULL},
    {P, CMPL(",\"logprobs\":5,\"echo\":false,\"best_of\":1,\"suffix\":null,\"max_tokens\":16"), 0, 0, NULL, NULL},
    {P, CMPL(",\"logprobs\":0"), 0, 0, NULL, NULL},
    {P, NULL, GEN_BIG_TOKENS, 0, NULL, NULL},

    /* ---- malformed JSON ---- */
    {C, "", 0, 400, "", "empty"},
    {C, "   ", 0, 400, "", "could not parse"},
    {C, "{\"model\":\"m\",\"messages\":[", 0, 400, "", "could not parse"},
    {C, "{\"model\":\"m\"} x", 0, 400, "", "could not parse"},
    {C, "{'model':'m'}", 0, 400, "", "could not parse"},
    {C, "[]", 0, 400, "", "must be a JSON object"},
    {C, "\"hi\"", 0, 400, "", "could not parse"},
    {C, "{\"model\":\"m\",\"model\":\"n\"," MSG "}", 0, 400, "", "duplicate"},
    {C, CHAT(",\"max_tokens\":1e400"), 0, 400, "", "real number overflow"},
    {C, CHAT(",\"seed\":99999999999999999999999"), 0, 400, "", "too big integer"},
    {C, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}", 0, 400, "", "could not parse"},
    {C, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"\xc0\xaf\"}]}", 0, 400, "", "could not parse"},
    {C, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"\\ud800\"}]}", 0, 400, "", "could not parse"},
    {C, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]}", 0, 400, "", "could not parse"},
    {C, NULL, GEN_OPEN_BRACKETS, 400, "", "nested deeper"},
    {C, NULL, GEN_DEPTH_33, 400, "", "nested deeper"},
    /* ---- model ---- */
    {C, "{" MSG "}", 0, 400, "model", "Missing"},
    {C, "{\"model\":null," MSG "}", 0, 400, "model", "Missing"},
    {C, "{\"model\":5," MSG "}", 0, 400, "model", "must be a string"},
    {C, "{\"model\":\"\"," MSG "}", 0, 400, "model", "empty"},
    {P, "{\"model\":[\"m\"],\"prompt\":\"x\"}", 0, 400, "model", "must be a string"},
    /* ---- messages ---- */
    {C, "{\"model\":\"m\"}", 0, 400, "messages", "Missing"},
    {C, "{\"model\":\"m\",\"messages\":{}}", 0, 400, "messages", "must be an array"},
    {C, "{\"model\":\"m\",\"messages\":[]}", 0, 400, "messages", "at least one"},
    {C, "{\"model\":\"m\",\"messages\":[5]}", 0, 400, "messages[0]", "must be an object"},
    {C, "{\"model\":\"m\",\"messages\":[{\"content\":\"x\"}]}", 0, 400, "messages[0].role", "Missing"},
    {C, "{\"model\":\"m\",\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", 0, 400, "messages[0].role",
     "Unknown role 'wizard'"},
    {C, "{\"model\":\"m\",\"messages\":[{\"role\":7,\"content\":\"x\"}]}", 0, 400, "messages[0].role", "string"},
    {C, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\"}]}", 0, 400, "messages[0].content", "Missing"},
    {C, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":42}]}", 0, 400, "messages[0].content",
     "string or an array"},
    {C, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
        "{\"type\":\"image_url\",\"image_url\":{\"url\":\"file:///etc/passwd\"}}]}]}", 0, 400,
     "messages[0].content[1].image_url.url", "scheme 'file:' is not accepted"},
    {C, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
        "{\"type\":\"image_url\",\"image_url\":{\"url\":\"http://u@x/y.png\"}}]}]}", 0, 400,
     "messages[0].content[1].image_url.url", "user name"},
    {C, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"hologram\"}]}]}", 0, 400,
     "messages[0].content[0].type", "Unknown content part type"},
    {C, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}", 0, 400,
     "messages[0].content[0].text", NULL},
    {C, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[\"a\"]}]}", 0, 400,
     "messages[0].content[0]", "must be an object"},
    {C, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":null,"
        "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\"}]}]}", 0, 400, "messages[1].tool_calls[0]", "must be"},
    {C, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a\",\"name\":5}]}", 0, 400,
     "messages[0].name", NULL},
    {C, NULL, GEN_BIG_CONTENT, 400, "messages[0].content", "longer than"},
    {C, NULL, GEN_MANY_MESSAGES, 400, "messages", "at most"},
    /* ---- sampling ranges and types ---- */
    {C, CHAT(",\"temperature\":2.5"), 0, 400, "temperature", "<= 2"},
    {C, CHAT(",\"temperature\":-0.1"), 0, 400, "temperature", NULL},
    {C, CHAT(",\"temperature\":\"hot\""), 0, 400, "temperature", "must be a number"},
    {C, CHAT(",\"temperature\":true"), 0, 400, "temperature", "must be a number"},
    {C, CHAT(",\"top_p\":0"), 0, 400, "top_p", "> 0"},
    {C, CHAT(",\"top_p\":1.5"), 0, 400, "top_p", NULL},
    {C, CHAT(",\"top_k\":-2"), 0, 400, "top_k", NULL},
    {C, CHAT(",\"top_k\":1.5"), 0, 400, "top_k", "integer"},
    {C, CHAT(",\"min_p\":1.1"), 0, 400, "min_p", NULL},
    {C, CHAT(",\"presence_penalty\":-3"), 0, 400, "presence_penalty", NULL},
    {C, CHAT(",\"frequency_penalty\":2.0001"), 0, 400, "frequency_penalty", NULL},
    {C, CHAT(",\"repetition_penalty\":0"), 0, 400, "repetition_penalty", NULL},
    {C, CHAT(",\"max_tokens\":0"), 0, 400, "max_tokens", NULL},
    {C, CHAT(",\"max_tokens\":-5"), 0, 400, "max_tokens", NULL},
    {C, CHAT(",\"max_tokens\":\"10\""), 0, 400, "max_tokens", "integer"},
    {C, CHAT(",\"max_tokens\":1e300"), 0, 400, "max_tokens", "integer"},
    {C, CHAT(",\"max_tokens\":9223372036854775807"), 0, 400, "max_tokens", "between"},
    {C, CHAT(",\"max_completion_tokens\":0"), 0, 400, "max_completion_tokens", NULL},
    {C, CHAT(",\"seed\":1.5"), 0, 400, "seed", "integer"},
    {C, CHAT(",\"seed\":\"x\""), 0, 400, "seed", "integer"},
    /* ---- stop ---- */
    {C, CHAT(",\"stop\":5"), 0, 400, "stop", NULL},
    {C, CHAT(",\"stop\":\"\""), 0, 400, "stop", NULL},
    {C, CHAT(",\"stop\":[\"\"]"), 0, 400, "stop[0]", NULL},
    {C, CHAT(",\"stop\":[\"a\",1]"), 0, 400, "stop[1]", "must be a string"},
    {C, CHAT(",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\",\"k\",\"l\",\"m\",\"n\",\"o\",\"p\",\"q\"]"),
     0, 400, "stop", "at most 16"},
    /* ---- logit_bias ---- */
    {C, CHAT(",\"logit_bias\":[]"), 0, 400, "logit_bias", "object"},
    {C, CHAT(",\"logit_bias\":{\"abc\":1}"), 0, 400, "logit_bias.abc", "token ids"},
    {C, CHAT(",\"logit_bias\":{\"-5\":1}"), 0, 400, "logit_bias.-5", "token ids"},
    {C, CHAT(",\"logit_bias\":{\"99999999999\":1}"), 0, 400, "logit_bias.99999999999", NULL},
    {C, CHAT(",\"logit_bias\":{\"5\":101}"), 0, 400, "logit_bias.5", "between -100 and 100"},
    {C, CHAT(",\"logit_bias\":{\"5\":\"x\"}"), 0, 400, "logit_bias.5", "number"},
    /* ---- logprobs, stream, misc ---- */
    {C, CHAT(",\"logprobs\":\"yes\""), 0, 400, "logprobs", "boolean"},
    {C, CHAT(",\"logprobs\":1"), 0, 400, "logprobs", "boolean"},
    {C, CHAT(",\"logprobs\":true,\"top_logprobs\":21"), 0, 400, "top_logprobs", NULL},
    {C, CHAT(",\"top_logprobs\":3"), 0, 400, "top_logprobs", "requires"},
    {C, CHAT(",\"stream\":\"true\""), 0, 400, "stream", "boolean"},
    {C, CHAT(",\"stream_options\":{\"include_usage\":true}"), 0, 400, "stream_options", "stream"},
    {C, CHAT(",\"stream\":true,\"stream_options\":{\"include_usage\":1}"), 0, 400, "stream_options.include_usage",
     NULL},
    {C, CHAT(",\"stream\":true,\"stream_options\":[]"), 0, 400, "stream_options", NULL},
    {C, CHAT(",\"n\":2"), 0, 0, NULL, NULL},
    {C, CHAT(",\"n\":128"), 0, 0, NULL, NULL},
    {C, CHAT(",\"n\":129"), 0, 400, "n", "between 1 and 128"},
    {C, CHAT(",\"n\":0"), 0, 400, "n", "between 1 and 128"},
    {C, CHAT(",\"n\":-1"), 0, 400, "n", NULL},
    {C, CHAT(",\"n\":\"2\""), 0, 400, "n", "integer"},
    {C, CHAT(",\"user\":5"), 0, 400, "user", NULL},
    /* cache_salt (vLLM): a string of 1..256 bytes, on chat and completions */
    {C, CHAT(",\"cache_salt\":\"tenant-1\""), 0, 0, NULL, NULL},
    {P, CMPL(",\"cache_salt\":\"tenant-1\""), 0, 0, NULL, NULL},
    {C, CHAT(",\"cache_salt\":\"yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy\""), 0, 0, NULL, NULL},
    {C, CHAT(",\"cache_salt\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\""), 0, 400, "cache_salt", "longer than 256"},
    {P, CMPL(",\"cache_salt\":\"\""), 0, 400, "cache_salt", "empty"},
    {C, CHAT(",\"cache_salt\":7"), 0, 400, "cache_salt", "string"},
    {C, CHAT(",\"cache_salt\":null"), 0, 0, NULL, NULL},
    {C, CHAT(",\"ignore_eos\":\"no\""), 0, 400, "ignore_eos", NULL},
    {C, CHAT(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]"), 0, 0, NULL, NULL},
    {C, CHAT(",\"tools\":[{\"type\":\"retrieval\"}]"), 0, 400, "tools[0]", "function"},
    {C, CHAT(",\"response_format\":{\"type\":\"json_object\"}"), 0, 0, NULL, NULL},
    {C, CHAT(",\"response_format\":{\"type\":\"yaml\"}"), 0, 400, "response_format.type", "not supported"},
    {C, CHAT(",\"response_format\":{\"type\":\"json_schema\"}"), 0, 400, "response_format.json_schema", NULL},
    {C, CHAT(",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{}}}"), 0, 400,
     "response_format.json_schema.name", NULL},
    {C, CHAT(",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\",\"strict\":1}}"), 0, 400,
     "response_format.json_schema.strict", NULL},
    {C, CHAT(",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\",\"schema\":"
             "{\"type\":\"object\",\"patternProperties\":{}}}}"), 0, 400, "response_format.json_schema.schema",
     "/patternProperties"},
    {C, CHAT(",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\",\"schema\":"
             "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}}}"), 0, 0, NULL, NULL},
    {C, CHAT(",\"grammar\":\"root ::= [a-z]+\""), 0, 0, NULL, NULL},
    {C, CHAT(",\"grammar\":\"root ::= (\\\"a\\\"\""), 0, 400, "grammar", "line 1, column 10: unclosed"},
    {C, CHAT(",\"grammar\":\"root ::= \\\"a\\\"\",\"response_format\":{\"type\":\"json_object\"}"), 0, 400,
     "grammar", "combined"},
    {P, "{\"model\":\"m\",\"prompt\":\"p\",\"grammar\":\"root ::= x\"}", 0, 400, "grammar", "undefined rule 'x'"},
    {C, CHAT(",\"response_format\":\"json\""), 0, 400, "response_format", NULL},
    /* ---- completions ---- */
    {P, "{\"model\":\"m\"}", 0, 400, "prompt", "Missing"},
    {P, "{\"model\":\"m\",\"prompt\":\"\"}", 0, 400, "prompt", "empty"},
    {P, "{\"model\":\"m\",\"prompt\":[]}", 0, 400, "prompt", "empty"},
    {P, "{\"model\":\"m\",\"prompt\":[\"a\",\"b\"]}", 0, 400, "prompt", "Multiple prompts"},
    {P, "{\"model\":\"m\",\"prompt\":[[1],[2]]}", 0, 400, "prompt", "Multiple prompts"},
    {P, "{\"model\":\"m\",\"prompt\":[[]]}", 0, 400, "prompt[0]", "empty"},
    {P, "{\"model\":\"m\",\"prompt\":[1,\"a\"]}", 0, 400, "prompt[1]", "token id"},
    {P, "{\"model\":\"m\",\"prompt\":[-1]}", 0, 400, "prompt[0]", "not a valid token id"},
    {P, "{\"model\":\"m\",\"prompt\":[5000000000]}", 0, 400, "prompt[0]", "not a valid token id"},
    {P, "{\"model\":\"m\",\"prompt\":5}", 0, 400, "prompt", NULL},
    {P, "{\"model\":\"m\",\"prompt\":[true]}", 0, 400, "prompt[0]", NULL},
    {P, "{\"model\":\"m\",\"prompt\":{\"text\":\"a\"}}", 0, 400, "prompt", NULL},
    {P, CMPL(",\"logprobs\":true"), 0, 400, "logprobs", "integer"},
    {P, CMPL(",\"logprobs\":21"), 0, 400, "logprobs", NULL},
    {P, CMPL(",\"echo\":true"), 0, 400, "echo", "not supported"},
    {P, CMPL(",\"best_of\":2"), 0, 400, "best_of", "does not rank"},
    {P, CMPL(",\"best_of\":3,\"n\":2"), 0, 400, "best_of", "Use 'n'"},
    {P, CMPL(",\"best_of\":2,\"n\":2"), 0, 0, NULL, NULL},
    {P, CMPL(",\"best_of\":0"), 0, 400, "best_of", NULL},
    {P, CMPL(",\"suffix\":\"x\""), 0, 400, "suffix", "not supported"},
    {P, CMPL(",\"n\":3"), 0, 0, NULL, NULL},
    {P, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", 0, 400, "prompt", "Missing"},
    {P, NULL, GEN_BIG_PROMPT, 400, "prompt", "longer than"},
};

static void test_request_table(void **st)
{
    (void)st;
    size_t n_cases = sizeof(CASES) / sizeof(CASES[0]);
    assert_true(n_cases >= 60);
    int failures = 0;
    for (size_t i = 0; i < n_cases; i++) {
        const req_case_t *c = &CASES[i];
        char *gen = c->body ? NULL : gen_body(c->gen);
        const char *body = c->body ? c->body : gen;
        request_t r;
        oai_error_t e;
        int rc = oai_parse_request((const uint8_t *)body, strlen(body), c->kind, &r, &e);
        char shown[81];
        snprintf(shown, sizeof(shown), "%s", body);
        if (c->status == 0) {
            if (rc != 0) {
                print_error("case %zu (%.80s): unexpected error %d param='%s': %s\n", i, shown, e.status, e.param,
                            e.message);
                failures++;
            }
        } else {
            if (rc != -1 || e.status != c->status || strcmp(e.type, "invalid_request_error") != 0 ||
                (c->param && strcmp(e.param, c->param) != 0) || (c->msg && !strstr(e.message, c->msg))) {
                print_error("case %zu (%.80s): rc=%d status=%d param='%s' msg='%s'; want status %d param '%s' "
                            "msg ~ '%s'\n", i, shown, rc, e.status, e.param, e.message, c->status,
                            c->param ? c->param : "(any)", c->msg ? c->msg : "(any)");
                failures++;
            }
            /* A failed parse leaves nothing allocated. */
            assert_null(r.model);
            assert_null(r.messages);
            assert_null(r.prompt);
            assert_null(r.stop);
        }
        request_free(&r);
        free(gen);
    }
    assert_int_equal(failures, 0);
}

/* ---- parsed values ------------------------------------------------------ */

static void test_chat_values(void **st)
{
    (void)st;
    const char *body =
        "{\"model\":\"qwen3-0.6b\",\"messages\":["
        "{\"role\":\"developer\",\"content\":\"sys\"},"
        "{\"role\":\"user\",\"name\":\"bob\",\"content\":[{\"type\":\"text\",\"text\":\"line1\"},{\"type\":\"text\",\"text\":\"line2\"}]},"
        "{\"role\":\"assistant\",\"content\":null},{\"role\":\"tool\",\"content\":\"r\"}],"
        "\"max_tokens\":100,\"max_completion_tokens\":50,\"temperature\":0.7,\"top_p\":0.9,\"top_k\":40,"
        "\"min_p\":0.05,\"presence_penalty\":0.5,\"frequency_penalty\":-0.5,\"repetition_penalty\":1.1,"
        "\"seed\":-42,\"stop\":[\"END\",\"\\n\\n\"],\"logit_bias\":{\"15\":-100,\"2000\":2.5},"
        "\"logprobs\":true,\"top_logprobs\":3,\"stream\":true,\"stream_options\":{\"include_usage\":true},"
        "\"user\":\"u-1\",\"ignore_eos\":true,\"unknown\":[1]}";
    request_t r;
    oai_error_t e;
    int rc = oai_parse_request((const uint8_t *)body, strlen(body), REQUEST_CHAT, &r, &e);
    if (rc != 0)
        fail_msg("%s", e.message);
    assert_int_equal(r.kind, REQUEST_CHAT);
    assert_string_equal(r.model, "qwen3-0.6b");
    assert_int_equal(r.n_messages, 4);
    assert_int_equal(r.messages[0].role, REQUEST_ROLE_SYSTEM);
    assert_string_equal(r.messages[0].content, "sys");
    assert_int_equal(r.messages[1].role, REQUEST_ROLE_USER);
    assert_string_equal(r.messages[1].content, "line1\nline2");
    assert_int_equal(r.messages[1].content_len, 11);
    assert_string_equal(r.messages[1].name, "bob");
    assert_int_equal(r.messages[2].role, REQUEST_ROLE_ASSISTANT);
    assert_string_equal(r.messages[2].content, "");
    assert_int_equal(r.messages[3].role, REQUEST_ROLE_TOOL);
    assert_null(r.messages[0].name);
    assert_int_equal(r.max_tokens, 50); /* max_completion_tokens wins */
    assert_float_equal(r.temperature, 0.7, 0);
    assert_float_equal(r.top_p, 0.9, 0);
    assert_int_equal(r.top_k, 40);
    assert_float_equal(r.min_p, 0.05, 0);
    assert_float_equal(r.presence_penalty, 0.5, 0);
    assert_float_equal(r.frequency_penalty, -0.5, 0);
    assert_float_equal(r.repetition_penalty, 1.1, 0);
    assert_true(r.has_seed);
    assert_int_equal(r.seed, -42);
    assert_int_equal(r.n_stop, 2);
    assert_string_equal(r.stop[0], "END");
    assert_string_equal(r.stop[1], "\n\n");
    assert_int_equal(r.n_logit_bias, 2);
    int seen15 = 0, seen2000 = 0;
    for (size_t i = 0; i < 2; i++) {
        if (r.logit_bias[i].token == 15) {
            seen15 = 1;
            assert_float_equal(r.logit_bias[i].bias, -100, 0);
        } else if (r.logit_bias[i].token == 2000) {
            seen2000 = 1;
            assert_float_equal(r.logit_bias[i].bias, 2.5, 0);
        }
    }
    assert_true(seen15 && seen2000);
    assert_true(r.logprobs);
    assert_int_equal(r.top_logprobs, 3);
    assert_true(r.stream);
    assert_true(r.include_usage);
    assert_string_equal(r.user, "u-1");
    assert_true(r.ignore_eos);
    assert_null(r.prompt);
    request_free(&r);
    assert_null(r.model);
    request_free(&r); /* twice is harmless */
    request_free(NULL);
}

static void test_defaults(void **st)
{
    (void)st;
    const char *body = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"top_k\":-1}";
    request_t r;
    oai_error_t e;
    assert_int_equal(oai_parse_request((const uint8_t *)body, strlen(body), REQUEST_CHAT, &r, &e), 0);
    assert_int_equal(r.max_tokens, -1);
    assert_float_equal(r.temperature, 1.0, 0);
    assert_float_equal(r.top_p, 1.0, 0);
    assert_int_equal(r.top_k, 0);
    assert_float_equal(r.min_p, 0, 0);
    assert_float_equal(r.repetition_penalty, 1.0, 0);
    assert_false(r.has_seed);
    assert_int_equal(r.n_stop, 0);
    assert_false(r.logprobs);
    assert_false(r.stream);
    assert_false(r.include_usage);
    assert_null(r.user);
    request_free(&r);
}

static void test_completion_values(void **st)
{
    (void)st;
    request_t r;
    oai_error_t e;
    const char *b1 = "{\"model\":\"m\",\"prompt\":[\"Once upon\"],\"logprobs\":2,\"max_tokens\":7,\"stop\":\"x\"}";
    assert_int_equal(oai_parse_request((const uint8_t *)b1, strlen(b1), REQUEST_COMPLETION, &r, &e), 0);
    assert_string_equal(r.prompt, "Once upon");
    assert_int_equal(r.prompt_len, 9);
    assert_null(r.prompt_tokens);
    assert_true(r.logprobs);
    assert_int_equal(r.top_logprobs, 2);
    assert_int_equal(r.max_tokens, 7);
    assert_int_equal(r.n_stop, 1);
    request_free(&r);

    const char *b2 = "{\"model\":\"m\",\"prompt\":[[7,0,2147483647]],\"max_completion_tokens\":0}";
    /* max_completion_tokens is a chat field: ignored (even invalid) for completions. */
    assert_int_equal(oai_parse_request((const uint8_t *)b2, strlen(b2), REQUEST_COMPLETION, &r, &e), 0);
    assert_null(r.prompt);
    assert_int_equal(r.n_prompt_tokens, 3);
    assert_int_equal(r.prompt_tokens[0], 7);
    assert_int_equal(r.prompt_tokens[1], 0);
    assert_int_equal(r.prompt_tokens[2], 2147483647);
    assert_false(r.logprobs);
    assert_int_equal(r.max_tokens, -1);
    request_free(&r);
}

/* ---- errors ------------------------------------------------------------- */

static json_t *parse_json(const char *s)
{
    json_error_t je;
    json_t *j = json_loads(s, 0, &je);
    if (!j)
        fail_msg("builder produced invalid JSON (%s): %s", je.text, s);
    return j;
}

/* The object's keys are exactly `keys` (NULL-terminated list). */
static void assert_keys(json_t *obj, const char *const *keys)
{
    assert_true(json_is_object(obj));
    size_t n = 0;
    for (; keys[n]; n++)
        if (!json_object_get(obj, keys[n]))
            fail_msg("missing key '%s'", keys[n]);
    if (json_object_size(obj) != n) {
        char *dumped = json_dumps(obj, JSON_COMPACT);
        fail_msg("expected %zu keys, got %zu: %s", n, json_object_size(obj), dumped);
    }
}

static const char *jget_str(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    if (!json_is_string(v))
        fail_msg("'%s' is not a string", k);
    return json_string_value(v);
}

/* POST /tokenize and /detokenize bodies (oai_parse_tokenizer). */
/* /v1/embeddings bodies as a table: what parses (input forms, encoding,
 * dimensions) and what is refused with which param. */
static void test_embeddings_bodies(void **state)
{
    (void)state;
    static const struct {
        const char *body;
        const char *param;   /* NULL: must parse; "-": refused with no param */
        size_t n_inputs;     /* parsed: inputs */
        int form;            /* parsed: 't' text inputs, 'i' token inputs */
        bool base64;
        int64_t dims;
    } cases[] = {
        {"{\"model\":\"m\",\"input\":\"hello\"}", NULL, 1, 't', false, 0},
        {"{\"model\":\"m\",\"input\":[\"a\",\"b\",\"c\"],\"encoding_format\":\"base64\"}", NULL, 3, 't', true, 0},
        {"{\"model\":\"m\",\"input\":[1,2,3],\"encoding_format\":\"float\",\"dimensions\":64}", NULL, 1, 'i', false, 64},
        {"{\"model\":\"m\",\"input\":[[1,2],[3]],\"user\":\"x\",\"encoding_format\":null,\"other\":1}", NULL, 2, 'i', false, 0},
        {"{\"input\":\"a\"}", "model", 0, 0, false, 0},
        {"{\"model\":\"m\"}", "input", 0, 0, false, 0},
        {"{\"model\":\"m\",\"input\":null}", "input", 0, 0, false, 0},
        {"{\"model\":\"m\",\"input\":\"\"}", "input", 0, 0, false, 0},
        {"{\"model\":\"m\",\"input\":[]}", "input", 0, 0, false, 0},
        {"{\"model\":\"m\",\"input\":[\"a\",\"\"]}", "input[1]", 0, 0, false, 0},
        {"{\"model\":\"m\",\"input\":[[1],[]]}", "input[1]", 0, 0, false, 0},
        {"{\"model\":\"m\",\"input\":[\"a\",[1]]}", "input[1]", 0, 0, false, 0},
        {"{\"model\":\"m\",\"input\":[[1],\"a\"]}", "input[1]", 0, 0, false, 0},
        {"{\"model\":\"m\",\"input\":[1,\"a\"]}", "input[1]", 0, 0, false, 0},
        {"{\"model\":\"m\",\"input\":[1,-1]}", "input[1]", 0, 0, false, 0},
        {"{\"model\":\"m\",\"input\":[[2147483648]]}", "input[0][0]", 0, 0, false, 0},
        {"{\"model\":\"m\",\"input\":[true]}", "input[0]", 0, 0, false, 0},
        {"{\"model\":\"m\",\"input\":7}", "input", 0, 0, false, 0},
        {"{\"model\":\"m\",\"input\":\"a\",\"encoding_format\":\"int8\"}", "encoding_format", 0, 0, false, 0},
        {"{\"model\":\"m\",\"input\":\"a\",\"encoding_format\":1}", "encoding_format", 0, 0, false, 0},
        {"{\"model\":\"m\",\"input\":\"a\",\"dimensions\":0}", "dimensions", 0, 0, false, 0},
        {"{\"model\":\"m\",\"input\":\"a\",\"dimensions\":65537}", "dimensions", 0, 0, false, 0},
        {"{\"model\":\"m\",\"input\":\"a\",\"dimensions\":1.5}", "dimensions", 0, 0, false, 0},
        {"{\"model\":\"m\",\"input\":\"a\",\"user\":5}", "user", 0, 0, false, 0},
        {"[\"a\"]", "-", 0, 0, false, 0},
        {"{\"model\":\"m\",\"input\":\"a\"", "-", 0, 0, false, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        request_t r;
        oai_error_t e;
        int rc = oai_parse_embeddings((const uint8_t *)cases[i].body, strlen(cases[i].body), &r, &e);
        if (!cases[i].param) {
            if (rc != 0)
                fail_msg("case %zu (%s): %s", i, cases[i].body, e.message);
            assert_int_equal(r.op, REQUEST_OP_EMBED);
            assert_string_equal(r.model, "m");
            assert_int_equal(r.n_inputs, cases[i].n_inputs);
            for (size_t k = 0; k < r.n_inputs; k++)
                assert_true(cases[i].form == 't' ? r.inputs[k].text && !r.inputs[k].ids
                                                 : !r.inputs[k].text && r.inputs[k].n_ids >= 1);
            assert_int_equal(r.base64, cases[i].base64);
            assert_int_equal(r.dimensions, cases[i].dims);
            request_free(&r);
            continue;
        }
        if (rc != -1)
            fail_msg("case %zu (%s) was accepted", i, cases[i].body);
        assert_int_equal(e.status, 400);
        assert_null(r.inputs);
        if (strcmp(cases[i].param, "-") == 0)
            assert_true(e.param[0] == 0);
        else if (strcmp(e.param, cases[i].param) != 0)
            fail_msg("case %zu (%s): param '%s', want '%s' (%s)", i, cases[i].body, e.param,
                     cases[i].param, e.message);
    }

    /* the input-count limit, and the token total */
    size_t cap = 16 + 4 * (OAI_MAX_EMBED_INPUTS + 1) + 64;
    char *big = malloc(cap);
    size_t off = (size_t)snprintf(big, cap, "{\"model\":\"m\",\"input\":[");
    for (int i = 0; i <= OAI_MAX_EMBED_INPUTS; i++)
        off += (size_t)snprintf(big + off, cap - off, "%s\"x\"", i ? "," : "");
    snprintf(big + off, cap - off, "]}");
    request_t r;
    oai_error_t e;
    assert_int_equal(oai_parse_embeddings((const uint8_t *)big, strlen(big), &r, &e), -1);
    assert_string_equal(e.param, "input");
    free(big);
}

/* The answer: OpenAI's shape; floats printed so float32 round-trips; base64
 * decodes to the little-endian float32 bytes; a non-finite value is refused. */
static void test_embeddings_json(void **state)
{
    (void)state;
    const float a[3] = {0.6f, -0.8f, 1.0f / 3.0f}, b[3] = {1.0f, 0.0f, -0.0f};
    oai_embedding_t emb[2] = {{a, 3}, {b, 3}};
    char *s = oai_embeddings_json("m", emb, 2, false, 17);
    json_error_t je;
    json_t *j = json_loads(s, 0, &je);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "object")), "list");
    assert_string_equal(json_string_value(json_object_get(j, "model")), "m");
    json_t *u = json_object_get(j, "usage");
    assert_int_equal(json_integer_value(json_object_get(u, "prompt_tokens")), 17);
    assert_int_equal(json_integer_value(json_object_get(u, "total_tokens")), 17);
    json_t *data = json_object_get(j, "data");
    assert_int_equal(json_array_size(data), 2);
    for (size_t i = 0; i < 2; i++) {
        json_t *d = json_array_get(data, i);
        assert_string_equal(json_string_value(json_object_get(d, "object")), "embedding");
        assert_int_equal(json_integer_value(json_object_get(d, "index")), (json_int_t)i);
        json_t *v = json_object_get(d, "embedding");
        assert_int_equal(json_array_size(v), 3);
        for (size_t k = 0; k < 3; k++) /* the printed decimal reads back as the same float32 */
            assert_true((float)json_number_value(json_array_get(v, k)) == emb[i].v[k]);
    }
    json_decref(j);
    free(s);

    s = oai_embeddings_json("m", emb, 1, true, 3);
    j = json_loads(s, 0, &je);
    assert_non_null(j);
    const char *b64 = json_string_value(json_object_get(json_array_get(json_object_get(j, "data"), 0), "embedding"));
    assert_non_null(b64);
    /* 0.6f = 0x3f19999a, -0.8f = 0xbf4ccccd, 1/3f = 0x3eaaaaab, little-endian */
    static const uint8_t want[12] = {0x9a, 0x99, 0x19, 0x3f, 0xcd, 0xcc, 0x4c, 0xbf, 0xab, 0xaa, 0xaa, 0x3e};
    uint8_t got[16];
    size_t n = 0;
    assert_int_equal(sodium_base642bin(got, sizeof got, b64, strlen(b64), NULL, &n, NULL,
                                       sodium_base64_VARIANT_ORIGINAL), 0);
    assert_int_equal(n, 12);
    assert_memory_equal(got, want, 12);
    json_decref(j);
    free(s);

    const float bad[2] = {1.0f, NAN};
    oai_embedding_t e1 = {bad, 2};
    assert_null(oai_embeddings_json("m", &e1, 1, false, 1));
}

static void test_tokenizer_bodies(void **state)
{
    (void)state;
    static const struct {
        request_op_t op;
        const char *body;
        const char *param; /* NULL: must parse; "-": refused, any param */
    } cases[] = {
        {REQUEST_OP_TOKENIZE, "{\"model\":\"m\",\"prompt\":\"hi\"}", NULL},
        {REQUEST_OP_TOKENIZE, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", NULL},
        {REQUEST_OP_TOKENIZE, "{\"model\":\"m\",\"prompt\":\"hi\",\"add_special_tokens\":false}", NULL},
        {REQUEST_OP_TOKENIZE, "{\"model\":\"m\",\"prompt\":\"hi\",\"add_special\":false,\"x\":1}", NULL},
        {REQUEST_OP_TOKENIZE, "{\"prompt\":\"hi\"}", "model"},
        {REQUEST_OP_TOKENIZE, "{\"model\":\"m\"}", "prompt"},
        {REQUEST_OP_TOKENIZE, "{\"model\":\"m\",\"prompt\":\"\"}", "prompt"},
        {REQUEST_OP_TOKENIZE, "{\"model\":\"m\",\"prompt\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "prompt"},
        {REQUEST_OP_TOKENIZE, "{\"model\":\"m\",\"prompt\":\"hi\",\"add_special_tokens\":1}", "add_special_tokens"},
        {REQUEST_OP_TOKENIZE, "{\"model\":\"m\",\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", "-"},
        {REQUEST_OP_DETOKENIZE, "{\"model\":\"m\",\"tokens\":[1,2,3]}", NULL},
        {REQUEST_OP_DETOKENIZE, "{\"model\":\"m\"}", "tokens"},
        {REQUEST_OP_DETOKENIZE, "{\"model\":\"m\",\"tokens\":[]}", "tokens"},
        {REQUEST_OP_DETOKENIZE, "{\"model\":\"m\",\"tokens\":\"1 2\"}", "tokens"},
        {REQUEST_OP_DETOKENIZE, "{\"model\":\"m\",\"tokens\":[1,-2]}", "tokens[1]"},
        {REQUEST_OP_DETOKENIZE, "{\"model\":\"m\",\"tokens\":[1,2147483648]}", "tokens[1]"},
        {REQUEST_OP_DETOKENIZE, "[1]", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        request_t r;
        oai_error_t e;
        int rc = oai_parse_tokenizer((const uint8_t *)cases[i].body, strlen(cases[i].body), cases[i].op,
                                     &r, &e);
        if (!cases[i].param) {
            if (rc != 0)
                fail_msg("case %zu (%s): %s", i, cases[i].body, e.message);
            assert_int_equal(r.op, cases[i].op);
            assert_string_equal(r.model, "m");
            if (cases[i].op == REQUEST_OP_DETOKENIZE) {
                assert_int_equal(r.n_prompt_tokens, 3);
                assert_int_equal(r.prompt_tokens[2], 3);
            }
            assert_int_equal(r.kind, i == 1 ? REQUEST_CHAT : REQUEST_COMPLETION);
            assert_int_equal(r.add_special, i != 2 && i != 3);
            request_free(&r);
        } else if (rc != -1 || e.status != 400 ||
                   (strcmp(cases[i].param, "-") != 0 && strcmp(e.param, cases[i].param) != 0)) {
            fail_msg("case %zu (%s): rc %d status %d param '%s', want 400 '%s'", i, cases[i].body, rc,
                     e.status, e.param, cases[i].param);
        }
    }
}

static void test_error_bodies(void **st)
{
    (void)st;
    static const struct {
        int status;
        const char *type, *code;
    } rows[] = {
        {400, "invalid_request_error", NULL},   {401, "authentication_error", "invalid_api_key"},
        {403, "permission_error", "insufficient_permissions"},
        {404, "not_found_error", "not_found"},  {405, "invalid_request_error", "method_not_allowed"},
        {413, "invalid_request_error", "request_too_large"}, {429, "rate_limit_error", "rate_limit_exceeded"},
        {500, "server_error", "internal_error"}, {503, "server_error", "service_unavailable"},
        {504, "server_error", "timeout"},
    };
    static const char *const ERR_KEYS[] = {"message", "type", "param", "code", NULL};
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        oai_error_t e;
        oai_error_set(&e, rows[i].status, i % 2 ? "temperature" : NULL, "status %d \"quoted\" \xff", rows[i].status);
        assert_int_equal(e.status, rows[i].status);
        char *s = oai_error_json(&e);
        json_t *j = parse_json(s);
        static const char *const TOP[] = {"error", NULL};
        assert_keys(j, TOP);
        json_t *in = json_object_get(j, "error");
        assert_keys(in, ERR_KEYS);
        assert_string_equal(jget_str(in, "type"), rows[i].type);
        char want[64];
        snprintf(want, sizeof(want), "status %d \"quoted\" \xef\xbf\xbd", rows[i].status);
        assert_string_equal(jget_str(in, "message"), want);
        if (rows[i].code)
            assert_string_equal(jget_str(in, "code"), rows[i].code);
        else
            assert_true(json_is_null(json_object_get(in, "code")));
        if (i % 2)
            assert_string_equal(jget_str(in, "param"), "temperature");
        else
            assert_true(json_is_null(json_object_get(in, "param")));
        json_decref(j);
        free(s);
    }
    oai_error_t e;
    oai_error_model_not_found(&e, "gpt-9");
    assert_int_equal(e.status, 404);
    char *s = oai_error_json(&e);
    json_t *j = parse_json(s);
    json_t *in = json_object_get(j, "error");
    assert_string_equal(jget_str(in, "code"), "model_not_found");
    assert_string_equal(jget_str(in, "param"), "model");
    assert_non_null(strstr(jget_str(in, "message"), "gpt-9"));
    json_decref(j);
    free(s);

    /* A parse error's body, end to end. */
    request_t r;
    const char *body = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":400}";
    assert_int_equal(oai_parse_request((const uint8_t *)body, strlen(body), REQUEST_CHAT, &r, &e), -1);
    s = oai_error_json(&e);
    j = parse_json(s);
    in = json_object_get(j, "error");
    assert_string_equal(jget_str(in, "param"), "n");
    assert_string_equal(jget_str(in, "type"), "invalid_request_error");
    assert_true(json_is_null(json_object_get(in, "code")));
    json_decref(j);
    free(s);
}

/* A worker's typed error → the client's status, type and code (oai.h table). */
static void test_worker_errors(void **st)
{
    (void)st;
    static const struct {
        proto_err_t cause;
        int status;
        const char *type, *code;
    } rows[] = {
        {PROTO_ERR_BAD_REQUEST, 400, "invalid_request_error", NULL},
        {PROTO_ERR_CONTEXT_LENGTH, 400, "invalid_request_error", "context_length_exceeded"},
        {PROTO_ERR_DUPLICATE_ID, 400, "invalid_request_error", NULL},
        {PROTO_ERR_UNAVAILABLE, 503, "server_error", "service_unavailable"},
        {PROTO_ERR_DEADLINE, 504, "server_error", "timeout"},
        {PROTO_ERR_ENGINE, 500, "server_error", "internal_error"},
        {PROTO_ERR_NOT_REGISTERED, 500, "server_error", "internal_error"},
        {(proto_err_t)200, 500, "server_error", "internal_error"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        oai_error_t e;
        oai_error_from_worker(&e, rows[i].cause, "worker says %d", (int)i);
        assert_int_equal(e.status, rows[i].status);
        assert_string_equal(e.type, rows[i].type);
        if (rows[i].code)
            assert_string_equal(e.code, rows[i].code);
        else
            assert_null(e.code);
        char want[32];
        snprintf(want, sizeof want, "worker says %d", (int)i);
        assert_string_equal(e.message, want);
        assert_string_equal(e.param, "");
    }
}

/* ---- response builders -------------------------------------------------- */

static const oai_top_logprob_t TOP0[] = {{"Hello", 5, -0.25}, {"Hi", 2, -1.5}};
static const oai_top_logprob_t TOP1[] = {{"\xe2\x80", 2, -0.5}, {"!", 1, -2.0}};
static const oai_token_logprob_t TOKS[] = {
    {"Hello", 5, -0.25, TOP0, 2},
    {"\xe2\x80", 2, -0.5, TOP1, 2}, /* first two bytes of U+2014: not valid UTF-8 alone */
    {"\xe2\x80\x94x", 4, -INFINITY, NULL, 0},
};
static const oai_meta_t META = {"chatcmpl-abc", "qwen3-0.6b", 1700000000, "fp_pagoda"};
static const oai_usage_t USAGE = {12, 3, 8};

static void check_usage(json_t *u, int64_t p, int64_t c, int64_t cached)
{
    static const char *const K[] = {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details",
                                    NULL};
    static const char *const KD[] = {"cached_tokens", NULL};
    assert_keys(u, K);
    assert_int_equal(json_integer_value(json_object_get(u, "prompt_tokens")), p);
    assert_int_equal(json_integer_value(json_object_get(u, "completion_tokens")), c);
    assert_int_equal(json_integer_value(json_object_get(u, "total_tokens")), p + c);
    json_t *d = json_object_get(u, "prompt_tokens_details");
    assert_keys(d, KD);
    assert_int_equal(json_integer_value(json_object_get(d, "cached_tokens")), cached);
}

static void check_envelope(json_t *j, const char *object)
{
    assert_string_equal(jget_str(j, "id"), META.id);
    assert_string_equal(jget_str(j, "object"), object);
    assert_int_equal(json_integer_value(json_object_get(j, "created")), META.created);
    assert_string_equal(jget_str(j, "model"), META.model);
    assert_string_equal(jget_str(j, "system_fingerprint"), META.system_fingerprint);
}

static void check_chat_logprobs(json_t *lp)
{
    static const char *const K[] = {"content", "refusal", NULL};
    static const char *const KT[] = {"token", "logprob", "bytes", "top_logprobs", NULL};
    static const char *const KA[] = {"token", "logprob", "bytes", NULL};
    assert_keys(lp, K);
    json_t *content = json_object_get(lp, "content");
    assert_int_equal(json_array_size(content), 3);
    for (size_t i = 0; i < 3; i++) {
        json_t *t = json_array_get(content, i);
        assert_keys(t, KT);
        double want = isfinite(TOKS[i].logprob) ? TOKS[i].logprob : -9999.0;
        assert_float_equal(json_number_value(json_object_get(t, "logprob")), want, 1e-7);
        json_t *bytes = json_object_get(t, "bytes");
        assert_int_equal(json_array_size(bytes), TOKS[i].token_len);
        for (size_t b = 0; b < TOKS[i].token_len; b++)
            assert_int_equal(json_integer_value(json_array_get(bytes, b)), (uint8_t)TOKS[i].token[b]);
        json_t *top = json_object_get(t, "top_logprobs");
        assert_int_equal(json_array_size(top), TOKS[i].n_top);
        for (size_t k = 0; k < TOKS[i].n_top; k++) {
            json_t *a = json_array_get(top, k);
            assert_keys(a, KA);
            assert_float_equal(json_number_value(json_object_get(a, "logprob")), TOKS[i].top[k].logprob, 1e-7);
        }
    }
    assert_string_equal(jget_str(json_array_get(content, 0), "token"), "Hello");
    /* Partial UTF-8 → U+FFFD in "token", raw bytes in "bytes". */
    assert_string_equal(jget_str(json_array_get(content, 1), "token"), "\xef\xbf\xbd");
    assert_string_equal(jget_str(json_array_get(content, 2), "token"), "\xe2\x80\x94x");
}

static void test_chat_completion(void **st)
{
    (void)st;
    static const char *const TOP[] = {"id", "object", "created", "model", "system_fingerprint", "choices", "usage",
                                      NULL};
    static const char *const CH[] = {"index", "message", "logprobs", "finish_reason", NULL};
    static const char *const MSGK[] = {"role", "content", NULL};
    oai_logprobs_t lp = {true, TOKS, 3, 0};
    char *s = oai_chat_completion_json(&META, "Hello \"world\"\n", 14, "stop", &lp, &USAGE);
    json_t *j = parse_json(s);
    assert_keys(j, TOP);
    check_envelope(j, "chat.completion");
    json_t *choices = json_object_get(j, "choices");
    assert_int_equal(json_array_size(choices), 1);
    json_t *c0 = json_array_get(choices, 0);
    assert_keys(c0, CH);
    assert_int_equal(json_integer_value(json_object_get(c0, "index")), 0);
    assert_string_equal(jget_str(c0, "finish_reason"), "stop");
    json_t *msg = json_object_get(c0, "message");
    assert_keys(msg, MSGK);
    assert_string_equal(jget_str(msg, "role"), "assistant");
    assert_string_equal(jget_str(msg, "content"), "Hello \"world\"\n");
    check_chat_logprobs(json_object_get(c0, "logprobs"));
    check_usage(json_object_get(j, "usage"), 12, 3, 8);
    json_decref(j);
    free(s);

    /* No logprobs requested, no fingerprint, length finish. */
    oai_meta_t m2 = META;
    m2.system_fingerprint = NULL;
    oai_logprobs_t none = {0};
    s = oai_chat_completion_json(&m2, "x", 1, "length", &none, &USAGE);
    j = parse_json(s);
    c0 = json_array_get(json_object_get(j, "choices"), 0);
    assert_true(json_is_null(json_object_get(c0, "logprobs")));
    assert_true(json_is_null(json_object_get(j, "system_fingerprint")));
    assert_string_equal(jget_str(c0, "finish_reason"), "length");
    json_decref(j);
    free(s);
}

static void test_text_completion(void **st)
{
    (void)st;
    static const char *const TOP[] = {"id", "object", "created", "model", "system_fingerprint", "choices", "usage",
                                      NULL};
    static const char *const CH[] = {"text", "index", "logprobs", "finish_reason", NULL};
    static const char *const LPK[] = {"tokens", "token_logprobs", "top_logprobs", "text_offset", NULL};
    oai_logprobs_t lp = {true, TOKS, 3, 100};
    char *s = oai_completion_json(&META, "Hello\xe2\x80\x94", 8, "length", &lp, &USAGE);
    json_t *j = parse_json(s);
    assert_keys(j, TOP);
    check_envelope(j, "text_completion");
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    assert_keys(c0, CH);
    assert_string_equal(jget_str(c0, "text"), "Hello\xe2\x80\x94");
    assert_string_equal(jget_str(c0, "finish_reason"), "length");
    json_t *l = json_object_get(c0, "logprobs");
    assert_keys(l, LPK);
    json_t *tokens = json_object_get(l, "tokens"), *tlp = json_object_get(l, "token_logprobs"),
           *top = json_object_get(l, "top_logprobs"), *off = json_object_get(l, "text_offset");
    assert_int_equal(json_array_size(tokens), 3);
    assert_int_equal(json_array_size(tlp), 3);
    assert_int_equal(json_array_size(top), 3);
    assert_int_equal(json_array_size(off), 3);
    assert_string_equal(json_string_value(json_array_get(tokens, 0)), "Hello");
    assert_float_equal(json_number_value(json_array_get(tlp, 0)), -0.25, 1e-7);
    assert_float_equal(json_number_value(json_array_get(tlp, 2)), -9999.0, 0);
    /* Offsets in code points: "Hello" = 5, U+FFFD = 1. */
    assert_int_equal(json_integer_value(json_array_get(off, 0)), 100);
    assert_int_equal(json_integer_value(json_array_get(off, 1)), 105);
    assert_int_equal(json_integer_value(json_array_get(off, 2)), 106);
    json_t *top0 = json_array_get(top, 0);
    assert_int_equal(json_object_size(top0), 2);
    assert_float_equal(json_number_value(json_object_get(top0, "Hello")), -0.25, 1e-7);
    assert_float_equal(json_number_value(json_object_get(top0, "Hi")), -1.5, 1e-7);
    assert_int_equal(json_object_size(json_array_get(top, 2)), 0);
    check_usage(json_object_get(j, "usage"), 12, 3, 8);
    json_decref(j);
    free(s);

    /* The standalone logprobs builders give the same objects. */
    s = oai_logprobs_completion_json(&lp);
    j = parse_json(s);
    assert_keys(j, LPK);
    json_decref(j);
    free(s);
    s = oai_logprobs_chat_json(&lp);
    j = parse_json(s);
    check_chat_logprobs(j);
    json_decref(j);
    free(s);
    s = oai_logprobs_chat_json(NULL);
    assert_string_equal(s, "null");
    free(s);
}

static void test_chat_stream(void **st)
{
    (void)st;
    static const char *const TOP[] = {"id", "object", "created", "model", "system_fingerprint", "choices", NULL};
    static const char *const TOPU[] = {"id", "object", "created", "model", "system_fingerprint", "choices", "usage",
                                       NULL};
    static const char *const CH[] = {"index", "delta", "logprobs", "finish_reason", NULL};
    static const char *const D_FIRST[] = {"role", "content", NULL};
    static const char *const D_TEXT[] = {"content", NULL};
    static const char *const D_NONE[] = {NULL};

    for (int inc = 0; inc < 2; inc++) {
        const char *const *top = inc ? TOPU : TOP;
        /* first chunk */
        oai_chunk_t c = {.role = true, .text = "", .text_len = 0, .include_usage = inc};
        char *s = oai_chat_chunk_json(&META, &c);
        json_t *j = parse_json(s);
        assert_keys(j, top);
        check_envelope(j, "chat.completion.chunk");
        if (inc)
            assert_true(json_is_null(json_object_get(j, "usage")));
        json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
        assert_keys(c0, CH);
        json_t *d = json_object_get(c0, "delta");
        assert_keys(d, D_FIRST);
        assert_string_equal(jget_str(d, "role"), "assistant");
        assert_string_equal(jget_str(d, "content"), "");
        assert_true(json_is_null(json_object_get(c0, "finish_reason")));
        assert_true(json_is_null(json_object_get(c0, "logprobs")));
        json_decref(j);
        free(s);
        /* content delta with logprobs */
        oai_logprobs_t lp = {true, TOKS, 1, 0};
        c = (oai_chunk_t){.text = "Hello", .text_len = 5, .logprobs = &lp, .include_usage = inc};
        s = oai_chat_chunk_json(&META, &c);
        j = parse_json(s);
        assert_keys(j, top);
        c0 = json_array_get(json_object_get(j, "choices"), 0);
        d = json_object_get(c0, "delta");
        assert_keys(d, D_TEXT);
        assert_string_equal(jget_str(d, "content"), "Hello");
        json_t *lc = json_object_get(json_object_get(c0, "logprobs"), "content");
        assert_int_equal(json_array_size(lc), 1);
        assert_string_equal(jget_str(json_array_get(lc, 0), "token"), "Hello");
        json_decref(j);
        free(s);
        /* final chunk: empty delta + finish_reason */
        c = (oai_chunk_t){.finish_reason = "stop", .include_usage = inc};
        s = oai_chat_chunk_json(&META, &c);
        j = parse_json(s);
        assert_keys(j, top);
        c0 = json_array_get(json_object_get(j, "choices"), 0);
        assert_keys(json_object_get(c0, "delta"), D_NONE);
        assert_string_equal(jget_str(c0, "finish_reason"), "stop");
        json_decref(j);
        free(s);
    }
    /* usage-only chunk */
    oai_chunk_t c = {.include_usage = true, .usage = &USAGE};
    char *s = oai_chat_chunk_json(&META, &c);
    json_t *j = parse_json(s);
    assert_keys(j, TOPU);
    assert_int_equal(json_array_size(json_object_get(j, "choices")), 0);
    check_usage(json_object_get(j, "usage"), 12, 3, 8);
    json_decref(j);
    free(s);
}

static void test_completion_stream(void **st)
{
    (void)st;
    static const char *const TOP[] = {"id", "object", "created", "model", "system_fingerprint", "choices", NULL};
    static const char *const CH[] = {"text", "index", "logprobs", "finish_reason", NULL};
    oai_logprobs_t lp = {true, TOKS + 1, 1, 5};
    oai_chunk_t c = {.text = "\xe2\x80", .text_len = 2, .logprobs = &lp};
    char *s = oai_completion_chunk_json(&META, &c);
    json_t *j = parse_json(s);
    assert_keys(j, TOP);
    check_envelope(j, "text_completion");
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    assert_keys(c0, CH);
    assert_string_equal(jget_str(c0, "text"), "\xef\xbf\xbd");
    json_t *off = json_object_get(json_object_get(c0, "logprobs"), "text_offset");
    assert_int_equal(json_integer_value(json_array_get(off, 0)), 5);
    assert_true(json_is_null(json_object_get(c0, "finish_reason")));
    json_decref(j);
    free(s);
    c = (oai_chunk_t){.finish_reason = "length"};
    s = oai_completion_chunk_json(&META, &c);
    j = parse_json(s);
    c0 = json_array_get(json_object_get(j, "choices"), 0);
    assert_string_equal(jget_str(c0, "text"), "");
    assert_string_equal(jget_str(c0, "finish_reason"), "length");
    json_decref(j);
    free(s);
    c = (oai_chunk_t){.include_usage = true, .usage = &USAGE};
    s = oai_completion_chunk_json(&META, &c);
    j = parse_json(s);
    assert_int_equal(json_array_size(json_object_get(j, "choices")), 0);
    check_usage(json_object_get(j, "usage"), 12, 3, 8);
    json_decref(j);
    free(s);
}

static void test_models_and_ids(void **st)
{
    (void)st;
    static const char *const TOP[] = {"object", "data", NULL};
    static const char *const M1[] = {"id", "object", "created", "owned_by", "max_model_len", NULL};
    static const char *const M2[] = {"id", "object", "created", "owned_by", NULL};
    const oai_model_info_t models[] = {{"qwen3-0.6b", 1700000001, NULL, 40960}, {"tiny", 5, "me", 0}};
    char *s = oai_models_json(models, 2);
    json_t *j = parse_json(s);
    assert_keys(j, TOP);
    assert_string_equal(jget_str(j, "object"), "list");
    json_t *data = json_object_get(j, "data");
    assert_int_equal(json_array_size(data), 2);
    json_t *a = json_array_get(data, 0), *b = json_array_get(data, 1);
    assert_keys(a, M1);
    assert_keys(b, M2);
    assert_string_equal(jget_str(a, "id"), "qwen3-0.6b");
    assert_string_equal(jget_str(a, "object"), "model");
    assert_string_equal(jget_str(a, "owned_by"), "pagoda");
    assert_int_equal(json_integer_value(json_object_get(a, "created")), 1700000001);
    assert_int_equal(json_integer_value(json_object_get(a, "max_model_len")), 40960);
    assert_string_equal(jget_str(b, "owned_by"), "me");
    json_decref(j);
    free(s);
    s = oai_models_json(NULL, 0);
    assert_string_equal(s, "{\"object\":\"list\",\"data\":[]}");
    free(s);

    char id1[64], id2[64];
    oai_id_new("chatcmpl-", id1, sizeof(id1));
    oai_id_new("chatcmpl-", id2, sizeof(id2));
    assert_int_equal(strlen(id1), 9 + 24);
    assert_memory_equal(id1, "chatcmpl-", 9);
    for (size_t i = 9; i < strlen(id1); i++)
        assert_non_null(strchr("0123456789abcdef", id1[i]));
    assert_string_not_equal(id1, id2);
}

/* ---- UTF-8 sanitizer vs Python's decoder -------------------------------- */

static void test_utf8_sanitize(void **st)
{
    (void)st;
    /* Fixed cases (expected values from the Unicode "maximal subpart" rule). */
    static const struct {
        const char *in;
        size_t len;
        const char *out;
    } fixed[] = {
        {"abc", 3, "abc"},
        {"\xe2\x80", 2, "\xef\xbf\xbd"},                       /* truncated 3-byte: one U+FFFD */
        {"\xc0\xaf", 2, "\xef\xbf\xbd\xef\xbf\xbd"},           /* overlong: each byte */
        {"\xed\xa0\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* surrogate */
        {"\xf4\x90\x80\x80", 4, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* > U+10FFFF */
        {"\xf0\x9f\x98\x80", 4, "\xf0\x9f\x98\x80"},
        {"a\xf0\x9f\x98", 4, "a\xef\xbf\xbd"},
    };
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
        size_t n;
        char *o = utf8_sanitize(fixed[i].in, fixed[i].len, &n);
        assert_string_equal(o, fixed[i].out);
        assert_int_equal(n, strlen(fixed[i].out));
        free(o);
    }
    size_t n;
    char *o = utf8_sanitize("a\0b", 3, &n); /* NUL kept */
    assert_int_equal(n, 3);
    assert_memory_equal(o, "a\0b", 3);
    free(o);

    /* Random byte strings against Python: bytes.decode("utf-8", "replace"). */
    if (access("/usr/bin/python3", X_OK) != 0)
        return; /* the fixed cases above still ran */
    char in_path[] = "/tmp/pagoda-utf8-XXXXXX";
    int fd = mkstemp(in_path);
    assert_true(fd >= 0);
    uint64_t x = 0x1234567;
    enum { N_STR = 300, LEN = 24 };
    uint8_t buf[N_STR][LEN];
    for (int i = 0; i < N_STR; i++) {
        for (int k = 0; k < LEN; k++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            /* bias towards interesting bytes: continuations and lead bytes */
            static const uint8_t pool[] = {0x41, 0x80, 0xBF, 0xC2, 0xC0, 0xDF, 0xE0, 0xE2, 0xED, 0xEF,
                                           0xF0, 0xF4, 0xF5, 0xFF, 0x9F, 0xA0, 0x90, 0x8F, 0x00};
            buf[i][k] = (x >> 32) % 3 == 0 ? (uint8_t)x : pool[(x >> 8) % sizeof(pool)];
        }
    }
    assert_int_equal(write(fd, buf, sizeof(buf)), (ssize_t)sizeof(buf));
    close(fd);
    char cmd[512];
    snprintf(cmd, sizeof(cmd),
             "/usr/bin/python3 -c \"import sys; d=open('%s','rb').read(); "
             "[sys.stdout.buffer.write(d[i*%d:(i+1)*%d].decode('utf-8','replace').encode('utf-8').hex().encode()+b'\\n') "
             "for i in range(%d)]\"", in_path, LEN, LEN, N_STR);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char line[LEN * 3 * 2 + 8];
    for (int i = 0; i < N_STR; i++) {
        assert_non_null(fgets(line, sizeof(line), p));
        line[strcspn(line, "\n")] = '\0';
        o = utf8_sanitize((const char *)buf[i], LEN, &n);
        char hex[LEN * 3 * 2 + 1];
        for (size_t k = 0; k < n; k++)
            sprintf(hex + 2 * k, "%02x", (uint8_t)o[k]);
        hex[2 * n] = '\0';
        if (strcmp(hex, line) != 0)
            fail_msg("string %d: ours %s, python %s", i, hex, line);
        free(o);
    }
    pclose(p);
    unlink(in_path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_table),
        cmocka_unit_test(test_chat_values),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_completion_values),
        cmocka_unit_test(test_error_bodies),
        cmocka_unit_test(test_worker_errors),
        cmocka_unit_test(test_tokenizer_bodies),
        cmocka_unit_test(test_embeddings_bodies),
        cmocka_unit_test(test_embeddings_json),
        cmocka_unit_test(test_chat_completion),
        cmocka_unit_test(test_text_completion),
        cmocka_unit_test(test_chat_stream),
        cmocka_unit_test(test_completion_stream),
        cmocka_unit_test(test_models_and_ids),
        cmocka_unit_test(test_utf8_sanitize),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
