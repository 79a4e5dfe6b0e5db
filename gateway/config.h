/* config.h — pagoda-gateway's configuration: one YAML file, defaults, and
 * command-line overrides.
 *
 * Precedence, lowest first: built-in defaults < the YAML file < flags.
 * Every flag of pagoda-gateway that has a key here is applied with
 * config_set after the file, whatever its place on the command line
 * (gateway/gateway_main.c holds the flag → key table). The gateway's main
 * applies it like this:
 *
 *     config_t *c = NULL;
 *     if (config_path) { if (config_load(config_path, &c, err, sizeof err)) die(err); }
 *     else c = config_default();
 *     config_set(c, "listen", "0.0.0.0:8080", err, n);       // --listen
 *     config_set(c, "worker_endpoint", "tcp://...", err, n);  // --worker-endpoint
 *     config_set(c, "keys_file", "/etc/pagoda/keys", err, n); // --keys
 *     config_set(c, "heartbeat_ms", "500", err, n);           // --heartbeat-ms
 *     config_model_set(c, "tinyllama=/m/tl.gguf", err, n);    // --model (repeatable)
 *     if (config_check(c, err, n)) die(err);                  // cross-field rules
 *     ...
 *     config_free(&c);
 *
 * config_set accepts every scalar key by its dotted path ("queue.aging_per_s",
 * "limits.max_body_bytes"), with the value spelled as it would be in YAML, and
 * validates it exactly as the file parser does.
 *
 * ---- The file --------------------------------------------------------------
 *
 * One YAML document whose root is a mapping. Every key is optional (defaults
 * below) except models[].name and models[].path. Unknown keys, duplicate keys,
 * wrong types and out-of-range values are errors: a typo must not pass silently.
 * Integers, floats and booleans must be written plain (`256`, `0.1`, `true`);
 * a quoted "256" is a string and refused where a number is expected. Booleans
 * are true/false (also True/TRUE/False/FALSE), not yes/no/on/off. Anchors,
 * aliases, tags and further documents are refused. Strings may not contain
 * control characters. A file is at most CONFIG_MAX_BYTES bytes.
 *
 *   key                          type     default                 range / meaning
 *   listen                       string   127.0.0.1:8080          HTTP address HOST:PORT; HOST is an
 *                                                                 IPv4 address, a name, or [IPv6];
 *                                                                 PORT 0..65535 (0 = any free port)
 *   worker_endpoint              string   tcp://127.0.0.1:5557    ZeroMQ endpoint the gateway binds and
 *                                                                 workers connect to: tcp://HOST:PORT
 *                                                                 (HOST may be * or an interface; PORT
 *                                                                 1..65535 or *) or ipc://PATH
 *   heartbeat_ms                 int      1000                    10..600000; a worker silent for 3
 *                                                                 intervals is considered dead; local
 *                                                                 workers get it as --heartbeat-ms,
 *                                                                 remote ones adopt it
 *   progress_timeout_ms          int      30000                   0..86400000; a worker that holds
 *                                                                 requests but completes no step for
 *                                                                 max(this, 20 x its slowest recent
 *                                                                 step) is hung (killed if local,
 *                                                                 requests re-dispatched); 0 = off
 *   log_level                    string   info                    debug | info | warn | error
 *   keys_file                    string   (none)                  API keys file (gateway/keys.h);
 *                                                                 none = no authentication
 *   http_threads                 int      2                       1..256 HTTP worker threads
 *   http_idle_timeout_s          float    30                      1..86400 s; an idle HTTP connection
 *                                                                 is closed after this long
 *   header_timeout_s             float    10                      0.1..86400 s; a connection whose
 *                                                                 request headers are not complete
 *                                                                 this long after it opened is closed
 *   body_timeout_s               float    60                      0.1..86400 s; a request body not
 *                                                                 complete this long after its headers:
 *                                                                 the connection is closed
 *   body_min_rate                int      1024                    0..1073741824 bytes/s a request body
 *                                                                 must bring over each window (the
 *                                                                 first one is the grace period), else
 *                                                                 the connection is closed; 0 = off
 *   body_rate_window_s           float    10                      0.1..3600 s, that window
 *   allowed_hosts                string   (none)                  Host header names accepted besides IP
 *                                                                 addresses, localhost and the listen
 *                                                                 host: "NAME[,NAME...]", each a name,
 *                                                                 *.SUFFIX or * (any); another Host gets
 *                                                                 421 (DNS rebinding)
 *   worker_bin                   string   (none)                  worker executable for local workers;
 *                                                                 none = pagoda-worker next to the gateway
 *   drain_timeout_s              float    30                      0..86400 s; on SIGTERM, how long
 *                                                                 requests in flight may finish (new
 *                                                                 ones get 503 meanwhile)
 *   lora_timeout_s               float    60                      0.1..86400 s; how long a run-time
 *                                                                 adapter load/unload (/admin) waits
 *                                                                 for the workers: then 504, undone
 *   cors_origins                 string   (none)                  browser origins allowed to call the API
 *                                                                 (CORS): "ORIGIN[,ORIGIN...]", each * or
 *                                                                 http[s]://HOST[:PORT]; a request whose
 *                                                                 Origin header is not listed gets 403
 *   admin_open                   bool     false                   without keys_file, serve the /admin/...
 *                                                                 operations routes to anyone (else 403);
 *                                                                 ignored with keys_file
 *   no_ui                        bool     false                   true: do not serve the web console
 *                                                                 (GET /ui/, gateway/ui.h)
 *   reasoning_parser             string   none                    none | qwen3: split <think>...</think>
 *                                                                 at the start of chat answers into
 *                                                                 reasoning_content (gateway/reasoning.h)
 *   keep_volatile_blocks         bool     false                   true: keep the volatile prompt blocks
 *                                                                 agents send (gateway/volatile_block.h:
 *                                                                 Claude Code's billing header), which
 *                                                                 are dropped before templating so a
 *                                                                 new conversation reuses the cache
 *   state_dir                    string   (see right)             directory of responses.sqlite3 (stored
 *                                                                 Responses API responses) or ":memory:";
 *                                                                 none = $STATE_DIRECTORY, else
 *                                                                 $XDG_STATE_HOME/pagoda, else
 *                                                                 ~/.local/state/pagoda
 *   responses_max_age_s          float    2592000 (30 days)       1..315360000 s; older responses deleted
 *   responses_max_bytes          int      1073741824              4096..2^40 bytes of stored responses
 *                                                                 (all keys); a store over it evicts
 *                                                                 its own key's oldest, else is refused
 *   responses_key_max_bytes      int      67108864 (64 MiB)       4096..2^40 stored bytes per API key;
 *                                                                 that key's oldest are evicted beyond
 *   responses_key_max_count      int      10000                   1..2^31 stored responses per API key
 *   responses_store_wait_ms      int      2000                    1..600000 ms a store may wait for the
 *                                                                 database's write lock (then the
 *                                                                 answer says store: false)
 *   queue.max_per_model          int      1024                    1..1000000 queued requests per
 *                                                                 model; beyond it: 429 + Retry-After
 *   queue.aging_per_s            float    1/30 (0.0333…)          0..1000 priority levels gained per
 *                                                                 second waited (tiers are 1 apart:
 *                                                                 a low request that waited 30 s ranks
 *                                                                 like a fresh normal one, 60 s like a
 *                                                                 fresh high one; prio_queue.h)
 *   queue.default_timeout_s      float    600                     0.001..86400 s; a request not finished
 *                                                                 by then ends with 504
 *   queue.replica_grace_s        float    30                      0.001..86400 s a configured model may
 *                                                                 have no worker before its requests
 *                                                                 get 503 (not while a local worker
 *                                                                 of it is (re)starting)
 *   queue.max_redispatch         int      2                       0..1000 worker losses a request
 *                                                                 survives (re-dispatched each time);
 *                                                                 one more gets 502 worker_lost
 *   limits.max_body_bytes        int      16777216                1024..1073741824 HTTP body (413)
 *   limits.max_messages          int      1024                    1..1024 (OAI_MAX_MESSAGES) chat
 *                                                                 messages per request (400)
 *   limits.max_prompt_bytes      int      4194304                 1..4194304 (OAI_MAX_TEXT_BYTES)
 *                                                                 prompt / message text (400)
 *   limits.max_uploads           int      256                     1..1000000 requests whose body is
 *                                                                 still arriving, all clients (503)
 *   limits.max_uploads_per_ip    int      32                      1..1000000 the same per client
 *                                                                 address, IPv6 by /64 (429)
 *   limits.rate_per_key          float    0                       0..1000000 requests/s per API key;
 *                                                                 0 = unlimited [pending: parsed, not
 *                                                                 enforced yet; the gateway warns]
 *   restart.backoff_initial_ms   int      500                     1..3600000 first restart delay of a
 *                                                                 crashed local worker; doubles
 *   restart.backoff_max_ms       int      30000                   1..3600000, ≥ backoff_initial_ms
 *   restart.crash_loop_restarts  int      5                       1..64 restarts within
 *   restart.crash_loop_window_s  float    60                      0.001..86400 seconds → the model's
 *                                                                 local workers are FAILED (crash
 *                                                                 loop; logged; POST /admin/models/
 *                                                                 NAME/restart starts them again)
 *   curve.server_secret_key_file string   (none)                  Z85 CURVE secret key of the gateway
 *   curve.authorized_worker_keys_file string (none)               Z85 public keys of allowed workers
 *   curve.allow_plain_tcp        bool     false                   allow a tcp:// worker_endpoint that is
 *                                                                 not loopback without CURVE (trusted
 *                                                                 networks only)
 *   routing.mode                 string   cache-aware             cache-aware | least-loaded: send a
 *                                                                 request to the replica holding its
 *                                                                 prefix, or to the least-loaded one
 *                                                                 (gateway/route.h)
 *   routing.max_load_gap         int      4                       1..65536 requests more than the
 *                                                                 least-loaded replica the one holding
 *                                                                 the prefix may have
 *   routing.index_entries        int      262144                  1..67108864 block keys in the
 *                                                                 gateway's routing index (32 B each)
 *   images.max_bytes             int      20971520 (20 MiB)       1..20971520 bytes of one image file
 *                                                                 as sent (after base64); 400 beyond
 *   images.max_pixels            int      50000000                1..50000000 width × height of one
 *                                                                 image as its header states; 400
 *                                                                 beyond, before any pixel is decoded
 *   images.max_images            int      8                       1..8 images in one request; 400 beyond
 *   images.url_allow             string   (none)                  hosts remote http(s) image URLs may
 *                                                                 name, "HOST[:PORT],..." (IP literals,
 *                                                                 [IPV6]:PORT, *.SUFFIX); none = every
 *                                                                 remote URL gets 400 (gateway/image_fetch.h)
 *   images.url_timeout_ms        int      10000                   1..600000 the whole fetch of one URL
 *   models                       list     []                      at most CONFIG_MAX_MODELS entries:
 *     name                       string   (required)              1..128 of [A-Za-z0-9._:/-], starting
 *                                                                 with a letter or digit; unique
 *     path                       string   (required)              GGUF file (as the worker sees it)
 *     replicas                   int      1                       0..64 local workers the gateway spawns
 *                                                                 and supervises; 0 = only remote
 *                                                                 workers serve this model
 *     on_demand                  bool     false                   start on first request, stop after
 *                                                                 idle_timeout_s (needs replicas ≥ 1)
 *     idle_timeout_s             float    300                     0.001..604800 s
 *     standby                    bool     true                    on_demand: while stopped, keep a standby
 *                                                                 process with the model loaded (no KV,
 *                                                                 no packed weights, not connected) that
 *                                                                 a request starts (docs/OPERATIONS.md)
 *     kv_blocks                  int      0                       0..16777216 KV blocks (32 tokens
 *                                                                 each); 0 = derive from kv_budget_mb
 *     kv_budget_mb               int      0                       0..1048576 MiB for the KV pool; 0 =
 *                                                                 sized at the worker's start from free
 *                                                                 memory, the weights and max_seqs full
 *                                                                 contexts (docs/OPERATIONS.md)
 *     max_seqs                   int      32                      1..4096 sequences batched at once
 *     max_batch_tokens           int      512                     1..65536 tokens per step
 *     step_budget_ms             int      -1                      -1..600000 step time target while streams
 *                                                                 decode: -1 auto (2x their decode-only
 *                                                                 step), 0 off (token budget only)
 *     threads                    int      2                       1..256 compute threads
 *     kv_type                    string   auto                    auto, f16, f32 or q8_0: KV cache element type
 *     kv_cache_dir               string   (none)                  the workers' disk tier under the prefix
 *                                                                 cache (worker --kv-cache-dir)
 *     kv_cache_mb                int      4096                    1..2^30 MiB, its size cap
 *     spec                       string   off                     off, ngram or draft: speculative decoding
 *                                                                 (worker --spec, docs/BATCHING.md)
 *     draft_model                string   (none)                  spec draft: the draft model's GGUF
 *                                                                 (same vocabulary; worker --draft-model)
 *     spec_max_draft             int      8                       1..16 draft tokens per sequence and step
 *     mmproj                     string   (none)                  the vision encoder's GGUF beside the model
 *                                                                 (llama.cpp mmproj; worker --mmproj)
 *                                                                 (f16 halves the KV memory per token)
 *     loras                      list     []                      at most CONFIG_MAX_LORAS adapters, each
 *                                                                 a model name of its own on this model's
 *                                                                 workers (worker --lora NAME=FILE:SCALE):
 *       name                     string   (required)              as models[].name; unique among models
 *                                                                 and adapters
 *       file                     string   (required)              the adapter's GGUF (llama.cpp layout)
 *       scale                    float    1                       -100..100 default scale
 *   (the model settings are the local workers' --kv-blocks (or --kv-budget-mb
 *   when kv_blocks is 0), --max-seqs, --max-batch-tokens, --threads,
 *   --kv-type; their ranges are the worker's)
 *
 * Cross-field rules (config_check; the file parser applies them too):
 *   - restart.backoff_max_ms ≥ restart.backoff_initial_ms
 *   - curve.server_secret_key_file and curve.authorized_worker_keys_file are
 *     set together or not at all
 *   - a tcp:// worker_endpoint whose host is not loopback (127.0.0.0/8,
 *     localhost, [::1]) needs both CURVE files or curve.allow_plain_tcp: true
 *     (an open worker port lets anyone register as a worker and read prompts)
 *   - on_demand: true needs replicas ≥ 1
 *   - an adapter's name is no model's name and no other adapter's
 *
 * ---- Errors -----------------------------------------------------------------
 *
 * Every error is one line "SOURCE:LINE:COLUMN: PATH: reason", LINE and COLUMN
 * 1-based, PATH the dotted key ("models[0].replicas"), e.g.
 *     config.yaml:12:15: models[0].replicas: expected an integer in 0..64, got '-1'
 *     config.yaml:3:1: unknown key 'listne' (did you mean 'listen'?)
 * YAML syntax errors read "SOURCE:LINE:COLUMN: YAML syntax: problem (context)".
 * Errors of values set with config_set/config_model_set read "--KEY: reason";
 * config_check's read "config: KEY: reason" (no position: values may come
 * from flags).
 * Messages are truncated to the caller's buffer, always NUL-terminated.
 *
 * ---- Ownership ----------------------------------------------------------------
 *
 * A config_t owns all its strings; free it with config_free. It is plain data,
 * not thread-safe to modify, safe to read from many threads once built.
 */
#ifndef PAGODA_GATEWAY_CONFIG_H
#define PAGODA_GATEWAY_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CONFIG_MAX_BYTES (1u << 20)   /* largest config file */
#define CONFIG_MAX_MODELS 256
#define CONFIG_MAX_STRING 4096        /* bytes of any string value, without NUL */
#define CONFIG_MAX_NAME 128           /* bytes of a model name */
#define CONFIG_DEFAULT_MAX_BODY (16u << 20) /* limits.max_body_bytes */

/* models[].kv_type values (the worker's --kv-type names). */
typedef enum config_kv_type {
    CONFIG_KV_F16 = 0,
    CONFIG_KV_F32 = 1,
    CONFIG_KV_AUTO = 2, /* the worker picks: f16 for quantized K/V weights, else f32 */
    CONFIG_KV_Q8_0 = 3, /* int8 quants + f16 scale per block of 32 */
    CONFIG_KV_N
} config_kv_type_t;

/* "f16" / "f32" / "auto" / "q8_0" for a config_kv_type_t ("auto" for anything else). */
const char *config_kv_type_name(int t);
/* "off" / "ngram" / "draft" for models[].spec ("off" for anything else). */
const char *config_spec_name(int t);

/* One LoRA adapter of a model (models[].loras, --lora NAME=FILE[:SCALE]):
 * a model name of its own that runs on its base model's workers. */
typedef struct config_lora {
    char *name;                /* the model name clients put in "model"; unique among
                                  models and adapters; the worker's --lora NAME */
    char *file;                /* adapter GGUF (as the worker sees it) */
    double scale;              /* default scale of its updates, worker --lora NAME=FILE:SCALE */
} config_lora_t;
#define CONFIG_MAX_LORAS 64    /* adapters per model: the worker's limit (docs/OPERATIONS.md) */

typedef struct config_model {
    char *name;                /* routing name clients put in "model" */
    char *path;                /* GGUF file path, passed to the worker as --model NAME=PATH */
    int replicas;              /* local workers to spawn, 0 = remote only */
    bool on_demand;            /* spawn on first request, stop when idle */
    double idle_timeout_s;     /* idle time before an on-demand model is stopped, s */
    bool standby;              /* on_demand: keep a standby process while stopped */
    int kv_blocks;             /* worker --kv-blocks; 0 = derived from kv_budget_mb */
    int kv_budget_mb;          /* KV pool budget, MiB (used when kv_blocks == 0); 0 = the
                                * worker sizes it from memory (worker/kv_budget.h) */
    int max_seqs;              /* worker --max-seqs */
    int max_batch_tokens;      /* worker --max-batch-tokens */
    int step_budget_ms;        /* worker --step-budget-ms: -1 auto, 0 off, else ms */
    int threads;               /* worker --threads */
    int kv_type;               /* worker --kv-type, a config_kv_type_t */
    char *kv_cache_dir;        /* worker --kv-cache-dir, NULL = no disk tier */
    int kv_cache_mb;           /* worker --kv-cache-mb */
    int spec;                  /* worker --spec: 0 off, 1 ngram, 2 draft (config_spec_name) */
    char *draft_model;         /* worker --draft-model (spec draft), NULL = none */
    int spec_max_draft;        /* worker --spec-max-draft */
    char *mmproj;              /* worker --mmproj: the vision encoder's GGUF (llama.cpp mmproj),
                                  NULL = text only */
    config_lora_t *loras;      /* (n_loras) adapters, passed to its local workers as --lora */
    size_t n_loras;
    int line;                  /* 1-based line of its entry in the file, 0 = from a flag */
} config_model_t;

typedef struct config_queue {
    int max_per_model;         /* bound of each model's queue, requests */
    double aging_per_s;        /* tier levels gained per second of waiting */
    double default_timeout_s;  /* deadline of a request without its own, s */
    double replica_grace_s;    /* a configured model with no worker this long → 503, s */
    int max_redispatch;        /* worker losses a request survives (then 502); 0 = none */
} config_queue_t;

typedef struct config_limits {
    int64_t max_body_bytes;    /* HTTP request body, bytes */
    int max_messages;          /* chat messages per request */
    int64_t max_prompt_bytes;  /* prompt / all message contents, bytes */
    double rate_per_key;       /* requests per second per API key, 0 = unlimited */
    int max_uploads;           /* request bodies arriving at once, all clients */
    int max_uploads_per_ip;    /* the same from one client address */
} config_limits_t;

typedef struct config_images {
    int64_t max_bytes;         /* compressed bytes per image (after base64), ≤ IMAGE_MAX_BYTES_DEFAULT */
    int64_t max_pixels;        /* w·h of a file before fitting, ≤ IMAGE_MAX_PIXELS_DEFAULT */
    int max_images;            /* images per request, ≤ REQUEST_MAX_IMAGES */
    /* remote image URLs (gateway/image_fetch.h) */
    char *url_allow;           /* hosts fetched from, "HOST[:PORT],*.SUFFIX"; NULL = none (refused) */
    int url_timeout_ms;        /* the whole fetch of one URL */
} config_images_t;

typedef struct config_restart {
    int backoff_initial_ms;    /* first delay before restarting a crashed worker */
    int backoff_max_ms;        /* ceiling of the doubling delay */
    int crash_loop_restarts;   /* this many restarts within ... */
    double crash_loop_window_s;/* ... this window (s) = crash loop: give up on the replica */
} config_restart_t;

typedef struct config_curve {
    char *server_secret_key_file;      /* NULL = no CURVE */
    char *authorized_worker_keys_file; /* NULL = no CURVE */
    bool allow_plain_tcp;              /* see the cross-field rules above */
} config_curve_t;

typedef struct config_routing {
    int mode;                  /* route_mode_t (gateway/route.h): 0 cache-aware, 1 least-loaded */
    int max_load_gap;          /* requests more than the least-loaded replica a cache hit may have */
    int index_entries;         /* block keys the routing index holds */
} config_routing_t;

typedef struct config {
    char *listen;              /* "HOST:PORT" as given */
    char *listen_host;         /* HOST without brackets ("::1" for "[::1]:8080") */
    int listen_port;           /* 0..65535 */
    char *worker_endpoint;     /* "tcp://HOST:PORT" or "ipc://PATH" */
    int heartbeat_ms;
    int progress_timeout_ms;   /* floor of the progress deadline, ms; 0 = off */
    int log_level;             /* enum log_level (common/log.h) */
    char *keys_file;           /* NULL = no API keys */
    int http_threads;          /* libmicrohttpd thread pool */
    double http_idle_timeout_s;/* close an idle HTTP connection after this long, s */
    double header_timeout_s;   /* close a connection whose request headers are not complete
                                  this long after it opened (slowloris), s */
    double body_timeout_s;     /* close a connection whose request body is not complete this
                                  long after its headers, s */
    int64_t body_min_rate;     /* bytes/s a body must bring per body_rate_window_s, 0 = off */
    double body_rate_window_s; /* s */
    char *allowed_hosts;       /* Host names accepted besides IPs and localhost, "A,B"; NULL = none */
    char *worker_bin;          /* NULL = pagoda-worker next to the gateway binary */
    double drain_timeout_s;    /* SIGTERM: how long requests in flight may finish, s */
    double lora_timeout_s;     /* run-time adapter load/unload: the workers' answers' wait, s */
    char *cors_origins;        /* browser origins allowed (CORS), "A,B"; NULL = none */
    bool admin_open;           /* without keys_file, /admin/... answer anyone (else 403) */
    bool no_ui;                /* the web console (GET /ui/) is not served */
    int reasoning_parser;      /* reasoning_parser_t: 0 none, 1 qwen3 */
    bool keep_volatile_blocks; /* keep agents' volatile prompt blocks (volatile_block.h) */
    char *state_dir;           /* stored responses' directory, ":memory:", NULL = the default
                                  ($STATE_DIRECTORY, $XDG_STATE_HOME/pagoda, ~/.local/state/pagoda) */
    double responses_max_age_s;/* stored responses older than this are deleted, s */
    int64_t responses_max_bytes; /* stored responses' bytes, all keys (resp_store.h) */
    int64_t responses_key_max_bytes; /* per API key */
    int64_t responses_key_max_count; /* responses per API key */
    int64_t responses_store_wait_ms; /* a store's wait for the write lock */
    config_queue_t queue;
    config_limits_t limits;
    config_restart_t restart;
    config_curve_t curve;
    config_routing_t routing;
    config_images_t images;
    config_model_t *models;    /* (n_models), in file order, then flag order */
    size_t n_models;
} config_t;

/* A config holding only the defaults (no models). Never NULL. */
config_t *config_default(void);

/* Parses a YAML document held in memory (need not be NUL-terminated) on top
 * of the defaults. `source` names the input in error messages (NULL =
 * "config"). Returns 0 and sets *out (free with config_free), or -1 with *out
 * NULL and the reason in err. Never reads files: safe to fuzz. */
int config_parse(const uint8_t *buf, size_t len, const char *source, config_t **out, char *err,
                 size_t errlen);

/* Reads `path` (at most CONFIG_MAX_BYTES) and parses it; errors name the path. */
int config_load(const char *path, config_t **out, char *err, size_t errlen);

/* Frees everything and NULLs *c. NULL-safe. */
void config_free(config_t **c);

/* Sets one scalar key by its dotted path (e.g. "limits.max_messages") from
 * its YAML spelling. Models cannot be set this way (config_model_set). An empty
 * value unsets an optional string (keys_file, curve.*_file). Returns 0, or -1
 * with err "--KEY: reason" and *c unchanged. */
int config_set(config_t *c, const char *key, const char *value, char *err, size_t errlen);

/* --model NAME=PATH: changes the path of the model called NAME, or appends a
 * model with default settings. Returns 0, or -1 with err and *c unchanged. */
int config_model_set(config_t *c, const char *name_eq_path, char *err, size_t errlen);

/* Sets a per-model scalar key ("max_seqs", "threads", "replicas", ...) on
 * the model called `model`, or on every model present when model is NULL
 * (an optional string key, "mmproj", only on a named model),
 * from its YAML spelling (flags such as --max-seqs that apply to all local
 * workers, --on-demand NAME). The value is validated even when there is no
 * model. Returns 0, or -1 with err "--models.KEY: reason" (also for an
 * unknown model) and *c unchanged. */
int config_models_set(config_t *c, const char *model, const char *key, const char *value,
                      char *err, size_t errlen);

/* --lora NAME=FILE[:SCALE]: adds an adapter to the model called `model`
 * (the closest preceding --model), or with model NULL to the last model (the
 * file's last). Returns 0, or -1 with err "--lora SPEC: reason" and *c
 * unchanged. */
int config_lora_add(config_t *c, const char *model, const char *spec, char *err, size_t errlen);

/* The model called `name`, or NULL. */
const config_model_t *config_model_find(const config_t *c, const char *name);

/* Cross-field rules (listed above) over the final configuration. Returns 0 or
 * -1 with err. config_parse already applied them with file positions; call
 * this again after flags. */
int config_check(const config_t *c, char *err, size_t errlen);

/* The configuration as a YAML document that config_parse reads back to the
 * same values (every key written, strings double-quoted). Returns a malloc'd
 * NUL-terminated string (caller frees with free()), *len = strlen if non-NULL.
 * For --print-config and round-trip tests. */
char *config_format(const config_t *c, size_t *len);

#endif
