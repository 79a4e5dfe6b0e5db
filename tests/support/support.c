/* support.c — helpers shared by the cmocka unit tests (see support.h). */
#include "tests/support/support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

/* The name of the stand-in for a shared model under $PAGODA_BUILD/test-models/
 * (the Makefile's TEST_MODELS; tests/lib.sh's standin_of is the same rule):
 * stories260K.gguf has tiny-llama.gguf; the zoo is random-weight too, and its
 * stand-ins keep its names. NULL: no stand-in. */
static const char *standin_of(const char *rel)
{
    if (strcmp(rel, "stories260K.gguf") == 0)
        return "tiny-llama.gguf";
    return strncmp(rel, "zoo/zoo-", 8) == 0 ? rel : NULL;
}

static const char *shared_dir(void)
{
    const char *shared = getenv("PAGODA_SHARED");
    return shared && *shared ? shared : "../shared";
}

const char *support_shared_model(const char *rel)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/models/%s", shared_dir(), rel);
    if (access(path, R_OK) == 0)
        return path;
    const char *b = getenv("PAGODA_BUILD"), *standin = standin_of(rel);
    if (standin) {
        snprintf(path, sizeof path, "%s/test-models/%s", b && *b ? b : "build", standin);
        if (access(path, R_OK) == 0)
            return path;
        fprintf(stderr, "skip: neither %s/models/%s nor its stand-in %s (make test-models makes it)\n",
                shared_dir(), rel, path);
        return NULL;
    }
    fprintf(stderr, "skip: %s/models/%s not found and it has no stand-in\n", shared_dir(), rel);
    return NULL;
}

int support_model_is_shared(const char *path)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/models/", shared_dir());
    return path && strncmp(path, dir, strlen(dir)) == 0;
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

int support_mkmodel(const char *dir, const char *name, const char *args)
{
    const char *b = getenv("PAGODA_BUILD");
    char cmd[2048];
    if ((size_t)snprintf(cmd, sizeof cmd, "%s/pagoda-mkmodel -o %s/%s %s > %s/log 2>&1", b ? b : "build", dir, name,
                         args, dir) >= sizeof cmd)
        return -1;
    int st = system(cmd);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
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
