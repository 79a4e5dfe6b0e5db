/* supervisor.c — local worker processes: spawn, reap, restart with backoff,
 * crash-loop detection, drains and on-demand starts (see supervisor.h). */
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
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/proc_env.h"
#include "common/xalloc.h"

typedef enum child_state {
    CHILD_RUNNING = 0,          /* pid > 0 */
    CHILD_BACKOFF,              /* start again at t_next_start_us */
    CHILD_FAILED,               /* crash loop: left down */
    CHILD_STOPPED,              /* drained by an operator: left down */
    CHILD_IDLE,                 /* on-demand and not needed: left down */
} child_state_t;

typedef struct child {
    char *name;                 /* model name */
    char **argv;                /* NULL-terminated, owned */
    bool on_demand;
    child_state_t state;
    pid_t pid;                  /* RUNNING: the process */
    pid_t prev_pid;             /* the process before it (RUNNING) or the last one (down),
                                   0 = none yet: tells a stale registration from a replica */
    int exit_plan;              /* 0 = an exit is a crash, else supervisor_exit_plan_t */
    bool killed;                /* we SIGKILLed it as hung */
    int64_t t_started_us;
    int64_t t_next_start_us;    /* BACKOFF: when */
    int64_t backoff_ms;         /* next delay after a crash */
    int64_t t_restart_us[SUPERVISOR_MAX_FAIL_RESTARTS]; /* ring: times of crash restarts */
    unsigned n_restarts;        /* crash restarts, total */
    bool crash_restart;         /* the next spawn restarts after a crash (counted) */
    char last_exit[160];        /* how the last process ended, "" = none yet */
    char *file;                 /* the model file (owned) */
    /* standby (on-demand children with it on): while IDLE, a process that
     * has loaded the model and waits for one byte on a pipe before it
     * allocates anything else or connects (worker --standby-fd) */
    bool standby;
    pid_t sb_pid;               /* the standby process, 0 = none */
    int sb_fd;                  /* the pipe's write end (-1 = none) */
    struct stat sb_st;          /* the model file when the standby started */
    int64_t sb_next_us;         /* no standby before this (after one died) */
    int64_t sb_backoff_ms;      /* delay after the next standby death */
} child_t;

struct supervisor {
    char *bin;
    char *endpoint;
    char hb_arg[32];            /* "--heartbeat-ms=N", "" = none */
    char **args;                /* (n_args) */
    size_t n_args;
    metrics_family_t *restarts;
    unsigned fail_restarts;
    int64_t fail_window_us;
    int64_t backoff_min_ms, backoff_max_ms; /* restart delay: doubles from min up to max */
    pthread_mutex_t lock;       /* guards children[] state (not the array itself,
                                   fixed after start) */
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
    if (cfg->heartbeat_ms > 0)
        snprintf(s->hb_arg, sizeof s->hb_arg, "--heartbeat-ms=%d", cfg->heartbeat_ms);
    s->n_args = cfg->n_worker_args;
    s->args = xcalloc(s->n_args + 1, sizeof *s->args);
    for (size_t i = 0; i < s->n_args; i++)
        s->args[i] = xstrdup(cfg->worker_args[i]);
    s->restarts = cfg->restarts;
    s->fail_restarts = cfg->fail_restarts ? cfg->fail_restarts : SUPERVISOR_FAIL_RESTARTS;
    if (s->fail_restarts > SUPERVISOR_MAX_FAIL_RESTARTS)
        s->fail_restarts = SUPERVISOR_MAX_FAIL_RESTARTS;
    s->fail_window_us = (cfg->fail_window_ms > 0 ? cfg->fail_window_ms : SUPERVISOR_FAIL_WINDOW_MS) * 1000;
    s->backoff_min_ms = cfg->backoff_min_ms > 0 ? cfg->backoff_min_ms : SUPERVISOR_BACKOFF_MIN_MS;
    s->backoff_max_ms = cfg->backoff_max_ms > 0 ? cfg->backoff_max_ms : SUPERVISOR_BACKOFF_MAX_MS;
    if (s->backoff_max_ms < s->backoff_min_ms)
        s->backoff_max_ms = s->backoff_min_ms;
    pthread_mutex_init(&s->lock, NULL);
    atomic_init(&s->stop, false);
    atomic_init(&s->n_restarts, 0);
    return s;
}

void supervisor_add(supervisor_t *s, const char *name, const char *file, bool on_demand)
{
    supervisor_add_args(s, name, file, on_demand, false, NULL, 0);
}

void supervisor_add_args(supervisor_t *s, const char *name, const char *file, bool on_demand, bool standby,
                         const char *const *args, size_t n_args)
{
    s->children = xrealloc(s->children, (s->n_children + 1) * sizeof *s->children);
    child_t *c = &s->children[s->n_children++];
    memset(c, 0, sizeof *c);
    c->name = xstrdup(name);
    size_t model_len = strlen(name) + strlen(file) + 2;
    char *model = xmalloc(model_len);
    snprintf(model, model_len, "%s=%s", name, file);
    /* bin --gateway EP --model NAME=FILE [--heartbeat-ms=N] own-args...
     * shared-args... NULL (a later flag wins) */
    c->argv = xcalloc(7 + n_args + s->n_args, sizeof *c->argv);
    size_t k = 0;
    c->argv[k++] = xstrdup(s->bin);
    c->argv[k++] = xstrdup("--gateway");
    c->argv[k++] = xstrdup(s->endpoint);
    c->argv[k++] = xstrdup("--model");
    c->argv[k++] = model;
    if (s->hb_arg[0])
        c->argv[k++] = xstrdup(s->hb_arg);
    for (size_t i = 0; i < n_args; i++)
        c->argv[k++] = xstrdup(args[i]);
    for (size_t i = 0; i < s->n_args; i++)
        c->argv[k++] = xstrdup(s->args[i]);
    c->argv[k] = NULL;
    c->backoff_ms = s->backoff_min_ms;
    c->on_demand = on_demand;
    c->state = on_demand ? CHILD_IDLE : CHILD_BACKOFF; /* BACKOFF at t 0: start now */
    c->file = xstrdup(file);
    c->standby = on_demand && standby;
    c->sb_fd = -1;
    c->sb_backoff_ms = s->backoff_min_ms;
}

/* fork + exec of argv with the workers' environment; keep_fd ≥ 0 is left
 * open across exec (it was opened O_CLOEXEC). The child dies with the
 * gateway (PR_SET_PDEATHSIG). Returns the pid, or -1 (errno). */
static pid_t fork_exec(char **argv, int keep_fd)
{
    pid_t parent = getpid();
    extern char **environ;
    char **env = proc_env_worker(environ); /* before fork: the child may not allocate */
    pid_t pid = fork();
    if (pid == 0) {
        /* child: only async-signal-safe calls until exec */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(1);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        if (keep_fd >= 0 && fcntl(keep_fd, F_SETFD, 0) != 0)
            _exit(127);
        execve(argv[0], argv, env);
        _exit(127);
    }
    int e = errno;
    free(env);
    errno = e;
    return pid;
}

/* c now runs process pid (a fresh start, or its standby woken). */
static void now_running(supervisor_t *s, child_t *c, pid_t pid)
{
    int64_t now = clock_now_us();
    c->pid = pid;
    c->state = CHILD_RUNNING;
    c->t_started_us = now;
    c->exit_plan = 0;
    c->killed = false;
    if (c->crash_restart) {
        c->crash_restart = false;
        c->t_restart_us[c->n_restarts % SUPERVISOR_MAX_FAIL_RESTARTS] = now;
        c->n_restarts++;
        atomic_fetch_add(&s->n_restarts, 1);
        if (s->restarts)
            metrics_counter_add(s->restarts, (const char *[]){c->name}, 1);
    }
}

/* With s->lock held. */
static void spawn(supervisor_t *s, child_t *c)
{
    pid_t pid = fork_exec(c->argv, -1);
    if (pid < 0) {
        log_error("fork for worker %s: %s", c->name, strerror(errno));
        c->state = CHILD_BACKOFF;
        c->t_next_start_us = clock_now_us() + c->backoff_ms * 1000;
        return;
    }
    now_running(s, c, pid);
    log_info("started worker for model %s (pid %d): %s --gateway %s --model %s%s", c->name, (int)pid,
             c->argv[0], s->endpoint, c->argv[4], c->argv[5] ? " ..." : "");
}

/* The same model file: device, inode, size and modification times. */
static bool same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
           a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

/* With s->lock held: an IDLE child's standby process (c->argv plus
 * --standby-fd=N, N the read end of a pipe whose write end we keep). */
static void standby_spawn(supervisor_t *s, child_t *c, int64_t now)
{
    int fds[2];
    if (stat(c->file, &c->sb_st) != 0 || pipe2(fds, O_CLOEXEC) != 0) {
        c->sb_next_us = now + c->sb_backoff_ms * 1000; /* the start itself will report it */
        return;
    }
    size_t n = 0;
    while (c->argv[n])
        n++;
    char **argv = xcalloc(n + 2, sizeof *argv);
    memcpy(argv, c->argv, n * sizeof *argv);
    char fd_arg[32];
    snprintf(fd_arg, sizeof fd_arg, "--standby-fd=%d", fds[0]);
    argv[n] = fd_arg;
    pid_t pid = fork_exec(argv, fds[0]);
    int e = errno;
    free(argv);
    close(fds[0]);
    if (pid < 0) {
        close(fds[1]);
        log_warn("model %s: cannot start a standby worker: %s", c->name, strerror(e));
        c->sb_next_us = now + c->sb_backoff_ms * 1000;
        return;
    }
    c->sb_pid = pid;
    c->sb_fd = fds[1];
    log_info("model %s: standby worker started (pid %d): model loaded, nothing else until a request", c->name,
             (int)pid);
}

/* With s->lock held: forgets c's standby process: closes its pipe and,
 * unless it was already reaped, kills (SIGKILL) and reaps it. */
static void standby_drop(child_t *c, bool reaped)
{
    if (c->sb_fd >= 0)
        close(c->sb_fd);
    c->sb_fd = -1;
    if (c->sb_pid > 0 && !reaped) {
        kill(c->sb_pid, SIGKILL);
        int status;
        while (waitpid(c->sb_pid, &status, 0) < 0 && errno == EINTR) {
        }
    }
    c->sb_pid = 0;
}

/* With s->lock held: an IDLE child's standby, kept there: reaped when it
 * died (started again after a doubling delay), started when missing. */
static void standby_tend(supervisor_t *s, child_t *c, int64_t now)
{
    if (c->sb_pid > 0) {
        int status;
        pid_t r = waitpid(c->sb_pid, &status, WNOHANG);
        if (r == 0 || (r < 0 && errno == EINTR))
            return;
        char how[96];
        if (r > 0 && WIFEXITED(status))
            snprintf(how, sizeof how, "exited with status %d", WEXITSTATUS(status));
        else if (r > 0 && WIFSIGNALED(status))
            snprintf(how, sizeof how, "was killed by signal %d", WTERMSIG(status));
        else if (r > 0)
            return; /* stopped/continued: still ours */
        else
            snprintf(how, sizeof how, "is lost (%s)", strerror(errno));
        log_warn("model %s: its standby worker (pid %d) %s; another in %lld ms", c->name, (int)c->sb_pid, how,
                 (long long)c->sb_backoff_ms);
        standby_drop(c, true);
        c->sb_next_us = now + c->sb_backoff_ms * 1000;
        c->sb_backoff_ms *= 2;
        if (c->sb_backoff_ms > s->backoff_max_ms)
            c->sb_backoff_ms = s->backoff_max_ms;
        return;
    }
    if (now >= c->sb_next_us)
        standby_spawn(s, c, now);
}

/* With s->lock held: starts an IDLE child, from its standby when it has a
 * live one on the same model file. */
static void wake(supervisor_t *s, child_t *c)
{
    if (c->sb_pid > 0) {
        struct stat st;
        int status;
        pid_t pid = c->sb_pid;
        if (stat(c->file, &st) != 0 || !same_file(&st, &c->sb_st)) {
            log_info("model %s is wanted: its model file changed since the standby started, starting afresh",
                     c->name);
            standby_drop(c, false);
        } else if (waitpid(pid, &status, WNOHANG) != 0) {
            standby_drop(c, true); /* died since the last tick */
        } else if (write(c->sb_fd, "s", 1) != 1) {
            standby_drop(c, false);
        } else {
            close(c->sb_fd);
            c->sb_fd = -1;
            c->sb_pid = 0;
            c->sb_backoff_ms = s->backoff_min_ms;
            now_running(s, c, pid);
            log_info("model %s is wanted: starting its on-demand worker from standby (pid %d)", c->name,
                     (int)pid);
            return;
        }
    }
    log_info("model %s is wanted: starting its on-demand worker", c->name);
    spawn(s, c);
}

/* Crash restarts of c within the failure window before now. */
static unsigned recent_restarts(const supervisor_t *s, const child_t *c, int64_t now)
{
    unsigned n = 0, k = c->n_restarts < SUPERVISOR_MAX_FAIL_RESTARTS ? c->n_restarts
                                                                     : SUPERVISOR_MAX_FAIL_RESTARTS;
    for (unsigned i = 0; i < k; i++)
        n += now - c->t_restart_us[i] < s->fail_window_us;
    return n;
}

/* With s->lock held. */
static void reap(supervisor_t *s, child_t *c, int64_t now)
{
    int status;
    pid_t r = waitpid(c->pid, &status, WNOHANG);
    if (r == 0 || (r < 0 && errno == EINTR))
        return;
    char how[96];
    if (r < 0)
        snprintf(how, sizeof how, "lost (%s)", strerror(errno));
    else if (WIFEXITED(status))
        snprintf(how, sizeof how, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(how, sizeof how, "killed by signal %d (%s)%s", WTERMSIG(status),
                 strsignal(WTERMSIG(status)), c->killed ? ": hung, no heartbeats" : "");
    else
        return; /* stopped/continued: still ours */
    double ran_s = (double)(now - c->t_started_us) / 1e6;
    snprintf(c->last_exit, sizeof c->last_exit, "%s after %.1f s", how, ran_s);
    c->prev_pid = c->pid;
    c->pid = 0;
    switch (c->exit_plan) {
    case SUPERVISOR_EXIT_RESTART:
        log_info("worker for model %s %s: restarting as asked", c->name, how);
        c->state = CHILD_BACKOFF;
        c->t_next_start_us = now;
        c->backoff_ms = s->backoff_min_ms;
        return;
    case SUPERVISOR_EXIT_STAY_DOWN:
        log_info("worker for model %s %s: drained, not restarted", c->name, how);
        c->state = CHILD_STOPPED;
        return;
    case SUPERVISOR_EXIT_IDLE:
        log_info("worker for model %s %s: idle, stopped until the next request", c->name, how);
        c->state = CHILD_IDLE;
        return;
    }
    if (now - c->t_started_us >= (int64_t)SUPERVISOR_STABLE_MS * 1000)
        c->backoff_ms = s->backoff_min_ms;
    unsigned recent = recent_restarts(s, c, now);
    if (recent >= s->fail_restarts) {
        c->state = CHILD_FAILED;
        snprintf(c->last_exit, sizeof c->last_exit, "%s after %.1f s; %u restarts within %lld s",
                 how, ran_s, recent, (long long)(s->fail_window_us / 1000000));
        log_error("worker for model %s %s after %.1f s, %u restarts within %lld s: crash loop, "
                  "model FAILED (POST /admin/models/%s/restart to try again)",
                  c->name, how, ran_s, recent, (long long)(s->fail_window_us / 1000000), c->name);
        return;
    }
    c->state = CHILD_BACKOFF;
    c->crash_restart = true;
    c->t_next_start_us = now + c->backoff_ms * 1000;
    log_warn("worker for model %s %s after %.1f s; restarting in %lld ms", c->name, how, ran_s,
             (long long)c->backoff_ms);
    c->backoff_ms *= 2;
    if (c->backoff_ms > s->backoff_max_ms)
        c->backoff_ms = s->backoff_max_ms;
}

static void *supervisor_main(void *arg)
{
    supervisor_t *s = arg;
    while (!atomic_load(&s->stop)) {
        int64_t now = clock_now_us();
        pthread_mutex_lock(&s->lock);
        for (size_t i = 0; i < s->n_children; i++) {
            child_t *c = &s->children[i];
            if (c->state == CHILD_RUNNING)
                reap(s, c, now);
            else if (c->state == CHILD_BACKOFF && now >= c->t_next_start_us)
                spawn(s, c);
            if (c->state == CHILD_IDLE && c->standby)
                standby_tend(s, c, now);
        }
        pthread_mutex_unlock(&s->lock);
        clock_sleep_us(SUPERVISOR_TICK_MS * 1000);
    }
    return NULL;
}

int supervisor_start(supervisor_t *s)
{
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->n_children; i++)
        if (s->children[i].state == CHILD_BACKOFF)
            spawn(s, &s->children[i]);
    pthread_mutex_unlock(&s->lock);
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

void supervisor_model_info(supervisor_t *s, const char *name, supervisor_model_info_t *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->n_children; i++) {
        const child_t *c = &s->children[i];
        if (strcmp(c->name, name) != 0)
            continue;
        out->n_children++;
        out->on_demand |= c->on_demand;
        out->restarts += c->n_restarts;
        switch (c->state) {
        case CHILD_RUNNING: out->n_running++; break;
        case CHILD_BACKOFF: out->n_backoff++; break;
        case CHILD_FAILED:
            out->n_failed++;
            snprintf(out->reason, sizeof out->reason, "%s", c->last_exit);
            break;
        case CHILD_IDLE: out->n_idle++; break;
        case CHILD_STOPPED: out->n_stopped++; break;
        }
    }
    pthread_mutex_unlock(&s->lock);
}

static child_t *child_by_pid(supervisor_t *s, pid_t pid)
{
    for (size_t i = 0; i < s->n_children; i++)
        if (s->children[i].state == CHILD_RUNNING && s->children[i].pid == pid)
            return &s->children[i];
    return NULL;
}

bool supervisor_owns(supervisor_t *s, pid_t pid)
{
    pthread_mutex_lock(&s->lock);
    bool yes = pid > 0 && child_by_pid(s, pid) != NULL;
    pthread_mutex_unlock(&s->lock);
    return yes;
}

int supervisor_expect_exit(supervisor_t *s, pid_t pid, supervisor_exit_plan_t plan)
{
    pthread_mutex_lock(&s->lock);
    child_t *c = pid > 0 ? child_by_pid(s, pid) : NULL;
    if (c)
        c->exit_plan = (int)plan;
    pthread_mutex_unlock(&s->lock);
    return c ? 0 : -1;
}

int supervisor_kill(supervisor_t *s, pid_t pid, const char *why)
{
    pthread_mutex_lock(&s->lock);
    child_t *c = pid > 0 ? child_by_pid(s, pid) : NULL;
    if (c) {
        log_warn("worker for model %s (pid %d) %s: SIGKILL", c->name, (int)pid, why);
        c->killed = true;
        kill(pid, SIGKILL);
    }
    pthread_mutex_unlock(&s->lock);
    return c ? 0 : -1;
}

unsigned supervisor_wake(supervisor_t *s, const char *name)
{
    unsigned n = 0;
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->n_children; i++) {
        child_t *c = &s->children[i];
        if (strcmp(c->name, name) != 0 || !c->on_demand)
            continue;
        if (c->state == CHILD_IDLE) {
            wake(s, c);
            n++;
        } else if (c->state == CHILD_RUNNING && c->exit_plan == SUPERVISOR_EXIT_IDLE) {
            c->exit_plan = SUPERVISOR_EXIT_RESTART;
            n++;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return n;
}

unsigned supervisor_restart_model(supervisor_t *s, const char *name)
{
    unsigned n = 0;
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->n_children; i++) {
        child_t *c = &s->children[i];
        if (strcmp(c->name, name) != 0)
            continue;
        if (c->state == CHILD_FAILED || c->state == CHILD_STOPPED || c->state == CHILD_BACKOFF ||
            (c->state == CHILD_IDLE && !c->on_demand)) {
            memset(c->t_restart_us, 0, sizeof c->t_restart_us);
            c->backoff_ms = s->backoff_min_ms;
            c->crash_restart = false;
            spawn(s, c);
            n++;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return n;
}

/* With s->lock held: c's argv without its `--lora NAME=...` pair for name,
 * plus `--lora spec` when spec is set (before the terminating NULL). */
static void child_set_lora(child_t *c, const char *name, const char *spec)
{
    size_t n = 0, len = strlen(name);
    while (c->argv[n])
        n++;
    char **argv = xcalloc(n + 3, sizeof *argv);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (i + 1 < n && strcmp(c->argv[i], "--lora") == 0 && strncmp(c->argv[i + 1], name, len) == 0 &&
            c->argv[i + 1][len] == '=') {
            free(c->argv[i]);
            free(c->argv[++i]);
            continue;
        }
        argv[k++] = c->argv[i];
    }
    if (spec) {
        argv[k++] = xstrdup("--lora");
        argv[k++] = xstrdup(spec);
    }
    argv[k] = NULL;
    free(c->argv);
    c->argv = argv;
}

unsigned supervisor_set_lora(supervisor_t *s, const char *model, const char *name, const char *spec)
{
    unsigned n = 0;
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->n_children; i++) {
        child_t *c = &s->children[i];
        if (strcmp(c->name, model) != 0)
            continue;
        child_set_lora(c, name, spec);
        if (c->sb_pid > 0) /* loaded with the old set: a fresh standby takes the new one */
            standby_drop(c, false);
        n++;
    }
    pthread_mutex_unlock(&s->lock);
    return n;
}

static const char *child_state_name(child_state_t st)
{
    switch (st) {
    case CHILD_RUNNING: return "running";
    case CHILD_BACKOFF: return "backoff";
    case CHILD_FAILED: return "failed";
    case CHILD_STOPPED: return "stopped";
    case CHILD_IDLE: return "idle";
    }
    return "?";
}

json_t *supervisor_json(supervisor_t *s)
{
    json_t *a = json_array();
    int64_t now = clock_now_us();
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->n_children; i++) {
        const child_t *c = &s->children[i];
        bool up = c->state == CHILD_RUNNING;
        json_array_append_new(
            a, json_pack("{s:s, s:I, s:I, s:I, s:s, s:b, s:I, s:o, s:o, s:o}", "model", c->name,
                         "pid", (json_int_t)(up ? c->pid : 0), "prev_pid", (json_int_t)c->prev_pid,
                         "standby_pid", (json_int_t)c->sb_pid,
                         "state", child_state_name(c->state),
                         "on_demand", c->on_demand, "restarts", (json_int_t)c->n_restarts,
                         "uptime_s", up ? json_real((double)(now - c->t_started_us) / 1e6) : json_null(),
                         "next_start_ms", c->state == CHILD_BACKOFF
                                              ? json_integer((c->t_next_start_us - now) / 1000 > 0
                                                                 ? (c->t_next_start_us - now) / 1000 : 0)
                                              : json_null(),
                         "last_exit", c->last_exit[0] ? json_string(c->last_exit) : json_null()));
    }
    pthread_mutex_unlock(&s->lock);
    return a;
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
    for (size_t i = 0; i < s->n_children; i++) {
        child_t *c = &s->children[i];
        if (c->sb_fd >= 0) /* EOF on its pipe: a waiting standby exits */
            close(c->sb_fd);
        c->sb_fd = -1;
        if (c->sb_pid > 0 && c->pid <= 0) /* IDLE: stopped below like a running one */
            c->pid = c->sb_pid;
        c->sb_pid = 0;
    }
    for (size_t i = 0; i < s->n_children; i++)
        if (s->children[i].pid > 0) {
            kill(s->children[i].pid, SIGTERM);
            kill(s->children[i].pid, SIGCONT); /* a stopped process acts on SIGTERM only then */
        }
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
        free(c->file);
    }
    free(s->children);
    for (size_t i = 0; i < s->n_args; i++)
        free(s->args[i]);
    free(s->args);
    free(s->endpoint);
    free(s->bin);
    pthread_mutex_destroy(&s->lock);
    free(s);
}
