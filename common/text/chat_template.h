/* chat_template.h — turns OpenAI-style chat messages into the prompt text a
 * model was trained on.
 *
 * GGUF files carry the Hugging Face Jinja template in `tokenizer.chat_template`.
 * pagoda does not run a Jinja interpreter: it recognises the template's family
 * from marker strings and renders that family in C, reproducing byte for byte
 * what the real template produces under Hugging Face's Jinja settings
 * (trim_blocks, lstrip_blocks). tests/common/text/test_chat_template.c checks this
 * against @huggingface/jinja executing the real template strings.
 *
 * Families and how they are detected (first match wins):
 *
 *   family   marker in the template            examples
 *   -------  --------------------------------  ------------------------------------
 *   chatml   <|im_start|>                      Qwen2, Qwen2.5, Qwen3, SmolLM(2), OpenHermes
 *   llama3   <|start_header_id|>               Llama-3, 3.1, 3.2, 3.3 Instruct
 *   gemma    <start_of_turn>                   Gemma (1, 2, 3)
 *   llama2   [INST] and <<SYS>>                Llama-2-chat
 *   mistral  [INST] without <<SYS>>            Mistral-7B-Instruct v0.1/v0.2
 *   phi3     <|end|> and <|user|>/<|assistant|> Phi-3, Phi-3.5
 *   zephyr   <|user|> or <|assistant|>         Zephyr, TinyLlama-chat
 *   smolvlm  <end_of_utterance> (before chatml) SmolVLM / SmolVLM2, Idefics3
 *
 * Variants inside a family are recognised the same way (docs/TEMPLATES.md has
 * the full list): a ChatML default system prompt written as a literal
 * `<|im_start|>system\n...<|im_end|>` (Qwen2/2.5, SmolLM2) is used when the
 * conversation has no system message; `<tool_response>` enables Qwen's tool
 * message grouping; `</think>` + `last_query_index` enables Qwen3's reasoning
 * handling; `first_user_prefix` selects Gemma 3 (system merged into the first
 * user turn) over Gemma 1/2 (system refused); `system_message` selects
 * Mistral's "v1" template (system merged into the first user turn) over v0.2
 * (system refused); "[AVAILABLE_TOOLS][" selects Mistral Nemo (tokenizer v3
 * tekken: no spaces around [INST], system prompt in front of the last user
 * message, native tools); a Llama-3 template that never mentions
 * add_generation_prompt always ends with the assistant header (as the
 * original Meta-Llama-3 template does); "Cutting Knowledge Date" selects
 * Llama 3.1+ (a system turn with the dates always comes first, tool results
 * become JSON-encoded "ipython" turns); BOS text is written only when the
 * template mentions bos_token.
 *
 * No template (NULL or empty): ChatML without a default system prompt — the
 * same default llama.cpp uses; its markers still separate turns in plain text
 * when the vocabulary lacks them as special tokens. A template with none of
 * the markers: detect() says CHAT_FAMILY_UNKNOWN and chat_template_new()
 * falls back to ChatML, logging a warning.
 *
 * Messages: role is "system", "user", "assistant" or "tool"; content is a
 * NUL-terminated UTF-8 string (the caller rejects content with embedded NULs).
 * Errors (return CHAT_TEMPLATE_EINVAL and a message in err):
 *   - no messages; a NULL role or content; an unknown role;
 *   - where the real template raises: llama2/mistral/gemma require
 *     user/assistant alternation after the optional leading system message;
 *     mistral v0.2 and gemma 1/2 refuse a system message;
 *   - where the real template would silently drop or mangle a message
 *     (pagoda refuses instead): a system message that is not first in
 *     llama2/mistral/gemma; role "tool" in llama2/mistral/gemma/zephyr/phi3/smolvlm.
 *
 * The rendered text contains BOS/special-token text (e.g. "<|im_start|>",
 * "<s>") as plain text: tokenize it with special tokens recognised and without
 * adding a second BOS.
 */
#ifndef PAGODA_TEXT_CHAT_TEMPLATE_H
#define PAGODA_TEXT_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>

typedef enum {
    CHAT_FAMILY_UNKNOWN = 0, /* a template with no known marker */
    CHAT_FAMILY_CHATML,
    CHAT_FAMILY_LLAMA3,
    CHAT_FAMILY_LLAMA2,
    CHAT_FAMILY_MISTRAL,
    CHAT_FAMILY_ZEPHYR,
    CHAT_FAMILY_GEMMA,
    CHAT_FAMILY_PHI3,
    CHAT_FAMILY_SMOLVLM,
} chat_family_t;

/* chat_template_render() return codes */
enum {
    CHAT_TEMPLATE_OK = 0,
    CHAT_TEMPLATE_EINVAL = -1, /* bad conversation; err says why */
};

/* One message. All strings are borrowed for the duration of the call. */
typedef struct {
    const char *role;    /* "system" | "user" | "assistant" | "tool" */
    const char *content; /* UTF-8, NUL-terminated */
    const char *tool_calls;   /* assistant only, or NULL: the calls as a JSON array
                                 [{"id","type":"function","function":{"name","arguments"}}]
                                 where arguments is any JSON value (an object
                                 normally; a string is written as the template does) */
    const char *tool_call_id; /* tool only, or NULL (only Mistral Nemo renders it) */
} chat_msg_t;

typedef struct chat_template chat_template_t;

/* Family of a template given as (bytes, length) — it comes from a GGUF file
 * and need not be NUL-terminated. tmpl NULL or len 0: CHAT_FAMILY_CHATML
 * (the default). */
chat_family_t chat_template_detect(const char *tmpl, size_t len);

/* "chatml", "llama3", "llama2", "mistral", "zephyr", "gemma", "phi3", "unknown" */
const char *chat_family_name(chat_family_t f);

/* Builds a renderer for a template (may be NULL/empty: the default). bos and
 * eos are the texts of the model's BOS/EOS tokens (NULL = ""). All inputs are
 * copied. Never returns NULL. Free with chat_template_free(). */
chat_template_t *chat_template_new(const char *tmpl, size_t len, const char *bos, const char *eos);
void chat_template_free(chat_template_t **t);

/* Family used for rendering (never CHAT_FAMILY_UNKNOWN: the fallback is
 * ChatML), and a short variant name for logs, e.g. "qwen3", "gemma3",
 * "mistral-v0.2", "chatml-fallback". Strings are owned by the template. */
chat_family_t chat_template_family(const chat_template_t *t);
const char *chat_template_variant(const chat_template_t *t);
/* Default system prompt found in the template, or NULL. */
const char *chat_template_default_system(const chat_template_t *t);

/* Llama 3.1+ templates put "Today Date: <date>" in the system turn. By
 * default that is the template's own choice: today's local date as
 * "%d %b %Y" when it calls strftime_now (3.2), else its literal default
 * ("26 Jul 2024" in 3.1). This fixes the date instead (copied; NULL restores
 * the template default) — for reproducible prompts and tests. */
void chat_template_set_date(chat_template_t *t, const char *date);

/* Texts that end an assistant turn for this family: the end-of-turn marker
 * ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>") followed by the
 * EOS text when it is non-empty and different. The worker maps them to token
 * ids and stops when one is sampled. Returns the count; *stops points to an
 * array owned by the template. */
size_t chat_template_stops(const chat_template_t *t, const char *const **stops);

/* Renders msgs[0..n). On success returns CHAT_TEMPLATE_OK and stores a
 * malloc'd NUL-terminated prompt in *out (caller frees) and its length in
 * *out_len (may be NULL). On error returns CHAT_TEMPLATE_EINVAL, sets *out to
 * NULL and writes a message to err (errlen bytes, may be 0). */
int chat_template_render(const chat_template_t *t, const chat_msg_t *msgs, size_t n,
                         bool add_generation_prompt, char **out, size_t *out_len, char *err,
                         size_t errlen);

/* Tool calling. chat_template_render() is this with tools_json NULL.
 *
 * tools_json: the tools announced to the model, a JSON array of OpenAI tool
 * objects ({"type":"function","function":{"name","description","parameters"}}),
 * or NULL / "[]" for none. Messages may carry tool_calls (assistant) and role
 * "tool" results.
 *   - Qwen2.5 / Qwen3 ChatML and Llama 3.1+ render them as their real
 *     templates do (Hermes <tool_call> blocks; Llama's JSON in the first user
 *     message, one call per assistant turn — more is refused as the template
 *     does).
 *   - Mistral Nemo renders them as its real template does: [AVAILABLE_TOOLS]
 *     before the last user message, [TOOL_CALLS][{"name", "arguments", "id"}]
 *     and [TOOL_RESULTS]{"content", "call_id"}[/TOOL_RESULTS]. The template
 *     requires 9-character ids: an id that is 9 characters of [A-Za-z0-9] is
 *     kept, any other becomes 9 base-62 digits of its 64-bit FNV-1a hash (the
 *     same in the call and in the result answering it); a call or a tool
 *     message without an id is refused, as the template raises.
 *   - Every other family (generic fallback): the conversation is rewritten
 *     into turns the template accepts, in the Hermes convention: the tool list
 *     is appended to the system message (or prepended to the first user
 *     message where the template refuses system), calls follow the assistant
 *     content as <tool_call>{"name": .., "arguments": ..}</tool_call>, and a
 *     run of tool results becomes one user turn of <tool_response> blocks.
 * Malformed tools_json / tool_calls JSON → CHAT_TEMPLATE_EINVAL (the gateway
 * validates them first; this only guards the worker). */
int chat_template_render_tools(const chat_template_t *t, const chat_msg_t *msgs, size_t n,
                               const char *tools_json, bool add_generation_prompt, char **out,
                               size_t *out_len, char *err, size_t errlen);

/* Everything a render can take; chat_template_render_tools() is this with
 * enable_thinking -1. */
typedef struct {
    const char *tools_json;     /* as chat_template_render_tools(), or NULL */
    bool add_generation_prompt;
    int enable_thinking;        /* chat_template_kwargs.enable_thinking: -1 not given,
                                   0 false, 1 true. Used by templates that read it
                                   (Qwen3: false appends "<think>\n\n</think>\n\n" after
                                   the generation prompt, as the real template does);
                                   ignored by every other template */
} chat_render_opts_t;

int chat_template_render_opts(const chat_template_t *t, const chat_msg_t *msgs, size_t n,
                              const chat_render_opts_t *o, char **out, size_t *out_len, char *err,
                              size_t errlen);

/* How a model of this template writes a tool call: the name of its
 * tool_format_t (common/text/tool_format.h) — "llama3" (Llama 3.1+),
 * "mistral" (Mistral Nemo) or "hermes" (Qwen and the generic rewrite of
 * every family without native tools). The calls this file renders use that
 * format's markers. A static string. */
const char *chat_template_tool_format(const chat_template_t *t);

#endif
