/* worker_main.c — pagoda-worker: serves one model to a gateway.
 *
 * For now the worker registers, heartbeats and follows DRAIN/SHUTDOWN; the
 * model is checked to exist but not loaded, and SUBMITs are answered with
 * ERROR 501 until the scheduler lands. The loop already has the shape the
 * scheduler needs: poll the gateway without blocking while sequences are
 * running, one scheduler step per iteration, and block up to one heartbeat
 * interval when idle.
 *
 * SIGINT/SIGTERM make an eventfd readable (common/sigwake.h) that the link
 * polls next to its socket, so a signal ends the loop cleanly (exit 0).
 * Exit 1: start-up failed; 2: bad options. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/sigwake.h"
#include "proto/msg.h"
#include "worker/worker_link.h"

#define DEFAULT_BLOCK 32

/* The worker process state. */
struct worker {
    char model_name[PROTO_MAX_NAME + 1];  /* --model NAME=... */
    const char *model_path;               /* --model ...=FILE (argv) */
    char replica[PROTO_MAX_NAME + 1];     /* "host:pid:random", unique per process */
    char host[PROTO_MAX_NAME + 1];
    worker_link_t *link;                  /* to the gateway */
    int heartbeat_ms;
    uint32_t capacity;                    /* max concurrent sequences */
    uint32_t n_ctx;                       /* tokens per sequence */
    uint32_t kv_blocks;                   /* KV pool size in blocks */
    bool draining;                        /* DRAIN received: admit nothing new */
    bool stop;                            /* leave the loop */
    uint32_t n_running;                   /* sequences in the scheduler (0 until it lands) */
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: pagoda-worker --model NAME=FILE.gguf [options]\n"
            "  --gateway ENDPOINT   gateway ZeroMQ endpoint (default tcp://127.0.0.1:5557)\n"
            "  --model NAME=FILE    model name served and its GGUF file\n"
            "  --heartbeat-ms N     heartbeat interval (default %d)\n"
            "  --capacity N         max concurrent sequences (default 8)\n"
            "  --ctx N              context length in tokens (default 2048)\n"
            "  --log-level LEVEL    debug|info|warn|error (default info; env PAGODA_LOG)\n",
            PROTO_HEARTBEAT_MS);
}

static int parse_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

static void make_replica_id(struct worker *w)
{
    if (gethostname(w->host, sizeof w->host - 1) != 0)
        snprintf(w->host, sizeof w->host, "localhost");
    uint32_t r = 0;
    if (getrandom(&r, sizeof r, 0) != sizeof r)
        r = (uint32_t)getpid() * 2654435761u;
    snprintf(w->replica, sizeof w->replica, "%.200s:%d:%08x", w->host, (int)getpid(), r);
}

static void reply_error(struct worker *w, uint64_t id, uint32_t code, const char *msg)
{
    proto_msg_t e;
    proto_msg_init(&e, PROTO_ERROR);
    e.error.id = id;
    e.error.code = code;
    e.error.message = (char *)msg;
    worker_link_send(w->link, &e);
}

static void on_gateway_message(struct worker *w, const proto_msg_t *m)
{
    switch (m->type) {
    case PROTO_SUBMIT:
        if (w->draining)
            reply_error(w, m->submit.id, PROTO_CODE_UNAVAILABLE, "worker is draining");
        else
            reply_error(w, m->submit.id, 501, "this worker cannot generate yet (no scheduler)");
        break;
    case PROTO_CANCEL:
        log_debug("CANCEL %llu: no such request", (unsigned long long)m->cancel.id);
        break;
    case PROTO_DRAIN:
        log_info("DRAIN: admitting nothing new, exiting once %u running finish", w->n_running);
        w->draining = true;
        break;
    case PROTO_SHUTDOWN:
        log_info("SHUTDOWN: exiting");
        w->stop = true;
        break;
    case PROTO_ERROR:
        log_warn("gateway error %u: %s", m->error.code, m->error.message);
        break;
    default:
        log_warn("gateway sent %s, which only workers send: dropped", proto_type_name(m->type));
        break;
    }
}

static void publish_load(struct worker *w)
{
    proto_load_t load = {
        .running = w->n_running,
        .kv_blocks_total = w->kv_blocks,
        .free_slots = w->draining ? 0 : w->capacity - w->n_running,
    };
    worker_link_set_load(w->link, &load);
}

int main(int argc, char **argv)
{
    struct worker w = {.heartbeat_ms = PROTO_HEARTBEAT_MS, .capacity = 8, .n_ctx = 2048};
    const char *endpoint = "tcp://127.0.0.1:5557";
    const char *model = NULL;
    int level = LOG_INFO;
    static const struct option opts[] = {
        {"gateway", required_argument, NULL, 'g'},
        {"model", required_argument, NULL, 'm'},
        {"heartbeat-ms", required_argument, NULL, 'b'},
        {"capacity", required_argument, NULL, 'c'},
        {"ctx", required_argument, NULL, 'x'},
        {"log-level", required_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    uint32_t u;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'g': endpoint = optarg; break;
        case 'm': model = optarg; break;
        case 'b':
            if (parse_u32(optarg, PROTO_MIN_HEARTBEAT_MS, PROTO_MAX_HEARTBEAT_MS, &u) < 0) {
                fprintf(stderr, "pagoda-worker: --heartbeat-ms must be %d..%d\n",
                        PROTO_MIN_HEARTBEAT_MS, PROTO_MAX_HEARTBEAT_MS);
                return 2;
            }
            w.heartbeat_ms = (int)u;
            break;
        case 'c':
            if (parse_u32(optarg, 1, PROTO_MAX_CAPACITY, &w.capacity) < 0) {
                fprintf(stderr, "pagoda-worker: --capacity must be 1..%d\n", PROTO_MAX_CAPACITY);
                return 2;
            }
            break;
        case 'x':
            if (parse_u32(optarg, 1, PROTO_MAX_TOKENS, &w.n_ctx) < 0) {
                fprintf(stderr, "pagoda-worker: --ctx must be 1..%u\n", PROTO_MAX_TOKENS);
                return 2;
            }
            break;
        case 'v':
            level = log_level_parse(optarg);
            if (level < 0) {
                fprintf(stderr, "pagoda-worker: bad --log-level '%s'\n", optarg);
                return 2;
            }
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    const char *eq = model ? strchr(model, '=') : NULL;
    if (optind < argc || !eq || eq == model || !eq[1] || (size_t)(eq - model) > PROTO_MAX_NAME) {
        fprintf(stderr, "pagoda-worker: --model NAME=FILE.gguf is required\n");
        usage(stderr);
        return 2;
    }
    memcpy(w.model_name, model, (size_t)(eq - model));
    w.model_path = eq + 1;
    log_init("worker", (enum log_level)level);

    struct stat st;
    if (stat(w.model_path, &st) != 0 || !S_ISREG(st.st_mode)) {
        log_error("model file %s: %s", w.model_path,
                  errno ? strerror(errno) : "not a regular file");
        return 1;
    }
    /* model loading lands with the GGUF reader; until then the KV pool size
     * is what capacity × context would need */
    w.kv_blocks = (uint32_t)(((uint64_t)w.capacity * w.n_ctx + DEFAULT_BLOCK - 1) / DEFAULT_BLOCK);

    int sfd = sigwake_install();
    if (sfd < 0) {
        log_error("cannot install signal handlers: %s", strerror(errno));
        return 1;
    }

    make_replica_id(&w);
    proto_register_t reg = {
        .model = w.model_name, .replica = w.replica, .host = w.host, .pid = (uint32_t)getpid(),
        .capacity = w.capacity, .n_ctx = w.n_ctx, .n_vocab = 0, .kv_blocks = w.kv_blocks,
        .block_size = DEFAULT_BLOCK,
    };
    worker_link_config_t lcfg = {.endpoint = endpoint, .heartbeat_ms = w.heartbeat_ms, .reg = &reg};
    w.link = worker_link_new(&lcfg);
    if (!w.link)
        return 1;
    log_info("serving model %s (%s) as %s", w.model_name, w.model_path, w.replica);

    while (!w.stop) {
        publish_load(&w);
        bool busy = w.n_running > 0;
        proto_msg_t m;
        int rc = worker_link_poll(w.link, busy ? 0 : w.heartbeat_ms, sfd, &m);
        if (rc == WORKER_LINK_WAKE) {
            log_info("%s: exiting", strsignal(sigwake_signal()));
            w.stop = true;
        } else if (rc == WORKER_LINK_MSG) {
            on_gateway_message(&w, &m);
            proto_msg_clear(&m);
        }
        /* the scheduler step goes here: if (busy) scheduler_step(...) */
        if (w.draining && w.n_running == 0) {
            log_info("drained: exiting");
            w.stop = true;
        }
    }
    worker_link_free(&w.link);
    return 0;
}
