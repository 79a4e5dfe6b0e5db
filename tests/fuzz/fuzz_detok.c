/* libFuzzer target for worker/detok: arbitrary stop strings and token byte
 * streams. Checks the contract, not just absence of crashes:
 *   - every delta is valid UTF-8;
 *   - the concatenated text never contains a stop string;
 *   - detok_emitted_bytes() equals the bytes handed out; nothing is held at
 *     the end.
 *
 * Input layout:
 *   byte 0            bits 0-1: number of stops (0-3); bit 2: finish with
 *                     EOS (else LENGTH)
 *   per stop          1 length byte L (0-15 used), then L bytes
 *   rest              tokens: 1 length byte L (0-31 used), then L bytes */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"
#include "common/text/detok.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t n_stops = data[0] & 3;
    detok_finish_t fin = (data[0] & 4) ? DETOK_FINISH_EOS : DETOK_FINISH_LENGTH;
    size_t pos = 1;
    char *stops[3] = {0};
    for (size_t i = 0; i < n_stops; i++) {
        size_t l = pos < size ? data[pos++] & 15 : 0;
        if (l > size - pos)
            l = size - pos;
        stops[i] = malloc(l + 1);
        memcpy(stops[i], data + pos, l);
        stops[i][l] = '\0';
        pos += l;
    }
    detok_t *d = detok_new((const char *const *)stops, n_stops);
    if (d) {
        char *text = malloc(3 * size + 16);
        size_t n_text = 0;
        int rc = DETOK_CONTINUE;
        const char *delta;
        size_t dl;
        while (pos < size && rc == DETOK_CONTINUE) {
            size_t l = data[pos++] & 31;
            if (l > size - pos)
                l = size - pos;
            rc = detok_push(d, (const char *)data + pos, l, &delta, &dl);
            pos += l;
            if (!utf8_valid((const uint8_t *)delta, dl))
                abort();
            memcpy(text + n_text, delta, dl);
            n_text += dl;
        }
        detok_finish(d, fin, &delta, &dl);
        if (!utf8_valid((const uint8_t *)delta, dl))
            abort();
        memcpy(text + n_text, delta, dl);
        n_text += dl;
        if (detok_emitted_bytes(d) != n_text || detok_held_bytes(d) != 0)
            abort();
        for (size_t i = 0; i < n_stops; i++) {
            size_t l = strlen(stops[i]);
            if (l && memmem(text, n_text, stops[i], l))
                abort();
        }
        free(text);
        detok_free(&d);
    }
    for (size_t i = 0; i < n_stops; i++)
        free(stops[i]);
    return 0;
}
