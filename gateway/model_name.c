/* model_name.c — the model and adapter name rule (model_name.h). */
#include "gateway/model_name.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

int model_name_check(const char *s, char *why, size_t n)
{
    size_t len = strlen(s);
    if (len == 0 || len > MODEL_NAME_MAX) {
        snprintf(why, n, "a model name has 1..%d characters", MODEL_NAME_MAX);
        return -1;
    }
    if (!isalnum((unsigned char)s[0])) {
        snprintf(why, n, "a model name starts with a letter or digit");
        return -1;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (!isalnum(ch) && !strchr("._:/-", ch)) {
            snprintf(why, n, "a model name may only contain letters, digits and . _ : / -");
            return -1;
        }
    }
    return 0;
}
