/* Unit tests for gateway/config: a full valid file read field by field, the
 * documented defaults (config.h) when keys are absent, a table of invalid
 * files with the line:column each error must name, flag overrides
 * (config_set / config_model_set), cross-field checks after flags, the
 * format → parse round trip, file loading, and the shipped example configs
 * (deploy/pagoda.example.yaml, deploy/k8s/pagoda.yaml). Expected values are
 * written here from the YAML text and the header's table, never read back
 * from the code under test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "gateway/config.h"
#include "gateway/gateway.h"
#include "gateway/oai.h"
#include "gateway/prio_queue.h"
#include "gateway/supervisor.h"

/* ---- helpers ------------------------------------------------------------ */

/* Parses from an exactly-sized heap copy (no NUL after the data), so an
 * over-read shows up under ASan. */
static int parse_str(const char *yaml, config_t **out, char *err, size_t errlen)
{
    size_t n = strlen(yaml);
    uint8_t *buf = malloc(n ? n : 1);
    memcpy(buf, yaml, n);
    int rc = config_parse(buf, n, "config.yaml", out, err, errlen);
    free(buf);
    return rc;
}

static config_t *parse_ok(const char *yaml)
{
    config_t *c = NULL;
    char err[512] = "";
    int rc = parse_str(yaml, &c, err, sizeof err);
    if (rc != 0)
        print_error("unexpected error: %s\n", err);
    assert_int_equal(rc, 0);
    assert_non_null(c);
    return c;
}

static const char *FULL =
    "# a complete file\n"
    "listen: 0.0.0.0:9090\n"
    "worker_endpoint: tcp://10.1.2.3:6000\n"
    "heartbeat_ms: 250\n"
    "log_level: debug\n"
    "keys_file: /etc/pagoda/keys          # optional\n"
    "queue: { max_per_model: 64, aging_per_s: 0.25, default_timeout_s: 120, replica_grace_s: 2.5 }\n"
    "http_threads: 6\n"
    "worker_bin: /opt/pagoda/bin/pagoda-worker\n"
    "limits: { max_body_bytes: 2097152, max_messages: 99, max_prompt_bytes: 65536, rate_per_key: 2.5 }\n"
    "images: { max_bytes: 1048576, max_pixels: 4000000, max_images: 3 }\n"
    "restart: { backoff_initial_ms: 250, backoff_max_ms: 8000, crash_loop_restarts: 7, crash_loop_window_s: 90 }\n"
    "drain_timeout_s: 45\n"
    "lora_timeout_s: 7.5\n"
    "cors_origins: 'http://localhost:3000, https://app.example.com:8443'\n"
    "admin_open: true\n"
    "curve:\n"
    "  server_secret_key_file: /etc/pagoda/curve/server.key\n"
    "  authorized_worker_keys_file: '/etc/pagoda/curve/workers'\n"
    "  allow_plain_tcp: false\n"
    "models:\n"
    "  - name: tinyllama\n"
    "    path: /var/lib/pagoda/tinyllama.Q8_0.gguf\n"
    "    replicas: 3\n"
    "    on_demand: true\n"
    "    standby: false\n"
    "    idle_timeout_s: 1.5\n"
    "    kv_blocks: 4096\n"
    "    kv_budget_mb: 2048\n"
    "    max_seqs: 16\n"
    "    max_batch_tokens: 1024\n"
    "    step_budget_ms: 300\n"
    "    threads: 8\n"
    "    kv_type: f32\n"
    "    kv_cache_dir: /var/cache/pagoda/kv\n"
    "    kv_cache_mb: 8192\n"
    "  - {name: \"meta-llama/Llama-3.2-1B\", path: \"/models/with space.gguf\", replicas: 0}\n"
    "routing: {mode: least-loaded, max_load_gap: 2, index_entries: 1000}\n"
    "allowed_hosts: 'pagoda.internal, *.svc.cluster.local'\n"
    "body_timeout_s: 20\n"
    "body_min_rate: 512\n"
    "body_rate_window_s: 5\n";

/* ---- valid files ---------------------------------------------------------- */

static void test_full_file(void **state)
{
    (void)state;
    config_t *c = parse_ok(FULL);
    assert_string_equal(c->listen, "0.0.0.0:9090");
    assert_string_equal(c->listen_host, "0.0.0.0");
    assert_int_equal(c->listen_port, 9090);
    assert_string_equal(c->worker_endpoint, "tcp://10.1.2.3:6000");
    assert_int_equal(c->heartbeat_ms, 250);
    assert_int_equal(c->log_level, LOG_DEBUG);
    assert_string_equal(c->keys_file, "/etc/pagoda/keys");
    assert_int_equal(c->queue.max_per_model, 64);
    assert_true(c->queue.aging_per_s == 0.25);
    assert_true(c->queue.default_timeout_s == 120);
    assert_true(c->queue.replica_grace_s == 2.5);
    assert_int_equal(c->http_threads, 6);
    assert_string_equal(c->worker_bin, "/opt/pagoda/bin/pagoda-worker");
    assert_int_equal(c->limits.max_body_bytes, 2097152);
    assert_int_equal(c->limits.max_messages, 99);
    assert_int_equal(c->limits.max_prompt_bytes, 65536);
    assert_true(c->limits.rate_per_key == 2.5);
    assert_int_equal(c->images.max_bytes, 1048576);
    assert_int_equal(c->images.max_pixels, 4000000);
    assert_int_equal(c->images.max_images, 3);
    assert_int_equal(c->restart.backoff_initial_ms, 250);
    assert_int_equal(c->restart.backoff_max_ms, 8000);
    assert_int_equal(c->restart.crash_loop_restarts, 7);
    assert_true(c->restart.crash_loop_window_s == 90);
    assert_int_equal(c->drain_timeout_s, 45);
    assert_true(c->lora_timeout_s == 7.5);
    assert_string_equal(c->cors_origins, "http://localhost:3000, https://app.example.com:8443");
    assert_string_equal(c->allowed_hosts, "pagoda.internal, *.svc.cluster.local");
    assert_true(c->body_timeout_s == 20);
    assert_int_equal(c->body_min_rate, 512);
    assert_true(c->body_rate_window_s == 5);
    assert_true(c->admin_open);
    assert_string_equal(c->curve.server_secret_key_file, "/etc/pagoda/curve/server.key");
    assert_string_equal(c->curve.authorized_worker_keys_file, "/etc/pagoda/curve/workers");
    assert_false(c->curve.allow_plain_tcp);
    assert_int_equal(c->routing.mode, ROUTE_LEAST_LOADED);
    assert_int_equal(c->routing.max_load_gap, 2);
    assert_int_equal(c->routing.index_entries, 1000);

    assert_int_equal(c->n_models, 2);
    const config_model_t *m = &c->models[0];
    assert_string_equal(m->name, "tinyllama");
    assert_string_equal(m->path, "/var/lib/pagoda/tinyllama.Q8_0.gguf");
    assert_int_equal(m->replicas, 3);
    assert_true(m->on_demand);
    assert_false(m->standby);
    assert_true(m->idle_timeout_s == 1.5);
    assert_int_equal(m->kv_blocks, 4096);
    assert_int_equal(m->kv_budget_mb, 2048);
    assert_int_equal(m->max_seqs, 16);
    assert_int_equal(m->max_batch_tokens, 1024);
    assert_int_equal(m->step_budget_ms, 300);
    assert_int_equal(m->threads, 8);
    assert_int_equal(m->kv_type, CONFIG_KV_F32);
    assert_string_equal(m->kv_cache_dir, "/var/cache/pagoda/kv");
    assert_int_equal(m->kv_cache_mb, 8192);
    assert_int_equal(m->line, 22);
    m = &c->models[1];
    assert_null(m->kv_cache_dir); /* no disk tier unless asked */
    assert_int_equal(m->kv_cache_mb, 4096);
    assert_string_equal(m->name, "meta-llama/Llama-3.2-1B");
    assert_string_equal(m->path, "/models/with space.gguf");
    assert_int_equal(m->replicas, 0);
    assert_int_equal(m->line, 37); /* two lines down: "standby: false" and "step_budget_ms" above */
    /* unspecified keys of the flow-style entry keep their defaults */
    assert_int_equal(m->max_seqs, 32);
    assert_int_equal(m->kv_type, CONFIG_KV_AUTO);
    assert_int_equal(m->threads, 2);

    assert_ptr_equal(config_model_find(c, "tinyllama"), &c->models[0]);
    assert_ptr_equal(config_model_find(c, "meta-llama/Llama-3.2-1B"), &c->models[1]);
    assert_null(config_model_find(c, "tiny"));
    char err[256];
    assert_int_equal(config_check(c, err, sizeof err), 0);
    config_free(&c);
    assert_null(c);
    config_free(&c); /* NULL-safe */
}

/* The defaults documented in config.h's table. */
static void check_defaults(const config_t *c)
{
    assert_string_equal(c->listen, "127.0.0.1:8080");
    assert_string_equal(c->listen_host, "127.0.0.1");
    assert_int_equal(c->listen_port, 8080);
    assert_string_equal(c->worker_endpoint, "tcp://127.0.0.1:5557");
    assert_int_equal(c->heartbeat_ms, 1000);
    assert_int_equal(c->log_level, LOG_INFO);
    assert_null(c->keys_file);
    assert_int_equal(c->drain_timeout_s, 30);
    assert_true(c->lora_timeout_s == 60);
    assert_null(c->cors_origins); /* no browser origin, /admin closed without keys */
    assert_false(c->admin_open);
    assert_int_equal(c->http_threads, 2);
    assert_null(c->worker_bin);
    assert_int_equal(c->queue.max_per_model, 1024);
    assert_true(c->queue.aging_per_s == 1.0 / 30.0);
    assert_true(c->queue.default_timeout_s == 600);
    assert_true(c->queue.replica_grace_s == 30);
    assert_int_equal(c->limits.max_body_bytes, 16777216);
    assert_int_equal(c->limits.max_messages, 1024);
    assert_int_equal(c->limits.max_prompt_bytes, 4194304);
    assert_true(c->limits.rate_per_key == 0.0);
    assert_int_equal(c->limits.max_uploads, 256);
    assert_int_equal(c->limits.max_uploads_per_ip, 32);
    assert_null(c->allowed_hosts); /* IP addresses, localhost and the listen host only */
    assert_true(c->body_timeout_s == 60);
    assert_int_equal(c->body_min_rate, 1024);
    assert_true(c->body_rate_window_s == 10);
    assert_int_equal(c->restart.backoff_initial_ms, 500);
    assert_int_equal(c->restart.backoff_max_ms, 30000);
    assert_int_equal(c->restart.crash_loop_restarts, 5);
    assert_true(c->restart.crash_loop_window_s == 60);
    assert_null(c->curve.server_secret_key_file);
    assert_null(c->curve.authorized_worker_keys_file);
    assert_false(c->curve.allow_plain_tcp);
    assert_int_equal(c->routing.mode, ROUTE_CACHE_AWARE);
    assert_int_equal(c->routing.max_load_gap, ROUTE_DEFAULT_MAX_LOAD_GAP);
    assert_int_equal(c->routing.index_entries, PREFIX_INDEX_DEFAULT_ENTRIES);
    assert_int_equal(c->images.max_bytes, 20 << 20); /* 20 MiB, 50 MP, 8: the decoder's own limits */
    assert_int_equal(c->images.max_pixels, 50000000);
    assert_int_equal(c->images.max_images, 8);
    /* a gateway started without a file behaves as with one: the defaults are
     * the runtime modules' own */
    prio_queue_config_t q;
    prio_queue_config_default(&q);
    assert_true(c->queue.aging_per_s == q.aging_per_s);
    assert_int_equal(c->queue.max_per_model, GATEWAY_DEFAULT_MAX_QUEUE);
    assert_true(c->queue.default_timeout_s == GATEWAY_DEFAULT_TIMEOUT_S);
    assert_true(c->queue.replica_grace_s == GATEWAY_DEFAULT_GRACE_S);
    assert_int_equal(c->limits.max_messages, OAI_MAX_MESSAGES);
    assert_int_equal(c->limits.max_prompt_bytes, OAI_MAX_TEXT_BYTES);
    assert_int_equal(c->heartbeat_ms, PROTO_HEARTBEAT_MS);
    assert_int_equal(c->restart.backoff_initial_ms, SUPERVISOR_BACKOFF_MIN_MS);
    assert_int_equal(c->restart.backoff_max_ms, SUPERVISOR_BACKOFF_MAX_MS);
    assert_int_equal(c->restart.crash_loop_restarts, SUPERVISOR_FAIL_RESTARTS);
    assert_true(c->restart.crash_loop_window_s * 1000 == SUPERVISOR_FAIL_WINDOW_MS);
}

static void check_model_defaults(const config_model_t *m)
{
    assert_int_equal(m->replicas, 1);
    assert_false(m->on_demand);
    assert_true(m->standby);
    assert_true(m->idle_timeout_s == 300);
    assert_int_equal(m->kv_blocks, 0);
    assert_int_equal(m->kv_budget_mb, 0); /* sized from memory */
    assert_int_equal(m->max_seqs, 32);
    assert_int_equal(m->max_batch_tokens, 512);
    assert_int_equal(m->step_budget_ms, -1); /* auto */
    assert_int_equal(m->threads, 2);
    assert_int_equal(m->kv_type, CONFIG_KV_AUTO);
    assert_string_equal(config_kv_type_name(m->kv_type), "auto");
}

static void test_defaults(void **state)
{
    (void)state;
    /* empty file, comment-only file, a null document, and empty sections */
    static const char *const empties[] = {
        "", "# nothing here\n", "---\n...\n", "~\n",
        "queue: {}\nlimits: {}\nrestart: {}\ncurve: {}\nmodels: []\n",
        "keys_file:\ncurve: {server_secret_key_file: ~, authorized_worker_keys_file: null}\n",
    };
    for (size_t i = 0; i < sizeof empties / sizeof empties[0]; i++) {
        config_t *c = parse_ok(empties[i]);
        check_defaults(c);
        assert_int_equal(c->n_models, 0);
        config_free(&c);
    }
    config_t *c = config_default();
    check_defaults(c);
    assert_int_equal(c->n_models, 0);
    config_free(&c);

    c = parse_ok("models:\n  - name: m\n    path: m.gguf\n");
    check_defaults(c);
    assert_int_equal(c->n_models, 1);
    assert_string_equal(c->models[0].name, "m");
    assert_string_equal(c->models[0].path, "m.gguf");
    check_model_defaults(&c->models[0]);
    config_free(&c);

    /* a partial section changes only what it names */
    c = parse_ok("queue:\n  max_per_model: 7\n");
    assert_int_equal(c->queue.max_per_model, 7);
    assert_true(c->queue.aging_per_s == 1.0 / 30.0);
    assert_true(c->queue.default_timeout_s == 600);
    config_free(&c);
}

static void test_valid_edge_values(void **state)
{
    (void)state;
    config_t *c = parse_ok("listen: \"[::1]:0\"\n"
                           "worker_endpoint: ipc:///run/pagoda/workers.sock\n"
                           "heartbeat_ms: 10\n"
                           "log_level: \"error\"\n"
                           "queue: {aging_per_s: 0, max_per_model: 1000000}\n"
                           "limits: {rate_per_key: 1.5e2, max_body_bytes: 1024}\n"
                           "restart: {backoff_initial_ms: 100, backoff_max_ms: 100}\n"
                           "drain_timeout_s: 0\n"
                           "models:\n"
                           "- name: Qwen2.5-0.5B:q8_0\n"
                           "  path: x\n"
                           "  replicas: 64\n"
                           "  on_demand: True\n"
                           "  kv_blocks: 16777216\n");
    assert_string_equal(c->listen_host, "::1");
    assert_int_equal(c->listen_port, 0);
    assert_string_equal(c->worker_endpoint, "ipc:///run/pagoda/workers.sock");
    assert_int_equal(c->heartbeat_ms, 10);
    assert_int_equal(c->log_level, LOG_ERROR);
    assert_true(c->queue.aging_per_s == 0.0);
    assert_int_equal(c->queue.max_per_model, 1000000);
    assert_true(c->limits.rate_per_key == 150.0);
    assert_int_equal(c->limits.max_body_bytes, 1024);
    assert_int_equal(c->drain_timeout_s, 0);
    assert_int_equal(c->models[0].replicas, 64);
    assert_true(c->models[0].on_demand);
    assert_int_equal(c->models[0].kv_blocks, 16777216);
    config_free(&c);

    /* loopback / wildcard endpoints that need no CURVE, and one that does but allows plain tcp */
    static const char *const ok_eps[] = {
        "worker_endpoint: tcp://localhost:5557\n",
        "worker_endpoint: tcp://127.0.0.2:*\n",
        "worker_endpoint: 'tcp://[::1]:5557'\n",
        "worker_endpoint: tcp://*:5557\ncurve: {allow_plain_tcp: true}\n",
        ("worker_endpoint: tcp://eth0:5557\ncurve: {server_secret_key_file: /s, "
         "authorized_worker_keys_file: /a}\n"),
    };
    for (size_t i = 0; i < sizeof ok_eps / sizeof ok_eps[0]; i++) {
        c = parse_ok(ok_eps[i]);
        config_free(&c);
    }
}

/* ---- invalid files ------------------------------------------------------------ */

typedef struct {
    const char *yaml;
    int line, col;       /* expected position; 0 = the error names no position */
    const char *needle;  /* must appear in the message */
} bad_case_t;

static const bad_case_t BAD[] = {
    /* unknown keys, with suggestions */
    {"listen: 127.0.0.1:8080\nlistne: x\n", 2, 1, "unknown key 'listne' (did you mean 'listen'?)"},
    {"queue:\n  max_per_modle: 5\n", 2, 3, "queue: unknown key 'max_per_modle' (did you mean 'max_per_model'?)"},
    {"models:\n  - name: a\n    path: /a\n    replica: 2\n", 4, 5, "models[0]: unknown key 'replica'"},
    {"max_seqs: 4\n", 1, 1, "unknown key 'max_seqs'"},
    /* integers */
    {"models:\n  - name: a\n    path: /a\n    replicas: -1\n", 4, 15,
     "models[0].replicas: expected an integer in 0..64, got '-1'"},
    {"models:\n  - name: a\n    path: /a\n  - name: b\n    path: /b\n    replicas: 65\n", 6, 15,
     "models[1].replicas: expected an integer in 0..64"},
    {"models:\n- name: a\n  path: /a\n  max_seqs: lots\n", 4, 13, "models[0].max_seqs: expected an integer"},
    {"models:\n- name: a\n  path: /a\n  kv_type: q4_0\n", 4, 12, "models[0].kv_type: expected f16 or f32 or auto or q8_0, got 'q4_0'"},
    {"models:\n- name: a\n  path: /a\n  kv_type: F16\n", 4, 12, "models[0].kv_type: expected f16 or f32 or auto or q8_0"},
    {"heartbeat_ms: \"100\"\n", 1, 15, "heartbeat_ms: expected an integer in 10..600000, got the quoted string"},
    {"heartbeat_ms: 5\n", 1, 15, "heartbeat_ms: expected an integer in 10..600000"},
    {"heartbeat_ms: 0x100\n", 1, 15, "heartbeat_ms: expected an integer"},
    {"limits: {max_body_bytes: 10}\n", 1, 26, "limits.max_body_bytes: expected an integer in 1024..1073741824"},
    {"drain_timeout_s: 99999999999999999999999\n", 1, 18, "drain_timeout_s: expected a number in 0..86400"},
    {"restart: {crash_loop_restarts: 65}\n", 1, 32, "restart.crash_loop_restarts: expected an integer in 1..64"},
    {"models:\n- {name: a, path: /a, idle_timeout_s: 0}\n", 2, 39, "models[0].idle_timeout_s: expected a number in 0.001..604800"},
    {"queue: {max_per_model: 99999999999999999999999}\n", 1, 24, "queue.max_per_model: expected an integer"},
    {"http_threads: 0\n", 1, 15, "http_threads: expected an integer in 1..256"},
    /* cors_origins: browser origins, no path, no trailing slash */
    {"cors_origins: http://a.example/\n", 1, 15, "cors_origins: 'http://a.example/' is not an origin"},
    {"cors_origins: 'http://a.example, ftp://b'\n", 1, 15, "cors_origins: 'ftp://b' is not an origin"},
    {"cors_origins: a.example\n", 1, 15, "cors_origins: 'a.example' is not an origin"},
    {"cors_origins: ' , '\n", 1, 15, "cors_origins: no origin given"},
    /* allowed_hosts: names, *.SUFFIX or *, no port or scheme */
    {"allowed_hosts: 'a.example:8080'\n", 1, 16, "allowed_hosts: 'a.example:8080' is not a host name"},
    {"allowed_hosts: 'ok.example, http://b'\n", 1, 16, "allowed_hosts: 'http://b' is not a host name"},
    {"allowed_hosts: '*.'\n", 1, 16, "allowed_hosts: '*.' is not a host name"},
    {"allowed_hosts: ' , '\n", 1, 16, "allowed_hosts: no host name given"},
    {"limits: { max_uploads: 0 }\n", 1, 24, "limits.max_uploads: expected an integer"},
    {"admin_open: yes\n", 1, 13, "admin_open: expected true or false"},
    /* the worker's and the parser's ranges bound the settings passed on to them */
    {"models:\n- {name: a, path: /a, max_batch_tokens: 65537}\n", 2, 41,
     "models[0].max_batch_tokens: expected an integer in 1..65536"},
    {"models:\n- {name: a, path: /a, step_budget_ms: -2}\n", 2, 39,
     "models[0].step_budget_ms: expected an integer in -1..600000"},
    {"models:\n- {name: a, path: /a, threads: 257}\n", 2, 32, "models[0].threads: expected an integer in 1..256"},
    {"limits: {max_messages: 1025}\n", 1, 24, "limits.max_messages: expected an integer in 1..1024"},
    {"limits: {max_prompt_bytes: 4194305}\n", 1, 28, "limits.max_prompt_bytes: expected an integer in 1..4194304"},
    {"images: {max_images: 9}\n", 1, 22, "images.max_images: expected an integer in 1..8"},
    {"images: {max_bytes: 0}\n", 1, 21, "images.max_bytes: expected an integer in 1..20971520"},
    {"images: {max_pixels: 50000001}\n", 1, 22, "images.max_pixels: expected an integer in 1..50000000"},
    {"queue: {default_timeout_s: 0}\n", 1, 28, "queue.default_timeout_s: expected a number in 0.001..86400"},
    {"queue: {replica_grace_s: -1}\n", 1, 26, "queue.replica_grace_s: expected a number in 0.001..86400"},
    /* floats and booleans */
    {"queue:\n  aging_per_s: fast\n", 2, 16, "queue.aging_per_s: expected a number"},
    {"queue: {aging_per_s: .inf}\n", 1, 22, "queue.aging_per_s: expected a number"},
    {"queue: {aging_per_s: -0.5}\n", 1, 22, "queue.aging_per_s: expected a number in 0..1000"},
    {"curve:\n  allow_plain_tcp: yes\n", 2, 20, "curve.allow_plain_tcp: expected true or false, got 'yes'"},
    {"routing: {mode: random}\n", 1, 17, "routing.mode: expected cache-aware or least-loaded, got 'random'"},
    {"routing: {max_load_gap: 0}\n", 1, 25, "routing.max_load_gap: expected an integer in 1..65536"},
    {"routing: {index_entries: 67108865}\n", 1, 26, "routing.index_entries: expected an integer in 1..67108864"},
    /* strings */
    {"log_level: verbose\n", 1, 12, "log_level: expected debug, info, warn or error"},
    {"keys_file: \"/a\\nb\"\n", 1, 12, "keys_file: contains a control"},
    {"listen: localhost\n", 1, 9, "listen: expected HOST:PORT"},
    {"listen: 127.0.0.1:70000\n", 1, 9, "listen: port must be in 0..65535"},
    {"listen: ::1:8080\n", 1, 9, "brackets"},
    {"listen: ~\n", 1, 9, "listen: expected a string, got null"},
    {"worker_endpoint: http://x:1\n", 1, 18, "worker_endpoint: expected tcp://HOST:PORT or ipc://PATH"},
    {"worker_endpoint: tcp://127.0.0.1:0\n", 1, 18, "worker_endpoint: port must be in 1..65535"},
    /* models */
    {"models:\n  - path: /a\n", 2, 5, "models[0]: missing required key 'name'"},
    {"models:\n  - name: a\n  - name: b\n    path: /b\n", 2, 5, "models[0]: missing required key 'path'"},
    {"models:\n  - name: a\n    path: /a\n  - name: a\n    path: /b\n", 4, 11,
     "models[1].name: duplicate model name 'a' (first at line 2)"},
    {"models:\n  - name: -x\n    path: /a\n", 2, 11, "models[0].name: a model name starts with a letter or digit"},
    {"models:\n  - name: a b\n    path: /a\n", 2, 11, "models[0].name: a model name may only contain"},
    {"models:\n  - name: a\n    path: \"\"\n", 3, 11, "models[0].path: a path must not be empty"},
    {"models:\n  - name: ~\n    path: /a\n", 2, 11, "models[0].name: expected a string, got null"},
    {"models:\n  name: a\n", 2, 3, "models: expected a list of models"},
    {"models:\n  - a.gguf\n", 2, 5, "models[0]: expected a mapping"},
    {"models:\n", 1, 8, "models: expected a list of models"},
    /* structure */
    {"queue: 5\n", 1, 8, "queue: expected a mapping, got a scalar"},
    {"heartbeat_ms: [1, 2]\n", 1, 15, "heartbeat_ms: expected a single value, got a list"},
    {"listen: a:1\nlisten: b:2\n", 2, 1, "listen: duplicate key (first at line 1)"},
    {"- a\n- b\n", 1, 1, "the file must be a mapping"},
    {"? {a: 1}\n: 2\n", 1, 3, "expected a key, got a mapping"},
    {"listen: a:1\n---\nlisten: b:2\n", 2, 1, "only one YAML document is allowed"},
    {"listen: &l 127.0.0.1:1\nworker_endpoint: *l\n", 1, 9, "anchors (&name) are not supported"},
    {"heartbeat_ms: !!int 100\n", 1, 15, "tags (!name) are not supported"},
    /* YAML syntax */
    {"queue:\n\tmax_per_model: 1\n", 2, 1, "YAML syntax:"},
    {"queue: {max_per_model: 1\n", 2, 1, "YAML syntax:"},
    {"listen: \"unterminated\n", 2, 1, "YAML syntax:"},
    {"listen: 127.0.0.1:1\nheartbeat_ms: \xff\n", 2, 15, "YAML syntax:"},
    /* cross-field rules, at the key that breaks them */
    {"restart:\n  backoff_initial_ms: 1000\n  backoff_max_ms: 10\n", 3, 19,
     "restart.backoff_max_ms: must be >= restart.backoff_initial_ms (1000), is 10"},
    {"restart:\n  backoff_initial_ms: 40000\n", 2, 23, "restart.backoff_initial_ms:"},
    {"curve:\n  server_secret_key_file: /k\n", 2, 3, "must be set together"},
    {"worker_endpoint: tcp://0.0.0.0:5557\n", 1, 18, "worker_endpoint: a non-loopback tcp endpoint without CURVE"},
    {"models:\n  - name: a\n    path: /a\n    replicas: 0\n    on_demand: true\n", 5, 16,
     "models[0].on_demand: on_demand needs replicas >= 1"},
};

static void test_invalid_files(void **state)
{
    (void)state;
    size_t n_bad = sizeof BAD / sizeof BAD[0];
    assert_true(n_bad >= 25);
    int failures = 0;
    for (size_t i = 0; i < n_bad; i++) {
        config_t *c = (config_t *)&failures; /* must be reset to NULL */
        char err[512] = "";
        int rc = parse_str(BAD[i].yaml, &c, err, sizeof err);
        char want[64];
        if (BAD[i].line)
            snprintf(want, sizeof want, "config.yaml:%d:%d: ", BAD[i].line, BAD[i].col);
        else
            snprintf(want, sizeof want, "config.yaml: ");
        if (rc != -1 || c != NULL || strncmp(err, want, strlen(want)) != 0 ||
            !strstr(err, BAD[i].needle)) {
            print_error("case %zu: rc=%d\n  yaml: %s\n  got:  %s\n  want: %s...%s\n", i, rc,
                        BAD[i].yaml, err, want, BAD[i].needle);
            failures++;
            if (rc == 0)
                config_free(&c);
        }
    }
    assert_int_equal(failures, 0);
}

static void test_limits_and_truncation(void **state)
{
    (void)state;
    /* more than CONFIG_MAX_MODELS models: the first one past the limit is named */
    size_t cap = 64 * (CONFIG_MAX_MODELS + 2) + 16;
    char *y = malloc(cap);
    size_t n = (size_t)snprintf(y, cap, "models:\n");
    for (int i = 0; i <= CONFIG_MAX_MODELS; i++)
        n += (size_t)snprintf(y + n, cap - n, "  - {name: m%d, path: /m%d}\n", i, i);
    config_t *c = NULL;
    char err[512];
    assert_int_equal(parse_str(y, &c, err, sizeof err), -1);
    char want[64];
    snprintf(want, sizeof want, "config.yaml:%d:5: models[%d]: more than %d models",
             CONFIG_MAX_MODELS + 2, CONFIG_MAX_MODELS, CONFIG_MAX_MODELS);
    assert_string_equal(err, want);
    /* exactly CONFIG_MAX_MODELS is fine */
    char *last = strrchr(y, '-');
    *last = 0;
    c = parse_ok(y);
    assert_int_equal(c->n_models, CONFIG_MAX_MODELS);
    config_free(&c);
    free(y);

    /* a file over CONFIG_MAX_BYTES is refused before parsing */
    uint8_t *big = malloc(CONFIG_MAX_BYTES + 1);
    memset(big, '#', CONFIG_MAX_BYTES + 1);
    assert_int_equal(config_parse(big, CONFIG_MAX_BYTES + 1, "big.yaml", &c, err, sizeof err), -1);
    assert_non_null(strstr(err, "big.yaml: larger than"));
    free(big);

    /* a string over CONFIG_MAX_STRING bytes */
    char *longp = malloc(CONFIG_MAX_STRING + 64);
    n = (size_t)snprintf(longp, 64, "keys_file: /");
    memset(longp + n, 'a', CONFIG_MAX_STRING);
    longp[n + CONFIG_MAX_STRING] = 0;
    assert_int_equal(parse_str(longp, &c, err, sizeof err), -1);
    assert_non_null(strstr(err, "config.yaml:1:12: keys_file: longer than"));
    free(longp);

    /* a tiny error buffer gets a truncated, terminated message; NULL err is allowed */
    char small[12];
    memset(small, 'X', sizeof small);
    assert_int_equal(parse_str("listne: 1\n", &c, small, sizeof small), -1);
    assert_int_equal(small[sizeof small - 1], 0);
    assert_memory_equal(small, "config.yaml", 11);
    assert_int_equal(parse_str("listne: 1\n", &c, NULL, 0), -1);
    assert_null(c);
}

/* ---- flags -------------------------------------------------------------------- */

static void test_set_overrides(void **state)
{
    (void)state;
    config_t *c = parse_ok("listen: 127.0.0.1:8080\nkeys_file: /etc/k\nqueue: {aging_per_s: 0.2}\n");
    char err[256];
    assert_int_equal(config_set(c, "listen", "0.0.0.0:9000", err, sizeof err), 0);
    assert_string_equal(c->listen, "0.0.0.0:9000");
    assert_string_equal(c->listen_host, "0.0.0.0");
    assert_int_equal(c->listen_port, 9000);
    assert_int_equal(config_set(c, "queue.aging_per_s", "0.5", err, sizeof err), 0);
    assert_true(c->queue.aging_per_s == 0.5);
    assert_int_equal(config_set(c, "heartbeat_ms", "250", err, sizeof err), 0);
    assert_int_equal(c->heartbeat_ms, 250);
    assert_int_equal(config_set(c, "curve.allow_plain_tcp", "true", err, sizeof err), 0);
    assert_true(c->curve.allow_plain_tcp);
    assert_int_equal(config_set(c, "log_level", "warn", err, sizeof err), 0);
    assert_int_equal(c->log_level, LOG_WARN);
    assert_int_equal(config_set(c, "keys_file", "/other/keys", err, sizeof err), 0);
    assert_string_equal(c->keys_file, "/other/keys");
    assert_int_equal(config_set(c, "keys_file", "", err, sizeof err), 0);
    assert_null(c->keys_file);

    /* refusals leave the value alone and name the flag */
    static const struct {
        const char *key, *value, *needle;
    } bad[] = {
        {"heartbeat_ms", "abc", "--heartbeat_ms: expected an integer in 10..600000, got 'abc'"},
        {"heartbeat_ms", "", "--heartbeat_ms: expected an integer"},
        {"listen", "nohost", "--listen: expected HOST:PORT"},
        {"listen", "", "--listen: expected a string, got null"},
        {"nope", "1", "--nope: unknown configuration key"},
        {"queue.nope", "1", "--queue.nope: unknown configuration key"},
        {"queue", "1", "--queue: not a single value"},
        {"queue.max_per_model.x", "1", "--queue.max_per_model.x: not a single value"},
        {"models", "x", "(use --model NAME=PATH)"},
        {"limits.rate_per_key", "-1", "--limits.rate_per_key: expected a number"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        assert_int_equal(config_set(c, bad[i].key, bad[i].value, err, sizeof err), -1);
        if (!strstr(err, bad[i].needle))
            fail_msg("config_set(%s, %s): got '%s', want '%s'", bad[i].key, bad[i].value, err,
                     bad[i].needle);
    }
    assert_int_equal(c->heartbeat_ms, 250);
    assert_string_equal(c->listen, "0.0.0.0:9000");
    assert_int_equal(c->listen_port, 9000);
    assert_true(c->limits.rate_per_key == 0.0);
    config_free(&c);
}

static void test_model_flags(void **state)
{
    (void)state;
    config_t *c = parse_ok("models:\n  - {name: a, path: /a.gguf, max_seqs: 8, threads: 4}\n");
    char err[256];
    /* same name: only the path changes */
    assert_int_equal(config_model_set(c, "a=/new/a.gguf", err, sizeof err), 0);
    assert_int_equal(c->n_models, 1);
    assert_string_equal(c->models[0].path, "/new/a.gguf");
    assert_int_equal(c->models[0].max_seqs, 8);
    assert_int_equal(c->models[0].threads, 4);
    assert_int_equal(c->models[0].line, 2);
    /* new name: appended with defaults; '=' inside the path is kept */
    assert_int_equal(config_model_set(c, "b=/m/b=1.gguf", err, sizeof err), 0);
    assert_int_equal(c->n_models, 2);
    assert_string_equal(c->models[1].name, "b");
    assert_string_equal(c->models[1].path, "/m/b=1.gguf");
    assert_int_equal(c->models[1].line, 0);
    check_model_defaults(&c->models[1]);

    static const struct {
        const char *arg, *needle;
    } bad[] = {
        {"noequals", "--model: expected NAME=PATH"},
        {"=/x.gguf", "--model: a model name has 1..128 characters"},
        {"a b=/x", "--model: a model name may only contain"},
        {"c=", "--model c: a path must not be empty"},
        {"c=/a\tb", "--model c: contains a control"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        assert_int_equal(config_model_set(c, bad[i].arg, err, sizeof err), -1);
        if (!strstr(err, bad[i].needle))
            fail_msg("config_model_set(%s): got '%s', want '%s'", bad[i].arg, err, bad[i].needle);
    }
    assert_int_equal(c->n_models, 2);
    assert_int_equal(config_check(c, err, sizeof err), 0);

    /* --max-seqs etc.: one setting for every model, validated as in the file */
    assert_int_equal(config_models_set(c, NULL, "max_seqs", "3", err, sizeof err), 0);
    assert_int_equal(c->models[0].max_seqs, 3);
    assert_int_equal(c->models[1].max_seqs, 3);
    assert_int_equal(c->models[0].threads, 4); /* untouched */
    assert_int_equal(config_models_set(c, NULL, "threads", "0", err, sizeof err), -1);
    assert_non_null(strstr(err, "--models.threads: expected an integer in 1..256, got '0'"));
    assert_int_equal(c->models[0].threads, 4);
    assert_int_equal(config_models_set(c, NULL, "name", "x", err, sizeof err), -1);
    assert_non_null(strstr(err, "not a per-model setting"));
    assert_int_equal(config_models_set(c, NULL, "nope", "1", err, sizeof err), -1);
    /* --kv-type */
    assert_int_equal(config_models_set(c, NULL, "kv_type", "q8_0", err, sizeof err), 0);
    assert_int_equal(c->models[0].kv_type, CONFIG_KV_Q8_0);
    assert_string_equal(config_kv_type_name(c->models[0].kv_type), "q8_0");
    assert_int_equal(config_models_set(c, NULL, "kv_type", "f32", err, sizeof err), 0);
    assert_int_equal(c->models[0].kv_type, CONFIG_KV_F32);
    assert_int_equal(c->models[1].kv_type, CONFIG_KV_F32);
    assert_string_equal(config_kv_type_name(c->models[1].kv_type), "f32");
    assert_int_equal(config_models_set(c, NULL, "kv_type", "f8", err, sizeof err), -1);
    assert_non_null(strstr(err, "--models.kv_type: expected f16 or f32 or auto or q8_0, got 'f8'"));
    assert_int_equal(c->models[0].kv_type, CONFIG_KV_F32);
    /* one model by name (--on-demand NAME) */
    assert_int_equal(config_models_set(c, "b", "on_demand", "true", err, sizeof err), 0);
    assert_false(c->models[0].on_demand);
    assert_true(c->models[1].on_demand);
    /* --standby false: every model */
    assert_int_equal(config_models_set(c, NULL, "standby", "false", err, sizeof err), 0);
    assert_false(c->models[0].standby);
    assert_false(c->models[1].standby);
    assert_int_equal(config_models_set(c, NULL, "standby", "maybe", err, sizeof err), -1);
    assert_false(c->models[1].standby);
    assert_int_equal(config_models_set(c, "zz", "on_demand", "true", err, sizeof err), -1);
    assert_non_null(strstr(err, "no model called 'zz'"));
    config_free(&c);
    /* with no model a bad value still fails, a good one changes nothing */
    c = config_default();
    assert_int_equal(config_models_set(c, NULL, "kv_blocks", "-1", err, sizeof err), -1);
    assert_int_equal(config_models_set(c, NULL, "kv_blocks", "64", err, sizeof err), 0);
    assert_int_equal(c->n_models, 0);
    config_free(&c);
}

static void test_check_after_flags(void **state)
{
    (void)state;
    config_t *c = config_default();
    char err[512];
    assert_int_equal(config_check(c, err, sizeof err), 0);

    assert_int_equal(config_set(c, "worker_endpoint", "tcp://0.0.0.0:5557", err, sizeof err), 0);
    assert_int_equal(config_check(c, err, sizeof err), -1);
    assert_non_null(strstr(err, "config: worker_endpoint: a non-loopback tcp endpoint without CURVE"));
    assert_int_equal(config_set(c, "curve.allow_plain_tcp", "true", err, sizeof err), 0);
    assert_int_equal(config_check(c, err, sizeof err), 0);
    assert_int_equal(config_set(c, "curve.allow_plain_tcp", "false", err, sizeof err), 0);
    assert_int_equal(config_set(c, "curve.server_secret_key_file", "/s", err, sizeof err), 0);
    assert_int_equal(config_check(c, err, sizeof err), -1);
    assert_non_null(strstr(err, "must be set together"));
    assert_int_equal(config_set(c, "curve.authorized_worker_keys_file", "/a", err, sizeof err), 0);
    assert_int_equal(config_check(c, err, sizeof err), 0);

    assert_int_equal(config_set(c, "restart.backoff_max_ms", "100", err, sizeof err), 0);
    assert_int_equal(config_check(c, err, sizeof err), -1);
    assert_non_null(strstr(err, "config: restart.backoff_max_ms: must be >="));
    assert_int_equal(config_set(c, "restart.backoff_initial_ms", "100", err, sizeof err), 0);
    assert_int_equal(config_check(c, err, sizeof err), 0);
    config_free(&c);
}

/* ---- round trip, files ------------------------------------------------------------ */

static void test_format_round_trip(void **state)
{
    (void)state;
    config_t *c = parse_ok(FULL);
    size_t len = 0;
    char *text = config_format(c, &len);
    assert_int_equal(strlen(text), len);
    config_t *c2 = parse_ok(text);
    /* the same values, field by field for a sample, then the whole text */
    assert_string_equal(c2->listen, c->listen);
    assert_true(c2->queue.aging_per_s == c->queue.aging_per_s);
    assert_true(c2->limits.rate_per_key == c->limits.rate_per_key);
    assert_string_equal(c2->curve.server_secret_key_file, c->curve.server_secret_key_file);
    assert_int_equal(c2->n_models, 2);
    assert_string_equal(c2->models[1].path, "/models/with space.gguf");
    assert_int_equal(c2->models[0].kv_blocks, 4096);
    assert_int_equal(c2->models[0].kv_type, CONFIG_KV_F32);
    assert_int_equal(c2->models[1].kv_type, CONFIG_KV_AUTO);
    char *text2 = config_format(c2, NULL);
    assert_string_equal(text, text2);
    free(text);
    free(text2);
    config_free(&c2);

    /* awkward but legal strings and doubles survive too */
    assert_int_equal(config_set(c, "keys_file", "/we\"ird\\path/ключи", NULL, 0), 0);
    assert_int_equal(config_set(c, "queue.aging_per_s", "0.30000000000000004", NULL, 0), 0);
    assert_int_equal(config_set(c, "limits.rate_per_key", "1e-7", NULL, 0), 0);
    text = config_format(c, NULL);
    c2 = parse_ok(text);
    assert_string_equal(c2->keys_file, "/we\"ird\\path/ключи");
    assert_true(c2->queue.aging_per_s == 0.30000000000000004);
    assert_true(c2->limits.rate_per_key == 1e-7);
    free(text);
    config_free(&c2);
    config_free(&c);
}

static void test_load_files(void **state)
{
    (void)state;
    char path[] = "/tmp/pagoda-test-config-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *y = "listen: 127.0.0.1:1234\nmodels:\n  - name: a\n    path: /a\n    threads: 0\n";
    assert_int_equal(write(fd, y, strlen(y)), (ssize_t)strlen(y));
    close(fd);
    config_t *c = NULL;
    char err[512], want[128];
    assert_int_equal(config_load(path, &c, err, sizeof err), -1);
    assert_null(c);
    snprintf(want, sizeof want, "%s:5:14: models[0].threads: expected an integer in 1..256", path);
    assert_non_null(strstr(err, want));
    unlink(path);

    assert_int_equal(config_load("/nonexistent/pagoda.yaml", &c, err, sizeof err), -1);
    assert_non_null(strstr(err, "/nonexistent/pagoda.yaml: cannot open"));

    /* the shipped examples must stay valid */
    static const char *const shipped[] = {"deploy/pagoda.example.yaml", "deploy/k8s/pagoda.yaml"};
    for (size_t i = 0; i < 2; i++) {
        if (config_load(shipped[i], &c, err, sizeof err) != 0)
            fail_msg("%s", err);
        assert_true(c->n_models >= 1);
        assert_int_equal(config_check(c, err, sizeof err), 0);
        config_free(&c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_file),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_valid_edge_values),
        cmocka_unit_test(test_invalid_files),
        cmocka_unit_test(test_limits_and_truncation),
        cmocka_unit_test(test_set_overrides),
        cmocka_unit_test(test_model_flags),
        cmocka_unit_test(test_check_after_flags),
        cmocka_unit_test(test_format_round_trip),
        cmocka_unit_test(test_load_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
