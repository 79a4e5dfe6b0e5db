/* utf8.h — UTF-8, one implementation for the whole tree.
 *
 * "Well-formed" is Unicode's definition (The Unicode Standard, Table 3-7):
 * shortest form only (no overlongs such as C0 AF), no surrogates
 * (U+D800..DFFF), nothing past U+10FFFF. Every check in pagoda — the wire
 * decoder, the detokenizer's stream assembly, the tokenizer, the gateway's
 * JSON sanitizer — goes through these functions, so they all agree on what
 * is valid and on how much an invalid sequence spans.
 *
 * Invalid input is replaced per "substitution of maximal subparts": each
 * maximal ill-formed subpart (the longest prefix of a sequence that could
 * still have become valid, or one byte) becomes one U+FFFD. utf8_char()
 * reports that span; UTF8_REPLACEMENT is the character.
 *
 * No allocation here except utf8_sanitize (malloc'd, caller frees). All
 * functions take (pointer, length): buffers need not be NUL-terminated.
 */
#ifndef PAGODA_COMMON_UTF8_H
#define PAGODA_COMMON_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define UTF8_REPLACEMENT "\xEF\xBF\xBD" /* U+FFFD, 3 bytes */
#define UTF8_REPLACEMENT_LEN 3

/* Length of the sequence a lead byte announces (1..4), or 0 when c can never
 * start a well-formed sequence (80..C1, F5..FF). */
size_t utf8_lead_len(uint8_t c);

/* Allowed range [*lo, *hi] of the byte after `lead` (80..BF, narrowed after
 * E0, ED, F0, F4). Bytes after the second are always 80..BF. */
void utf8_second_range(uint8_t lead, uint8_t *lo, uint8_t *hi);

/* Length (1..4) of the well-formed character at s, n > 0 bytes available.
 * 0 when the bytes there are not one (cut short, or ill-formed); then *bad
 * (when not NULL) is the length of the maximal ill-formed subpart, >= 1. */
size_t utf8_char(const uint8_t *s, size_t n, size_t *bad);

/* True when s[0..n) is entirely well-formed UTF-8 (NUL bytes allowed). */
bool utf8_valid(const uint8_t *s, size_t n);

/* Code points in s[0..n), counting every byte that is not a continuation
 * byte (exact for well-formed text). */
size_t utf8_count(const char *s, size_t n);

/* Writes code point cp (<= U+10FFFF, not a surrogate) to out; returns 1..4. */
size_t utf8_put(uint32_t cp, char out[4]);

/* The longest prefix of buf[0..len) that does not end inside a character the
 * buffer cuts short: len, or len minus the 1..3 bytes of a trailing lead byte
 * (+ continuations) that more bytes could still complete. Used to hold back
 * a partial character at the end of a stream. */
size_t utf8_complete_len(const char *buf, size_t len);

/* A copy of s[0..len) with every maximal ill-formed subpart replaced by
 * U+FFFD, NUL-terminated (NUL bytes inside are kept). *out_len (when not
 * NULL) gets its length. malloc'd: the caller frees. */
char *utf8_sanitize(const char *s, size_t len, size_t *out_len);

#endif
