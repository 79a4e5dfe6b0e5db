/* fuzz_ui.c — libFuzzer target for gateway/ui.h: the request strings the
 * console's handler reads (the name after /ui/, If-None-Match, and the
 * Origin and Host headers). The input is split at its first two '\n' into
 * name / If-None-Match / "ORIGIN\tHOST". Beyond ASan/UBSan it checks that
 * only a name of the table is ever served, with status 200 or 304, and that
 * ui_origin_is_self only holds for "http://" + host. */
#include <microhttpd.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gateway/ui.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size + 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    char *name = buf, *inm = NULL, *origin = NULL, *host = NULL;
    char *nl = strchr(name, '\n');
    if (nl) {
        *nl = '\0';
        inm = nl + 1;
        if ((nl = strchr(inm, '\n'))) {
            *nl = '\0';
            origin = nl + 1;
            char *tab = strchr(origin, '\t');
            if (tab) {
                *tab = '\0';
                host = tab + 1;
            }
        }
    }
    unsigned status = 0;
    struct MHD_Response *r = ui_response(name, inm, &status);
    if (r) {
        int known = 0;
        for (size_t i = 0; ui_file_get(i, NULL, NULL); i++)
            known |= strcmp(ui_file_get(i, NULL, NULL), name) == 0;
        if (!known || (status != 200 && status != 304))
            __builtin_trap();
        MHD_destroy_response(r);
    }
    if (ui_origin_is_self(origin, host) &&
        (strncasecmp(origin, "http://", 7) != 0 || strcasecmp(origin + 7, host) != 0))
        __builtin_trap();
    free(buf);
    return 0;
}
