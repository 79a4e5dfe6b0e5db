/* detok.h — streaming detokenizer: token bytes in, valid UTF-8 text deltas out.
 *
 * The sampler produces one token at a time; the tokenizer turns each token into
 * its raw bytes (a byte-fallback token may carry half of a UTF-8 character, a
 * BPE token may end in the middle of one). The client must only ever see valid
 * UTF-8, and must never see any part of a stop string. detok_t sits between the
 * two and holds back exactly what it has to:
 *
 *   1. UTF-8 assembly. Bytes that may still become a valid character (a lead
 *      byte followed by fewer continuation bytes than it announces) are held
 *      until the character completes. A sequence that can no longer become
 *      valid is replaced by U+FFFD (EF BF BD) using the Unicode "maximal
 *      subpart" rule (the same rule as WHATWG TextDecoder): each maximal
 *      prefix of a well-formed sequence, or each lone invalid byte, becomes one
 *      U+FFFD. Well-formed means Unicode Table 3-7: no overlongs (C0, C1,
 *      E0 80..9F, F0 80..8F), no surrogates (ED A0..BF), nothing above
 *      U+10FFFF (F4 90.., F5..FF).
 *   2. Stop strings. Text that might be the beginning of a stop string (the
 *      longest suffix of the not-yet-emitted text that is a proper prefix of
 *      some stop) is held back. When a stop string completes, the text before
 *      it is emitted and nothing from the stop string on is ever emitted.
 *      Among several stops, the one whose occurrence *ends* first fires (that
 *      is what a character-by-character stream would see first); on a tie the
 *      one that starts first (the longer one) wins, so no byte of either stop
 *      leaks. The result is the same however the text is split into tokens.
 *
 * Finishing. When generation ends for another reason the worker calls
 * detok_finish() with the reason: an incomplete UTF-8 tail becomes one U+FFFD
 * (it is now certainly invalid) and any held partial-stop prefix IS emitted —
 * the stop never happened, so the text is the model's (this is what OpenAI's
 * API returns for finish_reason "length"). Stop strings are checked once more
 * over that final text.
 *
 * Stop strings: copied at detok_new(); empty ones are ignored (OpenAI accepts
 * and ignores them); one that is not valid UTF-8 makes detok_new() return NULL
 * (the generated text is always valid UTF-8, so such a stop could never match
 * — the caller should have refused the request).
 *
 * Ownership: detok_new() returns an object the caller frees with detok_free(),
 * which NULLs the pointer. The delta pointers returned by detok_push() and
 * detok_finish() point into a buffer owned by the detok_t and stay valid until
 * the next call on the same object; copy what you keep. Deltas are not
 * NUL-terminated (use the length). Not thread-safe: one detok_t per sequence.
 */
#ifndef PAGODA_TEXT_DETOK_H
#define PAGODA_TEXT_DETOK_H

#include <stdbool.h>
#include <stddef.h>

typedef struct detok detok_t;

/* detok_push() return codes */
enum {
    DETOK_CONTINUE = 0, /* keep generating */
    DETOK_STOP = 1,     /* a stop string completed: end the sequence */
};

/* Why the text ended; detok_finish_reason(). */
typedef enum {
    DETOK_FINISH_NONE = 0,  /* still running */
    DETOK_FINISH_STOP,      /* a stop string fired (detok_stop_index() says which) */
    DETOK_FINISH_EOS,       /* the model produced an end-of-generation token (EOS/EOT) */
    DETOK_FINISH_LENGTH,    /* max_tokens or the context length was reached */
} detok_finish_t;

/* stops: n_stops NUL-terminated strings (may be NULL when n_stops is 0).
 * Returns NULL when a stop string is not valid UTF-8. */
detok_t *detok_new(const char *const *stops, size_t n_stops);
void detok_free(detok_t **d);

/* Feeds the bytes of one generated token (len may be 0). *delta and *delta_len
 * receive the text that can be shown now (possibly empty). Returns
 * DETOK_CONTINUE, or DETOK_STOP when a stop string completed (the delta then
 * holds the text before the stop). Once stopped or finished every later call
 * returns DETOK_STOP with an empty delta and ignores its input. */
int detok_push(detok_t *d, const char *bytes, size_t len, const char **delta, size_t *delta_len);

/* Ends the text for `reason` (DETOK_FINISH_EOS or DETOK_FINISH_LENGTH) and
 * returns everything still held. If a stop string completes in that final
 * text, the reason becomes DETOK_FINISH_STOP and the text is cut there.
 * Calling it after a stop (or twice) returns an empty delta and changes
 * nothing. */
void detok_finish(detok_t *d, detok_finish_t reason, const char **delta, size_t *delta_len);

detok_finish_t detok_finish_reason(const detok_t *d);
/* Index (into the array given to detok_new) of the stop string that fired,
 * or -1. */
int detok_stop_index(const detok_t *d);
/* Bytes of text emitted so far over all deltas. */
size_t detok_emitted_bytes(const detok_t *d);
/* Bytes currently held back (incomplete UTF-8 + partial stop prefix). */
size_t detok_held_bytes(const detok_t *d);

const char *detok_finish_name(detok_finish_t r); /* stop, eos, length or none */

#endif
