/* support.h — helpers shared by the cmocka unit tests.
 *
 * Tests run from the repository root (tests/run.sh cds there). Test data from
 * ../shared is optional: when it is absent a test calls skip() with a message
 * instead of failing. */
#ifndef PAGODA_TESTS_SUPPORT_H
#define PAGODA_TESTS_SUPPORT_H

#include <stddef.h>

/* Path of ../shared/models/<rel> (or $PAGODA_SHARED/models/<rel>) in a static
 * buffer, or NULL when the file does not exist (a message is printed). */
const char *support_shared_model(const char *rel);

/* Reads a whole file; returns a malloc'd buffer (caller frees) and its length,
 * or NULL. A NUL byte is appended after the data (not counted in *len). */
unsigned char *support_read_file(const char *path, size_t *len);

/* Makes a random-weight model: runs $PAGODA_BUILD/pagoda-mkmodel (build/
 * when unset) -o dir/name args, its output to dir/log. 0 ok, -1 failed. */
int support_mkmodel(const char *dir, const char *name, const char *args);

/* A ROUTER socket of ctx bound to a free port on 127.0.0.1, the way the
 * gateway binds (linger 0, ROUTER_MANDATORY), for tests that play the
 * gateway. Writes its endpoint ("tcp://127.0.0.1:PORT") to endpoint[0..cap).
 * Returns the socket (zmq_close it), or NULL. */
void *support_router_bind(void *ctx, char *endpoint, size_t cap);

#endif
