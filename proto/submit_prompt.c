/* submit_prompt.c — a SUBMIT's prompt fields into prompt ids (see
 * submit_prompt.h). */
#include "proto/submit_prompt.h"

#include <stdlib.h>
#include <string.h>

#include "common/text/prompt.h"
#include "common/xalloc.h"

int32_t submit_prompt_encode(const text_model_t *t, const proto_submit_t *s, size_t max_bytes,
                             int32_t **out, bool *truncated, char *err, size_t errlen)
{
    if (truncated)
        *truncated = false;
    if (s->kind == PROTO_KIND_CHAT) {
        chat_msg_t *msgs = xcalloc(s->n_messages ? s->n_messages : 1, sizeof *msgs);
        for (uint32_t i = 0; i < s->n_messages; i++) {
            msgs[i].role = s->messages[i].role;
            msgs[i].content = s->messages[i].content;
            msgs[i].tool_calls = s->messages[i].tool_calls;
            msgs[i].tool_call_id = s->messages[i].tool_call_id;
        }
        chat_render_opts_t o = {.tools_json = s->tools, .add_generation_prompt = true,
                                .enable_thinking = s->has_think ? s->think : -1};
        int32_t n = prompt_chat(t, msgs, s->n_messages, &o, max_bytes, out, truncated, err, errlen);
        free(msgs);
        return n;
    }
    if (s->has_prompt_ids) {
        *out = xmalloc((s->n_prompt_ids ? s->n_prompt_ids : 1) * sizeof **out);
        if (s->n_prompt_ids)
            memcpy(*out, s->prompt_ids, s->n_prompt_ids * sizeof **out);
        return (int32_t)s->n_prompt_ids;
    }
    const char *p = s->prompt ? s->prompt : "";
    return prompt_text(t, p, strlen(p), max_bytes, out, truncated, err, errlen);
}
