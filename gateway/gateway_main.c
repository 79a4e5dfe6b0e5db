/* gateway_main.c — pagoda-gateway: HTTP front end + ZeroMQ hub for workers,
 * optionally supervising local workers (--model NAME=FILE).
 *
 * The main thread starts the core, the HTTP server and the supervisor, then
 * sleeps in poll() on the fd that SIGINT/SIGTERM make readable
 * (common/sigwake.h) and on an eventfd that SIGHUP makes readable (reload
 * the keys file). Teardown order: HTTP first (its handlers call into the
 * core), then the local workers, then the core.
 *
 * `pagoda-gateway --hash-key NAME[:TIER[:admin]]` makes a new secret and
 * prints it with the keys-file line that accepts it, then exits.
 *
 * SIGINT/SIGTERM drain: new requests get 503, requests in flight may finish
 * for up to --drain-timeout seconds, then the HTTP server closes what is
 * left, local workers get SIGTERM, and the gateway exits 0.
 *
 * Exit status: 0 after a signal, 1 when start-up fails or the core stops on
 * a fatal error, 2 for bad options. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/sigwake.h"
#include "common/xalloc.h"
#include "gateway/gateway.h"
#include "gateway/http.h"
#include "gateway/keys.h"
#include "gateway/supervisor.h"
#include "proto/msg.h"

#define MAX_MODELS 64
#define MAX_WORKER_ARGS 64

static void usage(FILE *f)
{
    fprintf(f,
            "usage: pagoda-gateway [options]\n"
            "       pagoda-gateway --hash-key NAME[:TIER[:admin]] [--secret SECRET]\n"
            "\n"
            "HTTP and queues:\n"
            "  --listen HOST:PORT         HTTP address (default 127.0.0.1:8080)\n"
            "  --keys FILE                API keys (see docs/API.md); without it the API is open.\n"
            "                             SIGHUP reloads the file\n"
            "  --max-queue N              queued requests per model before 429 (default %d)\n"
            "  --aging-rate R             priority units gained per second waited (default 1/30)\n"
            "  --request-timeout S        seconds a request may wait and run (default %d)\n"
            "  --replica-grace S          seconds a known model may have no worker before its\n"
            "                             requests get 503 (default %d)\n"
            "  --http-threads N           HTTP thread pool size (default 2)\n"
            "  --max-body BYTES           request body limit (default 16 MiB)\n"
            "  --http-idle-timeout S      close an idle HTTP connection after S seconds (default %d)\n"
            "  --header-timeout S         close a connection whose request headers are not\n"
            "                             complete S seconds after it opened (default %d)\n"
            "  --max-redispatch N         re-dispatches after worker losses before a request\n"
            "                             gets 502 (default %d)\n"
            "Workers:\n"
            "  --worker-endpoint ENDPOINT ZeroMQ endpoint workers connect to\n"
            "                             (default tcp://127.0.0.1:5557)\n"
            "  --heartbeat-ms N           heartbeat interval to workers (default %d)\n"
            "  --model NAME=FILE.gguf     run and supervise a local worker for this model\n"
            "                             (repeatable)\n"
            "  --max-seqs N, --max-batch-tokens N, --kv-blocks N, --threads N\n"
            "                             passed to every local worker\n"
            "  --worker-arg ARG           any other worker flag, e.g. --worker-arg=--ctx=512\n"
            "                             (repeatable)\n"
            "  --worker-bin PATH          worker executable (default: pagoda-worker next to\n"
            "                             this binary)\n"
            "  --replicas N               local workers per --model (default 1)\n"
            "  --on-demand NAME           start NAME's local worker at its first request and\n"
            "                             stop it after --idle-timeout S (default %d) idle\n"
            "  --max-restarts N, --restart-window S\n"
            "                             crash loop: a model whose worker needed N restarts\n"
            "                             within S seconds is FAILED (default %d in %d)\n"
            "  --drain-timeout S          on SIGTERM, let requests finish this long (default 30)\n"
            "  --log-level LEVEL          debug|info|warn|error (default info; env PAGODA_LOG)\n"
            "  --help\n",
            GATEWAY_DEFAULT_MAX_QUEUE, GATEWAY_DEFAULT_TIMEOUT_S, GATEWAY_DEFAULT_GRACE_S,
            HTTP_DEFAULT_IDLE_TIMEOUT_S, HTTP_DEFAULT_HEADER_TIMEOUT_S, GATEWAY_DEFAULT_MAX_REDISPATCH,
            PROTO_HEARTBEAT_MS, GATEWAY_DEFAULT_IDLE_S, SUPERVISOR_FAIL_RESTARTS,
            SUPERVISOR_FAIL_WINDOW_MS / 1000);
}

static int parse_num(const char *opt, const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) {
        fprintf(stderr, "pagoda-gateway: --%s must be a number in [%g, %g]\n", opt, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

/* --hash-key NAME[:TIER[:admin]]: prints the secret and its keys-file line. */
static int hash_key(const char *spec, const char *secret)
{
    char name[KEYS_NAME_MAX + 1], tier[16] = "normal", flag[16] = "";
    const char *c1 = strchr(spec, ':');
    size_t nlen = c1 ? (size_t)(c1 - spec) : strlen(spec);
    if (nlen == 0 || nlen > KEYS_NAME_MAX) {
        fprintf(stderr, "pagoda-gateway: --hash-key NAME[:TIER[:admin]] (name 1..%d chars)\n",
                KEYS_NAME_MAX);
        return 2;
    }
    memcpy(name, spec, nlen);
    name[nlen] = '\0';
    if (c1) {
        const char *c2 = strchr(c1 + 1, ':');
        size_t tlen = c2 ? (size_t)(c2 - c1 - 1) : strlen(c1 + 1);
        if (tlen >= sizeof tier || (c2 && strcmp(c2 + 1, "admin") != 0)) {
            fprintf(stderr, "pagoda-gateway: --hash-key NAME[:TIER[:admin]]\n");
            return 2;
        }
        memcpy(tier, c1 + 1, tlen);
        tier[tlen] = '\0';
        if (c2)
            snprintf(flag, sizeof flag, " admin");
    }
    prio_tier_t t;
    if (prio_tier_parse(tier, &t) < 0) {
        fprintf(stderr, "pagoda-gateway: unknown tier '%s' (want high, normal or low)\n", tier);
        return 2;
    }
    char fresh[KEYS_SECRET_LEN + 1], hex[65];
    if (!secret) {
        if (keys_secret_new(fresh) < 0)
            return 1;
        secret = fresh;
    }
    if (keys_hash_hex(secret, hex) < 0)
        return 1;
    /* the line must parse back: a bad name is caught here, not at load time */
    char line[256];
    snprintf(line, sizeof line, "%s %s %s%s\n", name, tier, hex, flag);
    keys_t *k = NULL;
    char err[256];
    if (keys_parse((const uint8_t *)line, strlen(line), "--hash-key", &k, err, sizeof err) < 0) {
        fprintf(stderr, "pagoda-gateway: %s\n", err);
        return 2;
    }
    keys_free(&k);
    printf("# secret for %s (give it to the client; only its hash goes in the keys file):\n"
           "# %s\n%s",
           name, secret, line);
    return 0;
}

static int hup_fd = -1;

static void on_sighup(int sig)
{
    (void)sig;
    uint64_t one = 1;
    ssize_t r = write(hup_fd, &one, sizeof one);
    (void)r;
}

/* Waits until no request is in flight and every response is sent, at most
 * drain_s seconds. */
static void drain(struct gateway *gw, http_server_t *http, double drain_s)
{
    int64_t t_end = clock_now_us() + (int64_t)(drain_s * 1e6);
    while ((gateway_inflight(gw) > 0 || http_server_active(http) > 0) && clock_now_us() < t_end)
        clock_sleep_us(20000);
    size_t left = gateway_inflight(gw) + http_server_active(http);
    if (left)
        log_warn("drain timeout: %zu requests still in flight are cut off", left);
    else
        log_info("drained: no request in flight");
}

int main(int argc, char **argv)
{
    const char *listen = "127.0.0.1:8080";
    const char *endpoint = "tcp://127.0.0.1:5557";
    const char *keys_path = NULL, *hash_spec = NULL, *secret = NULL, *worker_bin = NULL;
    int heartbeat_ms = PROTO_HEARTBEAT_MS;
    int level = LOG_INFO;
    double max_queue = GATEWAY_DEFAULT_MAX_QUEUE, aging = -1, timeout_s = GATEWAY_DEFAULT_TIMEOUT_S;
    double grace_s = GATEWAY_DEFAULT_GRACE_S, http_threads = 2, max_body = 16 << 20;
    const char *model_names[MAX_MODELS], *model_files[MAX_MODELS];
    char *model_specs[MAX_MODELS];
    size_t n_models = 0;
    const char *worker_args[MAX_WORKER_ARGS];
    size_t n_worker_args = 0;
    char *flags_made[MAX_WORKER_ARGS]; /* "--max-seqs" etc., freed at exit */
    size_t n_flags_made = 0;
    /* fault isolation and operations */
    const char *on_demand[MAX_MODELS];
    size_t n_on_demand = 0;
    double replicas = 1, idle_s = GATEWAY_DEFAULT_IDLE_S, drain_s = 30;
    double http_idle_s = HTTP_DEFAULT_IDLE_TIMEOUT_S, header_s = HTTP_DEFAULT_HEADER_TIMEOUT_S;
    double max_redispatch = GATEWAY_DEFAULT_MAX_REDISPATCH;
    double max_restarts = SUPERVISOR_FAIL_RESTARTS, restart_window_s = SUPERVISOR_FAIL_WINDOW_MS / 1000;
    static const struct option opts[] = {
        {"listen", required_argument, NULL, 'l'},
        {"worker-endpoint", required_argument, NULL, 'w'},
        {"heartbeat-ms", required_argument, NULL, 'b'},
        {"log-level", required_argument, NULL, 'v'},
        {"keys", required_argument, NULL, 'k'},
        {"hash-key", required_argument, NULL, 'H'},
        {"secret", required_argument, NULL, 'S'},
        {"max-queue", required_argument, NULL, 'q'},
        {"aging-rate", required_argument, NULL, 'a'},
        {"request-timeout", required_argument, NULL, 't'},
        {"replica-grace", required_argument, NULL, 'g'},
        {"http-threads", required_argument, NULL, 'T'},
        {"max-body", required_argument, NULL, 'B'},
        {"model", required_argument, NULL, 'm'},
        {"max-seqs", required_argument, NULL, 1000},
        {"max-batch-tokens", required_argument, NULL, 1001},
        {"kv-blocks", required_argument, NULL, 1002},
        {"threads", required_argument, NULL, 1003},
        {"worker-arg", required_argument, NULL, 'A'},
        {"worker-bin", required_argument, NULL, 'W'},
        {"replicas", required_argument, NULL, 2000},
        {"on-demand", required_argument, NULL, 2001},
        {"idle-timeout", required_argument, NULL, 2002},
        {"drain-timeout", required_argument, NULL, 2003},
        {"max-restarts", required_argument, NULL, 2004},
        {"restart-window", required_argument, NULL, 2005},
        {"http-idle-timeout", required_argument, NULL, 3000},
        {"header-timeout", required_argument, NULL, 3001},
        {"max-redispatch", required_argument, NULL, 3002},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c, idx;
    double v;
    while ((c = getopt_long(argc, argv, "h", opts, &idx)) != -1) {
        switch (c) {
        case 'l': listen = optarg; break;
        case 'w': endpoint = optarg; break;
        case 'b':
            if (parse_num("heartbeat-ms", optarg, PROTO_MIN_HEARTBEAT_MS, PROTO_MAX_HEARTBEAT_MS, &v) < 0)
                return 2;
            heartbeat_ms = (int)v;
            break;
        case 'v':
            level = log_level_parse(optarg);
            if (level < 0) {
                fprintf(stderr, "pagoda-gateway: bad --log-level '%s'\n", optarg);
                return 2;
            }
            break;
        case 'k': keys_path = optarg; break;
        case 'H': hash_spec = optarg; break;
        case 'S': secret = optarg; break;
        case 'q':
            if (parse_num("max-queue", optarg, 1, 1e7, &max_queue) < 0)
                return 2;
            break;
        case 'a':
            if (parse_num("aging-rate", optarg, 0, 1e6, &aging) < 0)
                return 2;
            break;
        case 't':
            if (parse_num("request-timeout", optarg, 0.001, 1e7, &timeout_s) < 0)
                return 2;
            break;
        case 'g':
            if (parse_num("replica-grace", optarg, 0.001, 1e7, &grace_s) < 0)
                return 2;
            break;
        case 'T':
            if (parse_num("http-threads", optarg, 1, 256, &http_threads) < 0)
                return 2;
            break;
        case 'B':
            if (parse_num("max-body", optarg, 1024, 1u << 30, &max_body) < 0)
                return 2;
            break;
        case 'm': {
            const char *eq = strchr(optarg, '=');
            if (!eq || eq == optarg || !eq[1] || (size_t)(eq - optarg) > PROTO_MAX_NAME) {
                fprintf(stderr, "pagoda-gateway: --model wants NAME=FILE.gguf\n");
                return 2;
            }
            if (n_models == MAX_MODELS) {
                fprintf(stderr, "pagoda-gateway: at most %d --model\n", MAX_MODELS);
                return 2;
            }
            model_specs[n_models] = xstrndup(optarg, (size_t)(eq - optarg));
            model_names[n_models] = model_specs[n_models];
            model_files[n_models] = eq + 1;
            n_models++;
            break;
        }
        case 1000: case 1001: case 1002: case 1003:
            if (parse_num(opts[idx].name, optarg, 1, 1e9, &v) < 0)
                return 2;
            if (n_worker_args + 2 > MAX_WORKER_ARGS) {
                fprintf(stderr, "pagoda-gateway: too many worker flags\n");
                return 2;
            }
            {
                size_t n = strlen(opts[idx].name) + 3;
                char *flag = xmalloc(n);
                snprintf(flag, n, "--%s", opts[idx].name);
                flags_made[n_flags_made++] = flag;
                worker_args[n_worker_args++] = flag;
                worker_args[n_worker_args++] = optarg;
            }
            break;
        case 'A':
            if (n_worker_args + 1 > MAX_WORKER_ARGS) {
                fprintf(stderr, "pagoda-gateway: too many worker flags\n");
                return 2;
            }
            worker_args[n_worker_args++] = optarg;
            break;
        case 'W': worker_bin = optarg; break;
        case 2000:
            if (parse_num("replicas", optarg, 1, 64, &replicas) < 0)
                return 2;
            break;
        case 2001:
            if (n_on_demand == MAX_MODELS) {
                fprintf(stderr, "pagoda-gateway: at most %d --on-demand\n", MAX_MODELS);
                return 2;
            }
            on_demand[n_on_demand++] = optarg;
            break;
        case 2002:
            if (parse_num("idle-timeout", optarg, 0.001, 1e7, &idle_s) < 0)
                return 2;
            break;
        case 2003:
            if (parse_num("drain-timeout", optarg, 0, 1e6, &drain_s) < 0)
                return 2;
            break;
        case 2004:
            if (parse_num("max-restarts", optarg, 1, SUPERVISOR_MAX_FAIL_RESTARTS, &max_restarts) < 0)
                return 2;
            break;
        case 2005:
            if (parse_num("restart-window", optarg, 0.001, 1e6, &restart_window_s) < 0)
                return 2;
            break;
        case 3000:
            if (parse_num("http-idle-timeout", optarg, 1, 86400, &http_idle_s) < 0)
                return 2;
            break;
        case 3001:
            if (parse_num("header-timeout", optarg, 0.1, 86400, &header_s) < 0)
                return 2;
            break;
        case 3002:
            if (parse_num("max-redispatch", optarg, 0, 1000, &max_redispatch) < 0)
                return 2;
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        usage(stderr);
        return 2;
    }
    if (hash_spec)
        return hash_key(hash_spec, secret);
    log_init("gateway", (enum log_level)level);

    int sfd = sigwake_install();
    hup_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (sfd < 0 || hup_fd < 0) {
        log_error("cannot install signal handlers: %s", strerror(errno));
        return 1;
    }
    struct sigaction sa = {.sa_handler = on_sighup};
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGHUP, &sa, NULL);

    gateway_config_t gcfg = {
        .worker_endpoint = endpoint, .heartbeat_ms = heartbeat_ms, .max_queue = (size_t)max_queue,
        .aging_per_s = aging, .request_timeout_us = (int64_t)(timeout_s * 1e6),
        .replica_grace_us = (int64_t)(grace_s * 1e6), .models = model_names, .n_models = n_models,
        .idle_timeout_us = (int64_t)(idle_s * 1e6),
        .max_redispatch = max_redispatch > 0 ? (int)max_redispatch : -1,
    };
    int rc = 1;
    struct gateway *gw = gateway_new(&gcfg);
    http_server_t *http = NULL;
    supervisor_t *sup = NULL;
    if (!gw)
        goto out;
    http_config_t hcfg = {.listen = listen, .keys_path = keys_path,
                          .n_threads = (unsigned)http_threads, .max_body = (size_t)max_body,
                          .idle_timeout_s = (unsigned)http_idle_s,
                          .header_timeout_ms = (int64_t)(header_s * 1000)};
    http = http_server_new(&hcfg, gw);
    if (!http)
        goto out;
    if (n_models) {
        supervisor_config_t scfg = {.worker_bin = worker_bin, .endpoint = gw->worker_endpoint,
                                    .worker_args = worker_args, .n_worker_args = n_worker_args,
                                    .restarts = gw->m.worker_restarts,
                                    .fail_restarts = (unsigned)max_restarts,
                                    .fail_window_ms = (int64_t)(restart_window_s * 1000)};
        sup = supervisor_new(&scfg);
        if (!sup)
            goto out;
        for (size_t i = 0; i < n_models; i++) {
            bool od = false;
            for (size_t k = 0; k < n_on_demand; k++)
                od |= strcmp(on_demand[k], model_names[i]) == 0;
            for (int r = 0; r < (int)replicas; r++)
                supervisor_add(sup, model_names[i], model_files[i], od);
        }
        if (supervisor_start(sup) < 0)
            goto out;
        gateway_set_supervisor(gw, sup);
    }
    for (size_t k = 0; k < n_on_demand; k++) {
        bool known = false;
        for (size_t i = 0; i < n_models; i++)
            known |= strcmp(on_demand[k], model_names[i]) == 0;
        if (!known)
            log_warn("--on-demand %s: no --model %s=FILE, ignored", on_demand[k], on_demand[k]);
    }
    struct pollfd p[3] = {{.fd = sfd, .events = POLLIN}, {.fd = hup_fd, .events = POLLIN},
                          {.fd = gateway_fatal_fd(gw), .events = POLLIN}};
    for (;;) {
        if (poll(p, 3, -1) < 1)
            continue;
        if (p[2].revents & POLLIN) {
            log_error("the gateway core stopped: exiting");
            goto out;
        }
        if (p[0].revents & POLLIN)
            break;
        if (p[1].revents & POLLIN) {
            uint64_t n;
            if (read(hup_fd, &n, sizeof n) == sizeof n) {
                log_info("SIGHUP: reloading the keys file");
                http_server_reload_keys(http, NULL, 0);
            }
        }
    }
    log_info("%s: shutting down; new requests get 503, %zu in flight may finish within %g s",
             strsignal(sigwake_signal()), gateway_inflight(gw), drain_s);
    gateway_set_stopping(gw);
    drain(gw, http, drain_s);
    rc = 0;
out:
    http_server_free(&http);
    if (gw)
        gateway_set_supervisor(gw, NULL);
    supervisor_free(&sup);
    gateway_free(&gw);
    for (size_t i = 0; i < n_models; i++)
        free(model_specs[i]);
    for (size_t i = 0; i < n_flags_made; i++)
        free(flags_made[i]);
    if (rc == 0)
        log_info("bye");
    return rc;
}
