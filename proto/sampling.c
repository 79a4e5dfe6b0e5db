/* sampling.c — the sampling-knob table at run time (see sampling.h). */
#include "proto/sampling.h"

#include <math.h>
#include <string.h>

#include "common/strbuf.h"

#define IS_UINT(member) _Generic(((proto_knobs_t *)0)->member, uint32_t: true, double: false)

#define ROW(key_, api_, wtype, stype, member, def_, lo_, lo_open_, hi_, wire_hi_, doc_)              \
    {.key = #key_, .api = api_, .is_uint = IS_UINT(member), .offset = offsetof(proto_knobs_t, member), \
     .def = (def_), .lo = (lo_), .hi = (hi_), .wire_hi = (wire_hi_), .lo_open = (lo_open_), .doc = doc_},
const proto_knob_row_t proto_knob_rows[PROTO_N_KNOBS] = {PROTO_SAMPLING_KNOBS(ROW)};
#undef ROW

/* Every row's wire type is one the encoder and decoder know (its ranges
 * are checked by tests/proto/test_sampling.c: C has no floating constant
 * expressions to assert them here). */
#define CHECK_ROW(key, api, wtype, ...)                                                                \
    _Static_assert(_Generic((wtype)0, uint32_t: 1, double: 1, default: 0), "knob " #key ": wire type is uint32_t or double");
PROTO_SAMPLING_KNOBS(CHECK_ROW)
#undef CHECK_ROW

void proto_knobs_default(proto_knobs_t *k)
{
#define DEF(key, api, wtype, stype, member, def, ...) k->member = (wtype)(def);
    PROTO_SAMPLING_KNOBS(DEF)
#undef DEF
}

double proto_knob_get(const proto_knobs_t *k, const proto_knob_row_t *row)
{
    const char *p = (const char *)k + row->offset;
    if (row->is_uint) {
        uint32_t u;
        memcpy(&u, p, sizeof u);
        return (double)u;
    }
    double d;
    memcpy(&d, p, sizeof d);
    return d;
}

void proto_knob_set(proto_knobs_t *k, const proto_knob_row_t *row, double v)
{
    char *p = (char *)k + row->offset;
    if (row->is_uint) {
        uint32_t u = (uint32_t)v;
        memcpy(p, &u, sizeof u);
    } else {
        memcpy(p, &v, sizeof v);
    }
}

bool proto_knob_in_range(const proto_knob_row_t *row, double v, bool request)
{
    double hi = request ? row->hi : row->wire_hi;
    if (!isfinite(v) || v < row->lo || v > hi || (row->lo_open && v == row->lo))
        return false;
    return !row->is_uint || v == floor(v);
}

char *proto_knobs_markdown(void)
{
    strbuf_t out = STRBUF_INIT;
    strbuf_puts(&out, "| wire key | request key | type | default | request range | wire range | meaning |\n");
    strbuf_puts(&out, "|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < PROTO_N_KNOBS; i++) {
        const proto_knob_row_t *r = &proto_knob_rows[i];
        strbuf_printf(&out, "| `%s` | `%s` | %s | %.10g | %c%.10g, %.10g] | %c%.10g, %.10g] | %s |\n", r->key, r->api,
            r->is_uint ? "uint" : "float", r->def, r->lo_open ? '(' : '[', r->lo, r->hi,
            r->lo_open ? '(' : '[', r->lo, r->wire_hi, r->doc);
    }
    return strbuf_take(&out);
}
