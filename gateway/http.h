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
 * Routing is a static table (method, exact path, handler) in http_routes.c; a
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
 * The headers decide (docs/SECURITY.md "The HTTP edge"): libmicrohttpd calls
 * the access handler once with the headers before it reads any body byte,
 * and everything that needs no body is checked there, in this order —
 *   path hygiene   a percent-encoded (or raw) control byte %00-%1f, %7f in
 *                  the path: 400 (code invalid_path), before routing (the
 *                  decoded path would be cut at a NUL); a path longer than
 *                  HTTP_MAX_URL (http_guard.h): 414 (code uri_too_long). The raw path comes
 *                  from libmicrohttpd's URI log callback;
 *   Host           see allowed_hosts below: 421 (code host_not_allowed);
 *   Origin         see "Browser safety" below: 403;
 *   route, method  404, 405, or the CORS preflight;
 *   key            401/403/429 (authorize);
 *   body size      a declared Content-Length over the route's limit: 413 —
 *                  max_body on a surface route; on the other routes
 *                  HTTP_SMALL_BODY (read and ignored) when the request
 *                  carries a valid key, none at all otherwise (/health,
 *                  /ui, anything on a gateway without keys), so a client
 *                  without a key cannot make the gateway read a single body
 *                  byte with keys on;
 *   Content-Type   a declared body that is not JSON: 415;
 *   upload slot    see max_uploads below: 429 (per address) / 503 (all).
 * A refusal of a request that declares a body (Content-Length > 0 or
 * chunked) is sent at once and the connection is closed after it: the body
 * is never read. A bodyless request's refusal waits for libmicrohttpd's next
 * call (at once: there is nothing to read), which keeps the connection alive.
 *
 * Then the body: it must be complete body_timeout_ms after the headers
 * (total, whatever the pace), and arrive at body_min_rate bytes/s or more
 * over each window of body_rate_window_ms (the first window is the grace
 * period). The watcher thread shuts down a connection that misses either;
 * libmicrohttpd 0.9.75 cannot queue an answer while a body is being read,
 * so the client sees the connection close, not a 408. A body that is still
 * arriving holds an upload slot: at most max_uploads at once, at most
 * max_uploads_per_ip from one client address (an IPv6 client by its /64).
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

#include "gateway/request_image.h"

struct gateway;

#define HTTP_WATCH_MS 100   /* hang-up watcher period */

typedef struct http_config {
    const char *listen;       /* "HOST:PORT", "[IPv6]:PORT"; port 0 = any free port */
    size_t max_body;          /* request body limit in bytes, 0 = 16 MiB */
    unsigned n_threads;       /* libmicrohttpd thread pool, 0 = 2 */
    const char *keys_path;    /* keys file (keys.h format), NULL = open gateway */
    size_t max_messages;      /* chat messages per request (400 beyond), 0 = parser's limit */
    size_t max_prompt_bytes;  /* prompt / message text bytes (400 beyond), 0 = parser's limit */
    request_image_limits_t image_limits; /* images per request and per image (400 beyond);
                                 each 0 = the decoder's default (gateway/request_image.h) */
    const char *image_url_allow; /* hosts remote image URLs may name (gateway/image_fetch.h);
                                 NULL = none: every http(s) image URL gets 400 */
    int64_t image_url_timeout_ms; /* one URL's whole fetch, 0 = IMAGE_FETCH_DEFAULT_TIMEOUT_MS */
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
    const char *allowed_hosts;/* Host header names accepted besides IP literals and localhost,
                                 "A,B" or "A B": a name ("pagoda.example", compared
                                 case-insensitively, any port), "*.SUFFIX" (any name ending in
                                 .SUFFIX) or "*" (any Host: the check is off). The listen
                                 host is always accepted. NULL = none. Copied. */
    int64_t body_timeout_ms;  /* a request body must be complete this long after its headers,
                                 0 = HTTP_DEFAULT_BODY_TIMEOUT_S */
    uint64_t body_min_rate;   /* bytes/s a body must average over each rate window,
                                 0 = off (only the total deadline applies) */
    int64_t body_rate_window_ms; /* that window, the first one being the grace period;
                                 0 = HTTP_DEFAULT_BODY_RATE_WINDOW_S */
    unsigned max_uploads;     /* requests whose body is still arriving, at most, all clients
                                 together (503 beyond); 0 = HTTP_DEFAULT_MAX_UPLOADS */
    unsigned max_uploads_per_ip; /* the same from one client address (an IPv6 address by its
                                 /64) (429 beyond); 0 = HTTP_DEFAULT_MAX_UPLOADS_PER_IP */
} http_config_t;

#define HTTP_DEFAULT_IDLE_TIMEOUT_S 30
#define HTTP_DEFAULT_HEADER_TIMEOUT_S 10
/* Body defaults, chosen so that no real client is hurt (docs/OPERATIONS.md "The HTTP
 * edge"): 60 s carries a 1 MiB body at 140 kbit/s and the whole 16 MiB at 2.3 Mbit/s;
 * 1 KiB/s is below any working link (GPRS does ~4 KiB/s), and a 10 s window outlasts
 * TCP's retransmission backoff for three lost segments in a row (1 + 2 + 4 s). */
#define HTTP_DEFAULT_BODY_TIMEOUT_S 60
#define HTTP_DEFAULT_BODY_MIN_RATE 1024
#define HTTP_DEFAULT_BODY_RATE_WINDOW_S 10
#define HTTP_DEFAULT_MAX_UPLOADS 256
#define HTTP_DEFAULT_MAX_UPLOADS_PER_IP 32
/* libmicrohttpd's per-connection memory (request line, headers, read buffer): 64 KiB
 * so a request line of up to ~60 KB reaches the handler, which answers 414 in JSON;
 * a longer one gets libmicrohttpd's own 414 (an HTML body), which cannot be replaced. */
#define HTTP_CONN_MEMORY (64u << 10)

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

/* http_server_reload_keys (SIGHUP, POST /admin/reload-keys) and the Host
 * check are declared in http_guard.h, the file that does what the headers
 * decide. */

/* Splits "HOST:PORT" / "[V6]:PORT" into host (without brackets) and port.
 * Returns 0, or -1 when malformed or the host does not fit host_len. */
int http_parse_hostport(const char *s, char *host, size_t host_len, uint16_t *port);

#endif
