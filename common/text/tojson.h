/* tojson.h — Jinja's `tojson` filter as chat templates expect it, for the
 * templates rendered in C (chat_template.c): JSON text written the way the
 * reference renderers write it, so the prompt matches theirs byte for byte.
 *
 * Values follow @huggingface/jinja (Python json.dumps with ensure_ascii
 * off): ", " and ": " between items, or with indent > 0 one item per line,
 * "," after each and ": " after keys; object keys keep their order (jansson
 * preserves insertion order); reals as JavaScript's Number#toString.
 * Strings follow Python's json.dumps(ensure_ascii=False) (transformers'
 * tojson): \" \\ \n \r \t \b \f, other control bytes \u00XX, the
 * rest as is.
 *
 * Both append to sb (the caller's); nothing else is allocated. */
#ifndef PAGODA_COMMON_TEXT_TOJSON_H
#define PAGODA_COMMON_TEXT_TOJSON_H

#include <jansson.h>

#include "common/strbuf.h"

/* v as JSON text; indent 0 = one line. */
void tojson_put(strbuf_t *sb, const json_t *v, int indent);
/* s (NUL-terminated UTF-8) as a JSON string literal, quotes included. */
void tojson_put_string(strbuf_t *sb, const char *s);

#endif
