/* engine.c — loads model, tokenizer and chat template from one GGUF file and
 * turns text or chat messages into prompt token ids (see engine.h). */
#include "worker/engine.h"

#include <stdint.h>
#include <stdlib.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/text/prompt.h"
#include "common/xalloc.h"
#include "proto/submit_prompt.h"
#include "worker/kernels/qgemm.h"

engine_t *engine_load(const char *path, char *err, size_t errlen)
{
    engine_t *e = xcalloc(1, sizeof *e);
    if (model_load(path, &e->model, err, errlen) != 0)
        goto err;
    e->text = text_model_from_gguf(e->model->gguf, e->model->cfg.vocab, path, err, errlen);
    if (!e->text)
        goto err;
    e->tok = e->text->tok;
    e->tmpl = e->text->tmpl;
    e->turn_end_ids = e->text->turn_end_ids;
    e->n_turn_end = e->text->n_turn_end;
    log_info("loaded %s: chat template %s (%s)", path,
             chat_family_name(chat_template_family(e->tmpl)), chat_template_variant(e->tmpl));
    return e;
err:
    engine_free(&e);
    return NULL;
}

void engine_pack_int8(engine_t *e, int n_threads)
{
    int64_t t0 = clock_now_us();
    int n = model_pack_int8(e->model, n_threads);
    if (n > 0)
        log_info("packed %d Q8_0 matrices for the int8 kernels (isa %s): %.1f MiB in %.0f ms", n,
                 qgemm_isa_name(qgemm_isa_default()), (double)e->model->packed_bytes / (1024.0 * 1024.0),
                 (double)(clock_now_us() - t0) / 1e3);
}

void engine_free(engine_t **pe)
{
    engine_t *e = *pe;
    if (!e)
        return;
    text_model_free(&e->text);
    model_free(&e->model);
    free(e);
    *pe = NULL;
}

int32_t engine_prompt_text(const engine_t *e, const char *text, size_t len, int32_t **out,
                           char *err, size_t errlen)
{
    return prompt_text(e->text, text, len, SIZE_MAX, out, NULL, err, errlen);
}

int32_t engine_prompt_chat(const engine_t *e, const chat_msg_t *msgs, size_t n, const char *tools_json,
                           int32_t **out, char *err, size_t errlen)
{
    chat_render_opts_t o = {.tools_json = tools_json, .add_generation_prompt = true, .enable_thinking = -1};
    return prompt_chat(e->text, msgs, n, &o, SIZE_MAX, out, NULL, err, errlen);
}

int32_t engine_prompt_submit(const engine_t *e, const proto_submit_t *s, int32_t **out, char *err,
                             size_t errlen)
{
    return submit_prompt_encode(e->text, s, SIZE_MAX, out, NULL, err, errlen);
}
