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

#endif
