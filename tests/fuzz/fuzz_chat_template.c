/* libFuzzer target for worker/chat_template: arbitrary bytes become a
 * template, BOS/EOS texts and a conversation; rendering must never crash,
 * leak or read out of bounds, and a successful render must be a proper
 * NUL-terminated string of the reported length.
 *
 * Input layout (NUL-separated segments):
 *   byte 0            bit 0: add_generation_prompt
 *   seg 0             template text (used with its length; not NUL-terminated
 *                     for the detector: it is copied to an exact-size buffer)
 *   seg 1, seg 2      bos, eos
 *   then pairs        role, content; a one-byte role 0x01..0x05 stands for
 *                     system/user/assistant/tool/"bogus" so that known roles
 *                     are common; odd-numbered messages also carry their
 *                     content as tool_calls JSON (mostly invalid: refused);
 *                     every message has its content as tool_call_id
 *   a last unpaired   the tools JSON (chat_template_render_tools)
 *   segment */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/text/chat_template.h"

#define MAX_SEG 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    bool gen = data[0] & 1;
    data++;
    size--;
    /* split into NUL-terminated copies */
    char *segs[MAX_SEG];
    size_t lens[MAX_SEG], n_seg = 0, start = 0;
    for (size_t i = 0; i <= size && n_seg < MAX_SEG; i++) {
        if (i == size || data[i] == 0) {
            size_t len = i - start;
            segs[n_seg] = malloc(len + 1);
            memcpy(segs[n_seg], data + start, len);
            segs[n_seg][len] = '\0';
            lens[n_seg] = len;
            n_seg++;
            start = i + 1;
        }
    }
    /* the template as an exact-size, unterminated buffer */
    char *tmpl = malloc(lens[0] ? lens[0] : 1);
    memcpy(tmpl, segs[0], lens[0]);
    (void)chat_template_detect(tmpl, lens[0]);
    chat_template_t *t = chat_template_new(tmpl, lens[0], n_seg > 1 ? segs[1] : NULL,
                                           n_seg > 2 ? segs[2] : NULL);
    static const char *const roles[] = {"system", "user", "assistant", "tool", "bogus"};
    chat_msg_t msgs[MAX_SEG / 2];
    size_t n_msgs = 0;
    for (size_t s = 3; s + 1 < n_seg; s += 2) {
        const char *role = segs[s];
        if (lens[s] == 1 && segs[s][0] >= 1 && segs[s][0] <= 5)
            role = roles[segs[s][0] - 1];
        /* odd roles (4th, 6th, ...) also carry the content as tool_calls JSON */
        msgs[n_msgs] = (chat_msg_t){.role = role, .content = segs[s + 1],
                                    .tool_calls = (n_msgs % 2 == 1) ? segs[s + 1] : NULL,
                                    .tool_call_id = segs[s + 1]};
        n_msgs++;
    }
    /* a segment left over after the (role, content) pairs is the tools JSON */
    const char *tools = n_seg > 3 && (n_seg - 3) % 2 == 1 ? segs[n_seg - 1] : NULL;
    char *out = NULL, err[128];
    size_t out_len = 0;
    int rc = chat_template_render_tools(t, msgs, n_msgs, tools, gen, &out, &out_len, err, sizeof(err));
    if (rc == CHAT_TEMPLATE_OK) {
        if (!out || strlen(out) != out_len)
            abort();
    } else if (out != NULL || strnlen(err, sizeof(err)) == sizeof(err)) {
        abort();
    }
    free(out);
    const char *const *stops;
    size_t n_stops = chat_template_stops(t, &stops);
    for (size_t i = 0; i < n_stops; i++)
        if (!stops[i] || !stops[i][0])
            abort();
    chat_template_free(&t);
    free(tmpl);
    for (size_t i = 0; i < n_seg; i++)
        free(segs[i]);
    return 0;
}
