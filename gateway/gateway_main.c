/* gateway_main.c — pagoda-gateway: HTTP front end + ZeroMQ hub for workers.
 *
 * The main thread starts the core and the HTTP server, then sleeps in poll()
 * on the fd that SIGINT/SIGTERM make readable (common/sigwake.h), and tears
 * down in order: HTTP first (its handlers call into the core), then the core.
 * Exit status: 0 after a signal, 1 when start-up fails, 2 for bad options. */
#include <getopt.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/sigwake.h"
#include "gateway/gateway.h"
#include "gateway/http.h"
#include "proto/msg.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: pagoda-gateway [options]\n"
            "  --listen HOST:PORT         HTTP address (default 127.0.0.1:8080)\n"
            "  --worker-endpoint ENDPOINT ZeroMQ endpoint workers connect to\n"
            "                             (default tcp://127.0.0.1:5557)\n"
            "  --heartbeat-ms N           heartbeat interval to workers (default %d)\n"
            "  --log-level LEVEL          debug|info|warn|error (default info; env PAGODA_LOG)\n"
            "  --help\n",
            PROTO_HEARTBEAT_MS);
}

int main(int argc, char **argv)
{
    const char *listen = "127.0.0.1:8080";
    const char *endpoint = "tcp://127.0.0.1:5557";
    int heartbeat_ms = PROTO_HEARTBEAT_MS;
    int level = LOG_INFO;
    static const struct option opts[] = {
        {"listen", required_argument, NULL, 'l'},
        {"worker-endpoint", required_argument, NULL, 'w'},
        {"heartbeat-ms", required_argument, NULL, 'b'},
        {"log-level", required_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        char *end;
        switch (c) {
        case 'l': listen = optarg; break;
        case 'w': endpoint = optarg; break;
        case 'b':
            heartbeat_ms = (int)strtol(optarg, &end, 10);
            if (*end || heartbeat_ms < PROTO_MIN_HEARTBEAT_MS ||
                heartbeat_ms > PROTO_MAX_HEARTBEAT_MS) {
                fprintf(stderr, "pagoda-gateway: --heartbeat-ms must be %d..%d\n",
                        PROTO_MIN_HEARTBEAT_MS, PROTO_MAX_HEARTBEAT_MS);
                return 2;
            }
            break;
        case 'v':
            level = log_level_parse(optarg);
            if (level < 0) {
                fprintf(stderr, "pagoda-gateway: bad --log-level '%s'\n", optarg);
                return 2;
            }
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        usage(stderr);
        return 2;
    }
    log_init("gateway", (enum log_level)level);

    int sfd = sigwake_install();
    if (sfd < 0) {
        log_error("cannot install signal handlers: %s", strerror(errno));
        return 1;
    }

    gateway_config_t gcfg = {.worker_endpoint = endpoint, .heartbeat_ms = heartbeat_ms};
    struct gateway *gw = gateway_new(&gcfg);
    if (!gw)
        return 1;
    http_config_t hcfg = {.listen = listen};
    http_server_t *http = http_server_new(&hcfg, gw);
    if (!http) {
        gateway_free(&gw);
        return 1;
    }
    struct pollfd p = {.fd = sfd, .events = POLLIN};
    while (poll(&p, 1, -1) < 1 || !(p.revents & POLLIN)) {
    }
    log_info("%s: shutting down", strsignal(sigwake_signal()));
    http_server_free(&http);
    gateway_free(&gw);
    log_info("bye");
    return 0;
}
