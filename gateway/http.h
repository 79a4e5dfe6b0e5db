/* http.h — the gateway's HTTP front end (libmicrohttpd).
 *
 * libmicrohttpd runs its own threads (a small pool, each polling its share
 * of connections). Handlers never touch ZeroMQ: they ask the gateway core
 * through gateway.h calls, which post commands to the core thread and wait
 * for its reply on a per-request channel.
 *
 * Routing is a static table (method, exact path, handler) in http.c. A path
 * not in the table answers 404, a known path with another method 405 (with an
 * Allow header); both, like every refusal, carry an OpenAI-shaped body:
 *   {"error": {"message": str, "type": str, "param": str|null, "code": str|null}}
 * HEAD is served wherever GET is. Request bodies are collected up to
 * max_body bytes (413 beyond) before the handler runs.
 *
 * Routes so far:
 *   GET /health   gateway_health() as JSON (200), or 503 when the core does
 *                 not answer within a second
 */
#ifndef PAGODA_GATEWAY_HTTP_H
#define PAGODA_GATEWAY_HTTP_H

#include <stddef.h>
#include <stdint.h>

struct gateway;

typedef struct http_config {
    const char *listen;       /* "HOST:PORT", "[IPv6]:PORT"; port 0 = any free port */
    size_t max_body;          /* request body limit in bytes, 0 = 16 MiB */
    unsigned n_threads;       /* libmicrohttpd thread pool, 0 = 2 */
} http_config_t;

typedef struct http_server http_server_t;

/* Starts listening and serving. `gw` is borrowed and must outlive the
 * server. Returns NULL (logged) when the address is bad or cannot be bound. */
http_server_t *http_server_new(const http_config_t *cfg, struct gateway *gw);

/* Stops accepting, finishes/aborts connections, frees; NULLs *s. */
void http_server_free(http_server_t **s);

/* The bound TCP port (useful when listening on port 0). */
uint16_t http_server_port(const http_server_t *s);

/* Splits "HOST:PORT" / "[V6]:PORT" into host (without brackets) and port.
 * Returns 0, or -1 when malformed or the host does not fit host_len. */
int http_parse_hostport(const char *s, char *host, size_t host_len, uint16_t *port);

#endif
