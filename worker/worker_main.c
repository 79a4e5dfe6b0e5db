/* worker_main.c — pagoda-worker's command line: serves one model to a gateway.
 *
 *   pagoda-worker --gateway ENDPOINT --model NAME=FILE.gguf [--max-seqs N]
 *                 [--max-batch-tokens N] [--step-budget-ms auto|N] [--step-min-chunk N]
 *                 [--kv-blocks N | --kv-budget-mb N]
 *                 [--mem-avail-mb N] [--mem-workers N]
 *                 [--threads N] [--ctx N] [--heartbeat-ms N]
 *                 [--kv-type T] [--kv-cache-dir DIR [--kv-cache-mb N]]
 *                 [--curve-server-key KEY_OR_FILE --curve-secret-key FILE]
 *   pagoda-worker --gen-curve-keypair PREFIX
 *
 * Reads the flags into a worker_config_t, loads the CURVE keys, and runs the
 * worker (worker/worker.h: model, scheduler, link to the gateway, step loop).
 *
 * SIGINT/SIGTERM make an eventfd readable (common/sigwake.h) that the link
 * polls next to its socket, so a signal ends the loop cleanly (exit 0).
 * Exit 1: start-up failed (model unreadable...); 2: bad options. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/sigwake.h"
#include "proto/curve.h"
#include "proto/msg.h"
#include "worker/wait_policy.h"
#include "worker/sched.h"
#include "worker/worker.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: pagoda-worker --model NAME=FILE.gguf [options]\n"
            "       pagoda-worker --gen-curve-keypair PREFIX   (writes PREFIX.key, PREFIX.pub)\n"
            "  --gateway ENDPOINT   gateway ZeroMQ endpoint (default tcp://127.0.0.1:5557)\n"
            "  --model NAME=FILE    model name served and its GGUF file\n"
            "  --heartbeat-ms N     heartbeat interval (default: the gateway's, %d until\n"
            "                       it is known)\n"
            "  --max-seqs N         concurrent sequences, 1 = batching off (default 32)\n"
            "  --max-batch-tokens N rows per forward step (default 512)\n"
            "  --step-budget-ms T   while streams decode, size prefill chunks so a step\n"
            "                       takes about T ms: auto (default: 2x the streams'\n"
            "                       decode-only step, learned online), N ms, or 0 = off\n"
            "                       (--max-batch-tokens only); docs/BATCHING.md\n"
            "  --step-min-chunk N   smallest first prefill chunk of a step (default 8)\n"
            "  --kv-blocks N        KV pool size in blocks (default: from --kv-budget-mb)\n"
            "  --kv-budget-mb N     KV pool memory budget in MiB; 0 (the default): sized from\n"
            "                       free memory, the weights and max-seqs full contexts\n"
            "                       (the rule is logged at start, docs/OPERATIONS.md)\n"
            "  --mem-avail-mb N     with --kv-budget-mb 0: memory of this host's workers (the\n"
            "                       gateway passes what it measured; default: measured here)\n"
            "  --mem-workers N      with --kv-budget-mb 0: workers sharing it (default 1)\n"
            "  --block-size N       tokens per KV block (default 32)\n"
            "  --kv-type T          K/V element type: auto (default: f16 when the K/V\n"
            "                       weights are quantized, f32 otherwise), f16, f32 or\n"
            "                       q8_0 (int8 + f16 scale per 32: 1.88x the tokens of f16)\n"
            "  --kv-cache-dir DIR   disk tier under the prefix cache: evicted blocks (and\n"
            "                       the hot set at a clean stop) are kept in DIR/<model id>/\n"
            "                       and loaded on a prefix hit, across restarts;\n"
            "                       also the packed int8 weights (DIR/packed/) so a\n"
            "                       restart reads them instead of packing again\n"
            "  --kv-cache-mb N      size cap of the disk tier (default 4096)\n"
            "  --kv-warm-percent P  at start, load the disk tier's most recent blocks into\n"
            "                       up to P%% of the KV pool (free blocks only, while\n"
            "                       idle; default 50, 0 = off)\n"
            "  --no-warm-up         register without first faulting in the weights and\n"
            "                       running one throwaway forward pass (default: both,\n"
            "                       so the first request does not pay for them)\n"
            "  --kv-disk-key FILE   MAC key of the disk tier's and pack cache's files\n"
            "                       (0600, ours; made when absent; default DIR.key\n"
            "                       beside --kv-cache-dir, never inside it)\n"
            "  --threads N          threads for the forward pass (default 2)\n"
            "  --ctx N              cap the context length below the model's\n"
            "  --exact-matmul       quantized weights via dequantize+sgemm, not int8 kernels\n"
            "  --spec MODE          speculative decoding: off (default), ngram (prompt\n"
            "                       lookup) or draft (a draft model); output unchanged,\n"
            "                       docs/BATCHING.md\n"
            "  --draft-model FILE   the draft model's GGUF (same vocabulary; implies --spec draft)\n"
            "  --lora NAME=FILE[:SCALE]  a LoRA adapter of the model (GGUF, llama.cpp's layout), served\n"
            "                       to SUBMITs that name it (default scale 1); repeatable\n"
            "  --mmproj FILE        the model's image projector (llama.cpp mmproj GGUF; gemma3)\n"
            "  --standby-fd N       (the gateway's on-demand standby) load the model, then\n"
            "                       wait for one byte on fd N before the rest of the start;\n"
            "                       EOF on it: exit 0\n"
            "  --spec-max-draft N   draft tokens per sequence and step, 1..16 (default 8)\n"
            "  --spec-max-rows N    drafts only in steps of at most N rows (default 16)\n"
            "  --log-level LEVEL    debug|info|warn|error (default info; env PAGODA_LOG)\n"
            "  --curve-server-key KEY_OR_FILE  the gateway's CURVE public key (Z85 or a file);\n"
            "                       turns on CURVE (docs/OPERATIONS.md)\n"
            "  --curve-secret-key FILE  this worker's CURVE secret key (its public key must be\n"
            "                       in the gateway's authorized keys; env %s\n"
            "                       may hold the key itself instead)\n",
            PROTO_HEARTBEAT_MS, CURVE_ENV_SECRET);
}

/* The CURVE keys of --curve-server-key / --curve-secret-key (or the
 * environment). 0 = plain link, 1 = keys set, -1 = error (printed). */
static int load_curve(const char *server, const char *secret_path, char srv[CURVE_Z85_LEN + 1],
                      char pub[CURVE_Z85_LEN + 1], char sec[CURVE_Z85_LEN + 1])
{
    const char *env = getenv(CURVE_ENV_SECRET);
    if (!server && !secret_path)
        return 0;
    char err[512];
    if (!server || (!secret_path && !env)) {
        fprintf(stderr, "pagoda-worker: CURVE needs both --curve-server-key and "
                        "--curve-secret-key (or %s)\n", CURVE_ENV_SECRET);
        return -1;
    }
    if (!curve_available()) {
        fprintf(stderr, "pagoda-worker: this libzmq has no CURVE support\n");
        return -1;
    }
    if (curve_public_load(server, srv, err, sizeof err) < 0 ||
        (secret_path ? curve_secret_load(secret_path, sec, pub, err, sizeof err)
                     : curve_secret_from_text(env, sec, pub, err, sizeof err)) < 0) {
        fprintf(stderr, "pagoda-worker: %s\n", err);
        return -1;
    }
    return 1;
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

static int parse_i32_opt(const char *name, const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
    if (parse_u32(s, lo, hi, out) < 0) {
        fprintf(stderr, "pagoda-worker: --%s must be %u..%u\n", name, lo, hi);
        return -1;
    }
    return 0;
}

/* The command line as read: the worker's config and what main does itself. */
typedef struct args {
    worker_config_t wc;
    const char *model;               /* --model NAME=FILE */
    int level;                       /* --log-level */
    const char *curve_server, *curve_secret, *gen_prefix;
} args_t;

enum { O_MBT = 256, O_KVB, O_KVMB, O_THREADS, O_BLOCK, O_EXACT, O_CSRV, O_CSEC, O_GEN, O_KVTYPE, O_KVDIR, O_KVKEY,
       O_KVDMB, O_KVWARM, O_NOWARMUP, O_SPEC, O_SPEC_MAX, O_SPEC_ROWS, O_DRAFT, O_STANDBY, O_MEMAVAIL, O_MEMWORKERS, O_STEPB, O_STEPMIN,
       O_LORA, O_MMPROJ };
static const struct option opts[] = {
    {"gateway", required_argument, NULL, 'g'},
    {"model", required_argument, NULL, 'm'},
    {"heartbeat-ms", required_argument, NULL, 'b'},
    {"max-seqs", required_argument, NULL, 'c'},
    {"capacity", required_argument, NULL, 'c'}, /* old name of --max-seqs */
    {"max-batch-tokens", required_argument, NULL, O_MBT},
    {"step-budget-ms", required_argument, NULL, O_STEPB},
    {"step-min-chunk", required_argument, NULL, O_STEPMIN},
    {"kv-blocks", required_argument, NULL, O_KVB},
    {"kv-budget-mb", required_argument, NULL, O_KVMB},
    {"mem-avail-mb", required_argument, NULL, O_MEMAVAIL},
    {"mem-workers", required_argument, NULL, O_MEMWORKERS},
    {"block-size", required_argument, NULL, O_BLOCK},
    {"kv-type", required_argument, NULL, O_KVTYPE},
    {"kv-cache-dir", required_argument, NULL, O_KVDIR},
    {"kv-disk-key", required_argument, NULL, O_KVKEY},
    {"kv-cache-mb", required_argument, NULL, O_KVDMB},
    {"kv-warm-percent", required_argument, NULL, O_KVWARM},
    {"no-warm-up", no_argument, NULL, O_NOWARMUP},
    {"threads", required_argument, NULL, O_THREADS},
    {"ctx", required_argument, NULL, 'x'},
    {"exact-matmul", no_argument, NULL, O_EXACT},
    {"spec", required_argument, NULL, O_SPEC},
    {"spec-max-draft", required_argument, NULL, O_SPEC_MAX},
    {"spec-max-rows", required_argument, NULL, O_SPEC_ROWS},
    {"draft-model", required_argument, NULL, O_DRAFT},
    {"lora", required_argument, NULL, O_LORA},
    {"mmproj", required_argument, NULL, O_MMPROJ},
    {"standby-fd", required_argument, NULL, O_STANDBY},
    {"log-level", required_argument, NULL, 'v'},
    {"curve-server-key", required_argument, NULL, O_CSRV},
    {"curve-secret-key", required_argument, NULL, O_CSEC},
    {"gen-curve-keypair", required_argument, NULL, O_GEN},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

enum { OPT_OK = 0, OPT_BAD = 2, OPT_NOT_MINE = -1 }; /* of the apply_* stages */

/* The flags of the scheduler and the model's compute (wc.sched and the
 * draft model). */
static int apply_sched_option(args_t *a, int c)
{
    uint32_t u;
    switch (c) {
    case 'c':
        if (parse_i32_opt("max-seqs", optarg, 1, PROTO_MAX_CAPACITY < 4096 ? PROTO_MAX_CAPACITY : 4096, &u))
            return OPT_BAD;
        a->wc.sched.max_seqs = (int32_t)u;
        break;
    case O_MBT:
        if (parse_i32_opt("max-batch-tokens", optarg, 1, 65536, &u))
            return OPT_BAD;
        a->wc.sched.max_batch_tokens = (int32_t)u;
        break;
    case O_STEPB:
        if (strcmp(optarg, "auto") == 0) {
            a->wc.sched.step_budget_ms = SCHED_STEP_BUDGET_AUTO;
            break;
        }
        if (parse_u32(optarg, 0, 600000, &u) < 0) {
            fprintf(stderr, "pagoda-worker: --step-budget-ms must be auto or 0..600000\n");
            return OPT_BAD;
        }
        a->wc.sched.step_budget_ms = (int32_t)u;
        break;
    case O_STEPMIN:
        if (parse_i32_opt("step-min-chunk", optarg, 1, 65536, &u))
            return OPT_BAD;
        a->wc.sched.step_min_chunk = (int32_t)u;
        break;
    case O_KVB:
        if (parse_i32_opt("kv-blocks", optarg, 1, 1u << 24, &u))
            return OPT_BAD;
        a->wc.sched.kv_blocks = (int32_t)u;
        break;
    case O_KVMB:
        if (parse_i32_opt("kv-budget-mb", optarg, 0, 1u << 20, &u))
            return OPT_BAD;
        a->wc.sched.kv_budget_bytes = (size_t)u << 20; /* 0: sized from memory */
        break;
    case O_BLOCK:
        if (parse_i32_opt("block-size", optarg, 1, 4096, &u))
            return OPT_BAD;
        a->wc.sched.block_size = (int32_t)u;
        break;
    case O_THREADS:
        if (parse_i32_opt("threads", optarg, 1, 256, &u))
            return OPT_BAD;
        a->wc.sched.n_threads = (int32_t)u;
        break;
    case O_KVTYPE:
        if (kv_type_parse(optarg, &a->wc.sched.kv_type) != 0) {
            fprintf(stderr, "pagoda-worker: --kv-type must be auto, f16, f32 or q8_0\n");
            return OPT_BAD;
        }
        break;
    case O_EXACT: a->wc.sched.exact_matmul = true; break;
    case O_NOWARMUP: a->wc.no_warm_up = true; break;
    case O_SPEC:
        if (spec_mode_parse(optarg, &a->wc.sched.spec) != 0) {
            fprintf(stderr, "pagoda-worker: --spec must be off, ngram or draft\n");
            return OPT_BAD;
        }
        break;
    case O_DRAFT:
        a->wc.draft_path = optarg;
        a->wc.sched.spec = SPEC_DRAFT;
        break;
    case O_MMPROJ: a->wc.mmproj_path = optarg; break;
    case O_LORA: {
        static const char *loras[LORA_MAX_ADAPTERS];
        if (a->wc.n_loras >= LORA_MAX_ADAPTERS) {
            fprintf(stderr, "pagoda-worker: at most %d --lora\n", LORA_MAX_ADAPTERS);
            return OPT_BAD;
        }
        loras[a->wc.n_loras++] = optarg;
        a->wc.loras = loras;
        break;
    }
    case O_SPEC_MAX:
        if (parse_i32_opt("spec-max-draft", optarg, 1, SPEC_MAX_DRAFT, &u))
            return OPT_BAD;
        a->wc.sched.spec_max_draft = (int32_t)u;
        break;
    case O_SPEC_ROWS:
        if (parse_i32_opt("spec-max-rows", optarg, 0, 4096, &u))
            return OPT_BAD;
        a->wc.sched.spec_max_rows = (int32_t)u;
        break;
    default: return OPT_NOT_MINE;
    }
    return OPT_OK;
}

/* The other flags: link, memory, KV disk cache, keys, logging. */
static int apply_option(args_t *a, int c)
{
    uint32_t u;
    switch (c) {
    case 'g': a->wc.endpoint = optarg; break;
    case 'm': a->model = optarg; break;
    case 'b':
        if (parse_i32_opt("heartbeat-ms", optarg, PROTO_MIN_HEARTBEAT_MS, PROTO_MAX_HEARTBEAT_MS, &u))
            return OPT_BAD;
        a->wc.heartbeat_ms = (int)u;
        a->wc.heartbeat_explicit = true;
        break;
    case O_MEMAVAIL:
        if (parse_i32_opt("mem-avail-mb", optarg, 1, 1u << 30, &u))
            return OPT_BAD;
        a->wc.mem_avail_bytes = (uint64_t)u << 20;
        break;
    case O_MEMWORKERS:
        if (parse_i32_opt("mem-workers", optarg, 1, 4096, &u))
            return OPT_BAD;
        a->wc.mem_workers = u;
        break;
    case O_KVDIR: a->wc.kv_cache_dir = optarg; break;
    case O_KVKEY: a->wc.kv_disk_key = optarg; break;
    case O_KVDMB:
        if (parse_i32_opt("kv-cache-mb", optarg, 1, 1u << 30, &u))
            return OPT_BAD;
        a->wc.kv_cache_bytes = (uint64_t)u << 20;
        break;
    case O_KVWARM:
        if (parse_i32_opt("kv-warm-percent", optarg, 0, 100, &u))
            return OPT_BAD;
        a->wc.kv_warm_percent = (int32_t)u;
        break;
    case O_CSRV: a->curve_server = optarg; break;
    case O_CSEC: a->curve_secret = optarg; break;
    case O_GEN: a->gen_prefix = optarg; break;
    case 'x':
        if (parse_i32_opt("ctx", optarg, 2, PROTO_MAX_TOKENS, &a->wc.ctx_cap))
            return OPT_BAD;
        break;
    case 'v':
        a->level = log_level_parse(optarg);
        if (a->level < 0) {
            fprintf(stderr, "pagoda-worker: bad --log-level '%s'\n", optarg);
            return OPT_BAD;
        }
        break;
    case O_STANDBY: {
        char *end;
        long v = strtol(optarg, &end, 10);
        if (*optarg == '\0' || *end != '\0' || v < 0 || v > 65535) {
            fprintf(stderr, "pagoda-worker: bad --standby-fd '%s'\n", optarg);
            return OPT_BAD;
        }
        a->wc.standby_fd = (int)v;
        break;
    }
    default: return apply_sched_option(a, c);
    }
    return OPT_OK;
}

/* Reads argv into a. Returns -1 to go on, else main's exit code (0 after
 * --help, 2 on a bad flag). */
static int parse_args(args_t *a, int argc, char **argv)
{
    worker_config_default(&a->wc);
    a->level = LOG_INFO;
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'h') {
            usage(stdout);
            return 0;
        }
        int rc = apply_option(a, c);
        if (rc == OPT_NOT_MINE) {
            usage(stderr);
            return 2;
        }
        if (rc != OPT_OK)
            return rc;
    }
    return -1;
}

/* The model's NAME=FILE into wc (name copied to model_name). 0, or 2 with
 * the message written. */
static int set_model(args_t *a, int argc, char model_name[PROTO_MAX_NAME + 1])
{
    const char *model = a->model;
    const char *eq = model ? strchr(model, '=') : NULL;
    if (optind < argc || !eq || eq == model || !eq[1] || (size_t)(eq - model) > PROTO_MAX_NAME) {
        fprintf(stderr, "pagoda-worker: --model NAME=FILE.gguf is required\n");
        usage(stderr);
        return 2;
    }
    memset(model_name, 0, PROTO_MAX_NAME + 1);
    memcpy(model_name, model, (size_t)(eq - model));
    a->wc.model_name = model_name;
    a->wc.model_path = eq + 1;
    return 0;
}

/* Builds the worker and runs it until a signal or the gateway ends it;
 * the secret key is wiped once the worker holds it. main's exit code. */
static int run_worker(const worker_config_t *wc, char *c_sec, size_t n_sec)
{
    char err[512] = "";
    worker_t *w = worker_new(wc, err, sizeof err);
    explicit_bzero(c_sec, n_sec);
    if (!w) {
        if (!err[0]) /* a standby released before it was needed */
            return 0;
        log_error("%s", err);
        return 1;
    }
    int sfd = sigwake_install();
    if (sfd < 0) {
        log_error("cannot install signal handlers: %s", strerror(errno));
        worker_free(&w);
        return 1;
    }
    int rc = worker_run(w, sfd);
    worker_free(&w);
    return rc;
}

int main(int argc, char **argv)
{
    /* OpenMP threads that spin while idle steal the core the gateway and
     * other workers need: re-exec once with a passive wait policy unless the
     * environment already chose one (see wait_policy.h). */
    wait_policy_reexec(argv);
    args_t a = {0};
    int rc = parse_args(&a, argc, argv);
    if (rc >= 0)
        return rc;
    if (a.gen_prefix)
        return curve_keypair_cli("pagoda-worker", a.gen_prefix);
    char c_srv[CURVE_Z85_LEN + 1], c_pub[CURVE_Z85_LEN + 1], c_sec[CURVE_Z85_LEN + 1];
    int curve = load_curve(a.curve_server, a.curve_secret, c_srv, c_pub, c_sec);
    if (curve < 0)
        return 2;
    char model_name[PROTO_MAX_NAME + 1];
    if (set_model(&a, argc, model_name) != 0)
        return 2;
    if (curve) {
        a.wc.curve_server_key = c_srv;
        a.wc.curve_public_key = c_pub;
        a.wc.curve_secret_key = c_sec;
    }
    log_init("worker", (enum log_level)a.level);
    return run_worker(&a.wc, c_sec, sizeof c_sec);
}
