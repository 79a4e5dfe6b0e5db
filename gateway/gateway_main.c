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
 * Exit status: 0 after a signal, 1 when start-up fails, 2 for bad options. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

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
            "  --log-level LEVEL          debug|info|warn|error (default info; env PAGODA_LOG)\n"
            "  --help\n",
            GATEWAY_DEFAULT_MAX_QUEUE, GATEWAY_DEFAULT_TIMEOUT_S, GATEWAY_DEFAULT_GRACE_S,
            PROTO_HEARTBEAT_MS);
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
    };
    int rc = 1;
    struct gateway *gw = gateway_new(&gcfg);
    http_server_t *http = NULL;
    supervisor_t *sup = NULL;
    if (!gw)
        goto out;
    http_config_t hcfg = {.listen = listen, .keys_path = keys_path,
                          .n_threads = (unsigned)http_threads, .max_body = (size_t)max_body};
    http = http_server_new(&hcfg, gw);
    if (!http)
        goto out;
    if (n_models) {
        supervisor_config_t scfg = {.worker_bin = worker_bin, .endpoint = gw->worker_endpoint,
                                    .worker_args = worker_args, .n_worker_args = n_worker_args,
                                    .restarts = gw->m.worker_restarts};
        sup = supervisor_new(&scfg);
        if (!sup)
            goto out;
        for (size_t i = 0; i < n_models; i++)
            supervisor_add(sup, model_names[i], model_files[i]);
        if (supervisor_start(sup) < 0)
            goto out;
    }
    struct pollfd p[2] = {{.fd = sfd, .events = POLLIN}, {.fd = hup_fd, .events = POLLIN}};
    for (;;) {
        if (poll(p, 2, -1) < 1)
            continue;
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
    log_info("%s: shutting down", strsignal(sigwake_signal()));
    rc = 0;
out:
    http_server_free(&http);
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
