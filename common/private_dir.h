/* private_dir.h — folders and files that only their owner reads: the worker's
 * disk tier and pack cache (--kv-cache-dir), the gateway's state directory
 * (--state-dir). They hold users' prompts (token ids), answers and model
 * bytes the process trusts, so:
 *
 *   - folders are made 0700 and files 0600 whatever the umask (an explicit
 *     chmod after mkdir / open);
 *   - a folder that already exists must be owned by this process's user and
 *     not group- or world-writable: anyone else who can write in it can
 *     plant files or symlinks there. It is refused with a message naming
 *     the path and the fix (a folder of ours with group/other read bits is
 *     narrowed to 0700: an older pagoda made them 0755);
 *   - temporaries are created O_CREAT|O_EXCL|O_NOFOLLOW under an
 *     unpredictable name (16 hex digits from getrandom), written, then
 *     renamed into place: a name planted in advance (a symlink to a file
 *     of ours) is never opened, never followed.
 *
 * Return codes: 0 ok, -1 with err filled (the path and what to do).
 */
#ifndef PAGODA_COMMON_PRIVATE_DIR_H
#define PAGODA_COMMON_PRIVATE_DIR_H

#include <stddef.h>

/* mkdir -p path: components made here are 0700; the last one, made or
 * found, must pass the checks above (it is chmod'ed to 0700 when it is ours
 * and only too readable). Parents that exist are not checked (/var/lib is
 * root's). `what` names the folder in messages ("--kv-cache-dir"). */
int private_dir_make(const char *path, const char *what, char *err, size_t errlen);

/* The checks alone on an existing folder (no mkdir): 0, or -1 with err. */
int private_dir_check(const char *path, const char *what, char *err, size_t errlen);

/* Creates a new 0600 file dir/<prefix><16 random hex> with O_CREAT|O_EXCL|
 * O_NOFOLLOW|O_CLOEXEC, open for writing; its path in path_out. Returns the
 * fd, or -1 with errno set (EEXIST is retried with another name). */
int private_dir_tmpfile(const char *dir, const char *prefix, char *path_out, size_t n);

/* 16 lowercase hex digits from getrandom (NUL-terminated into out[17]). */
void private_dir_random_hex(char out[17]);

#endif
