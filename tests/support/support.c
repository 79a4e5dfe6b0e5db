/* support.c — helpers shared by the cmocka unit tests (see support.h). */
#include "tests/support/support.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <zmq.h>

const char *support_shared_model(const char *rel)
{
    static char path[4096];
    const char *shared = getenv("PAGODA_SHARED");
    snprintf(path, sizeof path, "%s/models/%s", shared ? shared : "../shared", rel);
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "skip: %s not found (../shared absent?)\n", path);
        return NULL;
    }
    return path;
}

unsigned char *support_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (n < 0) {
        fclose(f);
        return NULL;
    }
    unsigned char *buf = malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        fclose(f);
        return NULL;
    }
    buf[n] = 0;
    fclose(f);
    *len = (size_t)n;
    return buf;
}

void *support_router_bind(void *ctx, char *endpoint, size_t cap)
{
    void *r = zmq_socket(ctx, ZMQ_ROUTER);
    if (!r)
        return NULL;
    int zero = 0, one = 1;
    size_t len = cap;
    if (zmq_setsockopt(r, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
        zmq_setsockopt(r, ZMQ_ROUTER_MANDATORY, &one, sizeof one) != 0 ||
        zmq_bind(r, "tcp://127.0.0.1:*") != 0 ||
        zmq_getsockopt(r, ZMQ_LAST_ENDPOINT, endpoint, &len) != 0) {
        zmq_close(r);
        return NULL;
    }
    return r;
}
