/* schema_format.c — the JSON Schema formats the compiler generates (see
 * schema_format.h). */
#include "common/grammar/schema_format.h"

#include <string.h>

/* sized by its rows: a count other than SCHEMA_N_FORMATS conflicts with the header */
const schema_format_t SCHEMA_FORMATS[] = {
    {"date", "fd-date", 10, 10, "2024-01-15"},
    {"time", "fd-time \"Z\"", 9, 13, "10:30:00Z"},
    {"date-time", "fd-date \"T\" fd-time \"Z\"", 20, 24, "2024-01-15T10:30:00Z"},
    {"duration",
     "\"P\" (fd-n \"W\" | fd-n \"Y\" (fd-n \"M\")? (fd-n \"D\")? fd-dt? | fd-n \"M\" (fd-n \"D\")? fd-dt? | "
     "fd-n \"D\" fd-dt? | fd-dt)", 3, 26, "P1DT2H"},
    {"email", "[a-z0-9]{1,16} (\".\" [a-z0-9]{1,16}){0,2} \"@\" (fd-label \".\"){1,3} [a-z]{2,6}", 6, 108,
     "user@example.com"},
    {"hostname", "fd-label (\".\" fd-label){0,3}", 1, 67, "example.com"},
    {"ipv4", "fd-octet \".\" fd-octet \".\" fd-octet \".\" fd-octet", 7, 15, "192.168.0.1"},
    {"ipv6", "[0-9a-f]{1,4} (\":\" [0-9a-f]{1,4}){7}", 15, 39, "2001:db8:0:0:0:0:0:1"},
    {"uuid", "[0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [1-8] [0-9a-f]{3} \"-\" [89ab] [0-9a-f]{3} \"-\" [0-9a-f]{12}", 36,
     36, "123e4567-e89b-42d3-a456-426614174000"},
    /* the last host label is letters: a numeric one makes WHATWG URL (zod's
     * z.url()) read the host as a bad IPv4 address */
    {"uri", "\"http\" \"s\"? \"://\" (fd-label \".\"){1,3} [a-z]{2,10} (\"/\" [a-zA-Z0-9._~-]{1,16}){0,4}", 12, 150,
     "https://example.com/a"},
};

void schema_format_rules(strbuf_t *b, const char *p, unsigned used)
{
    if (!used)
        return;
    for (int i = 0; i < SCHEMA_N_FORMATS; i++)
        if (used & (1u << i)) {
            strbuf_printf(b, "%sfmt-%s ::= ", p, SCHEMA_FORMATS[i].name);
            /* prefix the fd-* references */
            for (const char *q = SCHEMA_FORMATS[i].gbnf; *q;) {
                const char *f = strstr(q, "fd-");
                if (!f) {
                    strbuf_puts(b, q);
                    break;
                }
                strbuf_append(b, q, (size_t)(f - q));
                strbuf_puts(b, p);
                strbuf_puts(b, "fd-");
                q = f + 3;
            }
            strbuf_puts(b, "\n");
        }
    strbuf_printf(b, "%sfd-date ::= [12] [0-9]{3} \"-\" ((\"0\" [13578] | \"1\" [02]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01]) | "
                 "(\"0\" [469] | \"11\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"30\") | \"02-\" (\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]))\n", p);
    strbuf_printf(b, "%sfd-time ::= ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,3})?\n", p);
    strbuf_printf(b, "%sfd-n ::= [0-9]{1,3}\n", p);
    strbuf_printf(b, "%sfd-dt ::= \"T\" (%sfd-n \"H\" (%sfd-n \"M\")? (%sfd-n \"S\")? | %sfd-n \"M\" (%sfd-n \"S\")? | %sfd-n \"S\")\n",
              p, p, p, p, p, p, p);
    strbuf_printf(b, "%sfd-label ::= [a-z0-9] ([a-z0-9-]{0,14} [a-z0-9])?\n", p);
    strbuf_printf(b, "%sfd-octet ::= \"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9] [0-9] | [0-9]\n", p);
}

int schema_format_find(const char *name)
{
    for (int i = 0; i < SCHEMA_N_FORMATS; i++)
        if (strcmp(SCHEMA_FORMATS[i].name, name) == 0)
            return i;
    return -1;
}

