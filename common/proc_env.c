/* proc_env.c — the environment a worker process starts with (proc_env.h). */
#include "common/proc_env.h"

#include <stdbool.h>
#include <string.h>

#include "common/xalloc.h"

/* entry is NAME=... */
static bool is_var(const char *entry, const char *name)
{
    size_t len = strlen(name);
    return strncmp(entry, name, len) == 0 && entry[len] == '=';
}

static bool has(char *const *env, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (is_var(env[i], name))
            return true;
    return false;
}

char **proc_env_worker(char *const *env)
{
    size_t n = 0;
    while (env && env[n])
        n++;
    char **out = xmalloc((n + 3) * sizeof *out);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!is_var(env[i], "OPENBLAS_NUM_THREADS"))
            out[k++] = env[i];
    if (!has(env, n, "OMP_WAIT_POLICY") && !has(env, n, "GOMP_SPINCOUNT"))
        out[k++] = (char *)"GOMP_SPINCOUNT=" PROC_ENV_GOMP_SPINCOUNT;
    out[k++] = (char *)"OPENBLAS_NUM_THREADS=1";
    out[k] = NULL;
    return out;
}
