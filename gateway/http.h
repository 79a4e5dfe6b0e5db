/* http.h — the gateway's HTTP front end (libmicrohttpd).
 *
 * libmicrohttpd runs a small thread pool, each thread polling its share of
 * connections (epoll). Handlers never touch ZeroMQ: they talk to the core
 * through gateway.h. A generation request never blocks a pool thread: after
 * gateway_submit() the connection is *suspended*; the core's notify hook
 * resumes it when a reply is queued, and the handler (or, once an SSE stream
 * has started, the response's content reader) takes the replies and
 * suspends again when there are none. Hundreds of streams therefore share
 * the pool's few threads.
 *
 * libmicrohttpd does not watch suspended connections, so a client that hangs
 * up while its request waits in a queue or for the next token would go
 * unnoticed. A watcher thread polls the sockets of connections with a
 * request in flight for POLLRDHUP/POLLHUP (every HTTP_WATCH_MS); a hang-up
 * marks the request gone and resumes it, the handler closes the connection,
 * and the completion callback sends gateway_cancel() — whether the request
 * was queued, prefilling or decoding.
 *
 * Routing is a static table (method, exact path, handler) in http.c; a
 * generation route names its API surface instead of a handler
 * (gateway/api_surface.h: the API's request parser and response renderer,
 * OpenAI's in gateway/oai_stream.c), and every refusal on that route comes in
 * the surface's error shape. A path
 * not in the table answers 404, a known path with another method 405 (with an
 * Allow header); both, like every refusal, carry an OpenAI-shaped body:
 *   {"error": {"message": str, "type": str, "param": str|null, "code": str|null}}
 * HEAD is served wherever GET is. Request bodies are collected up to
 * max_body bytes (413 beyond) before the handler runs.
 *
 * Browser safety, before any route runs (docs/API.md "Browsers"):
 *   - a request carrying an Origin header that is not in cors_origins gets
 *     403 (permission_error, code origin_not_allowed): a web page cannot
 *     drive a server on the visitor's machine, whatever the route — the
 *     "simple requests" a page may send cross-origin without a preflight
 *     (bodyless POST, text/plain bodies) included. The console's own origin
 *     (http://HOST, HOST an IP literal or localhost: ui_origin_is_self) is
 *     allowed too while the console is served;
 *   - a request with a body whose Content-Type is not application/json
 *     (parameters allowed; a charset other than UTF-8 is not) gets 415;
 *   - OPTIONS with an allowed Origin is a CORS preflight: 204 with the
 *     Access-Control-Allow-* headers; every answer to an allowed Origin
 *     carries Access-Control-Allow-Origin (the origin itself) and Vary.
 *
 * Routes (auth: "key" = a valid key when a keys file is loaded, sent as
 * "Authorization: Bearer KEY" or "x-api-key: KEY"):
 *   GET  /health                       no auth; 200 when a worker is registered, else 503
 *   GET  /metrics                      no auth; Prometheus text format
 *   GET  /v1/models                    key
 *   POST /v1/chat/completions          key; tier from the key (normal without keys)
 *   POST /v1/completions               key
 *   POST /v1/batch/chat/completions    key; always tier low
 *   POST /v1/batch/completions         key; always tier low
 *   POST /tokenize, POST /detokenize   key; the worker's tokenizer (oai_parse_tokenizer)
 *   POST /v1/messages[/count_tokens]   key; Anthropic Messages API (gateway/anthropic.h)
 *   POST /v1/responses                 key; OpenAI Responses API (gateway/responses.h)
 *   GET|DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items
 *                                      key; stored responses of that key only
 *   POST /admin/reload-keys            admin key; same as SIGHUP
 *   GET  /admin/workers                ops: admin key with a keys file; without one
 *                                      403 unless admin_open (then open)
 *   POST /admin/workers/{id}/drain     ops; id = replica id or pid
 *   POST /admin/workers/{id}/restart   ops
 *   POST /admin/models/{name}/restart  ops
 *   POST /admin/models/{name}/start    ops; an on-demand model's workers start now
 *   POST /admin/models/{name}/stop     ops; an on-demand model goes idle now
 *   GET  /ui, /ui/, /ui/{file}         no auth; the web console (ui.h), absent with no_ui
 * docs/API.md describes bodies, streams and errors.
 */
#ifndef PAGODA_GATEWAY_HTTP_H
#define PAGODA_GATEWAY_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct gateway;

#define HTTP_WATCH_MS 100   /* hang-up watcher period */

typedef struct http_config {
    const char *listen;       /* "HOST:PORT", "[IPv6]:PORT"; port 0 = any free port */
    size_t max_body;          /* request body limit in bytes, 0 = 16 MiB */
    unsigned n_threads;       /* libmicrohttpd thread pool, 0 = 2 */
    const char *keys_path;    /* keys file (keys.h format), NULL = open gateway */
    size_t max_messages;      /* chat messages per request (400 beyond), 0 = parser's limit */
    size_t max_prompt_bytes;  /* prompt / message text bytes (400 beyond), 0 = parser's limit */
    double rate_per_key;      /* per-key rate limit, requests/s (token bucket holding one
                                 second of requests, at least 1); 429 + Retry-After beyond;
                                 0 = off. Needs a keys file: keys are the identity. */
    unsigned idle_timeout_s;  /* close a connection idle this long, 0 = HTTP_DEFAULT_IDLE_TIMEOUT_S */
    int64_t header_timeout_ms;/* close a connection whose request headers are not complete
                                 this long after it opened (slowloris), 0 = default */
    const char *cors_origins; /* browser origins allowed, "A,B" or "A B" (each "*" = any, or
                                 http[s]://HOST[:PORT]); NULL = none. Copied. */
    bool admin_open;          /* without keys_path: ops routes (/admin/...) open to anyone;
                                 false = 403 */
    int reasoning_parser;     /* reasoning_parser_t (gateway/reasoning.h): REASONING_QWEN3
                                 splits <think>...</think> off chat answers into
                                 reasoning_content; 0 = none */
    bool keep_volatile_blocks; /* surfaces keep agents' volatile prompt blocks
                                  (gateway/volatile_block.h); false = dropped */
    struct resp_store *responses; /* stored Responses API responses (gateway/resp_store.h),
                                 borrowed, must outlive the server; NULL = none (POST
                                 /v1/responses then stores nothing, GET/DELETE answer 503) */
    bool no_ui;               /* do not serve the web console (GET /ui/, ui.h); false = served,
                                 and its own origin may call the API (ui_origin_is_self) */
} http_config_t;

#define HTTP_DEFAULT_IDLE_TIMEOUT_S 30
#define HTTP_DEFAULT_HEADER_TIMEOUT_S 10

typedef struct http_server http_server_t;

/* Starts listening and serving. `gw` is borrowed and must outlive the
 * server. Returns NULL (logged) when the address is bad or cannot be bound,
 * or the keys file does not load. */
http_server_t *http_server_new(const http_config_t *cfg, struct gateway *gw);

/* Ends requests in flight (their connections are closed), stops accepting,
 * frees; NULLs *s. */
void http_server_free(http_server_t **s);

/* Generation requests whose connection is still open (their last bytes may
 * not be sent yet even when the core is done with them). Any thread. */
size_t http_server_active(http_server_t *s);

/* The bound TCP port (useful when listening on port 0). */
uint16_t http_server_port(const http_server_t *s);

/* Reloads the keys file given at start (SIGHUP, POST /admin/reload-keys).
 * Returns 0, or -1 with the old table kept (the error is logged and, when
 * err is not NULL, written there). Without a keys file: -1. */
int http_server_reload_keys(http_server_t *s, char *err, size_t err_len);

/* Splits "HOST:PORT" / "[V6]:PORT" into host (without brackets) and port.
 * Returns 0, or -1 when malformed or the host does not fit host_len. */
int http_parse_hostport(const char *s, char *host, size_t host_len, uint16_t *port);

#endif
