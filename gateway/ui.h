/* ui.h — the web console: GET /ui/ serves static files compiled into the
 * gateway binary (docs/OPERATIONS.md "Web console").
 *
 * The files are kept as plain HTML, CSS and ES modules in gateway/ui/. ui.c
 * embeds each one with the assembler's `.incbin` (no generator, no build
 * step beyond the C build; the Makefile makes ui.o depend on the files)
 * and serves them from one fixed table: the URL path after "/ui/" must be
 * exactly a table name. No path is ever joined, decoded or looked up on a
 * file system, so nothing outside the table can be served ("/ui/../x",
 * "/ui/%2e%2e/x", "/ui/a/b" are simply not names in it).
 *
 *   GET /ui            308 → /ui/
 *   GET /ui/           index.html
 *   GET /ui/NAME       a file of the table, else NULL (the caller's 404)
 *
 * Every answer carries
 *   Content-Security-Policy   default-src 'none'; script-src 'self';
 *                             style-src 'self'; img-src 'self'; connect-src
 *                             'self'; base-uri 'none'; form-action 'none';
 *                             frame-ancestors 'none'
 *                             (no inline script or style, no eval, nothing
 *                             from another origin, never inside a frame)
 *   X-Content-Type-Options    nosniff
 *   X-Frame-Options           DENY (browsers without frame-ancestors)
 *   Referrer-Policy           no-referrer
 *   Cache-Control             no-cache, with an ETag (a hash of the bytes):
 *                             If-None-Match with it answers 304
 *
 * The page calls the gateway's own API (/v1/..., /health, /admin/...) with
 * fetch. Browsers send an Origin header with those POSTs, and the gateway
 * refuses any Origin it does not allow (http.h "Browser safety"); the
 * console's own origin is allowed by ui_origin_is_self while the console is
 * on (--no-ui restores the exact old behaviour).
 *
 * Ownership: ui_response returns a response the caller queues and destroys;
 * the file bytes are static (MHD_RESPMEM_PERSISTENT).
 */
#ifndef PAGODA_GATEWAY_UI_H
#define PAGODA_GATEWAY_UI_H

#include <stdbool.h>
#include <stddef.h>

struct MHD_Response;

/* The answer to GET /ui/NAME (`name` is what follows "/ui/", "" for the
 * index), or NULL when no console file has that name. *status is set to 200,
 * or 304 when `if_none_match` (the request's If-None-Match header, or NULL)
 * holds the file's ETag. */
struct MHD_Response *ui_response(const char *name, const char *if_none_match, unsigned *status);

/* The answer to GET /ui: a 308 redirect to /ui/ (NULL when out of memory). */
struct MHD_Response *ui_redirect(void);

/* True when `origin` (an Origin header) is the console's own origin as the
 * browser sees it: exactly "http://" + `host` (the Host header; case-
 * insensitive), where host is an IP address literal (IPv4 dotted quad or
 * [IPv6]) or "localhost", with an optional port. A DNS name never matches:
 * under DNS rebinding an attacker's name resolves to this gateway and his
 * page would be "same-origin" with it. A console served under a name (or
 * behind a TLS proxy) is allowed by listing its origin in cors_origins. */
bool ui_origin_is_self(const char *origin, const char *host);

/* The table, for tests: the name of file i = 0.. (NULL past the end), its
 * bytes and size (static; either pointer may be NULL). */
const char *ui_file_get(size_t i, const unsigned char **data, size_t *len);

#endif
