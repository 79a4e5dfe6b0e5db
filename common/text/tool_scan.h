/* tool_scan.h — tool-call text scanned byte by byte: one call object
 * ({"name": .., "arguments": ..}) read as it arrives, the arguments text
 * both tool-call parsers agree on, and the small text helpers of the call
 * formats. Below both parsers: tool_format.c (whole answers) and
 * tool_stream.c (answers being written) use it; it knows no format.
 *
 * A call object's keys may come in any order; other keys are skipped; the
 * first "arguments" or "parameters" key is the arguments.
 *
 * Arguments text (the one definition both parsers use, tool_scan_args_of):
 *   - a JSON string value → its decoded contents (the model wrote JSON text
 *     as a string);
 *   - any other JSON value → the model's own text of it with the white space
 *     outside strings removed (numbers and string escapes as written);
 *   - no such key → "{}".
 *
 * Ownership: a tool_scan_obj_t is plain data the caller owns (zeroed = at
 * the start of an object); its strbufs are freed by tool_scan_obj_free. The
 * machines' fields are read by callers only as noted (st, name, args and
 * the flags); the rest is the scanner's. */
#ifndef PAGODA_COMMON_TEXT_TOOL_SCAN_H
#define PAGODA_COMMON_TEXT_TOOL_SCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/strbuf.h"

typedef struct tool_scan_str {
    int st;
    int n_hex;                    /* SD_HEX: digits so far */
    uint32_t u;                   /* SD_HEX: value so far */
    uint32_t hi;                  /* a high surrogate waiting for its low half, 0 = none */
} tool_scan_str_t;

typedef struct tool_scan_val {
    char kind;                    /* 0 not started, 'S' string, 'C' object/array, 'L' scalar */
    int depth;                    /* 'C': open brackets */
    bool in_str, esc;             /* 'C': inside a string of the container */
} tool_scan_val_t;

/* tool_scan_obj_t.st: where in the object; CLOSED and FAILED are final. */
enum {
    TOOL_SCAN_OPEN, TOOL_SCAN_KEY_OR_END, TOOL_SCAN_KEY, TOOL_SCAN_COLON, TOOL_SCAN_VALUE_START,
    TOOL_SCAN_VALUE, TOOL_SCAN_AFTER, TOOL_SCAN_CLOSED, TOOL_SCAN_FAILED
};

typedef struct tool_scan_obj {
    int st;
    tool_scan_str_t kd;           /* TOOL_SCAN_KEY */
    strbuf_t key;                 /* the key being read, decoded */
    int which;                    /* the value being scanned: W_* */
    tool_scan_val_t vs;
    tool_scan_str_t vd;           /* W_NAME, and W_ARGS given as a string */
    bool args_seen;               /* an arguments / parameters key came */
    bool args_string;             /* its value is a JSON string: decoded */
    strbuf_t name;
    bool name_done, name_bad;     /* name: complete / not a string */
    strbuf_t args;                /* the arguments text so far */
} tool_scan_obj_t;

/* Back to the start of an object (keeps the buffers' allocations). */
void tool_scan_obj_reset(tool_scan_obj_t *o);
void tool_scan_obj_free(tool_scan_obj_t *o);
/* One byte of the object. Returns false when c was not consumed (it ended a
 * scalar value: feed it again). Bytes after CLOSED / FAILED are ignored. */
bool tool_scan_obj_step(tool_scan_obj_t *o, char c);

/* The arguments text of the call object at obj[0..len) (the same text the
 * streaming parser sends, so the same bytes give the same text); malloc'd,
 * caller frees. *used (when not NULL) = bytes up to and including the
 * object's closing brace (or all of len when it does not close). */
char *tool_scan_args_of(const char *obj, size_t len, size_t *used);

/* Text helpers of the call formats. */
bool tool_scan_is_ws(char c);                                   /* ' ' \n \t \r */
size_t tool_scan_skip_ws(const char *s, size_t i, size_t n);    /* first non-blank at/after i */
bool tool_scan_at(const char *s, size_t i, size_t n, const char *lit); /* s[i..] starts with lit */
/* Longest suffix of s[0..n) that is a proper prefix of lit. */
size_t tool_scan_partial_suffix(const char *s, size_t n, const char *lit);

#endif
