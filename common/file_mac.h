/* file_mac.h — keyed MACs of the files a process keeps on disk, and the key.
 *
 * The worker's disk-tier blocks, its pack files and the records beside them
 * (kv_disk.h, pack_cache.h) end in a MAC: keyed BLAKE2b (libsodium's
 * crypto_generichash) of every byte before it. An unkeyed checksum catches a
 * torn write but not a forger: anyone who can write a file in the folder
 * could compute it. With a key that lives outside the folder, a block
 * copied in from elsewhere, edited, or written from scratch fails its MAC.
 *
 * The key file: 32 random bytes, mode 0600, owned by this process's user.
 * It is made on first use (O_CREAT|O_EXCL|O_NOFOLLOW) when absent; an
 * existing one must be a regular file (not a symlink) owned by us, with no
 * group/other bits, and exactly 32 bytes — else it is refused with a message
 * naming the path and the fix (someone else could know it). Losing the key
 * only costs the cache: every file fails its MAC and is made again.
 *
 * Default place: beside the folder it protects, never inside it —
 * <DIR>.key for --kv-cache-dir DIR (file_mac_key_default_path); the worker's
 * --kv-disk-key FILE names another.
 */
#ifndef PAGODA_COMMON_FILE_MAC_H
#define PAGODA_COMMON_FILE_MAC_H

#include <stddef.h>
#include <stdint.h>

#define FILE_MAC_KEY_BYTES 32

typedef struct file_mac_key {
    uint8_t k[FILE_MAC_KEY_BYTES];
} file_mac_key_t;

/* Loads the key at path, creating it when there is none. 0, or -1 with
 * err filled (path and fix). */
int file_mac_key_load(const char *path, file_mac_key_t *out, char *err, size_t errlen);

/* <dir without trailing slashes>.key into out. 0, -1 when it does not fit. */
int file_mac_key_default_path(const char *dir, char *out, size_t n);

/* Keyed BLAKE2b of p[0..n) into out[0..outlen), outlen 16..64. */
void file_mac(const file_mac_key_t *key, const void *p, size_t n, uint8_t *out, size_t outlen);

/* The first 8 bytes of a 16-byte file_mac, for 64-bit fields of a format
 * (a forger must guess it: one try per file the reader checks). */
uint64_t file_mac64(const file_mac_key_t *key, const void *p, size_t n);

/* Streaming form, for data in pieces (a header, then a payload). */
typedef struct file_mac_state {
    _Alignas(64) uint8_t opaque[384]; /* crypto_generichash_state */
} file_mac_state_t;
void file_mac_init(file_mac_state_t *st, const file_mac_key_t *key, size_t outlen);
void file_mac_update(file_mac_state_t *st, const void *p, size_t n);
void file_mac_final(file_mac_state_t *st, uint8_t *out, size_t outlen);

#endif
