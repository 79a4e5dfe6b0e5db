/* curve.h — CurveZMQ keys for the gateway ↔ worker link: key files, the
 * gateway's list of authorized worker keys, key-pair generation.
 *
 * ZeroMQ's CURVE mechanism (libzmq built with libsodium; curve_available())
 * encrypts a connection and authenticates both ends with Curve25519 keys. The
 * gateway's ROUTER is the CURVE server: it holds a secret key, and workers
 * must know its public key. Each worker has its own key pair; the gateway
 * lets in only the public keys listed in its authorized-keys file (checked by
 * its ZAP handler, gateway/zap.h).
 *
 * Keys are written in Z85 (ZeroMQ RFC 32): 32 bytes → 40 characters of
 *     0-9 a-z A-Z . - : + = ^ ! / * ? & < > ( ) [ ] { } @ % $ #
 *
 * ---- File formats -------------------------------------------------------
 *
 * Both kinds of file are UTF-8/ASCII text, at most CURVE_FILE_MAX bytes, read
 * line by line (LF or CRLF). Leading and trailing blanks are ignored.
 *
 * Authorized keys (curve.authorized_worker_keys_file, --curve-authorized-keys):
 *     # comment                    a line whose first word starts with '#'
 *                                  and is not a key
 *     KEY                          one worker public key (40 Z85 characters)
 *     KEY NAME                     ... with a name used in logs (1..63 of
 *                                  A-Z a-z 0-9 . _ - @ : /)
 *     KEY NAME # comment           ... and a trailing comment
 * Blank lines are skipped. A duplicate key, a malformed key or name, or any
 * other text is an error "SOURCE:LINE: reason" (the whole file is refused: a
 * half-read list would lock workers out). At most CURVE_KEYLIST_MAX keys.
 * (Because '#' is itself a Z85 character, a 40-character word of the Z85
 * alphabet is a key even when it starts with '#'.)
 *
 * Key file (a secret key, or a public key given as a file): the same syntax
 * with exactly one KEY line (a NAME is allowed and ignored).
 *
 * curve_keypair_write(PREFIX) writes
 *     PREFIX.key  mode 0600   "# ...comments...\n" SECRET "\n"
 *     PREFIX.pub  mode 0644   PUBLIC " " NAME "\n"   (NAME from PREFIX's basename)
 * so PREFIX.pub can be appended to an authorized-keys file as it is, and
 * either file can be given wherever a key file is expected.
 *
 * ---- Ownership ----------------------------------------------------------
 *
 * A curve_keylist_t owns its entries; free it with curve_keylist_free. Keys
 * in char arrays are NUL-terminated Z85 strings of CURVE_Z85_LEN characters.
 */
#ifndef PAGODA_PROTO_CURVE_H
#define PAGODA_PROTO_CURVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CURVE_KEY_BYTES 32           /* a Curve25519 key */
#define CURVE_Z85_LEN 40             /* its Z85 spelling, without NUL */
#define CURVE_NAME_MAX 63            /* bytes of a key's name, without NUL */
#define CURVE_KEYLIST_MAX 65536      /* keys in an authorized-keys file */
#define CURVE_FILE_MAX (4u << 20)    /* bytes of any key file */
#define CURVE_ENV_SECRET "PAGODA_CURVE_SECRET_KEY" /* worker: secret key (Z85) from the
                                                      environment (local workers) */

typedef struct curve_key_entry {
    uint8_t key[CURVE_KEY_BYTES];    /* decoded public key */
    char z85[CURVE_Z85_LEN + 1];     /* the same, as written */
    char name[CURVE_NAME_MAX + 1];   /* "" when the line had none */
    int line;                        /* 1-based line in its file, 0 = added in code */
} curve_key_entry_t;

typedef struct curve_keylist {
    curve_key_entry_t *keys;         /* (n) in file order */
    size_t n;
} curve_keylist_t;

/* True when this libzmq supports CURVE (zmq_has("curve")). */
bool curve_available(void);

/* Decodes exactly `len` characters of Z85 key text (len must be
 * CURVE_Z85_LEN) into out (may be NULL: validate only). 0, or -1 when the
 * length or a character is wrong. */
int curve_key_decode(const char *s, size_t len, uint8_t out[CURVE_KEY_BYTES]);

/* A list of authorized keys from a buffer (format above). `source` names
 * the input in errors (NULL = "keys"). Returns 0 and *out (caller frees), or
 * -1 with *out NULL and "SOURCE:LINE: reason" in err. Safe to fuzz. */
int curve_keylist_parse(const uint8_t *buf, size_t len, const char *source, curve_keylist_t **out,
                        char *err, size_t errlen);
/* Reads and parses a file; errors name the path. */
int curve_keylist_load(const char *path, curve_keylist_t **out, char *err, size_t errlen);
/* An empty list. */
curve_keylist_t *curve_keylist_new(void);
/* Appends a key (z85 must be valid; a key already listed is not added twice).
 * name may be NULL. Returns 0, or -1 for a bad key. */
int curve_keylist_add(curve_keylist_t *l, const char *z85, const char *name);
/* The entry holding `key`, or NULL. */
const curve_key_entry_t *curve_keylist_find(const curve_keylist_t *l,
                                            const uint8_t key[CURVE_KEY_BYTES]);
curve_keylist_t *curve_keylist_copy(const curve_keylist_t *l);
/* Frees and NULLs *l; NULL-safe. */
void curve_keylist_free(curve_keylist_t **l);

/* The single key of a key file held in buf (format above) into z85. 0, or -1
 * with "SOURCE:LINE: reason" / "SOURCE: reason" in err. */
int curve_key_file_parse(const uint8_t *buf, size_t len, const char *source,
                         char z85[CURVE_Z85_LEN + 1], char *err, size_t errlen);

/* Reads a secret-key file and derives its public key (public_z85 may be
 * NULL). Warns (log) when the file is readable by group or others. */
int curve_secret_load(const char *path, char secret_z85[CURVE_Z85_LEN + 1],
                      char public_z85[CURVE_Z85_LEN + 1], char *err, size_t errlen);

/* A secret key given as Z85 text (e.g. from CURVE_ENV_SECRET); derives the
 * public key. 0, or -1 with err. */
int curve_secret_from_text(const char *text, char secret_z85[CURVE_Z85_LEN + 1],
                           char public_z85[CURVE_Z85_LEN + 1], char *err, size_t errlen);

/* A public key given either as its 40 Z85 characters or as the path of a key
 * file (e.g. the gateway's PREFIX.pub). 0, or -1 with err. */
int curve_public_load(const char *key_or_path, char public_z85[CURVE_Z85_LEN + 1], char *err,
                      size_t errlen);

/* A fresh key pair from libsodium (via zmq_curve_keypair). 0, or -1. */
int curve_keypair_new(char public_z85[CURVE_Z85_LEN + 1], char secret_z85[CURVE_Z85_LEN + 1]);

/* Generates a key pair and writes PREFIX.key (0600) and PREFIX.pub (0644);
 * refuses to overwrite either file. The public key goes to public_z85 when
 * non-NULL. 0, or -1 with err (nothing left behind). */
int curve_keypair_write(const char *prefix, char public_z85[CURVE_Z85_LEN + 1], char *err,
                        size_t errlen);

/* The --gen-curve-keypair PREFIX flag of the pagoda programs: writes the
 * pair as above and says so on stdout (with the public key), or writes
 * "PROG: reason" to stderr. The program's exit status: 0, or 1. */
int curve_keypair_cli(const char *prog, const char *prefix);

#endif
