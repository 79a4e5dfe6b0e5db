/* model_name.h — the rule a model's or adapter's name follows (the
 * configuration's models[].name and loras[].name, and adapters loaded at run
 * time): 1..MODEL_NAME_MAX bytes of letters, digits and . _ : / -, starting
 * with a letter or digit. */
#ifndef PAGODA_GATEWAY_MODEL_NAME_H
#define PAGODA_GATEWAY_MODEL_NAME_H

#include <stddef.h>

#define MODEL_NAME_MAX 128

/* 0 when s follows the rule, else -1 with why (n bytes) set. */
int model_name_check(const char *s, char *why, size_t n);

#endif
