/* image_fetch.h — remote http(s) image URLs, fetched for the gateway from
 * an operator's allow list (gateway config images.url_allow, flag
 * --image-url-allow; timeout images.url_timeout_ms, --image-url-timeout-ms;
 * size limit images.max_bytes, --image-max-bytes).
 *
 * A server that fetches the URLs its clients name is a server-side request
 * forgery hole: it would reach hosts only it can reach (the cloud metadata
 * address, an admin port on localhost, the office network). So:
 *
 *   - The default allow list is empty: every http(s) URL is refused (400)
 *     without a connection.
 *   - An entry is HOST or HOST:PORT, HOST a DNS name, an IPv4 literal or a
 *     bracketed IPv6 literal, or "*.SUFFIX" (any name ending in ".SUFFIX",
 *     not SUFFIX itself). Names compare case-insensitively, a trailing dot
 *     dropped. Without a port any port matches.
 *   - A URL is parsed by libcurl's own URL parser (the one that then
 *     connects, so the check and the connection can never read the host
 *     differently) and refused when it has a user name or password, a
 *     host with '%' (percent-encoding, an IPv6 zone), a scheme other than
 *     http/https, or a host the list does not hold.
 *   - DNS rebinding: the list holds names, and a name can resolve to
 *     anything. Every address libcurl is about to connect to is checked
 *     (its socket-open hook, after resolving: the address actually used): a
 *     loopback, private, link-local, carrier-grade NAT, multicast or
 *     unspecified address (and the IPv4-mapped forms) is refused unless the
 *     matching entry is that address written literally (127.0.0.1:8000 lets
 *     through exactly that). A DNS name that resolves to such an address is
 *     refused.
 *   - Redirects are followed by hand, at most IMAGE_FETCH_MAX_REDIRECTS,
 *     each target checked again as above (a redirect to a host off the list
 *     is refused without connecting to it).
 *   - No proxy: the environment's http_proxy / HTTPS_PROXY are ignored.
 *   - Limits: the whole fetch (every hop) within timeout_ms, connecting
 *     within it too; the body at most max_bytes (refused at once when the
 *     Content-Length says more, else when the bytes pass it); no
 *     Content-Encoding is asked for (no decompression bomb). The status must
 *     be 200. The Content-Type is ignored: the bytes go through the same
 *     magic check and decoder as a data: URL (gateway/request_image.h).
 *
 * Threads: fetches run on the fetcher's own threads (n_threads), never on
 * libmicrohttpd's: a job holds one request's URLs, fetched in order; the
 * caller parks its connection (image_fetch_job_park) and the job's wake hook
 * resumes it once every URL is done. Jobs beyond the queue's bound are
 * refused (image_fetch_submit returns NULL: 503).
 *
 * Metrics (when a registry is given):
 *   pagoda_image_url_fetches_total{result}   one per URL: ok, refused (the
 *       allow list or the address check), timeout, too_large, http_status,
 *       connect, error
 *   pagoda_image_url_bytes_total             body bytes received (every URL)
 */
#ifndef PAGODA_GATEWAY_IMAGE_FETCH_H
#define PAGODA_GATEWAY_IMAGE_FETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gateway/metrics.h"

#define IMAGE_FETCH_MAX_REDIRECTS 3
#define IMAGE_FETCH_DEFAULT_TIMEOUT_MS 10000
#define IMAGE_FETCH_THREADS 4
#define IMAGE_FETCH_MAX_QUEUE 64   /* jobs waiting for a thread */
#define IMAGE_FETCH_MAX_ENTRIES 256

/* ---- the allow list (pure: no network) ---------------------------------- */

typedef struct image_url_allow image_url_allow_t;

/* Parses "ENTRY[,ENTRY...]" (commas and/or spaces). NULL or "" gives an
 * empty list. Returns the list (free with image_url_allow_free), or NULL
 * with the reason in why[n]. */
image_url_allow_t *image_url_allow_parse(const char *list, char *why, size_t n);
void image_url_allow_free(image_url_allow_t **a);
size_t image_url_allow_count(const image_url_allow_t *a);

/* A URL as checked: host lower-case without a trailing dot (IPv6 without
 * brackets), the port (the scheme's default when absent). */
typedef struct image_url {
    bool https;
    char host[256];
    uint16_t port;
    bool literal;         /* the entry it matched names this address literally */
} image_url_t;

typedef enum {
    IMAGE_URL_OK = 0,
    IMAGE_URL_E_SYNTAX,   /* not a URL libcurl parses, or longer than 4096 bytes */
    IMAGE_URL_E_SCHEME,   /* not http/https */
    IMAGE_URL_E_USERINFO, /* user name or password in the URL */
    IMAGE_URL_E_HOST,     /* '%' or another character a host name does not hold */
    IMAGE_URL_E_DISABLED, /* the allow list is empty */
    IMAGE_URL_E_DENIED,   /* the host (and port) is not on the list */
} image_url_status_t;

/* Checks url[0..len) against a (NULL = empty list); on IMAGE_URL_OK fills
 * *out. why[n] gets a sentence for the client on any other status. */
image_url_status_t image_url_check(const image_url_allow_t *a, const char *url, size_t len, image_url_t *out,
                                   char *why, size_t n);

/* Is this address (AF_INET / AF_INET6 sockaddr) one a name on the list may
 * not lead to (loopback, private, link-local, ...; see above)? */
struct sockaddr;
bool image_url_addr_internal(const struct sockaddr *sa);

/* ---- the fetcher --------------------------------------------------------- */

typedef struct image_fetch image_fetch_t;
typedef struct image_fetch_job image_fetch_job_t;

typedef struct image_fetch_config {
    const char *allow;     /* the list as image_url_allow_parse takes it; NULL = none */
    int64_t timeout_ms;    /* the whole fetch of one URL, 0 = IMAGE_FETCH_DEFAULT_TIMEOUT_MS */
    size_t max_bytes;      /* body bytes of one URL, > 0 */
    unsigned n_threads;    /* 0 = IMAGE_FETCH_THREADS */
    metrics_t *metrics;    /* registers the families above; NULL = none */
} image_fetch_config_t;

/* Starts the threads (none when the list is empty). NULL with why on a bad
 * list. */
image_fetch_t *image_fetch_new(const image_fetch_config_t *cfg, char *why, size_t n);
/* Aborts the fetches under way (they end with "the server is stopping"),
 * finishes every queued job the same way (waking its owner), joins the
 * threads; NULLs *f. NULL-safe. */
void image_fetch_free(image_fetch_t **f);
/* The fetcher's list (for image_url_check before submitting). */
const image_url_allow_t *image_fetch_allow(const image_fetch_t *f);
/* Counts a URL the list refused before any job (result "refused"). */
void image_fetch_note_refused(image_fetch_t *f);

/* Queues a job for urls[0..n) (copied; each already passed
 * image_url_check). wake(ctx) is called once, on a fetch thread and under
 * the job's lock, when the job is done and the owner parked. Returns the
 * job (the caller holds a reference: image_fetch_job_release), or NULL
 * when the queue is full or the fetcher is stopping. */
image_fetch_job_t *image_fetch_submit(image_fetch_t *f, const char *const *urls, const size_t *lens, size_t n,
                                      void (*wake)(void *ctx), void *ctx);

/* True when the job is done. Otherwise calls park(ctx) under the job's lock
 * (so wake cannot run between the test and park) and returns false: wake
 * will follow. */
bool image_fetch_job_park(image_fetch_job_t *j, void (*park)(void *ctx), void *ctx);

/* After the job is done: URL i's body (ownership passes to the caller:
 * free it) and length, or NULL with the reason (for the client, valid
 * until release) in *why. */
uint8_t *image_fetch_job_take(image_fetch_job_t *j, size_t i, size_t *len, const char **why);

/* Drops the owner's reference; wake will not be called after this returns.
 * NULLs *j. NULL-safe. */
void image_fetch_job_release(image_fetch_job_t **j);

#endif
