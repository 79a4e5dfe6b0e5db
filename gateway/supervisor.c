/* supervisor.c — local worker processes: spawn, reap, restart with backoff
 * (see supervisor.h). */
#include "gateway/supervisor.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/xalloc.h"

typedef struct child {
    char *name;                 /* model name */
    char **argv;                /* NULL-terminated, owned */
    pid_t pid;                  /* 0 = not running */
    int64_t t_started_us;
    int64_t t_next_start_us;    /* when pid == 0: start again at this time */
    int64_t backoff_ms;         /* next delay after an exit */
} child_t;

struct supervisor {
    char *bin;
    char *endpoint;
    char **args;                /* (n_args) */
    size_t n_args;
    metrics_family_t *restarts;
    child_t *children;          /* (n_children) */
    size_t n_children;
    atomic_bool stop;
    atomic_uint n_restarts;
    pthread_t thread;
    bool started;
};

static char *default_worker_bin(void)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return xstrdup("pagoda-worker");
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash)
        *slash = '\0';
    size_t len = strlen(self) + sizeof "/pagoda-worker";
    char *p = xmalloc(len);
    snprintf(p, len, "%s/pagoda-worker", self);
    return p;
}

/* tcp://0.0.0.0:P, tcp://[::]:P and the "*" wildcard host → tcp://127.0.0.1:P */
static char *local_endpoint(const char *ep)
{
    static const char *const wild[] = {"tcp://0.0.0.0:", "tcp://*:", "tcp://[::]:"};
    for (size_t i = 0; i < sizeof wild / sizeof wild[0]; i++) {
        size_t n = strlen(wild[i]);
        if (strncmp(ep, wild[i], n) == 0) {
            size_t len = strlen(ep + n) + sizeof "tcp://127.0.0.1:";
            char *p = xmalloc(len);
            snprintf(p, len, "tcp://127.0.0.1:%s", ep + n);
            return p;
        }
    }
    return xstrdup(ep);
}

supervisor_t *supervisor_new(const supervisor_config_t *cfg)
{
    supervisor_t *s = xcalloc(1, sizeof *s);
    s->bin = cfg->worker_bin ? xstrdup(cfg->worker_bin) : default_worker_bin();
    if (access(s->bin, X_OK) != 0) {
        log_error("worker binary %s: %s", s->bin, strerror(errno));
        free(s->bin);
        free(s);
        return NULL;
    }
    s->endpoint = local_endpoint(cfg->endpoint);
    s->n_args = cfg->n_worker_args;
    s->args = xcalloc(s->n_args + 1, sizeof *s->args);
    for (size_t i = 0; i < s->n_args; i++)
        s->args[i] = xstrdup(cfg->worker_args[i]);
    s->restarts = cfg->restarts;
    atomic_init(&s->stop, false);
    atomic_init(&s->n_restarts, 0);
    return s;
}

void supervisor_add(supervisor_t *s, const char *name, const char *file)
{
    supervisor_add_args(s, name, file, NULL, 0);
}

void supervisor_add_args(supervisor_t *s, const char *name, const char *file,
                         const char *const *args, size_t n_args)
{
    s->children = xrealloc(s->children, (s->n_children + 1) * sizeof *s->children);
    child_t *c = &s->children[s->n_children++];
    memset(c, 0, sizeof *c);
    c->name = xstrdup(name);
    size_t model_len = strlen(name) + strlen(file) + 2;
    char *model = xmalloc(model_len);
    snprintf(model, model_len, "%s=%s", name, file);
    /* bin --gateway EP --model NAME=FILE own-args... shared-args... NULL */
    c->argv = xcalloc(6 + n_args + s->n_args, sizeof *c->argv);
    size_t k = 0;
    c->argv[k++] = xstrdup(s->bin);
    c->argv[k++] = xstrdup("--gateway");
    c->argv[k++] = xstrdup(s->endpoint);
    c->argv[k++] = xstrdup("--model");
    c->argv[k++] = model;
    for (size_t i = 0; i < n_args; i++)
        c->argv[k++] = xstrdup(args[i]);
    for (size_t i = 0; i < s->n_args; i++)
        c->argv[k++] = xstrdup(s->args[i]);
    c->argv[k] = NULL;
    c->backoff_ms = SUPERVISOR_BACKOFF_MIN_MS;
}

static void spawn(supervisor_t *s, child_t *c)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        log_error("fork for worker %s: %s", c->name, strerror(errno));
        c->t_next_start_us = clock_now_us() + c->backoff_ms * 1000;
        return;
    }
    if (pid == 0) {
        /* child: only async-signal-safe calls until exec */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(1);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        execv(c->argv[0], c->argv);
        _exit(127);
    }
    c->pid = pid;
    c->t_started_us = clock_now_us();
    log_info("started worker for model %s (pid %d): %s --gateway %s --model %s%s", c->name, (int)pid,
             c->argv[0], s->endpoint, c->argv[4], c->argv[5] ? " ..." : "");
}

static void reap(supervisor_t *s, child_t *c, int64_t now)
{
    int status;
    pid_t r = waitpid(c->pid, &status, WNOHANG);
    if (r == 0 || (r < 0 && errno == EINTR))
        return;
    char how[64];
    if (r < 0)
        snprintf(how, sizeof how, "lost (%s)", strerror(errno));
    else if (WIFEXITED(status))
        snprintf(how, sizeof how, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(how, sizeof how, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        return; /* stopped/continued: still ours */
    if (now - c->t_started_us >= (int64_t)SUPERVISOR_STABLE_MS * 1000)
        c->backoff_ms = SUPERVISOR_BACKOFF_MIN_MS;
    c->pid = 0;
    c->t_next_start_us = now + c->backoff_ms * 1000;
    log_warn("worker for model %s %s after %.1f s; restarting in %lld ms", c->name, how,
             (double)(now - c->t_started_us) / 1e6, (long long)c->backoff_ms);
    c->backoff_ms *= 2;
    if (c->backoff_ms > SUPERVISOR_BACKOFF_MAX_MS)
        c->backoff_ms = SUPERVISOR_BACKOFF_MAX_MS;
}

static void *supervisor_main(void *arg)
{
    supervisor_t *s = arg;
    while (!atomic_load(&s->stop)) {
        int64_t now = clock_now_us();
        for (size_t i = 0; i < s->n_children; i++) {
            child_t *c = &s->children[i];
            if (c->pid > 0) {
                reap(s, c, now);
            } else if (now >= c->t_next_start_us) {
                spawn(s, c);
                atomic_fetch_add(&s->n_restarts, 1);
                if (s->restarts)
                    metrics_counter_add(s->restarts, (const char *[]){c->name}, 1);
            }
        }
        clock_sleep_us(SUPERVISOR_TICK_MS * 1000);
    }
    return NULL;
}

int supervisor_start(supervisor_t *s)
{
    for (size_t i = 0; i < s->n_children; i++)
        spawn(s, &s->children[i]);
    if (pthread_create(&s->thread, NULL, supervisor_main, s) != 0) {
        log_error("cannot start the supervisor thread");
        return -1;
    }
    s->started = true;
    return 0;
}

unsigned supervisor_restarts(supervisor_t *s)
{
    return atomic_load(&s->n_restarts);
}

void supervisor_free(supervisor_t **sp)
{
    supervisor_t *s = *sp;
    if (!s)
        return;
    *sp = NULL;
    atomic_store(&s->stop, true);
    if (s->started)
        pthread_join(s->thread, NULL);
    for (size_t i = 0; i < s->n_children; i++)
        if (s->children[i].pid > 0)
            kill(s->children[i].pid, SIGTERM);
    int64_t t_end = clock_now_us() + (int64_t)SUPERVISOR_STOP_MS * 1000;
    for (size_t i = 0; i < s->n_children; i++) {
        child_t *c = &s->children[i];
        while (c->pid > 0) {
            int status;
            pid_t r = waitpid(c->pid, &status, WNOHANG);
            if (r == c->pid || (r < 0 && errno != EINTR)) {
                c->pid = 0;
            } else if (clock_now_us() >= t_end) {
                log_warn("worker for model %s (pid %d) ignores SIGTERM: SIGKILL", c->name, (int)c->pid);
                kill(c->pid, SIGKILL);
                waitpid(c->pid, &status, 0);
                c->pid = 0;
            } else {
                clock_sleep_us(10000);
            }
        }
        for (char **a = c->argv; *a; a++)
            free(*a);
        free(c->argv);
        free(c->name);
    }
    free(s->children);
    for (size_t i = 0; i < s->n_args; i++)
        free(s->args[i]);
    free(s->args);
    free(s->endpoint);
    free(s->bin);
    free(s);
}
