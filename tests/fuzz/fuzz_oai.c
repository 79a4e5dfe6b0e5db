/* fuzz_oai.c — libFuzzer target for the OpenAI request parser (gateway/oai.h).
 *
 * Input layout (the seed corpus in tests/fuzz/corpus/oai/ uses it):
 *   byte 0     kind selector: even → chat completions, odd → completions;
 *              bit 1 set: the /tokenize (bit 2 clear) or /detokenize parser instead;
 *              bit 3 set (and bit 1 clear): the /v1/embeddings parser
 *   bytes 1..  the HTTP request body
 *
 * Beyond "no crash, no leak, no overread" (ASan/UBSan), it checks:
 *   - an accepted request satisfies the documented invariants (model set,
 *     ≥ 1 message for chat, exactly one prompt form for completions, ranges);
 *   - a refused request has status 400 and an error body that is valid JSON;
 *   - response builders fed with the parsed text produce valid JSON;
 *   - UTF-8 sanitizing is idempotent (its output is valid UTF-8);
 *   - for chat, oai_load_body + oai_parse_chat_root (the Anthropic and
 *     Responses surfaces' path) accept exactly what oai_parse_request accepts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/utf8.h"
#include "gateway/oai.h"

static void must_be_json(char *s)
{
    json_error_t e;
    json_t *j = json_loads(s, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e); /* \u0000 is valid JSON */
    if (!j)
        __builtin_trap();
    json_decref(j);
    free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    request_kind_t kind = (data[0] & 1) ? REQUEST_COMPLETION : REQUEST_CHAT;
    const uint8_t *body = data + 1;
    size_t len = size - 1;

    /* Sanitizer: output must be a fixed point. */
    size_t n1, n2;
    char *s1 = utf8_sanitize((const char *)body, len, &n1);
    char *s2 = utf8_sanitize(s1, n1, &n2);
    if (n1 != n2 || memcmp(s1, s2, n1) != 0)
        __builtin_trap();
    free(s2);

    request_t r;
    oai_error_t err;
    if ((data[0] & 10) == 8) {
        int erc = oai_parse_embeddings(body, len, &r, &err);
        if (erc != 0) {
            if (erc != -1 || err.status != 400 || r.model || r.inputs || r.n_inputs)
                __builtin_trap();
            must_be_json(oai_error_json(&err));
        } else {
            if (!r.model || !r.model[0] || r.op != REQUEST_OP_EMBED || r.n_inputs < 1 ||
                r.n_inputs > OAI_MAX_EMBED_INPUTS || r.dimensions < 0 || r.dimensions > OAI_MAX_EMBED_DIM)
                __builtin_trap();
            /* each input is exactly one non-empty form; the answer for
             * vectors as long as the inputs is valid JSON in both encodings */
            oai_embedding_t *emb = calloc(r.n_inputs, sizeof *emb);
            float *v = calloc(64, sizeof *v);
            for (size_t i = 0; i < r.n_inputs; i++) {
                const request_embed_input_t *in = &r.inputs[i];
                if (in->text ? (in->ids || in->text_len == 0 || strlen(in->text) != in->text_len)
                             : (!in->ids || in->n_ids < 1))
                    __builtin_trap();
                for (size_t k = 0; k < in->n_ids; k++)
                    if (in->ids[k] < 0)
                        __builtin_trap();
                emb[i].v = v;
                emb[i].dim = (in->text ? in->text_len : in->n_ids) % 64;
                v[i % 64] = in->text ? (float)in->text[0] : (float)in->ids[0];
            }
            must_be_json(oai_embeddings_json(r.model, emb, r.n_inputs, r.base64, r.n_inputs));
            free(v);
            free(emb);
            request_free(&r);
        }
        free(s1);
        return 0;
    }
    if (data[0] & 2) {
        request_op_t op = (data[0] & 4) ? REQUEST_OP_DETOKENIZE : REQUEST_OP_TOKENIZE;
        int trc = oai_parse_tokenizer(body, len, op, &r, &err);
        if (trc != 0) {
            if (trc != -1 || err.status != 400 || r.model || r.messages || r.prompt || r.prompt_tokens)
                __builtin_trap();
            must_be_json(oai_error_json(&err));
        } else {
            if (!r.model || !r.model[0] || r.op != op)
                __builtin_trap();
            if (op == REQUEST_OP_DETOKENIZE && (!r.prompt_tokens || r.n_prompt_tokens < 1 || r.prompt))
                __builtin_trap();
            if (op == REQUEST_OP_TOKENIZE && (r.kind == REQUEST_CHAT ? r.n_messages < 1 : !r.prompt && !r.prompt_tokens))
                __builtin_trap();
            request_free(&r);
        }
        free(s1);
        return 0;
    }
    int rc = oai_parse_request(body, len, kind, &r, &err);
    if (kind == REQUEST_CHAT) {
        /* The other surfaces' path (oai_load_body + oai_parse_chat_root)
         * must agree with oai_parse_request on every chat body. */
        oai_error_t e2;
        json_t *root = oai_load_body(body, len, &e2);
        int rc2 = -1;
        if (!root) {
            if (e2.status != 400)
                __builtin_trap();
        } else {
            if (!json_is_object(root))
                __builtin_trap();
            request_t r2;
            rc2 = oai_parse_chat_root(root, &r2, &e2);
            if (rc2 == 0)
                request_free(&r2);
            json_decref(root);
        }
        if ((rc == 0) != (rc2 == 0))
            __builtin_trap();
    }
    if (rc != 0) {
        if (rc != -1 || err.status != 400 || r.model || r.messages || r.prompt)
            __builtin_trap();
        must_be_json(oai_error_json(&err));
        free(s1);
        return 0;
    }
    if (!r.model || !r.model[0] || strlen(r.model) > OAI_MAX_MODEL_BYTES)
        __builtin_trap();
    if (!(r.temperature >= 0 && r.temperature <= 2) || !(r.top_p > 0 && r.top_p <= 1) || r.top_k < 0 ||
        r.top_logprobs < 0 || r.top_logprobs > OAI_MAX_TOP_LOGPROBS || r.n_stop > OAI_MAX_STOP ||
        (r.max_tokens != -1 && r.max_tokens < 1))
        __builtin_trap();
    const char *text = "";
    size_t text_len = 0;
    if (kind == REQUEST_CHAT) {
        if (r.n_messages < 1 || r.n_messages > OAI_MAX_MESSAGES || r.prompt || r.prompt_tokens)
            __builtin_trap();
        text = r.messages[r.n_messages - 1].content;
        text_len = r.messages[r.n_messages - 1].content_len;
    } else {
        if ((r.prompt != NULL) == (r.prompt_tokens != NULL) || r.n_messages)
            __builtin_trap();
        if (r.prompt) {
            text = r.prompt;
            text_len = r.prompt_len;
        }
    }
    /* Echo the request's own text back through the builders. */
    oai_meta_t meta = {"chatcmpl-fuzz", r.model, 1, NULL};
    oai_usage_t usage = {1, 2, 0};
    oai_token_logprob_t tok = {text, text_len < 16 ? text_len : 16, -0.5, NULL, 0};
    oai_logprobs_t lp = {r.logprobs, &tok, 1, 0};
    must_be_json(oai_chat_completion_json(&meta, text, text_len, "stop", &lp, &usage));
    must_be_json(oai_completion_json(&meta, s1, n1, "length", &lp, &usage));
    oai_chunk_t c = {.role = true, .text = text, .text_len = text_len, .logprobs = &lp,
                     .include_usage = r.include_usage};
    must_be_json(oai_chat_chunk_json(&meta, &c));
    must_be_json(oai_completion_chunk_json(&meta, &c));
    request_free(&r);
    free(s1);
    return 0;
}
