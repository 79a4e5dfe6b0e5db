/* support.h — helpers shared by the cmocka unit tests.
 *
 * Tests run from the repository root (tests/run.sh cds there). Test models
 * come from ../shared/models when it is there, else from the stand-ins the
 * build makes (`make test-models`, into $PAGODA_BUILD/test-models/; the table
 * is in the Makefile and docs/TESTING.md), so a fresh clone skips nothing for
 * want of a model. */
#ifndef PAGODA_TESTS_SUPPORT_H
#define PAGODA_TESTS_SUPPORT_H

#include <stddef.h>

/* Path of the test model <rel> (a path under shared/models, e.g.
 * "stories260K.gguf", "zoo/zoo-Q8_0.gguf") in a static buffer:
 * ../shared/models/<rel> (or $PAGODA_SHARED/models/<rel>) when that file
 * exists, else the build's stand-in for it ($PAGODA_BUILD/test-models/, a
 * random-weight model of the same shape and tokenizer kind made by
 * pagoda-mkmodel; see support_model_is_shared), else NULL with a message.
 * Valid until the next call. */
const char *support_shared_model(const char *rel);

/* Whether a path support_shared_model returned is the shared file itself
 * (stories260K's trained weights, llama-quantize's zoo bytes) rather than a
 * generated stand-in. Checks of *trained* behaviour (coherent text) or of
 * another program's bytes run only when it is; the same code path is then
 * checked on the stand-in against an independent reference. */
int support_model_is_shared(const char *path);

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
