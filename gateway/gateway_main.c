/* gateway_main.c — pagoda-gateway: HTTP front end + ZeroMQ hub for workers,
 * optionally supervising local workers (models with replicas ≥ 1).
 *
 * Configuration (gateway/config.h): built-in defaults < --config FILE <
 * flags. Each flag that has a configuration key (flag_keys[] below) is
 * recorded while the command line is read and applied with config_set after
 * the file, so `--listen X --config F` and `--config F --listen X` mean the
 * same. --model NAME=FILE adds a model (or changes the path of one in the
 * file); --max-seqs, --max-batch-tokens, --kv-blocks, --kv-budget-mb,
 * --threads and --kv-type set that setting for every model. --print-config prints the
 * result as YAML and exits.
 *
 * The main thread starts the core, the HTTP server and the supervisor, then
 * sleeps in poll() on the fd that SIGINT/SIGTERM make readable
 * (common/sigwake.h), on an eventfd that SIGHUP makes readable (reload
 * the API keys file and, with CURVE, the authorized worker keys) and on the
 * core's fatal-error fd. Teardown order: HTTP first (its handlers call into
 * the core), then the local workers, then the core.
 *
 * SIGINT/SIGTERM drain: new requests get 503, requests in flight may finish
 * for up to drain_timeout_s, then the HTTP server closes what is left, local
 * workers get SIGTERM, and the gateway exits 0.
 *
 * CURVE (proto/curve.h, gateway/zap.h): with a server secret key and an
 * authorized-keys file the worker socket is a CURVE server. Local workers get
 * a key pair made at start-up (its public key is added to the authorized
 * list, its secret passed in the environment, CURVE_ENV_SECRET).
 *
 * `pagoda-gateway --hash-key NAME[:TIER[:FLAG...]]` makes a new secret and
 * prints it with the keys-file line that accepts it, then exits.
 * `pagoda-gateway --gen-curve-keypair PREFIX` writes PREFIX.key/PREFIX.pub.
 *
 * Exit status: 0 after a signal, 1 when start-up fails or the core stops on
 * a fatal error, 2 for bad options or configuration (the message names
 * FILE:LINE:COLUMN for errors in the file). */
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
#include <limits.h>
#include <stdbool.h>
#include <sys/stat.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/memavail.h"
#include "common/sigwake.h"
#include "common/strbuf.h"
#include "common/xalloc.h"
#include "gateway/resp_store.h"
#include "common/private_dir.h"
#include "gateway/config.h"
#include "gateway/gateway.h"
#include "gateway/http.h"
#include "gateway/http_guard.h"
#include "gateway/keys.h"
#include "gateway/supervisor.h"
#include "gateway/zap.h"
#include "proto/curve.h"
#include "proto/msg.h"

#define MAX_SETTINGS 512   /* flags recorded before the file is read */
#define MAX_WORKER_ARGS 64

/* Flags that set a configuration key. `all_models`: a per-model key set on
 * every model (config_models_set); `no_arg`: a switch that sets "true". */
static const struct flag_key {
    const char *flag, *key;
    bool all_models, no_arg;
} flag_keys[] = {
    {"listen", "listen", false, false},
    {"worker-endpoint", "worker_endpoint", false, false},
    {"heartbeat-ms", "heartbeat_ms", false, false},
    {"progress-timeout-ms", "progress_timeout_ms", false, false},
    {"log-level", "log_level", false, false},
    {"keys", "keys_file", false, false},
    {"max-queue", "queue.max_per_model", false, false},
    {"aging-rate", "queue.aging_per_s", false, false},
    {"request-timeout", "queue.default_timeout_s", false, false},
    {"replica-grace", "queue.replica_grace_s", false, false},
    {"http-threads", "http_threads", false, false},
    {"http-idle-timeout", "http_idle_timeout_s", false, false},
    {"header-timeout", "header_timeout_s", false, false},
    {"body-timeout", "body_timeout_s", false, false},
    {"body-min-rate", "body_min_rate", false, false},
    {"body-rate-window", "body_rate_window_s", false, false},
    {"max-uploads", "limits.max_uploads", false, false},
    {"max-uploads-per-ip", "limits.max_uploads_per_ip", false, false},
    {"allowed-host", "allowed_hosts", false, false},
    {"max-redispatch", "queue.max_redispatch", false, false},
    {"max-body", "limits.max_body_bytes", false, false},
    {"max-messages", "limits.max_messages", false, false},
    {"max-prompt-bytes", "limits.max_prompt_bytes", false, false},
    {"image-max-bytes", "images.max_bytes", false, false},
    {"image-max-pixels", "images.max_pixels", false, false},
    {"max-images", "images.max_images", false, false},
    {"image-url-allow", "images.url_allow", false, false},
    {"image-url-timeout-ms", "images.url_timeout_ms", false, false},
    {"rate-limit-per-key", "limits.rate_per_key", false, false},
    {"worker-bin", "worker_bin", false, false},
    {"curve-secret-key", "curve.server_secret_key_file", false, false},
    {"curve-authorized-keys", "curve.authorized_worker_keys_file", false, false},
    {"allow-plain-tcp", "curve.allow_plain_tcp", false, true},
    {"max-seqs", "max_seqs", true, false},
    {"max-batch-tokens", "max_batch_tokens", true, false},
    {"step-budget-ms", "step_budget_ms", true, false},
    {"kv-blocks", "kv_blocks", true, false},
    {"kv-budget-mb", "kv_budget_mb", true, false},
    {"threads", "threads", true, false},
    {"kv-type", "kv_type", true, false},
    {"kv-cache-mb", "kv_cache_mb", true, false},
    {"spec", "spec", true, false},
    {"spec-max-draft", "spec_max_draft", true, false},
    {"replicas", "replicas", true, false},
    {"idle-timeout", "idle_timeout_s", true, false},
    {"standby", "standby", true, false},
    {"drain-timeout", "drain_timeout_s", false, false},
    {"lora-timeout", "lora_timeout_s", false, false},
    {"routing", "routing.mode", false, false},
    {"routing-max-load-gap", "routing.max_load_gap", false, false},
    {"max-restarts", "restart.crash_loop_restarts", false, false},
    {"restart-window", "restart.crash_loop_window_s", false, false},
    {"cors-origin", "cors_origins", false, false},
    {"admin-open", "admin_open", false, true},
    {"no-ui", "no_ui", false, true},
    {"reasoning-parser", "reasoning_parser", false, false},
    {"keep-volatile-blocks", "keep_volatile_blocks", false, true},
    {"state-dir", "state_dir", false, false},
    {"responses-max-age", "responses_max_age_s", false, false},
    {"responses-max-bytes", "responses_max_bytes", false, false},
    {"responses-key-max-bytes", "responses_key_max_bytes", false, false},
    {"responses-key-max-count", "responses_key_max_count", false, false},
    {"responses-store-wait-ms", "responses_store_wait_ms", false, false},
};
#define N_FLAG_KEYS (sizeof flag_keys / sizeof flag_keys[0])
/* Flags of flag_keys that are repeatable lists: their values are joined with
 * ',' into one list that replaces the file's (a column of flag_keys kept
 * apart so its rows stay four values). */
static const char *const joined_flags[] = {"cors-origin", "allowed-host", "image-url-allow"};

static bool flag_joined(size_t i)
{
    for (size_t k = 0; k < sizeof joined_flags / sizeof joined_flags[0]; k++)
        if (strcmp(flag_keys[i].flag, joined_flags[k]) == 0)
            return true;
    return false;
}
#define OPT_FLAG_KEY 1000  /* getopt value of flag_keys[i] = OPT_FLAG_KEY + i */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: pagoda-gateway [--config FILE] [options]\n"
            "       pagoda-gateway --hash-key NAME[:TIER[:FLAG...]] [--secret SECRET]\n"
            "       pagoda-gateway --gen-curve-keypair PREFIX   (writes PREFIX.key, PREFIX.pub)\n"
            "\n"
            "Configuration (docs/OPERATIONS.md; defaults < the file < flags):\n"
            "  --config FILE              YAML configuration file\n"
            "  --print-config             print the effective configuration as YAML and exit\n"
            "HTTP and queues (configuration key in brackets):\n"
            "  --listen HOST:PORT         HTTP address (default 127.0.0.1:8080) [listen]\n"
            "  --keys FILE                API keys (see docs/API.md); without it the API is open.\n"
            "                             SIGHUP reloads the file [keys_file]\n"
            "  --max-queue N              queued requests per model before 429 (default %d)\n"
            "                             [queue.max_per_model]\n"
            "  --aging-rate R             priority units gained per second waited (default 1/30)\n"
            "                             [queue.aging_per_s]\n"
            "  --request-timeout S        seconds a request may wait in the queue, and a running\n"
            "                             one may go without progress (a prefill chunk or a\n"
            "                             token), before 504 (default %d); a running request\n"
            "                             that makes progress is never cut off\n"
            "                             [queue.default_timeout_s]\n"
            "  --replica-grace S          seconds a known model may have no worker before its\n"
            "                             requests get 503 (default %d); while a local worker\n"
            "                             of it (re)starts they wait up to --request-timeout\n"
            "                             [queue.replica_grace_s]\n"
            "  --http-threads N           HTTP thread pool size (default 2) [http_threads]\n"
            "  --max-body BYTES           request body limit (default 16 MiB) [limits.max_body_bytes]\n"
            "  --max-messages N           chat messages per request (default %d)\n"
            "                             [limits.max_messages]\n"
            "  --max-prompt-bytes N       prompt text bytes per request (default %u)\n"
            "                             [limits.max_prompt_bytes]\n"
            "  --image-max-bytes N        bytes of one image file as sent (default and maximum\n"
            "                             20 MiB) [images.max_bytes]\n"
            "  --image-max-pixels N       width x height of one image (default and maximum\n"
            "                             50000000) [images.max_pixels]\n"
            "  --max-images N             images per request (default and maximum 8) [images.max_images]\n"
            "  --image-url-allow HOST[:PORT]  fetch remote http(s) image URLs from HOST (repeatable;\n"
            "                             *.SUFFIX, an IP literal, [IPV6]:PORT); without it every\n"
            "                             remote image URL gets 400 [images.url_allow]\n"
            "  --image-url-timeout-ms N   the whole fetch of one image URL (default 10000)\n"
            "                             [images.url_timeout_ms]\n"
            "  --rate-limit-per-key R     per-key rate limit: R requests/s per API key (bursts of\n"
            "                             max(1, R)), 429 + Retry-After beyond; 0 = off (default)\n"
            "                             [limits.rate_per_key]\n"
            "  --cors-origin ORIGIN       let web pages from ORIGIN (http[s]://HOST[:PORT], or *)\n"
            "                             call the API from a browser (CORS; repeatable). A request\n"
            "                             with any other Origin header gets 403 [cors_origins]\n"
            "  --admin-open               without --keys, serve /admin/* to anyone who reaches the\n"
            "                             port (default: 403 without an admin key) [admin_open]\n"
            "  --no-ui                    do not serve the web console at /ui/ [no_ui]\n"
            "  --reasoning-parser P       none (default) or qwen3: put <think>...</think> at the\n"
            "                             start of chat answers into reasoning_content\n"
            "                             [reasoning_parser]\n"
            "  --keep-volatile-blocks     keep the per-run blocks agents put before their prompt\n"
            "                             (Claude Code's billing header); dropped by default so\n"
            "                             a new conversation reuses the prefix cache\n"
            "                             [keep_volatile_blocks]\n"
            "  --state-dir DIR            where stored Responses API responses live\n"
            "                             (DIR/responses.sqlite3; :memory: = not kept). Default\n"
            "                             $STATE_DIRECTORY, $XDG_STATE_HOME/pagoda or\n"
            "                             ~/.local/state/pagoda [state_dir]\n"
            "  --responses-max-age S      delete stored responses older than S seconds (default\n"
            "                             30 days) [responses_max_age_s]\n"
            "  --responses-max-bytes N    keep at most N bytes of stored responses, all keys; a store\n"
            "                             over it evicts its own key's oldest, else is refused\n"
            "                             (default 1 GiB) [responses_max_bytes]\n"
            "  --responses-key-max-bytes N  per API key (default 64 MiB); that key's oldest go\n"
            "                             [responses_key_max_bytes]\n"
            "  --responses-key-max-count N  responses per API key (default 10000)\n"
            "                             [responses_key_max_count]\n"
            "  --responses-store-wait-ms N  how long a store may wait for the database's write\n"
            "                             lock; then the answer says store: false (default 2000)\n"
            "                             [responses_store_wait_ms]\n"
            "  --http-idle-timeout S      close an idle HTTP connection after S seconds (default %d)\n"
            "                             [http_idle_timeout_s]\n"
            "  --header-timeout S         close a connection whose request headers are not\n"
            "                             complete S seconds after it opened (default %d)\n"
            "                             [header_timeout_s]\n"
            "  --body-timeout S           close a connection whose request body is not complete\n"
            "                             S seconds after its headers (default %d) [body_timeout_s]\n"
            "  --body-min-rate B          ... or that brings fewer than B bytes/s over a window of\n"
            "                             --body-rate-window S (default %d B/s per %d s; 0 = off)\n"
            "                             [body_min_rate, body_rate_window_s]\n"
            "  --max-uploads N            request bodies arriving at once, all clients (default %d;\n"
            "                             503 beyond) [limits.max_uploads]\n"
            "  --max-uploads-per-ip N     the same per client address, IPv6 by /64 (default %d;\n"
            "                             429 beyond) [limits.max_uploads_per_ip]\n"
            "  --allowed-host NAME        accept Host: NAME (any port; *.SUFFIX, or * for any) besides\n"
            "                             IP addresses, localhost and the listen host; another Host\n"
            "                             gets 421 (DNS rebinding; repeatable) [allowed_hosts]\n"
            "  --max-redispatch N         re-dispatches after worker losses before a request\n"
            "                             gets 502 (default %d) [queue.max_redispatch]\n"
            "Workers:\n"
            "  --worker-endpoint ENDPOINT ZeroMQ endpoint workers connect to\n"
            "                             (default tcp://127.0.0.1:5557) [worker_endpoint]\n"
            "  --heartbeat-ms N           heartbeat interval, both ways; local workers get it, remote\n"
            "                             ones adopt it; silent 3 intervals = dead (default %d)\n"
            "                             [heartbeat_ms]\n"
            "  --progress-timeout-ms N    a worker holding requests that completes no step for\n"
            "                             max(N, %d x its slowest recent step) is hung: killed\n"
            "                             (local) and its requests re-dispatched; 0 = off\n"
            "                             (default %d) [progress_timeout_ms]\n"
            "  --model NAME=FILE.gguf     serve this model with one local worker (repeatable);\n"
            "                             a model of the file keeps its settings, gets this path\n"
            "  --mmproj NAME=FILE.gguf    that model's vision encoder (llama.cpp mmproj GGUF),\n"
            "                             passed to its local workers [models[].mmproj]\n"
            "  --lora NAME=FILE[:SCALE]   a LoRA adapter (llama.cpp GGUF) of the preceding --model\n"
            "                             (else the file's last model), served as model NAME;\n"
            "                             repeatable [models[].loras]\n"
            "  --max-seqs N, --max-batch-tokens N, --kv-blocks N, --kv-budget-mb N, --threads N,\n"
            "  --kv-type auto|f16|f32|q8_0 set for every model's local workers [models[].*]\n"
            "  --spec off|ngram|draft     speculative decoding in the workers (default off)\n"
            "                             [models[].spec]; --spec-max-draft N (1..16, default 8);\n"
            "                             spec draft takes models[].draft_model from the file\n"
            "  --kv-cache-mb N            size cap of the workers' disk tier [models[].kv_cache_mb];\n"
            "                             the folder is models[].kv_cache_dir in the file\n"
            "  --replicas N               local workers per model (default 1) [models[].replicas]\n"
            "  --on-demand NAME           start NAME's local workers at its first request and\n"
            "                             stop them after --idle-timeout S (default %d) idle\n"
            "                             [models[].on_demand, models[].idle_timeout_s]\n"
            "  --standby true|false       while an on-demand model is stopped, keep a standby\n"
            "                             worker with the model loaded that a request starts\n"
            "                             (default true) [models[].standby]\n"
            "  --max-restarts N, --restart-window S\n"
            "                             crash loop: a model whose worker needed N restarts\n"
            "                             within S seconds is FAILED (default %d in %d)\n"
            "                             [restart.crash_loop_restarts, restart.crash_loop_window_s]\n"
            "  --drain-timeout S          on SIGTERM, let requests finish this long (default 30)\n"
            "                             [drain_timeout_s]\n"
            "  --lora-timeout S           how long POST /admin/models/M/loras waits for the\n"
            "                             workers' answers before 504 (default %d) [lora_timeout_s]\n",
            GATEWAY_DEFAULT_MAX_QUEUE, GATEWAY_DEFAULT_TIMEOUT_S, GATEWAY_DEFAULT_GRACE_S,
            OAI_MAX_MESSAGES, OAI_MAX_TEXT_BYTES, HTTP_DEFAULT_IDLE_TIMEOUT_S,
            HTTP_DEFAULT_HEADER_TIMEOUT_S, HTTP_DEFAULT_BODY_TIMEOUT_S, HTTP_DEFAULT_BODY_MIN_RATE,
            HTTP_DEFAULT_BODY_RATE_WINDOW_S, HTTP_DEFAULT_MAX_UPLOADS, HTTP_DEFAULT_MAX_UPLOADS_PER_IP,
            GATEWAY_DEFAULT_MAX_REDISPATCH, PROTO_HEARTBEAT_MS,
            PROTO_PROGRESS_SCALE, PROTO_PROGRESS_TIMEOUT_MS,
            GATEWAY_DEFAULT_IDLE_S,
            SUPERVISOR_FAIL_RESTARTS, SUPERVISOR_FAIL_WINDOW_MS / 1000, GATEWAY_DEFAULT_LORA_TIMEOUT_S);
    /* the modes from route.h's table */
    fprintf(f, "  --routing MODE             [routing.mode], one of:\n");
    for (int m = 0; m < ROUTE_N_MODES; m++)
        fprintf(f, "      %-23s%s%s\n", route_mode_name((route_mode_t)m), route_mode_help((route_mode_t)m),
                m == 0 ? " (default)" : "");
    fprintf(f,
            "  --routing-max-load-gap N   cache-aware: requests more than the least-loaded replica\n"
            "                             the one holding the prefix may have (default %d)\n"
            "                             [routing.max_load_gap]\n"
            "  --worker-arg ARG           any other worker flag, e.g. --worker-arg=--ctx=512\n"
            "                             (repeatable; wins over the settings above)\n"
            "  --worker-bin PATH          worker executable (default: pagoda-worker next to\n"
            "                             this binary) [worker_bin]\n"
            "  --log-level LEVEL          debug|info|warn|error (default info; env PAGODA_LOG)\n"
            "                             [log_level]\n"
            "Worker link security (CURVE; docs/OPERATIONS.md \"Scale out\"):\n"
            "  --curve-secret-key FILE    the gateway's CURVE secret key [curve.server_secret_key_file]\n"
            "  --curve-authorized-keys FILE  worker public keys allowed to connect, one per line\n"
            "                             [curve.authorized_worker_keys_file]\n"
            "  --allow-plain-tcp          allow a non-loopback tcp:// worker endpoint without\n"
            "                             CURVE (trusted networks only) [curve.allow_plain_tcp]\n"
            "  --help\n",
            ROUTE_DEFAULT_MAX_LOAD_GAP);
}

/* --hash-key NAME[:TIER[:FLAG...]]: prints the secret and its keys-file line
 * (FLAG: admin, metrics, group=NAME — keys.h; keys_parse checks them). */
static int hash_key(const char *spec, const char *secret)
{
    char name[KEYS_NAME_MAX + 1], tier[16] = "normal", flag[KEYS_LINE_MAX / 2] = "";
    const char *c1 = strchr(spec, ':');
    size_t nlen = c1 ? (size_t)(c1 - spec) : strlen(spec);
    if (nlen == 0 || nlen > KEYS_NAME_MAX) {
        fprintf(stderr, "pagoda-gateway: --hash-key NAME[:TIER[:FLAG...]] (name 1..%d chars)\n",
                KEYS_NAME_MAX);
        return 2;
    }
    memcpy(name, spec, nlen);
    name[nlen] = '\0';
    if (c1) {
        const char *c2 = strchr(c1 + 1, ':');
        size_t tlen = c2 ? (size_t)(c2 - c1 - 1) : strlen(c1 + 1);
        if (tlen >= sizeof tier || (c2 && strlen(c2 + 1) + 2 > sizeof flag)) {
            fprintf(stderr, "pagoda-gateway: --hash-key NAME[:TIER[:FLAG...]]\n");
            return 2;
        }
        memcpy(tier, c1 + 1, tlen);
        tier[tlen] = '\0';
        if (c2) { /* the flags, space-separated as in the file */
            snprintf(flag, sizeof flag, " %s", c2 + 1);
            for (char *p = flag; *p; p++)
                if (*p == ':')
                    *p = ' ';
        }
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
    char line[KEYS_LINE_MAX + 2];
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
/* the values of each `joined` flag, joined with ',' (static: reachable
 * until exit) */
static char *joined_values[N_FLAG_KEYS];

static void on_sighup(int sig)
{
    (void)sig;
    uint64_t one = 1;
    ssize_t r = write(hup_fd, &one, sizeof one);
    (void)r;
}

/* A flag recorded for after the file: flag_keys[i_key] = value, a --model
 * (i_key SETTING_MODEL) or an --on-demand (SETTING_ON_DEMAND). */
enum { SETTING_MODEL = -1, SETTING_ON_DEMAND = -2, SETTING_MMPROJ = -3, SETTING_LORA = -4 };
typedef struct setting {
    int i_key;
    const char *value;
} setting_t;

/* Applies one recorded flag; prints the error and returns -1 on a bad value.
 * model: the NAME of the closest --model before it, NULL = none. */
static int apply_setting(config_t *c, const setting_t *st, const char *model)
{
    char err[512];
    int rc;
    if (st->i_key == SETTING_MODEL)
        rc = config_model_set(c, st->value, err, sizeof err);
    else if (st->i_key == SETTING_LORA)
        rc = config_lora_add(c, model, st->value, err, sizeof err);
    else if (st->i_key == SETTING_ON_DEMAND)
        rc = config_models_set(c, st->value, "on_demand", "true", err, sizeof err);
    else if (st->i_key == SETTING_MMPROJ) {
        const char *eq = strchr(st->value, '=');
        if (!eq || eq == st->value || !eq[1]) {
            fprintf(stderr, "pagoda-gateway: --mmproj %s: expected NAME=FILE.gguf\n", st->value);
            return -1;
        }
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(eq - st->value), st->value);
        rc = config_models_set(c, name, "mmproj", eq + 1, err, sizeof err);
        if (rc != 0 && !config_model_find(c, name)) {
            fprintf(stderr, "pagoda-gateway: --mmproj %s: no model of that name (--model %s=FILE)\n", st->value,
                    name);
            return -1;
        }
    }
    else if (flag_keys[st->i_key].all_models)
        rc = config_models_set(c, NULL, flag_keys[st->i_key].key, st->value, err, sizeof err);
    else
        rc = config_set(c, flag_keys[st->i_key].key, st->value, err, sizeof err);
    if (rc == 0)
        return 0;
    /* config's "--KEY: reason" names the key; name the flag the user typed */
    const char *why = strstr(err, ": ");
    if (st->i_key == SETTING_ON_DEMAND)
        fprintf(stderr, "pagoda-gateway: --on-demand %s: no model of that name (--model %s=FILE)\n",
                st->value, st->value);
    else if (st->i_key >= 0 && why)
        fprintf(stderr, "pagoda-gateway: --%s %s: %s\n", flag_keys[st->i_key].flag, st->value,
                why + 2);
    else
        fprintf(stderr, "pagoda-gateway: %s\n", err);
    return -1;
}

/* The authorized worker keys of the configuration plus the local workers'
 * key (when non-NULL). NULL with the error logged/printed. */
static curve_keylist_t *load_authorized(const config_t *c, const char *local_pub)
{
    char err[512];
    curve_keylist_t *l = NULL;
    if (curve_keylist_load(c->curve.authorized_worker_keys_file, &l, err, sizeof err) < 0) {
        log_error("%s", err);
        return NULL;
    }
    if (local_pub)
        curve_keylist_add(l, local_pub, "local-worker");
    return l;
}

/* Warns about settings that are read but not acted on yet. */
static void warn_pending(const config_t *c)
{
    if (c->limits.rate_per_key > 0 && !c->keys_file)
        log_warn("limits.rate_per_key needs a keys file (keys are the identity): not enforced");
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

/* Flags of one model's local workers (strings in *owned, freed by the caller).
 * mem: the host's memory and the local workers sharing it, for a model whose
 * KV pool the worker sizes from memory (kv_budget_mb 0, worker/kv_budget.h):
 * measured once here, so a worker restarted later gets the share it got at
 * first rather than what its running siblings left. */
static size_t model_worker_args(const config_model_t *m, const memavail_t *mem, size_t n_local, const char **args,
                                char owned[9][32], char **lora_args)
{
    size_t n = 0;
    snprintf(owned[0], 32, "%d", m->max_seqs);
    snprintf(owned[1], 32, "%d", m->max_batch_tokens);
    snprintf(owned[2], 32, "%d", m->threads);
    snprintf(owned[3], 32, "%d", m->kv_blocks ? m->kv_blocks : m->kv_budget_mb);
    args[n++] = "--max-seqs";
    args[n++] = owned[0];
    args[n++] = "--max-batch-tokens";
    args[n++] = owned[1];
    if (m->step_budget_ms < 0)
        snprintf(owned[8], 32, "auto");
    else
        snprintf(owned[8], 32, "%d", m->step_budget_ms);
    args[n++] = "--step-budget-ms";
    args[n++] = owned[8];
    args[n++] = "--threads";
    args[n++] = owned[2];
    args[n++] = m->kv_blocks ? "--kv-blocks" : "--kv-budget-mb";
    args[n++] = owned[3];
    if (!m->kv_blocks && !m->kv_budget_mb && mem->avail_bytes != MEMAVAIL_UNLIMITED) {
        snprintf(owned[6], 32, "%llu", (unsigned long long)(mem->avail_bytes >> 20));
        snprintf(owned[7], 32, "%zu", n_local);
        args[n++] = "--mem-avail-mb";
        args[n++] = owned[6];
        args[n++] = "--mem-workers";
        args[n++] = owned[7];
    }
    args[n++] = "--kv-type";
    args[n++] = config_kv_type_name(m->kv_type);
    if (m->kv_cache_dir) {
        snprintf(owned[4], 32, "%d", m->kv_cache_mb);
        args[n++] = "--kv-cache-dir";
        args[n++] = m->kv_cache_dir;
        args[n++] = "--kv-cache-mb";
        args[n++] = owned[4];
    }
    snprintf(owned[5], 32, "%d", m->spec_max_draft);
    args[n++] = "--spec";
    args[n++] = config_spec_name(m->spec);
    args[n++] = "--spec-max-draft";
    args[n++] = owned[5];
    if (m->draft_model) {
        args[n++] = "--draft-model";
        args[n++] = m->draft_model;
        args[n++] = "--spec"; /* after --draft-model: the configured mode wins */
        args[n++] = config_spec_name(m->spec);
    }
    if (m->mmproj) {
        args[n++] = "--mmproj";
        args[n++] = m->mmproj;
    }
    for (size_t i = 0; i < m->n_loras; i++) { /* NAME=FILE:SCALE, freed by the caller */
        args[n++] = "--lora";
        strbuf_t b = STRBUF_INIT;
        strbuf_printf(&b, "%s=%s:%.17g", m->loras[i].name, m->loras[i].file, m->loras[i].scale);
        args[n++] = lora_args[i] = strbuf_take(&b);
    }
    return n;
}

/* The command line: flags with a configuration key are recorded (applied
 * after the file), the rest say what to do. */
typedef struct cli {
    const char *config_path;      /* --config, NULL = defaults only */
    bool print_config;
    const char *hash_spec, *secret, *gen_prefix; /* --hash-key, --secret, --gen-curve-keypair */
    setting_t settings[MAX_SETTINGS];
    size_t n_settings;
    size_t i_joined[N_FLAG_KEYS]; /* settings[i_joined[i]] holds joined_values[i] */
    const char *worker_args[MAX_WORKER_ARGS]; /* --worker-arg values, then CURVE's two */
    size_t n_worker_args;
} cli_t;

/* Reads argv into *o. Returns -1 to go on, else the exit status (--help 0,
 * a bad option 2). */
static int cli_parse(int argc, char **argv, cli_t *o)
{
    struct option opts[N_FLAG_KEYS + 16];
    size_t n_opts = 0;
    for (size_t i = 0; i < N_FLAG_KEYS; i++)
        opts[n_opts++] = (struct option){flag_keys[i].flag,
                                         flag_keys[i].no_arg ? no_argument : required_argument, NULL,
                                         OPT_FLAG_KEY + (int)i};
    opts[n_opts++] = (struct option){"config", required_argument, NULL, 'c'};
    opts[n_opts++] = (struct option){"print-config", no_argument, NULL, 'P'};
    opts[n_opts++] = (struct option){"model", required_argument, NULL, 'm'};
    opts[n_opts++] = (struct option){"on-demand", required_argument, NULL, 'O'};
    opts[n_opts++] = (struct option){"mmproj", required_argument, NULL, 'V'};
    opts[n_opts++] = (struct option){"lora", required_argument, NULL, 'L'};
    opts[n_opts++] = (struct option){"worker-arg", required_argument, NULL, 'A'};
    opts[n_opts++] = (struct option){"hash-key", required_argument, NULL, 'H'};
    opts[n_opts++] = (struct option){"secret", required_argument, NULL, 'S'};
    opts[n_opts++] = (struct option){"gen-curve-keypair", required_argument, NULL, 'G'};
    opts[n_opts++] = (struct option){"help", no_argument, NULL, 'h'};
    opts[n_opts++] = (struct option){NULL, 0, NULL, 0};
    int ch;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (ch >= OPT_FLAG_KEY && ch < OPT_FLAG_KEY + (int)N_FLAG_KEYS) {
            if (o->n_settings == MAX_SETTINGS) {
                fprintf(stderr, "pagoda-gateway: too many options\n");
                return 2;
            }
            int i = ch - OPT_FLAG_KEY;
            char **jv = &joined_values[i];
            if (flag_joined((size_t)i) && *jv) {
                /* repeated: one value "A,B,..." replaces the file's list */
                size_t n = strlen(*jv) + strlen(optarg) + 2;
                *jv = xrealloc(*jv, n);
                strcat(strcat(*jv, ","), optarg);
                o->settings[o->i_joined[i]].value = *jv;
                continue;
            }
            if (flag_joined((size_t)i)) {
                *jv = xstrdup(optarg);
                o->i_joined[i] = o->n_settings;
                o->settings[o->n_settings++] = (setting_t){i, *jv};
                continue;
            }
            o->settings[o->n_settings++] = (setting_t){i, flag_keys[i].no_arg ? "true" : optarg};
            continue;
        }
        switch (ch) {
        case 'c': o->config_path = optarg; break;
        case 'P': o->print_config = true; break;
        case 'm':
        case 'O':
        case 'V':
        case 'L':
            if (o->n_settings == MAX_SETTINGS) {
                fprintf(stderr, "pagoda-gateway: too many options\n");
                return 2;
            }
            o->settings[o->n_settings++] =
                (setting_t){ch == 'm'   ? SETTING_MODEL
                            : ch == 'O' ? SETTING_ON_DEMAND
                            : ch == 'L' ? SETTING_LORA
                                        : SETTING_MMPROJ,
                            optarg};
            break;
        case 'A':
            if (o->n_worker_args + 1 > MAX_WORKER_ARGS - 2) {
                fprintf(stderr, "pagoda-gateway: too many worker flags\n");
                return 2;
            }
            o->worker_args[o->n_worker_args++] = optarg;
            break;
        case 'H': o->hash_spec = optarg; break;
        case 'S': o->secret = optarg; break;
        case 'G': o->gen_prefix = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        usage(stderr);
        return 2;
    }
    return -1;
}

/* defaults < file < flags, then the cross-field rules. NULL (printed) on a
 * bad file or value. */
static config_t *config_build(const cli_t *o)
{
    char err[1024];
    config_t *cfg = NULL;
    if (o->config_path) {
        if (config_load(o->config_path, &cfg, err, sizeof err) < 0) {
            fprintf(stderr, "pagoda-gateway: %s\n", err);
            return NULL;
        }
    } else {
        cfg = config_default();
    }
    /* scalar flags and --model in command-line order, then the ones about
     * models (they see every model of the file and of --model) */
    char model[CONFIG_MAX_NAME + 1] = ""; /* of the latest --model: a --lora's */
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < o->n_settings; i++) {
            int k = o->settings[i].i_key;
            if (k == SETTING_MODEL)
                snprintf(model, sizeof model, "%.*s", (int)strcspn(o->settings[i].value, "="), o->settings[i].value);
            bool later = k == SETTING_ON_DEMAND || k == SETTING_MMPROJ || (k >= 0 && flag_keys[k].all_models);
            if (later == (pass == 1) && apply_setting(cfg, &o->settings[i], *model ? model : NULL) < 0) {
                config_free(&cfg);
                return NULL;
            }
        }
    if (config_check(cfg, err, sizeof err) < 0) {
        fprintf(stderr, "pagoda-gateway: %s\n", err);
        config_free(&cfg);
        return NULL;
    }
    return cfg;
}

/* CURVE keys of one run: the server's pair, the local workers' pair and the
 * authorized list, read before anything starts. */
typedef struct curve_setup {
    bool on;                      /* the configuration names a server secret key */
    char srv_sec[CURVE_Z85_LEN + 1], srv_pub[CURVE_Z85_LEN + 1];
    char loc_pub[CURVE_Z85_LEN + 1];
    curve_keylist_t *authorized;  /* owned */
} curve_setup_t;

/* Loads the keys; with local workers makes their pair, exports its secret
 * (CURVE_ENV_SECRET) and adds --curve-server-key to their flags. Returns 0,
 * 2 for a bad key file (a configuration error), 1 when no pair can be made. */
static int curve_setup(const config_t *cfg, size_t n_local, curve_setup_t *cs, cli_t *o)
{
    char err[1024];
    cs->on = cfg->curve.server_secret_key_file != NULL;
    if (!cs->on)
        return 0;
    if (!curve_available()) {
        log_error("CURVE is configured but this libzmq has no CURVE support");
        return 2;
    }
    if (curve_secret_load(cfg->curve.server_secret_key_file, cs->srv_sec, cs->srv_pub, err,
                          sizeof err) < 0) {
        log_error("%s", err);
        return 2;
    }
    char loc_sec[CURVE_Z85_LEN + 1] = "";
    if (n_local && curve_keypair_new(cs->loc_pub, loc_sec) < 0) {
        log_error("cannot make a CURVE key pair for the local workers");
        return 1;
    }
    cs->authorized = load_authorized(cfg, n_local ? cs->loc_pub : NULL);
    if (!cs->authorized)
        return 2;
    if (cs->authorized->n == 0)
        log_warn("CURVE: %s lists no worker key: no worker can connect",
                 cfg->curve.authorized_worker_keys_file);
    log_info("CURVE: the gateway's public key is %s (workers: --curve-server-key)", cs->srv_pub);
    if (n_local) {
        /* before any thread exists: setenv is not thread-safe; the
         * environment, unlike argv, is private to the user */
        setenv(CURVE_ENV_SECRET, loc_sec, 1);
        explicit_bzero(loc_sec, sizeof loc_sec);
        o->worker_args[o->n_worker_args++] = "--curve-server-key";
        o->worker_args[o->n_worker_args++] = cs->srv_pub;
    }
    return 0;
}

/* Every model's adapters, in configuration order (their llama.cpp ids). */
static lora_table_t *loras_of(const config_t *cfg)
{
    lora_table_t *t = lora_table_new();
    for (size_t i = 0; i < cfg->n_models; i++)
        for (size_t j = 0; j < cfg->models[i].n_loras; j++)
            lora_table_add(t, cfg->models[i].loras[j].name, cfg->models[i].name, cfg->models[i].loras[j].scale);
    return t;
}

/* The core's configuration. The arrays (n_models each) are the caller's,
 * freed after gateway_new. */
static gateway_config_t core_config(const config_t *cfg, const curve_setup_t *cs,
                                    const char **names, const char **paths, double *idle_s)
{
    for (size_t i = 0; i < cfg->n_models; i++) {
        names[i] = cfg->models[i].name;
        paths[i] = cfg->models[i].path;
        idle_s[i] = cfg->models[i].idle_timeout_s;
    }
    return (gateway_config_t){
        .worker_endpoint = cfg->worker_endpoint, .heartbeat_ms = cfg->heartbeat_ms,
        .max_queue = (size_t)cfg->queue.max_per_model, .aging_per_s = cfg->queue.aging_per_s,
        .request_timeout_us = (int64_t)(cfg->queue.default_timeout_s * 1e6),
        .replica_grace_us = (int64_t)(cfg->queue.replica_grace_s * 1e6),
        .lora_timeout_us = (int64_t)(cfg->lora_timeout_s * 1e6),
        .models = names, .n_models = cfg->n_models, .idle_timeout_s = idle_s,
        .curve_secret_key = cs->on ? cs->srv_sec : NULL, .curve_authorized = cs->authorized,
        .max_redispatch = cfg->queue.max_redispatch > 0 ? cfg->queue.max_redispatch : -1,
        .progress_timeout_ms = cfg->progress_timeout_ms > 0 ? cfg->progress_timeout_ms : -1,
        .routing = (route_mode_t)cfg->routing.mode, .model_paths = paths,
        .prefix_index_entries = (size_t)cfg->routing.index_entries,
        .route_max_load_gap = (uint32_t)cfg->routing.max_load_gap,
        .loras = loras_of(cfg),
    };
}

/* mkdir -p with mode 0700 for the directories it makes. 0, or -1 (errno). */

/* Opens the stored responses (gateway/resp_store.h) in cfg->state_dir, or
 * in the default state directory. A configured directory that cannot be
 * used is an error (-1, logged); a default one that cannot be made only a
 * warning: responses are then kept in memory (*out set either way on 0). */
static int state_open(const config_t *cfg, resp_store_t **out)
{
    resp_store_config_t rc = {.max_age_s = (int64_t)cfg->responses_max_age_s,
                              .max_bytes = cfg->responses_max_bytes,
                              .key_max_bytes = cfg->responses_key_max_bytes,
                              .key_max_count = cfg->responses_key_max_count,
                              .busy_timeout_ms = (int)cfg->responses_store_wait_ms};
    char dir[PATH_MAX], path[PATH_MAX + 32], err[512];
    const char *env;
    bool configured = cfg->state_dir != NULL;
    if (configured)
        snprintf(dir, sizeof dir, "%s", cfg->state_dir);
    else if ((env = getenv("STATE_DIRECTORY")) && *env) /* systemd StateDirectory=; first entry */
        snprintf(dir, sizeof dir, "%.*s", (int)strcspn(env, ":"), env);
    else if ((env = getenv("XDG_STATE_HOME")) && *env)
        snprintf(dir, sizeof dir, "%s/pagoda", env);
    else if ((env = getenv("HOME")) && *env)
        snprintf(dir, sizeof dir, "%s/.local/state/pagoda", env);
    else
        snprintf(dir, sizeof dir, "pagoda-state");
    bool mem = strcmp(dir, ":memory:") == 0;
    /* the folder holds users' conversations: 0700 and ours, or we refuse
     * to start (common/private_dir.h) */
    struct stat sb;
    if (!mem && private_dir_make(dir, "--state-dir", err, sizeof err) != 0) {
        if (configured || stat(dir, &sb) == 0) {
            log_error("%s", err);
            return -1;
        }
        log_warn("%s: stored responses are kept in memory only and lost at exit; set --state-dir", err);
        mem = true;
    }
    snprintf(path, sizeof path, mem ? ":memory:" : "%s/" RESP_STORE_FILE, dir);
    if (resp_store_open(path, &rc, out, err, sizeof err) != 0) {
        log_error("stored responses: %s", err);
        return -1;
    }
    log_info("stored responses: %s (max age %g s, max %lld bytes)", path, cfg->responses_max_age_s,
             (long long)cfg->responses_max_bytes);
    return 0;
}

static http_config_t http_config(const config_t *cfg)
{
    return (http_config_t){.listen = cfg->listen, .keys_path = cfg->keys_file,
                           .n_threads = (unsigned)cfg->http_threads,
                           .max_body = (size_t)cfg->limits.max_body_bytes,
                           .max_messages = (size_t)cfg->limits.max_messages,
                           .max_prompt_bytes = (size_t)cfg->limits.max_prompt_bytes,
                           .image_limits = {.max_bytes = (size_t)cfg->images.max_bytes,
                                            .max_pixels = (uint64_t)cfg->images.max_pixels,
                                            .max_images = (size_t)cfg->images.max_images},
                           .image_url_allow = cfg->images.url_allow,
                           .image_url_timeout_ms = cfg->images.url_timeout_ms,
                           .rate_per_key = cfg->limits.rate_per_key,
                           .idle_timeout_s = (unsigned)cfg->http_idle_timeout_s,
                           .header_timeout_ms = (int64_t)(cfg->header_timeout_s * 1000),
                           .body_timeout_ms = (int64_t)(cfg->body_timeout_s * 1000),
                           .body_min_rate = (uint64_t)cfg->body_min_rate,
                           .body_rate_window_ms = (int64_t)(cfg->body_rate_window_s * 1000),
                           .max_uploads = (unsigned)cfg->limits.max_uploads,
                           .max_uploads_per_ip = (unsigned)cfg->limits.max_uploads_per_ip,
                           .allowed_hosts = cfg->allowed_hosts,
                           .cors_origins = cfg->cors_origins, .admin_open = cfg->admin_open,
                           .no_ui = cfg->no_ui, .reasoning_parser = cfg->reasoning_parser,
                           .keep_volatile_blocks = cfg->keep_volatile_blocks};
}

/* Starts every model's local workers (replicas each) and hands them to the
 * core. NULL (logged) when the supervisor cannot start. */
static supervisor_t *local_workers_start(const config_t *cfg, struct gateway *gw, const cli_t *o)
{
    supervisor_config_t scfg = {
        .worker_bin = cfg->worker_bin, .endpoint = gw->worker_endpoint,
        .heartbeat_ms = cfg->heartbeat_ms, .worker_args = o->worker_args,
        .n_worker_args = o->n_worker_args, .restarts = gw->m.worker_restarts,
        .fail_restarts = (unsigned)cfg->restart.crash_loop_restarts,
        .fail_window_ms = (int64_t)(cfg->restart.crash_loop_window_s * 1000),
        .backoff_min_ms = cfg->restart.backoff_initial_ms,
        .backoff_max_ms = cfg->restart.backoff_max_ms};
    supervisor_t *sup = supervisor_new(&scfg);
    if (!sup)
        return NULL;
    size_t n_local = 0;
    bool any_auto = false;
    for (size_t i = 0; i < cfg->n_models; i++) {
        n_local += (size_t)cfg->models[i].replicas;
        any_auto |= cfg->models[i].replicas > 0 && !cfg->models[i].kv_blocks && !cfg->models[i].kv_budget_mb;
    }
    memavail_t mem;
    memavail_read(NULL, &mem);
    if (any_auto && mem.avail_bytes != MEMAVAIL_UNLIMITED)
        log_info("memory for %zu local worker%s: %llu MiB (MemAvailable %llu MiB%s%s); KV pools sized from "
                 "memory take a share each", n_local, n_local == 1 ? "" : "s",
                 (unsigned long long)(mem.avail_bytes >> 20), (unsigned long long)(mem.meminfo_bytes >> 20),
                 mem.cgroup_bytes < mem.meminfo_bytes ? ", less under the memory.max of cgroup " : "",
                 mem.cgroup_bytes < mem.meminfo_bytes ? mem.cgroup_path : "");
    for (size_t i = 0; i < cfg->n_models; i++) {
        const config_model_t *m = &cfg->models[i];
        const char *args[32 + 2 * CONFIG_MAX_LORAS];
        char owned[9][32], *lora_args[CONFIG_MAX_LORAS];
        size_t n = model_worker_args(m, &mem, n_local, args, owned, lora_args);
        for (int r = 0; r < m->replicas; r++)
            supervisor_add_args(sup, m->name, m->path, m->on_demand, m->standby, args, n);
        for (size_t j = 0; j < m->n_loras; j++)
            free(lora_args[j]);
    }
    if (supervisor_start(sup) < 0) {
        supervisor_free(&sup);
        return NULL;
    }
    gateway_set_supervisor(gw, sup);
    return sup;
}

/* Sleeps until SIGINT/SIGTERM (returns 0) or a fatal stop of the core
 * (returns 1); SIGHUP reloads the keys file and the authorized worker keys. */
static int serve(struct gateway *gw, http_server_t *http, const config_t *cfg,
                 const curve_setup_t *cs, size_t n_local, int sfd)
{
    struct pollfd p[3] = {{.fd = sfd, .events = POLLIN}, {.fd = hup_fd, .events = POLLIN},
                          {.fd = gateway_fatal_fd(gw), .events = POLLIN}};
    for (;;) {
        if (poll(p, 3, -1) < 1)
            continue;
        if (p[2].revents & POLLIN) {
            log_error("the gateway core stopped: exiting");
            return 1;
        }
        if (p[0].revents & POLLIN)
            return 0;
        if (p[1].revents & POLLIN) {
            uint64_t n;
            if (read(hup_fd, &n, sizeof n) == sizeof n) {
                log_info("SIGHUP: reloading the keys file");
                http_server_reload_keys(http, NULL, 0);
                if (cs->on) {
                    curve_keylist_t *fresh = load_authorized(cfg, n_local ? cs->loc_pub : NULL);
                    if (fresh) /* else logged; the old list stays */
                        zap_set_keys(gw->zap, fresh);
                    curve_keylist_free(&fresh);
                }
            }
        }
    }
}

int main(int argc, char **argv)
{
    cli_t o = {0};
    int rc = cli_parse(argc, argv, &o);
    if (rc >= 0)
        return rc;
    if (o.hash_spec)
        return hash_key(o.hash_spec, o.secret);
    if (o.gen_prefix)
        return curve_keypair_cli("pagoda-gateway", o.gen_prefix);
    config_t *cfg = config_build(&o);
    if (!cfg)
        return 2;
    if (o.print_config) {
        char *y = config_format(cfg, NULL);
        fputs(y, stdout);
        free(y);
        config_free(&cfg);
        return 0;
    }
    log_init("gateway", (enum log_level)cfg->log_level);
    warn_pending(cfg);

    size_t n_local = 0;
    for (size_t i = 0; i < cfg->n_models; i++)
        n_local += (size_t)cfg->models[i].replicas;
    const char **model_names = xcalloc(cfg->n_models + 1, sizeof *model_names);
    const char **model_paths = xcalloc(cfg->n_models + 1, sizeof *model_paths);
    double *idle_s = xcalloc(cfg->n_models + 1, sizeof *idle_s);
    curve_setup_t cs = {0};
    struct gateway *gw = NULL;
    http_server_t *http = NULL;
    supervisor_t *sup = NULL;
    resp_store_t *responses = NULL;
    if ((rc = curve_setup(cfg, n_local, &cs, &o)) != 0)
        goto out;
    rc = 1;
    int sfd = sigwake_install();
    hup_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (sfd < 0 || hup_fd < 0) {
        log_error("cannot install signal handlers: %s", strerror(errno));
        goto out;
    }
    struct sigaction sa = {.sa_handler = on_sighup};
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGHUP, &sa, NULL);

    /* start order: core, HTTP, local workers; teardown the reverse of use */
    gateway_config_t gcfg = core_config(cfg, &cs, model_names, model_paths, idle_s);
    gw = gateway_new(&gcfg);
    explicit_bzero(cs.srv_sec, sizeof cs.srv_sec);
    if (!gw)
        goto out;
    if (state_open(cfg, &responses) != 0)
        goto stop;
    http_config_t hcfg = http_config(cfg);
    hcfg.responses = responses;
    if (!(http = http_server_new(&hcfg, gw)))
        goto stop;
    if (n_local && !(sup = local_workers_start(cfg, gw, &o)))
        goto stop;
    if (serve(gw, http, cfg, &cs, n_local, sfd) != 0)
        goto stop;
    log_info("%s: shutting down; new requests get 503, %zu in flight may finish within %g s",
             strsignal(sigwake_signal()), gateway_inflight(gw), cfg->drain_timeout_s);
    gateway_set_stopping(gw);
    drain(gw, http, cfg->drain_timeout_s);
    rc = 0;
stop:
    http_server_free(&http);
    if (gw)
        gateway_set_supervisor(gw, NULL);
    supervisor_free(&sup);
    gateway_free(&gw);
    resp_store_close(&responses); /* after the HTTP server: its handlers use it */
out:
    curve_keylist_free(&cs.authorized);
    free(model_names);
    free(model_paths);
    free(idle_s);
    config_free(&cfg);
    for (size_t i = 0; i < N_FLAG_KEYS; i++) {
        free(joined_values[i]);
        joined_values[i] = NULL;
    }
    if (rc == 0)
        log_info("bye");
    return rc;
}
