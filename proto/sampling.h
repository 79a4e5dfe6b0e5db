/* sampling.h — the one table of a request's sampling knobs: every scalar
 * sampling parameter a SUBMIT carries, a row each. Adding a row is the whole
 * change on the wire and in the gateway; the worker's sampler then uses the
 * new member (worker/sampler.c).
 *
 * What the rows generate (nothing else spells a knob's key, range or default):
 *   - the members of proto_knobs_t, so of proto_sampling_t (the SUBMIT,
 *     proto/msg.h), of the gateway's request_t (gateway/request.h) and of
 *     sampler_params_t (worker/sampler.h, in the row's sampler type);
 *   - the SUBMIT encoder and decoder of these keys (proto/msg.c): every row
 *     is always written, in table order, a double as msgpack float 64, an
 *     unsigned as the smallest msgpack uint; decoded within [lo, wire_hi];
 *   - the defaults: proto_knobs_default (gateway request, SUBMIT init) and
 *     sampler_params_default (worker);
 *   - the request range: the gateway's parser reads each row's `api` key and
 *     checks it within [lo, hi] (lo excluded when lo_open) — once, for every
 *     API surface (they all parse into the one request);
 *   - the key list of docs/ARCHITECTURE.md (proto_knobs_markdown; a test
 *     checks the doc holds it, `make wire-doc` rewrites it).
 *
 * Columns of PROTO_SAMPLING_KNOBS(X):
 *   key      wire key in the SUBMIT map (an identifier, also its enum name)
 *   api      the request body's key (OpenAI / vLLM spelling)
 *   wtype    C type on the wire and in the request: double or uint32_t
 *   stype    C type in the worker's sampler_params_t
 *   member   member name in every struct above
 *   def      value when absent
 *   lo       lowest value (request and wire); an unsigned row also takes -1 in a
 *            request, meaning 0 (off), as vLLM's top_k does
 *   lo_open  1: lo itself is refused
 *   hi       highest value a request may give
 *   wire_hi  highest value the wire decoder takes (≥ hi: the worker's bound)
 *   doc      one line for the docs
 */
#ifndef PAGODA_PROTO_SAMPLING_H
#define PAGODA_PROTO_SAMPLING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PROTO_MAX_TEMPERATURE 100.0
#define PROTO_MAX_PENALTY 100.0
#define PROTO_MAX_TOP_K (1u << 20)    /* = PROTO_MAX_TOKENS */

/* X(key, api, wtype, stype, member, def, lo, lo_open, hi, wire_hi, doc) */
#define PROTO_SAMPLING_KNOBS(X)                                                                         \
    X(temp, "temperature", double, float, temperature, 1.0, 0.0, 0, 2.0, PROTO_MAX_TEMPERATURE,         \
      "temperature; 0 = greedy")                                                                        \
    X(top_p, "top_p", double, float, top_p, 1.0, 0.0, 1, 1.0, 1.0, "nucleus mass kept; 1 = off")          \
    X(top_k, "top_k", uint32_t, int32_t, top_k, 0, 0, 0, 1000000, PROTO_MAX_TOP_K,                      \
      "keep the k most likely tokens; 0 = off")                                                         \
    X(min_p, "min_p", double, float, min_p, 0.0, 0.0, 0, 1.0, 1.0,                                      \
      "drop tokens below min_p x the top probability; 0 = off")                                         \
    X(rep_pen, "repetition_penalty", double, float, repetition_penalty, 1.0, 0.0, 1, 10.0,              \
      PROTO_MAX_PENALTY, "repetition penalty over prompt + output; 1 = off")                            \
    X(pres_pen, "presence_penalty", double, float, presence_penalty, 0.0, -2.0, 0, 2.0, 2.0,            \
      "presence penalty over the output; 0 = off")                                                      \
    X(freq_pen, "frequency_penalty", double, float, frequency_penalty, 0.0, -2.0, 0, 2.0, 2.0,          \
      "frequency penalty over the output; 0 = off")

/* The knobs' values, one member a row. */
#define PROTO_KNOB_MEMBER(key, api, wtype, stype, member, ...) wtype member;
typedef struct proto_knobs {
    PROTO_SAMPLING_KNOBS(PROTO_KNOB_MEMBER)
} proto_knobs_t;

/* The knobs inside another struct: each member by name (s.temperature) and
 * all of them as one value (s.knobs), the same storage. */
#define PROTO_KNOBS_FIELDS                                                                              \
    union {                                                                                             \
        proto_knobs_t knobs;                                                                            \
        struct {                                                                                        \
            PROTO_SAMPLING_KNOBS(PROTO_KNOB_MEMBER)                                                     \
        };                                                                                              \
    }

/* One row at run time, for code that walks the table (parsers, docs, tests). */
typedef struct proto_knob_row {
    const char *key;      /* wire key */
    const char *api;      /* request key */
    bool is_uint;         /* uint32_t (else double) */
    size_t offset;        /* of the member in proto_knobs_t */
    double def, lo, hi, wire_hi;
    bool lo_open;
    const char *doc;
} proto_knob_row_t;

enum {
#define PROTO_KNOB_COUNT_ONE(key, ...) +1
    PROTO_N_KNOBS = 0 PROTO_SAMPLING_KNOBS(PROTO_KNOB_COUNT_ONE)
#undef PROTO_KNOB_COUNT_ONE
};

/* The rows, in table order (PROTO_N_KNOBS of them). */
extern const proto_knob_row_t proto_knob_rows[PROTO_N_KNOBS];

/* Every member to its default. */
void proto_knobs_default(proto_knobs_t *k);

/* A row's value in k, as a double. */
double proto_knob_get(const proto_knobs_t *k, const proto_knob_row_t *row);
/* Stores v (already range-checked) into k's member of row. */
void proto_knob_set(proto_knobs_t *k, const proto_knob_row_t *row, double v);

/* Whether v is within the row's range: the request's (hi) when request is
 * true, else the wire's (wire_hi). NaN and infinities are out. */
bool proto_knob_in_range(const proto_knob_row_t *row, double v, bool request);

/* The table as a markdown table (malloc'd, NUL-terminated; caller frees):
 * the block docs/ARCHITECTURE.md carries between its sampling-knobs markers. */
char *proto_knobs_markdown(void);

#endif
