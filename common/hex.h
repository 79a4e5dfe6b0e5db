/* hex.h — hexadecimal digits, the one copy (GBNF \x escapes, API key
 * digests in the keys file).
 *
 * Header only; no state, any thread.
 */
#ifndef PAGODA_COMMON_HEX_H
#define PAGODA_COMMON_HEX_H

/* Value 0..15 of the hex digit c ('0'-'9', 'a'-'f', 'A'-'F'), -1 for any
 * other c (including EOF / negative values). */
static inline int hex_value(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

#endif
